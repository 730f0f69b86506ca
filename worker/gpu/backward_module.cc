#include "worker/gpu/backward_module.h"

#include "absl/strings/str_cat.h"

namespace cubridge::gpu {
namespace {

enum Role { kPlan, kClassify, kCompact, kPreprocess, kAttention, kPostprocess };

}  // namespace

absl::Status CheckBackwardPlan(const BwdLaunchPlan& plan) {
  if (plan.version != CUBRIDGE_BWD_PLAN_VERSION) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the backward kernel's launch plan has version ", plan.version, "; this loader reads ",
        CUBRIDGE_BWD_PLAN_VERSION, " (rebuild the kernel with this CuBridge)"));
  }
  if (plan.status != 0) {
    return absl::InvalidArgumentError(
        "the backward kernel refuses these parameters (its plan: null tensors, a head dim other "
        "than 64 or 128, rows not 16-byte aligned, heads_q not a multiple of heads_kv, or "
        "captured tensors too small for what the variant reads)");
  }
  const std::pair<const char*, uint32_t> sizes[] = {
      {"row_grid", plan.row_grid},   {"row_threads", plan.row_threads},
      {"grid[0]", plan.grid[0]},     {"grid[1]", plan.grid[1]},
      {"grid[2]", plan.grid[2]},     {"threads", static_cast<uint32_t>(plan.threads)}};
  for (const auto& [name, value] : sizes) {
    if (value == 0 || value > (1u << 31)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the backward kernel's launch plan has ", name, " = ", value));
    }
  }
  if (plan.post_grid > (1u << 31)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the backward kernel's launch plan has post_grid = ", plan.post_grid));
  }
  if (plan.classify_grid > 0 && (plan.compact_grid == 0 || plan.table_threads == 0 ||
                                 plan.tables_offset > plan.workspace_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the backward kernel's launch plan asks for block tables with compact_grid ",
        plan.compact_grid, ", table_threads ", plan.table_threads, " and tables at ",
        plan.tables_offset, " of ", plan.workspace_bytes, " workspace bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<BackwardModule> BackwardModule::Load(const CompiledModule& compiled,
                                                    const EntryPoints& entries, int dtype,
                                                    int head_dim) {
  auto d = Driver::Get();
  if (!d.ok()) return d.status();
  BackwardModule m;
  m.cu_ = *d;
  m.dtype_ = dtype;
  m.head_dim_ = head_dim;
  const Driver& cu = *m.cu_;
  if (auto s = cu.Check(cu.ModuleLoadDataEx(&m.module_, compiled.image.data(), 0, nullptr, nullptr),
                        "cuModuleLoadDataEx");
      !s.ok()) {
    return s;
  }
  const auto expressions = EntryExpressions(entries, dtype, head_dim);
  for (int i = 0; i < 6; ++i) {
    auto expr = expressions.find(kBackwardRoles[i]);
    if (expr == expressions.end()) {
      if (i == kClassify || i == kCompact) continue;  // a program without block tables
      return absl::InvalidArgumentError(absl::StrCat(
          "the lowered backward kernel declares no `@cuir-entry ", kBackwardRoles[i], "`"));
    }
    auto sym = compiled.symbols.find(expr->second);
    if (sym == compiled.symbols.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the module was not compiled with the name expression `", expr->second, "`"));
    }
    if (auto s = cu.Check(cu.ModuleGetFunction(&m.fn_[i], m.module_, sym->second.c_str()),
                          "cuModuleGetFunction");
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(s.message(), " (", expr->second, ")"));
    }
  }
  cu.FuncGetAttribute(&m.registers_, CU_FUNC_ATTRIBUTE_NUM_REGS, m.fn_[kAttention]);
  cu.FuncGetAttribute(&m.local_bytes_, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, m.fn_[kAttention]);
  return m;
}

BackwardModule::BackwardModule(BackwardModule&& o) noexcept
    : cu_(o.cu_),
      module_(o.module_),
      head_dim_(o.head_dim_),
      dtype_(o.dtype_),
      registers_(o.registers_),
      local_bytes_(o.local_bytes_) {
  for (int i = 0; i < 6; ++i) fn_[i] = o.fn_[i];
  o.module_ = nullptr;
}

