#include "cuir/ir/derivative.h"

#include <cmath>
#include <functional>

#include "absl/strings/str_cat.h"

namespace cubridge::cuir {
namespace {

// A derivative under construction: null stands for 0, so that terms without the variable
// vanish instead of growing the tree.
using D = ExprPtr;

bool IsFloat(const ExprPtr& e, double v) {
  return e != nullptr && e->kind == ExprKind::kFloatLit && e->float_value == v;
}
D Add(D a, D b) {
  if (a == nullptr) return b;
  if (b == nullptr) return a;
  return Binary(BinaryOp::kAdd, std::move(a), std::move(b));
}
D Neg(D a) { return a == nullptr ? nullptr : Unary(UnaryOp::kNeg, std::move(a)); }
D Sub(D a, D b) {
  if (b == nullptr) return a;
  if (a == nullptr) return Neg(std::move(b));
  return Binary(BinaryOp::kSub, std::move(a), std::move(b));
}
// `d` times a factor that is not a derivative (never null).
D Times(D d, const ExprPtr& factor) {
  if (d == nullptr) return nullptr;
  if (IsFloat(d, 1.0)) return factor;
  if (IsFloat(factor, 1.0)) return d;
  return Binary(BinaryOp::kMul, std::move(d), factor);
}
D Over(D d, const ExprPtr& divisor) {
  return d == nullptr ? nullptr : Binary(BinaryOp::kDiv, std::move(d), divisor);
}
ExprPtr F(double v) { return FloatLit(v); }
// A derivative where an expression needs one (a select's branch): 0.0 for none.
ExprPtr OrZero(const D& d) { return d != nullptr ? d : F(0.0); }
ExprPtr Square(const ExprPtr& a) { return Binary(BinaryOp::kMul, a, a); }

constexpr double kLn2 = 0.6931471805599453;
constexpr double kLn10 = 2.302585092994046;
constexpr double kTwoOverSqrtPi = 1.1283791670955126;

class Differentiator {
 public:
  Differentiator(const TypeEnv& env, std::function<bool(const ExprPtr&)> is_target)
      : env_(env), is_target_(std::move(is_target)) {}

  absl::StatusOr<D> Of(const ExprPtr& e) {
    if (is_target_(e)) return F(1.0);
    auto type = TypeOf(e, env_);
    if (!type.ok()) return type.status();
    // Bools and ints are piecewise constant in any float: so are indices, masks' predicates and
    // a buffer value read at them (a read is a target only where asked for).
    if (*type != Type::kFloat) return D(nullptr);
    switch (e->kind) {
      case ExprKind::kBoolLit:
      case ExprKind::kIntLit:
      case ExprKind::kFloatLit:
      case ExprKind::kVar:
      case ExprKind::kIndex:
        return D(nullptr);
      case ExprKind::kSelect: {
        auto a = Of(e->args[1]);
        if (!a.ok()) return a.status();
        auto b = Of(e->args[2]);
        if (!b.ok()) return b.status();
        if (*a == nullptr && *b == nullptr) return D(nullptr);
        return D(Select(e->args[0], OrZero(*a), OrZero(*b)));
      }
      case ExprKind::kUnary:
        return OfUnary(e);
      case ExprKind::kBinary:
        return OfBinary(e);
    }
    return absl::InternalError("derivative: unknown expression kind");
  }

