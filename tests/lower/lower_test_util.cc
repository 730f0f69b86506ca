#include "tests/lower/lower_test_util.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "cuir/lower/lift.h"
#include "gtest/gtest.h"

namespace cubridge::lower::testing {

cuir::ExprPtr ParseOrFail(const std::string& text) {
  auto e = cuir::ParseExpr(text);
  EXPECT_TRUE(e.ok()) << text << ": " << e.status();
  return e.ok() ? *e : cuir::IntLit(0);
}
namespace fs = std::filesystem;

absl::StatusOr<cuir::Program> LoadTestProgram(const std::string& name) {
  const fs::path root(CUBRIDGE_SOURCE_ROOT);
  const fs::path path = name == "base" ? root / "cuir/experts/fa2_sm80/base.cuir"
                                       : root / "tests/lower/data" / (name + ".cuir");
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path.string()));
  std::stringstream ss;
  ss << in.rdbuf();
  return cuir::ParseProgram(ss.str(), path.string());
}

absl::StatusOr<cuir::Program> LoadTestProgramOnHopper(const std::string& name) {
  auto program = LoadTestProgram(name);
  if (!program.ok()) return program.status();
  auto sm80 = LiftExpert("fa2_sm80");
  if (!sm80.ok()) return sm80.status();
  auto hopper = LiftExpert("fa3_sm90");
  if (!hopper.ok()) return hopper.status();
  return Rebase(*program, sm80->base, hopper->base);
}

std::string FindNvcc() {
  for (const std::string& candidate : {std::string(CUBRIDGE_NVCC), std::string("/usr/local/cuda/bin/nvcc")}) {
    if (!candidate.empty() && fs::exists(candidate)) return candidate;
  }
  return "";
}

std::string MakeTempDir(const std::string& prefix) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string templ = absl::StrCat(base != nullptr ? base : fs::temp_directory_path().string(),
                                   "/", prefix, "XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) return "";
  return templ;
}

void CleanUpTempDir(const std::string& dir, bool test_failed) {
  if (test_failed || std::getenv("CUBRIDGE_KEEP_TEST_FILES") != nullptr || dir.empty()) return;
  // Not fs::remove_all: in suites linked with a CUDA LibTorch that symbol resolves to its crashing copy.
  RunCommand("rm -rf '" + dir + "'");
}

std::string RegionText(const std::string& source, const std::string& region) {
  const std::string begin = "// @cuir-region " + region + "\n";
  const size_t a = source.find(begin);
  size_t b = source.find("// @cuir-end " + region + "\n");
  if (a == std::string::npos || b == std::string::npos) return "<region " + region + " missing>";
  b = source.rfind('\n', b) + 1;  // the end marker's line starts with its indentation
  return source.substr(a + begin.size(), b - a - begin.size());
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) result.output.append(buf.data(), n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

ProgramRun BuildAndRunProgram(const std::string& nvcc, const std::string& name,
                              const std::string& flags, const std::string& source) {
  ProgramRun r;
  r.dir = MakeTempDir(absl::StrCat("cubridge_", name, "_"));
  const std::string binary = absl::StrCat(r.dir, "/", name);
  WriteFile(binary + ".cu", source);
  r.build = RunCommand(absl::StrCat(nvcc, " ", flags, " -o ", binary, " ", binary, ".cu"));
  if (r.build.exit_code == 0) r.run = RunCommand(binary);
  return r;
}

}  // namespace cubridge::lower::testing
