// The backward oracle (issue 29): float64 autograd of the spec, checked against the attention
// backward written out by hand (FlashAttention's formulas) and against central differences of
// the forward oracle, for every example and generality spec.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>

#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include "cuir/spec/oracle.h"
#include "spec_test_util.h"
#include "tests/generality_suite.h"

namespace cubridge::spec {
namespace {

using testing::Config;
using torch::indexing::Slice;

Spec Load(const std::string& source, const std::map<std::string, BufferSource>& sources = {}) {
  return testing::LoadSpecFor("backward.py", sources, &source);
}

// Inputs with q, k, v and the floating captured tensors in float64, so that a perturbation of
// 1e-6 survives (the oracle computes in float64 whatever the inputs' dtype).
AttentionInputs Inputs64(const Spec& spec, const cuir::AttentionConfig& c, uint64_t seed,
                         const std::map<std::string, BufferSource>& sources = {}) {
  auto in = MakeInputs(spec, c, sources, seed);
  EXPECT_TRUE(in.ok()) << in.status();
  if (!in.ok()) return {};
  for (torch::Tensor* t : {&in->q, &in->k, &in->v}) *t = t->to(torch::kFloat64);
  for (auto& [name, t] : in->buffers) {
    if (t.is_floating_point()) t = t.to(torch::kFloat64);
  }
  return *std::move(in);
}

std::set<std::string> FloatingBuffers(const AttentionInputs& in) {
  std::set<std::string> out;
  for (const auto& [name, t] : in.buffers) {
    if (t.is_floating_point()) out.insert(name);
  }
  return out;
}

torch::Tensor Randn(const torch::Tensor& like, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::randn(like.sizes(), gen, torch::kFloat64);
}

double Max(const torch::Tensor& t) { return t.abs().max().item<double>(); }

// The attention backward by hand, per (batch, head), for mask `keep` [Sq, Skv] and the softcap
// score_mod cap * tanh(s / cap): P = softmax, dV += P^T dO, dP = dO V^T, D = rowsum(dO * O),
// dS = P (dP - D), times the softcap's derivative 1 - tanh^2, dQ = dS K scale, dK += dS^T Q scale.
AttentionGrads HandBackward(const cuir::AttentionConfig& c, const AttentionInputs& in,
                            const torch::Tensor& dout, const torch::Tensor& keep, double cap) {
  const double inf = std::numeric_limits<double>::infinity();
  AttentionGrads g{torch::zeros_like(in.q), torch::zeros_like(in.k), torch::zeros_like(in.v), {}};
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads_q; ++h) {
      const int64_t kvh = h / (c.heads_q / c.heads_kv);
      const auto q = in.q[b][h], k = in.k[b][kvh], v = in.v[b][kvh], d_o = dout[b][h];
      const auto t = torch::tanh(q.matmul(k.t()) * c.scale() / cap);
      const auto s = (cap * t).masked_fill(keep.logical_not(), -inf);
      const auto p = torch::softmax(s, 1).nan_to_num(0.0);  // fully masked rows: 0
      const auto o = p.matmul(v);
      g.dv[b][kvh] += p.t().matmul(d_o);
      const auto dp = d_o.matmul(v.t());
      const auto dsum = (d_o * o).sum(1, /*keepdim=*/true);
      const auto ds = p * (dp - dsum) * (1 - t * t);
      g.dq[b][h] += ds.matmul(k) * c.scale();
      g.dk[b][kvh] += ds.t().matmul(q) * c.scale();
    }
  }
  return g;
}

TEST(BackwardOracle, MatchesTheAttentionBackwardByHand) {
  // GQA, Sq != Skv, a softcap, and rows 3, 10, 17, ... that keep nothing.
  const Spec spec = Load(
      "import torch\n"
      "def mask_mod(b, h, q_idx, kv_idx):\n"
      "    return (kv_idx <= q_idx + 5) & (q_idx % 7 != 3)\n"
      "def score_mod(score, b, h, q_idx, kv_idx, cap: float = 2.5):\n"
      "    return cap * torch.tanh(score / cap)\n");
  const auto c = Config(4, 2, 37, 45);
  const AttentionInputs in = Inputs64(spec, c, 11);
  const torch::Tensor dout = Randn(in.q, 12);
  auto got = RunBackwardOracle(spec, c, in, dout, {});
  ASSERT_TRUE(got.ok()) << got.status();
  const auto q_idx = torch::arange(c.seqlen_q).unsqueeze(1), kv_idx = torch::arange(c.seqlen_kv);
  const auto keep = (kv_idx <= q_idx + 5) & (q_idx.remainder(7) != 3);
  const AttentionGrads want = HandBackward(c, in, dout, keep, 2.5);
  EXPECT_EQ(got->dq.scalar_type(), torch::kFloat64);
  EXPECT_EQ(got->dk.sizes(), in.k.sizes());
  EXPECT_LT(Max(got->dq - want.dq), 1e-12 * (1 + Max(want.dq)));
  EXPECT_LT(Max(got->dk - want.dk), 1e-12 * (1 + Max(want.dk)));
  EXPECT_LT(Max(got->dv - want.dv), 1e-12 * (1 + Max(want.dv)));
  // The rows that keep nothing: zero gradients, and nothing is NaN anywhere.
  EXPECT_EQ(Max(got->dq.index({Slice(), Slice(), 3})), 0.0);
  EXPECT_EQ(Max(got->dq.index({Slice(), Slice(), 10})), 0.0);
  EXPECT_GT(Max(got->dq.index({Slice(), Slice(), 4})), 0.0);
  for (const auto& t : {got->dq, got->dk, got->dv}) {
    EXPECT_TRUE(torch::all(torch::isfinite(t)).item<bool>());
  }
}

