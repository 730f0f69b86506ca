// The PyTorch op: torch.ops.cubridge.attention(q, k, v, buffers, scale, kernel) -> (O, LSE).
//
// `kernel` is a folder CuBridge wrote (client/torch/kernel.h). A call is checked against what the
// kernel was lowered for before anything launches: a wrong dtype, device, layout, head count or
// captured tensor raises (TypeError / ValueError in Python) and never reaches the GPU. On CUDA the
// kernel's module is NVRTC-compiled once per (kernel, device) and kept beside the kernel as a
// cubin (or PTX) so that the next process loads it without compiling; its launch plan is
// computed once per call geometry; each call then enqueues on torch's current stream with
// workspace from the caching allocator and no host synchronisation, so calls can be captured in a
// CUDA graph once their geometry has been seen. The Meta kernel gives torch.compile the shapes.
// There is no backward yet: a call that needs a gradient gets one that raises.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <cmath>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/torch/kernel.h"
#include "client/torch/launch.h"
#include "cuir/files/files.h"
#include "cuir/ir/dtype.h"
#include "worker/gpu/module.h"

#ifdef CUBRIDGE_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace cubridge::torch_op {
namespace {

constexpr char kOp[] = "cubridge.attention";

const KernelInfo& Kernel(const std::string& dir) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<KernelInfo>> kernels;
  std::lock_guard lock(mu);
  auto& slot = kernels[dir];
  if (slot == nullptr) {
    auto info = ReadKernel(dir);
    TORCH_CHECK_VALUE(info.ok(), kOp, ": ", info.status().message());
    slot = std::make_unique<KernelInfo>(*std::move(info));
  }
  return *slot;
}

const char* KernelDType(int dtype) { return dtype == 0 ? "bfloat16" : "float16"; }

// The launcher ABI's codes (CUBRIDGE_DTYPE_*), -1 for a dtype no kernel takes.
int BufferCode(at::ScalarType t) {
  switch (t) {
    case at::kInt: return CUBRIDGE_DTYPE_INT32;
    case at::kLong: return CUBRIDGE_DTYPE_INT64;
    case at::kBool: return CUBRIDGE_DTYPE_BOOL;
    case at::kFloat: return CUBRIDGE_DTYPE_FLOAT32;
    case at::kBFloat16: return CUBRIDGE_DTYPE_BFLOAT16;
    case at::kHalf: return CUBRIDGE_DTYPE_FLOAT16;
    default: return -1;
  }
}

std::string Sizes(const at::Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.sizes(), ", "), "]");
}

