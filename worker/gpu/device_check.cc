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
#include <functional>
#include <sstream>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cuir/files/files.h"
#include "cuir/interp/interp.h"
#include "cuir/spec/oracle.h"
#include "cuir/spec/tensors.h"
#include "worker/gpu/backward_check.h"
#include "worker/gpu/module.h"
#include "worker/gpu/nvml.h"

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

// The times in ms of calls of `enqueue(set)` over `sets` input sets, each between two events,
// after o.warmup untimed calls: at least o.min_reps calls and o.min_seconds, at most o.max_reps.
// Sorted, so the median is the middle one.
absl::StatusOr<std::vector<double>> TimeCalls(const ProfileOptions& o, int sets,
                                              const std::function<absl::Status(int)>& enqueue) {
  auto d = Driver::Get();
  if (!d.ok()) return d.status();
  const Driver& cu = **d;
  for (int i = 0; i < o.warmup; ++i) {
    if (auto s = enqueue(i % sets); !s.ok()) return s;
  }
  if (auto s = Synchronize("profile warm-up"); !s.ok()) return s;
  CUevent start, stop;
  cu.EventCreate(&start, CU_EVENT_DEFAULT);
  cu.EventCreate(&stop, CU_EVENT_DEFAULT);
  std::vector<double> ms;
  double total = 0;
  absl::Status failed;
  for (int i = 0; i < o.max_reps && (i < o.min_reps || total < o.min_seconds * 1e3); ++i) {
    cu.EventRecord(start, nullptr);
    if (failed = enqueue(i % sets); !failed.ok()) break;
    cu.EventRecord(stop, nullptr);
    if (failed = cu.Check(cu.EventSynchronize(stop), "profile"); !failed.ok()) break;
    float t = 0;
    cu.EventElapsedTime(&t, start, stop);
    ms.push_back(t);
    total += t;
  }
  cu.EventDestroy(start);
  cu.EventDestroy(stop);
  if (!failed.ok()) return failed;
  if (ms.empty()) return absl::InvalidArgumentError("profile: no timed call (max_reps is 0)");
  std::sort(ms.begin(), ms.end());
  return ms;
}

// TimeCalls with the GPU's state around it (nvml.h): when another process was computing on the
// GPU before or after, the calls are timed once more after a pause, and the profile says so
// ("contended" when the second timing was disturbed too). The times, and the profile's fields
// that describe the GPU ("gpu_state", "contended", "retimed").
struct Timed {
  std::vector<double> ms;  // sorted
  nlohmann::json fields;
};
absl::StatusOr<Timed> TimeOnQuietGpu(const ProfileOptions& o, const DeviceInfo& device, int sets,
                                     const std::function<absl::Status(int)>& enqueue) {
  Timed out;
  bool contended = false, retimed = false;
  nlohmann::json states = nlohmann::json::array();
  for (int attempt = 0; attempt < 2; ++attempt) {
    const GpuActivity before = SampleGpuActivity(device.uuid);
    auto ms = TimeCalls(o, sets, enqueue);
    if (!ms.ok()) return ms.status();
    const GpuActivity after = SampleGpuActivity(device.uuid);
    states.push_back({{"before", before.ToJson()}, {"after", after.ToJson()}});
    out.ms = *std::move(ms);
    contended = before.other_processes > 0 || after.other_processes > 0;
    if (!contended || attempt == 1) break;
    retimed = true;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  out.fields = {{"gpu_state", states}, {"contended", contended}, {"retimed", retimed}};
  return out;
}

// What a profile of the job's shape reads besides its random inputs: the buffers on the device,
// from a one-head, small-head-dim twin of the job (same lengths and values, no big random q/k/v
// on the host), and the kept elements its throughput counts.
struct ProfileInputs {
  std::vector<torch::Tensor> buffers;
  double kept = 0;
};
absl::StatusOr<ProfileInputs> MakeProfileInputs(const RunRequest& r, const spec::Spec& spec) {
  cuir::AttentionConfig twin = r.config;
  twin.heads_q = twin.heads_kv = 1;
  twin.head_dim = 64;
  auto small = spec::MakeInputs(spec, twin, r.buffers, r.seed);
  if (!small.ok()) return small.status();
  auto bufs = DeviceBuffers(r, *small);
  if (!bufs.ok()) return bufs.status();
  auto kept = KeptElements(spec, r.config, *small);
  if (!kept.ok()) return kept.status();
  return ProfileInputs{*std::move(bufs), *kept};
}

// The profile document of calls timed at the job's shape (FLOPs per kept element: 4 D forward,
// 2.5x that backward).
nlohmann::json ProfileReport(const RunRequest& r, const Timed& timed, int sets, double kept,
                             double flops_per_kept, const char* includes) {
  const cuir::AttentionConfig& c = r.config;
  const std::vector<double>& sorted = timed.ms;
  const double median = sorted[sorted.size() / 2];
  const double dense = static_cast<double>(c.batch * c.heads_q) * c.seqlen_q * c.seqlen_kv;
  nlohmann::json out{
      {"config", pipeline::ConfigJson(c)},
      {"median_ms", median},
      {"min_ms", sorted.front()},
      {"max_ms", sorted.back()},
      {"reps", sorted.size()},
      {"warmup", r.profile.warmup},
      {"input_sets", sets},
      {"kept_elements", kept},
      {"density", kept / dense},
      {"flops_per_kept_element", flops_per_kept},
      {"tflops_kept", flops_per_kept * kept / (median * 1e-3) / 1e12},
      {"includes", includes},
  };
  out.update(timed.fields);
  return out;
}

absl::StatusOr<nlohmann::json> Profile(const RunRequest& r, const spec::Spec& spec,
                                       const KernelModule& m, const DeviceInfo& device,
                                       const torch::Tensor& scratch) {
  const cuir::AttentionConfig& c = r.config;
  auto in = MakeProfileInputs(r, spec);
  if (!in.ok()) return in.status();

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
                  in->buffers, {}};
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
  auto timed = TimeOnQuietGpu(r.profile, device, sets,
                              [&](int i) { return m.Enqueue(params[i], plan, nullptr); });
  if (!timed.ok()) return timed.status();
  return ProfileReport(r, *timed, sets, in->kept, 4.0 * static_cast<double>(c.head_dim),
                       "block-table construction (when the variant has tables) and the attention "
                       "kernel");
}

