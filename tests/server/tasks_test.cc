// Task queues on a real Redis: leases, fencing tokens, expiry and takeover, retries and the
// dead-letter list.
#include "server/store/tasks.h"

#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/server/redis_server.h"

namespace cubridge::store {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

class Tasks : public testing::RedisTest {
 protected:
  std::string Enqueue(TaskQueue& q, const std::string& cls = "sm_90") {
    auto id = q.Enqueue({"job-1", "candidate", R"({"tile":"128x64w4"})", cls});
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : "";
  }
  Lease MustLease(TaskQueue& q, const std::string& worker, const std::string& cls = "sm_90") {
    auto l = q.LeaseNext(cls, worker);
    EXPECT_TRUE(l.ok()) << l.status();
    EXPECT_TRUE(l.ok() && l->has_value()) << "no task for " << worker;
    return l.ok() && l->has_value() ? **l : Lease{};
  }
};

TEST_F(Tasks, ALeasedTaskCompletesOnceAndOnlyForItsClass) {
  TaskQueue q(client_.get(), 10s, 3);
  const std::string id = Enqueue(q);
  auto none = q.LeaseNext("sm_80", "a100-worker");  // another arch's queue is empty
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  const Lease l = MustLease(q, "w1");
  EXPECT_EQ(l.task_id, id);
  EXPECT_EQ(l.attempt, 1);
  EXPECT_EQ(l.task.payload, R"({"tile":"128x64w4"})");
  auto again = q.LeaseNext("sm_90", "w2");
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->has_value()) << "a leased task was handed out twice";
  ASSERT_TRUE(q.Complete(id, l.fencing_token, R"({"tflops": 300})").ok());
  auto st = q.Get(id);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->state, "done");
  EXPECT_EQ(st->result, R"({"tflops": 300})");
}

TEST_F(Tasks, AnExpiredLeaseIsTakenOverAndTheStaleResultRefused) {
  TaskQueue q(client_.get(), 300ms, 3);
  const std::string id = Enqueue(q);
  const Lease first = MustLease(q, "w1");  // w1 is killed here: no heartbeat follows
  std::this_thread::sleep_for(500ms);
  const Lease second = MustLease(q, "w2");
  EXPECT_EQ(second.task_id, id);
  EXPECT_EQ(second.attempt, 2);
  EXPECT_GT(second.fencing_token, first.fencing_token);
  // w1 comes back late: its result and its heartbeats are refused, w2's stand.
  const absl::Status late = q.Complete(id, first.fencing_token, "stale");
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(late.message(), HasSubstr("stale"));
  EXPECT_FALSE(q.Heartbeat(id, first.fencing_token).ok());
  ASSERT_TRUE(q.Complete(id, second.fencing_token, "fresh").ok());
  EXPECT_EQ(q.Get(id)->result, "fresh");
}

TEST_F(Tasks, HeartbeatsKeepALeaseAlive) {
  TaskQueue q(client_.get(), 400ms, 3);
  const std::string id = Enqueue(q);
  const Lease l = MustLease(q, "w1");
  for (int i = 0; i < 4; ++i) {  // 800 ms of work, beating every 200 ms
    std::this_thread::sleep_for(200ms);
    ASSERT_TRUE(q.Heartbeat(id, l.fencing_token).ok());
  }
  auto other = q.LeaseNext("sm_90", "w2");
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->has_value()) << "a heartbeating lease was taken over";
  EXPECT_TRUE(q.Complete(id, l.fencing_token, "ok").ok());
}

TEST_F(Tasks, RetriesUpToTheLimitThenDeadLetters) {
  TaskQueue q(client_.get(), 10s, 2);
  const std::string id = Enqueue(q);
  const Lease a = MustLease(q, "w1");
  auto s1 = q.Fail(id, a.fencing_token, {"nvrtc: out of memory", true});
  ASSERT_TRUE(s1.ok()) << s1.status();
  EXPECT_EQ(*s1, "queued");
  const Lease b = MustLease(q, "w2");
  EXPECT_EQ(b.attempt, 2);
  auto s2 = q.Fail(id, b.fencing_token, {"nvrtc: out of memory again", true});
  ASSERT_TRUE(s2.ok()) << s2.status();
  EXPECT_EQ(*s2, "dead");
  auto st = q.Get(id);
  EXPECT_EQ(st->error, "nvrtc: out of memory again");
  auto dead = client_->Command({"LRANGE", "cubridge:dead", "0", "-1"});
  ASSERT_TRUE(dead.ok());
  ASSERT_EQ(dead->elements.size(), 1u);
  EXPECT_EQ(dead->elements[0].str, id);
  auto none = q.LeaseNext("sm_90", "w3");
  EXPECT_FALSE(none->has_value());
}

TEST_F(Tasks, ABadInputIsNotRetried) {
  TaskQueue q(client_.get(), 10s, 5);
  const std::string id = Enqueue(q, "cpu");
  const Lease l = MustLease(q, "cpu-1", "cpu");
  auto s = q.Fail(id, l.fencing_token, {"spec.py:4:12: unsupported op", false});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, "dead");
}

}  // namespace
}  // namespace cubridge::store
