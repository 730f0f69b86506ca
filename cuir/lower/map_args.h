// The bottom-up step the lowering's expression rewrites share: an expression with a function
// applied to each of its arguments, rebuilt only where one changed (unchanged subtrees stay
// shared, so a rewrite that finds nothing allocates nothing).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "cuir/ir/expr.h"

namespace cubridge::lower {

template <typename F>
cuir::ExprPtr MapArgs(const cuir::ExprPtr& e, F&& f) {
  if (e == nullptr || e->args.empty()) return e;
  bool changed = false;
  std::vector<cuir::ExprPtr> args;
  args.reserve(e->args.size());
  for (const cuir::ExprPtr& a : e->args) {
    args.push_back(f(a));
    changed = changed || args.back() != a;
  }
  if (!changed) return e;
  auto copy = std::make_shared<cuir::Expr>(*e);
  copy->args = std::move(args);
  return copy;
}

}  // namespace cubridge::lower
