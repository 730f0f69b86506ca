// Every lowered test program compiles with NVRTC (the worker's run-time compiler) for both
// archs, for each element type and head dim, and exposes the four device entry points a loader
// looks up. No GPU is needed: NVRTC and the CUDA headers are enough.
#include "worker/gpu/nvrtc.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/lower/lower_test_util.h"
#include "worker/gpu/module.h"

namespace cubridge::gpu {
namespace {

using ::testing::HasSubstr;

lower::LoweredKernel LowerProgram(const std::string& name, lower::Arch arch) {
  auto program = lower::testing::LoadTestProgram(name);
  EXPECT_TRUE(program.ok()) << program.status();
  auto k = lower::Lower(*program, cuir::AttentionConfig{}, arch);
  EXPECT_TRUE(k.ok()) << k.status();
  return k.ok() ? *k : lower::LoweredKernel{};
}

struct Case {
  std::string program;
  lower::Arch arch;
};

class NvrtcCompile : public ::testing::TestWithParam<Case> {};

TEST_P(NvrtcCompile, EveryInstanceHasItsEntryPoints) {
  const lower::LoweredKernel k = LowerProgram(GetParam().program, GetParam().arch);
  ASSERT_EQ(k.device_entries.size(), 4u);
  // bf16 at every head dim, fp16 at one: each compile instantiates only what it names.
  for (auto [dtype, head_dim] : {std::pair{0, 64}, {0, 128}, {0, 256}, {1, 128}}) {
    CompileOptions o;
    o.arch = GetParam().arch;
    const auto exprs = EntryExpressions(k.device_entries, dtype, head_dim);
    for (const auto& [role, e] : exprs) o.name_expressions.push_back(e);
    auto m = CompileWithNvrtc(k.cuda_source, GetParam().program + ".cu", o);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_GT(m->image.size(), 1000u);
    EXPECT_EQ(m->log.find("error"), std::string::npos) << m->log;
    ASSERT_EQ(m->symbols.size(), 4u);
    // The attention kernel is a template instance: its symbol is mangled and names the type.
    const std::string attention = m->symbols.at(exprs.at("attention"));
    EXPECT_THAT(attention, HasSubstr(dtype == 0 ? "bfloat16" : "half"));
    EXPECT_EQ(m->symbols.at(exprs.at("plan")), k.entry_point + "_plan");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Programs, NvrtcCompile,
    ::testing::Values(Case{"base", lower::Arch::kSm80}, Case{"causal", lower::Arch::kSm90},
                      Case{"sliding_window", lower::Arch::kSm80},
                      Case{"global_window", lower::Arch::kSm90},
                      Case{"document", lower::Arch::kSm80},
                      Case{"document_batched", lower::Arch::kSm90},
                      Case{"softcap_alibi", lower::Arch::kSm80}, Case{"gqa", lower::Arch::kSm90},
                      Case{"renamed_symbols", lower::Arch::kSm80}),
    [](const auto& info) {
      return info.param.program + "_" + lower::ArchName(info.param.arch);
    });

TEST(Nvrtc, PtxForAnOlderArchIsText) {
  const lower::LoweredKernel k = LowerProgram("causal", lower::Arch::kSm80);
  CompileOptions o;
  o.ptx = true;
  for (const auto& [role, e] : EntryExpressions(k.device_entries, 0, 128)) o.name_expressions.push_back(e);
  auto m = CompileWithNvrtc(k.cuda_source, "causal.cu", o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->ptx);
  EXPECT_THAT(m->image, HasSubstr(".target sm_80"));
  EXPECT_THAT(m->image, HasSubstr("mma.sync.aligned.m16n8k16"));
}

// sm_90 means the arch-specific target 90a: the Hopper expert's setmaxnreg and wgmma exist only
// there (ptxas refuses them for plain sm_90).
TEST(Nvrtc, Sm90CompilesForTheArchSpecificTarget) {
  const std::string source =
      "extern \"C\" __global__ void f() {\n"
      "  asm volatile(\"setmaxnreg.inc.sync.aligned.u32 240;\\n\");\n"
      "}\n";
  CompileOptions o;
  o.arch = lower::Arch::kSm90;
  o.name_expressions = {"f"};
  auto cubin = CompileWithNvrtc(source, "setmaxnreg.cu", o);
  ASSERT_TRUE(cubin.ok()) << cubin.status();
  EXPECT_FALSE(cubin->ptx);
  o.ptx = true;
  auto ptx = CompileWithNvrtc(source, "setmaxnreg.cu", o);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  EXPECT_THAT(ptx->image, HasSubstr(".target sm_90a"));
}

TEST(Nvrtc, CompileErrorsCarryTheFileAndLine) {
  auto m = CompileWithNvrtc("__global__ void f() { undeclared_thing(); }\n", "broken.cu", {});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("broken.cu(1)"));
  EXPECT_THAT(m.status().message(), HasSubstr("undeclared_thing"));
}

TEST(Nvrtc, UnknownNameExpressionIsAnError) {
  CompileOptions o;
  o.name_expressions = {"no_such_kernel"};
  auto m = CompileWithNvrtc("__global__ void f() {}\n", "f.cu", o);
  EXPECT_FALSE(m.ok());
}

TEST(Nvrtc, MissingCudaHeadersSayWhereTheyWereLookedFor) {
  CompileOptions o;
  o.cuda_home = "/nonexistent/cuda";
  auto m = CompileWithNvrtc("__global__ void f() {}\n", "f.cu", o);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(m.status().message(), HasSubstr("/nonexistent/cuda/include"));
  EXPECT_THAT(m.status().message(), HasSubstr("CUDA_HOME"));
}

}  // namespace
}  // namespace cubridge::gpu
