// The float64 reference: the user's compiled spec functions applied to dense score matrices.
#include "cuir/spec/oracle.h"

#include <limits>

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "cuir/spec/internal.h"

namespace cubridge::spec {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Score elements per chunk: a few float64 temporaries of this size stay around 0.5 GiB.
constexpr int64_t kChunkElements = int64_t{1} << 24;

struct Chunk {
  int64_t b0, nb, h0, nh;
};

absl::Status CheckShape(const char* name, const torch::Tensor& t,
                        std::vector<int64_t> want) {
  if (t.defined() && t.sizes().vec() == want) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "oracle: ", name, " has shape ", t.defined() ? c10::str(t.sizes()) : "<undefined>",
      " but the config needs ", c10::str(c10::IntArrayRef(want))));
}

absl::Status CheckInputs(const cuir::AttentionConfig& c, const AttentionInputs& in) {
  if (auto s = cuir::ValidateConfig(c); !s.ok()) return s;
  if (auto s = CheckShape("q", in.q, {c.batch, c.heads_q, c.seqlen_q, c.head_dim}); !s.ok()) {
    return s;
  }
  for (const auto& [name, t] : {std::pair{"k", in.k}, {"v", in.v}}) {
    if (auto s = CheckShape(name, t, {c.batch, c.heads_kv, c.seqlen_kv, c.head_dim}); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// The captured tensors on `device`. Integer and bool tensors keep their dtypes (the spec's
// integer arithmetic is exact in them); floating ones are read at the oracle's precision, since
// the kernels widen a bf16/fp16/fp32 value when they load it and compute with it in fp32, as
// torch.compile'd FlexAttention does. Eager PyTorch would instead round every product of a
// bf16 tensor to bf16 (`slopes[h] * (kv_idx - q_idx)` off by up to 2^-9 relative), which no
// kernel of the variant's users computes.
std::map<std::string, torch::Tensor> BuffersOn(const AttentionInputs& in, torch::Device device,
                                               torch::ScalarType floating) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, t] : in.buffers) {
    out[name] = t.is_floating_point() ? t.to(device, floating) : t.to(device);
  }
  return out;
}

// The mask_mod result with 4 dims, q/kv dims full, b/h dims 1 where it does not depend on them.
absl::StatusOr<torch::Tensor> ChunkMask(const Spec& spec, const cuir::AttentionConfig& c,
                                        const std::map<std::string, torch::Tensor>& buffers,
                                        const Chunk& k, torch::Device device) {
  if (spec.mask == nullptr) {
    return torch::ones({1, 1, c.seqlen_q, c.seqlen_kv},
                       torch::TensorOptions().dtype(torch::kBool).device(device));
  }
  const auto grid =
      internal::MakeIndexGrid(k.b0, k.nb, k.h0, k.nh, c.seqlen_q, c.seqlen_kv, device);
  auto r = internal::CallSpecFunction(spec, /*is_score=*/false, grid, {}, buffers);
  if (!r.ok()) return r.status();
  if (r->scalar_type() != torch::kBool) {
    return absl::InvalidArgumentError(absl::StrCat(spec.path, ": mask_mod returned ",
                                                   c10::toString(r->scalar_type()),
                                                   " values; a mask must be bool"));
  }
  std::vector<int64_t> shape(4 - std::min<int64_t>(r->dim(), 4), 1);
  for (int64_t s : r->sizes()) shape.push_back(s);
  const torch::Tensor m = r->reshape(shape);
  return m.expand({m.size(0), m.size(1), c.seqlen_q, c.seqlen_kv});
}

