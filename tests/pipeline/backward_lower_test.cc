// Lowering backward programs into the backward experts (cuir/experts/fa2_sm80/kernel_bwd.cu and
// fa3_sm90/kernel_bwd.cu, issue 29): every example and generality spec's transferred backward program lowers; the
// regions each construct generates are the ones the hooks hold (a transposed table's kernels and
// walk); and lowered kernels of every kind of variant (mask ranges, transposed tables, score_mod
// with its derivative, learnable captured tensors) compile with nvcc, warnings as errors.
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "cuir/experts/expert.h"
#include "cuir/lower/expert.h"
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

// The spec's backward program on an expert at its backward tile for the head dim (or `tile`),
// its learnable tensors' gradients asked for.
absl::StatusOr<cuir::Program> BackwardProgram(const GeneralitySpec& g,
                                              const cuir::AttentionConfig& c,
                                              const std::string& expert,
                                              std::optional<experts::TileConfig> tile = {}) {
  auto loaded = cubridge::testing::LoadSuiteSpec(g);
  if (!loaded.ok()) return loaded.status();
  const std::string file = expert + "/base_bwd.cuir";
  auto base = cuir::ParseProgram(
      cuir::testing::ReadFileOrDie(cuir::testing::SourcePath("cuir/experts/" + file)), file);
  if (!base.ok()) return base.status();
  if (!tile) tile = BackwardTiles(expert, c).front();
  base = experts::WithTile(*base, *tile);
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
    auto has = [&](cuir::StmtKind kind) {
      const cuir::Stmt* loop = cuir::FindKvLoop(*program);
      return loop != nullptr && std::any_of(loop->body.begin(), loop->body.end(),
                                            [&](const cuir::Stmt& s) { return s.kind == kind; });
    };
    const bool score_grad = has(cuir::StmtKind::kScoreGrad);
    const bool buffer_grad = has(cuir::StmtKind::kBufferGrad);
    EXPECT_EQ(std::count(gen.begin(), gen.end(), "keeps_raw_scores"),
              score_grad || buffer_grad ? 1 : 0);
    // Buffer gradients alone keep the raw scores only in a module built to compute them (the
    // op's module for calls where nothing learns has CUBRIDGE_BWD_BUFFER_GRADS=0).
    if (score_grad) {
      EXPECT_TRUE(absl::StrContains(k->cuda_source, "kKeepsRawScores = true;"));
    } else if (buffer_grad) {
      EXPECT_TRUE(absl::StrContains(k->cuda_source,
                                    "kKeepsRawScores = CUBRIDGE_BWD_BUFFER_GRADS != 0;"));
    }
  }
  EXPECT_GE(tables, 10);  // the masks the analysis declines: transposed tables
  }
}

// The newest expert whose backward serves the arch and head dim: the Hopper one on sm_90, the
// sm_80 one on sm_80, at every head dim; one served by none is named with what each serves.
TEST(BackwardExperts, EachArchAndHeadDimGetsTheNewestExpertServingIt) {
  for (const int d : {64, 128, 256}) {
    EXPECT_EQ(*BackwardExpertFor(lower::Arch::kSm90, d), "fa3_sm90") << d;
    EXPECT_EQ(*BackwardExpertFor(lower::Arch::kSm80, d), "fa2_sm80") << d;
  }
  auto none = BackwardExpertFor(lower::Arch::kSm90, 96);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnimplemented) << none.status();
  EXPECT_TRUE(absl::StrContains(
      none.status().message(),
      "fa3_sm90's serves head dims 64, 128, 256; fa2_sm80's serves head dims 64, 128, 256"))
      << none.status();
}

