// The SDK against the in-test coordinator: metadata, retries, resumable watching, deadlines,
// connection failures and the option and file helpers.
#include <cstdlib>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cubridge/client.h>

#include "fake_service.h"
#include "test_util.h"

namespace cubridge {
namespace {

using ::cubridge::testing::DeadPort;
using ::cubridge::testing::Event;
using ::cubridge::testing::FakeServer;
using ::cubridge::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::Each;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

grpc::Status Unavailable() { return grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting"); }

class ClientTest : public ::testing::Test {
 protected:
  std::unique_ptr<Client> Connect(const std::string& token = "") {
    ClientOptions options;
    options.address = server_.address();
    options.token = token;
    options.initial_backoff = std::chrono::milliseconds(10);
    auto client = Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  v1::Job AddJob(const std::string& id, v1::JobState state, std::vector<std::string> stages) {
    v1::Job job;
    job.set_job_id(id);
    job.set_state(state);
    job.set_spec_hash("abc123");
    for (const auto& s : stages) *job.add_events() = Event(s);
    server_.service().AddJob(job);
    return job;
  }

  FakeServer server_;
};

TEST_F(ClientTest, SendsTheTokenAsBearerMetadataOnEveryCall) {
  server_.service().RequireToken("s3cret");
  AddJob("j-1", v1::JOB_STATE_SUCCEEDED, {"spec"});
  auto client = Connect("s3cret");
  ASSERT_TRUE(client->Submit(v1::SubmitJobRequest()).ok());
  ASSERT_TRUE(client->Get("j-1").ok());
  ASSERT_TRUE(client->Watch("j-1", nullptr).ok());  // WatchJob, then GetJob
  ASSERT_TRUE(client->List().ok());
  ASSERT_TRUE(client->Workers().ok());
  const auto sent = server_.service().authorizations();
  EXPECT_EQ(sent.size(), 6u);
  EXPECT_THAT(sent, Each(std::string("Bearer s3cret")));
}

TEST_F(ClientTest, TranscriptAsksForTheConversationAndGetLeavesItOut) {
  v1::Job job = AddJob("j-llm", v1::JOB_STATE_FAILED, {"transfer"});
  const std::string conversation = R"([{"round":1,"role":"assistant","content":"no idea"}])";
  job.set_proposer("llm");
  job.set_transcript_json(conversation);
  server_.service().AddJob(job);
  auto client = Connect();
  auto transcript = client->Transcript("j-llm");
  ASSERT_TRUE(transcript.ok()) << transcript.status();
  EXPECT_EQ(*transcript, conversation);
  auto plain = client->Get("j-llm");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->transcript_json(), "");
  EXPECT_EQ(plain->proposer(), "llm");
  EXPECT_EQ(client->Transcript("j-none").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ClientTest, AWrongTokenIsUnauthenticatedAndNotRetried) {
  server_.service().RequireToken("s3cret");
  auto client = Connect("guess");
  auto job = client->Get("j-1");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(job.status().message(), "missing or unknown client token");
  EXPECT_EQ(server_.service().calls("GetJob"), 1);
}

TEST_F(ClientTest, SubmitRetriesUnavailableUnderOneIdempotencyKey) {
  server_.service().FailNext("SubmitJob", {Unavailable(), Unavailable()});
  auto client = Connect();
  auto job = client->Submit(v1::SubmitJobRequest());
  ASSERT_TRUE(job.ok()) << job.status();
  // Every attempt names the same job, so a retry can never create a second one.
  const auto submits = server_.service().submits();
  ASSERT_EQ(submits.size(), 3u);
  EXPECT_FALSE(submits[0].idempotency_key().empty());
  EXPECT_EQ(submits[1].idempotency_key(), submits[0].idempotency_key());
  EXPECT_EQ(submits[2].idempotency_key(), submits[0].idempotency_key());
}

TEST_F(ClientTest, EachSubmitWithoutAKeyGetsItsOwn) {
  auto client = Connect();
  auto first = client->Submit(v1::SubmitJobRequest());
  auto second = client->Submit(v1::SubmitJobRequest());
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_NE(first->job_id(), second->job_id());
  const auto submits = server_.service().submits();
  ASSERT_EQ(submits.size(), 2u);
  EXPECT_NE(submits[0].idempotency_key(), submits[1].idempotency_key());
}

TEST_F(ClientTest, SubmitKeepsTheCallersKey) {
  auto client = Connect();
  v1::SubmitJobRequest request;
  request.set_idempotency_key("nightly-42");
  auto first = client->Submit(request);
  auto again = client->Submit(request);
  ASSERT_TRUE(first.ok() && again.ok());
  EXPECT_EQ(first->job_id(), again->job_id());
  EXPECT_EQ(server_.service().submits()[0].idempotency_key(), "nightly-42");
}

TEST_F(ClientTest, OtherErrorsComeBackAsTheyAreWithoutARetry) {
  const std::string message = "doc.py:4:12: unknown name `windw`";
  server_.service().FailNext("SubmitJob",
                             {grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message)});
  auto client = Connect();
  auto job = client->Submit(v1::SubmitJobRequest());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message(), message);
  EXPECT_EQ(server_.service().calls("SubmitJob"), 1);

  auto missing = client->Get("j-nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(server_.service().calls("GetJob"), 1);
}

TEST_F(ClientTest, UnavailableIsRetriedAtMostMaxAttemptsTimes) {
  server_.service().FailNext("GetJob", std::vector<grpc::Status>(10, Unavailable()));
  ClientOptions options;
  options.address = server_.address();
  options.max_attempts = 3;
  options.initial_backoff = std::chrono::milliseconds(1);
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  auto job = (*client)->Get("j-1");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(job.status().message(), "restarting");
  EXPECT_EQ(server_.service().calls("GetJob"), 3);
}

TEST_F(ClientTest, WatchResumesABrokenStreamWithoutRepeatingEvents) {
  AddJob("j-1", v1::JOB_STATE_SUCCEEDED, {"spec", "lift", "transfer", "verify"});
  server_.service().BreakWatch(/*streams=*/2, /*events=*/2);
  auto client = Connect();
  std::vector<std::string> stages;
  auto job = client->Watch("j-1", [&](const v1::StageEvent& e) { stages.push_back(e.stage()); });
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_THAT(stages, ElementsAre("spec", "lift", "transfer", "verify"));
  EXPECT_EQ(server_.service().calls("WatchJob"), 3);
}

TEST_F(ClientTest, WatchGivesUpOnAStreamThatKeepsBreakingWithoutProgress) {
  AddJob("j-1", v1::JOB_STATE_RUNNING, {"spec", "lift"});
  server_.service().BreakWatch(/*streams=*/100, /*events=*/1);
  ClientOptions options;
  options.address = server_.address();
  options.initial_backoff = std::chrono::milliseconds(10);
  options.max_attempts = 5;
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  std::vector<std::string> stages;
  auto job = (*client)->Watch("j-1", [&](const v1::StageEvent& e) { stages.push_back(e.stage()); });
  EXPECT_EQ(job.status().code(), absl::StatusCode::kUnavailable);
  // Each stream resumed after the last event: "spec", then "lift"; then streams that brought
  // nothing new, until max_attempts (5) in a row had failed, the one that brought "lift" first.
  EXPECT_THAT(stages, ElementsAre("spec", "lift"));
  EXPECT_EQ(server_.service().calls("WatchJob"), 2 + 4);
}

TEST_F(ClientTest, WatchKeepsTryingForTheDeadlineWhenAttemptsAreNotCapped) {
  AddJob("j-1", v1::JOB_STATE_RUNNING, {"spec"});
  server_.service().BreakWatch(/*streams=*/1000, /*events=*/0);
  ClientOptions options;
  options.address = server_.address();
  options.initial_backoff = std::chrono::milliseconds(1);
  options.deadline = std::chrono::milliseconds(600);
  int retries = 0;
  options.on_retry = [&](const absl::Status&, int) { ++retries; };
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  const auto start = Clock::now();
  auto job = (*client)->Watch("j-1", nullptr);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(400));
  EXPECT_GT(retries, 5) << "more than the old fixed five attempts fit the deadline";
}

TEST_F(ClientTest, WatchDoesNotRetryOtherErrors) {
  auto client = Connect();
  auto job = client->Watch("j-nope", nullptr);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(server_.service().calls("WatchJob"), 1);
}

TEST_F(ClientTest, WaitReturnsTheEndedJob) {
  AddJob("j-1", v1::JOB_STATE_FAILED, {"spec", "lift"});
  auto client = Connect();
  auto job = client->Wait("j-1", std::chrono::seconds(10));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_FAILED);
}

TEST_F(ClientTest, WaitIsDeadlineExceededWhenTheJobDoesNotEndInTime) {
  AddJob("j-slow", v1::JOB_STATE_RUNNING, {"spec"});
  auto client = Connect();
  const auto start = Clock::now();
  auto job = client->Wait("j-slow", std::chrono::milliseconds(300));
  const auto took = Clock::now() - start;
  EXPECT_EQ(job.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(job.status().message(), HasSubstr("j-slow"));
  EXPECT_GE(took, std::chrono::milliseconds(290));
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST(Connect, ADeadPortIsUnavailableAfterTheRetries) {
  ClientOptions options;
  options.address = "127.0.0.1:" + std::to_string(DeadPort());
  options.max_attempts = 3;
  options.initial_backoff = std::chrono::milliseconds(100);
  auto client = Client::Connect(options);  // no server needed to connect
  ASSERT_TRUE(client.ok()) << client.status();
  const auto start = Clock::now();
  auto job = (*client)->Get("j-1");
  const auto took = Clock::now() - start;
  EXPECT_EQ(job.status().code(), absl::StatusCode::kUnavailable);
  // Backoffs of ~100 and ~200 ms (+-20%) between the three attempts.
  EXPECT_GE(took, std::chrono::milliseconds(240));
  EXPECT_LT(took, std::chrono::seconds(10));
}

TEST(Connect, RejectsOptionsNoCallCouldUse) {
  ClientOptions negative_attempts;
  negative_attempts.max_attempts = -1;
  EXPECT_EQ(Client::Connect(negative_attempts).status().code(), absl::StatusCode::kInvalidArgument);

  ClientOptions no_address;
  no_address.address = "";
  EXPECT_EQ(Client::Connect(no_address).status().code(), absl::StatusCode::kInvalidArgument);

  ClientOptions newline_token;
  newline_token.token = "abc\n";
  EXPECT_EQ(Client::Connect(newline_token).status().code(), absl::StatusCode::kInvalidArgument);

  ClientOptions no_ca;
  no_ca.tls = true;
  no_ca.root_certs_file = "/nonexistent/ca.pem";
  auto client = Client::Connect(no_ca);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(client.status().message(), HasSubstr("/nonexistent/ca.pem"));
}

TEST_F(ClientTest, ListCancelGetKernelAndWorkersPassTheirArguments) {
  AddJob("j-1", v1::JOB_STATE_RUNNING, {});
  AddJob("j-2", v1::JOB_STATE_SUCCEEDED, {});
  v1::Kernel kernel;
  kernel.set_spec_hash("abc123");
  kernel.set_arch("sm_90");
  kernel.set_cuda_source("__global__ void k() {}");
  server_.service().AddKernel(kernel);
  v1::WorkerInfo worker;
  worker.set_worker_id("w-1");
  server_.service().AddWorker(worker);
  auto client = Connect();

  auto running = client->List(7, v1::JOB_STATE_RUNNING);
  ASSERT_TRUE(running.ok());
  ASSERT_EQ(running->size(), 1u);
  EXPECT_EQ((*running)[0].job_id(), "j-1");
  EXPECT_EQ(server_.service().last_list().limit(), 7);

  auto cancelled = client->Cancel("j-1");
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(client->Cancel("j-2").status().code(), absl::StatusCode::kFailedPrecondition);

  auto got = client->GetKernel("abc123", "sm_90");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->cuda_source(), "__global__ void k() {}");
  EXPECT_EQ(client->GetKernel("abc123", "sm_80").status().code(), absl::StatusCode::kNotFound);

  auto workers = client->Workers();
  ASSERT_TRUE(workers.ok());
  ASSERT_EQ(workers->size(), 1u);
  EXPECT_EQ((*workers)[0].worker_id(), "w-1");
}

TEST(RequestFromSpecFile, CarriesThePathAndTheSource) {
  TempDir dir;
  const std::string path = testing::WriteFile(dir / "causal.py", "def mask_mod(b, h, q, kv):\n");
  auto request = RequestFromSpecFile(path);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->spec().file_name(), path);
  EXPECT_EQ(request->spec().source(), "def mask_mod(b, h, q, kv):\n");
}

TEST(RequestFromSpecFile, AMissingFileIsNotFoundAndNamed) {
  auto request = RequestFromSpecFile("/nonexistent/doc.py");
  EXPECT_EQ(request.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(request.status().message(), HasSubstr("/nonexistent/doc.py"));
  EXPECT_THAT(request.status().message(), HasSubstr("spec file"));
}

// Sets environment variables for one test and restores their absence after it.
class ScopedEnv {
 public:
  void Set(const char* name, const std::string& value) {
    setenv(name, value.c_str(), 1);
    names_.push_back(name);
  }
  ~ScopedEnv() {
    for (const char* n : names_) unsetenv(n);
  }

 private:
  std::vector<const char*> names_;
};

TEST(FromEnvironment, ReadsAddressTokenFileAndCa) {
  TempDir dir;
  ScopedEnv env;
  env.Set("CUBRIDGE_ADDRESS", "coord.internal:443");
  env.Set("CUBRIDGE_TOKEN_FILE", testing::WriteFile(dir / "token", "  tok-123\n"));
  env.Set("CUBRIDGE_TLS_CA", "/etc/ssl/ca.pem");
  auto options = ClientOptions::FromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->address, "coord.internal:443");
  EXPECT_EQ(options->token, "tok-123");
  EXPECT_TRUE(options->tls);
  EXPECT_EQ(options->root_certs_file, "/etc/ssl/ca.pem");
}

TEST(FromEnvironment, TheTokenVariableWinsOverTheFileAndDefaultsStay) {
  ScopedEnv env;
  env.Set("CUBRIDGE_TOKEN", "direct");
  env.Set("CUBRIDGE_TOKEN_FILE", "/nonexistent/token");
  auto options = ClientOptions::FromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->token, "direct");
  EXPECT_EQ(options->address, "localhost:50051");
  EXPECT_FALSE(options->tls);
}

TEST(FromEnvironment, AnUnreadableTokenFileIsAnError) {
  TempDir dir;
  ScopedEnv env;
  env.Set("CUBRIDGE_TOKEN_FILE", "/nonexistent/token");
  auto missing = ClientOptions::FromEnvironment();
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("CUBRIDGE_TOKEN_FILE"));
  env.Set("CUBRIDGE_TOKEN_FILE", testing::WriteFile(dir / "empty", "\n"));
  EXPECT_EQ(ClientOptions::FromEnvironment().status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cubridge
