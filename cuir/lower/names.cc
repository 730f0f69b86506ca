#include "cuir/lower/names.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace cubridge::lower {
namespace {

// C++ keywords, and the names generated code calls or that <math.h> / <limits.h> define as macros
// (a constant named like a macro would be rewritten by the preprocessor).
constexpr const char* kReserved[] = {
    "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break",
    "case", "catch", "char", "char8_t", "char16_t", "char32_t", "class", "compl", "concept",
    "const", "consteval", "constexpr", "constinit", "const_cast", "continue", "co_await",
    "co_return", "co_yield", "decltype", "default", "delete", "do", "double", "dynamic_cast",
    "else", "enum", "explicit", "export", "extern", "false", "float", "for", "friend", "goto",
    "if", "inline", "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq",
    "nullptr", "operator", "or", "or_eq", "private", "protected", "public", "register",
    "reinterpret_cast", "requires", "return", "short", "signed", "sizeof", "static",
    "static_assert", "static_cast", "struct", "switch", "template", "this", "thread_local",
    "throw", "true", "try", "typedef", "typeid", "typename", "union", "unsigned", "using",
    "virtual", "void", "volatile", "wchar_t", "while", "xor", "xor_eq", "main", "std",
    // calls and macros generated code relies on
    "abs", "llabs", "fabsf", "expf", "exp2f", "logf", "log2f", "sqrtf", "tanhf", "floorf",
    "powf", "fmodf", "fminf", "fmaxf", "isnan", "isinf", "isfinite", "signbit", "INFINITY",
    "NAN", "HUGE_VAL", "HUGE_VALF", "INT_MAX", "INT_MIN", "LLONG_MAX", "LLONG_MIN", "NULL",
    "assert", "errno", "min", "max", "__ldg", "__syncthreads", "__syncthreads_or",
    "__syncthreads_and", "threadIdx", "blockIdx", "blockDim", "gridDim", "dim3",
    "cudaStream_t", "cudaError_t", "cudaSuccess", "cudaErrorInvalidValue", "size_t",
    "int32_t", "int64_t", "cuir_floordiv", "cuir_mod", "cuir_floordiv_f", "cuir_mod_f",
    "cuir_cdiv", "cuir_min", "cuir_max", "cuir_min_f", "cuir_max_f", "cuir_ipow",
    "cuir_sigmoid", "cuir_exp", "cuir_log", "cuir_log2", "cuir_log10", "cuir_sin", "cuir_cos",
    "cuir_sqrt", "cuir_div_f", "cuir_divisor", "cuir_divisor_of", "cuir_udiv_by",
    "cuir_floordiv_by", "cuir_mod_by", "cuir_divisible", "cuir_inverse_mod_2_32", "cuir_twos_of", "q_idx", "kv_idx", "score",
    // row / column slots and their counts, which generated lambdas and arrays use: a program
    // symbol spelled so would be shadowed there
    "mt", "r", "j", "k", "MT", "NT",
    // what a block-table walk (kv_loop) and the bindings (variant_bind) define for the expert
    "n_next", "block_full", "variant_table",
};

bool IdentStart(char c) { return absl::ascii_isalpha(c) || c == '_'; }
bool IdentChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

}  // namespace

std::set<std::string> CodeIdentifiers(absl::string_view code) {
  std::set<std::string> out;
  size_t i = 0;
  while (i < code.size()) {
    const char c = code[i];
    if (code.substr(i, 2) == "//") {
      i = code.find('\n', i);
      if (i == absl::string_view::npos) break;
    } else if (code.substr(i, 2) == "/*") {
      i = code.find("*/", i + 2);
      if (i == absl::string_view::npos) break;
      i += 2;
    } else if (c == '"' || c == '\'') {
      for (++i; i < code.size() && code[i] != c; ++i) {
        if (code[i] == '\\') ++i;
      }
      ++i;
    } else if (IdentStart(c)) {
      const size_t start = i;
      while (i < code.size() && IdentChar(code[i])) ++i;
      out.emplace(code.substr(start, i - start));
    } else if (absl::ascii_isdigit(c)) {
      while (i < code.size() && (IdentChar(code[i]) || code[i] == '.')) ++i;  // 1.5e3f, 0x1F
    } else {
      ++i;
    }
  }
  return out;
}

Namer::Namer(std::set<std::string> taken) : taken_(std::move(taken)) {
  for (const char* r : kReserved) taken_.insert(r);
}

std::string Namer::Fresh(const std::string& want) {
  // Identifiers with `__` anywhere or starting with `_` + capital belong to the implementation:
  // collapse underscore runs and prefix a leading underscore (`__x` -> `v_x`).
  std::string base;
  for (char c : want) {
    if (c == '_' && !base.empty() && base.back() == '_') continue;
    base.push_back(c);
  }
  if (!base.empty() && base[0] == '_') base.insert(0, "v");
  std::string name = base;
  for (int n = 2; taken_.count(name) > 0; ++n) name = absl::StrCat(base, "_", n);
  taken_.insert(name);
  return name;
}

}  // namespace cubridge::lower
