#include "worker/gpu/user_kernel.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "cuir/ir/program.h"
#include "cuir/lower/expert.h"
#include "cuir/lower/lift.h"
#include "cuir/files/files.h"
#include "worker/gpu/module.h"
#include "worker/gpu/nvrtc.h"

namespace cubridge::gpu {

absl::StatusOr<lower::LoweredKernel> LoadUserKernel(const std::string& path,
                                                    const std::string& source) {
  lower::LoweredKernel k;
  auto entries = lower::UserKernelEntries(path, source);
  if (!entries.ok()) return entries.status();
  k.device_entries = *std::move(entries);
  // The C library pieces and the ABI types first; `#line` keeps the compiler's messages at the
  // user's own line numbers.
  std::string prelude = "#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n";
  for (const char* header : {"common/cuir_platform.cuh", "common/launch_abi.cuh"}) {
    auto text = files::ReadFile((std::filesystem::path(lower::ExpertsDir()) / header).string());
    if (!text.ok()) return text.status();
    absl::StrAppend(&prelude, *text, "\n");
  }
  const std::string file = std::filesystem::path(path).filename().string();
  k.cuda_source = absl::StrCat(prelude, "#line 1 \"", absl::StrReplaceAll(file, {{"\"", ""}}),
                               "\"\n", source);
  k.entry_point = k.device_entries.at("plan");
  return k;
}

UserKernelComparator::UserKernelComparator(GpuAutotuner* tuner, lower::LoweredKernel kernel,
                                           std::string path, cuir::AttentionConfig config,
                                           lower::Arch arch)
    : tuner_(tuner),
      kernel_(std::move(kernel)),
      path_(std::move(path)),
      config_(config),
      arch_(arch) {}

absl::Status UserKernelComparator::Prepare() {
  auto probe = tuner_->Probe(arch_);
  if (!probe.ok()) {
    // UNAVAILABLE: another worker of the arch may have the GPU this one lacks.
    return absl::UnavailableError(absl::StrCat(
        "a lifted program is accepted only when it agrees with the compiled kernel on a GPU, and "
        "there is none to use here: ", probe.status().message()));
  }
  device_ = *probe;
  // Compile errors are the kernel's, not the model's: report them before asking anything.
  CompileOptions copt;
  copt.arch = arch_;
  copt.ptx = true;  // runs on any GPU at least as new as arch_; enough to find compile errors
  const int dtype = config_.dtype == cuir::DType::kBF16 ? 0 : 1;
  for (const auto& [role, expr] :
       EntryExpressions(kernel_.device_entries, dtype, static_cast<int>(config_.head_dim))) {
    copt.name_expressions.push_back(expr);
  }
  auto compiled = CompileWithNvrtc(kernel_.cuda_source, std::filesystem::path(path_).filename(), copt);
  if (!compiled.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, " does not compile: ", compiled.status().message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> UserKernelComparator::Compare(const cuir::Program& program,
                                                             uint64_t seed) {
  const cuir::Program none;
  pipeline::GpuStageInput in{program, none};
  in.config = config_;
  in.arch = arch_;
  in.seed = seed;
  // No spec: the reference is the program's interpretation.
  return tuner_->CheckCandidate(in, kernel_, program, absl::StrCat("lift-", ++compares_),
                                cuir::PrintProgram(program), /*profile=*/false);
}

}  // namespace cubridge::gpu
