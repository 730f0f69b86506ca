// LibTorch's scalar int `%` has no zero check and its `//`, divmod and gcd divide INT64_MIN by -1:
// both raise SIGFPE, which used to kill the process loading the spec (TorchScript folds constants
// while compiling and runs the spec to probe it). Found by fuzz_spec_frontend (`score + 0 % 0`).
#include "spec_test_util.h"

namespace cubridge::spec {
namespace {

using testing::ExpectError;
using testing::PointEnv;

const std::string kScoreDef = "def score_mod(score, b, h, q_idx, kv_idx):\n";

TEST(SpecIntDivision, RemainderByAZeroConstantIsAnError) {
  ExpectError(kScoreDef + "    return score + 0 % 0\n", "2:20",
              "ZeroDivisionError: integer division or modulo by zero");
  ExpectError(kScoreDef + "    z = 1 - 1\n    return score + 1 % z\n", "3:20", "ZeroDivisionError");
}

TEST(SpecIntDivision, RemainderByAZeroParameterIsAnError) {
  ExpectError("def score_mod(score, b, h, q_idx, kv_idx, w: int = 0):\n"
              "    return score + 1 % w\n",
              "2:20", "ZeroDivisionError");
}

double ScoreAt(const Spec& spec, double score) {
  auto v = cuir::EvalScalar(spec.score, PointEnv(spec, 0, 0, 0, 0, score));
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? std::get<double>(*v) : 0.0;
}

// Python's results where they fit; INT64_MIN // -1 wraps, as in the CuIR interpreter. Folded
// while compiling (`low // -1`) and run by the probe (`low // m`).
TEST(SpecIntDivision, MinusOneDivisorsGiveTheInterpretersValues) {
  auto spec = LoadSpecSource(
      "def score_mod(score, b, h, q_idx, kv_idx, m: int = -1):\n"
      "    low = -9223372036854775807 - 1\n"
      "    return score + (low // m + low % m - low // -1 + low % -1) * 0.5\n",
      "t.py");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(ScoreAt(*spec, 1.0), 1.0);
  auto gcd = LoadSpecSource(kScoreDef + "    return score + math.gcd(-9223372036854775807 - 1, -1)\n",
                            "t.py");
  ASSERT_TRUE(gcd.ok()) << gcd.status();
  EXPECT_EQ(ScoreAt(*gcd, 1.0), 2.0);
}

}  // namespace
}  // namespace cubridge::spec