// Everything that can be checked without the GPU: the same on every backend, so a bad call fails
// alike under torch.compile's fake tensors, on the CPU and on CUDA.
CallShape CheckCall(const KernelInfo& kn, const at::Tensor& q, const at::Tensor& k,
                    const at::Tensor& v, at::TensorList buffers, double scale) {
  const std::string fix = absl::StrCat(" (kernel ", kn.dir, ": ", KernelDType(kn.dtype),
                                       ", heads_q ", kn.heads_q, ", heads_kv ", kn.heads_kv,
                                       ", head_dim ", kn.head_dim, ")");
  for (const auto& [name, t] : {std::pair{"q", &q}, std::pair{"k", &k}, std::pair{"v", &v}}) {
    TORCH_CHECK_VALUE(t->dim() == 4, kOp, ": ", name, " has shape ", Sizes(*t),
                      "; it takes [batch, heads, seqlen, head_dim] tensors, as flex_attention does");
    TORCH_CHECK_TYPE(t->scalar_type() == (kn.dtype == 0 ? at::kBFloat16 : at::kHalf), kOp, ": ",
                     name, " is ", t->scalar_type(), "; this kernel was built for ",
                     KernelDType(kn.dtype), ": convert the inputs, or build the variant for ",
                     "their dtype", fix);
    TORCH_CHECK_VALUE(t->device() == q.device(), kOp, ": ", name, " is on ", t->device(),
                      " and q on ", q.device(), "; all tensors must be on one device");
    TORCH_CHECK_VALUE(t->size(3) == kn.head_dim, kOp, ": ", name, " has head_dim ", t->size(3),
                      "; this kernel was built for ", kn.head_dim, fix);
    TORCH_CHECK_VALUE(t->size(3) <= 1 || t->stride(3) == 1, kOp, ": ", name,
                      " is not contiguous along head_dim (stride ", t->stride(3),
                      "); call .contiguous() on it");
  }
  TORCH_CHECK_VALUE(q.size(1) == kn.heads_q && k.size(1) == kn.heads_kv && v.size(1) == kn.heads_kv,
                    kOp, ": q has ", q.size(1), " heads and k, v ", k.size(1), " and ", v.size(1),
                    "; this kernel was built for ", kn.heads_q, " query and ", kn.heads_kv,
                    " key/value heads", fix);
  TORCH_CHECK_VALUE(k.size(0) == q.size(0) && v.size(0) == q.size(0), kOp,
                    ": q, k and v have batches ", q.size(0), ", ", k.size(0), " and ", v.size(0));
  TORCH_CHECK_VALUE(k.size(2) == v.size(2), kOp, ": k has ", k.size(2), " rows and v ", v.size(2));
  TORCH_CHECK_VALUE(q.size(2) > 0 && k.size(2) > 0, kOp, ": empty sequences (seqlen_q ",
                    q.size(2), ", seqlen_kv ", k.size(2), ")");
  TORCH_CHECK_VALUE(std::isfinite(scale) && scale > 0, kOp, ": scale ", scale,
                    " is not a positive finite number");
  const CallShape shape{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3)};
  TORCH_CHECK_VALUE(buffers.size() == kn.buffers.size(), kOp, ": got ", buffers.size(),
                    " captured tensors; this kernel takes ", kn.buffers.size(), " (",
                    absl::StrJoin(kn.buffers, ", ",
                                  [](std::string* out, const KernelBuffer& b) { out->append(b.name); }),
                    ")");
  for (size_t i = 0; i < buffers.size(); ++i) {
    const KernelBuffer& want = kn.buffers[i];
    const at::Tensor& b = buffers[i];
    TORCH_CHECK_TYPE(BufferCode(b.scalar_type()) == want.dtype, kOp, ": captured tensor '",
                     want.name, "' is ", b.scalar_type(), "; the kernel was built for ",
                     cuir::TensorDTypeName(static_cast<cuir::TensorDType>(want.dtype)),
                     " (a different dtype is a different kernel)");
    TORCH_CHECK_VALUE(b.dim() == want.rank(), kOp, ": captured tensor '", want.name,
                      "' has shape ", Sizes(b), "; the kernel indexes it with ", want.rank(),
                      " indices");
    TORCH_CHECK_VALUE(b.device() == q.device(), kOp, ": captured tensor '", want.name,
                      "' is on ", b.device(), " and q on ", q.device());
    for (int d = 0; d < want.rank(); ++d) {
      const auto least = LeastSize(want.extents[d], shape);
      TORCH_CHECK_VALUE(!least || b.size(d) >= *least, kOp, ": captured tensor '", want.name,
                        "' has shape ", Sizes(b), "; at this call's shape the variant reads ",
                        *least, " entries along dimension ", d, " (", want.extents[d], ")");
    }
  }
  return shape;
}

std::tuple<at::Tensor, at::Tensor> Outputs(const at::Tensor& q) {
  return {at::empty(q.sizes(), q.options()),
          at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat))};
}

std::tuple<at::Tensor, at::Tensor> AttentionMeta(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& v, at::TensorList buffers,
                                                 double scale, c10::string_view kernel) {
  CheckCall(Kernel(std::string(kernel)), q, k, v, buffers, scale);
  return Outputs(q);
}

std::tuple<at::Tensor, at::Tensor> AttentionCpu(const at::Tensor& q, const at::Tensor& k,
                                                const at::Tensor& v, at::TensorList buffers,
                                                double scale, c10::string_view kernel) {
  CheckCall(Kernel(std::string(kernel)), q, k, v, buffers, scale);
  TORCH_CHECK_VALUE(false, kOp, ": the kernel runs on a CUDA GPU and q is on ", q.device(),
                    "; move q, k, v and the captured tensors to the GPU");
  return Outputs(q);
}

