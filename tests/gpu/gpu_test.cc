// On a GPU: lowered kernels compiled by NVRTC, verified against the spec's oracle and profiled in
// runner children; the lift check; planted faulty candidates (a crash, a hang, a wrong mask, a
// store into O's padding) come back as failed candidates while this process goes on. Without a
// usable GPU every test here reports itself skipped.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "cuir/lower/lift.h"
#include "cuir/pipeline/stages.h"
#include "cuir/pipeline/verify_backward.h"
#include "cuir/pipeline/adapt.h"
#include "tests/generality_suite.h"
#include "tests/lower/lower_test_util.h"
#include "worker/gpu/autotune.h"
#include "worker/gpu/driver.h"

namespace cubridge::gpu {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::HasSubstr;

std::string Spec(const std::string& name) {
  return std::string(CUBRIDGE_SOURCE_ROOT) + "/examples/specs/" + name + ".py";
}

cuir::AttentionConfig Config(int64_t b, int64_t hq, int64_t hkv, int64_t s) {
  cuir::AttentionConfig c;
  c.batch = b, c.heads_q = hq, c.heads_kv = hkv, c.seqlen_q = c.seqlen_kv = s;
  return c;
}

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    auto device = ProbeDevice(0);
    if (!device.ok()) GTEST_SKIP() << "no usable GPU: " << device.status().message();
    arch_ = device->cc_major >= 9 ? lower::Arch::kSm90 : lower::Arch::kSm80;
    // CUBRIDGE_GPU_TEST_ARCH=sm_80 runs the tests on the sm_80 expert on a Hopper GPU too (sm_80
    // code runs there), so one lent H100/H200 verifies both experts.
    if (const char* forced = std::getenv("CUBRIDGE_GPU_TEST_ARCH"); forced && *forced) {
      if (std::string(forced) != "sm_80") {
        GTEST_FAIL() << "CUBRIDGE_GPU_TEST_ARCH=" << forced << ": only sm_80 can be forced "
                     << "(unset it to test this GPU's own expert)";
      }
      arch_ = lower::Arch::kSm80;
    }
    dir_ = lower::testing::MakeTempDir("cubridge-gpu-test-");
  }
  void TearDown() override { lower::testing::CleanUpTempDir(dir_, HasFailure()); }

  // The expert's own tile for this arch (fa2_sm80: 128x64, 4 warps; fa3_sm90: 128x128, 12 warps)
  // and a second valid one, for the tests that name their candidates.
  TileConfig Tile() const { return TileFor(arch_); }
  static TileConfig TileFor(lower::Arch arch) {
    return arch == lower::Arch::kSm90 ? TileConfig{128, 128, 12} : TileConfig{128, 64, 4};
  }
  TileConfig OtherTile() const {
    return arch_ == lower::Arch::kSm90 ? TileConfig{128, 64, 12} : TileConfig{64, 64, 4};
  }

  AutotuneOptions Options(std::vector<TileConfig> tiles, bool profile, double timeout = 120) {
    AutotuneOptions o;
    o.tiles = std::move(tiles);
    o.profile.enabled = profile;
    o.isolate.timeout_seconds = timeout;
    o.lift_check = false;
    return o;
  }

  // `target`: the arch whose expert the job transfers to (default: this GPU's).
  absl::StatusOr<pipeline::AdaptResult> Adapt(const std::string& spec, cuir::AttentionConfig c,
                                              GpuAutotuner* tuner, const std::string& out,
                                              std::map<std::string, spec::BufferSource> buffers = {},
                                              std::optional<lower::Arch> target = std::nullopt) {
    pipeline::AdaptOptions o;
    o.buffers = std::move(buffers);
    o.spec_path = Spec(spec);
    o.config = c;
    o.arch = target.value_or(arch_);
    o.out_dir = dir_ + "/" + out;
    o.use_cache = false;
    o.seed = 1234;
    o.gpu = tuner;
    o.gpu_mode = tuner ? pipeline::GpuMode::kRequire : pipeline::GpuMode::kOff;
    return pipeline::Adapt(o);
  }

  // The CPU-verified transferred program and its lowering at the expert's tile, for planting.
  struct Prepared {
    cuir::Program program, base;
    lower::LoweredKernel kernel;
  };
  Prepared Prepare(const std::string& spec, const cuir::AttentionConfig& c,
                   std::optional<lower::Arch> target = std::nullopt) {
    const lower::Arch arch = target.value_or(arch_);
    const std::string out = spec + "-cpu-" + lower::ArchName(arch);
    auto r = Adapt(spec, c, nullptr, out, {}, arch);
    EXPECT_TRUE(r.ok()) << r.status();
    std::ifstream in(dir_ + "/" + out + "/kernel.cuir");
    std::stringstream ss;
    ss << in.rdbuf();
    auto program = cuir::ParseProgram(ss.str(), "kernel.cuir");
    EXPECT_TRUE(program.ok()) << program.status();
    auto lifted = lower::LiftExpert(pipeline::ExpertFor(arch));
    EXPECT_TRUE(lifted.ok()) << lifted.status();
    auto k = lower::Lower(*program, c, arch);
    EXPECT_TRUE(k.ok()) << k.status();
    return {*program, lifted->base, *k};
  }
  pipeline::GpuStageInput Input(const Prepared& p, const std::string& spec,
                                const cuir::AttentionConfig& c) {
    return {p.program, p.base, Spec(spec), {}, {}, c, arch_, 99, {}, nullptr};
  }

  lower::Arch arch_ = lower::Arch::kSm80;
  std::string dir_;
};

