// Interval analysis of CuIR int expressions: what values an index expression can take, given
// the ranges of the symbols it reads.
//
// The lowering asks it whether a dividend is never negative (then C's truncating `/` and `%`
// already are Python's floor division and modulo) and whether a divisor is a known positive
// number. The bounds are also written symbolically (`seqlen_q - 1`), so that a range can be
// stated in the launch's sizes rather than in the worst case.
//
// Soundness is what matters, not tightness: every bound holds for every value of the symbols
// within their ranges, under the evaluator's semantics (Python, 64-bit, wrapping). A side that
// cannot be bounded without that risk (possible int64 overflow, a symbol the environment does not
// know, a float, a buffer element) is left unbounded.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "cuir/ir/expr.h"

namespace cubridge::cuir {

// Inclusive bounds of an int expression. Each side is known numerically (int64, with the
// symbols' own numeric ranges) and, where it can be written down, symbolically (an expression
// over the environment's symbols, e.g. `seqlen_q - 1`); null / nullopt = unbounded.
// A side known numerically always has a symbolic form too: at worst the number itself.
struct IntBounds {
  std::optional<int64_t> lo, hi;  // numeric
  ExprPtr lo_expr, hi_expr;       // symbolic (null when unknown); FoldConstants'd
};

// A symbol's range. A symbolic side may be null (unknown); a builtin size is its own bound on
// both sides (`seqlen_q` in [seqlen_q, seqlen_q]), its numeric range what any launch may pass.
struct SymbolRange {
  ExprPtr lo, hi;
  std::optional<int64_t> lo_num, hi_num;
};
using BoundsEnv = std::map<std::string, SymbolRange>;

// The default environment of a mask_mod/score_mod element: b in [0, batch-1], h in [0, heads_q-1],
// q_idx in [0, seqlen_q-1], kv_idx in [0, seqlen_kv-1]; and the builtins batch, heads_q, heads_kv,
// seqlen_q, seqlen_kv, head_dim in [1, 2^31-1] (symbolic: themselves).
BoundsEnv ElementBoundsEnv();

// Walks `e` once per distinct node (shared subexpressions are not re-walked); nodes deeper than
// kMaxExprDepth are taken as unbounded.
IntBounds BoundsOf(const ExprPtr& e, const BoundsEnv& env);

// BoundsOf(e, env).lo >= 0.
bool ProvablyNonNegative(const ExprPtr& e, const BoundsEnv& env);

// Both sides known and within int32: the value may be computed in a 32-bit int.
bool WithinInt32(const IntBounds& b);

}  // namespace cubridge::cuir
