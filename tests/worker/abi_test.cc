// The worker reads kernels through cuir/experts/common/launch_abi.cuh (worker/gpu/abi.h); the
// expert repeats those structs in its standalone `abi` region and launch plan. A host compiler
// checks every field offset of one against the other, so a change on one side fails here.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
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
                        "softmax_scale", "buffers", "buffer_lengths", "workspace",
                        "workspace_size"}) {
    absl::StrAppend(&checks, "static_assert(offsetof(lowered::cubridge_attn_fwd_params, ", f,
                    ") == offsetof(cubridge::gpu::AttnParams, ", f, "), \"", f, "\");\n");
  }
  for (const char* f : {"version", "status", "workspace_bytes", "classify_grid", "compact_grid",
                        "table_threads", "grid", "threads", "smem_bytes", "tma_count", "tma"}) {
    absl::StrAppend(&checks, "static_assert(offsetof(lowered::cubridge_attn_fwd_launch_plan, ", f,
                    ") == offsetof(cubridge::gpu::LaunchPlan, ", f, "), \"", f, "\");\n");
  }
  for (const char* f : {"tensor", "box_cols", "box_rows", "swizzle"}) {
    absl::StrAppend(&checks, "static_assert(offsetof(lowered::cubridge_tma_request, ", f,
                    ") == offsetof(cubridge::gpu::TmaRequest, ", f, "), \"tma.", f, "\");\n");
  }
  absl::StrAppend(&checks,
                  "static_assert(sizeof(lowered::cubridge_attn_fwd_params) == sizeof(cubridge::gpu::AttnParams));\n"
                  "static_assert(sizeof(lowered::cubridge_attn_fwd_launch_plan) == sizeof(cubridge::gpu::LaunchPlan));\n"
                  "static_assert(sizeof(lowered::cubridge_tma_request) == sizeof(cubridge::gpu::TmaRequest));\n"
                  "static_assert(lowered::kPlanVersion == cubridge::gpu::kPlanVersion);\n"
                  "static_assert(lowered::kMaxBuffers == cubridge::gpu::kMaxBuffers);\n"
                  "static_assert(lowered::kMaxTma == CUBRIDGE_MAX_TMA);\n"
                  "static_assert(lowered::kMaxTma == cubridge::gpu::kMaxTma);\n");
  return checks;
}

TEST(Abi, TheWorkersAbiMatchesTheLoweredKernel) {
  auto program = LoadTestProgram("document");
  ASSERT_TRUE(program.ok()) << program.status();
  auto k = Lower(*program, cuir::AttentionConfig{}, Arch::kSm80);
  ASSERT_TRUE(k.ok()) << k.status();
  const std::string dir = MakeTempDir("cubridge-abi-");
  ASSERT_FALSE(dir.empty());
  WriteFile(dir + "/kernel.h", k->launcher_header);
  // The plan struct lives in kernel.cu, after the device code: take its declaration only.
  const size_t from = k->cuda_source.find("#define CUBRIDGE_PLAN_VERSION");
  const size_t to = k->cuda_source.find("} cubridge_attn_fwd_launch_plan;");
  ASSERT_NE(from, std::string::npos);
  ASSERT_NE(to, std::string::npos);
  const std::string plan = k->cuda_source.substr(from, to - from) + "} cubridge_attn_fwd_launch_plan;\n";
  // The lowered declarations go in a namespace of their own (the worker's have the same names);
  // their macros are read into constants before abi.h defines its own.
  WriteFile(dir + "/check.cc",
            absl::StrCat("#include <cstddef>\n#include <stddef.h>\n#include <stdint.h>\n",
                         "namespace lowered {\n#include \"kernel.h\"\n", plan,
                         "constexpr int kPlanVersion = CUBRIDGE_PLAN_VERSION;\n"
                         "constexpr int kMaxBuffers = CUBRIDGE_MAX_BUFFERS;\n"
                         "constexpr int kMaxTma = CUBRIDGE_MAX_TMA;\n}\n"
                         "#undef CUBRIDGE_PLAN_VERSION\n#undef CUBRIDGE_MAX_BUFFERS\n"
                         "#undef CUBRIDGE_MAX_TMA\n"
                         "#include \"worker/gpu/abi.h\"\n", OffsetChecks()));
  const CommandResult r = RunCommand(absl::StrCat("c++ -std=c++20 -fsyntax-only -I", CUBRIDGE_SOURCE_ROOT,
                                                  " ", dir, "/check.cc"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  CleanUpTempDir(dir, HasFailure());
}

}  // namespace
}  // namespace cubridge::lower::testing
