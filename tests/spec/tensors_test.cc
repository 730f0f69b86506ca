// MakeInputs: random q/k/v and the buffer sources (random, lengths, values, file, tensor files,
// values carried by the service).
#include "cuir/spec/tensors.h"

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "cuir/spec/buffer_json.h"
#include "spec_test_util.h"

namespace cubridge::spec {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

Spec DocSpec() {
  auto spec = LoadSpecFile(testing::ExampleSpecPath("causal_document.py"));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *std::move(spec) : Spec{};
}

cuir::AttentionConfig Config(int64_t sq, int64_t skv) {
  cuir::AttentionConfig c;
  c.batch = 2;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim = 64;
  c.seqlen_q = sq;
  c.seqlen_kv = skv;
  c.dtype = cuir::DType::kFP16;
  return c;
}

std::vector<int64_t> Values(const torch::Tensor& t) {
  const torch::Tensor v = t.to(torch::kInt64).contiguous();
  return std::vector<int64_t>(v.data_ptr<int64_t>(), v.data_ptr<int64_t>() + v.numel());
}

absl::StatusOr<torch::Tensor> DocFrom(const std::string& source, int64_t sq = 6, int64_t skv = 6) {
  auto in = MakeInputs(DocSpec(), Config(sq, skv), {{"doc", BufferSource{source}}}, 1);
  if (!in.ok()) return in.status();
  return in->buffers.at("doc");
}

TEST(MakeInputs, ShapesAndDtypesFollowTheConfig) {
  auto in = MakeInputs(DocSpec(), Config(33, 47), {}, 5);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->q.sizes().vec(), (std::vector<int64_t>{2, 4, 33, 64}));
  EXPECT_EQ(in->k.sizes().vec(), (std::vector<int64_t>{2, 2, 47, 64}));
  EXPECT_EQ(in->v.sizes().vec(), (std::vector<int64_t>{2, 2, 47, 64}));
  EXPECT_EQ(in->q.scalar_type(), torch::kHalf);
  // doc is indexed by both q_idx and kv_idx, so it covers the longer sequence.
  ASSERT_EQ(in->buffers.count("doc"), 1u);
  EXPECT_EQ(in->buffers.at("doc").numel(), 47);
  EXPECT_EQ(in->buffers.at("doc").scalar_type(), torch::kInt32);
  // Normal samples: mean about 0, standard deviation about 1.
  const auto q = in->q.to(torch::kFloat32);
  EXPECT_NEAR(q.mean().item<double>(), 0.0, 0.05);
  EXPECT_NEAR(q.std().item<double>(), 1.0, 0.05);
}

TEST(MakeInputs, SeedDeterminesTheValues) {
  auto a = MakeInputs(DocSpec(), Config(64, 64), {}, 42);
  auto b = MakeInputs(DocSpec(), Config(64, 64), {}, 42);
  auto c = MakeInputs(DocSpec(), Config(64, 64), {}, 43);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_TRUE(torch::equal(a->q, b->q));
  EXPECT_TRUE(torch::equal(a->v, b->v));
  EXPECT_TRUE(torch::equal(a->buffers.at("doc"), b->buffers.at("doc")));
  EXPECT_FALSE(torch::equal(a->q, c->q));
  EXPECT_FALSE(torch::equal(a->k, a->v));
}

TEST(MakeInputs, RandomDocumentsAreSortedConsecutiveIdsFromZero) {
  std::set<int64_t> doc_counts;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    auto in = MakeInputs(DocSpec(), Config(300, 300), {}, seed);
    ASSERT_TRUE(in.ok()) << in.status();
    const std::vector<int64_t> doc = Values(in->buffers.at("doc"));
    ASSERT_EQ(doc.front(), 0);
    for (size_t i = 1; i < doc.size(); ++i) {
      ASSERT_TRUE(doc[i] == doc[i - 1] || doc[i] == doc[i - 1] + 1) << "at " << i;
    }
    doc_counts.insert(doc.back() + 1);
  }
  // "A few documents": more than one kind of layout over 20 seeds, never more than five.
  EXPECT_GT(doc_counts.size(), 1u);
  EXPECT_LE(*doc_counts.rbegin(), 5);
}

TEST(MakeInputs, LengthsSourceGivesDocumentIds) {
  auto doc = DocFrom("lengths:2,3,1");
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(Values(*doc), (std::vector<int64_t>{0, 0, 1, 1, 1, 2}));
}

TEST(MakeInputs, ValuesSourceIsTakenAsIs) {
  auto doc = DocFrom("values:5,5,7,7,7,9");
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(Values(*doc), (std::vector<int64_t>{5, 5, 7, 7, 7, 9}));
}

