// The service commands of cubridge-cli, run as a user would, against the in-test coordinator:
// what they send, what they print, and their exit codes.
#include <filesystem>

#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fake_service.h"
#include "test_util.h"

namespace cubridge {
namespace {

using ::cubridge::testing::DeadPort;
using ::cubridge::testing::Event;
using ::cubridge::testing::FakeServer;
using ::cubridge::testing::ReadFile;
using ::cubridge::testing::RunResult;
using ::cubridge::testing::TempDir;
using ::cubridge::testing::WriteFile;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class CliTest : public ::testing::Test {
 protected:
  // `env` goes before the command: "CUBRIDGE_TOKEN=x". The test's own CUBRIDGE_* settings are
  // not inherited.
  RunResult Cli(const std::string& args, const std::string& env = "") {
    return testing::RunCommand("env -u CUBRIDGE_ADDRESS -u CUBRIDGE_TOKEN -u CUBRIDGE_TOKEN_FILE "
                        "-u CUBRIDGE_TLS_CA " + env + " " + CUBRIDGE_CLI + " " + args +
                        " --address " + server_.address());
  }

  std::string Spec() { return WriteFile(dir_ / "window.py", "def mask_mod(b, h, q, kv):\n"); }

  v1::Job AddJob(const std::string& id, v1::JobState state, std::vector<std::string> archs = {}) {
    v1::Job job;
    job.set_job_id(id);
    job.set_state(state);
    job.set_spec_hash("5ec");
    for (const auto& a : archs) job.add_archs(a);
    *job.add_events() = Event("spec");
    *job.add_events() = Event("transfer", state != v1::JOB_STATE_FAILED, "3 rules");
    if (state == v1::JOB_STATE_FAILED) job.set_error("transfer: not covered by the rules");
    server_.service().AddJob(job);
    return job;
  }

  void AddKernel(const std::string& arch, v1::VerificationLevel level) {
    v1::Kernel k;
    k.set_spec_hash("5ec");
    k.set_arch(arch);
    k.set_ruleset("rules-1");
    k.set_verification(level);
    k.set_cuir("cuir " + arch);
    k.set_cuda_source("cu " + arch);
    k.set_launcher_header("h " + arch);
    k.set_report_json("{\"arch\": \"" + arch + "\"}");
    server_.service().AddKernel(k);
  }

  FakeServer server_;
  TempDir dir_;
};

TEST_F(CliTest, SubmitSendsTheSpecTheConfigFlagsAndTheJobOptions) {
  const std::string spec = Spec();
  const std::string doc = WriteFile(dir_ / "doc.txt", "0 0 1\n1\n");
  auto r = Cli("submit " + spec +
               " --heads-q 32 --heads-kv 8 --seqlen 1000 --seqlen-kv 2048 --dtype fp16"
               " --param window=128 --buffer doc=file:" + doc + " --buffer len=lengths:5,6"
               " --arch sm_80 --arch sm_90 --verification ir --idempotency-key nightly-7");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("j-0001"));
  const auto submits = server_.service().submits();
  ASSERT_EQ(submits.size(), 1u);
  const v1::SubmitJobRequest& s = submits[0];
  EXPECT_EQ(s.spec().file_name(), spec);
  EXPECT_EQ(s.spec().source(), "def mask_mod(b, h, q, kv):\n");
  EXPECT_EQ(s.config().heads_q(), 32);
  EXPECT_EQ(s.config().heads_kv(), 8);
  EXPECT_EQ(s.config().head_dim(), 128);  // the default adapt uses too
  EXPECT_EQ(s.config().seqlen_q(), 1000);
  EXPECT_EQ(s.config().seqlen_kv(), 2048);
  EXPECT_EQ(s.config().dtype(), "fp16");
  EXPECT_EQ(s.spec().params().at("window"), "128");
  // The coordinator cannot read this machine's files: the values travel instead.
  EXPECT_EQ(s.spec().buffers().at("doc"), "values:0,0,1,1");
  EXPECT_EQ(s.spec().buffers().at("len"), "lengths:5,6");
  ASSERT_EQ(s.archs_size(), 2);
  EXPECT_EQ(s.archs(0), "sm_80");
  EXPECT_EQ(s.archs(1), "sm_90");
  EXPECT_EQ(s.verification(), v1::VERIFICATION_LEVEL_IR);
  EXPECT_EQ(s.idempotency_key(), "nightly-7");
}

TEST_F(CliTest, SubmitSendsTheProposerAndRefusesAnUnknownOne) {
  ASSERT_EQ(Cli("submit " + Spec()).exit_code, 0);
  auto r = Cli("submit " + Spec() + " --proposer hybrid");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto bad = Cli("submit " + Spec() + " --proposer gpt");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("--proposer"));
  const auto submits = server_.service().submits();
  ASSERT_EQ(submits.size(), 2u);
  EXPECT_EQ(submits[0].proposer(), "");  // the service's default: the rules
  EXPECT_EQ(submits[1].proposer(), "hybrid");
}

