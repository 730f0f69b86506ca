#include "server/store/jobs.h"

#include <chrono>
#include <map>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cubridge::store {
namespace {

constexpr char kIndex[] = "cubridge:jobs";
constexpr int kIdempotencySeconds = 24 * 3600;

std::string JobKey(const std::string& id) { return "cubridge:job:" + id; }
std::string EventsKey(const std::string& id) { return JobKey(id) + ":events"; }
std::string TranscriptKey(const std::string& id) { return JobKey(id) + ":transcript"; }

std::string NewJobId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrCat("j-", absl::Hex(rng(), absl::kZeroPad16));
}

// Check and write in one step: two coordinators ending one job must not both win. An ended job's
// keys start their retention here (ARGV[5], milliseconds).
constexpr char kSetState[] = R"lua(
local s = redis.call('HGET', KEYS[1], 'state')
if not s then return 'NOJOB' end
if s == 'succeeded' or s == 'failed' or s == 'cancelled' then return s end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'error', ARGV[2])
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'finished_ms', ARGV[3])
  redis.call('SREM', 'cubridge:active', ARGV[4])
  for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[5]) end
end
return 'OK')lua";

// Keys that belong to a job are written only while it exists, and share its time to live: a late
// event for an expired job must not leave a list behind that never expires.
constexpr char kAppendToJob[] = R"lua(
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[1] == 'list' then
  redis.call('RPUSH', KEYS[2], ARGV[2])
elseif redis.call('SET', KEYS[2], ARGV[2], 'NX') == false then
  return 0
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
return 1)lua";

constexpr char kActive[] = "cubridge:active";

// A new job becomes visible (the index, the active set) and permanent in one step; a job that is
// indexed already (it may have ended and left the active set) is left as it is.
// KEYS: index, active set, job. ARGV: id, created ms.
constexpr char kIndexJob[] = R"lua(
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
if redis.call('EXISTS', KEYS[3]) == 0 then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('PERSIST', KEYS[3])
return 1)lua";

}  // namespace

absl::StatusOr<CreatedJob> JobStore::Create(const std::string& key, const std::string& spec_hash,
                                            const std::string& request, const std::string& fingerprint,
                                            const std::vector<std::pair<std::string, std::string>>& fields) {
  JobRecord job{NewJobId(), "queued", spec_hash, request, "", UnixMillis(), 0};
  // The record is complete (one HSET) before any key points at it, so whoever finds the job
  // through the idempotency key or the active set reads a whole record.
  std::vector<std::string> hset = {"HSET", JobKey(job.id), "state", job.state, "spec_hash", spec_hash,
                                   "request", request, "fingerprint", fingerprint, "error", "",
                                   "created_ms", absl::StrCat(job.created_ms), "finished_ms", "0"};
  for (const auto& [field, value] : fields) hset.insert(hset.end(), {field, value});
  auto set = redis_->Command(hset);
  if (!set.ok()) return set.status();
  // Until the job is indexed it expires on its own: a coordinator that dies half-way through a
  // submit leaves no record behind (the client's retry makes the job anew).
  auto provisional = redis_->Command({"PEXPIRE", JobKey(job.id), "600000"});
  if (!provisional.ok()) return provisional.status();
  // Twice at most: a key whose job already expired is taken over once.
  for (int attempt = 0; !key.empty(); ++attempt) {
    const std::string idem = "cubridge:idem:" + key;
    auto claimed = redis_->Command({"SET", idem, job.id, "NX", "EX", absl::StrCat(kIdempotencySeconds)});
    if (!claimed.ok()) return claimed.status();
    if (!claimed->is_nil()) break;
    // An earlier submit owns the key: drop ours, answer with theirs.
    auto owner = redis_->Command({"GET", idem});
    if (!owner.ok()) return owner.status();
    auto existing = Get(owner->str);
    if (absl::IsNotFound(existing.status()) && attempt == 0) {
      // Its job ended longer ago than the retention: the key is free again (if still that job's).
      redis_->Command({"EVAL", "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end",
                       "1", idem, owner->str});
      continue;
    }
    redis_->Command({"DEL", JobKey(job.id)});
    if (!existing.ok()) return existing.status();
    auto theirs = Field(existing->id, "fingerprint");
    if (!theirs.ok()) return theirs.status();
    // Jobs stored before fingerprints were kept have none: they answer as before.
    const bool same = theirs->empty() || *theirs == fingerprint;
    // The submit that made it may have died between claiming the key and indexing the job: the
    // retry finishes that, or the job would wait unseen by the sweep until its record expired.
    if (same) {
      if (auto s = Index(existing->id, existing->created_ms); !s.ok()) return s;
    }
    return CreatedJob{*existing, same ? CreatedJob::Outcome::kExisting : CreatedJob::Outcome::kConflict};
  }
  if (auto s = Index(job.id, job.created_ms); !s.ok()) return s;
  return CreatedJob{job, CreatedJob::Outcome::kCreated};
}

