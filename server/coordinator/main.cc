// cubridge-coordinator: takes adaptation jobs from clients and hands their tasks to workers.
// All state lives in Redis, so a restarted coordinator carries on with the jobs it left.
//   cubridge-coordinator --listen HOST:PORT --redis ... [flags]
//   cubridge-coordinator check-specs --fd N --max-seconds S   (a spec-check child; internal)
#include <cstdlib>
#include <iostream>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "service/runtime/signals.h"
#include "server/core/spec_check.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/coordinator/coordinator.h"

namespace {

std::string Env(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// "host:port", "redis://host:port" or "redis://:password@host:port".
bool ParseRedis(std::string url, cubridge::store::RedisOptions* o) {
  if (url.rfind("redis://", 0) == 0) url = url.substr(8);
  if (auto at = url.rfind('@'); at != std::string::npos) {
    std::string auth = url.substr(0, at);
    o->password = auth.rfind(':', 0) == 0 ? auth.substr(1) : auth;
    url = url.substr(at + 1);
  }
  auto colon = url.rfind(':');
  if (colon == std::string::npos) return false;
  o->host = url.substr(0, colon);
  return absl::SimpleAtoi(url.substr(colon + 1), &o->port) && !o->host.empty();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 6 && std::string(argv[1]) == "check-specs" && std::string(argv[2]) == "--fd" &&
      std::string(argv[4]) == "--max-seconds") {
    int fd = -1, max_seconds = 0;
    if (!absl::SimpleAtoi(argv[3], &fd) || fd < 0 || !absl::SimpleAtoi(argv[5], &max_seconds)) return 2;
    return cubridge::core::RunSpecCheckChild(fd, max_seconds);
  }
  CLI::App app{"cubridge-coordinator: the CuBridge service's coordinator"};
  cubridge::coordinator::CoordinatorOptions o;
  std::string redis = Env("CUBRIDGE_REDIS", "127.0.0.1:6379");
  std::string client_tokens_file = Env("CUBRIDGE_CLIENT_TOKENS_FILE");
  std::string worker_tokens_file = Env("CUBRIDGE_WORKER_TOKEN_FILE");
  double lease_s = 10, backoff_s = 1, drain_s = 20, check_s = 15, retention_s = 7 * 24 * 3600;
  int64_t sweep_ms = 250, check_memory_mb = 4096, tensor_mb = 64;
  app.add_option("--listen", o.listen, "gRPC address (host:port; port 0 picks one)")
      ->capture_default_str();
  app.add_option("--metrics-listen", o.metrics_listen, "Prometheus /metrics address (host:port)");
  app.add_option("--redis", redis, "Redis: host:port or redis://[:password@]host:port (env CUBRIDGE_REDIS)")
      ->capture_default_str();
  app.add_option("--client-tokens-file", client_tokens_file,
                 "Client tokens, one per line (env CUBRIDGE_CLIENT_TOKENS_FILE, or a "
                 "comma-separated list in CUBRIDGE_CLIENT_TOKENS)");
  app.add_option("--worker-tokens-file", worker_tokens_file,
                 "Worker tokens, one per line (env CUBRIDGE_WORKER_TOKEN_FILE, or CUBRIDGE_WORKER_TOKEN)");
  app.add_option("--tls-cert", o.tls_cert_file, "PEM certificate chain: serve TLS");
  app.add_option("--tls-key", o.tls_key_file, "PEM private key of --tls-cert");
  app.add_option("--lease-seconds", lease_s, "A task's lease; workers heartbeat 3 times per lease")
      ->capture_default_str();
  app.add_option("--max-attempts", o.flow.max_attempts, "Attempts per task before it is dead-lettered")
      ->capture_default_str();
  app.add_option("--retry-backoff-seconds", backoff_s, "First retry delay; doubles per attempt")
      ->capture_default_str();
  app.add_option("--drain-seconds", drain_s, "How long SIGTERM waits for calls in flight")
      ->capture_default_str();
  app.add_option("--sweep-ms", sweep_ms, "How often every active job is looked at")->capture_default_str();
  app.add_option("--max-spec-bytes", o.limits.max_source_bytes, "Largest spec source accepted")
      ->capture_default_str();
  app.add_option("--max-seqlen", o.limits.max_seqlen, "Largest seqlen accepted")->capture_default_str();
  app.add_option("--max-tensor-mb", tensor_mb,
                 "Largest total size of the buffer values one submit carries (MiB); the gRPC "
                 "message limit grows by as much")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 10));
  app.add_option("--spec-checkers", o.spec_checks.children,
                 "Child processes that compile submitted specs (their crashes cost nothing else)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--spec-check-seconds", check_s, "Time one spec may take to compile and probe")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--spec-check-memory-mb", check_memory_mb, "Address-space limit of a spec checker")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{512}, int64_t{1} << 20));
  app.add_option("--job-retention-seconds", retention_s,
                 "How long an ended job stays readable (default 7 days); cached kernels stay")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  if (!ParseRedis(redis, &o.redis)) {
    std::cerr << "cubridge-coordinator: --redis '" << redis
              << "' must be host:port or redis://[:password@]host:port\n";
    return 2;
  }
  auto clients = cubridge::coordinator::TokenSet::Load(client_tokens_file, Env("CUBRIDGE_CLIENT_TOKENS"));
  auto workers = cubridge::coordinator::TokenSet::Load(worker_tokens_file, Env("CUBRIDGE_WORKER_TOKEN"));
  if (!clients.ok() || !workers.ok()) {
    std::cerr << "cubridge-coordinator: " << (clients.ok() ? workers.status() : clients.status()).message()
              << "\n";
    return 2;
  }
  o.client_tokens = *clients;
  o.worker_tokens = *workers;
  o.flow.lease = std::chrono::milliseconds(static_cast<int64_t>(lease_s * 1000));
  o.flow.retry_backoff = std::chrono::milliseconds(static_cast<int64_t>(backoff_s * 1000));
  o.drain_timeout = std::chrono::milliseconds(static_cast<int64_t>(drain_s * 1000));
  o.sweep_interval = std::chrono::milliseconds(sweep_ms);
  o.spec_checks.timeout = std::chrono::milliseconds(static_cast<int64_t>(check_s * 1000));
  o.spec_checks.memory_bytes = check_memory_mb << 20;
  o.limits.max_tensor_bytes = static_cast<size_t>(tensor_mb) << 20;
  o.flow.retention = std::chrono::milliseconds(static_cast<int64_t>(retention_s * 1000));


  cubridge::coordinator::Coordinator coordinator(o);
  if (auto s = coordinator.Start(); !s.ok()) {
    std::cerr << "cubridge-coordinator: " << s.message() << "\n";
    return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 3;
  }
  // Scripts and tests read the chosen ports from this line.
  std::cout << "listening on port " << coordinator.port() << " metrics port "
            << coordinator.metrics_port() << std::endl;
  cubridge::service::OnTerminationSignal([&](int sig) {
    spdlog::info("signal {}: draining", sig);
    coordinator.Drain();
  });
  coordinator.Wait();
  spdlog::info("drained; bye");
  return 0;
}
