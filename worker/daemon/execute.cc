#include "worker/daemon/execute.h"

#include <chrono>
#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cuir/experts/expert.h"
#include "cuir/ir/program.h"
#include "cuir/lower/lift.h"
#include "cuir/pipeline/backward.h"
#include "cuir/pipeline/candidates.h"
#include "cuir/pipeline/proposer.h"
#include "cuir/pipeline/stages.h"
#include "cuir/propose/llm_lifter.h"
#include "cuir/propose/llm_proposer.h"
#include "service/contract/task_contract.h"
#include "service/contract/task_messages.h"
#include "worker/gpu/autotune.h"
#include "worker/gpu/module.h"
#include "worker/gpu/nvrtc.h"
#include "worker/gpu/user_kernel.h"

namespace cubridge::workerd {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

class Clock {
 public:
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// Stage failures keep their code (INVALID_ARGUMENT for a bad spec, ...) and name the stage.
absl::Status In(const std::string& stage, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(stage, ": ", s.message()));
}

// Everything a GPU check needs, rebuilt from the task's spec input.
struct GpuJob {
  contract::SpecInput input;
  std::string spec_path;  // the spec written to the work folder: the runner child reads it
  lower::Arch arch;
  std::map<std::string, spec::BufferSource> buffers;
};

absl::StatusOr<GpuJob> PrepareGpu(const v1::SpecInput& spec, const std::string& arch_name,
                                  const contract::TensorLookup& tensors, const ExecuteOptions& o) {
  auto input = contract::SpecInputFromProto(spec, tensors);
  if (!input.ok()) return input.status();
  auto arch = lower::ParseArch(arch_name);
  if (!arch.ok()) return arch.status();
  auto buffers = input->BufferSources();
  if (!buffers.ok()) return buffers.status();
  GpuJob g{*input, (fs::path(o.work_dir) / fs::path(input->file_name).filename()).string(), *arch,
           *std::move(buffers)};
  std::ofstream out(g.spec_path);
  out << input->source;
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", g.spec_path));
  return g;
}

pipeline::GpuStageInput GpuInput(const GpuJob& g, const cuir::Program& program,
                                 const cuir::Program& base,
                                 const std::function<void(const std::string&)>& progress) {
  pipeline::GpuStageInput in{program, base, g.spec_path, g.input.params, g.buffers,
                             g.input.config, g.arch, g.input.seed, {}, progress};
  return in;
}

gpu::AutotuneOptions TunerOptions(const ExecuteOptions& o) {
  gpu::AutotuneOptions t;
  t.isolate.timeout_seconds = o.gpu_timeout_seconds;
  t.work_root = (fs::path(o.work_dir) / "gpu").string();
  return t;
}

// Only workers that registered an endpoint lease work that needs a model; another may still have
// one, so a worker without is UNAVAILABLE (retried elsewhere).
absl::StatusOr<propose::LlmSettings> LlmSettingsOf(const ExecuteOptions& o, const std::string& who) {
  if (!o.llm) {
    return absl::UnavailableError(absl::StrCat(
        who, " needs an LLM endpoint and this worker has none (start cubridge-worker with "
        "--llm-endpoint and --llm-model)"));
  }
  auto resolved = propose::ResolveLlmSettings(*o.llm);
  if (!resolved.ok()) return In(who, resolved.status());
  return resolved;
}

// The job's proposer (rules, llm or hybrid: pipeline::Proposer) proposes the program and the CPU
// verifier accepts or rejects it; whoever proposed it, a mismatch is not retried.
absl::StatusOr<v1::TransferResult> RunTransfer(const v1::TransferPayload& payload,
                                               const contract::TensorLookup& tensors,
                                               const ExecuteOptions& o,
                                               const std::function<void(const std::string&)>& progress,
                                               v1::TaskResult* partial) {
  Clock clock;
  auto input = contract::SpecInputFromProto(payload.spec(), tensors);
  if (!input.ok()) return input.status();
  const std::string name = payload.proposer().empty() ? contract::kDefaultProposer : payload.proposer();
  if (auto s = pipeline::CheckProposerName(name); !s.ok()) return In("transfer", s);
  std::string detail;
  auto buffers = input->BufferSources();
  if (!buffers.ok()) return In("spec", buffers.status());
  auto dtypes = spec::BufferDTypesOf(*buffers);
  if (!dtypes.ok()) return In("spec", dtypes.status());
  auto spec = pipeline::SpecStage(spec::LoadSpecSource(input->source, input->file_name, *dtypes),
                                  input->params, &detail);
  if (!spec.ok()) return In("spec", spec.status());
  auto base = pipeline::LiftStage(lower::Arch::kSm80, &detail);
  if (!base.ok()) return In("lift", base.status());
  propose::LlmSettings settings;
  if (name != contract::kDefaultProposer) {
    auto resolved = LlmSettingsOf(o, absl::StrCat("transfer: the ", name, " proposer"));
    if (!resolved.ok()) return resolved.status();
    settings = *std::move(resolved);
  }
  auto proposer = propose::MakeProposer(name, settings);
  if (!proposer.ok()) return In("transfer", proposer.status());
  // The transfer task is shared by jobs for any arch, so a model's program must lower for every
  // arch a worker can serve; a lowering error goes back to the model like any other rejection.
  const pipeline::ProposeRequest request{*base,       *spec, input->config, *buffers,
                                         input->seed, {},    {lower::Arch::kSm80, lower::Arch::kSm90},
                                         progress};
  pipeline::Proposal p = (*proposer)->Propose(request);
  v1::TransferResult result;
  result.set_proposer(p.proposer.empty() ? name : p.proposer);
  *result.mutable_transcript() = contract::ToList(p.transcript);
  *result.mutable_llm_usage() = contract::UsageToProto(p.llm_usage);
  result.set_transfer_detail(p.transfer_detail);
  result.set_transfer_seconds(p.transfer_seconds);
  result.set_detail(p.transfer_detail);
  result.set_seconds(clock.Seconds());
  if (!p.status.ok()) {
    if (partial != nullptr) *partial->mutable_transfer() = result;
    // A mismatch is a fact about this spec and this program, not bad luck: no retry.
    if (p.failed_stage == pipeline::Proposal::Stage::kVerify) {
      return absl::FailedPreconditionError(p.status.message());
    }
    return p.status;  // "transfer: ..." with its own code (a spent budget is not retried)
  }
  result.set_program(cuir::PrintProgram(p.transfer.program));
  *result.mutable_transfer() = contract::ToList(pipeline::AppliedRulesJson(p.transfer));
  *result.mutable_verification() = contract::ToStruct(p.verification.ToJson());
  result.set_verify_detail(p.verify_detail);
  result.set_verify_seconds(p.verify_seconds);
  return result;
}

absl::StatusOr<v1::LiftResult> RunLift(const v1::LiftPayload& payload,
                                       const contract::TensorLookup& tensors, const ExecuteOptions& o,
                                       const std::function<void(const std::string&)>& progress) {
  Clock clock;
  auto arch = lower::ParseArch(payload.arch());
  if (!arch.ok()) return arch.status();
  std::string detail;
  auto base = pipeline::LiftStage(*arch, &detail);
  if (!base.ok()) return In("lift", base.status());
  v1::LiftResult result;
  result.set_expert(pipeline::ExpertFor(*arch));
  if (payload.level() == v1::VERIFICATION_LEVEL_GPU) {
    auto g = PrepareGpu(payload.spec(), payload.arch(), tensors, o);
    if (!g.ok()) return g.status();
    gpu::GpuAutotuner tuner(TunerOptions(o));
    auto device = tuner.Probe(*arch);
    if (!device.ok()) return absl::UnavailableError(absl::StrCat("lift: ", device.status().message()));
    progress(absl::StrCat("lift check on ", *device, ": compiling the expert from its base CuIR"));
    auto check = tuner.LiftCheck(GpuInput(*g, *base, *base, progress));
    if (!check.ok()) return In("lift", check.status());
    if (!check->value("passed", false)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "lift: the expert kernel and its base CuIR disagree on ", *device, ": ",
          check->value("error", check->value("failure", std::string("see the report")))));
    }
    *result.mutable_gpu() = contract::ToStruct(*check);
    detail += absl::StrCat("; on ", *device, " the compiled expert and the interpreted base agree");
  }
  result.set_detail(detail);
  result.set_seconds(clock.Seconds());
  return result;
}

