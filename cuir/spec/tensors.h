// Tensors of one attention problem: inputs, buffer values and outputs, shared by the oracle,
// the interpreter and the verifiers.
#pragma once

#include <map>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "cuir/ir/config.h"
#include "cuir/spec/spec.h"

namespace cubridge::spec {

struct AttentionInputs {
  torch::Tensor q;  // [batch, heads_q, seqlen_q, head_dim], config dtype
  torch::Tensor k;  // [batch, heads_kv, seqlen_kv, head_dim]
  torch::Tensor v;  // [batch, heads_kv, seqlen_kv, head_dim]
  std::map<std::string, torch::Tensor> buffers;  // name -> 1-D int64
};

struct AttentionOutputs {
  torch::Tensor o;    // [batch, heads_q, seqlen_q, head_dim]
  torch::Tensor lse;  // [batch, heads_q, seqlen_q], natural log; -inf for fully masked rows;
                      // undefined from the oracle of a reference spec that returns O only
};

// How a buffer's values are provided by a job: "file:PATH" (whitespace-separated integers),
// "lengths:A,B,C" (document lengths -> ids 0,0,..,1,1,..), "values:1,2,3", or "random"
// (random documents: sorted ids with random lengths, seeded).
struct BufferSource {
  std::string spec = "random";
};

// Fresh random q/k/v (normal, in the config dtype, on CPU) and buffer values.
absl::StatusOr<AttentionInputs> MakeInputs(const Spec& spec, const cuir::AttentionConfig& config,
                                           const std::map<std::string, BufferSource>& sources,
                                           uint64_t seed);

// Length a buffer must have for the config: max of seqlen_q / seqlen_kv over its index uses.
int64_t RequiredBufferLength(const SpecBuffer& b, const cuir::AttentionConfig& config);

}  // namespace cubridge::spec
