// A lowered backward kernel (issue 29) loaded into the current CUDA context and launched the way
// its own nvcc launcher does (kernel_bwd.cu): the plan kernel says what one call enqueues
// (cubridge_attn_bwd_launch_plan, cuir/experts/common/backward_abi.cuh), then preprocess, the
// block tables (if any), attention and postprocess run on the given stream.
#pragma once

#include "absl/status/statusor.h"
#include "cuir/experts/common/backward_abi.cuh"
#include "worker/gpu/driver.h"
#include "worker/gpu/module.h"
#include "worker/gpu/nvrtc.h"

namespace cubridge::gpu {

using BwdParams = ::cubridge_attn_bwd_params;
using BwdLaunchPlan = ::cubridge_attn_bwd_launch_plan;

// The device entry points every backward kernel declares (`@cuir-entry ROLE`): plan, preprocess,
// attention, postprocess; classify and compact where its program has block tables.
inline constexpr const char* kBackwardRoles[] = {"plan",      "classify",   "compact",
                                                 "preprocess", "attention", "postprocess"};

// Checks a plan read back from the plan kernel: its version (FAILED_PRECONDITION for one the
// loader does not know), its status (INVALID_ARGUMENT when the kernel refuses the parameters)
// and its launch shape (INVALID_ARGUMENT naming the field: a zero grid or thread count).
absl::Status CheckBackwardPlan(const BwdLaunchPlan& plan);

class BackwardModule {
 public:
  // `module` was compiled with the expressions of EntryExpressions(entries, dtype, head_dim).
  static absl::StatusOr<BackwardModule> Load(const CompiledModule& module,
                                             const EntryPoints& entries, int dtype, int head_dim);
  BackwardModule(BackwardModule&&) noexcept;
  BackwardModule& operator=(BackwardModule&&) = delete;
  ~BackwardModule();

  // Runs the plan kernel for these parameters (their workspace is not read) and waits for it.
  // `scratch`: sizeof(BwdLaunchPlan) bytes of device memory.
  absl::StatusOr<BwdLaunchPlan> Plan(const BwdParams& p, CUdeviceptr scratch) const;
  // Enqueues one call on `stream`; does not wait. INVALID_ARGUMENT when the workspace is smaller
  // than the plan's or the plan asks for block-table kernels the module lacks. The learnable
  // buffers' gradients (p.buffer_grads) are added into: the caller zero-fills them.
  absl::Status Enqueue(const BwdParams& p, const BwdLaunchPlan& plan, CUstream stream) const;
  // Enqueues the block-table kernels alone, writing the plan's tables (the workspace's bytes
  // from tables_offset) at `tables`, as KernelModule::EnqueueTables does for the forward.
  absl::Status EnqueueTables(const BwdParams& p, const BwdLaunchPlan& plan, void* tables,
                             CUstream stream) const;

  int registers() const { return registers_; }  // of the attention kernel
  int local_bytes() const { return local_bytes_; }

 private:
  BackwardModule() = default;
  // Launches role `role`'s kernel (kBackwardRoles) on `stream`, its failure named by the role.
  absl::Status Launch(int role, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z,
                      uint32_t threads, uint32_t smem, void** args, CUstream stream) const;
  const Driver* cu_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction fn_[6] = {};  // by kBackwardRoles
  int head_dim_ = 0, dtype_ = 0;
  int registers_ = 0, local_bytes_ = 0;
};

}  // namespace cubridge::gpu
