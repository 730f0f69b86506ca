// CuIR text on arbitrary bytes. Whatever parses must validate without crashing (the verdict does
// not matter), print, parse again to an equal program, and print the same text again: the round
// trip docs/cuir.md promises is the oracle, and a broken one aborts so that libFuzzer keeps it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cuir/ir/program.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "cuir round trip: %s\n%s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace cuir = cubridge::cuir;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto program = cuir::ParseProgram(text, "fuzz.cuir");
  if (!program.ok()) return 0;
  (void)cuir::Validate(*program);
  const std::string printed = cuir::PrintProgram(*program);
  auto again = cuir::ParseProgram(printed, "printed.cuir");
  if (!again.ok()) {
    Fail("the printed program does not parse", again.status().ToString() + "\n" + printed);
  }
  if (!cuir::Equal(*program, *again)) {
    Fail("the printed program parses to another program", printed);
  }
  const std::string reprinted = cuir::PrintProgram(*again);
  if (reprinted != printed) {
    Fail("printing the re-parsed program gives other text", printed + "\n---\n" + reprinted);
  }
  return 0;
}
