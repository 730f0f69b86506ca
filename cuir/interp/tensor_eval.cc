#include "cuir/interp/tensor_eval.h"

#include <limits>
#include <string>
#include <utility>

#include <torch/types.h>
#include <torch/utils.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuir/interp/interp.h"

namespace cubridge::interp {
namespace {

using cuir::BinaryOp;
using cuir::ExprKind;
using cuir::ExprPtr;
using cuir::Type;
using cuir::TypeName;
using cuir::UnaryOp;

std::string Where(const cuir::SourceLoc& loc) {
  return loc.known() ? absl::StrCat(loc.ToString(), ": ") : std::string();
}

absl::Status InvalidAt(const cuir::SourceLoc& loc, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat(Where(loc), msg));
}

bool IsClosed(const cuir::Expr& e) {
  if (e.kind == ExprKind::kVar || e.kind == ExprKind::kIndex) return false;
  for (const auto& a : e.args) {
    if (!IsClosed(*a)) return false;
  }
  return true;
}

// `a ** b` of ints stays int only for a constant exponent >= 0 (as in Python and EvalScalar).
bool IsConstNonNegativeInt(const ExprPtr& e) {
  if (!IsClosed(*e)) return false;
  auto v = cuir::EvalScalar(e, cuir::ScalarEnv{});
  return v.ok() && std::holds_alternative<int64_t>(*v) && std::get<int64_t>(*v) >= 0;
}

bool IsNumeric(Type t) { return t != Type::kBool; }

// Recursive evaluator. Every node yields a tensor (0-dim for scalar subtrees) whose dtype is the
// node's CuIR type: kBool, kLong (int) or the float dtype (fp32, or fp64 on request). Operands
// are cast explicitly to the promoted type so that torch's own promotion never decides. Type
// rules are those of cuir::TypeOf / EvalScalar; errors name the innermost known location.
class Evaluator {
 public:
  explicit Evaluator(const TensorEnv& env)
      : env_(env), float_(env.float64 ? torch::kDouble : torch::kFloat) {}

  absl::StatusOr<torch::Tensor> Eval(const ExprPtr& e, const cuir::SourceLoc& outer) {
    const cuir::SourceLoc& loc = e->loc.known() ? e->loc : outer;
    try {
      return EvalNode(e, loc);
    } catch (const c10::Error& err) {
      return InvalidAt(loc, absl::StrCat("cannot evaluate `", cuir::PrintExpr(e),
                                         "` on tensors: ", err.what_without_backtrace()));
    }
  }

 private:
  absl::StatusOr<torch::Tensor> EvalNode(const ExprPtr& e, const cuir::SourceLoc& loc) {
    switch (e->kind) {
      case ExprKind::kBoolLit:
        return torch::scalar_tensor(e->bool_value, torch::kBool);
      case ExprKind::kIntLit:
        return torch::scalar_tensor(e->int_value, torch::kLong);
      case ExprKind::kFloatLit:
        return torch::scalar_tensor(e->float_value, float_);
      case ExprKind::kVar:
        return Lookup(*e, loc);
      case ExprKind::kUnary: {
        auto a = Eval(e->args[0], loc);
        if (!a.ok()) return a.status();
        return EvalUnary(e, loc, *std::move(a));
      }
      case ExprKind::kBinary: {
        auto a = Eval(e->args[0], loc);
        if (!a.ok()) return a.status();
        auto b = Eval(e->args[1], loc);
        if (!b.ok()) return b.status();
        return EvalBinary(e, loc, *std::move(a), *std::move(b));
      }
      case ExprKind::kSelect:
        return EvalSelect(e, loc);
      case ExprKind::kIndex:
        return EvalIndex(e, loc);
    }
    return InvalidAt(loc, "unknown expression kind");
  }

  torch::Tensor ValueTensor(const cuir::Value& v) const {
    if (const bool* b = std::get_if<bool>(&v)) return torch::scalar_tensor(*b, torch::kBool);
    if (const int64_t* i = std::get_if<int64_t>(&v)) return torch::scalar_tensor(*i, torch::kLong);
    return torch::scalar_tensor(std::get<double>(v), float_);
  }

