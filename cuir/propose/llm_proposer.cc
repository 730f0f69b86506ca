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

// One proposal through every check an accepted program must pass, cheapest first.
std::optional<Rejection> Check(const std::string& reply, const ProposeRequest& r,
                               cuir::Program* program, pipeline::VerifyReport* report,
                               double* verify_seconds) {
  Rejection why;
  auto parsed = ReadProposal(reply, &why);
  if (!parsed.ok()) return why;
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

}  // namespace

Proposal LlmProposer::Propose(const ProposeRequest& request) {
  return ProposeAfterRules(request, "");
}

Proposal LlmProposer::ProposeAfterRules(const ProposeRequest& r, const std::string& rules_said) {
  Proposal p;
  p.proposer = "llm";
  const auto start = std::chrono::steady_clock::now();
  const std::string task = "transfer: llm proposer";
  auto reference = CuirReference();
  if (!reference.ok()) {
    p.status = absl::InternalError(absl::StrCat(task, " (", settings_.chat.model,
                                                "): ", reference.status().message()));
    return p;
  }
  Conversation c{task, SystemPrompt(*reference), SystemPromptForTranscript(*reference),
                 TransferPrompt(r.base, r.spec, r.config, rules_said), r.progress};
  cuir::Program program;
  pipeline::VerifyReport report;
  double verify_seconds = 0;
  ConversationResult talk = Converse(settings_, c, [&](const std::string& reply, int) {
    double seconds = 0;
    auto rejected = Check(reply, r, &program, &report, &seconds);
    verify_seconds += seconds;
    return rejected;
  });
  p.transcript = std::move(talk.transcript);
  p.llm_usage = std::move(talk.usage);
  p.status = talk.status;
  p.transfer_seconds = SecondsSince(start) - verify_seconds;
  if (!talk.status.ok()) return p;
  const int rounds = std::max(1, settings_.max_rounds);
  const std::string& model = settings_.chat.model;
  p.transfer.program = std::move(program);
  p.transfer.applied.push_back(
      {"llm.transfer", absl::StrFormat("proposed by %s, accepted at round %d of %d", model,
                                       talk.accepted_round, rounds)});
  p.verification = std::move(report);
  p.verify_seconds = verify_seconds;
  p.verify_detail = p.verification.Summary();
  p.transfer_detail = absl::StrFormat("llm %s: accepted at round %d of %d (%d tokens)", model,
                                      talk.accepted_round, rounds, talk.tokens);
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