nlohmann::json DeviceJson(const DeviceInfo& d) {
  return {{"name", d.name},          {"arch", d.Arch()},         {"sm_count", d.sm_count},
          {"ordinal", d.ordinal},    {"uuid", d.uuid},
          {"memory_bytes", d.memory_bytes}, {"l2_bytes", d.l2_bytes},
          {"driver_version", d.driver_version}};
}

// The backward at the job's shape, timed as Profile times the forward: fresh random Q, K, V, O
// and dO per input set, the LSE of rows whose scores are of unit variance (log Skv + 1/2: the
// probabilities' sizes of a real call, which the timing does not depend on otherwise), the
// gradients of the buffers the job learns, the fast mode (as autograd calls it by default).
// Throughput counts 2.5x the forward's FLOPs on kept elements.
absl::StatusOr<nlohmann::json> ProfileBackward(const RunRequest& r, const spec::Spec& spec,
                                               const BackwardModule& m, const DeviceInfo& device,
                                               const torch::Tensor& scratch) {
  const cuir::AttentionConfig& c = r.config;
  auto in = MakeProfileInputs(r, spec);
  if (!in.ok()) return in.status();

  const auto opt = torch::TensorOptions().dtype(TorchDtype(c.dtype)).device(kCuda);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(kCuda);
  const int64_t q_elems = c.batch * c.heads_q * c.seqlen_q * c.head_dim;
  const int64_t kv_elems = c.batch * c.heads_kv * c.seqlen_kv * c.head_dim;
  // Read: Q, K, V, O, dO; written: dQ (fp32 accumulator and output), dK, dV.
  const int sets = InputSets(2 * (5 * q_elems + 4 * kv_elems), device.l2_bytes);
  const double lse_value = std::log(static_cast<double>(c.seqlen_kv)) + 0.5;
  torch::manual_seed(r.seed);
  std::vector<BackwardCallTensors> calls;
  std::vector<BwdParams> params;
  BwdLaunchPlan plan{};
  for (int i = 0; i < sets; ++i) {
    BackwardCallTensors t;
    t.q = torch::randn({c.batch, c.heads_q, c.seqlen_q, c.head_dim}, opt);
    t.k = torch::randn({c.batch, c.heads_kv, c.seqlen_kv, c.head_dim}, opt);
    t.v = torch::randn({c.batch, c.heads_kv, c.seqlen_kv, c.head_dim}, opt);
    t.o = torch::randn({c.batch, c.heads_q, c.seqlen_q, c.head_dim}, opt);
    t.d_o = torch::randn({c.batch, c.heads_q, c.seqlen_q, c.head_dim}, opt);
    t.lse = torch::full({c.batch, c.heads_q, c.seqlen_q}, lse_value, f32);
    t.dq = torch::empty_like(t.q), t.dk = torch::empty_like(t.k), t.dv = torch::empty_like(t.v);
    t.buffers = in->buffers;
    for (size_t slot = 0; slot < r.buffer_order.size(); ++slot) {
      const bool learned = std::find(r.grad_buffers.begin(), r.grad_buffers.end(),
                                     r.buffer_order[slot]) != r.grad_buffers.end();
      t.buffer_grads.push_back(learned ? torch::zeros(in->buffers[slot].sizes(), f32)
                                       : torch::Tensor());
    }
    auto p = MakeBackwardParams(c, t, /*deterministic=*/false);
    if (!p.ok()) return p.status();
    auto planned = m.Plan(*p, Ptr(scratch));
    if (!planned.ok()) return planned.status();
    plan = *planned;
    t.workspace = torch::empty({static_cast<int64_t>(plan.workspace_bytes)},
                               torch::TensorOptions().dtype(torch::kUInt8).device(kCuda));
    p->workspace = t.workspace.data_ptr();
    p->workspace_size = static_cast<size_t>(t.workspace.numel());
    params.push_back(*p);
    calls.push_back(std::move(t));
  }
  auto timed = TimeOnQuietGpu(r.profile, device, sets,
                              [&](int i) { return m.Enqueue(params[i], plan, nullptr); });
  if (!timed.ok()) return timed.status();
  return ProfileReport(r, *timed, sets, in->kept, 2.5 * 4.0 * static_cast<double>(c.head_dim),
                       "preprocess (D), block tables (when the variant has them), the attention "
                       "kernel (which may convert dQ itself) and postprocess (what it left to convert)");
}

