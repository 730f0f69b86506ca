#include "client/cli/adapt_command.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "client/cli/config_flags.h"
#include "cuir/experts/expert.h"
#include "cuir/pipeline/adapt.h"
#include "cuir/propose/llm_flags.h"
#include "worker/gpu/autotune.h"

namespace cubridge::cli {
namespace {

using pipeline::AdaptOptions;
using pipeline::StageEvent;

struct AdaptFlags {
  AdaptOptions options;
  ConfigFlags config;
  bool local = false;
  bool json = false;
  bool no_cache = false;
  std::string arch = "sm_80";
  std::string gpu = "auto";
  std::string backward = "auto";
  double gpu_timeout = 120;
  std::vector<std::string> tiles;  // BMxBNwW[sSTAGES]
  std::string tile;                // BMxBNwW[sSTAGES]
  std::string proposer = "rules";
  propose::LlmFlags llm;
  std::string transcript_path;
};

void AddFlags(CLI::App* cmd, AdaptFlags& f) {
  // A flag given twice takes its last value, so scripts can append overrides.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->add_option("spec", f.options.spec_path, "Python file with mask_mod and/or score_mod")
      ->required();
  cmd->add_flag("--local", f.local, "Run the whole pipeline in this process (no service)");
  cmd->add_option("--out,-o", f.options.out_dir, "Output directory")->required();
  cmd->add_option("--arch", f.arch, "Target GPU architecture: sm_80 or sm_90");
  AddConfigFlags(cmd, f.config);
  cmd->add_option("--cache-dir", f.options.cache_dir, "Kernel cache directory");
  cmd->add_flag("--no-cache", f.no_cache, "Neither read nor write the kernel cache");
  cmd->add_option("--seed", f.options.seed, "Seed for the verification inputs (default: fresh)");
  cmd->add_flag("--json", f.json, "Print the report as JSON instead of stage lines");
  cmd->add_option("--gpu", f.gpu,
                  "auto: verify, profile and autotune on this machine's GPU when it has one; "
                  "require: fail without one; off: CPU verification only");
  cmd->add_option("--gpu-timeout", f.gpu_timeout,
                  "Seconds one candidate may run on the GPU before it is killed");
  cmd->add_option("--backward", f.backward,
                  "auto: also make the backward kernel (kernel_bwd.*) where the pipeline can, "
                  "saying why not in the report elsewhere; require: fail without one; off: "
                  "forward only");
  cmd->add_option("--tiles", f.tiles,
                  "Tile candidates to autotune, e.g. 128x64w4,64x64w4 (default: all that fit)")
      ->delimiter(',');
  cmd->add_option("--tile", f.tile,
                  "Lower at this tile instead of the expert's own, e.g. 128x176w12, or 128x128w12s2 "
                  "(two K/V stages): verified at it on the CPU, and the only candidate on a GPU");
  cmd->add_option("--proposer", f.proposer,
                  "Who proposes the transferred CuIR: rules (default), llm, or hybrid (rules first, "
                  "the LLM for what they do not cover); docs/llm.md");
  propose::AddLlmFlags(cmd, f.llm);
  cmd->add_option("--transcript", f.transcript_path,
                  "Write the LLM conversation here (JSON), whether the job succeeds or not; "
                  "`cubridge-cli transcript FILE` shows it");
}

int UsageError(const std::string& message) {
  std::cerr << "cubridge-cli adapt: " << message << "\n";
  return 2;
}

// Fills the options that need checking beyond what CLI11 parsed; a non-empty result is the
// usage error to print.
std::string ApplyFlags(AdaptFlags& f, cubridge::gpu::AutotuneOptions& tune) {
  auto& o = f.options;
  auto arch = lower::ParseArch(f.arch);
  if (!arch.ok()) return absl::StrCat("--arch: ", arch.status().message());
  o.arch = *arch;
  auto config = ResolveConfig(f.config);
  if (!config.ok()) return std::string(config.status().message());
  o.config = config->attention;
  for (const auto& [name, value] : config->params) o.param_overrides.push_back(name + "=" + value);
  for (const auto& [name, source] : config->buffers) o.buffers[name] = spec::BufferSource{source};
  o.use_cache = !f.no_cache;
  if (f.gpu == "auto" || f.gpu == "require" || f.gpu == "off") {
    o.gpu_mode = f.gpu == "auto"      ? pipeline::GpuMode::kAuto
                 : f.gpu == "require" ? pipeline::GpuMode::kRequire
                                      : pipeline::GpuMode::kOff;
  } else {
    return "--gpu must be auto, require or off, got '" + f.gpu + "'";
  }
  auto backward = pipeline::ParseBackwardMode(f.backward);
  if (!backward.ok()) return std::string(backward.status().message());
  o.backward = *backward;
  tune.isolate.timeout_seconds = f.gpu_timeout;
  for (const auto& t : f.tiles) {
    auto tile = cubridge::experts::ParseTile(t);
    if (!tile.ok()) return absl::StrCat("--tiles: ", tile.status().message());
    tune.tiles.push_back(*tile);
  }
  if (!f.tile.empty()) {
    if (!f.tiles.empty()) return "--tile pins one tile and --tiles lists candidates: pass one of them";
    auto tile = cubridge::experts::ParseTile(f.tile);
    if (!tile.ok()) return absl::StrCat("--tile: ", tile.status().message());
    if (auto fits = cubridge::experts::TileFits(*tile, o.config, o.arch); !fits.ok()) {
      return absl::StrCat("--tile: ", fits.message());
    }
    tune.tiles = {*tile};
    o.kernel_params = cubridge::experts::TileParams(*tile);
  }
  return "";
}

int RunAdapt(AdaptFlags& f) {
  if (!f.local) {
    return UsageError(
        "pass --local to run the pipeline in this process (jobs for a CuBridge service go "
        "through `cubridge-cli submit`)");
  }
  cubridge::gpu::AutotuneOptions tune;
  if (std::string error = ApplyFlags(f, tune); !error.empty()) return UsageError(error);
  auto& o = f.options;
  cubridge::gpu::GpuAutotuner autotuner(tune);
  o.gpu = &autotuner;
  if (auto s = pipeline::CheckProposerName(f.proposer); !s.ok()) return UsageError(std::string(s.message()));
  std::unique_ptr<pipeline::Proposer> proposer;
  if (f.proposer != "rules") {
    auto settings = propose::ResolveLlmSettings(f.llm);
    if (!settings.ok()) return UsageError(std::string(settings.status().message()));
    auto made = propose::MakeProposer(f.proposer, *settings);
    if (!made.ok()) return UsageError(std::string(made.status().message()));
    proposer = *std::move(made);
  }
  o.proposer = proposer.get();
  nlohmann::json transcript = nlohmann::json::array();
  o.transcript = &transcript;
  if (!f.json) {
    o.on_stage = [](const StageEvent& e) { PrintStageLine(e.stage, e.ok, e.seconds, e.detail); };
  }
  auto result = pipeline::Adapt(o);
  if (!f.transcript_path.empty() && !transcript.empty()) {
    std::ofstream out(f.transcript_path);
    out << transcript.dump(2) << "\n";
    if (!out) std::cerr << "cubridge-cli adapt: --transcript: cannot write " << f.transcript_path << "\n";
  }
  if (!result.ok()) {
    std::cerr << "cubridge-cli adapt: " << result.status().message() << "\n";
    if (f.transcript_path.empty() && !transcript.empty()) {
      std::cerr << "(pass --transcript FILE to keep the LLM conversation)\n";
    }
    return 1;
  }
  if (f.json) {
    std::cout << result->report.dump(2) << "\n";
  } else {
    std::printf("%s: spec %s for %s, outputs in %s\n", result->cache_hit ? "cache hit" : "adapted",
                result->spec_hash.c_str(), f.arch.c_str(), o.out_dir.c_str());
  }
  return 0;
}

}  // namespace

Command AddAdaptCommand(CLI::App& app) {
  auto flags = std::make_shared<AdaptFlags>();
  auto* cmd = app.add_subcommand("adapt", kAdaptSummary);
  AddFlags(cmd, *flags);
  return {cmd, [flags] { return RunAdapt(*flags); }};
}

}  // namespace cubridge::cli
