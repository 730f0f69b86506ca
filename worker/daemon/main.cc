// cubridge-worker: a worker daemon of the CuBridge service (one per GPU, or CPU-only).
//   cubridge-worker --coordinator HOST:PORT [--arch auto|cpu|sm_80|sm_90] [--gpu N [--share-gpu]]
//                   [--llm-endpoint URL --llm-model NAME [--llm-api-key-file F] ...] ...
//   cubridge-worker --list-gpus                              (the GPUs it could drive; exits)
//   cubridge-worker run-task --request FILE --result FILE   (the per-task child; internal)
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "service/runtime/signals.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cuir/propose/llm_flags.h"
#include "worker/daemon/daemon.h"

namespace {

std::string Env(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "run-task") {
    std::string request, result;
    for (int i = 2; i + 1 < argc; i += 2) {
      if (std::string(argv[i]) == "--request") request = argv[i + 1];
      if (std::string(argv[i]) == "--result") result = argv[i + 1];
    }
    if (request.empty() || result.empty()) {
      std::cerr << "usage: cubridge-worker run-task --request FILE --result FILE\n";
      return 2;
    }
    return cubridge::workerd::RunTaskChild(request, result);
  }

  CLI::App app{"cubridge-worker: leases and runs CuBridge tasks on this machine's GPU (or CPU)"};
  // A flag given twice takes its last value, so wrappers (Helm, scripts) can append overrides.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cubridge::workerd::DaemonOptions o;
  o.coordinator = Env("CUBRIDGE_COORDINATOR", o.coordinator);
  std::string token_file = Env("CUBRIDGE_WORKER_TOKEN_FILE");
  double drain_s = 60;
  app.add_option("--coordinator", o.coordinator, "Coordinator address (env CUBRIDGE_COORDINATOR)")
      ->capture_default_str();
  app.add_option("--token-file", token_file,
                 "File holding the worker token (env CUBRIDGE_WORKER_TOKEN_FILE, or the token in "
                 "CUBRIDGE_WORKER_TOKEN)");
  app.add_option("--tls-ca", o.tls_ca_file, "CA certificates (PEM): connect with TLS");
  app.add_option("--arch", o.arch, "auto (probe the GPU), cpu, sm_80 or sm_90")->capture_default_str();
  app.add_option("--gpu", o.gpu,
                 "The GPU this worker drives, by ordinal as --list-gpus shows them (env "
                 "CUBRIDGE_GPU; default: the first): one worker per GPU")
      ->envname("CUBRIDGE_GPU")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            int ordinal = -1;
            if (absl::SimpleAtoi(value, &ordinal) && ordinal >= 0) return "";
            return "give a GPU's ordinal (0, 1, ...: cubridge-worker --list-gpus shows them), "
                   "got '" + value + "'";
          },
          "ORDINAL"));
  app.add_flag("--share-gpu", o.share_gpu,
               "Drive a GPU that another worker of this machine drives (refused otherwise: their "
               "profiles would disturb each other)");
  app.add_option("--gpu-lock-dir", o.gpu_lock_dir,
                 "Folder of the per-GPU lock files, shared by the workers of this machine")
      ->capture_default_str();
  bool list_gpus = false;
  app.add_flag("--list-gpus", list_gpus,
               "Print the GPUs this machine has (ordinal, UUID, name, arch) and exit");
  app.add_option("--work-dir", o.work_dir, "Scratch folder (default: a fresh one under /tmp)");
  app.add_option("--metrics-listen", o.metrics_listen, "Prometheus /metrics address (host:port)");
  app.add_option("--task-timeout", o.task_timeout_seconds, "Seconds one task may run")
      ->capture_default_str();
  app.add_option("--gpu-timeout", o.gpu_timeout_seconds, "Seconds one GPU candidate may run")
      ->capture_default_str();
  app.add_option("--drain-seconds", drain_s,
                 "On SIGTERM, how long the running task may still take before it is handed back")
      ->capture_default_str();
  app.add_option("--health-listen", o.health_listen,
                 "grpc.health.v1 address (host:port): NOT_SERVING while the worker fences itself off");
  int64_t min_free_mb = o.min_free_bytes >> 20;
  app.add_option("--min-free-mb", min_free_mb,
                 "Free space the work dir needs before the worker takes a task")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-infra-failures", o.max_infra_failures,
                 "Tasks in a row that may fail for reasons of this machine before the worker "
                 "stops leasing and runs its self-check")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  double unhealthy_backoff_s = o.unhealthy_backoff.count() / 1000.0;
  app.add_option("--unhealthy-backoff-seconds", unhealthy_backoff_s,
                 "First wait before a fenced-off worker runs its self-check again (doubles, up to "
                 "5 minutes)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cubridge::propose::LlmFlags llm;
  cubridge::propose::AddLlmFlags(&app, llm);
  CLI11_PARSE(app, argc, argv);
  if (list_gpus) {
    // One line per GPU on stdout (none where there is no GPU: the reason goes to stderr).
    std::string tmpl = (std::filesystem::temp_directory_path() / "cubridge-list-gpus-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::cerr << "cubridge-worker: cannot create a scratch folder for the probe\n";
      return 3;
    }
    auto gpus = cubridge::workerd::ProbeGpus(tmpl);
    std::error_code ec;
    std::filesystem::remove_all(tmpl, ec);
    if (!gpus.ok()) {
      std::cerr << "cubridge-worker: no usable GPU: " << gpus.status().message() << "\n";
      return 0;
    }
    for (const auto& d : (*gpus)["devices"]) {
      std::cout << d.value("ordinal", 0) << " " << d.value("uuid", "-") << " "
                << d.value("arch", "?") << " " << d.value("name", "?") << "\n";
    }
    return 0;
  }
  o.drain_timeout = std::chrono::milliseconds(static_cast<int64_t>(drain_s * 1000));
  o.min_free_bytes = min_free_mb << 20;
  o.unhealthy_backoff = std::chrono::milliseconds(static_cast<int64_t>(unhealthy_backoff_s * 1000));
  if (o.arch != "auto" && o.arch != "cpu" && o.arch != "sm_80" && o.arch != "sm_90") {
    std::cerr << "cubridge-worker: --arch must be auto, cpu, sm_80 or sm_90, got '" << o.arch << "'\n";
    return 2;
  }
  o.token = Env("CUBRIDGE_WORKER_TOKEN");
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!(in >> o.token)) {
      std::cerr << "cubridge-worker: cannot read a token from " << token_file << "\n";
      return 2;
    }
  }
  if (o.token.empty()) {
    std::cerr << "cubridge-worker: no worker token: pass --token-file or set CUBRIDGE_WORKER_TOKEN\n";
    return 2;
  }

  // Resolved here so a bad flag or an unreadable key file stops the worker at once, not each
  // task; the child resolves the same flags again (the key is not passed to it).
  auto settings = cubridge::propose::ResolveLlmSettings(llm);
  if (!settings.ok()) {
    std::cerr << "cubridge-worker: " << settings.status().message() << "\n";
    return 2;
  }
  const bool has_endpoint = !settings->chat.endpoint.empty(), has_model = !settings->chat.model.empty();
  if (has_endpoint != has_model) {
    std::cerr << "cubridge-worker: "
              << (has_endpoint ? "an LLM endpoint is set but no model: pass --llm-model (or set "
                                 "CUBRIDGE_LLM_MODEL)"
                               : "an LLM model is set but no endpoint: pass --llm-endpoint (or set "
                                 "CUBRIDGE_LLM_ENDPOINT)")
              << "\n";
    return 2;
  }
  if (has_endpoint) {
    o.llm = llm;
    o.llm->endpoint = settings->chat.endpoint;
    o.llm->model = settings->chat.model;
  }

  cubridge::workerd::Daemon daemon(o);
  cubridge::service::OnTerminationSignal([&](int sig) {
    spdlog::info("signal {}: finishing the current task, then exiting", sig);
    daemon.Drain();
  });
  absl::Status s;
  try {
    s = daemon.Run();
  } catch (const std::exception& e) {
    // Nothing should throw out of the daemon; if something does, say what instead of aborting.
    s = absl::InternalError(absl::StrCat("unexpected error: ", e.what()));
  }
  if (!s.ok()) {
    std::cerr << "cubridge-worker: " << s.message() << "\n";
    // 2: the options cannot work on this machine (a --gpu it does not have).
    return s.code() == absl::StatusCode::kUnauthenticated    ? 4
           : s.code() == absl::StatusCode::kInvalidArgument ? 2
                                                             : 3;
  }
  return 0;
}