absl::Status JobStore::Index(const std::string& id, int64_t created_ms) {
  auto r = redis_->Command({"EVAL", kIndexJob, "3", kIndex, kActive, JobKey(id), id,
                            absl::StrCat(created_ms)});
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::StatusOr<JobRecord> JobStore::Get(const std::string& id) {
  auto r = redis_->Command({"HGETALL", JobKey(id)});
  if (!r.ok()) return r.status();
  if (r->elements.empty()) return absl::NotFoundError(absl::StrCat("no job ", id));
  std::map<std::string, std::string> m;
  for (size_t i = 0; i + 1 < r->elements.size(); i += 2) m[r->elements[i].str] = r->elements[i + 1].str;
  JobRecord job{id, m["state"], m["spec_hash"], m["request"], m["error"], 0, 0};
  (void)absl::SimpleAtoi(m["created_ms"], &job.created_ms);
  (void)absl::SimpleAtoi(m["finished_ms"], &job.finished_ms);
  return job;
}

absl::Status JobStore::SetState(const std::string& id, const std::string& state,
                                const std::string& error) {
  const bool terminal = state == "succeeded" || state == "failed" || state == "cancelled";
  auto r = redis_->Command({"EVAL", kSetState, "3", JobKey(id), EventsKey(id), TranscriptKey(id),
                            state, error, terminal ? absl::StrCat(UnixMillis()) : "", id,
                            absl::StrCat(retention_.count())});
  if (!r.ok()) return r.status();
  if (r->str == "NOJOB") return absl::NotFoundError(absl::StrCat("no job ", id));
  if (r->str != "OK") {
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " already ended (", r->str, ")"));
  }
  return absl::OkStatus();
}

absl::Status JobStore::AppendEvent(const std::string& id, const std::string& event_json) {
  auto r = redis_->Command({"EVAL", kAppendToJob, "2", JobKey(id), EventsKey(id), "list", event_json});
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::StatusOr<bool> JobStore::Once(const std::string& id, const std::string& key) {
  auto fresh = redis_->Command({"HSETNX", JobKey(id), key, "1"});
  if (!fresh.ok()) return fresh.status();
  return fresh->integer == 1;
}

absl::StatusOr<std::map<std::string, std::string>> JobStore::Fields(const std::string& id,
                                                                    const std::string& prefix) {
  auto r = redis_->Command({"HGETALL", JobKey(id)});
  if (!r.ok()) return r.status();
  std::map<std::string, std::string> out;
  for (size_t i = 0; i + 1 < r->elements.size(); i += 2) {
    if (r->elements[i].str.rfind(prefix, 0) == 0) out[r->elements[i].str] = r->elements[i + 1].str;
  }
  return out;
}

absl::Status JobStore::AppendEventOnce(const std::string& id, const std::string& key,
                                       const std::string& event_json) {
  auto fresh = Once(id, "event:" + key);
  if (!fresh.ok()) return fresh.status();
  return *fresh ? AppendEvent(id, event_json) : absl::OkStatus();
}

absl::Status JobStore::SetField(const std::string& id, const std::string& field,
                                const std::string& value) {
  auto r = redis_->Command({"HSET", JobKey(id), field, value});
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::StatusOr<std::string> JobStore::Field(const std::string& id, const std::string& field) {
  auto r = redis_->Command({"HGET", JobKey(id), field});
  if (!r.ok()) return r.status();
  return r->str;
}

absl::StatusOr<std::vector<std::string>> JobStore::Active() {
  auto r = redis_->Command({"SMEMBERS", kActive});
  if (!r.ok()) return r.status();
  std::vector<std::string> out;
  for (const RedisReply& e : r->elements) out.push_back(e.str);
  return out;
}

absl::StatusOr<std::vector<std::string>> JobStore::Events(const std::string& id, int64_t from) {
  auto r = redis_->Command({"LRANGE", EventsKey(id), absl::StrCat(from), "-1"});
  if (!r.ok()) return r.status();
  std::vector<std::string> out;
  for (const RedisReply& e : r->elements) out.push_back(e.str);
  return out;
}

absl::Status JobStore::KeepTranscript(const std::string& id, const std::string& transcript_json) {
  // Every advance of the job observes its ended transfer again: look before sending it all.
  auto kept = redis_->Command({"EXISTS", TranscriptKey(id)});
  if (!kept.ok()) return kept.status();
  if (kept->integer == 1) return absl::OkStatus();
  auto r = redis_->Command({"EVAL", kAppendToJob, "2", JobKey(id), TranscriptKey(id), "string",
                            transcript_json});
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::StatusOr<std::string> JobStore::Transcript(const std::string& id) {
  auto r = redis_->Command({"GET", TranscriptKey(id)});
  if (!r.ok()) return r.status();
  return r->str;
}

absl::StatusOr<std::vector<JobRecord>> JobStore::List(int limit) {
  auto ids = redis_->Command({"ZREVRANGE", kIndex, "0", absl::StrCat(limit - 1)});
  if (!ids.ok()) return ids.status();
  std::vector<JobRecord> out;
  for (const RedisReply& id : ids->elements) {
    auto job = Get(id.str);
    if (job.ok()) out.push_back(*std::move(job));
  }
  return out;
}

absl::StatusOr<int> JobStore::ForgetExpired(int limit) {
  // A job cannot have ended before it was created: entries younger than the retention are alive.
  const int64_t before = UnixMillis() - retention_.count();
  auto old = redis_->Command({"ZRANGEBYSCORE", kIndex, "-inf", absl::StrCat(before), "LIMIT", "0",
                              absl::StrCat(limit)});
  if (!old.ok()) return old.status();
  int forgotten = 0;
  for (const RedisReply& id : old->elements) {
    auto exists = redis_->Command({"EXISTS", JobKey(id.str)});
    if (!exists.ok()) return exists.status();
    if (exists->integer != 0) continue;
    auto removed = redis_->Command({"ZREM", kIndex, id.str});
    if (!removed.ok()) return removed.status();
    forgotten += static_cast<int>(removed->integer);
  }
  return forgotten;
}

}  // namespace cubridge::store
