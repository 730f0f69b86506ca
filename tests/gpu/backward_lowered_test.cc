// On a GPU: backward kernels lowered from variants into the backward experts (issue 29: the sm_80
// one, and on an sm_90 GPU the sm_90a one too),
// compiled by NVRTC for the GPU at hand and launched through the loader the PyTorch op uses
// (worker/gpu/backward_module.h: plan kernel, then preprocess, tables, attention, postprocess),
// against the float64 autograd of each
// spec at ragged shapes (Sq != Skv both ways, GQA): dQ, dK, dV from NaN-poisoned outputs and the
// learnable captured tensors' gradients, by the CPU verifier's tolerances (CompareGrads, the
// interpreter's error scales for the buffers), in the fast mode and twice in the deterministic
// one (bitwise equal). Without a GPU every test skips itself.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cuir/lower/expert.h"
#include "cuir/pipeline/backward.h"
#include "cuir/lower/lower.h"
#include "cuir/pipeline/stages.h"
#include "cuir/pipeline/verify.h"
#include "cuir/pipeline/verify_backward.h"
#include "cuir/transfer/transfer.h"
#include "tests/generality_suite.h"
#include "tests/lower/lower_test_util.h"
#include "worker/gpu/backward_check.h"
#include "worker/gpu/backward_module.h"
#include "worker/gpu/driver.h"

namespace cubridge::gpu {
namespace {

using cubridge::testing::GeneralitySpec;

class BackwardOnGpu : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto device = ProbeDevice(0);
    if (!device.ok()) GTEST_SKIP() << "no usable GPU: " << device.status().message();
    arch_ = device->cc_major >= 9 ? lower::Arch::kSm90 : lower::Arch::kSm80;
  }

  // The kernel lowered from `program`, compiled by NVRTC for this GPU (with `defines`) and
  // loaded.
  void Build(const cuir::Program& program, const cuir::AttentionConfig& c,
             std::vector<std::string> defines = {}) {
    auto k = lower::Lower(program, c, arch_);
    ASSERT_TRUE(k.ok()) << k.status();
    dtype_ = c.dtype == cuir::DType::kBF16 ? 0 : 1;
    CompileOptions copt;
    copt.arch = arch_;
    copt.defines = std::move(defines);
    for (const auto& [role, expr] :
         EntryExpressions(k->device_entries, dtype_, static_cast<int>(c.head_dim))) {
      copt.name_expressions.push_back(expr);
    }
    auto compiled = CompileWithNvrtc(k->cuda_source, "kernel_bwd.cu", copt);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    // LibTorch's context: the module's launches and the tensors must share it.
    torch::zeros({1}, torch::TensorOptions().device(torch::kCUDA));
    ASSERT_TRUE(UsePrimaryContext(0).ok());
    auto module = BackwardModule::Load(*compiled, k->device_entries, dtype_,
                                       static_cast<int>(c.head_dim));
    ASSERT_TRUE(module.ok()) << module.status();
    module_ = std::make_unique<BackwardModule>(*std::move(module));
    buffer_order_.clear();
    for (const lower::LoweredBuffer& b : k->buffers) buffer_order_.push_back(b.name);
  }

  lower::Arch arch_ = lower::Arch::kSm80;
  int dtype_ = 0;
  std::unique_ptr<BackwardModule> module_;
  std::vector<std::string> buffer_order_;
};

