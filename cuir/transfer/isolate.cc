#include "cuir/transfer/isolate.h"

#include <utility>

#include "cuir/transfer/symbolic.h"

namespace cubridge::transfer {
namespace {

using cuir::BinaryOp;
using cuir::ExprKind;
using cuir::ExprPtr;
using cuir::UnaryOp;
using Kind = Formula::Kind;
using Opt = std::optional<Formula>;

Formula Atom(BinaryOp cmp, ExprPtr bound) {
  Formula f;
  f.kind = Kind::kAtom;
  f.cmp = cmp;
  f.bound = std::move(bound);
  return f;
}

Formula Other(ExprPtr pred) {
  Formula f;
  f.kind = Kind::kOther;
  f.other = std::move(pred);
  return f;
}

Opt Combine(Kind kind, Opt a, Opt b) {
  if (!a || !b) return std::nullopt;
  Formula f;
  f.kind = kind;
  f.kids = {std::move(*a), std::move(*b)};
  return f;
}

// e = coef * var + rest, for e built from var, + - unary minus and literal factors.
bool Linear(const ExprPtr& e, const std::string& var, int64_t* coef, ExprPtr* rest) {
  if (!cuir::Mentions(e, var)) {
    *coef = 0;
    *rest = e;
    return true;
  }
  if (e->kind == ExprKind::kVar) {
    *coef = 1;
    *rest = sym::Int(0);
    return true;
  }
  if (e->kind == ExprKind::kUnary && e->unary_op == UnaryOp::kNeg) {
    if (!Linear(e->args[0], var, coef, rest)) return false;
    *coef = -*coef;
    *rest = sym::Neg(*rest);
    return true;
  }
  if (e->kind != ExprKind::kBinary) return false;
  int64_t ca = 0, cb = 0, lit = 0;
  ExprPtr ra, rb;
  switch (e->binary_op) {
    case BinaryOp::kAdd:
    case BinaryOp::kSub:
      if (!Linear(e->args[0], var, &ca, &ra) || !Linear(e->args[1], var, &cb, &rb)) return false;
      if (e->binary_op == BinaryOp::kAdd) {
        *coef = ca + cb;
        *rest = sym::Add(ra, rb);
      } else {
        *coef = ca - cb;
        *rest = sym::Sub(ra, rb);
      }
      return true;
    case BinaryOp::kMul: {
      const ExprPtr* other = nullptr;
      if (sym::IsInt(e->args[0], &lit))
        other = &e->args[1];
      else if (sym::IsInt(e->args[1], &lit))
        other = &e->args[0];
      if (!other || !Linear(*other, var, &ca, &ra)) return false;
      *coef = ca * lit;
      *rest = sym::Mul(ra, sym::Int(lit));
      return true;
    }
    default:
      return false;
  }
}

class Isolator {
 public:
  explicit Isolator(const std::string& var) : var_(var) {}

  // Solves `l cmp r` where either side may mention var.
  Opt SolveSides(const ExprPtr& l, BinaryOp cmp, const ExprPtr& r) {
    bool in_l = Has(l), in_r = Has(r);
    if (!in_r) return Solve(l, cmp, r);
    if (!in_l) return Solve(r, sym::Swapped(cmp), l);
    // var on both sides: split a min / max / abs / select first (those equivalences hold for any
    // right-hand side), else collect the linear terms.
    if (Opt split = Distribute(l, cmp, r)) return split;
    if (Opt split = Distribute(r, sym::Swapped(cmp), l)) return split;
    return Solve(sym::Sub(l, r), cmp, sym::Int(0));
  }

