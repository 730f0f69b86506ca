#include "cuir/lower/cuda_emit.h"

#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <variant>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "cuir/ir/eval.h"

namespace cubridge::lower {
namespace {

using cuir::BinaryOp;
using cuir::ExprKind;
using cuir::ExprPtr;
using cuir::SourceLoc;
using cuir::UnaryOp;

bool IsNumber(CType t) { return t != CType::kBool; }
CType WiderInt(CType a, CType b) {
  return (a == CType::kLong || b == CType::kLong) ? CType::kLong : CType::kInt;
}

std::string IntLiteral(int64_t v) {
  if (v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max()) {
    return v < 0 ? absl::StrCat("(", v, ")") : absl::StrCat(v);
  }
  if (v == std::numeric_limits<int64_t>::min()) return "(-9223372036854775807LL - 1)";
  return v < 0 ? absl::StrCat("(", v, "LL)") : absl::StrCat(v, "LL");
}

bool IsPlainDecimal(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  return true;
}

// A literal exponent 2 or 3 (int or float), which cuir_powi_f computes as a product.
std::optional<int> SmallIntExponent(const ExprPtr& e) {
  const double x = e->kind == cuir::ExprKind::kIntLit     ? static_cast<double>(e->int_value)
                   : e->kind == cuir::ExprKind::kFloatLit ? e->float_value
                                                          : 0.0;
  if (x == 2.0) return 2;
  if (x == 3.0) return 3;
  return std::nullopt;
}

// A closed int expression (no symbols) with a value >= 0: the exponent that keeps int ** int an
// int, exactly as the evaluator decides it.
std::optional<int64_t> ConstNonNegativeInt(const ExprPtr& e) {
  std::vector<std::string> names;
  cuir::CollectVars(e, &names);
  std::vector<std::string> buffers;
  cuir::CollectBuffers(e, &buffers);
  if (!names.empty() || !buffers.empty()) return std::nullopt;
  auto v = cuir::EvalScalar(e, cuir::ScalarEnv{});
  if (!v.ok() || !std::holds_alternative<int64_t>(*v) || std::get<int64_t>(*v) < 0) {
    return std::nullopt;
  }
  return std::get<int64_t>(*v);
}

std::string Call(absl::string_view fn, absl::string_view a) { return absl::StrCat(fn, "(", a, ")"); }
std::string Call(absl::string_view fn, absl::string_view a, absl::string_view b) {
  return absl::StrCat(fn, "(", a, ", ", b, ")");
}
std::string IntTemplate(absl::string_view fn, CType t) {
  return absl::StrCat(fn, "<", CTypeName(t), ">");
}

class Emitter {
 public:
  explicit Emitter(const EmitScope& scope) : scope_(scope) {}

  absl::StatusOr<CExpr> Emit(const ExprPtr& e, const SourceLoc& outer) {
    const SourceLoc& loc = e->loc.known() ? e->loc : outer;
    switch (e->kind) {
      case ExprKind::kBoolLit: return CExpr{e->bool_value ? "true" : "false", CType::kBool};
      case ExprKind::kIntLit: {
        const bool narrow = e->int_value >= std::numeric_limits<int32_t>::min() &&
                            e->int_value <= std::numeric_limits<int32_t>::max();
        return CExpr{IntLiteral(e->int_value), narrow ? CType::kInt : CType::kLong};
      }
      case ExprKind::kFloatLit: return CExpr{FloatLiteral(e->float_value), CType::kFloat};
      case ExprKind::kVar: return EmitVar(e, loc);
      case ExprKind::kIndex: return EmitIndex(e, loc);
      case ExprKind::kUnary: return EmitUnary(e, loc);
      case ExprKind::kBinary: return EmitBinary(e, loc);
      case ExprKind::kSelect: return EmitSelect(e, loc);
    }
    return Error(e, loc, "unknown expression kind");
  }

