// The engine: fixed rule order, claims, validation of the result, the base's shape.
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/transfer/transfer_test_util.h"

namespace cubridge::transfer::testing {
namespace {

using cuir::StmtKind;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(Engine, RulesetVersion) { EXPECT_EQ(RulesetVersion(), "rules-1"); }

TEST(Engine, EmptySpecGivesTheBaseBack) {
  absl::StatusOr<TransferResult> r = TransferOnBase(VariantSpec{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(cuir::Equal(r->program, LoadBase()));
  EXPECT_TRUE(r->applied.empty());
}

TEST(Engine, RulesRunInTheDocumentedOrder) {
  VariantSpec spec = MaskSpec("q_idx >= kv_idx && q_idx - kv_idx <= W", {{"W", 128}});
  spec.score = E("score + float(bias[kv_idx])");
  spec.buffers.push_back({"bias", cuir::TensorDType::kInt32, {E("seqlen_kv")}, {}});
  cuir::AttentionConfig gqa;
  gqa.heads_q = 32;
  gqa.heads_kv = 8;
  absl::StatusOr<TransferResult> r = TransferOnBase(spec, gqa);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::string> names;
  for (const AppliedRule& a : r->applied) {
    names.push_back(a.name);
    EXPECT_FALSE(a.detail.empty()) << a.name;
    EXPECT_EQ(a.detail.find('\n'), std::string::npos) << "details are one line";
  }
  EXPECT_EQ(names, (std::vector<std::string>{"params.const", "buffers.declare", "heads.gqa",
                                             "score.inline", "mask.analytic-range"}));
  ExpectValidRoundTrip(r->program);
}

TEST(Engine, UnknownNameInTheMaskFailsValidation) {
  absl::StatusOr<TransferResult> r = TransferOnBase(MaskSpec("q_idx >= kv_idx + offset"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("offset"));
}

TEST(Engine, NotCoveredNamesTheConstructAndWhere) {
  VariantSpec spec = MaskSpec("score > 0.0");
  spec.mask_loc = {"variant.py", 4, 1};
  spec.score = E("score * 2.0");
  spec.score_loc = {"variant.py", 9, 5};
  absl::StatusOr<TransferResult> r = TransferOnBase(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  // The message has the fixed shape the LLM proposer hand-off parses.
  EXPECT_THAT(std::string(r.status().message()),
              StartsWith("not covered by the rules: mask_mod `score > 0.0` at variant.py:4:1 ("));
}

// A `reference(q, k, v)` spec has no mods for the rules to read: not covered, whatever else the
// spec holds (its params), in the shape the LLM proposer hand-off parses, pointing at the LLM.
TEST(Engine, ReferenceSpecIsNotCovered) {
  VariantSpec spec;
  spec.reference = true;
  spec.reference_loc = {"sink.py", 21, 5};
  spec.consts.push_back({"sink", cuir::Type::kFloat, cuir::FloatLit(0.5), {"sink.py", 21, 38}});
  absl::StatusOr<TransferResult> r = TransferOnBase(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(r.status().message());
  EXPECT_THAT(message, StartsWith("not covered by the rules: reference(q, k, v) at sink.py:21:5 ("));
  EXPECT_THAT(message, HasSubstr("the LLM proposer (`--proposer llm` or `hybrid`) handles it"));
}

TEST(Engine, MaskNamingTheQueryTileAxisIsNotCovered) {
  absl::StatusOr<TransferResult> r = TransferOnBase(MaskSpec("kv_idx <= m_block"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("mask_mod mentions the grid axis `m_block`"));
}

TEST(Engine, BaseWithoutAKvLoopIsRejected) {
  cuir::Program base = LoadBase();
  cuir::Stmt* loop = cuir::FindKvLoop(base);
  ASSERT_NE(loop, nullptr);
  cuir::Stmt replacement;
  replacement.kind = StmtKind::kSoftmaxInit;
  *loop = replacement;
  absl::StatusOr<TransferResult> r = Transfer(base, MaskSpec("q_idx >= kv_idx"), {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("KV loop"));
}

// The rules find the structure by shape: a base whose grid axes are called otherwise still gets
// the canonical b / h of the spec mapped onto them.
TEST(Engine, CanonicalNamesMapOntoTheBasesGridAxes) {
  std::string text = cuir::PrintProgram(LoadBase());
  text = absl::StrReplaceAll(text, {{"h < heads_q, b < batch", "head < heads_q, bat < batch"},
                                    {"let kv_h: int = h", "let kv_h: int = head"},
                                    {"q[b, h,", "q[bat, head,"},
                                    {"[b, kv_h,", "[bat, kv_h,"}});
  absl::StatusOr<cuir::Program> base = cuir::ParseProgram(text);
  ASSERT_TRUE(base.ok()) << base.status() << "\n" << text;
  VariantSpec spec = MaskSpec("(q_idx + h) % 3 != kv_idx % 2");
  absl::StatusOr<TransferResult> r = Transfer(*base, spec, {});
  ASSERT_TRUE(r.ok()) << r.status();
  const cuir::Stmt* table = cuir::FindDecl(r->program, StmtKind::kTable);
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->names, std::vector<std::string>{"head"});
  EXPECT_TRUE(cuir::Equal(table->value, E("(q_idx + head) % 3 != kv_idx % 2")));
  ExpectValidRoundTrip(r->program);
  auto shape = [](int64_t sq, int64_t skv) {
    SimShape s = PlainShape(sq, skv);
    s.heads = 3;
    return s;
  };
  Totals totals;
  CheckBlocksSound(r->program, spec, "renamed axes", {{9, 14}, {16, 5}}, shape, &totals);
}

}  // namespace
}  // namespace cubridge::transfer::testing
