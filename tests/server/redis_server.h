// A real redis-server for tests, on a free loopback port, in its own temp folder; stopped (and
// its folder removed) when the object goes.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/store/redis.h"

namespace cubridge::testing {

class RedisServer {
 public:
  // `appendonly`: AOF on, so a restart keeps what was acknowledged.
  explicit RedisServer(bool appendonly = false);
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  bool running() const { return pid_ > 0; }
  int port() const { return port_; }
  const std::string& error() const { return error_; }  // why it did not start

  void Stop();     // SIGTERM and wait (Redis writes its AOF buffer first)
  void Kill();     // SIGKILL and wait: what a crash leaves
  // The same port and folder; `extra` are more redis-server flags for this run only.
  bool Restart(const std::vector<std::string>& extra = {});

 private:
  bool Start(const std::vector<std::string>& extra = {});
  void End(int sig);
  pid_t pid_ = -1;
  int port_ = 0;
  bool appendonly_;
  std::string dir_;
  std::string error_;
};

// A TCP port on 127.0.0.1 nobody listens on at the time of the call.
int FreeLoopbackPort();

// A test with its own redis-server (AOF on, so restarts keep acknowledged writes) and a client.
class RedisTest : public ::testing::Test {
 protected:
  void SetUp() override;
  // Another client of the same server (a thread each, or one made after a restart).
  std::unique_ptr<store::RedisClient> Connect();

  RedisServer server_{/*appendonly=*/true};
  std::unique_ptr<store::RedisClient> client_;
};

}  // namespace cubridge::testing
