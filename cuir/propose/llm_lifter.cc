#include "cuir/propose/llm_lifter.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cuir/interp/interp.h"
#include "cuir/lower/lift.h"
#include "cuir/pipeline/verify.h"
#include "cuir/propose/prompt.h"
#include "cuir/spec/tensors.h"

namespace cubridge::propose {
namespace {

using nlohmann::json;

constexpr char kGpuStage[] = "GPU check (your program interpreted vs the user's kernel run on the GPU)";

// What a base program must be to stand for a user's kernel: the kernel's name, and only what the
// launcher ABI can carry (no buffers: the user's kernel gets none).
std::optional<Rejection> CheckContract(const cuir::Program& p, const std::string& name) {
  const cuir::Stmt* expert = cuir::FindDecl(p, cuir::StmtKind::kExpert);
  if (expert == nullptr || expert->name != name) {
    return Rejection{"lift contract",
                     absl::StrCat("the program must declare `expert \"", name, "\"` (it declares ",
                                  expert == nullptr ? "none" : absl::StrCat("\"", expert->name, "\""),
                                  "): the lifted program names the kernel it describes")};
  }
  if (const cuir::Stmt* b = cuir::FindDecl(p, cuir::StmtKind::kBuffer); b != nullptr) {
    return Rejection{"lift contract",
                     absl::StrCat(b->loc.ToString(), ": `buffer ", b->name,
                                  "`: a lifted kernel receives no buffers through the launcher "
                                  "ABI; write what the kernel computes from indices and consts")};
  }
  return std::nullopt;
}

// The interpreter on one small ragged shape: run-time errors (a load outside a tensor, an index
// out of range) come back with their line:col before a GPU is asked.
std::optional<Rejection> DryRun(const cuir::Program& p, const cuir::AttentionConfig& job,
                                uint64_t seed) {
  cuir::AttentionConfig c = job;
  c.batch = 1;
  c.seqlen_q = 65;
  c.seqlen_kv = 70;
  auto inputs = spec::MakeInputs(spec::Spec{}, c, {}, seed);
  if (!inputs.ok()) return Rejection{"CuIR interpreter", std::string(inputs.status().message()), true};
  auto out = interp::Interpret(p, c, *inputs);
  if (!out.ok()) return Rejection{"CuIR interpreter", std::string(out.status().message())};
  return std::nullopt;
}

std::optional<Rejection> CompareOnGpu(const cuir::Program& p, KernelComparator& gpu,
                                      uint64_t seed, json* report) {
  auto r = gpu.Compare(p, seed);
  if (!r.ok()) return Rejection{kGpuStage, std::string(r.status().message()), true};
  if (!r->contains("verification")) {
    // The comparison did not run: the user's kernel failed, whatever the program says.
    return Rejection{kGpuStage,
                     absl::StrCat("the user's kernel could not be run: ",
                                  r->value("error", std::string("no report"))),
                     true};
  }
  if (!r->value("passed", false)) {
    return Rejection{kGpuStage,
                     absl::StrCat("Your program, interpreted with kernel numerics, and the user's "
                                  "kernel on ", gpu.device(), " were given the same random inputs. "
                                  "Per shape: elements out of tolerance and the worst mismatches "
                                  "at [batch, head, row, dim] for O and [batch, head, row] for "
                                  "LSE (yours vs the kernel's):\n",
                                  r->value("failure", std::string("(no detail)")))};
  }
  *report = *std::move(r);
  return std::nullopt;
}

}  // namespace

LiftOutcome LiftWithModel(const LlmSettings& settings, const LiftRequest& r) {
  LiftOutcome out;
  const std::string task = "lift: llm";
  auto fail = [&](absl::Status s) {
    out.status = absl::Status(s.code(), absl::StrCat(task, " (", r.kernel_path, "): ", s.message()));
    return out;
  };
  if (auto s = cuir::ValidateConfig(r.config); !s.ok()) return fail(s);
  if (r.gpu != nullptr) {
    if (auto s = r.gpu->Prepare(); !s.ok()) return fail(s);
  }
  auto reference = CuirReference();
  if (!reference.ok()) return fail(reference.status());
  auto example = lower::LiftExpert("fa2_sm80");
  if (!example.ok()) return fail(example.status());

  Conversation c{task, LiftSystemPrompt(*reference), LiftSystemPromptForTranscript(*reference),
                 LiftPrompt(r.kernel_path, r.kernel_source, r.name, example->base, r.config),
                 r.progress};
  cuir::Program accepted;
  json gpu_report;
  int cpu_only_round = 0;
  ConversationResult talk = Converse(settings, c, [&](const std::string& reply, int round)
                                                      -> std::optional<Rejection> {
    Rejection why;
    auto parsed = ReadProposal(reply, &why);
    if (!parsed.ok()) return why;
    if (auto no = CheckContract(*parsed, r.name)) return no;
    const uint64_t seed = r.seed + 1000 * static_cast<uint64_t>(round);
    if (auto no = DryRun(*parsed, r.config, seed)) return no;
    if (r.gpu == nullptr) {
      cpu_only_round = round;
      return Rejection{"GPU check", "there is no GPU to compare with the kernel (CPU checks only)",
                       true};
    }
    if (auto no = CompareOnGpu(*parsed, *r.gpu, seed, &gpu_report)) return no;
    accepted = *std::move(parsed);
    return std::nullopt;
  });
  out.transcript = std::move(talk.transcript);
  out.usage = std::move(talk.usage);
  if (cpu_only_round > 0) {
    out.status = absl::FailedPreconditionError(absl::StrFormat(
        "%s (%s): the proposal of round %d passed the CPU checks (parser, validator, lift "
        "contract, interpreter) but is not accepted: only a comparison with the compiled kernel "
        "on a GPU accepts a lifted program; run on a machine with a GPU",
        task, r.kernel_path, cpu_only_round));
    return out;
  }
  if (!talk.status.ok()) {
    out.status = talk.status;
    return out;
  }
  out.status = absl::OkStatus();
  out.program = std::move(accepted);
  out.gpu_check = std::move(gpu_report);
  out.accepted_round = talk.accepted_round;
  out.checks = {"parsed and validated", absl::StrCat("lift contract: expert \"", r.name, "\", no buffers"),
                "interpreted on the CPU",
                absl::StrCat("agrees with the kernel on ", r.gpu->device(), ": ",
                             out.gpu_check.value("summary", std::string("passed")))};
  return out;
}

json LiftReport(const LiftRequest& r, const LiftOutcome& o, const std::string& device) {
  json checks = json::array();
  for (const auto& c : o.checks) checks.push_back(c);
  return {{"kernel", r.kernel_path},
          {"name", r.name},
          {"config", pipeline::ConfigJson(r.config)},
          {"device", device},
          {"accepted_round", o.accepted_round},
          {"checks", checks},
          {"gpu_check", o.gpu_check},
          {"llm", o.usage}};
}

}  // namespace cubridge::propose
