// GuardSpecSource: one forward pass over the bytes with a small Python lexer. Where this lexer
// and TorchScript's could disagree about what is code, the guard must err towards counting: text
// it skips (strings, comments) is text TorchScript skips too, so its lexing follows TorchScript's
// (torch/csrc/jit/frontend/lexer.h) where that differs from Python's.
#include "cuir/spec/guard.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace cubridge::spec {
namespace {

// TorchScript's lexer skips what isspace() calls blank, except the newline.
bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
// Bytes >= 0x80 are not tokens for TorchScript; reading them as name characters keeps a UTF-8
// name one token here.
bool IsNameStart(char c) {
  return absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }
bool IsQuote(char c) { return c == '"' || c == '\''; }

bool IsStringPrefix(std::string_view word) {
  if (word.empty() || word.size() > 2) return false;
  std::string w(word);
  for (char& c : w) c = absl::ascii_tolower(static_cast<unsigned char>(c));
  return w == "r" || w == "u" || w == "b" || w == "f" || w == "br" || w == "rb" || w == "fr" ||
         w == "rf";
}

// Python keywords that are neither operators nor operands: after one, `-` is a prefix operator.
bool IsStatementKeyword(std::string_view w) {
  static constexpr std::string_view kWords[] = {
      "as",     "assert", "async",  "await",  "break", "class",    "continue", "def",
      "del",    "elif",   "except", "finally", "for",  "from",     "global",   "import",
      "nonlocal", "pass", "raise",  "return", "try",   "while",    "with",     "yield"};
  return std::find(std::begin(kWords), std::end(kWords), w) != std::end(kWords);
}

// Operator spellings, longest first so that `**=` is not read as `**` then `=`. Augmented
// assignments, `=`, `->` and `:=` are statement syntax, not expression operators.
struct Spelling {
  std::string_view text;
  bool is_operator;
};
constexpr Spelling kSpellings[] = {
    {"**=", false}, {"//=", false}, {">>=", false}, {"<<=", false}, {"...", false},
    {"**", true},   {"//", true},   {"<<", true},   {">>", true},   {"<=", true},
    {">=", true},   {"==", true},   {"!=", true},   {"<>", true},   {"->", false},
    {"+=", false},  {"-=", false},  {"*=", false},  {"/=", false},  {"%=", false},
    {"&=", false},  {"|=", false},  {"^=", false},  {"@=", false},  {":=", false},
    {"+", true},    {"-", true},    {"*", true},    {"/", true},    {"%", true},
    {"@", true},    {"&", true},    {"|", true},    {"^", true},    {"~", true},
    {"<", true},    {">", true},    {".", true},    {"!", true},    {"?", true},
};

// What a file-level function costs once inlined: its own operators (a call is one) plus, per
// call of another function of the file, that function's inlined cost.
struct Function {
  std::string_view name;
  int64_t own_ops = 0;
  std::vector<std::pair<std::string_view, size_t>> calls;  // callee, offset of the call
  int64_t return_parts = 1;  // the most parts a `return` of it has, its parameters counted 1
};

class Guard {
 public:
  Guard(std::string_view src, const std::string& path, const GuardLimits& limits)
      : src_(src), path_(path), limits_(limits) {}

  absl::Status Run() {
    if (src_.size() > limits_.max_source_bytes) {
      return Error(limits_.max_source_bytes,
                   absl::StrCat("the spec is ", src_.size(), " bytes; this service accepts at "
                                "most ", limits_.max_source_bytes,
                                " (a spec is a few short functions: remove generated or pasted "
                                "code)"));
    }
    // The earliest problem is the one reported: a long line before the scan's error wins.
    const absl::Status scanned = Scan();
    if (absl::Status s = CheckLineLengths(scanned.ok() ? src_.size() : error_at_); !s.ok()) {
      return s;
    }
    if (!scanned.ok()) return scanned;
    return CheckInlinedCosts();
  }

