// The chat-completions client against a real HTTP server on loopback that replays scripted
// replies: what is sent, how replies and errors are read, retries, timeouts, budgets and the key.
#include "cuir/llm/chat_client.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/llm/scripted_server.h"

namespace cubridge::llm {
namespace {

using cubridge::testing::HttpError;
using cubridge::testing::Say;
using cubridge::testing::ScriptedLlmServer;
using cubridge::testing::ScriptedReply;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using std::chrono::milliseconds;

const std::string kKey = "sk-test-0123456789-secret";
const std::string kModel = "scripted-model";

ChatOptions Options(const ScriptedLlmServer& server, const std::string& key = kKey) {
  ChatOptions o;
  o.endpoint = server.endpoint();
  o.model = kModel;
  o.api_key = key;
  o.timeout = milliseconds(5000);
  o.connect_timeout = milliseconds(2000);
  o.initial_backoff = milliseconds(2);
  o.max_backoff = milliseconds(20);
  o.max_retries = 3;
  return o;
}

std::vector<ChatMessage> Ask(const std::string& question = "What is 2 + 2?") {
  return {{"system", "You are terse."}, {"user", question}};
}

ScriptedReply Raw(int status, const std::string& body) {
  ScriptedReply r;
  r.status = status;
  r.body = body;
  return r;
}

// Every error must say where it came from, so that an operator can tell which server failed.
void ExpectNamesEndpointAndModel(const absl::Status& status, const ScriptedLlmServer& server) {
  EXPECT_THAT(status.message(), HasSubstr(server.endpoint() + "/chat/completions")) << status;
  EXPECT_THAT(status.message(), HasSubstr(kModel)) << status;
  EXPECT_THAT(status.message(), Not(HasSubstr(kKey))) << status;
}

// Records what the observer saw, in order.
struct Observed {
  std::vector<std::string> outcomes;
  std::vector<Usage> usages;
  UsageObserver Observer() {
    return [this](const std::string& outcome, const Usage& usage) {
      outcomes.push_back(outcome);
      usages.push_back(usage);
    };
  }
};

// A port nothing listens on: one the kernel just gave a server that is gone again.
int UnusedPort() {
  ScriptedLlmServer gone({});
  return gone.port();
}

// Sets (or unsets) an environment variable for one test and restores it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "chat_client_test.XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string Write(const std::string& name, const std::string& content) const {
    const std::filesystem::path p = path_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(ChatClientTest, ParsesAReplyWithItsUsage) {
  ScriptedReply reply = Say("4");
  reply.prompt_tokens = 123;
  reply.completion_tokens = 7;
  ScriptedLlmServer server({reply});
  Observed seen;
  ChatClient client(Options(server), Budget{}, seen.Observer());
  auto r = client.Complete(Ask());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->content, "4");
  EXPECT_EQ(r->finish_reason, "stop");
  EXPECT_EQ(r->usage.prompt_tokens, 123);
  EXPECT_EQ(r->usage.completion_tokens, 7);
  EXPECT_EQ(r->attempts, 1);
  EXPECT_GT(r->seconds, 0);
  EXPECT_EQ(client.used().prompt_tokens, 123);
  EXPECT_EQ(client.used().completion_tokens, 7);
  EXPECT_THAT(seen.outcomes, ElementsAre("ok"));
  EXPECT_EQ(seen.usages[0].prompt_tokens, 123);
  EXPECT_EQ(seen.usages[0].completion_tokens, 7);
}

TEST(ChatClientTest, UsageAddsUpOverReplies) {
  ScriptedLlmServer server({Say("a"), Say("b")});
  ChatClient client(Options(server));
  ASSERT_TRUE(client.Complete(Ask()).ok());
  ASSERT_TRUE(client.Complete(Ask()).ok());
  EXPECT_EQ(client.used().prompt_tokens, 200);
  EXPECT_EQ(client.used().completion_tokens, 100);
  EXPECT_EQ(server.request_count(), 2);
}

TEST(ChatClientTest, AReplyWithoutUsageCountsNothing) {
  ScriptedLlmServer server({Raw(200, R"({"choices":[{"message":{"role":"assistant","content":"hi"}}]})")});
  ChatClient client(Options(server));
  auto r = client.Complete(Ask());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->content, "hi");
  EXPECT_EQ(r->finish_reason, "");
  EXPECT_EQ(r->usage.prompt_tokens, 0);
  EXPECT_EQ(client.used().completion_tokens, 0);
}

