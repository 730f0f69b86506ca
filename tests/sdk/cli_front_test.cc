// cubridge-cli, the executable users run, links no LibTorch: loading it took half a second or
// more on every call, `status` and `--help` included. adapt and lift, which need it, run in
// cubridge-cli-local, which the front hands them to (client/cli/local_handoff.h). The timings
// print what they measured.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

#include "fake_service.h"
#include "test_util.h"

namespace cubridge {
namespace {

using ::cubridge::testing::FakeServer;
using ::cubridge::testing::RunCommand;
using ::cubridge::testing::RunResult;
using ::cubridge::testing::TempDir;
using ::cubridge::testing::WriteFile;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Millis = std::chrono::milliseconds;

// Generous, so that a loaded CI machine cannot flake: the front starts in tens of milliseconds.
constexpr Millis kQuick{1000};

struct Timed {
  RunResult result;  // of the last run
  Millis best = Millis::max();
};

// The fastest of three runs: what the binary costs, less what else the machine was doing.
Timed TimeCommand(const std::string& name, const std::string& command) {
  Timed t;
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    t.result = RunCommand(command);
    t.best = std::min(
        t.best, std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - start));
  }
  std::cout << name << ": " << t.best.count() << " ms (best of 3)\n";
  return t;
}

// A copy of the front alone in a fresh folder; `local_script`, when given, is put beside it as
// cubridge-cli-local.
std::string FrontIn(const TempDir& dir, const std::string& local_script = "") {
  const std::string front = dir / "cubridge-cli";
  std::filesystem::copy_file(CUBRIDGE_CLI, front);
  if (!local_script.empty()) {
    chmod(WriteFile(dir / "cubridge-cli-local", local_script).c_str(), 0755);
  }
  return front;
}

TEST(CliFrontTest, LoadsNoLibTorch) {
  // ldd lists every library the dynamic linker loads for it, not only its own NEEDED entries.
  const RunResult r = RunCommand(std::string("ldd ") + CUBRIDGE_CLI);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> torch;
  for (const auto& line : absl::StrSplit(r.output, '\n')) {
    if (absl::StrContains(line, "libtorch") || absl::StrContains(line, "libc10")) {
      torch.emplace_back(absl::StripAsciiWhitespace(line));
    }
  }
  EXPECT_THAT(torch, IsEmpty());
}

TEST(CliFrontTest, HelpIsQuickAndListsAdaptAndLift) {
  const Timed t = TimeCommand("cubridge-cli --help", std::string(CUBRIDGE_CLI) + " --help");
  ASSERT_EQ(t.result.exit_code, 0) << t.result.output;
  EXPECT_THAT(t.result.output, HasSubstr("Adapt the expert kernel to an attention variant spec"));
  EXPECT_THAT(t.result.output, HasSubstr("Lift your own CUDA attention kernel into CuIR"));
  EXPECT_THAT(t.result.output, HasSubstr("\n  status "));  // the service commands too
  EXPECT_LT(t.best, kQuick);
}

TEST(CliFrontTest, StatusIsQuick) {
  FakeServer server;
  const Timed t = TimeCommand("cubridge-cli status (a coordinator that does not know the job)",
                              std::string(CUBRIDGE_CLI) + " status j-0123456789abcdef --address " +
                                  server.address());
  EXPECT_EQ(t.result.exit_code, 1) << t.result.output;
  EXPECT_THAT(t.result.output, HasSubstr("j-0123456789abcdef"));
  EXPECT_LT(t.best, kQuick);
}

TEST(CliFrontTest, AdaptAndLiftHelpAreTheirOwn) {
  const RunResult adapt = RunCommand(std::string(CUBRIDGE_CLI) + " adapt --help");
  ASSERT_EQ(adapt.exit_code, 0) << adapt.output;
  EXPECT_THAT(adapt.output, HasSubstr("--local"));
  EXPECT_THAT(adapt.output, HasSubstr("--heads-q"));
  EXPECT_THAT(adapt.output, HasSubstr("--proposer"));
  const RunResult lift = RunCommand(std::string(CUBRIDGE_CLI) + " lift --help");
  ASSERT_EQ(lift.exit_code, 0) << lift.output;
  EXPECT_THAT(lift.output, HasSubstr("--cpu-only"));
}

TEST(CliFrontTest, HandsAdaptOverBesideItselfAsIs) {
  // Echoes its pid, arguments, standard input and exits 7: the front must exec it (same process,
  // so signals reach it), with every argument as typed, and pass its exit code on.
  TempDir dir;
  const std::string front = FrontIn(dir,
                                    "#!/bin/sh\n"
                                    "echo \"pid $$\"\n"
                                    "for a in \"$@\"; do echo \"arg [$a]\"; done\n"
                                    "read -r line; echo \"stdin [$line]\"\n"
                                    "exit 7\n");
  const RunResult r = RunCommand("printf 'from stdin\\n' | sh -c 'echo \"pid $$\"; exec " + front +
                                 " adapt spec.py --param \"w=1 2\" -- --help'");
  EXPECT_EQ(r.exit_code, 7) << r.output;
  const std::string shell_pid = r.output.substr(0, r.output.find('\n') + 1);
  EXPECT_THAT(r.output.substr(shell_pid.size()), HasSubstr(shell_pid)) << r.output;
  EXPECT_THAT(r.output, HasSubstr("arg [adapt]\narg [spec.py]\narg [--param]\narg [w=1 2]\n"
                                  "arg [--]\narg [--help]\nstdin [from stdin]\n"));
}

TEST(CliFrontTest, FindsTheBuildTreesLocalBinaryWhenNoneIsBesideIt) {
  TempDir dir;
  const RunResult r = RunCommand(FrontIn(dir) + " lift --help");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--cpu-only"));
}

}  // namespace
}  // namespace cubridge