 private:
  absl::Status Scan();
  absl::Status Token(size_t& i);
  absl::Status Name(size_t& i, bool attribute);
  absl::Status Punctuation(size_t& i);
  absl::Status OpenBracket(size_t at);
  void Indent(size_t width);
  absl::Status StatementStart(size_t at, std::string_view word);
  absl::Status LineWithoutCode(size_t newline);
  absl::Status CheckLineLengths(size_t before);
  absl::Status CountOperator(size_t at, bool prefix);
  absl::Status CheckInlinedCosts();
  absl::Status AddParts(size_t at, int64_t parts);
  void EndStatement();
  size_t SkipString(size_t quote) const;
  size_t SkipNumber(size_t i) const;
  bool IsTypeComment(size_t i) const { return src_.substr(i, 7) == "# type:"; }

  void BeginStatement() {
    EndStatement();
    in_statement_ = true;
    stmt_start_ = SIZE_MAX;
    stmt_ops_ = 0;
    prev_operand_ = false;
    unary_run_ = 0;
  }
  void Operand() {
    prev_operand_ = true;
    unary_run_ = 0;
  }
  void Neutral() {  // neither operand nor operator: `,` `:` `=`, keywords
    prev_operand_ = false;
    unary_run_ = 0;
  }

  absl::Status Error(size_t offset, const std::string& message) {
    offset = std::min(offset, src_.size());
    error_at_ = offset;
    const size_t newline = src_.substr(0, offset).rfind('\n');
    const size_t col = newline == std::string_view::npos ? offset + 1 : offset - newline;
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ":", LineOf(offset), ":", col, ": ", message));
  }
  int LineOf(size_t offset) const {
    return 1 + static_cast<int>(std::count(src_.begin(), src_.begin() + offset, '\n'));
  }

  const std::string_view src_;
  const std::string& path_;
  const GuardLimits& limits_;

  // TorchScript's indent stack: the open blocks' widths, and the `elif`s so far in the
  // if-chain at each level.
  struct Level {
    size_t width;
    int elifs;
  };
  std::vector<Level> indents_;
  int elifs_ = 0;  // over all levels
  int depth_ = 0;                // open brackets
  size_t error_at_ = 0;          // where the last error was reported
  int breaks_without_code_ = 0;  // newlines since the last token
  bool in_statement_ = false;
  size_t stmt_start_ = SIZE_MAX;  // offset of the statement's first token, once seen
  bool first_ = false;            // the token being read is the statement's first
  int64_t stmt_ops_ = 0;
  int64_t total_ops_ = 0;
  int unary_run_ = 0;
  bool prev_operand_ = false;  // the previous token ends an operand: `-` after it is binary
  bool prev_dot_ = false;      // the previous token is `.`: a name after it is an attribute
  std::string_view call_name_;  // the previous token, when it is a name that may be called
  bool expect_def_name_ = false;
  int function_ = -1;  // the top-level function being scanned, if any
  std::vector<Function> functions_;  // one per name
  std::unordered_map<std::string_view, int> function_index_;

  // How many parts a value may have (a bound on a tuple's length): a name's is that of what was
  // last assigned to it in the function, a statement's the sum over the operands it reads, a
  // call of a file function defined above it its arguments' times the most parts that function
  // returns. TorchScript builds tuples joined with `+` element by element, so parts that double
  // per statement (`x = x, x` then `x = x + x` ...) make its compile time exponential.
  std::unordered_map<std::string_view, int64_t> parts_;  // the current function's names
  int64_t stmt_parts_ = 0;
  std::vector<std::string_view> targets_;  // names before the statement's `=`, so far
  bool in_targets_ = true;                 // the statement so far is `name, name, ...`
  bool assigns_ = false;
  bool returns_ = false;
  struct OpenCall {
    int depth;             // bracket depth inside the call
    int64_t parts_before;  // the statement's parts before its arguments
    int64_t factor;        // the callee's return_parts
  };
  std::vector<OpenCall> calls_;
};

