// Task queues in Redis: one stream per worker class (an arch like "sm_90", or "cpu"), read by
// the consumer group "workers". A lease is a stream delivery plus a fencing token; heartbeats keep
// the delivery fresh; a delivery idle longer than the lease is taken over by the next worker that
// asks, with a new token, so results carrying an older token are refused. Failed attempts are
// retried up to a limit, then the task is dead-lettered with its last error.
//
// A retry prefers a worker that has not failed the task yet: such a worker hands the delivery
// back (LeaseNext's `decline`) while another can take it. A task nobody waits for any more (its
// jobs were cancelled) is withdrawn before a worker takes it. Ended tasks expire after the
// retention; a job that subscribes to one renews it.
//
// Keys (docs/service.md): cubridge:tasks:<class> (stream), cubridge:task:<id> (hash: job, kind,
// payload, class, attempt, token, entry, worker, state, result, error, failure_class),
// cubridge:task:<id>:jobs (set of the jobs waiting on it), cubridge:task:<id>:failed_by (set of the
// workers whose attempt failed), cubridge:queued:<class> (set of the tasks waiting for a worker:
// the queue depth), cubridge:fence (counter), cubridge:retry (sorted set: backed-off retries by due
// time), cubridge:dead (list of the newest dead-lettered task ids).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/store/redis.h"

namespace cubridge::store {

struct TaskSpec {
  std::string job_id;
  std::string kind;     // lift | transfer | candidate
  std::string payload;  // the kind's inputs (JSON)
  std::string worker_class;
};

struct Lease {
  std::string task_id;
  TaskSpec task;
  int attempt = 0;
  int64_t fencing_token = 0;
  bool reclaimed = false;  // taken over from a worker whose lease expired
};

struct TaskState {
  std::string state;  // queued | leased | retrying | done | dead | withdrawn
  int attempt = 0;
  int64_t fencing_token = 0;
  std::string worker;
  std::string result;
  std::string error;
  std::string worker_class;  // the queue it belongs to
  std::string entry;         // its current stream entry
  std::string failure_class;  // of the last failed attempt: infrastructure | candidate | spec
};

// A failed attempt as the worker classified it.
struct Failure {
  std::string error;
  bool retryable = true;
  std::string failure_class;   // infrastructure | candidate | spec; "" = unknown (older worker)
  std::string partial_result;  // what the attempt produced before it failed (JSON), or ""
};

class TaskQueue {
 public:
  TaskQueue(RedisClient* redis, std::chrono::milliseconds lease, int max_attempts,
            std::chrono::milliseconds retention = std::chrono::hours(24 * 7))
      : redis_(redis), lease_(lease), max_attempts_(max_attempts), retention_(retention) {}

  // A failed attempt waits retry_backoff * 2^(attempt-1) before it is queued again (zero: at
  // once); PromoteDueRetries() moves the due ones back.
  void set_retry_backoff(std::chrono::milliseconds backoff) { backoff_ = backoff; }

  absl::StatusOr<std::string> Enqueue(const TaskSpec& task);
  // Enqueues under a caller-chosen id unless a task with that id exists (atomically: any number
  // of coordinators may race). True when this call created it. Identical work shares one id.
  absl::StatusOr<bool> EnqueueOnce(const std::string& task_id, const TaskSpec& task);
  // A dead or withdrawn task queued again with a fresh attempt count (a new job asked for the
  // same work); false when it was neither. A non-empty `payload` (the new job's inputs: its
  // buffer values and sources, which may be what failed before) replaces the task's.
  absl::StatusOr<bool> Revive(const std::string& task_id, const std::string& payload = "");
  // Jobs waiting on a task (shared work): progress and completion reach each of them.
  absl::Status Subscribe(const std::string& task_id, const std::string& job_id);
  // The job no longer waits on the task; a task nobody waits for that no worker has taken yet is
  // withdrawn (true), so it is neither run nor counted as queued.
  absl::StatusOr<bool> Unsubscribe(const std::string& task_id, const std::string& job_id);
  absl::StatusOr<std::vector<std::string>> Subscribers(const std::string& task_id);
  // Queues the backed-off retries whose time has come; returns how many.
  absl::StatusOr<int> PromoteDueRetries();
  // Tasks of the class waiting for a worker.
  absl::StatusOr<int64_t> Depth(const std::string& worker_class);
  // A new task of the class, or one whose lease expired; nullopt when there is none. `decline`
  // sees the task id of a delivery whose task failed before, the workers whose attempts failed
  // and when the last one did (unix ms), and may hand the delivery back to the end of the queue
  // (true) for another worker to take.
  using Decline = std::function<bool(const std::string& task_id,
                                     const std::vector<std::string>& failed_by, int64_t failed_ms)>;
  absl::StatusOr<std::optional<Lease>> LeaseNext(const std::string& worker_class,
                                                 const std::string& worker_id,
                                                 const Decline& decline = nullptr);
  // FAILED_PRECONDITION when `token` is not the task's current lease (lost or superseded).
  absl::Status Heartbeat(const std::string& task_id, int64_t token);
  absl::Status Complete(const std::string& task_id, int64_t token, const std::string& result);
  // Retryable failures go back to the queue until max_attempts; then (or when not retryable)
  // the task is dead-lettered. Returns the task's state afterwards ("queued", "retrying" or
  // "dead"). A non-empty `partial_result` (what the attempt produced before it failed, e.g. an
  // LLM transcript) replaces the task's `result`, so a dead task keeps it. The worker that held
  // the lease joins the task's failed_by set.
  absl::StatusOr<std::string> Fail(const std::string& task_id, int64_t token, const Failure& failure);
  absl::StatusOr<TaskState> Get(const std::string& task_id);

 private:
  absl::StatusOr<TaskState> CheckToken(const std::string& task_id, int64_t token);
  absl::StatusOr<Lease> Take(const std::string& task_id, const std::string& entry,
                             const std::string& worker_class, const std::string& worker_id);

  RedisClient* redis_;
  std::chrono::milliseconds lease_;
  int max_attempts_;
  std::chrono::milliseconds retention_;
  std::chrono::milliseconds backoff_{0};
};

}  // namespace cubridge::store