TEST(ChatClientTest, SendsTheModelMessagesAndSampling) {
  ScriptedLlmServer server({Say("ok")});
  ChatOptions o = Options(server);
  o.temperature = 0.25;
  o.max_tokens = 77;
  ChatClient client(o);
  ASSERT_TRUE(client.Complete(Ask("quote \" and ünïcode\nnewline")).ok());
  ASSERT_EQ(server.request_count(), 1);
  const nlohmann::json body = server.requests()[0].body;
  EXPECT_EQ(body["model"], kModel);
  EXPECT_DOUBLE_EQ(body["temperature"].get<double>(), 0.25);
  EXPECT_EQ(body["max_tokens"], 77);
  ASSERT_TRUE(body["messages"].is_array());
  ASSERT_EQ(body["messages"].size(), 2u);
  EXPECT_EQ(body["messages"][0]["role"], "system");
  EXPECT_EQ(body["messages"][0]["content"], "You are terse.");
  EXPECT_EQ(body["messages"][1]["role"], "user");
  EXPECT_EQ(body["messages"][1]["content"], "quote \" and ünïcode\nnewline");
}

TEST(ChatClientTest, ATrailingSlashOnTheEndpointIsDropped) {
  ScriptedLlmServer server({Say("ok")});
  ChatOptions o = Options(server);
  o.endpoint += "/";
  ChatClient client(o);
  auto r = client.Complete(Ask());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(server.request_count(), 1);
}

TEST(ChatClientTest, SendsTheKeyAsABearerToken) {
  ScriptedLlmServer server({Say("ok")});
  ChatClient client(Options(server));
  ASSERT_TRUE(client.Complete(Ask()).ok());
  ASSERT_EQ(server.request_count(), 1);
  EXPECT_EQ(server.requests()[0].authorization, "Bearer " + kKey);
}

TEST(ChatClientTest, SendsNoAuthorizationWithoutAKey) {
  ScriptedLlmServer server({Say("ok")});
  ChatClient client(Options(server, ""));
  ASSERT_TRUE(client.Complete(Ask()).ok());
  ASSERT_EQ(server.request_count(), 1);
  EXPECT_EQ(server.requests()[0].authorization, "");
}

TEST(ChatClientTest, A429IsRetriedAfterRetryAfter) {
  ScriptedReply limited = HttpError(429, "slow down");
  limited.headers["Retry-After"] = "0";
  ScriptedLlmServer server({limited, Say("done")});
  ChatOptions o = Options(server);
  // Retry-After: 0 must win over this, or the test takes ten seconds.
  o.initial_backoff = milliseconds(10000);
  o.max_backoff = milliseconds(30000);
  Observed seen;
  ChatClient client(o, Budget{}, seen.Observer());
  const auto start = std::chrono::steady_clock::now();
  auto r = client.Complete(Ask());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(SecondsSince(start), 2.0);
  EXPECT_EQ(r->content, "done");
  EXPECT_EQ(r->attempts, 2);
  EXPECT_EQ(server.request_count(), 2);
  EXPECT_THAT(seen.outcomes, ElementsAre("retried", "ok"));
  EXPECT_EQ(seen.usages[1].prompt_tokens, 100);
  EXPECT_EQ(seen.usages[1].completion_tokens, 50);
}

