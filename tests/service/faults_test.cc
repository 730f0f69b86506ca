// The service under faults: workers and the coordinator killed mid-job, Redis restarted, late
// results from a lease that was taken over, many concurrent submits of the same work.
#include <signal.h>

#include <future>
#include <set>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "server/store/redis.h"
#include "service/contract/task_messages.h"
#include "tests/service/cluster.h"

namespace cubridge::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

class Faults : public Cluster {
 protected:
  // Each task's child sleeps this long first: long enough to kill something mid-task.
  std::map<std::string, std::string> Slow(int ms = 4000) {
    return {{"CUBRIDGE_TEST_TASK_DELAY_MS", std::to_string(ms)}};
  }
  v1::Job WaitRunning(const std::string& id) {
    return WaitUntil(id, [](const v1::Job& j) { return j.state() == v1::JOB_STATE_RUNNING; }, 30s);
  }
  std::string TaskField(const std::string& task, const std::string& field) {
    auto r = Redis()->Command({"HGET", "cubridge:task:" + task, field});
    return r.ok() ? r->str : "";
  }
};

TEST_F(Faults, AWorkerKilledMidTaskLosesNothing) {
  StartCoordinator();
  Process* doomed = StartWorker(Slow());
  auto job = Submit(Request("causal"));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(WaitRunning(job->job_id()).state(), v1::JOB_STATE_RUNNING);
  ASSERT_TRUE(doomed->WaitForLog(": running", 20s));
  doomed->Signal(SIGKILL);
  StartWorker();  // its lease expires (2 s) and this one takes the task over
  const v1::Job done = WaitEnded(job->job_id(), 180s);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << Describe(done) << Logs();
  const std::string transfer = "transfer-" + done.spec_hash();
  EXPECT_EQ(TaskField(transfer, "attempt"), "2") << "the killed worker's lease was not taken over";
  EXPECT_THAT(workers_[1]->Log(), HasSubstr("task=" + transfer));
}

TEST_F(Faults, ACoordinatorRestartedMidJobFinishesIt) {
  StartCoordinator();
  StartWorker(Slow(3000));
  auto job = Submit(Request("prefix_lm"));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(WaitRunning(job->job_id()).state(), v1::JOB_STATE_RUNNING);
  coordinator_->Signal(SIGKILL);
  coordinator_->Wait(10s);
  std::this_thread::sleep_for(1s);
  StartCoordinator();  // same port; the worker reconnects and reports its result
  const v1::Job done = WaitEnded(job->job_id(), 180s);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << Describe(done) << Logs();
}

TEST_F(Faults, ARedisRestartLosesNoAcceptedJob) {
  StartCoordinator();
  std::vector<std::string> ids;
  for (const char* spec : {"causal", "sliding_window", "alibi"}) {
    auto job = Submit(Request(spec));
    ASSERT_TRUE(job.ok()) << job.status();
    ids.push_back(job->job_id());
  }
  redis_.Stop();
  ASSERT_TRUE(redis_.Restart()) << redis_.error();
  StartWorker();
  for (const std::string& id : ids) {
    const v1::Job done = WaitEnded(id, 180s);
    EXPECT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << Describe(done) << Logs();
  }
}

