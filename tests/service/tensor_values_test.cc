// Buffers given by value, end to end on real processes: jobs whose specs capture a float [H]
// tensor and a bool [S, S] mask verify with the values sent; values that make verification fail
// show that the workers used them, also after a coordinator restart; bad values are refused over
// gRPC with their codes; and `cubridge-cli submit --buffer NAME=tensor:PATH` reads a torch.save
// file without LibTorch and sends its values, refused like `adapt --local` when they do not fit.
#include <signal.h>

#include <cstring>
#include <regex>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "cuir/spec/digest.h"
#include "tests/sdk/test_util.h"
#include "tests/service/cluster.h"

namespace cubridge::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

// The proto's dtype codes (common.proto: the launcher ABI's + 1).
v1::TensorValue Value(v1::TensorDType dtype, const std::vector<int64_t>& shape, std::string data) {
  v1::TensorValue t;
  t.set_dtype(dtype);
  for (int64_t d : shape) t.add_shape(d);
  t.set_data(std::move(data));
  return t;
}

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  std::string out(v.size() * sizeof(T), '\0');
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

class ValuesCluster : public Cluster {
 protected:
  static v1::SubmitJobRequest Generality(const std::string& name) {
    v1::SubmitJobRequest r = Request("generality/" + name);
    r.mutable_spec()->set_file_name(name + ".py");
    return r;
  }
  // score + table[idx[h] // 2]: `table`'s reach depends on `idx`'s values, which only the
  // verifier sees. (Halved, so that the random values verification uses at other shapes, ints in
  // [0, tokens] for a table of `tokens`, stay in range.)
  static v1::SubmitJobRequest Indexed(const std::vector<int64_t>& idx) {
    v1::SubmitJobRequest r = Request("causal");
    r.mutable_spec()->set_file_name("indexed.py");
    r.mutable_spec()->set_source(
        "def score_mod(score, b, h, q_idx, kv_idx, table, idx):\n"
        "    return score + table[idx[h] // 2]\n");
    auto& t = *r.mutable_spec()->mutable_tensors();
    t["table"] = Value(v1::TENSOR_DTYPE_FLOAT32, {4}, Bytes(std::vector<float>{0.5f, -1.0f, 2.0f, 0.25f}));
    t["idx"] = Value(v1::TENSOR_DTYPE_INT64, {static_cast<int64_t>(idx.size())}, Bytes(idx));
    return r;
  }
};

class TensorValues : public ValuesCluster {};

TEST_F(TensorValues, FloatAndBoolValuesVerifyAndAreStoredOnceBesideTheJob) {
  StartCoordinator();
  StartWorker();
  auto slopes = Generality("alibi_learned_slopes");  // score + slopes[h] * (kv_idx - q_idx)
  (*slopes.mutable_spec()->mutable_tensors())["slopes"] =
      Value(v1::TENSOR_DTYPE_FLOAT32, {4}, Bytes(std::vector<float>{0.5f, 0.25f, 0.125f, 0.0625f}));
  auto keep = Generality("unstructured_keep_mask");  // keep[q_idx, kv_idx] & causal
  std::string mask(200 * 200, '\0');
  for (int i = 0; i < 200; ++i) {
    for (int j = 0; j < 200; ++j) mask[i * 200 + j] = static_cast<char>((i * 7 + j * 3) % 5 != 0);
  }
  (*keep.mutable_spec()->mutable_tensors())["keep"] = Value(v1::TENSOR_DTYPE_BOOL, {200, 200}, mask);

  auto a = Submit(slopes);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = Submit(keep);
  ASSERT_TRUE(b.ok()) << b.status();
  for (const auto& job : {*a, *b}) {
    const v1::Job done = WaitEnded(job.job_id(), 300s);
    EXPECT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << Describe(done) << Logs();
  }
  // The mask is stored once, under its digest; the job's record keeps its shape, not its bytes.
  auto redis = Redis();
  const std::string digest = spec::Sha256Hex(mask);
  EXPECT_EQ(redis->Command({"GET", "cubridge:tensor:" + digest})->str, mask);
  const std::string record = redis->Command({"HGET", "cubridge:job:" + b->job_id(), "request"})->str;
  EXPECT_LT(record.size(), 4096u);
  const auto input = nlohmann::json::parse(
      redis->Command({"HGET", "cubridge:job:" + b->job_id(), "input"})->str);
  EXPECT_EQ(input["buffers"]["keep"]["sha256"], digest);
  EXPECT_EQ(input["buffers"]["keep"]["shape"], nlohmann::json({200, 200}));
}

