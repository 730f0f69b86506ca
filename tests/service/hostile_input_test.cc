// Untrusted input against a running service: specs built to overflow the spec frontend's stack,
// ids and keys that are not what they claim, sizes that mean nothing, bytes that are not text,
// an idempotency key reused for another request. None of it may stop the coordinator, reach
// Redis unchecked, or come back as a message that leaks the service's internals.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/sdk/test_util.h"
#include "tests/service/cluster.h"

namespace cubridge::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

// The three shapes that overflowed LibTorch's parser on a gRPC handler thread: deeply nested
// brackets, a long run of unary minus, a long flat chain of additions.
std::string NestedParens(int depth) {
  return absl::StrCat("def mask_mod(b, h, q_idx, kv_idx):\n    return ", std::string(depth, '('),
                      "q_idx >= kv_idx", std::string(depth, ')'), "\n");
}
std::string UnaryChain(int n) {
  std::string minus;
  for (int i = 0; i < n; ++i) minus += "- ";
  return absl::StrCat("def mask_mod(b, h, q_idx, kv_idx):\n    return (", minus, "q_idx) <= kv_idx\n");
}
std::string PlusZeroChain(int n) {
  std::string chain;
  for (int i = 0; i < n; ++i) chain += "+ 0 ";
  return absl::StrCat("def mask_mod(b, h, q_idx, kv_idx):\n    return q_idx ", chain, ">= kv_idx\n");
}

class HostileInput : public Cluster {
 protected:
  absl::StatusOr<v1::Job> SubmitSource(const std::string& source) {
    v1::SubmitJobRequest r = Request("causal");
    r.mutable_spec()->set_file_name("hostile.py");
    r.mutable_spec()->set_source(source);
    return Submit(r);
  }
  static grpc::Status GetJobRaw(v1::CuBridge::Stub& stub, const std::string& id) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    auto ctx = Context(kClientToken, 10s);
    return stub.GetJob(ctx.get(), req, &job);
  }
};

// Words of the store's protocol that a client must never see.
auto NoStoreInternals() {
  return AllOf(Not(HasSubstr("Redis")), Not(HasSubstr("HGETALL")), Not(HasSubstr("WRONGTYPE")),
               Not(HasSubstr("EVAL")), Not(HasSubstr("script:")));
}

TEST_F(HostileInput, SpecsBuiltToOverflowTheFrontendCannotStopTheCoordinator) {
  StartCoordinator();
  const std::vector<std::pair<std::string, std::string>> hostile = {
      {"10000 nested parentheses", NestedParens(10000)},
      {"20000 unary minus", UnaryChain(20000)},
      {"15000 '+ 0'", PlusZeroChain(15000)}};
  for (const auto& [what, source] : hostile) {
    auto job = SubmitSource(source);
    ASSERT_FALSE(job.ok()) << what << " was accepted";
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << what << ": " << job.status();
    // Where, and which limit: the user can fix the spec from the message alone.
    EXPECT_THAT(job.status().message(), HasSubstr("hostile.py:2:")) << what;
    EXPECT_THAT(job.status().message(), HasSubstr("at most")) << what;
    ASSERT_TRUE(coordinator_->Alive()) << what << " stopped the coordinator:\n" << Logs();
  }
  // And the service still serves everyone else.
  auto fine = Submit(Request("causal"));
  EXPECT_TRUE(fine.ok()) << fine.status();
}

TEST_F(HostileInput, AdaptLocalRefusesTheSameSpecsWithAnError) {
  TempDir tmp;
  const std::string spec = WriteFile(tmp / "nested.py", NestedParens(10000));
  const RunResult r = RunCommand(absl::StrCat(CliBinary(), " adapt ", spec,
                                              " --local --no-cache --out ", tmp / "out"));
  EXPECT_EQ(r.exit_code, 1) << r.output;  // a failed adapt, not a crash (139)
  EXPECT_THAT(r.output, HasSubstr("nested.py:2:"));
  EXPECT_THAT(r.output, HasSubstr("at most"));
}

