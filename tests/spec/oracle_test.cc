// The oracle against a hand-written dense reference: per (batch, head), the mask and score
// modification written directly in C++/torch (not through the spec), softmax via logsumexp.
#include "cuir/spec/oracle.h"

#include <functional>
#include <limits>

#include <torch/types.h>

#include "spec_test_util.h"

namespace cubridge::spec {
namespace {

using testing::Config;
using torch::indexing::Slice;

// Index tensors for one (b, h): q_idx [Sq, 1], kv_idx [1, Skv].
struct Idx {
  int64_t b, h;
  torch::Tensor q, kv;
};
using MaskFn = std::function<torch::Tensor(const Idx&)>;
using ScoreFn = std::function<torch::Tensor(const torch::Tensor&, const Idx&)>;

AttentionOutputs Reference(const cuir::AttentionConfig& c, const AttentionInputs& in,
                           const MaskFn& mask, const ScoreFn& score) {
  const double inf = std::numeric_limits<double>::infinity();
  AttentionOutputs out{torch::zeros({c.batch, c.heads_q, c.seqlen_q, c.head_dim}, torch::kFloat64),
                       torch::zeros({c.batch, c.heads_q, c.seqlen_q}, torch::kFloat64)};
  const Idx base{0, 0, torch::arange(c.seqlen_q, torch::kInt64).unsqueeze(1),
                 torch::arange(c.seqlen_kv, torch::kInt64).unsqueeze(0)};
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads_q; ++h) {
      const int64_t kvh = h / (c.heads_q / c.heads_kv);
      const Idx idx{b, h, base.q, base.kv};
      const auto q = in.q[b][h].to(torch::kFloat64);
      const auto k = in.k[b][kvh].to(torch::kFloat64);
      const auto v = in.v[b][kvh].to(torch::kFloat64);
      auto s = q.matmul(k.t()) * c.scale();
      if (score) s = score(s, idx);
      if (mask) s = s.masked_fill(mask(idx).logical_not(), -inf);
      const auto lse = torch::logsumexp(s, 1);
      const auto p = torch::exp(s - lse.unsqueeze(1)).nan_to_num(0.0);
      out.o[b][h] = p.matmul(v);
      out.lse[b][h] = lse;
    }
  }
  return out;
}

Spec Load(const std::string& source) {
  auto spec = LoadSpecSource(source, "oracle.py");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *std::move(spec) : Spec{};
}

Spec LoadExample(const std::string& file) {
  auto spec = LoadSpecFile(testing::ExampleSpecPath(file));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *std::move(spec) : Spec{};
}

void ExpectMatches(const Spec& spec, const cuir::AttentionConfig& c, const AttentionInputs& in,
                   const MaskFn& mask, const ScoreFn& score) {
  auto got = RunOracle(spec, c, in);
  ASSERT_TRUE(got.ok()) << got.status();
  const AttentionOutputs want = Reference(c, in, mask, score);
  EXPECT_EQ(got->o.scalar_type(), torch::kFloat64);
  EXPECT_TRUE(torch::allclose(got->o, want.o, 1e-9, 1e-12))
      << (got->o - want.o).abs().max().item<double>();
  // allclose treats -inf == -inf as equal, which fully masked rows need.
  EXPECT_TRUE(torch::allclose(got->lse, want.lse, 1e-9, 1e-12, /*equal_nan=*/false));
}

AttentionInputs Inputs(const Spec& spec, const cuir::AttentionConfig& c, uint64_t seed,
                       std::map<std::string, BufferSource> sources = {}) {
  auto in = MakeInputs(spec, c, sources, seed);
  EXPECT_TRUE(in.ok()) << in.status();
  return in.ok() ? *std::move(in) : AttentionInputs{};
}

TEST(Oracle, CausalWithMoreKeysThanQueries) {
  const Spec spec = LoadExample("causal.py");
  const auto c = Config(2, 2, 37, 53);
  ExpectMatches(spec, c, Inputs(spec, c, 1), [](const Idx& i) { return i.q >= i.kv; }, nullptr);
}

TEST(Oracle, CausalDocumentMask) {
  const Spec spec = LoadExample("causal_document.py");
  const auto c = Config(2, 2, 40, 40);
  const AttentionInputs in = Inputs(spec, c, 2, {{"doc", {"lengths:7,1,20,12"}}});
  const auto doc = in.buffers.at("doc");
  ExpectMatches(
      spec, c, in,
      [&](const Idx& i) { return (i.q >= i.kv) & (doc.index({i.q}) == doc.index({i.kv})); },
      nullptr);
}

