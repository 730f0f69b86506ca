// The isolation of candidates, with real child processes standing in for runners that crash,
// hang, fail cleanly or succeed: the parent always gets an outcome and lives on.
#include "worker/gpu/isolate.h"

#include <sys/stat.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/lower/lower_test_util.h"

namespace cubridge::gpu {
namespace {

using ::testing::HasSubstr;

class Isolate : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = lower::testing::MakeTempDir("cubridge-isolate-"); }
  void TearDown() override { lower::testing::CleanUpTempDir(dir_, HasFailure()); }

  // A runner that runs `body` (sh); $3 / $5 are the --request / --result paths of "check".
  std::string Runner(const std::string& body) {
    const std::string path = dir_ + "/runner.sh";
    lower::testing::WriteFile(path, "#!/bin/sh\n" + body + "\n");
    chmod(path.c_str(), 0755);
    return path;
  }
  absl::StatusOr<ChildOutcome> Check(const std::string& runner, double timeout = 30) {
    IsolateOptions o;
    o.runner = runner;
    o.timeout_seconds = timeout;
    o.work_dir = dir_;
    return RunChild("check", {{"candidate", "x"}}, o);
  }
  std::string dir_;
};

TEST_F(Isolate, ACrashingChildIsAFailedCandidate) {
  auto out = Check(Runner("echo 'about to fault' >&2; kill -SEGV $$"));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FALSE(out->ok);
  EXPECT_EQ(out->signal, 11);
  EXPECT_THAT(out->error, HasSubstr("SIGSEGV"));
  EXPECT_THAT(out->stderr_tail, HasSubstr("about to fault"));
}

TEST_F(Isolate, AHangingChildIsKilledAtTheTimeLimit) {
  // The child starts a grandchild that would outlive it: the whole group is killed.
  auto out = Check(Runner("sleep 60 & sleep 60"), /*timeout=*/1.0);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FALSE(out->ok);
  EXPECT_TRUE(out->timed_out);
  EXPECT_LT(out->seconds, 10);
  EXPECT_THAT(out->error, HasSubstr("time limit"));
}

TEST_F(Isolate, AReportedFailureKeepsTheRunnersMessage) {
  auto out = Check(Runner(R"(echo '{"ok": false, "error": "launch attention: an illegal memory access"}' > "$5"; exit 3)"));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FALSE(out->ok);
  EXPECT_EQ(out->exit_code, 3);
  EXPECT_THAT(out->error, HasSubstr("illegal memory access"));
}

TEST_F(Isolate, ASuccessfulChildGetsTheRequestAndReturnsItsResult) {
  auto out = Check(Runner(R"(grep -q '"candidate"' "$3" && echo '{"ok": true, "passed": true}' > "$5")"));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->ok) << out->error;
  EXPECT_TRUE(out->result.value("passed", false));
}

TEST_F(Isolate, AMissingRunnerIsAnErrorOnThisSide) {
  auto out = Check(dir_ + "/no-such-runner");
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("CUBRIDGE_GPU_RUNNER"));
}

}  // namespace
}  // namespace cubridge::gpu
