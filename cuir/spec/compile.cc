// From spec file text to a TorchScript CompilationUnit: imports, parsing, the checks that give
// better messages than TorchScript would, and compilation with a resolver for torch.* / math.*.
#include <cmath>
#include <numbers>
#include <set>

#include <c10/util/Optional.h>
#include <torch/csrc/jit/api/compilation_unit.h>
#include <torch/csrc/jit/frontend/lexer.h>
#include <torch/csrc/jit/frontend/parser.h>
#include <torch/csrc/jit/frontend/resolver.h>
#include <torch/csrc/jit/frontend/sugared_value.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cuir/spec/internal.h"

namespace cubridge::spec::internal {
namespace {

using torch::jit::Def;
using torch::jit::TreeRef;

bool IsImportLine(const std::string& line) {
  const absl::string_view s = absl::StripLeadingAsciiWhitespace(line);
  return absl::StartsWith(s, "import ") ||
         (absl::StartsWith(s, "from ") && absl::StrContains(s, " import "));
}

// `torch.float32` and friends: TorchScript's C++ frontend has no Python to ask, so dtypes are
// constants here; every other attribute is an aten builtin, as in NativeResolver.
struct TorchModule : torch::jit::BuiltinModule {
  TorchModule() : BuiltinModule("aten") {}
  std::shared_ptr<torch::jit::SugaredValue> attr(const torch::jit::SourceRange& loc,
                                                 torch::jit::GraphFunction& m,
                                                 const std::string& field) override {
    static const std::map<std::string, c10::ScalarType> kDtypes = {
        {"bool", c10::kBool},       {"uint8", c10::kByte},     {"int8", c10::kChar},
        {"int16", c10::kShort},     {"short", c10::kShort},    {"int32", c10::kInt},
        {"int", c10::kInt},         {"int64", c10::kLong},     {"long", c10::kLong},
        {"float16", c10::kHalf},    {"half", c10::kHalf},      {"bfloat16", c10::kBFloat16},
        {"float32", c10::kFloat},   {"float", c10::kFloat},    {"float64", c10::kDouble},
        {"double", c10::kDouble}};
    if (auto it = kDtypes.find(field); it != kDtypes.end()) {
      return std::make_shared<torch::jit::SimpleValue>(m.graph()->insertConstant(it->second, loc));
    }
    return BuiltinModule::attr(loc, m, field);
  }
};

struct MathModule : torch::jit::BuiltinModule {
  MathModule() : BuiltinModule("aten") {}
  std::shared_ptr<torch::jit::SugaredValue> attr(const torch::jit::SourceRange& loc,
                                                 torch::jit::GraphFunction& m,
                                                 const std::string& field) override {
    static const std::map<std::string, double> kConstants = {
        {"pi", std::numbers::pi}, {"e", std::numbers::e}, {"tau", 2 * std::numbers::pi},
        {"inf", INFINITY}};
    if (auto it = kConstants.find(field); it != kConstants.end()) {
      return std::make_shared<torch::jit::SimpleValue>(m.graph()->insertConstant(it->second, loc));
    }
    return BuiltinModule::attr(loc, m, field);
  }
};

struct SpecResolver : torch::jit::Resolver {
  std::shared_ptr<torch::jit::SugaredValue> resolveValue(const std::string& name,
                                                         torch::jit::GraphFunction& m,
                                                         const torch::jit::SourceRange& loc) override {
    if (name == "torch") return std::make_shared<TorchModule>();
    if (name == "math") return std::make_shared<MathModule>();
    return nullptr;
  }
};

// The Python constructs a spec cannot use, with what to write instead.
const char* ForbiddenConstruct(int kind) {
  switch (kind) {
    case torch::jit::TK_IF:
    case torch::jit::TK_IF_EXPR:
    case torch::jit::TK_WHILE:
    case torch::jit::TK_FOR:
    case torch::jit::TK_LIST_COMP:
    case torch::jit::TK_DICT_COMP:
      return "control flow (`if`, loops) is not supported: use torch.where(cond, a, b) instead of "
             "if";
    case torch::jit::TK_AND:
    case torch::jit::TK_OR:
    case torch::jit::TK_NOT:
      return "Python's `and` / `or` / `not` do not work on tensors: combine masks with & | ~, "
             "e.g. (q_idx >= kv_idx) & (doc[q_idx] == doc[kv_idx])";
    default:
      return nullptr;
  }
}

// The type a literal default value gives an unannotated parameter (`window=256` -> int).
std::optional<std::string> LiteralType(const TreeRef& e) {
  switch (e->kind()) {
    case torch::jit::TK_TRUE:
    case torch::jit::TK_FALSE:
      return "bool";
    case torch::jit::TK_CONST:
      return torch::jit::Const(e).isFloatingPoint() ? "float" : "int";
    case torch::jit::TK_UNARY_MINUS:
      return LiteralType(e->trees()[0]);
    default:
      return std::nullopt;
  }
}

// An int literal as the float literal TorchScript wants for a float parameter's default
// (`cap: float = 20`); nullopt when `e` is not an int literal.
std::optional<torch::jit::Expr> AsFloatLiteral(const torch::jit::Expr& e) {
  if (e.kind() == torch::jit::TK_UNARY_MINUS) {
    auto inner = AsFloatLiteral(torch::jit::Expr(e.tree()->trees()[0]));
    if (!inner) return std::nullopt;
    return torch::jit::UnaryOp::create(e.range(), torch::jit::TK_UNARY_MINUS, *inner);
  }
  if (e.kind() != torch::jit::TK_CONST) return std::nullopt;
  const std::string& digits = e.tree()->trees()[0]->stringValue();  // "-3" when folded
  const size_t first = !digits.empty() && digits[0] == '-' ? 1 : 0;
  if (digits.size() == first || digits.find_first_not_of("0123456789", first) != std::string::npos) {
    return std::nullopt;
  }
  return torch::jit::Const::create(e.range(), digits + ".0");
}

// Gives an unannotated parameter with a literal default the literal's type, and a float
// parameter's int default the float value.
torch::jit::Param AnnotateParam(const torch::jit::Param& p) {
  if (!p.defaultValue().present()) return p;
  const torch::jit::Expr def = p.defaultValue().get();
  std::optional<std::string> type;
  if (p.type().present() && p.type().get().kind() == torch::jit::TK_VAR) {
    type = torch::jit::Var(p.type().get()).name().name();
  }
  const auto& r = p.range();
  torch::jit::Param out = p;
  if (!p.type().present()) {
    type = LiteralType(def.tree());
    if (!type) return p;
    auto annotation = torch::jit::Var::create(r, torch::jit::Ident::create(r, *type));
    out = p.withType(torch::jit::Maybe<torch::jit::Expr>::create(r, annotation));
  }
  if (type == "float") {
    if (auto f = AsFloatLiteral(def)) {
      return torch::jit::Param::create(r, out.ident(), out.type(),
                                       torch::jit::Maybe<torch::jit::Expr>::create(r, *f),
                                       out.kwarg_only());
    }
  }
  return out;
}

}  // namespace

std::string BlankImports(const std::string& source) {
  std::string out = source;
  bool continued = false;  // an import going on over lines: `from x import (a,\n b)` or `\`
  int depth = 0;
  for (size_t pos = 0; pos < out.size();) {
    const size_t end = std::min(out.find('\n', pos), out.size());
    const std::string line = out.substr(pos, end - pos);
    if (continued || IsImportLine(line)) {
      for (char c : line) depth += (c == '(') - (c == ')');
      continued = depth > 0 || (!line.empty() && line.back() == '\\');
      std::fill(out.begin() + pos, out.begin() + end, ' ');
    }
    pos = end + 1;
  }
  return out;
}

absl::StatusOr<std::vector<Def>> ParseDefinitions(const SourceText& file) {
  std::vector<Def> defs;
  try {
    torch::jit::Parser parser(file.source);
    auto& lexer = parser.lexer();
    while (lexer.cur().kind != torch::jit::TK_EOF) {
      if (lexer.cur().kind == torch::jit::TK_STRINGLITERAL) {  // a module docstring
        while (lexer.cur().kind == torch::jit::TK_STRINGLITERAL) lexer.next();
        if (lexer.cur().kind == torch::jit::TK_NEWLINE) lexer.next();
        continue;
      }
      const auto& tok = lexer.cur();
      if (tok.kind != torch::jit::TK_DEF) {
        return ErrorAt(file.LocAt(tok.range.start()),
                       "a spec file holds only imports and function definitions; make a constant "
                       "a parameter with a default instead, e.g. def mask_mod(b, h, q_idx, "
                       "kv_idx, window: int = 256)");
      }
      defs.emplace_back(parser.parseFunction(/*is_method=*/false));
    }
  } catch (const std::exception& e) {
    const TorchScriptError err = ParseTorchScriptError(e.what(), /*innermost_last=*/false);
    return ErrorAt(cuir::SourceLoc{file.path, std::max(err.line, 1), std::max(err.col, 1)},
                   absl::StrCat("syntax error: ", err.headline));
  }
  return defs;
}

namespace {

// Binary and comparison operators, and the conditional expression: what TorchScript's parser
// puts under a `~` that Python would not.
bool IsBinaryTree(int kind) {
  using namespace torch::jit;  // NOLINT: token kinds
  switch (kind) {
    case '+': case '-': case '*': case '/': case '%': case '&': case '|': case '^': case '@':
    case '<': case '>': case TK_LSHIFT: case TK_RSHIFT: case TK_FLOOR_DIV: case TK_POW:
    case TK_LE: case TK_GE: case TK_EQ: case TK_NE: case TK_AND: case TK_OR: case TK_IS:
    case TK_ISNOT: case TK_IN: case TK_NOTIN: case TK_IF_EXPR: return true;
    default: return false;
  }
}

// Whether [start, end) of `text`, a tree's range, is parenthesized as a whole. TorchScript's
// ranges leave out parentheses (`~((a) & (b))`'s operand reads `a) & (b`), so: one of the `(`
// just before it (blanks and other `(` aside) closes at or after its end. In `~(a < 2) & (b < 3)`
// the `(` before `a` closes after the `2`: the operand is not parenthesized.
bool Parenthesized(const std::string& text, size_t start, size_t end) {
  if (end > text.size() || start > end) return false;
  for (size_t open = start; open > 0;) {
    const char c = text[--open];
    if (c == ' ' || c == '\t') continue;
    if (c != '(') return false;
    int depth = 0;
    for (size_t i = open; i < text.size(); ++i) {
      depth += (text[i] == '(') - (text[i] == ')');
      if (depth == 0) {
        if (i >= end) return true;
        break;
      }
    }
  }
  return false;
}

// `~a & b`: TorchScript reads ~(a & b), Python (~a) & b. The oracle and the translation would
// agree with each other on TorchScript's reading, and the kernel would silently differ from the
// user's FlexAttention, so an unparenthesized binary operand of `~` is refused.
absl::Status CheckBitNotOperands(const SourceText& file, const TreeRef& t) {
  if (t->kind() != '~' || t->trees().empty()) return absl::OkStatus();
  const TreeRef& operand = t->trees()[0];
  const auto& r = operand->range();
  if (!IsBinaryTree(operand->kind()) || Parenthesized(file.text, r.start(), r.end())) {
    return absl::OkStatus();
  }
  // The operand as written: from after the `~` to its end, with the `)` its range leaves out.
  const std::string& src = file.text;
  size_t from = std::min(t->range().start() + 1, src.size());
  while (from < src.size() && (src[from] == ' ' || src[from] == '\t')) ++from;
  size_t to = std::max(from, std::min(r.end(), src.size()));
  int open = 0;
  for (size_t i = from; i < to; ++i) open += (src[i] == '(') - (src[i] == ')');
  for (; open > 0 && to < src.size() && (src[to] == ')' || src[to] == ' '); ++to) {
    open -= src[to] == ')';
  }
  const std::string text = src.substr(from, std::min<size_t>(to - from, 80));
  return ErrorAt(file.LocAt(t->range().start()),
                 absl::StrCat("`~` here applies to all of `", text, "`: TorchScript, which reads "
                              "the spec, gives `~` lower precedence than binary operators, while "
                              "Python (and so FlexAttention) applies it to the first operand "
                              "only; write `(~x) ...` for Python's meaning, or parenthesize the "
                              "whole operand, `~(...)`, for TorchScript's"));
}

}  // namespace

absl::Status CheckStatements(const SourceText& file, const std::vector<Def>& defs,
                             const Def& root) {
  std::set<std::string> visited = {root.name().name()};
  std::vector<TreeRef> work = {root.tree()};
  while (!work.empty()) {
    const TreeRef t = work.back();
    work.pop_back();
    if (const char* why = ForbiddenConstruct(t->kind())) {
      return ErrorAt(file.LocAt(t->range().start()), why);
    }
    if (absl::Status s = CheckBitNotOperands(file, t); !s.ok()) return s;
    if (t->kind() == torch::jit::TK_VAR) {
      // A call to another function of the file: check it as well.
      const std::string name = torch::jit::Var(t).name().name();
      for (const Def& d : defs) {
        if (d.name().name() == name && visited.insert(name).second) work.push_back(d.tree());
      }
    }
    if (t->kind() != torch::jit::TK_STRING) {
      for (const TreeRef& sub : t->trees()) work.push_back(sub);
    }
  }
  return absl::OkStatus();
}

std::vector<Def> AnnotateDefaults(const std::vector<Def>& defs) {
  std::vector<Def> out;
  for (const Def& d : defs) {
    std::vector<torch::jit::Param> params;
    for (const torch::jit::Param& p : d.decl().params()) params.push_back(AnnotateParam(p));
    const auto decl = torch::jit::Decl::create(
        d.decl().range(), torch::jit::List<torch::jit::Param>::create(d.decl().range(), params),
        d.decl().return_type());
    out.push_back(d.withDecl(decl));
  }
  return out;
}

absl::StatusOr<std::shared_ptr<torch::jit::CompilationUnit>> CompileDefinitions(
    const SourceText& file, const std::vector<Def>& defs) {
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  const std::vector<torch::jit::ResolverPtr> resolvers(defs.size(),
                                                       std::make_shared<SpecResolver>());
  try {
    cu->define(c10::nullopt, {}, {}, defs, resolvers, nullptr);
  } catch (const std::exception& e) {
    const TorchScriptError err = ParseTorchScriptError(e.what(), /*innermost_last=*/false);
    return ErrorAt(cuir::SourceLoc{file.path, std::max(err.line, 1), std::max(err.col, 1)},
                   err.headline);
  }
  return cu;
}

}  // namespace cubridge::spec::internal
