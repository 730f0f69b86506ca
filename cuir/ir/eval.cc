// Scalar evaluation and typing of CuIR expressions.
//
// Typing and evaluation share one set of rules (UnaryResult / BinaryResult / SelectResult): the
// evaluator computes its operands' types from their values and asks the same functions the type
// checker uses, so a program that type-checks can never evaluate to a differently typed value,
// and both report the same mistakes in the same words.
#include "cuir/ir/eval.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace cubridge::cuir {
namespace {

// ---------------------------------------------------------------------------------------------
// Shared type rules. They return the problem without a location; callers add where and what.

bool IsNumeric(Type t) { return t == Type::kInt || t == Type::kFloat; }

Type Promote(Type a, Type b) {
  return (a == Type::kFloat || b == Type::kFloat) ? Type::kFloat : Type::kInt;
}

absl::StatusOr<Type> UnaryResult(UnaryOp op, Type a) {
  switch (op) {
    case UnaryOp::kNot:
      if (a == Type::kBool) return Type::kBool;
      return absl::InvalidArgumentError(
          absl::StrCat("`!` needs a bool operand, got ", TypeName(a),
                       " (compare it explicitly, e.g. `x != 0`)"));
    case UnaryOp::kToFloat:
      return Type::kFloat;
    case UnaryOp::kToInt:
      return Type::kInt;
    case UnaryOp::kNeg:
    case UnaryOp::kAbs:
    case UnaryOp::kSign:
      if (IsNumeric(a)) return a;
      break;
    case UnaryOp::kBitNot:
      if (a == Type::kInt) return Type::kInt;
      return absl::InvalidArgumentError(absl::StrCat(
          "`bit_not` needs an int operand, got ", TypeName(a),
          a == Type::kBool ? " (negate a bool with `!`)" : " (convert it with `int(...)`)"));
    default:  // exp, log, sqrt, tanh, sin, erf, floor, round, ...: float math
      if (IsNumeric(a)) return Type::kFloat;
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "`", UnaryOpName(op), "` needs an int or float operand, got ", TypeName(a),
      " (convert it with `int(...)` or `float(...)`)"));
}

// `pow_int_exponent`: the exponent of `**` is a constant int >= 0, which keeps int ** int an int
// (like Python, where 2 ** 3 is an int but 2 ** -1 a float).
absl::StatusOr<Type> BinaryResult(BinaryOp op, Type a, Type b, bool pow_int_exponent) {
  const std::string name = BinaryOpName(op);
  if (IsLogical(op)) {
    if (a == Type::kBool && b == Type::kBool) return Type::kBool;
    return absl::InvalidArgumentError(absl::StrCat("`", name, "` needs bool operands, got ",
                                                   TypeName(a), " and ", TypeName(b)));
  }
  if ((op == BinaryOp::kEq || op == BinaryOp::kNe) && a == Type::kBool && b == Type::kBool) {
    return Type::kBool;
  }
  if (!IsNumeric(a) || !IsNumeric(b)) {
    return absl::InvalidArgumentError(
        absl::StrCat("`", name, "` needs int or float operands, got ", TypeName(a), " and ",
                     TypeName(b), " (bools only combine with `&&`, `||`, `==`, `!=`, `select`)"));
  }
  if (IsComparison(op)) return Type::kBool;
  switch (op) {
    case BinaryOp::kDiv:
    case BinaryOp::kAtan2:
      return Type::kFloat;
    case BinaryOp::kBitAnd:
    case BinaryOp::kBitOr:
    case BinaryOp::kBitXor:
    case BinaryOp::kShl:
    case BinaryOp::kShr:
      if (a == Type::kInt && b == Type::kInt) return Type::kInt;
      return absl::InvalidArgumentError(
          absl::StrCat("`", name, "` needs int operands, got ", TypeName(a), " and ", TypeName(b),
                       " (bit operations work on ints; convert with `int(...)`)"));
    case BinaryOp::kCdiv:
      if (a == Type::kInt && b == Type::kInt) return Type::kInt;
      return absl::InvalidArgumentError(
          absl::StrCat("`cdiv` needs int operands, got ", TypeName(a), " and ", TypeName(b),
                       " (use `floor`/`int` to convert, or true division `/`)"));
    case BinaryOp::kPow:
      return (a == Type::kInt && b == Type::kInt && pow_int_exponent) ? Type::kInt : Type::kFloat;
    default:
      return Promote(a, b);
  }
}

