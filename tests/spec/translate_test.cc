// The translation is checked against TorchScript itself: at many random points, the CuIR
// expression (evaluated by cuir::EvalScalar) and the compiled function (run on 0-d tensors) must
// agree. Each spec below exercises a group of the supported operations.
#include <torch/csrc/jit/api/compilation_unit.h>
#include <torch/types.h>

#include <random>

#include "absl/strings/str_join.h"
#include "cuir/ir/program.h"
#include "cuir/spec/internal.h"
#include "spec_test_util.h"

namespace cubridge::spec {
namespace {

constexpr int64_t kBufferLength = 80;  // > the largest q_idx / kv_idx + 1 used below

const char* kArithmetic = R"(
import torch

def score_mod(score, b, h, q_idx, kv_idx, c: float = 1.5, k: int = 3):
    x = score * c + (q_idx - kv_idx) / (k + 1) - h * 2 + b - 0.25
    y = torch.exp(score / 8) + torch.exp2(-score.abs()) + torch.log(score.abs() + 1)
    y = y + torch.log2(q_idx + 1.0) + 2.0 / (q_idx + 1) + 3 - kv_idx
    z = torch.sqrt(torch.abs(score)) + torch.tanh(score) + torch.sigmoid(-score) + (-score) ** 2
    w = q_idx // (kv_idx + 1) + q_idx % (k + 2) + torch.floor_divide(q_idx - 100, k)
    w = w + torch.remainder(kv_idx - 50, 7) + torch.div(q_idx - kv_idx, 4, rounding_mode="floor")
    w = w + torch.div(q_idx - kv_idx, 3, rounding_mode="trunc") + (kv_idx - 40) % -6
    return x + y + z + w + torch.add(score, h) * torch.sub(q_idx, 1) + torch.mul(b, k)
)";

// torch's .float() rounds to float32, while CuIR's float(x) is "the float type" (fp32 in kernels,
// float64 here); so .float() is applied only to values float32 holds exactly.
const char* kMinMaxWhereCasts = R"(
import math
import torch

def score_mod(score, b, h, q_idx, kv_idx, lo: float = -1.0, hi: float = 2.0):
    a = torch.minimum(score, q_idx * 0.1) + torch.maximum(score, kv_idx * 0.05)
    a = a + torch.clamp(score, lo, hi) + score.clamp(min=0.0) + torch.clamp(q_idx, max=10)
    c = torch.where(q_idx > kv_idx, score, score * 0.5) + torch.where(score > 0, score, 0.0)
    d = q_idx.float() * 2 + score.to(torch.int64) + (q_idx > 4).int() + (kv_idx < 9).float()
    d = d + torch.full_like(score, 2.5) + torch.ones_like(q_idx) + torch.zeros_like(score)
    e = torch.pow(q_idx, 2) + score.double() * q_idx.float() + torch.floor(score) + torch.ceil(score)
    f = torch.relu(score) + torch.square(score) + torch.rsqrt(score.abs() + 1) + math.pi
    return a + c + d + e + f
)";

const char* kMasks = R"(
import torch

def mask_mod(b, h, q_idx, kv_idx, doc, other, window: int = 16):
    m = (q_idx >= kv_idx) & (q_idx - kv_idx <= window) | (doc[kv_idx] == 0)
    n = torch.logical_and(doc[q_idx] == doc[kv_idx], ~(kv_idx < 3)) ^ (other[q_idx] > 1)
    o = torch.logical_or(q_idx == 1, torch.logical_not(kv_idx != 2))
    o = o & torch.bitwise_and(q_idx > 1, kv_idx > 2) | torch.bitwise_or(q_idx < 2, h == 1)
    p = (other[doc[q_idx]] >= 1) != (doc[q_idx + 1] == doc[kv_idx])
    r = (q_idx > 30) == (kv_idx > 30)
    return m | n & o | (3 < q_idx) & (q_idx != kv_idx) | p & r | torch.logical_xor(b == 1, h > 2)
)";

const char* kHelpers = R"(
import torch

def mask_mod(b, h, q_idx, kv_idx):
    return is_causal(q_idx, kv_idx) | near(q_idx, kv_idx, 5)

def is_causal(q, k):
    return q >= k

def near(q, k, d: int):
    return torch.abs(q - k) <= d

def bias(h, q_idx, kv_idx, heads: int):
    return (kv_idx - q_idx) * torch.exp2(-8 * (h + 1) / heads)

def score_mod(score, b, h, q_idx, kv_idx, heads: int = 8):
    return score + bias(h, q_idx, kv_idx, heads)
)";

