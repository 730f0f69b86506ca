// The ground truth: the user's own compiled spec evaluated densely in float64 on CPU.
#pragma once

#include "absl/status/statusor.h"
#include "cuir/spec/tensors.h"

namespace cubridge::spec {

// softmax(score_mod(Q K^T * scale) masked by mask_mod) V, in float64, via the TorchScript
// functions themselves (not the CuIR translation: the two paths check each other).
// Fully masked rows give O = 0 and LSE = -inf. Outputs are float64.
absl::StatusOr<AttentionOutputs> RunOracle(const Spec& spec, const cuir::AttentionConfig& config,
                                           const AttentionInputs& inputs);

// The dense mask [B or 1, H or 1, Sq, Skv] (bool) from the compiled mask_mod; all-true when the
// spec has none. Used by block-classification checks.
absl::StatusOr<torch::Tensor> DenseMask(const Spec& spec, const cuir::AttentionConfig& config,
                                        const AttentionInputs& inputs);

}  // namespace cubridge::spec
