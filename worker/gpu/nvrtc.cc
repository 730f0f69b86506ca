#include "worker/gpu/nvrtc.h"

#include <nvrtc.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace cubridge::gpu {
namespace {

// Owns one nvrtcProgram.
class Program {
 public:
  explicit Program(nvrtcProgram p) : p_(p) {}
  ~Program() { nvrtcDestroyProgram(&p_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return p_; }

 private:
  nvrtcProgram p_;
};

std::string Log(nvrtcProgram p) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(p, &size) != NVRTC_SUCCESS || size <= 1) return "";
  std::string log(size, '\0');
  nvrtcGetProgramLog(p, log.data());
  log.resize(size - 1);
  return log;
}

// sm_90 compiles for the arch-specific target 90a: the Hopper expert's wgmma and setmaxnreg exist
// only there (its cubin, or PTX, then loads on sm_90 GPUs only); sm_80 stays portable.
const char* ArchNumber(lower::Arch arch) { return arch == lower::Arch::kSm90 ? "90a" : "80"; }

}  // namespace

std::string CudaHome() {
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') return v;
  }
  return "/usr/local/cuda";
}

std::string NvrtcVersion() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return absl::StrCat(major, ".", minor);
}

absl::StatusOr<CompiledModule> CompileWithNvrtc(const std::string& source,
                                                const std::string& file_name,
                                                const CompileOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const std::string home = options.cuda_home.empty() ? CudaHome() : options.cuda_home;
  const std::filesystem::path include = std::filesystem::path(home) / "include";
  // CCCL's cuda/std headers stand in for the C library headers NVRTC lacks.
  const std::filesystem::path cccl = include / "cccl";
  if (!std::filesystem::exists(include / "cuda_bf16.h")) {
    return absl::FailedPreconditionError(absl::StrCat(
        "NVRTC needs the CUDA headers but ", (include / "cuda_bf16.h").string(),
        " does not exist: set CUDA_HOME to the CUDA toolkit folder"));
  }
  nvrtcProgram raw = nullptr;
  nvrtcResult rc = nvrtcCreateProgram(&raw, source.c_str(), file_name.c_str(), 0, nullptr, nullptr);
  if (rc != NVRTC_SUCCESS) {
    return absl::InternalError(absl::StrCat("nvrtcCreateProgram: ", nvrtcGetErrorString(rc)));
  }
  Program program(raw);
  for (const std::string& name : options.name_expressions) {
    nvrtcAddNameExpression(raw, name.c_str());
  }
  std::vector<std::string> args = {
      options.ptx ? absl::StrCat("--gpu-architecture=compute_", ArchNumber(options.arch))
                  : absl::StrCat("--gpu-architecture=sm_", ArchNumber(options.arch)),
      "-std=c++17", "-default-device",
      absl::StrCat("-I", include.string()),
  };
  if (std::filesystem::exists(cccl)) args.push_back(absl::StrCat("-I", cccl.string()));
  for (const std::string& d : options.defines) args.push_back("-D" + d);
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  rc = nvrtcCompileProgram(raw, static_cast<int>(argv.size()), argv.data());
  CompiledModule out;
  out.log = Log(raw);
  if (rc != NVRTC_SUCCESS) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_name, " does not compile with NVRTC for ",
                     options.ptx ? "compute_" : "sm_", ArchNumber(options.arch), " (",
                     nvrtcGetErrorString(rc), "):\n", out.log));
  }
  size_t size = 0;
  if (options.ptx) {
    nvrtcGetPTXSize(raw, &size);
    out.image.resize(size);
    nvrtcGetPTX(raw, out.image.data());
  } else {
    nvrtcGetCUBINSize(raw, &size);
    out.image.resize(size);
    nvrtcGetCUBIN(raw, out.image.data());
  }
  out.ptx = options.ptx;
  for (const std::string& name : options.name_expressions) {
    const char* lowered = nullptr;
    if (nvrtcGetLoweredName(raw, name.c_str(), &lowered) != NVRTC_SUCCESS || lowered == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_name, ": NVRTC has no symbol for `", name, "`"));
    }
    out.symbols[name] = lowered;
  }
  out.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace cubridge::gpu