// Plants `code` at the start of the attention kernel's body (after its parameter list).
lower::LoweredKernel Plant(lower::LoweredKernel k, const std::string& code) {
  const size_t kernel = k.cuda_source.find("attn_fwd_kernel(");
  EXPECT_NE(kernel, std::string::npos);
  const size_t pos = k.cuda_source.find(") {\n", kernel);
  EXPECT_NE(pos, std::string::npos);
  k.cuda_source.insert(pos + 4, code + "\n");
  return k;
}

TEST_F(Gpu, LiftCheckBaseProgramAgreesWithTheCompiledExpert) {
  const auto c = Config(2, 4, 4, 200);
  Prepared p = Prepare("full", c);
  GpuAutotuner tuner(Options({}, false));
  ASSERT_TRUE(tuner.Probe(arch_).ok());
  auto base_kernel = lower::Lower(p.base, c, arch_);
  ASSERT_TRUE(base_kernel.ok()) << base_kernel.status();
  auto r = tuner.CheckCandidate(Input(p, "full", c), *base_kernel, p.base, "lift",
                                cuir::PrintProgram(p.base), false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->value("passed", false)) << r->dump(2);
  EXPECT_THAT(r->value("reference", ""), HasSubstr("interpreter"));
}

// The adapt run passed with a GPU: its first candidate verified at the ragged default shapes.
// `profiled`: the tuner profiles (the candidates then carry their profiles). The report's keys
// are read with at(): a missing one fails the test instead of reading past the object.
void ExpectVerifiedOnTheGpu(const absl::StatusOr<pipeline::AdaptResult>& r, bool profiled = false) {
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& gpu = r->report.at("gpu");
  ASSERT_TRUE(gpu.contains("best")) << gpu.dump(2);
  const auto& cand = gpu.at("candidates").at(0);
  EXPECT_TRUE(cand.value("passed", false)) << cand.dump(2);
  EXPECT_GE(cand.at("verification").at("shapes").size(), 4u);
  // The backward beside it (every head dim the experts serve), its tiles checked on the GPU too
  // (fast and twice deterministic at the backward's shapes) and, when the tuner profiles,
  // profiled; the fastest is the one kept.
  const auto& backward = r->report.at("backward");
  if (backward.value("available", false)) {
    EXPECT_EQ(backward.at("verification_level"), "gpu") << backward.dump(2);
    ASSERT_TRUE(backward.contains("gpu")) << backward.dump(2);
    const auto& tuned = backward.at("gpu");
    ASSERT_TRUE(tuned.contains("candidates")) << tuned.dump(2);
    EXPECT_EQ(tuned.value("best_tile", ""), backward.value("tile", "?")) << tuned.dump(2);
    bool found = false;
    for (const auto& c : tuned.at("candidates")) {
      EXPECT_EQ(c.contains("profile"), profiled && c.value("passed", false)) << c.dump(2);
      if (c.value("name", "") != tuned.value("best", "")) continue;
      found = true;
      EXPECT_TRUE(c.value("passed", false)) << c.dump(2);
      EXPECT_EQ(c.at("verification").at("level"), "gpu") << c.dump(2);
      EXPECT_EQ(c.at("verification").at("shapes").size(), pipeline::BackwardVerifyShapes().size());
      if (profiled) {
        EXPECT_GT(c.at("profile").value("tflops_kept", 0.0), 0.0) << c.dump(2);
      }
    }
    EXPECT_TRUE(found) << tuned.dump(2);
  } else {
    ADD_FAILURE() << "no backward beside the forward: " << backward.dump(2);
  }
}

