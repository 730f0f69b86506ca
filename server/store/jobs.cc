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

std::string NewJobId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrCat("j-", absl::Hex(rng(), absl::kZeroPad16));
}

// Check and write in one step: two coordinators ending one job must not both win.
constexpr char kSetState[] = R"lua(
local s = redis.call('HGET', KEYS[1], 'state')
if not s then return redis.error_reply('NOJOB') end
if s == 'succeeded' or s == 'failed' or s == 'cancelled' then return s end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'error', ARGV[2])
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'finished_ms', ARGV[3])
  redis.call('SREM', 'cubridge:active', ARGV[4])
end
return 'OK')lua";

constexpr char kActive[] = "cubridge:active";

}  // namespace

absl::StatusOr<std::pair<JobRecord, bool>> JobStore::Create(const std::string& key,
                                                            const std::string& spec_hash,
                                                            const std::string& request) {
  JobRecord job{NewJobId(), "queued", spec_hash, request, "", UnixMillis(), 0};
  // The record is complete before any key points at it, so whoever finds the job through the
  // idempotency key reads a whole record.
  auto set = redis_->Command({"HSET", JobKey(job.id), "state", job.state, "spec_hash", spec_hash,
                              "request", request, "error", "", "created_ms",
                              absl::StrCat(job.created_ms), "finished_ms", "0"});
  if (!set.ok()) return set.status();
  if (!key.empty()) {
    auto claimed = redis_->Command({"SET", "cubridge:idem:" + key, job.id, "NX", "EX",
                                    absl::StrCat(kIdempotencySeconds)});
    if (!claimed.ok()) return claimed.status();
    if (claimed->is_nil()) {  // an earlier submit owns the key: drop ours, answer with theirs
      redis_->Command({"DEL", JobKey(job.id)});
      auto owner = redis_->Command({"GET", "cubridge:idem:" + key});
      if (!owner.ok()) return owner.status();
      auto existing = Get(owner->str);
      if (!existing.ok()) return existing.status();
      return std::make_pair(*existing, false);
    }
  }
  auto index = redis_->Command({"ZADD", kIndex, absl::StrCat(job.created_ms), job.id});
  if (!index.ok()) return index.status();
  auto active = redis_->Command({"SADD", kActive, job.id});
  if (!active.ok()) return active.status();
  return std::make_pair(job, true);
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
  auto r = redis_->Command({"EVAL", kSetState, "1", JobKey(id), state, error,
                            terminal ? absl::StrCat(UnixMillis()) : "", id});
  if (!r.ok()) {
    if (r.status().message().find("NOJOB") != std::string::npos) {
      return absl::NotFoundError(absl::StrCat("no job ", id));
    }
    return r.status();
  }
  if (r->str != "OK") {
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " already ended (", r->str, ")"));
  }
  return absl::OkStatus();
}

absl::Status JobStore::AppendEvent(const std::string& id, const std::string& event_json) {
  auto r = redis_->Command({"RPUSH", EventsKey(id), event_json});
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
  auto kept = redis_->Command({"EXISTS", JobKey(id) + ":transcript"});
  if (!kept.ok()) return kept.status();
  if (kept->integer == 1) return absl::OkStatus();
  auto r = redis_->Command({"SET", JobKey(id) + ":transcript", transcript_json, "NX"});
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::StatusOr<std::string> JobStore::Transcript(const std::string& id) {
  auto r = redis_->Command({"GET", JobKey(id) + ":transcript"});
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

}  // namespace cubridge::store
