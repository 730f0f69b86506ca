#include "worker/gpu/module.h"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "cuir/files/files.h"

namespace cubridge::gpu {
namespace {

const char* const kRoles[] = {"plan", "classify", "compact", "attention", "combine"};

std::string ElementType(int dtype) { return dtype == 1 ? "__half" : "__nv_bfloat16"; }

// The bytes a swizzle mode permutes within (CU_TENSOR_MAP_SWIZZLE_32B/64B/128B); 0 for none.
uint32_t SwizzleSpan(int32_t swizzle) { return swizzle == 0 ? 0 : 16u << swizzle; }

// Why the driver likely refused a map: what TMA requires of the address and strides.
std::string TmaHint(const TmaGeometry& g) {
  std::string hint;
  if (reinterpret_cast<uintptr_t>(g.address) % 16 != 0) {
    absl::StrAppend(&hint, "; the address is not 16-byte aligned");
  }
  const char* const names[] = {"row", "head", "batch"};
  for (int i = 0; i < 3; ++i) {
    if (g.strides[i] % 16 != 0) {
      absl::StrAppend(&hint, "; the ", names[i], " stride (", g.strides[i],
                      " bytes) is not a multiple of 16");
    }
  }
  if (hint.empty()) {
    hint = "; TMA needs a 16-byte aligned address and strides that are multiples of 16 bytes";
  }
  return hint;
}

// The maps `plan` asks for, over `p`'s tensors, in request order (unused slots zero).
absl::StatusOr<TmaMaps> EncodeTmaMaps(const Driver& cu, const AttnParams& p,
                                      const LaunchPlan& plan) {
  static_assert(sizeof(CUtensorMap) == sizeof(TmaMaps{}.map[0]));
  TmaMaps maps;
  std::memset(&maps, 0, sizeof(maps));
  for (int i = 0; i < plan.tma_count; ++i) {
    auto g = TmaGeometryFor(p, plan.tma[i]);
    if (!g.ok()) {
      return absl::Status(g.status().code(),
                          absl::StrCat("TMA map ", i, ": ", g.status().message()));
    }
    CUtensorMap map;
    std::memset(&map, 0, sizeof(map));
    const CUresult rc = cu.TensorMapEncodeTiled(
        &map, g->data_type, 4, g->address, g->dims, g->strides, g->box, g->element_strides,
        CU_TENSOR_MAP_INTERLEAVE_NONE, g->swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (rc != CUDA_SUCCESS) {
      const absl::Status s = cu.Check(rc, "cuTensorMapEncodeTiled");
      return absl::InvalidArgumentError(absl::StrCat("cannot encode TMA map ", i, " over ",
                                                     g->Describe(), ": ", s.message(),
                                                     TmaHint(*g)));
    }
    std::memcpy(maps.map[i], &map, sizeof(map));
  }
  return maps;
}

}  // namespace

std::string TmaGeometry::Describe() const {
  const char* type = data_type == CU_TENSOR_MAP_DATA_TYPE_FLOAT16    ? "fp16"
                     : data_type == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 ? "bf16"
                     : data_type == CU_TENSOR_MAP_DATA_TYPE_FLOAT32  ? "fp32"
                     : data_type == CU_TENSOR_MAP_DATA_TYPE_INT32    ? "int32"
                     : data_type == CU_TENSOR_MAP_DATA_TYPE_INT64    ? "int64"
                                                                     : "uint8";
  return absl::StrCat(tensor, " (", type, " at 0x", absl::Hex(reinterpret_cast<uintptr_t>(address)),
                      "): dims (", absl::StrJoin(dims, ", "), ") strides (",
                      absl::StrJoin(strides, ", "), ") bytes, box (", absl::StrJoin(box, ", "),
                      "), swizzle ", static_cast<int>(swizzle));
}

namespace {

// The request's box (box_cols x box_rows, one of each outer dimension) and swizzle.
TmaGeometry WithBox(TmaGeometry g, const TmaRequest& request) {
  g.box[0] = request.box_cols;
  g.box[1] = request.box_rows;
  g.box[2] = 1;
  g.box[3] = 1;
  g.swizzle = static_cast<CUtensorMapSwizzle>(request.swizzle);
  return g;
}

// A map over captured tensor `i` (launch_abi.cuh, CUBRIDGE_TMA_BUFFER0): its innermost two
// dimensions and two outer ones (1 where the rank is lower), strides from the buffer's.
absl::StatusOr<TmaGeometry> BufferGeometry(const AttnParams& p, const TmaRequest& request, int i) {
  static const char* const kNames[] = {"buffer 0", "buffer 1", "buffer 2", "buffer 3",
                                       "buffer 4", "buffer 5", "buffer 6", "buffer 7"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == kMaxBuffers);
  static const CUtensorMapDataType kTypes[] = {
      CU_TENSOR_MAP_DATA_TYPE_INT32,   CU_TENSOR_MAP_DATA_TYPE_INT64,
      CU_TENSOR_MAP_DATA_TYPE_UINT8,   CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
      CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, CU_TENSOR_MAP_DATA_TYPE_FLOAT16};
  const auto& b = p.buffers[i];
  int64_t dims[4], strides[3];
  const int64_t e = b.data == nullptr ? 0 : cubridge_attn_fwd_buffer_map_shape(&b, dims, strides);
  if (e == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a TMA map over ", kNames[i], " needs its data, a dtype 0 to 5 and a rank 1 to 4; it has ",
        b.data == nullptr ? "no data" : "data", ", dtype ", b.dtype, ", rank ", b.rank));
  }
  if (request.box_cols * e % 16 != 0 ||
      (request.swizzle > 0 && request.box_cols * e > SwizzleSpan(request.swizzle))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a TMA map over ", kNames[i], ": box_cols ", request.box_cols, " of ", e,
        "-byte elements is not a multiple of 16 bytes within the swizzle span"));
  }
  TmaGeometry g;
  g.tensor = kNames[i];
  g.address = const_cast<void*>(b.data);
  g.data_type = kTypes[b.dtype];
  for (int k = 0; k < 4; ++k) {
    const int d = b.rank - 1 - k;  // the buffer's dimension
    if (dims[k] < 1) {
      return absl::InvalidArgumentError(absl::StrCat("a TMA map over ", kNames[i],
                                                     " needs every size at least 1; size ", d,
                                                     " is ", dims[k]));
    }
    g.dims[k] = static_cast<cuuint64_t>(dims[k]);
    if (k > 0 && strides[k - 1] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a TMA map over ", kNames[i], " cannot have stride ", b.strides[d], " in dimension ", d));
    }
    if (k > 0) g.strides[k - 1] = static_cast<cuuint64_t>(strides[k - 1]);
  }
  return WithBox(g, request);
}

}  // namespace