// Attention for one chunk of batches and query heads: its O [nb, nh, Sq, D] and LSE
// [nb, nh, Sq, 1], from q / k / v already in the oracle's dtype and device. Differentiable
// wherever the inputs require grad (RunBackwardOracle): the row max is only a shift, so it is
// taken without a gradient, and a fully masked row (l = 0, every p = 0) divides by 1 instead of
// 0, which gives the same O = 0 without a NaN in the backward pass.
struct ChunkOut {
  torch::Tensor o, lse;
};
absl::StatusOr<ChunkOut> ChunkForward(const Spec& spec, const cuir::AttentionConfig& c,
                                      const torch::Tensor& q_all, const torch::Tensor& k_all,
                                      const torch::Tensor& v_all,
                                      const std::map<std::string, torch::Tensor>& buffers,
                                      const Chunk& k, const OracleOptions& opt) {
  using torch::indexing::Slice;
  const int64_t group = c.heads_q / c.heads_kv;
  const auto kv_heads =
      torch::arange(k.h0, k.h0 + k.nh, torch::TensorOptions().dtype(torch::kInt64).device(opt.device))
          .div(group, "floor");
  const auto rows = Slice(k.b0, k.b0 + k.nb);
  const auto q = q_all.index({rows, Slice(k.h0, k.h0 + k.nh)});
  const auto kk = k_all.index({rows}).index_select(1, kv_heads);
  const auto v = v_all.index({rows}).index_select(1, kv_heads);

  torch::Tensor s = torch::matmul(q, kk.transpose(-1, -2)) * c.scale();
  if (spec.score != nullptr) {
    const auto grid =
        internal::MakeIndexGrid(k.b0, k.nb, k.h0, k.nh, c.seqlen_q, c.seqlen_kv, opt.device);
    auto r = internal::CallSpecFunction(spec, /*is_score=*/true, grid, s, buffers);
    if (!r.ok()) return r.status();
    s = r->to(opt.dtype).expand(s.sizes());
  }
  auto mask = ChunkMask(spec, c, buffers, k, opt.device);
  if (!mask.ok()) return mask.status();
  s = s.masked_fill(mask->logical_not(), -kInf);

  // Fully masked rows (max = -inf) get l = 0, then O = 0 and LSE = -inf.
  const auto row_max = std::get<0>(s.detach().max(-1, /*keepdim=*/true));
  const auto shift = torch::where(torch::isfinite(row_max), row_max, torch::zeros_like(row_max));
  const auto p = torch::exp(s - shift);
  const auto l = p.sum(-1, /*keepdim=*/true);
  const auto scalar = torch::TensorOptions().dtype(opt.dtype).device(opt.device);
  const auto kept = l > 0;
  const auto l_or_one = torch::where(kept, l, torch::ones({}, scalar));
  return ChunkOut{torch::matmul(p, v) / l_or_one,
                  torch::where(kept, shift + torch::log(l_or_one), torch::full({}, -kInf, scalar))};
}

// The chunk's place in [batch, heads_q, ...] tensors.
std::vector<torch::indexing::TensorIndex> ChunkIndex(const Chunk& c) {
  using torch::indexing::Slice;
  return {Slice(c.b0, c.b0 + c.nb), Slice(c.h0, c.h0 + c.nh)};
}

std::string BufferNames(const std::map<std::string, torch::Tensor>& buffers) {
  std::string out;
  for (const auto& [name, t] : buffers) absl::StrAppend(&out, out.empty() ? "" : ", ", name);
  return out;
}

std::vector<Chunk> Chunks(const cuir::AttentionConfig& c) {
  const int64_t per_head = std::max<int64_t>(1, c.seqlen_q * c.seqlen_kv);
  const int64_t nh = std::clamp<int64_t>(kChunkElements / per_head, 1, c.heads_q);
  const int64_t nb =
      nh < c.heads_q ? 1 : std::clamp<int64_t>(kChunkElements / (per_head * c.heads_q), 1, c.batch);
  std::vector<Chunk> out;
  for (int64_t b0 = 0; b0 < c.batch; b0 += nb) {
    for (int64_t h0 = 0; h0 < c.heads_q; h0 += nh) {
      out.push_back({b0, std::min(nb, c.batch - b0), h0, std::min(nh, c.heads_q - h0)});
    }
  }
  return out;
}

// A reference spec: the user's function on the whole problem at once (it owns the computation,
// so there is nothing to chunk), q/k/v in the oracle's dtype and device.
absl::StatusOr<AttentionOutputs> RunReference(const Spec& spec, const cuir::AttentionConfig& c,
                                              const AttentionInputs& in,
                                              const OracleOptions& opt) {
  const auto to = [&](const torch::Tensor& t) { return t.to(opt.device, opt.dtype); };
  auto r = internal::CallReference(spec, to(in.q), to(in.k), to(in.v), c.scale());
  if (!r.ok()) return r.status();
  AttentionOutputs out;
  out.o = r->o.to(opt.device, opt.dtype);
  if (r->lse.defined()) out.lse = r->lse.to(opt.device, opt.dtype);
  return out;
}

}  // namespace