class EveryExample : public Gpu, public ::testing::WithParamInterface<const char*> {};

// Ragged shapes (the default verification shapes: 257x300, 300x257, 65x65 and the job's 130),
// GQA heads, through the whole pipeline with a GPU required.
TEST_P(EveryExample, VerifiesOnTheGpu) {
  // Profiled, so that the backward's tiles are timed in the runner and the fastest kept.
  GpuAutotuner tuner(Options({Tile()}, true));
  ExpectVerifiedOnTheGpu(Adapt(GetParam(), Config(1, 8, 2, 130), &tuner, "out"), true);
}

INSTANTIATE_TEST_SUITE_P(Examples, EveryExample,
                         ::testing::Values("full", "causal", "sliding_window",
                                           "global_sliding_window", "prefix_lm", "block_causal",
                                           "causal_document", "share_question",
                                           "relative_position", "alibi", "softcap",
                                           "alibi_window_softcap"));

// The generality suite (examples/specs/generality): specs nobody tuned for, verified on the GPU at
// the ragged default shapes; the specs alternate bf16 with GQA 8/2 and fp16 with MHA 4/4, so
// both dtypes and both head layouts see every class of the suite.
class GeneralityOnGpu : public Gpu,
                        public ::testing::WithParamInterface<cubridge::testing::GeneralitySpec> {};

// adapt --local of one generality spec at `c` with its suite buffers and params, the GPU stage
// required (one tile, no profiling).
pipeline::AdaptOptions GeneralityAdapt(const cubridge::testing::GeneralitySpec& g,
                                       const cuir::AttentionConfig& c, lower::Arch arch,
                                       const std::string& out_dir, uint64_t seed,
                                       GpuAutotuner* tuner) {
  pipeline::AdaptOptions o;
  o.buffers = g.buffers;
  o.param_overrides = g.params;
  o.spec_path = g.path;
  o.config = c;
  o.arch = arch;
  o.out_dir = out_dir;
  o.use_cache = false;
  o.seed = seed;
  o.gpu = tuner;
  o.gpu_mode = pipeline::GpuMode::kRequire;
  return o;
}

TEST_P(GeneralityOnGpu, VerifiesOnTheGpu) {
  const auto& g = GetParam();
  const bool odd = std::hash<std::string>{}(g.name) % 2 == 1;
  cuir::AttentionConfig c = odd ? Config(2, 4, 4, 130) : Config(2, 8, 2, 130);
  c.dtype = odd ? cuir::DType::kFP16 : cuir::DType::kBF16;
  GpuAutotuner tuner(Options({Tile()}, false));
  ExpectVerifiedOnTheGpu(pipeline::Adapt(GeneralityAdapt(g, c, arch_, dir_ + "/out", 1234, &tuner)));
}

INSTANTIATE_TEST_SUITE_P(Suite, GeneralityOnGpu,
                         ::testing::ValuesIn(cubridge::testing::GeneralitySuite()),
                         cubridge::testing::GeneralityName);

