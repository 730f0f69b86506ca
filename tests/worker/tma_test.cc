// Plan version 2: the checks the loader makes on a plan's TMA requests, and the geometry of the
// tensor maps it encodes over a call's tensors (worker/gpu/module.h). No GPU needed: the encoding
// itself (cuTensorMapEncodeTiled) runs in the GPU suite.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "worker/gpu/module.h"

namespace cubridge::gpu {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// GQA 8 / 2, batch 3, head dim 128; q in [batch, seqlen, heads, dim] (heads inner to rows: a
// non-contiguous [batch, heads, seqlen, dim] view), k and v contiguous [batch, heads, seqlen, dim]
// with v's rows padded to 192 elements, o contiguous.
AttnParams GqaParams() {
  AttnParams p{};
  p.batch = 3, p.heads_q = 8, p.heads_kv = 2, p.head_dim = 128, p.seqlen_q = 300,
  p.seqlen_kv = 1000;
  p.q = reinterpret_cast<const void*>(uintptr_t{0x10000});
  p.k = reinterpret_cast<const void*>(uintptr_t{0x20000});
  p.v = reinterpret_cast<const void*>(uintptr_t{0x30000});
  p.o = reinterpret_cast<void*>(uintptr_t{0x40000});
  p.q_row_stride = 8 * 128, p.q_head_stride = 128, p.q_batch_stride = 300 * 8 * 128;
  p.k_row_stride = 128, p.k_head_stride = 1000 * 128, p.k_batch_stride = 2 * 1000 * 128;
  p.v_row_stride = 192, p.v_head_stride = 1000 * 192, p.v_batch_stride = 2 * 1000 * 192;
  p.o_row_stride = 128, p.o_head_stride = 300 * 128, p.o_batch_stride = 8 * 300 * 128;
  p.dtype = 0;
  return p;
}

TmaRequest Request(int tensor, uint32_t box_cols = 64, uint32_t box_rows = 128, int swizzle = 3) {
  return TmaRequest{tensor, box_cols, box_rows, swizzle};
}

TEST(TmaGeometry, QIsHeadDimSeqlenHeadsBatchWithItsOwnStridesInBytes) {
  auto g = TmaGeometryFor(GqaParams(), Request(0));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_STREQ(g->tensor, "q");
  EXPECT_EQ(g->address, reinterpret_cast<void*>(uintptr_t{0x10000}));
  EXPECT_EQ(g->data_type, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
  EXPECT_THAT(g->dims, ElementsAre(128u, 300u, 8u, 3u));
  EXPECT_THAT(g->strides, ElementsAre(8u * 128 * 2, 128u * 2, 300u * 8 * 128 * 2));
  EXPECT_THAT(g->box, ElementsAre(64u, 128u, 1u, 1u));
  EXPECT_THAT(g->element_strides, ElementsAre(1u, 1u, 1u, 1u));
  EXPECT_EQ(g->swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
}

TEST(TmaGeometry, KAndVHaveTheKvHeadsAndSeqlen) {
  AttnParams p = GqaParams();
  p.dtype = 1;
  auto k = TmaGeometryFor(p, Request(1, 64, 176, 3));
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_STREQ(k->tensor, "k");
  EXPECT_EQ(k->address, reinterpret_cast<void*>(uintptr_t{0x20000}));
  EXPECT_EQ(k->data_type, CU_TENSOR_MAP_DATA_TYPE_FLOAT16);
  EXPECT_THAT(k->dims, ElementsAre(128u, 1000u, 2u, 3u));
  EXPECT_THAT(k->strides, ElementsAre(256u, 1000u * 128 * 2, 2u * 1000 * 128 * 2));
  EXPECT_THAT(k->box, ElementsAre(64u, 176u, 1u, 1u));

  auto v = TmaGeometryFor(p, Request(2, 32, 64, 2));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_STREQ(v->tensor, "v");
  EXPECT_EQ(v->address, reinterpret_cast<void*>(uintptr_t{0x30000}));
  EXPECT_THAT(v->dims, ElementsAre(128u, 1000u, 2u, 3u));
  EXPECT_THAT(v->strides, ElementsAre(384u, 1000u * 192 * 2, 2u * 1000 * 192 * 2));
  EXPECT_THAT(v->box, ElementsAre(32u, 64u, 1u, 1u));
  EXPECT_EQ(v->swizzle, CU_TENSOR_MAP_SWIZZLE_64B);
}

TEST(TmaGeometry, OIsShapedLikeQWithItsOwnStrides) {
  auto g = TmaGeometryFor(GqaParams(), Request(3, 128, 64, 0));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_STREQ(g->tensor, "o");
  EXPECT_EQ(g->address, reinterpret_cast<void*>(uintptr_t{0x40000}));
  EXPECT_THAT(g->dims, ElementsAre(128u, 300u, 8u, 3u));
  EXPECT_THAT(g->strides, ElementsAre(256u, 300u * 128 * 2, 8u * 300 * 128 * 2));
  EXPECT_EQ(g->swizzle, CU_TENSOR_MAP_SWIZZLE_NONE);
  // What an encode failure reports.
  const std::string text = g->Describe();
  EXPECT_THAT(text, HasSubstr("o (bf16 at 0x40000)"));
  EXPECT_THAT(text, HasSubstr("dims (128, 300, 8, 3)"));
  EXPECT_THAT(text, HasSubstr("strides (256, 76800, 614400) bytes"));
  EXPECT_THAT(text, HasSubstr("box (128, 64, 1, 1)"));
}

TEST(TmaGeometry, RefusesWhatTmaCannotDescribe) {
  auto bad_tensor = TmaGeometryFor(GqaParams(), Request(kTmaBuffer0 + kMaxBuffers));
  ASSERT_FALSE(bad_tensor.ok());
  EXPECT_EQ(bad_tensor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_tensor.status().message(), HasSubstr("tensor 12"));
  EXPECT_FALSE(TmaGeometryFor(GqaParams(), Request(-1)).ok());

  AttnParams p = GqaParams();
  p.dtype = 2;
  EXPECT_THAT(TmaGeometryFor(p, Request(0)).status().message(), HasSubstr("dtype"));
  p = GqaParams();
  p.k_head_stride = -128;
  EXPECT_THAT(TmaGeometryFor(p, Request(1)).status().message(), HasSubstr("negative"));
  EXPECT_TRUE(TmaGeometryFor(p, Request(0)).ok());  // q does not use k's strides
  p = GqaParams();
  p.seqlen_kv = 0;
  EXPECT_FALSE(TmaGeometryFor(p, Request(2)).ok());
}

LaunchPlan GoodPlan(int version = kPlanVersion) {
  LaunchPlan plan{};
  plan.version = version;
  plan.grid[0] = plan.grid[1] = plan.grid[2] = 1;
  plan.threads = 384;
  if (version >= 2) {
    plan.tma_count = 3;
    for (int i = 0; i < 3; ++i) plan.tma[i] = Request(i, 64, i == 0 ? 128 : 176, 3);
  }
  return plan;
}

TEST(LaunchPlanCheck, ReadsVersionsOneToThree) {
  LaunchPlan v3 = GoodPlan();
  v3.split_workspace_bytes = 4096;
  v3.combine_grid = 264;
  v3.combine_threads = 128;
  ASSERT_TRUE(CheckLaunchPlan(v3).ok());
  EXPECT_EQ(v3.tma_count, 3);
  EXPECT_EQ(v3.combine_grid, 264u);
  LaunchPlan v2 = v3;
  v2.version = 2;  // the split fields are version 3's: not the kernel's
  ASSERT_TRUE(CheckLaunchPlan(v2).ok());
  EXPECT_EQ(v2.tma_count, 3);
  EXPECT_EQ(v2.split_workspace_bytes, 0u);
  EXPECT_EQ(v2.combine_grid, 0u);
  EXPECT_EQ(v2.combine_threads, 0u);
  LaunchPlan v1 = GoodPlan(1);
  v1.tma_count = 2;  // not a version-1 field: not the kernel's
  ASSERT_TRUE(CheckLaunchPlan(v1).ok());
  EXPECT_EQ(v1.tma_count, 0);
  for (int version : {0, 4, -1}) {
    LaunchPlan p = GoodPlan();
    p.version = version;
    auto s = CheckLaunchPlan(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << version;
    EXPECT_THAT(s.message(), HasSubstr("versions 1 to 3"));
  }
  LaunchPlan refused = GoodPlan();
  refused.status = 1;
  EXPECT_EQ(CheckLaunchPlan(refused).code(), absl::StatusCode::kInvalidArgument);
}

// A captured bool [Sq, Skv] (rank 2) and a bf16 [B, H, Sq, Skv] bias with padded rows.
TEST(TmaGeometry, ABufferIsItsInnermostDimensionsFirstWithItsElementType) {
  AttnParams p = GqaParams();
  p.buffers[1].data = reinterpret_cast<const void*>(uintptr_t{0x50000});
  p.buffers[1].dtype = 2, p.buffers[1].rank = 2;  // bool
  p.buffers[1].sizes[0] = 300, p.buffers[1].sizes[1] = 1024;
  p.buffers[1].strides[0] = 1024, p.buffers[1].strides[1] = 1;
  auto keep = TmaGeometryFor(p, Request(kTmaBuffer0 + 1, 128, 128, 3));
  ASSERT_TRUE(keep.ok()) << keep.status();
  EXPECT_STREQ(keep->tensor, "buffer 1");
  EXPECT_EQ(keep->data_type, CU_TENSOR_MAP_DATA_TYPE_UINT8);
  // The dimensions the rank lacks have size 1 and the extent inside them as their stride.
  EXPECT_THAT(keep->dims, ElementsAre(1024u, 300u, 1u, 1u));
  EXPECT_THAT(keep->strides, ElementsAre(1024u, 300u * 1024, 300u * 1024));
  EXPECT_THAT(keep->box, ElementsAre(128u, 128u, 1u, 1u));

  p.buffers[0].data = reinterpret_cast<const void*>(uintptr_t{0x60000});
  p.buffers[0].dtype = 4, p.buffers[0].rank = 4;  // bf16 [3, 8, 300, 1000], rows of 1008
  const int64_t sizes[4] = {3, 8, 300, 1000}, strides[4] = {8 * 300 * 1008, 300 * 1008, 1008, 1};
  for (int d = 0; d < 4; ++d) p.buffers[0].sizes[d] = sizes[d], p.buffers[0].strides[d] = strides[d];
  auto bias = TmaGeometryFor(p, Request(kTmaBuffer0, 64, 128, 3));
  ASSERT_TRUE(bias.ok()) << bias.status();
  EXPECT_EQ(bias->data_type, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
  EXPECT_THAT(bias->dims, ElementsAre(1000u, 300u, 8u, 3u));
  EXPECT_THAT(bias->strides, ElementsAre(1008u * 2, 300u * 1008 * 2, 8u * 300 * 1008 * 2));
  // A dimension of size 1 takes any stride (the extent inside it is used); a broadcast stride 0
  // over size 8 cannot be a map (the kernel fills such a tile itself).
  p.buffers[0].sizes[1] = 1, p.buffers[0].strides[1] = 0;
  auto one_head = TmaGeometryFor(p, Request(kTmaBuffer0, 64, 128, 3));
  ASSERT_TRUE(one_head.ok()) << one_head.status();
  EXPECT_THAT(one_head->strides, ElementsAre(1008u * 2, 300u * 1008 * 2, 8u * 300 * 1008 * 2));
  p.buffers[0].sizes[1] = 8;
  EXPECT_EQ(TmaGeometryFor(p, Request(kTmaBuffer0, 64, 128, 3)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // 128 bf16 columns are 256 bytes: wider than the 128-byte swizzle.
  p.buffers[0].strides[1] = 300 * 1008;
  auto wide = TmaGeometryFor(p, Request(kTmaBuffer0, 128, 128, 3));
  EXPECT_EQ(wide.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wide.status().message(), HasSubstr("buffer 0"));
  // A buffer the call does not give.
  EXPECT_EQ(TmaGeometryFor(p, Request(kTmaBuffer0 + 2, 64, 128, 3)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LaunchPlanCheck, RefusesBadTmaRequestsNamingTheField) {
  struct Bad {
    const char* field;
    void (*spoil)(LaunchPlan&);
  };
  const Bad cases[] = {
      {"tma_count -1", [](LaunchPlan& p) { p.tma_count = -1; }},
      {"tma_count 5", [](LaunchPlan& p) { p.tma_count = kMaxTma + 1; }},
      {"tma[1].tensor 12", [](LaunchPlan& p) { p.tma[1].tensor = kTmaBuffer0 + kMaxBuffers; }},
      {"tma[1].box_cols 257", [](LaunchPlan& p) { p.tma[1].tensor = kTmaBuffer0, p.tma[1].box_cols = 257; }},
      {"tma[0].tensor -1", [](LaunchPlan& p) { p.tma[0].tensor = -1; }},
      {"tma[2].swizzle 4", [](LaunchPlan& p) { p.tma[2].swizzle = 4; }},
      {"tma[2].swizzle -1", [](LaunchPlan& p) { p.tma[2].swizzle = -1; }},
      {"tma[0].box_rows 0", [](LaunchPlan& p) { p.tma[0].box_rows = 0; }},
      {"tma[0].box_rows 257", [](LaunchPlan& p) { p.tma[0].box_rows = 257; }},
      {"tma[1].box_cols 0", [](LaunchPlan& p) { p.tma[1].box_cols = 0; }},
      {"tma[1].box_cols 12", [](LaunchPlan& p) { p.tma[1].box_cols = 12; }},  // 24 bytes
      // 128-byte swizzle: at most 64 two-byte columns per box row; 64-byte: 32; 32-byte: 16.
      {"tma[1].box_cols 128", [](LaunchPlan& p) { p.tma[1].box_cols = 128; }},
      {"tma[2].box_cols 64", [](LaunchPlan& p) { p.tma[2].swizzle = 2; }},
      {"tma[2].box_cols 32", [](LaunchPlan& p) { p.tma[2].swizzle = 1, p.tma[2].box_cols = 32; }},
  };
  for (const Bad& c : cases) {
    LaunchPlan p = GoodPlan();
    c.spoil(p);
    auto s = CheckLaunchPlan(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(s.message(), HasSubstr(c.field));
  }
  // Unswizzled boxes may be as wide as TMA allows; requests past tma_count are not read.
  LaunchPlan wide = GoodPlan();
  wide.tma[0].swizzle = 0, wide.tma[0].box_cols = 256;
  wide.tma[3].tensor = kTmaBuffer0 + kMaxBuffers;
  EXPECT_TRUE(CheckLaunchPlan(wide).ok());
  // A buffer's box is checked in bytes against the call's dtype (TmaGeometryFor), not here.
  LaunchPlan buffer = GoodPlan();
  buffer.tma[1].tensor = kTmaBuffer0 + 7, buffer.tma[1].box_cols = 128;
  EXPECT_TRUE(CheckLaunchPlan(buffer).ok());
  LaunchPlan narrow = GoodPlan();
  narrow.tma[2].swizzle = 1, narrow.tma[2].box_cols = 16;
  EXPECT_TRUE(CheckLaunchPlan(narrow).ok());
}

}  // namespace
}  // namespace cubridge::gpu