absl::StatusOr<TmaGeometry> TmaGeometryFor(const AttnParams& p, const TmaRequest& request) {
  if (request.tensor >= kTmaBuffer0 && request.tensor < kTmaBuffer0 + kMaxBuffers) {
    return BufferGeometry(p, request, request.tensor - kTmaBuffer0);
  }
  struct View {
    const char* name;
    const void* data;
    int64_t batch_stride, head_stride, row_stride;
    int32_t heads, rows;
  };
  View v;
  switch (request.tensor) {
    case 0:
      v = {"q", p.q, p.q_batch_stride, p.q_head_stride, p.q_row_stride, p.heads_q, p.seqlen_q};
      break;
    case 1:
      v = {"k", p.k, p.k_batch_stride, p.k_head_stride, p.k_row_stride, p.heads_kv, p.seqlen_kv};
      break;
    case 2:
      v = {"v", p.v, p.v_batch_stride, p.v_head_stride, p.v_row_stride, p.heads_kv, p.seqlen_kv};
      break;
    case 3:
      v = {"o", p.o, p.o_batch_stride, p.o_head_stride, p.o_row_stride, p.heads_q, p.seqlen_q};
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "a TMA request names tensor ", request.tensor, "; 0 = q, 1 = k, 2 = v, 3 = o, ",
          kTmaBuffer0, " + i = buffer i (i < ", kMaxBuffers, ")"));
  }
  if (p.dtype != 0 && p.dtype != 1) {
    return absl::InvalidArgumentError(absl::StrCat("a TMA map over ", v.name,
                                                   " needs dtype 0 (bf16) or 1 (fp16), not ",
                                                   p.dtype));
  }
  const int64_t dims[4] = {p.head_dim, v.rows, v.heads, p.batch};
  if (dims[0] < 1 || dims[1] < 1 || dims[2] < 1 || dims[3] < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a TMA map over ", v.name, " needs every dimension at least 1; (head_dim, seqlen, heads, "
        "batch) is (", absl::StrJoin(dims, ", "), ")"));
  }
  const int64_t strides[3] = {v.row_stride, v.head_stride, v.batch_stride};
  if (strides[0] < 0 || strides[1] < 0 || strides[2] < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a TMA map over ", v.name, " cannot have negative strides; (row, head, batch) is (",
        absl::StrJoin(strides, ", "), ") elements"));
  }
  constexpr int64_t kElementBytes = 2;
  TmaGeometry g;
  g.tensor = v.name;
  g.address = const_cast<void*>(v.data);
  g.data_type = p.dtype == 1 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  for (int i = 0; i < 4; ++i) g.dims[i] = static_cast<cuuint64_t>(dims[i]);
  for (int i = 0; i < 3; ++i) g.strides[i] = static_cast<cuuint64_t>(strides[i] * kElementBytes);
  return WithBox(g, request);
}

