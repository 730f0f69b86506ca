// The lifted base program (full attention, MHA) against the float64 oracle of a spec whose
// score_mod is the identity, over dtypes, head dims and ragged sequence lengths.
#include <tuple>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/interp/interp_test_util.h"

namespace cubridge::interp::testing {
namespace {

TEST(BaseProgram, TemplateWithoutEditsIsTheBaseProgram) {
  // Every variant test builds on ProgramText; it must start from the real lifted program.
  EXPECT_TRUE(cuir::Equal(Parse(ProgramText({})), Parse(BaseProgramText())))
      << ProgramText({});
}

using DtypeAndDim = std::tuple<cuir::DType, int64_t>;

class BaseVsOracle : public ::testing::TestWithParam<DtypeAndDim> {};

TEST_P(BaseVsOracle, MatchesOnRaggedShapes) {
  const auto [dtype, head_dim] = GetParam();
  // Ragged in both directions, shorter than one tile in either dimension, and tile multiples.
  for (int64_t sq : {257, 37, 128}) {
    for (int64_t skv : {300, 50, 64}) {
      const auto config = Config(dtype, head_dim, sq, skv);
      SCOPED_TRACE(config.ToString());
      auto run = RunAgainstOracle(BaseProgramText(), kFullSpec, config);
      ASSERT_TRUE(run.ok()) << run.status();
      EXPECT_LE(run->o.max_abs, OTolerance(dtype));
      EXPECT_LE(run->lse.max_abs, kLseTolerance);
      EXPECT_EQ(run->got.o.scalar_type(), run->inputs.q.scalar_type());
      EXPECT_EQ(run->got.lse.scalar_type(), at::kFloat);
      // One program per (query tile, head); each visits every KV block and masks none.
      const int64_t programs = (sq + 127) / 128 * config.heads_q;
      EXPECT_EQ(run->stats.programs, programs);
      EXPECT_EQ(run->stats.blocks_visited, programs * ((skv + 63) / 64));
      EXPECT_EQ(run->stats.blocks_masked, 0);
    }
  }
}

std::string ParamName(const ::testing::TestParamInfo<DtypeAndDim>& info) {
  const auto [dtype, d] = info.param;
  return absl::StrCat(cuir::DTypeName(dtype), "_d", d);
}

INSTANTIATE_TEST_SUITE_P(DtypesAndHeadDims, BaseVsOracle,
                         ::testing::Combine(::testing::Values(cuir::DType::kBF16,
                                                             cuir::DType::kFP16),
                                            ::testing::Values(64, 128, 256)),
                         ParamName);

TEST(BaseProgram, BatchedInputsUseEachBatchEntry) {
  // batch = 3 with ragged seqlens: a program reading the wrong batch entry would be caught.
  const auto config = Config(cuir::DType::kBF16, 64, 130, 70, /*heads_q=*/3, /*heads_kv=*/3,
                             /*batch=*/3);
  auto run = RunAgainstOracle(BaseProgramText(), kFullSpec, config);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(run->Matches(config.dtype)) << "O " << run->o.max_abs << " LSE "
                                          << run->lse.max_abs;
}

TEST(BaseProgram, ExplicitSoftmaxScaleIsUsed) {
  auto config = Config(cuir::DType::kFP16, 64, 100, 90);
  config.softmax_scale = 0.5;  // 4x the default 1/sqrt(64): a large difference if ignored
  auto run = RunAgainstOracle(BaseProgramText(), kFullSpec, config);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(run->Matches(config.dtype)) << "O " << run->o.max_abs << " LSE "
                                          << run->lse.max_abs;
}

}  // namespace
}  // namespace cubridge::interp::testing
