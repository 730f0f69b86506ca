// The LLM proposers: a language model writes the transferred CuIR program, and the same verifier
// as for the rules decides. Every rejection goes back to the model with its exact error (parse
// error with line:col, validator message, worst mismatching positions and values, lowering error)
// for up to `max_rounds` proposals.
#pragma once

#include <memory>
#include <string>

#include "cuir/pipeline/proposer.h"
#include "cuir/propose/conversation.h"

namespace cubridge::propose {

// `llm`: the model proposes from the start (the rules are not asked).
class LlmProposer : public pipeline::Proposer {
 public:
  explicit LlmProposer(LlmSettings settings) : settings_(std::move(settings)) {}
  std::string name() const override { return "llm"; }
  pipeline::Proposal Propose(const pipeline::ProposeRequest& request) override;
  // With the rules' verdict in the first message (hybrid).
  pipeline::Proposal ProposeAfterRules(const pipeline::ProposeRequest& request,
                                       const std::string& rules_said);

 private:
  LlmSettings settings_;
};

// `hybrid`: the rules first; the model only for what they report as not covered. A covered spec
// makes no HTTP call; a rules program that fails verification is a failure, not a reason to ask.
class HybridProposer : public pipeline::Proposer {
 public:
  explicit HybridProposer(LlmSettings settings) : llm_(std::move(settings)) {}
  std::string name() const override { return "hybrid"; }
  pipeline::Proposal Propose(const pipeline::ProposeRequest& request) override;

 private:
  pipeline::RulesProposer rules_;
  LlmProposer llm_;
};

// "rules" | "llm" | "hybrid" (pipeline::CheckProposerName's errors otherwise). `llm` and `hybrid`
// need an endpoint and a model: FAILED_PRECONDITION says which flag or variable sets them.
absl::StatusOr<std::unique_ptr<pipeline::Proposer>> MakeProposer(const std::string& name,
                                                                  const LlmSettings& settings);

}  // namespace cubridge::propose