 private:
  absl::Status Error(const ExprPtr& e, const SourceLoc& loc, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(loc.known() ? loc.ToString() + ": " : "",
                                                   "cannot lower `", cuir::PrintExpr(e),
                                                   "` to CUDA: ", what));
  }

  absl::StatusOr<CExpr> EmitVar(const ExprPtr& e, const SourceLoc& loc) {
    if (const CExpr* v = scope_.Find(e->name)) return *v;
    return Error(e, loc,
                 absl::StrCat("`", e->name,
                              "` is not visible at this point of the kernel (the lowering binds "
                              "builtins, params, consts, grid axes, lets and loop variables; a "
                              "table predicate sees only its `per` axes, q_idx and kv_idx)"));
  }

  // data + i0 * stride0 + ... + i_last (unit stride), each index wrapped Python-style unless
  // it is provably non-negative; a negative literal counts from the size directly.
  absl::StatusOr<CExpr> EmitIndex(const ExprPtr& e, const SourceLoc& loc) {
    const BufferBinding* buffer = scope_.FindBuffer(e->name);
    if (buffer == nullptr) return Error(e, loc, absl::StrCat("no buffer `", e->name, "`"));
    if (scope_.target() == EmitTarget::kHost) {
      return Error(e, loc, "buffers live on the device and cannot size the launch");
    }
    if (e->args.size() != buffer->sizes.size()) {
      return Error(e, loc, absl::StrCat("buffer `", e->name, "` has ", buffer->sizes.size(),
                                        " dimensions, indexed with ", e->args.size()));
    }
    if (buffer->tile_view) {
      auto q = Emit(e->args[0], loc);
      if (!q.ok()) return q.status();
      auto kv = Emit(e->args[1], loc);
      if (!kv.ok()) return kv.status();
      return CExpr{absl::StrCat(buffer->data, ".at(", q->text, ", ", kv->text, ")"),
                   ValueCType(buffer->dtype)};
    }
    static const cuir::BoundsEnv kElement = cuir::ElementBoundsEnv();
    const cuir::BoundsEnv& env = scope_.bounds() != nullptr ? *scope_.bounds() : kElement;
    std::string offset;
    for (size_t d = 0; d < e->args.size(); ++d) {
      auto index = Emit(e->args[d], loc);
      if (!index.ok()) return index.status();
      if (!IsInt(index->type)) return Error(e, loc, "a buffer index must be an int");
      // Strided dimensions multiply in 64 bits (a [B, H, S, S] bias passes 2^31 elements); the
      // innermost one adds to the pointer as it is.
      const bool last = d + 1 == e->args.size();
      std::string i;
      const ExprPtr& arg = e->args[d];
      if (arg->kind == cuir::ExprKind::kIntLit && arg->int_value < 0) {
        i = absl::StrCat("(", buffer->sizes[d], " - ", -arg->int_value, ")");
      } else if (cuir::ProvablyNonNegative(arg, env)) {
        i = last ? index->text : Convert(*index, CType::kLong);
      } else {
        i = Call("cuir_wrap", Convert(*index, CType::kLong), buffer->sizes[d]);
      }
      absl::StrAppend(&offset, d > 0 ? " + " : "",
                      last ? i : absl::StrCat(i, " * ", buffer->strides[d]));
    }
    // Pointer first, left to right: data + i0 * s0 + ... is one pointer per row of a score tile
    // (b, h, q_idx terms) plus the column's index, so nvcc computes the row's pointer once and
    // reads each column at an immediate offset from it; `data + (i0 * s0 + kv_idx)` was a 64-bit
    // multiply-add and a carry per score (an unstructured keep mask, bench/NOTES.md).
    const std::string at = offset.empty() ? buffer->data : absl::StrCat(buffer->data, " + ", offset);
    return CExpr{Call("cuir_ld", at), ValueCType(buffer->dtype)};
  }

