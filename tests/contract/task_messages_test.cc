// The typed task messages in the forms they travel and rest in: the store's JSON text, results an
// earlier version stored as bare JSON documents, report fragments as Structs.
#include "service/contract/task_messages.h"

#include <google/protobuf/util/message_differencer.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cuir/spec/digest.h"
#include "service/contract/task_contract.h"

namespace cubridge::contract {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

SpecInput Input() {
  SpecInput in;
  in.file_name = "doc.py";
  in.source = "def mask_mod(b, h, q_idx, kv_idx):\n    return q_idx >= kv_idx\n";
  in.params = {"window=64"};
  in.buffers = {{"doc", "lengths:100,156"}};
  in.tensors["slopes"] = {cuir::TensorDType::kFloat32, {8}, spec::Sha256Hex(std::string(32, 'x')), {}};
  in.config.heads_q = 8;
  in.config.heads_kv = 2;
  in.seed = 7;
  return in;
}

TEST(TaskMessages, APayloadSurvivesTheStoreAndRebuildsTheSpecInputWithItsValues) {
  v1::TaskPayload p;
  *p.mutable_candidate()->mutable_spec() = SpecInputToProto(Input());
  p.mutable_candidate()->set_tile("128x128w8");
  p.mutable_candidate()->set_level(v1::VERIFICATION_LEVEL_IR);
  const std::string text = StoreText(p);
  EXPECT_THAT(text, HasSubstr("\"file_name\""));  // the proto's names, readable in the store
  auto back = PayloadFromStore(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*back, p));
  EXPECT_EQ(TensorDigests(*back), std::vector<std::string>{Input().tensors.at("slopes").sha256});

  const std::string bytes(32, 'x');
  const TensorLookup came = [&](const std::string&) { return &bytes; };
  ASSERT_TRUE(CheckTensors(*back, came).ok());
  auto in = SpecInputFromProto(back->candidate().spec(), came);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->params, Input().params);
  EXPECT_EQ(in->buffers, Input().buffers);
  EXPECT_EQ(in->tensors.at("slopes").data, bytes);
  EXPECT_EQ(in->config.heads_kv, 2);
  EXPECT_EQ(in->config.ToString(), Input().config.ToString());
  EXPECT_EQ(in->seed, 7u);
}

TEST(TaskMessages, ValuesThatDidNotComeOrCameDamagedAreRefusedByKind) {
  v1::TaskPayload p;
  *p.mutable_transfer()->mutable_spec() = SpecInputToProto(Input());
  const std::string damaged(31, 'x');
  EXPECT_EQ(CheckTensors(p, [](const std::string&) { return nullptr; }).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(CheckTensors(p, [&](const std::string&) { return &damaged; }).code(),
            absl::StatusCode::kDataLoss);
}

TEST(TaskMessages, AStoredPayloadOfAnotherShapeIsRefusedWithWhatToDo) {
  for (const std::string text : {R"({"spec": {"file_name": "a.py"}, "proposer": "rules"})", "{}", "not json"}) {
    auto p = PayloadFromStore(text);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition) << text;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr("submit the job again")) << text;
  }
}

TEST(TaskMessages, ResultsStoredByEarlierVersionsAsBareDocumentsStillRead) {
  // A candidate result as the JSON-payload releases stored it, module image in base64.
  const json old = {{"detail", "128x64w4 lowered"}, {"seconds", 0.5}, {"passed", true},
                    {"tile", "128x64w4"}, {"kernel_cu", "// cu"},
                    {"check", {{"passed", true}, {"cubin_bytes", 4096}}},
                    {"module", {{"file", "module.sm_80.cubin"}, {"image_base64", "AAEC"},
                                {"symbols", {{"f<0>", "_Z1fILi0EEvv"}}}}},
                    {"a_key_no_longer_kept", 1}};
  auto r = ResultFromStore(kCandidateTask, old.dump());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->has_candidate());
  EXPECT_TRUE(r->candidate().passed());
  EXPECT_EQ(r->candidate().kernel_cu(), "// cu");
  EXPECT_EQ(r->candidate().module().image_base64(), std::string("\x00\x01\x02", 3));
  EXPECT_EQ(r->candidate().module().symbols().at("f<0>"), "_Z1fILi0EEvv");
  EXPECT_EQ(ToJson(r->candidate().check())["cubin_bytes"], 4096);
  EXPECT_EQ(ResultSeconds(*r), 0.5);
  // And a result of this version, as stored, reads back whole.
  auto again = ResultFromStore(kCandidateTask, StoreText(*r));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*again, *r));
  // No result yet: the empty result of the kind; one of another kind is refused.
  EXPECT_TRUE(ResultFromStore(kTransferTask, "")->has_transfer());
  EXPECT_EQ(ResultFromStore(kTransferTask, StoreText(*r)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TaskMessages, ReportFragmentsKeepTheirJsonIntegersIncluded) {
  const json fragment = {{"name", "128x128w8"},      {"passed", true},
                         {"cubin_bytes", 123456},    {"tflops", 512.25},
                         {"shapes", {1, 2, "x"}},    {"nested", {{"none", nullptr}}},
                         {"negative", -3}};
  EXPECT_EQ(ToJson(ToStruct(fragment)), fragment);
  EXPECT_EQ(ToJson(ToList(json::array({1, 2.5, "a"}))), json::array({1, 2.5, "a"}));
}

TEST(TaskMessages, LlmUsageRoundTripsAndNoRequestsIsNoUsage) {
  const json usage = {{"model", "m"}, {"requests", 2}, {"prompt_tokens", 1200},
                      {"completion_tokens", 300}, {"cost_usd", 0.25}};
  EXPECT_EQ(ToJson(UsageToProto(usage)), usage);
  EXPECT_TRUE(ToJson(UsageToProto(nullptr)).is_null());
}

TEST(TaskMessages, APayloadConfigMustBeComplete) {
  v1::AttentionConfig c = ConfigToProto(cuir::AttentionConfig{});
  EXPECT_TRUE(PayloadConfigFromProto(c).ok());
  c.clear_seqlen_kv();
  EXPECT_THAT(std::string(PayloadConfigFromProto(c).status().message()), HasSubstr("config.seqlen_kv"));
}

}  // namespace
}  // namespace cubridge::contract
