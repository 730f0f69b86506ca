// Reading and running the transfer rules' golden files; their syntax is in golden.h.
#include "cuir/transfer/golden.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string_view>
#include <tuple>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace cubridge::transfer {
namespace {

constexpr char kVariantFile[] = "variant";

std::string Trim(absl::string_view s) { return std::string(absl::StripAsciiWhitespace(s)); }

absl::Status At(absl::string_view file, int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ":", line, ": ", what));
}

// item[begin, end) as a CuIR expression, parsed where it stands in the variant (line `line`, its
// own columns), so that the locations the rules report point at it.
absl::StatusOr<cuir::ExprPtr> ExprAt(const std::string& item, size_t begin, size_t end, int line) {
  while (begin < end && absl::ascii_isspace(static_cast<unsigned char>(item[begin]))) ++begin;
  if (begin >= end) return absl::InvalidArgumentError("an expression is missing");
  std::string placed(line - 1, '\n');
  placed.append(begin, ' ');
  placed.append(item, begin, end - begin);
  return cuir::ParseExpr(placed, kVariantFile);
}

cuir::SourceLoc LocAt(size_t pos, int line) {
  return cuir::SourceLoc{kVariantFile, line, static_cast<int>(pos) + 1};
}

// The position of the first non-blank character of item[begin, ...).
size_t SkipBlanks(const std::string& item, size_t begin) {
  while (begin < item.size() && absl::ascii_isspace(static_cast<unsigned char>(item[begin]))) {
    ++begin;
  }
  return begin;
}

