// Scalar evaluation, typing and constant folding of CuIR expressions. Expected values follow
// Python / torch semantics (checked against python3 when the tests were written), not the
// implementation's own output.
#include <cmath>
#include <string>

#include "cuir/ir/eval.h"
#include "cuir/ir/program.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cubridge::cuir {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

ExprPtr P(const std::string& text) {
  auto e = ParseExpr(text, "t.cuir");
  EXPECT_TRUE(e.ok()) << text << ": " << e.status();
  return e.ok() ? *e : BoolLit(false);
}

Value Ev(const std::string& text, const ScalarEnv& env = {}) {
  auto v = EvalScalar(P(text), env);
  EXPECT_TRUE(v.ok()) << text << ": " << v.status();
  return v.ok() ? *v : Value(false);
}

int64_t EvI(const std::string& text, const ScalarEnv& env = {}) {
  Value v = Ev(text, env);
  EXPECT_TRUE(std::holds_alternative<int64_t>(v)) << text << " gave " << ValueToString(v);
  return std::holds_alternative<int64_t>(v) ? std::get<int64_t>(v) : -999;
}

double EvF(const std::string& text, const ScalarEnv& env = {}) {
  Value v = Ev(text, env);
  EXPECT_TRUE(std::holds_alternative<double>(v)) << text << " gave " << ValueToString(v);
  return std::holds_alternative<double>(v) ? std::get<double>(v) : -999.0;
}

bool EvB(const std::string& text, const ScalarEnv& env = {}) {
  Value v = Ev(text, env);
  EXPECT_TRUE(std::holds_alternative<bool>(v)) << text << " gave " << ValueToString(v);
  return std::holds_alternative<bool>(v) && std::get<bool>(v);
}

const SourceLoc kAt{"t.cuir", 3, 14};

TEST(EvalTest, IntFloorDivisionAndModuloFollowPython) {
  EXPECT_EQ(EvI("-7 // 2"), -4);
  EXPECT_EQ(EvI("7 // -2"), -4);
  EXPECT_EQ(EvI("-7 // -2"), 3);
  EXPECT_EQ(EvI("7 // 2"), 3);
  EXPECT_EQ(EvI("-7 % 2"), 1);
  EXPECT_EQ(EvI("7 % -2"), -1);
  EXPECT_EQ(EvI("-7 % -2"), -1);
  EXPECT_EQ(EvI("-6 % 3"), 0);
}

TEST(EvalTest, FloatFloorDivisionAndModuloFollowPython) {
  EXPECT_DOUBLE_EQ(EvF("-7.0 // 2.0"), -4.0);
  EXPECT_DOUBLE_EQ(EvF("-5.5 // 2"), -3.0);
  EXPECT_DOUBLE_EQ(EvF("-7.0 % 2"), 1.0);
  EXPECT_DOUBLE_EQ(EvF("5.5 % -2.0"), -0.5);
}

TEST(EvalTest, SlashIsTrueDivision) {
  EXPECT_DOUBLE_EQ(EvF("7 / 2"), 3.5);
  EXPECT_DOUBLE_EQ(EvF("4 / 2"), 2.0);  // float even when exact
  EXPECT_DOUBLE_EQ(EvF("-1 / 4"), -0.25);
  // Float division by zero is IEEE (like torch), unlike integer // and %.
  EXPECT_TRUE(std::isinf(EvF("1 / 0")));
}

TEST(EvalTest, PromotionToFloat) {
  EXPECT_EQ(EvI("1 + 2 * 3"), 7);
  EXPECT_DOUBLE_EQ(EvF("1 + 2.5"), 3.5);
  EXPECT_DOUBLE_EQ(EvF("min(3, 2.5)"), 2.5);
  EXPECT_DOUBLE_EQ(EvF("max(3, 2.5)"), 3.0);
  EXPECT_EQ(EvI("max(2, 5)"), 5);
  EXPECT_EQ(EvI("abs(-3)"), 3);
  EXPECT_DOUBLE_EQ(EvF("abs(-2.5)"), 2.5);
  EXPECT_EQ(EvI("2 ** 10"), 1024);
  EXPECT_DOUBLE_EQ(EvF("2 ** -1"), 0.5);
  EXPECT_DOUBLE_EQ(EvF("2.0 ** 2"), 4.0);
  EXPECT_EQ(EvI("-2 ** 2"), -4);  // Python: -(2 ** 2)
}