// One value of TorchScript's result and of the translation must agree.
void ExpectSame(const torch::Tensor& want, const cuir::Value& got, const std::string& where) {
  if (want.scalar_type() == torch::kBool) {
    ASSERT_TRUE(std::holds_alternative<bool>(got)) << where;
    ASSERT_EQ(std::get<bool>(got), want.item<bool>()) << where;
    return;
  }
  ASSERT_TRUE(std::holds_alternative<double>(got)) << where << ": " << cuir::ValueToString(got);
  const double w = want.item<double>(), g = std::get<double>(got);
  if (std::isnan(w)) {
    ASSERT_TRUE(std::isnan(g)) << where << ": got " << g;
  } else {
    ASSERT_NEAR(g, w, 1e-9 * (1 + std::fabs(w))) << where;
  }
}

void CheckAgainstTorchScript(const char* source, int points) {
  auto spec = LoadSpecSource(source, "ops.py");
  ASSERT_TRUE(spec.ok()) << spec.status();
  internal::DefaultDoubleGuard float64;  // as in the oracle: index math promoted to float64
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal(0.0, 3.0);
  std::map<std::string, torch::Tensor> buffer_tensors;
  cuir::ScalarEnv base;
  for (const SpecBuffer& b : spec->buffers) {
    std::vector<int64_t> values(kBufferLength);
    for (auto& v : values) v = static_cast<int64_t>(rng() % 3);
    base.buffers[b.name] = cuir::BufferData::Ints(values);
    buffer_tensors[b.name] = torch::tensor(values, torch::kInt64);
  }
  for (bool is_score : {false, true}) {
    const ExprPtr& expr = is_score ? spec->score : spec->mask;
    if (expr == nullptr) continue;
    torch::jit::Function* fn = spec->compiled->find_function(is_score ? "score_mod" : "mask_mod");
    ASSERT_NE(fn, nullptr);
    for (int i = 0; i < points; ++i) {
      const int64_t b = rng() % 3, h = rng() % 8, q = rng() % 64, kv = rng() % 64;
      const double score = normal(rng);
      std::vector<torch::jit::IValue> args;
      if (is_score) args.emplace_back(torch::scalar_tensor(score, torch::kFloat64));
      for (int64_t v : {b, h, q, kv}) args.emplace_back(torch::scalar_tensor(v, torch::kInt64));
      for (size_t a = args.size(); a < fn->getSchema().arguments().size(); ++a) {
        const std::string& name = fn->getSchema().arguments()[a].name();
        if (const SpecParam* p = spec->FindParam(name)) {
          std::visit([&](auto v) { args.emplace_back(v); }, p->value);
        } else {
          args.emplace_back(buffer_tensors.at(name));
        }
      }
      const torch::Tensor want = (*fn)(args).toTensor();
      cuir::ScalarEnv env = testing::PointEnv(*spec, b, h, q, kv, score);
      env.buffers = base.buffers;
      auto got = cuir::EvalScalar(expr, env);
      ASSERT_TRUE(got.ok()) << got.status();
      ExpectSame(want, *got,
                 absl::StrCat(is_score ? "score_mod" : "mask_mod", " at b=", b, " h=", h, " q=", q,
                              " kv=", kv, " score=", score, ": ", cuir::PrintExpr(expr)));
    }
  }
}

TEST(Translate, ArithmeticMatchesTorchScript) { CheckAgainstTorchScript(kArithmetic, 400); }
TEST(Translate, MinMaxWhereCastsMatchTorchScript) { CheckAgainstTorchScript(kMinMaxWhereCasts, 400); }
TEST(Translate, MaskLogicAndBuffersMatchTorchScript) { CheckAgainstTorchScript(kMasks, 600); }
TEST(Translate, HelperFunctionsAreInlined) { CheckAgainstTorchScript(kHelpers, 300); }

ExprPtr Parse(const std::string& text) {
  auto e = cuir::ParseExpr(text);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *e : nullptr;
}

TEST(Translate, ArgumentNamesBecomeCanonical) {
  auto spec = LoadSpecSource(
      "def mask_mod(batch, head, q, k):\n    return (q >= k) & (head < 4) & (batch == 0)\n"
      "def score_mod(s, z, hh, i, j):\n    return s + i - j\n",
      "names.py");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(cuir::Equal(spec->mask, Parse("q_idx >= kv_idx && h < 4 && b == 0")))
      << cuir::PrintExpr(spec->mask);
  EXPECT_TRUE(cuir::Equal(spec->score, Parse("score + q_idx - kv_idx")))
      << cuir::PrintExpr(spec->score);
}

