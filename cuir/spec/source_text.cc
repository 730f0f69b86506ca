// Positions and TorchScript error text: how the spec frontend says file:line:col.
#include <algorithm>
#include <regex>

#include <c10/core/DefaultDtype.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cuir/spec/internal.h"

namespace cubridge::spec::internal {

const std::vector<std::string>& CanonicalArgs(bool is_score) {
  static const std::vector<std::string> mask = {"b", "h", "q_idx", "kv_idx"};
  static const std::vector<std::string> score = {"score", "b", "h", "q_idx", "kv_idx"};
  return is_score ? score : mask;
}

std::string SignatureText(bool is_score) {
  return absl::StrCat("(", absl::StrJoin(CanonicalArgs(is_score), ", "), ")");
}

cuir::SourceLoc SourceText::LocAt(size_t offset) const {
  offset = std::min(offset, text.size());
  const auto begin = text.begin();
  const int line = 1 + static_cast<int>(std::count(begin, begin + offset, '\n'));
  const size_t newline = offset == 0 ? std::string::npos : text.rfind('\n', offset - 1);
  const size_t col0 = newline == std::string::npos ? offset : offset - newline - 1;
  return cuir::SourceLoc{path, line, static_cast<int>(col0) + 1};
}

std::optional<cuir::SourceLoc> SourceText::LocOf(const torch::jit::SourceRange& r) const {
  if (r.source() == nullptr || r.source().get() != source.get()) return std::nullopt;
  return LocAt(r.start());
}

absl::Status ErrorAt(const cuir::SourceLoc& loc, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(loc.ToString(), ": ", message));
}

namespace {

// The column of a `~~~ <--- HERE` marker line, 1-based; 0 when `line` is not one.
int MarkerColumn(const std::string& line) {
  if (line.find("<--- HERE") == std::string::npos) return 0;
  const size_t tilde = line.find('~');
  return tilde == std::string::npos ? 0 : static_cast<int>(tilde) + 1;
}

bool IsErrorLine(const std::string& line) {
  static const std::regex kError(R"(^\s*[A-Za-z_.]*(Error|Exception): .*)");
  return std::regex_match(line, kError);
}

}  // namespace

TorchScriptError ParseTorchScriptError(const std::string& what, bool innermost_last) {
  static const std::regex kFrame(R"re(^\s*File "(.*)", line (\d+).*$)re");
  const std::vector<std::string> lines = absl::StrSplit(what, '\n');
  struct Frame {
    int line = 0, col = 0;
  };
  std::vector<Frame> frames;
  std::vector<std::string> headline;
  std::string error_line;
  for (const std::string& l : lines) {
    std::smatch m;
    if (std::regex_match(l, m, kFrame)) {
      frames.push_back({std::stoi(m[2].str()), 0});
    } else if (int col = MarkerColumn(l); col > 0 && !frames.empty() && frames.back().col == 0) {
      frames.back().col = col;
    } else if (IsErrorLine(l)) {
      error_line = std::string(absl::StripAsciiWhitespace(l));
    } else if (frames.empty() && !absl::StripAsciiWhitespace(l).empty()) {
      headline.emplace_back(absl::StripAsciiWhitespace(l));
    }
  }
  TorchScriptError out;
  if (innermost_last && !error_line.empty()) {
    // "RuntimeError: what happened" is the useful part of an interpreter traceback.
    const size_t colon = error_line.find(": ");
    out.headline = error_line.substr(colon + 2);
  } else {
    out.headline = absl::StrJoin(headline, " ");
  }
  // Overload mismatches end with "The original call is:", which the position replaces.
  const size_t original_call = out.headline.find(" The original call is");
  if (original_call != std::string::npos) out.headline.resize(original_call);
  if (out.headline.empty()) out.headline = std::string(absl::StripAsciiWhitespace(what));
  while (!out.headline.empty() && (out.headline.back() == ':' || out.headline.back() == ' ')) {
    out.headline.pop_back();
  }
  if (!frames.empty()) {
    const Frame& f = innermost_last ? frames.back() : frames.front();
    out.line = f.line;
    out.col = f.col;
  }
  return out;
}

DefaultDoubleGuard::DefaultDoubleGuard() : saved_(c10::get_default_dtype()) {
  c10::set_default_dtype(caffe2::TypeMeta::Make<double>());
}

DefaultDoubleGuard::~DefaultDoubleGuard() { c10::set_default_dtype(saved_); }

}  // namespace cubridge::spec::internal
