// The PyTorch op: torch.ops.cubridge.attention(q, k, v, buffers, scale, kernel) -> (O, LSE), and
// its gradient torch.ops.cubridge.attention_backward(grad_o, q, k, v, o, lse, buffers, learn,
// scale, kernel) -> (dQ, dK, dV, the gradients of the learnable captured tensors `learn` flags,
// all where it is empty), which the op's autograd
// calls: `loss.backward()` works through it, in eager mode and under torch.compile.
//
// `kernel` is a folder CuBridge wrote (client/torch/kernel.h). A call is checked against what the
// kernel was lowered for before anything launches: a wrong dtype, device, layout, head count or
// captured tensor raises (TypeError / ValueError in Python) and never reaches the GPU. On CUDA the
// kernel's module is NVRTC-compiled once per (kernel, device) and kept beside the kernel as a
// cubin (or PTX) so that the next process loads it without compiling; its launch plan is
// computed once per call geometry; each call then enqueues on torch's current stream with
// workspace from the caching allocator and no host synchronisation, so calls can be captured in a
// CUDA graph once their geometry has been seen. The Meta kernel gives torch.compile the shapes.
// A kernel folder without a backward kernel (kernel_bwd.cu) gives outputs whose backward raises
// with the reason adapt recorded.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/torch/kernel.h"
#include "client/torch/launch.h"
#include "cuir/files/files.h"
#include "cuir/ir/dtype.h"
#include "worker/gpu/backward_module.h"
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

constexpr char kBackwardOp[] = "cubridge.attention_backward";

const BackwardInfo& BackwardOf(const KernelInfo& kn) {
  TORCH_CHECK(kn.backward.available, kBackwardOp, ": ", kn.backward.reason);
  return kn.backward;
}

// The backward call's own tensors against the forward's: grad_o, o and lse as the forward made
// them (the autograd node passes them; a direct caller may not).
void CheckBackwardCall(const at::Tensor& grad_o, const at::Tensor& q, const at::Tensor& o,
                       const at::Tensor& lse) {
  for (const auto& [name, t] : {std::pair{"grad_o", &grad_o}, std::pair{"o", &o}}) {
    TORCH_CHECK_VALUE(t->sizes() == q.sizes(), kBackwardOp, ": ", name, " has shape ",
                      Sizes(*t), "; it must have q's, ", Sizes(q));
    TORCH_CHECK_TYPE(t->scalar_type() == q.scalar_type(), kBackwardOp, ": ", name, " is ",
                     t->scalar_type(), " and q ", q.scalar_type());
    TORCH_CHECK_VALUE(t->device() == q.device(), kBackwardOp, ": ", name, " is on ", t->device(),
                      " and q on ", q.device());
  }
  TORCH_CHECK_VALUE(lse.dim() == 3 && lse.size(0) == q.size(0) && lse.size(1) == q.size(1) &&
                        lse.size(2) == q.size(2),
                    kBackwardOp, ": lse has shape ", Sizes(lse), "; it must be [batch, heads_q, "
                    "seqlen_q] as the forward returned it");
  TORCH_CHECK_TYPE(lse.scalar_type() == at::kFloat, kBackwardOp, ": lse is ", lse.scalar_type(),
                   "; the forward returns it as float32");
}

using BackwardOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, std::vector<at::Tensor>>;

// Whether the call computes buffer i's gradient: asked for (`learn`, one flag per captured
// tensor, or empty for all) and learnable by the kernel (BackwardInfo::learns).
std::vector<bool> Learning(const BackwardInfo& bw, at::TensorList buffers, at::IntArrayRef learn) {
  TORCH_CHECK_VALUE(learn.empty() || learn.size() == buffers.size(), kBackwardOp, ": learn has ",
                    learn.size(), " flags for ", buffers.size(), " captured tensors");
  std::vector<bool> out;
  for (size_t i = 0; i < buffers.size(); ++i) {
    out.push_back(bw.learns[i] && (learn.empty() || learn[i] != 0));
  }
  return out;
}

