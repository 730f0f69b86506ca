// The backward constructs of CuIR (issue 29): every expert's base backward program parses, prints
// back to its own text and validates; each rule the validator keeps for backward programs fails
// an edited base with the statement's position and what to do.
#include <string>

#include "cuir/ir/program.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ir/ir_test_util.h"

namespace cubridge::cuir {
namespace {

using ::testing::HasSubstr;
using testing::ReadFileOrDie;
using testing::SourcePath;
using testing::WithoutCommentLines;

std::string BaseBwd(const std::string& expert = "fa2_sm80") {
  return ReadFileOrDie(SourcePath("cuir/experts/" + expert + "/base_bwd.cuir"));
}

std::string Replace(const std::string& text, const std::string& from, const std::string& to) {
  return testing::ReplaceOnce(text, from, to);
}

absl::Status ParseAndValidate(const std::string& text) {
  absl::StatusOr<Program> p = ParseProgram(text, "bwd.cuir");
  if (!p.ok()) return p.status();
  return Validate(*p);
}

TEST(BackwardIr, EveryExpertsBaseBackwardRoundTripsAndValidates) {
  for (const std::string expert : {"fa2_sm80", "fa3_sm90"}) {
    SCOPED_TRACE(expert);
    const std::string text = BaseBwd(expert);
    absl::StatusOr<Program> p = ParseProgram(text, "base_bwd.cuir");
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(PrintProgram(*p), WithoutCommentLines(text));
    absl::StatusOr<Program> again = ParseProgram(PrintProgram(*p));
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_TRUE(Equal(*p, *again));
    EXPECT_TRUE(Validate(*p).ok()) << Validate(*p);
    EXPECT_TRUE(IsBackward(*p));
  }
}

TEST(BackwardIr, ForwardBasesAreNotBackward) {
  for (const std::string expert : {"fa2_sm80", "fa3_sm90"}) {
    absl::StatusOr<Program> p =
        ParseProgram(ReadFileOrDie(SourcePath("cuir/experts/" + expert + "/base.cuir")));
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_FALSE(IsBackward(*p));
  }
}

TEST(BackwardIr, VariantStatementsRoundTrip) {
  std::string text = Replace(BaseBwd(), "  delta D\n",
                             "  buffer bias: float32[heads_q, 64]\n  table T = blocks(q_idx >= "
                             "kv_idx) transposed per h\n  delta D\n");
  text = Replace(text, "    P = softmax.recompute S\n",
                 "    score_mod S = score + bias[h, min(q_idx - kv_idx, 63)]\n"
                 "    mask S = q_idx >= kv_idx\n    P = softmax.recompute S\n");
  text = Replace(text, "    dk DS, Q",
                 "    buffer_grad bias[h, min(q_idx - kv_idx, 63)] += DS * 1.0\n"
                 "    score_grad DS = 1.0\n    dk DS, Q");
  absl::StatusOr<Program> p = ParseProgram(text);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(PrintProgram(*p), WithoutCommentLines(text));
  EXPECT_TRUE(Validate(*p).ok()) << Validate(*p);
  const Stmt* table = FindDecl(*p, StmtKind::kTable);
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->attr, "transposed");
}

struct BadEdit {
  const char* name;
  const char* from;
  const char* to;
  const char* message;
};

class BackwardIrRejects : public ::testing::TestWithParam<BadEdit> {};

TEST_P(BackwardIrRejects, WithPositionAndReason) {
  const BadEdit& e = GetParam();
  absl::Status s = ParseAndValidate(Replace(BaseBwd(), e.from, e.to));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("bwd.cuir:"));
  EXPECT_THAT(s.message(), HasSubstr(e.message));
}