TEST(EvalTest, FloatMathAlwaysGivesFloat) {
  EXPECT_DOUBLE_EQ(EvF("exp(0)"), 1.0);
  EXPECT_DOUBLE_EQ(EvF("exp2(3)"), 8.0);
  EXPECT_DOUBLE_EQ(EvF("log2(8)"), 3.0);
  EXPECT_DOUBLE_EQ(EvF("sqrt(16)"), 4.0);
  EXPECT_DOUBLE_EQ(EvF("sigmoid(0)"), 0.5);
  EXPECT_DOUBLE_EQ(EvF("tanh(0.0)"), 0.0);
  EXPECT_DOUBLE_EQ(EvF("floor(-2.5)"), -3.0);
  EXPECT_DOUBLE_EQ(EvF("floor(7)"), 7.0);
}

TEST(EvalTest, CastsTruncateTowardZero) {
  EXPECT_EQ(EvI("int(-2.7)"), -2);
  EXPECT_EQ(EvI("int(2.7)"), 2);
  EXPECT_EQ(EvI("int(true)"), 1);
  EXPECT_DOUBLE_EQ(EvF("float(3)"), 3.0);
  auto huge = EvalScalar(Unary(UnaryOp::kToInt, FloatLit(1e30), kAt), {});
  ASSERT_FALSE(huge.ok());
  EXPECT_THAT(huge.status().message(), AllOf(HasSubstr("t.cuir:3:14"), HasSubstr("int")));
  EXPECT_FALSE(EvalScalar(P("int(nan)"), {}).ok());
}

TEST(EvalTest, CdivRoundsUp) {
  EXPECT_EQ(EvI("cdiv(7, 2)"), 4);
  EXPECT_EQ(EvI("cdiv(8, 2)"), 4);
  EXPECT_EQ(EvI("cdiv(0, 64)"), 0);
  EXPECT_EQ(EvI("cdiv(-7, 2)"), -3);  // ceil(-3.5)
}

TEST(EvalTest, SelectPromotesBranches) {
  EXPECT_DOUBLE_EQ(EvF("select(1 < 2, 3, 4.5)"), 3.0);
  EXPECT_EQ(EvI("select(false, 1, 2)"), 2);
  EXPECT_TRUE(EvB("select(true, 1 < 2, false)"));
}

TEST(EvalTest, ComparisonsAndLogic) {
  EXPECT_TRUE(EvB("1 < 2 && 3.0 >= 3"));
  EXPECT_TRUE(EvB("!(1 == 2)"));
  EXPECT_FALSE(EvB("true == false"));
  EXPECT_TRUE(EvB("false || 2 != 3"));
  EXPECT_FALSE(EvB("nan == nan"));
  EXPECT_TRUE(EvB("-inf < 0"));
}

TEST(EvalTest, VariablesAndBuffers) {
  ScalarEnv env;
  env.vars["q_idx"] = int64_t{5};
  env.vars["kv_idx"] = int64_t{2};
  env.vars["cap"] = 20.0;
  env.buffers["doc"] = BufferData::Ints({0, 0, 1, 1, 1, 2});
  EXPECT_TRUE(EvB("q_idx >= kv_idx && doc[q_idx] == doc[kv_idx] + 1", env));
  EXPECT_EQ(EvI("(kv_idx - q_idx) // 2", env), -2);
  EXPECT_DOUBLE_EQ(EvF("cap * tanh(0.0 / cap)", env), 0.0);
}

TEST(EvalTest, IntegerDivisionByZeroNamesTheLocation) {
  ScalarEnv env;
  env.vars["a"] = int64_t{7};
  env.vars["b"] = int64_t{0};
  for (BinaryOp op : {BinaryOp::kFloorDiv, BinaryOp::kMod, BinaryOp::kCdiv}) {
    auto v = EvalScalar(Binary(op, Var("a"), Var("b"), kAt), env);
    ASSERT_FALSE(v.ok()) << BinaryOpName(op);
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(v.status().message(),
                AllOf(HasSubstr("t.cuir:3:14"), HasSubstr("division by zero"), HasSubstr("`b`")));
  }
}

TEST(EvalTest, ParsedLocationIsTheOperator) {
  auto v = EvalScalar(P("1 + 7 % 0"), {});
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.status().message(), HasSubstr("t.cuir:1:7"));
}

TEST(EvalTest, BufferOutOfRangeNamesBufferIndexAndLength) {
  ScalarEnv env;
  env.buffers["doc"] = BufferData::Ints({0, 1, 2});
  env.vars["i"] = int64_t{5};
  for (const char* index : {"i", "-4"}) {
    auto v = EvalScalar(Index("doc", P(index), kAt), env);
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_THAT(v.status().message(),
                AllOf(HasSubstr("t.cuir:3:14"), HasSubstr("`doc`"), HasSubstr("shape [3]"),
                      HasSubstr(index[0] == '-' ? "index [-4]" : "index [5]")));
  }
}

