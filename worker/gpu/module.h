// A compiled lowered kernel loaded into the current CUDA context, launched the way the kernel's
// own host launcher does (kernel.cu, built by nvcc): its plan kernel says what one call
// enqueues, then the table kernels (if any) and the attention kernel run on the given stream.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "worker/gpu/abi.h"
#include "worker/gpu/driver.h"
#include "worker/gpu/nvrtc.h"

namespace cubridge::gpu {

// Device entry points of a lowered kernel, by role: plan, classify, compact, attention (see the
// `@cuir-entry` lines of the expert source). `attention` is a template naming {T} and {D}.
using EntryPoints = std::map<std::string, std::string>;

// The name expressions to compile for one (dtype, head_dim): NVRTC instantiates only these.
std::map<std::string, std::string> EntryExpressions(const EntryPoints& entries, int dtype,
                                                    int head_dim);

class KernelModule {
 public:
  // `module` was compiled with the expressions of EntryExpressions(entries, dtype, head_dim).
  static absl::StatusOr<KernelModule> Load(const CompiledModule& module,
                                           const EntryPoints& entries, int dtype, int head_dim);
  KernelModule(KernelModule&&) noexcept;
  KernelModule& operator=(KernelModule&&) = delete;
  ~KernelModule();

  // Runs the plan kernel for these parameters and waits for it. `scratch` is 256 bytes of device
  // memory for the plan. INVALID_ARGUMENT when the kernel refuses the parameters.
  absl::StatusOr<LaunchPlan> Plan(const AttnParams& p, CUdeviceptr scratch) const;
  // Enqueues one call (tables, then attention) on `stream`. Does not wait.
  absl::Status Enqueue(const AttnParams& p, const LaunchPlan& plan, CUstream stream) const;

  int registers() const { return registers_; }
  int local_bytes() const { return local_bytes_; }  // spills and stack per thread

 private:
  KernelModule() = default;
  const Driver* cu_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction plan_ = nullptr, classify_ = nullptr, compact_ = nullptr, attention_ = nullptr;
  int head_dim_ = 0, dtype_ = 0;
  int registers_ = 0, local_bytes_ = 0;
};

}  // namespace cubridge::gpu
