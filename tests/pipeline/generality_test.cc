// The generality suite on the CPU: every spec goes through the whole pipeline (frontend, rules,
// CPU verification of the transferred program against the spec's oracle at ragged MHA and GQA
// shapes, lowering for both experts) as `adapt --local --gpu off` runs it.
#include <filesystem>

#include "gtest/gtest.h"
#include "cuir/pipeline/adapt.h"
#include "tests/generality_suite.h"
#include "tests/lower/lower_test_util.h"

namespace cubridge::pipeline {
namespace {

using cubridge::testing::GeneralitySpec;

class Generality : public ::testing::TestWithParam<GeneralitySpec> {
 protected:
  void SetUp() override { dir_ = lower::testing::MakeTempDir("cubridge-generality-"); }
  void TearDown() override { lower::testing::CleanUpTempDir(dir_, HasFailure()); }
  std::string dir_;
};

TEST_P(Generality, VerifiesOnTheCpuAndLowersForBothExperts) {
  const GeneralitySpec& g = GetParam();
  int run = 0;
  for (const auto& [hq, hkv, dtype, arch] :
       {std::tuple{4, 4, cuir::DType::kBF16, lower::Arch::kSm90},
        std::tuple{8, 2, cuir::DType::kFP16, lower::Arch::kSm80}}) {
    AdaptOptions o;
    o.spec_path = g.path;
    o.buffers = g.buffers;
    o.param_overrides = g.params;
    o.config.batch = 2;
    o.config.heads_q = hq;
    o.config.heads_kv = hkv;
    o.config.head_dim = 64;
    o.config.seqlen_q = 130;
    o.config.seqlen_kv = 130;
    o.config.dtype = dtype;
    o.arch = arch;
    o.out_dir = dir_ + "/out" + std::to_string(run++);
    o.use_cache = false;
    o.seed = 20261126;
    o.gpu_mode = GpuMode::kOff;
    auto r = Adapt(o);
    ASSERT_TRUE(r.ok()) << g.name << " (" << o.config.ToString() << "): " << r.status();
    EXPECT_TRUE(std::filesystem::exists(o.out_dir + "/kernel.cu")) << o.out_dir;
    const auto& shapes = r->report["verification"]["shapes"];
    EXPECT_GE(shapes.size(), 3u) << r->report.dump(2);
  }
}

INSTANTIATE_TEST_SUITE_P(Suite, Generality,
                         ::testing::ValuesIn(cubridge::testing::GeneralitySuite()),
                         cubridge::testing::GeneralityName);

}  // namespace
}  // namespace cubridge::pipeline
