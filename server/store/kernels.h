// The kernel cache in Redis: verified kernels by (spec hash, arch, ruleset version), with their
// CuIR, CUDA source, launcher header and report. An entry is only ever written whole and only for
// a verified kernel; the verification level it passed is part of the entry.
//
// Key (docs/service.md): cubridge:kernel:<spec hash>:<arch>:<ruleset> (hash).
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/store/redis.h"

namespace cubridge::store {

struct CachedKernel {
  std::string spec_hash, arch, ruleset;
  std::string verification;  // "gpu" or "ir"
  std::string cuir, cuda_source, launcher_header, report_json;
  // The module compiled for the arch (a cubin for GPUs of its compute capability), so that a
  // machine that fetches the kernel loads it without compiling: its file name in a kernel folder
  // (gpu::ModuleFileName), the image and its symbols (a JSON object). Empty when there is none.
  std::string module_file, module_image, module_symbols_json;
  // The backward kernel (kernel_bwd.cuir, .cu, .h) where the pipeline made one; the report's
  // `backward` says so or why not. All three or none.
  std::string backward_cuir, backward_cuda_source, backward_launcher_header;
};

class KernelCache {
 public:
  explicit KernelCache(RedisClient* redis) : redis_(redis) {}

  // INVALID_ARGUMENT for an entry without a key part, a verification level or any of its files
  // (the backward's three come together or not at): the cache never holds a partial kernel.
  absl::Status Put(const CachedKernel& k);
  // nullopt on a miss. `min_verification` "gpu" ignores kernels verified only at the IR level.
  absl::StatusOr<std::optional<CachedKernel>> Get(const std::string& spec_hash,
                                                  const std::string& arch,
                                                  const std::string& ruleset,
                                                  const std::string& min_verification = "ir");

 private:
  RedisClient* redis_;
};

}  // namespace cubridge::store
