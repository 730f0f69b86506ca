// The job flow with the LLM proposers: where their transfers are queued and under which ids, who
// may lease them, why a job waits for them, and the conversation a transfer leaves with every job
// waiting on it, whether it ended well or not.
#include <algorithm>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/core/flow.h"
#include "server/core/request.h"
#include "service/contract/task_contract.h"
#include "service/contract/task_messages.h"
#include "tests/server/redis_server.h"

namespace cubridge::core {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using nlohmann::json;
using namespace std::chrono_literals;

class ProposerFlow : public testing::RedisTest {
 protected:
  static v1::SubmitJobRequest Request(const std::string& proposer, const std::string& key = "") {
    v1::SubmitJobRequest req;
    req.mutable_spec()->set_source("def mask_mod(b, h, q_idx, kv_idx):\n    return q_idx >= kv_idx\n");
    req.set_verification(v1::VERIFICATION_LEVEL_IR);
    req.set_proposer(proposer);
    req.set_idempotency_key(key);
    return req;
  }
  std::string TaskField(const std::string& task, const std::string& field) {
    auto r = client_->Command({"HGET", "cubridge:task:" + task, field});
    return r.ok() ? r->str : "";
  }
  store::Lease MustLease(JobFlow& flow, const std::string& cls) {
    auto l = flow.tasks().LeaseNext(cls, "w-test");
    EXPECT_TRUE(l.ok() && l->has_value()) << "nothing to lease from " << cls;
    return l.ok() && l->has_value() ? **l : store::Lease{};
  }

  const FlowOptions options_{"rules-test"};
};

TEST_F(ProposerFlow, EachProposerHasItsOwnTransferAndTheModelsGoToTheLlmClass) {
  JobFlow flow(client_.get(), options_, nullptr);
  auto rules = flow.Submit(Request(""), {"h1", "canonical"}, {"sm_80"});
  auto llm = flow.Submit(Request("llm"), {"h1", "canonical"}, {"sm_80"});
  auto hybrid = flow.Submit(Request("hybrid"), {"h1", "canonical"}, {"sm_80"});
  ASSERT_TRUE(rules.ok() && llm.ok() && hybrid.ok());
  EXPECT_EQ(rules->proposer(), "rules");
  EXPECT_EQ(llm->proposer(), "llm");
  EXPECT_EQ(hybrid->proposer(), "hybrid");
  EXPECT_EQ(TaskField("transfer-h1", "class"), "cpu");
  EXPECT_EQ(TaskField("transfer-h1-llm", "class"), "llm");
  EXPECT_EQ(TaskField("transfer-h1-hybrid", "class"), "llm");
  EXPECT_EQ(contract::PayloadFromStore(TaskField("transfer-h1", "payload"))->transfer().proposer(), "rules");
  EXPECT_EQ(contract::PayloadFromStore(TaskField("transfer-h1-llm", "payload"))->transfer().proposer(), "llm");
  EXPECT_EQ(contract::PayloadFromStore(TaskField("transfer-h1-hybrid", "payload"))->transfer().proposer(), "hybrid");
  // The lift is everyone's: one task.
  EXPECT_EQ(*flow.tasks().Depth("cpu"), 2);
  EXPECT_EQ(*flow.tasks().Depth("llm"), 2);
}

TEST_F(ProposerFlow, AnLlmJobWaitsForAWorkerWithAnEndpointAndSaysSo) {
  JobFlow flow(client_.get(), options_, nullptr);
  ASSERT_TRUE(flow.workers().Register({"", "cpu", "", 0, {"nvrtc"}, "node-1", 0, ""}).ok());
  auto job = flow.Submit(Request("llm"), {"h2", "canonical"}, {"sm_80"});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->waiting_for(),
            "no worker with an LLM endpoint has registered (start cubridge-worker with "
            "--llm-endpoint and --llm-model)");
  // A rules job of the same spec is not held up by it.
  auto rules = flow.Submit(Request("rules"), {"h2", "canonical"}, {"sm_80"});
  ASSERT_TRUE(rules.ok());
  EXPECT_THAT(rules->waiting_for(), HasSubstr("waiting for a free worker"));
  ASSERT_TRUE(flow.workers().Register({"", "cpu", "", 0, {"nvrtc", "llm"}, "node-2", 0, ""}).ok());
  auto now = flow.Describe(job->job_id());
  ASSERT_TRUE(now.ok());
  EXPECT_THAT(now->waiting_for(), HasSubstr("waiting for a free worker"));
  EXPECT_THAT(now->waiting_for(), HasSubstr("1 llm"));
}