TEST_F(CliTest, TranscriptShowsAJobsConversation) {
  v1::Job job = AddJob("j-llm", v1::JOB_STATE_FAILED);
  const std::string conversation =
      R"([{"round":0,"role":"user","content":"Transfer this spec."},)"
      R"({"round":1,"role":"assistant","content":"```cuir\ncuir 1\n```","prompt_tokens":100,)"
      R"("completion_tokens":50,"verdict":"rejected by the CuIR parser"}])";
  job.set_proposer("llm");
  job.set_transcript_json(conversation);
  server_.service().AddJob(job);
  auto r = Cli("transcript j-llm");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("Transfer this spec."));
  EXPECT_THAT(r.output, HasSubstr("round 1 · assistant · 100 prompt + 50 completion tokens · "
                                  "rejected by the CuIR parser"));
  auto raw = Cli("transcript j-llm --json");
  ASSERT_EQ(raw.exit_code, 0) << raw.output;
  EXPECT_EQ(nlohmann::json::parse(raw.output), nlohmann::json::parse(conversation));

  auto status = Cli("status j-llm");
  EXPECT_THAT(status.output,
              HasSubstr("proposer      llm (the conversation: cubridge-cli transcript j-llm)\n"));
  auto watched = Cli("watch j-llm");
  EXPECT_THAT(watched.output, HasSubstr("the LLM conversation: cubridge-cli transcript j-llm"));

  AddJob("j-rules", v1::JOB_STATE_SUCCEEDED);
  auto none = Cli("transcript j-rules");
  EXPECT_EQ(none.exit_code, 1) << none.output;
  EXPECT_THAT(none.output, HasSubstr("j-rules has no LLM transcript: its proposer is the rules"));
  EXPECT_EQ(Cli("transcript j-nope").exit_code, 1);
}

TEST_F(CliTest, TranscriptShowsALocalFileWithoutAService) {
  const std::string file = WriteFile(
      dir_ / "transcript.json",
      R"([{"round": 1, "role": "assistant", "content": "here it is", "verdict": "accepted"}])");
  const std::string dead = "127.0.0.1:" + std::to_string(DeadPort());
  auto r = testing::RunCommand(std::string(CUBRIDGE_CLI) + " transcript " + file +
                               " --address " + dead);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("round 1 · assistant · accepted"));
  EXPECT_THAT(r.output, HasSubstr("here it is"));
  auto raw = testing::RunCommand(std::string(CUBRIDGE_CLI) + " transcript --json " + file);
  ASSERT_EQ(raw.exit_code, 0) << raw.output;
  EXPECT_EQ(nlohmann::json::parse(raw.output), nlohmann::json::parse(ReadFile(file)));

  auto bad = Cli("transcript " + WriteFile(dir_ / "notes.txt", "not json"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("not a transcript"));
  auto neither = Cli("transcript " + dir_ / "missing.json");
  EXPECT_EQ(neither.exit_code, 2) << neither.output;
  EXPECT_THAT(neither.output, HasSubstr("neither a file nor a job id"));
  EXPECT_EQ(server_.service().calls("GetJob"), 0);
}

TEST_F(CliTest, AnInvalidSpecExits2WithTheServersMessageAsIs) {
  const std::string message = "window.py:1:27: unknown name `windw`";
  server_.service().FailNext("SubmitJob",
                             {grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message)});
  auto r = Cli("submit " + Spec());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, StartsWith(message + "\n"));
}

