// Short coordinator restarts are ridden through: an SDK call made while the coordinator is down
// goes through once it is back, `cubridge-cli watch` keeps following its job, workers lease again
// within about two seconds. Each test prints the figure it measured.
#include <signal.h>

#include <future>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cubridge/client.h>

#include "absl/strings/str_cat.h"
#include "tests/sdk/test_util.h"
#include "tests/service/cluster.h"

namespace cubridge::testing {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class Restart : public Cluster {
 protected:
  std::unique_ptr<Client> Sdk() {
    ClientOptions o;
    o.address = Address();
    o.token = kClientToken;
    auto c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }
  // Kills the coordinator, waits `outage`, starts it again; returns when it listens.
  Clock::time_point Bounce(std::chrono::milliseconds outage) {
    coordinator_->Signal(SIGKILL);
    coordinator_->Wait(10s);
    std::this_thread::sleep_for(outage);
    StartCoordinator();
    return Clock::now();
  }
};

TEST_F(Restart, AnSdkCallMadeDuringARestartGoesThroughOnceTheCoordinatorIsBack) {
  StartCoordinator();
  auto job = Submit(Request("causal"));
  ASSERT_TRUE(job.ok()) << job.status();
  auto client = Sdk();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Get(job->job_id()).ok());  // connected once, as a long-lived client is

  coordinator_->Signal(SIGKILL);
  coordinator_->Wait(10s);
  auto call = std::async(std::launch::async, [&] {
    auto got = client->Get(job->job_id());
    return std::make_pair(got, Clock::now());
  });
  std::this_thread::sleep_for(4s);  // longer than the old five retries took in all
  StartCoordinator();
  const Clock::time_point back = Clock::now();
  auto [got, when] = call.get();
  ASSERT_TRUE(got.ok()) << got.status();
  const double latency = std::chrono::duration<double>(when - back).count();
  std::printf("[ figure ] SDK Get through a 4 s outage: through %.2f s after the coordinator listened\n",
              latency);
  EXPECT_LT(latency, 1.5);
}

TEST_F(Restart, ACliCallMadeDuringARestartGoesThroughOnceTheCoordinatorIsBack) {
  StartCoordinator();
  auto job = Submit(Request("causal"));
  ASSERT_TRUE(job.ok()) << job.status();
  coordinator_->Signal(SIGKILL);
  coordinator_->Wait(10s);
  auto status = std::async(std::launch::async, [&] {
    RunResult r = RunCommand(absl::StrCat("CUBRIDGE_ADDRESS=", Address(), " CUBRIDGE_TOKEN=",
                                          kClientToken, " ", CliBinary(), " status ", job->job_id()));
    return std::make_pair(r, Clock::now());
  });
  std::this_thread::sleep_for(4s);
  StartCoordinator();
  const Clock::time_point back = Clock::now();
  auto [r, when] = status.get();
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(job->job_id()));
  const double latency = std::chrono::duration<double>(when - back).count();
  std::printf("[ figure ] cubridge-cli status through a 4 s outage: done %.2f s after the "
              "coordinator listened\n", latency);
  EXPECT_LT(latency, 1.5);
}

TEST_F(Restart, WatchFollowsItsJobThroughACoordinatorRestart) {
  StartCoordinator();
  StartWorker({{"CUBRIDGE_TEST_TASK_DELAY_MS", "3000"}});
  auto job = Submit(Request("prefix_lm"));
  ASSERT_TRUE(job.ok()) << job.status();
  auto watch = std::async(std::launch::async, [&] {
    return RunCommand(absl::StrCat("CUBRIDGE_ADDRESS=", Address(), " CUBRIDGE_TOKEN=", kClientToken,
                                   " ", CliBinary(), " watch ", job->job_id()));
  });
  WaitUntil(job->job_id(), [](const v1::Job& j) { return j.state() == v1::JOB_STATE_RUNNING; }, 60s);
  std::this_thread::sleep_for(500ms);  // the watch stream is open
  Bounce(2s);
  ASSERT_EQ(watch.wait_for(240s), std::future_status::ready);
  const RunResult r = watch.get();
  EXPECT_EQ(r.exit_code, 0) << r.output << Logs();
  EXPECT_THAT(r.output, HasSubstr("succeeded"));
  // Each stage line once: the resumed stream starts after the last event seen.
  EXPECT_EQ(r.output.find("[transfer]"), r.output.rfind("[transfer]")) << r.output;
}

TEST_F(Restart, WorkersLeaseAgainWithinTwoSecondsOfTheCoordinatorsReturn) {
  StartCoordinator();
  Process* worker = StartWorker();
  ASSERT_TRUE(worker->WaitForLog("registered as", 30s));
  auto occurrences = [&](const std::string& text) {
    const std::string log = worker->Log();
    int n = 0;
    for (size_t at = log.find(text); at != std::string::npos; at = log.find(text, at + 1)) ++n;
    return n;
  };
  // A short outage, and one longer than the worker's registration lives (3 leases: 6 s here).
  for (auto outage : {2000ms, 10000ms}) {
    const int before = occurrences("reachable again");
    const Clock::time_point back = Bounce(outage);
    while (occurrences("reachable again") == before && SecondsSince(back) < 30) {
      std::this_thread::sleep_for(20ms);
    }
    const double resumed = SecondsSince(back);
    std::printf("[ figure ] worker talking to the coordinator again %.2f s after a %.0f s outage "
                "ended\n", resumed, outage.count() / 1000.0);
    EXPECT_LT(resumed, 2.0) << "after a " << outage.count() << " ms outage\n" << worker->Log();
    // And it leases: a job submitted now runs on it.
    auto job = Submit(Request("sliding_window", {{"window", std::to_string(outage.count() / 100)}}));
    ASSERT_TRUE(job.ok()) << job.status();
    const v1::Job done = WaitEnded(job->job_id(), 120s);
    EXPECT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << Describe(done) << Logs();
  }
}

}  // namespace
}  // namespace cubridge::testing
