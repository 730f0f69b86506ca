// The wire API's contract as clients and workers rely on it: the services and their methods,
// streaming where promised, and messages that survive serialization with every field.
#include <gtest/gtest.h>

#include <google/protobuf/descriptor.h>

#include "cubridge/v1/client.grpc.pb.h"
#include "cubridge/v1/worker.grpc.pb.h"

namespace {

std::vector<std::string> Methods(const google::protobuf::ServiceDescriptor* s) {
  std::vector<std::string> out;
  for (int i = 0; i < s->method_count(); ++i) out.push_back(s->method(i)->name());
  return out;
}

TEST(Api, ClientServiceHasTheIssuedMethods) {
  const auto* s = cubridge::v1::Job::descriptor()->file()->FindServiceByName("CuBridge");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(Methods(s), (std::vector<std::string>{"SubmitJob", "GetJob", "WatchJob", "CancelJob",
                                                  "ListJobs", "GetKernel", "ListWorkers"}));
  // Watching is a server stream of stage events; nothing else streams.
  for (int i = 0; i < s->method_count(); ++i) {
    EXPECT_EQ(s->method(i)->server_streaming(), s->method(i)->name() == "WatchJob");
    EXPECT_FALSE(s->method(i)->client_streaming());
  }
}

TEST(Api, WorkerServiceCarriesFencingTokens) {
  // Through a message of the file: a static library's descriptors register when linked in.
  const auto* s = cubridge::v1::HeartbeatRequest::descriptor()->file()->FindServiceByName("Workers");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(Methods(s), (std::vector<std::string>{"Register", "LeaseTask", "Heartbeat",
                                                  "ReportProgress", "CompleteTask", "FailTask",
                                                  "ReportHealth"}));
  // Every call that acts on a leased task names the lease's fencing token.
  for (const char* method : {"Heartbeat", "ReportProgress", "CompleteTask", "FailTask"}) {
    const auto* input = s->FindMethodByName(method)->input_type();
    EXPECT_NE(input->FindFieldByName("fencing_token"), nullptr) << method;
  }
}

TEST(Api, ASubmitRequestRoundTrips) {
  cubridge::v1::SubmitJobRequest r;
  r.mutable_spec()->set_file_name("doc.py");
  r.mutable_spec()->set_source("def mask_mod(b, h, q_idx, kv_idx):\n    return q_idx >= kv_idx\n");
  (*r.mutable_spec()->mutable_buffers())["doc"] = "lengths:100,157";
  r.mutable_config()->set_heads_q(32);
  r.mutable_config()->set_heads_kv(8);
  r.mutable_config()->set_dtype("bf16");
  r.add_archs("sm_90");
  r.set_verification(cubridge::v1::VERIFICATION_LEVEL_IR);
  r.set_idempotency_key("k-1");
  cubridge::v1::SubmitJobRequest back;
  ASSERT_TRUE(back.ParseFromString(r.SerializeAsString()));
  EXPECT_EQ(back.spec().buffers().at("doc"), "lengths:100,157");
  EXPECT_EQ(back.config().heads_kv(), 8);
  EXPECT_EQ(back.archs(0), "sm_90");
  EXPECT_EQ(back.verification(), cubridge::v1::VERIFICATION_LEVEL_IR);
  EXPECT_EQ(back.idempotency_key(), "k-1");
}

}  // namespace