#ifdef CUBRIDGE_TORCH_CUDA

// A kernel's module on one device, and the launch plans of the call geometries it has seen.
struct Loaded {
  std::unique_ptr<gpu::KernelModule> module;
  std::mutex mu;
  std::map<std::string, gpu::LaunchPlan> plans;
};

void Ok(const absl::Status& s, const std::string& what) {
  TORCH_CHECK(s.ok(), kOp, ": ", what, ": ", s.message());
}

int ArchNumber(const std::string& arch) { return std::atoi(arch.c_str() + 3); }  // "sm_90"

// The compiled module kept beside the kernel (gpu::ModuleFileName: adapt's GPU stage writes it
// too), so a new process skips NVRTC; a folder that is not writable only costs the compile.
absl::StatusOr<gpu::CompiledModule> CompiledFor(const KernelInfo& kn, int device_cc) {
  // A kernel for an older arch than the GPU's runs through PTX and the driver's JIT.
  const bool ptx = device_cc / 10 != ArchNumber(kn.arch) / 10;
  const std::string name = gpu::ModuleFileName(device_cc, ptx);
  if (auto kept = gpu::ReadModuleFiles(kn.dir, name, ptx); kept.ok()) return kept;
  auto arch = lower::ParseArch(kn.arch);
  if (!arch.ok()) return arch.status();
  gpu::CompileOptions copt;
  copt.arch = *arch;
  copt.ptx = ptx;
  for (const auto& [role, expr] : gpu::EntryExpressions(kn.entries, kn.dtype, kn.head_dim)) {
    copt.name_expressions.push_back(expr);
  }
  auto compiled = gpu::CompileWithNvrtc(kn.source, "kernel.cu", copt);
  if (!compiled.ok()) return compiled.status();
  // Published whole (temporary names, then renames), so a concurrent reader sees all of it or
  // nothing; a folder that cannot take it only costs the next process the compile.
  (void)files::PublishFiles(kn.dir, gpu::ModuleFiles(name, *compiled));
  return compiled;
}

Loaded& LoadedOn(const KernelInfo& kn, int device) {
  static std::mutex mu;
  static std::map<std::pair<std::string, int>, std::unique_ptr<Loaded>> loaded;
  std::lock_guard lock(mu);
  auto& slot = loaded[{kn.dir, device}];
  if (slot == nullptr) {
    auto info = gpu::ProbeDevice(device);
    Ok(info.status(), "probe the GPU");
    const int cc = info->cc_major * 10 + info->cc_minor;
    TORCH_CHECK_VALUE(cc >= ArchNumber(kn.arch), kOp, ": the kernel was built for ", kn.arch,
                      " and this GPU is ", info->Arch(), " (", info->name,
                      "); build the variant for this GPU's arch");
    auto compiled = CompiledFor(kn, cc);
    Ok(compiled.status(), "compile " + kn.dir + "/kernel.cu");
    auto module = gpu::KernelModule::Load(*compiled, kn.entries, kn.dtype, kn.head_dim);
    Ok(module.status(), "load " + kn.dir);
    auto out = std::make_unique<Loaded>();
    out->module = std::make_unique<gpu::KernelModule>(*std::move(module));
    slot = std::move(out);
  }
  return *slot;
}

void FillBuffer(const at::Tensor& b, gpu::BufferDesc* out) {
  out->data = b.data_ptr();
  out->dtype = BufferCode(b.scalar_type());
  out->rank = static_cast<int32_t>(b.dim());
  for (int64_t d = 0; d < b.dim(); ++d) {
    out->sizes[d] = b.size(d);
    out->strides[d] = b.stride(d);
  }
}

