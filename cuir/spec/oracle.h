// The ground truth: the user's own compiled spec evaluated densely, in float64 on the CPU (the
// CPU verifier) or in float32 on a GPU (the GPU verifier, where float64 would be slow).
#pragma once

#include "absl/status/statusor.h"
#include "cuir/spec/tensors.h"

namespace cubridge::spec {

// softmax(score_mod(Q K^T * scale) masked by mask_mod) V, in float64, via the TorchScript
// functions themselves (not the CuIR translation: the two paths check each other).
// Fully masked rows give O = 0 and LSE = -inf. Outputs are float64.
struct OracleOptions {
  torch::Device device = torch::kCPU;
  torch::ScalarType dtype = torch::kFloat64;
};
absl::StatusOr<AttentionOutputs> RunOracle(const Spec& spec, const cuir::AttentionConfig& config,
                                           const AttentionInputs& inputs,
                                           const OracleOptions& options = {});

// The dense mask [B or 1, H or 1, Sq, Skv] (bool) from the compiled mask_mod; all-true when the
// spec has none. Used by block-classification checks.
absl::StatusOr<torch::Tensor> DenseMask(const Spec& spec, const cuir::AttentionConfig& config,
                                        const AttentionInputs& inputs,
                                        torch::Device device = torch::kCPU);

}  // namespace cubridge::spec
