// MakeInputs: random q/k/v and the buffer sources (random, lengths, values, file).
#include "cuir/spec/tensors.h"

#include "spec_test_util.h"

namespace cubridge::spec {
namespace {

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
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
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
  EXPECT_EQ(in->buffers.at("doc").scalar_type(), torch::kInt64);
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
              HasSubstr("buffer `doc` from `lengths:2,3` has 5 values but needs 9 (indexed by "
                        "q_idx and kv_idx: seqlen_q = 4, seqlen_kv = 9)"));
}

TEST(MakeInputs, BadSourcesAreRejected) {
  for (const char* source : {"lengths:2,0,4", "values:1,b", "sorted", "random:3"}) {
    auto doc = DocFrom(source);
    EXPECT_EQ(doc.status().code(), absl::StatusCode::kInvalidArgument) << source;
  }
  EXPECT_THAT(std::string(DocFrom("sorted").status().message()),
              HasSubstr("use random, lengths:A,B,.."));
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

TEST(RequiredBufferLength, FollowsTheIndexUses) {
  const cuir::AttentionConfig c = Config(100, 300);
  EXPECT_EQ(RequiredBufferLength(SpecBuffer{"a", true, false, {}}, c), 100);
  EXPECT_EQ(RequiredBufferLength(SpecBuffer{"a", false, true, {}}, c), 300);
  EXPECT_EQ(RequiredBufferLength(SpecBuffer{"a", true, true, {}}, Config(500, 300)), 500);
  EXPECT_EQ(RequiredBufferLength(SpecBuffer{"a", false, false, {}}, c), 300);
}

}  // namespace
}  // namespace cubridge::spec
