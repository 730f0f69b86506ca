// The worker reads kernels through cuir/experts/common/launch_abi.cuh (worker/gpu/abi.h); the
// expert repeats those structs in its standalone `abi` region and launch plan. A host compiler
// checks every field offset of one against the other, so a change on one side fails here.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "cuir/lower/lift.h"
#include "cuir/lower/lower.h"
#include "tests/lower/lower_test_util.h"

namespace cubridge::lower::testing {
namespace {

// static_asserts that the lowered kernel's declarations (in namespace `lowered`) lay out every
// field where worker/gpu/abi.h (cuir/experts/common/launch_abi.cuh) does.
std::string OffsetChecks() {
  std::string checks;
  for (const char* f : {"q", "k", "v", "o", "lse", "q_batch_stride", "k_row_stride",
                        "o_head_stride", "lse_batch_stride", "lse_head_stride", "batch",
                        "heads_q", "heads_kv", "head_dim", "seqlen_q", "seqlen_kv", "dtype",
                        "softmax_scale", "buffers", "workspace", "workspace_size"}) {
    absl::StrAppend(&checks, "static_assert(offsetof(lowered::cubridge_attn_fwd_params, ", f,
                    ") == offsetof(cubridge::gpu::AttnParams, ", f, "), \"", f, "\");\n");
  }
  for (const char* f : {"version", "status", "workspace_bytes", "classify_grid", "compact_grid",
                        "table_threads", "grid", "threads", "smem_bytes", "tma_count", "tma",
                        "resident_ctas_per_sm", "split_workspace_bytes", "combine_grid",
                        "combine_threads", "sm_count"}) {
    absl::StrAppend(&checks, "static_assert(offsetof(lowered::cubridge_attn_fwd_launch_plan, ", f,
                    ") == offsetof(cubridge::gpu::LaunchPlan, ", f, "), \"", f, "\");\n");
  }
  for (const char* f : {"data", "dtype", "rank", "sizes", "strides"}) {
    absl::StrAppend(&checks, "static_assert(offsetof(lowered::cubridge_attn_fwd_buffer, ", f,
                    ") == offsetof(cubridge::gpu::BufferDesc, ", f, "), \"buffer.", f, "\");\n");
  }
  for (const char* f : {"tensor", "box_cols", "box_rows", "swizzle"}) {
    absl::StrAppend(&checks, "static_assert(offsetof(lowered::cubridge_attn_fwd_tma_request, ", f,
                    ") == offsetof(cubridge::gpu::TmaRequest, ", f, "), \"tma.", f, "\");\n");
  }
  absl::StrAppend(&checks,
                  "static_assert(sizeof(lowered::cubridge_attn_fwd_params) == sizeof(cubridge::gpu::AttnParams));\n"
                  "static_assert(sizeof(lowered::cubridge_attn_fwd_launch_plan) == sizeof(cubridge::gpu::LaunchPlan));\n"
                  "static_assert(sizeof(lowered::cubridge_attn_fwd_tma_request) == sizeof(cubridge::gpu::TmaRequest));\n"
                  "static_assert(sizeof(lowered::cubridge_attn_fwd_buffer) == sizeof(cubridge::gpu::BufferDesc));\n"
                  "static_assert(lowered::kPlanVersion == cubridge::gpu::kPlanVersion);\n"
                  "static_assert(lowered::kMaxBuffers == cubridge::gpu::kMaxBuffers);\n"
                  "static_assert(lowered::kMaxTma == CUBRIDGE_MAX_TMA);\n"
                  "static_assert(lowered::kMaxTma == cubridge::gpu::kMaxTma);\n");
  return checks;
}

// Both experts: a table program on the sm_80 one, the Hopper expert's own base (TMA requests).
class Abi : public ::testing::TestWithParam<const char*> {};

TEST_P(Abi, TheWorkersAbiMatchesTheLoweredKernel) {
  const bool hopper = std::string(GetParam()) == "fa3_sm90";
  auto lifted = LiftExpert("fa3_sm90");
  ASSERT_TRUE(lifted.ok()) << lifted.status();
  auto program = hopper ? absl::StatusOr<cuir::Program>(lifted->base) : LoadTestProgram("document");
  ASSERT_TRUE(program.ok()) << program.status();
  auto k = Lower(*program, cuir::AttentionConfig{}, hopper ? Arch::kSm90 : Arch::kSm80);
  ASSERT_TRUE(k.ok()) << k.status();
  const std::string dir = MakeTempDir("cubridge-abi-");
  ASSERT_FALSE(dir.empty());
  WriteFile(dir + "/kernel.h", k->launcher_header);
  // kernel.h holds the params struct and the launch plan (the abi region's shared header,
  // inlined). Its declarations go in a namespace of their own (the worker's have the same names);
  // its macros are read into constants before abi.h defines its own.
  EXPECT_EQ(k->launcher_header.find("#include \"../common"), std::string::npos)
      << "kernel.h must stand alone";
  WriteFile(dir + "/check.cc",
            absl::StrCat("#include <cstddef>\n#include <stddef.h>\n#include <stdint.h>\n",
                         "namespace lowered {\n#include \"kernel.h\"\n",
                         "constexpr int kPlanVersion = CUBRIDGE_PLAN_VERSION;\n"
                         "constexpr int kMaxBuffers = CUBRIDGE_MAX_BUFFERS;\n"
                         "constexpr int kMaxTma = CUBRIDGE_MAX_TMA;\n}\n"
                         "#undef CUBRIDGE_PLAN_VERSION\n#undef CUBRIDGE_MAX_BUFFERS\n"
                         "#undef CUBRIDGE_MAX_TMA\n#undef CUBRIDGE_ALIGNAS\n"
                         // Same kernel name, same guard: let abi.h read the header again.
                         "#undef cubridge_attn_fwd_LAUNCH_ABI_CUH_\n"
                         "#include \"worker/gpu/abi.h\"\n", OffsetChecks()));
  const CommandResult r = RunCommand(absl::StrCat("c++ -std=c++20 -fsyntax-only -I", CUBRIDGE_SOURCE_ROOT,
                                                  " ", dir, "/check.cc"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  CleanUpTempDir(dir, HasFailure());
}

INSTANTIATE_TEST_SUITE_P(Experts, Abi, ::testing::Values("fa2_sm80", "fa3_sm90"));

}  // namespace
}  // namespace cubridge::lower::testing