TEST_F(CliTest, SubmitWatchPrintsTheStagesAndExitsWithTheOutcome) {
  server_.service().EndSubmittedJobs(v1::JOB_STATE_SUCCEEDED, {Event("spec"), Event("lift")});
  auto ok = Cli("submit " + Spec() + " --watch");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_THAT(ok.output, HasSubstr("[lift    ] ok     0.250s  lift done\n"));
  EXPECT_THAT(ok.output, HasSubstr("succeeded"));

  server_.service().EndSubmittedJobs(v1::JOB_STATE_FAILED, {Event("transfer", false, "no rule")});
  auto failed = Cli("submit " + Spec() + " --watch");
  EXPECT_EQ(failed.exit_code, 1) << failed.output;
  EXPECT_THAT(failed.output, HasSubstr("[transfer] FAIL   0.250s  no rule\n"));
  EXPECT_THAT(failed.output, HasSubstr("failed: transfer: not covered by the rules"));
}

TEST_F(CliTest, WatchExitsZeroOnlyForASucceededJob) {
  AddJob("j-ok", v1::JOB_STATE_SUCCEEDED, {"sm_90"});
  AddJob("j-bad", v1::JOB_STATE_FAILED);
  AddJob("j-off", v1::JOB_STATE_CANCELLED);
  auto ok = Cli("watch j-ok");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_THAT(ok.output, StartsWith("[spec    ] ok     0.250s  spec done\n"
                                    "[transfer] ok     0.250s  3 rules\n"));
  EXPECT_THAT(ok.output, HasSubstr("cubridge-cli get j-ok"));
  EXPECT_EQ(Cli("watch j-bad").exit_code, 1);
  EXPECT_EQ(Cli("watch j-off").exit_code, 1);
}

TEST_F(CliTest, StatusShowsTheJobAndItsEvents) {
  v1::Job job = AddJob("j-q", v1::JOB_STATE_QUEUED, {"sm_80", "sm_90"});
  job.set_waiting_for("no sm_90 worker has registered");
  server_.service().AddJob(job);
  auto r = Cli("status j-q");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("state         queued\n"));
  EXPECT_THAT(r.output, HasSubstr("spec hash     5ec\n"));
  EXPECT_THAT(r.output, HasSubstr("archs         sm_80, sm_90\n"));
  EXPECT_THAT(r.output, HasSubstr("waiting for   no sm_90 worker has registered\n"));
  EXPECT_THAT(r.output, HasSubstr("[transfer] ok     0.250s  3 rules\n"));

  auto json = Cli("status j-q --json");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  v1::Job parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.output, &parsed).ok())
      << json.output;
  EXPECT_EQ(parsed.waiting_for(), job.waiting_for());
}

TEST_F(CliTest, AnUnknownJobExits1) {
  auto r = Cli("status j-nope");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("no job j-nope"));
}