absl::StatusOr<AttentionOutputs> RunOracle(const Spec& spec, const cuir::AttentionConfig& config,
                                           const AttentionInputs& inputs,
                                           const OracleOptions& options) {
  if (auto s = CheckInputs(config, inputs); !s.ok()) return s;
  torch::NoGradGuard no_grad;
  if (spec.has_reference) return RunReference(spec, config, inputs, options);
  const auto buffers = BuffersOn(inputs, options.device, options.dtype);
  const auto opt = torch::TensorOptions().dtype(options.dtype).device(options.device);
  const auto q = inputs.q.to(options.device, options.dtype);
  const auto k = inputs.k.to(options.device, options.dtype);
  const auto v = inputs.v.to(options.device, options.dtype);
  AttentionOutputs out;
  out.o = torch::zeros({config.batch, config.heads_q, config.seqlen_q, config.head_dim}, opt);
  out.lse = torch::zeros({config.batch, config.heads_q, config.seqlen_q}, opt);
  for (const Chunk& c : Chunks(config)) {
    auto part = ChunkForward(spec, config, q, k, v, buffers, c, options);
    if (!part.ok()) return part.status();
    const auto at = ChunkIndex(c);
    out.o.index_put_(at, part->o);
    out.lse.index_put_(at, part->lse.squeeze(-1));
  }
  return out;
}

absl::StatusOr<AttentionGrads> RunBackwardOracle(const Spec& spec,
                                                 const cuir::AttentionConfig& config,
                                                 const AttentionInputs& inputs,
                                                 const torch::Tensor& grad_o,
                                                 const std::set<std::string>& grad_buffers,
                                                 const OracleOptions& options) {
  if (auto s = CheckInputs(config, inputs); !s.ok()) return s;
  if (auto s = CheckShape("grad_o", grad_o,
                          {config.batch, config.heads_q, config.seqlen_q, config.head_dim});
      !s.ok()) {
    return s;
  }
  auto buffers = BuffersOn(inputs, options.device, options.dtype);
  for (const std::string& name : grad_buffers) {
    const auto it = buffers.find(name);
    if (it == buffers.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "backward oracle: no captured tensor named `", name, "` to differentiate (",
          spec.path, " captures ", buffers.empty() ? "none" : "", BufferNames(buffers), ")"));
    }
    if (!it->second.is_floating_point()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "backward oracle: captured tensor `", name, "` is ",
          c10::toString(inputs.buffers.at(name).scalar_type()),
          ": only floating tensors have gradients; leave it out of the differentiated buffers"));
    }
    it->second = it->second.detach().requires_grad_(true);
  }
  torch::AutoGradMode grad_mode(true);
  const auto leaf = [&](const torch::Tensor& t) {
    return t.to(options.device, options.dtype).detach().requires_grad_(true);
  };
  const torch::Tensor q = leaf(inputs.q), k = leaf(inputs.k), v = leaf(inputs.v);
  const torch::Tensor dout = grad_o.to(options.device, options.dtype);
  if (spec.has_reference) {  // it captures nothing: a name in grad_buffers was refused above
    auto r = internal::CallReference(spec, q, k, v, config.scale());
    if (!r.ok()) return r.status();
    torch::autograd::backward({r->o.to(options.dtype)}, {dout});
  } else {
    // Chunk by chunk, as the forward runs: each chunk's backward adds into the leaves' grads
    // (dK and dV of a kv head gather every query head of its group, in any chunk).
    for (const Chunk& c : Chunks(config)) {
      auto part = ChunkForward(spec, config, q, k, v, buffers, c, options);
      if (!part.ok()) return part.status();
      torch::autograd::backward({part->o}, {dout.index(ChunkIndex(c))});
    }
  }
  const auto grad_of = [](const torch::Tensor& t) {
    return t.grad().defined() ? t.grad() : torch::zeros_like(t);
  };
  AttentionGrads out{grad_of(q), grad_of(k), grad_of(v), {}};
  for (const std::string& name : grad_buffers) out.buffers[name] = grad_of(buffers.at(name));
  return out;
}

absl::StatusOr<torch::Tensor> DenseMask(const Spec& spec, const cuir::AttentionConfig& config,
                                        const AttentionInputs& inputs, torch::Device device) {
  if (auto s = cuir::ValidateConfig(config); !s.ok()) return s;
  torch::NoGradGuard no_grad;
  auto m = ChunkMask(spec, config, BuffersOn(inputs, device, torch::kFloat64),
                     {0, config.batch, 0, config.heads_q}, device);
  if (!m.ok()) return m.status();
  return m->contiguous();
}

}  // namespace cubridge::spec