TEST_F(ProposerFlow, AFailedConversationIsKeptWithEveryJobWaitingOnIt) {
  JobFlow flow(client_.get(), options_, nullptr);
  auto first = flow.Submit(Request("llm", "a"), {"h3", "canonical"}, {"sm_80"});
  auto second = flow.Submit(Request("llm", "b"), {"h3", "canonical"}, {"sm_80"});
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_NE(first->job_id(), second->job_id());
  const store::Lease l = MustLease(flow, "llm");
  ASSERT_EQ(l.task_id, "transfer-h3-llm");
  const json transcript = json::array(
      {{{"round", 1}, {"role", "assistant"}, {"content", "no idea"}, {"verdict", "rejected"}}});
  const json partial = {{"proposer", "llm"},
                        {"transcript", transcript},
                        {"llm_usage", {{"requests", 1}, {"prompt_tokens", 10}, {"completion_tokens", 5}}}};
  auto state = flow.tasks().Fail(l.task_id, l.fencing_token,
                                 {"transfer: llm proposer (m): no verified program after 1 rounds",
                                  /*retryable=*/false, "spec", partial.dump()});
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(*state, "dead");
  for (const auto& id : {first->job_id(), second->job_id()}) {
    ASSERT_TRUE(flow.Advance(id).ok());
    auto job = flow.Describe(id, /*with_transcript=*/true);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->state(), v1::JOB_STATE_FAILED);
    EXPECT_EQ(job->error(), "transfer: llm proposer (m): no verified program after 1 rounds");
    EXPECT_EQ(json::parse(job->transcript_json()), transcript);
    bool usage = false;
    for (const auto& e : job->events()) {
      usage = usage || e.detail().find("10 prompt + 5 completion tokens in 1 requests") != std::string::npos;
    }
    EXPECT_TRUE(usage) << job->DebugString();
    EXPECT_EQ(flow.Describe(id)->transcript_json(), "") << "sent without being asked for";
  }
}

TEST_F(ProposerFlow, AnAcceptedConversationIsKeptAndTheRulesLeaveNone) {
  JobFlow flow(client_.get(), options_, nullptr);
  auto llm = flow.Submit(Request("llm"), {"h4", "canonical"}, {"sm_80"});
  auto rules = flow.Submit(Request("rules"), {"h4", "canonical"}, {"sm_80"});
  ASSERT_TRUE(llm.ok() && rules.ok());
  const json transcript = json::array({{{"round", 1}, {"role", "assistant"}, {"verdict", "accepted"}}});
  const store::Lease l = MustLease(flow, "llm");
  ASSERT_TRUE(flow.tasks()
                  .Complete(l.task_id, l.fencing_token,
                            json{{"program", "cuir 1"}, {"proposer", "llm"}, {"transcript", transcript}}
                                .dump())
                  .ok());
  // The rules' transfer: cpu, after the shared lift.
  for (int i = 0; i < 2; ++i) {
    const store::Lease c = MustLease(flow, "cpu");
    ASSERT_TRUE(flow.tasks()
                    .Complete(c.task_id, c.fencing_token,
                              json{{"program", "cuir 1"}, {"transcript", json::array()}}.dump())
                    .ok());
  }
  ASSERT_TRUE(flow.Advance(llm->job_id()).ok());
  ASSERT_TRUE(flow.Advance(rules->job_id()).ok());
  EXPECT_EQ(json::parse(flow.Describe(llm->job_id(), true)->transcript_json()), transcript);
  EXPECT_EQ(flow.Describe(rules->job_id(), true)->transcript_json(), "");
  // Each proposer's program gets candidates of its own.
  auto keys = client_->Command({"KEYS", "cubridge:task:cand-h4-*"});
  ASSERT_TRUE(keys.ok());
  std::vector<std::string> candidates;
  for (const auto& k : keys->elements) {
    if (k.str.find(":jobs") == std::string::npos) candidates.push_back(k.str);
  }
  ASSERT_EQ(candidates.size(), 2u) << ::testing::PrintToString(candidates);
  const int by_llm = std::count_if(candidates.begin(), candidates.end(), [](const std::string& k) {
    return k.size() > 4 && k.compare(k.size() - 4, 4, "-llm") == 0;
  });
  EXPECT_EQ(by_llm, 1) << ::testing::PrintToString(candidates);
}