absl::StatusOr<Type> SelectResult(Type c, Type a, Type b) {
  if (c != Type::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat("`select` needs a bool condition, got ", TypeName(c)));
  }
  if (a == b) return a;
  if (IsNumeric(a) && IsNumeric(b)) return Type::kFloat;
  return absl::InvalidArgumentError(absl::StrCat(
      "`select` branches must both be bool or both numbers, got ", TypeName(a), " and ",
      TypeName(b)));
}

// ---------------------------------------------------------------------------------------------
// Errors.

// Innermost known position: expressions built by rewrites may lack their own.
const SourceLoc& Where(const ExprPtr& e, const SourceLoc& outer) {
  return e->loc.known() ? e->loc : outer;
}

std::string Prefix(const SourceLoc& loc) { return loc.known() ? loc.ToString() + ": " : ""; }

absl::Status InExpr(const absl::Status& problem, const ExprPtr& e, const SourceLoc& loc) {
  return absl::Status(problem.code(), absl::StrCat(Prefix(loc), problem.message(), " in `",
                                                   PrintExpr(e), "`"));
}

// ---------------------------------------------------------------------------------------------
// Values.

Type TypeOfValue(const Value& v) {
  if (std::holds_alternative<bool>(v)) return Type::kBool;
  if (std::holds_alternative<int64_t>(v)) return Type::kInt;
  return Type::kFloat;
}

double AsDouble(const Value& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (const auto* b = std::get_if<bool>(&v)) return *b ? 1.0 : 0.0;
  return std::get<double>(v);
}

int64_t AsInt(const Value& v) {
  if (const auto* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
  return std::get<int64_t>(v);
}

// Integer overflow wraps (two's complement) instead of being undefined behaviour.
int64_t WrapAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t WrapSub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
int64_t WrapMul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

// Python //: rounds toward -inf. b != 0.
int64_t FloorDivInt(int64_t a, int64_t b) {
  if (b == -1) return WrapSub(0, a);  // avoids the INT64_MIN / -1 trap
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// Python %: the result has the sign of b. b != 0.
int64_t ModInt(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

int64_t IntPow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) result = WrapMul(result, base);
    base = WrapMul(base, base);
    exp >>= 1;
  }
  return result;
}

// Python's float // and % (which torch.floor_divide / torch.remainder follow); division by a
// float zero gives IEEE inf / nan like torch rather than raising.
double FloorDivFloat(double a, double b) {
  if (b == 0.0) return a / b;
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0.0 && ((b < 0) != (mod < 0))) div -= 1.0;
  if (div == 0.0) return std::copysign(0.0, a / b);
  double floored = std::floor(div);
  if (div - floored > 0.5) floored += 1.0;
  return floored;
}

double ModFloat(double a, double b) {
  if (b == 0.0) return std::nan("");
  double mod = std::fmod(a, b);
  if (mod == 0.0) return std::copysign(0.0, b);
  if ((b < 0) != (mod < 0)) mod += b;
  return mod;
}

// torch.minimum / maximum propagate NaN.
double MinMaxFloat(bool is_min, double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::nan("");
  return is_min ? std::min(a, b) : std::max(a, b);
}

bool IsClosed(const ExprPtr& e) {
  if (e->kind == ExprKind::kVar || e->kind == ExprKind::kIndex) return false;
  for (const auto& a : e->args) {
    if (!IsClosed(a)) return false;
  }
  return true;
}

bool IsConstNonNegativeInt(const ExprPtr& e) {
  if (!IsClosed(e)) return false;
  auto v = EvalScalar(e, ScalarEnv{});
  return v.ok() && std::holds_alternative<int64_t>(*v) && std::get<int64_t>(*v) >= 0;
}

// ---------------------------------------------------------------------------------------------
// Evaluation.

class Evaluator {
 public:
  explicit Evaluator(const ScalarEnv& env) : env_(env) {}

  absl::StatusOr<Value> Eval(const ExprPtr& e, const SourceLoc& outer) {
    const SourceLoc& loc = Where(e, outer);
    switch (e->kind) {
      case ExprKind::kBoolLit: return Value(e->bool_value);
      case ExprKind::kIntLit: return Value(e->int_value);
      case ExprKind::kFloatLit: return Value(e->float_value);
      case ExprKind::kVar: return Lookup(e, loc);
      case ExprKind::kIndex: return Element(e, loc);
      case ExprKind::kUnary: return EvalUnary(e, loc);
      case ExprKind::kBinary: return EvalBinary(e, loc);
      case ExprKind::kSelect: return EvalSelect(e, loc);
    }
    return absl::InternalError("unknown expression kind");
  }

