// Jobs in Redis: the record of each submitted job, its stage events, the idempotency keys that
// map a client's retried submit to the job it already created, and the newest-first index.
//
// Keys (docs/service.md): cubridge:job:<id> (hash), cubridge:job:<id>:events (list of JSON
// events), cubridge:job:<id>:transcript (string: the LLM conversation), cubridge:idem:<key> (job
// id, 24 h), cubridge:jobs (sorted set by creation time), cubridge:active (set of the jobs that
// have not ended: what a restarted coordinator resumes). A job's keys expire `retention` after it
// ended; the index forgets it after that (ForgetExpired).
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/store/redis.h"

namespace cubridge::store {

struct JobRecord {
  std::string id;
  std::string state;      // queued | running | succeeded | failed | cancelled
  std::string spec_hash;
  std::string request;    // the serialized SubmitJobRequest
  std::string error;
  int64_t created_ms = 0;
  int64_t finished_ms = 0;
};

struct CreatedJob {
  enum class Outcome {
    kCreated,   // a new queued job
    kExisting,  // an earlier submit with the same idempotency key and request made `job`
    kConflict,  // the key names `job`, made for another request (its fingerprint differs)
  };
  JobRecord job;
  Outcome outcome = Outcome::kCreated;
};

class JobStore {
 public:
  // `retention`: how long an ended job's keys stay (7 days by default).
  explicit JobStore(RedisClient* redis,
                    std::chrono::milliseconds retention = std::chrono::hours(24 * 7))
      : redis_(redis), retention_(retention) {}

  // A new queued job with `fields` in its record, or the job an earlier submit with the same
  // non-empty idempotency key created: the same job when `fingerprint` (the request without its
  // key) is the same, a conflict otherwise. Safe against concurrent submits with one key from any
  // number of coordinators: exactly one of them creates the job.
  absl::StatusOr<CreatedJob> Create(const std::string& idempotency_key, const std::string& spec_hash,
                                    const std::string& request, const std::string& fingerprint,
                                    const std::vector<std::pair<std::string, std::string>>& fields = {});
  absl::StatusOr<JobRecord> Get(const std::string& id);  // NOT_FOUND for an unknown id
  // Terminal states (succeeded, failed, cancelled) record the finish time and start the job's
  // retention; a job that already ended keeps its state (FAILED_PRECONDITION).
  absl::Status SetState(const std::string& id, const std::string& state,
                        const std::string& error = "");
  // Appends to a job that exists (an expired job gets no orphan events list).
  absl::Status AppendEvent(const std::string& id, const std::string& event_json);
  // Appends unless an event with this key was already appended to the job: several coordinators
  // (or one restarted) may observe the same task outcome.
  absl::Status AppendEventOnce(const std::string& id, const std::string& key,
                               const std::string& event_json);
  // Extra fields of the job's record (archs, verification level, cache hit, ...).
  absl::Status SetField(const std::string& id, const std::string& field, const std::string& value);
  absl::StatusOr<std::string> Field(const std::string& id, const std::string& field);
  absl::StatusOr<std::vector<std::string>> Active();  // jobs not ended, any order
  // True the first time it is called for (job, key): one-time steps of a job that several
  // coordinators may attempt together.
  absl::StatusOr<bool> Once(const std::string& id, const std::string& key);
  // Every field of the record whose name starts with `prefix`.
  absl::StatusOr<std::map<std::string, std::string>> Fields(const std::string& id,
                                                            const std::string& prefix);
  absl::StatusOr<std::vector<std::string>> Events(const std::string& id, int64_t from = 0);
  // The LLM conversation of the job's transfer (JSON), in a key of its own so that reading the
  // job's record does not carry it. The first one stored stays: several coordinators may observe
  // the same transfer ending. Transcript() is "" when none was stored.
  absl::Status KeepTranscript(const std::string& id, const std::string& transcript_json);
  absl::StatusOr<std::string> Transcript(const std::string& id);
  absl::StatusOr<std::vector<JobRecord>> List(int limit);  // newest first
  // Drops index entries of jobs whose records expired (up to `limit` per call); returns how many.
  absl::StatusOr<int> ForgetExpired(int limit = 500);

 private:
  // Puts a job in the index and the active set and drops its provisional expiry, unless it is
  // indexed already.
  absl::Status Index(const std::string& id, int64_t created_ms);

  RedisClient* redis_;
  std::chrono::milliseconds retention_;
};

}  // namespace cubridge::store
