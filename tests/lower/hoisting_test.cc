// The hoisting passes (cuir/lower/rewrites/hoisting.h) where the golden files cannot show them:
// a mask's block values, which have no place before the KV walk, and the C++ each placement
// gives the element.
#include "cuir/lower/rewrites/hoisting.h"

#include <map>

#include "gtest/gtest.h"
#include "tests/lower/lower_test_util.h"

namespace cubridge::lower {
namespace {

struct Placed {
  Hoisting hoisting;
  std::vector<PlacedLet> placed;
  EmitScope element;
};

// `text` through the four passes, with h an int of the work tile and n_block one of the walk.
Placed Place(const std::string& text, bool before_walk) {
  EmitScope kernel;
  kernel.Bind("h", "h", CType::kInt);
  EmitScope block = kernel;
  block.Bind("n_block", "n_block", CType::kInt);
  Placed p;
  p.element = block;
  p.element.Bind("q_idx", "q_idx", CType::kInt);
  p.element.Bind("kv_idx", "kv_idx", CType::kInt);
  p.element.Bind("score", "score", CType::kFloat);
  p.hoisting = HoistInvariants(testing::ParseOrFail(text), p.element);
  ShareHoisted(&p.hoisting);
  FitColumnBudget(&p.hoisting);
  auto placed = PlaceHoisted(p.hoisting.lets, before_walk ? &kernel : nullptr, block,
                             cuir::ElementBoundsEnv(), &p.element);
  EXPECT_TRUE(placed.ok()) << placed.status();
  if (placed.ok()) p.placed = *placed;
  return p;
}

TEST(PlaceHoisted, WithoutABeforeTheWalkScopeEveryBlockValueIsPerBlock) {
  // Smallest first: float(n_block), which reads the walk, then exp2(float(h)), which does not.
  const std::string text = "score * exp2(float(h)) + float(n_block)";
  const Placed score_mod = Place(text, /*before_walk=*/true);
  ASSERT_EQ(score_mod.placed.size(), 2u);
  EXPECT_EQ(score_mod.placed[0].where, Placement::kPerBlock);
  EXPECT_EQ(score_mod.placed[1].where, Placement::kBeforeWalk);
  const Placed mask = Place(text, /*before_walk=*/false);
  ASSERT_EQ(mask.placed.size(), 2u);
  EXPECT_EQ(mask.placed[0].where, Placement::kPerBlock);
  EXPECT_EQ(mask.placed[1].where, Placement::kPerBlock);
}

TEST(PlaceHoisted, TheElementReadsTheLiteralTheConstOrTheSlot) {
  const Placed p = Place("kv_idx % (4 * 4) == q_idx // (h % 4 + 1)", /*before_walk=*/true);
  ASSERT_EQ(p.hoisting.lets.size(), 4u);
  std::map<Placement, std::string> read;  // what the element scope binds each let to
  for (size_t i = 0; i < p.placed.size(); ++i) {
    const CExpr* bound = p.element.Find(p.hoisting.lets[i].name);
    ASSERT_NE(bound, nullptr) << p.hoisting.lets[i].name;
    read[p.placed[i].where] = bound->text;
  }
  EXPECT_EQ(read[Placement::kLiteral], "16");
  EXPECT_EQ(read[Placement::kBeforeWalk], "hoisted.2");  // h % 4 + 1
  EXPECT_EQ(read[Placement::kRow], "hoisted.3[mt][r]");
  EXPECT_EQ(read[Placement::kColumn], "hoisted.1[j][k]");
  // The positive divisor is bound beside its value, for the element's `//` and `%` by it.
  EXPECT_NE(p.element.Find(DivisorKey("hoisted.2")), nullptr);
}

}  // namespace
}  // namespace cubridge::lower
