// The whole chain on every example: spec -> transfer -> verify -> lower through the real CLI, then
// the lowered kernel.cu compiled by nvcc for sm_80 and sm_90 (as a user would build it).
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "cuir/pipeline/files.h"

namespace {
namespace fs = std::filesystem;

std::string Nvcc() {
  if (std::string(CUBRIDGE_NVCC).size() > 0 && fs::exists(CUBRIDGE_NVCC)) return CUBRIDGE_NVCC;
  if (fs::exists("/usr/local/cuda/bin/nvcc")) return "/usr/local/cuda/bin/nvcc";
  return "";
}

int RunShell(const std::string& cmd) {
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class LoweredExample : public testing::TestWithParam<const char*> {};

TEST_P(LoweredExample, CompilesWithNvccForSm80AndSm90) {
  const std::string nvcc = Nvcc();
  if (nvcc.empty()) GTEST_SKIP() << "nvcc not found (looked at CUBRIDGE_NVCC and /usr/local/cuda)";
  std::string tmpl = (fs::temp_directory_path() / "cubridge-lowered-XXXXXX").string();
  const std::string dir = mkdtemp(tmpl.data());
  const std::string spec = std::string(CUBRIDGE_SOURCE_ROOT) + "/examples/specs/" + GetParam();
  const std::string log = dir + "/log.txt";
  ASSERT_EQ(RunShell(std::string(CUBRIDGE_CLI) + " adapt " + spec +
                " --local --no-cache --heads-q 8 --heads-kv 2 --seqlen 130 --out " + dir +
                "/out > " + log + " 2>&1"),
            0)
      << "adapt failed; see " << log;
  const std::string cmd = nvcc + " -c -std=c++17 -Werror all-warnings" +
                          " -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90" +
                          " -o " + dir + "/kernel.o " + dir + "/out/kernel.cu > " + log + " 2>&1";
  EXPECT_EQ(RunShell(cmd), 0) << "nvcc failed on the lowered kernel; see " << log;
  EXPECT_TRUE(fs::exists(dir + "/kernel.o"));
  if (!HasFailure()) cubridge::pipeline::RemoveTree(dir);
}

INSTANTIATE_TEST_SUITE_P(Examples, LoweredExample,
                         testing::Values("full.py", "causal.py", "sliding_window.py",
                                         "global_sliding_window.py", "prefix_lm.py",
                                         "block_causal.py", "causal_document.py",
                                         "share_question.py", "relative_position.py", "alibi.py",
                                         "softcap.py", "alibi_window_softcap.py"),
                         [](const testing::TestParamInfo<const char*>& info) {
                           std::string n = info.param;
                           return n.substr(0, n.find('.'));
                         });

}  // namespace
