// OverrideParams: the job's --param name=value flags, type-checked against the spec.
#include "spec_test_util.h"

namespace cubridge::spec {
namespace {

using ::testing::HasSubstr;

Spec Load() {
  auto spec = LoadSpecSource(
      "def mask_mod(b, h, q_idx, kv_idx, window: int = 256, ratio: float = 0.5, on: bool = True):\n"
      "    return (q_idx - kv_idx <= window) & (q_idx * ratio >= 0)\n",
      "p.py");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *std::move(spec) : Spec{};
}

TEST(OverrideParams, SetsEachTypedValue) {
  Spec spec = Load();
  ASSERT_TRUE(OverrideParams(spec, {"window=128", "ratio = 2.5", "on=false"}).ok());
  EXPECT_EQ(std::get<int64_t>(spec.FindParam("window")->value), 128);
  EXPECT_EQ(std::get<double>(spec.FindParam("ratio")->value), 2.5);
  EXPECT_FALSE(std::get<bool>(spec.FindParam("on")->value));
}

TEST(OverrideParams, IntegerIsAcceptedForAFloat) {
  Spec spec = Load();
  ASSERT_TRUE(OverrideParams(spec, {"ratio=3"}).ok());
  EXPECT_EQ(std::get<double>(spec.FindParam("ratio")->value), 3.0);
}

TEST(OverrideParams, OverriddenValueIsWhatTheExpressionSees) {
  Spec spec = Load();
  ASSERT_TRUE(OverrideParams(spec, {"window=2"}).ok());
  // q - kv = 3 is inside the default window of 256 but outside 2.
  auto inside = cuir::EvalBool(spec.mask, testing::PointEnv(spec, 0, 0, 10, 7, 0.0));
  ASSERT_TRUE(inside.ok()) << inside.status();
  EXPECT_FALSE(*inside);
}

TEST(OverrideParams, WrongTypeIsRejected) {
  Spec spec = Load();
  absl::Status s = OverrideParams(spec, {"window=1.5"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("`window` is int; `1.5` is not an int"));
  EXPECT_EQ(std::get<int64_t>(spec.FindParam("window")->value), 256);
  s = OverrideParams(spec, {"on=maybe"});
  EXPECT_THAT(std::string(s.message()), HasSubstr("`on` is bool; `maybe` is not a bool"));
}

TEST(OverrideParams, UnknownNameListsTheKnownParams) {
  Spec spec = Load();
  absl::Status s = OverrideParams(spec, {"windw=3"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("has no parameter `windw`; its parameters: window: int, ratio: float, "
                        "on: bool"));
}

TEST(OverrideParams, SpecWithoutParamsSaysSo) {
  auto spec = LoadSpecSource("def mask_mod(b, h, q, k):\n    return q >= k\n", "c.py");
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::Status s = OverrideParams(*spec, {"window=3"});
  EXPECT_THAT(std::string(s.message()), HasSubstr("it has no parameters"));
}

TEST(OverrideParams, MissingEqualsSignIsRejected) {
  Spec spec = Load();
  absl::Status s = OverrideParams(spec, {"window"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("expected NAME=VALUE"));
}

}  // namespace
}  // namespace cubridge::spec