TEST(MakeInputs, FileSourceReadsWhitespaceSeparatedIntegers) {
  const std::string path = testing::WriteTempFile("doc.txt", "0 0 0\n1\t1\n2\n");
  auto doc = DocFrom("file:" + path);
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(Values(*doc), (std::vector<int64_t>{0, 0, 0, 1, 1, 2}));
}

TEST(MakeInputs, FileSourceErrorsNameTheFile) {
  const std::string bad = testing::WriteTempFile("bad_doc.txt", "0 0 x 1 1 1\n");
  auto doc = DocFrom("file:" + bad);
  ASSERT_FALSE(doc.ok());
  EXPECT_THAT(std::string(doc.status().message()), HasSubstr(bad + ": value #3 `x`"));
  auto missing = DocFrom("file:/nonexistent/doc.txt");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("/nonexistent/doc.txt"));
}

TEST(MakeInputs, WrongLengthSaysHaveAndNeed) {
  auto doc = DocFrom("lengths:2,3", 4, 9);
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(doc.status().message()),
              AllOf(HasSubstr("buffer `doc` from `lengths:2,3` has shape [5] but the spec's "
                              "indexing (`doc[q_idx]` at "),
                    HasSubstr("reaches size 9 along dimension 0 (max(seqlen_q, seqlen_kv) at "),
                    HasSubstr("give at least [9]")));
}

TEST(MakeInputs, BadSourcesAreRejected) {
  for (const char* source : {"lengths:2,0,4", "values:1,b", "sorted", "random:3"}) {
    auto doc = DocFrom(source);
    EXPECT_EQ(doc.status().code(), absl::StatusCode::kInvalidArgument) << source;
  }
  EXPECT_THAT(std::string(DocFrom("sorted").status().message()),
              HasSubstr("use random, random:DTYPE, random:DTYPE[D0,D1,..], lengths:A,B,.."));
}

TEST(MakeInputs, SourceForAnUnknownBufferIsRejected) {
  auto in = MakeInputs(DocSpec(), Config(8, 8), {{"docs", BufferSource{"random"}}}, 1);
  ASSERT_FALSE(in.ok());
  EXPECT_THAT(std::string(in.status().message()), HasSubstr("its buffers: doc"));
}

