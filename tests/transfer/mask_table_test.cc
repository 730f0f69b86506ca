// mask.block-table: masks the analysis cannot bound (buffers, `%`, products of positions) get a
// block table; the loop must walk it with the right row (per b / h / Q tile) and skip the mask
// exactly on the blocks the table marks full. Checked by brute force with random document ids.
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/transfer/transfer_test_util.h"

namespace cubridge::transfer::testing {
namespace {

using cuir::StmtKind;

const std::vector<SeqShape> kShapes = {{1, 1}, {7, 13}, {16, 16}, {23, 9}, {33, 40}};

// Nondecreasing document ids (as VARIANTS.md defines `doc`), documents of 1..9 tokens; document 0
// is the shared question for the share-question mask.
std::vector<int64_t> RandomDocs(int64_t length, std::mt19937& rng) {
  std::vector<int64_t> doc(length);
  int64_t id = 0, left = 0;
  for (int64_t& d : doc) {
    if (left-- == 0) {
      left = std::uniform_int_distribution<int64_t>(0, 8)(rng);
      d = id++;
    } else {
      d = id - 1;
    }
  }
  return doc;
}

VariantSpec DocSpec(const std::string& mask) {
  VariantSpec spec = MaskSpec(mask);
  spec.buffers.push_back(
      {"doc", cuir::TensorDType::kInt32, {E("max(seqlen_q, seqlen_kv)")}, {"variant.py", 1, 1}});
  return spec;
}

const cuir::Stmt* Table(const cuir::Program& p) { return cuir::FindDecl(p, StmtKind::kTable); }

// Sound against brute force, and as tight as the table makes it: no empty block visited and the
// mask skipped on exactly the all-kept blocks.
void ExpectExactTableLoop(const cuir::Program& p, const VariantSpec& spec, int64_t heads,
                          int64_t batch) {
  std::mt19937 rng(7);
  auto shape = [&](int64_t sq, int64_t skv) {
    SimShape s = PlainShape(sq, skv);
    s.heads = heads;
    s.batch = batch;
    s.buffers["doc"] = RandomDocs(std::max(sq, skv), rng);
    return s;
  };
  Totals totals;
  CheckBlocksSound(p, spec, cuir::PrintExpr(spec.mask), kShapes, shape, &totals);
  EXPECT_EQ(totals.empty, 0);
  EXPECT_EQ(totals.skipped_full, totals.kept_everywhere);
  EXPECT_GT(totals.visited, 0);
  std::cout << "[tightness] table " << cuir::PrintExpr(spec.mask) << ": " << totals.Report()
            << "\n";
}

TEST(MaskTable, CausalDocumentMaskUsesATable) {
  VariantSpec spec = DocSpec("q_idx >= kv_idx && doc[q_idx] == doc[kv_idx]");
  absl::StatusOr<TransferResult> r = TransferOnBase(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(Applied(*r, "mask.block-table"));
  EXPECT_FALSE(Applied(*r, "mask.analytic-range"));
  const cuir::Stmt* table = Table(r->program);
  ASSERT_NE(table, nullptr);
  EXPECT_TRUE(cuir::Equal(table->value, spec.mask));
  EXPECT_TRUE(table->names.empty()) << "the predicate depends on neither b nor h";
  const cuir::Stmt& loop = KvLoop(r->program);
  EXPECT_EQ(loop.table, table->name);
  EXPECT_TRUE(loop.ranges.empty());
  ASSERT_EQ(loop.exprs.size(), 1u);
  EXPECT_TRUE(cuir::Equal(loop.exprs[0], E("m_block")));
  std::vector<const cuir::Stmt*> masks = LoopStmts(r->program, StmtKind::kMask);
  ASSERT_EQ(masks.size(), 1u);
  EXPECT_TRUE(
      cuir::Equal(masks[0]->aux, cuir::Unary(cuir::UnaryOp::kNot, cuir::Var(loop.full_var))));
  const cuir::Stmt* doc = cuir::FindDecl(r->program, StmtKind::kBuffer, "doc");
  ASSERT_NE(doc, nullptr);
  EXPECT_TRUE(cuir::Equal(doc->exprs[0], E("max(seqlen_q, seqlen_kv)")));
  ExpectValidRoundTrip(r->program);
  ExpectExactTableLoop(r->program, spec, 1, 1);
}

TEST(MaskTable, ShareQuestionMaskIsExact) {
  VariantSpec spec = DocSpec(
      "doc[kv_idx] == 0 && doc[q_idx] != 0 || q_idx >= kv_idx && doc[q_idx] == doc[kv_idx]");
  absl::StatusOr<TransferResult> r = TransferOnBase(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(Applied(*r, "mask.block-table"));
  ExpectValidRoundTrip(r->program);
  ExpectExactTableLoop(r->program, spec, 1, 1);
}

TEST(MaskTable, HeadDependentPatternHasOneRowPerHead) {
  VariantSpec spec = MaskSpec("(q_idx + h) % 3 == kv_idx % 3");
  absl::StatusOr<TransferResult> r = TransferOnBase(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  const cuir::Stmt* table = Table(r->program);
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->names, std::vector<std::string>{"h"});
  const cuir::Stmt& loop = KvLoop(r->program);
  ASSERT_EQ(loop.exprs.size(), 2u);
  EXPECT_TRUE(cuir::Equal(loop.exprs[0], E("h")));
  EXPECT_TRUE(cuir::Equal(loop.exprs[1], E("m_block")));
  ExpectValidRoundTrip(r->program);
  ExpectExactTableLoop(r->program, spec, 3, 1);
}

TEST(MaskTable, BatchAndHeadAxesFollowTheGridOrder) {
  VariantSpec spec = MaskSpec("(q_idx * (b + 1) + h) % 4 != kv_idx % 3");
  absl::StatusOr<TransferResult> r = TransferOnBase(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  const cuir::Stmt* table = Table(r->program);
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->names, (std::vector<std::string>{"h", "b"}));
  ExpectValidRoundTrip(r->program);
  ExpectExactTableLoop(r->program, spec, 2, 2);
}

TEST(MaskTable, PartlyUnderstoodMaskFallsBackToTheTable) {
  // The causal atom alone would be analytic; `q_idx % 2` is not, and the table is exact.
  VariantSpec spec = MaskSpec("q_idx >= kv_idx && q_idx % 2 == 0");
  absl::StatusOr<TransferResult> r = TransferOnBase(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(Applied(*r, "mask.block-table"));
  ExpectExactTableLoop(r->program, spec, 1, 1);
}

TEST(MaskTable, AnalyticMasksDoNotGetATable) {
  for (const char* mask :
       {"q_idx >= kv_idx", "abs(q_idx - kv_idx) <= 3", "kv_idx < 4 || q_idx >= kv_idx"}) {
    absl::StatusOr<TransferResult> r = TransferOnBase(MaskSpec(mask));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(Applied(*r, "mask.analytic-range")) << mask;
    EXPECT_EQ(Table(r->program), nullptr) << mask;
  }
}

TEST(MaskTable, MaskReadingScoreIsNotCovered) {
  absl::StatusOr<TransferResult> r = TransferOnBase(MaskSpec("score > 0.0 && q_idx >= kv_idx"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()),
              ::testing::StartsWith("not covered by the rules: mask_mod `score > 0.0 && q_idx >= "
                                    "kv_idx` at variant.py:3:1 (mask_mod reads `score`"));
}

}  // namespace
}  // namespace cubridge::transfer::testing