// A backward kernel against the spec's float64 autograd (RunRequest::backward).
absl::StatusOr<nlohmann::json> CheckBackwardOnGpu(const RunRequest& r, const DeviceInfo& device,
                                                  const spec::Spec& spec,
                                                  const CompiledModule& compiled,
                                                  const EntryPoints& entries,
                                                  const torch::Tensor& scratch) {
  if (r.reference_program.empty()) {
    return absl::InvalidArgumentError("a backward check needs its backward program");
  }
  auto program = cuir::ParseProgram(r.reference_program, "<backward program>");
  if (!program.ok()) return program.status();
  const int dtype = r.config.dtype == cuir::DType::kBF16 ? 0 : 1;
  auto module = BackwardModule::Load(compiled, entries, dtype, static_cast<int>(r.config.head_dim));
  if (!module.ok()) return module.status();
  pipeline::VerifyOptions options = r.verify;
  options.shapes = r.verify_shapes;
  auto report = pipeline::VerifyBackwardKernel(
      *program, spec, r.config, r.buffers, r.grad_buffers, r.seed, options,
      FastAndDeterministicRuns(*module, r.buffer_order, r.grad_buffers));
  if (!report.ok()) return report.status();
  nlohmann::json out = {
      {"device", DeviceJson(device)},
      {"module", {{"registers", module->registers()}, {"local_bytes", module->local_bytes()},
                  {"ptx_jit", r.ptx}}},
      {"verification", report->ToJson()},
      {"passed", report->passed},
      {"reference", "oracle (float64 autograd of the spec, CPU)"},
      {"summary", report->Summary()},
  };
  if (!report->passed) out["failure"] = report->FailureDetail();
  if (report->passed && r.profile.enabled) {
    auto profile = ProfileBackward(r, spec, *module, device, scratch);
    if (!profile.ok()) return profile.status();
    out["profile"] = *profile;
  }
  return out;
}

}  // namespace

absl::StatusOr<nlohmann::json> ProbeJson() {
  auto all = ProbeDevices();
  if (!all.ok()) return all.status();
  if (all->empty()) return absl::NotFoundError("the CUDA driver loads but sees no GPU");
  nlohmann::json devices = nlohmann::json::array();
  for (const DeviceInfo& d : *all) devices.push_back(DeviceJson(d));
  return nlohmann::json{{"device", devices[0]}, {"devices", devices}};
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
  if (r.backward) return CheckBackwardOnGpu(r, *device, *spec, compiled, entries, scratch);
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