// A user's kernel lifted by the model: proposals checked on this worker's GPU against the
// compiled kernel (worker/gpu/user_kernel.h). The transcript comes back also on failure.
absl::StatusOr<v1::LiftLlmResult> RunLiftLlm(const v1::LiftLlmPayload& payload,
                                             const contract::TensorLookup& tensors,
                                             const ExecuteOptions& o,
                                             const std::function<void(const std::string&)>& progress,
                                             v1::TaskResult* partial) {
  Clock clock;
  auto g = PrepareGpu(payload.spec(), payload.arch(), tensors, o);  // the kernel: the input file
  if (!g.ok()) return g.status();
  auto settings = LlmSettingsOf(o, "lift");
  if (!settings.ok()) return settings.status();
  auto kernel = gpu::LoadUserKernel(g->input.file_name, g->input.source);
  if (!kernel.ok()) return In("lift", kernel.status());
  gpu::GpuAutotuner tuner(TunerOptions(o));
  gpu::UserKernelComparator comparator(&tuner, *std::move(kernel), g->input.file_name,
                                       g->input.config, g->arch);
  propose::LiftRequest r;
  r.kernel_path = g->input.file_name;
  r.kernel_source = g->input.source;
  r.name = payload.kernel_name().empty() ? lower::KernelNameFromPath(g->input.file_name)
                                         : payload.kernel_name();
  r.config = g->input.config;
  r.seed = g->input.seed;
  r.gpu = &comparator;
  r.progress = progress;
  propose::LiftOutcome outcome = propose::LiftWithModel(*settings, r);
  v1::LiftLlmResult result;
  *result.mutable_transcript() = contract::ToList(outcome.transcript);
  *result.mutable_llm_usage() = contract::UsageToProto(outcome.usage);
  if (!outcome.status.ok()) {
    if (partial != nullptr) *partial->mutable_lift_llm() = result;
    return outcome.status;  // no GPU here is UNAVAILABLE: another worker of the arch may have one
  }
  result.set_program(absl::StrCat("# Lifted by CuBridge from ", r.kernel_path, " (round ",
                                  outcome.accepted_round, "); it agreed with the compiled kernel on ",
                                  comparator.device(), ".\n", cuir::PrintProgram(outcome.program)));
  *result.mutable_report() = contract::ToStruct(propose::LiftReport(r, outcome, comparator.device()));
  result.set_detail(absl::StrFormat("%s lifted as expert \"%s\": accepted at round %d, agrees with "
                                    "the kernel on %s", r.kernel_path, r.name,
                                    outcome.accepted_round, comparator.device()));
  result.set_seconds(clock.Seconds());
  return result;
}

