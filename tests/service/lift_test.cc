// Lift jobs (a user's CUDA kernel in the job, lifted into CuIR by a model) through the real
// coordinator and workers: refused at submit when the kernel cannot be lifted, queued until a
// worker with both a model and a GPU of the arch is there, and on a GPU machine lifted end to end
// with the accepted program served by GetJob and `cubridge-cli get` (skipped without a GPU).
#include <unistd.h>

#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tests/llm/scripted_server.h"
#include "tests/propose/propose_test_util.h"
#include "tests/sdk/test_util.h"
#include "tests/service/cluster.h"

namespace cubridge::testing {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

const std::string kExample = absl::StrCat(CUBRIDGE_SOURCE_ROOT, "/examples/lift/softcap_causal");

class Lift : public Cluster {
 protected:
  void SetUp() override {
    Cluster::SetUp();
    StartCoordinator();
  }
  static v1::SubmitJobRequest LiftRequest(const std::string& arch = "sm_80") {
    v1::SubmitJobRequest r;
    r.mutable_kernel()->set_file_name("softcap_causal.cu");
    r.mutable_kernel()->set_source(ReadFile(kExample + ".cu"));
    r.mutable_config()->set_heads_q(4);
    r.mutable_config()->set_heads_kv(2);
    r.mutable_config()->set_head_dim(64);
    r.mutable_config()->set_seqlen_q(96);
    r.mutable_config()->set_seqlen_kv(96);
    r.add_archs(arch);
    return r;
  }
  Process* StartLlmWorker(const ScriptedLlmServer& server, const std::string& arch) {
    return StartWorker({}, {"--arch", arch, "--llm-endpoint", server.endpoint(), "--llm-model",
                            "scripted-model", "--llm-max-rounds", "2", "--llm-retries", "0"});
  }
  RunResult Cli(const std::string& args) {
    return RunCommand(absl::StrCat("CUBRIDGE_ADDRESS=", Address(), " CUBRIDGE_TOKEN=", kClientToken,
                                   " ", CUBRIDGE_CLI, " ", args));
  }
};

TEST_F(Lift, AKernelThatCannotBeLiftedIsRefusedAtSubmit) {
  v1::SubmitJobRequest plain = LiftRequest();
  plain.mutable_kernel()->set_file_name("plain.cu");
  plain.mutable_kernel()->set_source("__global__ void attn() {}\n");
  auto r = Submit(plain);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("plain.cu: no `// @cuir-entry plan NAME` line"));

  v1::SubmitJobRequest both = LiftRequest();
  both.mutable_spec()->set_source("def mask_mod(b, h, q_idx, kv_idx):\n    return q_idx >= kv_idx\n");
  EXPECT_THAT(Submit(both).status().message(), HasSubstr("adapts a spec or lifts a kernel"));

  v1::SubmitJobRequest rules = LiftRequest();
  rules.set_proposer("rules");
  EXPECT_THAT(Submit(rules).status().message(), HasSubstr("lifting is done by a language model"));

  v1::SubmitJobRequest named = LiftRequest();
  named.mutable_kernel()->set_name("not a name");
  EXPECT_THAT(Submit(named).status().message(), HasSubstr("is not an identifier"));
}

TEST_F(Lift, AJobWaitsForAWorkerWithAModelAndAGpuOfItsArch) {
  ScriptedLlmServer server({Say(Fenced(ReadFile(kExample + ".cuir")))});
  StartLlmWorker(server, "cpu");  // a model but no GPU: it must not take the lift
  auto job = Submit(LiftRequest("sm_90"));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->kind(), "lift");
  EXPECT_EQ(job->job_kind(), v1::JOB_KIND_LIFT);
  EXPECT_EQ(job->proposer(), "llm");
  const v1::Job seen = WaitUntil(
      job->job_id(), [](const v1::Job& j) { return !j.waiting_for().empty(); }, 20s);
  EXPECT_THAT(seen.waiting_for(), HasSubstr("no sm_90 worker with an LLM endpoint has registered"))
      << Describe(seen);
  std::this_thread::sleep_for(1500ms);  // long enough for the cpu worker's lease polls
  EXPECT_EQ(Get(job->job_id())->state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(server.request_count(), 0) << "the model was asked with no GPU to check its answer";
  auto status = Cli("status " + job->job_id());
  EXPECT_THAT(status.output, HasSubstr("lift (a user kernel"));
}

TEST_F(Lift, AWorkerWithoutAUsableGpuNeverAsksTheModelAndTheJobSaysWhy) {
  if (access("/dev/nvidiactl", F_OK) == 0) GTEST_SKIP() << "this machine has a GPU";
  ScriptedLlmServer server({Say(Fenced(ReadFile(kExample + ".cuir")))});
  StartLlmWorker(server, "sm_80");  // claims an arch it cannot serve here
  auto job = Submit(LiftRequest("sm_80"));
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::Job ended = WaitEnded(job->job_id(), 60s);
  ASSERT_EQ(ended.state(), v1::JOB_STATE_FAILED) << Describe(ended) << Logs();
  EXPECT_THAT(ended.error(), HasSubstr("accepted only when it agrees with the compiled kernel on a GPU"))
      << Describe(ended);
  EXPECT_EQ(server.request_count(), 0) << "tokens spent with no GPU to check the answer";
}

TEST_F(Lift, OnAGpuWorkerTheAcceptedProgramIsServedToTheClient) {
  if (access("/dev/nvidiactl", F_OK) != 0) GTEST_SKIP() << "no GPU here (/dev/nvidiactl absent)";
  const std::string good = ReadFile(kExample + ".cuir");
  const std::string no_cap =
      absl::StrReplaceAll(good, {{"    score_mod S = cap * tanh(score / cap)\n", ""}});
  ScriptedLlmServer server({Say(Fenced(no_cap)), Say(Fenced(good))});
  StartLlmWorker(server, "auto");
  // The GPU's own arch: what the worker registers as.
  auto cc = RunCommand("nvidia-smi --query-gpu=compute_cap --format=csv,noheader");
  const std::string arch = cc.output.rfind("9.", 0) == 0 ? "sm_90" : "sm_80";
  auto submitted = Cli(absl::StrCat("submit --kernel ", kExample, ".cu --head-dim 64 --heads-q 4 ",
                                    "--heads-kv 2 --seqlen 96 --arch ", arch, " --watch"));
  EXPECT_EQ(submitted.exit_code, 0) << submitted.output << Logs();
  const std::string id = submitted.output.substr(0, submitted.output.find(' '));
  auto job = Get(id);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED) << Describe(*job) << Logs();
  EXPECT_THAT(job->lifted_cuir(), HasSubstr("tanh"));
  EXPECT_THAT(job->lift_report_json(), HasSubstr("\"accepted_round\":2"));
  EXPECT_EQ(server.request_count(), 2);
  const std::string out = dir_ + "/lifted";
  auto got = Cli(absl::StrCat("get ", id, " --out ", out));
  EXPECT_EQ(got.exit_code, 0) << got.output;
  EXPECT_THAT(ReadFile(out + "/base.cuir"), HasSubstr("expert \"softcap_causal\""));
  auto transcript = Cli("transcript " + id);
  EXPECT_THAT(transcript.output, HasSubstr("rejected by the GPU check")) << transcript.output;
}

}  // namespace
}  // namespace cubridge::testing
