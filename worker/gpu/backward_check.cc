#include "worker/gpu/backward_check.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cubridge::gpu {
namespace {

void SetStrides(const torch::Tensor& t, int64_t* b, int64_t* h, int64_t* r) {
  *b = t.stride(0), *h = t.stride(1), *r = t.stride(2);
}

bool SameBits(const spec::AttentionGrads& a, const spec::AttentionGrads& b) {
  if (!torch::equal(a.dq, b.dq) || !torch::equal(a.dk, b.dk) || !torch::equal(a.dv, b.dv)) {
    return false;
  }
  for (const auto& [name, grad] : a.buffers) {
    auto it = b.buffers.find(name);
    if (it == b.buffers.end() || !torch::equal(grad, it->second)) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<BwdParams> MakeBackwardParams(const cuir::AttentionConfig& c,
                                             const BackwardCallTensors& t, bool deterministic) {
  BwdParams p{};
  cubridge_attn_fwd_params& f = p.fwd;
  f.q = t.q.data_ptr(), f.k = t.k.data_ptr(), f.v = t.v.data_ptr(), f.o = t.o.data_ptr();
  f.lse = t.lse.data_ptr<float>();
  SetStrides(t.q, &f.q_batch_stride, &f.q_head_stride, &f.q_row_stride);
  SetStrides(t.k, &f.k_batch_stride, &f.k_head_stride, &f.k_row_stride);
  SetStrides(t.v, &f.v_batch_stride, &f.v_head_stride, &f.v_row_stride);
  SetStrides(t.o, &f.o_batch_stride, &f.o_head_stride, &f.o_row_stride);
  f.lse_batch_stride = t.lse.stride(0), f.lse_head_stride = t.lse.stride(1);
  f.batch = static_cast<int32_t>(c.batch), f.heads_q = static_cast<int32_t>(c.heads_q);
  f.heads_kv = static_cast<int32_t>(c.heads_kv), f.head_dim = static_cast<int32_t>(c.head_dim);
  f.seqlen_q = static_cast<int32_t>(c.seqlen_q), f.seqlen_kv = static_cast<int32_t>(c.seqlen_kv);
  f.dtype = c.dtype == cuir::DType::kBF16 ? 0 : 1;
  f.softmax_scale = static_cast<float>(c.scale());
  if (t.buffers.size() > CUBRIDGE_MAX_BUFFERS) {
    return absl::InvalidArgumentError(absl::StrCat("the kernel reads ", t.buffers.size(),
                                                   " buffers; the ABI has ", CUBRIDGE_MAX_BUFFERS));
  }
  for (size_t i = 0; i < t.buffers.size(); ++i) {
    const torch::Tensor& b = t.buffers[i];
    auto dtype = spec::TensorDTypeOf(b.scalar_type());
    if (!dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffer slot ", i, " has a dtype the ABI does not carry"));
    }
    f.buffers[i].data = b.data_ptr();
    f.buffers[i].dtype = static_cast<int32_t>(*dtype);
    f.buffers[i].rank = static_cast<int32_t>(b.dim());
    for (int64_t d = 0; d < b.dim() && d < CUBRIDGE_MAX_BUFFER_RANK; ++d) {
      f.buffers[i].sizes[d] = b.size(d);
      f.buffers[i].strides[d] = b.stride(d);
    }
    if (i < t.buffer_grads.size() && t.buffer_grads[i].defined()) {
      p.buffer_grads[i] = t.buffer_grads[i].data_ptr<float>();
    }
  }
  p.deterministic = deterministic ? 1 : 0;
  p.d_o = t.d_o.data_ptr();
  SetStrides(t.d_o, &p.do_batch_stride, &p.do_head_stride, &p.do_row_stride);
  p.dq = t.dq.data_ptr(), p.dk = t.dk.data_ptr(), p.dv = t.dv.data_ptr();
  SetStrides(t.dq, &p.dq_batch_stride, &p.dq_head_stride, &p.dq_row_stride);
  SetStrides(t.dk, &p.dk_batch_stride, &p.dk_head_stride, &p.dk_row_stride);
  SetStrides(t.dv, &p.dv_batch_stride, &p.dv_head_stride, &p.dv_row_stride);
  if (t.workspace.defined()) {
    p.workspace = t.workspace.data_ptr();
    p.workspace_size = static_cast<size_t>(t.workspace.numel());
  }
  return p;
}

absl::StatusOr<spec::AttentionGrads> RunBackwardOnGpu(const BackwardModule& m,
                                                      const cuir::AttentionConfig& c,
                                                      const spec::AttentionInputs& in,
                                                      const spec::BackwardInputs& b,
                                                      const std::vector<std::string>& buffer_order,
                                                      const std::vector<std::string>& learn,
                                                      bool deterministic) {
  const torch::Device cuda(torch::kCUDA);
  auto dev = [&](const torch::Tensor& t) { return t.to(cuda).contiguous(); };
  BackwardCallTensors t;
  t.q = dev(in.q), t.k = dev(in.k), t.v = dev(in.v), t.o = dev(b.o);
  t.lse = dev(b.lse.to(torch::kFloat)), t.d_o = dev(b.grad_o);
  t.dq = torch::full_like(t.q, NAN), t.dk = torch::full_like(t.k, NAN);
  t.dv = torch::full_like(t.v, NAN);
  std::map<std::string, torch::Tensor> grads;
  for (const std::string& name : buffer_order) {
    auto it = in.buffers.find(name);
    if (it == in.buffers.end()) {
      return absl::InvalidArgumentError(absl::StrCat("no input for buffer `", name, "`"));
    }
    t.buffers.push_back(dev(it->second));
    torch::Tensor g;
    if (std::find(learn.begin(), learn.end(), name) != learn.end()) {
      // The fast mode adds into what the caller zeroed; the deterministic one writes it whole.
      const auto opts = torch::TensorOptions().device(cuda);
      g = deterministic ? torch::full(it->second.sizes(), NAN, opts)
                        : torch::zeros(it->second.sizes(), opts);
      grads[name] = g;
    }
    t.buffer_grads.push_back(g);
  }
  auto p = MakeBackwardParams(c, t, deterministic);
  if (!p.ok()) return p.status();
  const torch::Tensor plan_scratch =
      torch::zeros({256}, torch::TensorOptions().dtype(torch::kUInt8).device(cuda));
  torch::cuda::synchronize();
  auto plan = m.Plan(*p, reinterpret_cast<CUdeviceptr>(plan_scratch.data_ptr()));
  if (!plan.ok()) return plan.status();
  t.workspace = torch::empty({static_cast<int64_t>(plan->workspace_bytes)},
                             torch::TensorOptions().dtype(torch::kUInt8).device(cuda));
  p->workspace = t.workspace.data_ptr();
  p->workspace_size = static_cast<size_t>(t.workspace.numel());
  if (auto s = m.Enqueue(*p, *plan, nullptr); !s.ok()) return s;
  torch::cuda::synchronize();
  spec::AttentionGrads out{t.dq.cpu(), t.dk.cpu(), t.dv.cpu(), {}, {}};
  for (auto& [name, g] : grads) out.buffers[name] = g.cpu();
  return out;
}

pipeline::BackwardKernelRun FastAndDeterministicRuns(const BackwardModule& m,
                                                     std::vector<std::string> buffer_order,
                                                     std::vector<std::string> learn) {
  return [&m, buffer_order = std::move(buffer_order), learn = std::move(learn)](
             const cuir::AttentionConfig& c, const spec::AttentionInputs& in,
             const spec::BackwardInputs& b) -> absl::StatusOr<pipeline::KernelGrads> {
    pipeline::KernelGrads out;
    for (const auto& [name, deterministic] :
         {std::pair{"fast", false}, std::pair{"deterministic", true},
          std::pair{"deterministic, again", true}}) {
      auto grads = RunBackwardOnGpu(m, c, in, b, buffer_order, learn, deterministic);
      if (!grads.ok()) return grads.status();
      out.runs.emplace_back(name, *std::move(grads));
    }
    out.repeatable = SameBits(out.runs[1].second, out.runs[2].second);
    return out;
  };
}

}  // namespace cubridge::gpu
