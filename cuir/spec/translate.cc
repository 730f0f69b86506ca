// TorchScript graph -> CuIR expression, with torch's type promotion made explicit.
//
// Values are translated on demand from the graph's output, so dead code in helpers never matters.
// A node that comes from a TorchScript builtin (e.g. `2.0 / x` is emitted as reciprocal * 2.0 by
// a builtin function) has no position in the user's file; it takes its consumer's.
#include <algorithm>
#include <cmath>
#include <functional>

#include <torch/csrc/jit/ir/constants.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "cuir/spec/internal.h"

namespace cubridge::spec::internal {
namespace {

using cuir::BinaryOp;
using cuir::UnaryOp;
using torch::jit::Node;
using torch::jit::Value;

constexpr const char* kSupported =
    "+ - * / // % ** (torch.add/sub/mul/div/floor_divide/remainder/fmod/pow), neg, abs, sign, "
    "exp, exp2, expm1, log, log2, log10, log1p, sqrt, rsqrt, sigmoid, sin/cos/tan, "
    "asin/acos/atan, atan2, sinh/cosh/tanh, asinh/acosh/atanh, erf, erfc, floor, ceil, trunc, "
    "round, relu, torch.minimum/maximum, clamp, torch.where, comparisons, & | ^ ~ (masks: "
    "logical; ints: bitwise), << >>, logical_and/or/xor/not, indexing captured tensors "
    "(t[h], t[b, h, q_idx, kv_idx], t[-1]), casts (.float(), .int(), .to(dtype)), "
    "full_like/ones_like/zeros_like";

// A translated graph value: an expression, or one of the non-scalar things a graph passes
// around (None, a string such as rounding_mode, a list of indices, a buffer).
struct TVal {
  enum class Kind { kExpr, kNone, kString, kList, kBuffer, kOpaque };
  Kind kind = Kind::kOpaque;
  ExprPtr expr;
  Type type = Type::kInt;
  std::string text;  // kString: the string; kBuffer: its name; kOpaque: what it is
  // kList: the items; kBuffer: the indices applied so far (`t[0]` of a 2-D t is still a tensor,
  // which a further index or its use as a value completes). `type` is a buffer's element type.
  std::vector<TVal> items;
};

TVal Ex(ExprPtr e, Type t) {
  TVal v;
  v.kind = TVal::Kind::kExpr;
  v.expr = std::move(e);
  v.type = t;
  return v;
}

TVal Other(TVal::Kind kind, std::string text = {}) {
  TVal v;
  v.kind = kind;
  v.text = std::move(text);
  return v;
}

// A captured tensor used as a value: the indices so far are all it has (none for a rank-0
// tensor); the frontend checks that every use of the tensor gives the same number.
TVal ElementOf(const TVal& buffer, const SourceLoc& loc) {
  std::vector<ExprPtr> indices;
  for (const TVal& i : buffer.items) indices.push_back(i.expr);
  return Ex(cuir::Index(buffer.text, std::move(indices), loc), buffer.type);
}

Type Promote(Type a, Type b) {
  if (a == Type::kFloat || b == Type::kFloat) return Type::kFloat;
  if (a == Type::kInt || b == Type::kInt) return Type::kInt;
  return Type::kBool;
}

// A literal converted at translation time (`ones_like(x, dtype=torch.bool)` is just `true`).
std::optional<TVal> ConvertLiteral(const TVal& v, Type to, const SourceLoc& loc) {
  double x = 0;
  switch (v.expr->kind) {
    case cuir::ExprKind::kBoolLit: x = v.expr->bool_value; break;
    case cuir::ExprKind::kIntLit: x = static_cast<double>(v.expr->int_value); break;
    case cuir::ExprKind::kFloatLit: x = v.expr->float_value; break;
    default: return std::nullopt;
  }
  if (to == Type::kBool) return Ex(cuir::BoolLit(x != 0, loc), to);
  if (to == Type::kFloat) {
    if (v.expr->kind == cuir::ExprKind::kIntLit && std::fabs(x) > 9007199254740992.0) {
      return std::nullopt;  // not exact as a double
    }
    return Ex(cuir::FloatLit(x, loc), to);
  }
  if (v.expr->kind == cuir::ExprKind::kIntLit) return v;
  if (!std::isfinite(x) || std::fabs(x) >= 9.2e18) return std::nullopt;  // int() would fail
  return Ex(cuir::IntLit(static_cast<int64_t>(std::trunc(x)), loc), to);
}

// torch's conversions between bool, int and float, spelled in CuIR.
TVal Convert(const TVal& v, Type to, const SourceLoc& loc) {
  if (v.type == to) return v;
  if (auto folded = ConvertLiteral(v, to, loc)) return *folded;
  switch (to) {
    case Type::kBool:
      return Ex(Binary(BinaryOp::kNe, v.expr,
                       v.type == Type::kFloat ? cuir::FloatLit(0.0, loc) : cuir::IntLit(0, loc),
                       loc),
                Type::kBool);
    case Type::kInt:
      if (v.type == Type::kBool) {
        return Ex(cuir::Select(v.expr, cuir::IntLit(1, loc), cuir::IntLit(0, loc), loc),
                  Type::kInt);
      }
      return Ex(cuir::Unary(UnaryOp::kToInt, v.expr, loc), Type::kInt);
    case Type::kFloat:
      if (v.type == Type::kBool) {
        return Ex(cuir::Select(v.expr, cuir::FloatLit(1.0, loc), cuir::FloatLit(0.0, loc), loc),
                  Type::kFloat);
      }
      return Ex(cuir::Unary(UnaryOp::kToFloat, v.expr, loc), Type::kFloat);
  }
  return v;
}

// Arithmetic on a bool operand counts it as 0/1, like torch.
TVal Numeric(const TVal& v, const SourceLoc& loc) {
  return v.type == Type::kBool ? Convert(v, Type::kInt, loc) : v;
}

std::optional<Type> TypeOfScalarType(int64_t scalar_type) {
  const auto st = static_cast<c10::ScalarType>(scalar_type);
  if (st == c10::ScalarType::Bool) return Type::kBool;
  if (c10::isIntegralType(st, /*includeBool=*/false)) return Type::kInt;
  if (c10::isFloatingType(st)) return Type::kFloat;
  return std::nullopt;
}

bool IsIntLit(const TVal& v, int64_t value) {
  return v.kind == TVal::Kind::kExpr && v.expr->kind == cuir::ExprKind::kIntLit &&
         v.expr->int_value == value;
}

bool IsOne(const TVal& v) {
  return IsIntLit(v, 1) || (v.kind == TVal::Kind::kExpr &&
                            v.expr->kind == cuir::ExprKind::kFloatLit && v.expr->float_value == 1.0);
}

class Translator;
using Handler = std::function<absl::StatusOr<TVal>(Translator&, Node*, const SourceLoc&)>;
const absl::flat_hash_map<std::string, Handler>& Handlers();

class Translator {
 public:
  explicit Translator(const TranslateRequest& req) : req_(req) {
    const auto inputs = req.graph->inputs();
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (req.input_is_buffer[i]) {
        TVal buffer = Other(TVal::Kind::kBuffer, req.input_names[i]);
        buffer.type = req.input_types[i];
        vals_[inputs[i]] = buffer;
      } else {
        vals_[inputs[i]] = Ex(cuir::Var(req.input_names[i], req.def_loc), req.input_types[i]);
      }
    }
  }

