// The loop both LLM tasks run (transfer: llm_proposer.h, lift: llm_lifter.h): ask the model,
// check its reply, send the exact rejection back, for up to `max_rounds` replies within the job's
// token and cost budget. Every turn is kept for the transcript, also when nothing was accepted.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cuir/ir/program.h"
#include "cuir/llm/chat_client.h"

namespace cubridge::propose {

struct LlmSettings {
  llm::ChatOptions chat;
  llm::Budget budget;
  int max_rounds = 4;
  llm::UsageObserver observer;  // token usage, for metrics; may be null
};

// Why a reply was turned down: which check, and its exact words (what the model is told).
struct Rejection {
  std::string stage;
  std::string error;
  // Not the model's to fix (the user's kernel crashed, the GPU went away): stop asking.
  bool final = false;
};

// The checks every proposal meets first, whatever the task: a fenced program (prompt.h's
// ExtractProgram), that parses as `proposal.cuir` (errors with line:col) and validates. The
// program, or why not.
absl::StatusOr<cuir::Program> ReadProposal(const std::string& reply, Rejection* why);

// Checks the reply of `round`; nullopt accepts it.
using ReplyCheck = std::function<std::optional<Rejection>(const std::string& reply, int round)>;

struct Conversation {
  std::string task;                   // "transfer: llm proposer", "lift: llm": error prefix
  std::string system;                 // the system message sent
  std::string system_for_transcript;  // what the transcript keeps in its place
  std::string first;                  // the task message
  std::function<void(const std::string&)> progress;  // may be null
};

struct ConversationResult {
  // OK: the reply of `accepted_round` was accepted. FAILED_PRECONDITION after the last round or
  // on a spent budget (the same job would fail the same way again); the client's error otherwise.
  absl::Status status;
  int accepted_round = 0;
  int64_t tokens = 0;  // prompt + completion, all rounds
  nlohmann::json transcript = nlohmann::json::array();
  nlohmann::json usage;  // model, requests, prompt_tokens, completion_tokens, cost_usd
};

ConversationResult Converse(const LlmSettings& settings, const Conversation& conversation,
                            const ReplyCheck& check);

}  // namespace cubridge::propose
