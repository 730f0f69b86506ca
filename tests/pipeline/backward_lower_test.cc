// Lowering backward programs into the backward experts (cuir/experts/fa2_sm80/kernel_bwd.cu and
// fa3_sm90/kernel_bwd.cu, issue 29): every example and generality spec's transferred backward program lowers; the
// regions each construct generates are the ones the hooks hold (a transposed table's kernels and
// walk); and lowered kernels of every kind of variant (mask ranges, transposed tables, score_mod
// with its derivative, learnable captured tensors) compile with nvcc, warnings as errors.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cuir/lower/lower.h"
#include "cuir/pipeline/backward.h"
#include "cuir/pipeline/stages.h"
#include "cuir/pipeline/verify_backward.h"
#include "cuir/transfer/transfer.h"
#include "gtest/gtest.h"
#include "tests/generality_suite.h"
#include "tests/ir/ir_test_util.h"
#include "tests/lower/lower_test_util.h"

namespace cubridge::pipeline {
namespace {

using cubridge::testing::GeneralitySpec;
namespace fs = std::filesystem;

cuir::AttentionConfig Config(int heads_q, int heads_kv) {
  cuir::AttentionConfig c;
  c.batch = 2;
  c.heads_q = heads_q;
  c.heads_kv = heads_kv;
  c.head_dim = 128;
  c.seqlen_q = 1000;
  c.seqlen_kv = 1000;
  return c;
}

std::vector<GeneralitySpec> AllSpecs() {
  std::vector<GeneralitySpec> out = cubridge::testing::GeneralitySuite();
  for (GeneralitySpec& g : cubridge::testing::ExampleSpecs()) out.push_back(std::move(g));
  return out;
}

// The backward experts and the arch each is lowered for.
const std::vector<std::pair<std::string, lower::Arch>> kBackwardExperts = {
    {"fa2_sm80", lower::Arch::kSm80}, {"fa3_sm90", lower::Arch::kSm90}};

// The spec's backward program on an expert, its learnable tensors' gradients asked for.
absl::StatusOr<cuir::Program> BackwardProgram(const GeneralitySpec& g,
                                              const cuir::AttentionConfig& c,
                                              const std::string& expert) {
  auto loaded = cubridge::testing::LoadSuiteSpec(g);
  if (!loaded.ok()) return loaded.status();
  const std::string file = expert + "/base_bwd.cuir";
  auto base = cuir::ParseProgram(
      cuir::testing::ReadFileOrDie(cuir::testing::SourcePath("cuir/experts/" + file)), file);
  if (!base.ok()) return base.status();
  transfer::VariantSpec v = ToVariantSpec(*loaded);
  v.grad_buffers = LearnableBuffers(*loaded);
  auto t = transfer::Transfer(*base, v, c);
  if (!t.ok()) return t.status();
  return t->program;
}

bool HasTable(const cuir::Program& p) {
  return cuir::FindDecl(p, cuir::StmtKind::kTable) != nullptr;
}

TEST(BackwardLowering, EverySpecLowers) {
  for (const auto& [expert, arch] : kBackwardExperts) {
  int tables = 0;
  for (const GeneralitySpec& g : AllSpecs()) {
    SCOPED_TRACE(expert + " " + g.name);
    const cuir::AttentionConfig c = Config(8, 2);
    auto program = BackwardProgram(g, c, expert);
    ASSERT_TRUE(program.ok()) << program.status();
    auto k = lower::Lower(*program, c, arch);
    ASSERT_TRUE(k.ok()) << k.status() << "\n" << cuir::PrintProgram(*program);
    const auto& gen = k->generated_regions;
    if (HasTable(*program)) {
      ++tables;
      for (const char* region : {"table_kernel", "workspace", "q_loop"}) {
        EXPECT_EQ(std::count(gen.begin(), gen.end(), region), 1) << region;
      }
    }
    EXPECT_EQ(k->expert, expert);
    EXPECT_TRUE(absl::StrContains(k->cuda_source, "attn_bwd_kernel"));
    const bool grads = cuir::FindKvLoop(*program) != nullptr &&
                       std::any_of(cuir::FindKvLoop(*program)->body.begin(),
                                   cuir::FindKvLoop(*program)->body.end(),
                                   [](const cuir::Stmt& s) {
                                     return s.kind == cuir::StmtKind::kScoreGrad ||
                                            s.kind == cuir::StmtKind::kBufferGrad;
                                   });
    EXPECT_EQ(std::count(gen.begin(), gen.end(), "keeps_raw_scores"), grads ? 1 : 0);
  }
  EXPECT_GE(tables, 10);  // the masks the analysis declines: transposed tables
  }
}

// The newest expert whose backward serves the arch and head dim: the Hopper one on sm_90, the
// sm_80 one on sm_80; head dim 256 named as served by none, with what each serves.
TEST(BackwardExperts, EachArchAndHeadDimGetsTheNewestExpertServingIt) {
  EXPECT_EQ(*BackwardExpertFor(lower::Arch::kSm90, 128), "fa3_sm90");
  EXPECT_EQ(*BackwardExpertFor(lower::Arch::kSm90, 64), "fa3_sm90");
  EXPECT_EQ(*BackwardExpertFor(lower::Arch::kSm80, 128), "fa2_sm80");
  auto none = BackwardExpertFor(lower::Arch::kSm90, 256);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnimplemented) << none.status();
  EXPECT_TRUE(absl::StrContains(none.status().message(),
                                "fa3_sm90's serves head dims 64, 128; fa2_sm80's serves head dims 64, 128"))
      << none.status();
}

// An expert with a backward program but no backward kernel (a copy of the experts without
// fa3_sm90's kernel_bwd.cu): lowering for it says so.
TEST(BackwardLowering, AnExpertWithoutABackwardKernelIsNamed) {
  const std::string dir = lower::testing::MakeTempDir("cubridge_bwd_expert_");
  fs::copy(cuir::testing::SourcePath("cuir/experts"), dir, fs::copy_options::recursive);
  fs::remove(fs::path(dir) / "fa3_sm90" / "kernel_bwd.cu");
  setenv("CUBRIDGE_EXPERTS_DIR", dir.c_str(), 1);
  auto base = cuir::ParseProgram(cuir::testing::ReadFileOrDie(cuir::testing::SourcePath(
                                     "cuir/experts/fa3_sm90/base_bwd.cuir")),
                                 "fa3_sm90/base_bwd.cuir");
  ASSERT_TRUE(base.ok()) << base.status();
  auto k = lower::Lower(*base, Config(8, 8), lower::Arch::kSm90);
  unsetenv("CUBRIDGE_EXPERTS_DIR");
  EXPECT_EQ(k.status().code(), absl::StatusCode::kNotFound) << k.status();
  EXPECT_TRUE(absl::StrContains(k.status().message(), "has no backward kernel")) << k.status();
  EXPECT_TRUE(absl::StrContains(k.status().message(), "kernel_bwd.cu")) << k.status();
  lower::testing::CleanUpTempDir(dir, HasFailure());
}

// One lowered kernel per kind of variant, built by nvcc for each expert's arch (sm_80, sm_90a)
// with warnings as errors.
TEST(BackwardLowering, LoweredKernelsCompile) {
  const std::string nvcc = lower::testing::FindNvcc();
  if (nvcc.empty()) GTEST_SKIP() << "no nvcc (CUBRIDGE_NVCC unset, /usr/local/cuda/bin/nvcc absent)";
  const std::string dir = lower::testing::MakeTempDir("cubridge_bwd_lower_");
  for (const auto& [expert, arch] : kBackwardExperts)
  for (const GeneralitySpec& g : AllSpecs()) {
    static const std::vector<std::string> kPicked = {
        "causal", "softcap", "alibi_learned_slopes", "t5_relative_buckets", "prefix_lm",
        "per_batch_head_scale", "alibi_window_softcap", "clip_logit_scale", "causal_document",
        "graphormer_spatial"};
    if (std::find(kPicked.begin(), kPicked.end(), g.name) == kPicked.end()) continue;
    SCOPED_TRACE(expert + " " + g.name);
    const cuir::AttentionConfig c = Config(8, 2);
    auto program = BackwardProgram(g, c, expert);
    ASSERT_TRUE(program.ok()) << program.status();
    auto k = lower::Lower(*program, c, arch);
    ASSERT_TRUE(k.ok()) << k.status();
    const std::string stem = absl::StrCat(dir, "/", expert, "_", g.name);
    lower::testing::WriteFile(stem + ".cu", k->cuda_source);
    const char* target = arch == lower::Arch::kSm80 ? "-arch=sm_80"
                                                    : "-gencode arch=compute_90a,code=sm_90a";
    const auto r = lower::testing::RunCommand(absl::StrCat(
        nvcc, " -c -std=c++17 ", target, " -Werror all-warnings -o ", stem, ".o ", stem, ".cu"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  lower::testing::CleanUpTempDir(dir, HasFailure());
}

}  // namespace
}  // namespace cubridge::pipeline
