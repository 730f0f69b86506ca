// The LLM proposers in the service, on real processes: a worker given a chat-completions endpoint
// (a scripted server in this process, the one thing a test machine cannot have for real) runs the
// transfers of llm and hybrid jobs; whatever the model proposes is held to the CPU verifier, the
// conversation is kept with the job, and the API key goes nowhere but the Authorization header.
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "server/store/redis.h"
#include "tests/llm/scripted_server.h"
#include "tests/sdk/test_util.h"
#include "tests/service/cluster.h"

namespace cubridge::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using nlohmann::json;
using namespace std::chrono_literals;

// The program the LLM proposer is expected to write for examples/llm/sink_attention.py, a spec
// (softmax with an attention sink) that no rule covers.
std::string SinkProgram() {
  return ReadFile(absl::StrCat(CUBRIDGE_SOURCE_ROOT, "/examples/llm/sink_attention.cuir"));
}

std::string Reply(const std::string& program) {
  return absl::StrCat("The sink is one more logit in every row's softmax.\n\n```cuir\n", program,
                      "```\n");
}

constexpr char kApiKey[] = "sk-test-5ecret-7f3a9c0d";
constexpr char kModel[] = "scripted-model";

class Llm : public Cluster {
 protected:
  // A CPU worker whose LLM endpoint is `server`, allowed two rounds per job.
  Process* StartLlmWorker(const ScriptedLlmServer& server,
                          std::map<std::string, std::string> env = {},
                          std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--llm-endpoint", server.endpoint(), "--llm-model", kModel,
                                     "--llm-max-rounds", "2",   "--llm-retries", "0",
                                     "--llm-timeout",   "60"};
    args.insert(args.end(), extra.begin(), extra.end());
    return StartWorker(env, args);
  }

  static v1::SubmitJobRequest Request(const std::string& example, const std::string& proposer) {
    v1::SubmitJobRequest r = Cluster::Request(example);
    r.set_proposer(proposer);
    return r;
  }
  // examples/llm/sink_attention.py in Cluster::Request's config.
  static v1::SubmitJobRequest SinkRequest(const std::string& proposer) {
    v1::SubmitJobRequest r = Request("causal", proposer);
    r.mutable_spec()->set_file_name("sink_attention.py");
    r.mutable_spec()->set_source(
        ReadFile(absl::StrCat(CUBRIDGE_SOURCE_ROOT, "/examples/llm/sink_attention.py")));
    return r;
  }

  absl::StatusOr<v1::Job> GetWithTranscript(const std::string& job_id) {
    v1::GetJobRequest req;
    req.set_job_id(job_id);
    req.set_with_transcript(true);
    v1::Job job;
    auto ctx = Context(kClientToken);
    grpc::Status s = ClientStub()->GetJob(ctx.get(), req, &job);
    if (!s.ok()) return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
    return job;
  }

  grpc::StatusCode KernelStatus(const std::string& spec_hash, v1::Kernel* kernel) {
    return GetKernel(spec_hash, "sm_80", kernel).error_code();
  }

  RunResult Cli(const std::string& args) {
    return RunCommand(absl::StrCat("CUBRIDGE_ADDRESS=", Address(), " CUBRIDGE_TOKEN=", kClientToken,
                                   " ", CUBRIDGE_CLI, " ", args));
  }

  // Every value Redis holds, whatever its type: where a leaked key would be found.
  std::string RedisContents() {
    auto redis = Redis();
    if (!redis) return "";
    std::string out;
    auto keys = redis->Command({"KEYS", "*"});
    if (!keys.ok()) return "";
    std::function<void(const store::RedisReply&)> append = [&](const store::RedisReply& r) {
      absl::StrAppend(&out, r.str, "\n");
      for (const auto& e : r.elements) append(e);
    };
    for (const auto& k : keys->elements) {
      auto type = redis->Command({"TYPE", k.str});
      if (!type.ok()) continue;
      absl::StatusOr<store::RedisReply> v;
      if (type->str == "string") v = redis->Command({"GET", k.str});
      if (type->str == "hash") v = redis->Command({"HGETALL", k.str});
      if (type->str == "list") v = redis->Command({"LRANGE", k.str, "0", "-1"});
      if (type->str == "set") v = redis->Command({"SMEMBERS", k.str});
      if (type->str == "zset") v = redis->Command({"ZRANGE", k.str, "0", "-1"});
      if (type->str == "stream") v = redis->Command({"XRANGE", k.str, "-", "+"});
      absl::StrAppend(&out, k.str, "\n");
      if (v.ok()) append(*v);
    }
    return out;
  }

  // The worker's /metrics, once its log says where they are served.
  std::string WorkerMetrics(Process* worker) {
    std::smatch m;
    const std::string log = worker->Log();
    if (!std::regex_search(log, m, std::regex("metrics on port (\\d+)"))) return "";
    httplib::Client http("127.0.0.1", std::stoi(m[1]));
    auto res = http.Get("/metrics");
    return res ? res->body : "";
  }
};

