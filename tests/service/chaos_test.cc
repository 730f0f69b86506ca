// A batch of jobs while workers, the coordinator and Redis are killed (SIGKILL) and restarted at
// random moments: no accepted job is lost, no task's result is accepted twice, no idempotency key
// makes two jobs, and every job ends, succeeded or failed with its cause. Bounded (a fixed number
// of faults over a fixed time, seeded: CUBRIDGE_CHAOS_SEED repeats a run) and on loopback with the
// real processes. Prints its figures ("[ figure ]"), which docs/service.md records.
#include <signal.h>

#include <atomic>
#include <future>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cubridge/client.h>

#include "absl/strings/str_cat.h"
#include "tests/service/cluster.h"

namespace cubridge::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kJobs = 16;
constexpr int kWorkers = 3;
constexpr auto kChaos = 45s;

class Chaos : public Cluster {
 protected:
  uint64_t Seed() {
    const char* env = std::getenv("CUBRIDGE_CHAOS_SEED");
    return env != nullptr ? std::stoull(env) : std::random_device{}();
  }
  Process* StartChaosWorker() {
    // Each task takes a moment, so that kills land mid-task.
    return StartWorker({{"CUBRIDGE_TEST_TASK_DELAY_MS", "400"}});
  }
};

TEST_F(Chaos, KillsAndRestartsLoseNoJobAndDuplicateNoWork) {
  const uint64_t seed = Seed();
  std::printf("[ figure ] chaos seed %llu (CUBRIDGE_CHAOS_SEED=%llu repeats it)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  StartCoordinator();
  std::vector<Process*> workers;
  for (int i = 0; i < kWorkers; ++i) workers.push_back(StartChaosWorker());

  ClientOptions options;
  options.address = Address();
  options.token = kClientToken;
  options.deadline = 60s;  // long enough to ride through any of the outages below
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();

  // Submits spread over the first half of the chaos, each under its own idempotency key.
  std::mutex mu;
  std::map<std::string, std::string> job_of_key;  // idempotency key -> job id
  std::vector<std::string> submit_errors;
  auto submitter = std::async(std::launch::async, [&, spacing = std::mt19937_64(seed + 1)]() mutable {
    for (int i = 0; i < kJobs; ++i) {
      v1::SubmitJobRequest r = i % 4 == 3 ? Request("causal", {})
                                          : Request("sliding_window", {{"window", std::to_string(16 + i)}});
      if (i % 4 == 3) r.mutable_config()->set_heads_q(4 + 4 * (i / 4));  // distinct specs
      r.set_idempotency_key(absl::StrCat("chaos-", seed, "-", i));
      auto job = (*client)->Submit(r);
      std::lock_guard lock(mu);
      if (job.ok()) {
        job_of_key[r.idempotency_key()] = job->job_id();
      } else {
        submit_errors.push_back(absl::StrCat(r.idempotency_key(), ": ", job.status().ToString()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(spacing() % 2000));
    }
  });

  // The faults: every 1-3 s one process is SIGKILLed and restarted 0.3-2 s later.
  std::map<std::string, int> kills;
  const auto chaos_end = Clock::now() + kChaos;
  std::uniform_int_distribution<int> pause_ms(1000, 3000), down_ms(300, 2000), victim(0, 5);
  while (Clock::now() < chaos_end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms(rng)));
    const int v = victim(rng);
    const auto down = std::chrono::milliseconds(down_ms(rng));
    if (v <= 2) {  // a worker (half the faults: there are three of them)
      const int w = static_cast<int>(rng() % workers.size());
      workers[w]->Signal(SIGKILL);
      workers[w]->Wait(10s);
      std::this_thread::sleep_for(down);
      workers[w] = StartChaosWorker();
      ++kills["worker"];
    } else if (v <= 4) {
      coordinator_->Signal(SIGKILL);
      coordinator_->Wait(10s);
      std::this_thread::sleep_for(down);
      StartCoordinator();
      ++kills["coordinator"];
    } else {
      redis_.Kill();
      std::this_thread::sleep_for(down);
      ASSERT_TRUE(redis_.Restart()) << redis_.error();
      ++kills["redis"];
    }
  }
  ASSERT_EQ(submitter.wait_for(300s), std::future_status::ready);
  const auto calm = Clock::now();

  // Every accepted job ends; a failed one says which stage and why.
  int succeeded = 0, failed = 0;
  for (const auto& [key, id] : job_of_key) {
    const v1::Job done = WaitEnded(id, 600s);
    ASSERT_TRUE(Ended(done)) << "job " << id << " (" << key << ") never ended: " << Describe(done)
                             << "its tasks in Redis:\n" << StoredTasks(id) << Logs();
    if (done.state() == v1::JOB_STATE_SUCCEEDED) {
      ++succeeded;
    } else {
      ++failed;
      EXPECT_THAT(done.error(), ::testing::ContainsRegex("^[a-z_]+: .+")) << Describe(done);
    }
  }
  const double settle = std::chrono::duration<double>(Clock::now() - calm).count();
  // What a failure message would say of a job's tasks, here of one that ended.
  EXPECT_THAT(StoredTasks(job_of_key.begin()->second),
              ::testing::ContainsRegex("task transfer-[0-9a-f]+: state=done attempt=[1-9]"));
  EXPECT_TRUE(submit_errors.empty()) << ::testing::PrintToString(submit_errors);

  // One job per key: submitting again under each key answers with the job it already names.
  for (const auto& [key, id] : job_of_key) {
    v1::SubmitJobRequest again;
    again.set_idempotency_key(key);
    // The key's request, rebuilt: the index in the key says which it was.
    const int i = std::stoi(key.substr(key.rfind('-') + 1));
    again = i % 4 == 3 ? Request("causal", {}) : Request("sliding_window", {{"window", std::to_string(16 + i)}});
    if (i % 4 == 3) again.mutable_config()->set_heads_q(4 + 4 * (i / 4));
    again.set_idempotency_key(key);
    auto job = (*client)->Submit(again);
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->job_id(), id) << key << " made a second job";
  }

  // No task's result was accepted twice, across every coordinator that ran.
  std::map<std::string, int> completions;
  const std::regex done_line("task=(\\S+) done by worker=");
  const std::string logs = CoordinatorLogs();
  for (auto it = std::sregex_iterator(logs.begin(), logs.end(), done_line); it != std::sregex_iterator(); ++it) {
    ++completions[(*it)[1]];
  }
  int reruns = 0, tasks = 0;
  auto redis = Redis();
  for (const auto& [task, n] : completions) {
    EXPECT_EQ(n, 1) << task << " completed " << n << " times";
    auto attempt = redis->Command({"HGET", "cubridge:task:" + task, "attempt"});
    if (attempt.ok() && !attempt->str.empty()) {
      ++tasks;
      reruns += std::stoi(attempt->str) - 1;
    }
  }
  std::printf("[ figure ] chaos: %d jobs accepted, %d succeeded, %d failed, 0 lost; faults: %d "
              "worker, %d coordinator, %d redis kills in %lld s; %d tasks completed once each, "
              "%d attempts re-run after their worker or lease was lost; all ended %.1f s after "
              "the last fault\n",
              static_cast<int>(job_of_key.size()), succeeded, failed, kills["worker"],
              kills["coordinator"], kills["redis"],
              static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(kChaos).count()),
              tasks, reruns, settle);
  EXPECT_EQ(static_cast<int>(job_of_key.size()), kJobs);
}

}  // namespace
}  // namespace cubridge::testing
