// Verification: every shape gets fresh random inputs, outputs poisoned with NaN before the call
// and every element compared with the spec's oracle evaluated in float32 on the same GPU. Some
// shapes pass O as a view of wider rows, whose padding must stay untouched.
// Profiling: CUDA events around each call (tables and attention, as the shipped launcher does),
// median of many after a warm-up, rotating input sets so repeated calls do not hit in L2;
// throughput counts kept (unmasked) score elements only.
#include "worker/gpu/device_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cuir/files/files.h"
#include "cuir/interp/interp.h"
#include "cuir/spec/oracle.h"
#include "cuir/spec/tensors.h"
#include "worker/gpu/module.h"

namespace cubridge::gpu {
namespace {

using pipeline::VerifyShape;

const torch::Device kCuda(torch::kCUDA, 0);

torch::ScalarType TorchDtype(cuir::DType d) {
  return d == cuir::DType::kBF16 ? torch::kBFloat16 : torch::kHalf;
}

CUdeviceptr Ptr(const torch::Tensor& t) {
  return reinterpret_cast<CUdeviceptr>(t.data_ptr());
}

// Device tensors of one call; `buffers` are int32 in ABI slot order.
struct CallTensors {
  torch::Tensor q, k, v, o, lse;
  std::vector<torch::Tensor> buffers;
  torch::Tensor workspace;
};

AttnParams MakeParams(const cuir::AttentionConfig& c, const CallTensors& t) {
  AttnParams p{};
  p.q = t.q.data_ptr();
  p.k = t.k.data_ptr();
  p.v = t.v.data_ptr();
  p.o = t.o.data_ptr();
  p.lse = t.lse.data_ptr<float>();
  auto strides = [](const torch::Tensor& x, int64_t* b, int64_t* h, int64_t* r) {
    *b = x.stride(0), *h = x.stride(1), *r = x.stride(2);
  };
  strides(t.q, &p.q_batch_stride, &p.q_head_stride, &p.q_row_stride);
  strides(t.k, &p.k_batch_stride, &p.k_head_stride, &p.k_row_stride);
  strides(t.v, &p.v_batch_stride, &p.v_head_stride, &p.v_row_stride);
  strides(t.o, &p.o_batch_stride, &p.o_head_stride, &p.o_row_stride);
  p.lse_batch_stride = t.lse.stride(0);
  p.lse_head_stride = t.lse.stride(1);
  p.batch = static_cast<int32_t>(c.batch);
  p.heads_q = static_cast<int32_t>(c.heads_q);
  p.heads_kv = static_cast<int32_t>(c.heads_kv);
  p.head_dim = static_cast<int32_t>(c.head_dim);
  p.seqlen_q = static_cast<int32_t>(c.seqlen_q);
  p.seqlen_kv = static_cast<int32_t>(c.seqlen_kv);
  p.dtype = c.dtype == cuir::DType::kBF16 ? 0 : 1;
  p.softmax_scale = static_cast<float>(c.scale());
  for (size_t i = 0; i < t.buffers.size() && i < kMaxBuffers; ++i) {
    const torch::Tensor& b = t.buffers[i];
    p.buffers[i].data = b.data_ptr();
    p.buffers[i].dtype = static_cast<int32_t>(*spec::TensorDTypeOf(b.scalar_type()));
    p.buffers[i].rank = static_cast<int32_t>(b.dim());
    for (int64_t d = 0; d < b.dim() && d < CUBRIDGE_MAX_BUFFER_RANK; ++d) {
      p.buffers[i].sizes[d] = b.size(d);
      p.buffers[i].strides[d] = b.stride(d);
    }
  }
  if (t.workspace.defined()) {
    p.workspace = t.workspace.data_ptr();
    p.workspace_size = static_cast<size_t>(t.workspace.numel());
  }
  return p;
}

absl::StatusOr<std::vector<torch::Tensor>> DeviceBuffers(const RunRequest& r,
                                                         const spec::AttentionInputs& in) {
  std::vector<torch::Tensor> out;
  for (const std::string& name : r.buffer_order) {
    auto it = in.buffers.find(name);
    if (it == in.buffers.end()) {
      return absl::InvalidArgumentError(absl::StrCat("the spec has no buffer `", name, "`"));
    }
    out.push_back(it->second.to(kCuda).contiguous());
  }
  return out;
}

// The plan for these tensors (and the workspace it asks for, allocated into `t`).
absl::StatusOr<LaunchPlan> PlanCall(const KernelModule& m, const cuir::AttentionConfig& c,
                                    CallTensors& t, const torch::Tensor& scratch) {
  auto plan = m.Plan(MakeParams(c, t), Ptr(scratch));
  if (!plan.ok()) return plan.status();
  // The tables' bytes, and those with which the kernel splits its last wave (optional, taken).
  const uint64_t bytes = plan->workspace_bytes + plan->split_workspace_bytes;
  if (bytes > 0 && (!t.workspace.defined() || static_cast<uint64_t>(t.workspace.numel()) < bytes)) {
    t.workspace = torch::empty({static_cast<int64_t>(bytes)},
                               torch::TensorOptions().dtype(torch::kUInt8).device(kCuda));
  }
  return plan;
}

absl::Status Synchronize(const char* what) {
  auto d = Driver::Get();
  if (!d.ok()) return d.status();
  return (*d)->Check((*d)->CtxSynchronize(), what);
}

// The expected outputs: the oracle in float32 on the GPU, or the interpreter (CPU, kernel
// numerics) running the reference program.
absl::StatusOr<spec::AttentionOutputs> Reference(const spec::Spec& spec,
                                                 const cuir::Program* reference,
                                                 const cuir::AttentionConfig& c,
                                                 const spec::AttentionInputs& in) {
  if (reference == nullptr) return spec::RunOracle(spec, c, in, {kCuda, torch::kFloat32});
  spec::AttentionInputs host = in;
  host.q = in.q.cpu(), host.k = in.k.cpu(), host.v = in.v.cpu();
  return interp::Interpret(*reference, c, host);
}

// `pad_o`: O is a view of rows head_dim + 2 wide (pipeline::PaddedPoison), not 16-byte aligned.
absl::StatusOr<pipeline::ShapeResult> VerifyShapeOnGpu(const RunRequest& r, const spec::Spec& spec,
                                                       const cuir::Program* reference,
                                                       const KernelModule& m, const VerifyShape& shape,
                                                       uint64_t seed, bool pad_o,
                                                       const torch::Tensor& scratch) {
  const auto start = std::chrono::steady_clock::now();
  cuir::AttentionConfig c = r.config;
  c.batch = shape.batch;
  c.seqlen_q = shape.seqlen_q;
  c.seqlen_kv = shape.seqlen_kv;
  c.softmax_scale = r.config.scale();
  // The job's buffer values belong to the job's own shape; other shapes get random values (as on
  // the CPU verifier).
  auto inputs = spec::MakeInputs(spec, c, spec::SourcesForShape(spec, r.buffers, r.config, c),
                                 seed);
  if (!inputs.ok()) return inputs.status();
  inputs->q = inputs->q.to(kCuda);
  inputs->k = inputs->k.to(kCuda);
  inputs->v = inputs->v.to(kCuda);
  torch::Tensor padded = pad_o ? pipeline::PaddedPoison(inputs->q) : torch::Tensor();
  const auto contiguous_o = [&] { return torch::full_like(inputs->q, std::nan("")); };
  CallTensors t{inputs->q, inputs->k, inputs->v,
                padded.defined() ? padded.narrow(3, 0, c.head_dim) : contiguous_o(),
                torch::full({c.batch, c.heads_q, c.seqlen_q}, std::nan(""),
                            torch::TensorOptions().dtype(torch::kFloat32).device(kCuda)),
                {}, {}};
  auto bufs = DeviceBuffers(r, *inputs);
  if (!bufs.ok()) return bufs.status();
  t.buffers = *bufs;
  auto plan = PlanCall(m, c, t, scratch);
  // The launcher ABI lets a kernel refuse a layout (fa2_sm80 takes 16-byte aligned rows only), so
  // a refused padded O is no failure: the shape is checked with a contiguous O and says so. Any
  // other error, or a refusal of that one too, fails as before.
  const bool refused = padded.defined() && absl::IsInvalidArgument(plan.status());
  if (refused) {
    padded = torch::Tensor();
    t.o = contiguous_o();
    plan = PlanCall(m, c, t, scratch);
  }
  if (!plan.ok()) return plan.status();
  if (auto s = m.Enqueue(MakeParams(c, t), *plan, nullptr); !s.ok()) return s;
  if (auto s = Synchronize("run the candidate"); !s.ok()) return s;

  auto want = Reference(spec, reference, c, *inputs);
  if (!want.ok()) return want.status();
  const pipeline::Tolerance tol = pipeline::ToleranceFor(c.dtype, r.verify);
  pipeline::ShapeResult res;
  res.shape = shape;
  res.o_atol = tol.o_atol, res.o_rtol = tol.o_rtol;
  res.lse_atol = tol.lse_atol, res.lse_rtol = tol.lse_rtol;
  // A reference spec's oracle may give O only (LSE undefined): CompareShape then skips LSE and
  // the report says so.
  pipeline::CompareShape(t.o.cpu(), t.lse.cpu(), want->o.cpu().to(torch::kFloat64),
                         want->lse.defined() ? want->lse.cpu().to(torch::kFloat64) : torch::Tensor(),
                         &res);
  res.o_padding_refused = refused;
  res.combined = plan->combine_grid > 0;
  if (padded.defined()) pipeline::CheckOPadding(padded, c.head_dim, &res);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return res;
}

// Input sets whose total size is at least 3x the L2 cache, so a timed call never finds the
// previous call's inputs cached (one set when one set alone is that large).
int InputSets(int64_t bytes_per_set, int64_t l2_bytes) {
  if (bytes_per_set <= 0) return 1;
  return static_cast<int>(std::clamp<int64_t>((3 * l2_bytes + bytes_per_set - 1) / bytes_per_set, 1, 32));
}

// Kept score elements over all (batch, head) pairs: the dense mask summed, broadcast dims scaled.
absl::StatusOr<double> KeptElements(const spec::Spec& spec, const cuir::AttentionConfig& c,
                                    const spec::AttentionInputs& in) {
  auto mask = spec::DenseMask(spec, c, in, kCuda);
  if (!mask.ok()) return mask.status();
  const double per = mask->sum().item<double>();
  return per * static_cast<double>(c.batch / mask->size(0)) *
         static_cast<double>(c.heads_q / mask->size(1));
}

absl::StatusOr<nlohmann::json> Profile(const RunRequest& r, const spec::Spec& spec,
                                       const KernelModule& m, const DeviceInfo& device,
                                       const torch::Tensor& scratch) {
  const cuir::AttentionConfig& c = r.config;
  // Buffers from a one-head, small-head-dim twin of the job: same lengths and values, no big
  // random q/k/v on the host.
  cuir::AttentionConfig twin = c;
  twin.heads_q = twin.heads_kv = 1;
  twin.head_dim = 64;
  auto small = spec::MakeInputs(spec, twin, r.buffers, r.seed);
  if (!small.ok()) return small.status();
  auto bufs = DeviceBuffers(r, *small);
  if (!bufs.ok()) return bufs.status();
  auto kept = KeptElements(spec, c, *small);
  if (!kept.ok()) return kept.status();

  const auto opt = torch::TensorOptions().dtype(TorchDtype(c.dtype)).device(kCuda);
  const int64_t elem = 2;
  const int64_t set_bytes = elem * c.head_dim *
                            (2 * c.batch * c.heads_q * c.seqlen_q + 2 * c.batch * c.heads_kv * c.seqlen_kv);
  const int sets = InputSets(set_bytes, device.l2_bytes);
  std::vector<CallTensors> calls;
  torch::manual_seed(r.seed);
  for (int i = 0; i < sets; ++i) {
    CallTensors t{torch::randn({c.batch, c.heads_q, c.seqlen_q, c.head_dim}, opt),
                  torch::randn({c.batch, c.heads_kv, c.seqlen_kv, c.head_dim}, opt),
                  torch::randn({c.batch, c.heads_kv, c.seqlen_kv, c.head_dim}, opt),
                  torch::empty({c.batch, c.heads_q, c.seqlen_q, c.head_dim}, opt),
                  torch::empty({c.batch, c.heads_q, c.seqlen_q},
                               torch::TensorOptions().dtype(torch::kFloat32).device(kCuda)),
                  *bufs, {}};
    calls.push_back(std::move(t));
  }
  std::vector<AttnParams> params;
  LaunchPlan plan{};
  for (CallTensors& t : calls) {
    auto p = PlanCall(m, c, t, scratch);
    if (!p.ok()) return p.status();
    plan = *p;
    params.push_back(MakeParams(c, t));
  }
  auto d = Driver::Get();
  if (!d.ok()) return d.status();
  const Driver& cu = **d;
  for (int i = 0; i < r.profile.warmup; ++i) {
    if (auto s = m.Enqueue(params[i % sets], plan, nullptr); !s.ok()) return s;
  }
  if (auto s = Synchronize("profile warm-up"); !s.ok()) return s;

  CUevent start, stop;
  cu.EventCreate(&start, CU_EVENT_DEFAULT);
  cu.EventCreate(&stop, CU_EVENT_DEFAULT);
  std::vector<double> ms;
  double total = 0;
  for (int i = 0; i < r.profile.max_reps &&
                  (i < r.profile.min_reps || total < r.profile.min_seconds * 1e3);
       ++i) {
    cu.EventRecord(start, nullptr);
    if (auto s = m.Enqueue(params[i % sets], plan, nullptr); !s.ok()) return s;
    cu.EventRecord(stop, nullptr);
    if (auto s = cu.Check(cu.EventSynchronize(stop), "profile"); !s.ok()) return s;
    float t = 0;
    cu.EventElapsedTime(&t, start, stop);
    ms.push_back(t);
    total += t;
  }
  cu.EventDestroy(start);
  cu.EventDestroy(stop);
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  const double flops = 4.0 * static_cast<double>(c.head_dim) * *kept;
  const double dense = static_cast<double>(c.batch * c.heads_q) * c.seqlen_q * c.seqlen_kv;
  return nlohmann::json{
      {"config", pipeline::ConfigJson(c)},
      {"median_ms", median},
      {"min_ms", sorted.front()},
      {"max_ms", sorted.back()},
      {"reps", ms.size()},
      {"warmup", r.profile.warmup},
      {"input_sets", sets},
      {"kept_elements", *kept},
      {"density", *kept / dense},
      {"tflops_kept", flops / (median * 1e-3) / 1e12},
      {"includes", "block-table construction (when the variant has tables) and the attention kernel"},
  };
}

nlohmann::json DeviceJson(const DeviceInfo& d) {
  return {{"name", d.name},          {"arch", d.Arch()},         {"sm_count", d.sm_count},
          {"memory_bytes", d.memory_bytes}, {"l2_bytes", d.l2_bytes},
          {"driver_version", d.driver_version}};
}

}  // namespace

absl::StatusOr<nlohmann::json> ProbeJson() {
  auto d = ProbeDevice(0);
  if (!d.ok()) return d.status();
  return DeviceJson(*d);
}

absl::StatusOr<nlohmann::json> CheckOnGpu(const RunRequest& r) {
  auto device = ProbeDevice(0);
  if (!device.ok()) return device.status();
  if (!torch::cuda::is_available()) {
    return absl::FailedPreconditionError(
        "this LibTorch has no CUDA support (the runner must be built against a CUDA LibTorch)");
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor scratch =
      torch::zeros({256}, torch::TensorOptions().dtype(torch::kUInt8).device(kCuda));
  if (auto s = UsePrimaryContext(0); !s.ok()) return s;

  // A lift check of a user's kernel has no spec: the reference program is the whole truth.
  if (r.spec_path.empty() && r.reference_program.empty()) {
    return absl::InvalidArgumentError("a check needs a spec or a reference program");
  }
  auto dtypes = spec::BufferDTypesOf(r.buffers);
  if (!dtypes.ok()) return dtypes.status();
  auto spec = r.spec_path.empty() ? absl::StatusOr<spec::Spec>(spec::Spec{})
                                  : spec::LoadSpecFile(r.spec_path, *dtypes);
  if (!spec.ok()) return spec.status();
  if (auto s = spec::OverrideParams(*spec, r.param_overrides); !s.ok()) return s;
  auto image = files::ReadFile(r.image_path);
  if (!image.ok()) return image.status();
  CompiledModule compiled;
  compiled.image = *image;
  compiled.ptx = r.ptx;
  EntryPoints entries;
  for (const auto& [role, symbol] : r.entries) {
    entries[role] = symbol;
    compiled.symbols[symbol] = symbol;
  }
  const int dtype = r.config.dtype == cuir::DType::kBF16 ? 0 : 1;
  auto module = KernelModule::Load(compiled, entries, dtype, static_cast<int>(r.config.head_dim));
  if (!module.ok()) return module.status();

  std::optional<cuir::Program> reference;
  if (!r.reference_program.empty()) {
    auto parsed = cuir::ParseProgram(r.reference_program, "<reference program>");
    if (!parsed.ok()) return parsed.status();
    reference = *std::move(parsed);
  }
  pipeline::VerifyReport report;
  report.seed = r.seed;
  report.passed = true;
  const auto shapes = r.verify_shapes.empty() ? pipeline::DefaultVerifyShapes(r.config) : r.verify_shapes;
  for (size_t i = 0; i < shapes.size(); ++i) {
    // Odd positions get a padded O. Both layouts are then checked whenever there are two shapes,
    // and the first shape (the job's own when small, or a caller's only one) keeps the contiguous
    // O that callers usually pass and the profile times. Alternating also spreads the default
    // ragged shapes over both layouts (257x300 and 65x65 padded for a small job, 300x257 at batch
    // 2 for a large one), so the unaligned stores meet partial tiles and batch strides too.
    const bool pad_o = i % 2 == 1;
    auto res = VerifyShapeOnGpu(r, *spec, reference ? &*reference : nullptr, *module, shapes[i],
                                r.seed + i, pad_o, scratch);
    if (!res.ok()) return res.status();
    report.passed = report.passed && res->passed;
    report.shapes.push_back(*res);
  }
  nlohmann::json out = {
      {"device", DeviceJson(*device)},
      {"module", {{"registers", module->registers()}, {"local_bytes", module->local_bytes()},
                  {"ptx_jit", r.ptx}}},
      {"verification", report.ToJson()},
      {"passed", report.passed},
      {"reference", reference ? "interpreter (CuIR reference program, CPU)" : "oracle (float32, GPU)"},
      {"summary", report.Summary()},
      {"lse_checked", report.lse_checked()},
  };
  if (!report.passed) out["failure"] = report.FailureDetail();
  if (report.passed && r.profile.enabled) {
    auto profile = Profile(r, *spec, *module, *device, scratch);
    if (!profile.ok()) return profile.status();
    out["profile"] = *profile;
  }
  return out;
}

}  // namespace cubridge::gpu