  absl::StatusOr<torch::Tensor> Lookup(const cuir::Expr& e, const cuir::SourceLoc& loc) const {
    if (auto it = env_.tensors.find(e.name); it != env_.tensors.end()) return it->second;
    if (auto it = env_.values.find(e.name); it != env_.values.end()) return ValueTensor(it->second);
    if (env_.scalars != nullptr) {
      if (auto it = env_.scalars->vars.find(e.name); it != env_.scalars->vars.end()) {
        return ValueTensor(it->second);
      }
    }
    return InvalidAt(loc, absl::StrCat("`", e.name, "` has no value here (unbound name)"));
  }

  torch::Tensor AsFloat(const torch::Tensor& t) const {
    return t.scalar_type() == float_ ? t : t.to(float_);
  }
  static torch::Tensor AsInt(const torch::Tensor& t) {
    return t.scalar_type() == torch::kLong ? t : t.to(torch::kLong);
  }
  std::pair<torch::Tensor, torch::Tensor> Promote(const torch::Tensor& a,
                                                  const torch::Tensor& b) const {
    if (a.is_floating_point() || b.is_floating_point()) return {AsFloat(a), AsFloat(b)};
    return {a, b};
  }

  static absl::Status TypeError(const ExprPtr& e, const cuir::SourceLoc& loc,
                                absl::string_view problem) {
    return InvalidAt(loc, absl::StrCat(problem, " in `", cuir::PrintExpr(e), "`"));
  }

  static absl::Status CheckNonZero(const ExprPtr& e, const cuir::SourceLoc& loc,
                                   const torch::Tensor& divisor) {
    if (divisor.numel() == 0 || !divisor.eq(0).any().item<bool>()) return absl::OkStatus();
    return InvalidAt(loc, absl::StrCat("integer division by zero in `", cuir::PrintExpr(e),
                                       "` (the right operand `", cuir::PrintExpr(e->args[1]),
                                       "` is 0 for some element)"));
  }

  absl::StatusOr<torch::Tensor> EvalUnary(const ExprPtr& e, const cuir::SourceLoc& loc,
                                          const torch::Tensor& a) const {
    const Type t = TensorType(a);
    if (e->unary_op == UnaryOp::kNot) {
      if (t != Type::kBool) {
        return TypeError(e, loc, absl::StrCat("`!` needs a bool operand, got ", TypeName(t)));
      }
      return torch::logical_not(a);
    }
    const bool conversion = e->unary_op == UnaryOp::kToFloat || e->unary_op == UnaryOp::kToInt;
    if (!conversion && !IsNumeric(t)) {
      return TypeError(e, loc, absl::StrCat("`", cuir::UnaryOpName(e->unary_op),
                                            "` needs an int or float operand, got bool"));
    }
    switch (e->unary_op) {
      case UnaryOp::kNeg: return torch::neg(a);
      case UnaryOp::kAbs: return torch::abs(a);
      case UnaryOp::kExp: return torch::exp(AsFloat(a));
      case UnaryOp::kExp2: return torch::exp2(AsFloat(a));
      case UnaryOp::kLog: return torch::log(AsFloat(a));
      case UnaryOp::kLog2: return torch::log2(AsFloat(a));
      case UnaryOp::kSqrt: return torch::sqrt(AsFloat(a));
      case UnaryOp::kTanh: return torch::tanh(AsFloat(a));
      case UnaryOp::kSigmoid: return torch::sigmoid(AsFloat(a));
      case UnaryOp::kFloor: return torch::floor(AsFloat(a));
      case UnaryOp::kToFloat: return AsFloat(a);
      case UnaryOp::kToInt: return AsInt(a);  // float -> int64 truncates toward zero
      case UnaryOp::kSin: return torch::sin(AsFloat(a));
      case UnaryOp::kCos: return torch::cos(AsFloat(a));
      case UnaryOp::kTan: return torch::tan(AsFloat(a));
      case UnaryOp::kAsin: return torch::asin(AsFloat(a));
      case UnaryOp::kAcos: return torch::acos(AsFloat(a));
      case UnaryOp::kAtan: return torch::atan(AsFloat(a));
      case UnaryOp::kSinh: return torch::sinh(AsFloat(a));
      case UnaryOp::kCosh: return torch::cosh(AsFloat(a));
      case UnaryOp::kAsinh: return torch::asinh(AsFloat(a));
      case UnaryOp::kAcosh: return torch::acosh(AsFloat(a));
      case UnaryOp::kAtanh: return torch::atanh(AsFloat(a));
      case UnaryOp::kErf: return torch::erf(AsFloat(a));
      case UnaryOp::kErfc: return torch::erfc(AsFloat(a));
      case UnaryOp::kLog1p: return torch::log1p(AsFloat(a));
      case UnaryOp::kExpm1: return torch::expm1(AsFloat(a));
      case UnaryOp::kLog10: return torch::log10(AsFloat(a));
      case UnaryOp::kTrunc: return torch::trunc(AsFloat(a));
      case UnaryOp::kRound: return torch::round(AsFloat(a));  // half to even
      // (0 < x) - (x < 0), as torch and the scalar evaluator define it (NaN gives 0).
      case UnaryOp::kSign: return torch::sub(torch::gt(a, 0).to(a.scalar_type()),
                                             torch::lt(a, 0).to(a.scalar_type()));
      case UnaryOp::kBitNot:
        if (t != Type::kInt) {
          return TypeError(e, loc, "`bit_not` needs an int operand, got float");
        }
        return torch::bitwise_not(a);
      case UnaryOp::kNot: break;
    }
    return InvalidAt(loc, "unknown unary operator");
  }