 private:
  absl::StatusOr<D> OfUnary(const ExprPtr& e) {
    const ExprPtr& a = e->args[0];
    auto da_or = Of(a);
    if (!da_or.ok()) return da_or.status();
    D da = *std::move(da_or);
    if (da == nullptr) return D(nullptr);
    switch (e->unary_op) {
      case UnaryOp::kNeg: return Neg(da);
      case UnaryOp::kToFloat: return da;
      case UnaryOp::kAbs: return Times(da, Unary(UnaryOp::kSign, a));
      case UnaryOp::kExp: return Times(da, e);
      case UnaryOp::kExpm1: return Times(da, Unary(UnaryOp::kExp, a));
      case UnaryOp::kExp2: return Times(da, Binary(BinaryOp::kMul, e, F(kLn2)));
      case UnaryOp::kLog: return Over(da, a);
      case UnaryOp::kLog2: return Over(da, Binary(BinaryOp::kMul, a, F(kLn2)));
      case UnaryOp::kLog10: return Over(da, Binary(BinaryOp::kMul, a, F(kLn10)));
      case UnaryOp::kLog1p: return Over(da, Binary(BinaryOp::kAdd, F(1.0), a));
      case UnaryOp::kSqrt: return Over(da, Binary(BinaryOp::kMul, F(2.0), e));
      case UnaryOp::kTanh: return Times(da, Binary(BinaryOp::kSub, F(1.0), Square(e)));
      case UnaryOp::kSigmoid: return Times(da, Binary(BinaryOp::kMul, e, Binary(BinaryOp::kSub, F(1.0), e)));
      case UnaryOp::kSin: return Times(da, Unary(UnaryOp::kCos, a));
      case UnaryOp::kCos: return Neg(Times(da, Unary(UnaryOp::kSin, a)));
      case UnaryOp::kTan: return Times(da, Binary(BinaryOp::kAdd, F(1.0), Square(e)));
      case UnaryOp::kAsin:
        return Over(da, Unary(UnaryOp::kSqrt, Binary(BinaryOp::kSub, F(1.0), Square(a))));
      case UnaryOp::kAcos:
        return Neg(Over(da, Unary(UnaryOp::kSqrt, Binary(BinaryOp::kSub, F(1.0), Square(a)))));
      case UnaryOp::kAtan: return Over(da, Binary(BinaryOp::kAdd, F(1.0), Square(a)));
      case UnaryOp::kSinh: return Times(da, Unary(UnaryOp::kCosh, a));
      case UnaryOp::kCosh: return Times(da, Unary(UnaryOp::kSinh, a));
      case UnaryOp::kAsinh:
        return Over(da, Unary(UnaryOp::kSqrt, Binary(BinaryOp::kAdd, Square(a), F(1.0))));
      case UnaryOp::kAcosh:
        return Over(da, Unary(UnaryOp::kSqrt, Binary(BinaryOp::kSub, Square(a), F(1.0))));
      case UnaryOp::kAtanh: return Over(da, Binary(BinaryOp::kSub, F(1.0), Square(a)));
      case UnaryOp::kErf:
      case UnaryOp::kErfc: {
        const ExprPtr slope =
            Binary(BinaryOp::kMul, F(e->unary_op == UnaryOp::kErf ? kTwoOverSqrtPi : -kTwoOverSqrtPi),
                Unary(UnaryOp::kExp, Neg(Square(a))));
        return Times(da, slope);
      }
      // Piecewise constant in a float: steps.
      case UnaryOp::kFloor:
      case UnaryOp::kTrunc:
      case UnaryOp::kRound:
      case UnaryOp::kSign:
      case UnaryOp::kToInt:
      case UnaryOp::kNot:
      case UnaryOp::kBitNot:
        return D(nullptr);
    }
    return absl::InternalError(absl::StrCat("derivative: unknown op ", UnaryOpName(e->unary_op)));
  }