// A candidate's compiled module as its result carries it to the kernel cache (server/core/flow.cc).
v1::ModuleImage ModuleOf(const std::string& file, const gpu::CompiledModule& m) {
  v1::ModuleImage out;
  out.set_file(file);
  out.set_image_base64(m.image);
  for (const auto& [expr, lowered] : m.symbols) (*out.mutable_symbols())[expr] = lowered;
  return out;
}

// The `ir` level: lowered and compiled for the arch with NVRTC (the GPU path's compiler), not run.
// The cubin goes with the result (base64, `module`), for the kernel cache: a GPU of the arch then
// loads the kernel without compiling it.
json CompileCheck(const lower::LoweredKernel& k, const cuir::AttentionConfig& config,
                  lower::Arch arch, const std::string& name, v1::ModuleImage* module) {
  gpu::CompileOptions copt;
  copt.arch = arch;
  const int dtype = config.dtype == cuir::DType::kBF16 ? 0 : 1;
  for (const auto& [role, expr] :
       gpu::EntryExpressions(k.device_entries, dtype, static_cast<int>(config.head_dim))) {
    copt.name_expressions.push_back(expr);
  }
  auto compiled = gpu::CompileWithNvrtc(k.cuda_source, name + ".cu", copt);
  if (!compiled.ok()) {
    return {{"passed", false}, {"error", absl::StrCat("compile: ", compiled.status().message())}};
  }
  *module = ModuleOf(gpu::ModuleFileName(arch == lower::Arch::kSm90 ? 90 : 80, compiled->ptx),
                     *compiled);
  return {{"passed", true},
          {"compiler", absl::StrCat("NVRTC ", gpu::NvrtcVersion())},
          {"compile_seconds", compiled->seconds},
          {"cubin_bytes", compiled->image.size()},
          {"entries", compiled->symbols.size()}};
}

