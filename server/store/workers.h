// The registry of worker daemons in Redis: what each one can run and when it was last heard
// from. A worker that stops heartbeating drops out after its time to live, so "is there an sm_90
// worker?" reflects the workers that are alive, across coordinator restarts.
//
// Keys (docs/service.md): cubridge:worker:<id> (hash, expires), cubridge:workers (set of ids).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/store/redis.h"

namespace cubridge::store {

struct WorkerRecord {
  std::string id;
  std::string arch;  // sm_80 | sm_90 | cpu
  std::string gpu_name;
  int64_t memory_bytes = 0;
  std::vector<std::string> capabilities;
  std::string hostname;
  int64_t last_seen_ms = 0;
  std::string current_task;
  std::string health = "serving";  // serving | not_serving | draining, as the worker reports it
  std::string health_reason;
  int gpu_ordinal = 0;   // on its host, with gpu_uuid set
  std::string gpu_uuid;  // empty: a CPU worker
};

class WorkerRegistry {
 public:
  WorkerRegistry(RedisClient* redis, std::chrono::milliseconds ttl) : redis_(redis), ttl_(ttl) {}
  absl::StatusOr<std::string> Register(const WorkerRecord& worker);  // the new worker id
  // Refreshes the worker's time to live; NOT_FOUND once it expired (it must register again).
  absl::Status Touch(const std::string& id, const std::string& current_task);
  // The worker's own report of its health; also refreshes its time to live (NOT_FOUND once it
  // expired, as Touch).
  absl::Status SetHealth(const std::string& id, const std::string& health, const std::string& reason);
  absl::StatusOr<WorkerRecord> Get(const std::string& id);
  absl::StatusOr<std::vector<WorkerRecord>> List();  // the live ones, by id

 private:
  RedisClient* redis_;
  std::chrono::milliseconds ttl_;
};

}  // namespace cubridge::store