TEST(ChatClientTest, RetryAfterIsCappedAtMaxBackoff) {
  ScriptedReply limited = HttpError(429, "slow down");
  limited.headers["Retry-After"] = "30";
  ScriptedLlmServer server({limited, Say("done")});
  ChatOptions o = Options(server);
  o.max_backoff = milliseconds(20);
  ChatClient client(o);
  const auto start = std::chrono::steady_clock::now();
  auto r = client.Complete(Ask());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(SecondsSince(start), 2.0);
  EXPECT_EQ(r->attempts, 2);
}

TEST(ChatClientTest, Two503sThenSuccessBacksOffExponentially) {
  ScriptedLlmServer server({HttpError(503, "overloaded"), HttpError(503, "overloaded"), Say("done")});
  ChatOptions o = Options(server);
  o.initial_backoff = milliseconds(40);
  o.max_backoff = milliseconds(1000);
  Observed seen;
  ChatClient client(o, Budget{}, seen.Observer());
  const auto start = std::chrono::steady_clock::now();
  auto r = client.Complete(Ask());
  ASSERT_TRUE(r.ok()) << r.status();
  // 40 ms, then 80 ms.
  EXPECT_GE(SecondsSince(start), 0.120);
  EXPECT_EQ(r->attempts, 3);
  EXPECT_EQ(server.request_count(), 3);
  EXPECT_THAT(seen.outcomes, ElementsAre("retried", "retried", "ok"));
}

TEST(ChatClientTest, BackoffIsCappedAtMaxBackoff) {
  ScriptedLlmServer server({HttpError(503), HttpError(503), HttpError(503), Say("done")});
  ChatOptions o = Options(server);
  o.initial_backoff = milliseconds(5000);
  o.max_backoff = milliseconds(10);
  ChatClient client(o);
  const auto start = std::chrono::steady_clock::now();
  auto r = client.Complete(Ask());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(SecondsSince(start), 2.0);
  EXPECT_EQ(r->attempts, 4);
}

TEST(ChatClientTest, A500EveryTimeIsUnavailableAfterTheLastRetry) {
  ScriptedLlmServer server({HttpError(500, "boom"), HttpError(500, "boom"), HttpError(500, "boom"),
                            HttpError(500, "boom"), Say("too late")});
  ChatOptions o = Options(server);
  o.max_retries = 3;
  Observed seen;
  ChatClient client(o, Budget{}, seen.Observer());
  auto r = client.Complete(Ask());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_EQ(server.request_count(), 4);
  EXPECT_THAT(r.status().message(), HasSubstr("HTTP 500"));
  EXPECT_THAT(r.status().message(), HasSubstr("boom"));
  EXPECT_THAT(r.status().message(), HasSubstr("4 attempts"));
  ExpectNamesEndpointAndModel(r.status(), server);
  EXPECT_THAT(seen.outcomes, ElementsAre("retried", "retried", "retried", "failed"));
}

TEST(ChatClientTest, A429OnEveryAttemptIsResourceExhausted) {
  ScriptedLlmServer server({HttpError(429, "slow down"), HttpError(429, "slow down")});
  ChatOptions o = Options(server);
  o.max_retries = 1;
  ChatClient client(o);
  auto r = client.Complete(Ask());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_EQ(server.request_count(), 2);
  EXPECT_THAT(r.status().message(), HasSubstr("slow down"));
  ExpectNamesEndpointAndModel(r.status(), server);
}

TEST(ChatClientTest, AnExhaustedQuotaIsNotRetried) {
  ScriptedLlmServer server({Raw(429, R"({"error":{"message":"You exceeded your current quota",)"
                                     R"("type":"insufficient_quota","code":"insufficient_quota"}})"),
                            Say("never")});
  ChatClient client(Options(server));
  auto r = client.Complete(Ask());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_EQ(server.request_count(), 1);
  EXPECT_THAT(r.status().message(), HasSubstr("exceeded your current quota"));
}

