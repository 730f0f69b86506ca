// Rows whose keys are all masked (O = 0, LSE = -inf), rows masked only in their first blocks
// (the online softmax must recover from m = -inf), and output rows no program writes.
#include <limits>

#include <torch/types.h>

#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "tests/interp/interp_test_util.h"

namespace cubridge::interp::testing {
namespace {

using cuir::DType;

// Row q sees only keys after it: the last rows see nothing, early blocks are fully masked for
// most rows.
constexpr char kAntiCausalSpec[] =
    "def mask_mod(b, h, q_idx, kv_idx):\n"
    "    return kv_idx > q_idx\n";

Pieces AntiCausal() {
  Pieces p;
  p.block_m = 64;
  p.block_n = 32;
  p.after_qk = {"mask S = kv_idx > q_idx"};
  return p;
}

void ExpectEmptyRows(const OracleRun& run, int64_t first_empty_row) {
  const int64_t sq = run.got.o.size(2);
  const torch::Tensor o = run.got.o.narrow(2, first_empty_row, sq - first_empty_row);
  const torch::Tensor lse = run.got.lse.narrow(2, first_empty_row, sq - first_empty_row);
  EXPECT_TRUE(torch::all(o == 0).item<bool>());
  EXPECT_TRUE(torch::all(torch::isinf(lse) & (lse < 0)).item<bool>());
  // The rows before it have keys: their statistics must be finite.
  const torch::Tensor seen = run.got.lse.narrow(2, 0, first_empty_row);
  EXPECT_TRUE(torch::all(torch::isfinite(seen)).item<bool>());
}

TEST(MaskedRows, EmptyRowsGiveZeroAndMinusInfinity) {
  const auto config = Config(DType::kBF16, 64, 300, 300);
  auto run = RunAgainstOracle(ProgramText(AntiCausal()), kAntiCausalSpec, config);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_LE(run->o.max_abs, OTolerance(config.dtype));
  EXPECT_LE(run->lse.max_abs, kLseTolerance);
  ExpectEmptyRows(*run, 299);
}

TEST(MaskedRows, WholeQueryTilesWithoutKeys) {
  // seqlen_q > seqlen_kv: rows >= 199 have no later key, including entire query tiles.
  const auto config = Config(DType::kFP16, 128, 300, 200);
  auto run = RunAgainstOracle(ProgramText(AntiCausal()), kAntiCausalSpec, config);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_LE(run->o.max_abs, OTolerance(config.dtype));
  EXPECT_LE(run->lse.max_abs, kLseTolerance);
  ExpectEmptyRows(*run, 199);
}

TEST(MaskedRows, UnwrittenRowsStayPoisoned) {
  // A grid that misses the last query tile leaves its rows unwritten: they must not pass.
  const std::string text = absl::StrReplaceAll(
      ProgramText({}), {{"m_block < cdiv(seqlen_q, BLOCK_M)", "m_block < seqlen_q // BLOCK_M"}});
  const auto config = Config(DType::kBF16, 64, 200, 100);
  auto run = RunAgainstOracle(text, kFullSpec, config);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(torch::all(torch::isnan(run->got.o.narrow(2, 128, 72))).item<bool>());
  EXPECT_EQ(run->o.max_abs, std::numeric_limits<double>::infinity());
  EXPECT_FALSE(run->Matches(config.dtype));
  // The rows that were written are right.
  EXPECT_LE(MaxErrors(run->got.o.narrow(2, 0, 128), run->want.o.narrow(2, 0, 128)).max_abs,
            OTolerance(config.dtype));
}

TEST(MaxErrors, MatchingInfinitiesAreEqualOthersAreNot) {
  const double inf = std::numeric_limits<double>::infinity();
  const auto want = torch::tensor({-inf, 1.0, 2.0}, torch::kDouble);
  EXPECT_EQ(MaxErrors(torch::tensor({-inf, 1.0, 2.5}, torch::kDouble), want).max_abs, 0.5);
  EXPECT_EQ(MaxErrors(torch::tensor({inf, 1.0, 2.0}, torch::kDouble), want).max_abs, inf);
  EXPECT_EQ(MaxErrors(torch::tensor({-inf, std::nan(""), 2.0}, torch::kDouble), want).max_abs,
            inf);
  EXPECT_EQ(MaxErrors(torch::tensor({0.0, 1.0, 2.0}, torch::kDouble), want).max_abs, inf);
  EXPECT_DOUBLE_EQ(MaxErrors(torch::tensor({-inf, 1.5, 2.0}, torch::kDouble), want).max_rel, 0.5);
}

}  // namespace
}  // namespace cubridge::interp::testing
