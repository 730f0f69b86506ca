// The job flow under concurrency: submits and sweeps of one job run at once on different
// coordinator threads (each with its own Redis connection), as they do in the service.
#include <atomic>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "server/core/flow.h"
#include "tests/server/redis_server.h"

namespace cubridge::core {
namespace {

class FlowRace : public testing::RedisTest {};

// Advance plans a task for a job once (a per-job marker) and then queues it. A second Advance of
// the same job that lands between the two (a sweep racing the submit) finds the marker set and
// the task not there yet; it must wait for it, not fail the caller.
TEST_F(FlowRace, ASweepRacingASubmitNeverFailsEither) {
  const FlowOptions options{"rules-test"};
  std::atomic<bool> submitting{true};
  std::atomic<int> sweep_errors{0};
  std::string first_sweep_error;
  std::thread sweeper([&] {
    auto c = Connect();
    JobFlow flow(c.get(), options, nullptr);
    while (submitting) {
      auto active = flow.jobs().Active();
      if (!active.ok()) continue;
      for (const std::string& id : *active) {
        auto s = flow.Advance(id);
        if (!s.ok() && sweep_errors++ == 0) first_sweep_error = s.ToString();
      }
    }
  });
  constexpr int kThreads = 4, kEach = 25;
  std::vector<std::future<std::string>> submitters;
  for (int t = 0; t < kThreads; ++t) {
    submitters.push_back(std::async(std::launch::async, [&, t] {
      auto c = Connect();
      JobFlow flow(c.get(), options, nullptr);
      for (int i = 0; i < kEach; ++i) {
        v1::SubmitJobRequest req;
        req.mutable_spec()->set_source("def mask_mod(b, h, q_idx, kv_idx):\n    return q_idx >= kv_idx\n");
        req.set_verification(v1::VERIFICATION_LEVEL_IR);
        // Distinct hashes so every submit plans fresh tasks (the racy window) for its job.
        auto job = flow.Submit(req, {"hash-" + std::to_string(t * kEach + i), "canonical"}, {"sm_80"});
        if (!job.ok()) return job.status().ToString();
      }
      return std::string();
    }));
  }
  std::vector<std::string> errors;
  for (auto& f : submitters) {
    if (std::string e = f.get(); !e.empty()) errors.push_back(e);
  }
  submitting = false;
  sweeper.join();
  EXPECT_TRUE(errors.empty()) << errors.size() << " submits failed, first: " << (errors.empty() ? "" : errors[0]);
  EXPECT_EQ(sweep_errors, 0) << first_sweep_error;
  // Every job's transfer and lift were queued, each once.
  auto keys = client_->Command({"KEYS", "cubridge:task:transfer-*"});
  ASSERT_TRUE(keys.ok());
  int transfers = 0;
  for (const auto& k : keys->elements) transfers += k.str.find(":jobs") == std::string::npos;
  EXPECT_EQ(transfers, kThreads * kEach);
}

}  // namespace
}  // namespace cubridge::core
