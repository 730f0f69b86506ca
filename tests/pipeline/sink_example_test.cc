// examples/llm: the attention-sink reference spec and the CuIR program the LLM proposer is
// expected to write for it (the scripted LLM's correct reply in the proposer tests). The program
// parses, validates and passes the real CPU verifier against the spec's oracle; the same program
// without its sink fails; the rules report the spec not covered; and a reference returning O only
// is verified on O with the report saying that LSE was not checked.
#include <fstream>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cuir/ir/program.h"
#include "cuir/pipeline/stages.h"
#include "cuir/pipeline/verify.h"
#include "cuir/spec/spec.h"

namespace cubridge::pipeline {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Source(const std::string& relative) {
  return std::string(CUBRIDGE_SOURCE_ROOT) + "/" + relative;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

cuir::Program ParseOrDie(const std::string& text, const std::string& path) {
  auto p = cuir::ParseProgram(text, path);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : cuir::Program{};
}

spec::Spec SinkSpec() {
  auto s = spec::LoadSpecFile(Source("examples/llm/sink_attention.py"));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : spec::Spec{};
}

cuir::Program SinkProgram() {
  const std::string path = Source("examples/llm/sink_attention.cuir");
  return ParseOrDie(ReadText(path), path);
}

// GQA, so the program's head mapping matters; small ragged shapes keep the interpreter quick.
cuir::AttentionConfig Config() {
  cuir::AttentionConfig c;
  c.batch = 2;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim = 64;
  c.seqlen_q = 130;
  c.seqlen_kv = 130;
  c.dtype = cuir::DType::kBF16;
  return c;
}

VerifyOptions Shapes() {
  VerifyOptions o;
  o.shapes = {{2, 130, 130}, {1, 65, 200}, {1, 200, 65}};
  return o;
}

VerifyReport Verify(const cuir::Program& program, const spec::Spec& spec) {
  auto r = VerifyOnCpu(program, spec, Config(), {}, 17, Shapes());
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : VerifyReport{};
}

TEST(SinkExample, ProgramIsCanonicalAndValid) {
  const std::string path = Source("examples/llm/sink_attention.cuir");
  const std::string text = ReadText(path);
  const cuir::Program p = ParseOrDie(text, path);
  EXPECT_TRUE(cuir::Validate(p).ok()) << cuir::Validate(p);
  // Printing drops only the comment lines: the file is in canonical form.
  std::string without_comments, line;
  std::istringstream in(text);
  while (std::getline(in, line)) {
    if (line.rfind("#", 0) != 0) without_comments += line + "\n";
  }
  EXPECT_EQ(cuir::PrintProgram(p), without_comments);
  const cuir::Stmt* epilogue = cuir::FindDecl(p, cuir::StmtKind::kEpilogue);
  ASSERT_NE(epilogue, nullptr);
  ASSERT_NE(epilogue->value, nullptr);
  EXPECT_EQ(cuir::PrintExpr(epilogue->value), "sink");
}

TEST(SinkExample, VerifiesAgainstTheReferenceOracle) {
  const VerifyReport r = Verify(SinkProgram(), SinkSpec());
  EXPECT_TRUE(r.passed) << r.FailureDetail();
  EXPECT_TRUE(r.lse_checked());
  ASSERT_EQ(r.shapes.size(), 3u);
  EXPECT_THAT(r.Summary(), HasSubstr("max |dLSE|"));
  EXPECT_EQ(r.ToJson()["lse_checked"], true);
}

TEST(SinkExample, OverriddenSinkNeedsTheMatchingConst) {
  spec::Spec spec = SinkSpec();
  ASSERT_TRUE(spec::OverrideParams(spec, {"sink=2.0"}).ok());
  EXPECT_FALSE(Verify(SinkProgram(), spec).passed);
  const std::string text = ReadText(Source("examples/llm/sink_attention.cuir"));
  std::string two = text;
  two.replace(two.find("const sink: float = 0.5"), 23, "const sink: float = 2.0");
  EXPECT_TRUE(Verify(ParseOrDie(two, "two.cuir"), spec).passed);
}

TEST(SinkExample, ProgramWithoutTheSinkFails) {
  cuir::Program p = SinkProgram();
  cuir::FindDecl(p, cuir::StmtKind::kEpilogue)->value = nullptr;
  ASSERT_TRUE(cuir::Validate(p).ok());
  const VerifyReport r = Verify(p, SinkSpec());
  EXPECT_FALSE(r.passed);
  // A sink of 0.5 takes a few percent of each row's mass: always visible in LSE (O's change may
  // stay within bf16's tolerance on long rows).
  for (const ShapeResult& s : r.shapes) EXPECT_GT(s.lse.violations, 0) << s.shape.seqlen_q;
  EXPECT_THAT(r.FailureDetail(), HasSubstr("LSE: "));
}

TEST(SinkExample, RulesDoNotCoverTheReference) {
  const cuir::Program base = ParseOrDie(ReadText(Source("cuir/experts/fa2_sm80/base.cuir")),
                                        "base.cuir");
  std::string detail;
  auto t = TransferStage(base, SinkSpec(), Config(), &detail);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(t.status().message()),
              HasSubstr("not covered by the rules: reference(q, k, v) at "));
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("sink_attention.py:21:5"));
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("--proposer llm"));
}

// A reference returning O only: the oracle has no LSE, so only O decides and reports say so.
constexpr char kOutputOnly[] =
    "def reference(q, k, v, scale: float):\n"
    "    g = q.size(1) // k.size(1)\n"
    "    s = q @ k.repeat_interleave(g, dim=1).transpose(-2, -1) * scale\n"
    "    return torch.softmax(s, dim=-1) @ v.repeat_interleave(g, dim=1)\n";

cuir::Program GqaProgram() {
  cuir::Program p = SinkProgram();
  cuir::FindDecl(p, cuir::StmtKind::kEpilogue)->value = nullptr;
  return p;
}

TEST(OutputOnlyReference, VerifiesOAndSaysLseWasNotChecked) {
  auto spec = spec::LoadSpecSource(kOutputOnly, "plain.py");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const VerifyReport r = Verify(GqaProgram(), *spec);
  EXPECT_TRUE(r.passed) << r.FailureDetail();
  EXPECT_FALSE(r.lse_checked());
  EXPECT_THAT(r.Summary(), HasSubstr("LSE not checked: the reference returns O only"));
  EXPECT_THAT(r.Summary(), Not(HasSubstr("dLSE")));
  const nlohmann::json j = r.ToJson();
  EXPECT_EQ(j["lse_checked"], false);
  EXPECT_EQ(j["shapes"][0]["lse_checked"], false);
  EXPECT_FALSE(j["shapes"][0].contains("lse"));
}

TEST(OutputOnlyReference, WrongOutputStillFailsAndTheDetailSaysLseWasNotChecked) {
  auto spec = spec::LoadSpecSource(kOutputOnly, "plain.py");
  ASSERT_TRUE(spec.ok()) << spec.status();
  // A sink that takes most of each row's mass is wrong for plain attention, visibly in O.
  std::string text = ReadText(Source("examples/llm/sink_attention.cuir"));
  text.replace(text.find("const sink: float = 0.5"), 23, "const sink: float = 6.0");
  const VerifyReport r = Verify(ParseOrDie(text, "big_sink.cuir"), *spec);
  EXPECT_FALSE(r.passed);
  EXPECT_THAT(r.FailureDetail(), HasSubstr("O: "));
  EXPECT_THAT(r.FailureDetail(), HasSubstr("LSE not checked: the reference returns O only"));
}

}  // namespace
}  // namespace cubridge::pipeline
