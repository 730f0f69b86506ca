#include "cuir/lower/rewrites/rewrites.h"

#include "cuir/ir/status_macros.h"

namespace cubridge::lower {

using cuir::ExprPtr;

// Rewrite "float indices": an integer sum of indices that meets a float (ALiBi's
// (kv_idx - q_idx) * slope) is converted per element, and an int-to-float conversion issues at a
// quarter of the FP32 rate, on the pipe the softmax's exp2 needs. float(a ± b) is
// float(a) ± float(b) exactly while a, b and the result are below 2^24 (each conversion is exact
// and so is the float sum of two exact integers): so the sum is taken in floats from the
// visitors' float indices (q_idx.f, kv_idx.f), which they derive from one conversion per tile and
// constant offsets, and block-level terms convert once per block. (Past 2^24 both forms round.)
namespace {

bool IsIndex(const ExprPtr& e) {
  return e->kind == cuir::ExprKind::kVar && (e->name == "q_idx" || e->name == "kv_idx");
}

bool IsIndexSum(const ExprPtr& e) {
  if (IsIndex(e)) return true;
  if (e->kind == cuir::ExprKind::kUnary && e->unary_op == cuir::UnaryOp::kNeg) {
    return IsIndexSum(e->args[0]);
  }
  if (e->kind != cuir::ExprKind::kBinary ||
      (e->binary_op != cuir::BinaryOp::kAdd && e->binary_op != cuir::BinaryOp::kSub)) {
    return false;
  }
  const bool a = IsIndexSum(e->args[0]), b = IsIndexSum(e->args[1]);
  return (a || LevelOf(e->args[0]) == Level::kBlock) &&
         (b || LevelOf(e->args[1]) == Level::kBlock) && (a || b);
}

// The signed terms of an index sum: indices (as their float names) and block values.
void SumTerms(const ExprPtr& e, bool negative, std::vector<std::pair<bool, ExprPtr>>* indices,
              std::vector<std::pair<bool, ExprPtr>>* block) {
  if (IsIndex(e)) {
    indices->emplace_back(negative, cuir::Var(e->name == "q_idx" ? kQFloat : kKvFloat, e->loc));
  } else if (LevelOf(e) == Level::kBlock) {
    block->emplace_back(negative, e);
  } else if (e->kind == cuir::ExprKind::kUnary) {  // -x
    SumTerms(e->args[0], !negative, indices, block);
  } else {
    SumTerms(e->args[0], negative, indices, block);
    SumTerms(e->args[1], negative != (e->binary_op == cuir::BinaryOp::kSub), indices, block);
  }
}

// The sum with its indices added in floats and its block values summed as ints and converted
// once (a hoisted invariant): kv_idx - q_idx + seqlen_q - seqlen_kv becomes
// (kv_idx.f - q_idx.f) + float(seqlen_q - seqlen_kv).
ExprPtr SumInFloats(const ExprPtr& e) {
  std::vector<std::pair<bool, ExprPtr>> indices, block;
  SumTerms(e, false, &indices, &block);
  auto add = [&](ExprPtr sum, bool negative, ExprPtr term) {
    if (sum == nullptr) return negative ? cuir::Unary(cuir::UnaryOp::kNeg, term, e->loc) : term;
    return cuir::Binary(negative ? cuir::BinaryOp::kSub : cuir::BinaryOp::kAdd, sum, term, e->loc);
  };
  ExprPtr sum, rest;
  for (const auto& [negative, term] : indices) sum = add(sum, negative, term);
  for (const auto& [negative, term] : block) rest = add(rest, negative, term);
  if (rest == nullptr) return sum;
  if (rest->kind == cuir::ExprKind::kIntLit) {
    return cuir::Binary(cuir::BinaryOp::kAdd, sum,
                        cuir::FloatLit(static_cast<double>(rest->int_value), e->loc), e->loc);
  }
  return cuir::Binary(cuir::BinaryOp::kAdd, sum, cuir::Unary(cuir::UnaryOp::kToFloat, rest, e->loc),
                      e->loc);
}

}  // namespace

absl::StatusOr<ExprPtr> FloatIndices(const ExprPtr& e, const EmitScope& types) {
  if (e->args.empty()) return e;
  auto copy = std::make_shared<cuir::Expr>(*e);
  for (ExprPtr& arg : copy->args) {
    CUBRIDGE_ASSIGN_OR_RETURN(auto rewritten, FloatIndices(arg, types));
    arg = rewritten;
  }
  auto is_float = [&](const ExprPtr& x) -> absl::StatusOr<bool> {
    CUBRIDGE_ASSIGN_OR_RETURN(auto typed, EmitExpr(x, types));
    return typed.type == CType::kFloat;
  };
  using cuir::BinaryOp;
  if (copy->kind == cuir::ExprKind::kUnary && copy->unary_op == cuir::UnaryOp::kToFloat &&
      IsIndexSum(copy->args[0])) {
    return SumInFloats(copy->args[0]);
  }
  if (copy->kind == cuir::ExprKind::kBinary &&
      (copy->binary_op == BinaryOp::kAdd || copy->binary_op == BinaryOp::kSub ||
       copy->binary_op == BinaryOp::kMul || copy->binary_op == BinaryOp::kDiv)) {
    for (int i = 0; i < 2; ++i) {
      CUBRIDGE_ASSIGN_OR_RETURN(auto other_float, is_float(copy->args[1 - i]));
      if (other_float && IsIndexSum(copy->args[i])) copy->args[i] = SumInFloats(copy->args[i]);
    }
  }
  return ExprPtr(copy);
}

}  // namespace cubridge::lower
