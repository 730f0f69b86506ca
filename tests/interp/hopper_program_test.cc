// The sm_90 expert's base program (cuir/experts/fa3_sm90/base.cuir): warp roles, a
// `longest_first` grid schedule and a 3-stage pipeline. None of them changes results: roles run
// as one thread of control, the pipeline depth is a performance knob, and the schedule only
// orders grid points that each write their own output rows.
#include <string>
#include <tuple>

#include <torch/types.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "cuir/spec/spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/interp/interp_test_util.h"

namespace cubridge::interp::testing {
namespace {

using ::testing::HasSubstr;

std::string Fa3Text() { return ExpertBaseText("fa3_sm90"); }

// Replaces the one occurrence of `from`; a missing anchor fails the test.
std::string Replace(const std::string& text, const std::string& from, const std::string& to) {
  EXPECT_NE(text.find(from), std::string::npos) << "anchor not found: " << from;
  EXPECT_EQ(text.find(from), text.rfind(from)) << "anchor not unique: " << from;
  return absl::StrReplaceAll(text, {{from, to}});
}

spec::AttentionInputs Inputs(const cuir::AttentionConfig& config, uint64_t seed = 11) {
  auto spec = spec::LoadSpecSource(kFullSpec, "full.py");
  EXPECT_TRUE(spec.ok()) << spec.status();
  auto inputs = spec::MakeInputs(*spec, config, {}, seed);
  EXPECT_TRUE(inputs.ok()) << inputs.status();
  return *std::move(inputs);
}

spec::AttentionOutputs Interp(const std::string& text, const cuir::AttentionConfig& config,
                           const spec::AttentionInputs& inputs, InterpStats* stats = nullptr) {
  auto out = Interpret(Parse(text), config, inputs, stats);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *std::move(out) : spec::AttentionOutputs{};
}

// Bit-for-bit equality (O in the input dtype, LSE in fp32; -inf LSE rows compare equal).
void ExpectSameBits(const spec::AttentionOutputs& a, const spec::AttentionOutputs& b) {
  ASSERT_TRUE(a.o.defined() && b.o.defined());
  EXPECT_TRUE(torch::equal(a.o, b.o)) << "O differs, max abs "
                                      << MaxErrors(a.o, b.o).max_abs;
  EXPECT_TRUE(torch::equal(a.lse, b.lse)) << "LSE differs, max abs "
                                          << MaxErrors(a.lse, b.lse).max_abs;
}

// Several query tiles (the schedule reverses them), heads and batch entries, ragged lengths.
const cuir::AttentionConfig kRagged =
    Config(cuir::DType::kBF16, 64, /*seqlen_q=*/300, /*seqlen_kv=*/333, /*heads_q=*/3,
           /*heads_kv=*/3, /*batch=*/2);

TEST(HopperProgram, ParsesWithRolesScheduleAndPipeline) {
  const cuir::Program p = Parse(Fa3Text());
  EXPECT_EQ(cuir::FindDecl(p, cuir::StmtKind::kGrid)->attr, "longest_first");
  EXPECT_NE(cuir::FindDecl(p, cuir::StmtKind::kRole, "producer"), nullptr);
  EXPECT_NE(cuir::FindDecl(p, cuir::StmtKind::kRole, "consumer"), nullptr);
  EXPECT_TRUE(cuir::Validate(p).ok()) << cuir::Validate(p);
}

// The interpreter's numerics depend on BLOCK_N: the online softmax rescales per KV block and P
// is rounded to the input dtype relative to the running row max, so the sm_90 program
// (BLOCK_N = 128) and the sm_80 program (BLOCK_N = 64) legitimately differ in the last bits.
// The base program is therefore held to the float64 oracle within the usual tolerance ...
using DtypeAndDim = std::tuple<cuir::DType, int64_t>;
class Fa3VsOracle : public ::testing::TestWithParam<DtypeAndDim> {};

TEST_P(Fa3VsOracle, MatchesOnRaggedShapes) {
  const auto [dtype, head_dim] = GetParam();
  for (int64_t sq : {300, 37, 128}) {
    for (int64_t skv : {333, 50, 256}) {
      const auto config = Config(dtype, head_dim, sq, skv, /*heads_q=*/2, /*heads_kv=*/2,
                                 /*batch=*/2);
      SCOPED_TRACE(config.ToString());
      auto run = RunAgainstOracle(Fa3Text(), kFullSpec, config);
      ASSERT_TRUE(run.ok()) << run.status();
      EXPECT_LE(run->o.max_abs, OTolerance(dtype));
      EXPECT_LE(run->lse.max_abs, kLseTolerance);
      // One program per (query tile, head, batch entry), each visiting every 128-row KV block.
      const int64_t programs = (sq + 127) / 128 * config.heads_q * config.batch;
      EXPECT_EQ(run->stats.programs, programs);
      EXPECT_EQ(run->stats.blocks_visited, programs * ((skv + 127) / 128));
      EXPECT_EQ(run->stats.blocks_masked, 0);
    }
  }
}

std::string ParamName(const ::testing::TestParamInfo<DtypeAndDim>& info) {
  const auto [dtype, d] = info.param;
  return absl::StrCat(cuir::DTypeName(dtype), "_d", d);
}

INSTANTIATE_TEST_SUITE_P(DtypesAndHeadDims, Fa3VsOracle,
                         ::testing::Combine(::testing::Values(cuir::DType::kBF16,
                                                             cuir::DType::kFP16),
                                            ::testing::Values(64, 128)),
                         ParamName);

// ... and, with the sm_80 tile sizes, it is the sm_80 program bit for bit: roles, the schedule,
// the pipeline depth and the expert name change nothing the interpreter computes. (A `split` on
// its loop would: the interpreter merges the halves' softmax states, which rounds differently;
// tests/interp/split_test.cc holds that to the unsplit loop, so it is dropped here.)
TEST(HopperProgram, WithTheSm80TileSizesItIsTheSm80ProgramBitForBit) {
  const std::string fa3_bn64 = absl::StrReplaceAll(
      Replace(Fa3Text(), "param BLOCK_N: int = 128", "param BLOCK_N: int = 64"),
      {{" split {", " {"}});
  for (const auto& config :
       {kRagged, Config(cuir::DType::kFP16, 128, 257, 300, 4, 4, 1)}) {
    SCOPED_TRACE(config.ToString());
    const spec::AttentionInputs inputs = Inputs(config);
    InterpStats fa3_stats, fa2_stats;
    const spec::AttentionOutputs fa3 = Interp(fa3_bn64, config, inputs, &fa3_stats);
    const spec::AttentionOutputs fa2 = Interp(BaseProgramText(), config, inputs, &fa2_stats);
    ExpectSameBits(fa3, fa2);
    EXPECT_EQ(fa3_stats.programs, fa2_stats.programs);
    EXPECT_EQ(fa3_stats.blocks_visited, fa2_stats.blocks_visited);
  }
}

TEST(HopperProgram, LongestFirstGivesTheSameBitsAsLinear) {
  const std::string longest_first = Fa3Text();
  const std::string linear = Replace(longest_first, " schedule longest_first", "");
  const std::string explicit_linear =
      Replace(longest_first, "schedule longest_first", "schedule linear");
  const spec::AttentionInputs inputs = Inputs(kRagged);
  const spec::AttentionOutputs want = Interp(linear, kRagged, inputs);
  ExpectSameBits(Interp(longest_first, kRagged, inputs), want);
  ExpectSameBits(Interp(explicit_linear, kRagged, inputs), want);
  // Every output row was written (outputs start as NaN).
  EXPECT_FALSE(torch::isnan(want.o.to(torch::kFloat)).any().item<bool>());
}

TEST(HopperProgram, RolesAndPipelineDepthDoNotChangeResults) {
  const std::string base = Fa3Text();
  std::string one_role = Replace(base, "  role producer warps 4 regs 24\n", "");
  one_role = Replace(one_role, "role consumer warps WARPS - 4 regs 240",
                     "role compute warps WARPS");
  const std::string no_pipeline = Replace(base, " pipeline STAGES split {", " split {");
  const spec::AttentionInputs inputs = Inputs(kRagged);
  const spec::AttentionOutputs want = Interp(base, kRagged, inputs);
  ExpectSameBits(Interp(one_role, kRagged, inputs), want);
  ExpectSameBits(Interp(no_pipeline, kRagged, inputs), want);
}

// The visit order, seen through the first failing grid point: the interpreter stops at the first
// point (in launch order) whose statement fails. `first` fails only at m_block = 0, `last` only
// at the last query tile (m_block = 2 with seqlen_q = 300): linear visits m_block = 0 first,
// longest_first visits m_block = 2 first.
TEST(HopperProgram, LongestFirstVisitsTheLastQueryTileFirst) {
  const std::string lets =
      "  let first: int = 1 // m_block\n"
      "  let last: int = 1 // (m_block - 2)\n";
  const std::string longest_first =
      Replace(Fa3Text(), "  load Q = q[", lets + "  load Q = q[");
  const std::string linear = Replace(longest_first, " schedule longest_first", "");
  const spec::AttentionInputs inputs = Inputs(kRagged);

  const absl::Status at_first = Interpret(Parse(linear), kRagged, inputs).status();
  EXPECT_EQ(at_first.code(), absl::StatusCode::kInvalidArgument) << at_first;
  EXPECT_THAT(at_first.message(), HasSubstr("division by zero in `1 // m_block`"));

  const absl::Status at_last = Interpret(Parse(longest_first), kRagged, inputs).status();
  EXPECT_EQ(at_last.code(), absl::StatusCode::kInvalidArgument) << at_last;
  EXPECT_THAT(at_last.message(), HasSubstr("division by zero in `1 // (m_block - 2)`"));
}

}  // namespace
}  // namespace cubridge::interp::testing
