#include "cuir/lower/rewrites/rewrites.h"

namespace cubridge::lower {

using cuir::ExprPtr;

// A sum's terms, shared by the rewrites that split sums (rewrites.h).
void AdditiveTerms(const ExprPtr& e, bool negative, std::vector<ExprPtr> factors,
                   std::vector<SignedTerm>* out, bool distribute) {
  using cuir::BinaryOp;
  if (e->kind == cuir::ExprKind::kBinary &&
      (e->binary_op == BinaryOp::kAdd || e->binary_op == BinaryOp::kSub)) {
    AdditiveTerms(e->args[0], negative, factors, out, distribute);
    AdditiveTerms(e->args[1], negative != (e->binary_op == BinaryOp::kSub), factors, out,
                  distribute);
    return;
  }
  if (e->kind == cuir::ExprKind::kUnary && e->unary_op == cuir::UnaryOp::kNeg) {
    AdditiveTerms(e->args[0], !negative, factors, out, distribute);
    return;
  }
  if (distribute && e->kind == cuir::ExprKind::kBinary && e->binary_op == BinaryOp::kMul) {
    for (int i = 0; i < 2; ++i) {
      if (LevelOf(e->args[i]) == Level::kBlock && LevelOf(e->args[1 - i]) != Level::kBlock) {
        factors.push_back(e->args[i]);
        AdditiveTerms(e->args[1 - i], negative, factors, out);
        return;
      }
    }
  }
  out->push_back({negative, std::move(factors), e});
}

ExprPtr SumOfTerms(const std::vector<SignedTerm>& terms, cuir::SourceLoc loc) {
  ExprPtr sum;
  for (const SignedTerm& t : terms) {
    ExprPtr term = t.leaf;
    for (const ExprPtr& f : t.factors) term = cuir::Binary(cuir::BinaryOp::kMul, term, f, loc);
    if (sum == nullptr) {
      sum = t.negative ? cuir::Unary(cuir::UnaryOp::kNeg, term, loc) : term;
    } else {
      sum = cuir::Binary(t.negative ? cuir::BinaryOp::kSub : cuir::BinaryOp::kAdd, sum, term, loc);
    }
  }
  return sum;
}

}  // namespace cubridge::lower