  absl::StatusOr<torch::Tensor> EvalBinary(const ExprPtr& e, const cuir::SourceLoc& loc,
                                           const torch::Tensor& a, const torch::Tensor& b) const {
    const BinaryOp op = e->binary_op;
    const Type ta = TensorType(a), tb = TensorType(b);
    const bool both_bool = ta == Type::kBool && tb == Type::kBool;
    if (cuir::IsLogical(op)) {
      if (!both_bool) {
        return TypeError(e, loc, absl::StrCat("`", cuir::BinaryOpName(op),
                                              "` needs bool operands, got ", TypeName(ta),
                                              " and ", TypeName(tb)));
      }
      return op == BinaryOp::kAnd ? torch::logical_and(a, b) : torch::logical_or(a, b);
    }
    if (both_bool && (op == BinaryOp::kEq || op == BinaryOp::kNe)) {
      return op == BinaryOp::kEq ? torch::eq(a, b) : torch::ne(a, b);
    }
    if (!IsNumeric(ta) || !IsNumeric(tb)) {
      return TypeError(e, loc, absl::StrCat("`", cuir::BinaryOpName(op),
                                            "` needs int or float operands, got ", TypeName(ta),
                                            " and ", TypeName(tb)));
    }
    if (op == BinaryOp::kDiv) return torch::div(AsFloat(a), AsFloat(b));
    if (op == BinaryOp::kAtan2) return torch::atan2(AsFloat(a), AsFloat(b));
    switch (op) {
      case BinaryOp::kBitAnd: case BinaryOp::kBitOr: case BinaryOp::kBitXor:
      case BinaryOp::kShl: case BinaryOp::kShr: {
        if (ta != Type::kInt || tb != Type::kInt) {
          return TypeError(e, loc, absl::StrCat("`", cuir::BinaryOpName(op),
                                                "` needs int operands, got ", TypeName(ta),
                                                " and ", TypeName(tb)));
        }
        const torch::Tensor x = a.to(torch::kLong), y = b.to(torch::kLong);
        if (op == BinaryOp::kBitAnd) return torch::bitwise_and(x, y);
        if (op == BinaryOp::kBitOr) return torch::bitwise_or(x, y);
        if (op == BinaryOp::kBitXor) return torch::bitwise_xor(x, y);
        // torch: shifting by a negative amount or by 64 or more gives 0 (left) or the sign
        // (right); within range, a left shift wraps.
        const torch::Tensor out_of_range = torch::logical_or(y < 0, y >= 64);
        const torch::Tensor amount = torch::where(out_of_range, torch::full_like(y, 63), y);
        if (op == BinaryOp::kShr) return torch::bitwise_right_shift(x, amount);
        return torch::where(out_of_range, torch::zeros_like(x),
                            torch::bitwise_left_shift(x, amount));
      }
      default: break;
    }
    if (op == BinaryOp::kPow) {
      if (ta == Type::kInt && tb == Type::kInt && IsConstNonNegativeInt(e->args[1])) {
        return torch::pow(a, b);
      }
      return torch::pow(AsFloat(a), AsFloat(b));
    }
    auto [x, y] = Promote(a, b);
    const bool is_int = !x.is_floating_point();
    switch (op) {
      case BinaryOp::kAdd: return torch::add(x, y);
      case BinaryOp::kSub: return torch::sub(x, y);
      case BinaryOp::kMul: return torch::mul(x, y);
      case BinaryOp::kMin: return torch::minimum(x, y);
      case BinaryOp::kMax: return torch::maximum(x, y);
      case BinaryOp::kLt: return torch::lt(x, y);
      case BinaryOp::kLe: return torch::le(x, y);
      case BinaryOp::kGt: return torch::gt(x, y);
      case BinaryOp::kGe: return torch::ge(x, y);
      case BinaryOp::kEq: return torch::eq(x, y);
      case BinaryOp::kNe: return torch::ne(x, y);
      default: break;
    }
    if (op == BinaryOp::kCdiv && !is_int) {
      return TypeError(e, loc, absl::StrCat("`cdiv` needs int operands, got ", TypeName(ta),
                                            " and ", TypeName(tb)));
    }
    if (is_int) {
      if (auto s = CheckNonZero(e, loc, y); !s.ok()) return s;
    }
    if (op == BinaryOp::kFmod) {  // C: the dividend's sign
      if (!is_int) return torch::fmod(x, y);
      // x fmod -1 is 0; computed by the CPU's division, INT64_MIN by -1 would trap.
      const torch::Tensor minus_one = y.eq(-1);
      return torch::where(minus_one, torch::zeros_like(x),
                          torch::fmod(x, torch::where(minus_one, torch::ones_like(y), y)));
    }
    // Python semantics: // floors, % takes the divisor's sign; cdiv(a, b) = -((-a) // b).
    switch (op) {
      case BinaryOp::kFloorDiv: return torch::div(x, y, "floor");
      case BinaryOp::kMod: return torch::remainder(x, y);
      case BinaryOp::kCdiv: return torch::neg(torch::div(torch::neg(x), y, "floor"));
      default: break;
    }
    return InvalidAt(loc, "unknown binary operator");
  }

