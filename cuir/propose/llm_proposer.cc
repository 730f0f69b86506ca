#include "cuir/propose/llm_proposer.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cuir/propose/prompt.h"

namespace cubridge::propose {
namespace {

using nlohmann::json;
using pipeline::Proposal;
using pipeline::ProposeRequest;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string ExpertOf(const cuir::Program& p) {
  for (const cuir::Stmt& s : p.stmts) {
    if (s.kind == cuir::StmtKind::kExpert) return s.name;
  }
  return "";
}

// Why a proposal was turned down: which check, and its exact words (what the model is told).
struct Rejection {
  std::string stage;
  std::string error;
};

// One proposal through every check an accepted program must pass, cheapest first.
std::optional<Rejection> Check(const std::string& reply, const ProposeRequest& r,
                               cuir::Program* program, pipeline::VerifyReport* report,
                               double* verify_seconds) {
  auto text = ExtractProgram(reply);
  if (!text.ok()) return Rejection{"reply format check", std::string(text.status().message())};
  auto parsed = cuir::ParseProgram(*text, "proposal.cuir");
  if (!parsed.ok()) return Rejection{"CuIR parser", std::string(parsed.status().message())};
  if (auto s = cuir::Validate(*parsed); !s.ok()) {
    return Rejection{"CuIR validator", std::string(s.message())};
  }
  const std::string want = ExpertOf(r.base), got = ExpertOf(*parsed);
  if (got != want) {
    return Rejection{"transfer contract",
                     absl::StrCat("the program is for expert \"", got, "\" but must keep the base "
                                  "program's `expert \"", want, "\"` line: it is lowered by reusing "
                                  "that expert's CUDA source")};
  }
  const auto start = std::chrono::steady_clock::now();
  auto v = pipeline::VerifyOnCpu(*parsed, r.spec, r.config, r.buffers, r.seed, r.verify);
  *verify_seconds = SecondsSince(start);
  if (!v.ok()) return Rejection{"CuIR interpreter", std::string(v.status().message())};
  if (!v->passed) {
    return Rejection{"verifier (the interpreter running your program against the user's code)",
                     absl::StrCat("Your program, interpreted with the kernel's numerics, was compared "
                                  "with the user's code on random inputs. Per shape: elements out of "
                                  "tolerance and the worst mismatches at [batch, head, row, dim] "
                                  "for O and [batch, head, row] for LSE:\n",
                                  v->FailureDetail())};
  }
  for (lower::Arch arch : r.archs) {
    auto lowered = lower::Lower(*parsed, r.config, arch);
    if (!lowered.ok()) {
      return Rejection{absl::StrCat("lowering to CUDA for ", lower::ArchName(arch)),
                       std::string(lowered.status().message())};
    }
  }
  *program = *std::move(parsed);
  *report = *std::move(v);
  return std::nullopt;
}

json Turn(int round, const std::string& role, const std::string& content) {
  return {{"round", round}, {"role", role}, {"content", content}};
}

bool BudgetSpent(const llm::ChatClient& c, const llm::Budget& b) {
  const int64_t used = c.used().prompt_tokens + c.used().completion_tokens;
  return (b.max_tokens > 0 && used >= b.max_tokens) ||
         (b.max_cost_usd > 0 && c.cost_usd() >= b.max_cost_usd);
}

}  // namespace

Proposal LlmProposer::Propose(const ProposeRequest& request) {
  return ProposeAfterRules(request, "");
}

Proposal LlmProposer::ProposeAfterRules(const ProposeRequest& r, const std::string& rules_said) {
  Proposal p;
  p.proposer = "llm";
  const auto start = std::chrono::steady_clock::now();
  const int rounds = std::max(1, settings_.max_rounds);
  const std::string model = settings_.chat.model;
  auto fail = [&](absl::StatusCode code, const std::string& what) {
    p.status = absl::Status(code, absl::StrCat("transfer: llm proposer (", model, "): ", what));
    p.transfer_seconds = SecondsSince(start);
  };
  auto reference = CuirReference();
  if (!reference.ok()) {
    fail(absl::StatusCode::kInternal, std::string(reference.status().message()));
    return p;
  }
  llm::ChatClient client(settings_.chat, settings_.budget, settings_.observer);
  std::vector<llm::ChatMessage> messages = {
      {"system", SystemPrompt(*reference)},
      {"user", TransferPrompt(r.base, r.spec, r.config, rules_said)}};
  p.transcript.push_back(Turn(0, "system", SystemPromptForTranscript(*reference)));
  p.transcript.push_back(Turn(0, "user", messages[1].content));
  int requests = 0;
  auto record_usage = [&] {
    p.llm_usage = {{"model", model},
                   {"requests", requests},
                   {"prompt_tokens", client.used().prompt_tokens},
                   {"completion_tokens", client.used().completion_tokens},
                   {"cost_usd", client.cost_usd()}};
  };

  Rejection last;
  for (int round = 1; round <= rounds; ++round) {
    if (r.progress) r.progress(absl::StrFormat("llm round %d of %d: asking %s", round, rounds, model));
    auto reply = client.Complete(messages);
    if (!reply.ok()) {
      requests += 1;
      record_usage();
      // A spent budget is this job's limit, not bad luck: retrying the task would spend more.
      const absl::StatusCode code = BudgetSpent(client, settings_.budget)
                                        ? absl::StatusCode::kFailedPrecondition
                                        : reply.status().code();
      fail(code, absl::StrCat("round ", round, ": ", reply.status().message()));
      p.transcript.push_back(Turn(round, "error", std::string(reply.status().message())));
      return p;
    }
    requests += reply->attempts;
    json turn = Turn(round, "assistant", reply->content);
    turn["prompt_tokens"] = reply->usage.prompt_tokens;
    turn["completion_tokens"] = reply->usage.completion_tokens;
    turn["seconds"] = reply->seconds;
    p.transcript.push_back(turn);
    messages.push_back({"assistant", reply->content});

    cuir::Program program;
    pipeline::VerifyReport report;
    double verify_seconds = 0;
    auto rejected = Check(reply->content, r, &program, &report, &verify_seconds);
    if (!rejected) {
      p.transcript.back()["verdict"] = "accepted";
      p.transfer.program = std::move(program);
      p.transfer.applied.push_back(
          {"llm.transfer", absl::StrFormat("proposed by %s, accepted at round %d of %d", model,
                                           round, rounds)});
      p.verification = std::move(report);
      p.verify_seconds = verify_seconds;
      p.verify_detail = p.verification.Summary();
      record_usage();
      p.transfer_detail = absl::StrFormat(
          "llm %s: accepted at round %d of %d (%d tokens)", model, round, rounds,
          client.used().prompt_tokens + client.used().completion_tokens);
      p.transfer_seconds = SecondsSince(start) - verify_seconds;
      return p;
    }
    p.transcript.back()["verdict"] = absl::StrCat("rejected by the ", rejected->stage);
    last = *rejected;
    if (round < rounds) {
      messages.push_back({"user", Feedback(round, rounds, rejected->stage, rejected->error)});
      p.transcript.push_back(Turn(round, "user", messages.back().content));
    }
  }
  record_usage();
  // The model had its rounds; the same spec would get the same treatment again.
  fail(absl::StatusCode::kFailedPrecondition,
       absl::StrFormat("no verified program after %d rounds; the last was rejected by the %s: %s",
                       rounds, last.stage, last.error));
  return p;
}

Proposal HybridProposer::Propose(const ProposeRequest& r) {
  Proposal ruled = rules_.Propose(r);
  if (ruled.status.ok() || !pipeline::NotCoveredByRules(ruled.status)) return ruled;
  std::string said(ruled.status.message());
  if (said.rfind("transfer: ", 0) == 0) said = said.substr(10);
  if (r.progress) r.progress("rules: " + said + "; asking the LLM");
  return llm_.ProposeAfterRules(r, said);
}

absl::StatusOr<std::unique_ptr<pipeline::Proposer>> MakeProposer(const std::string& name,
                                                                  const LlmSettings& settings) {
  if (auto s = pipeline::CheckProposerName(name); !s.ok()) return s;
  if (name == "rules") return std::make_unique<pipeline::RulesProposer>();
  if (settings.chat.endpoint.empty() || settings.chat.model.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the ", name, " proposer needs a chat-completions endpoint and a model: set --llm-endpoint "
        "and --llm-model (or CUBRIDGE_LLM_ENDPOINT and CUBRIDGE_LLM_MODEL); docs/llm.md"));
  }
  if (name == "llm") return std::make_unique<LlmProposer>(settings);
  return std::make_unique<HybridProposer>(settings);
}

}  // namespace cubridge::propose
