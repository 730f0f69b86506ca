// Grid schedules (cuir/ir/schedule.h): the known names and the launch order each defines.
#include "cuir/ir/schedule.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cubridge::cuir {
namespace {

using ::testing::HasSubstr;
using Points = std::vector<std::vector<int64_t>>;

TEST(Schedule, KnownNames) {
  ASSERT_GE(GridSchedules().size(), 2u);
  EXPECT_EQ(GridSchedules()[0].name, "linear");
  EXPECT_EQ(FindGridSchedule(""), FindGridSchedule("linear"));  // the default
  ASSERT_NE(FindGridSchedule("longest_first"), nullptr);
  EXPECT_EQ(FindGridSchedule("swizzle_l2"), nullptr);
  EXPECT_THAT(DescribeGridSchedules(), HasSubstr("linear ("));
  EXPECT_THAT(DescribeGridSchedules(), HasSubstr("longest_first ("));
}

TEST(Schedule, LinearIsGridOrderFirstAxisFastest) {
  auto order = GridOrder("", {3, 2, 1});
  ASSERT_TRUE(order.ok()) << order.status();
  EXPECT_EQ(*order, (Points{{0, 0, 0}, {1, 0, 0}, {2, 0, 0}, {0, 1, 0}, {1, 1, 0}, {2, 1, 0}}));
  EXPECT_EQ(*GridOrder("linear", {3, 2, 1}), *order);
}

TEST(Schedule, LongestFirstRunsTheFirstAxisSlowestAndDescending) {
  auto order = GridOrder("longest_first", {3, 2, 2});
  ASSERT_TRUE(order.ok()) << order.status();
  EXPECT_EQ(*order, (Points{{2, 0, 0}, {2, 1, 0}, {2, 0, 1}, {2, 1, 1}, {1, 0, 0}, {1, 1, 0},
                            {1, 0, 1}, {1, 1, 1}, {0, 0, 0}, {0, 1, 0}, {0, 0, 1}, {0, 1, 1}}));
}

TEST(Schedule, EveryScheduleVisitsEveryPointOnce) {
  const std::vector<int64_t> extents = {5, 3, 2};
  Points want = *GridOrder("linear", extents);
  std::sort(want.begin(), want.end());
  for (const GridSchedule& s : GridSchedules()) {
    SCOPED_TRACE(std::string(s.name));
    Points got = *GridOrder(s.name, extents);
    EXPECT_EQ(got.size(), 30u);
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, want);
  }
}

TEST(Schedule, EmptyAndUnknown) {
  EXPECT_TRUE(GridOrder("longest_first", {4, 0, 2})->empty());
  auto unknown = GridOrder("snake", {2});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown grid schedule `snake`"));
  EXPECT_THAT(unknown.status().message(), HasSubstr("longest_first"));
  EXPECT_FALSE(GridOrder("linear", {2, -1}).ok());
}

}  // namespace
}  // namespace cubridge::cuir
