// A compiled lowered kernel loaded into the current CUDA context, launched the way the kernel's
// own host launcher does (kernel.cu, built by nvcc): its plan kernel says what one call
// enqueues, then the table kernels (if any) and the attention kernel run on the given stream.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "worker/gpu/abi.h"
#include "worker/gpu/driver.h"
#include "worker/gpu/nvrtc.h"

namespace cubridge::gpu {

// Device entry points of a lowered kernel, by role: plan, classify, compact, attention (see the
// `@cuir-entry` lines of the expert source). `attention` is a template naming {T} and {D}.
using EntryPoints = std::map<std::string, std::string>;

// The name expressions to compile for one (dtype, head_dim): NVRTC instantiates only these.
std::map<std::string, std::string> EntryExpressions(const EntryPoints& entries, int dtype,
                                                    int head_dim);

// Checks a plan read back from the plan kernel: its version (1 or 2: FAILED_PRECONDITION
// otherwise), its status (INVALID_ARGUMENT when the kernel refuses the parameters) and, for
// version 2, its TMA requests (INVALID_ARGUMENT naming the field). A version-1 plan has no TMA
// fields: whatever lies there is not the kernel's, so they are cleared.
absl::Status CheckLaunchPlan(LaunchPlan& plan);

// INVALID_ARGUMENT where a plan asks for block-table kernels (classify_grid > 0) that the
// module does not declare (`@cuir-entry classify` and `compact`); the forward's and the
// backward's modules both check it before they enqueue anything.
absl::Status TableKernelsDeclared(uint32_t classify_grid, CUfunction classify, CUfunction compact);
// The TMA part of that check: tma_count 0..CUBRIDGE_MAX_TMA, and each request's tensor 0..3 or a
// buffer (CUBRIDGE_TMA_BUFFER0 + i), swizzle 0..3, box_rows 1..256, box_cols 8..256 in steps of 8
// (16 bytes) and, when swizzled, at most the swizzle span (128B: 64 columns); a buffer's box_cols
// 1..256 (its bytes depend on the call's dtype: TmaGeometryFor checks them).
absl::Status CheckTmaRequests(const LaunchPlan& plan);

// One TMA tensor map over a call's tensor, as cuTensorMapEncodeTiled takes it: 4-D, innermost
// first (head_dim, seqlen, heads, batch), strides in bytes of dims 1..3, box
// (box_cols, box_rows, 1, 1); over a captured tensor, its innermost dimensions first.
struct TmaGeometry {
  const char* tensor = "";  // "q", "k", "v", "o", "buffer 0" ...
  void* address = nullptr;
  CUtensorMapDataType data_type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  cuuint64_t dims[4] = {};
  cuuint64_t strides[3] = {};  // bytes between rows, heads, batches
  cuuint32_t box[4] = {};
  cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;

  // "k: dims (128, 4096, 2, 4) strides (512, 2097152, 4194304) bytes box (64, 128, 1, 1) at 0x..."
  std::string Describe() const;
};

// The geometry of `request` over the call `p` (q and o have heads_q heads and seqlen_q rows, k and
// v heads_kv and seqlen_kv; a buffer its sizes). INVALID_ARGUMENT for a tensor id outside 0..3
// and the buffers, a dtype other than 0 or 1 (a buffer's: 0..5), a dimension below 1, a negative
// stride, a buffer box not a multiple of 16 bytes (what TMA cannot describe). Needs no GPU.
absl::StatusOr<TmaGeometry> TmaGeometryFor(const AttnParams& p, const TmaRequest& request);

// The file a kernel folder keeps its compiled module in, beside kernel.cu, for GPUs of compute
// capability `device_cc` (90 for sm_90): "module.sm_90.cubin", or ".ptx" for a kernel of an
// older arch family that the driver's JIT loads. Its symbols (name expression -> lowered name)
// go in the same name + ".json". adapt writes it after its GPU stage; the PyTorch op reads it,
// or compiles and writes it, so that no process compiles a kernel twice.
std::string ModuleFileName(int device_cc, bool ptx);
// A compiled module as a kernel folder keeps it: {name: image, name + ".json": symbols}.
std::map<std::string, std::string> ModuleFiles(const std::string& name, const CompiledModule& m);
// The module a kernel folder keeps under `name` (ModuleFileName), read back; NOT_FOUND when a
// file is missing, INVALID_ARGUMENT when the symbols are not a JSON object of names.
absl::StatusOr<CompiledModule> ReadModuleFiles(const std::string& dir, const std::string& name,
                                               bool ptx);

class KernelModule {
 public:
  // `module` was compiled with the expressions of EntryExpressions(entries, dtype, head_dim).
  static absl::StatusOr<KernelModule> Load(const CompiledModule& module,
                                           const EntryPoints& entries, int dtype, int head_dim);
  KernelModule(KernelModule&&) noexcept;
  KernelModule& operator=(KernelModule&&) = delete;
  ~KernelModule();

  // Runs the plan kernel for these parameters and waits for it. `scratch` is 256 bytes of device
  // memory for the plan, zero-filled first (so a version-1 kernel leaves tma_count 0) but for
  // the plan's one input, `sm_count`: this device's SMs.
  // INVALID_ARGUMENT when the kernel refuses the parameters; see CheckLaunchPlan.
  absl::StatusOr<LaunchPlan> Plan(const AttnParams& p, CUdeviceptr scratch) const;
  // Enqueues one call (tables, then attention) on `stream`. Does not wait. A plan with TMA
  // requests has their maps encoded over `p`'s tensors and passed as the attention kernel's third
  // parameter (INVALID_ARGUMENT naming the tensor and its geometry when the driver refuses one).
  // A persistent kernel's grid (plan.resident_ctas_per_sm > 0) is bounded by what fits at once.
  absl::Status Enqueue(const AttnParams& p, const LaunchPlan& plan, CUstream stream) const;
  // Enqueues the block-table kernels alone, writing the plan's tables (its workspace_bytes) for
  // these parameters at `tables`: for a caller that keeps tables which depend on the call
  // geometry alone, copies them into each call's workspace and enqueues the call with a plan
  // whose classify_grid is 0. OK and nothing enqueued where the plan builds no tables.
  absl::Status EnqueueTables(const AttnParams& p, const LaunchPlan& plan, void* tables,
                             CUstream stream) const;

  int registers() const { return registers_; }
  int local_bytes() const { return local_bytes_; }  // spills and stack per thread

 private:
  KernelModule() = default;
  const Driver* cu_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction plan_ = nullptr, classify_ = nullptr, compact_ = nullptr, attention_ = nullptr,
             combine_ = nullptr;
  int head_dim_ = 0, dtype_ = 0;
  int sm_count_ = 0;  // of the current context's device: bounds a persistent kernel's grid
  int registers_ = 0, local_bytes_ = 0;
};

}  // namespace cubridge::gpu