TEST(Oracle, FullyMaskedRowsGiveZeroOutputAndMinusInfinityLse) {
  // Queries 3 and 10.. see nothing.
  const Spec spec = Load("def mask_mod(b, h, q_idx, kv_idx):\n"
                         "    return (q_idx >= kv_idx) & (q_idx != 3) & (q_idx < 10)\n");
  const auto c = Config(2, 1, 16, 16);
  const AttentionInputs in = Inputs(spec, c, 3);
  auto got = RunOracle(spec, c, in);
  ASSERT_TRUE(got.ok()) << got.status();
  for (int64_t row : {3, 10, 15}) {
    EXPECT_TRUE(torch::all(got->o.index({Slice(), Slice(), row}) == 0).item<bool>()) << row;
    EXPECT_TRUE(torch::all(torch::isneginf(got->lse.index({Slice(), Slice(), row}))).item<bool>());
  }
  EXPECT_TRUE(torch::all(torch::isfinite(got->lse.index({Slice(), Slice(), 4}))).item<bool>());
  ExpectMatches(spec, c, in,
                [](const Idx& i) { return (i.q >= i.kv) & (i.q != 3) & (i.q < 10); }, nullptr);
}

TEST(Oracle, GqaMapsQueryHeadsToTheirKvHead) {
  // A head-dependent score_mod makes a wrong head mapping or head offset visible.
  const Spec spec = LoadExample("alibi.py");
  const auto c = Config(8, 2, 24, 31);
  ExpectMatches(spec, c, Inputs(spec, c, 4), nullptr, [](const torch::Tensor& s, const Idx& i) {
    return s + (i.kv - i.q).to(torch::kFloat64) * std::exp2(-8.0 * (i.h + 1) / 32);
  });
}

TEST(Oracle, MaskAndScoreModTogetherWithOverriddenParams) {
  Spec spec = LoadExample("alibi_window_softcap.py");
  ASSERT_TRUE(OverrideParams(spec, {"window=5", "cap=2.0", "heads=4"}).ok());
  const auto c = Config(4, 4, 20, 20);
  ExpectMatches(
      spec, c, Inputs(spec, c, 5), [](const Idx& i) { return (i.q >= i.kv) & (i.q - i.kv <= 5); },
      [](const torch::Tensor& s, const Idx& i) {
        const auto biased = s + (i.kv - i.q).to(torch::kFloat64) * std::exp2(-8.0 * (i.h + 1) / 4);
        return 2.0 * torch::tanh(biased / 2.0);
      });
}

TEST(Oracle, FloatCapturedTensorsAreReadAtFullPrecision) {
  // bf16 slopes times a distance: eager PyTorch would round the product to bf16 (off by ~1 at
  // distances of a few hundred); the kernels widen the slope and multiply in fp32, and so does
  // the oracle (in float64).
  const std::map<std::string, BufferSource> sources = {{"slopes", {"random:bfloat16[2]"}}};
  auto dtypes = BufferDTypesOf(sources);
  ASSERT_TRUE(dtypes.ok()) << dtypes.status();
  auto loaded = LoadSpecSource("def score_mod(score, b, h, q_idx, kv_idx, slopes):\n"
                               "    return score + slopes[h] * (kv_idx - q_idx)\n",
                               "oracle.py", *dtypes);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Spec& spec = *loaded;
  const auto c = Config(2, 2, 300, 300);
  const AttentionInputs in = Inputs(spec, c, 7, sources);
  const auto slopes = in.buffers.at("slopes");
  ASSERT_EQ(slopes.scalar_type(), torch::kBFloat16);
  ExpectMatches(spec, c, in, nullptr, [&](const torch::Tensor& s, const Idx& i) {
    return s + slopes[i.h].to(torch::kFloat64) * (i.kv - i.q).to(torch::kFloat64);
  });
}

TEST(Oracle, MaskThatIgnoresQueriesAndHeadsStillBroadcasts) {
  const Spec spec = Load("def mask_mod(b, h, q_idx, kv_idx):\n    return kv_idx < 5 + b\n");
  const auto c = Config(2, 2, 9, 12);
  ExpectMatches(spec, c, Inputs(spec, c, 6),
                [](const Idx& i) { return (i.kv < 5 + i.b).expand({9, 12}); }, nullptr);
}