  absl::StatusOr<torch::Tensor> EvalSelect(const ExprPtr& e, const cuir::SourceLoc& loc) {
    torch::Tensor v[3];
    for (int i = 0; i < 3; ++i) {
      auto r = Eval(e->args[i], loc);
      if (!r.ok()) return r.status();
      v[i] = *std::move(r);
    }
    const Type tc = TensorType(v[0]), ta = TensorType(v[1]), tb = TensorType(v[2]);
    if (tc != Type::kBool) {
      return TypeError(e, loc, absl::StrCat("`select` needs a bool condition, got ",
                                            TypeName(tc)));
    }
    if ((ta == Type::kBool) != (tb == Type::kBool)) {
      return TypeError(e, loc, absl::StrCat("`select` branches must both be bool or both "
                                            "numbers, got ", TypeName(ta), " and ",
                                            TypeName(tb)));
    }
    auto [x, y] = Promote(v[1], v[2]);
    return torch::where(v[0], x, y);
  }

  // The buffer's values in the evaluator's types: int64, the float type, bool.
  absl::StatusOr<torch::Tensor> Buffer(const cuir::Expr& e, const cuir::SourceLoc& loc) const {
    torch::Tensor t;
    if (auto it = env_.buffers.find(e.name); it != env_.buffers.end()) {
      t = it->second;
    } else if (env_.scalars != nullptr) {
      if (auto it = env_.scalars->buffers.find(e.name); it != env_.scalars->buffers.end()) {
        t = FromValues(it->second);
      }
    }
    if (!t.defined()) {
      return InvalidAt(loc, absl::StrCat("buffer `", e.name, "` has no data here (unbound buffer)"));
    }
    switch (TensorType(t)) {
      case Type::kBool: return t;
      case Type::kInt: return t.to(torch::kLong);
      default: return t.to(float_);
    }
  }