 private:
  absl::StatusOr<Value> Lookup(const ExprPtr& e, const SourceLoc& loc) {
    auto it = env_.vars.find(e->name);
    if (it == env_.vars.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Prefix(loc), "`", e->name, "` has no value here (unbound name)"));
    }
    return it->second;
  }

  absl::StatusOr<Value> Element(const ExprPtr& e, const SourceLoc& loc) {
    std::vector<int64_t> index;
    for (const ExprPtr& arg : e->args) {
      auto i = Eval(arg, loc);
      if (!i.ok()) return i.status();
      if (!std::holds_alternative<int64_t>(*i)) {
        return InExpr(absl::InvalidArgumentError(absl::StrCat(
                          "buffer index must be an int, got ", TypeName(TypeOfValue(*i)))),
                      e, loc);
      }
      index.push_back(std::get<int64_t>(*i));
    }
    auto it = env_.buffers.find(e->name);
    if (it == env_.buffers.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Prefix(loc), "buffer `", e->name, "` has no data here (unbound buffer)"));
    }
    const BufferData& data = it->second;
    const auto offset = ElementOffset(data.sizes, index);
    if (!offset) {
      return absl::OutOfRangeError(absl::StrCat(
          Prefix(loc), "index [", absl::StrJoin(index, ", "), "] is out of range for buffer `",
          e->name, "` of shape [", absl::StrJoin(data.sizes, ", "), "] in `", PrintExpr(e),
          "` (the job's buffer must cover every index the kernel reads)"));
    }
    return data.values[*offset];
  }

  absl::StatusOr<Value> EvalUnary(const ExprPtr& e, const SourceLoc& loc) {
    auto a = Eval(e->args[0], loc);
    if (!a.ok()) return a.status();
    auto rt = UnaryResult(e->unary_op, TypeOfValue(*a));
    if (!rt.ok()) return InExpr(rt.status(), e, loc);
    if (*rt == Type::kInt && e->unary_op != UnaryOp::kToInt) {
      const int64_t x = AsInt(*a);
      switch (e->unary_op) {
        case UnaryOp::kNeg: return Value(WrapSub(0, x));
        case UnaryOp::kSign: return Value(int64_t{(0 < x) - (x < 0)});
        case UnaryOp::kBitNot: return Value(~x);
        default: return Value(x < 0 ? WrapSub(0, x) : x);  // abs
      }
    }
    if (*rt == Type::kBool) return Value(!std::get<bool>(*a));
    const double x = AsDouble(*a);
    switch (e->unary_op) {
      case UnaryOp::kNeg: return Value(-x);
      case UnaryOp::kAbs: return Value(std::fabs(x));
      case UnaryOp::kExp: return Value(std::exp(x));
      case UnaryOp::kExp2: return Value(std::exp2(x));
      case UnaryOp::kLog: return Value(std::log(x));
      case UnaryOp::kLog2: return Value(std::log2(x));
      case UnaryOp::kSqrt: return Value(std::sqrt(x));
      case UnaryOp::kTanh: return Value(std::tanh(x));
      case UnaryOp::kSigmoid: return Value(1.0 / (1.0 + std::exp(-x)));
      case UnaryOp::kFloor: return Value(std::floor(x));
      case UnaryOp::kToFloat: return Value(x);
      case UnaryOp::kToInt: return ToInt(*a, e, loc);
      case UnaryOp::kSin: return Value(std::sin(x));
      case UnaryOp::kCos: return Value(std::cos(x));
      case UnaryOp::kTan: return Value(std::tan(x));
      case UnaryOp::kAsin: return Value(std::asin(x));
      case UnaryOp::kAcos: return Value(std::acos(x));
      case UnaryOp::kAtan: return Value(std::atan(x));
      case UnaryOp::kSinh: return Value(std::sinh(x));
      case UnaryOp::kCosh: return Value(std::cosh(x));
      case UnaryOp::kAsinh: return Value(std::asinh(x));
      case UnaryOp::kAcosh: return Value(std::acosh(x));
      case UnaryOp::kAtanh: return Value(std::atanh(x));
      case UnaryOp::kErf: return Value(std::erf(x));
      case UnaryOp::kErfc: return Value(std::erfc(x));
      case UnaryOp::kLog1p: return Value(std::log1p(x));
      case UnaryOp::kExpm1: return Value(std::expm1(x));
      case UnaryOp::kLog10: return Value(std::log10(x));
      case UnaryOp::kTrunc: return Value(std::trunc(x));
      case UnaryOp::kRound: return Value(std::nearbyint(x));  // half to even
      // torch: (0 < x) - (x < 0), so NaN gives 0.
      case UnaryOp::kSign: return Value(static_cast<double>((0 < x) - (x < 0)));
      case UnaryOp::kNot: case UnaryOp::kBitNot: break;
    }
    return absl::InternalError("unhandled unary op");
  }

  absl::StatusOr<Value> ToInt(const Value& a, const ExprPtr& e, const SourceLoc& loc) {
    if (!std::holds_alternative<double>(a)) return Value(AsInt(a));
    const double t = std::trunc(std::get<double>(a));
    // 2^63 is exactly representable; anything at or beyond it does not fit int64.
    constexpr double kLimit = 9223372036854775808.0;
    if (!(t >= -kLimit && t < kLimit)) {
      return InExpr(absl::InvalidArgumentError(absl::StrCat(
                        "cannot convert ", ValueToString(a), " to int (out of the int64 range)")),
                    e, loc);
    }
    return Value(static_cast<int64_t>(t));
  }

  absl::StatusOr<Value> EvalBinary(const ExprPtr& e, const SourceLoc& loc) {
    auto a = Eval(e->args[0], loc);
    if (!a.ok()) return a.status();
    auto b = Eval(e->args[1], loc);
    if (!b.ok()) return b.status();
    const BinaryOp op = e->binary_op;
    const bool int_exp = op == BinaryOp::kPow && IsConstNonNegativeInt(e->args[1]);
    auto rt = BinaryResult(op, TypeOfValue(*a), TypeOfValue(*b), int_exp);
    if (!rt.ok()) return InExpr(rt.status(), e, loc);
    if (IsLogical(op)) {
      const bool x = std::get<bool>(*a), y = std::get<bool>(*b);
      return Value(op == BinaryOp::kAnd ? (x && y) : (x || y));
    }
    if (IsComparison(op)) return Compare(op, *a, *b);
    if (*rt == Type::kInt) return IntArith(op, AsInt(*a), AsInt(*b), e, loc);
    return Value(FloatArith(op, AsDouble(*a), AsDouble(*b)));
  }

  static Value Compare(BinaryOp op, const Value& a, const Value& b) {
    int order;  // -1, 0, 1, or 2 for unordered (NaN)
    if (std::holds_alternative<int64_t>(a) && std::holds_alternative<int64_t>(b)) {
      const int64_t x = std::get<int64_t>(a), y = std::get<int64_t>(b);
      order = x < y ? -1 : (x > y ? 1 : 0);
    } else {
      const double x = AsDouble(a), y = AsDouble(b);
      order = x < y ? -1 : (x > y ? 1 : (x == y ? 0 : 2));
    }
    switch (op) {
      case BinaryOp::kLt: return Value(order == -1);
      case BinaryOp::kLe: return Value(order == -1 || order == 0);
      case BinaryOp::kGt: return Value(order == 1);
      case BinaryOp::kGe: return Value(order == 1 || order == 0);
      case BinaryOp::kEq: return Value(order == 0);
      default: return Value(order != 0);  // kNe
    }
  }

  static absl::StatusOr<Value> IntArith(BinaryOp op, int64_t x, int64_t y, const ExprPtr& e,
                                        const SourceLoc& loc) {
    const bool divides = op == BinaryOp::kFloorDiv || op == BinaryOp::kMod ||
                         op == BinaryOp::kCdiv || op == BinaryOp::kFmod;
    if (divides && y == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          Prefix(loc), "integer division by zero in `", PrintExpr(e), "` (the right operand `",
          PrintExpr(e->args[1]), "` evaluated to 0)"));
    }
    switch (op) {
      case BinaryOp::kAdd: return Value(WrapAdd(x, y));
      case BinaryOp::kSub: return Value(WrapSub(x, y));
      case BinaryOp::kMul: return Value(WrapMul(x, y));
      case BinaryOp::kFloorDiv: return Value(FloorDivInt(x, y));
      case BinaryOp::kMod: return Value(ModInt(x, y));
      case BinaryOp::kPow: return Value(IntPow(x, y));
      case BinaryOp::kMin: return Value(std::min(x, y));
      case BinaryOp::kMax: return Value(std::max(x, y));
      case BinaryOp::kCdiv: return Value(WrapSub(0, FloorDivInt(WrapSub(0, x), y)));
      case BinaryOp::kFmod: return Value(y == -1 ? 0 : x % y);  // C: sign of x
      case BinaryOp::kBitAnd: return Value(x & y);
      case BinaryOp::kBitOr: return Value(x | y);
      case BinaryOp::kBitXor: return Value(x ^ y);
      // torch: a shift by a negative amount or past the width gives 0 (left) or the sign (right).
      case BinaryOp::kShl:
        return Value(y < 0 || y >= 64 ? int64_t{0}
                                      : static_cast<int64_t>(static_cast<uint64_t>(x) << y));
      case BinaryOp::kShr: return Value(x >> (y < 0 || y >= 64 ? 63 : y));
      default: break;
    }
    return absl::InternalError("unhandled int op");
  }

  static double FloatArith(BinaryOp op, double x, double y) {
    switch (op) {
      case BinaryOp::kAdd: return x + y;
      case BinaryOp::kSub: return x - y;
      case BinaryOp::kMul: return x * y;
      case BinaryOp::kDiv: return x / y;
      case BinaryOp::kFloorDiv: return FloorDivFloat(x, y);
      case BinaryOp::kMod: return ModFloat(x, y);
      case BinaryOp::kPow: return std::pow(x, y);
      case BinaryOp::kMin: return MinMaxFloat(true, x, y);
      case BinaryOp::kAtan2: return std::atan2(x, y);
      case BinaryOp::kFmod: return std::fmod(x, y);
      default: return MinMaxFloat(false, x, y);  // kMax
    }
  }

  absl::StatusOr<Value> EvalSelect(const ExprPtr& e, const SourceLoc& loc) {
    Value v[3];
    for (int i = 0; i < 3; ++i) {
      auto r = Eval(e->args[i], loc);
      if (!r.ok()) return r.status();
      v[i] = *r;
    }
    auto rt = SelectResult(TypeOfValue(v[0]), TypeOfValue(v[1]), TypeOfValue(v[2]));
    if (!rt.ok()) return InExpr(rt.status(), e, loc);
    const Value& chosen = std::get<bool>(v[0]) ? v[1] : v[2];
    if (*rt == Type::kFloat) return Value(AsDouble(chosen));
    return chosen;
  }

  const ScalarEnv& env_;
};