// What a launch plan depends on besides the shape: every stride and whether each tensor is
// 16-byte aligned (the plan picks TMA or narrow stores from them), never the addresses.
std::string GeometryKey(const gpu::AttnParams& p) {
  std::string key = absl::StrCat(p.batch, ",", p.heads_q, ",", p.heads_kv, ",", p.seqlen_q, ",",
                                 p.seqlen_kv, ";");
  for (const int64_t s : {p.q_batch_stride, p.q_head_stride, p.q_row_stride, p.k_batch_stride,
                          p.k_head_stride, p.k_row_stride, p.v_batch_stride, p.v_head_stride,
                          p.v_row_stride, p.o_batch_stride, p.o_head_stride, p.o_row_stride}) {
    absl::StrAppend(&key, s, ",");
  }
  for (const void* ptr : {p.q, p.k, p.v, static_cast<const void*>(p.o)}) {
    absl::StrAppend(&key, reinterpret_cast<uintptr_t>(ptr) % 16 == 0 ? "a" : "u");
  }
  for (const auto& b : p.buffers) {
    if (b.data == nullptr) break;
    absl::StrAppend(&key, ";", reinterpret_cast<uintptr_t>(b.data) % 16 == 0 ? "a" : "u");
    for (int d = 0; d < b.rank; ++d) absl::StrAppend(&key, ",", b.sizes[d], "/", b.strides[d]);
  }
  return key;
}

std::tuple<at::Tensor, at::Tensor> AttentionCuda(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& v, at::TensorList buffers,
                                                 double scale, c10::string_view kernel) {
  const KernelInfo& kn = Kernel(std::string(kernel));
  CheckCall(kn, q, k, v, buffers, scale);
  c10::DeviceGuard guard(q.device());
  auto [o, lse] = Outputs(q);
  // The launcher ABI's captured tensors: unit stride innermost unless that size is 1 (a
  // broadcast stride 0 elsewhere is fine); others are copied into that layout.
  std::vector<at::Tensor> held;
  for (at::Tensor b : buffers) {
    if (b.dim() > 0 && b.size(-1) > 1 && b.stride(-1) != 1) b = b.contiguous();
    held.push_back(b);
  }
  gpu::AttnParams p = CallParams(kn, q, k, v, o, lse, held, scale);

  const int device = q.device().index();
  auto cu = gpu::Driver::Get();
  Ok(cu.status(), "load the CUDA driver");
  // LibTorch works in the device's primary context; the module must be loaded into it too.
  CUdevice current = -1;
  if ((*cu)->CtxGetDevice(&current) != CUDA_SUCCESS || current != device) {
    Ok(gpu::UsePrimaryContext(device), "use the GPU's primary context");
  }
  Loaded& loaded = LoadedOn(kn, device);
  const CUstream stream = c10::cuda::getCurrentCUDAStream(device).stream();
  gpu::LaunchPlan plan{};
  {
    std::lock_guard lock(loaded.mu);
    const std::string key = GeometryKey(p);
    auto it = loaded.plans.find(key);
    if (it == loaded.plans.end()) {
      // The plan kernel is read back, which a CUDA graph capture forbids: a geometry is planned
      // on its first call, outside any capture (the usual warm-up before capturing).
      CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
      (*cu)->StreamIsCapturing(stream, &capturing);
      TORCH_CHECK(capturing == CU_STREAM_CAPTURE_STATUS_NONE, kOp,
                  ": this call geometry is new inside a CUDA graph capture; call the model once "
                  "with the same shapes before capturing (its launch plan is computed then)");
      // The plan kernel runs on the legacy stream: everything on torch's streams (the scratch's
      // zero fill, earlier users of its memory) finishes first. Once per geometry.
      at::Tensor scratch = at::zeros({256}, q.options().dtype(at::kByte));
      Ok((*cu)->Check((*cu)->CtxSynchronize(), "cuCtxSynchronize"), "plan");
      auto planned = loaded.module->Plan(p, reinterpret_cast<CUdeviceptr>(scratch.data_ptr()));
      TORCH_CHECK_VALUE(planned.ok(), kOp, ": the kernel refuses this call: ",
                        planned.status().message());
      it = loaded.plans.emplace(key, *planned).first;
    }
    plan = it->second;
  }
  const uint64_t workspace = plan.workspace_bytes + plan.split_workspace_bytes;
  at::Tensor scratch;
  if (workspace > 0) {
    scratch = at::empty({static_cast<int64_t>(workspace)}, q.options().dtype(at::kByte));
    p.workspace = scratch.data_ptr();
    p.workspace_size = workspace;
  }
  Ok(loaded.module->Enqueue(p, plan, stream), "launch");
  return {o, lse};
}

