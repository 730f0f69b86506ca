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
constexpr char kRetry[] = "cubridge:retry";
constexpr char kFence[] = "cubridge:fence";
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

// Every change of a task's state is one script: a coordinator killed, or a Redis restarted,
// between the steps of one would leave a task in a state no path leaves (a "queued" task with
// no delivery, a "retrying" one off the retry set), and its jobs would wait for ever.

// A due retry queued again; ZREM decides which of several racing coordinators does it.
// KEYS: retry set, task, stream, queued set. ARGV: task id.
constexpr char kPromote[] = R"lua(
if redis.call('ZREM', KEYS[1], ARGV[1]) ~= 1 then return 0 end
local e = redis.call('XADD', KEYS[3], '*', 'task', ARGV[1])
redis.call('HSET', KEYS[2], 'state', 'queued', 'entry', e)
redis.call('SADD', KEYS[4], ARGV[1])
return 1)lua";

// A delivery becomes a lease, unless it outlived its purpose (the task was finished under
// another entry, revived or withdrawn, or has expired): then it is acknowledged and 0 returned.
// KEYS: task, stream, queued set, fence counter. ARGV: entry, worker, task id.
constexpr char kTake[] = R"lua(
local f = redis.call('HMGET', KEYS[1], 'state', 'entry')
if (f[1] ~= 'queued' and f[1] ~= 'leased') or f[2] ~= ARGV[1] then
  redis.call('XACK', KEYS[2], 'workers', ARGV[1])
  return 0
end
local token = redis.call('INCR', KEYS[4])
local attempt = redis.call('HINCRBY', KEYS[1], 'attempt', 1)
redis.call('HSET', KEYS[1], 'token', token, 'entry', ARGV[1], 'worker', ARGV[2], 'state', 'leased')
redis.call('SREM', KEYS[3], ARGV[3])
local t = redis.call('HMGET', KEYS[1], 'job', 'kind', 'payload', 'class')
return {token, attempt, t[1] or '', t[2] or '', t[3] or '', t[4] or ''})lua";

// The lease's result accepted; 0 when the token is not the task's current lease.
// KEYS: task, jobs, failed_by, stream, queued set. ARGV: token, result, retention ms, task id.
constexpr char kComplete[] = R"lua(
local f = redis.call('HMGET', KEYS[1], 'state', 'token', 'entry')
if f[1] ~= 'leased' or f[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', 'done', 'result', ARGV[2])
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[3]) end
redis.call('XACK', KEYS[4], 'workers', f[3])
redis.call('SREM', KEYS[5], ARGV[4])
return 1)lua";

// A failed attempt: dead-lettered, backed off, or queued again at once (ARGV[2] says which);
// 0 when the token is not the task's current lease. An attempt that left nothing (a crash)
// keeps what an earlier attempt left. Leased tasks are not in the queued set, but an older
// coordinator that died inside a lease may have left one there.
// KEYS: task, jobs, failed_by, stream, queued set, dead list, retry set.
// ARGV: token, next state, error, failure class, now ms, partial result, retention ms, due ms,
//       task id, dead-letter length.
constexpr char kFail[] = R"lua(
local f = redis.call('HMGET', KEYS[1], 'state', 'token', 'entry', 'worker')
if f[1] ~= 'leased' or f[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'error', ARGV[3], 'failure_class', ARGV[4],
           'failed_ms', ARGV[5])
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'result', ARGV[6]) end
if f[4] and f[4] ~= '' then redis.call('SADD', KEYS[3], f[4]) end
redis.call('XACK', KEYS[4], 'workers', f[3])
redis.call('SREM', KEYS[5], ARGV[9])
if ARGV[2] == 'dead' then
  redis.call('RPUSH', KEYS[6], ARGV[9])
  redis.call('LTRIM', KEYS[6], -tonumber(ARGV[10]), -1)
  for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[7]) end
elseif ARGV[2] == 'retrying' then
  redis.call('ZADD', KEYS[7], ARGV[8], ARGV[9])
