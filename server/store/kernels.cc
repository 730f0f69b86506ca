#include "server/store/kernels.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace cubridge::store {
namespace {

std::string Key(const std::string& hash, const std::string& arch, const std::string& ruleset) {
  return absl::StrCat("cubridge:kernel:", hash, ":", arch, ":", ruleset);
}

}  // namespace

absl::Status KernelCache::Put(const CachedKernel& k) {
  for (const auto& [name, value] :
       std::map<std::string, const std::string*>{{"spec hash", &k.spec_hash},
                                                 {"arch", &k.arch},
                                                 {"ruleset", &k.ruleset},
                                                 {"CuIR", &k.cuir},
                                                 {"CUDA source", &k.cuda_source},
                                                 {"launcher header", &k.launcher_header},
                                                 {"report", &k.report_json}}) {
    if (value->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("kernel cache: refusing an entry without its ", name));
    }
  }
  const int backward_files = !k.backward_cuir.empty() + !k.backward_cuda_source.empty() +
                             !k.backward_launcher_header.empty();
  if (backward_files != 0 && backward_files != 3) {
    return absl::InvalidArgumentError(
        "kernel cache: refusing a backward kernel without all of its CuIR, source and header");
  }
  if (k.verification != "gpu" && k.verification != "ir") {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel cache: verification must be \"gpu\" or \"ir\", got \"", k.verification, "\""));
  }
  // One HSET: readers see the whole entry or none of it.
  auto r = redis_->Command({"HSET", Key(k.spec_hash, k.arch, k.ruleset), "verification",
                            k.verification, "cuir", k.cuir, "cuda_source", k.cuda_source,
                            "launcher_header", k.launcher_header, "report_json", k.report_json,
                            "module_file", k.module_file, "module_image", k.module_image,
                            "module_symbols", k.module_symbols_json, "backward_cuir",
                            k.backward_cuir, "backward_cuda_source", k.backward_cuda_source,
                            "backward_launcher_header", k.backward_launcher_header});
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::StatusOr<std::optional<CachedKernel>> KernelCache::Get(const std::string& spec_hash,
                                                             const std::string& arch,
                                                             const std::string& ruleset,
                                                             const std::string& min_verification) {
  auto r = redis_->Command({"HGETALL", Key(spec_hash, arch, ruleset)});
  if (!r.ok()) return r.status();
  if (r->elements.empty()) return std::optional<CachedKernel>();
  std::map<std::string, std::string> m;
  for (size_t i = 0; i + 1 < r->elements.size(); i += 2) m[r->elements[i].str] = r->elements[i + 1].str;
  if (min_verification == "gpu" && m["verification"] != "gpu") return std::optional<CachedKernel>();
  return std::optional<CachedKernel>(CachedKernel{
      spec_hash, arch, ruleset, m["verification"], m["cuir"], m["cuda_source"],
      m["launcher_header"], m["report_json"], m["module_file"], m["module_image"],
      m["module_symbols"], m["backward_cuir"], m["backward_cuda_source"],
      m["backward_launcher_header"]});
}

}  // namespace cubridge::store
