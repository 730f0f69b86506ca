// Buffer values in Redis, stored once per content: cubridge:tensor:<sha256> (string: the bytes,
// row-major little-endian, as the request's TensorValue.data). A job's input and its task payloads
// name a value by that digest only, so the records the coordinator reads on every advance stay
// small; a lease sends the bytes along with the task (Task.tensor_data).
//
// A value expires `retention` after it was last stored or kept: every advance of a job that uses
// it keeps it, so it lives as long as the job (and its retention) does.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/store/redis.h"

namespace cubridge::store {

class TensorStore {
 public:
  TensorStore(RedisClient* redis, std::chrono::milliseconds retention)
      : redis_(redis), retention_(retention) {}

  // Stores `bytes` under `sha256` (their digest, hex), or keeps the copy already there.
  absl::Status Put(const std::string& sha256, const std::string& bytes);
  // Pushes each one's expiry back to `retention` from now; those already gone are left gone.
  absl::Status Keep(const std::vector<std::string>& digests);
  // nullopt when it is not (or no longer) stored.
  absl::StatusOr<std::optional<std::string>> Get(const std::string& sha256);

 private:
  RedisClient* redis_;
  std::chrono::milliseconds retention_;
};

}  // namespace cubridge::store
