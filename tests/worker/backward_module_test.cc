// The backward loader's checks of a launch plan, without a GPU (the launches themselves run in
// tests/gpu/backward_lowered_test.cc).
#include "worker/gpu/backward_module.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace cubridge::gpu {
namespace {

using ::testing::HasSubstr;

BwdLaunchPlan Launchable() {
  BwdLaunchPlan p{};
  p.version = CUBRIDGE_BWD_PLAN_VERSION;
  p.status = 0;
  p.workspace_bytes = 4096;
  p.row_grid = 1024, p.row_threads = 256;
  p.grid[0] = 3, p.grid[1] = 8, p.grid[2] = 2;
  p.threads = 256;
  p.smem_bytes = 90000;
  return p;
}

TEST(BackwardPlan, ALaunchablePlanPasses) {
  EXPECT_TRUE(CheckBackwardPlan(Launchable()).ok());
  BwdLaunchPlan tables = Launchable();
  tables.classify_grid = 10, tables.compact_grid = 2, tables.table_threads = 128;
  tables.tables_offset = 1024;
  EXPECT_TRUE(CheckBackwardPlan(tables).ok());
  BwdLaunchPlan post = Launchable();  // 0: no postprocess (the attention kernel converted all)
  post.post_grid = 1024;
  EXPECT_TRUE(CheckBackwardPlan(post).ok());
}

TEST(BackwardPlan, EachBadFieldIsNamed) {
  BwdLaunchPlan p = Launchable();
  p.version = 7;
  EXPECT_TRUE(absl::IsFailedPrecondition(CheckBackwardPlan(p)));
  EXPECT_THAT(CheckBackwardPlan(p).message(), HasSubstr("version 7"));
  p = Launchable();
  p.status = 1;
  EXPECT_TRUE(absl::IsInvalidArgument(CheckBackwardPlan(p)));
  EXPECT_THAT(CheckBackwardPlan(p).message(), HasSubstr("refuses these parameters"));
  p = Launchable();
  p.grid[1] = 0;
  EXPECT_THAT(CheckBackwardPlan(p).message(), HasSubstr("grid[1] = 0"));
  p = Launchable();
  p.row_threads = 0;
  EXPECT_THAT(CheckBackwardPlan(p).message(), HasSubstr("row_threads = 0"));
  p = Launchable();
  p.post_grid = 0x80000001u;
  EXPECT_THAT(CheckBackwardPlan(p).message(), HasSubstr("post_grid = 2147483649"));
  p = Launchable();
  p.classify_grid = 4, p.compact_grid = 1, p.table_threads = 128, p.tables_offset = 1 << 20;
  EXPECT_THAT(CheckBackwardPlan(p).message(), HasSubstr("tables at 1048576 of 4096"));
}

}  // namespace
}  // namespace cubridge::gpu