// Tensors read per score at [..., q_idx, kv_idx] come tile by tile into shared memory (the tile
// stream, docs/lowering.md): on the sm_90 expert by TMA where the tensor allows it (the job's
// aligned 256 x 256 shape) and filled by the consumer warps where it does not (the ragged
// verification shapes: rows of 257 or 300 bools, 514 or 600 bytes of bf16); on the sm_80 expert
// by cp.async, or by the threads element by element. Each spec both ways, in both dtypes and head
// layouts, on both experts where this GPU runs both (sm_80 code runs on sm_90).
TEST_F(Gpu, StreamedTensorsVerifyByTmaAndByTheWarpsFill) {
  std::vector<lower::Arch> archs = {arch_};
  if (arch_ == lower::Arch::kSm90) archs.push_back(lower::Arch::kSm80);
  for (const auto& g : cubridge::testing::GeneralitySuite()) {
    if (g.name != "unstructured_keep_mask" && g.name != "additive_bias_bf16" &&
        g.name != "graphormer_spatial") {
      continue;
    }
    for (const lower::Arch arch : archs) {
      for (const bool fp16 : {false, true}) {
        const std::string label = absl::StrCat(g.name, arch == lower::Arch::kSm80 ? "-sm80" : "-sm90",
                                               fp16 ? "-fp16-mha" : "-bf16-gqa");
        SCOPED_TRACE(label);
        cuir::AttentionConfig c = fp16 ? Config(2, 4, 4, 256) : Config(2, 8, 2, 256);
        c.dtype = fp16 ? cuir::DType::kFP16 : cuir::DType::kBF16;
        GpuAutotuner tuner(Options({TileFor(arch)}, false));
        ExpectVerifiedOnTheGpu(
            pipeline::Adapt(GeneralityAdapt(g, c, arch, dir_ + "/" + label, 99, &tuner)));
      }
    }
  }
}

// ALiBi and relative position lower with their q_idx terms moved from the element loop to the
// LSE (SplitRowTerms, region epilogue_rows), on both experts: the fa2_sm80 kernel runs on this
// GPU too. Verification compares O and LSE with the interpreter at ragged GQA shapes, so a term
// that moved wrongly (or a shift_lse_rows on the wrong rows) fails here.
TEST_F(Gpu, RowTermsMovedToTheLseVerifyOnBothExperts) {
  GpuAutotuner tuner(Options({}, false));
  ASSERT_TRUE(tuner.Probe(arch_).ok());
  const auto c = Config(1, 8, 2, 130);
  for (const char* spec : {"alibi", "relative_position"}) {
    for (lower::Arch target : {lower::Arch::kSm80, arch_}) {
      SCOPED_TRACE(std::string(spec) + " on " + pipeline::ExpertFor(target));
      Prepared p = Prepare(spec, c, target);
      ASSERT_FALSE(HasFailure());
      pipeline::GpuStageInput input{p.program, p.base, Spec(spec), {}, {}, c, arch_, 5, {}, nullptr};
      const TileConfig tile = target == lower::Arch::kSm90 ? TileConfig{128, 128, 12}
                                                            : TileConfig{128, 64, 4};
      lower::LoweredKernel kernel;
      auto r = tuner.CheckTile(input, tile, &kernel);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_TRUE(r->value("passed", false)) << r->dump(2);
      EXPECT_TRUE((*r)["verification"].value("lse_checked", false)) << r->dump(2);
      EXPECT_NE(kernel.cuda_source.find("shift_lse_rows([&]"), std::string::npos);
      EXPECT_EQ(kernel.cuda_source.find("(kv_f - q_f)"), std::string::npos);
      EXPECT_EQ(kernel.cuda_source.find("(q_f - kv_f)"), std::string::npos);
    }
  }
}

