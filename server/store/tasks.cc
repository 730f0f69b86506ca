#include "server/store/tasks.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cubridge::store {
namespace {

constexpr char kGroup[] = "workers";

std::string StreamKey(const std::string& cls) { return "cubridge:tasks:" + cls; }
std::string TaskKey(const std::string& id) { return "cubridge:task:" + id; }

std::string NewTaskId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrCat("t-", absl::Hex(rng(), absl::kZeroPad16));
}

std::map<std::string, std::string> AsMap(const RedisReply& r) {
  std::map<std::string, std::string> out;
  for (size_t i = 0; i + 1 < r.elements.size(); i += 2) out[r.elements[i].str] = r.elements[i + 1].str;
  return out;
}

int64_t ToInt(const std::string& s) {
  int64_t v = 0;
  return absl::SimpleAtoi(s, &v) ? v : 0;
}

absl::Status EnsureGroup(RedisClient* redis, const std::string& stream) {
  auto group = redis->Command({"XGROUP", "CREATE", stream, kGroup, "0", "MKSTREAM"});
  if (!group.ok() && group.status().message().find("BUSYGROUP") == std::string::npos) {
    return group.status();
  }
  return absl::OkStatus();
}

// Record and delivery in one script: a crash between the two would leave a task nobody can lease.
constexpr char kEnqueueOnce[] = R"lua(
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local e = redis.call('XADD', KEYS[2], '*', 'task', ARGV[5])
redis.call('HSET', KEYS[1], 'job', ARGV[1], 'kind', ARGV[2], 'payload', ARGV[3], 'class', ARGV[4],
           'attempt', '0', 'token', '0', 'state', 'queued', 'entry', e)
return 1)lua";

constexpr char kRevive[] = R"lua(
if redis.call('HGET', KEYS[1], 'state') ~= 'dead' then return 0 end
local e = redis.call('XADD', KEYS[2], '*', 'task', ARGV[1])
redis.call('HSET', KEYS[1], 'state', 'queued', 'attempt', '0', 'error', '', 'result', '', 'entry', e)
redis.call('LREM', 'cubridge:dead', 0, ARGV[1])
return 1)lua";

}  // namespace

absl::StatusOr<std::string> TaskQueue::Enqueue(const TaskSpec& t) {
  const std::string id = NewTaskId();
  if (auto s = EnsureGroup(redis_, StreamKey(t.worker_class)); !s.ok()) return s;
  auto set = redis_->Command({"HSET", TaskKey(id), "job", t.job_id, "kind", t.kind, "payload",
                              t.payload, "class", t.worker_class, "attempt", "0", "token", "0",
                              "state", "queued"});
  if (!set.ok()) return set.status();
  auto add = redis_->Command({"XADD", StreamKey(t.worker_class), "*", "task", id});
  if (!add.ok()) return add.status();
  return id;
}

absl::StatusOr<bool> TaskQueue::EnqueueOnce(const std::string& id, const TaskSpec& t) {
  if (auto s = EnsureGroup(redis_, StreamKey(t.worker_class)); !s.ok()) return s;
  auto r = redis_->Command({"EVAL", kEnqueueOnce, "2", TaskKey(id), StreamKey(t.worker_class),
                            t.job_id, t.kind, t.payload, t.worker_class, id});
  if (!r.ok()) return r.status();
  return r->integer == 1;
}

absl::StatusOr<bool> TaskQueue::Revive(const std::string& id) {
  auto st = Get(id);
  if (!st.ok()) return st.status();
  auto r = redis_->Command({"EVAL", kRevive, "2", TaskKey(id), StreamKey(st->worker_class), id});
  if (!r.ok()) return r.status();
  return r->integer == 1;
}

