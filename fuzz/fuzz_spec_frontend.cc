// The whole spec frontend (guard, TorchScript, probe runs, translation) on arbitrary bytes: it
// must answer with a status, never crash, hang or abort; an accepted spec must also hash.
#include <cstddef>
#include <cstdint>
#include <string>

#include <torch/torch.h>

#include "cuir/ir/config.h"
#include "cuir/spec/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // One thread: the probe runs are tiny, and a pool per process only adds noise to the timings.
  static const bool single_threaded = [] {
    torch::set_num_threads(1);
    return true;
  }();
  (void)single_threaded;
  const std::string source(reinterpret_cast<const char*>(data), size);
  auto spec = cubridge::spec::LoadSpecSource(source, "fuzz.py");
  if (!spec.ok()) return 0;
  const cubridge::cuir::AttentionConfig config;
  (void)cubridge::spec::CanonicalForm(*spec, config, "fuzz");
  (void)cubridge::spec::SpecHash(*spec, config, "fuzz");
  return 0;
}