  absl::StatusOr<CExpr> EmitUnary(const ExprPtr& e, const SourceLoc& loc) {
    auto a = Emit(e->args[0], loc);
    if (!a.ok()) return a.status();
    const UnaryOp op = e->unary_op;
    if (op == UnaryOp::kNot) {
      if (a->type != CType::kBool) return Error(e, loc, "`!` needs a bool");
      return CExpr{absl::StrCat("(!", a->text, ")"), CType::kBool};
    }
    if (op == UnaryOp::kToFloat) return CExpr{AsFloat(*a), CType::kFloat};
    if (op == UnaryOp::kToInt) {
      if (IsInt(a->type)) return *a;
      if (a->type == CType::kBool) return CExpr{Convert(*a, CType::kInt), CType::kInt};
      return CExpr{Convert(*a, CType::kLong), CType::kLong};  // truncates toward zero
    }
    if (!IsNumber(a->type)) return Error(e, loc, "a bool is not a number here");
    if (op == UnaryOp::kNeg) return CExpr{absl::StrCat("(-", a->text, ")"), a->type};
    if (op == UnaryOp::kSign) {  // (0 < x) - (x < 0): NaN gives 0, as torch
      if (a->type == CType::kFloat) {
        return CExpr{absl::StrCat("((float)((0.0f < ", a->text, ") - (", a->text, " < 0.0f)))"),
                     CType::kFloat};
      }
      return CExpr{absl::StrCat("((", CTypeName(a->type), ")((0 < ", a->text, ") - (", a->text,
                                " < 0)))"),
                   a->type};
    }
    if (op == UnaryOp::kBitNot) {
      if (!IsInt(a->type)) return Error(e, loc, "`bit_not` needs an int");
      return CExpr{absl::StrCat("(~", a->text, ")"), a->type};
    }
    if (op == UnaryOp::kAbs) {
      const char* fn = a->type == CType::kInt ? "abs" : a->type == CType::kLong ? "llabs" : "fabsf";
      return CExpr{Call(fn, a->text), a->type};
    }
    const char* fn = nullptr;
    switch (op) {
      case UnaryOp::kExp: fn = "cuir_exp"; break;
      case UnaryOp::kExp2: fn = "exp2f"; break;
      case UnaryOp::kLog: fn = "cuir_log"; break;
      case UnaryOp::kLog2: fn = "cuir_log2"; break;
      case UnaryOp::kSqrt: fn = "cuir_sqrt"; break;
      case UnaryOp::kTanh: fn = "cuir_tanh"; break;
      case UnaryOp::kSigmoid: fn = "cuir_sigmoid"; break;
      case UnaryOp::kFloor: fn = "floorf"; break;
      case UnaryOp::kSin: fn = "cuir_sin"; break;
      case UnaryOp::kCos: fn = "cuir_cos"; break;
      case UnaryOp::kTan: fn = "tanf"; break;
      case UnaryOp::kAsin: fn = "asinf"; break;
      case UnaryOp::kAcos: fn = "acosf"; break;
      case UnaryOp::kAtan: fn = "atanf"; break;
      case UnaryOp::kSinh: fn = "sinhf"; break;
      case UnaryOp::kCosh: fn = "coshf"; break;
      case UnaryOp::kAsinh: fn = "asinhf"; break;
      case UnaryOp::kAcosh: fn = "acoshf"; break;
      case UnaryOp::kAtanh: fn = "atanhf"; break;
      case UnaryOp::kErf: fn = "erff"; break;
      case UnaryOp::kErfc: fn = "erfcf"; break;
      case UnaryOp::kLog1p: fn = "log1pf"; break;
      case UnaryOp::kExpm1: fn = "expm1f"; break;
      case UnaryOp::kLog10: fn = "cuir_log10"; break;
      case UnaryOp::kTrunc: fn = "truncf"; break;
      case UnaryOp::kRound: fn = "rintf"; break;  // half to even, like torch.round
      default: return Error(e, loc, "unknown unary operator");
    }
    return CExpr{Call(fn, AsFloat(*a)), CType::kFloat};
  }

