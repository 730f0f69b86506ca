// The whole chain on every example: spec -> transfer -> verify -> lower through the real CLI, for
// sm_80 and sm_90, then each lowered kernel.cu compiled by nvcc for its target (as a user would).
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "cuir/files/files.h"

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

// sm_80 lowers from the mma.sync expert and builds for sm_80; sm_90 lowers from the Hopper expert
// (wgmma, TMA, setmaxnreg) and builds for its arch-specific target sm_90a.
TEST_P(LoweredExample, CompilesWithNvccForSm80AndSm90a) {
  const std::string nvcc = Nvcc();
  if (nvcc.empty()) GTEST_SKIP() << "nvcc not found (looked at CUBRIDGE_NVCC and /usr/local/cuda)";
  std::string tmpl = (fs::temp_directory_path() / "cubridge-lowered-XXXXXX").string();
  const std::string dir = mkdtemp(tmpl.data());
  const std::string spec = std::string(CUBRIDGE_SOURCE_ROOT) + "/examples/specs/" + GetParam();
  const std::string log = dir + "/log.txt";
  for (const auto& [arch, gencode, expert] :
       {std::tuple{"sm_80", "arch=compute_80,code=sm_80", "fa2_sm80"},
        std::tuple{"sm_90", "arch=compute_90a,code=sm_90a", "fa3_sm90"}}) {
    const std::string out = dir + "/" + arch;
    ASSERT_EQ(RunShell(std::string(CUBRIDGE_CLI) + " adapt " + spec + " --local --no-cache --arch " +
                       arch + " --heads-q 8 --heads-kv 2 --seqlen 130 --out " + out + " > " + log +
                       " 2>&1"),
              0)
        << "adapt for " << arch << " failed; see " << log;
    std::ifstream in(out + "/kernel.cu");
    const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(source.find(std::string("(expert \"") + expert + "\")"), std::string::npos)
        << arch << " should be lowered from " << expert;
    const std::string cmd = nvcc + " -c -std=c++17 -Werror all-warnings -gencode " + gencode +
                            " -o " + out + "/kernel.o " + out + "/kernel.cu > " + log + " 2>&1";
    EXPECT_EQ(RunShell(cmd), 0) << "nvcc failed on the " << arch << " kernel; see " << log;
    EXPECT_TRUE(fs::exists(out + "/kernel.o"));
  }
  if (!HasFailure()) cubridge::files::RemoveTree(dir);
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