absl::Status Guard::Scan() {
  size_t i = 0;
  bool line_start = true;
  while (i < src_.size()) {
    // A logical line starts on a new physical line outside brackets; its indentation opens or
    // closes blocks. Blank and comment lines do neither, as for TorchScript.
    if (line_start) {
      line_start = false;
      if (depth_ == 0) {
        size_t j = i;
        while (j < src_.size() && IsBlank(src_[j])) ++j;
        if (j == src_.size()) break;
        if (src_[j] == '\n') {
          if (absl::Status s = LineWithoutCode(j); !s.ok()) return s;
          i = j + 1;
          line_start = true;
          continue;
        }
        if (src_[j] == '#' && !IsTypeComment(j)) {
          i = std::min(src_.find('\n', j), src_.size());
          continue;
        }
        EndStatement();  // before Indent, which may leave the function it belongs to
        Indent(j - i);
        BeginStatement();
        i = j;
      }
    }
    const char c = src_[i];
    if (c == '\n') {
      if (absl::Status s = LineWithoutCode(i); !s.ok()) return s;
      ++i;
      if (depth_ > 0) continue;  // brackets continue the logical line
      in_statement_ = false;
      line_start = true;
      continue;
    }
    if (c == '\\' && i + 1 < src_.size() && src_[i + 1] == '\n') {
      if (absl::Status s = LineWithoutCode(i + 1); !s.ok()) return s;
      i += 2;  // an explicit continuation: same logical line, no indentation
      continue;
    }
    if (IsBlank(c)) {
      ++i;
      continue;
    }
    // TorchScript reads `# type:` comments as code (a function's type annotation).
    if (c == '#' && !IsTypeComment(i)) {
      i = std::min(src_.find('\n', i), src_.size());
      continue;
    }
    if (!in_statement_) BeginStatement();  // text after a `;`
    breaks_without_code_ = 0;
    if (absl::Status s = Token(i); !s.ok()) return s;
  }
  EndStatement();
  return absl::OkStatus();
}

// The frontend reads TorchScript's errors with std::regex, which recurses once per character of
// a line (the message quotes the offending lines).
absl::Status Guard::CheckLineLengths(size_t before) {
  for (size_t start = 0; start < src_.size() && start + limits_.max_line_bytes < before;) {
    const size_t end = std::min(src_.find('\n', start), src_.size());
    if (end - start > limits_.max_line_bytes) {
      return Error(start + limits_.max_line_bytes,
                   absl::StrCat("this line is ", end - start, " bytes long; this service "
                                "accepts at most ", limits_.max_line_bytes,
                                " per line (break it: inside brackets an expression goes on "
                                "over lines)"));
    }
    start = end + 1;
  }
  return absl::OkStatus();
}

// TorchScript's lexer recurses once per newline, comment and `\` continuation between two
// tokens.
absl::Status Guard::LineWithoutCode(size_t newline) {
  if (++breaks_without_code_ <= limits_.max_lines_without_code) return absl::OkStatus();
  return Error(newline + 1, absl::StrCat(breaks_without_code_, " line breaks with no code "
                                         "between them (blank lines, comments, `\\` "
                                         "continuations); this service accepts at most ",
                                         limits_.max_lines_without_code,
                                         " (remove blank and comment lines)"));
}

void Guard::Indent(size_t width) {
  if (indents_.empty()) indents_.push_back({width, 0});  // the first line sets the base
  if (width > indents_.back().width) {
    indents_.push_back({width, 0});
  } else {
    while (indents_.size() > 1 && width < indents_.back().width) {
      elifs_ -= indents_.back().elifs;
      indents_.pop_back();
    }
  }
  if (indents_.size() == 1) function_ = -1;
}

// TorchScript parses (and emits) each `elif` inside the `if` before it: a chain nests as deep as
// it is long, in one indentation level.
absl::Status Guard::StatementStart(size_t at, std::string_view word) {
  int& chain = indents_.back().elifs;
  const int before = chain;
  if (word == "elif") {
    ++chain;
  } else if (word != "else") {
    chain = 0;
  }
  elifs_ += chain - before;
  const int blocks = static_cast<int>(indents_.size()) - 1 + elifs_;
  if (blocks > limits_.max_block_depth) {
    return Error(at, absl::StrCat("blocks nested ", blocks, " deep (each `elif` counts as a "
                                  "block in the one before); this service accepts at most ",
                                  limits_.max_block_depth,
                                  " (move inner blocks into a helper function)"));
  }
  return absl::OkStatus();
}