absl::Status CheckTmaRequests(const LaunchPlan& plan) {
  if (plan.tma_count < 0 || plan.tma_count > kMaxTma) {
    return absl::InvalidArgumentError(absl::StrCat("the kernel's launch plan has tma_count ",
                                                   plan.tma_count, "; it must be 0 to ", kMaxTma));
  }
  for (int i = 0; i < plan.tma_count; ++i) {
    const TmaRequest& r = plan.tma[i];
    const std::string field = absl::StrCat("the kernel's launch plan has tma[", i, "].");
    if (r.tensor < 0 || r.tensor >= kTmaBuffer0 + kMaxBuffers) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "tensor ", r.tensor, "; it must be 0 (q), 1 (k), 2 (v), 3 (o) or ",
                       kTmaBuffer0, " + i (buffer i < ", kMaxBuffers, ")"));
    }
    // A buffer's element size is the call's (TmaGeometryFor checks its box in bytes).
    const bool buffer = r.tensor >= kTmaBuffer0;
    if (r.swizzle < 0 || r.swizzle > 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, "swizzle ", r.swizzle, "; it must be 0 (none), 1 (32B), 2 (64B) or 3 (128B)"));
    }
    if (r.box_rows < 1 || r.box_rows > 256) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "box_rows ", r.box_rows, "; it must be 1 to 256"));
    }
    // TMA's own limits on the inner box dimension: at most 256 elements, a multiple of 16 bytes,
    // and no wider than the swizzle span when swizzled.
    if (buffer && (r.box_cols < 1 || r.box_cols > 256)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "box_cols ", r.box_cols, "; it must be 1 to 256"));
    }
    if (buffer) continue;
    if (r.box_cols < 1 || r.box_cols > 256 || r.box_cols * 2 % 16 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, "box_cols ", r.box_cols, "; it must be 8 to 256 in steps of 8 (16 bytes)"));
    }
    const uint32_t span = SwizzleSpan(r.swizzle);
    if (span > 0 && r.box_cols * 2 > span) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, "box_cols ", r.box_cols, " (", r.box_cols * 2, " bytes) with swizzle ", r.swizzle,
          "; a swizzled box row is at most the swizzle span, ", span, " bytes"));
    }
  }
  return absl::OkStatus();
}

absl::Status TableKernelsDeclared(uint32_t classify_grid, CUfunction classify,
                                  CUfunction compact) {
  if (classify_grid == 0 || (classify != nullptr && compact != nullptr)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "the launch plan asks for block-table kernels the module does not declare "
      "(`@cuir-entry classify` and `compact`)");
}

absl::Status CheckLaunchPlan(LaunchPlan& plan) {
  if (plan.version < kMinPlanVersion || plan.version > kPlanVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the kernel's launch plan has version ", plan.version, "; this worker reads versions ",
        kMinPlanVersion, " to ", kPlanVersion,
        " (rebuild the worker and the kernel from one source tree)"));
  }
  if (plan.version < 2) {
    // Not the kernel's fields (the loader zero-filled them): a version-1 kernel takes no maps.
    plan.tma_count = 0;
    std::memset(plan.tma, 0, sizeof(plan.tma));
  }
  if (plan.version < 3) {
    // Nor these: before version 3 no kernel split its last wave.
    plan.split_workspace_bytes = 0;
    plan.combine_grid = plan.combine_threads = 0;
  }
  if (plan.status != 0) {
    return absl::InvalidArgumentError(
        "the kernel refuses these parameters (null or misaligned tensor, unsupported head dim "
        "or dtype, or a missing or too short buffer)");
  }
  return CheckTmaRequests(plan);
}

std::map<std::string, std::string> EntryExpressions(const EntryPoints& entries, int dtype,
                                                    int head_dim) {
  std::map<std::string, std::string> out;
  for (const auto& [role, name] : entries) {
    out[role] = absl::StrReplaceAll(
        name, {{"{T}", ElementType(dtype)}, {"{D}", absl::StrCat(head_dim)}});
  }
  return out;
}

