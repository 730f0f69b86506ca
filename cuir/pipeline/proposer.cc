#include "cuir/pipeline/proposer.h"

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cuir/pipeline/stages.h"

namespace cubridge::pipeline {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

absl::Status InStage(const std::string& stage, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(stage, ": ", s.message()));
}

}  // namespace

Proposal RulesProposer::Propose(const ProposeRequest& r) {
  Proposal p;
  p.proposer = name();
  auto start = std::chrono::steady_clock::now();
  auto t = TransferStage(r.base, r.spec, r.config, &p.transfer_detail);
  p.transfer_seconds = SecondsSince(start);
  if (!t.ok()) {
    p.status = InStage("transfer", t.status());
    return p;
  }
  p.transfer = *std::move(t);
  start = std::chrono::steady_clock::now();
  auto v = VerifyStage(p.transfer.program, r.spec, r.config, r.buffers, r.seed, r.verify,
                       &p.verify_detail);
  p.verify_seconds = SecondsSince(start);
  if (!v.ok()) {
    p.status = InStage("verify", v.status());
    return p;
  }
  p.verification = *std::move(v);
  return p;
}

absl::Status CheckProposerName(const std::string& name) {
  if (name == "rules" || name == "llm" || name == "hybrid") return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown proposer \"", name,
      "\": use rules (the rule engine, default), llm (a language model proposes the transferred "
      "CuIR) or hybrid (rules first, the model for what they do not cover)"));
}

bool NotCoveredByRules(const absl::Status& status) {
  return absl::IsFailedPrecondition(status) &&
         absl::StrContains(status.message(), "not covered by the rules");
}

}  // namespace cubridge::pipeline