// dQ, dK, dV in q's, k's and v's shapes and dtype, and a float32 gradient (in its shape) per
// captured tensor the call computes one for (Learning), in the forward's slot order.
BackwardOutputs BackwardOutputsFor(const std::vector<bool>& learning, const at::Tensor& q,
                                   const at::Tensor& k, const at::Tensor& v,
                                   at::TensorList buffers) {
  std::vector<at::Tensor> grads;
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (learning[i]) {
      grads.push_back(at::zeros(buffers[i].sizes(), buffers[i].options().dtype(at::kFloat)));
    }
  }
  return {at::empty(q.sizes(), q.options()), at::empty(k.sizes(), k.options()),
          at::empty(v.sizes(), v.options()), grads};
}

// A backward call checked (the forward's checks, then its own), with the gradients it computes.
struct BackwardCall {
  const KernelInfo& kn;
  const BackwardInfo& bw;
  std::vector<bool> learning;
};
BackwardCall CheckBackward(const at::Tensor& grad_o, const at::Tensor& q, const at::Tensor& k,
                           const at::Tensor& v, const at::Tensor& o, const at::Tensor& lse,
                           at::TensorList buffers, at::IntArrayRef learn, double scale,
                           c10::string_view kernel) {
  const KernelInfo& kn = Kernel(std::string(kernel));
  CheckCall(kn, q, k, v, buffers, scale);
  CheckBackwardCall(grad_o, q, o, lse);
  const BackwardInfo& bw = BackwardOf(kn);
  return {kn, bw, Learning(bw, buffers, learn)};
}

BackwardOutputs AttentionBackwardMeta(const at::Tensor& grad_o, const at::Tensor& q,
                                      const at::Tensor& k, const at::Tensor& v, const at::Tensor& o,
                                      const at::Tensor& lse, at::TensorList buffers,
                                      at::IntArrayRef learn, double scale, c10::string_view kernel) {
  const BackwardCall call = CheckBackward(grad_o, q, k, v, o, lse, buffers, learn, scale, kernel);
  return BackwardOutputsFor(call.learning, q, k, v, buffers);
}

BackwardOutputs AttentionBackwardCpu(const at::Tensor& grad_o, const at::Tensor& q,
                                     const at::Tensor& k, const at::Tensor& v, const at::Tensor& o,
                                     const at::Tensor& lse, at::TensorList buffers,
                                     at::IntArrayRef learn, double scale, c10::string_view kernel) {
  AttentionBackwardMeta(grad_o, q, k, v, o, lse, buffers, learn, scale, kernel);
  TORCH_CHECK_VALUE(false, kBackwardOp, ": the kernel runs on a CUDA GPU and q is on ", q.device(),
                    "; move q, k, v and the captured tensors to the GPU");
  return {};
}

#ifdef CUBRIDGE_TORCH_CUDA

// A kernel's module on one device, and the launch plans of the call geometries it has seen.
struct Loaded {
  std::unique_ptr<gpu::KernelModule> module;
  std::mutex mu;
  std::map<std::string, gpu::LaunchPlan> plans;
  int cc = 0;  // the device's compute capability (90 for sm_90)
  // The backward's modules, each loaded on the first backward call that needs it, and their
  // plans: [0] computes the learnable captured tensors' gradients, [1] none (BwdModuleKind).
  std::unique_ptr<gpu::BackwardModule> backward[2];
  std::map<std::string, gpu::BwdLaunchPlan> backward_plans;
  // Block tables kept per call geometry (KeptTables), the forward's and the backward's.
  std::map<std::string, at::Tensor> tables;
};

// Which backward module a call runs. A call where no captured tensor learns runs the kernel
// built without the gradient hooks (CUBRIDGE_BWD_BUFFER_GRADS=0, common/backward_hooks.cuh):
// a float table the kernel could learn otherwise keeps the raw scores and the hooks' registers
// for nothing (an ALiBi slope table ran 22% under causal that way: bench/NOTES.md, session 20).
enum BwdModuleKind { kWithBufferGrads = 0, kWithoutBufferGrads = 1 };