TEST(Oracle, ChunksOverHeadsAndBatchesCoverEveryHead) {
  // 1500 x 1500 scores per head: the oracle processes a few heads at a time; an uneven last
  // chunk and the head offsets of later chunks must come out right.
  const Spec spec = LoadExample("alibi.py");
  auto c = Config(8, 4, 1500, 1500);
  c.batch = 1;
  ExpectMatches(spec, c, Inputs(spec, c, 7), nullptr, [](const torch::Tensor& s, const Idx& i) {
    return s + (i.kv - i.q).to(torch::kFloat64) * std::exp2(-8.0 * (i.h + 1) / 32);
  });
}

TEST(Oracle, ChunksOverBatchesKeepTheBatchIndex) {
  // All heads fit in one chunk but not all batches: later chunks must see their own b.
  const Spec spec = Load("def mask_mod(b, h, q_idx, kv_idx):\n"
                         "    return q_idx + b * 7 >= kv_idx\n");
  auto c = Config(2, 2, 2048, 1024);
  c.batch = 5;
  ExpectMatches(spec, c, Inputs(spec, c, 14), [](const Idx& i) { return i.q + i.b * 7 >= i.kv; },
                nullptr);
}

TEST(Oracle, ScoreModThatIgnoresTheScore) {
  const Spec spec = Load("def score_mod(score, b, h, q_idx, kv_idx):\n"
                         "    return (q_idx - kv_idx) * 0.25\n");
  const auto c = Config(2, 2, 7, 7);
  ExpectMatches(spec, c, Inputs(spec, c, 8), nullptr, [](const torch::Tensor& s, const Idx& i) {
    return ((i.q - i.kv).to(torch::kFloat64) * 0.25).expand_as(s);
  });
}

TEST(Oracle, WrongInputShapeIsRejected) {
  const Spec spec = LoadExample("causal.py");
  const auto c = Config(2, 2, 8, 8);
  AttentionInputs in = Inputs(spec, c, 9);
  in.k = in.k.index({Slice(), Slice(), Slice(0, 7)});
  auto got = RunOracle(spec, c, in);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(got.status().message()), ::testing::HasSubstr("k has shape"));
}

TEST(Oracle, MissingBufferValuesAreAnError) {
  const Spec spec = LoadExample("causal_document.py");
  const auto c = Config(2, 2, 8, 8);
  AttentionInputs in = Inputs(spec, c, 10);
  in.buffers.clear();
  auto got = RunOracle(spec, c, in);
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(std::string(got.status().message()), ::testing::HasSubstr("buffer `doc`"));
}

TEST(DenseMask, ShapeKeepsOnlyTheDimensionsTheMaskDependsOn) {
  const auto c = Config(4, 4, 6, 9);
  struct Case {
    const char* body;
    std::vector<int64_t> shape;
  };
  for (const Case& k : {Case{"q_idx >= kv_idx", {1, 1, 6, 9}}, Case{"kv_idx < 3", {1, 1, 6, 9}},
                        Case{"(h % 2 == 0) | (q_idx >= kv_idx)", {1, 4, 6, 9}},
                        Case{"(b == 1) & (h == 2) & (q_idx > 0)", {2, 4, 6, 9}}}) {
    const Spec spec = Load(std::string("def mask_mod(b, h, q_idx, kv_idx):\n    return ") +
                           k.body + "\n");
    auto m = DenseMask(spec, c, Inputs(spec, c, 11));
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->sizes().vec(), k.shape) << k.body;
    EXPECT_EQ(m->scalar_type(), torch::kBool);
  }
  const Spec spec = Load("def mask_mod(b, h, q_idx, kv_idx):\n    return kv_idx < 3\n");
  auto m = DenseMask(spec, c, Inputs(spec, c, 12));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->index({0, 0, 5, 2}).item<bool>(), true);
  EXPECT_EQ(m->index({0, 0, 5, 3}).item<bool>(), false);
  EXPECT_EQ(m->sum().item<int64_t>(), 6 * 3);
}

TEST(DenseMask, SpecWithoutMaskIsAllTrue) {
  const Spec spec = LoadExample("softcap.py");
  const auto c = Config(2, 2, 5, 7);
  auto m = DenseMask(spec, c, Inputs(spec, c, 13));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->sizes().vec(), (std::vector<int64_t>{1, 1, 5, 7}));
  EXPECT_TRUE(m->all().item<bool>());
}

}  // namespace
}  // namespace cubridge::spec
