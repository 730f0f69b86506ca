// How a job moves: the coordinator's whole orchestration, kept in Redis so that any coordinator
// (or the same one restarted) can pick a job up where it stands.
//
// A job needs, per target arch: the lift of the expert for that arch, the transfer of its spec
// (verified on the CPU), then one candidate per tile configuration (lowered, compiled, verified
// and profiled on a GPU of the arch; at the `ir` level one candidate compiled on a CPU worker),
// and the backward for the arch (a CPU task: cuir/pipeline/backward.h); the best verified
// candidate and the backward go into the kernel cache as one entry. Task ids are derived from what they
// compute (expert + arch, spec hash, spec hash + arch + tile), so identical work submitted by
// many jobs is queued once and every waiting job advances when it completes.
//
// Advance() is idempotent: it looks at the job and its tasks and does whatever is next. It runs
// when a job is submitted, when one of its tasks ends, and from the coordinator's periodic sweep
// over the active jobs (which is what finishes jobs after a coordinator restart).
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "cubridge/v1/task.pb.h"
#include "cubridge/v1/client.pb.h"
#include "server/core/request.h"
#include "service/runtime/metrics.h"
#include "server/store/jobs.h"
#include "server/store/kernels.h"
#include "server/store/tasks.h"
#include "server/store/tensors.h"
#include "server/store/workers.h"

namespace cubridge::core {

struct FlowOptions {
  std::string ruleset;            // the transfer rules' version (cache key part)
  std::chrono::milliseconds lease{10000};
  int max_attempts = 3;
  std::chrono::milliseconds retry_backoff{1000};
  // How long an ended job (and an ended task) stays readable; cached kernels stay regardless.
  std::chrono::milliseconds retention = std::chrono::hours(24 * 7);
};

// One coordinator thread's view of the stores (a Redis client is used by one thread at a time).
class JobFlow {
 public:
  JobFlow(store::RedisClient* redis, const FlowOptions& options, service::Metrics* metrics);

  // Creates the job (or returns the one its idempotency key already made for the same request;
  // ALREADY_EXISTS naming that job for another request) for a request whose spec was already
  // checked and hashed. A job whose kernels are all cached ends at once as a cache hit. `archs`
  // is the resolved list (never empty).
  absl::StatusOr<v1::Job> Submit(const v1::SubmitJobRequest& request, const SpecKey& key,
                                 const std::vector<std::string>& archs);
  absl::Status Advance(const std::string& job_id);
  // The job's spec hash and its buffers' canonical names (empty for a lift or for a job stored
  // before they were kept); NOT_FOUND for an unknown job.
  absl::StatusOr<SpecKey> KeyOf(const std::string& job_id);
  // The API view of a job: state, events, why it waits; with its transfer's LLM conversation
  // when `with_transcript`.
  absl::StatusOr<v1::Job> Describe(const std::string& job_id, bool with_transcript = false);
  // Ends the job; the tasks only it waited for and no worker has taken are withdrawn.
  absl::StatusOr<v1::Job> Cancel(const std::string& job_id);
  // Sets the queue depth gauge of every worker class from the store.
  void RefreshQueueDepth();

  store::JobStore& jobs() { return jobs_; }
  store::TaskQueue& tasks() { return tasks_; }
  store::KernelCache& kernels() { return kernels_; }
  store::WorkerRegistry& workers() { return workers_; }
  store::TensorStore& tensors() { return tensors_; }

 private:
  struct Job;
  absl::StatusOr<Job> Load(const std::string& job_id);
  // Queues the task for the job (once per job; a dead task is revived for a new job) and
  // returns its state, recording its outcome as one of the job's events once it ended.
  absl::StatusOr<store::TaskState> Need(const Job& job, const std::string& task_id,
                                        const store::TaskSpec& spec);
  // A lift job: one model-and-GPU task per arch; done when every arch accepted a program.
  absl::Status AdvanceLift(const Job& job);
  absl::Status Observe(const Job& job, const std::string& task_id, const store::TaskState& state,
                       const std::string& kind);
  // The arch's candidates all ended: the best verified one goes to the cache.
  // With the arch's backward (its kernel, or why there is none) in the same entry.
  absl::StatusOr<bool> Select(const Job& job, const std::string& arch,
                              const std::vector<std::pair<std::string, std::string>>& candidates,
                              const v1::TransferResult& transfer_result,
                              const v1::BackwardResult* backward);  // null: forward-only job
  absl::Status Finish(const Job& job, const std::string& state, const std::string& error);
  absl::StatusOr<std::string> WaitingFor(const std::string& job_id);
  absl::Status Event(const std::string& job_id, const std::string& key, const std::string& stage,
                     bool ok, double seconds, const std::string& detail,
                     const std::string& worker = "");

  FlowOptions options_;
  service::Metrics* metrics_;
  store::JobStore jobs_;
  store::TaskQueue tasks_;
  store::KernelCache kernels_;
  store::WorkerRegistry workers_;
  store::TensorStore tensors_;
};

// "sm_80" for every arch of the request that is "sm80"/"SM_80"-like; INVALID_ARGUMENT otherwise.
absl::StatusOr<std::string> NormalizeArch(const std::string& arch);
std::string LevelName(v1::VerificationLevel level);  // "gpu" (also for UNSPECIFIED) or "ir"
std::string BackwardModeName(v1::BackwardMode mode);  // "auto" (also UNSPECIFIED), "off", "require"
// The request's proposer, "rules" when it names none.
std::string ProposerOf(const v1::SubmitJobRequest& request);
// transfer-<hash> for the rules (as before there were other proposers), transfer-<hash>-llm and
// transfer-<hash>-hybrid otherwise: different proposers compute different programs.
std::string TransferTaskId(const std::string& spec_hash, const std::string& proposer);
// liftllm-<kernel hash>-<arch>: a user kernel lifted by a model and checked on a GPU of the arch.
std::string LiftLlmTaskId(const std::string& kernel_hash, const std::string& arch);
// A stored event (JSON, as JobStore keeps them) in the API's form.
v1::StageEvent EventFromJson(const std::string& job_id, const std::string& text);

}  // namespace cubridge::core