TEST_F(CliTest, GetWritesTheKernelOfAJobAndSaysHowItWasVerified) {
  AddJob("j-1", v1::JOB_STATE_SUCCEEDED, {"sm_90"});
  AddKernel("sm_90", v1::VERIFICATION_LEVEL_IR);
  const std::string out = dir_ / "out";
  auto r = Cli("get j-1 -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("verified at the IR level only"));
  EXPECT_EQ(ReadFile(out + "/kernel.cuir"), "cuir sm_90");
  EXPECT_EQ(ReadFile(out + "/kernel.cu"), "cu sm_90");
  EXPECT_EQ(ReadFile(out + "/kernel.h"), "h sm_90");
  EXPECT_EQ(ReadFile(out + "/report.json"), "{\"arch\": \"sm_90\"}");
}

TEST_F(CliTest, GetTakesASpecHashWithAnArch) {
  AddKernel("sm_80", v1::VERIFICATION_LEVEL_GPU);
  const std::string out = dir_ / "by-hash";
  auto r = Cli("get 5ec --arch sm_80 -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("verified on GPU"));
  EXPECT_EQ(ReadFile(out + "/kernel.cu"), "cu sm_80");
}

TEST_F(CliTest, GetWritesNothingWhenItCannotFetchTheKernel) {
  AddJob("j-two", v1::JOB_STATE_SUCCEEDED, {"sm_80", "sm_90"});
  AddJob("j-run", v1::JOB_STATE_RUNNING, {"sm_90"});
  const std::string out = dir_ / "out";
  auto missing = Cli("get 5ec --arch sm_90 -o " + out);
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_THAT(missing.output, HasSubstr("no verified kernel"));
  auto running = Cli("get j-run -o " + out);
  EXPECT_EQ(running.exit_code, 1) << running.output;
  EXPECT_THAT(running.output, HasSubstr("running"));
  auto no_arch = Cli("get j-two -o " + out);
  EXPECT_EQ(no_arch.exit_code, 2) << no_arch.output;
  EXPECT_THAT(no_arch.output, HasSubstr("--arch"));
  EXPECT_EQ(Cli("get 5ec -o " + out).exit_code, 2);
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST_F(CliTest, ListFiltersAndPrintsJson) {
  AddJob("j-1", v1::JOB_STATE_RUNNING, {"sm_90"});
  AddJob("j-2", v1::JOB_STATE_FAILED);
  auto table = Cli("list");
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_THAT(table.output, StartsWith("JOB "));
  EXPECT_THAT(table.output, HasSubstr("transfer: not covered by the rules"));

  auto json = Cli("list --state running --limit 3 --json");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_EQ(server_.service().last_list().state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(server_.service().last_list().limit(), 3);
  v1::ListJobsResponse parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.output, &parsed).ok())
      << json.output;
  ASSERT_EQ(parsed.jobs_size(), 1);
  EXPECT_EQ(parsed.jobs(0).job_id(), "j-1");

  EXPECT_EQ(Cli("list --state bogus").exit_code, 2);
}

TEST_F(CliTest, CancelEndsARunningJobAndRefusesAnEndedOne) {
  AddJob("j-run", v1::JOB_STATE_RUNNING);
  AddJob("j-done", v1::JOB_STATE_SUCCEEDED);
  auto r = Cli("cancel j-run");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("job j-run cancelled"));
  auto ended = Cli("cancel j-done");
  EXPECT_EQ(ended.exit_code, 1) << ended.output;
  EXPECT_THAT(ended.output, HasSubstr("already ended"));
}

TEST_F(CliTest, WorkersPrintsATable) {
  v1::WorkerInfo w;
  w.set_worker_id("w-h100-1");
  w.set_arch("sm_90");
  w.set_gpu_name("NVIDIA H100");
  w.set_memory_bytes(int64_t{80} << 30);
  w.set_last_heartbeat_unix_millis(
      std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count() -
      3000);
  w.set_current_task("t-7 candidate 128x64w4");
  server_.service().AddWorker(w);
  auto r = Cli("workers");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, StartsWith("WORKER "));
  for (const char* cell : {"w-h100-1", "sm_90", "NVIDIA H100", "80.0 GiB", "s ago",
                           "t-7 candidate 128x64w4"}) {
    EXPECT_THAT(r.output, HasSubstr(cell));
  }
}

TEST_F(CliTest, AMissingTokenExits4AndSaysHowToSetOne) {
  server_.service().RequireToken("t0k");
  auto r = Cli("workers");
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--token-file"));
  EXPECT_THAT(r.output, HasSubstr("CUBRIDGE_TOKEN"));

  const std::string token = WriteFile(dir_ / "token", "t0k\n");
  EXPECT_EQ(Cli("workers --token-file " + token).exit_code, 0);
  EXPECT_EQ(Cli("workers", "CUBRIDGE_TOKEN=t0k").exit_code, 0);
  EXPECT_EQ(Cli("workers", "CUBRIDGE_TOKEN_FILE=" + token).exit_code, 0);
  // The flag wins over a broken environment.
  EXPECT_EQ(Cli("workers --token-file " + token, "CUBRIDGE_TOKEN_FILE=/nonexistent").exit_code, 0);
}

TEST_F(CliTest, AnUnreachableCoordinatorExits3AndNamesTheAddress) {
  const std::string dead = "127.0.0.1:" + std::to_string(DeadPort());
  auto r = testing::RunCommand(std::string(CUBRIDGE_CLI) + " workers --address " + dead);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr(dead));
  EXPECT_THAT(r.output, HasSubstr("Is the coordinator running?"));
}

TEST_F(CliTest, LocalProblemsAreUsageErrors) {
  auto missing = Cli("submit " + dir_ / "nope.py");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_THAT(missing.output, HasSubstr("nope.py"));
  EXPECT_EQ(Cli("submit " + Spec() + " --dtype fp8").exit_code, 2);
  EXPECT_EQ(Cli("submit " + Spec() + " --param window").exit_code, 2);
  EXPECT_EQ(Cli("submit " + Spec() + " --verification cpu").exit_code, 2);
  EXPECT_EQ(Cli("status").exit_code, 2);
  EXPECT_THAT(server_.service().submits(), ::testing::IsEmpty());
}

}  // namespace
}  // namespace cubridge
