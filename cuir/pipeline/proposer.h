// Who proposes the transferred program: the rules (transfer/), a language model (cuir/propose), or
// both. Whatever the proposer, its program is accepted only after the CPU verifier compared it
// with the spec's oracle, so a proposer is "transfer + verify" behind one interface. Like GpuStage,
// the pipeline knows the LLM proposers only through this interface; the CLI and the worker wire
// them in.
#pragma once

#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "cuir/ir/config.h"
#include "cuir/ir/program.h"
#include "cuir/pipeline/proposer_names.h"
#include "cuir/lower/lower.h"
#include "cuir/pipeline/verify.h"
#include "cuir/spec/spec.h"
#include "cuir/spec/tensors.h"
#include "cuir/transfer/transfer.h"

namespace cubridge::pipeline {

struct ProposeRequest {
  const cuir::Program& base;  // the expert's lifted base program
  const spec::Spec& spec;
  cuir::AttentionConfig config;
  std::map<std::string, spec::BufferSource> buffers;
  uint64_t seed = 0;
  VerifyOptions verify;
  // An accepted program must also lower for these archs (an LLM is told when it does not).
  std::vector<lower::Arch> archs;
  std::function<void(const std::string&)> progress;  // one line per round; may be null
};

struct Proposal {
  enum class Stage { kTransfer, kVerify };
  // OK, or the failure with its stage: "transfer: ..." (nothing acceptable was proposed) or
  // "verify: ..." (the rules' program does not match the oracle). Everything below that was
  // reached is filled in either way: a failed LLM conversation keeps its transcript.
  absl::Status status;
  // Which stage refused when `status` is not OK: callers branch on this, not on the message.
  Stage failed_stage = Stage::kTransfer;
  std::string proposer;  // "rules" | "llm": who produced the accepted program
  transfer::TransferResult transfer;
  VerifyReport verification;
  std::string transfer_detail, verify_detail;  // one line each, for the stage events
  double transfer_seconds = 0, verify_seconds = 0;
  nlohmann::json transcript = nlohmann::json::array();  // the LLM conversation, [] for rules
  nlohmann::json llm_usage;  // {requests, prompt_tokens, completion_tokens, cost_usd}, null without
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual std::string name() const = 0;  // "rules" | "llm" | "hybrid"
  virtual Proposal Propose(const ProposeRequest& request) = 0;
};

// The rule engine followed by one verification: what every job used before the LLM proposers.
class RulesProposer : public Proposer {
 public:
  std::string name() const override { return "rules"; }
  Proposal Propose(const ProposeRequest& request) override;
};

// CheckProposerName: cuir/pipeline/proposer_names.h (no LibTorch, for the coordinator's checks).

// A rules failure the LLM may take over: the rules do not cover a construct of the spec
// (FAILED_PRECONDITION "not covered by the rules: ...").
bool NotCoveredByRules(const absl::Status& status);

}  // namespace cubridge::pipeline
