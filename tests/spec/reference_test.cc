// Specs that give `reference(q, k, v, scale, ...)`, the whole attention in PyTorch: loading,
// signature and result errors with their positions, the spec hash over the compiled code and
// the parameter values, and the oracle (O and LSE from the function; LSE undefined when it
// returns O only) against attention with a sink computed here by hand.
#include <cmath>
#include <limits>

#include <torch/types.h>
#include <torch/utils.h>

#include "cuir/spec/oracle.h"
#include "spec_test_util.h"

namespace cubridge::spec {
namespace {

using testing::ExpectError;
using testing::Config;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// Softmax with a sink logit per row (GQA: k and v heads repeated), returning (O, LSE).
constexpr char kSink[] =
    "import torch\n"
    "\n"
    "def reference(q, k, v, scale: float, sink: float = 0.5):\n"
    "    group = q.size(1) // k.size(1)\n"
    "    k = k.repeat_interleave(group, dim=1)\n"
    "    v = v.repeat_interleave(group, dim=1)\n"
    "    s = torch.matmul(q, k.transpose(-2, -1)) * scale\n"
    "    col = torch.full_like(s.narrow(-1, 0, 1), sink)\n"
    "    lse = torch.logsumexp(torch.cat([s, col], dim=-1), dim=-1)\n"
    "    return torch.matmul(torch.exp(s - lse.unsqueeze(-1)), v), lse\n";

// Plain attention returning O only.
constexpr char kOnlyO[] =
    "def reference(q, k, v, scale: float):\n"
    "    g = q.size(1) // k.size(1)\n"
    "    s = q @ k.repeat_interleave(g, dim=1).transpose(-2, -1) * scale\n"
    "    return torch.softmax(s, dim=-1) @ v.repeat_interleave(g, dim=1)\n";

Spec Load(const std::string& source, const std::string& path = "ref.py") {
  auto spec = LoadSpecSource(source, path);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *std::move(spec) : Spec{};
}

// ---- loading ----------------------------------------------------------------------------------

TEST(Reference, LoadsWithItsParamsAndNoMods) {
  const Spec spec = Load(kSink);
  EXPECT_TRUE(spec.has_reference);
  EXPECT_EQ(spec.reference_loc.ToString(), "ref.py:3:5");
  EXPECT_EQ(spec.mask, nullptr);
  EXPECT_EQ(spec.score, nullptr);
  EXPECT_TRUE(spec.buffers.empty());
  ASSERT_EQ(spec.params.size(), 1u);
  EXPECT_EQ(spec.params[0].name, "sink");
  EXPECT_EQ(spec.params[0].type, cuir::Type::kFloat);
  EXPECT_EQ(std::get<double>(spec.params[0].value), 0.5);
  EXPECT_EQ(spec.params[0].loc.ToString(), "ref.py:3:38");
  EXPECT_THAT(spec.reference_code, HasSubstr("aten::logsumexp"));
  // Helpers are inlined into the code; source positions are left out.
  EXPECT_THAT(spec.reference_code, Not(HasSubstr("ref.py")));
}

TEST(Reference, ControlFlowIsAllowedSinceNothingIsTranslated) {
  const Spec spec = Load(
      "def reference(q, k, v, scale: float, causal: bool = False):\n"
      "    g = q.size(1) // k.size(1)\n"
      "    s = q @ k.repeat_interleave(g, dim=1).transpose(-2, -1) * scale\n"
      "    if causal:\n"
      "        s = s.masked_fill(torch.ones_like(s).triu(1) > 0, -math.inf)\n"
      "    return torch.softmax(s, dim=-1) @ v.repeat_interleave(g, dim=1)\n");
  EXPECT_TRUE(spec.has_reference);
  ASSERT_EQ(spec.params.size(), 1u);
  EXPECT_EQ(spec.params[0].type, cuir::Type::kBool);
}

TEST(Reference, ExampleFileLoads) {
  auto spec = LoadSpecFile(std::string(CUBRIDGE_SOURCE_ROOT) + "/examples/llm/sink_attention.py");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->has_reference);
  ASSERT_NE(spec->FindParam("sink"), nullptr);
  EXPECT_EQ(std::get<double>(spec->FindParam("sink")->value), 0.5);
}

// ---- errors -----------------------------------------------------------------------------------

TEST(ReferenceErrors, ReferenceBesideAModIsRejected) {
  ExpectError(std::string(kOnlyO) + "\ndef mask_mod(b, h, q_idx, kv_idx):\n"
                                    "    return q_idx >= kv_idx\n",
              "6:5", "give either mask_mod/score_mod or reference, not both");
  ExpectError("def score_mod(score, b, h, q_idx, kv_idx):\n    return score\n\n" +
                  std::string(kOnlyO),
              "1:5", "reference (line 4) computes the whole attention, so fold score_mod");
}

TEST(ReferenceErrors, TooFewLeadingParameters) {
  ExpectError("def reference(q, k, v):\n    return q\n", "1:5",
              "reference must take (q, k, v, scale: float) first; found 3 parameters (q, k, v)");
  ExpectError("def reference(q, k, v, sink: float = 0.5):\n    return q\n", "1:5",
              "found 3 parameters (q, k, v): write def reference(q, k, v, scale: float");
}

TEST(ReferenceErrors, ScaleMustBeAFloat) {
  ExpectError("def reference(q, k, v, scale):\n    return q\n", "1:24",
              "`scale` receives the softmax scale, a Python float: annotate it `scale: float` "
              "(found Tensor)");
  ExpectError("def reference(q, k, v, s: int):\n    return q\n", "1:24", "annotate it `s: float`");
}

TEST(ReferenceErrors, TensorsMustStayTensors) {
  ExpectError("def reference(q, k: int, v, scale: float):\n    return q\n", "1:18",
              "`k` receives the k tensor [batch, heads, seqlen, head_dim]: remove its `int` "
              "annotation");
}

TEST(ReferenceErrors, BuffersAreRejected) {
  ExpectError("def reference(q, k, v, scale: float, doc):\n    return q\n", "1:38",
              "tensor parameter `doc`: reference does not take buffers");
}

TEST(ReferenceErrors, ScalarParameterWithoutDefault) {
  ExpectError("def reference(q, k, v, scale: float, sink: float):\n    return q\n", "1:38",
              "parameter `sink: float` has no default");
}

TEST(ReferenceErrors, ReservedParameterName) {
  ExpectError("def reference(q, k, v, scale: float, heads_q: int = 2):\n    return q\n", "1:38",
              "parameter name `heads_q` is reserved");
}

TEST(ReferenceErrors, WrongOutputShape) {
  ExpectError("def reference(q, k, v, scale: float):\n    return q.sum(-1)\n", "1:5",
              "reference returned O of shape [2, 4, 5], expected [2, 4, 5, 8]");
}

TEST(ReferenceErrors, WrongLseShape) {
  ExpectError("def reference(q, k, v, scale: float):\n    return q, q\n", "1:5",
              "reference returned LSE of shape [2, 4, 5, 8], expected [2, 4, 5]");
}

TEST(ReferenceErrors, WrongResultKind) {
  ExpectError("def reference(q, k, v, scale: float):\n    return q, q, q\n", "1:5",
              "reference returned (Tensor, Tensor, Tensor); return O [2, 4, 5, 8]");
  ExpectError("def reference(q, k, v, scale: float):\n    return scale\n", "1:5",
              "reference returned float");
}

TEST(ReferenceErrors, IntegerOutput) {
  ExpectError("def reference(q, k, v, scale: float):\n    return q.long()\n", "1:5",
              "reference returned O of dtype Long");
}

TEST(ReferenceErrors, MissingGqaRepeatIsARuntimeErrorWithItsLineAndAHint) {
  ExpectError("def reference(q, k, v, scale: float):\n"
              "    s = q @ k.transpose(-2, -1) * scale\n"
              "    return torch.softmax(s, dim=-1) @ v\n",
              "2:9", "with GQA the reference repeats k and v itself, e.g. k.repeat_interleave(");
}

TEST(ReferenceErrors, DefinedTwice) {
  ExpectError(std::string(kOnlyO) + std::string(kOnlyO), "5:5",
              "reference is defined twice (first at line 1)");
}

// ---- spec hash --------------------------------------------------------------------------------

std::string Hash(const Spec& spec) {
  return SpecHash(spec, Config(4, 2, 64, 64), "rules-1");
}

TEST(ReferenceHash, SameBodySameHashWhateverTheFileAndComments) {
  std::string restyled = kSink;
  restyled.replace(restyled.find("import torch\n"), 13, "# a comment\n");
  restyled.replace(restyled.find("    group ="), 0, "\n    # why: GQA\n");
  EXPECT_EQ(Hash(Load(kSink, "a.py")), Hash(Load(restyled, "elsewhere/b.py")));
}

TEST(ReferenceHash, DifferentBodyDifferentHash) {
  std::string other = kSink;
  other.replace(other.find("* scale\n"), 8, "* scale * 2.0\n");
  EXPECT_NE(Hash(Load(kSink)), Hash(Load(other)));
  EXPECT_NE(Hash(Load(kSink)), Hash(Load(kOnlyO)));
}

TEST(ReferenceHash, ParamValuesCount) {
  Spec spec = Load(kSink);
  const std::string before = Hash(spec);
  ASSERT_TRUE(OverrideParams(spec, {"sink=0.5"}).ok());
  EXPECT_EQ(Hash(spec), before);
  ASSERT_TRUE(OverrideParams(spec, {"sink=1.5"}).ok());
  EXPECT_NE(Hash(spec), before);
  EXPECT_THAT(CanonicalForm(spec, Config(4, 2, 64, 64), "rules-1"), HasSubstr("\nparam sink = 1.5\n"));

  std::string other_default = kSink;
  other_default.replace(other_default.find("= 0.5"), 5, "= 1.5");
  EXPECT_EQ(Hash(spec), Hash(Load(other_default)));

  const auto bad = OverrideParams(spec, {"sink=yes"});
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
}

TEST(ReferenceHash, ConfigAndRulesetCount) {
  const Spec spec = Load(kSink);
  const std::string form = CanonicalForm(spec, Config(4, 2, 64, 64), "rules-1");
  EXPECT_THAT(form, StartsWith("cubridge-spec 1\nruleset rules-1\nhead_dim 64\n"));
  EXPECT_THAT(form, HasSubstr("\nreference\n  graph("));
  EXPECT_NE(Hash(spec), SpecHash(spec, Config(8, 2, 64, 64), "rules-1"));
  EXPECT_NE(Hash(spec), SpecHash(spec, Config(4, 2, 64, 64), "rules-2"));
  // Batch and sequence lengths are run-time arguments.
  EXPECT_EQ(Hash(spec), SpecHash(spec, Config(4, 2, 300, 7), "rules-1"));
}

// ---- oracle -----------------------------------------------------------------------------------

AttentionInputs RandomInputs(const cuir::AttentionConfig& c, uint64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({c.batch, c.heads_q, c.seqlen_q, c.head_dim}).to(torch::kBFloat16),
          torch::randn({c.batch, c.heads_kv, c.seqlen_kv, c.head_dim}).to(torch::kBFloat16),
          torch::randn({c.batch, c.heads_kv, c.seqlen_kv, c.head_dim}).to(torch::kBFloat16),
          {}};
}

