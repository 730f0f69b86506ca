// Job records on a real Redis: idempotent creation (also under concurrent submits), state
// transitions, events, the newest-first list, and survival across a Redis restart with AOF.
#include "server/store/jobs.h"

#include <algorithm>
#include <set>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/server/redis_server.h"

namespace cubridge::store {
namespace {

using Jobs = testing::RedisTest;

TEST_F(Jobs, TheSameIdempotencyKeyGivesTheSameJob) {
  JobStore jobs(client_.get());
  auto a = jobs.Create("key-1", "hash-a", "request-a", "print-a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->outcome, CreatedJob::Outcome::kCreated);
  auto b = jobs.Create("key-1", "hash-a", "request-a (retried)", "print-a");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->outcome, CreatedJob::Outcome::kExisting);
  EXPECT_EQ(b->job.id, a->job.id);
  EXPECT_EQ(b->job.request, "request-a");  // the first submit's job, untouched
  auto c = jobs.Create("key-2", "hash-a", "request-a", "print-a");
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->job.id, a->job.id);
  auto listed = jobs.List(10);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 2u);  // the retried submit left no record behind
}

TEST_F(Jobs, ARetryIndexesTheJobOfASubmitThatDiedAfterClaimingItsKey) {
  // What a coordinator killed between claiming the key and indexing the job leaves behind: the
  // record, still provisional, and the key pointing at it.
  ASSERT_TRUE(client_->Command({"HSET", "cubridge:job:j-half", "state", "queued", "spec_hash", "h",
                                "request", "r", "fingerprint", "p", "error", "", "created_ms", "5",
                                "finished_ms", "0"})
                  .ok());
  ASSERT_TRUE(client_->Command({"PEXPIRE", "cubridge:job:j-half", "600000"}).ok());
  ASSERT_TRUE(client_->Command({"SET", "cubridge:idem:k-half", "j-half"}).ok());
  JobStore jobs(client_.get());
  auto active = jobs.Active();
  ASSERT_TRUE(active.ok());
  EXPECT_THAT(*active, ::testing::Not(::testing::Contains("j-half")));  // the sweep cannot see it

  auto retry = jobs.Create("k-half", "h", "r (retried)", "p");
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_EQ(retry->outcome, CreatedJob::Outcome::kExisting);
  EXPECT_EQ(retry->job.id, "j-half");
  active = jobs.Active();
  ASSERT_TRUE(active.ok());
  EXPECT_THAT(*active, ::testing::Contains("j-half"));
  EXPECT_EQ(client_->Command({"PTTL", "cubridge:job:j-half"})->integer, -1);  // no longer expires
  auto listed = jobs.List(10);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].id, "j-half");
}

TEST_F(Jobs, ConcurrentSubmitsWithOneKeyCreateOneJob) {
  std::vector<std::string> ids(16);
  std::vector<int> created(16, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      auto c = Connect();  // a client per thread, as each coordinator thread has
      JobStore jobs(c.get());
      auto r = jobs.Create("same-key", "h", "r", "p");
      if (r.ok()) ids[i] = r->job.id, created[i] = r->outcome == CreatedJob::Outcome::kCreated;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), 1u);
  EXPECT_FALSE(ids[0].empty());
  EXPECT_EQ(std::count(created.begin(), created.end(), 1), 1);
}

TEST_F(Jobs, StatesEventsAndAnEndedJobStaysEnded) {
  JobStore jobs(client_.get());
  auto j = jobs.Create("", "h", "r", "p");
  ASSERT_TRUE(j.ok());
  const std::string id = j->job.id;
  ASSERT_TRUE(jobs.SetState(id, "running").ok());
  ASSERT_TRUE(jobs.AppendEvent(id, R"({"stage":"transfer","ok":true})").ok());
  ASSERT_TRUE(jobs.AppendEvent(id, R"({"stage":"verify","ok":true})").ok());
  ASSERT_TRUE(jobs.SetState(id, "succeeded").ok());
  auto got = jobs.Get(id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->state, "succeeded");
  EXPECT_GE(got->finished_ms, got->created_ms);
  auto later = jobs.Events(id, 1);  // a watcher that already saw the first event
  ASSERT_TRUE(later.ok());
  ASSERT_EQ(later->size(), 1u);
  EXPECT_EQ((*later)[0], R"({"stage":"verify","ok":true})");
  const absl::Status again = jobs.SetState(id, "failed", "late");
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(jobs.Get("j-unknown").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(Jobs, AcceptedJobsSurviveARedisRestart) {
  JobStore jobs(client_.get());
  auto j = jobs.Create("k", "h", "the request", "p");
  ASSERT_TRUE(j.ok());
  ASSERT_TRUE(server_.Restart()) << server_.error();
  auto c = Connect();
  JobStore after(c.get());
  auto got = after.Get(j->job.id);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->request, "the request");
  auto retried = after.Create("k", "h", "the request", "p");
  ASSERT_TRUE(retried.ok());
  EXPECT_EQ(retried->job.id, j->job.id);
}

}  // namespace
}  // namespace cubridge::store
