// Buffers given by value (VariantSpec.tensors) on the coordinator's side: what CheckRequest
// refuses and how it says so, what the spec check makes of them (shapes against the spec, a spec
// hash that does not depend on them), and how a job keeps them: once, by digest, in Redis, named
// by its input and its tasks, and sent with a lease, also by a coordinator that restarted.
#include <cstring>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cuir/pipeline/verify.h"
#include "cuir/spec/digest.h"
#include "server/core/flow.h"
#include "server/core/request.h"
#include "server/core/spec_check.h"
#include "service/contract/task_contract.h"
#include "service/contract/task_messages.h"
#include "tests/server/redis_server.h"

namespace cubridge::core {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using nlohmann::json;

constexpr char kSlopes[] =
    "def score_mod(score, b, h, q_idx, kv_idx, slopes):\n    return score + slopes[h] * (kv_idx - q_idx)\n";

std::string Floats(const std::vector<float>& v) {
  std::string out(v.size() * sizeof(float), '\0');
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

v1::TensorValue Value(cuir::TensorDType dtype, const std::vector<int64_t>& shape, std::string data) {
  v1::TensorValue t;
  t.set_dtype(TensorDTypeToProto(dtype));
  for (int64_t d : shape) t.add_shape(d);
  t.set_data(std::move(data));
  return t;
}

// A request for kSlopes at 4 query heads with `slopes` given by value.
v1::SubmitJobRequest Request(v1::TensorValue slopes) {
  v1::SubmitJobRequest r;
  r.mutable_spec()->set_file_name("slopes.py");
  r.mutable_spec()->set_source(kSlopes);
  (*r.mutable_spec()->mutable_tensors())["slopes"] = std::move(slopes);
  auto* c = r.mutable_config();
  c->set_heads_q(4);
  c->set_heads_kv(2);
  c->set_head_dim(64);
  c->set_seqlen_q(64);
  c->set_seqlen_kv(64);
  r.set_verification(v1::VERIFICATION_LEVEL_IR);
  return r;
}

v1::TensorValue FourSlopes() {
  return Value(cuir::TensorDType::kFloat32, {4}, Floats({0.5f, 0.25f, 0.125f, 0.0625f}));
}

TEST(TensorValueChecks, EachBadValueIsRefusedNamingTheBufferWhatIsWrongAndTheFix) {
  ASSERT_TRUE(CheckRequest(Request(FourSlopes()), Limits{}).ok());
  // Rank 0, and an empty tensor, are values too.
  ASSERT_TRUE(CheckRequest(Request(Value(cuir::TensorDType::kFloat32, {}, Floats({2}))), Limits{}).ok());
  ASSERT_TRUE(CheckRequest(Request(Value(cuir::TensorDType::kInt64, {0, 3}, "")), Limits{}).ok());

  struct Case {
    std::string name;
    v1::SubmitJobRequest request;
    Limits limits;
    absl::StatusCode code;
    std::vector<std::string> says;
  };
  std::vector<Case> cases;
  auto add = [&](const std::string& name, v1::TensorValue t, absl::StatusCode code,
                 std::vector<std::string> says, Limits limits = {}) {
    cases.push_back({name, Request(std::move(t)), limits, code, std::move(says)});
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  v1::TensorValue t = FourSlopes();
  t.set_dtype(v1::TENSOR_DTYPE_UNSPECIFIED);
  add("no dtype", t, kInvalid,
      {"buffer 'slopes' (spec.tensors): dtype TENSOR_DTYPE_UNSPECIFIED (0) is not a tensor dtype",
       "set one of TENSOR_DTYPE_INT32"});
  t.set_dtype(static_cast<v1::TensorDType>(42));
  add("unknown dtype", t, kInvalid, {"buffer 'slopes'", "dtype (42) is not a tensor dtype"});
  add("rank 5", Value(cuir::TensorDType::kFloat32, {1, 1, 1, 1, 4}, Floats({1, 2, 3, 4})), kInvalid,
      {"buffer 'slopes'", "rank 5", "rank 0 to 4"});
  add("negative size", Value(cuir::TensorDType::kFloat32, {-4}, ""), kInvalid,
      {"buffer 'slopes'", "size -4 of dimension 0 is negative"});
  add("overflowing sizes",
      Value(cuir::TensorDType::kInt64, {int64_t{1} << 32, int64_t{1} << 32, int64_t{1} << 32}, ""),
      kInvalid, {"buffer 'slopes'", "more than 2^40 elements"});
  add("short data", Value(cuir::TensorDType::kFloat32, {4}, Floats({1, 2, 3}).append("abc")), kInvalid,
      {"buffer 'slopes'", "15 bytes of data for float32[4], which takes 4 x 4 = 16 bytes",
       "row-major, contiguous"});
  add("long data", Value(cuir::TensorDType::kBFloat16, {2, 2}, std::string(10, '\0')), kInvalid,
      {"10 bytes of data for bfloat16[2, 2], which takes 4 x 2 = 8 bytes"});
  add("bool byte", Value(cuir::TensorDType::kBool, {4}, std::string("\x01\x02\x00\x01", 4)), kInvalid,
      {"buffer 'slopes'", "bool element #1 is the byte 2", "0 (false) or 1 (true)"});
  Limits small;
  small.max_tensor_bytes = 8;
  add("over the size limit", FourSlopes(), absl::StatusCode::kResourceExhausted,
      {"take 16 bytes together, over this service's limit of 8 bytes", "--max-tensor-mb"}, small);
  for (auto& c : cases) {
    auto r = CheckRequest(c.request, c.limits);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), c.code) << c.name << ": " << r.status();
    for (const std::string& s : c.says) EXPECT_THAT(std::string(r.status().message()), HasSubstr(s)) << c.name;
  }

  // Given both ways, one too many, or as a file name the coordinator cannot read.
  auto both = Request(FourSlopes());
  (*both.mutable_spec()->mutable_buffers())["slopes"] = "random:float32";
  EXPECT_THAT(std::string(CheckRequest(both, Limits{}).status().message()),
              AllOf(HasSubstr("buffer 'slopes' (spec.tensors) also has the source \"random:float32\""),
                    HasSubstr("either a source or its values")));
  auto many = Request(FourSlopes());
  (*many.mutable_spec()->mutable_buffers())["other"] = "random";
  Limits one;
  one.max_buffers = 1;
  EXPECT_EQ(CheckRequest(many, one).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(CheckRequest(many, one).status().message()),
              HasSubstr("the number of buffers (sources and values) is 2"));
  auto file = Request(FourSlopes());
  file.mutable_spec()->mutable_tensors()->clear();
  (*file.mutable_spec()->mutable_buffers())["slopes"] = "tensor:/home/me/slopes.pt";
  EXPECT_THAT(std::string(CheckRequest(file, Limits{}).status().message()),
              HasSubstr("send the tensor's values in spec.tensors"));
}

std::string HashOf(const v1::SubmitJobRequest& r, const std::string& ruleset = "r1") {
  v1::SpecCheckRequest req;
  *req.mutable_request() = r;
  req.set_ruleset(ruleset);
  const v1::SpecCheckResponse resp = CheckSpec(req);
  EXPECT_EQ(resp.code(), 0) << resp.message();
  return resp.spec_hash();
}

// The kernel cache and the task ids are keyed by the spec hash: values are run-time inputs of the
// kernel, a dtype or rank is another kernel.
TEST(TensorValueSpecCheck, TheSpecHashDependsOnDtypeAndRankNotOnValuesOrSizes) {
  const std::string four = HashOf(Request(FourSlopes()));
  ASSERT_FALSE(four.empty());
  EXPECT_EQ(HashOf(Request(Value(cuir::TensorDType::kFloat32, {4}, Floats({9, 8, 7, 6})))), four);
  EXPECT_EQ(HashOf(Request(Value(cuir::TensorDType::kFloat32, {16}, Floats(std::vector<float>(16, 1))))),
            four);
  // What the spec checker sends its children: the dtypes and shapes, no bytes.
  EXPECT_EQ(HashOf(Request(Value(cuir::TensorDType::kFloat32, {4}, ""))), four);
  auto random = Request(FourSlopes());
  random.mutable_spec()->mutable_tensors()->clear();
  (*random.mutable_spec()->mutable_buffers())["slopes"] = "random:float32";
  EXPECT_EQ(HashOf(random), four);
  // Another dtype is another variant.
  EXPECT_NE(HashOf(Request(Value(cuir::TensorDType::kFloat16, {4}, std::string(8, '\0')))), four);
}

TEST(TensorValueSpecCheck, AValueTheSpecCannotUseIsRefusedAsAdaptLocalRefusesIt) {
  auto check = [](v1::TensorValue t) {
    v1::SpecCheckRequest req;
    *req.mutable_request() = Request(std::move(t));
    req.set_ruleset("r1");
    return CheckSpec(req);
  };
  const v1::SpecCheckResponse small = check(Value(cuir::TensorDType::kFloat32, {2}, ""));
  EXPECT_EQ(small.code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(small.message(),
              AllOf(HasSubstr("buffer `slopes` from `float32[2] value` has shape [2] but the spec's "
                              "indexing (`slopes[h]`"),
                    HasSubstr("reaches size 4 along dimension 0"), HasSubstr("give at least [4]")));
  const v1::SpecCheckResponse rank = check(Value(cuir::TensorDType::kFloat32, {4, 1}, ""));
  EXPECT_THAT(rank.message(), HasSubstr("has shape [4, 1] (rank 2) but the spec indexes it with 1 indices"));
  auto stray = Request(FourSlopes());
  (*stray.mutable_spec()->mutable_tensors())["bias"] = FourSlopes();
  v1::SpecCheckRequest req;
  *req.mutable_request() = stray;
  EXPECT_THAT(CheckSpec(req).message(),
              HasSubstr("buffer 'bias' is given values but the spec declares no such buffer"));
}

class TensorValueFlow : public testing::RedisTest {
 protected:
  std::string Field(const std::string& key, const std::string& field) {
    auto r = client_->Command({"HGET", key, field});
    return r.ok() ? r->str : "";
  }
  const FlowOptions options_{"rules-test"};
};

TEST_F(TensorValueFlow, AJobKeepsItsValuesOnceByDigestAndALeaseGetsThemBack) {
  // A megabyte of values: what the records must not carry.
  std::vector<float> many(1 << 18);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<float>(i % 97) / 7.0f;
  const std::string bytes = Floats(many);
  const std::string digest = spec::Sha256Hex(bytes);
  auto request = Request(Value(cuir::TensorDType::kFloat32, {static_cast<int64_t>(many.size())}, bytes));

  JobFlow flow(client_.get(), options_, nullptr);
  auto job = flow.Submit(request, {"h1", "canonical"}, {"sm_80"});
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string record = "cubridge:job:" + job->job_id();
  // The record's request and input hold the dtype, shape and digest; the bytes are stored apart.
  v1::SubmitJobRequest stored;
  ASSERT_TRUE(stored.ParseFromString(Field(record, "request")));
  EXPECT_EQ(stored.spec().tensors().at("slopes").shape(0), static_cast<int64_t>(many.size()));
  EXPECT_TRUE(stored.spec().tensors().at("slopes").data().empty());
  const json input = json::parse(Field(record, "input"));
  EXPECT_EQ(input["buffers"]["slopes"]["sha256"], digest);
  EXPECT_EQ(input["buffers"]["slopes"]["dtype"], "float32");
  EXPECT_FALSE(input["buffers"]["slopes"].contains("data_base64"));
  EXPECT_EQ(client_->Command({"GET", "cubridge:tensor:" + digest})->str, bytes);
  EXPECT_GT(client_->Command({"PTTL", "cubridge:tensor:" + digest})->integer, 0);
  const std::string payload = Field("cubridge:task:transfer-h1", "payload");
  EXPECT_LT(payload.size(), 4096u);
  auto typed = contract::PayloadFromStore(payload);
  ASSERT_TRUE(typed.ok()) << typed.status();
  EXPECT_EQ(contract::TensorDigests(*typed), std::vector<std::string>{digest});

  // Another coordinator (or this one restarted) advances the job and leases its task: the values
  // come from the store by digest, and rebuild the tensor the client sent.
  JobFlow again(client_.get(), options_, nullptr);
  ASSERT_TRUE(again.Advance(job->job_id()).ok());
  auto lease = again.tasks().LeaseNext("cpu", "w-test");
  ASSERT_TRUE(lease.ok() && lease->has_value());
  auto leased = contract::PayloadFromStore((*lease)->task.payload);
  ASSERT_TRUE(leased.ok()) << leased.status();
  auto kept = again.tensors().Get(digest);
  ASSERT_TRUE(kept.ok() && kept->has_value());
  const std::string sent = **kept;
  const contract::TensorLookup came = [&](const std::string& d) { return d == digest ? &sent : nullptr; };
  ASSERT_TRUE(contract::CheckTensors(*leased, came).ok());
  auto rebuilt = contract::SpecInputFromProto(*contract::SpecOf(*leased), came);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  auto sources = rebuilt->BufferSources();
  ASSERT_TRUE(sources.ok()) << sources.status();
  ASSERT_TRUE(sources->at("slopes").value.has_value());
  EXPECT_EQ(sources->at("slopes").value->data, bytes);
  EXPECT_EQ(sources->at("slopes").value->shape, std::vector<int64_t>{static_cast<int64_t>(many.size())});

  // Bytes that did not come, or came damaged, are not used.
  const contract::TensorLookup none = [](const std::string&) { return nullptr; };
  const absl::Status gone = contract::CheckTensors(*leased, none);
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(gone.message()), AllOf(HasSubstr("buffer `slopes`"), HasSubstr("submit the job again")));
  EXPECT_EQ(contract::SpecInputFromProto(*contract::SpecOf(*leased), none).status().code(),
            absl::StatusCode::kNotFound);
  const std::string damaged = bytes.substr(1);
  EXPECT_EQ(contract::CheckTensors(*leased, [&](const std::string&) { return &damaged; }).code(),
            absl::StatusCode::kDataLoss);

  // A second job with the same values shares the stored copy.
  auto second = flow.Submit(request, {"h1", "canonical"}, {"sm_80"});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(client_->Command({"KEYS", "cubridge:tensor:*"})->elements.size(), 1u);
}

TEST_F(TensorValueFlow, ATaskRevivedByAnotherJobRunsWithThatJobsInputs) {
  store::TaskQueue q(client_.get(), std::chrono::seconds(10), 3);
  ASSERT_TRUE(q.EnqueueOnce("transfer-x", {"j1", "transfer", R"({"spec": "first"})", "cpu"}).ok());
  auto lease = q.LeaseNext("cpu", "w");
  ASSERT_TRUE(lease.ok() && lease->has_value());
  ASSERT_EQ(*q.Fail("transfer-x", (*lease)->fencing_token, {.error = "bad values", .retryable = false}),
            "dead");
  ASSERT_TRUE(*q.Revive("transfer-x", R"({"spec": "second"})"));
  EXPECT_EQ(Field("cubridge:task:transfer-x", "payload"), R"({"spec": "second"})");
  auto again = q.LeaseNext("cpu", "w");
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->task.payload, R"({"spec": "second"})");
}

TEST(TensorValueContract, InputsStoredBeforeValuesStillLoad) {
  json stored = json::parse(
      R"({"file_name": "d.py", "source": "x", "params": [], "buffers": {"doc": "lengths:2,2"},
          "seed": 3})");
  stored["config"] = pipeline::ConfigJson(cuir::AttentionConfig{});
  auto old = contract::SpecInput::FromJson(stored);
  ASSERT_TRUE(old.ok()) << old.status();
  auto sources = old->BufferSources();
  ASSERT_TRUE(sources.ok());
  EXPECT_EQ(sources->at("doc").spec, "lengths:2,2");
  EXPECT_TRUE(old->tensors.empty());
}

}  // namespace
}  // namespace cubridge::core
