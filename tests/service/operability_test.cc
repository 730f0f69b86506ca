// What an operator relies on: every metric exported from start-up, the queue depth right after a
// cancel, ended jobs expiring while cached kernels stay, and an accepted job surviving Redis
// being SIGKILLed with the chart's AOF setting.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/service/cluster.h"

namespace cubridge::testing {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

class Operability : public Cluster {
 protected:
  void StartWithMetrics(std::vector<std::string> extra = {}) {
    metrics_port_ = FreeLoopbackPort();
    extra.insert(extra.end(), {"--metrics-listen", absl::StrCat("127.0.0.1:", metrics_port_)});
    StartCoordinator(extra);
  }
  std::string Metrics(int port = 0) {
    httplib::Client http("127.0.0.1", port == 0 ? metrics_port_ : port);
    auto res = http.Get("/metrics");
    return res ? res->body : "";
  }
  // The sample's value, or -1 when the exposition has no such line.
  double Sample(const std::string& text, const std::string& series) {
    std::smatch m;
    const std::regex line("(^|\n)" + std::regex_replace(series, std::regex(R"([{}()\[\]\\.+*?^$|])"), R"(\$&)") +
                          " ([-0-9.e+]+)");
    return std::regex_search(text, m, line) ? std::stod(m[2]) : -1;
  }
  bool WaitForSample(const std::string& series, double value, std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      if (Sample(Metrics(), series) == value) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }
  int metrics_port_ = 0;
};

TEST_F(Operability, EveryMetricFamilyIsExportedAtZeroFromStartUp) {
  StartWithMetrics();
  const std::string text = Metrics();
  for (const char* series :
       {"cubridge_task_retries_total", "cubridge_tasks_dead_total", "cubridge_lease_expiries_total",
        R"(cubridge_jobs_total{outcome="failed"})", R"(cubridge_jobs_total{outcome="cancelled"})",
        R"(cubridge_jobs_submitted_total{cache="duplicate"})",
        R"(cubridge_kernel_cache_lookups_total{result="hit"})",
        R"(cubridge_stage_duration_seconds_count{stage="transfer"})",
        R"(cubridge_queue_depth{class="sm_90"})", R"(cubridge_workers{arch="sm_80"})"}) {
    EXPECT_EQ(Sample(text, series), 0) << series << " is not exported at 0:\n" << text;
  }
  const int worker_port = FreeLoopbackPort();
  Process* w = StartWorker({}, {"--metrics-listen", absl::StrCat("127.0.0.1:", worker_port)});
  ASSERT_TRUE(w->WaitForLog("metrics on port", 30s)) << w->Log();
  const std::string worker = Metrics(worker_port);
  for (const char* series :
       {R"(cubridge_worker_tasks_total{kind="transfer",outcome="crashed"})",
        R"(cubridge_worker_tasks_total{kind="candidate",outcome="ok"})",
        R"(cubridge_worker_task_duration_seconds_count{kind="lift"})",
        R"(cubridge_llm_tokens_total{kind="prompt"})", "cubridge_llm_requests_total"}) {
    EXPECT_EQ(Sample(worker, series), 0) << series << " is not exported at 0:\n" << worker;
  }
}

TEST_F(Operability, CancellingTheOnlyJobEmptiesItsQueueAtOnce) {
  StartWithMetrics();
  auto job = Submit(Request("causal"));  // no worker: its transfer and lift wait in class cpu
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitForSample(R"(cubridge_queue_depth{class="cpu"})", 2, 10s)) << Metrics();
  v1::GetJobRequest cancel;
  cancel.set_job_id(job->job_id());
  v1::Job out;
  auto ctx = Context(kClientToken);
  ASSERT_TRUE(ClientStub()->CancelJob(ctx.get(), cancel, &out).ok());
  EXPECT_TRUE(WaitForSample(R"(cubridge_queue_depth{class="cpu"})", 0, 1s)) << Metrics();
  // Nobody is left to want that work: a worker that comes later does not run it.
  Process* w = StartWorker();
  ASSERT_TRUE(w->WaitForLog("registered as", 30s));
  std::this_thread::sleep_for(2s);
  EXPECT_THAT(w->Log(), ::testing::Not(HasSubstr(": running"))) << w->Log();
}

TEST_F(Operability, EndedJobsExpireAfterTheRetentionWhileCachedKernelsStay) {
  StartCoordinator({"--job-retention-seconds", "2"});
  StartWorker();
  auto job = Submit(Request("causal"));
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::Job done = WaitEnded(job->job_id(), 180s);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << Describe(done);
  auto hit = Submit(Request("causal"));
  ASSERT_TRUE(hit.ok()) << hit.status();
  ASSERT_TRUE(hit->cache_hit());
  std::this_thread::sleep_for(4s);
  auto redis = Redis();
  for (const std::string& id : {job->job_id(), hit->job_id()}) {
    EXPECT_EQ(Get(id).status().code(), absl::StatusCode::kNotFound) << id;
    auto keys = redis->Command({"KEYS", "cubridge:job:" + id + "*"});
    ASSERT_TRUE(keys.ok());
    EXPECT_TRUE(keys->elements.empty()) << id << " left " << keys->elements.size() << " keys";
    auto indexed = redis->Command({"ZSCORE", "cubridge:jobs", id});
    EXPECT_TRUE(indexed->is_nil()) << id << " is still listed";
  }
  v1::GetKernelRequest k;
  k.set_spec_hash(done.spec_hash());
  k.set_arch("sm_80");
  v1::Kernel kernel;
  auto ctx = Context(kClientToken);
  const grpc::Status got = ClientStub()->GetKernel(ctx.get(), k, &kernel);
  EXPECT_TRUE(got.ok()) << got.error_message();
  EXPECT_FALSE(kernel.cuda_source().empty());
}

// The appendfsync setting the Helm chart gives Redis: what this test holds to its promise.
std::string ChartAppendFsync() {
  std::ifstream in(std::string(CUBRIDGE_SOURCE_ROOT) + "/helm/cubridge/templates/redis-statefulset.yaml");
  std::stringstream text;
  text << in.rdbuf();
  std::smatch m;
  const std::string yaml = text.str();
  return std::regex_search(yaml, m, std::regex("- --appendfsync\\s*\\n\\s*- \"?([a-z]+)")) ? m[1].str() : "";
}

TEST_F(Operability, AnAcceptedJobSurvivesRedisKilledRightAfterTheSubmitReturned) {
  const std::string fsync = ChartAppendFsync();
  ASSERT_FALSE(fsync.empty()) << "the chart names no --appendfsync";
  redis_.Stop();
  ASSERT_TRUE(redis_.Restart({"--appendfsync", fsync})) << redis_.error();
  StartCoordinator();
  auto job = Submit(Request("causal"));
  ASSERT_TRUE(job.ok()) << job.status();
  redis_.Kill();  // SIGKILL: no shutdown, nothing written that was not written already
  ASSERT_TRUE(redis_.Restart({"--appendfsync", fsync})) << redis_.error();
  StartWorker();
  const v1::Job done = WaitEnded(job->job_id(), 180s);
  EXPECT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << Describe(done) << Logs();
}

}  // namespace
}  // namespace cubridge::testing