TEST(Translate, ParamsAndBuffersKeepTheirNamesAndTypes) {
  auto spec = LoadSpecSource(
      "def mask_mod(b, h, q_idx, kv_idx, ids, w=8, r=0.5, on=True):\n"
      "    return (q_idx - kv_idx <= w) & (ids[q_idx] == ids[kv_idx]) & (q_idx * r < 9)\n",
      "p.py");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->params.size(), 3u);
  EXPECT_EQ(spec->params[0].type, Type::kInt);
  EXPECT_EQ(std::get<int64_t>(spec->params[0].value), 8);
  EXPECT_EQ(spec->params[1].type, Type::kFloat);
  EXPECT_EQ(std::get<double>(spec->params[1].value), 0.5);
  EXPECT_EQ(spec->params[2].type, Type::kBool);
  EXPECT_TRUE(std::get<bool>(spec->params[2].value));
  EXPECT_EQ(spec->params[0].loc.ToString(), "p.py:1:40");
  ASSERT_EQ(spec->buffers.size(), 1u);
  EXPECT_EQ(spec->buffers[0].name, "ids");
  EXPECT_TRUE(cuir::Mentions(spec->mask, "w"));
  EXPECT_EQ(spec->mask_loc.line, 1);
  EXPECT_FALSE(spec->score);
}

TEST(Translate, BufferExtentsFollowTheIndexing) {
  auto spec = LoadSpecSource(
      "def mask_mod(b, h, q_idx, kv_idx, a, bq, bk, unused):\n"
      "    return (bq[q_idx] > 0) & (bk[kv_idx // 2] > 0) & (a[q_idx] == a[kv_idx])\n",
      "uses.py");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->buffers.size(), 4u);
  std::map<std::string, std::string> extents;
  for (const SpecBuffer& b : spec->buffers) {
    std::vector<std::string> dims;
    for (const auto& e : BufferExtents(*spec, b)) dims.push_back(e ? cuir::PrintExpr(e) : "?");
    extents[b.name] = absl::StrJoin(dims, ", ");
  }
  EXPECT_EQ(extents["a"], "max(seqlen_q, seqlen_kv)");
  EXPECT_EQ(extents["bq"], "seqlen_q");
  EXPECT_EQ(extents["bk"], "(seqlen_kv - 1) // 2 + 1");
  EXPECT_EQ(extents["unused"], "");
  EXPECT_EQ(spec->buffers[3].rank, -1);
}

TEST(Translate, MaskOnlyAndScoreOnlySpecsLeaveTheOtherNull) {
  auto mask_only = LoadSpecSource("def mask_mod(b, h, q_idx, kv_idx):\n    return q_idx > 0\n",
                                  "m.py");
  ASSERT_TRUE(mask_only.ok()) << mask_only.status();
  EXPECT_TRUE(mask_only->mask && !mask_only->score);
  auto score_only = LoadSpecSource(
      "def score_mod(score, b, h, q_idx, kv_idx):\n    return q_idx - kv_idx\n", "s.py");
  ASSERT_TRUE(score_only.ok()) << score_only.status();
  EXPECT_TRUE(!score_only->mask && score_only->score);
  // An int-valued score_mod is accepted and becomes a float expression.
  auto ty = cuir::TypeOf(score_only->score, cuir::TypeEnv{{{"q_idx", Type::kInt},
                                                           {"kv_idx", Type::kInt}}, {}});
  ASSERT_TRUE(ty.ok()) << ty.status();
  EXPECT_EQ(*ty, Type::kFloat);
}

TEST(Translate, ModuleDocstringsCommentsAndImportsAreAccepted) {
  auto spec = LoadSpecSource(
      "\"\"\"A docstring.\"\"\"\nimport torch\nfrom torch import (\n    Tensor,\n)\n"
      "# comment\n\ndef mask_mod(b, h, q_idx, kv_idx):  # trailing\n"
      "    \"\"\"Function docstring.\"\"\"\n    return q_idx >= kv_idx\n",
      "doc.py");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->mask_loc.line, 8);
}

TEST(Translate, PythonStyleDefaultsAreAccepted) {
  // No trailing newline, an int default for a float, unannotated and negative defaults.
  auto spec = LoadSpecSource(
      "def score_mod(score, b, h, q_idx, kv_idx, cap: float = 20, shift=-3, neg: float = -2):\n"
      "    return cap * torch.tanh(score / cap) + shift + neg",
      "defaults.py");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->params.size(), 3u);
  EXPECT_EQ(spec->params[0].type, Type::kFloat);
  EXPECT_EQ(std::get<double>(spec->params[0].value), 20.0);
  EXPECT_EQ(spec->params[1].type, Type::kInt);
  EXPECT_EQ(std::get<int64_t>(spec->params[1].value), -3);
  EXPECT_EQ(std::get<double>(spec->params[2].value), -2.0);
}

}  // namespace
}  // namespace cubridge::spec