TEST_F(Faults, AWorkerOfAnotherTaskContractIsRefusedAtRegistration) {
  StartCoordinator();
  for (int version : {0, contract::kTaskContract + 1}) {
    v1::RegisterRequest r;
    r.set_arch("cpu");
    r.set_task_contract(version);
    v1::RegisterResponse resp;
    auto ctx = Context(kWorkerToken);
    const grpc::Status s = WorkerStub()->Register(ctx.get(), r, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << version;
    EXPECT_THAT(s.error_message(), AllOf(HasSubstr(absl::StrCat("task contract ", version)),
                                         HasSubstr("release")));
  }
}

TEST_F(Faults, ALateResultWithAStaleFencingTokenIsRefused) {
  StartCoordinator();
  auto job = Submit(Request("causal"));
  ASSERT_TRUE(job.ok());
  // Two hand-driven workers over the real worker API.
  auto stub = WorkerStub();
  auto reg = [&]() {
    v1::RegisterRequest r;
    r.set_arch("cpu");
    r.set_task_contract(contract::kTaskContract);
    v1::RegisterResponse resp;
    auto ctx = Context(kWorkerToken);
    EXPECT_TRUE(stub->Register(ctx.get(), r, &resp).ok());
    return resp.worker_id();
  };
  auto lease = [&](const std::string& worker) {
    v1::LeaseTaskRequest r;
    r.set_worker_id(worker);
    r.set_wait_millis(3000);
    v1::LeaseTaskResponse resp;
    auto ctx = Context(kWorkerToken);
    EXPECT_TRUE(stub->LeaseTask(ctx.get(), r, &resp).ok());
    return resp.task();
  };
  const std::string slow = reg(), fast = reg();
  const v1::Task first = lease(slow);
  ASSERT_FALSE(first.task_id().empty());
  std::this_thread::sleep_for(2500ms);  // the slow worker misses its heartbeats: lease expires
  v1::Task second;
  for (int i = 0; i < 5 && second.task_id() != first.task_id(); ++i) second = lease(fast);
  ASSERT_EQ(second.task_id(), first.task_id());
  EXPECT_GT(second.fencing_token(), first.fencing_token());
  EXPECT_EQ(second.attempt(), 2);

  v1::CompleteTaskRequest late;
  late.set_task_id(first.task_id());
  late.set_fencing_token(first.fencing_token());
  // A result of the task's kind (the oneofs number their members alike), with the old token.
  ASSERT_NE(first.payload().kind_case(), v1::TaskPayload::KIND_NOT_SET);
  late.mutable_result()->GetReflection()->MutableMessage(
      late.mutable_result(),
      v1::TaskResult::descriptor()->FindFieldByNumber(static_cast<int>(first.payload().kind_case())));
  v1::CompleteTaskResponse unused;
  auto ctx = Context(kWorkerToken);
  const grpc::Status refused = stub->CompleteTask(ctx.get(), late, &unused);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(), HasSubstr("stale"));
  // A result of another kind is the worker's bug: refused as such, whatever its token.
  v1::CompleteTaskRequest wrong_kind;
  wrong_kind.set_task_id(second.task_id());
  wrong_kind.set_fencing_token(second.fencing_token());
  if (second.payload().has_candidate()) {
    wrong_kind.mutable_result()->mutable_lift();
  } else {
    wrong_kind.mutable_result()->mutable_candidate()->set_passed(true);
  }
  auto ctx3 = Context(kWorkerToken);
  const grpc::Status mismatched = stub->CompleteTask(ctx3.get(), wrong_kind, &unused);
  EXPECT_EQ(mismatched.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(mismatched.error_message(), HasSubstr("is not a"));
  v1::HeartbeatRequest hb;
  hb.set_worker_id(slow);
  hb.set_task_id(first.task_id());
  hb.set_fencing_token(first.fencing_token());
  v1::HeartbeatResponse hb_resp;
  auto ctx2 = Context(kWorkerToken);
  EXPECT_EQ(stub->Heartbeat(ctx2.get(), hb, &hb_resp).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(TaskField(first.task_id(), "state"), "leased");
}

TEST_F(Faults, ConcurrentSubmitsOfIdenticalSpecsShareTheWork) {
  StartCoordinator();
  StartWorker();
  StartWorker();
  constexpr int kDistinct = 20, kEach = 10;
  std::vector<std::future<absl::StatusOr<v1::Job>>> submits;
  for (int i = 0; i < kDistinct * kEach; ++i) {
    submits.push_back(std::async(std::launch::async, [this, i] {
      return Submit(Request("sliding_window", {{"window", std::to_string(16 + i % kDistinct)}}));
    }));
  }
  std::set<std::string> ids, hashes;
  for (auto& f : submits) {
    auto job = f.get();
    ASSERT_TRUE(job.ok()) << job.status();
    ids.insert(job->job_id());
    hashes.insert(job->spec_hash());
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(kDistinct * kEach));
  EXPECT_EQ(hashes.size(), static_cast<size_t>(kDistinct));
  for (const std::string& id : ids) {
    const v1::Job done = WaitEnded(id, 600s);
    ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << Describe(done) << Logs();
  }
  // One transfer, one candidate and one backward per distinct spec, one lift in all; each ran
  // once.
  auto keys = Redis()->Command({"KEYS", "cubridge:task:*"});
  ASSERT_TRUE(keys.ok());
  int tasks = 0;
  for (const auto& k : keys->elements) {
    if (k.str.find(":jobs") != std::string::npos) continue;
    ++tasks;
    auto attempt = Redis()->Command({"HGET", k.str, "attempt"});
    EXPECT_EQ(attempt->str, "1") << k.str << " ran more than once";
  }
  EXPECT_EQ(tasks, 3 * kDistinct + 1);
}

TEST_F(Faults, ADrainedWorkerFinishesItsTaskFirst) {
  StartCoordinator();
  Process* w = StartWorker(Slow(2000));
  auto job = Submit(Request("causal"));
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(w->WaitForLog(": running", 30s));
  w->Signal(SIGTERM);
  EXPECT_EQ(w->Wait(60s), 0) << w->Log();
  EXPECT_THAT(w->Log(), HasSubstr(": completed"));
  StartWorker();
  const v1::Job done = WaitEnded(job->job_id(), 180s);
  EXPECT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << Describe(done);
}

}  // namespace
}  // namespace cubridge::testing