else
  local e = redis.call('XADD', KEYS[4], '*', 'task', ARGV[9])
  redis.call('HSET', KEYS[1], 'entry', e)
  redis.call('SADD', KEYS[5], ARGV[9])
end
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
  auto due = redis_->Command({"ZRANGEBYSCORE", kRetry, "0", absl::StrCat(UnixMillis())});
  if (!due.ok()) return due.status();
  int moved = 0;
  for (const RedisReply& id : due->elements) {
    auto st = Get(id.str);
    if (absl::IsNotFound(st.status())) {  // expired while it waited: nothing left to run
      auto gone = redis_->Command({"ZREM", kRetry, id.str});
      if (!gone.ok()) return gone.status();
      continue;
    }
    if (!st.ok()) return st.status();
    auto won = redis_->Command({"EVAL", kPromote, "4", kRetry, TaskKey(id.str),
                                StreamKey(st->worker_class), QueuedKey(st->worker_class), id.str});
    if (!won.ok()) return won.status();
    moved += won->integer == 1 ? 1 : 0;
  }
  return moved;
}

absl::StatusOr<int64_t> TaskQueue::Depth(const std::string& cls) {
  auto n = redis_->Command({"SCARD", QueuedKey(cls)});
  if (!n.ok()) return n.status();
  return n->integer;
}

absl::StatusOr<Lease> TaskQueue::Take(const std::string& task_id, const std::string& entry,
                                      const std::string& worker_class, const std::string& worker_id) {
  auto r = redis_->Command({"EVAL", kTake, "4", TaskKey(task_id), StreamKey(worker_class),
                            QueuedKey(worker_class), kFence, entry, worker_id, task_id});
  if (!r.ok()) return r.status();
  if (r->elements.size() != 6) return absl::NotFoundError("stale delivery");
  Lease l;
  l.task_id = task_id;
  l.fencing_token = r->elements[0].integer;
  l.attempt = static_cast<int>(r->elements[1].integer);
  l.task = {r->elements[2].str, r->elements[3].str, r->elements[4].str, r->elements[5].str};
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
  auto lease = Take(task->second, entry_id, cls, worker_id);
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
  auto r = redis_->Command({"EVAL", kComplete, "5", TaskKey(task_id), JobsKey(task_id),
                            FailedByKey(task_id), StreamKey(st->worker_class),
                            QueuedKey(st->worker_class), absl::StrCat(token), result,
                            absl::StrCat(retention_.count()), task_id});
  if (!r.ok()) return r.status();
  // Superseded between the check and the script: the check says by what.
  if (r->integer != 1) return CheckToken(task_id, token).status();
  return absl::OkStatus();
}

absl::StatusOr<std::string> TaskQueue::Fail(const std::string& task_id, int64_t token,
                                            const Failure& f) {
  auto st = CheckToken(task_id, token);
  if (!st.ok()) return st.status();
  // The attempt count only changes with the token, which the script checks again.
  const bool dead = !f.retryable || st->attempt >= max_attempts_;
  const bool later = !dead && backoff_.count() > 0;
  const std::string state = dead ? "dead" : later ? "retrying" : "queued";
  const int64_t due = UnixMillis() + backoff_.count() * (int64_t{1} << std::clamp(st->attempt - 1, 0, 10));
  auto r = redis_->Command({"EVAL", kFail, "7", TaskKey(task_id), JobsKey(task_id),
                            FailedByKey(task_id), StreamKey(st->worker_class),
                            QueuedKey(st->worker_class), kDead, kRetry, absl::StrCat(token), state,
                            f.error, f.failure_class, absl::StrCat(UnixMillis()), f.partial_result,
                            absl::StrCat(retention_.count()), absl::StrCat(due), task_id,
                            absl::StrCat(kDeadKept)});
  if (!r.ok()) return r.status();
  if (r->integer != 1) {
    auto again = CheckToken(task_id, token);
    return again.ok() ? absl::AbortedError("task " + task_id + " changed during its failure")
                      : again.status();
  }
  return state;
}

}  // namespace cubridge::store
