// Generation of the expert regions whose CuIR construct the transfer changed.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "cuir/lower/expert.h"
#include "cuir/lower/plan.h"

namespace cubridge::lower {

// Region name -> replacement body, for exactly the regions that must be generated. Region names
// and what each implements are listed in docs/lowering.md.
absl::StatusOr<std::map<std::string, std::string>> GenerateRegions(const LoweringPlan& plan,
                                                                   const cuir::Program& base,
                                                                   const Expert& expert);

}  // namespace cubridge::lower