// An index the values take out of range fails verification, which random values would not: the
// worker verified with what was sent. Submitted before a coordinator restart, the values are
// still there after it. The same variant with values in range then revives the work that died
// and succeeds: a revived task runs with the inputs of the job that revived it.
TEST_F(TensorValues, TheWorkersVerifyWithTheValuesSentAlsoAfterACoordinatorRestart) {
  StartCoordinator();
  auto out_of_range = Submit(Indexed({0, 1, 2, 9}));
  ASSERT_TRUE(out_of_range.ok()) << out_of_range.status();
  coordinator_->Signal(SIGKILL);
  coordinator_->Wait(10s);
  StartCoordinator();
  StartWorker();
  const v1::Job bad = WaitEnded(out_of_range->job_id(), 300s);
  ASSERT_EQ(bad.state(), v1::JOB_STATE_FAILED) << Describe(bad) << Logs();
  EXPECT_THAT(bad.error(), HasSubstr("index 4 is out of"));

  auto in_range = Submit(Indexed({0, 1, 6, 7}));
  ASSERT_TRUE(in_range.ok()) << in_range.status();
  EXPECT_EQ(in_range->spec_hash(), out_of_range->spec_hash());  // one variant, other values
  const v1::Job good = WaitEnded(in_range->job_id(), 300s);
  EXPECT_EQ(good.state(), v1::JOB_STATE_SUCCEEDED) << Describe(good) << Logs();
}

// The same math with its tensors named and declared otherwise has the same hash: the second job
// is a cache hit, and fetched through that job, the kernel's report names the tensors (in the
// kernel's argument order) as its spec does; fetched by hash alone, as the first spec did.
TEST_F(TensorValues, AKernelFetchedThroughAJobNamesItsTensorsAsThatJobsSpec) {
  StartCoordinator();
  StartWorker();
  auto first = Submit(Indexed({0, 1, 2, 3}));
  ASSERT_TRUE(first.ok()) << first.status();
  const v1::Job done = WaitEnded(first->job_id(), 300s);
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << Describe(done) << Logs();

  v1::SubmitJobRequest renamed = Indexed({0, 1, 2, 3});
  renamed.mutable_spec()->set_source(
      "def score_mod(score, b, h, q_idx, kv_idx, ix, tab):\n"
      "    return score + tab[ix[h] // 2]\n");
  auto& t = *renamed.mutable_spec()->mutable_tensors();
  t["tab"] = t["table"];
  t["ix"] = t["idx"];
  t.erase("table");
  t.erase("idx");
  auto second = Submit(renamed);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->cache_hit());
  ASSERT_EQ(second->spec_hash(), first->spec_hash());

  auto names = [&](const std::string& job_id) {
    v1::Kernel kernel;
    const grpc::Status s = GetKernel(first->spec_hash(), "sm_80", &kernel, job_id);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::vector<std::string> out;
    const auto report = nlohmann::json::parse(kernel.report_json(), nullptr, false);
    if (report.is_discarded()) return out;
    for (const auto& b : report["lowering"]["buffers"]) out.push_back(b["name"]);
    return out;
  };
  EXPECT_EQ(names(""), (std::vector<std::string>{"table", "idx"}));
  EXPECT_EQ(names(first->job_id()), (std::vector<std::string>{"table", "idx"}));
  EXPECT_EQ(names(second->job_id()), (std::vector<std::string>{"tab", "ix"}));
}

class TensorValueRefusals : public ValuesCluster {
 protected:
  grpc::Status SubmitStatus(const v1::SubmitJobRequest& r) {
    v1::Job job;
    auto ctx = Context(kClientToken);
    return ClientStub()->SubmitJob(ctx.get(), r, &job);
  }
};

