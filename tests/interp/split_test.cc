// A `split` KV loop runs as two halves, each from a fresh online-softmax state, merged before the
// epilogue: the same results as the unsplit loop up to rounding, with rows that keep no key in
// one half (m = -inf there) or in both, score_mods, table loops, and an epilogue sink, which
// must join the merged softmax once, not once per half.
#include <cmath>
#include <string>

#include <torch/types.h>

#include "gtest/gtest.h"
#include "tests/interp/interp_test_util.h"

namespace cubridge::interp::testing {
namespace {

using cuir::DType;

// LSE is fp32 throughout: the merge only reorders fp32 sums and rescales.
constexpr double kLseRel = 1e-5;
// O is rounded to the input dtype at the end: a tiny fp32 difference that straddles a rounding
// boundary moves O by one unit in the last place, at most |O| / 128 in bf16 (8 significant
// bits), which the relative term admits.
constexpr double kOAbs = 2e-3;
constexpr double kORel = 1.0 / 128;

struct SplitRun {
  spec::AttentionOutputs out;
  InterpStats stats;
};

SplitRun Interp(const Pieces& pieces, const cuir::AttentionConfig& c,
           const spec::AttentionInputs& inputs) {
  SplitRun run;
  auto out = Interpret(Parse(ProgramText(pieces)), c, inputs, &run.stats);
  EXPECT_TRUE(out.ok()) << out.status() << "\n" << ProgramText(pieces);
  if (out.ok()) run.out = *std::move(out);
  return run;
}

// Largest |got - want| / (abs + rel * |want|) over the elements; equal infinities count as 0,
// NaN anywhere as infinitely far. At most 1 means within tolerance.
double WorstRatio(const torch::Tensor& got, const torch::Tensor& want, double abs, double rel) {
  const torch::Tensor g = got.to(torch::kDouble), w = want.to(torch::kDouble);
  torch::Tensor diff = (g - w).abs();
  diff = torch::where(torch::isinf(g) & torch::isinf(w) & (g == w), torch::zeros_like(diff), diff);
  diff = torch::where(torch::isnan(diff), torch::full_like(diff, INFINITY), diff);
  if (diff.numel() == 0) return 0;
  return (diff / (abs + rel * w.abs())).max().item<double>();
}

struct Comparison {
  SplitRun split, unsplit;
};

// Runs `pieces` with and without `split` on the same random inputs and expects the same O and
// LSE up to rounding, and the same statistics: the halves visit every block once.
Comparison ExpectSplitMatchesUnsplit(Pieces pieces, const cuir::AttentionConfig& c,
                                     uint64_t seed = 5) {
  SCOPED_TRACE(c.ToString());
  const spec::AttentionInputs inputs = RandomInputs(c, seed);
  Comparison r;
  pieces.split = false;
  r.unsplit = Interp(pieces, c, inputs);
  pieces.split = true;
  r.split = Interp(pieces, c, inputs);
  if (!r.split.out.o.defined() || !r.unsplit.out.o.defined()) {
    ADD_FAILURE() << "no output";
    return r;
  }
  EXPECT_LE(WorstRatio(r.split.out.lse, r.unsplit.out.lse, kLseRel, kLseRel), 1.0)
      << "LSE differs by more than rounding, max abs "
      << MaxErrors(r.split.out.lse, r.unsplit.out.lse).max_abs;
  EXPECT_LE(WorstRatio(r.split.out.o, r.unsplit.out.o, kOAbs, kORel), 1.0)
      << "O differs by more than rounding, max abs "
      << MaxErrors(r.split.out.o, r.unsplit.out.o).max_abs;
  EXPECT_FALSE(torch::isnan(r.split.out.o.to(torch::kFloat)).any().item<bool>());
  EXPECT_FALSE(torch::isnan(r.split.out.lse).any().item<bool>());
  EXPECT_EQ(r.split.stats.programs, r.unsplit.stats.programs);
  EXPECT_EQ(r.split.stats.blocks_visited, r.unsplit.stats.blocks_visited);
  EXPECT_EQ(r.split.stats.blocks_masked, r.unsplit.stats.blocks_masked);
  return r;
}

bool SameBits(const torch::Tensor& a, const torch::Tensor& b) { return torch::equal(a, b); }

TEST(Split, PlainAttentionMatchesTheUnsplitLoop) {
  // 6 blocks of 64 keys (halves of 3), 5 blocks (2 and 3), in both input dtypes.
  for (const auto& c : {Config(DType::kBF16, 64, 200, 333, 2, 2, 2),
                        Config(DType::kBF16, 128, 130, 300, 2, 2, 1),
                        Config(DType::kFP16, 64, 200, 333, 2, 2, 2)}) {
    const Comparison r = ExpectSplitMatchesUnsplit(Pieces{}, c);
    if (!r.split.out.lse.defined() || !r.unsplit.out.lse.defined()) continue;
    // The halves really ran apart: merging rounds differently from one walk somewhere among
    // the hundreds of fp32 LSEs.
    EXPECT_FALSE(SameBits(r.split.out.lse, r.unsplit.out.lse));
  }
}

TEST(Split, CausalRowsWithoutKeysInTheSecondHalf) {
  // The loop walks every block and the mask drops the keys after the query: the rows before
  // the second half's first key have m = -inf there, and a query tile may have no kept key in
  // a whole half.
  Pieces p;
  p.block_m = 64;
  p.block_n = 32;
  p.after_qk = {"mask S = q_idx >= kv_idx"};
  ExpectSplitMatchesUnsplit(p, Config(DType::kBF16, 64, 300, 300));
  p.kv_head = "h // (heads_q // heads_kv)";
  ExpectSplitMatchesUnsplit(p, Config(DType::kFP16, 64, 333, 150, 4, 2, 2));
}

TEST(Split, RowsWithoutAnyKeyStayEmpty) {
  // seqlen_q > seqlen_kv and only later keys kept: rows >= 199 keep nothing in either half.
  Pieces p;
  p.block_m = 64;
  p.block_n = 32;
  p.after_qk = {"mask S = kv_idx > q_idx"};
  const auto c = Config(DType::kBF16, 64, 300, 200);
  const Comparison r = ExpectSplitMatchesUnsplit(p, c);
  const torch::Tensor o = r.split.out.o.narrow(2, 199, 101);
  const torch::Tensor lse = r.split.out.lse.narrow(2, 199, 101);
  EXPECT_TRUE(torch::all(o == 0).item<bool>());
  EXPECT_TRUE(torch::all(torch::isinf(lse) & (lse < 0)).item<bool>());
}

TEST(Split, TableLoopSplitsItsRows) {
  // The causal mask as a block table: the loop walks each row's listed blocks.
  Pieces p;
  p.block_m = 64;
  p.block_n = 32;
  p.tables = {"table T = blocks(q_idx >= kv_idx)"};
  p.loop = "n_block, full in table T[m_block]";
  p.after_qk = {"mask S = q_idx >= kv_idx when !full"};
  ExpectSplitMatchesUnsplit(p, Config(DType::kBF16, 64, 300, 300, 2, 2, 2));
}

TEST(Split, ScoreModsRunInBothHalves) {
  // A soft cap and a distance bias: the halves' row maxima differ, so the merge rescales.
  Pieces p;
  p.decls = {"const cap: float = 2.0"};
  p.after_qk = {"score_mod S = cap * tanh(score / cap)",
                "score_mod S = score + (kv_idx - q_idx) * 0.02"};
  ExpectSplitMatchesUnsplit(p, Config(DType::kBF16, 64, 200, 333, 2, 2, 2));
  ExpectSplitMatchesUnsplit(p, Config(DType::kFP16, 128, 100, 260));
}

TEST(Split, TheSinkJoinsTheMergedSoftmaxOnce) {
  // A large sink weighs on every row; the rows at the end keep no key at all (LSE = sink).
  Pieces p;
  p.block_m = 64;
  p.block_n = 32;
  p.after_qk = {"mask S = kv_idx > q_idx"};
  p.epilogue = "epilogue sink 3.0";
  const auto c = Config(DType::kBF16, 64, 300, 250, 2, 2, 2);
  const Comparison r = ExpectSplitMatchesUnsplit(p, c);
  const torch::Tensor empty = r.split.out.lse.narrow(2, 249, 51);
  EXPECT_TRUE(torch::all(empty == 3.0f).item<bool>());

  // A sink counted once per half would be one sink of 3 + log(2): far outside the tolerance.
  Pieces twice = p;
  twice.epilogue = "epilogue sink 3.0 + log(2.0)";
  const SplitRun doubled = Interp(twice, c, RandomInputs(c, 5));
  ASSERT_TRUE(doubled.out.lse.defined());
  EXPECT_GT(WorstRatio(doubled.out.lse, r.unsplit.out.lse, kLseRel, kLseRel), 100.0);
  EXPECT_GT(WorstRatio(doubled.out.o, r.unsplit.out.o, kOAbs, kORel), 1.0);
}

TEST(Split, ZeroOrOneBlockGivesTheSameBits) {
  // One block: the first half is empty and the merge scales the second by exp(0) = 1. No block:
  // both halves are empty and every row stays empty.
  for (const char* loop : {"n_block in [0, cdiv(seqlen_kv, BLOCK_N))", "n_block in [0, 0)"}) {
    SCOPED_TRACE(loop);
    Pieces p;
    p.loop = loop;
    p.after_qk = {"mask S = q_idx >= kv_idx"};
    const Comparison r = ExpectSplitMatchesUnsplit(p, Config(DType::kBF16, 64, 100, 64));
    EXPECT_TRUE(SameBits(r.split.out.o, r.unsplit.out.o));
    EXPECT_TRUE(SameBits(r.split.out.lse, r.unsplit.out.lse));
  }
}

}  // namespace
}  // namespace cubridge::interp::testing
