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

// The residue form of the dividend x of `x % c`, or null where the rewrite does not apply.
ExprPtr ResidueDividend(const ExprPtr& x, int64_t c, const cuir::BoundsEnv& env) {
  if (!Polynomial(x)) return nullptr;
  const cuir::IntBounds before = cuir::BoundsOf(x, env);
  // Unbounded: it may wrap (or is no int); within int32: nothing to gain.
  if (!before.lo || !before.hi || cuir::WithinInt32(before)) return nullptr;
  ExprPtr reduced = Residues(x, c);
  if (!cuir::WithinInt32(cuir::BoundsOf(reduced, env))) return nullptr;
  return reduced;
}

}  // namespace

ExprPtr ReduceModulo(const ExprPtr& e, const cuir::BoundsEnv& env) {
  if (e == nullptr || e->args.empty()) return e;
  auto copy = std::make_shared<cuir::Expr>(*e);
  for (ExprPtr& a : copy->args) a = ReduceModulo(a, env);
  if (copy->kind == ExprKind::kBinary && copy->binary_op == BinaryOp::kMod) {
    const cuir::IntBounds c = cuir::BoundsOf(copy->args[1], env);  // a literal, or a const
    if (c.lo && c.hi && *c.lo == *c.hi && *c.lo > 1) {
      if (ExprPtr reduced = ResidueDividend(copy->args[0], *c.lo, env)) copy->args[0] = reduced;
    }
  }
  return copy;
}

}  // namespace cubridge::lower
