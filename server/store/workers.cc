#include "server/store/workers.h"

#include <algorithm>
#include <map>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace cubridge::store {
namespace {

constexpr char kIndex[] = "cubridge:workers";

std::string WorkerKey(const std::string& id) { return "cubridge:worker:" + id; }

}  // namespace

absl::StatusOr<std::string> WorkerRegistry::Register(const WorkerRecord& w) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  const std::string id = absl::StrCat("w-", w.arch, "-", absl::Hex(rng() & 0xffffffffffull, absl::kZeroPad10));
  auto set = redis_->Command({"HSET", WorkerKey(id), "arch", w.arch, "gpu_name", w.gpu_name,
                              "gpu_ordinal", absl::StrCat(w.gpu_ordinal), "gpu_uuid", w.gpu_uuid,
                              "memory_bytes", absl::StrCat(w.memory_bytes), "capabilities",
                              absl::StrJoin(w.capabilities, ","), "hostname", w.hostname,
                              "last_seen_ms", absl::StrCat(UnixMillis()), "current_task", "",
                              "health", w.health, "health_reason", w.health_reason});
  if (!set.ok()) return set.status();
  auto ttl = redis_->Command({"PEXPIRE", WorkerKey(id), absl::StrCat(ttl_.count())});
  if (!ttl.ok()) return ttl.status();
  auto add = redis_->Command({"SADD", kIndex, id});
  if (!add.ok()) return add.status();
  return id;
}

absl::Status WorkerRegistry::Touch(const std::string& id, const std::string& current_task) {
  // An expired worker is not silently recreated without its description.
  auto alive = redis_->Command({"PEXPIRE", WorkerKey(id), absl::StrCat(ttl_.count())});
  if (!alive.ok()) return alive.status();
  if (alive->integer != 1) {
    return absl::NotFoundError(absl::StrCat("worker ", id,
                                            " is not registered (it expired or the registry was "
                                            "reset): register again"));
  }
  auto set = redis_->Command({"HSET", WorkerKey(id), "last_seen_ms", absl::StrCat(UnixMillis()),
                              "current_task", current_task});
  return set.ok() ? absl::OkStatus() : set.status();
}

absl::Status WorkerRegistry::SetHealth(const std::string& id, const std::string& health,
                                       const std::string& reason) {
  if (auto s = Touch(id, ""); !s.ok()) return s;
  auto set = redis_->Command({"HSET", WorkerKey(id), "health", health, "health_reason", reason});
  return set.ok() ? absl::OkStatus() : set.status();
}

absl::StatusOr<WorkerRecord> WorkerRegistry::Get(const std::string& id) {
  auto r = redis_->Command({"HGETALL", WorkerKey(id)});
  if (!r.ok()) return r.status();
  if (r->elements.empty()) return absl::NotFoundError(absl::StrCat("no worker ", id));
  std::map<std::string, std::string> m;
  for (size_t i = 0; i + 1 < r->elements.size(); i += 2) m[r->elements[i].str] = r->elements[i + 1].str;
  WorkerRecord w;
  w.id = id;
  w.arch = m["arch"];
  w.gpu_name = m["gpu_name"];
  (void)absl::SimpleAtoi(m["gpu_ordinal"], &w.gpu_ordinal);
  w.gpu_uuid = m["gpu_uuid"];
  (void)absl::SimpleAtoi(m["memory_bytes"], &w.memory_bytes);
  if (!m["capabilities"].empty()) w.capabilities = absl::StrSplit(m["capabilities"], ',');
  w.hostname = m["hostname"];
  (void)absl::SimpleAtoi(m["last_seen_ms"], &w.last_seen_ms);
  w.current_task = m["current_task"];
  // Workers registered before health was reported count as serving.
  if (!m["health"].empty()) w.health = m["health"];
  w.health_reason = m["health_reason"];
  return w;
}

absl::StatusOr<std::vector<WorkerRecord>> WorkerRegistry::List() {
  auto ids = redis_->Command({"SMEMBERS", kIndex});
  if (!ids.ok()) return ids.status();
  std::vector<WorkerRecord> out;
  for (const RedisReply& id : ids->elements) {
    auto w = Get(id.str);
    if (w.ok()) {
      out.push_back(*std::move(w));
    } else if (absl::IsNotFound(w.status())) {
      redis_->Command({"SREM", kIndex, id.str});  // expired: forget it
    } else {
      return w.status();
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

}  // namespace cubridge::store
