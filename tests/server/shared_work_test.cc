// The store pieces the job flow builds on: tasks queued once under a chosen id (however many
// callers race), revived after dying, retried after a backoff; the worker registry's expiry; the
// one-way end of a job's state.
#include <future>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/store/jobs.h"
#include "server/store/tasks.h"
#include "server/store/workers.h"
#include "tests/server/redis_server.h"

namespace cubridge::store {
namespace {

using namespace std::chrono_literals;

class SharedWork : public testing::RedisTest {};

TEST_F(SharedWork, RacingEnqueuesOfOneIdQueueItOnce) {
  std::vector<std::future<bool>> racers;
  for (int i = 0; i < 8; ++i) {
    racers.push_back(std::async(std::launch::async, [this] {
      auto c = Connect();
      TaskQueue q(c.get(), 10s, 3);
      auto created = q.EnqueueOnce("transfer-abc", {"j-1", "transfer", "{}", "cpu"});
      return created.ok() && *created;
    }));
  }
  int creators = 0;
  for (auto& r : racers) creators += r.get() ? 1 : 0;
  EXPECT_EQ(creators, 1);
  TaskQueue q(client_.get(), 10s, 3);
  auto first = q.LeaseNext("cpu", "w1");
  ASSERT_TRUE(first.ok() && first->has_value());
  auto second = q.LeaseNext("cpu", "w2");
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->has_value()) << "one id, one delivery";
}

TEST_F(SharedWork, ADeadTaskIsRevivedWithFreshAttempts) {
  TaskQueue q(client_.get(), 10s, 1);
  ASSERT_TRUE(q.EnqueueOnce("cand-x", {"j-1", "candidate", "{}", "sm_90"}).ok());
  auto l = q.LeaseNext("sm_90", "w1");
  ASSERT_TRUE(l.ok() && l->has_value());
  ASSERT_EQ(*q.Fail("cand-x", (*l)->fencing_token, {"crashed", true}), "dead");
  EXPECT_TRUE(*q.Revive("cand-x"));
  EXPECT_FALSE(*q.Revive("cand-x")) << "a queued task was revived again";
  auto again = q.LeaseNext("sm_90", "w2");
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->attempt, 1);
  auto dead = client_->Command({"LRANGE", "cubridge:dead", "0", "-1"});
  EXPECT_TRUE(dead->elements.empty());
}

TEST_F(SharedWork, AFailedAttemptWaitsOutItsBackoff) {
  TaskQueue q(client_.get(), 10s, 3);
  q.set_retry_backoff(400ms);
  ASSERT_TRUE(q.EnqueueOnce("t", {"j", "transfer", "{}", "cpu"}).ok());
  auto l = q.LeaseNext("cpu", "w");
  ASSERT_TRUE(l.ok() && l->has_value());
  EXPECT_EQ(*q.Fail("t", (*l)->fencing_token, {"oom", true}), "retrying");
  EXPECT_EQ(*q.PromoteDueRetries(), 0) << "promoted before its backoff";
  EXPECT_FALSE(q.LeaseNext("cpu", "w")->has_value());
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(*q.PromoteDueRetries(), 1);
  EXPECT_EQ(*q.PromoteDueRetries(), 0) << "promoted twice";
  auto retry = q.LeaseNext("cpu", "w");
  ASSERT_TRUE(retry.ok() && retry->has_value());
  EXPECT_EQ((*retry)->attempt, 2);
}

TEST_F(SharedWork, SubscribersAndQueueDepth) {
  TaskQueue q(client_.get(), 10s, 3);
  ASSERT_TRUE(q.EnqueueOnce("a", {"j-1", "transfer", "{}", "cpu"}).ok());
  ASSERT_TRUE(q.EnqueueOnce("b", {"j-1", "transfer", "{}", "cpu"}).ok());
  ASSERT_TRUE(q.Subscribe("a", "j-1").ok());
  ASSERT_TRUE(q.Subscribe("a", "j-2").ok());
  EXPECT_THAT(*q.Subscribers("a"), ::testing::UnorderedElementsAre("j-1", "j-2"));
  EXPECT_EQ(*q.Depth("cpu"), 2);
  ASSERT_TRUE(q.LeaseNext("cpu", "w")->has_value());
  EXPECT_EQ(*q.Depth("cpu"), 1);
}

TEST_F(SharedWork, AWorkerThatStopsTouchingExpires) {
  WorkerRegistry r(client_.get(), 300ms);
  auto id = r.Register({"", "sm_90", "NVIDIA H100", 80ll << 30, {"nvrtc"}, "node-1", 0, ""});
  ASSERT_TRUE(id.ok()) << id.status();
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(150ms);
    ASSERT_TRUE(r.Touch(*id, "cand-x").ok());
  }
  auto live = r.List();
  ASSERT_EQ(live->size(), 1u);
  EXPECT_EQ((*live)[0].current_task, "cand-x");
  EXPECT_EQ((*live)[0].gpu_name, "NVIDIA H100");
  std::this_thread::sleep_for(400ms);
  EXPECT_TRUE(r.List()->empty());
  EXPECT_EQ(r.Touch(*id, "").code(), absl::StatusCode::kNotFound) << "revived without registering";
}

TEST_F(SharedWork, AJobEndsOnceAndLeavesTheActiveSet) {
  JobStore jobs(client_.get());
  auto created = jobs.Create("", "hash", "req", "print");
  ASSERT_TRUE(created.ok());
  const std::string id = created->job.id;
  EXPECT_THAT(*jobs.Active(), ::testing::Contains(id));
  ASSERT_TRUE(jobs.SetState(id, "running").ok());
  ASSERT_TRUE(jobs.SetState(id, "succeeded").ok());
  EXPECT_EQ(jobs.SetState(id, "failed", "late").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(jobs.Get(id)->state, "succeeded");
  EXPECT_THAT(*jobs.Active(), ::testing::Not(::testing::Contains(id)));
  EXPECT_EQ(jobs.SetState("j-none", "running").code(), absl::StatusCode::kNotFound);
  // One-time steps and events.
  EXPECT_TRUE(*jobs.Once(id, "planned:t"));
  EXPECT_FALSE(*jobs.Once(id, "planned:t"));
  ASSERT_TRUE(jobs.AppendEventOnce(id, "t", "{\"stage\":\"lift\"}").ok());
  ASSERT_TRUE(jobs.AppendEventOnce(id, "t", "{\"stage\":\"lift\"}").ok());
  EXPECT_EQ(jobs.Events(id)->size(), 1u);
}

}  // namespace
}  // namespace cubridge::store