// Per (batch, head) in float64 with explicit sums: p_j = exp(s_j - m) / (sum_j exp(s_j - m) +
// exp(sink - m)) with m the max over the row and the sink.
AttentionOutputs SinkByHand(const cuir::AttentionConfig& c, const AttentionInputs& in,
                            double sink) {
  AttentionOutputs out{torch::zeros({c.batch, c.heads_q, c.seqlen_q, c.head_dim}, torch::kDouble),
                       torch::zeros({c.batch, c.heads_q, c.seqlen_q}, torch::kDouble)};
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads_q; ++h) {
      const int64_t kvh = h / (c.heads_q / c.heads_kv);
      const auto s = in.q[b][h].to(torch::kDouble).matmul(in.k[b][kvh].to(torch::kDouble).t()) *
                     c.scale();
      const auto m = torch::clamp_min(std::get<0>(s.max(1)), sink);
      const auto e = torch::exp(s - m.unsqueeze(1));
      const auto l = e.sum(1) + torch::exp(sink - m);
      out.o[b][h] = (e / l.unsqueeze(1)).matmul(in.v[b][kvh].to(torch::kDouble));
      out.lse[b][h] = m + torch::log(l);
    }
  }
  return out;
}

TEST(ReferenceOracle, SinkMatchesTheHandComputation) {
  Spec spec = Load(kSink);
  ASSERT_TRUE(OverrideParams(spec, {"sink=1.25"}).ok());
  const auto c = Config(4, 2, 19, 23);
  const AttentionInputs in = RandomInputs(c, 3);
  auto got = RunOracle(spec, c, in);
  ASSERT_TRUE(got.ok()) << got.status();
  const AttentionOutputs want = SinkByHand(c, in, 1.25);
  EXPECT_EQ(got->o.scalar_type(), torch::kFloat64);
  ASSERT_TRUE(got->lse.defined());
  EXPECT_EQ(got->lse.scalar_type(), torch::kFloat64);
  EXPECT_TRUE(torch::allclose(got->o, want.o, 1e-10, 1e-12))
      << (got->o - want.o).abs().max().item<double>();
  EXPECT_TRUE(torch::allclose(got->lse, want.lse, 1e-10, 1e-12));
  // The sink took mass: O differs from plain attention's.
  auto plain = RunOracle(Load(kOnlyO), c, in);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_GT((plain->o - got->o).abs().max().item<double>(), 1e-3);
}

