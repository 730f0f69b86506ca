// Lift checks the annotated expert source against its base program; tampered copies of the
// expert fail with a message naming what disagrees.
#include "cuir/lower/lift.h"

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_replace.h"
#include "tests/lower/lower_test_util.h"

namespace cubridge::lower {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST(Lift, TheSm80ExpertAgreesWithItsBaseProgram) {
  auto r = LiftExpert("fa2_sm80");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->base.kernel, "attn_fwd");
  ASSERT_EQ(r->checks.size(), 3u);
  EXPECT_THAT(r->checks[1], HasSubstr("tile params agree (4)"));
}

TEST(Lift, TheSm80BackwardExpertAgreesWithItsBaseProgramAndNamesItsFourKernels) {
  auto r = LiftExpert("fa2_sm80", /*backward=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->base.kernel, "attn_bwd");
  ASSERT_EQ(r->checks.size(), 3u);
  EXPECT_THAT(r->checks[2], HasSubstr("plan, classify, compact, preprocess, attention, postprocess"));
}

TEST(Lift, TheSm90BackwardExpertAgreesWithItsBaseProgramAndNamesItsFourKernels) {
  auto r = LiftExpert("fa3_sm90", /*backward=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->base.kernel, "attn_bwd");
  ASSERT_EQ(r->checks.size(), 3u);
  EXPECT_THAT(r->checks[1], HasSubstr("tile params agree (4)"));
  EXPECT_THAT(r->checks[2], HasSubstr("plan, classify, compact, preprocess, attention, postprocess"));
}

// A copy of the experts folder with one edit to fa2_sm80/kernel.cu or base.cuir.
class TamperedExpert : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("cubridge-lift-");
    fs::copy(std::string(CUBRIDGE_SOURCE_ROOT) + "/cuir/experts", dir_, fs::copy_options::recursive);
    setenv("CUBRIDGE_EXPERTS_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("CUBRIDGE_EXPERTS_DIR");
    testing::CleanUpTempDir(dir_, HasFailure());
  }
  void Edit(const std::string& file, const std::string& from, const std::string& to) {
    const std::string path = dir_ + "/fa2_sm80/" + file;
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    ASSERT_NE(ss.str().find(from), std::string::npos) << from;
    testing::WriteFile(path, absl::StrReplaceAll(ss.str(), {{from, to}}));
  }
  std::string dir_;
};

struct Tamper {
  std::string name;
  std::vector<std::array<std::string, 3>> edits;  // file, from, to
  std::string message;                            // what the lift error must say
};

class Tampering : public TamperedExpert, public ::testing::WithParamInterface<Tamper> {};

TEST_P(Tampering, FailsNamingWhatDisagrees) {
  for (const auto& [file, from, to] : GetParam().edits) Edit(file, from, to);
  auto r = LiftExpert("fa2_sm80");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Tampering,
    ::testing::Values(
        Tamper{"TileSize",
               {{"kernel.cu", "constexpr int BLOCK_N = 64;", "constexpr int BLOCK_N = 32;"}},
               "tile_params says BLOCK_N = 32 but base.cuir says 64"},
        Tamper{"UnknownRegion",
               {{"kernel.cu", "// @cuir-region qk_scale", "// @cuir-region qk_scaling"},
                {"kernel.cu", "// @cuir-end qk_scale", "// @cuir-end qk_scaling"}},
               "region `qk_scaling` is not one the lowering knows"},
        Tamper{"MissingEntryPoint", {{"kernel.cu", "// @cuir-entry compact", "// compact"}},
               "@cuir-entry compact"},
        Tamper{"BaseParamNotInTheKernel",
               {{"base.cuir", "param WARPS: int = 4", "param WARPS: int = 4\n  param SPLITS: int = 2"}},
               "does not declare `SPLITS`"}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace cubridge::lower
