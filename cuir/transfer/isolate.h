// Solving an int comparison for one variable: `L CMP R` becomes an and/or formula of atoms
// `var <= g` / `var >= g` (g free of var) and of leftover predicates free of var. Every step is
// an equivalence over the integers (e.g. `2*kv <= r` <=> `kv <= r // 2`,
// `kv // B <= r` <=> `kv <= r*B + B - 1`, `min(a, b) <= r` <=> `a <= r || b <= r`), so the
// formula has exactly the truth table of the comparison.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cuir/ir/expr.h"

namespace cubridge::transfer {

struct Formula {
  enum class Kind { kAtom, kAnd, kOr, kOther };
  Kind kind = Kind::kAtom;
  cuir::BinaryOp cmp = cuir::BinaryOp::kLe;  // kAtom: kLe or kGe
  cuir::ExprPtr bound;                       // kAtom: g
  cuir::ExprPtr other;                       // kOther: a bool predicate free of var
  std::vector<Formula> kids;                 // kAnd / kOr
};

// nullopt when `var` occurs in a way the rewrites do not cover (non-linear products, `%`,
// division by a non-literal, a select whose condition depends on var, ...). Both sides must be
// int valued.
std::optional<Formula> Isolate(cuir::BinaryOp cmp, const cuir::ExprPtr& lhs,
                               const cuir::ExprPtr& rhs, const std::string& var);

}  // namespace cubridge::transfer
