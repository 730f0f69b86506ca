// Annotated expert source: the text of an expert kernel split at its region markers
//
//   // @cuir-region NAME
//   ...the code implementing CuIR construct NAME...
//   // @cuir-end NAME
//
// Markers sit on their own lines; regions do not nest and each name occurs once.
#pragma once

#include <map>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace cubridge::lower {

struct Region {
  std::string name;
  int begin_line = 0;  // 0-based index of the `@cuir-region` marker line
  int end_line = 0;    // 0-based index of the `@cuir-end` marker line
  std::string indent;  // leading whitespace of the begin marker; generated code gets the same
};

struct AnnotatedSource {
  std::string filename;  // for messages
  std::vector<std::string> lines;
  std::vector<Region> regions;  // in source order

  const Region* Find(absl::string_view name) const;
  // The text between the markers of `region` (one line each, '\n'-terminated).
  std::string Body(const Region& region) const;
};

// Errors (INVALID_ARGUMENT, "file:line: ..."): a malformed marker, nesting, an end that does not
// match the open region, a duplicate name, a region left open at the end of the file.
absl::StatusOr<AnnotatedSource> ParseRegions(absl::string_view text,
                                             absl::string_view filename);

// The source with the bodies of the named regions replaced (markers kept, replacement lines
// indented like the begin marker); every other line verbatim.
std::string RenderRegions(const AnnotatedSource& src,
                          const std::map<std::string, std::string>& replacements);

// The regions an expert may mark, each with the CuIR construct the lowering generates into it:
// one table, read by the lift (which names an expert may declare) and the lowering (what it
// cannot place where an expert lacks the region); docs/lowering.md tells each one's story.
struct RegionKind {
  const char* name;
  const char* construct;  // for messages
};
const std::vector<RegionKind>& RegionKinds();
// The construct of a region kind, or the name where it is not one of RegionKinds().
std::string RegionConstruct(const std::string& name);

}  // namespace cubridge::lower
