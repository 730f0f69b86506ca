// Symbolic derivatives of CuIR expressions: what the backward pass needs of a score_mod
// (issue 29). The backward of attention takes dS, the gradient with respect to the modified
// score, back through the score_mod: dS_raw = dS * d(score_mod)/d(score), and a learnable
// captured tensor gets dS * d(score_mod)/d(buf[i]) at each element i the score_mod reads.
//
// The rules are the calculus ones, written once per op in derivative.cc. Ops that are piecewise
// constant (floor, round, trunc, sign, integer arithmetic, comparisons, indices) have derivative
// 0, as PyTorch's autograd gives almost everywhere; min / max (clamp) and select (where) pass the
// derivative of the operand they chose, the left one at a tie (autograd splits a tie of min and
// max evenly; a tie of two floats is a measure-zero event for the scores). Integer-typed
// subexpressions are constants. The results are simplified as they are built (0 * x, x + 0, 1 * x)
// and folded, so that a term without the variable leaves no trace, and are float-typed.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuir/ir/eval.h"
#include "cuir/ir/expr.h"

namespace cubridge::cuir {

// d e / d var for a float variable `var` (the score). `env` types every name `e` reads (TypeOf),
// and its errors are the type checker's.
absl::StatusOr<ExprPtr> Differentiate(const ExprPtr& e, const std::string& var, const TypeEnv& env);

// One element of a captured tensor that `e` reads, and d e / d that element. Reads of the same
// element (structurally equal indices) are one entry with their partials summed.
struct BufferReadPartial {
  std::vector<ExprPtr> index;  // the read's index expressions (empty for a rank-0 tensor)
  ExprPtr partial;
};
// Every read of floating buffer `buffer` in `e` with its partial, in order of first appearance.
// INVALID_ARGUMENT when `buffer` is not floating in `env` (an integer tensor has no gradient).
absl::StatusOr<std::vector<BufferReadPartial>> DifferentiateBufferReads(const ExprPtr& e,
                                                                        const std::string& buffer,
                                                                        const TypeEnv& env);

}  // namespace cubridge::cuir