// The transferred program on the arch's expert (pipeline::ExpertFor): the service transfers once
// per spec, from the sm_80 expert's base, and the Hopper expert's base differs from it only in
// its declarations (lower::Rebase).
absl::StatusOr<cuir::Program> OnExpertOf(const cuir::Program& program, lower::Arch arch) {
  const cuir::Stmt* decl = cuir::FindDecl(program, cuir::StmtKind::kExpert);
  const std::string target = pipeline::ExpertFor(arch);
  if (decl == nullptr || decl->name == target) return program;
  auto from = lower::LiftExpert(decl->name);
  if (!from.ok()) return from.status();
  auto to = lower::LiftExpert(target);
  if (!to.ok()) return to.status();
  return lower::Rebase(program, from->base, to->base);
}

absl::StatusOr<v1::CandidateResult> RunCandidate(
    const v1::CandidatePayload& payload, const contract::TensorLookup& tensors,
    const ExecuteOptions& o, const std::function<void(const std::string&)>& progress) {
  Clock clock;
  auto g = PrepareGpu(payload.spec(), payload.arch(), tensors, o);
  if (!g.ok()) return g.status();
  auto transferred = cuir::ParseProgram(payload.program(), "transferred.cuir");
  if (!transferred.ok()) return In("candidate", transferred.status());
  // The transfer is shared by every arch of a spec; each arch lowers from its own expert.
  auto program = OnExpertOf(*transferred, g->arch);
  if (!program.ok()) return In("candidate", program.status());
  auto tile = experts::ParseTile(payload.tile());
  if (!tile.ok()) return tile.status();
  auto tiled = experts::WithTile(*program, *tile);
  if (!tiled.ok()) return In("candidate", tiled.status());
  const std::string arch_name = lower::ArchName(g->arch);
  v1::CandidateResult result;
  result.set_tile(tile->Name());
  result.set_expert(pipeline::ExpertFor(g->arch));
  result.set_cuir(cuir::PrintProgram(*tiled));
  lower::LoweredKernel kernel;
  json check;
  if (payload.level() == v1::VERIFICATION_LEVEL_GPU) {
    gpu::GpuAutotuner tuner(TunerOptions(o));
    auto device = tuner.Probe(g->arch);
    if (!device.ok()) return absl::UnavailableError(absl::StrCat("candidate: ", device.status().message()));
    progress(absl::StrCat("candidate ", tile->Name(), ": compiling with NVRTC, then verifying and "
                          "profiling on ", *device));
    auto checked = tuner.CheckTile(GpuInput(*g, *program, *program, progress), *tile, &kernel);
    if (!checked.ok()) return In("candidate", checked.status());
    check = *checked;
    check["device"] = *device;
    if (auto m = tuner.ModuleOf(tile->Name())) *result.mutable_module() = ModuleOf(m->first, m->second);
    const double score = pipeline::CandidateScore(check);
    result.set_detail(
        score > 0 ? absl::StrFormat("%s on %s: verified, %.1f TFLOP/s on kept elements", tile->Name(),
                                    *device, score)
        : score == 0 ? absl::StrFormat("%s on %s: verified", tile->Name(), *device)
                     : absl::StrFormat("%s on %s: FAILED: %s", tile->Name(), *device,
                                       check.value("error", check.value("failure", std::string("?")))));
  } else {
    std::string detail;
    auto lowered = pipeline::LowerStage(*tiled, g->input.config, g->arch, &detail);
    if (!lowered.ok()) return In("lower", lowered.status());
    kernel = *lowered;
    check = CompileCheck(kernel, g->input.config, g->arch, tile->Name(), result.mutable_module());
    result.set_detail(
        check.value("passed", false)
            ? absl::StrFormat("%s lowered and compiled for %s with %s (%d-byte cubin); not run: "
                              "IR-level verification",
                              tile->Name(), arch_name, check.value("compiler", ""),
                              check.value("cubin_bytes", 0))
            : absl::StrFormat("%s for %s: %s", tile->Name(), arch_name, check.value("error", "")));
  }
  result.set_passed(check.value("passed", false));
  *result.mutable_check() = contract::ToStruct(check);
  result.set_kernel_cu(kernel.cuda_source);
  result.set_kernel_h(kernel.launcher_header);
  *result.mutable_lowering() = contract::ToStruct(pipeline::LoweringJson(kernel));
  result.set_seconds(clock.Seconds());
  return result;
}

