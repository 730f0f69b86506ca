// The LLM proposers against a real local chat-completions server replaying scripted replies: every
// proposal goes through the parser, the validator, the CPU verifier and the lowering, and every
// rejection goes back to the model with its exact error.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_replace.h"
#include "cuir/pipeline/adapt.h"
#include "cuir/files/files.h"
#include "cuir/pipeline/stages.h"
#include "cuir/propose/llm_proposer.h"
#include "cuir/propose/prompt.h"
#include "cuir/llm/transcript.h"
#include "tests/llm/scripted_server.h"
#include "tests/propose/propose_test_util.h"
#include "tests/sdk/test_util.h"

namespace cubridge::propose {
namespace {

using testing::ScriptedLlmServer;
using testing::Fenced;
using testing::kKey;
using testing::TestSettings;
using testing::UserMessages;
using testing::Say;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Example(const std::string& name) {
  return std::string(CUBRIDGE_SOURCE_ROOT) + "/examples/specs/" + name;
}

cuir::AttentionConfig SmallConfig() {
  cuir::AttentionConfig c;
  c.heads_q = 2;
  c.heads_kv = 2;
  c.head_dim = 64;
  c.seqlen_q = c.seqlen_kv = 96;
  return c;
}

// What the rules make of a spec: a correct reply for an LLM that does its job.
std::string RulesProgram(const std::string& spec_file) {
  auto spec = spec::LoadSpecFile(Example(spec_file));
  EXPECT_TRUE(spec.ok()) << spec.status();
  std::string detail;
  auto base = pipeline::LiftStage(lower::Arch::kSm80, &detail);
  EXPECT_TRUE(base.ok()) << base.status();
  auto t = pipeline::TransferStage(*base, *spec, SmallConfig(), &detail);
  EXPECT_TRUE(t.ok()) << t.status();
  return cuir::PrintProgram(t->program);
}

class LlmProposerTest : public ::testing::Test {
 protected:
  // The whole local pipeline (GPU off) with the given proposer.
  absl::StatusOr<pipeline::AdaptResult> Adapt(pipeline::Proposer* proposer, const std::string& spec,
                                              nlohmann::json* transcript) {
    pipeline::AdaptOptions o;
    o.spec_path = Example(spec);
    o.config = SmallConfig();
    o.out_dir = dir_ / "out";
    o.cache_dir = dir_ / "cache";
    o.gpu_mode = pipeline::GpuMode::kOff;
    o.proposer = proposer;
    o.transcript = transcript;
    return pipeline::Adapt(o);
  }

  testing::TempDir dir_;
};

TEST_F(LlmProposerTest, ACorrectProgramOnTheFirstTryIsVerifiedLoweredAndWritten) {
  ScriptedLlmServer server({Say(Fenced(RulesProgram("causal.py")))});
  LlmProposer proposer(TestSettings(server));
  nlohmann::json transcript;
  auto r = Adapt(&proposer, "causal.py", &transcript);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(server.request_count(), 1);
  EXPECT_EQ(r->report["proposer"], "llm");
  EXPECT_EQ(r->report["transfer"][0]["rule"], "llm.transfer");
  EXPECT_TRUE(r->report["verification"]["passed"].get<bool>());
  EXPECT_EQ(r->report["llm"]["requests"], 1);
  EXPECT_EQ(r->report["llm"]["prompt_tokens"], 100);
  EXPECT_TRUE(std::filesystem::exists(dir_ / "out/kernel.cu"));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "out/transcript.json"));
  // The task message carries what the model needs: the base program, the spec, the config.
  const auto body = server.requests()[0].body;
  EXPECT_EQ(body["model"], "scripted-model");
  EXPECT_EQ(body["messages"][0]["role"], "system");
  EXPECT_THAT(body["messages"][0]["content"].get<std::string>(), HasSubstr("### softmax.online"))
      << "the CuIR reference is not in the system prompt";
  const std::string task = body["messages"][1]["content"];
  EXPECT_THAT(task, HasSubstr("expert \"fa2_sm80\""));
  EXPECT_THAT(task, HasSubstr("return q_idx >= kv_idx"));
  EXPECT_THAT(task, HasSubstr("\"head_dim\":64"));
  ASSERT_EQ(transcript.size(), 3u);  // system, task, the accepted reply
  EXPECT_EQ(transcript[2]["verdict"], "accepted");
}