TEST(ChatClientTest, A401IsUnauthenticatedAndNotRetried) {
  ScriptedLlmServer server({HttpError(401, "Incorrect API key provided"), Say("never")});
  Observed seen;
  ChatClient client(Options(server), Budget{}, seen.Observer());
  auto r = client.Complete(Ask());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated) << r.status();
  EXPECT_EQ(server.request_count(), 1);
  EXPECT_THAT(r.status().message(), HasSubstr("Incorrect API key provided"));
  EXPECT_THAT(r.status().message(), HasSubstr("CUBRIDGE_LLM_API_KEY"));
  EXPECT_THAT(r.status().message(), HasSubstr("--llm-api-key-file"));
  ExpectNamesEndpointAndModel(r.status(), server);
  EXPECT_THAT(seen.outcomes, ElementsAre("failed"));
}

TEST(ChatClientTest, A401WithoutAKeySaysNoneWasSent) {
  ScriptedLlmServer server({HttpError(401, "missing key")});
  ChatClient client(Options(server, ""));
  auto r = client.Complete(Ask());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("no API key was sent"));
}

TEST(ChatClientTest, A403IsPermissionDeniedAndNotRetried) {
  ScriptedLlmServer server({HttpError(403, "model not allowed"), Say("never")});
  ChatClient client(Options(server));
  auto r = client.Complete(Ask());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied) << r.status();
  EXPECT_EQ(server.request_count(), 1);
  EXPECT_THAT(r.status().message(), HasSubstr("CUBRIDGE_LLM_API_KEY"));
  ExpectNamesEndpointAndModel(r.status(), server);
}

TEST(ChatClientTest, A400IsInvalidArgumentWithTheServersMessage) {
  ScriptedLlmServer server({HttpError(400, "This model's maximum context length is 8192 tokens"),
                            Say("never")});
  ChatClient client(Options(server));
  auto r = client.Complete(Ask());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_EQ(server.request_count(), 1);
  EXPECT_THAT(r.status().message(), HasSubstr("maximum context length is 8192 tokens"));
  ExpectNamesEndpointAndModel(r.status(), server);
}

TEST(ChatClientTest, ErrorMessagesInOtherShapesAreFound) {
  ScriptedLlmServer server({Raw(400, R"({"object":"error","message":"vllm says no"})"),
                            Raw(422, R"({"detail":"fastapi says no"})"),
                            Raw(400, "plain text says no")});
  ChatClient client(Options(server));
  for (const char* said : {"vllm says no", "fastapi says no", "plain text says no"}) {
    auto r = client.Complete(Ask());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr(said));
  }
}

TEST(ChatClientTest, ALongServerErrorIsTruncated) {
  const std::string long_message(5000, 'x');
  ScriptedLlmServer server({HttpError(400, long_message)});
  ChatClient client(Options(server));
  auto r = client.Complete(Ask());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(std::string(300, 'x')));
  EXPECT_THAT(r.status().message(), Not(HasSubstr(std::string(301, 'x'))));
  EXPECT_LT(r.status().message().size(), 1000u);
}

TEST(ChatClientTest, A404PointsAtTheEndpoint) {
  ScriptedLlmServer server({});
  ChatOptions o = Options(server);
  o.endpoint = "http://127.0.0.1:" + std::to_string(server.port());  // no /v1
  ChatClient client(o);
  auto r = client.Complete(Ask());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("HTTP 404"));
  EXPECT_THAT(r.status().message(), HasSubstr("--llm-endpoint"));
}

TEST(ChatClientTest, ASlowReplyTimesOut) {
  ScriptedReply slow = Say("late");
  slow.delay = milliseconds(3000);
  ScriptedLlmServer server({slow, slow});
  ChatOptions o = Options(server);
  o.timeout = milliseconds(300);
  o.max_retries = 1;
  Observed seen;
  ChatClient client(o, Budget{}, seen.Observer());
  const auto start = std::chrono::steady_clock::now();
  auto r = client.Complete(Ask());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_LT(SecondsSince(start), 2.5);
  EXPECT_EQ(server.request_count(), 2);
  EXPECT_THAT(r.status().message(), HasSubstr("timed out"));
  EXPECT_THAT(r.status().message(), HasSubstr("--llm-timeout"));
  ExpectNamesEndpointAndModel(r.status(), server);
  EXPECT_THAT(seen.outcomes, ElementsAre("retried", "failed"));
}

