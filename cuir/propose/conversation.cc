#include "cuir/propose/conversation.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cuir/propose/prompt.h"

namespace cubridge::propose {
namespace {

using nlohmann::json;

json Turn(int round, const std::string& role, const std::string& content) {
  return {{"round", round}, {"role", role}, {"content", content}};
}

bool BudgetSpent(const llm::ChatClient& c, const llm::Budget& b) {
  const int64_t used = c.used().prompt_tokens + c.used().completion_tokens;
  return (b.max_tokens > 0 && used >= b.max_tokens) ||
         (b.max_cost_usd > 0 && c.cost_usd() >= b.max_cost_usd);
}

}  // namespace

absl::StatusOr<cuir::Program> ReadProposal(const std::string& reply, Rejection* why) {
  auto reject = [&](const char* stage, const absl::Status& s) {
    *why = Rejection{stage, std::string(s.message())};
    return s;
  };
  auto text = ExtractProgram(reply);
  if (!text.ok()) return reject("reply format check", text.status());
  auto parsed = cuir::ParseProgram(*text, "proposal.cuir");
  if (!parsed.ok()) return reject("CuIR parser", parsed.status());
  if (auto s = cuir::Validate(*parsed); !s.ok()) return reject("CuIR validator", s);
  return parsed;
}

ConversationResult Converse(const LlmSettings& settings, const Conversation& c,
                            const ReplyCheck& check) {
  ConversationResult out;
  const int rounds = std::max(1, settings.max_rounds);
  const std::string& model = settings.chat.model;
  const std::string who = absl::StrCat(c.task, " (", model, "): ");
  llm::ChatClient client(settings.chat, settings.budget, settings.observer);
  std::vector<llm::ChatMessage> messages = {{"system", c.system}, {"user", c.first}};
  out.transcript.push_back(Turn(0, "system", c.system_for_transcript));
  out.transcript.push_back(Turn(0, "user", c.first));
  int requests = 0;
  auto finish = [&](absl::Status status) {
    out.status = std::move(status);
    out.tokens = client.used().prompt_tokens + client.used().completion_tokens;
    out.usage = {{"model", model},
                 {"requests", requests},
                 {"prompt_tokens", client.used().prompt_tokens},
                 {"completion_tokens", client.used().completion_tokens},
                 {"cost_usd", client.cost_usd()}};
    return out;
  };

  Rejection last;
  for (int round = 1; round <= rounds; ++round) {
    if (c.progress) c.progress(absl::StrFormat("llm round %d of %d: asking %s", round, rounds, model));
    auto reply = client.Complete(messages);
    if (!reply.ok()) {
      requests += 1;
      out.transcript.push_back(Turn(round, "error", std::string(reply.status().message())));
      // A spent budget is this job's limit, not bad luck: retrying the task would spend more.
      const absl::StatusCode code = BudgetSpent(client, settings.budget)
                                        ? absl::StatusCode::kFailedPrecondition
                                        : reply.status().code();
      return finish(absl::Status(
          code, absl::StrCat(who, "round ", round, ": ", reply.status().message())));
    }
    requests += reply->attempts;
    json turn = Turn(round, "assistant", reply->content);
    turn["prompt_tokens"] = reply->usage.prompt_tokens;
    turn["completion_tokens"] = reply->usage.completion_tokens;
    turn["seconds"] = reply->seconds;
    out.transcript.push_back(turn);
    messages.push_back({"assistant", reply->content});

    auto rejected = check(reply->content, round);
    if (!rejected) {
      out.transcript.back()["verdict"] = "accepted";
      out.accepted_round = round;
      return finish(absl::OkStatus());
    }
    out.transcript.back()["verdict"] = absl::StrCat("rejected by the ", rejected->stage);
    if (rejected->final) {
      return finish(absl::FailedPreconditionError(
          absl::StrCat(who, "round ", round, ": the ", rejected->stage, " failed: ", rejected->error)));
    }
    last = *rejected;
    if (round < rounds) {
      messages.push_back({"user", Feedback(round, rounds, rejected->stage, rejected->error)});
      out.transcript.push_back(Turn(round, "user", messages.back().content));
    }
  }
  // The model had its rounds; the same input would get the same treatment again.
  return finish(absl::FailedPreconditionError(
      absl::StrFormat("%sno verified program after %d rounds; the last was rejected by the %s: %s",
                      who, rounds, last.stage, last.error)));
}

}  // namespace cubridge::propose
