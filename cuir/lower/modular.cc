#include "cuir/lower/modular.h"

#include <cstdint>

namespace cubridge::lower {
namespace {

using cuir::BinaryOp;
using cuir::ExprKind;
using cuir::ExprPtr;

int64_t PyMod(int64_t a, int64_t c) {
  const int64_t r = a % c;
  return r < 0 ? r + c : r;
}

// Whether x is + - * and unary minus over leaves: where the residue identities apply term by term.
bool Polynomial(const ExprPtr& x) {
  if (x->kind == ExprKind::kBinary) {
    return (x->binary_op == BinaryOp::kAdd || x->binary_op == BinaryOp::kSub ||
            x->binary_op == BinaryOp::kMul);
  }
  return x->kind == ExprKind::kUnary && x->unary_op == cuir::UnaryOp::kNeg;
}

// A value congruent to x modulo c with every leaf replaced by its residue.
ExprPtr Residues(const ExprPtr& x, int64_t c) {
  if (x->kind == ExprKind::kIntLit) return cuir::IntLit(PyMod(x->int_value, c), x->loc);
  if (Polynomial(x)) {
    auto copy = std::make_shared<cuir::Expr>(*x);
    for (ExprPtr& a : copy->args) a = Residues(a, c);
    return copy;
  }
  return cuir::Binary(BinaryOp::kMod, x, cuir::IntLit(c, x->loc), x->loc);
}

}  // namespace

ExprPtr ResidueDividend(const ExprPtr& x, int64_t c, const cuir::BoundsEnv& env) {
  if (!Polynomial(x)) return nullptr;
  const cuir::IntBounds before = cuir::BoundsOf(x, env);
  if (!before.lo || !before.hi || cuir::WithinInt32(before)) return nullptr;  // wraps, or is cheap already
  ExprPtr reduced = Residues(x, c);
  if (!cuir::WithinInt32(cuir::BoundsOf(reduced, env))) return nullptr;
  return reduced;
}

}  // namespace cubridge::lower