  // Solves `e cmp r` for var (r free of var; e need not mention it).
  Opt Solve(const ExprPtr& e, BinaryOp cmp, const ExprPtr& r) {
    if (!Has(e)) return Other(cuir::Binary(cmp, e, r));  // var cancelled out
    switch (cmp) {
      case BinaryOp::kLt:
        return Solve(e, BinaryOp::kLe, sym::AddConst(r, -1));
      case BinaryOp::kGt:
        return Solve(e, BinaryOp::kGe, sym::AddConst(r, 1));
      case BinaryOp::kEq:
        return Combine(Kind::kAnd, Solve(e, BinaryOp::kLe, r), Solve(e, BinaryOp::kGe, r));
      case BinaryOp::kNe:
        return Combine(Kind::kOr, Solve(e, BinaryOp::kLt, r), Solve(e, BinaryOp::kGt, r));
      default:
        break;
    }
    if (e->kind == ExprKind::kVar) return Atom(cmp, r);
    if (e->kind == ExprKind::kUnary) return SolveUnary(e, cmp, r);
    if (e->kind == ExprKind::kSelect) return SolveSelect(e, cmp, r);
    if (e->kind == ExprKind::kBinary) return SolveBinary(e, cmp, r);
    return std::nullopt;
  }

 private:
  bool Has(const ExprPtr& e) const { return cuir::Mentions(e, var_); }

  Opt SolveUnary(const ExprPtr& e, BinaryOp cmp, const ExprPtr& r) {
    const ExprPtr& a = e->args[0];
    if (e->unary_op == UnaryOp::kNeg) return Solve(a, sym::Swapped(cmp), sym::Neg(r));
    if (e->unary_op != UnaryOp::kAbs) return std::nullopt;
    // |a| <= r  <=>  -r <= a <= r ;  |a| >= r  <=>  a >= r || a <= -r.
    Kind kind = cmp == BinaryOp::kLe ? Kind::kAnd : Kind::kOr;
    return Combine(kind, Solve(a, cmp, r), Solve(a, sym::Swapped(cmp), sym::Neg(r)));
  }

  Opt SolveSelect(const ExprPtr& e, BinaryOp cmp, const ExprPtr& r) {
    const ExprPtr& c = e->args[0];
    if (Has(c)) return std::nullopt;
    Opt then_part = Combine(Kind::kAnd, Other(c), Solve(e->args[1], cmp, r));
    Opt else_part = Combine(Kind::kAnd, Other(sym::Not(c)), Solve(e->args[2], cmp, r));
    return Combine(Kind::kOr, std::move(then_part), std::move(else_part));
  }

  // `e cmp r` split at e's top-level min / max / abs / select; nullopt when e is none of those.
  Opt Distribute(const ExprPtr& e, BinaryOp cmp, const ExprPtr& r) {
    if (cmp == BinaryOp::kEq || cmp == BinaryOp::kNe) {
      Kind kind = cmp == BinaryOp::kEq ? Kind::kAnd : Kind::kOr;
      BinaryOp lo = cmp == BinaryOp::kEq ? BinaryOp::kLe : BinaryOp::kLt;
      BinaryOp hi = cmp == BinaryOp::kEq ? BinaryOp::kGe : BinaryOp::kGt;
      Opt a = Distribute(e, lo, r);
      if (!a) return std::nullopt;
      return Combine(kind, std::move(a), Distribute(e, hi, r));
    }
    if (cmp == BinaryOp::kLt || cmp == BinaryOp::kGt) {
      // Strict to non-strict needs an int offset on r, which may mention var: fine, it is exact.
      BinaryOp weak = cmp == BinaryOp::kLt ? BinaryOp::kLe : BinaryOp::kGe;
      return Distribute(e, weak, sym::AddConst(r, cmp == BinaryOp::kLt ? -1 : 1));
    }
    if (e->kind == ExprKind::kUnary && e->unary_op == UnaryOp::kAbs) {
      const ExprPtr& a = e->args[0];
      Kind kind = cmp == BinaryOp::kLe ? Kind::kAnd : Kind::kOr;
      return Combine(kind, SolveSides(a, cmp, r), SolveSides(sym::Neg(a), cmp, r));
    }
    if (e->kind == ExprKind::kSelect && !Has(e->args[0])) {
      const ExprPtr& c = e->args[0];
      return Combine(Kind::kOr, Combine(Kind::kAnd, Other(c), SolveSides(e->args[1], cmp, r)),
                     Combine(Kind::kAnd, Other(sym::Not(c)), SolveSides(e->args[2], cmp, r)));
    }
    if (e->kind == ExprKind::kBinary &&
        (e->binary_op == BinaryOp::kMin || e->binary_op == BinaryOp::kMax)) {
      bool either = (e->binary_op == BinaryOp::kMin) == (cmp == BinaryOp::kLe);
      return Combine(either ? Kind::kOr : Kind::kAnd, SolveSides(e->args[0], cmp, r),
                     SolveSides(e->args[1], cmp, r));
    }
    return std::nullopt;
  }

