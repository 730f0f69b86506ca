// The coordinator process: the client and worker gRPC services over the Redis-backed job flow,
// grpc.health.v1, server reflection, Prometheus metrics, a sweep that keeps jobs moving (retries
// whose backoff passed, jobs whose coordinator died), and a graceful drain.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/service_type.h>

#include "absl/status/statusor.h"
#include "server/coordinator/auth.h"
#include "server/core/flow.h"
#include "service/runtime/metrics.h"
#include "server/core/request.h"
#include "server/core/spec_checker.h"
#include "server/store/redis.h"

namespace cubridge::coordinator {

struct CoordinatorOptions {
  std::string listen = "127.0.0.1:50051";  // port 0 picks a free one (see port())
  std::string metrics_listen;              // host:port for /metrics; empty = none
  store::RedisOptions redis;
  TokenSet client_tokens;
  TokenSet worker_tokens;
  std::string tls_cert_file, tls_key_file;  // both set: TLS
  core::FlowOptions flow;
  core::Limits limits;
  core::SpecCheckerOptions spec_checks;
  int max_message_bytes = 4 << 20;  // besides the buffer values (limits.max_tensor_bytes)
  std::chrono::milliseconds sweep_interval{250};
  std::chrono::milliseconds drain_timeout{20000};
};

class Coordinator {
 public:
  explicit Coordinator(CoordinatorOptions options);
  ~Coordinator();

  absl::Status Start();
  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  // Stops taking new jobs and leases, reports NOT_SERVING, lets calls in flight finish (up to
  // the drain timeout) and stops. Every job stays in Redis for the next coordinator.
  void Drain();
  void Wait();  // until drained

  // This thread's flow (its own Redis connection); UNAVAILABLE when Redis cannot be reached.
  absl::StatusOr<core::JobFlow*> Flow();
  const CoordinatorOptions& options() const { return options_; }
  service::Metrics& metrics() { return metrics_; }
  core::SpecChecker& spec_checker() { return *spec_checker_; }
  bool draining() const { return draining_.load(); }
  // Advances every job waiting on a task that just ended (or was just handed out).
  void AdvanceSubscribers(core::JobFlow& flow, const std::string& task_id);

 private:
  void SweepLoop();

  CoordinatorOptions options_;
  service::Metrics metrics_{service::Metrics::Role::kCoordinator};
  std::unique_ptr<core::SpecChecker> spec_checker_;
  std::unique_ptr<grpc::Service> client_service_, worker_service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0, metrics_port_ = 0;
  std::atomic<bool> draining_{false};
  std::thread sweeper_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopped_ = false;
};

// absl::Status -> grpc::Status for a client or a worker: same code and message, with the status's
// ErrorDetail; but a failure of the store becomes UNAVAILABLE (STORE_UNAVAILABLE) or INTERNAL
// with an incident id, logged here with the store's own message, which never leaves the process.
grpc::Status ToGrpc(const absl::Status& s);

std::unique_ptr<grpc::Service> MakeClientService(Coordinator* c);
std::unique_ptr<grpc::Service> MakeWorkerService(Coordinator* c);

}  // namespace cubridge::coordinator
