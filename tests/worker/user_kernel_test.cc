// A user's kernel as `cubridge-cli lift` compiles it: the launcher ABI put in front, its two entry
// points found, every dtype and head dim instantiated by NVRTC (no GPU needed), and compiler
// errors reported at the user's own line numbers.
#include "worker/gpu/user_kernel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_replace.h"
#include "cuir/files/files.h"
#include "worker/gpu/module.h"
#include "worker/gpu/nvrtc.h"

namespace cubridge::gpu {
namespace {

using ::testing::HasSubstr;

const std::string kPath = std::string(CUBRIDGE_SOURCE_ROOT) + "/examples/lift/softcap_causal.cu";

std::string Example() {
  auto text = files::ReadFile(kPath);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

absl::StatusOr<CompiledModule> Compile(const lower::LoweredKernel& k, lower::Arch arch, int dtype,
                                       int head_dim) {
  CompileOptions o;
  o.arch = arch;
  for (const auto& [role, e] : EntryExpressions(k.device_entries, dtype, head_dim)) {
    o.name_expressions.push_back(e);
  }
  return CompileWithNvrtc(k.cuda_source, "softcap_causal.cu", o);
}

TEST(UserKernel, TheExampleCompilesForEveryDtypeHeadDimAndArch) {
  auto k = LoadUserKernel(kPath, Example());
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->device_entries.size(), 2u);
  for (lower::Arch arch : {lower::Arch::kSm80, lower::Arch::kSm90}) {
    for (auto [dtype, head_dim] : {std::pair{0, 64}, {0, 128}, {0, 256}, {1, 64}, {1, 128}, {1, 256}}) {
      auto m = Compile(*k, arch, dtype, head_dim);
      ASSERT_TRUE(m.ok()) << m.status();
      ASSERT_EQ(m->symbols.size(), 2u);
      EXPECT_EQ(m->symbols.at("softcap_causal_plan"), "softcap_causal_plan");
    }
  }
}

TEST(UserKernel, CompilerErrorsPointAtTheUsersOwnLines) {
  std::string source = Example();
  const std::string at = "  const int kv_h = h / (p.heads_q / p.heads_kv);";
  const size_t pos = source.find(at);
  ASSERT_NE(pos, std::string::npos);
  int line = 1;
  for (size_t i = 0; i < pos; ++i) line += source[i] == '\n';
  source.replace(pos, at.size(), "  const int kv_h = h / heads_per_group;");
  auto k = LoadUserKernel(kPath, source);
  ASSERT_TRUE(k.ok()) << k.status();
  auto m = Compile(*k, lower::Arch::kSm80, 0, 128);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("softcap_causal.cu(" + std::to_string(line) + ")"));
  EXPECT_THAT(m.status().message(), HasSubstr("heads_per_group"));
}

TEST(UserKernel, EntryPointsAreRequiredAndLimitedToPlanAndAttention) {
  const std::string source = Example();
  auto no_plan = LoadUserKernel("k.cu", absl::StrReplaceAll(source, {{"@cuir-entry plan", "plan:"}}));
  EXPECT_THAT(no_plan.status().message(), HasSubstr("k.cu: no `// @cuir-entry plan NAME` line"));
  auto extra = LoadUserKernel("k.cu", "// @cuir-entry classify c\n" + source);
  EXPECT_THAT(extra.status().message(), HasSubstr("only plan and attention entries"));
}

}  // namespace
}  // namespace cubridge::gpu