  absl::StatusOr<TypedExpr> Run() {
    Value* out = req_.graph->outputs().at(0);
    auto v = ValueOf(out, req_.def_loc);
    if (!v.ok()) return v.status();
    if (v->kind != TVal::Kind::kExpr) {
      return Error(req_.def_loc, absl::StrCat(req_.function, " must return a tensor expression, "
                                                             "not a ",
                                              Describe(*v)));
    }
    return TypedExpr{v->expr, v->type};
  }

  // Input `i` of `n`, which must be a scalar expression.
  absl::StatusOr<TVal> Arg(Node* n, size_t i, const SourceLoc& loc) {
    auto v = Input(n, i, loc);
    if (!v.ok()) return v.status();
    if (v->kind == TVal::Kind::kExpr) return *v;
    if (v->kind == TVal::Kind::kBuffer) return ElementOf(*v, loc);
    return Error(loc, absl::StrCat("`", n->kind().toQualString(), "` with a ", Describe(*v),
                                   " argument is not supported in ", req_.function));
  }

  absl::StatusOr<TVal> Input(Node* n, size_t i, const SourceLoc& loc) {
    if (i >= n->inputs().size()) {
      return Error(loc, absl::StrCat("`", n->kind().toQualString(), "` with ", n->inputs().size(),
                                     " arguments is not supported in ", req_.function,
                                     "; supported: ", kSupported));
    }
    return ValueOf(n->input(i), loc);
  }

  absl::Status Error(const SourceLoc& loc, const std::string& message) const {
    return ErrorAt(loc, message);
  }

  absl::Status Unsupported(Node* n, const SourceLoc& loc) const {
    const std::string kind = n->kind().toQualString();
    if (kind == "prim::If" || kind == "prim::Loop") {
      return Error(loc, absl::StrCat("control flow (`if`, loops) is not supported in ",
                                     req_.function, ": use torch.where(cond, a, b) instead of if"));
    }
    return Error(loc, absl::StrCat("unsupported operation `", kind, "` in ", req_.function,
                                   "; supported: ", kSupported));
  }

 private:
  static std::string Describe(const TVal& v) {
    switch (v.kind) {
      case TVal::Kind::kNone: return "None";
      case TVal::Kind::kString: return "string";
      case TVal::Kind::kList: return "list";
      case TVal::Kind::kBuffer: return "buffer";
      case TVal::Kind::kOpaque: return v.text;
      case TVal::Kind::kExpr: return cuir::TypeName(v.type);
    }
    return "value";
  }

  absl::StatusOr<TVal> ValueOf(Value* v, const SourceLoc& context) {
    if (auto it = vals_.find(v); it != vals_.end()) return it->second;
    Node* n = v->node();
    const SourceLoc loc = req_.file->LocOf(n->sourceRange()).value_or(context);
    if (n->outputs().size() != 1) return Unsupported(n, loc);
    auto r = Translate(n, loc);
    if (!r.ok()) return r.status();
    vals_[v] = *r;
    return *r;
  }

