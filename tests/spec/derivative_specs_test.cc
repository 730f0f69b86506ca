// The score_mod derivatives of every example and generality spec (cuir/ir/derivative.h, issue
// 29): d score_mod / d score and d score_mod / d buf[i] for each floating captured tensor,
// evaluated on the translated CuIR at random points against central differences of the same
// expression.
#include <cmath>
#include <random>

#include "cuir/files/files.h"
#include "cuir/ir/derivative.h"
#include "spec_test_util.h"
#include "tests/generality_suite.h"

namespace cubridge::spec {
namespace {

cuir::BufferData ToBufferData(const at::Tensor& t) {
  cuir::BufferData d;
  d.sizes = t.sizes().vec();
  const at::Tensor flat = t.contiguous().flatten();
  if (t.is_floating_point()) {
    d.element = Type::kFloat;
    const at::Tensor f = flat.to(at::kDouble);
    for (int64_t i = 0; i < f.numel(); ++i) d.values.emplace_back(f.data_ptr<double>()[i]);
  } else if (t.scalar_type() == at::kBool) {
    d.element = Type::kBool;
    for (int64_t i = 0; i < flat.numel(); ++i) d.values.emplace_back(flat.data_ptr<bool>()[i]);
  } else {
    d.element = Type::kInt;
    const at::Tensor n = flat.to(at::kLong);
    for (int64_t i = 0; i < n.numel(); ++i) d.values.emplace_back(n.data_ptr<int64_t>()[i]);
  }
  return d;
}

cuir::TypeEnv SpecTypes(const Spec& spec) {
  cuir::TypeEnv env;
  for (const char* v : {"b", "h", "q_idx", "kv_idx"}) env.vars[v] = Type::kInt;
  env.vars["score"] = Type::kFloat;
  for (const SpecParam& p : spec.params) env.vars[p.name] = p.type;
  for (const SpecBuffer& b : spec.buffers) env.buffers[b.name] = cuir::ElementType(b.dtype);
  return env;
}

double Eval(const ExprPtr& e, const cuir::ScalarEnv& env) {
  auto v = cuir::EvalScalar(e, env);
  EXPECT_TRUE(v.ok()) << cuir::PrintExpr(e) << ": " << v.status();
  if (!v.ok()) return NAN;
  return std::visit([](auto x) { return static_cast<double>(x); }, *v);
}

void ExpectScoreModDerivativesMatch(const Spec& spec, const std::map<std::string, BufferSource>& sources) {
  ASSERT_NE(spec.score, nullptr) << spec.path << ": no score_mod";
  const cuir::TypeEnv types = SpecTypes(spec);
  auto d_score = cuir::Differentiate(spec.score, "score", types);
  ASSERT_TRUE(d_score.ok()) << d_score.status();
  const auto c = testing::Config(4, 2, 33, 47);
  auto in = MakeInputs(spec, c, sources, 71);
  ASSERT_TRUE(in.ok()) << in.status();
  std::map<std::string, std::vector<cuir::BufferReadPartial>> reads;
  for (const SpecBuffer& b : spec.buffers) {
    if (types.buffers.at(b.name) != Type::kFloat) continue;
    auto r = cuir::DifferentiateBufferReads(spec.score, b.name, types);
    ASSERT_TRUE(r.ok()) << r.status();
    reads[b.name] = *std::move(r);
  }
  std::mt19937_64 rng(72);
  std::normal_distribution<double> normal(0.0, 2.0);
  const double eps = 1e-6;
  for (int i = 0; i < 40; ++i) {
    const int64_t b = rng() % c.batch, h = rng() % c.heads_q, q = rng() % c.seqlen_q,
                  kv = rng() % c.seqlen_kv;
    const double score = normal(rng);
    cuir::ScalarEnv env = testing::PointEnv(spec, b, h, q, kv, score);
    for (const auto& [name, t] : in->buffers) env.buffers[name] = ToBufferData(t);
    const auto at = [&](double s) {
      cuir::ScalarEnv e = env;
      e.vars["score"] = s;
      return Eval(spec.score, e);
    };
    const double numeric = (at(score + eps) - at(score - eps)) / (2 * eps);
    EXPECT_NEAR(Eval(*d_score, env), numeric, 1e-6 * (1 + std::abs(numeric)))
        << "d/dscore at b=" << b << " h=" << h << " q=" << q << " kv=" << kv << " score=" << score
        << ": " << cuir::PrintExpr(*d_score);
    for (const auto& [name, partials] : reads) {
      for (const cuir::BufferReadPartial& r : partials) {
        std::vector<int64_t> index;
        for (const ExprPtr& x : r.index) {
          auto v = cuir::EvalInt(x, env);
          ASSERT_TRUE(v.ok()) << v.status();
          index.push_back(*v);
        }
        const auto offset = cuir::ElementOffset(env.buffers.at(name).sizes, index);
        ASSERT_TRUE(offset.has_value()) << name;
        const auto moved = [&](double delta) {
          cuir::ScalarEnv e = env;
          std::get<double>(e.buffers[name].values[*offset]) += delta;
          return Eval(spec.score, e);
        };
        const double num = (moved(eps) - moved(-eps)) / (2 * eps);
        EXPECT_NEAR(Eval(r.partial, env), num, 1e-6 * (1 + std::abs(num)))
            << "d/d" << name << " at b=" << b << " h=" << h << " q=" << q << " kv=" << kv << ": "
            << cuir::PrintExpr(r.partial);
      }
    }
  }
}

class ExampleScoreModDerivative : public ::testing::TestWithParam<std::string> {};

TEST_P(ExampleScoreModDerivative, AgreesWithCentralDifferences) {
  ExpectScoreModDerivativesMatch(testing::LoadSpecFor(testing::ExampleSpecPath(GetParam())), {});
}

INSTANTIATE_TEST_SUITE_P(Examples, ExampleScoreModDerivative,
                         ::testing::Values("relative_position.py", "alibi.py", "softcap.py",
                                           "alibi_window_softcap.py", "full.py"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param.substr(0, info.param.rfind('.'));
                         });

class GeneralityScoreModDerivative
    : public ::testing::TestWithParam<cubridge::testing::GeneralitySpec> {};

TEST_P(GeneralityScoreModDerivative, AgreesWithCentralDifferences) {
  const auto& g = GetParam();
  Spec spec = testing::LoadSpecFor(g.path, g.buffers);
  ASSERT_TRUE(OverrideParams(spec, g.params).ok());
  ExpectScoreModDerivativesMatch(spec, g.buffers);
}

// The suite's specs that have a score_mod (the others are masks alone: nothing to differentiate).
std::vector<cubridge::testing::GeneralitySpec> WithScoreMods() {
  std::vector<cubridge::testing::GeneralitySpec> out;
  for (auto& g : cubridge::testing::GeneralitySuite()) {
    auto text = files::ReadFile(g.path);
    if (!text.ok() || text->find("def score_mod(") != std::string::npos) {
      out.push_back(std::move(g));  // an unreadable file fails its test when it loads the spec
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Suite, GeneralityScoreModDerivative, ::testing::ValuesIn(WithScoreMods()),
                         cubridge::testing::GeneralityName);

}  // namespace
}  // namespace cubridge::spec
