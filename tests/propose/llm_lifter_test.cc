// Lift by LLM on a machine without a GPU, against a real local chat-completions server replaying
// scripted replies: every CPU check (reply format, parser, validator, lift contract, interpreter)
// sends its exact error back, and nothing is ever accepted without the GPU comparison
// (tests/gpu/lift_llm_test.cc runs that part).
#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_replace.h"
#include "cuir/files/files.h"
#include "cuir/propose/llm_lifter.h"
#include "cuir/llm/transcript.h"
#include "tests/llm/scripted_server.h"
#include "tests/propose/propose_test_util.h"
#include "tests/sdk/test_util.h"

namespace cubridge::propose {
namespace {

using testing::Fenced;
using testing::Say;
using testing::ScriptedLlmServer;
using testing::TestSettings;
using testing::UserMessages;
using ::testing::HasSubstr;

const std::string kKernel = std::string(CUBRIDGE_SOURCE_ROOT) + "/examples/lift/softcap_causal.cu";

std::string Read(const std::string& path) {
  auto text = files::ReadFile(path);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

// The example's accepted program: what a model that reads the kernel right would send.
std::string GoodProgram() {
  return Read(std::string(CUBRIDGE_SOURCE_ROOT) + "/examples/lift/softcap_causal.cuir");
}

LiftRequest Request() {
  LiftRequest r;
  r.kernel_path = kKernel;
  r.kernel_source = Read(kKernel);
  r.name = "softcap_causal";
  r.config.heads_q = 4;
  r.config.heads_kv = 2;
  r.config.head_dim = 64;
  r.config.seqlen_q = r.config.seqlen_kv = 96;
  return r;  // no GPU: the CPU checks only
}

int LineOf(const std::string& text, const std::string& what) {
  const size_t at = text.find(what);
  EXPECT_NE(at, std::string::npos) << what;
  int line = 1;
  for (size_t i = 0; i < at && i < text.size(); ++i) line += text[i] == '\n';
  return line;
}

TEST(LlmLift, TheTaskMessageCarriesTheKernelTheNameAndAnExampleOfTheForm) {
  ScriptedLlmServer server({Say(Fenced(GoodProgram()))});
  LiftOutcome o = LiftWithModel(TestSettings(server), Request());
  ASSERT_EQ(server.request_count(), 1);
  const auto body = server.requests()[0].body;
  EXPECT_THAT(body["messages"][0]["content"].get<std::string>(), HasSubstr("lift proposer"));
  EXPECT_THAT(body["messages"][0]["content"].get<std::string>(), HasSubstr("### softmax.online"))
      << "the CuIR reference is not in the system prompt";
  const std::string task = body["messages"][1]["content"];
  EXPECT_THAT(task, HasSubstr("kCap = 4.0f")) << "the kernel source is not in the task";
  EXPECT_THAT(task, HasSubstr("expert \"fa2_sm80\"")) << "no example base program";
  EXPECT_THAT(task, HasSubstr("with `expert \"softcap_causal\"`"));
  EXPECT_THAT(task, HasSubstr("\"heads_kv\":2"));
}

TEST(LlmLift, ProposalsThatPassTheCpuChecksAreStillNotAcceptedWithoutAGpu) {
  ScriptedLlmServer server({Say(Fenced(GoodProgram()))});
  LiftOutcome o = LiftWithModel(TestSettings(server), Request());
  EXPECT_EQ(o.status.code(), absl::StatusCode::kFailedPrecondition) << o.status;
  EXPECT_THAT(o.status.message(), HasSubstr("round 1 passed the CPU checks"));
  EXPECT_THAT(o.status.message(), HasSubstr("only a comparison with the compiled kernel on a GPU"));
  EXPECT_TRUE(o.program.stmts.empty()) << "a program was accepted without the GPU";
  EXPECT_EQ(o.accepted_round, 0);
  EXPECT_EQ(server.request_count(), 1) << "asked again although the proposal passed";
  EXPECT_EQ(o.usage["requests"], 1);
}

TEST(LlmLift, EachCpuCheckSendsItsExactErrorBack) {
  const std::string good = GoodProgram();
  // 1: a parse error (the param loses its `=`); 2: another expert's name (the contract);
  // 3: a head mapping past the KV heads (the interpreter, at run time); 4: the right program.
  std::string broken = absl::StrReplaceAll(good, {{"param BLOCK_N: int = 64", "param BLOCK_N: int 64"}});
  std::string other = absl::StrReplaceAll(good, {{"expert \"softcap_causal\"", "expert \"fa2_sm80\""}});
  std::string past = absl::StrReplaceAll(good, {{"let kv_h: int = h // (heads_q // heads_kv)",
                                                  "let kv_h: int = h"}});
  ASSERT_NE(broken, good);
  ASSERT_NE(other, good);
  ASSERT_NE(past, good);
  ScriptedLlmServer server({Say(Fenced(broken)), Say(Fenced(other)), Say(Fenced(past)),
                            Say(Fenced(good))});
  LiftOutcome o = LiftWithModel(TestSettings(server, 4), Request());
  EXPECT_THAT(o.status.message(), HasSubstr("round 4 passed the CPU checks")) << o.status;
  const auto users = UserMessages(server);
  ASSERT_EQ(users.size(), 4u);
  EXPECT_THAT(users[1], HasSubstr("CuIR parser"));
  EXPECT_THAT(users[1], HasSubstr("proposal.cuir:" +
                                  std::to_string(LineOf(broken, "param BLOCK_N: int 64")) + ":"));
  EXPECT_THAT(users[2], HasSubstr("lift contract"));
  EXPECT_THAT(users[2], HasSubstr("expert \"softcap_causal\""));
  EXPECT_THAT(users[3], HasSubstr("CuIR interpreter"));
  EXPECT_THAT(users[3], HasSubstr("proposal.cuir:"));
  EXPECT_THAT(llm::RenderTranscript(o.transcript), HasSubstr("rejected by the lift contract"));
}

TEST(LlmLift, GarbageEveryRoundFailsAfterTheLastRound) {
  ScriptedLlmServer server({Say("no idea"), Say("```cuda\n__global__ void f() {}\n```"),
                            Say("cuir 1\nkernel x {")});
  LiftOutcome o = LiftWithModel(TestSettings(server, 3), Request());
  EXPECT_EQ(o.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(o.status.message(), HasSubstr("lift: llm (scripted-model)"));
  EXPECT_THAT(o.status.message(), HasSubstr("no verified program after 3 rounds"));
  EXPECT_EQ(server.request_count(), 3);
  EXPECT_EQ(o.transcript.size(), 7u);  // system, task, 3 replies, 2 feedback messages
}

TEST(LlmLift, BuffersAreOutsideTheLiftContract) {
  std::string with_buffer = absl::StrReplaceAll(
      GoodProgram(), {{"  const cap: float = 4.0\n", "  const cap: float = 4.0\n  buffer doc: int32[seqlen_kv]\n"}});
  ScriptedLlmServer server({Say(Fenced(with_buffer))});
  LiftOutcome o = LiftWithModel(TestSettings(server, 1), Request());
  EXPECT_EQ(o.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(o.status.message(), HasSubstr("receives no buffers through the launcher ABI"));
}

// The CLI: no GPU here, so `lift` stops before asking anything unless --cpu-only says to ask.
class LiftCli : public ::testing::Test {
 protected:
  std::string Cli(const ScriptedLlmServer& server, const std::string& kernel,
                  const std::string& extra) {
    return std::string(CUBRIDGE_CLI) + " lift " + kernel + " --out " + (dir_ / "out") +
           " --head-dim 64 --seqlen 96 --llm-endpoint " + server.endpoint() +
           " --llm-model scripted-model --llm-max-rounds 2 " + extra;
  }
  testing::TempDir dir_;
};

TEST_F(LiftCli, WithoutAGpuItFailsBeforeAskingTheModel) {
  ScriptedLlmServer server({Say(Fenced(GoodProgram()))});
  auto run = testing::RunCommand(Cli(server, kKernel, ""));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("accepted only when it agrees with the compiled kernel on a GPU"));
  EXPECT_EQ(server.request_count(), 0);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out"));
}

TEST_F(LiftCli, AKernelWithoutEntryPointsIsRefusedWithItsPath) {
  const std::string bad = testing::WriteFile(dir_ / "plain.cu", "__global__ void attn() {}\n");
  ScriptedLlmServer server({Say(Fenced(GoodProgram()))});
  auto run = testing::RunCommand(Cli(server, bad, "--cpu-only"));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("plain.cu: no `// @cuir-entry plan NAME` line"));
  EXPECT_EQ(server.request_count(), 0);
}

TEST_F(LiftCli, CpuOnlyAsksRunsTheCpuChecksKeepsTheTranscriptAndWritesNothingElse) {
  ScriptedLlmServer server({Say(Fenced(GoodProgram()))});
  const std::string transcript = dir_ / "t.json";
  auto run = testing::RunCommand(Cli(server, kKernel, "--cpu-only --transcript " + transcript));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("passed the CPU checks"));
  EXPECT_EQ(server.request_count(), 1);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out"));
  EXPECT_THAT(testing::ReadFile(transcript), HasSubstr("softcap_causal"));
}

TEST_F(LiftCli, FlagsOfSpecsAreRefused) {
  ScriptedLlmServer server({});
  auto run = testing::RunCommand(Cli(server, kKernel, "--cpu-only --param cap=3"));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_THAT(run.output, HasSubstr("a lifted kernel takes neither"));
}

}  // namespace
}  // namespace cubridge::propose
