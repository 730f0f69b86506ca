// A loaded backward kernel (backward_module.h) run on one call's inputs, as the GPU checks of the
// backward use it: adapt's GPU stage in the runner child (device_check.cc) and
// tests/gpu/backward_lowered_test.cc. Needs a CUDA LibTorch and the current context shared with
// it (UsePrimaryContext).
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "cuir/ir/config.h"
#include "cuir/pipeline/verify_backward.h"
#include "cuir/spec/tensors.h"
#include "worker/gpu/backward_module.h"

namespace cubridge::gpu {

// Device tensors of one backward call: q, k, v, o, d_o, dq, dk, dv as [batch, heads, rows,
// head dim], lse fp32 [batch, heads_q, rows]; `buffers` in the kernel's slot order and, per
// slot, the gradient to compute (undefined: none asked for); the workspace the plan asks for.
struct BackwardCallTensors {
  torch::Tensor q, k, v, o, lse, d_o, dq, dk, dv;
  std::vector<torch::Tensor> buffers, buffer_grads;
  torch::Tensor workspace;
};

// The kernel's params for these tensors (the ABI's strides and buffer descriptors);
// INVALID_ARGUMENT for more buffers than the ABI carries or a dtype it does not.
absl::StatusOr<BwdParams> MakeBackwardParams(const cuir::AttentionConfig& c,
                                             const BackwardCallTensors& t, bool deterministic);

// dQ, dK, dV (from NaN) and the gradients of the buffers in `learn` (the fast mode adds into
// zeros, the deterministic one writes them whole: they start as NaN there) of one call of `m` on
// device copies of `in` and `b`; `buffer_order` is the kernel's buffer slots. CPU tensors back.
absl::StatusOr<spec::AttentionGrads> RunBackwardOnGpu(const BackwardModule& m,
                                                      const cuir::AttentionConfig& c,
                                                      const spec::AttentionInputs& in,
                                                      const spec::BackwardInputs& b,
                                                      const std::vector<std::string>& buffer_order,
                                                      const std::vector<std::string>& learn,
                                                      bool deterministic);

// The kernel's runs a backward verification compares (pipeline::VerifyBackwardKernel): the fast
// mode, then the deterministic one twice, whose two runs must give the same bits.
pipeline::BackwardKernelRun FastAndDeterministicRuns(const BackwardModule& m,
                                                     std::vector<std::string> buffer_order,
                                                     std::vector<std::string> learn);

}  // namespace cubridge::gpu