TEST(EvalTest, BufferIndicesFollowPython) {
  ScalarEnv env;
  BufferData table;  // [2, 3] row-major, floats
  table.element = Type::kFloat;
  table.sizes = {2, 3};
  for (int i = 0; i < 6; ++i) table.values.emplace_back(0.5 * i);
  env.buffers["t"] = table;
  env.buffers["doc"] = BufferData::Ints({4, 5, 6});
  EXPECT_EQ(std::get<int64_t>(*EvalScalar(P("doc[-1]"), env)), 6);
  EXPECT_EQ(std::get<int64_t>(*EvalScalar(P("doc[-3]"), env)), 4);
  EXPECT_EQ(std::get<double>(*EvalScalar(P("t[1, 2]"), env)), 2.5);
  EXPECT_EQ(std::get<double>(*EvalScalar(P("t[-1, 0]"), env)), 1.5);
  EXPECT_EQ(EvalScalar(P("t[2, 0]"), env).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(EvalScalar(P("t[0]"), env).status().code(), absl::StatusCode::kOutOfRange);
  BufferData scalar;
  scalar.element = Type::kBool;
  scalar.values.emplace_back(true);
  env.buffers["s"] = scalar;
  EXPECT_TRUE(std::get<bool>(*EvalScalar(P("s[]"), env)));
}

TEST(EvalTest, UnboundNamesAndBadOperandsAreErrors) {
  auto unbound = EvalScalar(Var("window", kAt), {});
  ASSERT_FALSE(unbound.ok());
  EXPECT_THAT(unbound.status().message(), AllOf(HasSubstr("t.cuir:3:14"), HasSubstr("window")));
  auto no_buffer = EvalScalar(Index("doc", IntLit(0), kAt), {});
  ASSERT_FALSE(no_buffer.ok());
  EXPECT_THAT(no_buffer.status().message(), HasSubstr("doc"));
  auto bad = EvalScalar(P("1 && true"), {});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), AllOf(HasSubstr("t.cuir:1:3"), HasSubstr("`&&`")));
}

TEST(EvalTest, NodesWithoutLocationReportTheNearestEnclosingOne) {
  auto e = Binary(BinaryOp::kAdd, IntLit(1), Binary(BinaryOp::kMod, IntLit(1), IntLit(0)), kAt);
  auto v = EvalScalar(e, {});
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.status().message(), HasSubstr("t.cuir:3:14"));
}

TEST(EvalTest, EvalIntAndEvalBoolCheckTheResultType) {
  ASSERT_TRUE(EvalInt(P("3 * 4"), {}).ok());
  EXPECT_EQ(*EvalInt(P("3 * 4"), {}), 12);
  EXPECT_FALSE(EvalInt(P("3 / 4"), {}).ok());
  EXPECT_FALSE(EvalInt(P("1 < 2"), {}).ok());
  ASSERT_TRUE(EvalBool(P("1 < 2"), {}).ok());
  EXPECT_TRUE(*EvalBool(P("1 < 2"), {}));
  auto not_bool = EvalBool(P("1"), {});
  ASSERT_FALSE(not_bool.ok());
  EXPECT_THAT(not_bool.status().message(), HasSubstr("bool"));
}

TEST(EvalTest, ValueToStringKeepsFloatsDistinguishable) {
  EXPECT_EQ(ValueToString(Value(int64_t{-3})), "-3");
  EXPECT_EQ(ValueToString(Value(2.0)), "2.0");
  EXPECT_EQ(ValueToString(Value(0.1)), "0.1");
  EXPECT_EQ(ValueToString(Value(-INFINITY)), "-inf");
  EXPECT_EQ(ValueToString(Value(true)), "true");
}

// ---------------------------------------------------------------------------------------------

TypeEnv KernelTypes() {
  TypeEnv env;
  for (const char* n : {"q_idx", "kv_idx", "h", "n", "seqlen"}) env.vars[n] = Type::kInt;
  env.vars["score"] = Type::kFloat;
  env.vars["full"] = Type::kBool;
  env.buffers["doc"] = Type::kInt;
  return env;
}

