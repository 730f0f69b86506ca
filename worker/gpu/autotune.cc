#include "worker/gpu/autotune.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cuir/files/files.h"
#include "cuir/pipeline/candidates.h"
#include "cuir/pipeline/stages.h"
#include "worker/gpu/module.h"
#include "worker/gpu/nvrtc.h"

namespace cubridge::gpu {
namespace {

namespace fs = std::filesystem;

int ArchNumber(lower::Arch arch) { return arch == lower::Arch::kSm90 ? 90 : 80; }

int BufferCount(const cuir::Program& p) {
  int n = 0;
  for (const cuir::Stmt& s : p.stmts) n += s.kind == cuir::StmtKind::kBuffer;
  return n;
}

std::vector<std::string> BufferOrder(const cuir::Program& p) {
  std::vector<std::string> out;
  for (const cuir::Stmt& s : p.stmts) {
    if (s.kind == cuir::StmtKind::kBuffer) out.push_back(s.name);
  }
  return out;
}

// One candidate's outcome as a progress line: its throughput, or why it failed; a profile taken
// while another process computed on the GPU (even after timing again) says so.
std::string CandidateLine(const nlohmann::json& cand) {
  if (!cand.value("passed", false)) {
    return "FAILED: " + cand.value("error", cand.value("failure", std::string("verification")));
  }
  if (!cand.contains("profile")) return "verified";
  const nlohmann::json& p = cand["profile"];
  return absl::StrFormat("verified, %.1f TFLOP/s on kept elements (%.3f ms)%s",
                         pipeline::CandidateScore(cand), p.value("median_ms", 0.0),
                         p.value("contended", false)
                             ? " (timed while another process computed on the GPU)"
                             : "");
}

// The stage's one line on its choice among `candidates` (best: its index).
std::string ChoiceSummary(const std::string& device, const nlohmann::json& candidates, int best,
                          const cuir::AttentionConfig& config) {
  const nlohmann::json& chosen = candidates[best];
  const std::string name = chosen.value("name", "?");
  if (!chosen.contains("profile")) {
    return absl::StrFormat("%s: %s verified (not profiled)", device, name);
  }
  return absl::StrFormat("%s: %s fastest of %d candidates, %.1f TFLOP/s on kept elements at %s",
                         device, name, static_cast<int>(candidates.size()),
                         pipeline::CandidateScore(chosen), config.ToString());
}

}  // namespace

GpuAutotuner::GpuAutotuner(AutotuneOptions options) : options_(std::move(options)) {}

// Scratch files (cubins, requests, child logs) go unless CUBRIDGE_KEEP_GPU_FILES asks to keep them.
GpuAutotuner::~GpuAutotuner() {
  const char* keep = std::getenv("CUBRIDGE_KEEP_GPU_FILES");
  if (own_work_root_ && (keep == nullptr || *keep == '\0')) {
    files::RemoveTree(options_.work_root);
  }
}

absl::StatusOr<std::string> GpuAutotuner::WorkDir(const std::string& name) {
  if (options_.work_root.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "cubridge-gpu-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) return absl::InternalError("cannot create a scratch folder");
    options_.work_root = tmpl;
    own_work_root_ = true;
  }
  const fs::path dir = fs::path(options_.work_root) / name;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  return dir.string();
}

absl::StatusOr<std::string> GpuAutotuner::Probe(lower::Arch arch) {
  if (!probe_.has_value()) {
    auto dir = WorkDir("probe");
    if (!dir.ok()) return dir.status();
    IsolateOptions iso = options_.isolate;
    iso.work_dir = *dir;
    iso.timeout_seconds = std::min(iso.timeout_seconds, 60.0);
    auto child = RunChild("probe", nlohmann::json(), iso);
    if (!child.ok()) {
      probe_ = child.status();
    } else if (!child->ok) {
      probe_ = absl::FailedPreconditionError(child->error);
    } else {
      device_ = child->result["device"];
      devices_ = child->result.value("devices", nlohmann::json::array());
      const std::string a = device_.value("arch", "sm_0");
      device_cc_ = std::atoi(a.c_str() + 3);
      probe_ = absl::StrCat(device_.value("name", "?"), " (", a, ")");
    }
  }
  if (!probe_->ok()) return probe_->status();
  if (device_cc_ < ArchNumber(arch)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the GPU here is ", **probe_, ", which cannot run ", lower::ArchName(arch), " kernels"));
  }
  return **probe_;
}

absl::StatusOr<nlohmann::json> GpuAutotuner::CheckCandidate(
    const pipeline::GpuStageInput& in, const lower::LoweredKernel& kernel,
    const cuir::Program& program, const std::string& name, const std::string& reference_program,
    bool profile, const std::vector<std::string>* grad_buffers) {
  nlohmann::json cand = {{"name", name}};
  // A kernel for an older arch than the GPU's is checked through PTX and the driver's JIT.
  const bool ptx = device_cc_ / 10 != ArchNumber(in.arch) / 10;
  CompileOptions copt;
  copt.arch = in.arch;
  copt.ptx = ptx;
  const int dtype = in.config.dtype == cuir::DType::kBF16 ? 0 : 1;
  const auto expressions =
      EntryExpressions(kernel.device_entries, dtype, static_cast<int>(in.config.head_dim));
  for (const auto& [role, expr] : expressions) copt.name_expressions.push_back(expr);
  auto compiled = CompileWithNvrtc(kernel.cuda_source, name + ".cu", copt);
  if (!compiled.ok()) {
    cand["passed"] = false;
    cand["error"] = absl::StrCat("compile: ", compiled.status().message());
    return cand;
  }
  cand["compile_seconds"] = compiled->seconds;
  compiled_[name] = *compiled;
  auto dir = WorkDir(name);
  if (!dir.ok()) return dir.status();
  const std::string image = (fs::path(*dir) / (ptx ? "module.ptx" : "module.cubin")).string();
  {
    std::ofstream out(image, std::ios::binary);
    out.write(compiled->image.data(), static_cast<std::streamsize>(compiled->image.size()));
  }
  RunRequest req;
  req.spec_path = in.spec_path;
  req.param_overrides = in.param_overrides;
  req.buffers = in.buffers;
  req.buffer_order = BufferOrder(program);
  req.config = in.config;
  req.config.softmax_scale = in.config.scale();
  req.verify = in.verify;
  req.seed = in.seed;
  req.image_path = image;
  req.ptx = ptx;
  for (const auto& [role, expr] : expressions) req.entries[role] = compiled->symbols.at(expr);
  req.profile = options_.profile;
  req.profile.enabled = profile && options_.profile.enabled;
  req.reference_program = reference_program;
  if (grad_buffers != nullptr) {
    req.backward = true;
    req.grad_buffers = *grad_buffers;
  }
  IsolateOptions iso = options_.isolate;
  iso.work_dir = *dir;
  auto child = RunChild("check", req.ToJson(), iso);
  if (!child.ok()) return child.status();
  cand["seconds"] = child->seconds;
  if (!child->ok) {
    cand["passed"] = false;
    cand["error"] = child->error;
    if (!child->stderr_tail.empty()) cand["stderr"] = child->stderr_tail;
    return cand;
  }
  for (const char* key : {"passed", "verification", "profile", "module", "summary", "failure",
                          "reference"}) {
    if (child->result.contains(key)) cand[key] = child->result[key];
  }
  return cand;
}

absl::StatusOr<nlohmann::json> GpuAutotuner::LiftCheck(const pipeline::GpuStageInput& in) {
  if (auto probe = Probe(in.arch); !probe.ok()) return probe.status();
  // The base program is plain MHA attention: check it on the job's shape with one KV head per
  // query head.
  pipeline::GpuStageInput base_in = in;
  base_in.config.heads_kv = base_in.config.heads_q;
  auto base_kernel = lower::Lower(in.base, base_in.config, in.arch);
  if (!base_kernel.ok()) return base_kernel.status();
  return CheckCandidate(base_in, *base_kernel, in.base, "lift-check", cuir::PrintProgram(in.base),
                        /*profile=*/false);
}

absl::StatusOr<pipeline::GpuStageOutput> GpuAutotuner::TuneBackward(
    const pipeline::GpuStageInput& in, const cuir::Program& program,
    const std::vector<std::string>& grad_buffers, const std::vector<TileConfig>& tiles) {
  auto probe = Probe(in.arch);
  if (!probe.ok()) return probe.status();
  nlohmann::json candidates = nlohmann::json::array();
  std::vector<lower::LoweredKernel> kernels;
  for (const TileConfig& t : tiles) {
    lower::LoweredKernel kernel;
    auto checked = CheckProgramTile(in, program, t, "backward-" + t.Name(), &grad_buffers, &kernel);
    if (!checked.ok()) return checked.status();
    const nlohmann::json& cand = *checked;
    kernels.push_back(std::move(kernel));
    if (in.progress) {
      in.progress(absl::StrFormat("backward candidate %s: %s", t.Name(), CandidateLine(cand)));
    }
    candidates.push_back(cand);
  }
  compiled_.clear();
  const int best = pipeline::BestCandidate(candidates);
  if (best < 0) {
    // A kernel that is wrong, not a failure of this side: FAILED_PRECONDITION (the service
    // then reports the backward unavailable instead of retrying the task).
    return absl::FailedPreconditionError(absl::StrCat(
        "no backward candidate matched the spec's gradients on ", *probe, " (", candidates.size(),
        " tried): ", candidates.dump(2).substr(0, 4000)));
  }
  pipeline::GpuStageOutput out;
  out.kernel = kernels[best];
  out.report = {{"device", device_},
                {"candidates", candidates},
                {"best", candidates[best]["name"]},
                {"best_tile", tiles[best].Name()}};
  out.summary = absl::StrCat(ChoiceSummary(*probe, candidates, best, in.config), "; ",
                             candidates[best].value("summary", ""));
  return out;
}

absl::StatusOr<nlohmann::json> GpuAutotuner::CheckTile(const pipeline::GpuStageInput& in,
                                                       const TileConfig& tile,
                                                       lower::LoweredKernel* kernel) {
  return CheckProgramTile(in, in.program, tile, tile.Name(), nullptr, kernel);
}

absl::StatusOr<nlohmann::json> GpuAutotuner::CheckProgramTile(
    const pipeline::GpuStageInput& in, const cuir::Program& program, const TileConfig& tile,
    const std::string& name, const std::vector<std::string>* grad_buffers,
    lower::LoweredKernel* kernel) {
  if (auto probe = Probe(in.arch); !probe.ok()) return probe.status();
  auto tiled = experts::WithTile(program, tile);
  absl::StatusOr<lower::LoweredKernel> lowered =
      tiled.ok() ? lower::Lower(*tiled, in.config, in.arch)
                 : absl::StatusOr<lower::LoweredKernel>(tiled.status());
  nlohmann::json cand;
  if (!lowered.ok()) {
    cand = {{"name", name}, {"passed", false},
            {"error", absl::StrCat("lower: ", lowered.status().message())}};
  } else {
    // A backward is checked against the spec's gradients, its own program giving the
    // interpreter's error scales; a forward against the oracle.
    auto checked = CheckCandidate(in, *lowered, *tiled, name,
                                  grad_buffers != nullptr ? cuir::PrintProgram(*tiled) : "",
                                  /*profile=*/true, grad_buffers);
    if (!checked.ok()) return checked.status();
    cand = *checked;
    *kernel = *std::move(lowered);
  }
  cand["tile"] = {{"BLOCK_M", tile.block_m}, {"BLOCK_N", tile.block_n}, {"WARPS", tile.warps}};
  return cand;
}

std::optional<std::pair<std::string, CompiledModule>> GpuAutotuner::ModuleOf(
    const std::string& name) const {
  auto m = compiled_.find(name);
  if (m == compiled_.end()) return std::nullopt;
  return std::pair{ModuleFileName(device_cc_, m->second.ptx), m->second};
}

absl::StatusOr<pipeline::GpuStageOutput> GpuAutotuner::Run(const pipeline::GpuStageInput& in) {
  auto probe = Probe(in.arch);
  if (!probe.ok()) return probe.status();
  if (BufferCount(in.program) > kMaxBuffers) {
    return absl::InvalidArgumentError("the program declares more buffers than the launcher ABI has");
  }
  nlohmann::json report = {{"device", device_},
                           {"nvrtc", NvrtcVersion()},
                           {"shape_class", experts::ShapeClass(in.config)},
                           {"arch", lower::ArchName(in.arch)}};
  auto say = [&](const std::string& line) {
    if (in.progress) in.progress(line);
  };

  if (options_.lift_check) {
    auto lift = LiftCheck(in);
    if (!lift.ok()) return lift.status();
    report["lift_check"] = *lift;
    say(absl::StrCat("lift check (base CuIR interpreted vs the compiled expert): ",
                     (*lift).value("passed", false) ? "agree" : "DISAGREE"));
    if (!(*lift).value("passed", false)) {
      return absl::InternalError(absl::StrCat(
          "lift check failed: the expert kernel and its base CuIR disagree on this GPU: ",
          (*lift).value("error", (*lift).value("failure", std::string("see the report")))));
    }
  }
  const std::vector<TileConfig> tiles =
      options_.tiles.empty() ? experts::CandidateTiles(in.config, in.arch) : options_.tiles;
  nlohmann::json candidates = nlohmann::json::array();
  std::vector<lower::LoweredKernel> kernels;
  compiled_.clear();
  for (const TileConfig& t : tiles) {
    lower::LoweredKernel kernel;
    auto checked = CheckTile(in, t, &kernel);
    if (!checked.ok()) return checked.status();
    const nlohmann::json& cand = *checked;
    say(absl::StrFormat("candidate %s: %s", t.Name(), CandidateLine(cand)));
    candidates.push_back(cand);
    kernels.push_back(std::move(kernel));
  }
  report["candidates"] = candidates;
  const int best = pipeline::BestCandidate(candidates);
  if (best < 0) {
    return absl::InternalError(absl::StrCat(
        "no candidate verified on ", *probe, " (", candidates.size(), " tried); see each one's error:\n",
        candidates.dump(2).substr(0, 4000)));
  }
  report["best"] = candidates[best]["name"];
  pipeline::GpuStageOutput out;
  out.kernel = kernels[best];
  out.report = report;
  if (auto m = ModuleOf(candidates[best]["name"].get<std::string>())) {
    out.files.merge(ModuleFiles(m->first, m->second));
  }
  compiled_.clear();
  out.summary = ChoiceSummary(*probe, candidates, best, in.config);
  return out;
}

}  // namespace cubridge::gpu