// Each expert's backward tiles: the base tile (64 x 128) up to head dim 128, a narrower one at
// 256 whose warps split dK's and dV's columns (BwdTiling::kServed in each kernel_bwd.cu);
// BuildBackward lowers the first, the GPU stage tries them all.
TEST(BackwardExperts, HeadDim256HasItsOwnTile) {
  cuir::AttentionConfig c = Config(8, 2);
  std::map<std::string, std::map<int, std::vector<std::string>>> want = {
      {"fa2_sm80", {{64, {"64x128w8"}}, {128, {"64x128w8", "32x64w8"}}, {256, {"32x64w8"}}}},
      {"fa3_sm90", {{64, {"64x128w8"}}, {128, {"64x128w8", "64x64w8"}}, {256, {"64x64w8"}}}}};
  for (const auto& [expert, by_dim] : want) {
    for (const auto& [d, names] : by_dim) {
      c.head_dim = d;
      std::vector<std::string> got;
      for (const experts::TileConfig& t : BackwardTiles(expert, c)) got.push_back(t.Name());
      EXPECT_EQ(got, names) << expert << " d" << d;
    }
  }
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
// with warnings as errors; at head dim 128 on the base tile, and for a few at head dim 256 on
// its own tile and at 128 on the split tile.
TEST(BackwardLowering, LoweredKernelsCompile) {
  const std::string nvcc = lower::testing::FindNvcc();
  if (nvcc.empty()) GTEST_SKIP() << "no nvcc (CUBRIDGE_NVCC unset, /usr/local/cuda/bin/nvcc absent)";
  const std::string dir = lower::testing::MakeTempDir("cubridge_bwd_lower_");
  for (const auto& [expert, arch] : kBackwardExperts)
  for (const GeneralitySpec& g : AllSpecs()) {
    static const std::vector<std::string> kPicked = {
        "causal", "softcap", "alibi_learned_slopes", "t5_relative_buckets", "prefix_lm",
        "per_batch_head_scale", "alibi_window_softcap", "clip_logit_scale", "causal_document",
        "graphormer_spatial", "unstructured_keep_mask"};
    if (std::find(kPicked.begin(), kPicked.end(), g.name) == kPicked.end()) continue;
    SCOPED_TRACE(expert + " " + g.name);
    const cuir::AttentionConfig c = Config(8, 2);
    auto program = BackwardProgram(g, c, expert);
    ASSERT_TRUE(program.ok()) << program.status();
    auto k = lower::Lower(*program, c, arch);
    ASSERT_TRUE(k.ok()) << k.status();
    const char* target = arch == lower::Arch::kSm80 ? "-arch=sm_80"
                                                    : "-gencode arch=compute_90a,code=sm_90a";
    std::vector<std::pair<std::string, std::string>> sources = {{"d128", k->cuda_source}};
    static const std::vector<std::string> kWide = {"softcap", "alibi_learned_slopes",
                                                   "causal_document", "graphormer_spatial"};
    if (std::find(kWide.begin(), kWide.end(), g.name) != kWide.end()) {
      cuir::AttentionConfig wide = c;
      wide.head_dim = 256;
      auto p256 = BackwardProgram(g, wide, expert);
      ASSERT_TRUE(p256.ok()) << p256.status();
      auto k256 = lower::Lower(*p256, wide, arch);
      ASSERT_TRUE(k256.ok()) << k256.status();
      EXPECT_TRUE(absl::StrContains(k256->cuda_source, "constexpr int BLOCK_N = 64;"));
      sources.emplace_back("d256", k256->cuda_source);
      auto split = BackwardProgram(g, c, expert, BackwardTiles(expert, c).back());
      ASSERT_TRUE(split.ok()) << split.status();
      auto ksplit = lower::Lower(*split, c, arch);
      ASSERT_TRUE(ksplit.ok()) << ksplit.status();
      sources.emplace_back("d128_split", ksplit->cuda_source);
    }
    for (const auto& [label, source] : sources) {
      const std::string stem = absl::StrCat(dir, "/", expert, "_", g.name, "_", label);
      lower::testing::WriteFile(stem + ".cu", source);
      const auto r = lower::testing::RunCommand(absl::StrCat(
          nvcc, " -c -std=c++17 ", target, " -Werror all-warnings -o ", stem, ".o ", stem, ".cu"));
      EXPECT_EQ(r.exit_code, 0) << label << "\n" << r.output;
    }
  }
  lower::testing::CleanUpTempDir(dir, HasFailure());
}

// The spec's backward lowered onto fa3_sm90 at `c`, written to DIR/NAME.cu: returns DIR/NAME.
absl::StatusOr<std::string> WriteHopperBackward(const GeneralitySpec& g,
                                                const cuir::AttentionConfig& c,
                                                const std::string& dir) {
  auto program = BackwardProgram(g, c, "fa3_sm90");
  if (!program.ok()) return program.status();
  auto k = lower::Lower(*program, c, lower::Arch::kSm90);
  if (!k.ok()) return k.status();
  const std::string stem = absl::StrCat(dir, "/", g.name);
  lower::testing::WriteFile(stem + ".cu", k->cuda_source);
  return stem;
}

// The Hopper backward's tile stream (common/stream_rows.cuh), built but not yet declared as
// regions until a GPU verifies it (bench/NOTES.md session 26): in a copy of the experts with
// kernel_bwd.cu's `tile_stream` and `stream_coords` marked, the tensors read per score at
// [..., q_idx, kv_idx] are streamed, and the kernels compile without warnings.
TEST(BackwardLowering, TheTileStreamCompilesWithItsRegionsDeclared) {
  const std::string nvcc = lower::testing::FindNvcc();
  if (nvcc.empty()) {
    GTEST_SKIP() << "no nvcc (CUBRIDGE_NVCC unset, /usr/local/cuda/bin/nvcc absent)";
  }
  const std::string dir = lower::testing::MakeTempDir("cubridge_bwd_stream_");
  const std::string copy = "cp -r '" + lower::ExpertsDir() + "' '" + dir + "/experts'";
  ASSERT_EQ(lower::testing::RunCommand(copy).exit_code, 0);
  const std::string kernel = dir + "/experts/fa3_sm90/kernel_bwd.cu";
  std::string text = cuir::testing::ReadFileOrDie(kernel);
  // The two regions' dormant markers woken, as device-backward.sh's op_ab does.
  for (const char* region : {"tile_stream", "stream_coords"}) {
    for (const char* tag : {"region", "end"}) {
      const std::string dormant = absl::StrCat("// dormant @cuir-", tag, " ", region, "\n");
      ASSERT_TRUE(absl::StrContains(text, dormant)) << dormant;
      absl::StrReplaceAll({{dormant, absl::StrCat("// @cuir-", tag, " ", region, "\n")}}, &text);
    }
  }
  lower::testing::WriteFile(kernel, text);
  const char* before = std::getenv("CUBRIDGE_EXPERTS_DIR");
  const std::string restore = before != nullptr ? before : "";
  setenv("CUBRIDGE_EXPERTS_DIR", (dir + "/experts").c_str(), 1);
  for (const GeneralitySpec& g : AllSpecs()) {
    if (g.name != "unstructured_keep_mask" && g.name != "graphormer_spatial") continue;
    SCOPED_TRACE(g.name);
    auto written = WriteHopperBackward(g, Config(8, 2), dir);
    ASSERT_TRUE(written.ok()) << written.status();
    const std::string& stem = *written;
    const std::string source = cuir::testing::ReadFileOrDie(stem + ".cu");
    // The keep mask's bools at [q, kv]; graphormer's adjacency (bool, narrower than its int32
    // distances) at [b, q, kv].
    EXPECT_TRUE(absl::StrContains(source, "using StreamElem = bool;"));
    EXPECT_TRUE(absl::StrContains(source, "stream_tile.at(q_idx, kv_idx)"));
    const auto r = lower::testing::RunCommand(
        absl::StrCat(nvcc, " -c -std=c++17 -gencode arch=compute_90a,code=sm_90a -Werror "
                           "all-warnings -o ", stem, ".o ", stem, ".cu"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  if (restore.empty()) unsetenv("CUBRIDGE_EXPERTS_DIR");
  else setenv("CUBRIDGE_EXPERTS_DIR", restore.c_str(), 1);
  lower::testing::CleanUpTempDir(dir, HasFailure());
}

// The CTA pairs' dQ exchange (fa3_sm90/pair_dq.cuh), off since the GPU measured it slower
// (CUBRIDGE_BWD_PAIR_DQ, and CUBRIDGE_BWD_SUM_DQ between the warpgroups at head dim 64;
// bench/NOTES.md sessions 27 and 28) but kept buildable: with both on, the lowered backward of
// a whole walk (full) and of a table walk (causal_document), every head dim, compiles without
// warnings as clusters of two CTAs that map each other's shared memory.
TEST(BackwardLowering, ThePairedDqExchangeCompiles) {
  const std::string nvcc = lower::testing::FindNvcc();
  if (nvcc.empty()) {
    GTEST_SKIP() << "no nvcc (CUBRIDGE_NVCC unset, /usr/local/cuda/bin/nvcc absent)";
  }
  const std::string dir = lower::testing::MakeTempDir("cubridge_bwd_pair_");
  int built = 0;
  for (const GeneralitySpec& g : AllSpecs()) {
    if (g.name != "full" && g.name != "causal_document") continue;
    SCOPED_TRACE(g.name);
    ++built;
    auto written = WriteHopperBackward(g, Config(8, 2), dir);
    ASSERT_TRUE(written.ok()) << written.status();
    const std::string& stem = *written;
    const auto r = lower::testing::RunCommand(absl::StrCat(
        nvcc, " -ptx -std=c++17 -arch=compute_90a -DCUBRIDGE_BWD_PAIR_DQ=1 -DCUBRIDGE_BWD_SUM_DQ=1 "
              "-Werror all-warnings -o ",
        stem, ".ptx ", stem, ".cu"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string ptx = cuir::testing::ReadFileOrDie(stem + ".ptx");
    EXPECT_TRUE(absl::StrContains(ptx, ".reqnctapercluster 2, 1, 1"));
    EXPECT_TRUE(absl::StrContains(ptx, "mapa.shared::cluster.u32"));
    EXPECT_TRUE(absl::StrContains(ptx, "st.shared::cluster.v4.f32"));
  }
  EXPECT_EQ(built, 2);
  lower::testing::CleanUpTempDir(dir, HasFailure());
}

// CUBRIDGE_BWD_SPLIT_Q (off by default): at head dim 256 the warpgroups split the query block,
// S^T and dP^T of 32 queries each (m64n32), dV and dK from P^T and dS^T in shared memory (A
// K-major, B transposed). Lowered variants with score_mods, learned buffers' gradients and masks
// build with it (warnings as errors), and its products appear only with it on.
TEST(BackwardLowering, TheSplitQueryBlockCompiles) {
  const std::string nvcc = lower::testing::FindNvcc();
  if (nvcc.empty()) {
    GTEST_SKIP() << "no nvcc (CUBRIDGE_NVCC unset, /usr/local/cuda/bin/nvcc absent)";
  }
  const std::string dir = lower::testing::MakeTempDir("cubridge_bwd_splitq_");
  int built = 0;
  for (const GeneralitySpec& g : AllSpecs()) {
    if (g.name != "alibi_learned_slopes" && g.name != "causal_document") continue;
    SCOPED_TRACE(g.name);
    ++built;
    cuir::AttentionConfig c = Config(8, 2);
    c.head_dim = 256;
    auto written = WriteHopperBackward(g, c, dir);
    ASSERT_TRUE(written.ok()) << written.status();
    const std::string& stem = *written;
    for (const int on : {0, 1}) {
      const std::string ptx_path = absl::StrCat(stem, "_", on, ".ptx");
      const auto r = lower::testing::RunCommand(
          absl::StrCat(nvcc, " -ptx -std=c++17 -arch=compute_90a -DCUBRIDGE_BWD_SPLIT_Q=", on,
                       " -Werror all-warnings -o ", ptx_path, " ", stem, ".cu"));
      ASSERT_EQ(r.exit_code, 0) << r.output;
      const std::string ptx = cuir::testing::ReadFileOrDie(ptx_path);
      EXPECT_EQ(absl::StrContains(ptx, "m64n32k16.f32"), on == 1) << on;
      EXPECT_EQ(absl::StrContains(ptx, ", p, 1, 1, 0, 1;"), on == 1) << on;
    }
  }
  EXPECT_EQ(built, 2);
  lower::testing::CleanUpTempDir(dir, HasFailure());
}

}  // namespace
}  // namespace cubridge::pipeline