  absl::StatusOr<D> OfBinary(const ExprPtr& e) {
    const ExprPtr& a = e->args[0];
    const ExprPtr& b = e->args[1];
    auto da_or = Of(a);
    if (!da_or.ok()) return da_or.status();
    auto db_or = Of(b);
    if (!db_or.ok()) return db_or.status();
    D da = *std::move(da_or), db = *std::move(db_or);
    if (da == nullptr && db == nullptr) return D(nullptr);
    switch (e->binary_op) {
      case BinaryOp::kAdd: return Add(da, db);
      case BinaryOp::kSub: return Sub(da, db);
      case BinaryOp::kMul: return Add(Times(da, b), Times(db, a));
      // (a / b)' = a' / b - (a / b) b' / b
      case BinaryOp::kDiv: return Sub(Over(da, b), Over(Times(db, e), b));
      // a % b = a - floor(a / b) b (Python), fmod(a, b) = a - trunc(a / b) b: the quotient is a
      // step, so only b's own factor remains.
      case BinaryOp::kMod:
      case BinaryOp::kFmod: {
        const UnaryOp step = e->binary_op == BinaryOp::kMod ? UnaryOp::kFloor : UnaryOp::kTrunc;
        return Sub(da, Times(db, Unary(step, Binary(BinaryOp::kDiv, a, b))));
      }
      case BinaryOp::kPow: {
        // (a ** b)' = b a ** (b - 1) a' + a ** b log(a) b'
        D from_a = Times(da, Binary(BinaryOp::kMul, b, Binary(BinaryOp::kPow, a, Binary(BinaryOp::kSub, b, F(1.0)))));
        D from_b = Times(db, Binary(BinaryOp::kMul, e, Unary(UnaryOp::kLog, a)));
        return Add(from_a, from_b);
      }
      case BinaryOp::kMin:
      case BinaryOp::kMax: {
        const BinaryOp keeps_a = e->binary_op == BinaryOp::kMin ? BinaryOp::kLe : BinaryOp::kGe;
        return D(Select(Binary(keeps_a, a, b), OrZero(da), OrZero(db)));
      }
      case BinaryOp::kAtan2: {
        // atan2(a, b)' = (b a' - a b') / (a^2 + b^2)
        const ExprPtr norm = Binary(BinaryOp::kAdd, Square(a), Square(b));
        return Over(Sub(Times(da, b), Times(db, a)), norm);
      }
      case BinaryOp::kFloorDiv:
        return D(nullptr);  // a step in either operand
      case BinaryOp::kCdiv:
      case BinaryOp::kLt: case BinaryOp::kLe: case BinaryOp::kGt: case BinaryOp::kGe:
      case BinaryOp::kEq: case BinaryOp::kNe: case BinaryOp::kAnd: case BinaryOp::kOr:
      case BinaryOp::kBitAnd: case BinaryOp::kBitOr: case BinaryOp::kBitXor:
      case BinaryOp::kShl: case BinaryOp::kShr:
        return D(nullptr);  // not float-valued: TypeOf answered before
    }
    return absl::InternalError(absl::StrCat("derivative: unknown op ", BinaryOpName(e->binary_op)));
  }

  const TypeEnv& env_;
  std::function<bool(const ExprPtr&)> is_target_;
};

// The finished derivative: folded, 0.0 for none, float-typed.
absl::StatusOr<ExprPtr> Finish(absl::StatusOr<D> d, const TypeEnv& env) {
  if (!d.ok()) return d.status();
  if (*d == nullptr) return F(0.0);
  ExprPtr out = FoldConstants(*d);
  auto type = TypeOf(out, env);
  if (!type.ok()) return type.status();
  return *type == Type::kFloat ? out : Unary(UnaryOp::kToFloat, out);
}

void CollectReads(const ExprPtr& e, const std::string& buffer, std::vector<ExprPtr>* reads) {
  if (e->kind == ExprKind::kIndex && e->name == buffer) {
    for (const ExprPtr& r : *reads) {
      if (Equal(r, e)) return;
    }
    reads->push_back(e);
  }
  for (const ExprPtr& a : e->args) CollectReads(a, buffer, reads);
}

}  // namespace

absl::StatusOr<ExprPtr> Differentiate(const ExprPtr& e, const std::string& var, const TypeEnv& env) {
  Differentiator d(env, [&](const ExprPtr& x) { return x->kind == ExprKind::kVar && x->name == var; });
  return Finish(d.Of(e), env);
}

absl::StatusOr<std::vector<BufferReadPartial>> DifferentiateBufferReads(const ExprPtr& e,
                                                                        const std::string& buffer,
                                                                        const TypeEnv& env) {
  const auto it = env.buffers.find(buffer);
  if (it == env.buffers.end() || it->second != Type::kFloat) {
    return absl::InvalidArgumentError(absl::StrCat(
        "buffer `", buffer, "` is ", it == env.buffers.end() ? "not known" : TypeName(it->second),
        ": only a floating captured tensor has a gradient"));
  }
  std::vector<ExprPtr> reads;
  CollectReads(e, buffer, &reads);
  std::vector<BufferReadPartial> out;
  for (const ExprPtr& read : reads) {
    Differentiator d(env, [&](const ExprPtr& x) {
      return x->kind == ExprKind::kIndex && x->name == buffer && Equal(x, read);
    });
    auto partial = Finish(d.Of(e), env);
    if (!partial.ok()) return partial.status();
    out.push_back({read->args, *std::move(partial)});
  }
  return out;
}

}  // namespace cubridge::cuir
