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
#include "cuir/experts/common/backward_abi.cuh"
#include "cuir/interp/interp.h"
#include "cuir/lower/expert.h"
#include "cuir/lower/lower.h"
#include "cuir/pipeline/stages.h"
#include "cuir/pipeline/verify.h"
#include "cuir/pipeline/verify_backward.h"
#include "cuir/spec/oracle.h"
#include "cuir/transfer/transfer.h"
#include "tests/generality_suite.h"
#include "tests/lower/lower_test_util.h"
#include "worker/gpu/backward_module.h"
#include "worker/gpu/driver.h"

namespace cubridge::gpu {
namespace {

using cubridge::testing::GeneralitySpec;

void SetStrides(const torch::Tensor& t, int64_t* b, int64_t* h, int64_t* r) {
  *b = t.stride(0), *h = t.stride(1), *r = t.stride(2);
}

class BackwardOnGpu : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto device = ProbeDevice(0);
    if (!device.ok()) GTEST_SKIP() << "no usable GPU: " << device.status().message();
    arch_ = device->cc_major >= 9 ? lower::Arch::kSm90 : lower::Arch::kSm80;
  }

  // The kernel lowered from `program`, compiled by NVRTC for this GPU and loaded.
  void Build(const cuir::Program& program, const cuir::AttentionConfig& c) {
    auto k = lower::Lower(program, c, arch_);
    ASSERT_TRUE(k.ok()) << k.status();
    dtype_ = c.dtype == cuir::DType::kBF16 ? 0 : 1;
    CompileOptions copt;
    copt.arch = arch_;
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

  // The lowered kernel's gradients for these inputs (dQ, dK, dV and the buffers in `learn`).
  spec::AttentionGrads RunOnGpu(const cuir::AttentionConfig& c, const spec::AttentionInputs& in,
                                const spec::BackwardInputs& b,
                                const std::vector<std::string>& learn, bool deterministic) {
    const torch::Device cuda(torch::kCUDA);
    auto dev = [&](const torch::Tensor& t) { return t.to(cuda).contiguous(); };
    const torch::Tensor q = dev(in.q), k = dev(in.k), v = dev(in.v), o = dev(b.o);
    const torch::Tensor lse = dev(b.lse.to(torch::kFloat)), d_o = dev(b.grad_o);
    torch::Tensor dq = torch::full_like(q, NAN), dk = torch::full_like(k, NAN),
                  dv = torch::full_like(v, NAN);
    cubridge_attn_bwd_params p{};
    cubridge_attn_fwd_params& f = p.fwd;
    f.q = q.data_ptr(), f.k = k.data_ptr(), f.v = v.data_ptr(), f.o = o.data_ptr();
    f.lse = lse.data_ptr<float>();
    SetStrides(q, &f.q_batch_stride, &f.q_head_stride, &f.q_row_stride);
    SetStrides(k, &f.k_batch_stride, &f.k_head_stride, &f.k_row_stride);
    SetStrides(v, &f.v_batch_stride, &f.v_head_stride, &f.v_row_stride);
    SetStrides(o, &f.o_batch_stride, &f.o_head_stride, &f.o_row_stride);
    f.lse_batch_stride = lse.stride(0), f.lse_head_stride = lse.stride(1);
    f.batch = static_cast<int32_t>(c.batch), f.heads_q = static_cast<int32_t>(c.heads_q);
    f.heads_kv = static_cast<int32_t>(c.heads_kv), f.head_dim = static_cast<int32_t>(c.head_dim);
    f.seqlen_q = static_cast<int32_t>(c.seqlen_q), f.seqlen_kv = static_cast<int32_t>(c.seqlen_kv);
    f.dtype = c.dtype == cuir::DType::kBF16 ? 0 : 1;
    f.softmax_scale = static_cast<float>(c.scale());
    std::vector<torch::Tensor> keep;  // the buffers' device copies, alive until the call is done
    std::map<std::string, torch::Tensor> grads;
    for (size_t i = 0; i < buffer_order_.size(); ++i) {
      const torch::Tensor t = dev(in.buffers.at(buffer_order_[i]));
      keep.push_back(t);
      f.buffers[i].data = t.data_ptr();
      f.buffers[i].dtype = static_cast<int32_t>(*spec::TensorDTypeOf(t.scalar_type()));
      f.buffers[i].rank = static_cast<int32_t>(t.dim());
      for (int64_t d = 0; d < t.dim(); ++d) {
        f.buffers[i].sizes[d] = t.size(d);
        f.buffers[i].strides[d] = t.stride(d);
      }
      if (std::find(learn.begin(), learn.end(), buffer_order_[i]) != learn.end()) {
        // The fast mode adds into what the caller zeroed; the deterministic one writes it whole.
        const auto opts = torch::TensorOptions().device(cuda);
        torch::Tensor g = deterministic ? torch::full(t.sizes(), NAN, opts) : torch::zeros(t.sizes(), opts);
        p.buffer_grads[i] = g.data_ptr<float>();
        grads[buffer_order_[i]] = g;
      }
    }
    p.deterministic = deterministic ? 1 : 0;
    p.d_o = d_o.data_ptr();
    SetStrides(d_o, &p.do_batch_stride, &p.do_head_stride, &p.do_row_stride);
    p.dq = dq.data_ptr(), p.dk = dk.data_ptr(), p.dv = dv.data_ptr();
    SetStrides(dq, &p.dq_batch_stride, &p.dq_head_stride, &p.dq_row_stride);
    SetStrides(dk, &p.dk_batch_stride, &p.dk_head_stride, &p.dk_row_stride);
    SetStrides(dv, &p.dv_batch_stride, &p.dv_head_stride, &p.dv_row_stride);
    const torch::Tensor plan_scratch =
        torch::zeros({256}, torch::TensorOptions().dtype(torch::kUInt8).device(cuda));
    torch::cuda::synchronize();
    auto plan = module_->Plan(p, reinterpret_cast<CUdeviceptr>(plan_scratch.data_ptr()));
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) return {};
    const torch::Tensor ws =
        torch::empty({static_cast<int64_t>(plan->workspace_bytes)},
                     torch::TensorOptions().dtype(torch::kUInt8).device(cuda));
    p.workspace = ws.data_ptr();
    p.workspace_size = static_cast<size_t>(ws.numel());
    const absl::Status launched = module_->Enqueue(p, *plan, nullptr);
    EXPECT_TRUE(launched.ok()) << launched;
    torch::cuda::synchronize();
    spec::AttentionGrads out{dq.cpu(), dk.cpu(), dv.cpu(), {}, {}};
    for (auto& [name, g] : grads) out.buffers[name] = g.cpu();
    return out;
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
  // Each expert the GPU runs, at the head dims its backward serves, GQA and MHA, bf16 and fp16.
  struct Case {
    const char* expert;
    lower::Arch arch;
    int hq, hkv;
    cuir::DType dtype;
    int d;
  };
  for (const Case& k : {Case{"fa2_sm80", lower::Arch::kSm80, 4, 2, cuir::DType::kBF16, 64},
                        Case{"fa2_sm80", lower::Arch::kSm80, 2, 2, cuir::DType::kFP16, 128},
                        Case{"fa3_sm90", lower::Arch::kSm90, 4, 2, cuir::DType::kBF16, 128},
                        Case{"fa3_sm90", lower::Arch::kSm90, 4, 2, cuir::DType::kBF16, 64},
                        Case{"fa3_sm90", lower::Arch::kSm90, 2, 2, cuir::DType::kFP16, 128}}) {
    if (static_cast<int>(k.arch) > static_cast<int>(arch_)) continue;
    SCOPED_TRACE(k.expert);
    const int hq = k.hq, hkv = k.hkv, d = k.d;
    const cuir::DType dtype = k.dtype;
    cuir::AttentionConfig c;
    c.batch = 2, c.heads_q = hq, c.heads_kv = hkv, c.head_dim = d, c.dtype = dtype;
    c.seqlen_q = c.seqlen_kv = 300;
    auto base = lower::LoadExpert(k.expert, /*backward=*/true);
    ASSERT_TRUE(base.ok()) << base.status();
    transfer::VariantSpec v = pipeline::ToVariantSpec(s);
    v.grad_buffers = pipeline::LearnableBuffers(s);
    auto t = transfer::Transfer(base->base, v, c);
    ASSERT_TRUE(t.ok()) << t.status();
    Build(t->program, c);
    if (HasFatalFailure()) return;
    uint64_t seed = 20261129;
    for (const pipeline::VerifyShape& shape :
         std::vector<pipeline::VerifyShape>{{2, 300, 300}, {1, 257, 390}, {1, 390, 257}}) {
      SCOPED_TRACE(absl::StrCat(g.name, " ", pipeline::ShapeName(shape), " d", d));
      cuir::AttentionConfig at;
      auto in = pipeline::InputsAtShape(s, c, shape, g.buffers, ++seed, &at);
      ASSERT_TRUE(in.ok()) << in.status();
      auto fwd = spec::RunOracle(s, at, *in);
      ASSERT_TRUE(fwd.ok()) << fwd.status();
      torch::manual_seed(static_cast<int64_t>(seed));
      const torch::ScalarType type = in->q.scalar_type();
      const spec::BackwardInputs b{fwd->o.to(type), fwd->lse.to(torch::kFloat),
                                   torch::randn(in->q.sizes()).to(type)};
      auto want = spec::RunBackwardOracle(s, at, *in, b.grad_o,
                                          {v.grad_buffers.begin(), v.grad_buffers.end()});
      ASSERT_TRUE(want.ok()) << want.status();
      // The interpreter's run gives the buffers' error scales (and checks the program too).
      auto cpu = interp::InterpretBackward(t->program, at, *in, b);
      ASSERT_TRUE(cpu.ok()) << cpu.status();
      // Fast mode (float atomics), then deterministic mode twice: the oracle's gradients in
      // both, and the same bits on both deterministic runs.
      std::vector<spec::AttentionGrads> runs;
      for (const bool deterministic : {false, true, true}) {
        SCOPED_TRACE(deterministic ? "deterministic" : "fast");
        runs.push_back(RunOnGpu(at, *in, b, v.grad_buffers, deterministic));
        const pipeline::BackwardShapeResult r = pipeline::CompareGrads(
            runs.back(), *want, cpu->buffer_masses, v.grad_buffers, at.dtype);
        for (const pipeline::GradResult& gr : r.grads) {
          EXPECT_TRUE(gr.error.violations == 0 && gr.error.unwritten == 0)
              << pipeline::DescribeError(gr.name, gr.error);
        }
      }
      const spec::AttentionGrads &first = runs[1], &second = runs[2];
      EXPECT_TRUE(torch::equal(first.dq, second.dq) && torch::equal(first.dk, second.dk) &&
                  torch::equal(first.dv, second.dv));
      for (const auto& [name, grad] : first.buffers) {
        EXPECT_TRUE(torch::equal(grad, second.buffers.at(name))) << name;
      }
    }
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