bool IsName(absl::string_view s) {
  if (s.empty() || absl::ascii_isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// `NAME:` at item[begin, ...): the name (trimmed) and the position just past the colon.
absl::StatusOr<std::pair<std::string, size_t>> NameThenColon(const std::string& item,
                                                            size_t begin) {
  const size_t colon = item.find(':', begin);
  std::string name = colon == std::string::npos ? "" : Trim(item.substr(begin, colon - begin));
  if (!IsName(name)) return absl::InvalidArgumentError("write NAME: after the keyword");
  return std::pair{name, colon + 1};
}

absl::Status ParseConst(const std::string& item, int line, GoldenVariant* v) {
  const size_t begin = SkipBlanks(item, sizeof("const") - 1);
  auto name = NameThenColon(item, begin);
  if (!name.ok()) return name.status();
  const size_t eq = item.find('=', name->second);
  if (eq == std::string::npos) return absl::InvalidArgumentError("write const NAME: TYPE = EXPR");
  const std::string type = Trim(item.substr(name->second, eq - name->second));
  VariantSpec::Const c;
  c.name = name->first;
  c.loc = LocAt(begin, line);
  if (type == "int") {
    c.type = cuir::Type::kInt;
  } else if (type == "float") {
    c.type = cuir::Type::kFloat;
  } else if (type == "bool") {
    c.type = cuir::Type::kBool;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("`", type, "`: the type is int, float or bool"));
  }
  auto value = ExprAt(item, eq + 1, item.size(), line);
  if (!value.ok()) return value.status();
  c.value = *std::move(value);
  v->spec.consts.push_back(std::move(c));
  return absl::OkStatus();
}

absl::Status ParseBuffer(const std::string& item, int line, GoldenVariant* v) {
  const size_t begin = SkipBlanks(item, sizeof("buffer") - 1);
  auto name = NameThenColon(item, begin);
  if (!name.ok()) return name.status();
  const size_t open = item.find('[', name->second);
  if (open == std::string::npos || item.back() != ']') {
    return absl::InvalidArgumentError("write buffer NAME: DTYPE[EXTENT, ...]");
  }
  const std::string dtype = Trim(item.substr(name->second, open - name->second));
  std::optional<cuir::TensorDType> d = cuir::TensorDTypeFromName(dtype);
  if (!d) {
    return absl::InvalidArgumentError(
        absl::StrCat("`", dtype, "`: the dtype is one of ", cuir::TensorDTypeNames()));
  }
  VariantSpec::Buffer b;
  b.name = name->first;
  b.dtype = *d;
  b.loc = LocAt(begin, line);
  const size_t close = item.size() - 1;
  if (!Trim(item.substr(open + 1, close - open - 1)).empty()) {
    // Extents are expressions, which hold commas of their own inside parentheses.
    int depth = 0;
    size_t from = open + 1;
    for (size_t i = open + 1; i <= close; ++i) {
      const char c = item[i];
      if (c == '(' || c == '[') ++depth;
      if ((c == ')' || c == ']') && i < close) --depth;
      if (i < close && (c != ',' || depth > 0)) continue;
      if (Trim(item.substr(from, i - from)) == "?") {
        b.extents.push_back(nullptr);
      } else {
        auto extent = ExprAt(item, from, i, line);
        if (!extent.ok()) return extent.status();
        b.extents.push_back(*std::move(extent));
      }
      from = i + 1;
    }
  }
  v->spec.buffers.push_back(std::move(b));
  return absl::OkStatus();
}

absl::Status ParseHeads(absl::string_view rest, GoldenVariant* v) {
  for (absl::string_view part : absl::StrSplit(rest, absl::ByAnyChar(", "), absl::SkipEmpty())) {
    int64_t* field = nullptr;
    if (absl::ConsumePrefix(&part, "q=")) field = &v->config.heads_q;
    if (absl::ConsumePrefix(&part, "kv=")) field = &v->config.heads_kv;
    if (field == nullptr || !absl::SimpleAtoi(part, field)) {
      return absl::InvalidArgumentError("write heads: q=N kv=N");
    }
  }
  return absl::OkStatus();
}

absl::Status ParseItem(const std::string& item, int line, GoldenVariant* v) {
  for (auto [key, expr, loc] : {std::tuple{"mask:", &v->spec.mask, &v->spec.mask_loc},
                                std::tuple{"score:", &v->spec.score, &v->spec.score_loc}}) {
    if (!absl::StartsWith(item, key)) continue;
    if (*expr) return absl::InvalidArgumentError(absl::StrCat("a second `", key, "`"));
    const size_t begin = SkipBlanks(item, std::string_view(key).size());
    auto parsed = ExprAt(item, begin, item.size(), line);
    if (!parsed.ok()) return parsed.status();
    *expr = *std::move(parsed);
    *loc = LocAt(begin, line);
    return absl::OkStatus();
  }
  if (absl::StartsWith(item, "const ")) return ParseConst(item, line, v);
  if (absl::StartsWith(item, "buffer ")) return ParseBuffer(item, line, v);
  absl::string_view rest = item;
  if (absl::ConsumePrefix(&rest, "heads:")) return ParseHeads(rest, v);
  if (item == "backward") {
    v->backward = true;
    return absl::OkStatus();
  }
  if (absl::ConsumePrefix(&rest, "grad:")) {
    for (absl::string_view name : absl::StrSplit(rest, absl::ByAnyChar(", "), absl::SkipEmpty())) {
      if (!IsName(std::string(name))) return absl::InvalidArgumentError("write grad: NAME, ...");
      v->spec.grad_buffers.emplace_back(name);
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      "expected mask:, score:, const, buffer, heads:, backward or grad:");
}

// Each line of `after` against those of `before` by their longest common subsequence, marked
// '+' (after only), '-' (before only) or ' '; within a run of changes the removed lines first.
std::vector<std::pair<char, std::string>> LineDiff(const std::vector<std::string>& before,
                                                   const std::vector<std::string>& after) {
  const size_t n = before.size(), m = after.size();
  std::vector<std::vector<int>> common(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = n; i-- > 0;) {
    for (size_t j = m; j-- > 0;) {
      common[i][j] = before[i] == after[j] ? common[i + 1][j + 1] + 1
                                           : std::max(common[i + 1][j], common[i][j + 1]);
    }
  }
  std::vector<std::pair<char, std::string>> out, added;
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && before[i] == after[j]) {
      for (auto& a : added) out.push_back(std::move(a));
      added.clear();
      out.emplace_back(' ', before[i]);
      ++i, ++j;
    } else if (j == m || (i < n && common[i + 1][j] >= common[i][j + 1])) {
      out.emplace_back('-', before[i++]);
    } else {
      added.emplace_back('+', after[j++]);
    }
  }
  for (auto& a : added) out.push_back(std::move(a));
  return out;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

// The changed lines with one unchanged line either side. The mark takes the place of the
// kernel block's first indenting blank, so statements keep their nesting.
std::vector<std::string> ChangedLines(const cuir::Program& before, const cuir::Program& after) {
  const auto diff = LineDiff(Lines(cuir::PrintProgram(before)), Lines(cuir::PrintProgram(after)));
  std::vector<bool> shown(diff.size(), false);
  for (size_t k = 0; k < diff.size(); ++k) {
    if (diff[k].first == ' ') continue;
    for (size_t near = k == 0 ? 0 : k - 1; near <= k + 1 && near < diff.size(); ++near) {
      shown[near] = true;
    }
  }
  std::vector<std::string> out;
  for (size_t k = 0; k < diff.size(); ++k) {
    if (!shown[k]) continue;
    if (!out.empty() && !shown[k - 1]) out.push_back("  ...");
    const auto& [mark, line] = diff[k];
    out.push_back(absl::StartsWith(line, " ") ? mark + line.substr(1) : mark + line);
  }
  return out;
}

struct Shown {
  std::string text;
  std::optional<cuir::Program> program;
};

Shown Show(const GoldenBases& bases, const GoldenVariant& v, bool whole_program) {
  const cuir::Program& base = v.backward ? bases.backward : bases.forward;
  absl::StatusOr<TransferResult> r = Transfer(base, v.spec, v.config);
  if (!r.ok()) {
    return {absl::StrCat("error: ", absl::StatusCodeToString(r.status().code()), ": ",
                         r.status().message()),
            std::nullopt};
  }
  std::vector<std::string> names;
  for (const AppliedRule& a : r->applied) names.push_back(a.name);
  std::vector<std::string> lines = {
      absl::StrCat("applied: ", names.empty() ? "none" : absl::StrJoin(names, ", "))};
  for (std::string& line : whole_program ? Lines(cuir::PrintProgram(r->program))
                                         : ChangedLines(base, r->program)) {
    lines.push_back(std::move(line));
  }
  return {absl::StrJoin(lines, "\n"), std::move(r->program)};
}

}  // namespace

