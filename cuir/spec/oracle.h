// The ground truth: the user's own compiled spec evaluated densely, in float64 on the CPU (the
// CPU verifier) or in float32 on a GPU (the GPU verifier, where float64 would be slow).
#pragma once

#include <map>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "cuir/spec/tensors.h"

namespace cubridge::spec {

// softmax(score_mod(Q K^T * scale) masked by mask_mod) V, in float64, via the TorchScript
// functions themselves (not the CuIR translation: the two paths check each other).
// Fully masked rows give O = 0 and LSE = -inf. Outputs are float64 (options.dtype).
//
// A reference spec instead calls reference(q, k, v, scale, params...) once on the whole problem
// (q, k, v converted to options' dtype and device). O is its result; LSE is the tuple's second
// element when it returns (O, LSE), and an UNDEFINED tensor when it returns O only: callers that
// compare LSE must check `lse.defined()` and report that LSE was not checked.
struct OracleOptions {
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kDouble;
};
absl::StatusOr<AttentionOutputs> RunOracle(const Spec& spec, const cuir::AttentionConfig& config,
                                           const AttentionInputs& inputs,
                                           const OracleOptions& options = {});

// The backward pass of the same function: float64 autograd of the spec itself (dense, chunked as
// RunOracle is, a reference spec through its reference function), for a loss whose gradient
// with respect to O is `grad_o` [batch, heads_q, seqlen_q, head_dim]. Gives dQ, dK and dV (the
// inputs' shapes, in options' dtype; dK and dV summed over each kv head's query group) and, for
// every captured tensor named in `grad_buffers` (each must be a floating one), its gradient in
// the tensor's shape: what a learnable bias table or slope vector would receive. Where a
// function is not differentiable (a mask's edge, clamp's bounds, an integer index), the gradient
// is autograd's (the one-sided value PyTorch training gets). Fully masked rows contribute
// nothing. Errors: shapes, and names that are no captured tensor or no floating one.
absl::StatusOr<AttentionGrads> RunBackwardOracle(const Spec& spec,
                                                 const cuir::AttentionConfig& config,
                                                 const AttentionInputs& inputs,
                                                 const at::Tensor& grad_o,
                                                 const std::set<std::string>& grad_buffers,
                                                 const OracleOptions& options = {});

// The dense mask [B or 1, H or 1, Sq, Skv] (bool) from the compiled mask_mod; all-true
// ([1, 1, Sq, Skv]) when the spec has none, a reference spec included (its masking, if any, is
// inside the function). Used by block-classification checks and throughput counts.
absl::StatusOr<at::Tensor> DenseMask(const Spec& spec, const cuir::AttentionConfig& config,
                                     const AttentionInputs& inputs, at::Device device = at::kCPU);

}  // namespace cubridge::spec