TEST_F(TensorValueRefusals, BadValuesGetTheirCodesAndBigOnesPassGrpc) {
  StartCoordinator({"--max-tensor-mb", "8"});
  auto slopes = [](v1::TensorValue t) {
    auto r = Generality("alibi_learned_slopes");
    (*r.mutable_spec()->mutable_tensors())["slopes"] = std::move(t);
    return r;
  };
  // Too few heads: what the spec check says, before any job exists.
  const grpc::Status small =
      SubmitStatus(slopes(Value(v1::TENSOR_DTYPE_FLOAT32, {2}, Bytes(std::vector<float>{1, 2}))));
  EXPECT_EQ(small.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(small.error_message(),
              AllOf(HasSubstr("buffer `slopes` from `float32[2] value` has shape [2]"),
                    HasSubstr("give at least [4]")));
  const grpc::Status bytes =
      SubmitStatus(slopes(Value(v1::TENSOR_DTYPE_FLOAT32, {4}, Bytes(std::vector<float>{1, 2}))));
  EXPECT_EQ(bytes.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bytes.error_message(), HasSubstr("8 bytes of data for float32[4]"));
  const grpc::Status dtype = SubmitStatus(slopes(Value(v1::TENSOR_DTYPE_UNSPECIFIED, {4}, "")));
  EXPECT_EQ(dtype.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Over the limit the coordinator was started with, and over gRPC's message limit (that plus
  // 4 MiB).
  std::vector<float> big(10 << 18, 0.5f);  // 10 MiB
  const grpc::Status over =
      SubmitStatus(slopes(Value(v1::TENSOR_DTYPE_FLOAT32, {static_cast<int64_t>(big.size())}, Bytes(big))));
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(over.error_message(), HasSubstr("over this service's limit of 8388608 bytes"));
  big.resize(5 << 20);  // 20 MiB
  EXPECT_EQ(SubmitStatus(slopes(Value(v1::TENSOR_DTYPE_FLOAT32, {static_cast<int64_t>(big.size())}, Bytes(big))))
                .error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  // 6 MiB of values: more than gRPC's default 4 MiB, within the limit, accepted.
  big.resize(6 << 18);
  auto accepted = Submit(slopes(Value(v1::TENSOR_DTYPE_FLOAT32, {static_cast<int64_t>(big.size())}, Bytes(big))));
  EXPECT_TRUE(accepted.ok()) << accepted.status();
}

class TensorFileCli : public ValuesCluster {
 protected:
  RunResult Run(const std::string& args) {
    return RunCommand(absl::StrCat("CUBRIDGE_ADDRESS=", Address(), " CUBRIDGE_TOKEN=", kClientToken,
                                   " ", CUBRIDGE_CLI, " ", args));
  }
  static std::string File(const std::string& name) {
    return absl::StrCat(CUBRIDGE_SOURCE_ROOT, "/tests/spec/data/torch_save/good/", name, ".pt");
  }
  static constexpr char kSpec[] = CUBRIDGE_SOURCE_ROOT "/examples/specs/generality/alibi_learned_slopes.py";
  static constexpr char kLocalConfig[] =
      "--arch sm_80 --gpu off --heads-q 4 --heads-kv 2 --head-dim 64 --seqlen 200";
  static constexpr char kConfig[] =
      "--arch sm_80 --verification ir --heads-q 4 --heads-kv 2 --head-dim 64 --seqlen 200";
};

// The message from its first "has shape": what it says whichever source the tensor came from.
std::string FromShape(const std::string& m) {
  const size_t at = m.find("has shape");
  return at == std::string::npos ? m : m.substr(at, m.find('\n', at) - at);
}

TEST_F(TensorFileCli, SubmitSendsATorchSaveFileAsItsValuesAndIsRefusedLikeAdaptLocal) {
  StartCoordinator();
  StartWorker();
  const RunResult submitted = Run(absl::StrCat("submit ", kSpec, " ", kConfig,
                                               " --buffer slopes=tensor:", File("slopes_float32_4"),
                                               " --watch"));
  ASSERT_EQ(submitted.exit_code, 0) << submitted.output << Logs();
  EXPECT_THAT(submitted.output, HasSubstr("succeeded"));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(submitted.output, m, std::regex("(j-[0-9a-f]{16})")));
  // The values the file holds, float32 [0.5, 0.25, 0.125, 0.0625], are the job's.
  const auto input = nlohmann::json::parse(
      Redis()->Command({"HGET", absl::StrCat("cubridge:job:", m[1].str()), "input"})->str);
  EXPECT_EQ(input["buffers"]["slopes"]["sha256"],
            spec::Sha256Hex(Bytes(std::vector<float>{0.5f, 0.25f, 0.125f, 0.0625f})));

  // Two slopes for four heads: refused at submit, with what `adapt --local` says of the file.
  const RunResult refused = Run(absl::StrCat("submit ", kSpec, " ", kConfig,
                                             " --buffer slopes=tensor:", File("slopes_float32_2")));
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_THAT(refused.output, AllOf(HasSubstr("from `float32[2] value` has shape [2]"),
                                    HasSubstr("give at least [4]")));
  const RunResult local = Run(absl::StrCat("adapt ", kSpec, " --local ", kLocalConfig, " --out ", dir_,
                                           "/local --buffer slopes=tensor:", File("slopes_float32_2")));
  EXPECT_NE(local.exit_code, 0) << local.output;
  EXPECT_THAT(local.output, HasSubstr("slopes_float32_2.pt` has shape [2]"));
  EXPECT_EQ(FromShape(refused.output), FromShape(local.output));

  // A file that is not a tensor: refused by the CLI, saying how to save one.
  const std::string junk = dir_ + "/junk.pt";
  WriteFile(junk, "not a zip");
  const RunResult bad = Run(absl::StrCat("submit ", kSpec, " ", kConfig, " --buffer slopes=tensor:", junk));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output, AllOf(HasSubstr(junk), HasSubstr("save one tensor with torch.save(t, path)")));
}

}  // namespace
}  // namespace cubridge::testing
