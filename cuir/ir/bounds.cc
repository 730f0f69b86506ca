// Interval analysis of CuIR int expressions.
//
// Every node gets numeric bounds and, beside them, symbolic ones built from its operands'. The
// evaluator's ints are 64-bit and wrap, so a sum, difference or product is bounded only where
// all four operand bounds are known and no corner overflows: a single unbounded side could wrap
// the result anywhere. Floor division, modulo, min, max and select cannot wrap (but for
// INT64_MIN // -1), so they keep whatever sides their operands give.
#include "cuir/ir/bounds.h"

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <unordered_map>
#include <vector>

#include "cuir/ir/eval.h"

namespace cubridge::cuir {
namespace {

using Num = std::optional<int64_t>;

constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kLargestSize = std::numeric_limits<int32_t>::max();

// Symbolic bounds past this size fall back to their number: they are meant to be read and
// evaluated per launch, and operands shared by several parents would otherwise make them grow
// exponentially with the depth of the expression.
constexpr int64_t kMaxSymbolicDepth = 16;
constexpr int64_t kMaxSymbolicNodes = 40;

// ---------------------------------------------------------------------------------------------
// Checked int64 arithmetic: nullopt on overflow or an unknown operand.

Num Add(Num a, Num b) {
  int64_t r;
  if (!a || !b || __builtin_add_overflow(*a, *b, &r)) return std::nullopt;
  return r;
}
Num Sub(Num a, Num b) {
  int64_t r;
  if (!a || !b || __builtin_sub_overflow(*a, *b, &r)) return std::nullopt;
  return r;
}
Num Mul(Num a, Num b) {
  int64_t r;
  if (!a || !b || __builtin_mul_overflow(*a, *b, &r)) return std::nullopt;
  return r;
}

// Python // and ceil division of exact ints; d != 0 and never INT64_MIN / -1 (callers exclude it).
int64_t FloorDiv(int64_t a, int64_t d) {
  int64_t q = a / d;
  if (a % d != 0 && ((a < 0) != (d < 0))) --q;
  return q;
}
int64_t CeilDiv(int64_t a, int64_t d) {
  int64_t q = a / d;
  if (a % d != 0 && ((a < 0) == (d < 0))) ++q;
  return q;
}

// ---------------------------------------------------------------------------------------------
// Symbolic bounds. The constructors simplify just enough that the bounds read as one would write
// them: literals fold, and `x + k` sums keep a single literal term (`(seqlen_q - 1) + 1` is
// `seqlen_q`, `0 - (seqlen_kv - 1)` is `-seqlen_kv + 1`). A null operand gives null.

bool IsLit(const ExprPtr& e) { return e != nullptr && e->kind == ExprKind::kIntLit; }

bool IsNeg(const ExprPtr& e) {
  return e->kind == ExprKind::kUnary && e->unary_op == UnaryOp::kNeg;
}

// e = base + k with a literal k; base null when e is a literal.
struct Affine {
  ExprPtr base;
  int64_t k = 0;
};

Affine Split(const ExprPtr& e) {
  if (e->kind == ExprKind::kIntLit) return {nullptr, e->int_value};
  if (e->kind == ExprKind::kBinary && IsLit(e->args[1])) {
    const int64_t k = e->args[1]->int_value;
    if (e->binary_op == BinaryOp::kAdd) return {e->args[0], k};
    if (e->binary_op == BinaryOp::kSub && k != kInt64Min) return {e->args[0], -k};
  }
  return {e, 0};
}

ExprPtr Join(const ExprPtr& base, int64_t k) {
  if (base == nullptr) return IntLit(k);
  if (k == 0) return base;
  if (k < 0 && k != kInt64Min) return Binary(BinaryOp::kSub, base, IntLit(-k));
  return Binary(BinaryOp::kAdd, base, IntLit(k));
}

ExprPtr NegBase(const ExprPtr& e) {
  if (IsNeg(e)) return e->args[0];
  if (e->kind == ExprKind::kBinary && e->binary_op == BinaryOp::kSub) {
    return Binary(BinaryOp::kSub, e->args[1], e->args[0]);
  }
  return Unary(UnaryOp::kNeg, e);
}

ExprPtr SymAdd(const ExprPtr& a, const ExprPtr& b) {
  if (!a || !b) return nullptr;
  const Affine x = Split(a), y = Split(b);
  const Num k = Add(x.k, y.k);
  if (!k) return Binary(BinaryOp::kAdd, a, b);
  ExprPtr base;
  if (!x.base) {
    base = y.base;
  } else if (!y.base) {
    base = x.base;
  } else if (IsNeg(y.base) || IsNeg(x.base)) {
    const ExprPtr& plus = IsNeg(y.base) ? x.base : y.base;
    const ExprPtr& minus = IsNeg(y.base) ? y.base->args[0] : x.base->args[0];
    if (!Equal(plus, minus)) base = Binary(BinaryOp::kSub, plus, minus);
  } else {
    base = Binary(BinaryOp::kAdd, x.base, y.base);
  }
  return Join(base, *k);
}

ExprPtr SymSub(const ExprPtr& a, const ExprPtr& b) {
  if (!a || !b) return nullptr;
  const Affine x = Split(a), y = Split(b);
  const Num k = Sub(x.k, y.k);
  if (!k) return Binary(BinaryOp::kSub, a, b);
  ExprPtr base;
  if (!y.base) {
    base = x.base;
  } else if (!x.base) {
    base = NegBase(y.base);
  } else if (!Equal(x.base, y.base)) {
    base = Binary(BinaryOp::kSub, x.base, y.base);
  }
  return Join(base, *k);
}

ExprPtr SymNeg(const ExprPtr& a) {
  if (!a) return nullptr;
  const Affine x = Split(a);
  if (x.k == kInt64Min) return Unary(UnaryOp::kNeg, a);
  return Join(x.base ? NegBase(x.base) : nullptr, -x.k);
}

// a * c for a literal c.
ExprPtr SymScale(const ExprPtr& a, int64_t c) {
  if (!a) return nullptr;
  if (c == 0) return IntLit(0);
  if (c == 1) return a;
  if (IsLit(a)) {
    if (const Num p = Mul(a->int_value, c)) return IntLit(*p);
  }
  return Binary(BinaryOp::kMul, a, IntLit(c));
}

// A binary node of the bounds, folded when both operands are literals.
ExprPtr SymOp(BinaryOp op, const ExprPtr& a, const ExprPtr& b) {
  if (!a || !b) return nullptr;
  if ((op == BinaryOp::kMin || op == BinaryOp::kMax) && Equal(a, b)) return a;
  // (Divisions here are by a positive divisor.)
  if (op == BinaryOp::kFloorDiv || op == BinaryOp::kCdiv) {
    if (IsLit(b) && b->int_value == 1) return a;
    if (IsLit(a) && a->int_value == 0) return a;
  }
  ExprPtr e = Binary(op, a, b);
  return IsLit(a) && IsLit(b) ? FoldConstants(e) : e;
}

// Either side where only one is known: bounds that hold for min / max of the two.
ExprPtr SymEither(BinaryOp op, const ExprPtr& a, const ExprPtr& b) {
  if (!a) return b;
  if (!b) return a;
  return SymOp(op, a, b);
}

bool TooLarge(const ExprPtr& e) {
  return MeasureExpr(e, kMaxSymbolicDepth, kMaxSymbolicNodes).over != nullptr;
}

// ---------------------------------------------------------------------------------------------
// Interval rules.

IntBounds Exact(int64_t v) { return {v, v, IntLit(v), IntLit(v)}; }

bool Known(const IntBounds& x) { return x.lo && x.hi; }

// The divisor's value as one expression valid for every symbol value, where the bounds pin it
// down (a literal, a builtin size); null otherwise.
ExprPtr ExactExpr(const IntBounds& d) {
  if (d.lo && d.hi && *d.lo == *d.hi) return IntLit(*d.lo);
  if (d.lo_expr && d.hi_expr && Equal(d.lo_expr, d.hi_expr)) return d.lo_expr;
  return nullptr;
}

IntBounds AddB(const IntBounds& x, const IntBounds& y) {
  if (!Known(x) || !Known(y)) return {};
  const Num lo = Add(x.lo, y.lo), hi = Add(x.hi, y.hi);
  if (!lo || !hi) return {};
  return {lo, hi, SymAdd(x.lo_expr, y.lo_expr), SymAdd(x.hi_expr, y.hi_expr)};
}

IntBounds SubB(const IntBounds& x, const IntBounds& y) {
  if (!Known(x) || !Known(y)) return {};
  const Num lo = Sub(x.lo, y.hi), hi = Sub(x.hi, y.lo);
  if (!lo || !hi) return {};
  return {lo, hi, SymSub(x.lo_expr, y.hi_expr), SymSub(x.hi_expr, y.lo_expr)};
}

// -x wraps only at INT64_MIN, which a known lower bound above it excludes.
IntBounds NegB(const IntBounds& x) {
  if (!x.lo || *x.lo == kInt64Min) return {};
  IntBounds r;
  r.hi = -*x.lo;
  r.hi_expr = SymNeg(x.lo_expr);
  if (x.hi) {
    r.lo = -*x.hi;
    r.lo_expr = SymNeg(x.hi_expr);
  }
  return r;
}

IntBounds AbsB(const IntBounds& x) {
  if (!x.lo || *x.lo == kInt64Min) return {};
  if (*x.lo >= 0) return x;
  if (x.hi && *x.hi <= 0) return NegB(x);
  IntBounds r;
  r.lo = 0;
  r.lo_expr = IntLit(0);
  if (x.hi) {
    r.hi = std::max(-*x.lo, *x.hi);
    r.hi_expr = SymOp(BinaryOp::kMax, SymNeg(x.lo_expr), x.hi_expr);
  }
  return r;
}

IntBounds MulB(const IntBounds& x, const IntBounds& y) {
  if (!Known(x) || !Known(y)) return {};
  std::vector<int64_t> corners;
  for (const Num& a : {x.lo, x.hi}) {
    for (const Num& b : {y.lo, y.hi}) {
      const Num p = Mul(a, b);
      if (!p) return {};
      corners.push_back(*p);
    }
  }
  IntBounds r;
  r.lo = *std::min_element(corners.begin(), corners.end());
  r.hi = *std::max_element(corners.begin(), corners.end());
  // Symbolically only where the sign is known: scaling by a number keeps or swaps the sides;
  // a product of non-negative factors is at most the product of their upper bounds.
  for (const auto& [factor, other] : {std::pair(&x, &y), std::pair(&y, &x)}) {
    if (*factor->lo == *factor->hi) {
      const int64_t c = *factor->lo;
      r.lo_expr = SymScale(c >= 0 ? other->lo_expr : other->hi_expr, c);
      r.hi_expr = SymScale(c >= 0 ? other->hi_expr : other->lo_expr, c);
      return r;
    }
  }
  if (*x.lo >= 0 && *y.lo >= 0) r.hi_expr = SymOp(BinaryOp::kMul, x.hi_expr, y.hi_expr);
  return r;
}

IntBounds MinMaxB(bool is_min, const IntBounds& x, const IntBounds& y) {
  // Where one operand is never above the other, the result is one of them.
  const bool x_below = x.hi && y.lo && *x.hi <= *y.lo;
  const bool y_below = y.hi && x.lo && *y.hi <= *x.lo;
  if (x_below) return is_min ? x : y;
  if (y_below) return is_min ? y : x;
  const BinaryOp op = is_min ? BinaryOp::kMin : BinaryOp::kMax;
  IntBounds r;
  if (is_min) {
    if (x.lo && y.lo) r.lo = std::min(*x.lo, *y.lo);
    r.hi = x.hi && y.hi ? std::optional(std::min(*x.hi, *y.hi)) : (x.hi ? x.hi : y.hi);
    r.lo_expr = SymOp(op, x.lo_expr, y.lo_expr);
    r.hi_expr = SymEither(op, x.hi_expr, y.hi_expr);
  } else {
    if (x.hi && y.hi) r.hi = std::max(*x.hi, *y.hi);
    r.lo = x.lo && y.lo ? std::optional(std::max(*x.lo, *y.lo)) : (x.lo ? x.lo : y.lo);
    r.hi_expr = SymOp(op, x.hi_expr, y.hi_expr);
    r.lo_expr = SymEither(op, x.lo_expr, y.lo_expr);
  }
  return r;
}

IntBounds UnionB(const IntBounds& x, const IntBounds& y) {
  IntBounds r;
  if (x.lo && y.lo) r.lo = std::min(*x.lo, *y.lo);
  if (x.hi && y.hi) r.hi = std::max(*x.hi, *y.hi);
  r.lo_expr = SymOp(BinaryOp::kMin, x.lo_expr, y.lo_expr);
  r.hi_expr = SymOp(BinaryOp::kMax, x.hi_expr, y.hi_expr);
  return r;
}

// f at the four corners, for f monotone in each operand over a box that excludes a zero divisor.
template <typename F>
IntBounds CornersB(const IntBounds& x, const IntBounds& d, F f) {
  if (!Known(x) || !Known(d)) return {};
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = kInt64Min;
  for (int64_t a : {*x.lo, *x.hi}) {
    for (int64_t b : {*d.lo, *d.hi}) {
      const int64_t v = f(a, b);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  return {lo, hi, nullptr, nullptr};
}

// x // d is increasing in x for d > 0; for fixed x it moves toward 0 (x >= 0) or toward -1
// (x < 0) as d grows, so the extremes lie at the ends of d's range (0 / -1 if it has none).
IntBounds FloorDivB(const IntBounds& x, const IntBounds& d) {
  if (d.lo && *d.lo >= 1) {
    IntBounds r;
    if (x.lo) r.lo = *x.lo >= 0 ? (d.hi ? FloorDiv(*x.lo, *d.hi) : 0) : FloorDiv(*x.lo, *d.lo);
    if (x.hi) r.hi = *x.hi >= 0 ? FloorDiv(*x.hi, *d.lo) : (d.hi ? FloorDiv(*x.hi, *d.hi) : -1);
    if (const ExprPtr c = ExactExpr(d)) {
      r.lo_expr = SymOp(BinaryOp::kFloorDiv, x.lo_expr, c);
      r.hi_expr = SymOp(BinaryOp::kFloorDiv, x.hi_expr, c);
    }
    return r;
  }
  if (d.hi && *d.hi <= -1) {
    if (!x.lo || (*x.lo == kInt64Min && *d.hi == -1)) return {};
    return CornersB(x, d, FloorDiv);
  }
  return {};
}

IntBounds CdivB(const IntBounds& x, const IntBounds& d) {
  // The evaluator computes cdiv(x, d) as -((-x) // d), which goes wrong where -x wraps.
  if (!x.lo || *x.lo == kInt64Min) return {};
  if (d.lo && *d.lo >= 1) {
    IntBounds r;
    r.lo = *x.lo <= 0 ? CeilDiv(*x.lo, *d.lo) : (d.hi ? CeilDiv(*x.lo, *d.hi) : 1);
    if (x.hi) r.hi = *x.hi > 0 ? CeilDiv(*x.hi, *d.lo) : (d.hi ? CeilDiv(*x.hi, *d.hi) : 0);
    if (const ExprPtr c = ExactExpr(d)) {
      r.lo_expr = SymOp(BinaryOp::kCdiv, x.lo_expr, c);
      r.hi_expr = SymOp(BinaryOp::kCdiv, x.hi_expr, c);
    }
    return r;
  }
  if (d.hi && *d.hi <= -1) return CornersB(x, d, CeilDiv);
  return {};
}

// Python's x % d lies in [0, d - 1] for d > 0 (and is x itself for 0 <= x < d), in [d + 1, 0]
// for d < 0.
IntBounds ModB(const IntBounds& x, const IntBounds& d) {
  if (d.lo && *d.lo >= 1) {
    const bool non_negative = x.lo && *x.lo >= 0;
    if (non_negative && x.hi && *x.hi < *d.lo) return x;
    IntBounds r;
    r.lo = 0;
    r.lo_expr = IntLit(0);
    if (d.hi) r.hi = *d.hi - 1;
    if (non_negative && x.hi) r.hi = r.hi ? std::min(*r.hi, *x.hi) : *x.hi;
    r.hi_expr = SymEither(BinaryOp::kMin, non_negative ? x.hi_expr : nullptr,
                          d.hi_expr ? SymSub(d.hi_expr, IntLit(1)) : nullptr);
    return r;
  }
  if (d.hi && *d.hi <= -1) {
    IntBounds r;
    r.hi = 0;
    r.hi_expr = IntLit(0);
    if (d.lo) r.lo = *d.lo + 1;
    r.lo_expr = d.lo_expr ? SymAdd(d.lo_expr, IntLit(1)) : nullptr;
    return r;
  }
  return {};
}

Num PowNum(int64_t base, int64_t n) {
  Num r = 1;
  for (int64_t i = 0; i < n && r; ++i) r = Mul(r, base);
  return r;
}

// x ** n for a literal n >= 0: monotone for odd n or x >= 0; an even power of a range around
// zero is [0, the larger end's power].
IntBounds PowB(const IntBounds& x, int64_t n) {
  if (n == 0) return Exact(1);
  if (n == 1) return x;
  if (!Known(x) || n > 64) return {};
  const Num lo_pow = PowNum(*x.lo, n), hi_pow = PowNum(*x.hi, n);
  if (!lo_pow || !hi_pow) return {};
  const bool odd = n % 2 == 1;
  IntBounds r;
  if (odd || *x.lo >= 0) {
    r = {lo_pow, hi_pow, nullptr, nullptr};
    // ha ** n >= x ** n needs only ha >= x >= 0; la ** n <= x ** n needs la >= 0 unless n is odd.
    r.hi_expr = SymOp(BinaryOp::kPow, x.hi_expr, IntLit(n));
    if (odd) r.lo_expr = SymOp(BinaryOp::kPow, x.lo_expr, IntLit(n));
  } else if (*x.hi <= 0) {
    r = {hi_pow, lo_pow, nullptr, nullptr};
  } else {
    r = {0, std::max(*lo_pow, *hi_pow), nullptr, nullptr};
  }
  return r;
}

bool IsClosed(const ExprPtr& e) {
  std::vector<std::string> names, buffers;
  CollectVars(e, &names);
  CollectBuffers(e, &buffers);
  return names.empty() && buffers.empty();
}

// ---------------------------------------------------------------------------------------------
// The walk.

struct Result {
  IntBounds bounds;
  // The value is an int (or a bool, taken as 0 / 1). Anything else (a float, a symbol the
  // environment does not know, which might be one) is unbounded, and so is every operation on
  // it: a float's x % 8 may be 7.5, which no int bound of 7 covers once doubled.
  bool is_int = false;
};

class Analyzer {
 public:
  explicit Analyzer(const BoundsEnv& env) : env_(env) {}

  Result Of(const ExprPtr& e, int depth) {
    if (depth > kMaxExprDepth) return {};
    if (auto it = memo_.find(e.get()); it != memo_.end()) return it->second;
    Result r = Compute(e, depth);
    if (r.is_int) {
      Tidy(&r.bounds);
    } else {
      r.bounds = {};
    }
    memo_.emplace(e.get(), r);
    return r;
  }

 private:
  static Result Int(IntBounds b) { return {std::move(b), true}; }
  static Result Bool() { return Int({0, 1, IntLit(0), IntLit(1)}); }

  // A number without a symbolic form is its own; a literal form and the number keep the
  // tighter of the two; an oversized form falls back to the number.
  static void Tidy(IntBounds* b) {
    Tidy(&b->lo, &b->lo_expr, /*is_lo=*/true);
    Tidy(&b->hi, &b->hi_expr, /*is_lo=*/false);
  }
  static void Tidy(Num* n, ExprPtr* e, bool is_lo) {
    if (*e && TooLarge(*e)) *e = nullptr;
    if (*e && IsLit(*e)) {
      const int64_t v = (*e)->int_value;
      if (!*n || (is_lo ? v > **n : v < **n)) *n = v;
    }
    if (*n && (!*e || IsLit(*e))) *e = IntLit(**n);
  }

  Result Compute(const ExprPtr& e, int depth) {
    switch (e->kind) {
      case ExprKind::kBoolLit: return Int(Exact(e->bool_value ? 1 : 0));
      case ExprKind::kIntLit: return Int(Exact(e->int_value));
      case ExprKind::kFloatLit: return {};
      case ExprKind::kVar: {
        auto it = env_.find(e->name);
        if (it == env_.end()) return {};
        const SymbolRange& s = it->second;
        return Int({s.lo_num, s.hi_num, s.lo, s.hi});
      }
      case ExprKind::kIndex: return {};  // any value, and buffers may hold floats
      case ExprKind::kUnary: return OfUnary(e, depth);
      case ExprKind::kBinary: return OfBinary(e, depth);
      case ExprKind::kSelect: {
        const Result x = Of(e->args[1], depth + 1), y = Of(e->args[2], depth + 1);
        if (!x.is_int || !y.is_int) return {};
        if (e->args[0]->kind == ExprKind::kBoolLit) return e->args[0]->bool_value ? x : y;
        return Int(UnionB(x.bounds, y.bounds));
      }
    }
    return {};
  }

  Result OfUnary(const ExprPtr& e, int depth) {
    const Result x = Of(e->args[0], depth + 1);
    switch (e->unary_op) {
      case UnaryOp::kNot: return Bool();
      // int(x) of an int is x; of a float it is unbounded here (x is).
      case UnaryOp::kToInt: return x.is_int ? x : Int({});
      case UnaryOp::kNeg: return x.is_int ? Int(NegB(x.bounds)) : Result{};
      case UnaryOp::kAbs: return x.is_int ? Int(AbsB(x.bounds)) : Result{};
      default: return {};  // float math
    }
  }

  Result OfBinary(const ExprPtr& e, int depth) {
    const BinaryOp op = e->binary_op;
    const Result x = Of(e->args[0], depth + 1);
    const Result y = Of(e->args[1], depth + 1);
    if (IsComparison(op) || IsLogical(op)) return Bool();
    if (op == BinaryOp::kPow) {
      // int ** int stays an int only with a constant exponent >= 0 (else it is a float).
      const IntBounds& n = y.bounds;
      if (!x.is_int || !y.is_int || !n.lo || *n.lo != *n.hi || *n.lo < 0 ||
          !IsClosed(e->args[1])) {
        return {};
      }
      return Int(PowB(x.bounds, *n.lo));
    }
    if (!x.is_int || !y.is_int) return {};
    switch (op) {
      case BinaryOp::kAdd: return Int(AddB(x.bounds, y.bounds));
      case BinaryOp::kSub: return Int(SubB(x.bounds, y.bounds));
      case BinaryOp::kMul: return Int(MulB(x.bounds, y.bounds));
      case BinaryOp::kMin: return Int(MinMaxB(true, x.bounds, y.bounds));
      case BinaryOp::kMax: return Int(MinMaxB(false, x.bounds, y.bounds));
      case BinaryOp::kFloorDiv: return Int(FloorDivB(x.bounds, y.bounds));
      case BinaryOp::kMod: return Int(ModB(x.bounds, y.bounds));
      case BinaryOp::kCdiv: return Int(CdivB(x.bounds, y.bounds));
      case BinaryOp::kShl:
      case BinaryOp::kShr: {
        // By one known amount in [0, 62]: x * 2^k (MulB leaves a possible wrap unbounded) or
        // x // 2^k (>> is arithmetic, i.e. the floor).
        const IntBounds& k = y.bounds;
        if (!k.lo || !k.hi || *k.lo != *k.hi || *k.lo < 0 || *k.lo > 62) return Int({});
        const IntBounds p = Exact(int64_t{1} << *k.lo);
        return Int(op == BinaryOp::kShl ? MulB(x.bounds, p) : FloorDivB(x.bounds, p));
      }
      case BinaryOp::kBitAnd: {
        // With one side >= 0 the result is in [0, that side's largest value].
        std::optional<int64_t> hi;
        for (const IntBounds* b : {&x.bounds, &y.bounds}) {
          if (b->lo && *b->lo >= 0 && b->hi) hi = hi ? std::min(*hi, *b->hi) : *b->hi;
        }
        if (!hi) return Int({});
        return Int({int64_t{0}, *hi, IntLit(0), IntLit(*hi)});
      }
      case BinaryOp::kBitOr:
      case BinaryOp::kBitXor:
      case BinaryOp::kFmod:
        return Int({});  // ints, unbounded here
      default: return {};  // true division: a float
    }
  }

  const BoundsEnv& env_;
  std::unordered_map<const Expr*, Result> memo_;
};

}  // namespace

BoundsEnv ElementBoundsEnv() {
  BoundsEnv env;
  for (const char* size : {"batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_kv", "head_dim"}) {
    env[size] = SymbolRange{Var(size), Var(size), 1, kLargestSize};
  }
  const std::pair<const char*, const char*> indices[] = {
      {"b", "batch"}, {"h", "heads_q"}, {"q_idx", "seqlen_q"}, {"kv_idx", "seqlen_kv"}};
  for (const auto& [index, size] : indices) {
    env[index] = SymbolRange{IntLit(0), Binary(BinaryOp::kSub, Var(size), IntLit(1)), 0,
                             kLargestSize - 1};
  }
  return env;
}

IntBounds BoundsOf(const ExprPtr& e, const BoundsEnv& env) {
  if (e == nullptr) return {};
  IntBounds b = Analyzer(env).Of(e, 0).bounds;
  if (b.lo_expr) b.lo_expr = FoldConstants(b.lo_expr);
  if (b.hi_expr) b.hi_expr = FoldConstants(b.hi_expr);
  return b;
}

bool ProvablyNonNegative(const ExprPtr& e, const BoundsEnv& env) {
  const IntBounds b = BoundsOf(e, env);
  return b.lo && *b.lo >= 0;
}

bool WithinInt32(const IntBounds& b) {
  return b.lo && b.hi && *b.lo >= std::numeric_limits<int32_t>::min() &&
         *b.hi <= std::numeric_limits<int32_t>::max();
}

}  // namespace cubridge::cuir
