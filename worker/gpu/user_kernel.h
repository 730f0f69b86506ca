// A user's own CUDA attention kernel, as `cubridge-cli lift` runs it: the source with the launcher
// ABI put in front (cuir/experts/common/launch_abi.cuh), its `// @cuir-entry` points, and the
// comparison of the compiled kernel with the interpreter running a proposed base program.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "cuir/lower/lower.h"
#include "cuir/propose/llm_lifter.h"
#include "worker/gpu/autotune.h"

namespace cubridge::gpu {

// The kernel as a loadable unit. INVALID_ARGUMENT naming `path` when the plan or attention entry
// point is not declared; the compiler later reports errors at the file's own line numbers.
absl::StatusOr<lower::LoweredKernel> LoadUserKernel(const std::string& path,
                                                    const std::string& source);

class UserKernelComparator : public propose::KernelComparator {
 public:
  // `tuner` outlives this; `config` is the job's shape (the comparison varies batch and seqlens).
  UserKernelComparator(GpuAutotuner* tuner, lower::LoweredKernel kernel, std::string path,
                       cuir::AttentionConfig config, lower::Arch arch);
  absl::Status Prepare() override;
  std::string device() const override { return device_; }
  absl::StatusOr<nlohmann::json> Compare(const cuir::Program& program, uint64_t seed) override;

 private:
  GpuAutotuner* tuner_;
  lower::LoweredKernel kernel_;
  std::string path_, device_;
  cuir::AttentionConfig config_;
  lower::Arch arch_;
  int compares_ = 0;
};

}  // namespace cubridge::gpu
