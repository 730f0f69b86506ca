// The worker daemon: finds its GPU (or serves as a CPU worker: lift and transfer, and `ir`-level
// candidates), registers with the coordinator, leases the tasks its arch can run, runs each in a
// child process (`cubridge-worker run-task`) while heartbeating the lease, and reports progress
// and the outcome. It outlives crashing tasks, reconnects when the coordinator restarts, and on
// SIGTERM finishes (or hands back) its task before it exits.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "cubridge/v1/worker.grpc.pb.h"
#include "cuir/propose/llm_flags.h"
#include "server/core/metrics.h"

namespace cubridge::workerd {

struct DaemonOptions {
  std::string coordinator = "127.0.0.1:50051";
  std::string token;
  std::string tls_ca_file;      // set: TLS to the coordinator
  std::string arch = "auto";    // auto (probe the GPU), cpu, sm_80, sm_90
  std::string work_dir;         // scratch; empty = a fresh folder under /tmp
  std::string metrics_listen;   // host:port for /metrics; empty = none
  double task_timeout_seconds = 1800;
  double gpu_timeout_seconds = 120;  // per GPU candidate
  std::chrono::milliseconds drain_timeout{60000};
  std::chrono::milliseconds lease_wait{5000};
  // Set (an endpoint and a model): the worker registers the capability `llm` and runs the
  // transfers of llm and hybrid jobs. Only these flags reach the task child; the API key stays in
  // the file they name or in CUBRIDGE_LLM_API_KEY, which the child inherits.
  std::optional<propose::LlmFlags> llm;
};

class Daemon {
 public:
  explicit Daemon(DaemonOptions options);
  ~Daemon();
  // Runs until Drain() (from the SIGTERM thread); UNAUTHENTICATED and bad options end it early.
  absl::Status Run();
  void Drain() { draining_ = true; }
  const std::string& arch() const { return arch_; }

 private:
  absl::Status Discover();
  absl::Status Register();
  void RunTask(const v1::Task& task);
  // Sends a finished task's outcome, riding out a coordinator restart; gives up on a refusal.
  // A failure carries what the attempt produced before it failed (`partial_result`, JSON).
  void Report(const v1::Task& task, bool ok, const std::string& result_or_error, bool retryable,
              const std::string& partial_result = "");
  template <typename Request, typename Response, typename Method>
  grpc::Status Call(Method method, const Request& request, Response* response,
                    std::chrono::milliseconds deadline);

  DaemonOptions options_;
  std::unique_ptr<v1::Workers::Stub> stub_;
  core::Metrics metrics_;
  std::string arch_, gpu_name_, worker_id_;
  int64_t memory_bytes_ = 0;
  std::chrono::milliseconds lease_{10000};
  std::atomic<bool> draining_{false};
  bool own_work_dir_ = false;
};

// The child side: reads the request (kind, payload, options), runs the task, writes the result
// document ({ok, result} or {ok: false, error, retryable, result: what the attempt produced}).
// Exit 0 when the task succeeded, 1 when it failed.
int RunTaskChild(const std::string& request_path, const std::string& result_path);

}  // namespace cubridge::workerd
