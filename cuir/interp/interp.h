// Executes a CuIR program tile by tile on LibTorch tensors with kernel numerics:
// bf16/fp16 inputs, fp32 accumulation, P rounded to the input dtype before P V, fp32 softmax
// statistics. Orchestration bugs (a wrong KV range, a skipped block that was not empty, a
// wrong head mapping) show up here, before any CUDA exists.
#pragma once

#include "absl/status/statusor.h"
#include "cuir/interp/tensor_eval.h"
#include "cuir/ir/program.h"
#include "cuir/spec/tensors.h"

namespace cubridge::interp {

struct InterpStats {
  int64_t programs = 0;        // grid points executed
  int64_t blocks_visited = 0;  // loop blocks entered (KV blocks; query blocks in a backward)
  int64_t blocks_masked = 0;   // of which ran the mask predicate (partial blocks)
};

// Runs `program` (validated first) for the config. Outputs: O in the config dtype, LSE fp32.
// Errors (INVALID_ARGUMENT / OUT_OF_RANGE) name the statement's line:col, e.g. a buffer index
// out of bounds or a load outside the tensor.
absl::StatusOr<spec::AttentionOutputs> Interpret(const cuir::Program& program,
                                                 const cuir::AttentionConfig& config,
                                                 const spec::AttentionInputs& inputs,
                                                 InterpStats* stats = nullptr);

// Runs a backward program (cuir::IsBackward): dQ, dK, dV in the config dtype from the forward's
// O and LSE and the loss's gradient dO, with kernel numerics (P and dS rounded to the input dtype
// before their products, fp32 accumulation), and the fp32 gradient of every buffer the program
// has a `buffer_grad` for. A forward program is refused, as Interpret refuses a backward one.
absl::StatusOr<spec::AttentionGrads> InterpretBackward(const cuir::Program& program,
                                                       const cuir::AttentionConfig& config,
                                                       const spec::AttentionInputs& inputs,
                                                       const spec::BackwardInputs& backward,
                                                       InterpStats* stats = nullptr);

// Evaluates an expression elementwise on tensors: variables bound to tensors (broadcasting) or
// scalars. Int math in int64, float math in fp32 (kernel numerics) unless `float64` is set.
struct TensorEnv;  // defined in cuir/interp/tensor_eval.h
absl::StatusOr<at::Tensor> EvalTensor(const cuir::ExprPtr& e, const TensorEnv& env);

}  // namespace cubridge::interp