TEST(ReferenceOracle, OutputOnlyLeavesLseUndefined) {
  const Spec spec = Load(kOnlyO);
  const auto c = Config(2, 2, 9, 12);
  const AttentionInputs in = RandomInputs(c, 4);
  auto got = RunOracle(spec, c, in);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->lse.defined());
  // It is plain attention: the same as a mask-free mod spec's oracle.
  auto full = RunOracle(Load("def score_mod(score, b, h, q_idx, kv_idx):\n    return score\n"), c,
                        in);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_TRUE(torch::allclose(got->o, full->o, 1e-10, 1e-12));
}

TEST(ReferenceOracle, RunsInTheRequestedDtype) {
  const Spec spec = Load(kSink);
  const auto c = Config(4, 4, 8, 8);
  auto got = RunOracle(spec, c, RandomInputs(c, 5), {torch::kCPU, torch::kFloat32});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->o.scalar_type(), torch::kFloat32);
  EXPECT_EQ(got->lse.scalar_type(), torch::kFloat32);
}

TEST(ReferenceOracle, DenseMaskIsAllTrue) {
  const Spec spec = Load(kSink);
  const auto c = Config(4, 2, 6, 10);
  auto mask = DenseMask(spec, c, RandomInputs(c, 6));
  ASSERT_TRUE(mask.ok()) << mask.status();
  EXPECT_EQ(mask->sizes().vec(), (std::vector<int64_t>{1, 1, 6, 10}));
  EXPECT_TRUE(torch::all(*mask).item<bool>());
}

TEST(ReferenceOracle, WrongShapeForTheJobIsAClearError) {
  // Fine on the probe's shapes (head dim 8), wrong for the job's: the oracle checks every call.
  const Spec spec = Load("def reference(q, k, v, scale: float):\n"
                         "    return q.narrow(-1, 0, 8)\n");
  const auto c = Config(2, 2, 4, 4);
  auto got = RunOracle(spec, c, RandomInputs(c, 7));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(got.status().message()),
              HasSubstr("ref.py:1:5: reference returned O of shape [2, 2, 4, 8], expected "
                        "[2, 2, 4, 64]"));
}

}  // namespace
}  // namespace cubridge::spec
