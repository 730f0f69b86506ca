// Shared helpers of the lowering tests: the hand-written transferred programs under
// tests/lower/data, and running nvcc.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "cuir/ir/program.h"

namespace cubridge::lower::testing {

// A CuIR expression parsed, failing the current test (and giving the literal 0) when it does not
// parse.
cuir::ExprPtr ParseOrFail(const std::string& text);

// tests/lower/data/<name>.cuir, or the expert's base program for name "base".
absl::StatusOr<cuir::Program> LoadTestProgram(const std::string& name);

// The same test program moved from the sm_80 expert's base onto the Hopper expert's (fa3_sm90),
// so that it lowers to that expert's kernel.
absl::StatusOr<cuir::Program> LoadTestProgramOnHopper(const std::string& name);

// The nvcc to use: the build's CUBRIDGE_NVCC, else /usr/local/cuda/bin/nvcc; empty if neither
// exists.
std::string FindNvcc();

// A fresh directory under the test temp dir.
std::string MakeTempDir(const std::string& prefix);

// Removes a temp dir of a passing test; kept when the test failed or CUBRIDGE_KEEP_TEST_FILES is
// set (to inspect the lowered sources).
void CleanUpTempDir(const std::string& dir, bool test_failed);

void WriteFile(const std::string& path, const std::string& text);

// The text between a region's markers in a lowered source ("<region NAME missing>" without them).
std::string RegionText(const std::string& source, const std::string& region);

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};
CommandResult RunCommand(const std::string& command);

// A CUDA program of one file: written as NAME.cu into a fresh temp dir, built there by `nvcc
// FLAGS`, and run if the build succeeded (run.exit_code stays -1 otherwise). The caller ends
// with CleanUpTempDir(dir, ...).
struct ProgramRun {
  std::string dir;
  CommandResult build, run;
};
ProgramRun BuildAndRunProgram(const std::string& nvcc, const std::string& name,
                              const std::string& flags, const std::string& source);

}  // namespace cubridge::lower::testing