  absl::StatusOr<CExpr> EmitBinary(const ExprPtr& e, const SourceLoc& loc) {
    auto a = Emit(e->args[0], loc);
    if (!a.ok()) return a.status();
    auto b = Emit(e->args[1], loc);
    if (!b.ok()) return b.status();
    const BinaryOp op = e->binary_op;
    if (cuir::IsLogical(op)) {
      if (a->type != CType::kBool || b->type != CType::kBool) {
        return Error(e, loc, "`&&` / `||` need bools");
      }
      // On the device both sides are evaluated, as the interpreter evaluates them: with `&&` nvcc
      // branched around the right side per score (a BSSY / BRA pair and divergent lanes in a
      // dilated window's mask, bench/NOTES.md), where `&` is one predicate operation. Host code
      // keeps the short circuit, and so does a right side that divides by a value not known to be
      // positive: there a guard may be what keeps a division by zero from running.
      const bool eager = scope_.target() == EmitTarget::kDevice && !DividesByUnknown(e->args[1]);
      const char* sym = op == BinaryOp::kAnd ? (eager ? "&" : "&&") : (eager ? "|" : "||");
      return Infix(*a, sym, *b, CType::kBool);
    }
    if (cuir::IsComparison(op)) return EmitComparison(e, loc, *a, *b);
    if (!IsNumber(a->type) || !IsNumber(b->type)) {
      return Error(e, loc, "arithmetic needs numbers, not bools");
    }
    const bool is_float = a->type == CType::kFloat || b->type == CType::kFloat;
    const CType ints = WiderInt(a->type, b->type);
    switch (op) {
      case BinaryOp::kAdd:
      case BinaryOp::kSub: {
        const char* sym = op == BinaryOp::kAdd ? "+" : "-";
        if (is_float) return FloatInfix(*a, sym, *b);
        return Infix(*a, sym, *b, ints);
      }
      case BinaryOp::kMul:
        if (is_float) return FloatInfix(*a, "*", *b);
        // Products are where index arithmetic overflows int: compute them in 64 bits, unless the
        // interval analysis bounds this one within int (a window's area): 64-bit values that
        // reach a row or column array take two registers per slot and 64-bit division after.
        if (ints == CType::kInt && scope_.bounds() != nullptr) {
          if (cuir::WithinInt32(cuir::BoundsOf(e, *scope_.bounds()))) {
            return Infix(*a, "*", *b, CType::kInt);
          }
        }
        return Infix(CExpr{Convert(*a, CType::kLong), CType::kLong}, "*", *b, CType::kLong);
      case BinaryOp::kDiv:
        return CExpr{Call("cuir_div_f", AsFloat(*a), AsFloat(*b)), CType::kFloat};
      case BinaryOp::kFloorDiv:
        if (is_float) return CExpr{Call("cuir_floordiv_f", AsFloat(*a), AsFloat(*b)), CType::kFloat};
        return IntDivision(e, *a, *b, ints);
      case BinaryOp::kMod:
        if (is_float) return CExpr{Call("cuir_mod_f", AsFloat(*a), AsFloat(*b)), CType::kFloat};
        return IntDivision(e, *a, *b, ints);
      case BinaryOp::kMin:
      case BinaryOp::kMax: {
        const bool is_min = op == BinaryOp::kMin;
        if (is_float) {
          return CExpr{Call(is_min ? "cuir_min_f" : "cuir_max_f", AsFloat(*a), AsFloat(*b)),
                       CType::kFloat};
        }
        return CExpr{Call(IntTemplate(is_min ? "cuir_min" : "cuir_max", ints), a->text, b->text),
                     ints};
      }
      case BinaryOp::kAtan2: return CExpr{Call("atan2f", AsFloat(*a), AsFloat(*b)), CType::kFloat};
      case BinaryOp::kFmod:
        if (is_float) return CExpr{Call("fmodf", AsFloat(*a), AsFloat(*b)), CType::kFloat};
        return CExpr{Call(IntTemplate("cuir_fmod", ints), a->text, b->text), ints};
      case BinaryOp::kBitAnd:
      case BinaryOp::kBitOr:
      case BinaryOp::kBitXor: {
        if (is_float) return Error(e, loc, "bit operations need ints");
        const char* sym = op == BinaryOp::kBitAnd ? "&" : op == BinaryOp::kBitOr ? "|" : "^";
        return Infix(CExpr{Convert(*a, ints), ints}, sym, CExpr{Convert(*b, ints), ints}, ints);
      }
      case BinaryOp::kShl:
      case BinaryOp::kShr:
        // torch shifts 64-bit ints; out-of-range amounts are defined there (cuir_shl / cuir_shr).
        if (is_float) return Error(e, loc, "shifts need ints");
        // An amount the interval analysis keeps in [0, 63] needs no test: a plain shift, of the
        // unsigned value for << (torch wraps), arithmetic for >>.
        if (scope_.bounds() != nullptr) {
          const cuir::IntBounds k = cuir::BoundsOf(e->args[1], *scope_.bounds());
          if (k.lo && k.hi && *k.lo >= 0 && *k.hi <= 63) {
            const std::string value = Convert(*a, CType::kLong);
            return op == BinaryOp::kShl
                       ? CExpr{absl::StrCat("static_cast<long long>(static_cast<unsigned long long>(",
                                            value, ") << ", b->text, ")"),
                               CType::kLong}
                       : CExpr{absl::StrCat("(", value, " >> ", b->text, ")"), CType::kLong};
          }
        }
        return CExpr{Call(op == BinaryOp::kShl ? "cuir_shl" : "cuir_shr",
                          Convert(*a, CType::kLong), Convert(*b, CType::kLong)),
                     CType::kLong};
      case BinaryOp::kCdiv:
        if (is_float) return Error(e, loc, "`cdiv` needs ints");
        return CExpr{Call(IntTemplate("cuir_cdiv", ints), a->text, b->text), ints};
      case BinaryOp::kPow: {
        const auto exponent = is_float ? std::nullopt : ConstNonNegativeInt(e->args[1]);
        if (exponent && *exponent <= std::numeric_limits<int32_t>::max()) {
          return CExpr{Call("cuir_ipow", a->text, absl::StrCat(*exponent)), CType::kLong};
        }
        // x ** 2 and x ** 3 as products, as torch's CUDA pow computes them: powf costs a log, an
        // exp and special-case tests per element (a haversine's two squares dominated it).
        if (const auto n = SmallIntExponent(e->args[1]); n && a->type == CType::kFloat) {
          return CExpr{absl::StrCat("cuir_powi_f<", *n, ">(", a->text, ")"), CType::kFloat};
        }
        return CExpr{Call("powf", AsFloat(*a), AsFloat(*b)), CType::kFloat};
      }
      default: break;
    }
    return Error(e, loc, "unknown binary operator");
  }