TEST(TypeOfTest, InfersTorchLikeTypes) {
  const std::pair<const char*, Type> cases[] = {
      {"q_idx - kv_idx", Type::kInt},
      {"q_idx / 2", Type::kFloat},
      {"q_idx // 2", Type::kInt},
      {"q_idx % 2.0", Type::kFloat},
      {"score * 2", Type::kFloat},
      {"q_idx >= kv_idx", Type::kBool},
      {"!full && q_idx == kv_idx", Type::kBool},
      {"select(q_idx > 0, score, 0)", Type::kFloat},
      {"select(full, 1, 2)", Type::kInt},
      {"doc[q_idx] == doc[kv_idx]", Type::kBool},
      {"2 ** 3", Type::kInt},
      {"2 ** -1", Type::kFloat},
      {"q_idx ** n", Type::kFloat},  // exponent not a constant: sign unknown
      {"float(q_idx)", Type::kFloat},
      {"int(score)", Type::kInt},
      {"floor(q_idx)", Type::kFloat},
      {"abs(q_idx)", Type::kInt},
      {"exp(q_idx)", Type::kFloat},
      {"cdiv(seqlen, 64)", Type::kInt},
      {"min(q_idx, score)", Type::kFloat},
  };
  for (const auto& [text, want] : cases) {
    auto t = TypeOf(P(text), KernelTypes());
    ASSERT_TRUE(t.ok()) << text << ": " << t.status();
    EXPECT_EQ(*t, want) << text << " typed " << TypeName(*t);
  }
}

TEST(TypeOfTest, RejectsIllTypedExpressions) {
  const std::pair<const char*, const char*> cases[] = {
      {"q_idx && full", "`&&`"},
      {"!q_idx", "`!`"},
      {"cdiv(score, 2)", "cdiv"},
      {"select(1, 2, 3)", "select"},
      {"select(full, full, 1)", "select"},
      {"doc[score]", "index"},
      {"full + 1", "`+`"},
      {"full < true", "`<`"},
      {"exp(full)", "exp"},
      {"window + 1", "window"},
      {"ids[0]", "ids"},
  };
  for (const auto& [text, needle] : cases) {
    auto t = TypeOf(P(text), KernelTypes());
    ASSERT_FALSE(t.ok()) << text << " typed " << TypeName(*t);
    EXPECT_THAT(t.status().message(), AllOf(HasSubstr(needle), HasSubstr("t.cuir:1:")))
        << text;
  }
}

TEST(TypeOfTest, MatchesEvaluation) {
  // The type checker and the evaluator must agree on every well-typed closed expression.
  for (const char* text : {"7 / 7", "2 ** 2", "2 ** (1 - 2)", "select(true, 1, 2.0)",
                           "int(2.5) + 1", "floor(3)", "min(1, 2)", "1 < 2.5", "abs(-1.5)"}) {
    auto t = TypeOf(P(text), {});
    ASSERT_TRUE(t.ok()) << text;
    Value v = Ev(text);
    EXPECT_EQ(static_cast<size_t>(*t), v.index()) << text;  // Type and Value share an order
  }
}

// ---------------------------------------------------------------------------------------------

TEST(FoldConstantsTest, FoldsLiteralSubtrees) {
  EXPECT_TRUE(Equal(FoldConstants(P("1 + 2 * 3")), IntLit(7)));
  EXPECT_TRUE(Equal(FoldConstants(P("q_idx + 2 * 3")), P("q_idx + 6")));
  EXPECT_TRUE(Equal(FoldConstants(P("1 / 2")), FloatLit(0.5)));
  EXPECT_TRUE(Equal(FoldConstants(P("2 ** (1 + 1)")), IntLit(4)));
  EXPECT_TRUE(Equal(FoldConstants(P("-(3)")), IntLit(-3)));
  EXPECT_TRUE(Equal(FoldConstants(P("doc[1 + 1]")), P("doc[2]")));
  EXPECT_TRUE(Equal(FoldConstants(P("!(1 < 2) || full")), P("false || full")));
}

TEST(FoldConstantsTest, LeavesErrorsAndSymbolsInPlace) {
  ExprPtr div0 = P("7 // 0");
  EXPECT_TRUE(Equal(FoldConstants(div0), div0));
  ExprPtr symbolic = P("q_idx >= kv_idx");
  EXPECT_EQ(FoldConstants(symbolic), symbolic);  // untouched trees are shared, not copied
}

TEST(FoldConstantsTest, PreservesTypes) {
  for (const char* text : {"q_idx ** (1 + 1)", "2 ** (0 - 1)", "select(q_idx > 0, 1, 2.0)",
                           "q_idx + 4 / 2", "int(7 / 2) * q_idx"}) {
    auto before = TypeOf(P(text), KernelTypes());
    auto after = TypeOf(FoldConstants(P(text)), KernelTypes());
    ASSERT_TRUE(before.ok() && after.ok()) << text;
    EXPECT_EQ(*before, *after) << text;
  }
}

}  // namespace
}  // namespace cubridge::cuir
