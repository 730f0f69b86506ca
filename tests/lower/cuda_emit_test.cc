// The CuIR -> CUDA expression emitter, on its text: Python division semantics through helpers,
// 64-bit products, fp32 float math, casts, select, literals.
#include "cuir/lower/cuda_emit.h"

#include "cuir/ir/bounds.h"
#include "cuir/ir/program.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cubridge::lower {
namespace {

using ::testing::HasSubstr;

EmitScope TestScope(EmitTarget target = EmitTarget::kDevice) {
  EmitScope s(target);
  s.Bind("q_idx", "q_idx", CType::kInt);
  s.Bind("kv_idx", "kv_idx", CType::kInt);
  s.Bind("x", "x", CType::kFloat);
  s.Bind("flag", "flag", CType::kBool);
  s.Bind("big", "big_v", CType::kLong);
  s.BindBuffer("doc", BufferBinding{"doc_ptr", cuir::TensorDType::kInt32, {"doc_size0"}, {}});
  return s;
}

CExpr EmitOrDie(const std::string& text, EmitTarget target = EmitTarget::kDevice) {
  auto e = cuir::ParseExpr(text);
  EXPECT_TRUE(e.ok()) << text << ": " << e.status();
  if (!e.ok()) return {};
  auto c = EmitExpr(*e, TestScope(target));
  EXPECT_TRUE(c.ok()) << text << ": " << c.status();
  return c.ok() ? *c : CExpr{};
}

struct EmitCase {
  std::string cuir;
  std::string cuda;
  CType type;
};

class EmitText : public ::testing::TestWithParam<EmitCase> {};

// Host code keeps the short circuit: a launch-time expression may guard a division by zero,
// which traps there.
TEST(Emit, HostLogicShortCircuits) {
  EXPECT_EQ(EmitOrDie("!flag && q_idx >= kv_idx || flag == false", EmitTarget::kHost).text,
            "(((!flag) && (q_idx >= kv_idx)) || (flag == false))");
}

TEST_P(EmitText, Emits) {
  const CExpr c = EmitOrDie(GetParam().cuir);
  EXPECT_EQ(c.text, GetParam().cuda) << GetParam().cuir;
  EXPECT_EQ(c.type, GetParam().type) << GetParam().cuir << " gave " << CTypeName(c.type);
}

INSTANTIATE_TEST_SUITE_P(
    FloorDivisionAndModulo, EmitText,
    ::testing::Values(
        // C++ `/` and `%` truncate; CuIR floors (-7 // 2 = -4, -7 % 2 = 1): the helpers, or a
        // shift where the divisor is a power of two (an arithmetic shift floors).
        EmitCase{"q_idx // 4", "(q_idx >> 2)", CType::kInt},
        EmitCase{"-7 // 2", "((-7) >> 1)", CType::kInt},
        EmitCase{"q_idx % -3", "cuir_mod<int>(q_idx, (-3))", CType::kInt},
        EmitCase{"big // q_idx", "cuir_floordiv<long long>(big_v, q_idx)", CType::kLong},
        EmitCase{"x // 2", "cuir_floordiv_f(x, 2.0f)", CType::kFloat},
        EmitCase{"x % 2.5", "cuir_mod_f(x, 2.5f)", CType::kFloat},
        EmitCase{"cdiv(q_idx, 64)", "cuir_cdiv<int>(q_idx, 64)", CType::kInt},
        // `/` is true division even on ints.
        EmitCase{"q_idx / 2", "cuir_div_f(static_cast<float>(q_idx), 2.0f)", CType::kFloat}));

INSTANTIATE_TEST_SUITE_P(
    IntegerWidth, EmitText,
    ::testing::Values(
        EmitCase{"q_idx + kv_idx - 1", "((q_idx + kv_idx) - 1)", CType::kInt},
        // Products can leave the int range (q_idx * kv_idx at 64k tokens): 64-bit.
        EmitCase{"q_idx * kv_idx", "(static_cast<long long>(q_idx) * kv_idx)", CType::kLong},
        EmitCase{"-8 * q_idx", "((-8LL) * q_idx)", CType::kLong},
        EmitCase{"q_idx + big", "(q_idx + big_v)", CType::kLong},
        EmitCase{"3000000000", "3000000000LL", CType::kLong},
        EmitCase{"2 ** 3", "cuir_ipow(2, 3)", CType::kLong},
        EmitCase{"q_idx ** (1 + 1)", "cuir_ipow(q_idx, 2)", CType::kLong},
        // A negative or symbolic exponent makes int ** int a float, as in the evaluator.
        EmitCase{"2 ** -1", "powf(2.0f, (-1.0f))", CType::kFloat},
        EmitCase{"2 ** q_idx", "powf(2.0f, static_cast<float>(q_idx))", CType::kFloat},
        // A float squared or cubed is a product, as in torch's CUDA pow; other powers stay powf.
        EmitCase{"x ** 2", "cuir_powi_f<2>(x)", CType::kFloat},
        EmitCase{"(x + 1.0) ** 3.0", "cuir_powi_f<3>((x + 1.0f))", CType::kFloat},
        EmitCase{"x ** 4", "powf(x, 4.0f)", CType::kFloat},
        EmitCase{"x ** 2.5", "powf(x, 2.5f)", CType::kFloat},
        EmitCase{"max(q_idx, big)", "cuir_max<long long>(q_idx, big_v)", CType::kLong},
        EmitCase{"abs(q_idx - kv_idx)", "abs((q_idx - kv_idx))", CType::kInt},
        EmitCase{"abs(big)", "llabs(big_v)", CType::kLong}));

INSTANTIATE_TEST_SUITE_P(
    CastsAndSelect, EmitText,
    ::testing::Values(
        EmitCase{"int(x)", "static_cast<long long>(x)", CType::kLong},
        EmitCase{"int(q_idx)", "q_idx", CType::kInt},
        EmitCase{"int(flag)", "static_cast<int>(flag)", CType::kInt},
        EmitCase{"float(q_idx)", "static_cast<float>(q_idx)", CType::kFloat},
        EmitCase{"floor(q_idx)", "floorf(static_cast<float>(q_idx))", CType::kFloat},
        EmitCase{"select(flag, q_idx, 3)", "(flag ? q_idx : 3)", CType::kInt},
        // Mixed branches promote to float like the evaluator's select.
        EmitCase{"select(flag, q_idx, x)", "(flag ? static_cast<float>(q_idx) : x)", CType::kFloat},
        EmitCase{"select(q_idx < kv_idx, big, 1)", "((q_idx < kv_idx) ? big_v : 1LL)", CType::kLong},
        EmitCase{"select(flag, true, q_idx > 0)", "(flag ? true : (q_idx > 0))", CType::kBool}));

INSTANTIATE_TEST_SUITE_P(
    FloatMathAndLogic, EmitText,
    ::testing::Values(
        EmitCase{"exp(q_idx)", "cuir_exp(static_cast<float>(q_idx))", CType::kFloat},
        EmitCase{"exp2(x) + tanh(x)", "(exp2f(x) + cuir_tanh(x))", CType::kFloat},
        EmitCase{"sigmoid(x) * log2(x)", "(cuir_sigmoid(x) * cuir_log2(x))", CType::kFloat},
        EmitCase{"min(x, q_idx)", "cuir_min_f(x, static_cast<float>(q_idx))", CType::kFloat},
        EmitCase{"q_idx < x", "(static_cast<float>(q_idx) < x)", CType::kBool},
        // The device evaluates both sides (no branch per score), as the interpreter does.
        EmitCase{"!flag && q_idx >= kv_idx || flag == false",
                 "(((!flag) & (q_idx >= kv_idx)) | (flag == false))", CType::kBool},
        // ... except where the right side divides by a value that may be zero.
        EmitCase{"q_idx > 0 && kv_idx % q_idx == 1",
                 "((q_idx > 0) && (cuir_mod<int>(kv_idx, q_idx) == 1))", CType::kBool},
        EmitCase{"doc[q_idx] == doc[kv_idx + 1]",
                 "(cuir_ld(doc_ptr + q_idx) == cuir_ld(doc_ptr + (kv_idx + 1)))", CType::kBool},
        EmitCase{"-x", "(-x)", CType::kFloat}));

INSTANTIATE_TEST_SUITE_P(
    Literals, EmitText,
    ::testing::Values(EmitCase{"0.1", "0.1f", CType::kFloat},
                      EmitCase{"1.0", "1.0f", CType::kFloat},
                      EmitCase{"2e-3", "0.002f", CType::kFloat},
                      EmitCase{"1e20", "1e+20f", CType::kFloat},
                      EmitCase{"-2.5", "(-2.5f)", CType::kFloat},
                      EmitCase{"inf", "INFINITY", CType::kFloat},
                      EmitCase{"-inf", "(-INFINITY)", CType::kFloat},
                      EmitCase{"nan", "NAN", CType::kFloat},
                      EmitCase{"true", "true", CType::kBool}));

// With the element's ranges known, a product the interval analysis bounds within int stays int;
// an unbounded one is still 64-bit.
TEST(IntegerWidth, BoundedProductsStayInt) {
  EmitScope s = TestScope();
  s.SetBounds(cuir::ElementBoundsEnv());
  auto emit = [&](const std::string& text) {
    auto e = cuir::ParseExpr(text);
    EXPECT_TRUE(e.ok()) << e.status();
    auto c = EmitExpr(*e, s);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : CExpr{};
  };
  const CExpr bounded = emit("(q_idx % 16) * 16");
  EXPECT_EQ(bounded.text, "((q_idx & 15) * 16)");
  EXPECT_EQ(bounded.type, CType::kInt);
  // A shift by an amount known to be in [0, 63] is a plain shift; by anything else the helper.
  EXPECT_EQ(emit("shr(kv_idx, 1)").text, "(static_cast<long long>(kv_idx) >> 1)");
  EXPECT_EQ(emit("shl(q_idx + 1, 1)").text,
            "static_cast<long long>(static_cast<unsigned long long>(static_cast<long long>((q_idx "
            "+ 1))) << 1)");
  EXPECT_EQ(emit("shl(q_idx, kv_idx)").text,
            "cuir_shl(static_cast<long long>(q_idx), static_cast<long long>(kv_idx))");
  const CExpr unbounded = emit("q_idx * kv_idx");
  EXPECT_EQ(unbounded.text, "(static_cast<long long>(q_idx) * kv_idx)");
  EXPECT_EQ(unbounded.type, CType::kLong);
}

TEST(FloatLiteral, RoundsToFp32) {
  // 0.1 as a double is not a float; the kernel computes in fp32, so the literal is 0.1f.
  EXPECT_EQ(FloatLiteral(0.1), "0.1f");
  EXPECT_EQ(FloatLiteral(1e40), "INFINITY");  // beyond the fp32 range
  EXPECT_EQ(FloatLiteral(-0.0), "(-0.0f)");
}

absl::Status EmitStatus(const std::string& text, EmitTarget target = EmitTarget::kDevice) {
  auto e = cuir::ParseExpr(text, "expr.cuir");
  if (!e.ok()) return e.status();
  return EmitExpr(*e, TestScope(target)).status();
}

TEST(EmitErrors, UnknownSymbolIsNamedWithItsPosition) {
  const absl::Status st = EmitStatus("q_idx + window");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("`window`"));
  EXPECT_THAT(st.message(), HasSubstr("expr.cuir:1:9"));
}

TEST(EmitErrors, BuffersCannotBeReadOnTheHost) {
  EXPECT_TRUE(EmitStatus("doc[q_idx]").ok());
  const absl::Status st = EmitStatus("doc[q_idx]", EmitTarget::kHost);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("device"));
}

TEST(EmitErrors, IllTypedOperandsAreRejected) {
  EXPECT_FALSE(EmitStatus("cdiv(x, 2)").ok());
  EXPECT_FALSE(EmitStatus("flag + 1").ok());
  EXPECT_FALSE(EmitStatus("q_idx && flag").ok());
  EXPECT_FALSE(EmitStatus("select(q_idx, 1, 2)").ok());
}

}  // namespace
}  // namespace cubridge::lower