// A program an LLM proposes for a spec the rules do not cover: softmax with an attention sink
// (examples/llm), lowered with the generated epilogue_sink region, checked against the spec's
// reference function itself at ragged GQA shapes, bf16 and fp16, head dims 64 to 256.
// examples/llm/sink_attention.cuir as proposed (on the sm_80 expert's base) and the same program
// moved onto this arch's expert (its declarations swapped for that base's, lower::Rebase).
struct SinkPrograms {
  cuir::Program proposed, rebased, base;  // base: this arch's expert's
};
void LoadSinkPrograms(lower::Arch arch, SinkPrograms* out) {
  std::ifstream in(std::string(CUBRIDGE_SOURCE_ROOT) + "/examples/llm/sink_attention.cuir");
  std::stringstream ss;
  ss << in.rdbuf();
  auto proposed = cuir::ParseProgram(ss.str(), "sink_attention.cuir");
  ASSERT_TRUE(proposed.ok()) << proposed.status();
  auto lifted = lower::LiftExpert(pipeline::ExpertFor(arch));
  ASSERT_TRUE(lifted.ok()) << lifted.status();
  auto sm80 = lower::LiftExpert("fa2_sm80");
  ASSERT_TRUE(sm80.ok()) << sm80.status();
  auto rebased = lower::Rebase(*proposed, sm80->base, lifted->base);
  ASSERT_TRUE(rebased.ok()) << rebased.status();
  *out = {*proposed, *rebased, lifted->base};
}

TEST_F(Gpu, TheSinkProgramVerifiesAgainstItsReference) {
  const std::string root = CUBRIDGE_SOURCE_ROOT;
  SinkPrograms sink;
  ASSERT_NO_FATAL_FAILURE(LoadSinkPrograms(arch_, &sink));
  GpuAutotuner tuner(Options({}, false));
  ASSERT_TRUE(tuner.Probe(arch_).ok());
  for (const auto& [program, base, tile] :
       {std::tuple{sink.proposed, *lower::testing::LoadTestProgram("base"), TileConfig{128, 64, 4}},
        std::tuple{sink.rebased, sink.base, Tile()}}) {
    for (int64_t d : {64, 128, 256}) {
      auto c = Config(2, 4, 2, 200);
      c.head_dim = d;
      c.dtype = d == 128 ? cuir::DType::kBF16 : cuir::DType::kFP16;
      pipeline::GpuStageInput input{program, base, root + "/examples/llm/sink_attention.py",
                                    {}, {}, c, arch_, 77, {}, nullptr};
      lower::LoweredKernel kernel;
      auto r = tuner.CheckTile(input, tile, &kernel);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_TRUE(r->value("passed", false)) << kernel.expert << " d=" << d << " " << r->dump(2);
      EXPECT_NE(kernel.cuda_source.find("add_sink"), std::string::npos);
    }
  }
}

// The last partial wave split across idle SMs (TailSplit, fa3_sm90/scheduler.cuh; CuIR `for ...
// split`): shapes whose work tiles end in a partial wave and walk at least four KV blocks, so the
// kernel splits their walks and its combine kernel merges the parts. Fewer tiles than SMs (4
// heads x 700 rows: 24 tiles; 4 x 2100 at head dim 64: 44 tiles of 192 rows) and one wave plus a
// few (17 heads x 1000 rows: 136 tiles on 132 SMs), bf16 and fp16, head dims 64 / 128 / 256.
// Relative position moves its row terms into the LSE, which every part shifts alike; the sink
// program adds its sink to one part only (a sink in every part fails its LSE and O).
TEST_F(Gpu, TailTilesSplitAcrossIdleSmsVerify) {
  if (arch_ != lower::Arch::kSm90) GTEST_SKIP() << "the last-wave split is the sm_90 expert's";
  GpuAutotuner tuner(Options({}, false));
  ASSERT_TRUE(tuner.Probe(arch_).ok());
  const std::string root = CUBRIDGE_SOURCE_ROOT;
  auto config = [](int64_t hq, int64_t hkv, int64_t s, int64_t d, cuir::DType dtype) {
    auto c = Config(1, hq, hkv, s);
    c.head_dim = d;
    c.dtype = dtype;
    return c;
  };
  const std::tuple<const char*, cuir::AttentionConfig> cases[] = {
      {"full", config(17, 17, 1000, 128, cuir::DType::kBF16)},
      {"full", config(4, 4, 2100, 64, cuir::DType::kFP16)},
      {"relative_position", config(4, 2, 700, 256, cuir::DType::kBF16)},
      {"relative_position", config(17, 17, 1000, 128, cuir::DType::kFP16)},
  };
  for (const auto& [spec, c] : cases) {
    Prepared p = Prepare(spec, c);
    lower::LoweredKernel kernel;
    auto r = tuner.CheckTile(Input(p, spec, c), Tile(), &kernel);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->value("passed", false)) << spec << " " << c.ToString() << " " << r->dump(2);
    // The worker tells the plan its SM count, so the combine runs only where the launch split:
    // 17 x 1000 rows is 136 tiles, a partial last wave on any sm_90 part; a 65-key walk is one
    // block, which no split cuts.
    if (c.seqlen_q == 1000) {
      for (const auto& shape : (*r)["verification"]["shapes"]) {
        const int64_t skv = shape["seqlen_kv"];
        if (skv == 1000 || skv == 65) {
          EXPECT_EQ(shape.value("combined", false), skv == 1000) << shape.dump();
        }
      }
    }
  }
  SinkPrograms sink;
  ASSERT_NO_FATAL_FAILURE(LoadSinkPrograms(arch_, &sink));
  const auto c = config(4, 2, 700, 128, cuir::DType::kBF16);
  pipeline::GpuStageInput input{sink.rebased, sink.base, root + "/examples/llm/sink_attention.py",
                                {}, {}, c, arch_, 78, {}, nullptr};
  lower::LoweredKernel kernel;
  auto r = tuner.CheckTile(input, Tile(), &kernel);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->value("passed", false)) << r->dump(2);
}

