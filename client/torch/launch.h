// What the op's CUDA kernel hands the launcher ABI for one call, exposed for the benchmark that
// compares the op with the bare launcher (bench/torch_overhead.cc): one fill, not two.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "client/torch/kernel.h"
#include "worker/gpu/module.h"

namespace cubridge::torch_op {

// The call's parameters over q, k, v, the outputs o and lse, and the captured tensors, already in
// the launcher's layout (unit stride innermost unless that size is 1).
gpu::AttnParams CallParams(const KernelInfo& kn, const at::Tensor& q, const at::Tensor& k,
                           const at::Tensor& v, const at::Tensor& o, const at::Tensor& lse,
                           const std::vector<at::Tensor>& buffers, double scale);

}  // namespace cubridge::torch_op