// <grad, u> against (L(x + eps u) - L(x - eps u)) / (2 eps), L = sum(O * dO), one random
// direction u for each of q, k, v and every floating captured tensor at once. A captured tensor
// in `rounded` is one the spec itself rounds to float32 (`t.float()`): L is then a step function
// of it at 1e-7 relative, so its difference takes eps 1e-3 and a 1e-3 tolerance (the gradient,
// autograd's, passes the rounding straight through, as in PyTorch training).
void ExpectDirectionalDerivativesMatch(const Spec& spec, const cuir::AttentionConfig& c,
                                       const AttentionInputs& in, uint64_t seed,
                                       const std::set<std::string>& rounded = {}) {
  const torch::Tensor dout = Randn(in.q, seed);
  const std::set<std::string> learnable = FloatingBuffers(in);
  auto grads = RunBackwardOracle(spec, c, in, dout, learnable);
  ASSERT_TRUE(grads.ok()) << grads.status();
  const auto loss = [&](const AttentionInputs& x) {
    auto out = RunOracle(spec, c, x);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? (out->o * dout).sum().item<double>() : 0.0;
  };
  const double fine = 1e-6, coarse = 1e-3;
  // Each input by its own direction: which one disagrees is then plain.
  std::vector<std::pair<std::string, torch::Tensor AttentionInputs::*>> qkv = {
      {"q", &AttentionInputs::q}, {"k", &AttentionInputs::k}, {"v", &AttentionInputs::v}};
  const std::map<std::string, torch::Tensor> grad_of = {
      {"q", grads->dq}, {"k", grads->dk}, {"v", grads->dv}};
  uint64_t dir_seed = seed * 31;
  const auto check = [&](const std::string& what, const torch::Tensor& grad,
                         const std::function<void(AttentionInputs&, const torch::Tensor&)>& move,
                         const torch::Tensor& like) {
    const double eps = rounded.count(what) ? coarse : fine;
    const torch::Tensor u = Randn(like, ++dir_seed);
    AttentionInputs plus = in, minus = in;
    move(plus, eps * u);
    move(minus, -eps * u);
    const double numeric = (loss(plus) - loss(minus)) / (2 * eps);
    const double analytic = (grad * u).sum().item<double>();
    EXPECT_NEAR(analytic, numeric, eps * (1 + std::abs(numeric))) << what;
    EXPECT_TRUE(torch::all(torch::isfinite(grad)).item<bool>()) << what;
  };
  for (const auto& [name, member] : qkv) {
    check(name, grad_of.at(name),
          [member = member](AttentionInputs& x, const torch::Tensor& d) { x.*member = x.*member + d; },
          in.*member);
  }
  for (const std::string& name : learnable) {
    ASSERT_TRUE(grads->buffers.count(name)) << name;
    EXPECT_EQ(grads->buffers.at(name).sizes(), in.buffers.at(name).sizes()) << name;
    check(name, grads->buffers.at(name),
          [&name](AttentionInputs& x, const torch::Tensor& d) {
            x.buffers[name] = x.buffers[name] + d;
          },
          in.buffers.at(name));
  }
}

TEST(BackwardOracle, LearnedSlopesAndABiasTableGetTheirGradients) {
  // A learnable ALiBi slope per head and a learnable relative-position table indexed through a
  // clamp: the gradients most asked of FlexAttention (captured tensors that require grad).
  const std::map<std::string, BufferSource> sources = {{"slopes", {"random:float32[4]"}},
                                                       {"table", {"random:float32[4,9]"}}};
  const Spec spec = Load(
      "import torch\n"
      "def score_mod(score, b, h, q_idx, kv_idx, slopes, table):\n"
      "    rel = torch.clamp(q_idx - kv_idx, -4, 4) + 4\n"
      "    return score + slopes[h] * (kv_idx - q_idx) + table[h, rel]\n",
      sources);
  const auto c = Config(4, 2, 21, 29);
  const AttentionInputs in = Inputs64(spec, c, 21, sources);
  ExpectDirectionalDerivativesMatch(spec, c, in, 22);
  // The table's entries that no (q, kv) pair reaches get nothing; each slope gets a sum over
  // its head's scores.
  auto g = RunBackwardOracle(spec, c, in, Randn(in.q, 23), {"slopes", "table"});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_GT(Max(g->buffers.at("slopes")), 0.0);
  EXPECT_GT(Max(g->buffers.at("table")), 0.0);
}

