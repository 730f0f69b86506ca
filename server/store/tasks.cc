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
constexpr char kDead[] = "cubridge:dead";
// The dead-letter list keeps the newest ids; each one's record says why it died.
constexpr int kDeadKept = 10000;

std::string StreamKey(const std::string& cls) { return "cubridge:tasks:" + cls; }
std::string QueuedKey(const std::string& cls) { return "cubridge:queued:" + cls; }
std::string TaskKey(const std::string& id) { return "cubridge:task:" + id; }
std::string JobsKey(const std::string& id) { return TaskKey(id) + ":jobs"; }
std::string FailedByKey(const std::string& id) { return TaskKey(id) + ":failed_by"; }

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
  if (!group.ok() && StoreError(group.status()) != "BUSYGROUP") return group.status();
  return absl::OkStatus();
}

// Record and delivery in one script: a crash between the two would leave a task nobody can lease.
// KEYS: task, stream, queued set.
constexpr char kEnqueueOnce[] = R"lua(
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local e = redis.call('XADD', KEYS[2], '*', 'task', ARGV[5])
redis.call('HSET', KEYS[1], 'job', ARGV[1], 'kind', ARGV[2], 'payload', ARGV[3], 'class', ARGV[4],
           'attempt', '0', 'token', '0', 'state', 'queued', 'entry', e)
redis.call('SADD', KEYS[3], ARGV[5])
return 1)lua";

// KEYS: task, stream, queued set, jobs, failed_by.
constexpr char kRevive[] = R"lua(
local s = redis.call('HGET', KEYS[1], 'state')
if s ~= 'dead' and s ~= 'withdrawn' then return 0 end
local e = redis.call('XADD', KEYS[2], '*', 'task', ARGV[1])
redis.call('HSET', KEYS[1], 'state', 'queued', 'attempt', '0', 'error', '', 'result', '', 'entry', e,
           'failure_class', '')
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'payload', ARGV[2]) end
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('DEL', KEYS[5])
for i = 1, 4 do redis.call('PERSIST', KEYS[i]) end
redis.call('LREM', 'cubridge:dead', 0, ARGV[1])
return 1)lua";

// A job subscribes; an ended task it now waits on lives another retention. KEYS: task, jobs.
constexpr char kSubscribe[] = R"lua(
redis.call('SADD', KEYS[2], ARGV[1])
if redis.call('PTTL', KEYS[1]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return 1)lua";

// The last job waiting on a task that no worker took yet leaves: nobody is left to want it.
// KEYS: task, jobs, stream, queued set.
constexpr char kUnsubscribe[] = R"lua(
redis.call('SREM', KEYS[2], ARGV[1])
if redis.call('SCARD', KEYS[2]) > 0 then return 0 end
local s = redis.call('HGET', KEYS[1], 'state')
if s ~= 'queued' and s ~= 'retrying' then return 0 end
local e = redis.call('HGET', KEYS[1], 'entry')
if e then redis.call('XDEL', KEYS[3], e) end
redis.call('HSET', KEYS[1], 'state', 'withdrawn')
redis.call('SREM', KEYS[4], ARGV[2])
redis.call('ZREM', 'cubridge:retry', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1)lua";

// A delivery handed back: acknowledged and appended anew at the end of the queue, so that
// another worker reads it first. KEYS: task, stream. ARGV: old entry, task id.
constexpr char kHandBack[] = R"lua(
if redis.call('HGET', KEYS[1], 'entry') ~= ARGV[1] then return 0 end
redis.call('XACK', KEYS[2], 'workers', ARGV[1])
redis.call('XDEL', KEYS[2], ARGV[1])
local e = redis.call('XADD', KEYS[2], '*', 'task', ARGV[2])
redis.call('HSET', KEYS[1], 'entry', e)
return 1)lua";

}  // namespace

absl::StatusOr<std::string> TaskQueue::Enqueue(const TaskSpec& t) {
  const std::string id = NewTaskId();
  auto created = EnqueueOnce(id, t);
  if (!created.ok()) return created.status();
  return id;
}

