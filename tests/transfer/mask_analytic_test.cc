// mask.analytic-range: the rewritten loop visits every block that holds a kept element and skips
// the mask only on blocks kept everywhere, checked by brute force on every (m_block, n_block) of
// many small launches; for causal and window masks it also visits no empty block. The same for
// the backward program's transposed walk (query blocks per K tile).
#include <algorithm>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/transfer/transfer_test_util.h"

namespace cubridge::transfer::testing {
namespace {

using cuir::StmtKind;

constexpr SeqShape kShapes[] = {{1, 1},   {1, 40},  {40, 1},  {7, 13},
                                {16, 16}, {17, 33}, {33, 17}, {40, 40}};

struct MaskCase {
  const char* name;
  const char* mask;
  std::vector<std::string> params;
  std::vector<std::vector<int64_t>> values;  // one transfer per row
  bool tight;  // the normal form admits exact ranges: no visited block may be empty
  int64_t heads = 1;
  // The backward's walk, with q_idx isolated, is understood too (else, for some values, its
  // table takes the mask: exact, so only soundness is checked).
  bool transposed_analytic = true;
};

std::ostream& operator<<(std::ostream& os, const MaskCase& c) { return os << c.name; }

class StandardMasks : public ::testing::TestWithParam<MaskCase> {};

void ExpectSoundAndTight(const MaskCase& c, bool backward) {
  Totals totals;
  for (const std::vector<int64_t>& values : c.values) {
    std::vector<IntConst> consts;
    std::string label = absl::StrCat(c.name, backward ? " (backward)" : "");
    for (size_t i = 0; i < c.params.size(); ++i) {
      consts.push_back({c.params[i], values[i]});
      absl::StrAppend(&label, " ", c.params[i], "=", values[i]);
    }
    VariantSpec spec = MaskSpec(c.mask, consts);
    absl::StatusOr<TransferResult> r = TransferOnBase(spec, {}, backward);
    ASSERT_TRUE(r.ok()) << label << ": " << r.status();
    const bool analytic = !backward || c.transposed_analytic;
    ASSERT_TRUE(Applied(*r, "mask.analytic-range") ||
                (!analytic && Applied(*r, "mask.block-table")))
        << label << "\n"
                                                    << cuir::PrintProgram(r->program);
    ExpectValidRoundTrip(r->program);
    Totals one;
    auto shape = [&](int64_t sq, int64_t skv) {
      SimShape s = PlainShape(sq, skv);
      s.heads = c.heads;
      return s;
    };
    CheckBlocksSound(r->program, spec, label, {std::begin(kShapes), std::end(kShapes)}, shape,
                     &one);
    if (c.tight && analytic) {
      EXPECT_EQ(one.empty, 0) << label << " visits empty blocks\n"
                              << cuir::PrintProgram(r->program);
    }
    totals.Add(one);
  }
  std::cout << "[tightness] " << c.name << (backward ? " (backward)" : "") << ": "
            << totals.Report() << "\n";
}

TEST_P(StandardMasks, SoundOnEveryBlockAndTightWhereExpected) { ExpectSoundAndTight(GetParam(), false); }

TEST_P(StandardMasks, BackwardSoundOnEveryBlockAndTightWhereExpected) {
  ExpectSoundAndTight(GetParam(), true);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, StandardMasks,
    ::testing::Values(
        MaskCase{"causal", "q_idx >= kv_idx", {}, {{}}, true},
        MaskCase{"window_lookback",
                 "q_idx >= kv_idx && q_idx - kv_idx <= W",
                 {"W"},
                 {{0}, {1}, {5}, {100}},
                 true},
        MaskCase{
            "window_symmetric", "abs(q_idx - kv_idx) <= W", {"W"}, {{0}, {3}, {9}, {100}}, true},
        MaskCase{"window_negative",
                 "q_idx >= kv_idx && q_idx - kv_idx <= W",
                 {"W"},
                 {{-1}, {-3}},
                 false},
        MaskCase{"prefix_lm", "kv_idx < P || q_idx >= kv_idx", {"P"}, {{0}, {7}, {100}}, true},
        MaskCase{"block_causal", "q_idx // B >= kv_idx // B", {"B"}, {{1}, {3}, {4}, {64}}, true},
        MaskCase{"global_window",
                 "q_idx >= kv_idx && (q_idx - kv_idx <= W || kv_idx < G)",
                 {"W", "G"},
                 {{0, 0}, {2, 3}, {5, 100}, {100, 4}},
                 true},
        MaskCase{"global_window_flashmask",
                 "abs(q_idx - kv_idx) <= W || q_idx < G || kv_idx < G",
                 {"W", "G"},
                 {{0, 0}, {2, 3}, {5, 100}, {100, 4}},
                 true},
        MaskCase{"q_only", "q_idx < G", {"G"}, {{0}, {5}, {100}}, true},
        MaskCase{
            "q_only_and_causal", "q_idx >= G && q_idx >= kv_idx", {"G"}, {{0}, {9}, {100}}, true},
        MaskCase{"kv_only", "kv_idx >= G", {"G"}, {{0}, {6}, {100}}, true},
        MaskCase{"kv_range",
                 "kv_idx >= L && kv_idx < U",
                 {"L", "U"},
                 {{3, 20}, {20, 3}, {0, 100}},
                 true},
        MaskCase{"negated_causal", "!(q_idx < kv_idx)", {}, {{}}, true},
        MaskCase{"scaled_diagonal",
                 "2 * kv_idx <= q_idx + S && kv_idx * 3 >= q_idx",
                 {"S"},
                 {{0}, {5}},
                 false},
        MaskCase{"min_max_bounds",
                 "kv_idx <= min(q_idx, C) || kv_idx >= max(q_idx, seqlen_kv - C)",
                 {"C"},
                 {{0}, {8}},
                 false},
        // Transposed, the select's condition is on the isolated q_idx: the table takes it.
        MaskCase{"chunked_select",
                 "kv_idx >= select(q_idx >= C, C, 0) && kv_idx <= q_idx",
                 {"C"},
                 {{0}, {10}},
                 false, 1, false},
        // Not tight: for the first rows the bounds 3 and q - h cross inside block 0, which is then
        // visited although empty (bounds from different atoms are not compared per tile).
        MaskCase{
            "head_dependent", "kv_idx <= q_idx - h && (h < 2 || kv_idx >= 3)", {}, {{}}, false, 3},
        MaskCase{"always_false", "kv_idx < 0", {}, {{}}, true}),
    [](const ::testing::TestParamInfo<MaskCase>& info) { return std::string(info.param.name); });

TEST(MaskAnalytic, CausalHasTheDocumentedShape) {
  absl::StatusOr<TransferResult> r = TransferOnBase(MaskSpec("q_idx >= kv_idx"));
  ASSERT_TRUE(r.ok()) << r.status();
  const cuir::Stmt& loop = KvLoop(r->program);
  ASSERT_EQ(loop.ranges.size(), 1u);
  EXPECT_TRUE(cuir::Equal(loop.ranges[0].lo, E("0")));
  // Blocks up to the one holding the tile's last row, clipped to the kv length.
  EXPECT_TRUE(
      cuir::Equal(loop.ranges[0].hi, E("min(cdiv(q_hi, BLOCK_N), cdiv(seqlen_kv, BLOCK_N))")))
      << cuir::PrintExpr(loop.ranges[0].hi);
  std::vector<const cuir::Stmt*> lets = LoopStmts(r->program, StmtKind::kLet);
  ASSERT_EQ(lets.size(), 3u);  // kv_lo, kv_hi, full
  EXPECT_EQ(lets[2]->name, "full");
  // Full when the block's last column is at most the tile's first row.
  EXPECT_TRUE(cuir::Equal(lets[2]->value, E("kv_hi <= q_lo + 1")))
      << cuir::PrintExpr(lets[2]->value);
  EXPECT_EQ(loop.body[3].kind, StmtKind::kLoad) << "the full test precedes the loads";
  std::vector<const cuir::Stmt*> masks = LoopStmts(r->program, StmtKind::kMask);
  ASSERT_EQ(masks.size(), 1u);
  EXPECT_TRUE(cuir::Equal(masks[0]->value, E("q_idx >= kv_idx")));
  EXPECT_TRUE(cuir::Equal(masks[0]->aux, E("!full")));
  size_t qk = 0;
  while (loop.body[qk].kind != StmtKind::kQK) ++qk;
  EXPECT_EQ(loop.body[qk + 1].kind, StmtKind::kMask);
}

TEST(MaskAnalytic, GlobalWindowIsAUnionOfTwoRanges) {
  absl::StatusOr<TransferResult> r = TransferOnBase(
      MaskSpec("q_idx >= kv_idx && (q_idx - kv_idx <= W || kv_idx < G)", {{"W", 64}, {"G", 16}}));
  ASSERT_TRUE(r.ok()) << r.status();
  const cuir::Stmt& loop = KvLoop(r->program);
  ASSERT_EQ(loop.ranges.size(), 2u) << cuir::PrintProgram(r->program);
  // The window's blocks start at the tile's first row minus W (clamped at 0).
  EXPECT_TRUE(cuir::Equal(loop.ranges[0].lo, E("max(q_lo - 64, 0) // BLOCK_N")))
      << cuir::PrintExpr(loop.ranges[0].lo);
  EXPECT_TRUE(cuir::Equal(loop.ranges[1].lo, E("0")));
}

TEST(MaskAnalytic, KeepsTheSpecsConstNamesInTheMask) {
  VariantSpec spec = MaskSpec("q_idx >= kv_idx && q_idx - kv_idx <= W", {{"W", 8}});
  absl::StatusOr<TransferResult> r = TransferOnBase(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<const cuir::Stmt*> masks = LoopStmts(r->program, StmtKind::kMask);
  ASSERT_EQ(masks.size(), 1u);
  EXPECT_TRUE(cuir::Equal(masks[0]->value, spec.mask));
}

void ExpectRandomAffineMasksSound(bool backward) {
  RandomMask gen(20240611, /*rich=*/false);
  const std::vector<SeqShape> shapes = {{9, 23}, {24, 11}, {16, 16}};
  Totals totals;
  for (int i = 0; i < 60; ++i) {
    VariantSpec spec;
    spec.mask = gen.Tree(3);
    std::string label = cuir::PrintExpr(spec.mask);
    absl::StatusOr<TransferResult> r = TransferOnBase(spec, {}, backward);
    ASSERT_TRUE(r.ok()) << label << ": " << r.status();
    EXPECT_TRUE(Applied(*r, "mask.analytic-range")) << label;
    ExpectValidRoundTrip(r->program);
    CheckBlocksSound(r->program, spec, label, shapes, PlainShape, &totals);
    if (::testing::Test::HasFatalFailure()) return;
  }
  std::cout << "[tightness] random affine" << (backward ? " (backward)" : "") << ": "
            << totals.Report() << "\n";
}

TEST(MaskAnalytic, RandomAffineMasksAreSound) { ExpectRandomAffineMasksSound(false); }
TEST(MaskAnalytic, RandomAffineMasksAreSoundInTheBackwardsTransposedWalk) {
  ExpectRandomAffineMasksSound(true);
}

// Richer shapes (cdiv, max, row-dependent selects, products, %): whichever mask rule takes them,
// the loop must stay sound.
void ExpectRichRandomMasksSound(bool backward) {
  RandomMask gen(77, /*rich=*/true);
  const std::vector<SeqShape> shapes = {{13, 21}, {20, 8}};
  Totals totals;
  int analytic = 0;
  for (int i = 0; i < 60; ++i) {
    VariantSpec spec;
    spec.mask = gen.Tree(2);
    std::string label = cuir::PrintExpr(spec.mask);
    absl::StatusOr<TransferResult> r = TransferOnBase(spec, {}, backward);
    ASSERT_TRUE(r.ok()) << label << ": " << r.status();
    analytic += Applied(*r, "mask.analytic-range");
    ExpectValidRoundTrip(r->program);
    CheckBlocksSound(r->program, spec, label, shapes, PlainShape, &totals);
    if (::testing::Test::HasFatalFailure()) return;
  }
  // About a third have an atom the analysis must decline (%, products, two-sided floor
  // divisions, non-monotone bounds); guard against losing coverage of the rest.
  EXPECT_GE(analytic, 20) << "analysis coverage regressed";
  std::cout << "[tightness] rich random" << (backward ? " (backward)" : "") << " (" << analytic
            << "/60 analytic): " << totals.Report() << "\n";
}

TEST(MaskAnalytic, RichRandomMasksAreSoundWhicheverRuleApplies) { ExpectRichRandomMasksSound(false); }
TEST(MaskAnalytic, RichRandomMasksAreSoundInTheBackwardsTransposedWalk) {
  ExpectRichRandomMasksSound(true);
}

}  // namespace
}  // namespace cubridge::transfer::testing