#endif  // CUBRIDGE_TORCH_CUDA

// No backward yet: the outputs of a call that needs a gradient carry a node that says so.
class AttentionFunction : public torch::autograd::Function<AttentionFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& q, const at::Tensor& k,
                                                const at::Tensor& v, std::vector<at::Tensor> buffers,
                                                double scale, std::string kernel) {
    at::AutoDispatchBelowADInplaceOrView below;
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("cubridge::attention", "")
                         .typed<std::tuple<at::Tensor, at::Tensor>(
                             const at::Tensor&, const at::Tensor&, const at::Tensor&,
                             at::TensorList, double, c10::string_view)>();
    auto [o, lse] = op.call(q, k, v, buffers, scale, kernel);
    ctx->mark_non_differentiable({lse});
    return {o, lse};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list) {
    TORCH_CHECK(false, kOp, ": backward is not available yet; CuBridge kernels are forward-only "
                "for now (run this variant under torch.no_grad(), or use flex_attention where "
                "you need its gradient)");
  }
};

std::tuple<at::Tensor, at::Tensor> AttentionAutograd(const at::Tensor& q, const at::Tensor& k,
                                                     const at::Tensor& v, at::TensorList buffers,
                                                     double scale, c10::string_view kernel) {
  auto out = AttentionFunction::apply(q, k, v, buffers.vec(), scale, std::string(kernel));
  return {out[0], out[1]};
}

}  // namespace

#ifdef CUBRIDGE_TORCH_CUDA
gpu::AttnParams CallParams(const KernelInfo& kn, const at::Tensor& q, const at::Tensor& k,
                           const at::Tensor& v, const at::Tensor& o, const at::Tensor& lse,
                           const std::vector<at::Tensor>& buffers, double scale) {
  gpu::AttnParams p{};
  for (size_t i = 0; i < buffers.size(); ++i) FillBuffer(buffers[i], &p.buffers[i]);
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.o = o.data_ptr();
  p.lse = lse.data_ptr<float>();
  std::tie(p.q_batch_stride, p.q_head_stride, p.q_row_stride) =
      std::tuple{q.stride(0), q.stride(1), q.stride(2)};
  std::tie(p.k_batch_stride, p.k_head_stride, p.k_row_stride) =
      std::tuple{k.stride(0), k.stride(1), k.stride(2)};
  std::tie(p.v_batch_stride, p.v_head_stride, p.v_row_stride) =
      std::tuple{v.stride(0), v.stride(1), v.stride(2)};
  std::tie(p.o_batch_stride, p.o_head_stride, p.o_row_stride) =
      std::tuple{o.stride(0), o.stride(1), o.stride(2)};
  p.lse_batch_stride = lse.stride(0);
  p.lse_head_stride = lse.stride(1);
  p.batch = static_cast<int32_t>(q.size(0));
  p.heads_q = static_cast<int32_t>(q.size(1));
  p.heads_kv = static_cast<int32_t>(k.size(1));
  p.head_dim = static_cast<int32_t>(q.size(3));
  p.seqlen_q = static_cast<int32_t>(q.size(2));
  p.seqlen_kv = static_cast<int32_t>(k.size(2));
  p.dtype = kn.dtype;
  p.softmax_scale = static_cast<float>(scale);
  return p;
}
#endif  // CUBRIDGE_TORCH_CUDA

TORCH_LIBRARY(cubridge, m) {
  m.def("attention(Tensor q, Tensor k, Tensor v, Tensor[] buffers, float scale, str kernel) "
        "-> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(cubridge, CPU, m) { m.impl("attention", AttentionCpu); }
TORCH_LIBRARY_IMPL(cubridge, Meta, m) { m.impl("attention", AttentionMeta); }
TORCH_LIBRARY_IMPL(cubridge, Autograd, m) { m.impl("attention", AttentionAutograd); }
#ifdef CUBRIDGE_TORCH_CUDA
TORCH_LIBRARY_IMPL(cubridge, CUDA, m) { m.impl("attention", AttentionCuda); }
#endif

}  // namespace cubridge::torch_op