  Opt SolveLinear(const ExprPtr& e, BinaryOp cmp, const ExprPtr& r) {
    int64_t coef = 0;
    ExprPtr rest;
    if (!Linear(e, var_, &coef, &rest)) return std::nullopt;
    if (coef == 0) return Other(cuir::Binary(cmp, rest, r));
    return SolveScaled(cuir::Var(var_), coef, cmp, sym::Sub(r, rest));
  }

  // a * c cmp r for a literal c != 0.
  Opt SolveScaled(const ExprPtr& a, int64_t c, BinaryOp cmp, const ExprPtr& r) {
    if (c < 0) return SolveScaled(a, -c, sym::Swapped(cmp), sym::Neg(r));
    if (cmp == BinaryOp::kLe) return Solve(a, cmp, sym::FloorDiv(r, sym::Int(c)));
    return Solve(a, cmp, sym::FloorDiv(sym::AddConst(r, c - 1), sym::Int(c)));
  }

  Opt SolveBinary(const ExprPtr& e, BinaryOp cmp, const ExprPtr& r) {
    const ExprPtr& a = e->args[0];
    const ExprPtr& b = e->args[1];
    bool in_a = Has(a), in_b = Has(b);
    int64_t c = 0;
    switch (e->binary_op) {
      case BinaryOp::kAdd:
        if (in_a && in_b) return SolveLinear(e, cmp, r);
        return in_a ? Solve(a, cmp, sym::Sub(r, b)) : Solve(b, cmp, sym::Sub(r, a));
      case BinaryOp::kSub:
        if (in_a && in_b) return SolveLinear(e, cmp, r);
        return in_a ? Solve(a, cmp, sym::Add(r, b)) : Solve(b, sym::Swapped(cmp), sym::Sub(a, r));
      case BinaryOp::kMul:
        if (!in_a && sym::IsInt(a, &c) && c != 0) return SolveScaled(b, c, cmp, r);
        if (!in_b && sym::IsInt(b, &c) && c != 0) return SolveScaled(a, c, cmp, r);
        return SolveLinear(e, cmp, r);
      case BinaryOp::kFloorDiv:
        // a // c <= r  <=>  a <= r*c + c - 1 ;  a // c >= r  <=>  a >= r*c   (c > 0).
        if (in_b || !sym::IsInt(b, &c) || c <= 0) return std::nullopt;
        if (cmp == BinaryOp::kLe) return Solve(a, cmp, sym::AddConst(sym::Mul(r, b), c - 1));
        return Solve(a, cmp, sym::Mul(r, b));
      case BinaryOp::kCdiv:
        // cdiv(a, c) <= r  <=>  a <= r*c ;  cdiv(a, c) >= r  <=>  a >= (r-1)*c + 1   (c > 0).
        if (in_b || !sym::IsInt(b, &c) || c <= 0) return std::nullopt;
        if (cmp == BinaryOp::kLe) return Solve(a, cmp, sym::Mul(r, b));
        return Solve(a, cmp, sym::AddConst(sym::Mul(sym::AddConst(r, -1), b), 1));
      case BinaryOp::kMin:
      case BinaryOp::kMax: {
        // min(a, b) <= r iff either is; min(a, b) >= r iff both are (dually for max).
        bool either = (e->binary_op == BinaryOp::kMin) == (cmp == BinaryOp::kLe);
        return Combine(either ? Kind::kOr : Kind::kAnd, Solve(a, cmp, r), Solve(b, cmp, r));
      }
      default:
        return std::nullopt;
    }
  }

  std::string var_;
};

}  // namespace

std::optional<Formula> Isolate(cuir::BinaryOp cmp, const ExprPtr& lhs, const ExprPtr& rhs,
                               const std::string& var) {
  Isolator iso(var);
  // Folding first drops terms such as `0 * kv_idx` that mention var without depending on it.
  return iso.SolveSides(sym::Simplify(lhs), cmp, sym::Simplify(rhs));
}

}  // namespace cubridge::transfer
