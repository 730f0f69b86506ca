// EvalTensor: elementwise CuIR expressions on tensors with kernel numerics and Python integer
// semantics, checked against references computed element by element in plain C++.
#include <cmath>

#include <torch/types.h>

#include "cuir/interp/tensor_eval.h"
#include "cuir/interp/interp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cubridge::interp {
namespace {

using ::testing::HasSubstr;

cuir::ExprPtr E(const std::string& text) {
  auto e = cuir::ParseExpr(text, "e.cuir");
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *e : cuir::IntLit(0);
}

torch::Tensor Eval(const std::string& text, const TensorEnv& env) {
  auto r = EvalTensor(E(text), env);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status();
  return r.ok() ? *r : torch::Tensor();
}

// x = [-7, ..., 7] as a row: negative operands are where Python and C++ division disagree.
TensorEnv IntRowEnv() {
  TensorEnv env;
  env.tensors["x"] = torch::arange(-7, 8, torch::kLong).view({1, 15});
  return env;
}

int64_t PyFloorDiv(int64_t a, int64_t b) {
  return static_cast<int64_t>(std::floor(static_cast<double>(a) / static_cast<double>(b)));
}

TEST(EvalTensor, FloorDivisionAndModuloFollowPython) {
  const TensorEnv env = IntRowEnv();
  for (int64_t d : {3, -3, 4}) {
    const std::string ds = d < 0 ? "(" + std::to_string(d) + ")" : std::to_string(d);
    const torch::Tensor q = Eval("x // " + ds, env);
    const torch::Tensor r = Eval("x % " + ds, env);
    ASSERT_EQ(q.scalar_type(), torch::kLong);
    ASSERT_EQ(r.scalar_type(), torch::kLong);
    for (int64_t i = 0; i < 15; ++i) {
      const int64_t x = i - 7;
      EXPECT_EQ(q[0][i].item<int64_t>(), PyFloorDiv(x, d)) << x << " // " << d;
      EXPECT_EQ(r[0][i].item<int64_t>(), x - PyFloorDiv(x, d) * d) << x << " % " << d;
    }
  }
}

TEST(EvalTensor, CdivIsTheCeiling) {
  const torch::Tensor c = Eval("cdiv(x, 4)", IntRowEnv());
  for (int64_t i = 0; i < 15; ++i) {
    const int64_t x = i - 7;
    EXPECT_EQ(c[0][i].item<int64_t>(), static_cast<int64_t>(std::ceil(x / 4.0))) << x;
  }
}

TEST(EvalTensor, IndexVectorsBroadcastToATile) {
  TensorEnv env;
  env.tensors["q_idx"] = torch::arange(10, 14, torch::kLong).view({4, 1});
  env.tensors["kv_idx"] = torch::arange(0, 5, torch::kLong).view({1, 5});
  const torch::Tensor d = Eval("q_idx - kv_idx", env);
  ASSERT_EQ(d.sizes().vec(), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(d[3][1].item<int64_t>(), 12);
  const torch::Tensor m = Eval("q_idx >= kv_idx + 10", env);
  EXPECT_EQ(m.scalar_type(), torch::kBool);
  EXPECT_EQ(m.sum().item<int64_t>(), 4 + 3 + 2 + 1);  // kv_idx <= q_idx - 10 per row
}

TEST(EvalTensor, FloatMathIsFp32UnlessFloat64IsAsked) {
  TensorEnv env;
  env.tensors["score"] = torch::linspace(-3, 3, 7, torch::kFloat).view({1, 7});
  env.values["cap"] = 2.0;
  const torch::Tensor r = Eval("cap * tanh(score / cap)", env);
  ASSERT_EQ(r.scalar_type(), torch::kFloat);
  const torch::Tensor score = env.tensors["score"];
  EXPECT_TRUE(torch::equal(r, 2.0f * torch::tanh(score / 2.0f)));
  env.float64 = true;
  EXPECT_EQ(Eval("cap * tanh(score / cap)", env).scalar_type(), torch::kDouble);
  env.values["kv_len"] = int64_t{5};
  EXPECT_EQ(Eval("kv_len / 2", env).item<double>(), 2.5);  // true division of ints
}

TEST(EvalTensor, TypesFollowTheLanguageRules) {
  TensorEnv env = IntRowEnv();
  EXPECT_EQ(Eval("x * 2", env).scalar_type(), torch::kLong);
  EXPECT_EQ(Eval("x / 2", env).scalar_type(), torch::kFloat);
  EXPECT_EQ(Eval("x ** 2", env).scalar_type(), torch::kLong);
  EXPECT_EQ(Eval("x ** -1", env).scalar_type(), torch::kFloat);
  EXPECT_EQ(Eval("max(x, 0.5)", env).scalar_type(), torch::kFloat);
  EXPECT_EQ(Eval("select(x > 0, x, 0)", env).scalar_type(), torch::kLong);
  EXPECT_EQ(Eval("int(-2.7)", env).item<int64_t>(), -2);  // truncation toward zero
  EXPECT_EQ(Eval("floor(-2.5)", env).item<float>(), -3.0f);
  EXPECT_EQ(Eval("abs(x)", env).max().item<int64_t>(), 7);
}

TEST(EvalTensor, ScalarsComeFromTheScalarScope) {
  cuir::ScalarEnv scalars;
  scalars.vars["h"] = int64_t{3};
  scalars.vars["full"] = false;
  TensorEnv env = IntRowEnv();
  env.scalars = &scalars;
  const torch::Tensor r = Eval("x + h * 100", env);
  EXPECT_EQ(r[0][0].item<int64_t>(), 293);
  EXPECT_TRUE(Eval("!full", env).item<bool>());
}

TEST(EvalTensor, BufferGatherWithBoundsCheck) {
  TensorEnv env;
  env.buffers["doc"] = torch::tensor({0, 0, 1, 1, 2}, torch::kLong);
  env.tensors["q_idx"] = torch::arange(0, 5, torch::kLong).view({5, 1});
  env.tensors["kv_idx"] = torch::arange(0, 5, torch::kLong).view({1, 5});
  const torch::Tensor same = Eval("doc[q_idx] == doc[kv_idx]", env);
  ASSERT_EQ(same.sizes().vec(), (std::vector<int64_t>{5, 5}));
  EXPECT_EQ(same.sum().item<int64_t>(), 4 + 4 + 1);

  auto r = EvalTensor(E("q_idx >= 0 && doc[q_idx + 3] > 0"), env);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kOutOfRange);
  // `doc` starts at column 15 of the expression text.
  EXPECT_THAT(r.status().message(), HasSubstr("e.cuir:1:15: index 7 is out of range"));
}

TEST(EvalTensor, ErrorsNameTheProblem) {
  TensorEnv env = IntRowEnv();
  auto unbound = EvalTensor(E("x + y"), env);
  EXPECT_EQ(unbound.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unbound.status().message(), HasSubstr("`y` has no value here"));

  auto zero = EvalTensor(E("7 // (x + 7)"), env);
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(zero.status().message(), HasSubstr("integer division by zero"));

  auto not_bool = EvalTensor(E("x && true"), env);
  EXPECT_EQ(not_bool.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(not_bool.status().message(), HasSubstr("needs bool operands"));
}

}  // namespace
}  // namespace cubridge::interp