// The spec's backward for the arch (cuir/pipeline/backward.h), at the gpu level with its tiles
// checked and profiled on this worker's GPU (GpuAutotuner::TuneBackward). What the pipeline
// cannot make, or what no tile makes right on the GPU, is a result with the reason, not a
// failure: the job serves the forward regardless, as adapt's --backward auto does; a spec that
// does not load, or a GPU that cannot be used, fails the task.
absl::StatusOr<v1::BackwardResult> RunBackward(const v1::BackwardPayload& payload,
                                               const contract::TensorLookup& tensors,
                                               const ExecuteOptions& o,
                                               const std::function<void(const std::string&)>& progress) {
  Clock clock;
  auto input = contract::SpecInputFromProto(payload.spec(), tensors);
  if (!input.ok()) return input.status();
  auto arch = lower::ParseArch(payload.arch());
  if (!arch.ok()) return arch.status();
  auto buffers = input->BufferSources();
  if (!buffers.ok()) return In("spec", buffers.status());
  auto dtypes = spec::BufferDTypesOf(*buffers);
  if (!dtypes.ok()) return In("spec", dtypes.status());
  std::string detail;
  auto spec = pipeline::SpecStage(spec::LoadSpecSource(input->source, input->file_name, *dtypes),
                                  input->params, &detail);
  if (!spec.ok()) return In("spec", spec.status());
  progress(absl::StrCat("backward for ", payload.arch()));
  v1::BackwardResult result;
  auto built = pipeline::BuildBackward(*spec, input->config, *buffers, *arch, input->seed, {},
                                       &detail);
  if (built.ok() && payload.level() == v1::VERIFICATION_LEVEL_GPU) {
    auto g = PrepareGpu(payload.spec(), payload.arch(), tensors, o);
    if (!g.ok()) return g.status();
    gpu::GpuAutotuner tuner(TunerOptions(o));
    auto device = tuner.Probe(*arch);
    if (!device.ok()) {
      return absl::UnavailableError(absl::StrCat("backward: ", device.status().message()));
    }
    progress(absl::StrCat("backward on ", *device, ": each tile compiled with NVRTC, checked "
                          "against the spec's gradients and profiled"));
    const cuir::Program& program = built->transfer.program;
    auto tuned = tuner.TuneBackward(GpuInput(*g, program, program, progress), program,
                                    built->grad_buffers,
                                    pipeline::BackwardTiles(built->expert, input->config));
    if (tuned.ok()) {
      if (auto s = built->TakeGpuResult(tuned->kernel, tuned->report); !s.ok()) {
        return In("backward", s);
      }
      absl::StrAppend(&detail, "; ", tuned->summary);
    } else if (absl::IsFailedPrecondition(tuned.status())) {
      built = tuned.status();  // no tile matched the gradients: no backward kernel, and why
    } else {
      return In("backward", tuned.status());
    }
  }
  if (built.ok()) {
    result.set_available(true);
    result.set_detail(detail);
    auto files = built->Files();
    result.set_cuir(files["kernel_bwd.cuir"]);
    result.set_kernel_cu(files["kernel_bwd.cu"]);
    result.set_kernel_h(files["kernel_bwd.h"]);
    *result.mutable_report() = contract::ToStruct(built->ToJson());
  } else {
    const std::string reason(built.status().message());
    result.set_detail(absl::StrCat("no backward kernel: ", reason));
    *result.mutable_report() = contract::ToStruct(pipeline::BackwardUnavailableJson(reason));
  }
  result.set_seconds(clock.Seconds());
  return result;
}

}  // namespace

