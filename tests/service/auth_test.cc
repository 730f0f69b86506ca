// Requests the coordinator must refuse, with the status code that tells a client what to fix, and
// without storing anything.
#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include "tests/service/cluster.h"

namespace cubridge::testing {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

class Refusals : public Cluster {
 protected:
  void SetUp() override {
    Cluster::SetUp();
    StartCoordinator();
  }
  grpc::Status SubmitWith(const std::string& token, const v1::SubmitJobRequest& r) {
    v1::Job job;
    auto ctx = Context(token);
    return ClientStub()->SubmitJob(ctx.get(), r, &job);
  }
  int64_t JobCount() {
    v1::ListJobsRequest req;
    req.set_limit(1000);
    v1::ListJobsResponse resp;
    auto ctx = Context(kClientToken);
    EXPECT_TRUE(ClientStub()->ListJobs(ctx.get(), req, &resp).ok());
    return resp.jobs_size();
  }
};

TEST_F(Refusals, MissingOrWrongTokensAreUnauthenticated) {
  EXPECT_EQ(SubmitWith("", Request("causal")).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  const grpc::Status wrong = SubmitWith("guess", Request("causal"));
  EXPECT_EQ(wrong.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(wrong.error_message(), HasSubstr("not a valid client token"));
  // The worker token opens the worker API only, and the client token the client API only.
  EXPECT_EQ(SubmitWith(kWorkerToken, Request("causal")).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  v1::RegisterRequest reg;
  reg.set_arch("cpu");
  v1::RegisterResponse resp;
  auto ctx = Context(kClientToken);
  EXPECT_EQ(WorkerStub()->Register(ctx.get(), reg, &resp).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(JobCount(), 0);
}

TEST_F(Refusals, ABadSpecIsInvalidArgumentWithTheFrontendsPosition) {
  auto r = Request("causal");
  r.mutable_spec()->set_file_name("mine.py");
  r.mutable_spec()->set_source(
      "import torch\n\ndef mask_mod(b, h, q_idx, kv_idx, bias: torch.Tensor):\n"
      "    return bias[q_idx * 0.5] > 0\n");
  const grpc::Status s = SubmitWith(kClientToken, r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), ::testing::ContainsRegex("^mine\\.py:4:[0-9]+: ")) << s.error_message();

  auto bad_config = Request("causal");
  bad_config.mutable_config()->set_head_dim(96);
  const grpc::Status c = SubmitWith(kClientToken, bad_config);
  EXPECT_EQ(c.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(c.error_message(), HasSubstr("head-dim 96 is not supported"));

  auto bad_arch = Request("causal");
  bad_arch.add_archs("sm_75");
  EXPECT_EQ(SubmitWith(kClientToken, bad_arch).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(JobCount(), 0);
}

TEST_F(Refusals, OversizedRequestsAreResourceExhausted) {
  auto big_spec = Request("causal");
  big_spec.mutable_spec()->mutable_source()->append(std::string(70 * 1024, '#'));
  const grpc::Status s = SubmitWith(kClientToken, big_spec);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("spec source size"));

  auto long_seq = Request("causal");
  long_seq.mutable_config()->set_seqlen_q(int64_t{1} << 24);
  EXPECT_EQ(SubmitWith(kClientToken, long_seq).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  // Over gRPC's message limit (4 MiB, plus the 64 MiB buffer values may take): refused before it
  // is parsed.
  auto huge = Request("causal");
  huge.mutable_spec()->mutable_source()->append(std::string(69 << 20, '#'));
  const grpc::Status too_big = SubmitWith(kClientToken, huge);
  EXPECT_EQ(too_big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(too_big.error_message(), ::testing::Not(HasSubstr("spec source size")));
  EXPECT_EQ(JobCount(), 0);
}

TEST_F(Refusals, UnknownJobsAndKernelsAreNotFound) {
  v1::GetJobRequest req;
  req.set_job_id("j-0000000000000000");
  v1::Job job;
  auto ctx = Context(kClientToken);
  EXPECT_EQ(ClientStub()->GetJob(ctx.get(), req, &job).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::GetKernelRequest kreq;
  kreq.set_spec_hash(std::string(64, '0'));
  kreq.set_arch("sm_90");
  v1::Kernel kernel;
  auto ctx2 = Context(kClientToken);
  EXPECT_EQ(ClientStub()->GetKernel(ctx2.get(), kreq, &kernel).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // What is not a spec hash at all is refused as such, before any lookup.
  kreq.set_spec_hash("00");
  auto ctx3 = Context(kClientToken);
  EXPECT_EQ(ClientStub()->GetKernel(ctx3.get(), kreq, &kernel).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(Refusals, HealthIsServingUntilDrainedAndTheDrainExitsCleanly) {
  auto channel = grpc::CreateChannel(Address(), grpc::InsecureChannelCredentials());
  auto health = [&]() {
    grpc::ByteBuffer unused;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 2s);
    // grpc.health.v1.HealthCheckRequest{service: ""} is the empty message.
    grpc::GenericStub stub(channel);
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1);
    grpc::Status status;
    grpc::ByteBuffer response;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) {
                     std::lock_guard l(mu);
                     status = s;
                     done = true;
                     cv.notify_all();
                   });
    std::unique_lock l(mu);
    cv.wait(l, [&] { return done; });
    std::vector<grpc::Slice> slices;
    (void)response.Dump(&slices);
    std::string bytes;
    for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    // HealthCheckResponse{status: SERVING=1} is field 1, varint 1: bytes 08 01.
    return status.ok() && bytes == std::string("\x08\x01", 2);
  };
  EXPECT_TRUE(health());
  coordinator_->Signal(SIGTERM);
  EXPECT_EQ(coordinator_->Wait(30s), 0) << coordinator_->Log();
  EXPECT_THAT(coordinator_->Log(), HasSubstr("drained"));
}

}  // namespace
}  // namespace cubridge::testing