TEST(BackwardOracle, AReferenceSpecIsDifferentiatedThroughItsFunction) {
  // Plain attention written as a reference function and as (no) mods: the same gradients.
  const Spec reference = Load(
      "import torch\n"
      "def reference(q, k, v, scale: float):\n"
      "    g = q.size(1) // k.size(1)\n"
      "    s = q @ k.repeat_interleave(g, dim=1).transpose(-2, -1) * scale\n"
      "    return torch.softmax(s, dim=-1) @ v.repeat_interleave(g, dim=1)\n");
  const Spec mods = Load("def score_mod(score, b, h, q_idx, kv_idx):\n    return score\n");
  const auto c = Config(4, 2, 19, 23);
  const AttentionInputs in = Inputs64(mods, c, 61);
  const torch::Tensor dout = Randn(in.q, 62);
  auto got = RunBackwardOracle(reference, c, in, dout, {});
  auto want = RunBackwardOracle(mods, c, in, dout, {});
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_LT(Max(got->dq - want->dq), 1e-12);
  EXPECT_LT(Max(got->dk - want->dk), 1e-12);
  EXPECT_LT(Max(got->dv - want->dv), 1e-12);
  EXPECT_GT(Max(got->dk), 0.0);
}

TEST(BackwardOracle, RefusesWhatHasNoGradient) {
  const Spec spec = Load(
      "def mask_mod(b, h, q_idx, kv_idx, doc):\n"
      "    return doc[q_idx] == doc[kv_idx]\n");
  const auto c = Config(2, 2, 16, 16);
  const AttentionInputs in = Inputs64(spec, c, 31);
  const torch::Tensor dout = Randn(in.q, 32);
  auto integer = RunBackwardOracle(spec, c, in, dout, {"doc"});
  EXPECT_EQ(integer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(integer.status().message()),
              ::testing::HasSubstr("captured tensor `doc` is Int: only floating tensors"));
  auto unknown = RunBackwardOracle(spec, c, in, dout, {"bias"});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unknown.status().message()),
              ::testing::HasSubstr("no captured tensor named `bias`"));
  EXPECT_THAT(std::string(unknown.status().message()), ::testing::HasSubstr("captures doc"));
  auto shape = RunBackwardOracle(spec, c, in, dout.index({Slice(), Slice(), Slice(0, 8)}), {});
  EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(shape.status().message()), ::testing::HasSubstr("grad_o has shape"));
}

// Every example: its gradients agree with central differences at a ragged GQA shape.
class EveryExampleBackward : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryExampleBackward, AgreesWithCentralDifferences) {
  const Spec spec = testing::LoadSpecFor(testing::ExampleSpecPath(GetParam()));
  const auto c = Config(4, 2, 33, 47);
  ExpectDirectionalDerivativesMatch(spec, c, Inputs64(spec, c, 41), 42);
}

INSTANTIATE_TEST_SUITE_P(
    Examples, EveryExampleBackward,
    ::testing::Values("full.py", "causal.py", "sliding_window.py", "global_sliding_window.py",
                      "prefix_lm.py", "block_causal.py", "causal_document.py",
                      "share_question.py", "relative_position.py", "alibi.py", "softcap.py",
                      "alibi_window_softcap.py"),
    [](const ::testing::TestParamInfo<std::string>& info) {
      return info.param.substr(0, info.param.rfind('.'));
    });

// Every generality spec, with its suite buffers and params, its floating captured tensors
// differentiated too.
class GeneralityBackward : public ::testing::TestWithParam<cubridge::testing::GeneralitySpec> {};

TEST_P(GeneralityBackward, AgreesWithCentralDifferences) {
  const auto& g = GetParam();
  // The captured tensors a spec rounds to float32 itself (see above).
  const std::map<std::string, std::set<std::string>> rounded = {
      {"clip_logit_scale", {"log_scale"}}};
  Spec spec = testing::LoadSpecFor(g.path, g.buffers);
  ASSERT_TRUE(OverrideParams(spec, g.params).ok());
  const auto c = Config(4, 2, 33, 47);
  const auto it = rounded.find(g.name);
  ExpectDirectionalDerivativesMatch(spec, c, Inputs64(spec, c, 51, g.buffers), 52,
                                    it == rounded.end() ? std::set<std::string>{} : it->second);
}

INSTANTIATE_TEST_SUITE_P(Suite, GeneralityBackward,
                         ::testing::ValuesIn(cubridge::testing::GeneralitySuite()),
                         cubridge::testing::GeneralityName);

}  // namespace
}  // namespace cubridge::spec