// ---------------------------------------------------------------------------------------------
// Typing.

class TypeChecker {
 public:
  explicit TypeChecker(const TypeEnv& env) : env_(env) {}

  absl::StatusOr<Type> Check(const ExprPtr& e, const SourceLoc& outer) {
    const SourceLoc& loc = Where(e, outer);
    switch (e->kind) {
      case ExprKind::kBoolLit: return Type::kBool;
      case ExprKind::kIntLit: return Type::kInt;
      case ExprKind::kFloatLit: return Type::kFloat;
      case ExprKind::kVar: {
        auto it = env_.vars.find(e->name);
        if (it != env_.vars.end()) return it->second;
        return absl::InvalidArgumentError(
            absl::StrCat(Prefix(loc), "undeclared name `", e->name, "`"));
      }
      case ExprKind::kIndex: return CheckIndex(e, loc);
      case ExprKind::kUnary: {
        auto a = Check(e->args[0], loc);
        if (!a.ok()) return a;
        auto rt = UnaryResult(e->unary_op, *a);
        return rt.ok() ? rt : InExpr(rt.status(), e, loc);
      }
      case ExprKind::kBinary: return CheckBinary(e, loc);
      case ExprKind::kSelect: return CheckSelect(e, loc);
    }
    return absl::InternalError("unknown expression kind");
  }

