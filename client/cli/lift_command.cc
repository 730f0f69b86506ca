#include "client/cli/lift_command.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "client/cli/config_flags.h"
#include "cuir/lower/lift.h"
#include "cuir/files/files.h"
#include "cuir/propose/llm_flags.h"
#include "cuir/propose/llm_lifter.h"
#include "worker/gpu/user_kernel.h"

namespace cubridge::cli {
namespace {

struct LiftFlags {
  std::string kernel, name, out_dir, arch = "sm_80", transcript_path;
  ConfigFlags config;
  uint64_t seed = 0;
  double gpu_timeout = 120;
  bool cpu_only = false, json = false;
  propose::LlmFlags llm;
};

void AddFlags(CLI::App* cmd, LiftFlags& f) {
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->add_option("kernel", f.kernel,
                  "Your CUDA attention kernel, following the launcher ABI "
                  "(cuir/experts/common/launch_abi.cuh)")
      ->required();
  cmd->add_option("--out,-o", f.out_dir,
                  "Output directory: base.cuir, kernel.cu, report.json, transcript.json")
      ->required();
  cmd->add_option("--name", f.name,
                  "The expert name the lifted program declares (default: the file's stem)");
  cmd->add_option("--arch", f.arch, "Architecture to compile the kernel for: sm_80 or sm_90");
  AddConfigFlags(cmd, f.config);
  cmd->add_option("--seed", f.seed, "Seed for the comparison inputs (default: fresh)");
  cmd->add_option("--gpu-timeout", f.gpu_timeout,
                  "Seconds one comparison may run on the GPU before it is killed");
  cmd->add_flag("--cpu-only", f.cpu_only,
                "No GPU: ask the model and run the CPU checks only, to try an endpoint or a "
                "kernel's prompt; nothing is accepted and the command exits 1");
  cmd->add_flag("--json", f.json, "Print the report as JSON");
  propose::AddLlmFlags(cmd, f.llm);
  cmd->add_option("--transcript", f.transcript_path,
                  "Also write the LLM conversation here (JSON), whether the lift succeeds or not");
}

int UsageError(const std::string& message) {
  std::cerr << "cubridge-cli lift: " << message << "\n";
  return 2;
}

void WriteTranscript(const std::string& path, const nlohmann::json& transcript) {
  if (path.empty() || transcript.empty()) return;
  std::ofstream out(path);
  out << transcript.dump(2) << "\n";
  if (!out) std::cerr << "cubridge-cli lift: --transcript: cannot write " << path << "\n";
}

int RunLift(LiftFlags& f) {
  auto arch = lower::ParseArch(f.arch);
  if (!arch.ok()) return UsageError(absl::StrCat("--arch: ", arch.status().message()));
  auto config = ResolveConfig(f.config);
  if (!config.ok()) return UsageError(std::string(config.status().message()));
  if (!config->params.empty() || !config->buffers.empty()) {
    return UsageError("--param and --buffer belong to specs; a lifted kernel takes neither");
  }
  auto settings = propose::ResolveLlmSettings(f.llm);
  if (!settings.ok()) return UsageError(std::string(settings.status().message()));
  if (settings->chat.endpoint.empty() || settings->chat.model.empty()) {
    return UsageError(
        "lift asks a language model: set --llm-endpoint and --llm-model (or CUBRIDGE_LLM_ENDPOINT "
        "and CUBRIDGE_LLM_MODEL); docs/llm.md");
  }
  auto source = files::ReadFile(f.kernel);
  if (!source.ok()) {
    std::cerr << "cubridge-cli lift: " << source.status().message() << "\n";
    return 1;
  }
  auto kernel = gpu::LoadUserKernel(f.kernel, *source);
  if (!kernel.ok()) {
    std::cerr << "cubridge-cli lift: " << kernel.status().message() << "\n";
    return 1;
  }

  propose::LiftRequest r;
  r.kernel_path = f.kernel;
  r.kernel_source = *source;
  r.name = f.name.empty() ? lower::KernelNameFromPath(f.kernel) : f.name;
  r.config = config->attention;
  r.seed = f.seed != 0 ? f.seed : std::random_device{}();
  r.progress = [&](const std::string& line) {
    if (!f.json) std::printf("lift: %s\n", line.c_str());
    std::fflush(stdout);
  };
  gpu::AutotuneOptions tune;
  tune.isolate.timeout_seconds = f.gpu_timeout;
  gpu::GpuAutotuner tuner(tune);
  gpu::UserKernelComparator comparator(&tuner, *std::move(kernel), f.kernel, r.config, *arch);
  if (!f.cpu_only) r.gpu = &comparator;

  propose::LiftOutcome outcome = propose::LiftWithModel(*settings, r);
  WriteTranscript(f.transcript_path, outcome.transcript);
  if (!outcome.status.ok()) {
    std::cerr << "cubridge-cli lift: " << outcome.status.message() << "\n";
    if (f.transcript_path.empty() && !outcome.transcript.empty()) {
      std::cerr << "(pass --transcript FILE to keep the LLM conversation)\n";
    }
    return 1;
  }
  const nlohmann::json report = propose::LiftReport(r, outcome, comparator.device());
  const std::string base = absl::StrCat(
      "# Lifted by CuBridge from ", std::filesystem::path(f.kernel).filename().string(),
      " (proposed by ", settings->chat.model, ", round ", outcome.accepted_round,
      "); it agreed with the compiled kernel on ", comparator.device(), ".\n",
      cuir::PrintProgram(outcome.program));
  if (auto s = files::PublishFiles(f.out_dir, {{"base.cuir", base},
                                               {"kernel.cu", *source},
                                               {"report.json", report.dump(2) + "\n"},
                                               {"transcript.json", outcome.transcript.dump(2) + "\n"}});
      !s.ok()) {
    std::cerr << "cubridge-cli lift: " << s.message() << "\n";
    return 1;
  }
  if (f.json) {
    std::cout << report.dump(2) << "\n";
  } else {
    for (const auto& check : outcome.checks) std::printf("lift: %s\n", check.c_str());
    std::printf("lifted: %s as expert \"%s\", outputs in %s\n", f.kernel.c_str(), r.name.c_str(),
                f.out_dir.c_str());
  }
  return 0;
}

}  // namespace

Command AddLiftCommand(CLI::App& app) {
  auto flags = std::make_shared<LiftFlags>();
  auto* cmd = app.add_subcommand("lift", kLiftSummary);
  AddFlags(cmd, *flags);
  return {cmd, [flags] { return RunLift(*flags); }};
}

}  // namespace cubridge::cli
