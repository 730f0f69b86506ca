// Reference-guided lowering: CuIR -> CUDA C++.
//
// The expert kernel's source is annotated with regions (`// @cuir-region NAME` ...
// `// @cuir-end NAME`) naming the CuIR construct each implements. Lowering copies a region from
// the expert source when its construct is unchanged and generates it when the transfer changed it
// (mask predicate on partial blocks, score_mod, KV block bounds, block-table lookup, extra kernel
// parameters). See docs/lowering.md.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuir/ir/config.h"
#include "cuir/ir/program.h"

namespace cubridge::lower {

enum class Arch { kSm80, kSm90 };
absl::StatusOr<Arch> ParseArch(const std::string& s);  // "sm_80" | "sm_90" (clear error otherwise)
const char* ArchName(Arch a);                          // "sm_80" / "sm_90"

// One captured tensor of the launcher: params.buffers[slot] must hold it.
struct LoweredBuffer {
  std::string name;                  // the spec's name
  std::string dtype;                 // cuir::TensorDTypeName: int32, float32, bfloat16, ...
  std::vector<std::string> extents;  // per dimension, the least size as CuIR prints it
                                     // (`heads_q`, `max(seqlen_q, seqlen_kv)`, `32`), or "?"
                                     // where the reach depends on data
};

struct LoweredKernel {
  std::string cuda_source;     // kernel.cu: complete translation unit
  std::string launcher_header; // kernel.h: plain C entry point declaration + params struct
  std::string entry_point;     // extern "C" launcher name
  // Device entry points by role (plan, classify, compact, attention) for a run-time loader of
  // the NVRTC-compiled source (worker/gpu); `attention` names {T} and {D} template arguments.
  std::map<std::string, std::string> device_entries;
  // The compile target: the arch lowered for, or its arch-specific form ("sm_90a") when the
  // expert declares one (`// @cuir-arch sm_90a`: it uses wgmma / setmaxnreg), so nvcc builds it
  // with -gencode arch=compute_90a,code=sm_90a.
  std::string target;
  std::string expert;                          // the expert it was lowered from
  std::vector<std::string> generated_regions;  // regions generated (changed by the transfer)
  std::vector<std::string> copied_regions;     // regions copied verbatim from the expert
  std::vector<LoweredBuffer> buffers;          // params.buffers[i], in slot order
};

// The `// @cuir-entry ROLE NAME` lines of a kernel source: its device entry points by role.
std::map<std::string, std::string> DeviceEntries(const std::string& source);

// nvcc's -gencode flags for a target ("sm_80", "sm_90", "sm_90a").
std::string NvccGencode(const std::string& target);

absl::StatusOr<LoweredKernel> Lower(const cuir::Program& program,
                                    const cuir::AttentionConfig& config, Arch arch);

}  // namespace cubridge::lower
