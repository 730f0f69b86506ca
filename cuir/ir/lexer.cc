#include "cuir/ir/lexer.h"

#include <array>
#include <charconv>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cubridge::cuir {
namespace {

constexpr std::array<std::string_view, 8> kTwoCharPuncts = {"**", "//", "<=", ">=",
                                                             "==", "!=", "&&", "||"};
constexpr std::string_view kOneCharPuncts = "{}[](),:=<>+-*/%!?";
// The only identifiers with a '.', lexed as one keyword each.
constexpr std::array<std::string_view, 6> kDottedKeywords = {
    "softmax.init", "softmax.online", "softmax.recompute", "softmax.grad", "grad.init",
    "grad.epilogue"};

bool IsIdentStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsIdentChar(char c) { return IsIdentStart(c) || IsDigit(c); }

class Lexer {
 public:
  Lexer(std::string_view text, std::string_view filename) : text_(text), file_(filename) {}

  absl::StatusOr<std::vector<Token>> Run() {
    std::vector<Token> out;
    while (true) {
      SkipBlanksAndComments();
      Token t;
      t.loc = Loc();
      if (pos_ >= text_.size()) {
        out.push_back(std::move(t));
        return out;
      }
      absl::Status s = LexOne(&t);
      if (!s.ok()) return s;
      out.push_back(std::move(t));
    }
  }

 private:
  char At(size_t i) const { return i < text_.size() ? text_[i] : '\0'; }
  SourceLoc Loc() const { return SourceLoc{std::string(file_), line_, col_}; }

  void Advance(size_t n) {
    for (size_t i = 0; i < n && pos_ < text_.size(); ++i, ++pos_) {
      if (text_[pos_] == '\n') {
        ++line_;
        col_ = 1;
      } else {
        ++col_;
      }
    }
  }

  absl::Status Error(const SourceLoc& loc, const std::string& msg) const {
    return absl::InvalidArgumentError(absl::StrCat(loc.ToString(), ": ", msg));
  }

  void SkipBlanksAndComments() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\r') {
        Advance(1);
      } else if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') Advance(1);
      } else {
        return;
      }
    }
  }

  absl::Status LexOne(Token* t) {
    char c = text_[pos_];
    if (c == '\n') {
      t->kind = TokKind::kNewline;
      t->text.assign(1, '\n');
      Advance(1);
      return absl::OkStatus();
    }
    if (IsDigit(c)) return LexNumber(t);
    if (IsIdentStart(c)) return LexIdent(t);
    if (c == '"') return LexString(t);
    if (c == '.' && IsDigit(At(pos_ + 1))) {
      return Error(t->loc, "a float literal needs a digit before '.': write 0.5, not .5");
    }
    for (std::string_view p : kTwoCharPuncts) {
      if (text_.substr(pos_, 2) == p) return Punct(t, 2);
    }
    if (kOneCharPuncts.find(c) != std::string_view::npos) return Punct(t, 1);
    std::string shown = (c >= 0x20 && c < 0x7f) ? absl::StrCat("'", std::string(1, c), "'")
                                                : absl::StrFormat("byte 0x%02x", c & 0xff);
    return Error(t->loc, absl::StrCat("unexpected character ", shown));
  }

  absl::Status Punct(Token* t, size_t n) {
    t->kind = TokKind::kPunct;
    t->text = std::string(text_.substr(pos_, n));
    Advance(n);
    return absl::OkStatus();
  }

  absl::Status LexIdent(Token* t) {
    size_t end = pos_;
    while (IsIdentChar(At(end))) ++end;
    for (std::string_view kw : kDottedKeywords) {
      if (text_.substr(pos_, kw.size()) == kw && !IsIdentChar(At(pos_ + kw.size()))) {
        end = pos_ + kw.size();
      }
    }
    t->text = std::string(text_.substr(pos_, end - pos_));
    t->kind = TokKind::kIdent;
    if (t->text == "inf" || t->text == "nan") {
      t->kind = TokKind::kFloat;
      t->float_value = t->text == "inf" ? std::numeric_limits<double>::infinity()
                                        : std::numeric_limits<double>::quiet_NaN();
    }
    Advance(end - pos_);
    if (At(pos_) == '.') {
      return Error(Loc(), absl::StrCat("unexpected '.' after '", t->text,
                                       "': only softmax.init and softmax.online contain a dot"));
    }
    return absl::OkStatus();
  }

  size_t SkipDigits(size_t i) const {
    while (IsDigit(At(i))) ++i;
    return i;
  }

  absl::Status LexNumber(Token* t) {
    size_t end = SkipDigits(pos_);
    bool is_float = false;
    if (At(end) == '.') {
      if (!IsDigit(At(end + 1))) {
        return Error(t->loc, "a float literal needs a digit after '.': write 1.0, not 1.");
      }
      end = SkipDigits(end + 1);
      is_float = true;
    }
    if (At(end) == 'e' || At(end) == 'E') {
      size_t exp = end + 1;
      if (At(exp) == '+' || At(exp) == '-') ++exp;
      if (!IsDigit(At(exp))) {
        return Error(t->loc, "a float exponent needs digits: write 1e-3 or 1.0e3");
      }
      end = SkipDigits(exp);
      is_float = true;
    }
    t->text = std::string(text_.substr(pos_, end - pos_));
    if (IsIdentChar(At(end)) || At(end) == '.') {
      size_t bad = end;
      while (IsIdentChar(At(bad)) || At(bad) == '.') ++bad;
      return Error(t->loc, absl::StrCat("malformed number '",
                                        std::string(text_.substr(pos_, bad - pos_)), "'"));
    }
    const char* first = t->text.data();
    const char* last = first + t->text.size();
    if (is_float) {
      t->kind = TokKind::kFloat;
      auto [ptr, ec] = std::from_chars(first, last, t->float_value);
      if (ec != std::errc() || ptr != last) {
        return Error(t->loc, absl::StrCat("float literal ", t->text, " is out of range for a ",
                                          "64-bit float (write inf or 0.0)"));
      }
    } else {
      t->kind = TokKind::kInt;
      auto [ptr, ec] = std::from_chars(first, last, t->int_value);
      // 2^63 is allowed here so that -9223372036854775808 can be written; the parser checks.
      if (ec != std::errc() || ptr != last || t->int_value > (uint64_t{1} << 63)) {
        return Error(t->loc, absl::StrCat("integer literal ", t->text,
                                          " does not fit in a 64-bit signed int"));
      }
    }
    Advance(end - pos_);
    return absl::OkStatus();
  }

  absl::Status LexString(Token* t) {
    size_t end = pos_ + 1;
    while (end < text_.size() && text_[end] != '"' && text_[end] != '\n') ++end;
    if (At(end) != '"') {
      return Error(t->loc, "unterminated string literal: close it with '\"' on the same line");
    }
    t->kind = TokKind::kString;
    t->text = std::string(text_.substr(pos_ + 1, end - pos_ - 1));
    Advance(end + 1 - pos_);
    return absl::OkStatus();
  }

  std::string_view text_;
  std::string_view file_;
  size_t pos_ = 0;
  int line_ = 1;
  int col_ = 1;
};

}  // namespace

std::string Token::Describe() const {
  switch (kind) {
    case TokKind::kNewline: return "end of line";
    case TokKind::kEnd: return "end of input";
    case TokKind::kString: return absl::StrCat("string \"", text, "\"");
    default: return absl::StrCat("'", text, "'");
  }
}

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view text, std::string_view filename) {
  return Lexer(text, filename).Run();
}

}  // namespace cubridge::cuir