  absl::StatusOr<TVal> Translate(Node* n, const SourceLoc& loc) {
    const auto& handlers = Handlers();
    auto it = handlers.find(n->kind().toQualString());
    if (it == handlers.end()) return Unsupported(n, loc);
    auto r = it->second(*this, n, loc);
    if (!r.ok() || r->kind != TVal::Kind::kExpr) return r;
    return MatchScalarType(n, *r, loc);
  }

  // TorchScript's own scalar ops have fixed result types (`int ** int` is a float there);
  // follow the graph where it says int / float / bool.
  static TVal MatchScalarType(Node* n, const TVal& v, const SourceLoc& loc) {
    switch (n->output()->type()->kind()) {
      case c10::TypeKind::IntType: return Convert(v, Type::kInt, loc);
      case c10::TypeKind::FloatType: return Convert(v, Type::kFloat, loc);
      case c10::TypeKind::BoolType: return Convert(v, Type::kBool, loc);
      default: return v;
    }
  }

  const TranslateRequest& req_;
  std::unordered_map<const Value*, TVal> vals_;
};

// ---- handlers -------------------------------------------------------------------------------

absl::StatusOr<TVal> Constant(Translator& t, Node* n, const SourceLoc& loc) {
  const auto iv = torch::jit::toIValue(n->output());
  if (!iv) return Other(TVal::Kind::kOpaque, "constant");
  if (iv->isBool()) return Ex(cuir::BoolLit(iv->toBool(), loc), Type::kBool);
  if (iv->isInt()) return Ex(cuir::IntLit(iv->toInt(), loc), Type::kInt);
  if (iv->isDouble()) return Ex(cuir::FloatLit(iv->toDouble(), loc), Type::kFloat);
  if (iv->isNone()) return Other(TVal::Kind::kNone);
  if (iv->isString()) return Other(TVal::Kind::kString, iv->toStringRef());
  return Other(TVal::Kind::kOpaque, iv->tagKind());
}

absl::StatusOr<TVal> ListConstruct(Translator& t, Node* n, const SourceLoc& loc) {
  TVal list = Other(TVal::Kind::kList);
  for (size_t i = 0; i < n->inputs().size(); ++i) {
    auto item = t.Input(n, i, loc);
    if (!item.ok()) return item.status();
    list.items.push_back(*item);
  }
  return list;
}

absl::StatusOr<TVal> Identity(Translator& t, Node* n, const SourceLoc& loc) {
  return t.Arg(n, 0, loc);
}

Handler CastTo(Type to) {
  return [to](Translator& t, Node* n, const SourceLoc& loc) -> absl::StatusOr<TVal> {
    auto x = t.Arg(n, 0, loc);
    if (!x.ok()) return x.status();
    return Convert(*x, to, loc);
  };
}

Handler FloatMath(UnaryOp op) {
  return [op](Translator& t, Node* n, const SourceLoc& loc) -> absl::StatusOr<TVal> {
    auto x = t.Arg(n, 0, loc);
    if (!x.ok()) return x.status();
    return Ex(cuir::Unary(op, Convert(*x, Type::kFloat, loc).expr, loc), Type::kFloat);
  };
}

Handler SameTypeMath(UnaryOp op) {
  return [op](Translator& t, Node* n, const SourceLoc& loc) -> absl::StatusOr<TVal> {
    auto x = t.Arg(n, 0, loc);
    if (!x.ok()) return x.status();
    const TVal v = Numeric(*x, loc);
    return Ex(cuir::Unary(op, v.expr, loc), v.type);
  };
}

// floor / ceil keep ints as they are (torch returns the int tensor unchanged).
Handler Rounding(bool ceil) {
  return [ceil](Translator& t, Node* n, const SourceLoc& loc) -> absl::StatusOr<TVal> {
    auto x = t.Arg(n, 0, loc);
    if (!x.ok()) return x.status();
    const TVal v = Numeric(*x, loc);
    if (v.type == Type::kInt) return v;
    if (!ceil) return Ex(cuir::Unary(UnaryOp::kFloor, v.expr, loc), Type::kFloat);
    auto neg = [&](ExprPtr e) { return cuir::Unary(UnaryOp::kNeg, std::move(e), loc); };
    return Ex(neg(cuir::Unary(UnaryOp::kFloor, neg(v.expr), loc)), Type::kFloat);
  };
}

TVal Arith(BinaryOp op, const TVal& a0, const TVal& b0, const SourceLoc& loc) {
  // torch: bool + bool is `or`, bool * bool is `and`.
  if (a0.type == Type::kBool && b0.type == Type::kBool &&
      (op == BinaryOp::kAdd || op == BinaryOp::kMul)) {
    return Ex(Binary(op == BinaryOp::kAdd ? BinaryOp::kOr : BinaryOp::kAnd, a0.expr, b0.expr, loc),
              Type::kBool);
  }
  const TVal a = Numeric(a0, loc), b = Numeric(b0, loc);
  const Type promoted = Promote(a.type, b.type);
  if (op == BinaryOp::kDiv || op == BinaryOp::kAtan2) {
    return Ex(Binary(op, a.expr, b.expr, loc), Type::kFloat);
  }
  if (op == BinaryOp::kPow && promoted == Type::kInt) {
    // CuIR makes int ** int a float unless the exponent is a literal >= 0; torch keeps it int.
    TVal r = Ex(Binary(op, a.expr, b.expr, loc), Type::kInt);
    const bool int_in_cuir = b.expr->kind == cuir::ExprKind::kIntLit && b.expr->int_value >= 0;
    return int_in_cuir ? r : Convert(Ex(r.expr, Type::kFloat), Type::kInt, loc);
  }
  return Ex(Binary(op, a.expr, b.expr, loc), promoted);
}

Handler BinaryArith(BinaryOp op, bool swapped = false) {
  return [op, swapped](Translator& t, Node* n, const SourceLoc& loc) -> absl::StatusOr<TVal> {
    auto a = t.Arg(n, 0, loc);
    if (!a.ok()) return a.status();
    auto b = t.Arg(n, 1, loc);
    if (!b.ok()) return b.status();
    if (n->inputs().size() > 2) {  // add/sub/rsub carry `alpha`
      auto alpha = t.Input(n, 2, loc);
      if (!alpha.ok()) return alpha.status();
      if (!IsOne(*alpha)) {
        return t.Error(loc, absl::StrCat("`", n->kind().toQualString(),
                                         "` with alpha other than 1 is not supported: write "
                                         "a + alpha * b instead"));
      }
    }
    return swapped ? Arith(op, *b, *a, loc) : Arith(op, *a, *b, loc);
  };
}

// div(a, b, rounding_mode=None | "floor" | "trunc").
absl::StatusOr<TVal> Div(Translator& t, Node* n, const SourceLoc& loc) {
  auto a = t.Arg(n, 0, loc);
  if (!a.ok()) return a.status();
  auto b = t.Arg(n, 1, loc);
  if (!b.ok()) return b.status();
  if (n->inputs().size() < 3) return Arith(BinaryOp::kDiv, *a, *b, loc);
  auto mode = t.Input(n, 2, loc);
  if (!mode.ok()) return mode.status();
  if (mode->kind == TVal::Kind::kNone) return Arith(BinaryOp::kDiv, *a, *b, loc);
  if (mode->kind == TVal::Kind::kString && mode->text == "floor") {
    return Arith(BinaryOp::kFloorDiv, *a, *b, loc);
  }
  if (mode->kind == TVal::Kind::kString && mode->text == "trunc") {
    const TVal q = Arith(BinaryOp::kDiv, *a, *b, loc);
    if (Promote(a->type, b->type) != Type::kFloat) return Convert(q, Type::kInt, loc);
    auto floor = [&](ExprPtr e) { return cuir::Unary(UnaryOp::kFloor, std::move(e), loc); };
    auto neg = [&](ExprPtr e) { return cuir::Unary(UnaryOp::kNeg, std::move(e), loc); };
    return Ex(cuir::Select(Binary(BinaryOp::kLt, q.expr, cuir::FloatLit(0.0, loc), loc),
                           neg(floor(neg(q.expr))), floor(q.expr), loc),
              Type::kFloat);
  }
  return t.Error(loc, "torch.div rounding_mode must be None, 'floor' or 'trunc'");
}

// min / max of exactly two values; the one-argument and dim forms are reductions.
Handler MinMax(BinaryOp op) {
  return [op](Translator& t, Node* n, const SourceLoc& loc) -> absl::StatusOr<TVal> {
    if (n->inputs().size() != 2) return t.Unsupported(n, loc);
    auto a = t.Arg(n, 0, loc);
    if (!a.ok()) return a.status();
    auto b = t.Arg(n, 1, loc);
    if (!b.ok()) return b.status();
    return Arith(op, *a, *b, loc);
  };
}

// clamp(x, min=None, max=None) = min(max(x, lo), hi), like torch.
Handler Clamp(bool has_lo, bool has_hi) {
  return [has_lo, has_hi](Translator& t, Node* n, const SourceLoc& loc) -> absl::StatusOr<TVal> {
    auto x = t.Arg(n, 0, loc);
    if (!x.ok()) return x.status();
    TVal r = Numeric(*x, loc);
    size_t next = 1;
    for (auto [present, op] : {std::pair{has_lo, BinaryOp::kMax}, {has_hi, BinaryOp::kMin}}) {
      if (!present) continue;
      auto bound = t.Input(n, next++, loc);
      if (!bound.ok()) return bound.status();
      if (bound->kind == TVal::Kind::kNone) continue;
      auto b = t.Arg(n, next - 1, loc);
      if (!b.ok()) return b.status();
      r = Arith(op, r, *b, loc);
    }
    return r;
  };
}

absl::StatusOr<TVal> Where(Translator& t, Node* n, const SourceLoc& loc) {
  if (n->inputs().size() != 3) return t.Unsupported(n, loc);
  auto c = t.Arg(n, 0, loc);
  if (!c.ok()) return c.status();
  auto a = t.Arg(n, 1, loc);
  if (!a.ok()) return a.status();
  auto b = t.Arg(n, 2, loc);
  if (!b.ok()) return b.status();
  const Type type = Promote(a->type, b->type);
  return Ex(cuir::Select(Convert(*c, Type::kBool, loc).expr, Convert(*a, type, loc).expr,
                         Convert(*b, type, loc).expr, loc),
            type);
}

ExprPtr Xor(const ExprPtr& a, const ExprPtr& b, const SourceLoc& loc) {
  auto not_ = [&](const ExprPtr& e) { return cuir::Unary(UnaryOp::kNot, e, loc); };
  return Binary(BinaryOp::kOr, Binary(BinaryOp::kAnd, a, not_(b), loc),
                Binary(BinaryOp::kAnd, not_(a), b, loc), loc);
}

Handler Compare(BinaryOp op) {
  return [op](Translator& t, Node* n, const SourceLoc& loc) -> absl::StatusOr<TVal> {
    auto a = t.Arg(n, 0, loc);
    if (!a.ok()) return a.status();
    auto b = t.Arg(n, 1, loc);
    if (!b.ok()) return b.status();
    if (a->type == Type::kBool && b->type == Type::kBool &&
        (op == BinaryOp::kEq || op == BinaryOp::kNe)) {
      const ExprPtr x = Xor(a->expr, b->expr, loc);
      return Ex(op == BinaryOp::kNe ? x : cuir::Unary(UnaryOp::kNot, x, loc), Type::kBool);
    }
    return Ex(Binary(op, Numeric(*a, loc).expr, Numeric(*b, loc).expr, loc), Type::kBool);
  };
}

// & | ^ ~: on masks (bools) they combine masks, on ints they are bit operations (a bool beside
// an int counts as 0/1, as torch promotes it); the `logical_*` ops take any numbers as truth
// values. Floats have no bit operations in torch either.
absl::StatusOr<TVal> LogicOperand(Translator& t, Node* n, size_t i, bool logical,
                                  const SourceLoc& loc) {
  auto v = t.Arg(n, i, loc);
  if (!v.ok()) return v.status();
  if (logical) return Convert(*v, Type::kBool, loc);
  if (v->type == Type::kFloat) {
    return t.Error(loc, absl::StrCat("`", n->kind().toQualString(), "` on a float value: & | ^ ~ "
                                     "combine masks (bools) or ints bit by bit; compare the "
                                     "float first (x > 0) or convert it (x.int())"));
  }
  return *v;
}

Handler Logic(BinaryOp op, bool logical, bool exclusive = false) {
  return [=](Translator& t, Node* n, const SourceLoc& loc) -> absl::StatusOr<TVal> {
    auto a = LogicOperand(t, n, 0, logical, loc);
    if (!a.ok()) return a.status();
    auto b = LogicOperand(t, n, 1, logical, loc);
    if (!b.ok()) return b.status();
    if (a->type == Type::kBool && b->type == Type::kBool) {
      if (exclusive) return Ex(Xor(a->expr, b->expr, loc), Type::kBool);
      return Ex(Binary(op, a->expr, b->expr, loc), Type::kBool);
    }
    const BinaryOp bit = exclusive ? BinaryOp::kBitXor
                                   : (op == BinaryOp::kAnd ? BinaryOp::kBitAnd : BinaryOp::kBitOr);
    return Ex(Binary(bit, Numeric(*a, loc).expr, Numeric(*b, loc).expr, loc), Type::kInt);
  };
}

Handler Not(bool logical) {
  return [logical](Translator& t, Node* n, const SourceLoc& loc) -> absl::StatusOr<TVal> {
    auto a = LogicOperand(t, n, 0, logical, loc);
    if (!a.ok()) return a.status();
    if (a->type == Type::kBool) return Ex(cuir::Unary(UnaryOp::kNot, a->expr, loc), Type::kBool);
    return Ex(cuir::Unary(UnaryOp::kBitNot, a->expr, loc), Type::kInt);
  };
}

// << and >> on ints (torch has no float shifts).
Handler Shift(BinaryOp op) {
  return [op](Translator& t, Node* n, const SourceLoc& loc) -> absl::StatusOr<TVal> {
    TVal v[2];
    for (size_t i = 0; i < 2; ++i) {
      auto x = t.Arg(n, i, loc);
      if (!x.ok()) return x.status();
      if (x->type == Type::kFloat) {
        return t.Error(loc, absl::StrCat("`", n->kind().toQualString(), "` on a float value: "
                                         "shifts take ints (convert with .int() or .long())"));
      }
      v[i] = Numeric(*x, loc);
    }
    return Ex(Binary(op, v[0].expr, v[1].expr, loc), Type::kInt);
  };
}

// trunc / round keep ints as they are (torch returns the int tensor unchanged).
Handler IntPreserving(UnaryOp op) {
  return [op](Translator& t, Node* n, const SourceLoc& loc) -> absl::StatusOr<TVal> {
    auto x = t.Arg(n, 0, loc);
    if (!x.ok()) return x.status();
    if (n->inputs().size() > 1) {  // round(x, decimals=d)
      auto decimals = t.Input(n, 1, loc);
      if (!decimals.ok()) return decimals.status();
      if (!IsIntLit(*decimals, 0)) {
        return t.Error(loc, "torch.round with decimals is not supported: scale, round and "
                            "divide instead (torch.round(x * 100) / 100)");
      }
    }
    const TVal v = Numeric(*x, loc);
    if (v.type == Type::kInt) return v;
    return Ex(cuir::Unary(op, v.expr, loc), Type::kFloat);
  };
}

// The element type a dtype argument asks for; nullopt when the argument is None.
absl::StatusOr<std::optional<Type>> DtypeArg(Translator& t, Node* n, const SourceLoc& loc) {
  const auto* schema = n->maybeSchema();
  if (schema == nullptr) return std::optional<Type>();
  for (size_t i = 0; i < schema->arguments().size(); ++i) {
    const std::string& name = schema->arguments()[i].name();
    if (name != "dtype" && name != "other") continue;
    auto v = t.Input(n, i, loc);
    if (!v.ok()) return v.status();
    if (v->kind == TVal::Kind::kNone) return std::optional<Type>();
    if (name == "other" && v->kind == TVal::Kind::kExpr) return std::optional<Type>(v->type);
    if (v->kind == TVal::Kind::kExpr && v->expr->kind == cuir::ExprKind::kIntLit) {
      if (auto type = TypeOfScalarType(v->expr->int_value)) return std::optional<Type>(type);
    }
    return t.Error(loc, "the dtype must be a constant bool, integer or floating dtype such as "
                        "torch.float32 or torch.int64");
  }
  return std::optional<Type>();
}

absl::StatusOr<TVal> To(Translator& t, Node* n, const SourceLoc& loc) {
  auto x = t.Arg(n, 0, loc);
  if (!x.ok()) return x.status();
  auto dtype = DtypeArg(t, n, loc);
  if (!dtype.ok()) return dtype.status();
  return dtype->has_value() ? Convert(*x, **dtype, loc) : *x;
}

// full_like(x, v) / ones_like(x) / zeros_like(x) and scalar_tensor(v) / tensor(v): a constant of
// x's (or the given) dtype.
Handler Fill(std::optional<double> fixed, bool like) {
  return [=](Translator& t, Node* n, const SourceLoc& loc) -> absl::StatusOr<TVal> {
    TVal value;
    if (fixed) {
      value = Ex(cuir::IntLit(static_cast<int64_t>(*fixed), loc), Type::kInt);
    } else {
      auto v = t.Arg(n, like ? 1 : 0, loc);
      if (!v.ok()) return v.status();
      value = *v;
    }
    auto dtype = DtypeArg(t, n, loc);
    if (!dtype.ok()) return dtype.status();
    Type type = value.type;
    if (dtype->has_value()) {
      type = **dtype;
    } else if (like) {
      auto x = t.Arg(n, 0, loc);
      if (!x.ok()) return x.status();
      type = x->type;
    } else if (n->kind().toQualString() == std::string("aten::scalar_tensor")) {
      type = Type::kFloat;  // scalar_tensor defaults to the default float dtype
    }
    return Convert(value, type, loc);
  };
}

// `self[index]`: one more index into a captured tensor.
absl::StatusOr<TVal> IndexBuffer(Translator& t, const TVal& self, const TVal& index0,
                                 const SourceLoc& loc) {
  const TVal index = index0.kind == TVal::Kind::kBuffer ? ElementOf(index0, loc) : index0;
  if (self.kind != TVal::Kind::kBuffer) {
    return t.Error(loc, "indexing is only supported on captured tensors (tensor parameters such "
                        "as `doc` or `bias`), as in bias[b, h, q_idx, kv_idx]");
  }
  if (index.kind == TVal::Kind::kNone) {
    return t.Error(loc, absl::StrCat("slices (`:`, `...`) of `", self.text, "` are not supported: "
                                     "index every dimension with an integer expression, as in ",
                                     self.text, "[h, q_idx]"));
  }
  if (index.kind != TVal::Kind::kExpr || index.type != Type::kInt) {
    return t.Error(loc, absl::StrCat("`", self.text, "` must be indexed by integer expressions ",
                                     "(of b, h, q_idx, kv_idx, parameters and constants), not a ",
                                     index.kind == TVal::Kind::kExpr ? cuir::TypeName(index.type)
                                                                     : "non-scalar",
                                     index.type == Type::kBool ? " (mask indexing selects, it "
                                                                 "does not read one element)"
                                                               : ""));
  }
  if (self.items.size() == cuir::kMaxBufferRank) {
    return t.Error(loc, absl::StrCat("`", self.text, "` is indexed with more than ",
                                     cuir::kMaxBufferRank, " indices; captured tensors have at "
                                     "most ", cuir::kMaxBufferRank, " dimensions"));
  }
  TVal out = self;
  out.items.push_back(index);
  return out;
}

absl::StatusOr<TVal> AtenIndex(Translator& t, Node* n, const SourceLoc& loc) {
  auto self = t.Input(n, 0, loc);
  if (!self.ok()) return self.status();
  auto list = t.Input(n, 1, loc);
  if (!list.ok()) return list.status();
  if (list->kind != TVal::Kind::kList) {
    return t.Error(loc, "index captured tensors with integer expressions, as in t[h, q_idx]");
  }
  TVal r = *self;
  for (const TVal& item : list->items) {
    auto next = IndexBuffer(t, r, item, loc);
    if (!next.ok()) return next.status();
    r = *next;
  }
  return r;
}

// t[i] with a Python int i (a constant, a parameter or int arithmetic) is `select(t, 0, i)`.
absl::StatusOr<TVal> AtenSelect(Translator& t, Node* n, const SourceLoc& loc) {
  auto self = t.Input(n, 0, loc);
  if (!self.ok()) return self.status();
  auto dim = t.Input(n, 1, loc);
  if (!dim.ok()) return dim.status();
  auto index = t.Input(n, 2, loc);
  if (!index.ok()) return index.status();
  if (!IsIntLit(*dim, 0)) {
    return t.Error(loc, "index the dimensions of a captured tensor in order, one integer "
                        "expression each (slices and `...` are not supported)");
  }
  return IndexBuffer(t, *self, *index, loc);
}

const absl::flat_hash_map<std::string, Handler>& Handlers() {
  static const auto* table = [] {
    auto* m = new absl::flat_hash_map<std::string, Handler>();
    auto& h = *m;
    h["prim::Constant"] = Constant;
    h["prim::ListConstruct"] = ListConstruct;
    for (const char* k : {"aten::ScalarImplicit", "prim::NumToTensor", "aten::detach",
                          "aten::clone", "aten::contiguous", "aten::alias"}) {
      h[k] = Identity;
    }
    for (const char* k : {"aten::Float", "aten::FloatImplicit"}) h[k] = CastTo(Type::kFloat);
    for (const char* k : {"aten::Int", "aten::IntImplicit"}) h[k] = CastTo(Type::kInt);
    for (const char* k : {"aten::Bool", "aten::BoolImplicit"}) h[k] = CastTo(Type::kBool);
    h["aten::to"] = To;
    h["aten::type_as"] = To;
    for (auto [k, op] : std::initializer_list<std::pair<const char*, UnaryOp>>{
             {"aten::exp", UnaryOp::kExp}, {"aten::exp2", UnaryOp::kExp2},
             {"aten::special_exp2", UnaryOp::kExp2}, {"aten::log", UnaryOp::kLog},
             {"aten::log2", UnaryOp::kLog2}, {"aten::log10", UnaryOp::kLog10},
             {"aten::sqrt", UnaryOp::kSqrt}, {"aten::tanh", UnaryOp::kTanh},
             {"aten::sigmoid", UnaryOp::kSigmoid}, {"aten::special_expit", UnaryOp::kSigmoid},
             {"aten::sin", UnaryOp::kSin}, {"aten::cos", UnaryOp::kCos},
             {"aten::tan", UnaryOp::kTan}, {"aten::asin", UnaryOp::kAsin},
             {"aten::arcsin", UnaryOp::kAsin}, {"aten::acos", UnaryOp::kAcos},
             {"aten::arccos", UnaryOp::kAcos}, {"aten::atan", UnaryOp::kAtan},
             {"aten::arctan", UnaryOp::kAtan}, {"aten::sinh", UnaryOp::kSinh},
             {"aten::cosh", UnaryOp::kCosh}, {"aten::asinh", UnaryOp::kAsinh},
             {"aten::arcsinh", UnaryOp::kAsinh}, {"aten::acosh", UnaryOp::kAcosh},
             {"aten::arccosh", UnaryOp::kAcosh}, {"aten::atanh", UnaryOp::kAtanh},
             {"aten::arctanh", UnaryOp::kAtanh}, {"aten::erf", UnaryOp::kErf},
             {"aten::special_erf", UnaryOp::kErf}, {"aten::erfc", UnaryOp::kErfc},
             {"aten::special_erfc", UnaryOp::kErfc}, {"aten::log1p", UnaryOp::kLog1p},
             {"aten::special_log1p", UnaryOp::kLog1p}, {"aten::expm1", UnaryOp::kExpm1},
             {"aten::special_expm1", UnaryOp::kExpm1}}) {
      h[k] = FloatMath(op);
    }
    for (auto [k, op] : std::initializer_list<std::pair<const char*, UnaryOp>>{
             {"aten::neg", UnaryOp::kNeg}, {"aten::negative", UnaryOp::kNeg},
             {"aten::abs", UnaryOp::kAbs}, {"prim::abs", UnaryOp::kAbs},
             {"aten::absolute", UnaryOp::kAbs}, {"aten::sign", UnaryOp::kSign},
             {"aten::sgn", UnaryOp::kSign}}) {
      h[k] = SameTypeMath(op);
    }
    h["aten::trunc"] = IntPreserving(UnaryOp::kTrunc);
    h["aten::fix"] = IntPreserving(UnaryOp::kTrunc);
    h["aten::round"] = IntPreserving(UnaryOp::kRound);
    h["aten::floor"] = Rounding(false);
    h["aten::ceil"] = Rounding(true);
    h["aten::relu"] = [](Translator& t, Node* n, const SourceLoc& loc) -> absl::StatusOr<TVal> {
      auto x = t.Arg(n, 0, loc);
      if (!x.ok()) return x.status();
      return Arith(BinaryOp::kMax, *x, Ex(cuir::IntLit(0, loc), Type::kInt), loc);
    };
    h["aten::square"] = [](Translator& t, Node* n, const SourceLoc& loc) -> absl::StatusOr<TVal> {
      auto x = t.Arg(n, 0, loc);
      if (!x.ok()) return x.status();
      return Arith(BinaryOp::kMul, *x, *x, loc);
    };
    h["aten::reciprocal"] = [](Translator& t, Node* n,
                               const SourceLoc& loc) -> absl::StatusOr<TVal> {
      auto x = t.Arg(n, 0, loc);
      if (!x.ok()) return x.status();
      return Arith(BinaryOp::kDiv, Ex(cuir::FloatLit(1.0, loc), Type::kFloat), *x, loc);
    };
    h["aten::rsqrt"] = [](Translator& t, Node* n, const SourceLoc& loc) -> absl::StatusOr<TVal> {
      auto x = t.Arg(n, 0, loc);
      if (!x.ok()) return x.status();
      const TVal root =
          Ex(cuir::Unary(UnaryOp::kSqrt, Convert(*x, Type::kFloat, loc).expr, loc), Type::kFloat);
      return Arith(BinaryOp::kDiv, Ex(cuir::FloatLit(1.0, loc), Type::kFloat), root, loc);
    };
    for (auto [k, op] : {std::pair{"aten::add", BinaryOp::kAdd}, {"aten::sub", BinaryOp::kSub},
                         {"aten::subtract", BinaryOp::kSub}, {"aten::mul", BinaryOp::kMul},
                         {"aten::multiply", BinaryOp::kMul}, {"aten::true_divide", BinaryOp::kDiv},
                         {"aten::floor_divide", BinaryOp::kFloorDiv},
                         {"aten::floordiv", BinaryOp::kFloorDiv},
                         {"aten::remainder", BinaryOp::kMod}, {"aten::__mod__", BinaryOp::kMod},
                         {"aten::pow", BinaryOp::kPow}, {"aten::float_power", BinaryOp::kPow},
                         {"aten::fmod", BinaryOp::kFmod}, {"aten::atan2", BinaryOp::kAtan2},
                         {"aten::arctan2", BinaryOp::kAtan2}}) {
      h[k] = BinaryArith(op);
    }
    for (const char* k : {"aten::__lshift__", "aten::bitwise_left_shift"}) h[k] = Shift(BinaryOp::kShl);
    for (const char* k : {"aten::__rshift__", "aten::bitwise_right_shift"}) {
      h[k] = Shift(BinaryOp::kShr);
    }
    h["aten::rsub"] = BinaryArith(BinaryOp::kSub, /*swapped=*/true);
    h["aten::div"] = Div;
    h["aten::divide"] = Div;
    for (const char* k : {"aten::minimum", "aten::min", "prim::min", "aten::fmin"}) {
      h[k] = MinMax(BinaryOp::kMin);
    }
    for (const char* k : {"aten::maximum", "aten::max", "prim::max", "aten::fmax"}) {
      h[k] = MinMax(BinaryOp::kMax);
    }
    h["aten::clamp"] = Clamp(true, true);
    h["aten::clip"] = Clamp(true, true);
    h["aten::clamp_min"] = Clamp(true, false);
    h["aten::clamp_max"] = Clamp(false, true);
    h["aten::where"] = Where;
    for (auto [k, op] : {std::pair{"aten::lt", BinaryOp::kLt}, {"aten::less", BinaryOp::kLt},
                         {"aten::le", BinaryOp::kLe}, {"aten::less_equal", BinaryOp::kLe},
                         {"aten::gt", BinaryOp::kGt}, {"aten::greater", BinaryOp::kGt},
                         {"aten::ge", BinaryOp::kGe}, {"aten::greater_equal", BinaryOp::kGe},
                         {"aten::eq", BinaryOp::kEq}, {"aten::ne", BinaryOp::kNe},
                         {"aten::not_equal", BinaryOp::kNe}}) {
      h[k] = Compare(op);
    }
    for (const char* k : {"aten::__and__", "aten::bitwise_and"}) h[k] = Logic(BinaryOp::kAnd, false);
    for (const char* k : {"aten::__or__", "aten::bitwise_or"}) h[k] = Logic(BinaryOp::kOr, false);
    for (const char* k : {"aten::__xor__", "aten::bitwise_xor"}) {
      h[k] = Logic(BinaryOp::kOr, false, /*exclusive=*/true);
    }
    h["aten::logical_and"] = Logic(BinaryOp::kAnd, true);
    h["aten::logical_or"] = Logic(BinaryOp::kOr, true);
    h["aten::logical_xor"] = Logic(BinaryOp::kOr, true, /*exclusive=*/true);
    h["aten::bitwise_not"] = Not(false);
    h["aten::logical_not"] = Not(true);
    h["aten::__not__"] = Not(true);
    h["aten::full_like"] = Fill(std::nullopt, /*like=*/true);
    h["aten::ones_like"] = Fill(1.0, /*like=*/true);
    h["aten::zeros_like"] = Fill(0.0, /*like=*/true);
    h["aten::scalar_tensor"] = Fill(std::nullopt, /*like=*/false);
    h["aten::tensor"] = Fill(std::nullopt, /*like=*/false);
    h["aten::index"] = AtenIndex;
    h["aten::slice"] = [](Translator& t, Node* n, const SourceLoc& loc) -> absl::StatusOr<TVal> {
      auto self = t.Input(n, 0, loc);
      if (!self.ok()) return self.status();
      const std::string what = self->kind == TVal::Kind::kBuffer
                                   ? absl::StrCat("of `", self->text, "` ")
                                   : std::string();
      return t.Error(loc, absl::StrCat("slices (`:`, `...`) ", what, "are not supported: index "
                                       "every dimension with an integer expression, as in "
                                       "t[h, q_idx]"));
    };
    h["aten::select"] = AtenSelect;
    return m;
  }();
  return *table;
}

}  // namespace

std::vector<std::string> SupportedOperations() {
  std::vector<std::string> ops;
  for (const auto& [name, handler] : Handlers()) ops.push_back(name);
  std::sort(ops.begin(), ops.end());
  return ops;
}

absl::StatusOr<TypedExpr> TranslateGraph(const TranslateRequest& req) {
  return Translator(req).Run();
}

}  // namespace cubridge::spec::internal