TEST_F(Llm, AHybridJobOnASpecTheRulesCoverAsksNoModel) {
  ScriptedLlmServer server({Say(Reply(SinkProgram()))});
  StartCoordinator();
  Process* worker = StartLlmWorker(server);
  auto job = Submit(Request("causal", "hybrid"));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->proposer(), "hybrid");
  const v1::Job done = WaitEnded(job->job_id(), 240s);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << Describe(done) << Logs();
  EXPECT_EQ(server.request_count(), 0) << "the rules cover causal masks: no model was needed";
  // Its own transfer task, leased from the llm class by the worker that has an endpoint.
  EXPECT_THAT(worker->Log(), HasSubstr("task=transfer-" + done.spec_hash() + "-hybrid"));
  auto with = GetWithTranscript(job->job_id());
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_EQ(with->transcript_json(), "");
  v1::Kernel kernel;
  ASSERT_EQ(KernelStatus(done.spec_hash(), &kernel), grpc::StatusCode::OK);
  EXPECT_THAT(kernel.report_json(), HasSubstr("\"proposer\": \"rules\""));
}

TEST_F(Llm, AnLlmJobWhoseProposalVerifiesSucceedsAndKeepsItsTranscript) {
  ScriptedLlmServer server({Say(Reply(SinkProgram()))});
  StartCoordinator();
  Process* worker = StartLlmWorker(
      server, {}, {"--metrics-listen", absl::StrCat("127.0.0.1:", FreeLoopbackPort())});
  auto job = Submit(SinkRequest("llm"));
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::Job done = WaitEnded(job->job_id(), 240s);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << Describe(done) << Logs();
  EXPECT_EQ(done.proposer(), "llm");
  EXPECT_EQ(done.verification(), v1::VERIFICATION_LEVEL_IR);
  EXPECT_EQ(server.request_count(), 1);
  EXPECT_EQ(done.transcript_json(), "") << "sent only when asked for";
  bool told = false;
  for (const auto& e : done.events()) {
    told = told || (e.stage() == "transfer" && e.detail().find("accepted at round 1") != std::string::npos);
  }
  EXPECT_TRUE(told) << Describe(done);

  // The model's program, verified, is what was lowered and cached.
  v1::Kernel kernel;
  ASSERT_EQ(KernelStatus(done.spec_hash(), &kernel), grpc::StatusCode::OK);
  EXPECT_EQ(kernel.verification(), v1::VERIFICATION_LEVEL_IR);
  EXPECT_THAT(kernel.cuir(), HasSubstr("epilogue sink sink"));
  EXPECT_THAT(kernel.report_json(), HasSubstr("\"proposer\": \"llm\""));
  EXPECT_THAT(kernel.report_json(), HasSubstr("\"llm\": {"));  // the usage, not null

  // The conversation, through the API and the CLI.
  auto with = GetWithTranscript(job->job_id());
  ASSERT_TRUE(with.ok()) << with.status();
  const json transcript = json::parse(with->transcript_json(), nullptr, false);
  ASSERT_TRUE(transcript.is_array()) << with->transcript_json();
  bool accepted = false;
  for (const json& turn : transcript) {
    accepted = accepted || (turn.value("role", "") == "assistant" &&
                            turn.value("verdict", "") == "accepted" &&
                            turn.value("content", "").find("epilogue sink sink") != std::string::npos);
  }
  EXPECT_TRUE(accepted) << transcript.dump(2);
  const RunResult shown = Cli("transcript " + job->job_id());
  ASSERT_EQ(shown.exit_code, 0) << shown.output;
  EXPECT_THAT(shown.output, HasSubstr("round 1 · assistant"));
  EXPECT_THAT(shown.output, HasSubstr("accepted"));
  EXPECT_THAT(shown.output, HasSubstr("epilogue sink sink"));
  const RunResult raw = Cli("transcript --json " + job->job_id());
  ASSERT_EQ(raw.exit_code, 0) << raw.output;
  EXPECT_EQ(json::parse(raw.output, nullptr, false), transcript);
  const RunResult status = Cli("status " + job->job_id());
  EXPECT_THAT(status.output, HasSubstr("proposer      llm"));

  // The worker said it has an endpoint, and counted what the conversation used.
  auto workers = RunCommand(absl::StrCat("CUBRIDGE_ADDRESS=", Address(), " CUBRIDGE_TOKEN=",
                                         kClientToken, " ", CUBRIDGE_CLI, " workers --json"));
  EXPECT_THAT(workers.output, HasSubstr("\"llm\""));
  const std::string metrics = WorkerMetrics(worker);
  EXPECT_THAT(metrics, HasSubstr("cubridge_llm_tokens_total{kind=\"prompt\"} 100"));
  EXPECT_THAT(metrics, HasSubstr("cubridge_llm_tokens_total{kind=\"completion\"} 50"));
  EXPECT_THAT(metrics, HasSubstr("cubridge_llm_requests_total 1"));
}