TEST_F(LlmProposerTest, ASyntaxErrorGoesBackWithItsLineAndColumnAndTheFixIsAccepted) {
  const std::string good = RulesProgram("causal.py");
  // Line 3 of the program loses the `=` of its first param: a parse error there.
  std::string broken = good;
  const size_t param = broken.find("param BLOCK_M: int = 128");
  ASSERT_NE(param, std::string::npos) << good;
  broken.replace(param, 24, "param BLOCK_M: int 128");
  ScriptedLlmServer server({Say(Fenced(broken)), Say(Fenced(good, "Fixed."))});
  LlmProposer proposer(TestSettings(server));
  nlohmann::json transcript;
  auto r = Adapt(&proposer, "causal.py", &transcript);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(server.request_count(), 2);
  const auto users = UserMessages(server);
  ASSERT_EQ(users.size(), 2u);
  // "proposal.cuir:LINE:COL:" of the broken line.
  int line = 1;
  for (size_t i = 0; i < param; ++i) line += broken[i] == '\n';
  EXPECT_THAT(users[1], HasSubstr("CuIR parser"));
  EXPECT_THAT(users[1], HasSubstr("proposal.cuir:" + std::to_string(line) + ":"));
  EXPECT_THAT(transcript[2]["verdict"].get<std::string>(), HasSubstr("CuIR parser"));
  EXPECT_EQ(transcript.back()["verdict"], "accepted");
  EXPECT_THAT(r->report["transfer"][0]["detail"].get<std::string>(), HasSubstr("round 2 of 3"));
}

TEST_F(LlmProposerTest, AWrongMaskIsCaughtByTheInterpreterWithItsWorstPositions) {
  const std::string good = RulesProgram("causal.py");
  std::string wrong = absl::StrReplaceAll(good, {{"q_idx >= kv_idx", "q_idx > kv_idx"}});
  ASSERT_NE(wrong, good) << good;
  ScriptedLlmServer server({Say(Fenced(wrong)), Say(Fenced(good))});
  LlmProposer proposer(TestSettings(server));
  nlohmann::json transcript;
  auto r = Adapt(&proposer, "causal.py", &transcript);
  ASSERT_TRUE(r.ok()) << r.status();
  const auto users = UserMessages(server);
  ASSERT_EQ(users.size(), 2u);
  EXPECT_THAT(users[1], HasSubstr("verifier"));
  EXPECT_THAT(users[1], HasSubstr("worst mismatches"));
  EXPECT_THAT(users[1], ::testing::ContainsRegex("at \\[[0-9]+,[0-9]+,[0-9]+,[0-9]+\\] got [-0-9.e]+ want"))
      << users[1];
}

TEST_F(LlmProposerTest, GarbageEveryRoundFailsClearlyAndWritesNothing) {
  ScriptedLlmServer server({Say("I cannot help with that."), Say("```python\nprint(1)\n```"),
                            Say("cuir 1\nkernel {")});
  LlmProposer proposer(TestSettings(server, 3));
  nlohmann::json transcript;
  auto r = Adapt(&proposer, "causal.py", &transcript);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("transfer: llm proposer (scripted-model)"));
  EXPECT_THAT(r.status().message(), HasSubstr("no verified program after 3 rounds"));
  EXPECT_EQ(server.request_count(), 3);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out")) << "a failed job wrote outputs";
  EXPECT_FALSE(std::filesystem::exists(dir_ / "cache")) << "a failed job was cached";
  // The conversation survives the failure: 2 setup turns, 3 replies, 2 feedback messages.
  EXPECT_EQ(transcript.size(), 7u);
  EXPECT_THAT(llm::RenderTranscript(transcript), HasSubstr("rejected by the reply format check"));
}