TEST_P(BackwardOnGpu, LoweredVariantMatchesTheOracle) {
  const GeneralitySpec g = cubridge::testing::FindSpec(GetParam());
  auto loaded = cubridge::testing::LoadSuiteSpec(g);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const spec::Spec& s = *loaded;
  // Each expert the GPU runs, at the head dims its backward serves (64, 128 on the base tile,
  // 256 on its own), GQA and MHA, bf16 and fp16, and at 128 on the split tile too (`tile`: the
  // index in the expert's backward tiles for the head dim).
  struct Case {
    const char* expert;
    lower::Arch arch;
    int hq, hkv;
    cuir::DType dtype;
    int d;
    size_t tile = 0;
  };
  bool frozen_checked = false;
  for (const Case& k : {Case{"fa2_sm80", lower::Arch::kSm80, 4, 2, cuir::DType::kBF16, 64},
                        Case{"fa2_sm80", lower::Arch::kSm80, 2, 2, cuir::DType::kFP16, 128},
                        Case{"fa2_sm80", lower::Arch::kSm80, 4, 2, cuir::DType::kBF16, 256},
                        Case{"fa2_sm80", lower::Arch::kSm80, 2, 1, cuir::DType::kBF16, 128, 1},
                        Case{"fa3_sm90", lower::Arch::kSm90, 4, 2, cuir::DType::kBF16, 128},
                        Case{"fa3_sm90", lower::Arch::kSm90, 4, 2, cuir::DType::kBF16, 64},
                        Case{"fa3_sm90", lower::Arch::kSm90, 2, 2, cuir::DType::kFP16, 128},
                        Case{"fa3_sm90", lower::Arch::kSm90, 2, 1, cuir::DType::kFP16, 256},
                        Case{"fa3_sm90", lower::Arch::kSm90, 4, 2, cuir::DType::kBF16, 128, 1}}) {
    if (static_cast<int>(k.arch) > static_cast<int>(arch_)) continue;
    const int hq = k.hq, hkv = k.hkv, d = k.d;
    const cuir::DType dtype = k.dtype;
    cuir::AttentionConfig c;
    c.batch = 2, c.heads_q = hq, c.heads_kv = hkv, c.head_dim = d, c.dtype = dtype;
    c.seqlen_q = c.seqlen_kv = 300;
    auto base = lower::LoadExpert(k.expert, /*backward=*/true);
    ASSERT_TRUE(base.ok()) << base.status();
    const std::vector<experts::TileConfig> tiles = pipeline::BackwardTiles(k.expert, c);
    ASSERT_LT(k.tile, tiles.size());
    SCOPED_TRACE(absl::StrCat(k.expert, " d", d, " tile ", tiles[k.tile].Name()));
    auto tiled = experts::WithTile(base->base, tiles[k.tile]);
    ASSERT_TRUE(tiled.ok()) << tiled.status();
    transfer::VariantSpec v = pipeline::ToVariantSpec(s);
    v.grad_buffers = pipeline::LearnableBuffers(s);
    auto t = transfer::Transfer(*tiled, v, c);
    ASSERT_TRUE(t.ok()) << t.status();
    Build(t->program, c);
    if (HasFatalFailure()) return;
    // Fast mode (float atomics), then deterministic mode twice: the oracle's gradients in all
    // three, and the same bits on both deterministic runs (backward_check.h).
    pipeline::VerifyOptions options;
    options.shapes = {{2, 300, 300}, {1, 257, 390}, {1, 390, 257}};
    auto report = pipeline::VerifyBackwardKernel(
        t->program, s, c, g.buffers, v.grad_buffers, 20261129, options,
        FastAndDeterministicRuns(*module_, buffer_order_, v.grad_buffers));
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->passed) << g.name << " d" << d << ":\n" << report->FailureDetail();
    EXPECT_EQ(report->shapes.size(), 3u);
    module_.reset();
    // The module a call builds where no captured tensor learns (CUBRIDGE_BWD_BUFFER_GRADS=0: no
    // gradient hooks, no raw scores): dQ, dK and dV still the oracle's. Once, on the GPU's own
    // expert at head dim 128.
    if (k.arch != arch_ || k.d != 128 || k.tile != 0 || v.grad_buffers.empty() ||
        frozen_checked) {
      continue;
    }
    frozen_checked = true;
    SCOPED_TRACE("built with CUBRIDGE_BWD_BUFFER_GRADS=0");
    Build(t->program, c, {"CUBRIDGE_BWD_BUFFER_GRADS=0"});
    if (HasFatalFailure()) return;
    auto frozen = pipeline::VerifyBackwardKernel(
        t->program, s, c, g.buffers, {}, 20261206, options,
        FastAndDeterministicRuns(*module_, buffer_order_, {}));
    ASSERT_TRUE(frozen.ok()) << frozen.status();
    EXPECT_TRUE(frozen->passed) << g.name << " d" << d << ", no buffer gradients:\n"
                                << frozen->FailureDetail();
    module_.reset();
  }
}

// A variant of every kind the backward lowers: ranges of a mask (causal, a window, prefix-LM,
// block-causal), transposed block tables (documents, shared questions, an unstructured mask,
// padding, graphormer's adjacency), a score_mod with its derivative (softcap, ALiBi with both),
// learnable tensors (slopes under a mask, a 2-D bucket table, a rank-0 scale, a per-(batch,
// head) scale, graphormer's spatial table read at a captured distance).
INSTANTIATE_TEST_SUITE_P(Variants, BackwardOnGpu,
                         ::testing::Values("full", "causal", "sliding_window", "prefix_lm",
                                           "block_causal", "softcap", "alibi_window_softcap",
                                           "alibi_learned_slopes", "t5_relative_buckets",
                                           "clip_logit_scale", "per_batch_head_scale",
                                           "causal_document", "share_question",
                                           "unstructured_keep_mask", "padding_lengths_both",
                                           "graphormer_spatial"));

// Every example and generality spec (the pass a lent GPU runs in shards; the Variants above are
// the everyday subset).
std::vector<std::string> EverySpec() {
  std::vector<std::string> names;
  for (const GeneralitySpec& g : cubridge::testing::GeneralitySuite()) names.push_back(g.name);
  for (const GeneralitySpec& g : cubridge::testing::ExampleSpecs()) names.push_back(g.name);
  return names;
}
INSTANTIATE_TEST_SUITE_P(Suite, BackwardOnGpu, ::testing::ValuesIn(EverySpec()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace cubridge::gpu