absl::StatusOr<GoldenBases> ReadGoldenBases(const std::string& experts_dir) {
  GoldenBases bases;
  for (const auto& [name, program] : {std::pair{kGoldenBase, &bases.forward},
                                      std::pair{kGoldenBackwardBase, &bases.backward}}) {
    const std::string path = absl::StrCat(experts_dir, "/", name);
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
    absl::StatusOr<cuir::Program> parsed = cuir::ParseProgram(text.str(), name);
    if (!parsed.ok()) return parsed.status();
    *program = *std::move(parsed);
  }
  return bases;
}

absl::StatusOr<GoldenVariant> ParseVariant(const std::vector<std::string>& items) {
  GoldenVariant v;
  for (size_t k = 0; k < items.size(); ++k) {
    const std::string item = Trim(items[k]);
    if (absl::Status s = ParseItem(item, static_cast<int>(k) + 1, &v); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("`", item, "`: ", s.message()));
    }
  }
  return v;
}

std::string ShowTransfer(const GoldenBases& bases, const GoldenVariant& variant,
                         bool whole_program) {
  return Show(bases, variant, whole_program).text;
}

absl::StatusOr<GoldenRun> RunGolden(absl::string_view text, absl::string_view file,
                                    const GoldenBases& bases) {
  GoldenRun run;
  const std::vector<std::string> rules = RuleNames();
  enum class State { kBetween, kInput, kOutput } state = State::kBetween;
  GoldenCase open;
  std::vector<std::string> items;
  std::vector<int> item_lines;  // in the file, for its messages
  std::vector<std::string> want;
  int n = 0;
  auto close = [&]() -> absl::Status {
    if (run.rule.empty()) return At(file, open.line, "no `# rule: NAME` line before the cases");
    if (want.empty()) return At(file, open.line, "an `out:` with nothing after it");
    for (size_t k = 0; k < items.size(); ++k) {
      if (absl::Status s = ParseItem(items[k], static_cast<int>(k) + 1, &open.variant); !s.ok()) {
        return At(file, item_lines[k], absl::StrCat("`", items[k], "`: ", s.message()));
      }
    }
    open.in = absl::StrJoin(items, "; ");
    open.want = absl::StrJoin(want, "\n");
    Shown shown = Show(bases, open.variant, /*whole_program=*/false);
    open.got = std::move(shown.text);
    open.program = std::move(shown.program);
    run.cases.push_back(std::move(open));
    open = GoldenCase{};
    items.clear();
    item_lines.clear();
    want.clear();
    state = State::kBetween;
    return absl::OkStatus();
  };
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++n;
    const std::string line = Trim(raw);
    if (state == State::kOutput) {
      // A diff line never starts with `#` or `in:`, so a missing blank line is forgiven.
      if (line.empty() || absl::StartsWith(raw, "#") || absl::StartsWith(raw, "in:")) {
        if (absl::Status s = close(); !s.ok()) return s;
      } else {
        want.push_back(std::string(absl::StripTrailingAsciiWhitespace(raw)));
        continue;
      }
    }
    if (line.empty()) continue;
    absl::string_view rest = line;
    if (absl::ConsumePrefix(&rest, "# rule:")) {
      if (!run.rule.empty()) return At(file, n, "a second `# rule:` line");
      run.rule = Trim(rest);
      if (std::find(rules.begin(), rules.end(), run.rule) == rules.end()) {
        return At(file, n, absl::StrCat("no rule named '", run.rule, "' (the rules are ",
                                        absl::StrJoin(rules, ", "), ")"));
      }
    } else if (absl::StartsWith(line, "#")) {
      continue;  // a comment
    } else if (absl::ConsumePrefix(&rest, "in:")) {
      if (state == State::kInput) return At(file, n, "an `in:` without the `out:` of the one before");
      state = State::kInput;
      open.line = n;
      if (!Trim(rest).empty()) {
        items.push_back(Trim(rest));
        item_lines.push_back(n);
      }
    } else if (absl::ConsumePrefix(&rest, "out:")) {
      if (state != State::kInput) return At(file, n, "an `out:` without its `in:`");
      if (items.empty()) return At(file, n, "an `in:` with no item");
      state = State::kOutput;
      if (!Trim(rest).empty()) {
        want.push_back(Trim(rest));
        if (absl::Status s = close(); !s.ok()) return s;
      }
    } else if (state == State::kInput) {
      items.push_back(line);
      item_lines.push_back(n);
    } else {
      return At(file, n, "expected `# rule:`, a comment, `in:` or `out:`");
    }
  }
  if (state == State::kInput) return At(file, open.line, "an `in:` without its `out:`");
  if (state == State::kOutput) {
    if (absl::Status s = close(); !s.ok()) return s;
  }
  if (run.rule.empty()) return At(file, 1, "no `# rule: NAME` line");
  return run;
}

}  // namespace cubridge::transfer
