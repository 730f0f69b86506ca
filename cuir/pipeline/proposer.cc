#include "cuir/pipeline/proposer.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "cuir/ir/status_util.h"
#include "cuir/pipeline/stages.h"
#include "cuir/transfer/rule.h"

namespace cubridge::pipeline {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

absl::Status InStage(const std::string& stage, const absl::Status& s) { return cuir::Prefixed(stage, s); }

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
    p.failed_stage = Proposal::Stage::kVerify;
    return p;
  }
  p.verification = *std::move(v);
  return p;
}

bool NotCoveredByRules(const absl::Status& status) {
  return status.GetPayload(transfer::kNotCoveredPayload).has_value();
}

}  // namespace cubridge::pipeline
