#include "cuir/lower/regions.h"

#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace cubridge::lower {
namespace {

constexpr absl::string_view kBeginTag = "@cuir-region";
constexpr absl::string_view kEndTag = "@cuir-end";

struct Marker {
  bool begin = false;
  std::string name;
};

bool IsIdentifier(absl::string_view s) {
  if (s.empty() || absl::ascii_isdigit(s[0])) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(c) && c != '_') return false;
  }
  return true;
}

// Recognizes a marker line; a comment that mentions a tag but is not a well-formed marker is an
// error rather than silently ordinary code, so a typo cannot drop a region.
absl::StatusOr<std::optional<Marker>> ParseMarker(absl::string_view line, absl::string_view file,
                                                  int line_no) {
  absl::string_view rest = absl::StripLeadingAsciiWhitespace(line);
  if (!absl::ConsumePrefix(&rest, "//")) return std::nullopt;
  rest = absl::StripAsciiWhitespace(rest);
  Marker m;
  if (absl::ConsumePrefix(&rest, kBeginTag)) {
    m.begin = true;
  } else if (!absl::ConsumePrefix(&rest, kEndTag)) {
    return std::nullopt;
  }
  const absl::string_view name = absl::StripAsciiWhitespace(rest);
  if (!IsIdentifier(name) || rest.empty() || !absl::ascii_isspace(rest[0])) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s:%d: malformed region marker `%s`; write `// %s NAME` with NAME an identifier", file,
        line_no, absl::StripAsciiWhitespace(line), m.begin ? kBeginTag : kEndTag));
  }
  m.name = std::string(name);
  return m;
}

}  // namespace

const Region* AnnotatedSource::Find(absl::string_view name) const {
  for (const Region& r : regions) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

std::string AnnotatedSource::Body(const Region& region) const {
  std::string out;
  for (int i = region.begin_line + 1; i < region.end_line; ++i) absl::StrAppend(&out, lines[i], "\n");
  return out;
}

absl::StatusOr<AnnotatedSource> ParseRegions(absl::string_view text, absl::string_view filename) {
  AnnotatedSource src;
  src.filename = std::string(filename);
  src.lines = absl::StrSplit(text, '\n');
  if (!src.lines.empty() && src.lines.back().empty()) src.lines.pop_back();
  std::optional<Region> open;
  for (int i = 0; i < static_cast<int>(src.lines.size()); ++i) {
    auto marker = ParseMarker(src.lines[i], filename, i + 1);
    if (!marker.ok()) return marker.status();
    if (!marker->has_value()) continue;
    const Marker& m = **marker;
    if (m.begin) {
      if (open) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s:%d: region `%s` opens inside region `%s` (opened at line %d); regions do not "
            "nest, close `%s` first",
            filename, i + 1, m.name, open->name, open->begin_line + 1, open->name));
      }
      if (src.Find(m.name) != nullptr) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s:%d: region `%s` is defined twice (first at line %d); region names are unique",
            filename, i + 1, m.name, src.Find(m.name)->begin_line + 1));
      }
      const std::string& line = src.lines[i];
      open = Region{m.name, i, 0, line.substr(0, line.find_first_not_of(" \t"))};
      continue;
    }
    if (!open || open->name != m.name) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s:%d: `@cuir-end %s` does not close an open region%s", filename, i + 1, m.name,
          open ? absl::StrFormat(" (open: `%s` from line %d)", open->name, open->begin_line + 1)
               : std::string()));
    }
    open->end_line = i;
    src.regions.push_back(*open);
    open.reset();
  }
  if (open) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s:%d: region `%s` is never closed; add `// @cuir-end %s`", filename,
                        open->begin_line + 1, open->name, open->name));
  }
  return src;
}

std::string RenderRegions(const AnnotatedSource& src,
                          const std::map<std::string, std::string>& replacements) {
  std::string out;
  int next = 0;  // first line not yet written
  for (const Region& r : src.regions) {
    auto it = replacements.find(r.name);
    if (it == replacements.end()) continue;
    for (; next <= r.begin_line; ++next) absl::StrAppend(&out, src.lines[next], "\n");
    for (absl::string_view line : absl::StrSplit(it->second, '\n', absl::SkipEmpty())) {
      absl::StrAppend(&out, absl::StripTrailingAsciiWhitespace(line).empty() ? "" : r.indent,
                      absl::StripTrailingAsciiWhitespace(line), "\n");
    }
    next = r.end_line;
  }
  for (; next < static_cast<int>(src.lines.size()); ++next) {
    absl::StrAppend(&out, src.lines[next], "\n");
  }
  return out;
}

const std::vector<RegionKind>& RegionKinds() {
  static const std::vector<RegionKind> kRegions = {
      {"abi", "the launcher ABI"},
      {"tile_params", "changed params"},
      {"variant_consts", "const declarations"},
      {"table_kernel", "table declarations"},
      {"workspace", "table workspace and construction"},
      {"kv_walk", "whether every work tile walks the whole KV range"},
      {"head_check", "the head layouts a changed `let kv_h` serves"},
      {"buffer_check", "buffer declarations (length checks)"},
      {"variant_bind", "the kernel's buffer and table pointers"},
      {"head_map", "a changed `let kv_h`"},
      {"program_lets", "new top-level lets; score_mod values outside the KV walk"},
      {"kv_range", "changed KV loop bounds"},
      {"kv_loop", "a table-form KV loop"},
      {"block_class", "new lets in the KV loop"},
      {"qk_scale", "a changed qk scale"},
      {"score_mod", "score_mod statements"},
      {"mask", "mask statements"},
      {"epilogue_sink", "an `epilogue sink`"},
      {"epilogue_rows", "a score_mod's row terms, moved to the LSE"},
      {"tile_stream", "a captured tensor read per score, streamed tile by tile"},
      {"stream_coords", "that tensor's leading indices for a work tile"},
      {"q_range", "changed query-block bounds of a backward's walk"},
      {"q_loop", "a table-form (transposed) query-block walk of a backward"},
      {"keeps_raw_scores", "a backward's gradient statements (they read the raw scores)"},
      {"score_grad", "a `score_grad` statement"},
      {"buffer_grad", "`buffer_grad` statements"},
  };
  return kRegions;
}

std::string RegionConstruct(const std::string& name) {
  for (const RegionKind& r : RegionKinds()) {
    if (name == r.name) return r.construct;
  }
  return name;
}

}  // namespace cubridge::lower
