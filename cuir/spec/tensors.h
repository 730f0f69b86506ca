// Tensors of one attention problem: inputs, buffer values and outputs, shared by the oracle,
// the interpreter and the verifiers.
#pragma once

#include <map>
#include <optional>
#include <string>

// The Tensor type only (4.7 s a file at -O2 -g where <torch/torch.h> took 32.6 s, bench/NOTES.md
// session 21): a .cc that makes or computes with tensors includes <torch/types.h> (torch::zeros,
// ...) or <torch/torch.h> itself.
#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "cuir/ir/config.h"
#include "cuir/ir/tensor_value.h"
#include "cuir/spec/spec.h"

namespace cubridge::spec {

struct AttentionInputs {
  at::Tensor q;                               // [batch, heads_q, seqlen_q, head_dim], config dtype
  at::Tensor k;                               // [batch, heads_kv, seqlen_kv, head_dim]
  at::Tensor v;                               // [batch, heads_kv, seqlen_kv, head_dim]
  std::map<std::string, at::Tensor> buffers;  // name -> the captured tensor (its dtype, shape)
};

struct AttentionOutputs {
  at::Tensor o;    // [batch, heads_q, seqlen_q, head_dim]
  at::Tensor lse;  // [batch, heads_q, seqlen_q], natural log; -inf for fully masked rows;
                   // undefined from the oracle of a reference spec that returns O only
};

// The backward pass's inputs beyond the forward's: the forward's outputs and the gradient of the
// loss with respect to O.
struct BackwardInputs {
  at::Tensor o;       // [batch, heads_q, seqlen_q, head_dim], config dtype
  at::Tensor lse;     // [batch, heads_q, seqlen_q], fp32
  at::Tensor grad_o;  // [batch, heads_q, seqlen_q, head_dim], config dtype
};

// The gradients: dQ, dK, dV in the inputs' shapes (dK and dV summed over each kv head's query
// group) and, per captured tensor asked for, its gradient in the tensor's shape.
struct AttentionGrads {
  at::Tensor dq, dk, dv;
  std::map<std::string, at::Tensor> buffers;
  // The interpreter's only: per element of each buffer gradient, the scale of its rounding
  // error, sum P * (|dP| + sum_d |dO * O|) * |partial| over what was added into it (dS =
  // P * (dP - D) is only as exact as dP and D = sum_d dO * O, from the stored O, are, and a sum with cancellation, as a learned slope's over rows
  // whose dS sum to 0, only as exact as its terms). Its verification compares against it.
  std::map<std::string, at::Tensor> buffer_masses;
};

// How a job provides a captured tensor's values:
//   random                  int32; 1-D: a few random documents (sorted ids); else uniform ints
//   random:DTYPE            DTYPE (int32 int64 bool float32 bfloat16 float16), shaped to what the
//                           spec's indexing reaches at the job's sizes
//   random:DTYPE[D0,D1,..]  that shape
//   lengths:A,B,C           int32 document ids: 0 A times, 1 B times, ...
//   values:1,2,3            int32, exactly these
//   file:PATH               int32 from a text file of integers (whitespace or commas)
//   tensor:PATH             a tensor saved with torch.save (its dtype and shape)
// Random floats are standard normal, bools fair coins, ints uniform in
// [0, max(seqlen_q, seqlen_kv)]; all seeded.
// Or by value (`value` set, `spec` unused): the dtype, shape and bytes the service carries
// (proto TensorValue), taken as they are, like a tensor file.
struct BufferSource {
  BufferSource() = default;
  BufferSource(std::string source) : spec(std::move(source)) {}  // NOLINT: a source is its string

  std::string spec = "random";
  std::optional<cuir::TensorValue> value;

  static BufferSource Of(cuir::TensorValue v);
  // How messages name the source: `spec`, or "float32[4, 8] value".
  std::string Text() const;
};

// The dtype each source gives; a source that names none (random, lengths, values, file) gives
// int32. Tensor files are read for theirs. Errors name the buffer and the source.
absl::StatusOr<BufferDTypes> BufferDTypesOf(const std::map<std::string, BufferSource>& sources);

// Fresh random q/k/v (normal, in the config dtype, on CPU) and the captured tensors. A tensor
// must have the spec's dtype and rank and at least the sizes its indexing reaches at this
// config (BufferExtents); errors say which and how to fix.
absl::StatusOr<AttentionInputs> MakeInputs(const Spec& spec, const cuir::AttentionConfig& config,
                                           const std::map<std::string, BufferSource>& sources,
                                           uint64_t seed);

// The job's buffer sources read and checked against the spec at `config` (names, dtypes, ranks,
// sizes), without q/k/v: what a cached kernel needs before it serves the job.
absl::Status CheckBufferSources(const Spec& spec, const cuir::AttentionConfig& config,
                                const std::map<std::string, BufferSource>& sources);

// The names of every source and the buffers given by value checked against the spec at `config`
// from their dtype and shape alone (their bytes are not read and may be absent), with the
// messages MakeInputs gives: what the coordinator's spec check can say before it accepts a job.
absl::Status CheckBufferValueShapes(const Spec& spec, const cuir::AttentionConfig& config,
                                    const std::map<std::string, BufferSource>& sources);

// The least shape of buffer `b` at `config`: BufferExtents evaluated, -1 where it depends on
// data.
std::vector<int64_t> RequiredBufferShape(const Spec& spec, const SpecBuffer& b,
                                         const cuir::AttentionConfig& config);

// The job's sources where `shape` is the job's own (batch and sequence lengths: values given for
// one shape need not fit another), else random values of each buffer's dtype.
std::map<std::string, BufferSource> SourcesForShape(
    const Spec& spec, const std::map<std::string, BufferSource>& job_sources,
    const cuir::AttentionConfig& job, const cuir::AttentionConfig& shape);

at::ScalarType TorchDType(cuir::TensorDType d);
std::optional<cuir::TensorDType> TensorDTypeOf(at::ScalarType t);

}  // namespace cubridge::spec