 private:
  absl::StatusOr<Type> CheckIndex(const ExprPtr& e, const SourceLoc& loc) {
    auto it = env_.buffers.find(e->name);
    if (it == env_.buffers.end()) {
      return absl::InvalidArgumentError(absl::StrCat(Prefix(loc), "undeclared buffer `", e->name,
                                                     "` (declare it with `buffer ", e->name,
                                                     ": DTYPE[EXTENT, ...]`)"));
    }
    for (const ExprPtr& arg : e->args) {
      auto index = Check(arg, loc);
      if (!index.ok()) return index;
      if (*index != Type::kInt) {
        return InExpr(absl::InvalidArgumentError(
                          absl::StrCat("buffer index must be an int, got ", TypeName(*index))),
                      e, loc);
      }
    }
    return it->second;
  }

  absl::StatusOr<Type> CheckBinary(const ExprPtr& e, const SourceLoc& loc) {
    auto a = Check(e->args[0], loc);
    if (!a.ok()) return a;
    auto b = Check(e->args[1], loc);
    if (!b.ok()) return b;
    const bool int_exp = e->binary_op == BinaryOp::kPow && IsConstNonNegativeInt(e->args[1]);
    auto rt = BinaryResult(e->binary_op, *a, *b, int_exp);
    return rt.ok() ? rt : InExpr(rt.status(), e, loc);
  }