  const cuir::BoundsEnv& Env() const {
    static const cuir::BoundsEnv kNoSymbols;
    return scope_.bounds() != nullptr ? *scope_.bounds() : kNoSymbols;
  }

  // Whether `e` divides (//, %, cdiv, fmod) by a value the interval analysis cannot keep >= 1.
  bool DividesByUnknown(const ExprPtr& e) const {
    if (e->kind == cuir::ExprKind::kBinary &&
        (e->binary_op == BinaryOp::kFloorDiv || e->binary_op == BinaryOp::kMod ||
         e->binary_op == BinaryOp::kCdiv || e->binary_op == BinaryOp::kFmod)) {
      const cuir::IntBounds d = cuir::BoundsOf(e->args[1], Env());
      if (!d.lo.has_value() || *d.lo < 1) return true;
    }
    for (const ExprPtr& a : e->args) {
      if (DividesByUnknown(a)) return true;
    }
    return false;
  }

  // Python's int `a // b` or `a % b` (e's op) in the cheapest form exact for the operands'
  // ranges (docs/lowering.md, "Integer division and modulo"):
  //   b = 2^k             a >> k, a & (2^k - 1): two's complement shifts and masks floor
  //   b > 0, a >= 0       a / b, a % b: truncation is the floor there; by a literal, nvcc makes
  //                       it a multiply-high
  //   b > 0               cuir_floordiv_pos / cuir_mod_pos: one unsigned division, no sign tests
  //   otherwise           cuir_floordiv / cuir_mod
  // A divisor whose range is a single value is written as that literal.
  CExpr IntDivision(const ExprPtr& e, const CExpr& a, const CExpr& b, CType t) {
    const cuir::BoundsEnv& env = Env();
    const bool mod = e->binary_op == BinaryOp::kMod;
    const cuir::IntBounds d = cuir::BoundsOf(e->args[1], env);
    const bool positive = d.lo.has_value() && *d.lo >= 1;
    const bool known = positive && d.hi == d.lo;
    const std::string divisor = known ? IntLiteral(*d.lo) : b.text;
    const std::string dividend = Convert(a, t);
    if (known && (*d.lo & (*d.lo - 1)) == 0) {
      const int shift = std::countr_zero(static_cast<uint64_t>(*d.lo));
      if (mod) return CExpr{absl::StrCat("(", dividend, " & ", IntLiteral(*d.lo - 1), ")"), t};
      if (shift == 0) return CExpr{dividend, t};
      return CExpr{absl::StrCat("(", dividend, " >> ", shift, ")"), t};
    }
    const bool non_negative = cuir::ProvablyNonNegative(e->args[0], env);
    // A runtime divisor fixed over the element loop, with its multiplier declared beside it.
    if (positive && !known && t == CType::kInt && e->args[1]->kind == cuir::ExprKind::kVar &&
        d.hi && *d.hi <= INT32_MAX) {
      if (const CExpr* by = scope_.Find(DivisorKey(e->args[1]->name))) {
        if (non_negative && !mod) return CExpr{Call("cuir_udiv_by", dividend, by->text), t};
        return CExpr{Call(mod ? "cuir_mod_by" : "cuir_floordiv_by", dividend, by->text), t};
      }
    }
    if (positive && non_negative) {
      return CExpr{absl::StrCat("(", dividend, mod ? " % " : " / ", divisor, ")"), t};
    }
    if (positive) {
      return CExpr{Call(IntTemplate(mod ? "cuir_mod_pos" : "cuir_floordiv_pos", t), a.text, divisor),
                   t};
    }
    return CExpr{Call(IntTemplate(mod ? "cuir_mod" : "cuir_floordiv", t), a.text, b.text), t};
  }