absl::StatusOr<KernelModule> KernelModule::Load(const CompiledModule& compiled,
                                                const EntryPoints& entries, int dtype,
                                                int head_dim) {
  auto d = Driver::Get();
  if (!d.ok()) return d.status();
  KernelModule m;
  m.cu_ = *d;
  m.dtype_ = dtype;
  m.head_dim_ = head_dim;
  const Driver& cu = *m.cu_;
  CUdevice device = 0;
  if (cu.CtxGetDevice(&device) != CUDA_SUCCESS ||
      cu.DeviceGetAttribute(&m.sm_count_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device) !=
          CUDA_SUCCESS) {
    m.sm_count_ = 0;  // unknown: a persistent kernel then gets one CTA per work tile
  }
  if (auto s = cu.Check(cu.ModuleLoadDataEx(&m.module_, compiled.image.data(), 0, nullptr, nullptr),
                        "cuModuleLoadDataEx");
      !s.ok()) {
    return s;
  }
  const auto expressions = EntryExpressions(entries, dtype, head_dim);
  CUfunction* slots[] = {&m.plan_, &m.classify_, &m.compact_, &m.attention_, &m.combine_};
  for (int i = 0; i < 5; ++i) {
    auto expr = expressions.find(kRoles[i]);
    // Block-table kernels exist only where the program has tables, a combine kernel only where
    // the expert splits its last wave (a lifted user kernel has neither); Enqueue refuses a plan
    // that asks for them without the entries.
    const bool optional = i == 1 || i == 2 || i == 4;
    if (expr == expressions.end() && optional) continue;
    if (expr == expressions.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the lowered kernel declares no `@cuir-entry ", kRoles[i], "`"));
    }
    auto sym = compiled.symbols.find(expr->second);
    if (sym == compiled.symbols.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the module was not compiled with the name expression `", expr->second, "`"));
    }
    if (auto s = cu.Check(cu.ModuleGetFunction(slots[i], m.module_, sym->second.c_str()),
                          "cuModuleGetFunction");
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(s.message(), " (", expr->second, ")"));
    }
  }
  cu.FuncGetAttribute(&m.registers_, CU_FUNC_ATTRIBUTE_NUM_REGS, m.attention_);
  cu.FuncGetAttribute(&m.local_bytes_, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, m.attention_);
  return m;
}

KernelModule::KernelModule(KernelModule&& o) noexcept
    : cu_(o.cu_),
      module_(o.module_),
      plan_(o.plan_),
      classify_(o.classify_),
      compact_(o.compact_),
      attention_(o.attention_),
      combine_(o.combine_),
      head_dim_(o.head_dim_),
      dtype_(o.dtype_),
      sm_count_(o.sm_count_),
      registers_(o.registers_),
      local_bytes_(o.local_bytes_) {
  o.module_ = nullptr;
}

KernelModule::~KernelModule() {
  if (module_ != nullptr) cu_->ModuleUnload(module_);
}

std::string ModuleFileName(int device_cc, bool ptx) {
  return absl::StrCat("module.sm_", device_cc, ptx ? ".ptx" : ".cubin");
}

std::map<std::string, std::string> ModuleFiles(const std::string& name, const CompiledModule& m) {
  return {{name, m.image}, {name + ".json", nlohmann::json(m.symbols).dump()}};
}

absl::StatusOr<CompiledModule> ReadModuleFiles(const std::string& dir, const std::string& name,
                                               bool ptx) {
  const std::string path = dir + "/" + name;
  auto image = files::ReadFile(path);
  if (!image.ok()) return image.status();
  auto symbols_text = files::ReadFile(path + ".json");
  if (!symbols_text.ok()) return symbols_text.status();
  const auto symbols = nlohmann::json::parse(*symbols_text, nullptr, false);
  CompiledModule m;
  if (!symbols.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".json: not a JSON object of symbols"));
  }
  for (const auto& [expr, symbol] : symbols.items()) {
    if (!symbol.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".json: symbol of ", expr,
                                                     " is not a string"));
    }
    m.symbols[expr] = symbol.get<std::string>();
  }
  m.image = *std::move(image);
  m.ptx = ptx;
  return m;
}

