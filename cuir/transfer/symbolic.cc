#include "cuir/transfer/symbolic.h"

#include <algorithm>
#include <utility>

namespace cubridge::transfer::sym {

using cuir::ExprKind;
using cuir::UnaryOp;

ExprPtr Int(int64_t v) { return cuir::IntLit(v); }

bool IsInt(const ExprPtr& e, int64_t* v) {
  if (!e || e->kind != ExprKind::kIntLit) return false;
  if (v) *v = e->int_value;
  return true;
}

bool IsBool(const ExprPtr& e, bool value) {
  return e && e->kind == ExprKind::kBoolLit && e->bool_value == value;
}

int64_t FloorDivInt(int64_t a, int64_t b) {
  int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t CeilDivInt(int64_t a, int64_t b) { return -FloorDivInt(-a, b); }

namespace {

// e = base + offset with a literal offset; base is null for a literal.
struct Split {
  ExprPtr base;
  int64_t offset = 0;
};

Split SplitOffset(const ExprPtr& e) {
  int64_t c = 0;
  if (IsInt(e, &c)) return {nullptr, c};
  if (e->kind == ExprKind::kBinary && IsInt(e->args[1], &c)) {
    if (e->binary_op == BinaryOp::kAdd) return {e->args[0], c};
    if (e->binary_op == BinaryOp::kSub) return {e->args[0], -c};
  }
  if (e->kind == ExprKind::kBinary && e->binary_op == BinaryOp::kAdd && IsInt(e->args[0], &c)) {
    return {e->args[1], c};
  }
  return {e, 0};
}

bool SameBase(const Split& a, const Split& b) {
  if (!a.base || !b.base) return !a.base && !b.base;
  return cuir::Equal(a.base, b.base);
}

ExprPtr Join(const ExprPtr& base, int64_t c) {
  if (!base) return Int(c);
  if (c == 0) return base;
  if (c > 0) return cuir::Binary(BinaryOp::kAdd, base, Int(c));
  return cuir::Binary(BinaryOp::kSub, base, Int(-c));
}

bool FoldCompare(BinaryOp op, int64_t a, int64_t b) {
  switch (op) {
    case BinaryOp::kLt:
      return a < b;
    case BinaryOp::kLe:
      return a <= b;
    case BinaryOp::kGt:
      return a > b;
    case BinaryOp::kGe:
      return a >= b;
    case BinaryOp::kEq:
      return a == b;
    default:
      return a != b;
  }
}

// min / max of two expressions that differ only by a constant offset.
ExprPtr MinMax(BinaryOp op, const ExprPtr& a, const ExprPtr& b) {
  if (cuir::Equal(a, b)) return a;
  Split sa = SplitOffset(a), sb = SplitOffset(b);
  if (SameBase(sa, sb)) {
    int64_t c =
        op == BinaryOp::kMin ? std::min(sa.offset, sb.offset) : std::max(sa.offset, sb.offset);
    return Join(sa.base, c);
  }
  return cuir::Binary(op, a, b);
}

}  // namespace

ExprPtr AddConst(const ExprPtr& a, int64_t c) {
  Split s = SplitOffset(a);
  return Join(s.base, s.offset + c);
}

ExprPtr Add(const ExprPtr& a, const ExprPtr& b) {
  Split sa = SplitOffset(a), sb = SplitOffset(b);
  if (!sa.base) return Join(sb.base, sa.offset + sb.offset);
  if (!sb.base) return Join(sa.base, sa.offset + sb.offset);
  return Join(cuir::Binary(BinaryOp::kAdd, sa.base, sb.base), sa.offset + sb.offset);
}

ExprPtr Sub(const ExprPtr& a, const ExprPtr& b) {
  Split sa = SplitOffset(a), sb = SplitOffset(b);
  int64_t c = sa.offset - sb.offset;
  if (SameBase(sa, sb)) return Int(c);
  if (!sb.base) return Join(sa.base, c);
  if (!sa.base) return cuir::Binary(BinaryOp::kSub, Int(c), sb.base);
  return Join(cuir::Binary(BinaryOp::kSub, sa.base, sb.base), c);
}

ExprPtr Neg(const ExprPtr& a) {
  int64_t v = 0;
  if (IsInt(a, &v)) return Int(-v);
  if (a->kind == ExprKind::kUnary && a->unary_op == UnaryOp::kNeg) return a->args[0];
  if (a->kind == ExprKind::kBinary && a->binary_op == BinaryOp::kSub) {
    return Sub(a->args[1], a->args[0]);
  }
  return cuir::Unary(UnaryOp::kNeg, a);
}

ExprPtr Mul(const ExprPtr& a, const ExprPtr& b) {
  int64_t x = 0, y = 0;
  bool ia = IsInt(a, &x), ib = IsInt(b, &y);
  if (ia && ib) return Int(x * y);
  if ((ia && x == 0) || (ib && y == 0)) return Int(0);
  if (ia && x == 1) return b;
  if (ib && y == 1) return a;
  return cuir::Binary(BinaryOp::kMul, a, b);
}

ExprPtr FloorDiv(const ExprPtr& a, const ExprPtr& b) {
  int64_t x = 0, y = 0;
  bool ib = IsInt(b, &y);
  if (ib && y == 1) return a;
  if (IsInt(a, &x) && x == 0) return Int(0);  // divisors are non-zero (block sizes, literals)
  if (ib && y != 0 && IsInt(a, &x)) return Int(FloorDivInt(x, y));
  return cuir::Binary(BinaryOp::kFloorDiv, a, b);
}

ExprPtr Cdiv(const ExprPtr& a, const ExprPtr& b) {
  int64_t x = 0, y = 0;
  bool ib = IsInt(b, &y);
  if (ib && y == 1) return a;
  if (IsInt(a, &x) && x == 0) return Int(0);
  if (ib && y > 0 && IsInt(a, &x)) return Int(CeilDivInt(x, y));
  return cuir::Binary(BinaryOp::kCdiv, a, b);
}

ExprPtr Min(const ExprPtr& a, const ExprPtr& b) { return MinMax(BinaryOp::kMin, a, b); }
ExprPtr Max(const ExprPtr& a, const ExprPtr& b) { return MinMax(BinaryOp::kMax, a, b); }

ExprPtr Select(const ExprPtr& c, const ExprPtr& a, const ExprPtr& b) {
  if (!c || IsBool(c, true) || cuir::Equal(a, b)) return a;
  if (IsBool(c, false)) return b;
  return cuir::Select(c, a, b);
}

BinaryOp Swapped(BinaryOp op) {
  switch (op) {
    case BinaryOp::kLt:
      return BinaryOp::kGt;
    case BinaryOp::kLe:
      return BinaryOp::kGe;
    case BinaryOp::kGt:
      return BinaryOp::kLt;
    case BinaryOp::kGe:
      return BinaryOp::kLe;
    default:
      return op;  // == and != are symmetric
  }
}

BinaryOp Negated(BinaryOp op) {
  switch (op) {
    case BinaryOp::kLt:
      return BinaryOp::kGe;
    case BinaryOp::kLe:
      return BinaryOp::kGt;
    case BinaryOp::kGt:
      return BinaryOp::kLe;
    case BinaryOp::kGe:
      return BinaryOp::kLt;
    case BinaryOp::kEq:
      return BinaryOp::kNe;
    default:
      return BinaryOp::kEq;
  }
}

ExprPtr Cmp(BinaryOp op, const ExprPtr& a, const ExprPtr& b) {
  Split sa = SplitOffset(a), sb = SplitOffset(b);
  if (!sa.base && !sb.base) return cuir::BoolLit(FoldCompare(op, sa.offset, sb.offset));
  if (SameBase(sa, sb)) return cuir::BoolLit(FoldCompare(op, sa.offset, sb.offset));
  // Keep the symbolic side that had no offset on the left when possible: `kv_hi <= q_lo + 1`.
  if (!sa.base) return Cmp(Swapped(op), b, a);
  int64_t d = sb.offset - sa.offset;  // a.base op b.base + d
  // Turn `x <= y - 1` into `x < y` and `x < y + 1` into `x <= y` (ints).
  if (op == BinaryOp::kLe && d == -1) return Cmp(BinaryOp::kLt, sa.base, Join(sb.base, 0));
  if (op == BinaryOp::kLt && d == 1) return Cmp(BinaryOp::kLe, sa.base, Join(sb.base, 0));
  if (op == BinaryOp::kGe && d == 1) return Cmp(BinaryOp::kGt, sa.base, Join(sb.base, 0));
  if (op == BinaryOp::kGt && d == -1) return Cmp(BinaryOp::kGe, sa.base, Join(sb.base, 0));
  return cuir::Binary(op, sa.base, Join(sb.base, d));
}

ExprPtr And(const ExprPtr& a, const ExprPtr& b) {
  if (!a || IsBool(a, true)) return b;
  if (!b || IsBool(b, true)) return a;
  if (IsBool(a, false) || IsBool(b, false)) return cuir::BoolLit(false);
  if (cuir::Equal(a, b)) return a;
  return cuir::Binary(BinaryOp::kAnd, a, b);
}

ExprPtr Or(const ExprPtr& a, const ExprPtr& b) {
  if (!a || !b || IsBool(a, true) || IsBool(b, true)) return cuir::BoolLit(true);
  if (IsBool(a, false)) return b;
  if (IsBool(b, false)) return a;
  if (cuir::Equal(a, b)) return a;
  return cuir::Binary(BinaryOp::kOr, a, b);
}

ExprPtr Not(const ExprPtr& a) {
  if (!a) return cuir::BoolLit(false);
  if (a->kind == ExprKind::kBoolLit) return cuir::BoolLit(!a->bool_value);
  if (a->kind == ExprKind::kUnary && a->unary_op == UnaryOp::kNot) return a->args[0];
  return cuir::Unary(UnaryOp::kNot, a);
}

ExprPtr Simplify(const ExprPtr& e) {
  if (e->kind == ExprKind::kSelect) {
    return sym::Select(Simplify(e->args[0]), Simplify(e->args[1]), Simplify(e->args[2]));
  }
  if (e->kind == ExprKind::kUnary) {
    ExprPtr a = Simplify(e->args[0]);
    if (e->unary_op == UnaryOp::kNeg) return Neg(a);
    if (e->unary_op == UnaryOp::kNot) return Not(a);
    return cuir::Unary(e->unary_op, a, e->loc);
  }
  if (e->kind != ExprKind::kBinary) return e;
  ExprPtr a = Simplify(e->args[0]);
  ExprPtr b = Simplify(e->args[1]);
  switch (e->binary_op) {
    case BinaryOp::kAdd:
      return Add(a, b);
    case BinaryOp::kSub:
      return Sub(a, b);
    case BinaryOp::kMul:
      return Mul(a, b);
    case BinaryOp::kFloorDiv:
      return FloorDiv(a, b);
    case BinaryOp::kCdiv:
      return Cdiv(a, b);
    case BinaryOp::kMin:
      return Min(a, b);
    case BinaryOp::kMax:
      return Max(a, b);
    case BinaryOp::kAnd:
      return And(a, b);
    case BinaryOp::kOr:
      return Or(a, b);
    default:
      break;
  }
  if (cuir::IsComparison(e->binary_op)) return Cmp(e->binary_op, a, b);
  return cuir::Binary(e->binary_op, a, b, e->loc);
}

std::optional<int64_t> LowerBound(const ExprPtr& e, const VarBounds& vars) {
  auto rec = [&](const ExprPtr& x) { return LowerBound(x, vars); };
  switch (e->kind) {
    case ExprKind::kIntLit:
      return e->int_value;
    case ExprKind::kVar: {
      auto it = vars.find(e->name);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    }
    case ExprKind::kUnary:
      if (e->unary_op == UnaryOp::kAbs) return 0;
      return std::nullopt;
    case ExprKind::kSelect: {
      std::optional<int64_t> a = rec(e->args[1]), b = rec(e->args[2]);
      if (!a || !b) return std::nullopt;
      return std::min(*a, *b);
    }
    case ExprKind::kBinary:
      break;
    default:
      return std::nullopt;
  }
  std::optional<int64_t> a = rec(e->args[0]);
  std::optional<int64_t> b = rec(e->args[1]);
  int64_t c = 0;
  bool positive_literal = IsInt(e->args[1], &c) && c > 0;
  switch (e->binary_op) {
    case BinaryOp::kAdd:
      if (a && b) return *a + *b;
      return std::nullopt;
    case BinaryOp::kSub:
      if (a && IsInt(e->args[1], &c)) return *a - c;
      return std::nullopt;
    case BinaryOp::kMul:
      if (a && b && *a >= 0 && *b >= 0) return *a * *b;
      return std::nullopt;
    case BinaryOp::kMin:
      if (a && b) return std::min(*a, *b);
      return std::nullopt;
    case BinaryOp::kMax:
      if (a && b) return std::max(*a, *b);
      return a ? a : b;
    case BinaryOp::kFloorDiv:
    case BinaryOp::kCdiv:
      if (a && positive_literal) {
        return e->binary_op == BinaryOp::kCdiv ? CeilDivInt(*a, c) : FloorDivInt(*a, c);
      }
      if (a && *a >= 0 && b && *b >= 1) return 0;  // e.g. max(x, 0) // BLOCK_N
      return std::nullopt;
    case BinaryOp::kMod:
      if (positive_literal) return 0;
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

bool NonNegative(const ExprPtr& e, const VarBounds& vars) {
  std::optional<int64_t> lb = LowerBound(e, vars);
  return lb && *lb >= 0;
}

namespace {

Mono Flip(Mono m) {
  if (m == Mono::kInc) return Mono::kDec;
  if (m == Mono::kDec) return Mono::kInc;
  return m;
}

// Monotonicity of a + b (also of min / max / select branches, which preserve a common direction).
Mono Combine(Mono a, Mono b) {
  if (a == Mono::kUnknown || b == Mono::kUnknown) return Mono::kUnknown;
  if (a == Mono::kConst) return b;
  if (b == Mono::kConst || a == b) return a;
  return Mono::kUnknown;
}

// Sign of a literal factor or divisor: +1, -1, or 0 for "not a non-zero literal".
int LiteralSign(const ExprPtr& e) {
  int64_t v = 0;
  if (!IsInt(e, &v) || v == 0) return 0;
  return v > 0 ? 1 : -1;
}

}  // namespace

Mono MonotonicityIn(const ExprPtr& e, const std::string& var) {
  if (!cuir::Mentions(e, var)) return Mono::kConst;
  auto rec = [&](const ExprPtr& x) { return MonotonicityIn(x, var); };
  switch (e->kind) {
    case ExprKind::kVar:
      return Mono::kInc;  // it is `var` itself
    case ExprKind::kUnary:
      return e->unary_op == UnaryOp::kNeg ? Flip(rec(e->args[0])) : Mono::kUnknown;
    case ExprKind::kSelect:
      if (cuir::Mentions(e->args[0], var)) return Mono::kUnknown;
      return Combine(rec(e->args[1]), rec(e->args[2]));
    case ExprKind::kBinary:
      break;
    default:
      return Mono::kUnknown;
  }
  const ExprPtr& a = e->args[0];
  const ExprPtr& b = e->args[1];
  switch (e->binary_op) {
    case BinaryOp::kAdd:
    case BinaryOp::kMin:
    case BinaryOp::kMax:
      return Combine(rec(a), rec(b));
    case BinaryOp::kSub:
      return Combine(rec(a), Flip(rec(b)));
    case BinaryOp::kMul: {
      int64_t v = 0;
      if ((IsInt(a, &v) && v == 0) || (IsInt(b, &v) && v == 0)) return Mono::kConst;
      // One factor must be a literal: its sign decides the direction.
      if (int s = LiteralSign(b); s != 0) return s > 0 ? rec(a) : Flip(rec(a));
      if (int s = LiteralSign(a); s != 0) return s > 0 ? rec(b) : Flip(rec(b));
      return Mono::kUnknown;
    }
    case BinaryOp::kFloorDiv:
    case BinaryOp::kCdiv: {
      int s = LiteralSign(b);
      if (s == 0) return Mono::kUnknown;
      return s > 0 ? rec(a) : Flip(rec(a));
    }
    default:
      return Mono::kUnknown;
  }
}

bool IsIntValued(const ExprPtr& e, const absl::flat_hash_set<std::string>& int_vars) {
  auto rec = [&](const ExprPtr& x) { return IsIntValued(x, int_vars); };
  switch (e->kind) {
    case ExprKind::kIntLit:
      return true;
    case ExprKind::kVar:
      return int_vars.contains(e->name);
    case ExprKind::kIndex:
      return false;  // a buffer's element type is not known here
    case ExprKind::kSelect:
      return rec(e->args[1]) && rec(e->args[2]);
    case ExprKind::kUnary:
      return (e->unary_op == UnaryOp::kNeg || e->unary_op == UnaryOp::kAbs) && rec(e->args[0]);
    case ExprKind::kBinary:
      switch (e->binary_op) {
        case BinaryOp::kAdd:
        case BinaryOp::kSub:
        case BinaryOp::kMul:
        case BinaryOp::kFloorDiv:
        case BinaryOp::kMod:
        case BinaryOp::kMin:
        case BinaryOp::kMax:
        case BinaryOp::kCdiv:
          return rec(e->args[0]) && rec(e->args[1]);
        default:
          return false;
      }
    default:
      return false;
  }
}

}  // namespace cubridge::transfer::sym
