#include "cuir/lower/expert.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cuir/files/files.h"
#include "cuir/lower/names.h"

#ifndef CUBRIDGE_EXPERTS_DIR
#define CUBRIDGE_EXPERTS_DIR "cuir/experts"
#endif

namespace cubridge::lower {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadExpertFile(const fs::path& path) {
  auto text = files::ReadFile(path.string());
  if (text.ok()) return text;
  return absl::Status(text.status().code(),
                      absl::StrCat(text.status().message(),
                                   " (is CUBRIDGE_EXPERTS_DIR set to the experts folder?)"));
}

bool ValidExpertName(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '_') return false;
  }
  return true;
}

// The FILE of a line `#include "FILE"`, or empty.
std::string QuotedInclude(absl::string_view line) {
  absl::string_view rest = absl::StripLeadingAsciiWhitespace(line);
  if (!absl::ConsumePrefix(&rest, "#")) return "";
  rest = absl::StripLeadingAsciiWhitespace(rest);
  if (!absl::ConsumePrefix(&rest, "include")) return "";
  rest = absl::StripAsciiWhitespace(rest);
  if (rest.size() < 2 || rest.front() != '"' || rest.back() != '"') return "";
  return std::string(rest.substr(1, rest.size() - 2));
}

absl::StatusOr<std::string> Inline(const std::string& text, const fs::path& dir,
                                   const fs::path& root, std::set<std::string>* seen) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const std::string file = QuotedInclude(line);
    const fs::path path = file.empty() ? fs::path() : fs::weakly_canonical(dir / file);
    const bool inside = !file.empty() && absl::StartsWith(path.string(), (root / "").string());
    if (!inside || !fs::exists(path)) {
      if (absl::StripTrailingAsciiWhitespace(line) != "#pragma once") absl::StrAppend(&out, line, "\n");
      continue;
    }
    if (!seen->insert(path.string()).second) continue;
    auto body = ReadExpertFile(path);
    if (!body.ok()) return body.status();
    auto inlined = Inline(*body, path.parent_path(), root, seen);
    if (!inlined.ok()) return inlined.status();
    absl::StrAppend(&out, "// ---- inlined from ", file, " ----\n", *inlined, "// ---- end of ",
                    file, " ----\n");
  }
  if (!out.empty() && !absl::EndsWith(text, "\n")) out.pop_back();
  return out;
}

}  // namespace

std::string ExpertsDir() {
  const char* env = std::getenv("CUBRIDGE_EXPERTS_DIR");
  return (env != nullptr && *env != '\0') ? std::string(env) : std::string(CUBRIDGE_EXPERTS_DIR);
}

absl::StatusOr<std::string> InlineLocalIncludes(const std::string& text, const std::string& dir) {
  std::set<std::string> seen;
  const fs::path root = fs::weakly_canonical(ExpertsDir());
  return Inline(text, fs::weakly_canonical(dir), root, &seen);
}

absl::StatusOr<Expert> LoadExpert(const std::string& name, bool backward) {
  if (!ValidExpertName(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert \"", name, "\" is not a valid expert name (letters, digits and '_' only)"));
  }
  Expert expert;
  expert.name = name;
  expert.backward = backward;
  expert.dir = (fs::path(ExpertsDir()) / name).string();
  if (!fs::is_directory(expert.dir)) {
    return absl::NotFoundError(absl::StrCat("expert \"", name, "\": no folder ", expert.dir,
                                            " (set CUBRIDGE_EXPERTS_DIR to the folder holding ",
                                            "the experts, e.g. <source>/cuir/experts)"));
  }
  const fs::path base_path = fs::path(expert.dir) / (backward ? "base_bwd.cuir" : "base.cuir");
  const fs::path kernel_path = fs::path(expert.dir) / (backward ? "kernel_bwd.cu" : "kernel.cu");
  if (backward && !(fs::exists(base_path) && fs::exists(kernel_path))) {
    return absl::NotFoundError(absl::StrCat(
        "expert \"", name, "\" has no backward kernel (no ",
        (fs::exists(base_path) ? kernel_path : base_path).string(),
        "); lower a backward program for an expert that has one (fa2_sm80, fa3_sm90)"));
  }
  auto base_text = ReadExpertFile(base_path);
  if (!base_text.ok()) return base_text.status();
  auto base = cuir::ParseProgram(*base_text, base_path.string());
  if (!base.ok()) return base.status();
  expert.base = *std::move(base);

  auto kernel_text = ReadExpertFile(kernel_path);
  if (!kernel_text.ok()) return kernel_text.status();
  auto source = ParseRegions(*kernel_text, kernel_path.string());
  if (!source.ok()) return source.status();
  expert.source = *std::move(source);
  auto whole = InlineLocalIncludes(*kernel_text, expert.dir);
  if (!whole.ok()) return whole.status();
  expert.code_identifiers = CodeIdentifiers(*whole);
  return expert;
}

}  // namespace cubridge::lower
