#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "cuir/lower/rewrites/hoisting.h"

namespace cubridge::lower {

using cuir::ExprPtr;

// Pass "hoist invariants": what does not change from element to element leaves the element loop.
// Each maximal subexpression that is the same for the whole block (ALiBi's per-head slope
// exp2(-8 * (h + 1) / H)) moves whenever it is an operation: per element it would cost its
// instructions MT x NT x 4 times per thread for one value. One that is the same along a query
// row (doc[q_idx]) or key column (doc[kv_idx]) moves only when it is costly (a buffer read, a
// transcendental, a division), since it then lives in a register array per row or column through
// the element loop, and only that work repays the registers. A float product that a sum consumes
// stays (FeedsFma), as do leaves (a name costs nothing to read).
namespace {

bool IsLeaf(const ExprPtr& e) { return e->args.empty(); }

// A transcendental function (every unary op but the few-instruction ones).
bool TranscendentalUnary(cuir::UnaryOp op) {
  using cuir::UnaryOp;
  switch (op) {
    case UnaryOp::kNeg: case UnaryOp::kNot: case UnaryOp::kAbs: case UnaryOp::kFloor:
    case UnaryOp::kToFloat: case UnaryOp::kToInt: case UnaryOp::kTrunc: case UnaryOp::kRound:
    case UnaryOp::kSign: case UnaryOp::kBitNot: return false;
    default: return true;
  }
}

// What the node `e` itself costs per evaluation: 3 for a transcendental function, a float
// division, pow, atan2 or fmod; 2 for a buffer read; 1 for an integer division, modulo or shift
// (torch's 64-bit shifts test their amount); 0 for the rest (a few instructions at most).
int NodeCost(const ExprPtr& e) {
  using cuir::BinaryOp;
  switch (e->kind) {
    case cuir::ExprKind::kIndex: return 2;
    case cuir::ExprKind::kUnary: return TranscendentalUnary(e->unary_op) ? 3 : 0;
    case cuir::ExprKind::kBinary:
      switch (e->binary_op) {
        case BinaryOp::kDiv: case BinaryOp::kPow: case BinaryOp::kAtan2: case BinaryOp::kFmod:
          return 3;
        case BinaryOp::kFloorDiv: case BinaryOp::kMod: case BinaryOp::kCdiv:
        case BinaryOp::kShl: case BinaryOp::kShr: return 1;
        default: return 0;
      }
    default: return 0;
  }
}

// nvcc contracts a float `a * b` that a sum consumes into one fma, rounded once; computed apart
// the product would be rounded twice, so it stays in the element loop (its operands may move).
bool FeedsFma(const ExprPtr& e, const ExprPtr& parent, const EmitScope& types) {
  if (parent == nullptr || parent->kind != cuir::ExprKind::kBinary ||
      (parent->binary_op != cuir::BinaryOp::kAdd && parent->binary_op != cuir::BinaryOp::kSub)) {
    return false;
  }
  const ExprPtr& product =
      e->kind == cuir::ExprKind::kUnary && e->unary_op == cuir::UnaryOp::kNeg ? e->args[0] : e;
  if (product->kind != cuir::ExprKind::kBinary || product->binary_op != cuir::BinaryOp::kMul) {
    return false;
  }
  auto typed = EmitExpr(product, types);
  return typed.ok() && typed->type == CType::kFloat;
}

// Where `e` (whose parent is `parent`, null at the root) is evaluated once, if it moves out of
// the element loop: a block invariant whenever it is an operation, a row or column invariant
// when it is costly.
std::optional<Level> HoistLevel(const ExprPtr& e, const ExprPtr& parent, const EmitScope& types) {
  const Level level = LevelOf(e);
  if (level == Level::kElement || IsLeaf(e)) return std::nullopt;
  if (level != Level::kBlock && !Costly(e)) return std::nullopt;
  if (FeedsFma(e, parent, types)) return std::nullopt;
  return level;
}

ExprPtr Hoist(const ExprPtr& e, const ExprPtr& parent, const EmitScope& element,
              std::vector<Hoisted>* hoisted, bool block_only);

ExprPtr HoistInArgs(const ExprPtr& e, const EmitScope& element, std::vector<Hoisted>* hoisted,
                    bool block_only) {
  if (e->args.empty()) return e;
  auto copy = std::make_shared<cuir::Expr>(*e);
  for (ExprPtr& arg : copy->args) arg = Hoist(arg, e, element, hoisted, block_only);
  return ExprPtr(copy);
}

// `e` with its hoisted subexpressions read by name; `block_only`: only block values move (inside
// a row or column value, whose block-invariant parts still run once per block).
ExprPtr Hoist(const ExprPtr& e, const ExprPtr& parent, const EmitScope& element,
              std::vector<Hoisted>* hoisted, bool block_only) {
  std::optional<Level> level = HoistLevel(e, parent, element);
  if (block_only && level != Level::kBlock) level.reset();
  if (!level.has_value()) return HoistInArgs(e, element, hoisted, block_only);
  // Its block-invariant parts (prefix[b] in kv_idx < prefix[b]) still run once per block.
  const ExprPtr value =
      *level != Level::kBlock ? HoistInArgs(e, element, hoisted, /*block_only=*/true) : e;
  for (const Hoisted& h : *hoisted) {
    if (h.level == *level && cuir::Equal(h.expr, value)) return cuir::Var(h.name, e->loc);
  }
  // Named once it is known to stay (ShareHoisted); "." keeps this apart from CuIR names.
  hoisted->push_back({*level, absl::StrCat("hoisted.", hoisted->size()), value});
  return cuir::Var(hoisted->back().name, e->loc);
}

}  // namespace

int RecomputeCost(const ExprPtr& e) {
  int cost = NodeCost(e);
  for (const ExprPtr& a : e->args) cost = std::max(cost, RecomputeCost(a));
  return cost;
}

// Buffer reads, transcendentals and divisions: an array slot per row or column costs registers
// for the whole element loop, which only these repay (a few instructions each, a global load).
bool Costly(const ExprPtr& e) { return RecomputeCost(e) > 0; }

size_t ExprSize(const ExprPtr& e) {
  size_t n = 1;
  for (const ExprPtr& a : e->args) n += ExprSize(a);
  return n;
}

Hoisting HoistInvariants(const ExprPtr& e, const EmitScope& element) {
  Hoisting h;
  h.expr = Hoist(e, nullptr, element, &h.lets, /*block_only=*/false);
  return h;
}

}  // namespace cubridge::lower
