// Simplifying constructors for the int index math the rules emit (block ranges, `full`
// predicates). They fold integer literals with Python semantics and collect constant offsets, so
// that e.g. `(q_hi - 1) + 1` comes out as `q_hi`: the emitted program stays readable, and the
// lowering generates the same index math a person would write.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "cuir/ir/expr.h"

namespace cubridge::transfer::sym {

using cuir::BinaryOp;
using cuir::ExprPtr;

ExprPtr Int(int64_t v);
// True when `e` is an int literal (stores its value in *v when given).
bool IsInt(const ExprPtr& e, int64_t* v = nullptr);
bool IsBool(const ExprPtr& e, bool value);

// Python floor division and ceil division on literals (b != 0).
int64_t FloorDivInt(int64_t a, int64_t b);
int64_t CeilDivInt(int64_t a, int64_t b);

ExprPtr Add(const ExprPtr& a, const ExprPtr& b);
ExprPtr AddConst(const ExprPtr& a, int64_t c);
ExprPtr Sub(const ExprPtr& a, const ExprPtr& b);
ExprPtr Neg(const ExprPtr& a);
ExprPtr Mul(const ExprPtr& a, const ExprPtr& b);
ExprPtr FloorDiv(const ExprPtr& a, const ExprPtr& b);
ExprPtr Cdiv(const ExprPtr& a, const ExprPtr& b);
ExprPtr Min(const ExprPtr& a, const ExprPtr& b);
ExprPtr Max(const ExprPtr& a, const ExprPtr& b);
ExprPtr Select(const ExprPtr& c, const ExprPtr& a, const ExprPtr& b);

// Rebuilds `e` bottom-up through the constructors above (e.g. after a substitution). Only for
// int index math: the offset rules (`x <= y - 1` -> `x < y`) do not hold for floats.
ExprPtr Simplify(const ExprPtr& e);

// Comparison of ints; folds literals and moves constant offsets to one side.
ExprPtr Cmp(BinaryOp op, const ExprPtr& a, const ExprPtr& b);
// Boolean connectives; a null operand means `true` (no condition).
ExprPtr And(const ExprPtr& a, const ExprPtr& b);
ExprPtr Or(const ExprPtr& a, const ExprPtr& b);
ExprPtr Not(const ExprPtr& a);

// The comparison with swapped operands (a < b  <=>  b > a) and the negated one (!(a < b) <=> a >=
// b).
BinaryOp Swapped(BinaryOp op);
BinaryOp Negated(BinaryOp op);

// A proven lower bound of an int expression, given lower bounds of symbols (seqlen_kv >= 1, grid
// axes >= 0, the Q tile's q_hi >= 1, ...); nullopt when none follows from the operators.
using VarBounds = absl::flat_hash_map<std::string, int64_t>;
std::optional<int64_t> LowerBound(const ExprPtr& e, const VarBounds& vars);
bool NonNegative(const ExprPtr& e, const VarBounds& vars);

// How an int expression varies with one variable, everything else held fixed. Syntactic and
// conservative: kUnknown whenever monotonicity is not evident from the operators.
enum class Mono { kConst, kInc, kDec, kUnknown };
Mono MonotonicityIn(const ExprPtr& e, const std::string& var);

// Syntactically int-valued given the int-typed symbols (literals, + - * // % min max cdiv abs,
// select of ints). Anything else (floats, `/`, buffers of unknown type) is false.
bool IsIntValued(const ExprPtr& e, const absl::flat_hash_set<std::string>& int_vars);

}  // namespace cubridge::transfer::sym