absl::StatusOr<bool> TaskQueue::EnqueueOnce(const std::string& id, const TaskSpec& t) {
  if (auto s = EnsureGroup(redis_, StreamKey(t.worker_class)); !s.ok()) return s;
  auto r = redis_->Command({"EVAL", kEnqueueOnce, "3", TaskKey(id), StreamKey(t.worker_class),
                            QueuedKey(t.worker_class), t.job_id, t.kind, t.payload, t.worker_class, id});
  if (!r.ok()) return r.status();
  return r->integer == 1;
}

absl::StatusOr<bool> TaskQueue::Revive(const std::string& id, const std::string& payload) {
  auto st = Get(id);
  if (!st.ok()) return st.status();
  auto r = redis_->Command({"EVAL", kRevive, "5", TaskKey(id), StreamKey(st->worker_class),
                            QueuedKey(st->worker_class), JobsKey(id), FailedByKey(id), id, payload});
  if (!r.ok()) return r.status();
  return r->integer == 1;
}

absl::Status TaskQueue::Subscribe(const std::string& task_id, const std::string& job_id) {
  auto r = redis_->Command({"EVAL", kSubscribe, "2", TaskKey(task_id), JobsKey(task_id), job_id,
                            absl::StrCat(retention_.count())});
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::StatusOr<bool> TaskQueue::Unsubscribe(const std::string& task_id, const std::string& job_id) {
  auto st = Get(task_id);
  if (absl::IsNotFound(st.status())) return false;  // expired: nothing to withdraw
  if (!st.ok()) return st.status();
  auto r = redis_->Command({"EVAL", kUnsubscribe, "4", TaskKey(task_id), JobsKey(task_id),
                            StreamKey(st->worker_class), QueuedKey(st->worker_class), job_id,
                            task_id, absl::StrCat(retention_.count())});
  if (!r.ok()) return r.status();
  return r->integer == 1;
}

absl::StatusOr<std::vector<std::string>> TaskQueue::Subscribers(const std::string& task_id) {
  auto r = redis_->Command({"SMEMBERS", JobsKey(task_id)});
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
    auto queued = redis_->Command({"SADD", QueuedKey(st->worker_class), id.str});
    if (!queued.ok()) return queued.status();
    ++moved;
  }
  return moved;
}

absl::StatusOr<int64_t> TaskQueue::Depth(const std::string& cls) {
  auto n = redis_->Command({"SCARD", QueuedKey(cls)});
  if (!n.ok()) return n.status();
  return n->integer;
}

absl::StatusOr<Lease> TaskQueue::Take(const std::string& task_id, const std::string& entry,
                                      const std::string& worker_id) {
  // A delivery can outlive its purpose (the task was finished under another entry, revived or
  // withdrawn): acknowledge it and hand out nothing.
  auto state = redis_->Command({"HMGET", TaskKey(task_id), "state", "entry", "class"});
  if (!state.ok()) return state.status();
  const std::string st = state->elements.size() == 3 ? state->elements[0].str : "";
  if ((st != "queued" && st != "leased") || state->elements[1].str != entry) {
    const std::string cls = state->elements.size() == 3 ? state->elements[2].str : "";
    if (!cls.empty()) redis_->Command({"XACK", StreamKey(cls), kGroup, entry});
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
  auto unqueued = redis_->Command({"SREM", QueuedKey(m["class"]), task_id});
  if (!unqueued.ok()) return unqueued.status();
  Lease l;
  l.task_id = task_id;
  l.task = {m["job"], m["kind"], m["payload"], m["class"]};
  l.attempt = static_cast<int>(attempt->integer);
  l.fencing_token = token->integer;
  return l;
}

absl::StatusOr<std::optional<Lease>> TaskQueue::LeaseNext(const std::string& cls,
                                                          const std::string& worker_id,
                                                          const Decline& decline) {
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
  // A deleted entry (a withdrawn task) comes back from XAUTOCLAIM without fields.
  if (entry->elements.size() < 2 || entry->elements[1].elements.empty()) {
    redis_->Command({"XACK", stream, kGroup, entry->elements.empty() ? "" : entry->elements[0].str});
    return std::optional<Lease>();
  }
  const std::string entry_id = entry->elements[0].str;
  const auto fields = AsMap(entry->elements[1]);
  const auto task = fields.find("task");
  if (task == fields.end()) return std::optional<Lease>();
  if (decline) {
    auto failed = redis_->Command({"SMEMBERS", FailedByKey(task->second)});
    if (!failed.ok()) return failed.status();
    std::vector<std::string> failed_by;
    for (const RedisReply& w : failed->elements) failed_by.push_back(w.str);
    auto when = failed_by.empty() ? absl::StatusOr<RedisReply>(RedisReply())
                                  : redis_->Command({"HGET", TaskKey(task->second), "failed_ms"});
    if (!when.ok()) return when.status();
    if (!failed_by.empty() && decline(task->second, failed_by, ToInt(when->str))) {
      auto back = redis_->Command({"EVAL", kHandBack, "2", TaskKey(task->second), stream, entry_id,
                                   task->second});
      if (!back.ok()) return back.status();
      return std::optional<Lease>();
    }
  }
  auto lease = Take(task->second, entry_id, worker_id);
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
                   m["worker"], m["result"], m["error"], m["class"], m["entry"], m["failure_class"]};
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
  for (const std::string& key : {TaskKey(task_id), JobsKey(task_id), FailedByKey(task_id)}) {
    auto ttl = redis_->Command({"PEXPIRE", key, absl::StrCat(retention_.count())});
    if (!ttl.ok()) return ttl.status();
  }
  auto ack = redis_->Command({"XACK", StreamKey(st->worker_class), kGroup, st->entry});
  if (!ack.ok()) return ack.status();
  auto unqueued = redis_->Command({"SREM", QueuedKey(st->worker_class), task_id});
  return unqueued.ok() ? absl::OkStatus() : unqueued.status();
}