INSTANTIATE_TEST_SUITE_P(
    Edits, BackwardIrRejects,
    ::testing::Values(
        BadEdit{"ForwardStatementInBackward", "  grad.epilogue\n", "  epilogue\n",
                "belongs to a forward program"},
        BadEdit{"NoGradEpilogue", "  grad.epilogue\n", "", "not followed by `grad.epilogue`"},
        BadEdit{"NoGradInit", "  grad.init\n", "", "`grad.init` must come before"},
        BadEdit{"GradInitBeforeK", "  load K = k[b, kv_h, kv_lo:kv_hi]\n  load V = v[b, kv_h, "
                                   "kv_lo:kv_hi]\n  grad.init\n",
                "  grad.init\n  load K = k[b, kv_h, kv_lo:kv_hi]\n  load V = v[b, kv_h, "
                "kv_lo:kv_hi]\n",
                "load it before"},
        BadEdit{"DvTakesRecomputedP", "    dv P, DO\n", "    dv S, DO\n",
                "must be a softmax.recompute result"},
        BadEdit{"DvTakesDO", "    dv P, DO\n", "    dv P, Q\n", "a tile loaded from do"},
        BadEdit{"DpOperands", "    DP = dp DO, V\n", "    DP = dp DO, K\n",
                "a tile loaded from v"},
        BadEdit{"SoftmaxGradDelta", "    DS = softmax.grad P, DP, D\n",
                "    DS = softmax.grad P, DP, P\n", "must be a delta"},
        BadEdit{"DkTakesQ", "    dk DS, Q scale", "    dk DS, K scale", "a tile loaded from q"},
        BadEdit{"DqTakesK", "    dq DS, K scale", "    dq DS, Q scale", "a tile loaded from k"},
        BadEdit{"ScoreGradAfterDk", "    dq DS, K scale softmax_scale\n",
                "    dq DS, K scale softmax_scale\n    score_grad DS = 2.0\n",
                "after its `dk`"},
        BadEdit{"ScoreModAfterRecompute", "    DP = dp DO, V\n",
                "    DP = dp DO, V\n    score_mod S = score * 2.0\n",
                "after its softmax.recompute"},
        BadEdit{"BufferGradOfUndeclared", "    dk DS, Q",
                "    buffer_grad bias[h] += DS * 1.0\n    dk DS, Q", "not declared"},
        BadEdit{"SoftmaxInitInBackward", "  grad.init\n", "  softmax.init\n",
                "belongs to a forward program"},
        BadEdit{"DeltaInTheLoop", "    DS = softmax.grad P, DP, D\n",
                "    delta E\n    DS = softmax.grad P, DP, D\n", "not allowed inside"},
        BadEdit{"UnknownTensor", "load DO = do[", "load DO = dq[", "expected an input tensor"}),
    [](const ::testing::TestParamInfo<BadEdit>& info) { return std::string(info.param.name); });

TEST(BackwardIr, IntBuffersHaveNoGradient) {
  std::string text = Replace(BaseBwd(), "  delta D\n", "  buffer doc: int32[seqlen_q]\n  delta D\n");
  text = Replace(text, "    dk DS, Q", "    buffer_grad doc[q_idx] += DS * 1.0\n    dk DS, Q");
  EXPECT_THAT(ParseAndValidate(text).message(), HasSubstr("have no gradient"));
}

TEST(BackwardIr, ForwardProgramsDoNotLoadDo) {
  std::string text = ReadFileOrDie(SourcePath("cuir/experts/fa2_sm80/base.cuir"));
  text = Replace(text, "  softmax.init\n", "  load DO = do[b, h, q_lo:q_hi]\n  softmax.init\n");
  absl::Status s = ParseAndValidate(text);
  EXPECT_THAT(s.message(), HasSubstr("only a backward program"));
}

TEST(BackwardIr, BufferGradAfterScoreGradIsRejected) {
  std::string text = Replace(BaseBwd(), "  delta D\n", "  buffer slope: float32[heads_q]\n  delta D\n");
  text = Replace(text, "    dk DS, Q",
                 "    score_grad DS = 1.0\n    buffer_grad slope[h] += DS * 2.0\n    dk DS, Q");
  absl::Status s = ParseAndValidate(text);
  EXPECT_THAT(s.message(), HasSubstr("`buffer_grad` after the `score_grad`"));
}

}  // namespace
}  // namespace cubridge::cuir