BackwardModule::~BackwardModule() {
  if (module_ != nullptr) cu_->ModuleUnload(module_);
}

absl::StatusOr<BwdLaunchPlan> BackwardModule::Plan(const BwdParams& p, CUdeviceptr scratch) const {
  if (p.fwd.head_dim != head_dim_ || p.fwd.dtype != dtype_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this backward module was compiled for head_dim ", head_dim_, " and dtype ", dtype_,
        ", not head_dim ", p.fwd.head_dim, " and dtype ", p.fwd.dtype));
  }
  BwdParams params = p;
  void* args[] = {&params, &scratch};
  if (auto s = cu_->Check(
          cu_->LaunchKernel(fn_[kPlan], 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr),
          "launch backward plan kernel");
      !s.ok()) {
    return s;
  }
  BwdLaunchPlan plan{};
  if (auto s = cu_->Check(cu_->MemcpyDtoH(&plan, scratch, sizeof(plan)), "read backward plan");
      !s.ok()) {
    return s;
  }
  if (auto s = CheckBackwardPlan(plan); !s.ok()) return s;
  return plan;
}

absl::Status BackwardModule::Launch(int role, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z,
                                    uint32_t threads, uint32_t smem, void** args,
                                    CUstream stream) const {
  const std::string what = absl::StrCat("launch backward ", kBackwardRoles[role]);
  return cu_->Check(cu_->LaunchKernel(fn_[role], grid_x, grid_y, grid_z, threads, 1, 1, smem,
                                      stream, args, nullptr),
                    what.c_str());
}

absl::Status BackwardModule::EnqueueTables(const BwdParams& p, const BwdLaunchPlan& plan,
                                           void* tables, CUstream stream) const {
  if (plan.classify_grid == 0) return absl::OkStatus();
  if (auto s = TableKernelsDeclared(plan.classify_grid, fn_[kClassify], fn_[kCompact]); !s.ok()) {
    return s;
  }
  cubridge_attn_fwd_params fwd = p.fwd;
  void* args[] = {&fwd, &tables};
  if (auto s = Launch(kClassify, plan.classify_grid, 1, 1, plan.table_threads, 0, args, stream);
      !s.ok()) {
    return s;
  }
  return Launch(kCompact, plan.compact_grid, 1, 1, plan.table_threads, 0, args, stream);
}

absl::Status BackwardModule::Enqueue(const BwdParams& p, const BwdLaunchPlan& plan,
                                     CUstream stream) const {
  if (p.workspace == nullptr || p.workspace_size < plan.workspace_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the backward call needs ",
                                                   plan.workspace_bytes,
                                                   " bytes of workspace; got ", p.workspace_size));
  }
  if (auto s = TableKernelsDeclared(plan.classify_grid, fn_[kClassify], fn_[kCompact]); !s.ok()) {
    return s;
  }
  BwdParams params = p;
  void* args[] = {&params};
  if (auto s = Launch(kPreprocess, plan.row_grid, 1, 1, plan.row_threads, 0, args, stream);
      !s.ok()) {
    return s;
  }
  if (auto s = EnqueueTables(p, plan, static_cast<char*>(p.workspace) + plan.tables_offset,
                             stream);
      !s.ok()) {
    return s;
  }
  if (auto s = cu_->Check(cu_->FuncSetAttribute(fn_[kAttention],
                                                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                plan.smem_bytes),
                          "set backward attention shared memory");
      !s.ok()) {
    return s;
  }
  if (auto s = Launch(kAttention, plan.grid[0], plan.grid[1], plan.grid[2],
                      static_cast<uint32_t>(plan.threads), static_cast<uint32_t>(plan.smem_bytes),
                      args, stream);
      !s.ok()) {
    return s;
  }
  if (plan.post_grid == 0) return absl::OkStatus();  // the attention kernel converted all
  return Launch(kPostprocess, plan.post_grid, 1, 1, plan.row_threads, 0, args, stream);
}

}  // namespace cubridge::gpu