TEST_F(Llm, AModelThatNeverProposesAVerifiedProgramFailsTheJobAndCachesNothing) {
  ScriptedLlmServer server({Say("I am not sure how to write this."),
                            Say("```cuir\ncuir 1\nkernel broken {\n```\n")});
  StartCoordinator();
  Process* worker = StartLlmWorker(
      server, {}, {"--metrics-listen", absl::StrCat("127.0.0.1:", FreeLoopbackPort())});
  auto job = Submit(Request("causal", "llm"));
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::Job done = WaitEnded(job->job_id(), 240s);
  ASSERT_EQ(done.state(), v1::JOB_STATE_FAILED) << Describe(done) << Logs();
  EXPECT_THAT(done.error(), HasSubstr("no verified program after 2 rounds"));
  EXPECT_THAT(done.error(), Not(HasSubstr("transfer: transfer:")));
  // The model had its rounds: the task is not retried (a retry would have asked twice more).
  EXPECT_EQ(server.request_count(), 2);
  v1::Kernel kernel;
  EXPECT_EQ(KernelStatus(done.spec_hash(), &kernel), grpc::StatusCode::NOT_FOUND);
  bool usage = false;
  for (const auto& e : done.events()) {
    usage = usage || (!e.ok() && e.detail().find("200 prompt + 100 completion tokens in 2 requests") !=
                                     std::string::npos);
  }
  EXPECT_TRUE(usage) << Describe(done);

  // What the model said, and what it was told, are kept with the failed job.
  auto with = GetWithTranscript(job->job_id());
  ASSERT_TRUE(with.ok()) << with.status();
  const json transcript = json::parse(with->transcript_json(), nullptr, false);
  ASSERT_TRUE(transcript.is_array()) << with->transcript_json();
  int rejected = 0;
  for (const json& turn : transcript) {
    if (turn.value("role", "") == "assistant") {
      ++rejected;
      EXPECT_THAT(turn.value("verdict", ""), HasSubstr("rejected")) << turn.dump();
    }
  }
  EXPECT_EQ(rejected, 2) << transcript.dump(2);
  EXPECT_THAT(with->transcript_json(), HasSubstr("I am not sure how to write this."));
  const RunResult shown = Cli("transcript " + job->job_id());
  EXPECT_EQ(shown.exit_code, 0) << shown.output;
  EXPECT_THAT(shown.output, HasSubstr("round 2 · assistant"));
  const RunResult watched = Cli("watch " + job->job_id());
  EXPECT_EQ(watched.exit_code, 1) << watched.output;
  EXPECT_THAT(watched.output, HasSubstr("cubridge-cli transcript " + job->job_id()));

  const std::string metrics = WorkerMetrics(worker);
  EXPECT_THAT(metrics, HasSubstr("cubridge_llm_tokens_total{kind=\"prompt\"} 200"));
  EXPECT_THAT(metrics, HasSubstr("cubridge_llm_tokens_total{kind=\"completion\"} 100"));
  EXPECT_THAT(metrics, HasSubstr("cubridge_llm_requests_total 2"));
}

// Backward programs come from the rules alone: a job that requires the backward of a spec only
// the model covers fails in its backward stage, saying why (with `auto` it serves the forward).
TEST_F(Llm, RequiringTheBackwardOfASpecOnlyTheModelCoversFailsSayingWhy) {
  ScriptedLlmServer server({Say(Reply(SinkProgram()))});
  StartCoordinator();
  StartLlmWorker(server);
  v1::SubmitJobRequest request = SinkRequest("llm");
  request.set_backward(v1::BACKWARD_MODE_REQUIRE);
  auto job = Submit(request);
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::Job done = WaitEnded(job->job_id(), 240s);
  ASSERT_EQ(done.state(), v1::JOB_STATE_FAILED) << Describe(done) << Logs();
  EXPECT_THAT(done.error(), HasSubstr("backward"));
  EXPECT_THAT(done.error(), HasSubstr("not covered by the rules: reference(q, k, v)"));
}