absl::StatusOr<std::string> TaskQueue::Fail(const std::string& task_id, int64_t token,
                                            const Failure& f) {
  auto st = CheckToken(task_id, token);
  if (!st.ok()) return st.status();
  const bool dead = !f.retryable || st->attempt >= max_attempts_;
  const bool later = !dead && backoff_.count() > 0;
  const std::string state = dead ? "dead" : later ? "retrying" : "queued";
  std::vector<std::string> set_args = {"HSET", TaskKey(task_id), "state", state, "error", f.error,
                                       "failure_class", f.failure_class, "failed_ms",
                                       absl::StrCat(UnixMillis())};
  // An attempt that left nothing (a crash) keeps what an earlier attempt left.
  if (!f.partial_result.empty()) set_args.insert(set_args.end(), {"result", f.partial_result});
  auto set = redis_->Command(set_args);
  if (!set.ok()) return set.status();
  if (!st->worker.empty()) {
    auto who = redis_->Command({"SADD", FailedByKey(task_id), st->worker});
    if (!who.ok()) return who.status();
  }
  auto ack = redis_->Command({"XACK", StreamKey(st->worker_class), kGroup, st->entry});
  if (!ack.ok()) return ack.status();
  // Leased tasks are not in the queued set; a coordinator that died inside Take may have left one.
  auto unqueued = redis_->Command({"SREM", QueuedKey(st->worker_class), task_id});
  if (!unqueued.ok()) return unqueued.status();
  absl::StatusOr<RedisReply> next;
  if (dead) {
    next = redis_->Command({"RPUSH", kDead, task_id});
    if (next.ok()) next = redis_->Command({"LTRIM", kDead, absl::StrCat(-kDeadKept), "-1"});
    for (const std::string& key : {TaskKey(task_id), JobsKey(task_id), FailedByKey(task_id)}) {
      if (next.ok()) next = redis_->Command({"PEXPIRE", key, absl::StrCat(retention_.count())});
    }
  } else if (later) {
    const int64_t due = UnixMillis() + backoff_.count() * (int64_t{1} << std::min(st->attempt - 1, 10));
    next = redis_->Command({"ZADD", "cubridge:retry", absl::StrCat(due), task_id});
  } else {
    next = redis_->Command({"XADD", StreamKey(st->worker_class), "*", "task", task_id});
    if (next.ok()) {
      const std::string entry = next->str;
      next = redis_->Command({"HSET", TaskKey(task_id), "entry", entry});
      if (next.ok()) next = redis_->Command({"SADD", QueuedKey(st->worker_class), task_id});
    }
  }
  if (!next.ok()) return next.status();
  return state;
}

}  // namespace cubridge::store