absl::Status TaskQueue::Subscribe(const std::string& task_id, const std::string& job_id) {
  auto r = redis_->Command({"SADD", TaskKey(task_id) + ":jobs", job_id});
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::StatusOr<std::vector<std::string>> TaskQueue::Subscribers(const std::string& task_id) {
  auto r = redis_->Command({"SMEMBERS", TaskKey(task_id) + ":jobs"});
  if (!r.ok()) return r.status();
  std::vector<std::string> out;
  for (const RedisReply& e : r->elements) out.push_back(e.str);
  return out;
}

absl::StatusOr<int> TaskQueue::PromoteDueRetries() {
  auto due = redis_->Command({"ZRANGEBYSCORE", "cubridge:retry", "0", absl::StrCat(UnixMillis())});
  if (!due.ok()) return due.status();
  int moved = 0;
  for (const RedisReply& id : due->elements) {
    // ZREM decides which of several racing coordinators re-queues it.
    auto won = redis_->Command({"ZREM", "cubridge:retry", id.str});
    if (!won.ok()) return won.status();
    if (won->integer != 1) continue;
    auto st = Get(id.str);
    if (!st.ok()) return st.status();
    auto add = redis_->Command({"XADD", StreamKey(st->worker_class), "*", "task", id.str});
    if (!add.ok()) return add.status();
    auto set = redis_->Command({"HSET", TaskKey(id.str), "state", "queued", "entry", add->str});
    if (!set.ok()) return set.status();
    ++moved;
  }
  return moved;
}

absl::StatusOr<int64_t> TaskQueue::Depth(const std::string& cls) {
  if (auto s = EnsureGroup(redis_, StreamKey(cls)); !s.ok()) return s;
  auto info = redis_->Command({"XINFO", "GROUPS", StreamKey(cls)});
  if (!info.ok()) return info.status();
  for (const RedisReply& g : info->elements) {
    auto m = g.elements;
    for (size_t i = 0; i + 1 < m.size(); i += 2) {
      if (m[i].str == "lag") return m[i + 1].integer;
    }
  }
  return 0;
}

absl::StatusOr<Lease> TaskQueue::Take(const std::string& task_id, const std::string& entry,
                                      const std::string& worker_id) {
  // A delivery can outlive its purpose (the task was finished under another entry, or revived):
  // acknowledge it and hand out nothing.
  auto state = redis_->Command({"HGET", TaskKey(task_id), "state"});
  if (!state.ok()) return state.status();
  if (state->str != "queued" && state->str != "leased") {
    auto cls = redis_->Command({"HGET", TaskKey(task_id), "class"});
    if (cls.ok()) redis_->Command({"XACK", StreamKey(cls->str), kGroup, entry});
    return absl::NotFoundError("stale delivery");
  }
  auto token = redis_->Command({"INCR", "cubridge:fence"});
  if (!token.ok()) return token.status();
  auto attempt = redis_->Command({"HINCRBY", TaskKey(task_id), "attempt", "1"});
  if (!attempt.ok()) return attempt.status();
  auto set = redis_->Command({"HSET", TaskKey(task_id), "token", absl::StrCat(token->integer),
                              "entry", entry, "worker", worker_id, "state", "leased"});
  if (!set.ok()) return set.status();
  auto fields = redis_->Command({"HGETALL", TaskKey(task_id)});
  if (!fields.ok()) return fields.status();
  auto m = AsMap(*fields);
  Lease l;
  l.task_id = task_id;
  l.task = {m["job"], m["kind"], m["payload"], m["class"]};
  l.attempt = static_cast<int>(attempt->integer);
  l.fencing_token = token->integer;
  return l;
}

absl::StatusOr<std::optional<Lease>> TaskQueue::LeaseNext(const std::string& cls,
                                                          const std::string& worker_id) {
  const std::string stream = StreamKey(cls);
  if (auto s = EnsureGroup(redis_, stream); !s.ok()) return s;
  // First a delivery whose lease ran out (its worker died or hung), then new work.
  auto claimed = redis_->Command({"XAUTOCLAIM", stream, kGroup, worker_id,
                                  absl::StrCat(lease_.count()), "0", "COUNT", "1"});
  if (!claimed.ok()) return claimed.status();
  const RedisReply* entry = nullptr;
  if (claimed->elements.size() >= 2 && !claimed->elements[1].elements.empty()) {
    entry = &claimed->elements[1].elements[0];
  }
  RedisReply fresh;
  if (entry == nullptr) {
    auto read = redis_->Command({"XREADGROUP", "GROUP", kGroup, worker_id, "COUNT", "1",
                                 "STREAMS", stream, ">"});
    if (!read.ok()) return read.status();
    if (read->is_nil() || read->elements.empty()) return std::optional<Lease>();
    fresh = *read;
    entry = &fresh.elements[0].elements[1].elements[0];
  }
  const bool reclaimed = fresh.is_nil();
  const std::string entry_id = entry->elements[0].str;
  const auto fields = AsMap(entry->elements[1]);
  auto lease = Take(fields.at("task"), entry_id, worker_id);
  if (absl::IsNotFound(lease.status())) return std::optional<Lease>();
  if (!lease.ok()) return lease.status();
  lease->reclaimed = reclaimed;
  return std::optional<Lease>(*lease);
}

absl::StatusOr<TaskState> TaskQueue::Get(const std::string& task_id) {
  auto fields = redis_->Command({"HGETALL", TaskKey(task_id)});
  if (!fields.ok()) return fields.status();
  if (fields->elements.empty()) return absl::NotFoundError("no task " + task_id);
  auto m = AsMap(*fields);
  return TaskState{m["state"],  static_cast<int>(ToInt(m["attempt"])), ToInt(m["token"]),
                   m["worker"], m["result"], m["error"], m["class"], m["entry"]};
}

absl::StatusOr<TaskState> TaskQueue::CheckToken(const std::string& task_id, int64_t token) {
  auto st = Get(task_id);
  if (!st.ok()) return st.status();
  if (st->state != "leased" || st->fencing_token != token) {
    return absl::FailedPreconditionError(absl::StrCat(
        "task ", task_id, ": fencing token ", token, " is stale (the task is ", st->state,
        st->state == "leased" ? absl::StrCat(" under token ", st->fencing_token) : "", ")"));
  }
  return st;
}

absl::Status TaskQueue::Heartbeat(const std::string& task_id, int64_t token) {
  auto st = CheckToken(task_id, token);
  if (!st.ok()) return st.status();
  // Claiming the delivery for its own consumer resets its idle time: the lease is extended.
  auto claim = redis_->Command({"XCLAIM", StreamKey(st->worker_class), kGroup, st->worker, "0",
                                st->entry, "JUSTID"});
  return claim.ok() ? absl::OkStatus() : claim.status();
}

absl::Status TaskQueue::Complete(const std::string& task_id, int64_t token,
                                 const std::string& result) {
  auto st = CheckToken(task_id, token);
  if (!st.ok()) return st.status();
  auto set = redis_->Command({"HSET", TaskKey(task_id), "state", "done", "result", result});
  if (!set.ok()) return set.status();
  auto ack = redis_->Command({"XACK", StreamKey(st->worker_class), kGroup, st->entry});
  return ack.ok() ? absl::OkStatus() : ack.status();
}

absl::StatusOr<std::string> TaskQueue::Fail(const std::string& task_id, int64_t token,
                                            const std::string& error, bool retryable,
                                            const std::string& partial_result) {
  auto st = CheckToken(task_id, token);
  if (!st.ok()) return st.status();
  const bool dead = !retryable || st->attempt >= max_attempts_;
  const bool later = !dead && backoff_.count() > 0;
  const std::string state = dead ? "dead" : later ? "retrying" : "queued";
  std::vector<std::string> set_args = {"HSET", TaskKey(task_id), "state", state, "error", error};
  // An attempt that left nothing (a crash) keeps what an earlier attempt left.
  if (!partial_result.empty()) set_args.insert(set_args.end(), {"result", partial_result});
  auto set = redis_->Command(set_args);
  if (!set.ok()) return set.status();
  auto ack = redis_->Command({"XACK", StreamKey(st->worker_class), kGroup, st->entry});
  if (!ack.ok()) return ack.status();
  absl::StatusOr<RedisReply> next;
  if (dead) {
    next = redis_->Command({"RPUSH", "cubridge:dead", task_id});
  } else if (later) {
    const int64_t due = UnixMillis() + backoff_.count() * (int64_t{1} << std::min(st->attempt - 1, 10));
    next = redis_->Command({"ZADD", "cubridge:retry", absl::StrCat(due), task_id});
  } else {
    next = redis_->Command({"XADD", StreamKey(st->worker_class), "*", "task", task_id});
  }
  if (!next.ok()) return next.status();
  return state;
}

}  // namespace cubridge::store