TEST_F(LlmProposerTest, ASlowEndpointTimesOut) {
  testing::ScriptedReply slow = Say(Fenced(RulesProgram("causal.py")));
  slow.delay = std::chrono::milliseconds(1500);
  ScriptedLlmServer server({slow, slow});
  LlmSettings s = TestSettings(server);
  s.chat.timeout = std::chrono::milliseconds(300);
  s.chat.max_retries = 1;
  LlmProposer proposer(s);
  auto r = Adapt(&proposer, "causal.py", nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("transfer: llm proposer"));
}

TEST_F(LlmProposerTest, A429IsRetriedAndTheJobSucceeds) {
  ScriptedLlmServer server({testing::HttpError(429, "slow down"), Say(Fenced(RulesProgram("causal.py")))});
  LlmProposer proposer(TestSettings(server));
  auto r = Adapt(&proposer, "causal.py", nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(server.request_count(), 2);
  EXPECT_EQ(r->report["llm"]["requests"], 2);
}

TEST_F(LlmProposerTest, HybridOnACoveredSpecMakesNoCall) {
  ScriptedLlmServer server({});
  HybridProposer proposer(TestSettings(server));
  nlohmann::json transcript;
  auto r = Adapt(&proposer, "sliding_window.py", &transcript);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(server.request_count(), 0);
  EXPECT_EQ(r->report["proposer"], "rules");
  EXPECT_TRUE(transcript.empty());
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out/transcript.json"));
}

TEST_F(LlmProposerTest, TheKeyIsSentButNeverStoredOrPrinted) {
  ScriptedLlmServer server({Say("no program"), Say(Fenced(RulesProgram("causal.py")))});
  const std::string key_file = testing::WriteFile(dir_ / "key", kKey + "\n");
  const std::string transcript_file = dir_ / "transcript.json";
  const std::string cmd = std::string(CUBRIDGE_CLI) + " adapt " + Example("causal.py") +
                          " --local --gpu off --no-cache --heads-q 2 --heads-kv 2 --head-dim 64 "
                          "--seqlen 96 -o " + (dir_ / "cli-out") + " --proposer llm --llm-endpoint " +
                          server.endpoint() + " --llm-model scripted-model --llm-api-key-file " +
                          key_file + " --transcript " + transcript_file + " 2>&1";
  auto run = testing::RunCommand(cmd);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  ASSERT_EQ(server.request_count(), 2);
  EXPECT_EQ(server.requests()[0].authorization, "Bearer " + kKey);
  EXPECT_THAT(run.output, Not(HasSubstr(kKey)));
  for (const std::string& file : {transcript_file, dir_ / "cli-out/report.json",
                                 dir_ / "cli-out/transcript.json", dir_ / "cli-out/kernel.cu"}) {
    EXPECT_TRUE(std::filesystem::exists(file)) << file;
    EXPECT_THAT(testing::ReadFile(file), Not(HasSubstr(kKey))) << file;
  }
  // The transcript command renders what was written.
  auto shown = testing::RunCommand(std::string(CUBRIDGE_CLI) + " transcript " + transcript_file);
  EXPECT_EQ(shown.exit_code, 0) << shown.output;
  EXPECT_THAT(shown.output, HasSubstr("round 1"));
  EXPECT_THAT(shown.output, HasSubstr("rejected by the reply format check"));
}

// The end-to-end case: a variant only a reference function expresses (softmax with an
// attention sink) goes rules -> not covered -> the model, whose program is verified against the
// reference itself and lowered.
TEST_F(LlmProposerTest, TheSinkSpecGoesThroughTheModelAndIsVerifiedAgainstItsReference) {
  const std::string root = CUBRIDGE_SOURCE_ROOT;
  const std::string program = testing::ReadFile(root + "/examples/llm/sink_attention.cuir");
  // First a program that forgets the sink: the reference catches it (its LSE differs).
  std::string no_sink = absl::StrReplaceAll(program, {{"epilogue sink sink", "epilogue"}});
  ASSERT_NE(no_sink, program);
  ScriptedLlmServer server({Say(Fenced(no_sink)), Say(Fenced(program))});
  HybridProposer proposer(TestSettings(server));
  pipeline::AdaptOptions o;
  o.spec_path = root + "/examples/llm/sink_attention.py";
  o.config = SmallConfig();
  o.config.heads_q = 4;
  o.config.heads_kv = 2;
  o.out_dir = dir_ / "out";
  o.cache_dir = dir_ / "cache";
  o.gpu_mode = pipeline::GpuMode::kOff;
  o.proposer = &proposer;
  nlohmann::json transcript;
  o.transcript = &transcript;
  auto r = pipeline::Adapt(o);
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << llm::RenderTranscript(transcript);
  EXPECT_EQ(server.request_count(), 2);
  EXPECT_EQ(r->report["proposer"], "llm");
  EXPECT_TRUE(r->report["verification"]["passed"].get<bool>());
  const std::string task = server.requests()[0].body["messages"][1]["content"];
  EXPECT_THAT(task, HasSubstr("not covered by the rules: reference(q, k, v)"));
  EXPECT_THAT(task, HasSubstr("sink = 0.5"));
  const auto users = UserMessages(server);
  ASSERT_EQ(users.size(), 2u);
  EXPECT_THAT(users[1], HasSubstr("LSE"));
  const std::string cuda = testing::ReadFile(dir_ / "out/kernel.cu");
  EXPECT_THAT(cuda, HasSubstr("add_sink")) << "the sink was not lowered";
  // The backward is the rules' only (no model writes backward programs yet): the forward is
  // served, and the report says why there is no backward.
  const auto& backward = r->report["backward"];
  EXPECT_FALSE(backward.value("available", true)) << backward.dump();
  EXPECT_THAT(backward.value("reason", ""),
              HasSubstr("transfer: not covered by the rules: reference(q, k, v)"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out/kernel_bwd.cu"));
}

// A job that requires the backward of a spec only the model covers fails, saying why, and
// writes nothing.
TEST_F(LlmProposerTest, RequiringABackwardThePipelineCannotMakeFailsSayingWhy) {
  const std::string root = CUBRIDGE_SOURCE_ROOT;
  ScriptedLlmServer server(
      {Say(Fenced(testing::ReadFile(root + "/examples/llm/sink_attention.cuir")))});
  HybridProposer proposer(TestSettings(server));
  pipeline::AdaptOptions o;
  o.spec_path = root + "/examples/llm/sink_attention.py";
  o.config = SmallConfig();
  o.out_dir = dir_ / "out";
  o.cache_dir = dir_ / "cache";
  o.gpu_mode = pipeline::GpuMode::kOff;
  o.proposer = &proposer;
  o.backward = pipeline::BackwardMode::kRequire;
  auto r = pipeline::Adapt(o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("not covered by the rules: reference(q, k, v)"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out"));
}

TEST(Prompt, ProgramsAreTakenFromTheLastCuirBlock) {
  EXPECT_EQ(*ExtractProgram("a\n```cuir\ncuir 1\nX\n```\nb\n```cuir\ncuir 1\nY\n```"), "cuir 1\nY\n");
  EXPECT_EQ(*ExtractProgram("```\ncuir 1\nZ\n```"), "cuir 1\nZ\n");
  EXPECT_EQ(*ExtractProgram("cuir 1\nW\n"), "cuir 1\nW\n");
  EXPECT_EQ(ExtractProgram("```python\nx\n```").status().code(), absl::StatusCode::kNotFound);
}

TEST(MakeProposer, NamesAndMissingEndpointAreClearErrors) {
  EXPECT_TRUE(MakeProposer("rules", {}).ok());
  auto unknown = MakeProposer("gpt", {});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("rules"));
  auto no_endpoint = MakeProposer("llm", {});
  EXPECT_EQ(no_endpoint.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_endpoint.status().message(), HasSubstr("--llm-endpoint"));
}

}  // namespace
}  // namespace cubridge::propose
