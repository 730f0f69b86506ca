#include "cuir/lower/tile_corners.h"

namespace cubridge::lower {
namespace {

using cuir::BinaryOp;
using cuir::ExprKind;
using cuir::ExprPtr;
using cuir::UnaryOp;

bool MentionsAnIndex(const ExprPtr& e) {
  return cuir::Mentions(e, "q_idx") || cuir::Mentions(e, "kv_idx");
}

bool IsOrdering(BinaryOp op) {
  return op == BinaryOp::kLt || op == BinaryOp::kLe || op == BinaryOp::kGt || op == BinaryOp::kGe;
}

bool IsAbs(const ExprPtr& e) { return e->kind == ExprKind::kUnary && e->unary_op == UnaryOp::kAbs; }

// The conjuncts of `e` (split at &&), where `abs(a) <= b` (or <, or the same written b >= abs(a))
// becomes its two half-planes a <= b and -a <= b: a band, which the corners cannot decide
// whole (its corners may all lie outside while it crosses the tile), but each side of it can.
void Conjuncts(const ExprPtr& e, std::vector<ExprPtr>* out) {
  if (e->kind == ExprKind::kBinary && e->binary_op == BinaryOp::kAnd) {
    Conjuncts(e->args[0], out);
    Conjuncts(e->args[1], out);
    return;
  }
  if (e->kind == ExprKind::kBinary && IsOrdering(e->binary_op)) {
    const bool upper = e->binary_op == BinaryOp::kLt || e->binary_op == BinaryOp::kLe;
    const ExprPtr& bounded = upper ? e->args[0] : e->args[1];
    const ExprPtr& bound = upper ? e->args[1] : e->args[0];
    if (IsAbs(bounded)) {
      const BinaryOp op = e->binary_op == BinaryOp::kLt || e->binary_op == BinaryOp::kGt
                              ? BinaryOp::kLt
                              : BinaryOp::kLe;
      const ExprPtr& a = bounded->args[0];
      out->push_back(cuir::Binary(op, a, bound, e->loc));
      out->push_back(cuir::Binary(op, cuir::Unary(UnaryOp::kNeg, a, e->loc), bound, e->loc));
      return;
    }
  }
  out->push_back(e);
}

// How an expression moves with one index, the others held: not at all, never down, never up,
// or otherwise (unknown).
enum class Dir { kConst, kUp, kDown, kNone };

Dir Flip(Dir d) { return d == Dir::kUp ? Dir::kDown : d == Dir::kDown ? Dir::kUp : d; }
Dir Join(Dir a, Dir b) {
  if (a == Dir::kConst) return b;
  if (b == Dir::kConst || a == b) return a;
  return Dir::kNone;
}

// The direction of `e` in index `var`, by rules that hold in integer arithmetic: sums and
// differences, negation, products and floor divisions by integer literals, shr by anything
// (floor division by a power of two, or the sign: both never down), shl by a literal of at most
// 31 (no wrap for indices below 2^31), min and max of two moving alike.
Dir DirectionIn(const ExprPtr& e, const std::string& var) {
  if (!cuir::Mentions(e, var)) return Dir::kConst;
  auto literal = [](const ExprPtr& x) -> const cuir::Expr* {
    return x->kind == ExprKind::kIntLit ? x.get() : nullptr;
  };
  switch (e->kind) {
    case ExprKind::kVar:
      return Dir::kUp;  // the index itself
    case ExprKind::kUnary:
      return e->unary_op == UnaryOp::kNeg ? Flip(DirectionIn(e->args[0], var)) : Dir::kNone;
    case ExprKind::kBinary: {
      const ExprPtr& a = e->args[0];
      const ExprPtr& b = e->args[1];
      switch (e->binary_op) {
        case BinaryOp::kAdd:
          return Join(DirectionIn(a, var), DirectionIn(b, var));
        case BinaryOp::kSub:
          return Join(DirectionIn(a, var), Flip(DirectionIn(b, var)));
        case BinaryOp::kMin:
        case BinaryOp::kMax: {
          const Dir x = DirectionIn(a, var), y = DirectionIn(b, var);
          return x == Dir::kNone || y == Dir::kNone ? Dir::kNone : Join(x, y);
        }
        case BinaryOp::kMul:
        case BinaryOp::kFloorDiv: {
          const bool mul = e->binary_op == BinaryOp::kMul;
          const cuir::Expr* c = literal(b);
          if (c == nullptr && mul) {
            c = literal(a);
            if (c != nullptr) return c->int_value == 0 ? Dir::kConst
                                     : c->int_value > 0 ? DirectionIn(b, var)
                                                        : Flip(DirectionIn(b, var));
          }
          if (c == nullptr || cuir::Mentions(b, var)) return Dir::kNone;
          if (c->int_value == 0) return mul ? Dir::kConst : Dir::kNone;
          return c->int_value > 0 ? DirectionIn(a, var) : Flip(DirectionIn(a, var));
        }
        case BinaryOp::kShr:
          return cuir::Mentions(b, var) ? Dir::kNone : DirectionIn(a, var);
        case BinaryOp::kShl: {
          const cuir::Expr* c = literal(b);
          return c != nullptr && c->int_value >= 0 && c->int_value <= 31 ? DirectionIn(a, var)
                                                                          : Dir::kNone;
        }
        default:
          return Dir::kNone;
      }
    }
    default:
      return Dir::kNone;  // a read of a tensor at an index, a select, ...
  }
}

// Decided by the corners: a comparison whose two sides are affine in the indices, or whose
// difference never turns in either index.
bool ComparisonDecided(const ExprPtr& e) {
  if (e->kind != ExprKind::kBinary || !IsOrdering(e->binary_op) || !MentionsAnIndex(e)) {
    return false;
  }
  if (AffineInTheIndices(e->args[0]) && AffineInTheIndices(e->args[1])) return true;
  const ExprPtr diff = cuir::Binary(BinaryOp::kSub, e->args[0], e->args[1]);
  return DirectionIn(diff, "q_idx") != Dir::kNone && DirectionIn(diff, "kv_idx") != Dir::kNone;
}

void SplitOr(const ExprPtr& e, std::vector<ExprPtr>* out) {
  if (e->kind == ExprKind::kBinary && e->binary_op == BinaryOp::kOr) {
    SplitOr(e->args[0], out);
    SplitOr(e->args[1], out);
    return;
  }
  out->push_back(e);
}

// A conjunct is decided when each of its disjuncts (tile_corners.h, below) is.
bool CornersDecide(const ExprPtr& e) {
  for (const ExprPtr& part : Disjuncts(e)) {
    if (!ComparisonDecided(part)) return false;
  }
  return true;
}

}  // namespace

bool AffineInTheIndices(const ExprPtr& e) {
  if (!MentionsAnIndex(e)) return true;
  switch (e->kind) {
    case ExprKind::kVar:
      return true;  // q_idx or kv_idx itself
    case ExprKind::kUnary:
      return e->unary_op == UnaryOp::kNeg && AffineInTheIndices(e->args[0]);
    case ExprKind::kBinary:
      switch (e->binary_op) {
        case BinaryOp::kAdd:
        case BinaryOp::kSub:
          return AffineInTheIndices(e->args[0]) && AffineInTheIndices(e->args[1]);
        case BinaryOp::kMul:
          // A product with a factor constant over the tile: monotone, its direction that
          // factor's sign.
          return (!MentionsAnIndex(e->args[0]) && AffineInTheIndices(e->args[1])) ||
                 (!MentionsAnIndex(e->args[1]) && AffineInTheIndices(e->args[0]));
        default:
          return false;
      }
    default:
      return false;  // a read of a tensor at an index, a select, ...: not monotone in general
  }
}

std::vector<ExprPtr> Disjuncts(const ExprPtr& conjunct) {
  std::vector<ExprPtr> out;
  SplitOr(conjunct, &out);
  return out;
}

TileCorners FindTileCorners(const ExprPtr& pred) {
  TileCorners out;
  if (pred == nullptr) return out;
  std::vector<ExprPtr> conjuncts;
  Conjuncts(pred, &conjuncts);
  out.all_decided = true;
  for (const ExprPtr& c : conjuncts) {
    if (CornersDecide(c)) {
      out.decided.push_back(c);
    } else {
      out.all_decided = false;
    }
  }
  if (out.decided.empty()) out.all_decided = false;
  return out;
}

}  // namespace cubridge::lower