TEST(ChatClientTest, ARefusedConnectionIsUnavailable) {
  ChatOptions o;
  o.endpoint = "http://127.0.0.1:" + std::to_string(UnusedPort()) + "/v1";
  o.model = kModel;
  o.api_key = kKey;
  o.max_retries = 1;
  o.initial_backoff = milliseconds(2);
  Observed seen;
  ChatClient client(o, Budget{}, seen.Observer());
  auto r = client.Complete(Ask());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr(o.endpoint + "/chat/completions"));
  EXPECT_THAT(r.status().message(), HasSubstr(kModel));
  EXPECT_THAT(r.status().message(), HasSubstr("CUBRIDGE_LLM_ENDPOINT"));
  EXPECT_THAT(seen.outcomes, ElementsAre("retried", "failed"));
}

TEST(ChatClientTest, AMalformedReplyIsInternal) {
  ScriptedLlmServer server({Raw(200, "this is not json"), Raw(200, R"({"choices":[]})"),
                            Raw(200, R"({"choices":[{"finish_reason":"stop"}]})"),
                            Raw(200, R"({"choices":[{"message":{"content":42}}]})")});
  ChatClient client(Options(server));
  for (const char* missing : {"not a JSON object", "choices[0]", "message", "not a string"}) {
    auto r = client.Complete(Ask());
    ASSERT_FALSE(r.ok()) << missing;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal) << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr(missing));
    ExpectNamesEndpointAndModel(r.status(), server);
  }
  EXPECT_EQ(server.request_count(), 4);
}

TEST(ChatClientTest, NullContentIsInternalButItsTokensCount) {
  ScriptedLlmServer server({Raw(200, R"({"choices":[{"message":{"role":"assistant","content":null},)"
                                     R"("finish_reason":"tool_calls"}],)"
                                     R"("usage":{"prompt_tokens":11,"completion_tokens":3}})")});
  Observed seen;
  ChatClient client(Options(server), Budget{}, seen.Observer());
  auto r = client.Complete(Ask());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("content is missing or null"));
  EXPECT_THAT(r.status().message(), HasSubstr("tool_calls"));
  EXPECT_EQ(client.used().prompt_tokens, 11);
  EXPECT_EQ(client.used().completion_tokens, 3);
  EXPECT_THAT(seen.outcomes, ElementsAre("failed"));
}

TEST(ChatClientTest, TheTokenBudgetStopsTheNextRequest) {
  ScriptedLlmServer server({Say("one"), Say("two")});
  Budget budget;
  budget.max_tokens = 150;  // one default reply: 100 + 50
  ChatClient client(Options(server), budget);
  ASSERT_TRUE(client.Complete(Ask()).ok());
  auto r = client.Complete(Ask());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_EQ(server.request_count(), 1);
  EXPECT_THAT(r.status().message(), HasSubstr("token budget"));
  EXPECT_THAT(r.status().message(), HasSubstr("150 tokens (100 prompt + 50 completion)"));
  EXPECT_THAT(r.status().message(), HasSubstr("limit of 150"));
  EXPECT_THAT(r.status().message(), HasSubstr("--llm-max-tokens"));
  ExpectNamesEndpointAndModel(r.status(), server);
}

TEST(ChatClientTest, UnderTheTokenBudgetRequestsGoOn) {
  ScriptedLlmServer server({Say("one"), Say("two")});
  Budget budget;
  budget.max_tokens = 151;
  ChatClient client(Options(server), budget);
  ASSERT_TRUE(client.Complete(Ask()).ok());
  EXPECT_TRUE(client.Complete(Ask()).ok());
  EXPECT_EQ(server.request_count(), 2);
}