  // Python's `x % c == r` (or `!=`) for an int x, a literal c >= 3 that is not a power of two
  // and 0 <= r < c, as cuir_divisible<c>(x - r): a multiply by c's inverse and one compare, where
  // the remainder costs a multiply-high, a multiply, a subtract and the sign fix-up of Python's
  // `%` (a dilated or strided mask tests this per score). Null where the form does not apply
  // (r != 0 also needs x - r within int).
  std::optional<CExpr> DivisibilityTest(const ExprPtr& e, const SourceLoc& loc) {
    if (e->binary_op != BinaryOp::kEq && e->binary_op != BinaryOp::kNe) return std::nullopt;
    const auto is_mod = [](const ExprPtr& x) {
      return x->kind == cuir::ExprKind::kBinary && x->binary_op == BinaryOp::kMod;
    };
    const bool left = is_mod(e->args[0]);
    const ExprPtr& mod = left ? e->args[0] : e->args[1];
    const ExprPtr& rest = left ? e->args[1] : e->args[0];
    if (!is_mod(mod) || rest->kind != cuir::ExprKind::kIntLit) return std::nullopt;
    const cuir::IntBounds d = cuir::BoundsOf(mod->args[1], Env());
    if (!d.lo || d.hi != d.lo || *d.lo < 3 || (*d.lo & (*d.lo - 1)) == 0) return std::nullopt;
    const int64_t c = *d.lo, r = rest->int_value;
    if (c > std::numeric_limits<int32_t>::max() || r < 0 || r >= c) return std::nullopt;
    auto x = Emit(mod->args[0], loc);
    if (!x.ok() || x->type != CType::kInt) return std::nullopt;
    std::string dividend = x->text;
    if (r != 0) {
      const cuir::IntBounds xb = cuir::BoundsOf(mod->args[0], Env());
      if (!xb.lo || !xb.hi || *xb.lo - r < std::numeric_limits<int32_t>::min()) return std::nullopt;
      dividend = absl::StrCat("(", x->text, " - ", r, ")");
    }
    const std::string test = absl::StrCat("cuir_divisible<", c, ">(", dividend, ")");
    return CExpr{e->binary_op == BinaryOp::kEq ? test : absl::StrCat("(!", test, ")"),
                 CType::kBool};
  }

