#include "cuir/lower/rewrites/rewrites.h"

namespace cubridge::lower {

using cuir::ExprPtr;

// Rewrite "divide by invariant": a / b, with b the same for the whole block (score / cap in
// softcapping), becomes a * (1 / b), whose reciprocal the hoisting then computes once per block.
// An IEEE division per element costs a reciprocal, a Newton step and a slow-path check; the
// product differs from it by at most an ulp or so, far inside the verified tolerance.
ExprPtr ReciprocalOfInvariantDivisors(const ExprPtr& e) {
  if (e->args.empty()) return e;
  auto copy = std::make_shared<cuir::Expr>(*e);
  for (ExprPtr& arg : copy->args) arg = ReciprocalOfInvariantDivisors(arg);
  if (copy->kind == cuir::ExprKind::kBinary && copy->binary_op == cuir::BinaryOp::kDiv &&
      LevelOf(copy->args[0]) != Level::kBlock && LevelOf(copy->args[1]) == Level::kBlock) {
    return cuir::Binary(cuir::BinaryOp::kMul, copy->args[0],
                        cuir::Binary(cuir::BinaryOp::kDiv, cuir::FloatLit(1.0, e->loc),
                                     copy->args[1], e->loc),
                        e->loc);
  }
  return ExprPtr(copy);
}

}  // namespace cubridge::lower
