#include "server/store/tasks.h"

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

}  // namespace

absl::StatusOr<std::string> TaskQueue::Enqueue(const TaskSpec& t) {
  const std::string id = NewTaskId();
  auto group = redis_->Command({"XGROUP", "CREATE", StreamKey(t.worker_class), kGroup, "0", "MKSTREAM"});
  if (!group.ok() && group.status().message().find("BUSYGROUP") == std::string::npos) {
    return group.status();
  }
  auto set = redis_->Command({"HSET", TaskKey(id), "job", t.job_id, "kind", t.kind, "payload",
                              t.payload, "class", t.worker_class, "attempt", "0", "token", "0",
                              "state", "queued"});
  if (!set.ok()) return set.status();
  auto add = redis_->Command({"XADD", StreamKey(t.worker_class), "*", "task", id});
  if (!add.ok()) return add.status();
  return id;
}

absl::StatusOr<Lease> TaskQueue::Take(const std::string& task_id, const std::string& entry,
                                      const std::string& worker_id) {
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
  auto group = redis_->Command({"XGROUP", "CREATE", stream, kGroup, "0", "MKSTREAM"});
  if (!group.ok() && group.status().message().find("BUSYGROUP") == std::string::npos) {
    return group.status();
  }
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
  const std::string entry_id = entry->elements[0].str;
  const auto fields = AsMap(entry->elements[1]);
  auto lease = Take(fields.at("task"), entry_id, worker_id);
  if (!lease.ok()) return lease.status();
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
                                            const std::string& error, bool retryable) {
  auto st = CheckToken(task_id, token);
  if (!st.ok()) return st.status();
  const bool dead = !retryable || st->attempt >= max_attempts_;
  const std::string state = dead ? "dead" : "queued";
  auto set = redis_->Command({"HSET", TaskKey(task_id), "state", state, "error", error});
  if (!set.ok()) return set.status();
  auto ack = redis_->Command({"XACK", StreamKey(st->worker_class), kGroup, st->entry});
  if (!ack.ok()) return ack.status();
  auto next = dead ? redis_->Command({"RPUSH", "cubridge:dead", task_id})
                   : redis_->Command({"XADD", StreamKey(st->worker_class), "*", "task", task_id});
  if (!next.ok()) return next.status();
  return state;
}

}  // namespace cubridge::store
