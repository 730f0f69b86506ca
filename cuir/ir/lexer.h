// Tokens of the CuIR text form. Newlines are tokens: a statement ends at the end of its line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cuir/ir/source_loc.h"

namespace cubridge::cuir {

enum class TokKind {
  kIdent,    // names and keywords; `softmax.init` / `softmax.online` are single tokens
  kInt,      // decimal digits; magnitude in `int_value` (may be 2^63: only valid after `-`)
  kFloat,    // 1.5, 2e-3, inf, nan; value in `float_value`
  kString,   // "..." without the quotes in `text`
  kPunct,    // operators and brackets, spelled in `text`
  kNewline,
  kEnd,
};

struct Token {
  TokKind kind = TokKind::kEnd;
  std::string text;  // as written (for kString: the contents)
  uint64_t int_value = 0;
  double float_value = 0.0;
  SourceLoc loc;

  bool Is(TokKind k, std::string_view t) const { return kind == k && text == t; }
  bool IsPunct(std::string_view t) const { return Is(TokKind::kPunct, t); }
  bool IsIdent(std::string_view t) const { return Is(TokKind::kIdent, t); }
  bool IsNumber() const { return kind == TokKind::kInt || kind == TokKind::kFloat; }
  // For "found X" in error messages: 'text', "end of line", "end of input".
  std::string Describe() const;
};

// Splits `text` into tokens ending with kEnd. Comments (`#` to end of line) are dropped.
// Errors are INVALID_ARGUMENT "file:line:col: message".
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view text, std::string_view filename);

}  // namespace cubridge::cuir
