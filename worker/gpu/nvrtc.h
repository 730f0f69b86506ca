// Run-time compilation of lowered kernels with NVRTC: what a GPU worker does with each candidate.
// Needs only the CUDA toolkit's NVRTC library and headers, no GPU, so the CPU test suite compiles
// every lowered example through it too.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuir/lower/lower.h"

namespace cubridge::gpu {

struct CompileOptions {
  lower::Arch arch = lower::Arch::kSm80;
  // `PTX for compute_XX` instead of a cubin: a GPU of a newer arch than the target (an sm_80
  // kernel checked on an H100) loads it through the driver's JIT. sm_90 compiles for the
  // arch-specific 90a (wgmma, setmaxnreg), whose PTX loads on sm_90 GPUs only.
  bool ptx = false;
  // C++ names whose symbols the caller looks up (templates are instantiated only when named).
  std::vector<std::string> name_expressions;
  std::vector<std::string> defines;  // "NAME" or "NAME=VALUE"
  std::string cuda_home;             // empty = CudaHome()
};

struct CompiledModule {
  std::string image;  // cubin, or NUL-terminated PTX text
  bool ptx = false;
  std::string log;    // compiler warnings
  std::map<std::string, std::string> symbols;  // name expression -> lowered (mangled) name
  double seconds = 0;
};

// $CUDA_HOME, else $CUDA_PATH, else /usr/local/cuda.
std::string CudaHome();

// INVALID_ARGUMENT with the compiler's log when the source does not compile; FAILED_PRECONDITION
// when the CUDA headers NVRTC needs are missing (says which folder it looked in).
absl::StatusOr<CompiledModule> CompileWithNvrtc(const std::string& source,
                                                const std::string& file_name,
                                                const CompileOptions& options);

// "12.8" etc.: the NVRTC the worker links, for reports.
std::string NvrtcVersion();

}  // namespace cubridge::gpu