absl::Status Guard::Token(size_t& i) {
  const char c = src_[i];
  first_ = stmt_start_ == SIZE_MAX;
  if (first_) {
    stmt_start_ = i;
    size_t end = i;
    while (end < src_.size() && IsNameChar(src_[end])) ++end;
    const std::string_view word = IsNameStart(c) ? src_.substr(i, end - i) : std::string_view();
    if (absl::Status s = StatementStart(i, word); !s.ok()) return s;
  }
  const bool after_dot = std::exchange(prev_dot_, false);
  const std::string_view callee = std::exchange(call_name_, {});
  const bool number = IsDigit(c) || (c == '.' && i + 1 < src_.size() && IsDigit(src_[i + 1]));
  if (number || IsQuote(c)) {  // a literal: one part
    in_targets_ = false;
    const size_t at = i;
    i = number ? SkipNumber(i) : SkipString(i);
    Operand();
    return AddParts(at, 1);
  }
  if (IsNameStart(c)) {
    const size_t start = i;
    absl::Status s = Name(i, after_dot);
    // A name may be a call of a file function unless it is an attribute (`torch.where`).
    if (s.ok() && !after_dot && prev_operand_) call_name_ = src_.substr(start, i - start);
    return s;
  }
  if (c == '(' || c == '[' || c == '{') {
    in_targets_ = false;
    if (c == '(' && !callee.empty() && function_ >= 0) {
      functions_[function_].calls.emplace_back(callee, i);
    }
    if (c == '(' && !callee.empty()) {
      if (auto it = function_index_.find(callee); it != function_index_.end()) {
        stmt_parts_ = std::max<int64_t>(stmt_parts_ - 1, 0);  // its name was counted as a value
        calls_.push_back({depth_ + 1, stmt_parts_, functions_[it->second].return_parts});
      }
    }
    // An opening bracket right after an operand is a call or a subscript: one more link.
    if (c != '{' && prev_operand_) {
      if (absl::Status s = CountOperator(i, false); !s.ok()) return s;
    }
    ++i;
    return OpenBracket(i - 1);
  }
  if (c == ')' || c == ']' || c == '}') {
    const size_t at = i;
    ++i;
    Operand();
    if (!calls_.empty() && calls_.back().depth == depth_) {
      const OpenCall call = calls_.back();
      calls_.pop_back();
      const int64_t args = stmt_parts_ - call.parts_before;
      stmt_parts_ = call.parts_before;
      depth_ = std::max(depth_ - 1, 0);
      // Saturates: both factors are at most the limit.
      return AddParts(at, std::max<int64_t>(args, 1) * call.factor);
    }
    depth_ = std::max(depth_ - 1, 0);
    return absl::OkStatus();
  }
  return Punctuation(i);
}

absl::Status Guard::OpenBracket(size_t at) {
  ++depth_;
  Neutral();
  if (depth_ > limits_.max_bracket_depth) {
    return Error(at, absl::StrCat("brackets nested ", depth_, " deep; this service accepts at "
                                  "most ", limits_.max_bracket_depth,
                                  " (give parts of the expression names: x = ...; then use x)"));
  }
  return absl::OkStatus();
}

absl::Status Guard::Name(size_t& i, bool attribute) {
  const size_t start = i;
  while (i < src_.size() && IsNameChar(src_[i])) ++i;
  const std::string_view word = src_.substr(start, i - start);
  if (i < src_.size() && IsQuote(src_[i]) && IsStringPrefix(word)) {
    in_targets_ = false;
    i = SkipString(i);
    Operand();
    return AddParts(start, 1);
  }
  if (std::exchange(expect_def_name_, false)) {
    parts_.clear();
    // A name defined twice is refused later, but may not hide a cost meanwhile: both count.
    auto [it, added] = function_index_.try_emplace(word, static_cast<int>(functions_.size()));
    if (added) functions_.push_back(Function{word, 0, {}});
    function_ = it->second;
    Neutral();  // its parameter list is no call
    return absl::OkStatus();
  }
  if (word == "and" || word == "or" || word == "in" || word == "is" || word == "lambda") {
    return CountOperator(start, false);
  }
  if (word == "not") return CountOperator(start, /*prefix=*/!prev_operand_);  // else `not in`
  // The conditional expression's `if` and `else` count; a statement's leading ones do not.
  if (word == "if" || word == "else") {
    if (!first_) return CountOperator(start, false);
    Neutral();
    return absl::OkStatus();
  }
  if (IsStatementKeyword(word)) {
    in_targets_ = false;
    if (first_ && word == "return") returns_ = true;
    if (first_ && word == "def" && indents_.size() == 1) expect_def_name_ = true;
    Neutral();
    return absl::OkStatus();
  }
  Operand();  // a name, True, False, None
  if (attribute) return absl::OkStatus();  // part of the value it is an attribute of
  if (in_targets_ && depth_ == 0) targets_.push_back(word);
  auto it = parts_.find(word);
  return AddParts(start, it == parts_.end() ? 1 : it->second);
}

