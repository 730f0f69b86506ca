// A worker whose machine is broken must not fail other people's jobs: it notices, stops leasing,
// says so, and the jobs it touched run elsewhere. A work dir that cannot be used is a clear
// error, not an abort.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "tests/service/cluster.h"

namespace cubridge::testing {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

class BrokenWorker : public Cluster {
 protected:
  // A worker whose disk fills up once it has registered: from then on every file write fails
  // (EFBIG under a zero file size limit, with SIGXFSZ ignored, as a full disk's ENOSPC would),
  // everything else works.
  Process* StartWorkerWhoseDiskFills() {
    const std::string command = absl::StrCat("trap '' XFSZ; exec ", WorkerBinary(), " --coordinator ",
                                             Address(), " --arch cpu");
    const std::string log = absl::StrCat(dir_, "/worker-", workers_.size(), ".log");
    workers_.push_back(std::make_unique<Process>(
        std::vector<std::string>{"/bin/sh", "-c", command},
        std::map<std::string, std::string>{{"CUBRIDGE_WORKER_TOKEN", kWorkerToken}}, log));
    Process* w = workers_.back().get();
    EXPECT_TRUE(w->WaitForLog("registered as", 30s)) << w->Log();
    const rlimit none{0, 0};
    EXPECT_EQ(prlimit(w->pid(), RLIMIT_FSIZE, &none, nullptr), 0) << std::strerror(errno);
    return w;
  }
  std::vector<v1::WorkerInfo> Workers() {
    v1::ListWorkersResponse out;
    auto ctx = Context(kClientToken);
    EXPECT_TRUE(ClientStub()->ListWorkers(ctx.get(), v1::ListWorkersRequest(), &out).ok());
    return {out.workers().begin(), out.workers().end()};
  }
  // The worker (found by the id in its log) is in the `workers` listing as NOT_SERVING, and the
  // reason says `why`.
  void ExpectListedUnhealthy(Process* worker, const std::string& why) {
    bool listed = false;
    for (const v1::WorkerInfo& w : Workers()) {
      if (worker->Log().find(w.worker_id()) == std::string::npos) continue;
      listed = true;
      EXPECT_EQ(w.health(), v1::WORKER_HEALTH_NOT_SERVING);
      EXPECT_THAT(w.health_reason(), HasSubstr(why));
    }
    EXPECT_TRUE(listed) << "the worker is not listed:\n" << worker->Log();
  }
};

TEST_F(BrokenWorker, AFullDiskWorkerFailsNoneOfSixJobs) {
  StartCoordinator();
  // The broken one registers first and is the quickest to ask for work, as in the probe that
  // found this: it failed each task in half a second and won the race for the retries.
  Process* broken = StartWorkerWhoseDiskFills();
  StartWorker();
  StartWorker();
  std::vector<std::string> ids;
  for (int window : {16, 24, 32, 40, 48, 56}) {
    auto job = Submit(Request("sliding_window", {{"window", std::to_string(window)}}));
    ASSERT_TRUE(job.ok()) << job.status();
    ids.push_back(job->job_id());
  }
  int failed = 0;
  for (const std::string& id : ids) {
    const v1::Job done = WaitEnded(id, 300s);
    if (done.state() != v1::JOB_STATE_SUCCEEDED) {
      ++failed;
      ADD_FAILURE() << Describe(done);
    }
  }
  EXPECT_EQ(failed, 0) << Logs();
  // It took itself out of service and says why, where an operator looks.
  ExpectListedUnhealthy(broken, "work dir");
  EXPECT_TRUE(broken->Alive()) << broken->Log();
}

TEST_F(BrokenWorker, AWorkerWhoseTasksKeepDyingFencesItselfOffAndSaysWhy) {
  StartCoordinator();
  // Every task's child aborts on this one; its work dir is fine, so only its failures tell.
  Process* crashing = StartWorker({{"CUBRIDGE_TEST_TASK_CRASH", "*"}},
                                  {"--max-infra-failures", "2", "--unhealthy-backoff-seconds", "120"});
  ASSERT_TRUE(crashing->WaitForLog("registered as", 30s)) << crashing->Log();
  std::vector<std::string> ids;
  for (int window : {16, 24, 32}) {
    auto job = Submit(Request("sliding_window", {{"window", std::to_string(window)}}));
    ASSERT_TRUE(job.ok()) << job.status();
    ids.push_back(job->job_id());
  }
  ASSERT_TRUE(crashing->WaitForLog("unhealthy, leasing nothing", 60s)) << crashing->Log();
  StartWorker();
  for (const std::string& id : ids) {
    const v1::Job done = WaitEnded(id, 300s);
    EXPECT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << Describe(done) << Logs();
  }
  ExpectListedUnhealthy(crashing, "2 tasks in a row failed on this machine");
}

TEST_F(BrokenWorker, AWorkDirThatIsAFileIsAClearErrorNotAnAbort) {
  StartCoordinator();
  const std::string file = dir_ + "/not-a-dir";
  std::ofstream(file) << "x";
  Process* w = StartWorker({}, {"--work-dir", file});
  const int code = w->Wait(30s);
  EXPECT_EQ(code, 3) << w->Log();
  EXPECT_THAT(w->Log(), HasSubstr(file));
  EXPECT_THAT(w->Log(), HasSubstr("not a directory"));
}

TEST_F(BrokenWorker, AWorkDirReplacedByAFileMidRunDoesNotAbortTheWorker) {
  StartCoordinator();
  const std::string work = dir_ + "/work";
  Process* w = StartWorker({}, {"--work-dir", work});
  ASSERT_TRUE(w->WaitForLog("registered as", 30s)) << w->Log();
  ASSERT_EQ(std::system(absl::StrCat("rm -rf ", work, " && echo x > ", work).c_str()), 0);
  auto job = Submit(Request("causal"));
  ASSERT_TRUE(job.ok()) << job.status();
  std::this_thread::sleep_for(3s);
  EXPECT_TRUE(w->Alive()) << "the worker died:\n" << w->Log();
  EXPECT_THAT(w->Log(), HasSubstr(work));
  // A healthy worker finishes the job.
  StartWorker();
  const v1::Job done = WaitEnded(job->job_id(), 180s);
  EXPECT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << Describe(done) << Logs();
}

}  // namespace
}  // namespace cubridge::testing
