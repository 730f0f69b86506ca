// cubridge-cli: the command-line front of CuBridge.
//   cubridge-cli adapt SPEC --local [config flags] --arch sm_80|sm_90 --out DIR
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cuir/pipeline/adapt.h"
#include "worker/gpu/autotune.h"

namespace {

using cubridge::pipeline::AdaptOptions;
using cubridge::pipeline::StageEvent;

struct AdaptFlags {
  AdaptOptions options;
  bool local = false;
  bool json = false;
  bool no_cache = false;
  std::string arch = "sm_80";
  std::string dtype = "bf16";
  int64_t seqlen = 0;  // --seqlen, applied where --seqlen-q / --seqlen-kv are not given
  std::vector<std::string> buffers;  // name=source
  std::string gpu = "auto";
  double gpu_timeout = 120;
  std::vector<std::string> tiles;  // BMxBNwW
  CLI::Option* seqlen_flag = nullptr;
  CLI::Option* seqlen_q_flag = nullptr;
  CLI::Option* seqlen_kv_flag = nullptr;
};

void AddAdaptCommand(CLI::App& app, AdaptFlags& f) {
  auto* cmd = app.add_subcommand("adapt", "Adapt the expert kernel to an attention variant spec");
  // A flag given twice takes its last value, so scripts can append overrides.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto& c = f.options.config;
  cmd->add_option("spec", f.options.spec_path, "Python file with mask_mod and/or score_mod")
      ->required();
  cmd->add_flag("--local", f.local, "Run the whole pipeline in this process (no service)");
  cmd->add_option("--out,-o", f.options.out_dir, "Output directory")->required();
  cmd->add_option("--arch", f.arch, "Target GPU architecture: sm_80 or sm_90");
  cmd->add_option("--batch", c.batch, "Batch size");
  cmd->add_option("--heads-q", c.heads_q, "Query heads");
  cmd->add_option("--heads-kv", c.heads_kv, "Key/value heads (divides --heads-q: MHA, GQA, MQA)");
  cmd->add_option("--head-dim", c.head_dim, "Head dimension: 64, 128 or 256");
  f.seqlen_flag = cmd->add_option("--seqlen", f.seqlen, "Sets both --seqlen-q and --seqlen-kv");
  f.seqlen_q_flag = cmd->add_option("--seqlen-q", c.seqlen_q, "Query sequence length (wins over --seqlen)");
  f.seqlen_kv_flag =
      cmd->add_option("--seqlen-kv", c.seqlen_kv, "Key/value sequence length (wins over --seqlen)");
  cmd->add_option("--dtype", f.dtype, "bf16 or fp16");
  cmd->add_option("--scale", c.softmax_scale, "Softmax scale (default 1/sqrt(head-dim))");
  cmd->add_option("--param", f.options.param_overrides, "Override a spec parameter: NAME=VALUE");
  cmd->add_option("--buffer", f.buffers,
                  "Buffer values: NAME=lengths:A,B,.. | NAME=values:.. | NAME=file:PATH | "
                  "NAME=random");
  cmd->add_option("--cache-dir", f.options.cache_dir, "Kernel cache directory");
  cmd->add_flag("--no-cache", f.no_cache, "Neither read nor write the kernel cache");
  cmd->add_option("--seed", f.options.seed, "Seed for the verification inputs (default: fresh)");
  cmd->add_flag("--json", f.json, "Print the report as JSON instead of stage lines");
  cmd->add_option("--gpu", f.gpu,
                  "auto: verify, profile and autotune on this machine's GPU when it has one; "
                  "require: fail without one; off: CPU verification only");
  cmd->add_option("--gpu-timeout", f.gpu_timeout,
                  "Seconds one candidate may run on the GPU before it is killed");
  cmd->add_option("--tiles", f.tiles,
                  "Tile candidates to autotune, e.g. 128x64w4,64x64w4 (default: all that fit)")
      ->delimiter(',');
}

int RunAdapt(AdaptFlags& f) {
  if (!f.local) {
    std::cerr << "cubridge-cli adapt: pass --local to run the pipeline in this process "
                 "(jobs for a CuBridge service go through `cubridge-cli submit`)\n";
    return 2;
  }
  auto& o = f.options;
  auto arch = cubridge::lower::ParseArch(f.arch);
  if (!arch.ok()) {
    std::cerr << "cubridge-cli adapt: --arch: " << arch.status().message() << "\n";
    return 2;
  }
  o.arch = *arch;
  if (f.dtype == "bf16") {
    o.config.dtype = cubridge::cuir::DType::kBF16;
  } else if (f.dtype == "fp16") {
    o.config.dtype = cubridge::cuir::DType::kFP16;
  } else {
    std::cerr << "cubridge-cli adapt: --dtype must be bf16 or fp16, got '" << f.dtype << "'\n";
    return 2;
  }
  if (f.seqlen_flag->count() > 0) {
    if (f.seqlen_q_flag->count() == 0) o.config.seqlen_q = f.seqlen;
    if (f.seqlen_kv_flag->count() == 0) o.config.seqlen_kv = f.seqlen;
  }
  for (const auto& b : f.buffers) {
    std::pair<std::string, std::string> kv = absl::StrSplit(b, absl::MaxSplits('=', 1));
    if (kv.first.empty() || kv.second.empty()) {
      std::cerr << "cubridge-cli adapt: --buffer '" << b
                << "' must be NAME=SOURCE, e.g. doc=lengths:100,157\n";
      return 2;
    }
    o.buffers[kv.first] = cubridge::spec::BufferSource{kv.second};
  }
  o.use_cache = !f.no_cache;
  if (f.gpu == "auto" || f.gpu == "require" || f.gpu == "off") {
    o.gpu_mode = f.gpu == "auto"      ? cubridge::pipeline::GpuMode::kAuto
                 : f.gpu == "require" ? cubridge::pipeline::GpuMode::kRequire
                                      : cubridge::pipeline::GpuMode::kOff;
  } else {
    std::cerr << "cubridge-cli adapt: --gpu must be auto, require or off, got '" << f.gpu << "'\n";
    return 2;
  }
  cubridge::gpu::AutotuneOptions tune;
  tune.isolate.timeout_seconds = f.gpu_timeout;
  for (const auto& t : f.tiles) {
    cubridge::gpu::TileConfig tile;
    char w = 0;
    if (std::sscanf(t.c_str(), "%dx%d%c%d", &tile.block_m, &tile.block_n, &w, &tile.warps) != 4 ||
        w != 'w') {
      std::cerr << "cubridge-cli adapt: --tiles '" << t
                << "' must be BLOCK_MxBLOCK_NwWARPS, e.g. 128x64w4\n";
      return 2;
    }
    tune.tiles.push_back(tile);
  }
  cubridge::gpu::GpuAutotuner autotuner(tune);
  o.gpu = &autotuner;
  if (!f.json) {
    o.on_stage = [](const StageEvent& e) {
      std::printf("[%-8s] %-4s %7.3fs  %s\n", e.stage.c_str(), e.ok ? "ok" : "FAIL", e.seconds,
                  e.detail.c_str());
      std::fflush(stdout);
    };
  }
  auto result = cubridge::pipeline::Adapt(o);
  if (!result.ok()) {
    std::cerr << "cubridge-cli adapt: " << result.status().message() << "\n";
    return 1;
  }
  if (f.json) {
    std::cout << result->report.dump(2) << "\n";
  } else if (result->cache_hit) {
    std::printf("cache hit: spec %s for %s, outputs in %s\n", result->spec_hash.c_str(),
                f.arch.c_str(), o.out_dir.c_str());
  } else {
    std::printf("adapted: spec %s for %s, outputs in %s\n", result->spec_hash.c_str(),
                f.arch.c_str(), o.out_dir.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CuBridge: adapt expert attention kernels to your attention variant"};
  app.require_subcommand(1);
  AdaptFlags adapt;
  AddAdaptCommand(app, adapt);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (app.got_subcommand("adapt")) return RunAdapt(adapt);
  return 2;
}
