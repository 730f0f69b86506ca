// ReduceModulo, a lowering rewrite of element expressions: `x % c` for an int c > 1 whose
// dividend needs 64 bits (a hash of positions such as (q_idx * 31 + kv_idx * 17) % 7, where
// q_idx * 31 may pass 2^31 at long sequences) is computed on residues instead,
// ((q_idx % 7) * 3 + (kv_idx % 7) * 3) % 7: Python's `%` by c > 0 maps sums, differences and
// products to the same residue, so the value is the same, and every term is small. The residues
// of single positions are row or column values the hoisting moves out of the element loop, and
// the rest is 32-bit arithmetic with one cheap modulo, where the original needed a 64-bit
// multiply-high per element.
#pragma once

#include "cuir/ir/bounds.h"
#include "cuir/ir/expr.h"

namespace cubridge::lower {

// `e` with every such `x % c` (c an int literal or a const of one value) rewritten where it is
// exact and pays: x is built of + - * and unary minus, the interval analysis in `env` bounds x
// without 64-bit wrap-around (the evaluator's int semantics wrap; on bounded values the residue
// identities hold exactly), x's range passes int32, and the rewritten dividend's range fits
// int32. The analysis bounds ints only, so a float `%` (whose rounding does not follow the
// identities) is never touched. Anything else is left as it is.
cuir::ExprPtr ReduceModulo(const cuir::ExprPtr& e, const cuir::BoundsEnv& env);

}  // namespace cubridge::lower