TEST(ChatClientTest, TheCostBudgetStopsTheNextRequest) {
  ScriptedLlmServer server({Say("one"), Say("two")});
  Budget budget;
  budget.max_tokens = 0;
  budget.usd_per_million_prompt = 10;      // 100 tokens: $0.001
  budget.usd_per_million_completion = 20;  // 50 tokens: $0.001
  budget.max_cost_usd = 0.0015;
  ChatClient client(Options(server), budget);
  ASSERT_TRUE(client.Complete(Ask()).ok());
  EXPECT_NEAR(client.cost_usd(), 0.002, 1e-12);
  auto r = client.Complete(Ask());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_EQ(server.request_count(), 1);
  EXPECT_THAT(r.status().message(), HasSubstr("cost budget"));
  EXPECT_THAT(r.status().message(), HasSubstr("$0.002000"));
  EXPECT_THAT(r.status().message(), HasSubstr("$0.001500"));
  EXPECT_THAT(r.status().message(), HasSubstr("--llm-max-cost-usd"));
}

TEST(ChatClientTest, AnUnlimitedBudgetNeverStops) {
  ScriptedLlmServer server({Say("one"), Say("two"), Say("three")});
  Budget budget;
  budget.max_tokens = 0;
  budget.max_cost_usd = 0;
  budget.usd_per_million_prompt = 1e6;
  ChatClient client(Options(server), budget);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(client.Complete(Ask()).ok());
  EXPECT_EQ(server.request_count(), 3);
}

TEST(ChatClientTest, TheKeyIsInNoErrorEvenWhenTheServerEchoesIt) {
  ScriptedLlmServer server(
      {HttpError(401, "Incorrect API key provided: " + kKey),
       HttpError(400, "bad request from " + kKey + " with key " + kKey),
       Raw(500, "raw echo " + kKey), Raw(200, "{\"choices\":[], \"echo\":\"" + kKey + "\"}")});
  ChatOptions o = Options(server);
  o.max_retries = 0;
  ChatClient client(o);
  for (int i = 0; i < 4; ++i) {
    auto r = client.Complete(Ask());
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), Not(HasSubstr(kKey))) << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr("[redacted]")) << r.status();
  }
  // The key did go to the server: the redaction is not because it was never known.
  EXPECT_EQ(server.requests()[0].authorization, "Bearer " + kKey);
}

TEST(ChatClientTest, AKeyCutByTruncationLeavesNoPrefixBehind) {
  // The key straddles the truncation point: redacting after cutting would leave its first half.
  const std::string message = std::string(290, 'x') + kKey;
  ScriptedLlmServer server({HttpError(400, message)});
  ChatClient client(Options(server));
  auto r = client.Complete(Ask());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), Not(HasSubstr(kKey.substr(0, 10)))) << r.status();
}

TEST(ChatClientTest, RedactReplacesEveryOccurrence) {
  ChatOptions o;
  o.api_key = "k3y/with\"quote";
  ChatClient client(o);
  EXPECT_EQ(client.Redact("a k3y/with\"quote b k3y/with\"quote"), "a [redacted] b [redacted]");
  // As a server would echo it inside a JSON string: the quote escaped.
  EXPECT_EQ(client.Redact(R"(json "k3y/with\"quote")"), R"(json "[redacted]")");
  ChatOptions none;
  ChatClient keyless(none);
  EXPECT_EQ(keyless.Redact("nothing to hide"), "nothing to hide");
}

TEST(ChatClientTest, NoEndpointOrModelIsInvalidArgumentAndSendsNothing) {
  ScriptedLlmServer server({Say("never")});
  ChatOptions no_endpoint = Options(server);
  no_endpoint.endpoint = "";
  auto r = ChatClient(no_endpoint).Complete(Ask());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("CUBRIDGE_LLM_ENDPOINT"));
  ChatOptions no_model = Options(server);
  no_model.model = "";
  r = ChatClient(no_model).Complete(Ask());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("CUBRIDGE_LLM_MODEL"));
  EXPECT_EQ(server.request_count(), 0);
}

