// The store's side of untrusted input and operability, on a real Redis: an idempotency key names
// one request, ended jobs and tasks expire while the index forgets them, events never outlive
// their job, a task nobody waits for is withdrawn, a retry is handed to a worker that has not
// failed it, and every store failure says it is one.
#include <algorithm>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/store/jobs.h"
#include "server/store/tasks.h"
#include "tests/server/redis_server.h"

namespace cubridge::store {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

class StoreHygiene : public testing::RedisTest {
 protected:
  int64_t Ttl(const std::string& key) { return Run({"PTTL", key}).integer; }
  RedisReply Run(const std::vector<std::string>& args) {
    auto r = client_->Command(args);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : RedisReply{};
  }
};

TEST_F(StoreHygiene, AnIdempotencyKeyNamesOneRequest) {
  JobStore jobs(client_.get());
  auto first = jobs.Create("k-1", "hash-a", "request-a", "print-a");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->outcome, CreatedJob::Outcome::kCreated);
  auto retry = jobs.Create("k-1", "hash-a", "request-a", "print-a");
  ASSERT_TRUE(retry.ok());
  EXPECT_EQ(retry->outcome, CreatedJob::Outcome::kExisting);
  EXPECT_EQ(retry->job.id, first->job.id);
  auto other = jobs.Create("k-1", "hash-b", "request-b", "print-b");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->outcome, CreatedJob::Outcome::kConflict);
  EXPECT_EQ(other->job.id, first->job.id);
  // The losers' records are gone: only one job exists for the key.
  EXPECT_EQ(Run({"KEYS", "cubridge:job:*"}).elements.size(), 1u);
}

TEST_F(StoreHygiene, AJobsFieldsAreWrittenWithItsRecord) {
  JobStore jobs(client_.get());
  auto job = jobs.Create("", "hash", "request", "print", {{"archs", "sm_80"}, {"input", "{}"}});
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(*jobs.Field(job->job.id, "archs"), "sm_80");
  EXPECT_EQ(Ttl("cubridge:job:" + job->job.id), -1) << "an indexed job does not expire";
}

TEST_F(StoreHygiene, EndedJobsExpireAndTheIndexForgetsThem) {
  JobStore jobs(client_.get(), 200ms);
  auto ended = jobs.Create("", "h", "r", "p");
  auto running = jobs.Create("", "h", "r", "p");
  ASSERT_TRUE(ended.ok() && running.ok());
  const std::string id = ended->job.id;
  ASSERT_TRUE(jobs.AppendEvent(id, R"({"stage":"spec"})").ok());
  ASSERT_TRUE(jobs.SetState(id, "succeeded").ok());
  EXPECT_GT(Ttl("cubridge:job:" + id), 0);
  EXPECT_GT(Ttl("cubridge:job:" + id + ":events"), 0);
  EXPECT_EQ(Ttl("cubridge:job:" + running->job.id), -1);
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(jobs.Get(id).status().code(), absl::StatusCode::kNotFound);
  auto forgotten = jobs.ForgetExpired();
  ASSERT_TRUE(forgotten.ok()) << forgotten.status();
  EXPECT_EQ(*forgotten, 1);
  auto listed = jobs.List(10);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].id, running->job.id);
  // A late event for the expired job leaves nothing behind.
  ASSERT_TRUE(jobs.AppendEvent(id, R"({"stage":"late"})").ok());
  EXPECT_EQ(Run({"EXISTS", "cubridge:job:" + id + ":events"}).integer, 0);
  // Its idempotency key, should it still live, is free for a new job.
}

TEST_F(StoreHygiene, AKeyWhoseJobExpiredMakesANewJob) {
  JobStore jobs(client_.get(), 100ms);
  auto first = jobs.Create("k-2", "h", "r", "p");
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(jobs.SetState(first->job.id, "failed", "x").ok());
  std::this_thread::sleep_for(300ms);
  auto again = jobs.Create("k-2", "h", "r", "p");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->outcome, CreatedJob::Outcome::kCreated);
  EXPECT_NE(again->job.id, first->job.id);
}

