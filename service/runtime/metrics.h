// Prometheus metrics of the coordinator and the workers (prometheus-cpp), named with their units:
//   cubridge_jobs_total{outcome}                    jobs that ended: succeeded | failed | cancelled
//   cubridge_jobs_submitted_total{cache}            submits: hit | miss | duplicate (idempotency key)
//   cubridge_kernel_cache_lookups_total{result}     hit | miss, per (job, arch)
//   cubridge_stage_duration_seconds{stage}          lift | transfer | candidate (histogram)
//   cubridge_queue_depth{class}                     tasks waiting for a worker, per worker class
//   cubridge_lease_expiries_total                   leases taken over after their worker went silent
//   cubridge_task_retries_total                     failed attempts queued again
//   cubridge_tasks_dead_total                       tasks dead-lettered
//   cubridge_task_failures_total{class}             failed attempts: infrastructure | candidate | spec
//   cubridge_workers{arch}                          live registered workers
//   cubridge_workers_unhealthy{arch}                live workers that reported themselves unhealthy
//   cubridge_spec_checks_total{outcome}             submitted specs compiled: ok | invalid | crashed
//                                                   | timeout | cached | unavailable
//   cubridge_spec_check_duration_seconds            histogram of those checks
//   cubridge_worker_tasks_total{kind,outcome}       (worker) tasks run: ok | failed | crashed | lost
//                                                   | handed_back
//   cubridge_worker_task_duration_seconds{kind}     (worker) histogram
//   cubridge_worker_healthy                         (worker) 1 while it leases, 0 while fenced off
//   cubridge_worker_fenced_total                    (worker) times it fenced itself off
//   cubridge_llm_tokens_total{kind}                 (worker) LLM tokens: prompt | completion
//   cubridge_llm_requests_total                     (worker) chat-completion requests, retries included
// Every series a process can export exists from start-up at zero, so that rate() and alerts work
// before the first event.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace prometheus {
class Registry;
}  // namespace prometheus
namespace httplib {
class Server;
}  // namespace httplib

namespace cubridge::service {

class Metrics {
 public:
  enum class Role { kCoordinator, kWorker };
  explicit Metrics(Role role);
  ~Metrics();

  void JobEnded(const std::string& outcome);
  void JobSubmitted(const std::string& cache);
  void CacheLookup(bool hit);
  void StageSeconds(const std::string& stage, double seconds);
  void QueueDepth(const std::string& worker_class, double depth);
  void LeaseExpired();
  void TaskRetried();
  void TaskDead();
  void TaskFailed(const std::string& failure_class);  // infrastructure | candidate | spec
  void Workers(const std::string& arch, double count);
  void UnhealthyWorkers(const std::string& arch, double count);
  void SpecCheck(const std::string& outcome, double seconds);
  void WorkerHealthy(bool healthy);  // also counts a fencing when it turns false
  void WorkerTask(const std::string& kind, const std::string& outcome, double seconds);
  // A task's LLM usage (its llm_usage document: requests, prompt_tokens, completion_tokens).
  void LlmUsage(int64_t requests, int64_t prompt_tokens, int64_t completion_tokens);

  // Serves /metrics on host:port (port 0 picks one); returns the port.
  absl::StatusOr<int> Serve(const std::string& address);
  std::string Render() const;  // the text exposition format, as /metrics answers

 private:
  struct Families;
  void ExportZeros(Role role);
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Families> f_;
  // /metrics is served with cpp-httplib: prometheus-cpp's civetweb exposer fails to start inside
  // a process that also runs gRPC (Debian 12's civetweb 1.15: "null context").
  std::unique_ptr<httplib::Server> http_;
  std::thread http_thread_;
};

}  // namespace cubridge::service
