// The spec guard on arbitrary bytes: it runs first on untrusted input, so it may only answer.
// A sanitizer report, a crash or a timeout (it must be linear) is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cuir/spec/guard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  (void)cubridge::spec::GuardSpecSource(source, "fuzz.py");
  return 0;
}