TEST(ResolveKeyTest, ReadsTheFirstLineOfTheFileWithoutTrailingWhitespace) {
  TempDir dir;
  const std::string file = dir.Write("key", "sk-from-file \t\r\nsecond line\n");
  ScopedEnv env_key("CUBRIDGE_LLM_API_KEY", "sk-from-env");
  ChatOptions o;
  ASSERT_TRUE(ResolveKey(file, o).ok());
  EXPECT_EQ(o.api_key, "sk-from-file");
}

TEST(ResolveKeyTest, AFileWithoutANewlineWorks) {
  TempDir dir;
  const std::string file = dir.Write("key", "sk-no-newline");
  ChatOptions o;
  ASSERT_TRUE(ResolveKey(file, o).ok());
  EXPECT_EQ(o.api_key, "sk-no-newline");
}

TEST(ResolveKeyTest, TakesTheKeyFromTheEnvironmentWithoutAFile) {
  ScopedEnv env_key("CUBRIDGE_LLM_API_KEY", "sk-from-env\n");
  ChatOptions o;
  ASSERT_TRUE(ResolveKey("", o).ok());
  EXPECT_EQ(o.api_key, "sk-from-env");
  ChatOptions given;
  given.api_key = "sk-given";
  ASSERT_TRUE(ResolveKey("", given).ok());
  EXPECT_EQ(given.api_key, "sk-given");
}

TEST(ResolveKeyTest, NoKeyAnywhereLeavesItEmpty) {
  ScopedEnv env_key("CUBRIDGE_LLM_API_KEY", std::nullopt);
  ChatOptions o;
  ASSERT_TRUE(ResolveKey("", o).ok());
  EXPECT_EQ(o.api_key, "");
}

TEST(ResolveKeyTest, FillsEndpointAndModelFromTheEnvironmentOnlyWhenEmpty) {
  ScopedEnv env_endpoint("CUBRIDGE_LLM_ENDPOINT", "http://env:8000/v1");
  ScopedEnv env_model("CUBRIDGE_LLM_MODEL", "env-model");
  ChatOptions empty;
  ASSERT_TRUE(ResolveKey("", empty).ok());
  EXPECT_EQ(empty.endpoint, "http://env:8000/v1");
  EXPECT_EQ(empty.model, "env-model");
  ChatOptions given;
  given.endpoint = "http://flag:9000/v1";
  given.model = "flag-model";
  ASSERT_TRUE(ResolveKey("", given).ok());
  EXPECT_EQ(given.endpoint, "http://flag:9000/v1");
  EXPECT_EQ(given.model, "flag-model");
}

TEST(ResolveKeyTest, AMissingFileIsNotFoundNamingThePath) {
  TempDir dir;
  const std::string missing = (dir.path() / "no-such-key").string();
  ChatOptions o;
  absl::Status st = ResolveKey(missing, o);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_THAT(st.message(), HasSubstr(missing));
  EXPECT_EQ(o.api_key, "");
}

TEST(ResolveKeyTest, AnUnreadableFileIsPermissionDeniedWithoutItsContent) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads any file; a mode-000 file proves nothing here";
  TempDir dir;
  const std::string file = dir.Write("key", "sk-secret-content\n");
  ASSERT_EQ(chmod(file.c_str(), 0), 0);
  ChatOptions o;
  absl::Status st = ResolveKey(file, o);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << st;
  EXPECT_THAT(st.message(), HasSubstr(file));
  EXPECT_THAT(st.message(), Not(HasSubstr("sk-secret-content")));
}

TEST(ResolveKeyTest, ADirectoryOrAnEmptyFileIsAnErrorNamingThePath) {
  TempDir dir;
  ChatOptions o;
  absl::Status st = ResolveKey(dir.path().string(), o);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr(dir.path().string()));
  const std::string empty = dir.Write("empty", "\n\nsk-on-line-three\n");
  st = ResolveKey(empty, o);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr(empty));
  EXPECT_THAT(st.message(), Not(HasSubstr("sk-on-line-three")));
  EXPECT_EQ(o.api_key, "");
}

}  // namespace
}  // namespace cubridge::llm
