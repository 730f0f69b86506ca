#include "worker/gpu/module.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace cubridge::gpu {
namespace {

const char* const kRoles[] = {"plan", "classify", "compact", "attention"};

std::string ElementType(int dtype) { return dtype == 1 ? "__half" : "__nv_bfloat16"; }

}  // namespace

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
  if (auto s = cu.Check(cu.ModuleLoadDataEx(&m.module_, compiled.image.data(), 0, nullptr, nullptr),
                        "cuModuleLoadDataEx");
      !s.ok()) {
    return s;
  }
  const auto expressions = EntryExpressions(entries, dtype, head_dim);
  CUfunction* slots[] = {&m.plan_, &m.classify_, &m.compact_, &m.attention_};
  for (int i = 0; i < 4; ++i) {
    auto expr = expressions.find(kRoles[i]);
    // Block-table kernels exist only where the program has tables (a lifted user kernel has
    // none); Enqueue refuses a plan that asks for them without the entries.
    const bool optional = i == 1 || i == 2;
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
      head_dim_(o.head_dim_),
      dtype_(o.dtype_),
      registers_(o.registers_),
      local_bytes_(o.local_bytes_) {
  o.module_ = nullptr;
}

KernelModule::~KernelModule() {
  if (module_ != nullptr) cu_->ModuleUnload(module_);
}

absl::StatusOr<LaunchPlan> KernelModule::Plan(const AttnParams& p, CUdeviceptr scratch) const {
  if (p.head_dim != head_dim_ || p.dtype != dtype_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this module was compiled for head_dim ", head_dim_, " and dtype ", dtype_,
        ", not head_dim ", p.head_dim, " and dtype ", p.dtype));
  }
  AttnParams params = p;
  void* args[] = {&params, &scratch};
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
  if (plan.version != kPlanVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the kernel's launch plan has version ", plan.version, "; this worker reads version ",
        kPlanVersion, " (rebuild the worker and the kernel from one source tree)"));
  }
  if (plan.status != 0) {
    return absl::InvalidArgumentError(
        "the kernel refuses these parameters (null or misaligned tensor, unsupported head dim "
        "or dtype, or a missing or too short buffer)");
  }
  return plan;
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
  if (plan.classify_grid > 0 && (classify_ == nullptr || compact_ == nullptr)) {
    return absl::InvalidArgumentError(
        "the launch plan asks for block-table kernels the module does not declare "
        "(`@cuir-entry classify` and `compact`)");
  }
  if (plan.classify_grid > 0) {
    for (auto [fn, grid, what] : {std::tuple{classify_, plan.classify_grid, "launch classify"},
                                  std::tuple{compact_, plan.compact_grid, "launch compact"}}) {
      if (auto s = cu_->Check(cu_->LaunchKernel(fn, grid, 1, 1, plan.table_threads, 1, 1, 0,
                                                stream, args, nullptr),
                              what);
          !s.ok()) {
        return s;
      }
    }
  }
  if (auto s = cu_->Check(cu_->FuncSetAttribute(attention_,
                                                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                plan.smem_bytes),
                          "set attention shared memory");
      !s.ok()) {
    return s;
  }
  return cu_->Check(cu_->LaunchKernel(attention_, plan.grid[0], plan.grid[1], plan.grid[2],
                                      plan.threads, 1, 1, plan.smem_bytes, stream, args, nullptr),
                    "launch attention");
}

}  // namespace cubridge::gpu
