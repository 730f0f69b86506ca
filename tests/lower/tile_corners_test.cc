// TileCorners (cuir/lower/tile_corners.h): which conjuncts of a block table's predicate a tile's
// corners decide, and that their verdict holds on every element of the tile (by the evaluator).
#include "cuir/lower/tile_corners.h"

#include <random>

#include "cuir/ir/eval.h"
#include "cuir/ir/program.h"
#include "gtest/gtest.h"
#include "tests/lower/lower_test_util.h"

namespace cubridge::lower {
namespace {

cuir::ExprPtr Parse(const std::string& text) { return testing::ParseOrFail(text); }

std::vector<std::string> Decided(const std::string& pred, bool* all = nullptr) {
  const TileCorners found = FindTileCorners(Parse(pred));
  std::vector<std::string> out;
  for (const cuir::ExprPtr& c : found.decided) out.push_back(cuir::PrintExpr(c));
  if (all != nullptr) *all = found.all_decided;
  return out;
}

TEST(TileCorners, HalfPlanesOfAWindowAreDecidedItsModuloIsNot) {
  bool all = true;
  EXPECT_EQ(Decided("q_idx - kv_idx >= 0 && q_idx - kv_idx < (h % 4 + 1) * window && "
                    "(q_idx - kv_idx) % (h % 4 + 1) == 0",
                    &all),
            (std::vector<std::string>{"q_idx - kv_idx >= 0",
                                      "q_idx - kv_idx < (h % 4 + 1) * window"}));
  EXPECT_FALSE(all);  // the modulo is left to the element-wise scan
  EXPECT_EQ(Decided("kv_idx <= q_idx && q_idx - kv_idx <= window", &all).size(), 2u);
  EXPECT_TRUE(all);
  EXPECT_EQ(Decided("2 * q_idx + 3 > -kv_idx * stride + offset", &all).size(), 1u);
  EXPECT_TRUE(all);
}

TEST(TileCorners, MonotoneDifferencesAndBandsAreDecided) {
  bool all = false;
  // hourglass_shortened: shl by a parameter may wrap (left to the scan), shr never turns.
  EXPECT_EQ(Decided("kv_idx < shl(q_idx + 1, shift) && q_idx - shr(kv_idx, shift) < blocks", &all),
            (std::vector<std::string>{"q_idx - shr(kv_idx, shift) < blocks"}));
  EXPECT_FALSE(all);
  EXPECT_EQ(Decided("q_idx // 64 >= kv_idx // 64 && kv_idx < shl(q_idx + 1, 3)", &all).size(), 2u);
  EXPECT_TRUE(all);
  // dilated_window: the band's two sides.
  EXPECT_EQ(Decided("abs(q_idx - kv_idx) <= window && (q_idx - kv_idx) % dilation == 0", &all),
            (std::vector<std::string>{"q_idx - kv_idx <= window", "-(q_idx - kv_idx) <= window"}));
  EXPECT_FALSE(all);
  EXPECT_EQ(Decided("window > abs(kv_idx - q_idx)", &all).size(), 2u);
  EXPECT_TRUE(all);
  EXPECT_EQ(Decided("min(q_idx, 100) - max(kv_idx, 3) >= 0").size(), 1u);
}

TEST(TileCorners, DisjunctionsOfHalfPlanesAreDecided) {
  bool all = false;
  // duo_attention_head_windows: a per-head window beside the attention sinks, under causality.
  EXPECT_EQ(Decided("q_idx >= kv_idx && (q_idx - kv_idx <= window[h] || kv_idx < sink)", &all),
            (std::vector<std::string>{"q_idx >= kv_idx",
                                      "q_idx - kv_idx <= window[h] || kv_idx < sink"}));
  EXPECT_TRUE(all);
  EXPECT_EQ(Disjuncts(Parse("q_idx < 4 || kv_idx > 9 || q_idx - kv_idx >= 3")).size(), 3u);
  EXPECT_EQ(Disjuncts(Parse("q_idx < 4")).size(), 1u);
}

TEST(TileCorners, LeavesWhatIsNotAHalfPlane) {
  // Not affine in the indices, an equality, a read at an index, no index at all.
  EXPECT_TRUE(Decided("q_idx * kv_idx < 64").empty());
  EXPECT_TRUE(Decided("q_idx - q_idx // 2 * 3 >= kv_idx").empty());  // up and down in q_idx
  EXPECT_TRUE(Decided("abs(q_idx - kv_idx) >= window").empty());  // outside a band: no half-plane
  EXPECT_TRUE(Decided("q_idx // width >= kv_idx").empty());       // a divisor of unknown sign
  EXPECT_TRUE(Decided("q_idx == kv_idx").empty());
  EXPECT_TRUE(Decided("doc[q_idx] >= doc[kv_idx]").empty());
  EXPECT_TRUE(Decided("h < 4").empty());
  // A disjunction with a part that is not a half-plane.
  EXPECT_TRUE(Decided("q_idx >= kv_idx || q_idx % 16 == 0").empty());
  bool all = true;
  EXPECT_TRUE(Decided("q_idx % 2 == 0", &all).empty());
  EXPECT_FALSE(all);
}

// The corners' verdict against every element of random rectangles: a decided conjunct whose
// disjuncts are all false at the four corners is false everywhere in the rectangle, one with a
// disjunct true at all four true everywhere.
TEST(TileCorners, TheCornersVerdictHoldsOnEveryElement) {
  const std::vector<std::string> preds = {
      "q_idx - kv_idx >= 0 && q_idx - kv_idx < (h % 4 + 1) * window",
      "kv_idx <= q_idx && q_idx - kv_idx <= window",
      "2 * q_idx + 3 > -kv_idx * stride + offset && 3 * kv_idx - q_idx <= window * 2",
      "-(q_idx - 2 * kv_idx) < window - h * stride",
      "abs(q_idx - kv_idx) <= window && q_idx - shr(kv_idx, 2) < 40 && q_idx // 7 >= kv_idx // 5",
      "min(q_idx, 100) - max(kv_idx * 3, 3) >= -stride && shl(kv_idx + 1, 2) > q_idx - offset",
      // Conjuncts the corners cannot decide beside one they can: were any of the first three
      // taken (the second goes up and down in q_idx), the check below would find elements
      // that contradict its corners.
      "q_idx * kv_idx < window * 40 && q_idx - q_idx // 8 * 16 >= kv_idx - 160 && "
      "(q_idx - kv_idx) % 3 == 0 && q_idx - kv_idx < window",
      // Disjunctions: a window beside sinks, and two half-planes facing away from each other
      // (true at a rectangle's four corners while false between them: only a disjunct true at
      // all four may call the rectangle full).
      "q_idx >= kv_idx && (q_idx - kv_idx <= window || kv_idx < offset + 8)",
      "q_idx <= 40 + stride || q_idx >= 120 - offset || kv_idx - q_idx > window"};
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> start(0, 200), extent(1, 24), small(-5, 9);
  for (const std::string& text : preds) {
    const TileCorners found = FindTileCorners(Parse(text));
    ASSERT_FALSE(found.decided.empty()) << text;
    for (int trial = 0; trial < 300; ++trial) {
      cuir::ScalarEnv env;
      env.vars["h"] = int64_t{small(rng)};
      env.vars["window"] = int64_t{extent(rng) * 4};
      env.vars["stride"] = int64_t{small(rng)};
      env.vars["offset"] = int64_t{small(rng) * 10};
      const int q0 = start(rng), q1 = q0 + extent(rng) - 1;
      const int k0 = start(rng), k1 = k0 + extent(rng) - 1;
      auto at = [&](const cuir::ExprPtr& c, int q, int kv) {
        cuir::ScalarEnv e = env;
        e.vars["q_idx"] = int64_t{q};
        e.vars["kv_idx"] = int64_t{kv};
        auto v = cuir::EvalBool(c, e);
        EXPECT_TRUE(v.ok()) << v.status();
        return v.ok() && *v;
      };
      for (const cuir::ExprPtr& c : found.decided) {
        bool none = true, one = false;  // every disjunct false at the corners; one true at all
        for (const cuir::ExprPtr& d : Disjuncts(c)) {
          const int held = at(d, q0, k0) + at(d, q0, k1) + at(d, q1, k0) + at(d, q1, k1);
          none = none && held == 0;
          one = one || held == 4;
        }
        if (!none && !one) continue;
        for (int q = q0; q <= q1; ++q) {
          for (int kv = k0; kv <= k1; ++kv) {
            ASSERT_EQ(at(c, q, kv), one)
                << cuir::PrintExpr(c) << " at (" << q << ", " << kv << ") of [" << q0 << ", "
                << q1 << "] x [" << k0 << ", " << k1 << "]";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace cubridge::lower
