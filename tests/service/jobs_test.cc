// The service end to end on real processes: a job submitted over gRPC is lifted, transferred,
// verified, lowered and compiled by CPU workers at the `ir` level, stored in the kernel cache and
// served from it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <tuple>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "tests/sdk/test_util.h"
#include "tests/service/cluster.h"

namespace cubridge::testing {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

class Jobs : public Cluster {};

TEST_F(Jobs, AJobRunsEveryStageAndItsKernelIsServedFromTheCache) {
  StartCoordinator();
  StartWorker();
  auto job = Submit(Request("causal"));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_FALSE(job->cache_hit());
  EXPECT_EQ(job->job_kind(), v1::JOB_KIND_ADAPT);
  const v1::Job done = WaitEnded(job->job_id(), 240s);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << Describe(done) << Logs();
  std::vector<std::string> stages;
  for (const auto& e : done.events()) stages.push_back(e.stage());
  EXPECT_THAT(stages, ::testing::IsSupersetOf({"transfer", "verify", "lift", "compile", "cache"}));

  v1::Kernel kernel;
  ASSERT_TRUE(GetKernel(done.spec_hash(), "sm_80", &kernel).ok());
  EXPECT_EQ(kernel.verification(), v1::VERIFICATION_LEVEL_IR);
  EXPECT_THAT(kernel.cuda_source(), HasSubstr("@cuir-entry attention"));
  EXPECT_THAT(kernel.launcher_header(), HasSubstr("extern \"C\""));
  EXPECT_THAT(kernel.report_json(), HasSubstr("\"verification_level\": \"ir\""));

  // The same spec again: answered from the cache without any task.
  auto again = Submit(Request("causal"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(again->job_id(), job->job_id());
  EXPECT_TRUE(again->cache_hit());
  EXPECT_EQ(again->state(), v1::JOB_STATE_SUCCEEDED);

  // The entry holds the backward too; one cached before the service made backwards (its report
  // without the section) is not served, but made again with one.
  EXPECT_THAT(kernel.backward_cuda_source(), HasSubstr("@cuir-entry preprocess"));
  EXPECT_THAT(kernel.report_json(), HasSubstr("\"backward\""));
  auto keys = Redis()->Command({"KEYS", absl::StrCat("cubridge:kernel:", done.spec_hash(), ":sm_80:*")});
  ASSERT_TRUE(keys.ok() && keys->elements.size() == 1);
  auto old_report = nlohmann::json::parse(kernel.report_json());
  old_report.erase("backward");
  ASSERT_TRUE(Redis()->Command({"HSET", keys->elements[0].str, "report_json", old_report.dump(),
                                "backward_cuir", "", "backward_cuda_source", "",
                                "backward_launcher_header", ""})
                  .ok());
  auto redo = Submit(Request("causal"));
  ASSERT_TRUE(redo.ok()) << redo.status();
  EXPECT_FALSE(redo->cache_hit());
  ASSERT_EQ(WaitEnded(redo->job_id(), 240s).state(), v1::JOB_STATE_SUCCEEDED) << Logs();
  v1::Kernel remade;
  ASSERT_TRUE(GetKernel(done.spec_hash(), "sm_80", &remade).ok());
  EXPECT_THAT(remade.backward_cuda_source(), HasSubstr("@cuir-entry preprocess"));
}

// One report shape: the kernel the service made and the one `adapt --local` made of the same spec
// have report.json files with the same keys (pipeline::KernelReport), their levels and makers
// told by values, not by which keys are there.
TEST_F(Jobs, TheServiceAndAdaptLocalWriteReportsOfOneShape) {
  StartCoordinator();
  StartWorker();
  auto job = Submit(Request("causal"));
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::Job done = WaitEnded(job->job_id(), 240s);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << Describe(done) << Logs();
  v1::Kernel kernel;
  ASSERT_TRUE(GetKernel(done.spec_hash(), "sm_80", &kernel).ok());
  const auto service = nlohmann::json::parse(kernel.report_json());

  TempDir tmp;
  const RunResult local = RunCommand(absl::StrCat(
      CUBRIDGE_CLI, " adapt ", CUBRIDGE_SOURCE_ROOT, "/examples/specs/causal.py --local --no-cache",
      " --arch sm_80 --heads-q 4 --heads-kv 2 --head-dim 64 --seqlen 200 --out ", tmp / "out"));
  ASSERT_EQ(local.exit_code, 0) << local.output;
  const auto adapted = nlohmann::json::parse(ReadFile(tmp / "out/report.json"));
  auto keys = [](const nlohmann::json& j) {
    std::vector<std::string> out;
    for (const auto& [k, v] : j.items()) out.push_back(k);
    return out;
  };
  EXPECT_EQ(keys(service), keys(adapted));
  EXPECT_EQ(service["spec_hash"], adapted["spec_hash"]);
  EXPECT_EQ(service["verification_level"], "ir");
  EXPECT_EQ(service["job_id"], done.job_id());
  EXPECT_EQ(adapted["job_id"], "");
}

// One transfer serves both archs; each arch's kernel comes from its own expert (sm_90: the Hopper
// expert, the transferred program moved onto its base), lowered and compiled for its target.
TEST_F(Jobs, EachArchGetsTheKernelOfItsExpert) {
  StartCoordinator();
  StartWorker();
  v1::SubmitJobRequest request = Request("causal");
  request.clear_archs();
  request.add_archs("sm_80");
  request.add_archs("sm_90");
  auto job = Submit(request);
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::Job done = WaitEnded(job->job_id(), 300s);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << Describe(done) << Logs();
  for (const auto& [arch, expert, target] :
       {std::tuple{"sm_80", "fa2_sm80", "sm_80"}, std::tuple{"sm_90", "fa3_sm90", "sm_90a"}}) {
    v1::Kernel kernel;
    ASSERT_TRUE(GetKernel(done.spec_hash(), arch, &kernel).ok()) << arch;
    EXPECT_THAT(kernel.cuda_source(), HasSubstr(absl::StrCat("(expert \"", expert, "\")"))) << arch;
    EXPECT_THAT(kernel.report_json(), HasSubstr(absl::StrCat("\"target\": \"", target, "\"")))
        << arch;
  }
}

TEST_F(Jobs, AnIdempotencyKeyReturnsTheSameJob) {
  StartCoordinator();
  auto request = Request("sliding_window");
  request.set_idempotency_key("retry-me-7");
  auto first = Submit(request);
  auto second = Submit(request);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->job_id(), second->job_id());
  // No worker yet: the job waits and says for what.
  const v1::Job waiting =
      WaitUntil(first->job_id(), [](const v1::Job& j) { return !j.waiting_for().empty(); }, 10s);
  EXPECT_EQ(waiting.state(), v1::JOB_STATE_QUEUED);
  EXPECT_THAT(waiting.waiting_for(), HasSubstr("no worker has registered"));
}

TEST_F(Jobs, AGpuJobWithoutAGpuWorkerStaysQueuedAndSaysWhy) {
  StartCoordinator();
  StartWorker();  // a CPU worker: it can transfer, not verify on a GPU
  auto request = Request("causal");
  request.set_verification(v1::VERIFICATION_LEVEL_GPU);
  request.clear_archs();
  request.add_archs("sm_90");
  auto job = Submit(request);
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::Job waiting = WaitUntil(
      job->job_id(), [](const v1::Job& j) { return j.waiting_for().find("sm_90") != std::string::npos; },
      120s);
  EXPECT_FALSE(Ended(waiting)) << Describe(waiting);
  EXPECT_THAT(waiting.waiting_for(), HasSubstr("no sm_90 worker has registered")) << Describe(waiting);
}

TEST_F(Jobs, AnInputOnlyTheWorkerCanRejectFailsTheJobOnceAndCachesNothing) {
  StartCoordinator();
  StartWorker();
  // Well-formed, but 20 document ids for 200 tokens: the verifier's inputs cannot be built.
  auto request = Request("causal_document");
  (*request.mutable_spec()->mutable_buffers())["doc"] = "lengths:10,10";
  auto job = Submit(request);
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::Job done = WaitEnded(job->job_id(), 120s);
  ASSERT_EQ(done.state(), v1::JOB_STATE_FAILED) << Describe(done);
  EXPECT_THAT(done.error(), HasSubstr("buffer `doc` from `lengths:10,10` has shape [20] but the spec's indexing"));
  EXPECT_THAT(done.error(), HasSubstr("give at least [200]"));
  // The input is at fault: one attempt, no retries.
  int failures = 0;
  for (const auto& e : done.events()) failures += e.ok() ? 0 : 1;
  EXPECT_EQ(failures, 1) << Describe(done);
  v1::Kernel kernel;
  EXPECT_EQ(GetKernel(done.spec_hash(), "sm_80", &kernel).error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace cubridge::testing