void Ok(const absl::Status& s, const std::string& what) {
  TORCH_CHECK(s.ok(), kOp, ": ", what, ": ", s.message());
}

int ArchNumber(const std::string& arch) { return std::atoi(arch.c_str() + 3); }  // "sm_90"

// The compiled module kept beside the kernel (gpu::ModuleFileName: adapt's GPU stage writes it
// too), so a new process skips NVRTC; a folder that is not writable only costs the compile.
// The backward's modules are kept under the same name with these prefixes (BwdModuleKind).
constexpr const char* kBackwardModulePrefix[] = {"backward_", "backward_nograds_"};

absl::StatusOr<gpu::CompiledModule> CompiledFor(const KernelInfo& kn, int device_cc,
                                                bool backward = false,
                                                BwdModuleKind kind = kWithBufferGrads) {
  // A kernel for an older arch than the GPU's runs through PTX and the driver's JIT.
  const bool ptx = device_cc / 10 != ArchNumber(kn.arch) / 10;
  const std::string name = absl::StrCat(backward ? kBackwardModulePrefix[kind] : "",
                                        gpu::ModuleFileName(device_cc, ptx));
  if (auto kept = gpu::ReadModuleFiles(kn.dir, name, ptx); kept.ok()) return kept;
  auto arch = lower::ParseArch(kn.arch);
  if (!arch.ok()) return arch.status();
  gpu::CompileOptions copt;
  copt.arch = *arch;
  copt.ptx = ptx;
  if (backward && kind == kWithoutBufferGrads) {
    copt.defines.push_back("CUBRIDGE_BWD_BUFFER_GRADS=0");
  }
  const auto& entries = backward ? kn.backward.entries : kn.entries;
  for (const auto& [role, expr] : gpu::EntryExpressions(entries, kn.dtype, kn.head_dim)) {
    copt.name_expressions.push_back(expr);
  }
  auto compiled = gpu::CompileWithNvrtc(backward ? kn.backward.source : kn.source,
                                        backward ? "kernel_bwd.cu" : "kernel.cu", copt);
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
    out->cc = cc;
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

// The CUDA driver, with `device`'s primary context current: LibTorch works in it, so the
// modules must be loaded into it too.
const gpu::Driver& DriverOn(int device) {
  auto cu = gpu::Driver::Get();
  Ok(cu.status(), "load the CUDA driver");
  CUdevice current = -1;
  if ((*cu)->CtxGetDevice(&current) != CUDA_SUCCESS || current != device) {
    Ok(gpu::UsePrimaryContext(device), "use the GPU's primary context");
  }
  return **cu;
}

// Where a call on q's device runs: the driver in the device's primary context, the kernel's
// module on that device, and torch's current stream there.
struct Placed {
  const gpu::Driver& cu;
  Loaded& loaded;
  CUstream stream;
};
Placed Place(const KernelInfo& kn, const at::Tensor& q) {
  const int device = q.device().index();
  const gpu::Driver& cu = DriverOn(device);
  return {cu, LoadedOn(kn, device), c10::cuda::getCurrentCUDAStream(device).stream()};
}

// The launch plan of a call geometry, computed on its first call by `make(scratch)`. The plan
// kernel is read back, which a CUDA graph capture forbids: a geometry is planned outside any
// capture (the usual warm-up before capturing). Call with loaded.mu held.
template <typename PlanT, typename Make>
PlanT PlanOnce(std::map<std::string, PlanT>& plans, const std::string& key, const gpu::Driver& cu,
               CUstream stream, const at::Tensor& like, Make make) {
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
  cu.StreamIsCapturing(stream, &capturing);
  TORCH_CHECK(capturing == CU_STREAM_CAPTURE_STATUS_NONE, kOp,
              ": this call geometry is new inside a CUDA graph capture; call the model once "
              "with the same shapes before capturing (its launch plan is computed then)");
  // The plan kernel runs on the legacy stream: everything on torch's streams (the scratch's
  // zero fill, earlier users of its memory) finishes first. Once per geometry.
  at::Tensor scratch = at::zeros({256}, like.options().dtype(at::kByte));
  Ok(cu.Check(cu.CtxSynchronize(), "cuCtxSynchronize"), "plan");
  auto planned = make(reinterpret_cast<CUdeviceptr>(scratch.data_ptr()));
  TORCH_CHECK_VALUE(planned.ok(), kOp, ": the kernel refuses this call: ",
                    planned.status().message());
  return plans.emplace(key, *planned).first->second;
}

// Whether KeptTables keeps tables: CUBRIDGE_KEEP_TABLES=1 in the environment, read each call so
// that one process times both (off until measured on a GPU: session 25 had no device time left
// for it).
bool KeepTables() {
  const char* on = std::getenv("CUBRIDGE_KEEP_TABLES");
  return on != nullptr && on[0] == '1';
}

// The block tables of a call geometry, built once and kept, where they depend on the geometry
// alone: a kernel without captured tensors (its masks read indices and constants only) whose
// plan builds tables (`classify_grid` > 0, `bytes` of them). UseKeptTables copies them into each
// call's workspace, which then runs without its table kernels: a per-head mask classifies every
// tile of every head (~1 ms predicted for longformer_head_dilation at 8k, bench/NOTES.md session
// 25), as FlexAttention's users keep a BlockMask. Built outside any capture (a captured first
// call classifies in the graph instead) and waited for, since a later call may run on another
// stream. Undefined where not kept. Call with loaded.mu held.
template <typename Build>
at::Tensor KeptTables(std::map<std::string, at::Tensor>& kept, const std::string& key,
                      const KernelInfo& kn, uint32_t classify_grid, uint64_t bytes,
                      const gpu::Driver& cu, CUstream stream, const at::Tensor& like, Build build) {
  if (!kn.buffers.empty() || classify_grid == 0 || bytes == 0 || !KeepTables()) return {};
  auto it = kept.find(key);
  if (it != kept.end()) return it->second;
  CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
  cu.StreamIsCapturing(stream, &capturing);
  if (capturing != CU_STREAM_CAPTURE_STATUS_NONE) return {};
  at::Tensor tables = at::empty({static_cast<int64_t>(bytes)}, like.options().dtype(at::kByte));
  Ok(build(tables.data_ptr()), "build the block tables");
  Ok(cu.Check(cu.CtxSynchronize(), "cuCtxSynchronize"), "build the block tables");
  return kept.emplace(key, tables).first->second;
}

// KeptTables' tables (if any) into the call's workspace at `offset`, on the call's stream; the
// call then builds none (its plan's classify_grid 0).
void UseKeptTables(const at::Tensor& tables, at::Tensor& scratch, uint64_t offset,
                   uint32_t* classify_grid) {
  if (!tables.defined()) return;
  scratch.narrow(0, static_cast<int64_t>(offset), tables.numel())
      .copy_(tables, /*non_blocking=*/true);
  *classify_grid = 0;
}

// Device scratch from the caching allocator, on the call's stream.
at::Tensor Workspace(uint64_t bytes, const at::Tensor& like) {
  return at::empty({static_cast<int64_t>(std::max<uint64_t>(bytes, 1))},
                   like.options().dtype(at::kByte));
}

// A captured tensor in the launcher ABI's layout: unit stride innermost unless that size is 1 (a
// broadcast stride 0 elsewhere is fine); others are copied into it.
at::Tensor InAbiLayout(at::Tensor b) {
  if (b.dim() > 0 && b.size(-1) > 1 && b.stride(-1) != 1) b = b.contiguous();
  return b;
}

std::tuple<at::Tensor, at::Tensor> AttentionCuda(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& v, at::TensorList buffers,
                                                 double scale, c10::string_view kernel) {
  const KernelInfo& kn = Kernel(std::string(kernel));
  CheckCall(kn, q, k, v, buffers, scale);
  c10::DeviceGuard guard(q.device());
  auto [o, lse] = Outputs(q);
  std::vector<at::Tensor> held;
  for (const at::Tensor& b : buffers) held.push_back(InAbiLayout(b));
  gpu::AttnParams p = CallParams(kn, q, k, v, o, lse, held, scale);

  const auto [cu, loaded, stream] = Place(kn, q);
  gpu::LaunchPlan plan{};
  at::Tensor tables;
  {
    std::lock_guard lock(loaded.mu);
    const std::string key = GeometryKey(p);
    plan = PlanOnce(loaded.plans, key, cu, stream, q, [&](CUdeviceptr scratch) {
      return loaded.module->Plan(p, scratch);
    });
    // The forward's tables are its whole workspace_bytes (the split's scratch follows).
    tables = KeptTables(loaded.tables, key, kn, plan.classify_grid, plan.workspace_bytes, cu,
                        stream, q, [&](void* at) {
                          return loaded.module->EnqueueTables(p, plan, at, stream);
                        });
  }
  const uint64_t workspace = plan.workspace_bytes + plan.split_workspace_bytes;
  at::Tensor scratch;
  if (workspace > 0) {
    scratch = Workspace(workspace, q);
    p.workspace = scratch.data_ptr();
    p.workspace_size = workspace;
  }
  UseKeptTables(tables, scratch, 0, &plan.classify_grid);
  Ok(loaded.module->Enqueue(p, plan, stream), "launch");
  return {o, lse};
}

void SetStrides(const at::Tensor& t, int64_t* batch, int64_t* head, int64_t* row) {
  *batch = t.stride(0), *head = t.stride(1), *row = t.stride(2);
}

BackwardOutputs AttentionBackwardCuda(const at::Tensor& grad_o, const at::Tensor& q,
                                      const at::Tensor& k, const at::Tensor& v, const at::Tensor& o,
                                      const at::Tensor& lse, at::TensorList buffers,
                                      at::IntArrayRef learn, double scale, c10::string_view kernel) {
  const BackwardCall call = CheckBackward(grad_o, q, k, v, o, lse, buffers, learn, scale, kernel);
  const KernelInfo& kn = call.kn;
  const BackwardInfo& bw = call.bw;
  const std::vector<bool>& learning = call.learning;
  c10::DeviceGuard guard(q.device());
  auto outputs = BackwardOutputsFor(learning, q, k, v, buffers);
  auto& [dq, dk, dv, grads] = outputs;
  // The backward's params hold the captured tensors in its own slot order.
  std::vector<at::Tensor> held(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) held[bw.slots[i]] = InAbiLayout(buffers[i]);
  const at::Tensor d_o = grad_o.size(3) <= 1 || grad_o.stride(3) == 1 ? grad_o : grad_o.contiguous();
  const at::Tensor o_in = o.size(3) <= 1 || o.stride(3) == 1 ? o : o.contiguous();
  const at::Tensor lse_in = lse.stride(2) == 1 ? lse : lse.contiguous();
  gpu::BwdParams p{};
  p.fwd = CallParams(kn, q, k, v, o_in, lse_in, held, scale);
  p.d_o = d_o.data_ptr();
  SetStrides(d_o, &p.do_batch_stride, &p.do_head_stride, &p.do_row_stride);
  p.dq = dq.data_ptr(), p.dk = dk.data_ptr(), p.dv = dv.data_ptr();
  SetStrides(dq, &p.dq_batch_stride, &p.dq_head_stride, &p.dq_row_stride);
  SetStrides(dk, &p.dk_batch_stride, &p.dk_head_stride, &p.dk_row_stride);
  SetStrides(dv, &p.dv_batch_stride, &p.dv_head_stride, &p.dv_row_stride);
  for (size_t i = 0, g = 0; i < buffers.size(); ++i) {
    if (learning[i]) p.buffer_grads[bw.slots[i]] = grads[g++].data_ptr<float>();
  }
  // torch.use_deterministic_algorithms(True): the same gradients, bit for bit, run after run.
  p.deterministic = at::globalContext().deterministicAlgorithms() ? 1 : 0;

  const auto [cu, loaded, stream] = Place(kn, q);
  const BwdModuleKind kind =
      std::find(learning.begin(), learning.end(), true) == learning.end() &&
              std::find(bw.learns.begin(), bw.learns.end(), true) != bw.learns.end()
          ? kWithoutBufferGrads
          : kWithBufferGrads;
  gpu::BwdLaunchPlan plan{};
  at::Tensor tables;
  std::unique_ptr<gpu::BackwardModule>& backward = loaded.backward[kind];
  {
    std::lock_guard lock(loaded.mu);
    if (backward == nullptr) {
      auto compiled = CompiledFor(kn, loaded.cc, /*backward=*/true, kind);
      Ok(compiled.status(), "compile " + kn.dir + "/kernel_bwd.cu");
      auto module = gpu::BackwardModule::Load(*compiled, bw.entries, kn.dtype, kn.head_dim);
      Ok(module.status(), "load the backward of " + kn.dir);
      backward = std::make_unique<gpu::BackwardModule>(*std::move(module));
    }
    std::string key = absl::StrCat("bwd", static_cast<int>(kind), ";", GeometryKey(p.fwd));
    for (const int64_t st : {p.do_batch_stride, p.do_head_stride, p.do_row_stride}) {
      absl::StrAppend(&key, ",", st);
    }
    absl::StrAppend(&key, reinterpret_cast<uintptr_t>(p.d_o) % 16 == 0 ? "a" : "u",
                    p.deterministic ? ";det" : "");
    plan = PlanOnce(loaded.backward_plans, key, cu, stream, q, [&](CUdeviceptr scratch) {
      return backward->Plan(p, scratch);
    });
    tables = KeptTables(loaded.tables, key, kn, plan.classify_grid,
                        plan.workspace_bytes - plan.tables_offset, cu, stream, q, [&](void* at) {
                          return backward->EnqueueTables(p, plan, at, stream);
                        });
  }
  at::Tensor scratch = Workspace(plan.workspace_bytes, q);
  p.workspace = scratch.data_ptr();
  p.workspace_size = static_cast<size_t>(scratch.numel());
  UseKeptTables(tables, scratch, plan.tables_offset, &plan.classify_grid);
  Ok(backward->Enqueue(p, plan, stream), "launch the backward");
  for (size_t i = 0, g = 0; i < buffers.size(); ++i) {
    if (learning[i]) {
      at::Tensor& grad = grads[g++];
      grad = grad.to(buffers[i].scalar_type());
    }
  }
  return outputs;
}

#endif  // CUBRIDGE_TORCH_CUDA

// cubridge::attention_backward through the dispatcher (looked up once).
const auto& BackwardOp() {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("cubridge::attention_backward", "")
          .typed<BackwardOutputs(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                 const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                 at::TensorList, at::IntArrayRef, double, c10::string_view)>();
  return op;
}

// The op's autograd: the forward saves q, k, v, O, LSE and the captured tensors; the backward
// runs the kernel folder's backward kernel (attention_backward) on them, giving dQ, dK, dV and
// the learnable captured tensors' gradients. LSE is not differentiable.
class AttentionFunction : public torch::autograd::Function<AttentionFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& q, const at::Tensor& k,
                                                const at::Tensor& v, at::TensorList buffers,
                                                double scale, std::string kernel) {
    at::AutoDispatchBelowADInplaceOrView below;
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("cubridge::attention", "")
                         .typed<std::tuple<at::Tensor, at::Tensor>(
                             const at::Tensor&, const at::Tensor&, const at::Tensor&,
                             at::TensorList, double, c10::string_view)>();
    auto [o, lse] = op.call(q, k, v, buffers, scale, kernel);
    ctx->mark_non_differentiable({lse});
    std::vector<at::Tensor> saved = {q, k, v, o, lse};
    saved.insert(saved.end(), buffers.begin(), buffers.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["kernel"] = kernel;
    return {o, lse};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &o = saved[3], &lse = saved[4];
    const std::vector<at::Tensor> buffers(saved.begin() + 5, saved.end());
    const std::string kernel = ctx->saved_data["kernel"].toStringRef();
    const KernelInfo& kn = Kernel(kernel);
    // O unused by the loss: its gradient is zero.
    const at::Tensor grad_o = grad_outputs[0].defined() ? grad_outputs[0] : at::zeros_like(o);
    // Only the captured tensors whose gradient is wanted (a learnable slope that is a
    // parameter, not a constant table): the others cost nothing in the kernel.
    std::vector<int64_t> learn;
    for (size_t i = 0; i < buffers.size(); ++i) learn.push_back(ctx->needs_input_grad(3 + i));
    auto [dq, dk, dv, grads] = BackwardOp().call(grad_o, q, k, v, o, lse, buffers, learn,
                                                 ctx->saved_data["scale"].toDouble(), kernel);
    // One gradient per input of forward: q, k, v, each captured tensor, scale, kernel.
    torch::autograd::variable_list out = {dq, dk, dv};
    for (size_t i = 0, g = 0; i < buffers.size(); ++i) {
      out.push_back(kn.backward.learns[i] && learn[i] ? grads[g++] : at::Tensor());
    }
    out.emplace_back();
    out.emplace_back();
    return out;
  }
};

