// The user's path through the real CLI binary against a real cluster: submit --watch, status,
// get, list, workers; plus the metrics endpoint and a worker that outlives crashing tasks.
#include <sys/wait.h>

#include <cstdio>
#include <regex>
#include <thread>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "tests/sdk/test_util.h"
#include "tests/service/cluster.h"

namespace cubridge::testing {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

class Cli : public Cluster {
 protected:
  RunResult Run(const std::string& args, const std::string& token = kClientToken) {
    return RunCommand(absl::StrCat("CUBRIDGE_ADDRESS=", Address(), " CUBRIDGE_TOKEN=", token, " ",
                                   CUBRIDGE_CLI, " ", args));
  }
  static std::string Spec(const std::string& name) {
    return absl::StrCat(CUBRIDGE_SOURCE_ROOT, "/examples/specs/", name, ".py");
  }
  // The job id a `submit` printed ("" when it printed none).
  static std::string JobId(const RunResult& submitted) {
    std::smatch m;
    return std::regex_search(submitted.output, m, std::regex("(j-[0-9a-f]{16})")) ? m[1].str() : "";
  }
  // `get JOB -o DIR`, then DIR's report (discarded JSON when it is missing or unreadable).
  nlohmann::json FetchReport(const std::string& job, const std::string& out) {
    const RunResult got = Run(absl::StrCat("get ", job, " -o ", out));
    EXPECT_EQ(got.exit_code, 0) << got.output;
    std::ifstream in(out + "/report.json");
    return nlohmann::json::parse(in, nullptr, false);
  }
  static constexpr char kConfig[] =
      "--arch sm_80 --verification ir --heads-q 4 --heads-kv 2 --head-dim 64 --seqlen 300";
};

TEST_F(Cli, SubmitWatchAndGetTheKernel) {
  StartCoordinator();
  StartWorker();
  const RunResult submitted = Run(absl::StrCat("submit ", Spec("causal_document"), " ", kConfig,
                                               " --buffer doc=lengths:100,150,50 --watch"));
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output << Logs();
  // Live stage lines in the `adapt --local` format, then the outcome.
  EXPECT_THAT(submitted.output, ::testing::ContainsRegex("\\[transfer\\] ok +[0-9.]+s  "));
  EXPECT_THAT(submitted.output, ::testing::ContainsRegex("\\[compile \\] ok "));
  // The backward: a CPU task of its own, its kernel cached with the forward's.
  EXPECT_THAT(submitted.output, ::testing::ContainsRegex("\\[backward\\] ok "));
  EXPECT_THAT(submitted.output, HasSubstr("succeeded"));
  const std::string job = JobId(submitted);
  ASSERT_NE(job, "") << submitted.output;

  const RunResult status = Run("status " + job);
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_THAT(status.output, HasSubstr("succeeded"));

  const std::string out = dir_ + "/kernel";
  const RunResult got = Run(absl::StrCat("get ", job, " -o ", out));
  ASSERT_EQ(got.exit_code, 0) << got.output;
  EXPECT_THAT(got.output, HasSubstr("verified at the IR level only"));
  for (const char* f : {"kernel.cuir", "kernel.cu", "kernel.h", "report.json", "kernel_bwd.cuir",
                        "kernel_bwd.cu", "kernel_bwd.h"}) {
    std::ifstream in(out + "/" + f);
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_FALSE(ss.str().empty()) << f;
  }
  std::ifstream report_in(out + "/report.json");
  const auto report = nlohmann::json::parse(report_in, nullptr, false);
  ASSERT_TRUE(report.is_object());
  EXPECT_TRUE(report.at("backward").value("available", false)) << report.dump();
  EXPECT_TRUE(report.at("backward").at("verification").value("passed", false));
  EXPECT_THAT(got.output, HasSubstr("kernel_bwd.{cuir,cu,h}"));
  const RunResult listed = Run("list");
  EXPECT_THAT(listed.output, HasSubstr(job));
  const RunResult workers = Run("workers");
  EXPECT_THAT(workers.output, HasSubstr("w-cpu-"));

  // A wrong token and a bad spec fail with their exit codes and say what to fix.
  const RunResult denied = Run("list", "not-the-token");
  EXPECT_EQ(denied.exit_code, 4) << denied.output;
  const std::string bad = dir_ + "/bad.py";
  std::ofstream(bad) << "import torch\n\ndef mask_mod(b, h, q_idx, kv_idx):\n    return q_idx >= undefined_name\n";
  const RunResult invalid = Run(absl::StrCat("submit ", bad, " ", kConfig));
  EXPECT_EQ(invalid.exit_code, 2) << invalid.output;
  EXPECT_THAT(invalid.output, HasSubstr("bad.py:4:"));
}

// A job says whether it wants the backward: off makes none (no task, no files); require gets
// one where the pipeline makes one, here at head dim 256 on the expert's narrower backward tile.
// (Require failing where there is none: tests/service/llm_test.cc, a spec only the model covers.)
TEST_F(Cli, AJobCanDoWithoutTheBackwardOrRequireIt) {
  StartCoordinator();
  StartWorker();
  const RunResult off = Run(absl::StrCat("submit ", Spec("causal"), " ", kConfig,
                                         " --backward off --watch"));
  ASSERT_EQ(off.exit_code, 0) << off.output << Logs();
  EXPECT_THAT(off.output, ::testing::Not(HasSubstr("[backward]")));
  const std::string off_job = JobId(off);
  ASSERT_NE(off_job, "") << off.output;
  const std::string out = dir_ + "/off";
  const auto report = FetchReport(off_job, out);
  ASSERT_TRUE(report.is_object());
  EXPECT_FALSE(report.contains("backward"));
  EXPECT_FALSE(std::ifstream(out + "/kernel_bwd.cu").good());

  const RunResult required = Run(absl::StrCat(
      "submit ", Spec("causal"),
      " --arch sm_80 --verification ir --heads-q 2 --heads-kv 2 --head-dim 256 --seqlen 64",
      " --backward require --watch"));
  ASSERT_EQ(required.exit_code, 0) << required.output << Logs();
  const std::string required_job = JobId(required);
  ASSERT_NE(required_job, "") << required.output;
  const std::string wide = dir_ + "/wide";
  const auto wide_report = FetchReport(required_job, wide);
  ASSERT_TRUE(wide_report.is_object());
  // at(): reading a const report past its keys with [] is undefined behaviour.
  EXPECT_TRUE(wide_report.at("backward").value("available", false)) << wide_report.dump();
  EXPECT_EQ(wide_report.at("backward").value("tile", ""), "32x64w8");
  std::ifstream cu(wide + "/kernel_bwd.cu");
  std::stringstream cu_text;
  cu_text << cu.rdbuf();
  EXPECT_THAT(cu_text.str(), HasSubstr("constexpr int BLOCK_N = 64;"));
}

TEST_F(Cli, AWorkerOutlivesCrashingTasksAndTheJobFailsWithTheLastError) {
  StartCoordinator({"--max-attempts", "2"});
  Process* worker = StartWorker({{"CUBRIDGE_TEST_TASK_CRASH", "transfer"}});
  const RunResult r = Run(absl::StrCat("submit ", Spec("causal"), " ", kConfig, " --watch"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("SIGABRT")) << r.output << Logs();
  EXPECT_TRUE(worker->Alive()) << "the daemon died with its task";
  // Both attempts ran and crashed; the task was dead-lettered after the second.
  EXPECT_THAT(worker->Log(), HasSubstr("attempt=2"));
}

TEST_F(Cli, MetricsAreServedWithUnitsInTheirNames) {
  const int metrics_port = FreeLoopbackPort();
  StartCoordinator({"--metrics-listen", absl::StrCat("127.0.0.1:", metrics_port)});
  StartWorker();
  ASSERT_EQ(Run(absl::StrCat("submit ", Spec("causal"), " ", kConfig, " --watch")).exit_code, 0);
  ASSERT_EQ(Run(absl::StrCat("submit ", Spec("causal"), " ", kConfig)).exit_code, 0);  // cache hit
  httplib::Client http("127.0.0.1", metrics_port);
  std::string body;
  // The gauges refresh every 2 s: wait for a refresh after the jobs' last task left the queue.
  const auto settled = [&] {
    return body.find("cubridge_workers{arch=\"cpu\"} 1") != std::string::npos &&
           body.find("cubridge_queue_depth{class=\"cpu\"} 0") != std::string::npos;
  };
  for (int i = 0; i < 30 && !settled(); ++i) {
    std::this_thread::sleep_for(200ms);
    auto res = http.Get("/metrics");
    ASSERT_TRUE(res) << "no /metrics on port " << metrics_port;
    body = res->body;
  }
  EXPECT_THAT(body, HasSubstr("cubridge_jobs_total{outcome=\"succeeded\"} 2"));
  EXPECT_THAT(body, HasSubstr("cubridge_kernel_cache_lookups_total{result=\"hit\"} 1"));
  EXPECT_THAT(body, HasSubstr("cubridge_stage_duration_seconds_count{stage=\"transfer\"} 1"));
  EXPECT_THAT(body, HasSubstr("cubridge_workers{arch=\"cpu\"} 1"));
  EXPECT_THAT(body, HasSubstr("cubridge_queue_depth{class=\"cpu\"} 0"));
}

}  // namespace
}  // namespace cubridge::testing

namespace cubridge::testing {
namespace {

class Tls : public Cli {};

TEST_F(Tls, ClientsAndWorkersTalkToATlsCoordinator) {
  const std::string key = dir_ + "/key.pem", cert = dir_ + "/cert.pem";
  const std::string openssl = absl::StrCat(
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -keyout ", key,
      " -out ", cert, " -addext subjectAltName=IP:127.0.0.1,DNS:localhost >/dev/null 2>&1");
  if (std::system(openssl.c_str()) != 0) GTEST_SKIP() << "openssl cannot make a test certificate here";
  StartCoordinator({"--tls-cert", cert, "--tls-key", key});
  StartWorker({}, {"--tls-ca", cert});
  const RunResult r =
      Run(absl::StrCat("submit ", Spec("causal"), " ", kConfig, " --tls-ca ", cert, " --watch"));
  EXPECT_EQ(r.exit_code, 0) << r.output << Logs();
  // Plaintext against the TLS port does not get through.
  const RunResult plain = Run("list");
  EXPECT_EQ(plain.exit_code, 3) << plain.output;
}

}  // namespace
}  // namespace cubridge::testing