  absl::StatusOr<CExpr> EmitComparison(const ExprPtr& e, const SourceLoc& loc, const CExpr& a,
                                       const CExpr& b) {
    const BinaryOp op = e->binary_op;
    if (auto test = DivisibilityTest(e, loc)) return *test;
    const char* sym = op == BinaryOp::kLt   ? "<"
                      : op == BinaryOp::kLe ? "<="
                      : op == BinaryOp::kGt ? ">"
                      : op == BinaryOp::kGe ? ">="
                      : op == BinaryOp::kEq ? "=="
                                            : "!=";
    const bool bools = a.type == CType::kBool && b.type == CType::kBool;
    if (bools && (op == BinaryOp::kEq || op == BinaryOp::kNe)) {
      return Infix(a, sym, b, CType::kBool);
    }
    if (!IsNumber(a.type) || !IsNumber(b.type)) {
      return Error(e, loc, "only `==` / `!=` compare bools");
    }
    if (a.type == CType::kFloat || b.type == CType::kFloat) {
      return Infix(CExpr{AsFloat(a), CType::kFloat}, sym, CExpr{AsFloat(b), CType::kFloat},
                   CType::kBool);
    }
    return Infix(a, sym, b, CType::kBool);
  }

  absl::StatusOr<CExpr> EmitSelect(const ExprPtr& e, const SourceLoc& loc) {
    CExpr v[3];
    for (int i = 0; i < 3; ++i) {
      auto r = Emit(e->args[i], loc);
      if (!r.ok()) return r.status();
      v[i] = *r;
    }
    if (v[0].type != CType::kBool) return Error(e, loc, "`select` needs a bool condition");
    if ((v[1].type == CType::kBool) != (v[2].type == CType::kBool)) {
      return Error(e, loc, "`select` branches must both be bools or both numbers");
    }
    CType t = v[1].type;
    if (v[1].type != v[2].type) {
      t = (v[1].type == CType::kFloat || v[2].type == CType::kFloat) ? CType::kFloat
                                                                       : CType::kLong;
    }
    return CExpr{absl::StrCat("(", v[0].text, " ? ", Convert(v[1], t), " : ", Convert(v[2], t), ")"),
                 t};
  }

  static CExpr Infix(const CExpr& a, absl::string_view sym, const CExpr& b, CType t) {
    return CExpr{absl::StrCat("(", a.text, " ", sym, " ", b.text, ")"), t};
  }
  static CExpr FloatInfix(const CExpr& a, absl::string_view sym, const CExpr& b) {
    return Infix(CExpr{AsFloat(a), CType::kFloat}, sym, CExpr{AsFloat(b), CType::kFloat},
                 CType::kFloat);
  }

  const EmitScope& scope_;
};

}  // namespace

bool IsInt(CType t) { return t == CType::kInt || t == CType::kLong; }

const char* CTypeName(CType t) {
  switch (t) {
    case CType::kBool: return "bool";
    case CType::kInt: return "int";
    case CType::kLong: return "long long";
    case CType::kFloat: return "float";
  }
  return "?";
}

