// The worker daemon: finds its GPU (or serves as a CPU worker: lift and transfer, and `ir`-level
// candidates), registers with the coordinator, leases the tasks its arch can run, runs each in a
// child process (`cubridge-worker run-task`) while heartbeating the lease, and reports progress
// and the outcome, classified (infrastructure, candidate, spec). It outlives crashing tasks,
// reconnects when the coordinator restarts, and on SIGTERM finishes (or hands back) its task
// before it exits.
//
// A worker whose own machine fails it does not keep failing other people's tasks: it checks its
// work dir (exists, is a directory, writable, free space) at start and before each lease, and
// after `max_infra_failures` infrastructure failures in a row, or a failed check, it fences itself
// off: it leases nothing, reports NOT_SERVING (to the coordinator, on its grpc.health.v1 and in
// cubridge_worker_healthy) with the reason, and runs its self-check again with a doubling backoff
// until it passes.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "cubridge/v1/worker.grpc.pb.h"
#include "cuir/propose/llm_flags.h"
#include "service/runtime/metrics.h"
#include "worker/daemon/gpu_lock.h"

namespace cubridge::workerd {

struct DaemonOptions {
  std::string coordinator = "127.0.0.1:50051";
  std::string token;
  std::string tls_ca_file;      // set: TLS to the coordinator
  std::string arch = "auto";    // auto (probe the GPU), cpu, sm_80, sm_90
  // The GPU it drives, by ordinal among the GPUs it sees (CUDA_VISIBLE_DEVICES of its start):
  // -1 = the first. Set, the worker narrows CUDA_VISIBLE_DEVICES to that GPU's UUID for every
  // child it starts; an ordinal the machine lacks is INVALID_ARGUMENT at start.
  int gpu = -1;
  // Whether it may drive a GPU another worker of this machine drives (a lock file per GPU in
  // gpu_lock_dir refuses it otherwise: two workers profiling on one GPU disturb each other's
  // timings).
  bool share_gpu = false;
  std::string gpu_lock_dir = "/tmp";
  std::string work_dir;         // scratch; empty = a fresh folder under /tmp
  std::string metrics_listen;   // host:port for /metrics; empty = none
  double task_timeout_seconds = 1800;
  double gpu_timeout_seconds = 120;  // per GPU candidate
  std::chrono::milliseconds drain_timeout{60000};
  std::chrono::milliseconds lease_wait{5000};
  std::string health_listen;             // host:port for grpc.health.v1; empty = none
  int64_t min_free_bytes = int64_t{256} << 20;  // the work dir's free space needed to lease
  int max_infra_failures = 3;            // in a row, before it fences itself off
  std::chrono::milliseconds unhealthy_backoff{5000};  // first self-check retry; doubles to 5 min
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
  // Its arch and GPU: the --gpu ordinal checked against the GPUs the probe sees and narrowed to,
  // the GPU's lock taken. INVALID_ARGUMENT / FAILED_PRECONDITION for a worker that must not start.
  absl::Status Discover();
  absl::Status Register();
  // Runs the task; returns the class of its failure (UNSPECIFIED when it did not fail).
  v1::FailureClass RunTask(const v1::Task& task);
  // Sends a finished task's outcome, riding out a coordinator restart; gives up on a refusal.
  // A failure carries its class and what the attempt produced before it failed, if anything.
  void Complete(const v1::Task& task, const v1::TaskResult& result);
  void Fail(const v1::Task& task, v1::FailureClass failure_class, const std::string& error,
            const std::optional<v1::TaskResult>& partial_result = std::nullopt);
  template <typename Request, typename Response, typename Method>
  void Report(const v1::Task& task, Method method, const Request& request);
  // Work dir and runner in order; FAILED_PRECONDITION saying what is wrong otherwise.
  absl::Status SelfCheck() const;
  // Stops leasing, says why everywhere, and waits for the self-check to pass again.
  void Fence(const std::string& reason);
  void ReportHealth(v1::WorkerHealth health, const std::string& reason);
  // Returns when the coordinator may be called again: after `backoff` if the channel is up, else
  // when it connects, drains, or at `give_up`.
  void AwaitCoordinator(std::chrono::milliseconds backoff,
                        std::chrono::steady_clock::time_point give_up =
                            std::chrono::steady_clock::time_point::max());
  template <typename Request, typename Response, typename Method>
  grpc::Status Call(Method method, const Request& request, Response* response,
                    std::chrono::milliseconds deadline);

  DaemonOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Workers::Stub> stub_;
  service::Metrics metrics_{service::Metrics::Role::kWorker};
  std::unique_ptr<grpc::Server> health_server_;
  int infra_failures_ = 0;   // in a row
  // Since when the channel to the coordinator has been down, while it is.
  std::optional<std::chrono::steady_clock::time_point> unreachable_since_;
  std::string last_failure_;  // the last infrastructure failure, for the fencing reason
  std::string arch_, gpu_name_, gpu_uuid_, worker_id_;
  int gpu_ordinal_ = 0;
  int64_t memory_bytes_ = 0;
  std::optional<GpuLock> gpu_lock_;  // held while it drives its GPU (unless share_gpu)
  std::chrono::milliseconds lease_{10000};
  std::atomic<bool> draining_{false};
  bool own_work_dir_ = false;
};

// The child side: reads the request (kind, payload, options), runs the task, writes the result
// document ({ok, result} or {ok: false, error, failure_class, retryable, result: what the attempt
// produced}). Exit 0 when the task succeeded, 1 when it failed, 3 when the result could not be
// written (the reason goes to stderr).
int RunTaskChild(const std::string& request_path, const std::string& result_path);

// The GPUs this process sees, from a runner child's probe: {"device": the first, "devices": all,
// by ordinal, each {"ordinal", "uuid", "name", "arch", "memory_bytes", ...}}; FAILED_PRECONDITION
// (or the child's failure) where there is none. `work_root` holds the child's files.
absl::StatusOr<nlohmann::json> ProbeGpus(const std::string& work_root);

// The work dir is usable: it exists (or can be made), is a directory, takes a file write and has
// `min_free_bytes` free. FAILED_PRECONDITION "work dir PATH: what is wrong (how to fix)".
absl::Status CheckWorkDir(const std::string& dir, int64_t min_free_bytes);

}  // namespace cubridge::workerd
