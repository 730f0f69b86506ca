// A small synchronous Redis client over hiredis: commands as argument vectors (binary safe),
// replies as a plain value tree, errors as absl::Status, and a reconnect on the next command
// after the connection broke (a restarted Redis, a dropped socket). One client per thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

struct redisContext;

namespace cubridge::store {

struct RedisReply {
  enum class Kind { kNil, kInteger, kString, kStatus, kArray };
  Kind kind = Kind::kNil;
  int64_t integer = 0;
  std::string str;  // kString (bulk) and kStatus ("OK")
  std::vector<RedisReply> elements;

  bool is_nil() const { return kind == Kind::kNil; }
};

struct RedisOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string password;  // AUTH when set
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds command_timeout{10000};
  // A restarted Redis answers "LOADING" until its dataset is back in memory; such a command was
  // not run, so it is sent again until this long has passed, then UNAVAILABLE.
  std::chrono::milliseconds loading_wait{30000};
};

// Every error status this client returns carries this payload: Redis's error code for an error
// reply ("WRONGTYPE", "BUSYGROUP", "NOSCRIPT", ...), "LOADING" for a server still loading its
// data, "io" for a connection that could not be made or broke, "auth" for a refused password.
// Callers tell a store failure from their own refusals by it (StoreError), never by the message,
// and the coordinator never shows a store's message to a client.
inline constexpr char kStoreErrorPayload[] = "type.cubridge.dev/store-error";
// The payload's value, or "" when `status` did not come from the store.
std::string StoreError(const absl::Status& status);

// Wall-clock milliseconds since the epoch: the time stamps every record in Redis carries (job
// creation and end, worker heartbeats, retry due times, events).
int64_t UnixMillis();

class RedisClient {
 public:
  // UNAVAILABLE ("cannot reach Redis at host:port: ...") when the server does not answer.
  static absl::StatusOr<std::unique_ptr<RedisClient>> Connect(const RedisOptions& options);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  // Runs one command. A Redis error reply is INTERNAL with Redis's message (e.g. "WRONGTYPE ...")
  // and its code as the payload; a broken connection is UNAVAILABLE, and the next call reconnects
  // first. While Redis loads its dataset the command waits (up to `loading_wait`), then
  // UNAVAILABLE.
  absl::StatusOr<RedisReply> Command(const std::vector<std::string>& args);

  const RedisOptions& options() const { return options_; }

 private:
  explicit RedisClient(RedisOptions options) : options_(std::move(options)) {}
  absl::Status EnsureConnected();
  absl::StatusOr<RedisReply> CommandOnce(const std::vector<std::string>& args, bool* loading);

  RedisOptions options_;
  redisContext* ctx_ = nullptr;
};

}  // namespace cubridge::store
