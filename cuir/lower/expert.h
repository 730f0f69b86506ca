// Expert kernels on disk: CUBRIDGE_EXPERTS_DIR/<name>/base.cuir (the lifted program) and
// kernel.cu (the annotated CUDA source), plus any files kernel.cu includes with quotes; an
// expert's backward is base_bwd.cuir and kernel_bwd.cu beside them.
#pragma once

#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "cuir/ir/program.h"
#include "cuir/lower/regions.h"

namespace cubridge::lower {

struct Expert {
  std::string name;
  bool backward = false;  // base_bwd.cuir and kernel_bwd.cu
  std::string dir;
  cuir::Program base;
  AnnotatedSource source;                 // kernel.cu split at its regions
  std::set<std::string> code_identifiers;  // of kernel.cu and what it includes
};

// $CUBRIDGE_EXPERTS_DIR when set, else the source tree's cuir/experts.
std::string ExpertsDir();

// NOT_FOUND when the expert or one of its files is missing; INVALID_ARGUMENT for a malformed name,
// base program or region marker.
absl::StatusOr<Expert> LoadExpert(const std::string& name, bool backward = false);

// Replaces each `#include "FILE"` whose FILE exists relative to `dir` (inside the experts
// directory) by that file's text, once per file, recursively, so a lowered kernel is one
// self-contained translation unit. Other includes stay.
absl::StatusOr<std::string> InlineLocalIncludes(const std::string& text, const std::string& dir);

}  // namespace cubridge::lower
