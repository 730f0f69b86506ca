// One worker per GPU (issue 31): `cubridge-worker --gpu N` (and CUBRIDGE_GPU) is checked before
// the worker starts, against the GPUs its probe sees (on a machine without one: that there is
// none), `--list-gpus` says what there is, and `scripts/local-cluster start` gives worker i GPU i,
// refusing more workers than GPUs unless they may share. The real binaries and script; on a GPU
// machine the same tests check the other branch (an ordinal past the last GPU).
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/sdk/test_util.h"
#include "tests/service/cluster.h"

namespace cubridge::testing {
namespace {

using ::testing::HasSubstr;

// The worker with a token and an unreachable coordinator: every case here ends before it would
// register (or would hang retrying, which the timeout turns into a failure).
RunResult Worker(const std::string& args, const std::string& env = "") {
  return RunCommand(absl::StrCat("env CUBRIDGE_WORKER_TOKEN=t ", env, " timeout 60 ", WorkerBinary(),
                                 " --coordinator 127.0.0.1:9 ", args));
}

// The GPUs `--list-gpus` prints (one line each: ordinal, UUID, arch, name).
std::vector<std::string> ListedGpus() {
  // (RunCommand adds 2>&1 after the command: the subshell keeps stderr out of the lines.)
  const RunResult r = RunCommand(absl::StrCat("(", WorkerBinary(), " --list-gpus 2>/dev/null)"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(r.output, '\n', absl::SkipEmpty())) {
    lines.emplace_back(line);
  }
  return lines;
}

TEST(WorkerGpu, ListGpusSaysWhatThereIs) {
  const RunResult r = RunCommand(absl::StrCat(WorkerBinary(), " --list-gpus"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> gpus = ListedGpus();
  if (gpus.empty()) {
    EXPECT_THAT(r.output, HasSubstr("no usable GPU: "));
  } else {
    for (size_t i = 0; i < gpus.size(); ++i) {
      EXPECT_THAT(gpus[i], ::testing::StartsWith(absl::StrCat(i, " GPU-"))) << gpus[i];
    }
  }
}

TEST(WorkerGpu, AnOrdinalTheMachineLacksIsRefusedBeforeStarting) {
  const std::vector<std::string> gpus = ListedGpus();
  const std::string past = std::to_string(gpus.size());
  const RunResult r = Worker("--gpu " + past);
  if (gpus.empty()) {
    // No GPU at all: a machine problem, said as such.
    EXPECT_EQ(r.exit_code, 3) << r.output;
    EXPECT_THAT(r.output, HasSubstr("--gpu 0: no usable GPU on this machine ("));
  } else {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_THAT(r.output, HasSubstr(absl::StrCat("--gpu ", past, ": this machine has ",
                                                 gpus.size(), " GPU")));
    EXPECT_THAT(r.output, HasSubstr(absl::StrCat("give an ordinal below ", gpus.size())));
  }
  // The environment variable is the same option.
  const RunResult env = Worker("", "CUBRIDGE_GPU=" + past);
  EXPECT_EQ(env.exit_code, r.exit_code) << env.output;
  EXPECT_THAT(env.output, HasSubstr(absl::StrCat("--gpu ", past, ":")));
}

TEST(WorkerGpu, MalformedOrContradictoryGpuOptionsAreRefused) {
  const RunResult negative = Worker("--gpu -1");
  EXPECT_NE(negative.exit_code, 0) << negative.output;
  EXPECT_THAT(negative.output, HasSubstr("--gpu"));
  const RunResult word = Worker("", "CUBRIDGE_GPU=first");
  EXPECT_NE(word.exit_code, 0) << word.output;
  EXPECT_THAT(word.output, HasSubstr("--gpu"));
  const RunResult cpu = Worker("--gpu 0 --arch cpu");
  EXPECT_EQ(cpu.exit_code, 2) << cpu.output;
  EXPECT_THAT(cpu.output, HasSubstr("--gpu 0 with --arch cpu: a CPU worker drives no GPU"));
}

// `local-cluster start --dry-run`: the worker commands it would run, nothing started.
RunResult LocalCluster(const std::string& args) {
  TempDir dir;
  return RunCommand(absl::StrCat("CUBRIDGE_CLUSTER_DIR=", dir / "cluster", " bash ",
                                 CUBRIDGE_SOURCE_ROOT, "/scripts/local-cluster start --dry-run ",
                                 args));
}

TEST(LocalClusterGpus, WorkerIDrivesGpuI) {
  const RunResult two = LocalCluster("--workers 2 --arch auto --gpus 2,3");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_THAT(two.output, HasSubstr("worker 1: "));
  EXPECT_THAT(two.output, ::testing::ContainsRegex("worker 1: .* --arch auto --gpu 2 --token-file"));
  EXPECT_THAT(two.output, ::testing::ContainsRegex("worker 2: .* --arch auto --gpu 3 --token-file"));
  EXPECT_THAT(two.output, ::testing::Not(HasSubstr("--share-gpu")));

  // More workers than GPUs: refused, unless they may share (then round robin).
  const RunResult three = LocalCluster("--workers 3 --gpus 0,1");
  EXPECT_EQ(three.exit_code, 2) << three.output;
  EXPECT_THAT(three.output, HasSubstr("3 workers for 2 GPU(s) (0 1)"));
  EXPECT_THAT(three.output, HasSubstr("--share-gpu"));
  const RunResult shared = LocalCluster("--workers 3 --gpus 0,1 --share-gpu");
  ASSERT_EQ(shared.exit_code, 0) << shared.output;
  EXPECT_THAT(shared.output, ::testing::ContainsRegex("worker 3: .* --gpu 0 --share-gpu"));

  // CPU workers get no GPU; a malformed list is refused.
  const RunResult cpu = LocalCluster("--workers 2 --arch cpu");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  EXPECT_THAT(cpu.output, ::testing::Not(HasSubstr("--gpu")));
  const RunResult bad = LocalCluster("--workers 2 --gpus first");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("--gpus first: give GPU ordinals"));
}

// Without --gpus the GPUs are those the worker lists: none here means no --gpu, one worker per
// listed GPU on a GPU machine.
TEST(LocalClusterGpus, TheGpusDefaultToThoseTheWorkerLists) {
  const std::vector<std::string> gpus = ListedGpus();
  // The build folder holding the worker binary under test (BUILD/worker/cubridge-worker).
  const std::string build =
      std::filesystem::path(WorkerBinary()).parent_path().parent_path().string();
  const RunResult r = LocalCluster("--workers 1 --arch auto --build " + build);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  if (gpus.empty()) {
    EXPECT_THAT(r.output, ::testing::Not(HasSubstr("--gpu")));
  } else {
    EXPECT_THAT(r.output, HasSubstr("--gpu 0"));
  }
}

}  // namespace
}  // namespace cubridge::testing
