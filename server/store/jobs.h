// Jobs in Redis: the record of each submitted job, its stage events, the idempotency keys that
// map a client's retried submit to the job it already created, and the newest-first index.
//
// Keys (docs/service.md): cubridge:job:<id> (hash), cubridge:job:<id>:events (list of JSON
// events), cubridge:job:<id>:transcript (string: the LLM conversation), cubridge:idem:<key> (job id, 24 h), cubridge:jobs (sorted set by creation time),
// cubridge:active (set of the jobs that have not ended: what a restarted coordinator resumes).
#pragma once

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

class JobStore {
 public:
  explicit JobStore(RedisClient* redis) : redis_(redis) {}

  // A new queued job, or (created = false) the job an earlier submit with the same non-empty
  // idempotency key created. Safe against concurrent submits with one key from any number of
  // coordinators: exactly one of them creates the job.
  absl::StatusOr<std::pair<JobRecord, bool>> Create(const std::string& idempotency_key,
                                                    const std::string& spec_hash,
                                                    const std::string& request);
  absl::StatusOr<JobRecord> Get(const std::string& id);  // NOT_FOUND for an unknown id
  // Terminal states (succeeded, failed, cancelled) record the finish time; a job that already
  // ended keeps its state (FAILED_PRECONDITION).
  absl::Status SetState(const std::string& id, const std::string& state,
                        const std::string& error = "");
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

 private:
  RedisClient* redis_;
};

}  // namespace cubridge::store