TEST_F(HostileInput, IdsAreCheckedBeforeTheyReachRedis) {
  StartCoordinator();
  auto job = Submit(Request("causal"));
  ASSERT_TRUE(job.ok()) << job.status();
  auto stub = ClientStub();
  for (const std::string& id :
       {job->job_id() + ":events", job->job_id() + ":transcript", std::string("*"),
        std::string("j-1 2"), std::string(300, 'j')}) {
    const grpc::Status s = GetJobRaw(*stub, id);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << id << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), NoStoreInternals()) << id;
    EXPECT_THAT(s.error_message(), HasSubstr("j-")) << "says what a job id looks like";
  }
  v1::GetJobRequest cancel;
  cancel.set_job_id(job->job_id() + ":events");
  v1::Job out;
  auto ctx = Context(kClientToken);
  const grpc::Status c = stub->CancelJob(ctx.get(), cancel, &out);
  EXPECT_EQ(c.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.error_message();
  EXPECT_THAT(c.error_message(), NoStoreInternals());

  v1::GetKernelRequest kernel;
  kernel.set_spec_hash(job->spec_hash() + ":sm_80");
  kernel.set_arch("sm_80");
  v1::Kernel k;
  auto kctx = Context(kClientToken);
  const grpc::Status g = stub->GetKernel(kctx.get(), kernel, &k);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << g.error_message();
  EXPECT_THAT(g.error_message(), NoStoreInternals());
  ASSERT_TRUE(coordinator_->Alive());
}

TEST_F(HostileInput, ZeroAndNegativeSizesAreRefusedNotDefaulted) {
  StartCoordinator();
  struct Case {
    const char* what;
    std::function<void(v1::AttentionConfig&)> set;
  };
  const std::vector<Case> cases = {
      {"heads_q", [](v1::AttentionConfig& c) { c.set_heads_q(0); c.set_heads_kv(0); }},
      {"batch", [](v1::AttentionConfig& c) { c.set_batch(0); }},
      {"head_dim", [](v1::AttentionConfig& c) { c.set_head_dim(0); }},
      {"seqlen_q", [](v1::AttentionConfig& c) { c.set_seqlen_q(-5); }},
      {"seqlen_kv", [](v1::AttentionConfig& c) { c.set_seqlen_kv(0); }},
  };
  for (const Case& c : cases) {
    v1::SubmitJobRequest r = Request("causal");
    c.set(*r.mutable_config());
    auto job = Submit(r);
    ASSERT_FALSE(job.ok()) << c.what << " accepted";
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << job.status();
    EXPECT_THAT(job.status().message(), HasSubstr(c.what)) << job.status();
  }
  // A config that leaves a size out still gets the documented default.
  v1::SubmitJobRequest defaults = Request("causal");
  defaults.mutable_config()->clear_batch();
  auto job = Submit(defaults);
  EXPECT_TRUE(job.ok()) << job.status();
}

TEST_F(HostileInput, ASpecThatIsNotUtf8GetsAClearMessage) {
  StartCoordinator();
  const std::string binary = "def mask_mod(b, h, q_idx, kv_idx):\n    return q_idx \xff\xfe>= kv_idx\n";
  auto job = SubmitSource(binary);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << job.status();
  EXPECT_THAT(job.status().message(), HasSubstr("hostile.py:2:18"));
  EXPECT_THAT(job.status().message(), HasSubstr("UTF-8"));
}

TEST_F(HostileInput, AnIdempotencyKeyReusedForAnotherRequestIsRefused) {
  StartCoordinator();
  v1::SubmitJobRequest first = Request("causal");
  first.set_idempotency_key("nightly-42");
  auto job = Submit(first);
  ASSERT_TRUE(job.ok()) << job.status();
  auto again = Submit(first);  // a retry of the same request: the same job
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->job_id(), job->job_id());

  v1::SubmitJobRequest other = Request("sliding_window", {{"window", "64"}});
  other.set_idempotency_key("nightly-42");
  auto conflict = Submit(other);
  ASSERT_FALSE(conflict.ok()) << "another spec under the same key was answered with job "
                              << conflict->job_id();
  EXPECT_EQ(conflict.status().code(), absl::StatusCode::kAlreadyExists) << conflict.status();
  EXPECT_THAT(conflict.status().message(), HasSubstr(job->job_id()));
}

TEST_F(HostileInput, WhileRedisIsDownTheCliSaysSo) {
  StartCoordinator();
  auto job = Submit(Request("causal"));
  ASSERT_TRUE(job.ok()) << job.status();
  redis_.Stop();
  const RunResult r = RunCommand(absl::StrCat("CUBRIDGE_ADDRESS=", Address(), " CUBRIDGE_TOKEN=",
                                              kClientToken, " CUBRIDGE_TIMEOUT=2 ", CliBinary(),
                                              " status ", job->job_id()));
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("Redis"));
  EXPECT_THAT(r.output, Not(HasSubstr("cannot reach the coordinator"))) << "the coordinator answered";
  ASSERT_TRUE(redis_.Restart()) << redis_.error();
}

}  // namespace
}  // namespace cubridge::testing