absl::Status Guard::Punctuation(size_t& i) {
  const size_t at = i;
  if (IsTypeComment(at)) {
    i += 7;
    Neutral();
    return absl::OkStatus();
  }
  for (const Spelling& s : kSpellings) {
    if (src_.substr(at, s.text.size()) != s.text) continue;
    i += s.text.size();
    if (s.text == "...") {
      Operand();
      return absl::OkStatus();
    }
    if (!s.is_operator) {
      // An augmented assignment keeps its target's parts, already counted.
      if (s.text.size() >= 2 && s.text.back() == '=' && s.text != ":=" && in_targets_ &&
          depth_ == 0 && !targets_.empty()) {
        assigns_ = true;
      }
      in_targets_ = false;
      Neutral();
      return absl::OkStatus();
    }
    // `-x`, `+x`, `~x`, and `*args` / `**kwargs` in TorchScript's starred form, are prefix
    // operators where no operand precedes them.
    const bool prefix = !prev_operand_ && (s.text == "-" || s.text == "+" || s.text == "~" ||
                                           s.text == "!" || s.text == "*" || s.text == "**");
    if (absl::Status st = CountOperator(at, prefix); !st.ok()) return st;
    prev_dot_ = s.text == ".";
    return absl::OkStatus();
  }
  ++i;
  if (depth_ == 0 && src_[at] == '=' && in_targets_ && !targets_.empty()) {
    assigns_ = true;
    stmt_parts_ = 0;  // what follows is the value
  }
  if (depth_ != 0 || src_[at] != ',') in_targets_ = false;
  if (src_[at] == ';' && depth_ == 0) {
    in_statement_ = false;  // the next token starts another statement
    return absl::OkStatus();
  }
  Neutral();  // , : = ; ! ? $ ` and bytes TorchScript will refuse
  return absl::OkStatus();
}

absl::Status Guard::CountOperator(size_t at, bool prefix) {
  in_targets_ = false;
  ++stmt_ops_;
  ++total_ops_;
  if (function_ >= 0) ++functions_[function_].own_ops;
  prev_operand_ = false;
  unary_run_ = prefix ? unary_run_ + 1 : 0;
  if (unary_run_ > limits_.max_unary_run) {
    return Error(at, absl::StrCat(unary_run_, " prefix operators in a row; this service accepts "
                                  "at most ", limits_.max_unary_run,
                                  " (each pair of - or ~ cancels out: write the sign once)"));
  }
  if (stmt_ops_ > limits_.max_operators_per_statement) {
    return Error(at, absl::StrCat("the statement starting at line ", LineOf(stmt_start_),
                                  " reaches ", stmt_ops_, " operators here; this service accepts "
                                  "at most ", limits_.max_operators_per_statement,
                                  " per statement (split it: give parts names, x = ...; then "
                                  "use x)"));
  }
  if (total_ops_ > limits_.max_operators_total) {
    return Error(at, absl::StrCat("the spec reaches ", total_ops_, " operators here; this service "
                                  "accepts at most ", limits_.max_operators_total,
                                  " in one file (an attention variant needs a few dozen: remove "
                                  "generated code)"));
  }
  return absl::OkStatus();
}

absl::Status Guard::AddParts(size_t at, int64_t parts) {
  const int64_t limit = limits_.max_value_parts;
  stmt_parts_ = std::min(stmt_parts_ + parts, limit + 1);
  if (stmt_parts_ <= limit) return absl::OkStatus();
  return Error(at, absl::StrCat("the value of the statement starting at line ",
                                LineOf(stmt_start_ == SIZE_MAX ? at : stmt_start_),
                                " may have more than ", limit, " parts here (values built from "
                                "themselves, as `x = x + x` on tuples, double with every "
                                "statement); this service accepts at most ", limit,
                                " (build tuples once, not by joining them repeatedly)"));
}