absl::StatusOr<LaunchPlan> KernelModule::Plan(const AttnParams& p, CUdeviceptr scratch) const {
  if (p.head_dim != head_dim_ || p.dtype != dtype_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this module was compiled for head_dim ", head_dim_, " and dtype ", dtype_,
        ", not head_dim ", p.head_dim, " and dtype ", p.dtype));
  }
  AttnParams params = p;
  void* args[] = {&params, &scratch};
  // A kernel built against an older (shorter) plan struct writes only the fields it knows: the
  // rest must read as zero (version 1: no TMA maps). The one input, the SMs this worker launches
  // on, lets the kernel leave out a combine that would find nothing split. Same stream as the
  // plan kernel.
  LaunchPlan in{};
  in.sm_count = static_cast<uint32_t>(std::max(sm_count_, 0));
  if (auto s = cu_->Check(cu_->MemcpyHtoD(scratch, &in, sizeof(in)), "write launch plan input");
      !s.ok()) {
    return s;
  }
  if (auto s = cu_->Check(cu_->LaunchKernel(plan_, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr),
                          "launch plan kernel");
      !s.ok()) {
    return s;
  }
  LaunchPlan plan{};
  if (auto s = cu_->Check(cu_->MemcpyDtoH(&plan, scratch, sizeof(plan)), "read launch plan");
      !s.ok()) {
    return s;
  }
  if (auto s = CheckLaunchPlan(plan); !s.ok()) return s;
  return plan;
}

absl::Status KernelModule::EnqueueTables(const AttnParams& p, const LaunchPlan& plan,
                                         void* tables, CUstream stream) const {
  if (plan.classify_grid == 0) return absl::OkStatus();
  if (auto s = TableKernelsDeclared(plan.classify_grid, classify_, compact_); !s.ok()) return s;
  AttnParams params = p;
  void* args[] = {&params, &tables};
  for (auto [fn, grid, what] : {std::tuple{classify_, plan.classify_grid, "launch classify"},
                                std::tuple{compact_, plan.compact_grid, "launch compact"}}) {
    if (auto s = cu_->Check(cu_->LaunchKernel(fn, grid, 1, 1, plan.table_threads, 1, 1, 0,
                                              stream, args, nullptr),
                            what);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status KernelModule::Enqueue(const AttnParams& p, const LaunchPlan& plan,
                                   CUstream stream) const {
  if (plan.workspace_bytes > 0 && (p.workspace == nullptr || p.workspace_size < plan.workspace_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("the call needs ", plan.workspace_bytes,
                                                   " bytes of workspace; got ", p.workspace_size));
  }
  AttnParams params = p;
  void* workspace = p.workspace;
  void* args[] = {&params, &workspace};
  // The TMA maps (plan version 2) are the attention kernel's third parameter; a kernel that asks
  // for none has two, and gets two.
  TmaMaps maps{};
  void* attention_args[] = {&params, &workspace, &maps};
  // Encoded before anything is enqueued, so a refused map leaves the stream untouched.
  if (auto s = CheckTmaRequests(plan); !s.ok()) return s;
  if (plan.tma_count > 0) {
    auto encoded = EncodeTmaMaps(*cu_, p, plan);
    if (!encoded.ok()) return encoded.status();
    maps = *encoded;
  }
  if (auto s = TableKernelsDeclared(plan.classify_grid, classify_, compact_); !s.ok()) return s;
  if (plan.combine_grid > 0 && combine_ == nullptr) {
    return absl::InvalidArgumentError(
        "the launch plan asks for a combine kernel the module does not declare "
        "(`@cuir-entry combine`)");
  }
  if (auto s = EnqueueTables(p, plan, p.workspace, stream); !s.ok()) return s;
  if (auto s = cu_->Check(cu_->FuncSetAttribute(attention_,
                                                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                plan.smem_bytes),
                          "set attention shared memory");
      !s.ok()) {
    return s;
  }
  const unsigned grid_x =
      cubridge_attn_fwd_launch_ctas(&plan, static_cast<uint32_t>(std::max(sm_count_, 0)));
  if (auto s = cu_->Check(cu_->LaunchKernel(attention_, grid_x, plan.grid[1], plan.grid[2],
                                            plan.threads, 1, 1, plan.smem_bytes, stream,
                                            plan.tma_count > 0 ? attention_args : args, nullptr),
                          "launch attention");
      !s.ok()) {
    return s;
  }
  // The combine of a split last wave: named by a kernel that knew this worker's SM count only
  // where this launch splits (an older kernel names it wherever one may; it then returns at once).
  if (plan.combine_grid == 0) return absl::OkStatus();
  return cu_->Check(cu_->LaunchKernel(combine_, plan.combine_grid, 1, 1, plan.combine_threads, 1,
                                      1, 0, stream, args, nullptr),
                    "launch combine");
}

}  // namespace cubridge::gpu
