#include "cuir/pipeline/adapt.h"

#include <chrono>
#include <cstdlib>
#include <optional>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cuir/lower/expert.h"
#include "cuir/lower/lift.h"
#include "cuir/files/files.h"
#include "cuir/pipeline/report.h"
#include "cuir/pipeline/stages.h"
#include "cuir/spec/spec.h"
#include "cuir/transfer/transfer.h"


namespace cubridge::pipeline {
namespace {

const char* const kOutputs[] = {"kernel.cuir", "kernel.cu", "kernel.h", "report.json"};

// Times one stage, reports it, and prefixes failures with the stage's name.
class StageRunner {
 public:
  explicit StageRunner(const AdaptOptions& o, nlohmann::json* stages) : o_(o), stages_(stages) {}

  template <typename F>
  auto Run(const std::string& stage, F&& body) -> decltype(body(std::declval<std::string*>())) {
    const auto start = std::chrono::steady_clock::now();
    std::string detail;
    auto result = body(&detail);
    StageEvent ev{stage, result.ok(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                  result.ok() ? detail : std::string(result.status().message())};
    stages_->push_back({{"stage", stage}, {"ok", ev.ok}, {"seconds", ev.seconds},
                        {"detail", ev.detail}});
    if (o_.on_stage) o_.on_stage(ev);
    if (!result.ok()) {
      return absl::Status(result.status().code(),
                          absl::StrFormat("%s: %s", stage, result.status().message()));
    }
    return result;
  }

 private:
  const AdaptOptions& o_;
  nlohmann::json* stages_;
};

}  // namespace

std::string DefaultCacheDir() {
  if (const char* d = std::getenv("CUBRIDGE_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/cubridge";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/cubridge";
  return ".cubridge-cache";
}

std::string ExpertsDir() { return lower::ExpertsDir(); }

absl::StatusOr<AdaptResult> Adapt(const AdaptOptions& o) {
  if (o.out_dir.empty()) {
    return absl::InvalidArgumentError("an output directory is required (--out DIR)");
  }
  if (auto s = cuir::ValidateConfig(o.config); !s.ok()) return s;

  AdaptResult result;
  nlohmann::json stages = nlohmann::json::array();
  StageRunner stage(o, &stages);

  auto spec = stage.Run("spec", [&](std::string* d) -> absl::StatusOr<spec::Spec> {
    auto dtypes = spec::BufferDTypesOf(o.buffers);
    if (!dtypes.ok()) return dtypes.status();
    auto spec = SpecStage(spec::LoadSpecFile(o.spec_path, *dtypes), o.param_overrides, d);
    // The job's tensors must fit its shape even where a cached kernel serves it.
    if (spec.ok()) {
      if (auto s = spec::CheckBufferSources(*spec, o.config, o.buffers); !s.ok()) return s;
    }
    return spec;
  });
  if (!spec.ok()) return spec.status();
  result.spec_hash = spec::SpecHash(*spec, o.config, transfer::RulesetVersion());

  const std::string arch = lower::ArchName(o.arch);

  // A GPU here means kernels are verified and profiled on it; a cached kernel that was checked on
  // the CPU only is then not good enough and is redone.
  std::optional<std::string> gpu_here;
  std::string gpu_absent = "no GPU stage configured";
  if (o.gpu_mode != GpuMode::kOff && o.gpu != nullptr) {
    auto probe = o.gpu->Probe(o.arch);
    if (probe.ok()) gpu_here = *probe;
    else gpu_absent = std::string(probe.status().message());
  }
  if (o.gpu_mode == GpuMode::kRequire && !gpu_here) {
    return absl::FailedPreconditionError(
        absl::StrCat("gpu: a GPU was required (--gpu require) but none is usable: ", gpu_absent));
  }

  // A kernel tuned on a GPU is the fastest for its shape class only; CPU-verified kernels do not
  // depend on the shape.
  // A pinned tile is its own kernel.
  std::string pinned;
  for (const auto& [name, value] : o.kernel_params) absl::StrAppend(&pinned, "-", name, value);
  const std::string cache_dir =
      (o.cache_dir.empty() ? DefaultCacheDir() : o.cache_dir) + "/" + result.spec_hash + "/" + arch +
      (gpu_here ? "/" + o.gpu->ShapeClass(o.config) : "") + (pinned.empty() ? "" : "/params" + pinned);

  if (o.use_cache) {
    auto cached = stage.Run("cache", [&](std::string* detail)
                                         -> absl::StatusOr<std::optional<std::map<std::string, std::string>>> {
      auto files = cubridge::files::ReadDir(cache_dir);
      bool complete = files.has_value();
      for (const char* name : kOutputs) complete = complete && files->count(name);
      // A kernel cached by a forward-only job is redone for a job that wants the backward.
      if (complete && o.backward != BackwardMode::kOff) {
        auto cached_report = nlohmann::json::parse((*files)["report.json"], nullptr, false);
        const bool known = cached_report.is_object() && cached_report.contains("backward");
        const bool has = known && cached_report["backward"].value("available", false);
        complete = o.backward == BackwardMode::kRequire ? has : known;
        for (const char* name : kBackwardFiles) complete = complete && (!has || files->count(name));
      }
      *detail = complete ? absl::StrFormat("hit %s/%s (%s)", result.spec_hash.substr(0, 16), arch,
                                           cache_dir)
                         : absl::StrFormat("miss %s/%s", result.spec_hash.substr(0, 16), arch);
      return complete ? files : std::nullopt;
    });
    if (!cached.ok()) return cached.status();
    if (cached->has_value()) {
      auto files = **cached;
      auto report = nlohmann::json::parse(files["report.json"], nullptr, false);
      const bool gpu_checked = !report.is_discarded() &&
                               report.value("verification_level", "") == "gpu";
      if (!report.is_discarded() && (gpu_checked || !gpu_here)) {
        // The kernel may have been made for a spec that names its tensors otherwise: the
        // report handed out names them as this one does.
        if (auto s = BindBuffers(&report, spec::CanonicalBufferNames(*spec)); !s.ok()) return s;
        report["cache_hit"] = true;
        files["report.json"] = report.dump(2) + "\n";
        if (auto s = cubridge::files::PublishFiles(o.out_dir, files); !s.ok()) return s;
        result.cache_hit = true;
        result.report = report;
        return result;
      }
    }
  }

  auto base = stage.Run("lift", [&](std::string* d) -> absl::StatusOr<cuir::Program> {
    auto lifted = LiftStage(o.arch, d);
    if (!lifted.ok() || o.kernel_params.empty()) return lifted;
    for (const auto& [name, value] : o.kernel_params) absl::StrAppend(d, ", ", name, " = ", value);
    return cuir::WithParams(*lifted, o.kernel_params);
  });
  if (!base.ok()) return base.status();

  const uint64_t seed = o.seed ? o.seed : FreshSeed();
  RulesProposer rules;
  Proposer* proposer = o.proposer != nullptr ? o.proposer : &rules;
  ProposeRequest request{*base, *spec, o.config, o.buffers, seed, o.verify, {o.arch}, nullptr};
  request.progress = [&](const std::string& line) {
    if (o.on_stage) o.on_stage({"transfer", true, 0, line});
  };
  Proposal proposal = proposer->Propose(request);
  if (o.transcript != nullptr) *o.transcript = proposal.transcript;
  // The proposer ran transfer and verification together (an LLM's rounds interleave them); they
  // are still reported as two stages.
  const bool transferred =
      proposal.status.ok() || proposal.failed_stage == Proposal::Stage::kVerify;
  const auto report_stage = [&](const std::string& name, bool ok, double seconds,
                                const std::string& detail) {
    StageEvent ev{name, ok, seconds, detail};
    stages.push_back({{"stage", name}, {"ok", ok}, {"seconds", seconds}, {"detail", detail}});
    if (o.on_stage) o.on_stage(ev);
  };
  const std::string failure(proposal.status.message());
  report_stage("transfer", transferred, proposal.transfer_seconds,
               transferred ? proposal.transfer_detail : failure);
  if (!transferred) return proposal.status;
  report_stage("verify", proposal.status.ok(), proposal.verify_seconds,
               proposal.status.ok() ? proposal.verify_detail : failure);
  if (!proposal.status.ok()) return proposal.status;
  const cuir::Program& program = proposal.transfer.program;

  auto lowered = stage.Run(
      "lower", [&](std::string* d) { return LowerStage(program, o.config, o.arch, d); });
  if (!lowered.ok()) return lowered.status();

  // The GPU stages' input: the transferred program, the job, and progress lines as `stage`'s.
  auto gpu_input = [&](const char* stage) {
    GpuStageInput in{program, *base, o.spec_path, o.param_overrides, o.buffers,
                     o.config, o.arch, seed, o.verify, nullptr};
    in.progress = [&o, stage](const std::string& line) {
      if (o.on_stage) o.on_stage({stage, true, 0, line});
    };
    return in;
  };
  nlohmann::json gpu_report = {{"skipped", gpu_absent}};
  std::map<std::string, std::string> gpu_files;
  if (gpu_here) {
    auto gpu = stage.Run("gpu", [&](std::string* detail) -> absl::StatusOr<GpuStageOutput> {
      auto r = o.gpu->Run(gpu_input("gpu"));
      if (!r.ok()) return r.status();
      *detail = r->summary;
      return r;
    });
    if (!gpu.ok()) return gpu.status();
    *lowered = gpu->kernel;
    gpu_report = gpu->report;
    gpu_files = gpu->files;
  }

  // The backward: its own expert, transfer, verification and lowering. kAuto keeps the forward
  // when it cannot be made and says why in the report.
  nlohmann::json backward_report;
  std::map<std::string, std::string> backward_files;
  if (o.backward != BackwardMode::kOff) {
    auto backward = stage.Run("backward", [&](std::string* d) {
      return BuildBackward(*spec, o.config, o.buffers, o.arch, seed, o.verify, d);
    });
    // With a GPU, the backward's tiles are checked on it as the forward's candidates are (in a
    // runner child, against the spec's float64 autograd) and profiled; the fastest is kept. No
    // tile passing there means no backward kernel.
    if (backward.ok() && gpu_here) {
      auto tuned = stage.Run("backward-gpu", [&](std::string* d) -> absl::StatusOr<GpuStageOutput> {
        auto r = o.gpu->TuneBackward(gpu_input("backward-gpu"), backward->transfer.program,
                                     backward->grad_buffers,
                                     BackwardTiles(backward->expert, o.config));
        if (r.ok()) *d = r->summary;
        return r;
      });
      if (tuned.ok()) {
        auto taken = backward->TakeGpuResult(tuned->kernel, tuned->report);
        if (!taken.ok()) return taken;
      } else if (absl::IsFailedPrecondition(tuned.status())) {
        backward = tuned.status();  // no tile matched the gradients: no backward kernel, and why
      } else {
        return tuned.status();  // the GPU stage itself failed, as the forward's stage would
      }
    }
    if (backward.ok()) {
      backward_report = backward->ToJson();
      backward_files = backward->Files();
    } else if (o.backward == BackwardMode::kRequire) {
      return backward.status();
    } else {
      backward_report = BackwardUnavailableJson(std::string(backward.status().message()));
    }
  }

  KernelReport account;
  account.spec = o.spec_path;
  account.spec_hash = result.spec_hash;
  account.canonical_form = spec::CanonicalForm(*spec, o.config, transfer::RulesetVersion());
  account.ruleset = transfer::RulesetVersion();
  account.arch = arch;
  account.expert = ExpertFor(o.arch);
  account.config = ConfigJson(o.config);
  account.proposer = proposal.proposer;
  account.transfer = AppliedRulesJson(proposal.transfer);
  account.verification = proposal.verification.ToJson();
  account.verification_level = gpu_here ? "gpu" : "ir";
  account.lowering = LoweringJson(*lowered);
  account.gpu = gpu_report;
  account.llm = proposal.llm_usage;
  account.stages = stages;
  account.canonical_buffers = spec::CanonicalBufferNames(*spec);
  nlohmann::json report = account.ToJson();
  if (!backward_report.is_null()) report["backward"] = backward_report;
  std::map<std::string, std::string> files = {
      {"kernel.cuir", cuir::PrintProgram(program)},
      {"kernel.cu", lowered->cuda_source},
      {"kernel.h", lowered->launcher_header},
      {"report.json", report.dump(2) + "\n"},
  };
  if (!proposal.transcript.empty()) files["transcript.json"] = proposal.transcript.dump(2) + "\n";
  files.insert(gpu_files.begin(), gpu_files.end());
  files.insert(backward_files.begin(), backward_files.end());

  auto written = stage.Run("write", [&](std::string* detail) -> absl::StatusOr<bool> {
    if (auto s = cubridge::files::PublishFiles(o.out_dir, files); !s.ok()) return s;
    *detail = absl::StrFormat("%s/{kernel.cuir, kernel.cu, kernel.h, report.json%s}", o.out_dir,
                              backward_files.empty() ? "" : ", kernel_bwd.{cuir,cu,h}");
    // The cache only ever holds verified kernels; a cache write failure is not the user's
    // failure, the outputs are already in place.
    if (o.use_cache && !cubridge::files::PublishFiles(cache_dir, files).ok()) *detail += " (cache not writable)";
    return true;
  });
  if (!written.ok()) return written.status();
  result.report = std::move(report);
  return result;
}

}  // namespace cubridge::pipeline
