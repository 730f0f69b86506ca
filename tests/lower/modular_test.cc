// ReduceModulo (cuir/lower/modular.h): golden rewrites, the cases it leaves alone, and the
// rewritten value against the original under the evaluator, at positions up to 2^31 - 2.
#include "cuir/lower/modular.h"

#include <random>

#include "cuir/ir/eval.h"
#include "cuir/ir/program.h"
#include "gtest/gtest.h"
#include "tests/lower/lower_test_util.h"

namespace cubridge::lower {
namespace {

cuir::ExprPtr Parse(const std::string& text) { return testing::ParseOrFail(text); }

cuir::BoundsEnv Env() {
  cuir::BoundsEnv env = cuir::ElementBoundsEnv();
  env["modulus"] = cuir::SymbolRange{cuir::IntLit(7), cuir::IntLit(7), 7, 7};  // a const
  return env;
}

std::string Reduced(const std::string& text) {
  return cuir::PrintExpr(ReduceModulo(Parse(text), Env()));
}

TEST(ReduceModulo, AHashOfPositionsIsComputedOnResidues) {
  EXPECT_EQ(Reduced("(q_idx * 31 + kv_idx * 17) % 7"), "(q_idx % 7 * 3 + kv_idx % 7 * 3) % 7");
  EXPECT_EQ(Reduced("(q_idx * 31 + kv_idx * 17) % modulus != 0"),
            "(q_idx % 7 * 3 + kv_idx % 7 * 3) % modulus != 0");
  EXPECT_EQ(Reduced("(kv_idx * -13 - q_idx * 5) % 11"), "(kv_idx % 11 * 9 - q_idx % 11 * 5) % 11");
}

TEST(ReduceModulo, LeavesWhatIsCheapOrNotExact) {
  for (const char* text : {
           "(q_idx - kv_idx) % 3",                // 32-bit already
           "(q_idx * kv_idx * kv_idx) % 7",       // may wrap at 64 bits: not bounded
           "(q_idx * 31 + kv_idx * 17) % seqlen_q",  // the divisor is not one value
           "(q_idx * 31 + kv_idx * 17) % 1",      // nothing to gain
           "(x * 31.0 + kv_idx) % 7",             // float modulo (x: a float the analysis cannot bound)
           "(q_idx * 31 + kv_idx * 17) // 7",     // floor division is not a residue
       }) {
    EXPECT_EQ(Reduced(text), cuir::PrintExpr(Parse(text))) << text;
  }
}

TEST(ReduceModulo, TheValueIsTheSameUnderTheEvaluator) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> pos(0, (int64_t{1} << 31) - 2);
  for (const char* text : {"(q_idx * 31 + kv_idx * 17) % 7", "(kv_idx * -13 - q_idx * 5) % 11",
                           "(-(q_idx * 1000003) + kv_idx * 65537 + 12345) % 97"}) {
    const cuir::ExprPtr original = Parse(text);
    const cuir::ExprPtr reduced = ReduceModulo(original, Env());
    ASSERT_NE(cuir::PrintExpr(reduced), cuir::PrintExpr(original)) << text;
    for (int i = 0; i < 2000; ++i) {
      cuir::ScalarEnv env;
      const int64_t q = i < 4 ? (i & 1 ? (int64_t{1} << 31) - 2 : 0) : pos(rng);
      const int64_t kv = i < 4 ? (i & 2 ? (int64_t{1} << 31) - 2 : 0) : pos(rng);
      env.vars["q_idx"] = q;
      env.vars["kv_idx"] = kv;
      auto a = cuir::EvalInt(original, env);
      auto b = cuir::EvalInt(reduced, env);
      ASSERT_TRUE(a.ok() && b.ok());
      ASSERT_EQ(*a, *b) << text << " at q_idx=" << q << " kv_idx=" << kv;
    }
  }
}

}  // namespace
}  // namespace cubridge::lower
