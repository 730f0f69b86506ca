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

void Conjuncts(const ExprPtr& e, std::vector<ExprPtr>* out) {
  if (e->kind == ExprKind::kBinary && e->binary_op == BinaryOp::kAnd) {
    Conjuncts(e->args[0], out);
    Conjuncts(e->args[1], out);
  } else {
    out->push_back(e);
  }
}

bool IsHalfPlane(const ExprPtr& e) {
  if (e->kind != ExprKind::kBinary) return false;
  switch (e->binary_op) {
    case BinaryOp::kLt:
    case BinaryOp::kLe:
    case BinaryOp::kGt:
    case BinaryOp::kGe:
      return MentionsAnIndex(e) && AffineInTheIndices(e->args[0]) &&
             AffineInTheIndices(e->args[1]);
    default:
      return false;
  }
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

TileCorners FindTileCorners(const ExprPtr& pred) {
  TileCorners out;
  if (pred == nullptr) return out;
  std::vector<ExprPtr> conjuncts;
  Conjuncts(pred, &conjuncts);
  out.all_decided = true;
  for (const ExprPtr& c : conjuncts) {
    if (IsHalfPlane(c)) {
      out.decided.push_back(c);
    } else {
      out.all_decided = false;
    }
  }
  if (out.decided.empty()) out.all_decided = false;
  return out;
}

}  // namespace cubridge::lower