absl::StatusOr<v1::TaskResult> ExecuteTask(const v1::Task& task, const ExecuteOptions& o,
                                           const std::function<void(const std::string&)>& progress,
                                           v1::TaskResult* partial_result) {
  const contract::TensorLookup tensors = [&](const std::string& digest) -> const std::string* {
    auto it = task.tensor_data().find(digest);
    return it == task.tensor_data().end() ? nullptr : &it->second;
  };
  const v1::TaskPayload& p = task.payload();
  v1::TaskResult out;
  // The kind's result into its member of `out`, or the kind's failure.
  auto into = [&](auto result, auto* member) -> absl::StatusOr<v1::TaskResult> {
    if (!result.ok()) return result.status();
    *member = *std::move(result);
    return out;
  };
  switch (p.kind_case()) {
    case v1::TaskPayload::kTransfer:
      return into(RunTransfer(p.transfer(), tensors, o, progress, partial_result),
                  out.mutable_transfer());
    case v1::TaskPayload::kLift:
      return into(RunLift(p.lift(), tensors, o, progress), out.mutable_lift());
    case v1::TaskPayload::kCandidate:
      return into(RunCandidate(p.candidate(), tensors, o, progress), out.mutable_candidate());
    case v1::TaskPayload::kLiftLlm:
      return into(RunLiftLlm(p.lift_llm(), tensors, o, progress, partial_result),
                  out.mutable_lift_llm());
    case v1::TaskPayload::kBackward:
      return into(RunBackward(p.backward(), tensors, o, progress), out.mutable_backward());
    case v1::TaskPayload::KIND_NOT_SET: break;
  }
  return absl::FailedPreconditionError(
      "the task came without a payload of its kind: the coordinator is older than this worker "
      "(its tasks carried JSON payloads; run workers and coordinator of one release)");
}

v1::FailureClass Classify(const std::string& kind, const absl::Status& s) {
  switch (s.code()) {
    // The input as given cannot succeed anywhere: a bad spec, buffer or program, a mismatch with
    // the oracle, a model's budget spent.
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kResourceExhausted:
      return kind == contract::kCandidateTask ? v1::FAILURE_CLASS_CANDIDATE : v1::FAILURE_CLASS_SPEC;
    // Everything else is about this machine or its surroundings (no GPU, an unwritable folder, a
    // child that died): another worker may well succeed.
    default:
      return v1::FAILURE_CLASS_INFRASTRUCTURE;
  }
}

}  // namespace cubridge::workerd