TEST_F(Gpu, Fp16AndHeadDims64And256Verify) {
  for (int64_t d : {64, 256}) {
    auto c = Config(1, 4, 4, 190);
    c.head_dim = d;
    c.dtype = cuir::DType::kFP16;
    GpuAutotuner tuner(Options({Tile()}, false));
    auto r = Adapt("causal_document", c, &tuner, "fp16-" + std::to_string(d));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->report["gpu"]["candidates"][0].value("passed", false))
        << r->report["gpu"].dump(2);
  }
}

// GPU-tuned kernels are cached per shape class: the same class hits, another seqlen bucket is
// tuned anew.
TEST_F(Gpu, TunedKernelsAreCachedPerShapeClass) {
  GpuAutotuner tuner(Options({Tile()}, true));
  auto run = [&](int64_t s, const std::string& out) {
    pipeline::AdaptOptions o;
    o.spec_path = Spec("causal");
    o.config = Config(1, 4, 4, s);
    o.arch = arch_;
    o.out_dir = dir_ + "/" + out;
    o.cache_dir = dir_ + "/cache";
    o.seed = 7;
    o.gpu = &tuner;
    o.gpu_mode = pipeline::GpuMode::kRequire;
    return pipeline::Adapt(o);
  };
  auto first = run(1024, "a");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->cache_hit);
  auto same_class = run(1000, "b");  // still s<=1k
  ASSERT_TRUE(same_class.ok()) << same_class.status();
  EXPECT_TRUE(same_class->cache_hit);
  auto other_class = run(2048, "c");
  ASSERT_TRUE(other_class.ok()) << other_class.status();
  EXPECT_FALSE(other_class->cache_hit);
  EXPECT_EQ(other_class->report["gpu"]["shape_class"], "d128-bf16-mha-s<=4k");
}

// The user's document lengths fit the job's shape only: the job's shape (profiled) uses them, the
// ragged verification shapes get random documents, as on the CPU.
TEST_F(Gpu, UserBufferValuesAreUsedAtTheJobsShape) {
  GpuAutotuner tuner(Options({Tile()}, true));
  auto r = Adapt("causal_document", Config(1, 8, 2, 1024), &tuner, "doc",
                 {{"doc", spec::BufferSource{"lengths:300,600,124"}}});
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& cand = r->report["gpu"]["candidates"][0];
  EXPECT_TRUE(cand.value("passed", false)) << cand.dump(2);
  // Three documents of 300, 600 and 124 tokens, causal inside each.
  const double kept = 8.0 * (300.0 * 301 + 600.0 * 601 + 124.0 * 125) / 2;
  EXPECT_EQ(cand["profile"]["kept_elements"].get<double>(), kept);
}

