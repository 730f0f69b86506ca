// The backward statements in the interpreter: the experts' base backward programs and hand-written
// variants of them against the float64 autograd of the spec (RunBackwardOracle), at ragged shapes
// (Sq != Skv, tails in both directions, GQA, fully masked rows), and broken programs that the
// comparison must reject.
#include <fstream>
#include <sstream>
#include <string>

#include <torch/types.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/interp/interp_test_util.h"

namespace cubridge::interp::testing {
namespace {

using cuir::DType;
using ::testing::HasSubstr;

std::string BaseBwdText(const std::string& expert = "fa2_sm80") {
  const std::string path =
      std::string(CUBRIDGE_SOURCE_ROOT) + "/cuir/experts/" + expert + "/base_bwd.cuir";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Small tiles so that ragged shapes have several blocks and tails; GQA's head mapping.
std::string Tiled(std::string text, int block_m, int block_n) {
  return absl::StrReplaceAll(
      text, {{"param BLOCK_M: int = 64", "param BLOCK_M: int = " + std::to_string(block_m)},
             {"param BLOCK_N: int = 128", "param BLOCK_N: int = " + std::to_string(block_n)},
             {"let kv_h: int = h\n", "let kv_h: int = h // (heads_q // heads_kv)\n"}});
}

// Inserts `lines` (each without indentation) after the line holding `anchor`.
std::string After(const std::string& text, const std::string& anchor, const std::string& lines,
                  const std::string& indent = "    ") {
  const size_t at = text.find(anchor);
  EXPECT_NE(at, std::string::npos) << anchor;
  if (at == std::string::npos) return text;
  const size_t eol = text.find('\n', at);
  std::string block;
  for (absl::string_view line : absl::StrSplit(lines, '\n')) {
    if (!line.empty()) absl::StrAppend(&block, indent, line, "\n");
  }
  return text.substr(0, eol + 1) + block + text.substr(eol + 1);
}

void ExpectMatches(const absl::StatusOr<BackwardRun>& run, DType dtype) {
  ASSERT_TRUE(run.ok()) << run.status();
  for (const auto& [name, error] : run->error) {
    EXPECT_LE(error, GradTolerance(dtype)) << name;
  }
}

struct Shape {
  DType dtype;
  int64_t head_dim, seqlen_q, seqlen_kv, heads_q, heads_kv, batch;
};

class BaseBackward : public ::testing::TestWithParam<std::tuple<std::string, Shape>> {};

TEST_P(BaseBackward, MatchesTheOracleOfFullAttention) {
  const auto& [expert, s] = GetParam();
  const auto config =
      Config(s.dtype, s.head_dim, s.seqlen_q, s.seqlen_kv, s.heads_q, s.heads_kv, s.batch);
  auto run = RunBackwardAgainstOracle(Tiled(BaseBwdText(expert), 32, 16), kFullSpec, config);
  ExpectMatches(run, s.dtype);
  if (run.ok()) {
    // Every (KV tile, q head, batch) program walks every query block.
    const int64_t programs = (s.seqlen_kv + 15) / 16 * s.heads_q * s.batch;
    EXPECT_EQ(run->stats.programs, programs);
    EXPECT_EQ(run->stats.blocks_visited, programs * ((s.seqlen_q + 31) / 32));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BaseBackward,
    ::testing::Combine(::testing::Values("fa2_sm80", "fa3_sm90"),
                       ::testing::Values(Shape{DType::kBF16, 64, 70, 45, 2, 2, 1},
                                         Shape{DType::kFP16, 64, 33, 100, 4, 2, 2},
                                         Shape{DType::kBF16, 128, 50, 50, 3, 1, 1})));

constexpr char kCausalOffsetSpec[] =
    "def mask_mod(b, h, q_idx, kv_idx):\n"
    "    return q_idx >= kv_idx + 40\n";

// Rows q_idx < 40 keep nothing: their gradients are 0, not NaN.
TEST(Backward, MaskWithFullyMaskedRows) {
  const std::string text =
      After(Tiled(BaseBwdText(), 32, 16), "S = qk Q, K", "mask S = q_idx >= kv_idx + 40");
  const auto config = Config(DType::kBF16, 64, 90, 61, 2, 1, 1);
  auto run = RunBackwardAgainstOracle(text, kCausalOffsetSpec, config);
  ExpectMatches(run, DType::kBF16);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->got.dq.narrow(2, 0, 40).abs().max().item<double>(), 0.0);
}

constexpr char kSoftcapSpec[] =
    "import torch\n"
    "def score_mod(score, b, h, q_idx, kv_idx, cap: float = 2.0):\n"
    "    return cap * torch.tanh(score / cap)\n";

std::string Softcap(bool with_grad) {
  std::string text = After(Tiled(BaseBwdText(), 32, 16), "param WARPS", "const cap: float = 2.0",
                           "  ");
  text = After(text, "S = qk Q, K", "score_mod S = cap * tanh(score / cap)");
  if (with_grad) {
    text = After(text, "DS = softmax.grad",
                 "score_grad DS = 1.0 - tanh(score / cap) * tanh(score / cap)");
  }
  return text;
}

TEST(Backward, ScoreGradCarriesTheChainRule) {
  const auto config = Config(DType::kFP16, 64, 47, 58, 2, 2, 1);
  ExpectMatches(RunBackwardAgainstOracle(Softcap(true), kSoftcapSpec, config), DType::kFP16);
  // Without the derivative dK and dQ are off; dV (which never sees dS) is still right.
  auto wrong = RunBackwardAgainstOracle(Softcap(false), kSoftcapSpec, config);
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  EXPECT_GT(wrong->error["dq"], 0.1);
  EXPECT_GT(wrong->error["dk"], 0.1);
  EXPECT_LE(wrong->error["dv"], GradTolerance(DType::kFP16));
}

constexpr char kSlopesSpec[] =
    "import torch\n"
    "def mask_mod(b, h, q_idx, kv_idx):\n"
    "    return q_idx >= kv_idx\n"
    "def score_mod(score, b, h, q_idx, kv_idx, slopes):\n"
    "    return score + slopes[h] * (kv_idx - q_idx)\n";

std::string Slopes(const std::string& partial) {
  std::string text =
      After(Tiled(BaseBwdText(), 16, 16), "param WARPS", "buffer slopes: float32[heads_q]", "  ");
  text = After(text, "S = qk Q, K",
               "score_mod S = score + slopes[h] * float(kv_idx - q_idx)\nmask S = q_idx >= kv_idx");
  return After(text, "DS = softmax.grad", "buffer_grad slopes[h] += DS * " + partial);
}

TEST(Backward, LearnableSlopesGetTheirGradient) {
  const auto config = Config(DType::kBF16, 64, 41, 41, 4, 2, 2);
  const std::map<std::string, spec::BufferSource> buffers = {
      {"slopes", spec::BufferSource("random:float32")}};
  auto run = RunBackwardAgainstOracle(Slopes("float(kv_idx - q_idx)"), kSlopesSpec, config, buffers,
                                      {"slopes"});
  ExpectMatches(run, DType::kBF16);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_GT(run->want.buffers.at("slopes").abs().max().item<double>(), 0.0);
  // A wrong partial gives a wrong gradient.
  auto wrong = RunBackwardAgainstOracle(Slopes("float(q_idx - kv_idx)"), kSlopesSpec, config,
                                        buffers, {"slopes"});
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  EXPECT_GT(wrong->error["slopes"], 1.0);
}

TEST(Backward, BrokenProgramsAreCaught) {
  const auto config = Config(DType::kBF16, 64, 70, 45, 2, 2, 1);
  const std::string base = Tiled(BaseBwdText(), 32, 16);
  // No dQ at all.
  auto no_dq = RunBackwardAgainstOracle(
      absl::StrReplaceAll(base, {{"    dq DS, K scale softmax_scale\n", ""}}), kFullSpec, config);
  ASSERT_TRUE(no_dq.ok()) << no_dq.status();
  EXPECT_GT(no_dq->error["dq"], 0.5);
  // The loop skips the last query block.
  auto short_walk = RunBackwardAgainstOracle(
      absl::StrReplaceAll(base, {{"[0, cdiv(seqlen_q, BLOCK_M))", "[0, seqlen_q // BLOCK_M)"}}),
      kFullSpec, config);
  ASSERT_TRUE(short_walk.ok()) << short_walk.status();
  EXPECT_GT(short_walk->error["dk"], 0.05);
}

TEST(Backward, EntriesRefuseTheOtherDirection) {
  const auto config = Config(DType::kBF16, 64, 8, 8);
  const spec::AttentionInputs in = RandomInputs(config, 1);
  auto bwd = cuir::ParseProgram(BaseBwdText());
  ASSERT_TRUE(bwd.ok());
  EXPECT_THAT(Interpret(*bwd, config, in).status().message(),
              HasSubstr("run it with InterpretBackward"));
  auto fwd = cuir::ParseProgram(BaseProgramText());
  ASSERT_TRUE(fwd.ok());
  const spec::BackwardInputs b{in.q, torch::zeros({1, 2, 8}), in.q};
  EXPECT_THAT(InterpretBackward(*fwd, config, in, b).status().message(),
              HasSubstr("this is a forward program"));
  const spec::BackwardInputs bad_lse{in.q, torch::zeros({1, 2}), in.q};
  EXPECT_THAT(InterpretBackward(*bwd, config, in, bad_lse).status().message(),
              HasSubstr("interpreter input lse has shape [1, 2]"));
}

}  // namespace
}  // namespace cubridge::interp::testing
