// Lift: an expert kernel's annotated source and the base CuIR program it claims to implement,
// checked against each other without a GPU. (On a GPU, worker/gpu also checks that the compiled
// expert and the interpreter running the base program agree on random inputs.)
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuir/ir/program.h"

namespace cubridge::lower {

struct LiftResult {
  cuir::Program base;
  std::vector<std::string> checks;  // what was checked, one line each
};

// Reads CUBRIDGE_EXPERTS_DIR/<expert>/{kernel.cu, base.cuir} and checks that: every region of
// kernel.cu is one the lowering knows; the `tile_params` region declares exactly the base
// program's int params with the same values; the launcher ABI region and the four device entry
// points (`@cuir-entry plan|classify|compact|attention`) are there; the base program validates.
// FAILED_PRECONDITION naming the file and what disagrees otherwise. `backward`: its
// base_bwd.cuir and kernel_bwd.cu instead, whose entry points add preprocess and postprocess
// (NOT_FOUND for an expert without a backward kernel).
absl::StatusOr<LiftResult> LiftExpert(const std::string& expert, bool backward = false);

// A user's own kernel (`cubridge-cli lift`, a lift job): its `// @cuir-entry` points, which must be
// exactly plan and attention (cuir/experts/common/launch_abi.cuh). INVALID_ARGUMENT naming `path`.
absl::StatusOr<std::map<std::string, std::string>> UserKernelEntries(const std::string& path,
                                                                     const std::string& source);
// The expert name a lifted kernel gets by default: its file's stem as a CuIR identifier
// ("my-attn.v2.cu" -> "my_attn_v2").
std::string KernelNameFromPath(const std::string& path);

// `program`, transferred from the base program `from` (one expert's), moved onto the base `to` of
// another expert: experts whose bases differ only in their declarations (expert, params, roles,
// grid) and their KV loop's `split` run the same body, so the transferred body is kept and the
// declarations and the loop's `split` become `to`'s. The service transfers once per spec and
// lowers the result for every arch's expert this way. FAILED_PRECONDITION when the bodies of the
// two bases differ, or when the program changed a declaration of `from` other than a param's
// value, or its loop's `split` (`to`'s would silently undo it).
absl::StatusOr<cuir::Program> Rebase(const cuir::Program& program, const cuir::Program& from,
                                     const cuir::Program& to);

// Region names the lowering places code into (regions.h; docs/lowering.md).
const std::vector<std::string>& KnownRegions();

}  // namespace cubridge::lower