TEST_F(ProposerFlow, AnUnknownProposerIsRefusedBeforeAnythingIsStored) {
  auto checked = CheckRequest(Request("gpt-5"), Limits{});
  ASSERT_FALSE(checked.ok());
  EXPECT_EQ(checked.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(checked.status().message(), HasSubstr("unknown proposer \"gpt-5\""));
  for (const char* ok : {"", "rules", "llm", "hybrid"}) {
    EXPECT_TRUE(CheckRequest(Request(ok), Limits{}).ok()) << ok;
  }
}

TEST_F(ProposerFlow, ABackwardModeOutsideTheEnumIsRefused) {
  v1::SubmitJobRequest r = Request("");
  r.set_backward(static_cast<v1::BackwardMode>(99));
  auto checked = CheckRequest(r, Limits{});
  ASSERT_FALSE(checked.ok());
  EXPECT_EQ(checked.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(checked.status().message(), HasSubstr("backward is 99, not a BackwardMode"));
  for (const auto mode : {v1::BACKWARD_MODE_UNSPECIFIED, v1::BACKWARD_MODE_AUTO,
                          v1::BACKWARD_MODE_OFF, v1::BACKWARD_MODE_REQUIRE}) {
    r.set_backward(mode);
    EXPECT_TRUE(CheckRequest(r, Limits{}).ok()) << mode;
  }
}

TEST_F(ProposerFlow, AFailedAttemptKeepsWhatItLeftUntilTheTaskIsRevived) {
  store::TaskQueue q(client_.get(), 10s, 3);
  ASSERT_TRUE(q.EnqueueOnce("t", {"j", "transfer", "{}", "llm"}).ok());
  auto a = q.LeaseNext("llm", "w");
  ASSERT_TRUE(a.ok() && a->has_value());
  EXPECT_EQ(*q.Fail("t", (*a)->fencing_token, {"429", true, "", R"({"transcript": [1]})"}), "queued");
  EXPECT_EQ(q.Get("t")->result, R"({"transcript": [1]})");
  // A crash leaves nothing: what the earlier attempt left stays.
  auto b = q.LeaseNext("llm", "w");
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_EQ(*q.Fail("t", (*b)->fencing_token, {.error = "crashed", .retryable = false}), "dead");
  EXPECT_EQ(q.Get("t")->result, R"({"transcript": [1]})");
  ASSERT_TRUE(*q.Revive("t"));
  EXPECT_EQ(q.Get("t")->result, "") << "a revived task showed its previous life's result";
}

TEST_F(ProposerFlow, TheFirstTranscriptStoredForAJobStays) {
  store::JobStore jobs(client_.get());
  auto created = jobs.Create("", "hash", "req", "print");
  ASSERT_TRUE(created.ok());
  const std::string id = created->job.id;
  EXPECT_EQ(*jobs.Transcript(id), "");
  ASSERT_TRUE(jobs.KeepTranscript(id, "[1]").ok());
  ASSERT_TRUE(jobs.KeepTranscript(id, "[2]").ok());
  EXPECT_EQ(*jobs.Transcript(id), "[1]");
  // Not in the job's record, which every Describe reads whole.
  EXPECT_THAT(*jobs.Fields(id, ""), Not(::testing::Contains(::testing::Key("transcript"))));
}

}  // namespace
}  // namespace cubridge::core
