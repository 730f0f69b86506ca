// Block-range analysis of a mask predicate over one tile of query rows.
//
// For the rows [q_lo, q_hi) of a Q tile the analysis derives two sets of kv positions, each a
// union of (possibly guarded) intervals with symbolic bounds:
//   any: a superset of the kv positions kept for at least one row (blocks outside it are empty),
//   all: a subset of the kv positions kept for every row (blocks inside it are full).
// Every atom is normalised to `kv_idx <= g(q_idx)` / `kv_idx >= g(q_idx)` with g monotone in
// q_idx, so both sets follow from g at the tile's first and last row; atoms on q_idx alone become
// tile-level guards, atoms on neither stay guards as they are. Conjunction intersects, disjunction
// unions, negation is pushed to the atoms. Anything not understood contributes the conservative
// pair (any = everything, all = nothing) and clears `understood`. docs/transfer.md explains why
// the result is sound.
#pragma once

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "cuir/ir/expr.h"
#include "cuir/ir/program.h"
#include "cuir/transfer/symbolic.h"

namespace cubridge::transfer {

// A set of kv positions: [lo, hi) when `guard` holds (null lo = unbounded below, null hi =
// unbounded above, null guard = always).
struct KvInterval {
  cuir::ExprPtr lo, hi, guard;
};
using KvSet = std::vector<KvInterval>;

struct MaskAnalysis {
  KvSet any;
  KvSet all;
  bool understood = true;
  std::vector<std::string> not_understood;  // printed atoms the analysis had to approximate
};

struct TileSymbols {
  std::string q_var = "q_idx";
  std::string kv_var = "kv_idx";
  cuir::ExprPtr q_lo, q_hi;                   // the Q tile's rows [q_lo, q_hi), non-empty
  absl::flat_hash_set<std::string> int_vars;  // int-typed symbols the predicate may use
};

// Caps the union sizes so that loops and `full` tests stay small (over-approximating `any`,
// under-approximating `all`, both sound).
inline constexpr size_t kMaxIntervals = 4;

// `mask` must not mention `score`; spec consts must already be replaced by their values.
MaskAnalysis AnalyzeMask(const cuir::ExprPtr& mask, const TileSymbols& tile);

// What the loop needs to turn kv sets into block ranges and a `full` test.
struct BlockSymbols {
  cuir::ExprPtr block_n;                   // BLOCK_N
  std::vector<cuir::BlockRange> universe;  // the base loop's ranges: every kv block
  cuir::ExprPtr seqlen_kv;                 // kv positions are < seqlen_kv
  cuir::ExprPtr kv_lo, kv_hi;              // the K tile's rows inside the loop
  sym::VarBounds var_bounds;               // proven lower bounds of symbols
};

struct BlockPlan {
  std::vector<cuir::BlockRange> ranges;  // visited blocks, clipped to the universe
  cuir::ExprPtr full;                    // block kept for every row; null = never provable
};

// Blocks meeting `any` (clipped to the universe) and the test "block inside `all`".
BlockPlan PlanBlocks(const MaskAnalysis& analysis, const BlockSymbols& symbols);

// Set algebra used by the analysis (exposed for tests).
// `over_approximate`: capping may only grow the set (for `any`), else only shrink it (for `all`).
KvSet Intersect(const KvSet& a, const KvSet& b, bool over_approximate);
KvSet Unite(const KvSet& a, const KvSet& b, bool over_approximate);

}  // namespace cubridge::transfer
