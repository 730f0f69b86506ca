// The hoisting passes: what a score_mod or mask would evaluate per score element but is the same
// for the whole block, a query row or a key column is evaluated once there instead, as a let the
// element expression reads by name. They run in this order after the expression rewrites
// (rewrites.h), each in its own file with its reason:
//   hoist-invariants   (hoist_invariants.cc)   which subexpressions move, and to which level
//   share-hoisted      (share_hoisted.cc)      lets read smaller lets; cheap row/column ones return
//   fit-column-budget  (fit_column_budget.cc)  at most kMaxColumnArrays cheap column arrays
//   place-hoisted      (place_hoisted.cc)      literal, before the KV walk, per block, row, column
// The lowering names the lets between fit-column-budget and place-hoisted (doc[q_idx] -> doc_q).
// Unlike the expression rewrites they give lets beside an expression; registry.cc shows each as
// the pipeline up to it, for cuir-opt and the golden files (tests/lower/golden/NAME.txt).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuir/ir/bounds.h"
#include "cuir/ir/expr.h"
#include "cuir/lower/cuda_emit.h"
#include "cuir/lower/rewrites/rewrites.h"

namespace cubridge::lower {

// A subexpression evaluated before the element loop, as variable `name` (also its CuIR name in
// the rewritten expression and in the lets after it).
struct Hoisted {
  Level level;
  std::string name;
  cuir::ExprPtr expr;
};

struct Hoisting {
  std::vector<Hoisted> lets;  // after share-hoisted: each reads only lets before it
  cuir::ExprPtr expr;         // what each element still evaluates
};

// The cost model the passes share (hoist_invariants.cc). RecomputeCost: the costliest node of
// `e` (3 for a transcendental, a float division, pow, atan2 or fmod; 2 for a buffer read; 1 for an
// integer division, modulo or shift; 0 for the rest). Costly: worth a register array per row or
// column (cost > 0). ExprSize: the number of nodes.
int RecomputeCost(const cuir::ExprPtr& e);
bool Costly(const cuir::ExprPtr& e);
size_t ExprSize(const cuir::ExprPtr& e);

// hoist-invariants: each maximal subexpression of `e` that is worth moving (HoistLevel) becomes
// a let named "hoisted.N", equal ones once; `element` types the subexpressions.
Hoisting HoistInvariants(const cuir::ExprPtr& e, const EmitScope& element);
// share-hoisted: lets sorted block values first, then by size, reading the smaller lets of their
// level; a row or column let that is then cheap goes back into the expression and the lets that
// read it.
void ShareHoisted(Hoisting* h);
// fit-column-budget: cheap column lets beyond kMaxColumnArrays go back, costliest kept.
inline constexpr int kMaxColumnArrays = 1;
void FitColumnBudget(Hoisting* h);

// place-hoisted: where each let is declared, and its C++ value there.
enum class Placement {
  kLiteral,     // an int the interval analysis pins to one number: `value` is that literal
  kBeforeWalk,  // a block value that reads nothing of the KV walk: once per work tile
  kPerBlock,    // the other block values: once per KV block
  kRow,         // a [MT][2] array, one slot per query row the thread owns
  kColumn,      // a [NT][2] array, one slot per key column
};
struct PlacedLet {
  Placement where;
  CExpr value;           // emitted in the scope of its placement (row: q_idx; column: kv_idx)
  bool divisor = false;  // a block int in [1, INT32_MAX]: its cuir_divisor is declared beside it
};
// `before_walk`: what the kernel knows before the KV walk (null: no let goes there, as for a
// mask, which runs only on the blocks its `when` picks); `block`: the KV walk's scope around the
// element loop; `bounds`: the element's ranges. Binds each let in `element` to what the element
// reads: the literal, the const, or the row / column slot (NAME[mt][r], NAME[j][k]).
absl::StatusOr<std::vector<PlacedLet>> PlaceHoisted(const std::vector<Hoisted>& lets,
                                                    const EmitScope* before_walk,
                                                    const EmitScope& block,
                                                    const cuir::BoundsEnv& bounds,
                                                    EmitScope* element);

// Adds `name`'s range `b` to `env` where both sides are known: later expressions that read it
// get exact integer forms (`% area` by a const area).
void AddRange(cuir::BoundsEnv* env, const std::string& name, const cuir::IntBounds& b);

// "LEVEL NAME = EXPR; ...; element: EXPR" (levels block, row, column), for the golden files;
// with `placed`, each let's placement instead of its level (literals with their value, "before
// walk", "per block", block divisors marked).
std::string PrintHoisting(const Hoisting& h, const std::vector<PlacedLet>* placed = nullptr);

}  // namespace cubridge::lower
