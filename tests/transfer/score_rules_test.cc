// score.inline: the score modification goes right after the qk it modifies, before any mask
// (FlexAttention applies score_mod to the scaled score, then masks).
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/transfer/transfer_test_util.h"

namespace cubridge::transfer::testing {
namespace {

using cuir::StmtKind;

VariantSpec Softcap() {
  VariantSpec spec;
  spec.score = E("cap * tanh(score / cap)");
  spec.consts.push_back({"cap", cuir::Type::kFloat, cuir::FloatLit(20.0), {}});
  return spec;
}

size_t IndexOf(const cuir::Stmt& loop, StmtKind kind) {
  for (size_t i = 0; i < loop.body.size(); ++i) {
    if (loop.body[i].kind == kind) return i;
  }
  return loop.body.size();
}

TEST(ScoreInline, SoftcapFollowsTheQk) {
  absl::StatusOr<TransferResult> r = TransferOnBase(Softcap());
  ASSERT_TRUE(r.ok()) << r.status();
  const cuir::Stmt& loop = KvLoop(r->program);
  size_t qk = IndexOf(loop, StmtKind::kQK);
  ASSERT_LT(qk + 1, loop.body.size());
  const cuir::Stmt& mod = loop.body[qk + 1];
  EXPECT_EQ(mod.kind, StmtKind::kScoreMod);
  EXPECT_EQ(mod.operands, std::vector<std::string>{loop.body[qk].name});
  EXPECT_TRUE(cuir::Equal(mod.value, E("cap * tanh(score / cap)")));
  ASSERT_NE(cuir::FindDecl(r->program, StmtKind::kConst, "cap"), nullptr);
  EXPECT_TRUE(Applied(*r, "score.inline"));
  ExpectValidRoundTrip(r->program);
}

TEST(ScoreInline, MaskComesAfterTheScoreMod) {
  for (const char* mask : {"q_idx >= kv_idx", "(q_idx + kv_idx) % 2 == 0"}) {  // analytic, table
    VariantSpec spec = MaskSpec(mask);
    spec.score = E("score + (kv_idx - q_idx) * exp2(-8.0 * float(h + 1) / float(heads_q))");
    absl::StatusOr<TransferResult> r = TransferOnBase(spec);
    ASSERT_TRUE(r.ok()) << r.status();
    const cuir::Stmt& loop = KvLoop(r->program);
    size_t qk = IndexOf(loop, StmtKind::kQK);
    EXPECT_EQ(IndexOf(loop, StmtKind::kScoreMod), qk + 1) << mask;
    EXPECT_EQ(IndexOf(loop, StmtKind::kMask), qk + 2) << mask;
    ExpectValidRoundTrip(r->program);
  }
}

TEST(ScoreInline, BufferReadAtAPositionIsCovered) {
  VariantSpec spec;
  spec.score = E("score + float(bias[kv_idx])");
  spec.buffers.push_back({"bias", cuir::TensorDType::kInt32, {E("seqlen_kv")}, {}});
  absl::StatusOr<TransferResult> r = TransferOnBase(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(Applied(*r, "score.inline"));
  ExpectValidRoundTrip(r->program);
}

TEST(ScoreInline, BufferReadAtAScoreIndexIsNotCovered) {
  const std::string text = "score + float(bias[int(score)])";
  VariantSpec spec;
  spec.score = E(text, "variant.py");
  spec.buffers.push_back({"bias", cuir::TensorDType::kInt32, {E("seqlen_kv")}, {}});
  absl::StatusOr<TransferResult> r = TransferOnBase(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  // The location is the offending buffer read, not just the function.
  std::string where = "variant.py:1:" + std::to_string(text.find("bias") + 1);
  EXPECT_THAT(
      std::string(r.status().message()),
      ::testing::StartsWith("not covered by the rules: score_mod `" + text + "` at " + where +
                            " (score_mod reads buffer `bias` at an index that depends "
                            "on `score`"));
}

TEST(ScoreInline, NoScoreModLeavesTheLoopAlone) {
  absl::StatusOr<TransferResult> r = TransferOnBase(VariantSpec{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(LoopStmts(r->program, StmtKind::kScoreMod).empty());
  EXPECT_FALSE(Applied(*r, "score.inline"));
}

TEST(ScoreInline, IdentityScoreModIsClaimedAndLeavesTheExpertProgram) {
  VariantSpec spec;
  spec.score = E("score");
  absl::StatusOr<TransferResult> r = TransferOnBase(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(LoopStmts(r->program, StmtKind::kScoreMod).empty());
  EXPECT_FALSE(Applied(*r, "score.inline"));
  EXPECT_TRUE(cuir::Equal(r->program, LoadBase()));
}

TEST(ScoreInline, ScoreTimesOneIsStillInlined) {
  // Only the literal identity is dropped; anything else is the spec's to define.
  VariantSpec spec;
  spec.score = E("score * 1.0");
  absl::StatusOr<TransferResult> r = TransferOnBase(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(LoopStmts(r->program, StmtKind::kScoreMod).size(), 1u);
}

}  // namespace
}  // namespace cubridge::transfer::testing
