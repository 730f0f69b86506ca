// Every example spec compiles, declares the expected params / buffers, and its translation
// computes the variant's definition (docs: /work/shared/design/VARIANTS.md), written here by hand
// in C++ with the examples' default parameter values.
#include <cmath>
#include <functional>
#include <random>

#include "spec_test_util.h"

namespace cubridge::spec {
namespace {

using testing::ExampleSpecPath;

struct Point {
  int64_t b, h, q, kv;
  double score;
  const std::vector<int64_t>* doc;
};

struct Example {
  std::string file;
  std::vector<std::string> params;
  std::vector<std::string> buffers;
  std::function<bool(const Point&)> mask;      // null: no mask_mod
  std::function<double(const Point&)> score;   // null: no score_mod
};

double Alibi(const Point& p, int heads) {
  return p.score + (p.kv - p.q) * std::exp2(-8.0 * (p.h + 1) / heads);
}

std::vector<Example> Examples() {
  auto doc = [](const Point& p, int64_t i) { return (*p.doc)[i]; };
  return {
      {"full.py", {}, {}, nullptr, [](const Point& p) { return p.score; }},
      {"causal.py", {}, {}, [](const Point& p) { return p.q >= p.kv; }, nullptr},
      {"sliding_window.py", {"window"}, {},
       [](const Point& p) { return p.q >= p.kv && p.q - p.kv <= 256; }, nullptr},
      {"global_sliding_window.py", {"window", "global_tokens"}, {},
       [](const Point& p) { return p.q >= p.kv && (p.q - p.kv <= 256 || p.kv < 64); }, nullptr},
      {"prefix_lm.py", {"prefix"}, {}, [](const Point& p) { return p.kv < 1024 || p.q >= p.kv; },
       nullptr},
      {"block_causal.py", {"block"}, {},
       [](const Point& p) { return p.q / 128 >= p.kv / 128; }, nullptr},
      {"causal_document.py", {}, {"doc"},
       [=](const Point& p) { return p.q >= p.kv && doc(p, p.q) == doc(p, p.kv); }, nullptr},
      {"share_question.py", {}, {"doc"},
       [=](const Point& p) {
         return (doc(p, p.kv) == 0 && doc(p, p.q) != 0) ||
                (p.q >= p.kv && doc(p, p.q) == doc(p, p.kv));
       },
       nullptr},
      {"relative_position.py", {"scale"}, {}, nullptr,
       [](const Point& p) { return p.score + (p.q - p.kv) * 0.01; }},
      {"alibi.py", {"heads"}, {}, nullptr, [](const Point& p) { return Alibi(p, 32); }},
      {"softcap.py", {"cap"}, {}, nullptr,
       [](const Point& p) { return 20.0 * std::tanh(p.score / 20.0); }},
      {"alibi_window_softcap.py", {"window", "heads", "cap"}, {},
       [](const Point& p) { return p.q >= p.kv && p.q - p.kv <= 256; },
       [](const Point& p) { return 20.0 * std::tanh(Alibi(p, 32) / 20.0); }},
  };
}

// Documents of lengths 1..40 over 2048 tokens, so that boundaries are everywhere.
std::vector<int64_t> Documents(std::mt19937_64& rng, int64_t n) {
  std::vector<int64_t> doc(n);
  int64_t id = 0, left = 1;
  for (int64_t i = 0; i < n; ++i) {
    if (--left == 0) {
      ++id;
      left = 1 + static_cast<int64_t>(rng() % 40);
    }
    doc[i] = id - 1;
  }
  return doc;
}

class ExampleSpecTest : public ::testing::TestWithParam<Example> {};

TEST_P(ExampleSpecTest, CompilesWithDeclaredParamsAndBuffers) {
  const Example& ex = GetParam();
  auto spec = LoadSpecFile(ExampleSpecPath(ex.file));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->mask != nullptr, ex.mask != nullptr);
  EXPECT_EQ(spec->score != nullptr, ex.score != nullptr);
  std::vector<std::string> params, buffers;
  for (const SpecParam& p : spec->params) params.push_back(p.name);
  for (const SpecBuffer& b : spec->buffers) buffers.push_back(b.name);
  EXPECT_EQ(params, ex.params);
  EXPECT_EQ(buffers, ex.buffers);
  for (const SpecBuffer& b : spec->buffers) {
    EXPECT_EQ(b.rank, 1) << b.name;
    const auto extents = BufferExtents(*spec, b);
    ASSERT_EQ(extents.size(), 1u);
    EXPECT_EQ(cuir::PrintExpr(extents[0]), "max(seqlen_q, seqlen_kv)") << b.name;
  }
}

TEST_P(ExampleSpecTest, TranslationComputesTheVariant) {
  const Example& ex = GetParam();
  auto spec = LoadSpecFile(ExampleSpecPath(ex.file));
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::mt19937_64 rng(7);
  const std::vector<int64_t> doc = Documents(rng, 2048);
  std::normal_distribution<double> normal(0.0, 30.0);
  for (int i = 0; i < 2000; ++i) {
    // Half the points near the diagonal, where windows and causality change their answer.
    const int64_t q = static_cast<int64_t>(rng() % 2048);
    const int64_t kv = i % 2 ? static_cast<int64_t>(rng() % 2048)
                             : std::clamp<int64_t>(q - 300 + static_cast<int64_t>(rng() % 600),
                                                   0, 2047);
    const Point p{static_cast<int64_t>(rng() % 2), static_cast<int64_t>(rng() % 32), q, kv,
                  normal(rng), &doc};
    cuir::ScalarEnv env = testing::PointEnv(*spec, p.b, p.h, p.q, p.kv, p.score);
    for (const SpecBuffer& b : spec->buffers) env.buffers[b.name] = cuir::BufferData::Ints(doc);
    if (ex.mask) {
      auto got = cuir::EvalBool(spec->mask, env);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(*got, ex.mask(p)) << ex.file << " at q=" << q << " kv=" << kv;
    }
    if (ex.score) {
      auto got = cuir::EvalScalar(spec->score, env);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_TRUE(std::holds_alternative<double>(*got)) << cuir::ValueToString(*got);
      ASSERT_NEAR(std::get<double>(*got), ex.score(p), 1e-9 * (1 + std::fabs(ex.score(p))))
          << ex.file << " at h=" << p.h << " q=" << q << " kv=" << kv;
    }
  }
}

TEST_P(ExampleSpecTest, StartsWithADescription) {
  std::ifstream in(ExampleSpecPath(GetParam().file));
  std::string first;
  std::getline(in, first);
  EXPECT_TRUE(first.rfind("\"\"\"", 0) == 0 || first.rfind("#", 0) == 0) << first;
  EXPECT_GT(first.size(), 20u) << "the first line should say what the variant is";
}

INSTANTIATE_TEST_SUITE_P(All, ExampleSpecTest, ::testing::ValuesIn(Examples()),
                         [](const auto& info) {
                           std::string name = info.param.file;
                           return name.substr(0, name.size() - 3);
                         });

TEST(ExampleSpecs, EveryFileIsCovered) {
  std::set<std::string> listed;
  for (const Example& ex : Examples()) listed.insert(ex.file);
  for (const auto& entry : std::filesystem::directory_iterator(ExampleSpecPath(""))) {
    if (entry.path().extension() == ".py") {
      EXPECT_TRUE(listed.count(entry.path().filename().string())) << entry.path();
    }
  }
}

}  // namespace
}  // namespace cubridge::spec
