// Symbolic derivatives (cuir/ir/derivative.h): every float op against central differences of the
// evaluator, the simplified forms of a few score_mods, buffer reads' partials, and refusals.
#include "cuir/ir/derivative.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "cuir/ir/program.h"

namespace cubridge::cuir {
namespace {

ExprPtr Parse(const std::string& text) {
  auto e = ParseExpr(text);
  EXPECT_TRUE(e.ok()) << text << ": " << e.status();
  return e.ok() ? *e : FloatLit(0.0);
}

TypeEnv Env() {
  TypeEnv env;
  env.vars = {{"score", Type::kFloat}, {"q_idx", Type::kInt}, {"kv_idx", Type::kInt},
              {"h", Type::kInt},       {"b", Type::kInt},     {"cap", Type::kFloat}};
  env.buffers = {{"slopes", Type::kFloat}, {"table", Type::kFloat}, {"doc", Type::kInt}};
  return env;
}

ScalarEnv Point(double score) {
  ScalarEnv env;
  env.vars = {{"score", score}, {"q_idx", int64_t{7}}, {"kv_idx", int64_t{3}},
              {"h", int64_t{1}}, {"b", int64_t{0}},     {"cap", 2.5}};
  BufferData slopes;
  slopes.element = Type::kFloat;
  slopes.sizes = {2};
  slopes.values = {0.25, -0.75};
  env.buffers["slopes"] = slopes;
  BufferData table;
  table.element = Type::kFloat;
  table.sizes = {2, 4};
  for (int i = 0; i < 8; ++i) table.values.emplace_back(0.1 * i - 0.3);
  env.buffers["table"] = table;
  env.buffers["doc"] = BufferData::Ints({0, 0, 1, 1, 1, 2, 2, 2, 2});
  return env;
}

double Eval(const ExprPtr& e, const ScalarEnv& env) {
  auto v = EvalScalar(e, env);
  EXPECT_TRUE(v.ok()) << PrintExpr(e) << ": " << v.status();
  if (!v.ok()) return NAN;
  return std::visit([](auto x) { return static_cast<double>(x); }, *v);
}

// d text / d score at `score` against (f(x + h) - f(x - h)) / 2h.
void ExpectMatchesDifferences(const std::string& text, double score) {
  const ExprPtr e = Parse(text);
  auto d = Differentiate(e, "score", Env());
  ASSERT_TRUE(d.ok()) << text << ": " << d.status();
  const double h = 1e-6;
  const double numeric = (Eval(e, Point(score + h)) - Eval(e, Point(score - h))) / (2 * h);
  const double analytic = Eval(*d, Point(score));
  EXPECT_NEAR(analytic, numeric, 1e-6 * (1 + std::abs(numeric)))
      << text << " at " << score << ": d = " << PrintExpr(*d);
}

TEST(Derivative, EveryFloatOpAgreesWithCentralDifferences) {
  // Each at two points inside its domain, alone and composed with a scaled score.
  const std::vector<std::pair<std::string, std::vector<double>>> cases = {
      {"-score", {0.3, -1.2}},
      {"abs(score)", {0.3, -1.2}},
      {"exp(score)", {0.3, -1.2}},
      {"exp2(score)", {0.3, -1.2}},
      {"log(score)", {0.3, 2.5}},
      {"log2(score)", {0.3, 2.5}},
      {"log10(score)", {0.3, 2.5}},
      {"log1p(score)", {0.3, -0.5}},
      {"expm1(score)", {0.3, -1.2}},
      {"sqrt(score)", {0.3, 2.5}},
      {"tanh(score)", {0.3, -1.2}},
      {"sigmoid(score)", {0.3, -1.2}},
      {"sin(score)", {0.3, -1.2}},
      {"cos(score)", {0.3, -1.2}},
      {"tan(score)", {0.3, -1.2}},
      {"asin(score)", {0.3, -0.7}},
      {"acos(score)", {0.3, -0.7}},
      {"atan(score)", {0.3, -1.2}},
      {"sinh(score)", {0.3, -1.2}},
      {"cosh(score)", {0.3, -1.2}},
      {"asinh(score)", {0.3, -1.2}},
      {"acosh(score)", {1.3, 2.5}},
      {"atanh(score)", {0.3, -0.7}},
      {"erf(score)", {0.3, -1.2}},
      {"erfc(score)", {0.3, -1.2}},
      {"floor(score) + score", {0.3, -1.2}},
      {"round(score) * 2.0 + trunc(score) + sign(score)", {0.3, -1.2}},
      {"float(int(score * 4.0)) + score * 3.0", {0.3, -1.2}},
      {"score + 2.0", {0.3}},
      {"1.5 - score", {0.3}},
      {"score * score * 3.0", {0.3, -1.2}},
      {"1.0 / score", {0.3, -1.2}},
      {"score / (score * score + 1.0)", {0.3, -1.2}},
      {"score % 0.7", {0.3, -1.2}},
      {"2.5 % score", {0.8, -1.9}},
      {"fmod(score, 0.7) + fmod(2.5, score)", {1.3, -1.9}},
      {"score ** 3.0", {0.3, 1.7}},
      {"2.0 ** score", {0.3, -1.2}},
      {"score ** score", {0.3, 1.7}},
      {"min(score, 0.5) + max(score, -0.5)", {0.3, -1.2, 0.9}},
      {"atan2(score, 0.7) + atan2(0.7, score)", {0.3, -1.2}},
      {"select(score > 0.0, score * 2.0, exp(score))", {0.3, -1.2}},
      {"score // 0.5 + score", {0.3, -1.2}},
      // Score_mods users write: softcap, ALiBi with a learned slope, a bias table, a buffer and
      // index mix, a temperature through an int.
      {"cap * tanh(score / cap)", {0.3, -4.0}},
      {"score + slopes[h] * float(kv_idx - q_idx)", {0.3}},
      {"score * exp(table[h, min(max(q_idx - kv_idx, 0), 3)]) + float(doc[q_idx])", {0.3}},
      {"select(doc[q_idx] == doc[kv_idx], score, score * 0.5 - 1.0)", {0.3}},
      {"score / float(q_idx + 1)", {-1.2}},
  };
  for (const auto& [text, points] : cases) {
    for (double x : points) ExpectMatchesDifferences(text, x);
  }
}

TEST(Derivative, TermsWithoutTheVariableLeaveNoTrace) {
  auto d = Differentiate(Parse("score + slopes[h] * float(kv_idx - q_idx)"), "score", Env());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(PrintExpr(*d), "1.0");
  d = Differentiate(Parse("cap * tanh(score / cap)"), "score", Env());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(PrintExpr(*d), "1.0 / cap * (1.0 - tanh(score / cap) * tanh(score / cap)) * cap");
  // Nothing of the score: 0, as a float.
  d = Differentiate(Parse("float(kv_idx - q_idx)"), "score", Env());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(PrintExpr(*d), "0.0");
}

TEST(Derivative, EachReadOfALearnableTensorGetsItsPartial) {
  // The slope is read once per head; the table twice, at two elements, once under exp.
  const ExprPtr e = Parse(
      "score + slopes[h] * float(kv_idx - q_idx) + exp(table[h, 0]) + 2.0 * table[h, 1] + table[h, 0]");
  auto slopes = DifferentiateBufferReads(e, "slopes", Env());
  ASSERT_TRUE(slopes.ok()) << slopes.status();
  ASSERT_EQ(slopes->size(), 1u);
  EXPECT_EQ(PrintExpr((*slopes)[0].index[0]), "h");
  EXPECT_EQ(Eval((*slopes)[0].partial, Point(0.3)), 3.0 - 7.0);
  auto table = DifferentiateBufferReads(e, "table", Env());
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->size(), 2u);  // table[h, 0] twice is one element
  EXPECT_EQ(PrintExpr((*table)[0].index[1]), "0");
  EXPECT_NEAR(Eval((*table)[0].partial, Point(0.3)), std::exp(0.1 * 4 - 0.3) + 1.0, 1e-15);
  EXPECT_EQ(Eval((*table)[1].partial, Point(0.3)), 2.0);
  // Against a central difference of the element itself.
  ScalarEnv plus = Point(0.3), minus = Point(0.3);
  std::get<double>(plus.buffers["table"].values[4]) += 1e-6;
  std::get<double>(minus.buffers["table"].values[4]) -= 1e-6;
  EXPECT_NEAR((Eval(e, plus) - Eval(e, minus)) / 2e-6, Eval((*table)[0].partial, Point(0.3)), 1e-6);
}

TEST(Derivative, RefusesWhatHasNoGradientAndUnknownNames) {
  auto ints = DifferentiateBufferReads(Parse("score + float(doc[q_idx])"), "doc", Env());
  EXPECT_EQ(ints.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ints.status().message()),
              ::testing::HasSubstr("buffer `doc` is int: only a floating captured tensor"));
  auto unknown = Differentiate(Parse("score * temperature"), "score", Env());
  EXPECT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()), ::testing::HasSubstr("temperature"));
}

}  // namespace
}  // namespace cubridge::cuir