// The backward op's own autograd: none (no double backward). Called by AttentionFunction's
// backward with grad mode off; with create_graph=True its results would silently be taken as
// constants, so a call that would need a graph raises instead.
BackwardOutputs AttentionBackwardAutograd(const at::Tensor& grad_o, const at::Tensor& q,
                                          const at::Tensor& k, const at::Tensor& v,
                                          const at::Tensor& o, const at::Tensor& lse,
                                          at::TensorList buffers, at::IntArrayRef learn,
                                          double scale, c10::string_view kernel) {
  bool needs_grad = grad_o.requires_grad() || q.requires_grad() || k.requires_grad() ||
                    v.requires_grad() || o.requires_grad();
  for (const at::Tensor& b : buffers) needs_grad = needs_grad || b.requires_grad();
  TORCH_CHECK(!at::GradMode::is_enabled() || !needs_grad, kBackwardOp,
              ": a gradient of the gradient (create_graph=True, double backward) is not "
              "available for CuBridge kernels");
  at::AutoDispatchBelowADInplaceOrView below;
  return BackwardOp().call(grad_o, q, k, v, o, lse, buffers, learn, scale, kernel);
}

std::tuple<at::Tensor, at::Tensor> AttentionAutograd(const at::Tensor& q, const at::Tensor& k,
                                                     const at::Tensor& v, at::TensorList buffers,
                                                     double scale, c10::string_view kernel) {
  auto out = AttentionFunction::apply(q, k, v, buffers, scale, std::string(kernel));
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
  m.def("attention_backward(Tensor grad_o, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, "
        "Tensor[] buffers, int[] learn, float scale, str kernel) -> (Tensor, Tensor, Tensor, "
        "Tensor[])");
}

TORCH_LIBRARY_IMPL(cubridge, CPU, m) {
  m.impl("attention", AttentionCpu);
  m.impl("attention_backward", AttentionBackwardCpu);
}
TORCH_LIBRARY_IMPL(cubridge, Meta, m) {
  m.impl("attention", AttentionMeta);
  m.impl("attention_backward", AttentionBackwardMeta);
}
TORCH_LIBRARY_IMPL(cubridge, Autograd, m) {
  m.impl("attention", AttentionAutograd);
  m.impl("attention_backward", AttentionBackwardAutograd);
}
#ifdef CUBRIDGE_TORCH_CUDA
TORCH_LIBRARY_IMPL(cubridge, CUDA, m) {
  m.impl("attention", AttentionCuda);
  m.impl("attention_backward", AttentionBackwardCuda);
}
#endif

}  // namespace cubridge::torch_op