TEST_F(Gpu, AutotuneProfilesEveryCandidateAndKeepsTheFastest) {
  const auto c = Config(2, 8, 8, 2048);
  GpuAutotuner tuner(Options({Tile(), OtherTile()}, true));
  auto r = Adapt("causal", c, &tuner, "tuned");
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& gpu = r->report["gpu"];
  ASSERT_EQ(gpu["candidates"].size(), 2u);
  double best = -1;
  std::string best_name;
  for (const auto& cand : gpu["candidates"]) {
    ASSERT_TRUE(cand.contains("profile")) << cand.dump(2);
    const auto& prof = cand["profile"];
    // Causal keeps S(S+1)/2 elements per (batch, head).
    EXPECT_EQ(prof["kept_elements"].get<double>(), 2.0 * 8 * 2048 * 2049 / 2);
    EXPECT_GT(prof["tflops_kept"].get<double>(), 1.0);
    EXPECT_GE(prof["reps"].get<int>(), 10);
    if (prof["tflops_kept"].get<double>() > best) {
      best = prof["tflops_kept"].get<double>();
      best_name = cand["name"];
    }
  }
  EXPECT_EQ(gpu["best"], best_name);
  // The kernel written is the chosen one.
  std::ifstream in(dir_ + "/tuned/kernel.cu");
  std::stringstream ss;
  ss << in.rdbuf();
  const TileConfig chosen = best_name == Tile().Name() ? Tile() : OtherTile();
  EXPECT_THAT(ss.str(), HasSubstr(absl::StrCat("constexpr int BLOCK_M = ", chosen.block_m, ";")));
  EXPECT_THAT(ss.str(), HasSubstr(absl::StrCat("constexpr int BLOCK_N = ", chosen.block_n, ";")));
}

TEST_F(Gpu, PlantedCrashFailsThatCandidateAndTheVerifierLivesOn) {
  const auto c = Config(1, 4, 4, 256);
  Prepared p = Prepare("causal", c);
  GpuAutotuner tuner(Options({}, false));
  ASSERT_TRUE(tuner.Probe(arch_).ok());
  const auto crash = Plant(p.kernel,
                           "if (blockIdx.x == 0 && threadIdx.x == 0) *reinterpret_cast<volatile int*>(8) = 1;");
  auto bad = tuner.CheckCandidate(Input(p, "causal", c), crash, p.program, "planted-crash", "", false);
  ASSERT_TRUE(bad.ok()) << bad.status();
  EXPECT_FALSE(bad->value("passed", true));
  EXPECT_THAT(bad->value("error", ""), AnyOf(HasSubstr("illegal"), HasSubstr("ILLEGAL"),
                                            HasSubstr("memory access")))
      << bad->dump(2);
  // Same process, next candidate: the verifier is unharmed.
  auto good = tuner.CheckCandidate(Input(p, "causal", c), p.kernel, p.program, "good", "", false);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE(good->value("passed", false)) << good->dump(2);
}

// A kernel lowered for MHA maps query head h to kv head h: its launch plan refuses GQA calls
// instead of reading past the K/V tensors.
TEST_F(Gpu, AKernelRefusesAHeadLayoutItWasNotLoweredFor) {
  Prepared p = Prepare("causal", Config(1, 4, 4, 256));
  GpuAutotuner tuner(Options({}, false));
  ASSERT_TRUE(tuner.Probe(arch_).ok());
  auto r = tuner.CheckCandidate(Input(p, "causal", Config(1, 4, 2, 256)), p.kernel, p.program,
                                "mha-kernel-gqa-call", "", false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->value("passed", true));
  EXPECT_THAT(r->value("error", ""), HasSubstr("refuses these parameters")) << r->dump(2);
}

TEST_F(Gpu, PlantedHangIsKilledAtTheTimeLimit) {
  const auto c = Config(1, 2, 2, 128);
  Prepared p = Prepare("causal", c);
  GpuAutotuner tuner(Options({}, false, /*timeout=*/20));
  ASSERT_TRUE(tuner.Probe(arch_).ok());
  // clock64() is volatile: the compiler cannot drop this loop, which outlives any time limit.
  const auto hang = Plant(p.kernel, "{ const long long t0 = clock64(); while (clock64() - t0 < (1LL << 62)) {} }");
  auto r = tuner.CheckCandidate(Input(p, "causal", c), hang, p.program, "planted-hang", "", false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->value("passed", true));
  EXPECT_THAT(r->value("error", ""), HasSubstr("time limit"));
}