TEST_F(Llm, AnLlmJobWithoutAWorkerThatHasAnEndpointWaitsAndSaysWhy) {
  StartCoordinator();
  StartWorker();  // no --llm-endpoint: it lifts and compiles, it cannot ask a model
  auto job = Submit(Request("causal", "llm"));
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string why =
      "no worker with an LLM endpoint has registered (start cubridge-worker with --llm-endpoint "
      "and --llm-model)";
  const v1::Job waiting =
      WaitUntil(job->job_id(), [&](const v1::Job& j) { return j.waiting_for() == why; }, 60s);
  EXPECT_EQ(waiting.waiting_for(), why) << Describe(waiting) << Logs();
  // Still so once the worker had time to run everything else it could.
  std::this_thread::sleep_for(5s);
  auto later = Get(job->job_id());
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_FALSE(Ended(*later)) << Describe(*later);
  EXPECT_EQ(later->waiting_for(), why) << Describe(*later);
}

TEST_F(Llm, AnUnknownProposerIsInvalidArgument) {
  StartCoordinator();
  auto job = Submit(Request("causal", "gpt"));
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << job.status();
  EXPECT_THAT(job.status().message(), HasSubstr("unknown proposer \"gpt\""));
  EXPECT_THAT(job.status().message(), HasSubstr("hybrid"));
  // The CLI refuses it before sending anything.
  const RunResult cli = Cli(absl::StrCat("submit ", CUBRIDGE_SOURCE_ROOT,
                                         "/examples/specs/causal.py --proposer gpt"));
  EXPECT_EQ(cli.exit_code, 2) << cli.output;
  EXPECT_THAT(cli.output, HasSubstr("--proposer"));
}

TEST_F(Llm, AWorkerGivenHalfTheLlmSettingsStopsAndSaysWhatIsMissing) {
  StartCoordinator();
  Process* worker = StartWorker({}, {"--llm-endpoint", "http://127.0.0.1:9/v1"});
  EXPECT_EQ(worker->Wait(30s), 2) << worker->Log();
  EXPECT_THAT(worker->Log(), HasSubstr("--llm-model"));
}

// Also a hybrid job on a spec the rules do not cover: the model is asked, and its second proposal
// (after being told why the first was rejected) is the one that verifies.
TEST_F(Llm, TheApiKeyGoesOnlyIntoTheAuthorizationHeader) {
  ScriptedLlmServer server({Say("not a program"), Say(Reply(SinkProgram()))});
  StartCoordinator();
  const std::string work = dir_ + "/work";
  std::filesystem::create_directories(work);
  // Task files kept, so that none of them can hide the key from this test by being deleted.
  StartLlmWorker(server, {{"CUBRIDGE_LLM_API_KEY", kApiKey}, {"CUBRIDGE_KEEP_TASK_FILES", "1"}},
                 {"--work-dir", work});
  auto job = Submit(SinkRequest("hybrid"));
  ASSERT_TRUE(job.ok()) << job.status();
  const v1::Job done = WaitEnded(job->job_id(), 240s);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << Describe(done) << Logs();

  bool handed_over = false;
  for (const auto& e : done.events()) {
    handed_over = handed_over || e.detail().find("asking the LLM") != std::string::npos;
  }
  EXPECT_TRUE(handed_over) << "the rules did not hand the spec to the model: " << Describe(done);
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);
  for (const auto& r : requests) EXPECT_EQ(r.authorization, absl::StrCat("Bearer ", kApiKey));

  auto with = GetWithTranscript(job->job_id());
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_FALSE(with->transcript_json().empty());
  EXPECT_THAT(with->DebugString(), Not(HasSubstr(kApiKey)));
  // Whole logs: Logs() keeps only their tails.
  for (int i = 0; i < starts_; ++i) {
    const std::string log = ReadFile(absl::StrCat(dir_, "/coordinator-", i, ".log"));
    EXPECT_FALSE(log.empty());
    EXPECT_THAT(log, Not(HasSubstr(kApiKey)));
  }
  for (const auto& w : workers_) {
    EXPECT_THAT(w->Log(), HasSubstr("LLM proposer: model scripted-model"));
    EXPECT_THAT(w->Log(), Not(HasSubstr(kApiKey)));
  }
  EXPECT_THAT(RedisContents(), Not(HasSubstr(kApiKey)));
  int files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(work)) {
    if (!entry.is_regular_file()) continue;
    ++files;
    EXPECT_THAT(ReadFile(entry.path().string()), Not(HasSubstr(kApiKey))) << entry.path();
  }
  EXPECT_GT(files, 0) << "the worker kept no task files in " << work;
  const RunResult shown = Cli("transcript --json " + job->job_id());
  EXPECT_THAT(shown.output, Not(HasSubstr(kApiKey)));
}

}  // namespace
}  // namespace cubridge::testing
