// TileCorners, an analysis of a block table's predicate (`blocks(...)`, region_tables.cc): the
// conjuncts that a tile's four corners decide. A conjunct `a OP b` (OP one of < <= > >=) whose
// difference a - b, as a function of (q_idx, kv_idx), never turns in either index (it moves one
// way in q_idx whatever kv_idx, and one way in kv_idx whatever q_idx) takes its least and its
// greatest value over a rectangle of indices at two of the rectangle's corners; so the conjunct
// fails on the whole rectangle when it fails at all four corners, and holds on the whole
// rectangle when it holds at all four. Such differences: sides affine in the indices (sums,
// differences and negations of the indices and of terms that mention neither, products with
// such terms), or built from the indices by sums, differences, negations, products and floor
// divisions by integer literals, shr, shl by a literal up to 31, min and max
// (`q_idx - shr(kv_idx, shift) < blocks`, `q_idx // 64 >= kv_idx // 64`). `abs(a) <= b` counts as
// its two half-planes `a <= b` and `-a <= b` (a band, which may cross a tile whose corners all
// lie outside it). The argument needs exact arithmetic: the classifier keeps only the conjuncts
// whose sides it computes in integers (float rounding could step the two sides apart between
// corners).
//
// A conjunct may also be a disjunction of such comparisons (`q_idx - kv_idx <= window[h] ||
// kv_idx < sink`, a window beside attention sinks): it fails on the whole rectangle when every
// disjunct fails at all four corners, and holds on the whole rectangle when one disjunct holds
// at all four (a disjunction true at the corners alone may still fail inside: two half-planes
// facing away from each other).
//
// The classifier of a table then settles a tile from its corners where it can: empty if a
// conjunct fails on it, full if the predicate is such conjuncts alone and all hold on it;
// otherwise it evaluates the tile element by element as before. A windowed mask far from
// its band (a dilated per-head window at 8k: 97% of the tiles) had every element of every empty
// tile evaluated: 1.2 ms a call for longformer_head_dilation's table (bench/NOTES.md, session 26).
#pragma once

#include <vector>

#include "cuir/ir/expr.h"

namespace cubridge::lower {

struct TileCorners {
  std::vector<cuir::ExprPtr> decided;  // the conjuncts the corners decide, in predicate order
  bool all_decided = false;            // the predicate is those conjuncts alone
};

// The top-level conjuncts of `pred` (split at &&) that the corners decide.
TileCorners FindTileCorners(const cuir::ExprPtr& pred);

// The disjuncts of a decided conjunct (split at ||; the conjunct alone if it is a comparison),
// each a comparison whose corners decide it.
std::vector<cuir::ExprPtr> Disjuncts(const cuir::ExprPtr& conjunct);

// Whether `e` is affine in q_idx and kv_idx as above (true where it mentions neither).
bool AffineInTheIndices(const cuir::ExprPtr& e);

}  // namespace cubridge::lower