  static torch::Tensor FromValues(const cuir::BufferData& data) {
    const auto n = static_cast<int64_t>(data.values.size());
    switch (data.element) {
      case Type::kBool: {
        auto t = torch::empty({n}, torch::kBool);
        for (int64_t i = 0; i < n; ++i) t[i] = std::get<bool>(data.values[i]);
        return t.reshape(data.sizes);
      }
      case Type::kInt: {
        std::vector<int64_t> v(n);
        for (int64_t i = 0; i < n; ++i) v[i] = std::get<int64_t>(data.values[i]);
        return torch::tensor(v, torch::kLong).reshape(data.sizes);
      }
      default: {
        std::vector<double> v(n);
        for (int64_t i = 0; i < n; ++i) v[i] = std::get<double>(data.values[i]);
        return torch::tensor(v, torch::kDouble).reshape(data.sizes);
      }
    }
  }

  // Python indexing: one int tensor per dimension (they broadcast), negative counting from the
  // end; an index out of range is an error naming it.
  absl::StatusOr<torch::Tensor> EvalIndex(const ExprPtr& e, const cuir::SourceLoc& loc) {
    auto buffer = Buffer(*e, loc);
    if (!buffer.ok()) return buffer.status();
    if (static_cast<int64_t>(e->args.size()) != buffer->dim()) {
      return InvalidAt(loc, absl::StrCat("buffer `", e->name, "` has shape [",
                                         absl::StrJoin(buffer->sizes().vec(), ", "),
                                         "] but is indexed with ", e->args.size(),
                                         " indices in `", cuir::PrintExpr(e), "`"));
    }
    if (e->args.empty()) return *buffer;
    c10::List<c10::optional<torch::Tensor>> indices;
    for (size_t d = 0; d < e->args.size(); ++d) {
      auto index = Eval(e->args[d], loc);
      if (!index.ok()) return index.status();
      if (TensorType(*index) != Type::kInt) {
        return TypeError(e, loc, absl::StrCat("buffer index must be an int, got ",
                                              TypeName(TensorType(*index))));
      }
      const int64_t size = buffer->size(static_cast<int64_t>(d));
      if (index->numel() > 0) {
        const int64_t lo = index->min().item<int64_t>();
        const int64_t hi = index->max().item<int64_t>();
        if (lo < -size || hi >= size) {
          return absl::OutOfRangeError(absl::StrCat(
              Where(loc), "index ", lo < -size ? lo : hi, " is out of range for dimension ", d,
              " of buffer `", e->name, "` of shape [", absl::StrJoin(buffer->sizes().vec(), ", "),
              "] in `", cuir::PrintExpr(e),
              "` (the job's buffer must cover every index the kernel reads)"));
        }
      }
      indices.push_back(torch::where(*index < 0, *index + size, *index));
    }
    return at::index(*buffer, indices);
  }

  const TensorEnv& env_;
  torch::ScalarType float_;
};

}  // namespace

cuir::Type TensorType(const torch::Tensor& t) {
  if (t.scalar_type() == torch::kBool) return Type::kBool;
  return t.is_floating_point() ? Type::kFloat : Type::kInt;
}

absl::StatusOr<torch::Tensor> EvalTensor(const cuir::ExprPtr& e, const TensorEnv& env) {
  if (e == nullptr) return absl::InvalidArgumentError("EvalTensor: null expression");
  torch::NoGradGuard no_grad;
  return Evaluator(env).Eval(e, e->loc);
}

}  // namespace cubridge::interp