TEST(MakeInputs, InvalidConfigIsRejected) {
  cuir::AttentionConfig c = Config(8, 8);
  c.heads_kv = 3;
  EXPECT_EQ(MakeInputs(DocSpec(), c, {}, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RequiredBufferShape, EvaluatesTheExtentsAtTheConfig) {
  auto spec = LoadSpecSource(
      "def mask_mod(b, h, q_idx, kv_idx, a, bq, bk):\n"
      "    return (bq[q_idx] > 0) & (bk[kv_idx] > 0) & (a[q_idx] == a[kv_idx])\n",
      "uses.py");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const cuir::AttentionConfig c = Config(100, 300);
  EXPECT_EQ(RequiredBufferShape(*spec, spec->buffers[0], c), std::vector<int64_t>{300});
  EXPECT_EQ(RequiredBufferShape(*spec, spec->buffers[1], c), std::vector<int64_t>{100});
  EXPECT_EQ(RequiredBufferShape(*spec, spec->buffers[2], c), std::vector<int64_t>{300});
  EXPECT_EQ(RequiredBufferShape(*spec, spec->buffers[0], Config(500, 300)),
            std::vector<int64_t>{500});
}

// Captured tensors of any rank and dtype: shapes from what the indexing reaches, dtypes from the
// sources, tensor files from torch.save.
constexpr const char* kCaptured =
    "def score_mod(score, b, h, q_idx, kv_idx, slopes, table, bias, temp, ids):\n"
    "    return (score * temp + slopes[h] * (kv_idx - q_idx) + table[h, (q_idx - kv_idx) % 8]\n"
    "            + bias[b, h, q_idx, kv_idx] + ids[-1])\n";

TEST(CapturedTensors, RandomSourcesFollowTheReachAndTheDtype) {
  const std::map<std::string, BufferSource> sources = {
      {"slopes", {"random:float32"}}, {"table", {"random:float16"}},
      {"bias", {"random:bfloat16"}},  {"temp", {"random:float32"}},
      {"ids", {"random:int64[3]"}}};
  auto dtypes = BufferDTypesOf(sources);
  ASSERT_TRUE(dtypes.ok()) << dtypes.status();
  auto spec = LoadSpecSource(kCaptured, "captured.py", *dtypes);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto in = MakeInputs(*spec, Config(5, 7), sources, 3);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->buffers.at("slopes").sizes().vec(), (std::vector<int64_t>{4}));
  EXPECT_EQ(in->buffers.at("table").sizes().vec(), (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(in->buffers.at("table").scalar_type(), torch::kHalf);
  EXPECT_EQ(in->buffers.at("bias").sizes().vec(), (std::vector<int64_t>{2, 4, 5, 7}));
  EXPECT_EQ(in->buffers.at("bias").scalar_type(), torch::kBFloat16);
  EXPECT_EQ(in->buffers.at("temp").dim(), 0);
  EXPECT_EQ(in->buffers.at("ids").sizes().vec(), (std::vector<int64_t>{3}));
  EXPECT_EQ(in->buffers.at("ids").scalar_type(), torch::kInt64);
  // The same spec loaded for other dtypes is another variant.
  EXPECT_NE(SpecHash(*spec, Config(5, 7), "r"),
            SpecHash(*LoadSpecSource(kCaptured, "captured.py"), Config(5, 7), "r"));
}

// `table[h, kv_idx % 8]`, loaded for the dtype `sources` gives the table, which must be float32.
absl::StatusOr<Spec> TableSpec(const std::map<std::string, BufferSource>& sources) {
  auto dtypes = BufferDTypesOf(sources);
  if (!dtypes.ok()) return dtypes.status();
  EXPECT_EQ(dtypes->at("table"), cuir::TensorDType::kFloat32);
  return LoadSpecSource(
      "def score_mod(score, b, h, q_idx, kv_idx, table):\n    return score + table[h, kv_idx % 8]\n",
      "t.py", *dtypes);
}

TEST(CapturedTensors, TensorFilesGiveTheirDtypeAndShape) {
  const std::string path = ::testing::TempDir() + "/table.pt";
  {
    const torch::Tensor t = torch::arange(32, torch::kFloat32).reshape({4, 8});
    const std::vector<char> bytes = torch::pickle_save(t);
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  const std::map<std::string, BufferSource> sources = {{"table", {"tensor:" + path}}};
  auto spec = TableSpec(sources);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto in = MakeInputs(*spec, Config(5, 7), sources, 3);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_TRUE(torch::equal(in->buffers.at("table"), torch::arange(32, torch::kFloat32).reshape({4, 8})));
  // Too few heads for this config's 6: the message names the use and the least shape.
  cuir::AttentionConfig six = Config(5, 7);
  six.heads_q = six.heads_kv = 6;
  auto small = MakeInputs(*spec, six, sources, 3);
  ASSERT_FALSE(small.ok());
  EXPECT_THAT(std::string(small.status().message()),
              AllOf(HasSubstr("has shape [4, 8]"), HasSubstr("`table[h, kv_idx % 8]`"),
                    HasSubstr("reaches size 6 along dimension 0"), HasSubstr("give at least [6, 7]")));
  // A file that is no tensor, and a missing one.
  std::ofstream(::testing::TempDir() + "/junk.pt") << "not a zip";
  auto junk = BufferDTypesOf({{"table", {"tensor:" + ::testing::TempDir() + "/junk.pt"}}});
  EXPECT_EQ(junk.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(junk.status().message()), HasSubstr("junk.pt: not a zip archive, which torch.save writes; save one tensor with torch.save(t, path)"));
  EXPECT_EQ(BufferDTypesOf({{"table", {"tensor:/nonexistent.pt"}}}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(CapturedTensors, RankAndDtypeMismatchesAreRefused) {
  auto spec = LoadSpecSource(
      "def score_mod(score, b, h, q_idx, kv_idx, table):\n    return score + table[h, kv_idx % 8]\n",
      "t.py", {{"table", cuir::TensorDType::kFloat32}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto rank = MakeInputs(*spec, Config(5, 7), {{"table", {"random:float32[32]"}}}, 3);
  ASSERT_FALSE(rank.ok());
  EXPECT_THAT(std::string(rank.status().message()),
              HasSubstr("has shape [32] (rank 1) but the spec indexes it with 2 indices"));
  auto dtype = MakeInputs(*spec, Config(5, 7), {{"table", {"random:float16"}}}, 3);
  ASSERT_FALSE(dtype.ok());
  EXPECT_THAT(std::string(dtype.status().message()),
              HasSubstr("is Half but the spec was loaded for float32"));
  EXPECT_THAT(std::string(BufferDTypesOf({{"t", {"random:complex64"}}}).status().message()),
              HasSubstr("unknown dtype `complex64`"));
}

// The bytes of `t`, as the service's TensorValue carries them.
cuir::TensorValue ValueOf(const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  return {*TensorDTypeOf(c.scalar_type()), c.sizes().vec(),
          std::string(static_cast<const char*>(c.data_ptr()), c.nbytes())};
}

// The message from its first "has shape": what it says whichever source the tensor came from.
std::string FromShape(const absl::Status& s) {
  const std::string m(s.message());
  return m.find("has shape") == std::string::npos ? m : m.substr(m.find("has shape"));
}

TEST(CapturedTensors, ValuesGiveTheirDtypeShapeAndElementsLikeTensorFiles) {
  const torch::Tensor table = torch::arange(32, torch::kFloat32).reshape({4, 8}) / 3;
  const std::map<std::string, BufferSource> values = {{"table", BufferSource::Of(ValueOf(table))}};
  auto spec = TableSpec(values);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto in = MakeInputs(*spec, Config(5, 7), values, 3);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_TRUE(torch::equal(in->buffers.at("table"), table));
  EXPECT_TRUE(CheckBufferValueShapes(*spec, Config(5, 7), values).ok());

  // Too few heads for 6: the same refusal as for the same tensor in a file, from MakeInputs and
  // from the shape alone (the coordinator's check, which has no bytes).
  cuir::AttentionConfig six = Config(5, 7);
  six.heads_q = six.heads_kv = 6;
  const std::string path = ::testing::TempDir() + "/table_values.pt";
  {
    const std::vector<char> bytes = torch::pickle_save(table);
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  const absl::Status by_file = MakeInputs(*spec, six, {{"table", {"tensor:" + path}}}, 3).status();
  const absl::Status by_value = MakeInputs(*spec, six, values, 3).status();
  std::map<std::string, BufferSource> no_bytes = values;
  no_bytes["table"].value->data.clear();
  const absl::Status by_shape = CheckBufferValueShapes(*spec, six, no_bytes);
  ASSERT_FALSE(by_file.ok());
  EXPECT_THAT(std::string(by_value.message()),
              AllOf(HasSubstr("buffer `table` from `float32[4, 8] value` has shape [4, 8]"),
                    HasSubstr("give at least [6, 7]")));
  EXPECT_EQ(FromShape(by_value), FromShape(by_file));
  EXPECT_EQ(std::string(by_shape.message()), std::string(by_value.message()));
  // The wrong rank, and a name the spec does not have.
  const std::map<std::string, BufferSource> flat = {{"table", BufferSource::Of(ValueOf(table.flatten()))}};
  EXPECT_THAT(std::string(CheckBufferValueShapes(*spec, Config(5, 7), flat).message()),
              HasSubstr("has shape [32] (rank 1) but the spec indexes it with 2 indices"));
  EXPECT_THAT(std::string(CheckBufferValueShapes(*spec, Config(5, 7), {{"tabel", values.at("table")}})
                              .message()),
              HasSubstr("no such buffer; its buffers: table"));
  // Bytes that do not make the shape are refused, not read past.
  std::map<std::string, BufferSource> short_bytes = values;
  short_bytes["table"].value->data.resize(100);
  auto cut = MakeInputs(*spec, Config(5, 7), short_bytes, 3);
  ASSERT_FALSE(cut.ok());
  EXPECT_THAT(std::string(cut.status().message()),
              HasSubstr("100 bytes of data for float32[4, 8], which takes 32 x 4 = 128 bytes"));
}

TEST(CapturedTensors, EveryDtypeAndRankTravelsAsJsonAndBack) {
  std::map<std::string, BufferSource> sources = {{"doc", {"lengths:3,3"}}};
  for (int d = 0; d < cuir::kTensorDTypeCount; ++d) {
    const auto dtype = static_cast<cuir::TensorDType>(d);
    const std::vector<int64_t> shape(static_cast<size_t>(d % 5), 2);  // ranks 0 to 4
    const torch::Tensor t = torch::randint(0, 2, shape, torch::kInt64).to(TorchDType(dtype));
    sources[absl::StrCat("t", d)] = BufferSource::Of(ValueOf(t));
  }
  const nlohmann::json j = nlohmann::json::parse(BufferSourcesJson(sources).dump());
  EXPECT_EQ(j["doc"], "lengths:3,3");
  auto back = BufferSourcesFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), sources.size());
  for (const auto& [name, src] : sources) {
    const BufferSource& b = back->at(name);
    EXPECT_EQ(b.spec, src.spec) << name;
    ASSERT_EQ(b.value.has_value(), src.value.has_value()) << name;
    if (!src.value) continue;
    EXPECT_EQ(b.value->dtype, src.value->dtype) << name;
    EXPECT_EQ(b.value->shape, src.value->shape) << name;
    EXPECT_EQ(b.value->data, src.value->data) << name;
  }
  // A value whose bytes do not fit its shape, or that has none, does not come back.
  nlohmann::json bad = j;
  bad["t3"]["data_base64"] = "AAAA";
  EXPECT_THAT(std::string(BufferSourcesFromJson(bad).status().message()),
              HasSubstr("buffer `t3`: 3 bytes of data for float32[2, 2, 2]"));
  bad = j;
  bad["t2"].erase("data_base64");
  EXPECT_THAT(std::string(BufferSourcesFromJson(bad).status().message()), HasSubstr("no data_base64"));
}

}  // namespace
}  // namespace cubridge::spec