TEST_F(Gpu, PlantedWrongMaskIsCaughtWithItsWorstPositions) {
  const auto c = Config(1, 4, 4, 256);
  Prepared p = Prepare("causal", c);
  GpuAutotuner tuner(Options({}, false));
  ASSERT_TRUE(tuner.Probe(arch_).ok());
  lower::LoweredKernel wrong = p.kernel;
  const std::string mask = "if (!(q_idx >= kv_idx)) score = -INFINITY;";
  ASSERT_NE(wrong.cuda_source.find(mask), std::string::npos);
  wrong.cuda_source = absl::StrReplaceAll(wrong.cuda_source, {{mask, "if (!(q_idx > kv_idx)) score = -INFINITY;"}});
  auto r = tuner.CheckCandidate(Input(p, "causal", c), wrong, p.program, "planted-mask", "", false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->value("passed", true));
  EXPECT_THAT(r->value("failure", ""), AllOf(HasSubstr("got"), HasSubstr("want")));
}

// The verifier passes O as a view of rows head_dim + 2 wide at odd shape positions (257x300 and
// 65x65 here): a kernel storing past head_dim there fails, with the place. O's values stay right,
// so nothing but the padding check can catch it. The planted store hits only rows wider than
// head_dim, so the contiguous shapes still pass.
TEST_F(Gpu, PlantedStoreIntoOsPaddingIsCaught) {
  const auto c = Config(1, 4, 4, 256);
  Prepared p = Prepare("causal", c);
  GpuAutotuner tuner(Options({}, false));
  ASSERT_TRUE(tuner.Probe(arch_).ok());
  const auto spill = Plant(p.kernel,
                           "if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 &&\n"
                           "    threadIdx.x == 0) {\n"
                           "  for (long long col = D; col < p.o_row_stride; ++col)\n"
                           "    static_cast<unsigned short*>(p.o)[col] = 0;\n"
                           "}");
  auto r = tuner.CheckCandidate(Input(p, "causal", c), spill, p.program, "planted-padding", "",
                                false);
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& shapes = (*r)["verification"]["shapes"];
  ASSERT_EQ(shapes.size(), 4u) << r->dump(2);
  if (arch_ == lower::Arch::kSm80) {
    // fa2_sm80 refuses O rows that are not 16-byte aligned: those shapes run with a contiguous O
    // (the planted store then writes nothing) and the report says the padding was refused.
    EXPECT_TRUE(r->value("passed", false)) << r->dump(2);
    for (size_t i = 0; i < shapes.size(); ++i) {
      EXPECT_EQ(shapes[i]["o_padded"], false) << i;
      EXPECT_EQ(shapes[i].value("o_padding_refused", false), i % 2 == 1) << i;
    }
    return;
  }
  EXPECT_FALSE(r->value("passed", true));
  for (size_t i = 0; i < shapes.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(shapes[i]["o_padded"], i % 2 == 1);
    EXPECT_EQ(shapes[i]["passed"], i % 2 == 0) << shapes[i].dump(2);
    if (i % 2 == 0) continue;
    EXPECT_EQ(shapes[i]["o"]["violations"], 0);
    EXPECT_EQ(shapes[i]["o_padding"]["written"], 2);
    EXPECT_EQ(shapes[i]["o_padding"]["first_written"], nlohmann::json({0, 0, 0, c.head_dim}));
  }
  EXPECT_THAT(r->value("failure", ""),
              HasSubstr("O: 2 elements written outside the rows (the padding columns of an O with "
                        "row stride head_dim + 2), first at [0,0,0,128]"));
  EXPECT_THAT(r->value("summary", ""), HasSubstr("2 with padded O rows, 4 padding elements written"));
}

}  // namespace
}  // namespace cubridge::gpu
