// Lift by LLM on a GPU (issue 6, point 5): a scripted model proposes base programs for the user
// kernel examples/lift/softcap_causal.cu, and only the one whose interpretation agrees with the
// compiled kernel is accepted. Skips, and says so, without a GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_replace.h"
#include "cuir/files/files.h"
#include "tests/llm/scripted_server.h"
#include "tests/propose/propose_test_util.h"
#include "worker/gpu/driver.h"
#include "worker/gpu/user_kernel.h"

namespace cubridge::gpu {
namespace {

using cubridge::testing::Fenced;
using cubridge::testing::Say;
using cubridge::testing::ScriptedLlmServer;
using cubridge::testing::TestSettings;
using cubridge::testing::UserMessages;
using ::testing::HasSubstr;

const std::string kExample = std::string(CUBRIDGE_SOURCE_ROOT) + "/examples/lift/softcap_causal";

std::string Read(const std::string& path) {
  auto text = files::ReadFile(path);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

class GpuLift : public ::testing::Test {
 protected:
  void SetUp() override {
    auto device = ProbeDevice(0);
    if (!device.ok()) GTEST_SKIP() << "no usable GPU: " << device.status().message();
    arch_ = device->cc_major >= 9 ? lower::Arch::kSm90 : lower::Arch::kSm80;
    AutotuneOptions o;
    o.lift_check = false;
    o.profile.enabled = false;
    tuner_ = std::make_unique<GpuAutotuner>(o);
  }

  propose::LiftOutcome Lift(const ScriptedLlmServer& server, int rounds, cuir::AttentionConfig c,
                            const std::string& source) {
    auto kernel = LoadUserKernel(kExample + ".cu", source);
    EXPECT_TRUE(kernel.ok()) << kernel.status();
    comparator_ = std::make_unique<UserKernelComparator>(tuner_.get(), *kernel, kExample + ".cu",
                                                         c, arch_);
    propose::LiftRequest r;
    r.kernel_path = kExample + ".cu";
    r.kernel_source = source;
    r.name = "softcap_causal";
    r.config = c;
    r.seed = 77;
    r.gpu = comparator_.get();
    return propose::LiftWithModel(TestSettings(server, rounds), r);
  }

  static cuir::AttentionConfig Config(int64_t d, cuir::DType dtype) {
    cuir::AttentionConfig c;
    c.batch = 2;
    c.heads_q = 4;
    c.heads_kv = 2;
    c.head_dim = d;
    c.dtype = dtype;
    c.seqlen_q = c.seqlen_kv = 200;
    return c;
  }

  lower::Arch arch_ = lower::Arch::kSm80;
  std::unique_ptr<GpuAutotuner> tuner_;
  std::unique_ptr<UserKernelComparator> comparator_;
};

TEST_F(GpuLift, OnlyTheProgramThatAgreesWithTheKernelIsAccepted) {
  const std::string good = Read(kExample + ".cuir");
  // Round 1 does not parse; round 2 forgets the softcap, which only the GPU comparison can tell;
  // round 3 is right.
  const std::string broken = absl::StrReplaceAll(good, {{"softmax.init", "softmax.init("}});
  const std::string no_cap = absl::StrReplaceAll(good, {{"    score_mod S = cap * tanh(score / cap)\n", ""}});
  ASSERT_NE(broken, good);
  ASSERT_NE(no_cap, good);
  ScriptedLlmServer server({Say(Fenced(broken)), Say(Fenced(no_cap)), Say(Fenced(good))});
  propose::LiftOutcome o = Lift(server, 4, Config(128, cuir::DType::kBF16), Read(kExample + ".cu"));
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.accepted_round, 3);
  EXPECT_EQ(server.request_count(), 3);
  EXPECT_TRUE(o.gpu_check.value("passed", false)) << o.gpu_check.dump(2);
  EXPECT_THAT(cuir::PrintProgram(o.program), HasSubstr("tanh"));
  const auto users = UserMessages(server);
  ASSERT_EQ(users.size(), 3u);
  EXPECT_THAT(users[1], HasSubstr("CuIR parser"));
  EXPECT_THAT(users[2], HasSubstr("GPU check"));
  EXPECT_THAT(users[2], ::testing::ContainsRegex("at \\[[0-9]+,[0-9]+,[0-9]+,[0-9]+\\] got [-0-9.e]+ want"))
      << users[2];
}

TEST_F(GpuLift, Fp16AndOtherHeadDimsAgreeToo) {
  const std::string good = Read(kExample + ".cuir");
  for (int64_t d : {64, 256}) {
    ScriptedLlmServer server({Say(Fenced(good))});
    propose::LiftOutcome o = Lift(server, 1, Config(d, cuir::DType::kFP16), Read(kExample + ".cu"));
    EXPECT_TRUE(o.status.ok()) << "hdim " << d << ": " << o.status;
  }
}

TEST_F(GpuLift, AKernelThatCrashesEndsTheLiftWithoutBlamingTheModel) {
  std::string source = Read(kExample + ".cu");
  const std::string at = "  if (row >= p.seqlen_q) return;";
  ASSERT_NE(source.find(at), std::string::npos);
  source = absl::StrReplaceAll(source, {{at, at + "\n  if (row == 7) __trap();"}});
  const std::string good = Read(kExample + ".cuir");
  ScriptedLlmServer server({Say(Fenced(good)), Say(Fenced(good))});
  propose::LiftOutcome o = Lift(server, 2, Config(128, cuir::DType::kBF16), source);
  EXPECT_EQ(o.status.code(), absl::StatusCode::kFailedPrecondition) << o.status;
  EXPECT_THAT(o.status.message(), HasSubstr("the user's kernel could not be run"));
  EXPECT_EQ(server.request_count(), 1) << "the model was asked to fix the user's kernel";
}

TEST_F(GpuLift, AKernelThatDoesNotCompileIsReportedBeforeAnyQuestion) {
  std::string source = absl::StrReplaceAll(Read(kExample + ".cu"), {{"m_new = fmaxf(m, s);", "m_new = fmaxf(m, s)"}});
  ScriptedLlmServer server({Say(Fenced(Read(kExample + ".cuir")))});
  propose::LiftOutcome o = Lift(server, 1, Config(128, cuir::DType::kBF16), source);
  EXPECT_EQ(o.status.code(), absl::StatusCode::kInvalidArgument) << o.status;
  EXPECT_THAT(o.status.message(), HasSubstr("does not compile"));
  EXPECT_THAT(o.status.message(), HasSubstr("softcap_causal.cu("));
  EXPECT_EQ(server.request_count(), 0);
}

}  // namespace
}  // namespace cubridge::gpu