  absl::StatusOr<Type> CheckSelect(const ExprPtr& e, const SourceLoc& loc) {
    Type t[3];
    for (int i = 0; i < 3; ++i) {
      auto r = Check(e->args[i], loc);
      if (!r.ok()) return r;
      t[i] = *r;
    }
    auto rt = SelectResult(t[0], t[1], t[2]);
    return rt.ok() ? rt : InExpr(rt.status(), e, loc);
  }

  const TypeEnv& env_;
};

ExprPtr Literal(const Value& v, const SourceLoc& loc) {
  if (const auto* b = std::get_if<bool>(&v)) return BoolLit(*b, loc);
  if (const auto* i = std::get_if<int64_t>(&v)) return IntLit(*i, loc);
  return FloatLit(std::get<double>(v), loc);
}

bool IsLiteral(const ExprPtr& e) {
  return e->kind == ExprKind::kBoolLit || e->kind == ExprKind::kIntLit ||
         e->kind == ExprKind::kFloatLit;
}

}  // namespace

std::optional<int64_t> ElementOffset(const std::vector<int64_t>& sizes,
                                     const std::vector<int64_t>& index) {
  if (index.size() != sizes.size()) return std::nullopt;
  int64_t offset = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    int64_t i = index[d];
    if (i < -sizes[d] || i >= sizes[d]) return std::nullopt;
    if (i < 0) i += sizes[d];
    offset = offset * sizes[d] + i;
  }
  return offset;
}

std::string ValueToString(const Value& v) {
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (const auto* i = std::get_if<int64_t>(&v)) return absl::StrCat(*i);
  const double d = std::get<double>(v);
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d);
  std::string s(buf, end);
  // Keep floats recognisable as floats: "2" would read back as an int.
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

absl::StatusOr<Value> EvalScalar(const ExprPtr& e, const ScalarEnv& env) {
  return Evaluator(env).Eval(e, e->loc);
}

absl::StatusOr<int64_t> EvalInt(const ExprPtr& e, const ScalarEnv& env) {
  auto v = EvalScalar(e, env);
  if (!v.ok()) return v.status();
  if (const auto* i = std::get_if<int64_t>(&*v)) return *i;
  return absl::InvalidArgumentError(absl::StrCat(
      Prefix(e->loc), "expected an int, but `", PrintExpr(e), "` is ",
      TypeName(TypeOfValue(*v)), " ", ValueToString(*v), " (convert it with `int(...)`)"));
}

absl::StatusOr<bool> EvalBool(const ExprPtr& e, const ScalarEnv& env) {
  auto v = EvalScalar(e, env);
  if (!v.ok()) return v.status();
  if (const auto* b = std::get_if<bool>(&*v)) return *b;
  return absl::InvalidArgumentError(absl::StrCat(
      Prefix(e->loc), "expected a bool, but `", PrintExpr(e), "` is ",
      TypeName(TypeOfValue(*v)), " ", ValueToString(*v), " (write a comparison, e.g. `x != 0`)"));
}

absl::StatusOr<Type> TypeOf(const ExprPtr& e, const TypeEnv& env) {
  return TypeChecker(env).Check(e, e->loc);
}

ExprPtr FoldConstants(const ExprPtr& e) {
  if (!e || e->args.empty()) return e;
  std::vector<ExprPtr> args;
  bool changed = false, all_literal = true;
  for (const auto& a : e->args) {
    args.push_back(FoldConstants(a));
    changed |= args.back() != a;
    all_literal &= IsLiteral(args.back());
  }
  ExprPtr folded = e;
  if (changed) {
    auto copy = std::make_shared<Expr>(*e);
    copy->args = std::move(args);
    folded = copy;
  }
  // Only node kinds whose operands are all literals fold; an evaluation error (say a division
  // by zero) leaves the subtree in place so that it is reported where it is evaluated.
  if (all_literal && e->kind != ExprKind::kIndex) {
    auto v = EvalScalar(folded, ScalarEnv{});
    if (v.ok()) return Literal(*v, e->loc);
  }
  return folded;
}

}  // namespace cubridge::cuir