TEST_F(StoreHygiene, ATaskNobodyWaitsForIsWithdrawnAndCanBeRevived) {
  TaskQueue q(client_.get(), 10s, 3, 1h);
  ASSERT_TRUE(*q.EnqueueOnce("transfer-x", {"j-1", "transfer", "{}", "cpu"}));
  ASSERT_TRUE(q.Subscribe("transfer-x", "j-1").ok());
  ASSERT_TRUE(q.Subscribe("transfer-x", "j-2").ok());
  EXPECT_EQ(*q.Depth("cpu"), 1);
  EXPECT_FALSE(*q.Unsubscribe("transfer-x", "j-1")) << "j-2 still waits for it";
  EXPECT_TRUE(*q.Unsubscribe("transfer-x", "j-2"));
  EXPECT_EQ(q.Get("transfer-x")->state, "withdrawn");
  EXPECT_EQ(*q.Depth("cpu"), 0);
  auto none = q.LeaseNext("cpu", "w-cpu-0000000001");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(*q.Revive("transfer-x"));
  EXPECT_EQ(*q.Depth("cpu"), 1);
  auto l = q.LeaseNext("cpu", "w-cpu-0000000001");
  ASSERT_TRUE(l.ok() && l->has_value());
  EXPECT_EQ((*l)->task_id, "transfer-x");
  EXPECT_EQ(*q.Depth("cpu"), 0);
}

TEST_F(StoreHygiene, ARetryIsHandedToAWorkerThatHasNotFailedIt) {
  TaskQueue q(client_.get(), 10s, 3);
  ASSERT_TRUE(*q.EnqueueOnce("cand-x", {"j-1", "candidate", "{}", "cpu"}));
  auto first = q.LeaseNext("cpu", "broken");
  ASSERT_TRUE(first.ok() && first->has_value());
  auto state = q.Fail("cand-x", (*first)->fencing_token, {"disk full", true, "infrastructure", ""});
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(*state, "queued");
  std::vector<std::string> seen;
  // As the coordinator's: a worker declines what it failed before.
  auto decline_for = [&](const std::string& me) {
    return [&, me](const std::string& task, const std::vector<std::string>& failed_by, int64_t when) {
      seen = failed_by;
      EXPECT_GT(when, 0);
      return std::find(failed_by.begin(), failed_by.end(), me) != failed_by.end();
    };
  };
  auto declined = q.LeaseNext("cpu", "broken", decline_for("broken"));
  ASSERT_TRUE(declined.ok()) << declined.status();
  EXPECT_FALSE(declined->has_value());
  EXPECT_THAT(seen, ::testing::ElementsAre("broken"));
  auto taken = q.LeaseNext("cpu", "healthy", decline_for("healthy"));
  ASSERT_TRUE(taken.ok() && taken->has_value()) << "the handed-back delivery was lost";
  EXPECT_EQ((*taken)->task_id, "cand-x");
  EXPECT_EQ((*taken)->attempt, 2);
  EXPECT_EQ(q.Get("cand-x")->failure_class, "infrastructure");
}

TEST_F(StoreHygiene, EndedTasksExpireAndASubscriberRenewsThem) {
  TaskQueue q(client_.get(), 10s, 3, 1h);
  ASSERT_TRUE(*q.EnqueueOnce("lift-x", {"j-1", "lift", "{}", "cpu"}));
  auto l = q.LeaseNext("cpu", "w");
  ASSERT_TRUE(l.ok() && l->has_value());
  ASSERT_TRUE(q.Complete("lift-x", (*l)->fencing_token, "{}").ok());
  const int64_t ttl = Ttl("cubridge:task:lift-x");
  EXPECT_GT(ttl, 0);
  Run({"PEXPIRE", "cubridge:task:lift-x", "5000"});
  ASSERT_TRUE(q.Subscribe("lift-x", "j-9").ok());
  EXPECT_GT(Ttl("cubridge:task:lift-x"), 5000) << "a job that needs the result renews it";
}

TEST_F(StoreHygiene, StoreFailuresSayTheyAreStoreFailures) {
  Run({"SET", "s", "x"});
  auto r = client_->Command({"LPUSH", "s", "y"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(StoreError(r.status()), "WRONGTYPE");
  server_.Stop();
  RedisOptions o;
  o.port = server_.port();
  auto down = RedisClient::Connect(o);
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(StoreError(down.status()), "io");
  EXPECT_EQ(StoreError(absl::NotFoundError("no job")), "");
}

}  // namespace
}  // namespace cubridge::store
