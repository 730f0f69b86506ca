// The Redis client against a real redis-server on a free loopback port.
#include "server/store/redis.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/server/redis_server.h"

namespace cubridge::store {
namespace {

using ::testing::HasSubstr;
using Kind = RedisReply::Kind;

class Redis : public testing::RedisTest {
 protected:
  RedisReply Run(const std::vector<std::string>& args) {
    auto r = client_->Command(args);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : RedisReply{};
  }
};

TEST_F(Redis, ValuesAreBinarySafe) {
  const std::string value("kernel\0source\n\xff", 15);
  EXPECT_EQ(Run({"SET", "k", value}).str, "OK");
  const RedisReply got = Run({"GET", "k"});
  EXPECT_EQ(got.kind, Kind::kString);
  EXPECT_EQ(got.str, value);
  EXPECT_TRUE(Run({"GET", "missing"}).is_nil());
  EXPECT_EQ(Run({"INCR", "n"}).integer, 1);
}

TEST_F(Redis, StreamsWithConsumerGroupsDeliverEachEntryOnce) {
  Run({"XGROUP", "CREATE", "tasks", "workers", "$", "MKSTREAM"});
  Run({"XADD", "tasks", "*", "task", "t1"});
  const RedisReply first = Run({"XREADGROUP", "GROUP", "workers", "w1", "COUNT", "1", "STREAMS",
                                "tasks", ">"});
  ASSERT_EQ(first.kind, Kind::kArray);
  const RedisReply& entry = first.elements[0].elements[1].elements[0];
  EXPECT_EQ(entry.elements[1].elements[1].str, "t1");
  // A second consumer finds nothing new: the entry is pending with w1 until acknowledged.
  EXPECT_TRUE(Run({"XREADGROUP", "GROUP", "workers", "w2", "COUNT", "1", "STREAMS", "tasks", ">"})
                  .is_nil());
  EXPECT_EQ(Run({"XACK", "tasks", "workers", entry.elements[0].str}).integer, 1);
}

TEST_F(Redis, ErrorRepliesAreStatusesWithRedissMessage) {
  Run({"SET", "s", "x"});
  auto r = client_->Command({"LPUSH", "s", "y"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(r.status().message(), HasSubstr("WRONGTYPE"));
  EXPECT_EQ(StoreError(r.status()), "WRONGTYPE");
}

TEST_F(Redis, AfterARestartTheClientReconnectsAndAcknowledgedWritesSurvive) {
  Run({"SET", "job:1", "queued"});
  ASSERT_TRUE(server_.Restart()) << server_.error();
  // The first command may find the old socket closed; the next one reconnects.
  auto first = client_->Command({"GET", "job:1"});
  if (!first.ok()) EXPECT_EQ(first.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Run({"GET", "job:1"}).str, "queued");
}

// A restarted Redis answers LOADING until its dataset is in memory (made slow here with Redis's
// own key-load-delay); commands wait it out instead of failing, or say so when the wait is over.
TEST(RedisLoading, CommandsWaitWhileARestartedRedisLoadsItsDataset) {
  testing::RedisServer server(/*appendonly=*/false);
  ASSERT_TRUE(server.running()) << server.error();
  store::RedisOptions o;
  o.port = server.port();
  auto patient = RedisClient::Connect(o);
  ASSERT_TRUE(patient.ok()) << patient.status();
  constexpr int kKeys = 4000;  // x 0.5 ms a key: about 2 s of loading
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE((*patient)->Command({"SET", "k" + std::to_string(i), "v"}).ok());
  }
  ASSERT_TRUE((*patient)->Command({"SAVE"}).ok());
  ASSERT_TRUE(server.Restart({"--key-load-delay", "500", "--loading-process-events-interval-bytes",
                              "1024"}))
      << server.error();

  o.loading_wait = std::chrono::milliseconds(0);
  auto impatient = RedisClient::Connect(o);
  ASSERT_TRUE(impatient.ok()) << impatient.status();
  auto refused = (*impatient)->Command({"GET", "k1"});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused.status().message(), HasSubstr("still loading its dataset"));

  // The first client's socket died with the old server; it reconnects, then waits for the load.
  auto got = (*patient)->Command({"GET", "k1"});
  if (!got.ok()) {
    EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
    got = (*patient)->Command({"GET", "k1"});
  }
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->str, "v");
  EXPECT_EQ((*patient)->Command({"DBSIZE"})->integer, kKeys);
}

TEST(RedisConnect, NoServerIsUnavailableAndSaysWhere) {
  RedisOptions o;
  o.port = testing::FreeLoopbackPort();
  auto c = RedisClient::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(c.status().message(), HasSubstr("127.0.0.1:" + std::to_string(o.port)));
}

}  // namespace
}  // namespace cubridge::store
