// The spec-check children: a spec that crashes or stalls one costs only that child, which is
// replaced; a real child (the coordinator binary's `check-specs`) answers with the spec hash or
// the frontend's file:line:col error, and identical specs are compiled once.
#include "server/core/spec_checker.h"

#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <mutex>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/sdk/test_util.h"

namespace cubridge::core {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

// A stand-in child: a shell script run as `SCRIPT check-specs --fd 3`.
std::string Script(testing::TempDir& dir, const std::string& name, const std::string& body) {
  const std::string path = dir / name;
  testing::WriteFile(path, "#!/bin/sh\n" + body + "\n");
  chmod(path.c_str(), 0755);
  return path;
}

v1::SubmitJobRequest Request(const std::string& source, const std::string& file = "spec.py") {
  v1::SubmitJobRequest r;
  r.mutable_spec()->set_file_name(file);
  r.mutable_spec()->set_source(source);
  r.mutable_config()->set_head_dim(64);
  return r;
}

struct Outcomes {
  std::mutex mu;
  std::map<std::string, int> seen;
  SpecCheckObserver observer() {
    return [this](const std::string& outcome, double) {
      std::lock_guard lock(mu);
      ++seen[outcome];
    };
  }
};

TEST(SpecChecker, AChildThatCrashesIsReplacedAndTheSpecIsBlamedWithTheSignal) {
  testing::TempDir dir;
  SpecCheckerOptions o;
  o.program = Script(dir, "crash.sh", "kill -SEGV $$");
  o.children = 1;
  Outcomes outcomes;
  SpecChecker checker(o, outcomes.observer());
  ASSERT_TRUE(checker.Start().ok());
  for (int i = 0; i < 2; ++i) {  // the second check runs on a fresh child
    auto r = checker.Check(Request("def mask_mod(b, h, q_idx, kv_idx):\n    return True\n", "crash.py"),
                           "rules-test");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr("crash.py: the spec frontend crashed"));
    EXPECT_THAT(r.status().message(), HasSubstr("SIGSEGV"));
  }
  EXPECT_EQ(outcomes.seen["crashed"], 2);
}

TEST(SpecChecker, AChildThatStallsIsKilledAtTheTimeLimit) {
  testing::TempDir dir;
  SpecCheckerOptions o;
  o.program = Script(dir, "stall.sh", "exec sleep 60");
  o.children = 1;
  o.timeout = 300ms;
  SpecChecker checker(o);
  ASSERT_TRUE(checker.Start().ok());
  const auto start = std::chrono::steady_clock::now();
  auto r = checker.Check(Request("def mask_mod(b, h, q_idx, kv_idx):\n    return True\n"), "rules-test");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("longer than 0.3 s"));
}

TEST(SpecChecker, AProgramThatCannotRunIsUnavailableAtStart) {
  SpecCheckerOptions o;
  o.program = "/nonexistent/cubridge-coordinator";
  SpecChecker checker(o);
  const absl::Status s = checker.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent/cubridge-coordinator"));
}

TEST(SpecChecker, TheRealChildHashesSpecsRefusesBadOnesAndCompilesEachOnce) {
  SpecCheckerOptions o;
  o.program = CUBRIDGE_COORDINATOR;
  o.children = 2;
  Outcomes outcomes;
  SpecChecker checker(o, outcomes.observer());
  ASSERT_TRUE(checker.Start().ok());
  const std::string causal = testing::ReadFile(std::string(CUBRIDGE_SOURCE_ROOT) + "/examples/specs/causal.py");
  auto first = checker.Check(Request(causal, "causal.py"), "rules-test");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->spec_hash.size(), 64u);
  EXPECT_THAT(first->canonical_form, HasSubstr("rules-test"));
  auto again = checker.Check(Request(causal, "causal.py"), "rules-test");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->spec_hash, first->spec_hash);
  auto other_rules = checker.Check(Request(causal, "causal.py"), "rules-other");
  ASSERT_TRUE(other_rules.ok());
  EXPECT_NE(other_rules->spec_hash, first->spec_hash);
  auto bad = checker.Check(Request("def mask_mod(b, h, q_idx, kv_idx):\n    return q_idx >= \n", "bad.py"),
                           "rules-test");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("bad.py:3:1: syntax error"));
  EXPECT_EQ(outcomes.seen["ok"], 2);
  EXPECT_EQ(outcomes.seen["cached"], 1);
  EXPECT_EQ(outcomes.seen["invalid"], 1);
}

}  // namespace
}  // namespace cubridge::core