void EmitScope::Bind(const std::string& cuir_name, std::string cpp_name, CType type) {
  vars_[cuir_name] = CExpr{std::move(cpp_name), type};
}

void EmitScope::BindBuffer(const std::string& cuir_name, BufferBinding binding) {
  buffers_[cuir_name] = std::move(binding);
}

const char* StorageCType(cuir::TensorDType d) {
  switch (d) {
    case cuir::TensorDType::kInt32: return "int";
    case cuir::TensorDType::kInt64: return "long long";
    case cuir::TensorDType::kBool: return "bool";
    case cuir::TensorDType::kFloat32: return "float";
    case cuir::TensorDType::kBFloat16: return "__nv_bfloat16";
    case cuir::TensorDType::kFloat16: return "__half";
  }
  return "?";
}

CType ValueCType(cuir::TensorDType d) {
  switch (cuir::ElementType(d)) {
    case cuir::Type::kBool: return CType::kBool;
    case cuir::Type::kFloat: return CType::kFloat;
    default: return d == cuir::TensorDType::kInt64 ? CType::kLong : CType::kInt;
  }
}

const CExpr* EmitScope::Find(const std::string& cuir_name) const {
  auto it = vars_.find(cuir_name);
  return it == vars_.end() ? nullptr : &it->second;
}

const BufferBinding* EmitScope::FindBuffer(const std::string& cuir_name) const {
  auto it = buffers_.find(cuir_name);
  return it == buffers_.end() ? nullptr : &it->second;
}

void EmitScope::SetBounds(cuir::BoundsEnv env) {
  bounds_ = std::make_shared<const cuir::BoundsEnv>(std::move(env));
}

EmitScope EmitScope::WithTarget(EmitTarget target) const {
  EmitScope s = *this;
  s.target_ = target;
  return s;
}

absl::StatusOr<CExpr> EmitExpr(const cuir::ExprPtr& e, const EmitScope& scope) {
  return Emitter(scope).Emit(e, e->loc);
}

std::string Convert(const CExpr& e, CType to) {
  if (e.type == to) return e.text;
  // Int literals convert by suffix: "8" -> "8LL" / "8.0f", "(-8)" -> "(-8LL)" / "(-8.0f)".
  const bool negative = e.text.size() > 3 && e.text.rfind("(-", 0) == 0 && e.text.back() == ')' &&
                        IsPlainDecimal(e.text.substr(2, e.text.size() - 3));
  if (e.type == CType::kInt && (IsPlainDecimal(e.text) || negative)) {
    const std::string digits = negative ? e.text.substr(1, e.text.size() - 2) : e.text;
    const char* suffix = to == CType::kLong ? "LL" : to == CType::kFloat ? ".0f" : nullptr;
    if (suffix != nullptr) {
      return negative ? absl::StrCat("(", digits, suffix, ")") : absl::StrCat(digits, suffix);
    }
  }
  return absl::StrCat("static_cast<", CTypeName(to), ">(", e.text, ")");
}

std::string AsFloat(const CExpr& e) { return Convert(e, CType::kFloat); }

CType DeclaredCType(cuir::Type t, CType value_type) {
  switch (t) {
    case cuir::Type::kBool: return CType::kBool;
    case cuir::Type::kFloat: return CType::kFloat;
    case cuir::Type::kInt: return value_type == CType::kLong ? CType::kLong : CType::kInt;
  }
  return value_type;
}

std::string DivisorKey(const std::string& cuir_name) { return cuir_name + "#divisor"; }
std::string DivisorName(const std::string& cpp_name) { return cpp_name + "_divisor"; }

std::string FloatLiteral(double v) {
  const float f = static_cast<float>(v);
  if (std::isnan(f)) return "NAN";
  if (std::isinf(f)) return f > 0 ? "INFINITY" : "(-INFINITY)";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), f);
  std::string s(buf, end);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  s += "f";
  return f < 0 || std::signbit(f) ? absl::StrCat("(", s, ")") : s;
}

}  // namespace cubridge::lower