void Guard::EndStatement() {
  if (assigns_) {
    for (std::string_view t : targets_) parts_[t] = std::max<int64_t>(stmt_parts_, 1);
  }
  if (returns_ && function_ >= 0) {
    int64_t& r = functions_[function_].return_parts;
    r = std::max(r, stmt_parts_);
  }
  stmt_parts_ = 0;
  targets_.clear();
  in_targets_ = true;
  assigns_ = false;
  returns_ = false;
  calls_.clear();
}

// Costs in post-order over the call graph, without recursion; a call back into a function
// still being costed (recursion, which TorchScript refuses anyway) adds nothing. Sums saturate
// just past the limit.
absl::Status Guard::CheckInlinedCosts() {
  const int64_t limit = limits_.max_operators_total;
  enum class State { kNew, kOpen, kDone };
  std::vector<State> state(functions_.size(), State::kNew);
  std::vector<int64_t> cost(functions_.size(), 0);
  auto callee = [&](std::string_view name) {
    auto it = function_index_.find(name);
    return it == function_index_.end() ? -1 : it->second;
  };
  for (size_t root = 0; root < functions_.size(); ++root) {
    if (state[root] != State::kNew) continue;
    // (function, index of its next call to visit)
    std::vector<std::pair<int, size_t>> stack = {{static_cast<int>(root), 0}};
    state[root] = State::kOpen;
    while (!stack.empty()) {
      const Function& fn = functions_[stack.back().first];
      if (stack.back().second < fn.calls.size()) {
        const int g = callee(fn.calls[stack.back().second++].first);
        if (g >= 0 && state[g] == State::kNew) {
          state[g] = State::kOpen;
          stack.emplace_back(g, 0);
        }
        continue;
      }
      int64_t total = fn.own_ops;
      for (const auto& [name, at] : fn.calls) {
        const int g = callee(name);
        const int64_t call = g >= 0 ? cost[g] : 0;  // the call itself is one of own_ops
        total = std::min(total + call, limit + 1);
        if (total > limit) {
          return Error(at, absl::StrCat(
                               "`", std::string(fn.name), "` has more than ", limit,
                               " operators once the functions it calls are inlined (this call "
                               "of `", std::string(name), "` adds ", call > limit ? "more" : absl::StrCat(call),
                               "); this service accepts at most ", limit,
                               " (call a helper once and name its result, x = ", std::string(name),
                               "(...); then use x)"));
        }
      }
      cost[stack.back().first] = total;
      state[stack.back().first] = State::kDone;
      stack.pop_back();
    }
  }
  return absl::OkStatus();
}

// TorchScript's string rule: 1 or 3 quotes; a backslash escapes the next byte (a quote, a
// newline); a single-quoted string ends at an unescaped newline (unterminated: TorchScript
// refuses it, and the newline stays a newline here).
size_t Guard::SkipString(size_t quote) const {
  const char q = src_[quote];
  auto closes = [&](size_t i, size_t n) {
    return i + n <= src_.size() && std::all_of(src_.begin() + i, src_.begin() + i + n,
                                               [q](char c) { return c == q; });
  };
  const size_t n = closes(quote, 3) ? 3 : 1;
  size_t i = quote + n;
  while (i < src_.size()) {
    if (closes(i, n)) return i + n;
    if (n == 1 && src_[i] == '\n') return i;
    i += src_[i] == '\\' ? 2 : 1;
  }
  return src_.size();
}

// A number: digits, at most one '.', then name characters (exponents, hex digits, `j`). Signs
// and further dots stay tokens of their own: an exponent's sign then counts as one operator too
// many, but no spelling can hide an operator chain inside a "number" (`1_e+1_e+...`,
// `1.5.a.b...`), whatever TorchScript's strtod makes of it.
size_t Guard::SkipNumber(size_t i) const {
  auto digits = [&](size_t j) {
    while (j < src_.size() && IsDigit(src_[j])) ++j;
    return j;
  };
  size_t j = digits(i);
  if (j < src_.size() && src_[j] == '.') j = digits(j + 1);
  while (j < src_.size() && IsNameChar(src_[j])) ++j;
  return j;
}

}  // namespace

absl::Status GuardSpecSource(std::string_view source, const std::string& path,
                             const GuardLimits& limits) {
  return Guard(source, path, limits).Run();
}

}  // namespace cubridge::spec
