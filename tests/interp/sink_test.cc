// `epilogue sink EXPR`: the interpreter against softmax over [S, sink] computed directly with
// torch in float64 (the sink column takes probability mass, its value row is zero), per-head
// sinks with GQA, rows whose keys are all masked (O = 0, LSE = sink), and a sink of -inf, which
// is no sink at all.
#include <limits>

#include <torch/types.h>

#include "gtest/gtest.h"
#include "tests/interp/interp_test_util.h"

namespace cubridge::interp::testing {
namespace {

using cuir::DType;

constexpr double kInf = std::numeric_limits<double>::infinity();

// softmax([S, sink[h]]) [V; 0] in float64; `anti_causal` keeps only keys after the query, which
// leaves the last rows with no key at all.
spec::AttentionOutputs Direct(const cuir::AttentionConfig& c, const spec::AttentionInputs& in,
                              const torch::Tensor& sink, bool anti_causal) {
  const int64_t group = c.heads_q / c.heads_kv;
  const auto q = in.q.to(torch::kDouble);
  const auto k = in.k.to(torch::kDouble).repeat_interleave(group, 1);
  const auto v = in.v.to(torch::kDouble).repeat_interleave(group, 1);
  auto s = torch::matmul(q, k.transpose(-1, -2)) * c.scale();
  if (anti_causal) {
    const auto qi = torch::arange(c.seqlen_q).view({-1, 1});
    const auto ki = torch::arange(c.seqlen_kv).view({1, -1});
    s = s.masked_fill(ki <= qi, -kInf);
  }
  const auto sink_col =
      sink.to(torch::kDouble).view({1, c.heads_q, 1, 1}).expand({c.batch, c.heads_q, c.seqlen_q, 1});
  const auto all = torch::cat({s, sink_col}, -1);
  const auto lse = torch::logsumexp(all, -1);
  const auto p = torch::exp(all - lse.unsqueeze(-1)).nan_to_num(0.0);
  return {torch::matmul(p.narrow(-1, 0, c.seqlen_kv), v), lse};
}

struct SinkRun {
  spec::AttentionOutputs got, want;
  Errors o, lse;
};

SinkRun RunSink(const Pieces& pieces, const cuir::AttentionConfig& c, const torch::Tensor& sink,
            bool anti_causal) {
  const auto inputs = RandomInputs(c, 11);
  SinkRun run;
  auto got = Interpret(Parse(ProgramText(pieces)), c, inputs);
  EXPECT_TRUE(got.ok()) << got.status();
  if (!got.ok()) return run;
  run.got = *std::move(got);
  run.want = Direct(c, inputs, sink, anti_causal);
  run.o = MaxErrors(run.got.o, run.want.o);
  run.lse = MaxErrors(run.got.lse, run.want.lse);
  return run;
}

Pieces AntiCausal(const std::string& epilogue) {
  Pieces p;
  p.block_m = 64;
  p.block_n = 32;
  p.after_qk = {"mask S = kv_idx > q_idx"};
  p.epilogue = epilogue;
  return p;
}

TEST(Sink, PerHeadSinkWithGqaMatchesTorch) {
  const auto c = Config(DType::kBF16, 64, 200, 150, /*heads_q=*/4, /*heads_kv=*/2, /*batch=*/2);
  Pieces p;
  p.decls = {"const sink: float = 0.5"};
  p.kv_head = "h // (heads_q // heads_kv)";
  p.epilogue = "epilogue sink sink * float(h + 1)";
  const auto run = RunSink(p, c, 0.5 * torch::arange(1, 5, torch::kDouble), false);
  EXPECT_LE(run.o.max_abs, OTolerance(c.dtype));
  EXPECT_LE(run.lse.max_abs, kLseTolerance);
}

TEST(Sink, ChangesTheResult) {
  // The same program without the sink is plain attention: measurably different from the sink's
  // reference, so the comparison above can fail.
  const auto c = Config(DType::kFP16, 64, 100, 100);
  Pieces p;
  const auto run = RunSink(p, c, torch::full({2}, 3.0, torch::kDouble), false);
  EXPECT_GT(run.o.max_abs, 3 * OTolerance(c.dtype));
  EXPECT_GT(run.lse.max_abs, 10 * kLseTolerance);
}

TEST(Sink, LargeSinkTakesAlmostAllMass) {
  const auto c = Config(DType::kFP16, 128, 70, 90);
  Pieces p;
  p.epilogue = "epilogue sink 30";  // an int sink is converted
  const auto run = RunSink(p, c, torch::full({2}, 30.0, torch::kDouble), false);
  EXPECT_LE(run.o.max_abs, OTolerance(c.dtype));
  EXPECT_LE(run.lse.max_abs, kLseTolerance);
  EXPECT_LT(run.got.o.abs().max().item<double>(), 1e-6);
  EXPECT_LE(MaxErrors(run.got.lse, torch::full_like(run.got.lse, 30.0)).max_abs, 1e-4);
}

TEST(Sink, RowsWithoutKeysGiveZeroOutputAndTheSinkAsLse) {
  const auto c = Config(DType::kBF16, 64, 300, 200);
  const auto run = RunSink(AntiCausal("epilogue sink -0.75 + float(h)"), c,
                       torch::tensor({-0.75, 0.25}, torch::kDouble), true);
  EXPECT_LE(run.o.max_abs, OTolerance(c.dtype));
  EXPECT_LE(run.lse.max_abs, kLseTolerance);
  // Rows >= 199 see no key: exactly O = 0 and LSE = the head's sink.
  const auto o = run.got.o.narrow(2, 199, 101);
  const auto lse = run.got.lse.narrow(2, 199, 101);
  EXPECT_TRUE(torch::all(o == 0).item<bool>());
  EXPECT_TRUE(torch::all(lse.select(1, 0) == -0.75f).item<bool>());
  EXPECT_TRUE(torch::all(lse.select(1, 1) == 0.25f).item<bool>());
}

TEST(Sink, MinusInfinityIsNoSink) {
  const auto c = Config(DType::kFP16, 64, 130, 100);
  const auto run = RunSink(AntiCausal("epilogue sink -inf"), c, torch::full({2}, -kInf), true);
  EXPECT_LE(run.o.max_abs, OTolerance(c.dtype));
  EXPECT_LE(run.lse.max_abs, kLseTolerance);
  // Rows >= 99 see no key and no sink: O = 0, LSE = -inf, no NaN.
  EXPECT_TRUE(torch::all(run.got.o.narrow(2, 99, 31) == 0).item<bool>());
  const auto lse = run.got.lse.narrow(2, 99, 31);
  EXPECT_TRUE(torch::all(torch::isinf(lse) & (lse < 0)).item<bool>());
}

}  // namespace
}  // namespace cubridge::interp::testing
