#include <algorithm>

#include "cuir/lower/rewrites/hoisting.h"

namespace cubridge::lower {

using cuir::ExprPtr;

// Pass "share hoisted values": hoist-invariants moved equal values once already; here a value
// that contains a smaller one of its level reads that one instead (share-question's
// doc[q_idx] != 0 reads doc_q, which doc[q_idx] == doc[kv_idx] reads too), so a buffer is read
// once per row or column. A row or column value that is then cheap (doc_q[mt][r] != 0) goes back
// into the element expression: its array would hold registers through the element loop to save
// one operation per element, and at hdim 128 the kernel has none to spare (it spilled).
//
// Sorts block values first, then by size, so that a value comes after the values it reads: a
// value reads smaller values of its level (the subexpressions replaced here), and a row or
// column value also reads the block values inside it, which may be larger than it (the divisor of
// q_idx // (h % 4 + 1); sorted by size alone, the row value came first and could not be declared).
namespace {

// `e` with every subexpression equal to another hoisted value of `level` (other than
// hoisted[self]) replaced by that value's variable.
ExprPtr ReuseHoisted(const ExprPtr& e, Level level, const std::vector<Hoisted>& hoisted,
                     size_t self) {
  for (size_t i = 0; i < hoisted.size(); ++i) {
    if (i != self && hoisted[i].level == level && cuir::Equal(hoisted[i].expr, e)) {
      return cuir::Var(hoisted[i].name, e->loc);
    }
  }
  if (e->args.empty()) return e;
  auto copy = std::make_shared<cuir::Expr>(*e);
  for (ExprPtr& arg : copy->args) arg = ReuseHoisted(arg, level, hoisted, self);
  return ExprPtr(copy);
}

}  // namespace

void ShareHoisted(Hoisting* h) {
  std::stable_sort(h->lets.begin(), h->lets.end(), [](const Hoisted& a, const Hoisted& b) {
    const bool a_block = a.level == Level::kBlock, b_block = b.level == Level::kBlock;
    if (a_block != b_block) return a_block;
    return ExprSize(a.expr) < ExprSize(b.expr);
  });
  const std::vector<Hoisted> original = h->lets;
  std::vector<std::pair<std::string, ExprPtr>> inlined;
  std::vector<Hoisted> kept;
  for (size_t i = 0; i < original.size(); ++i) {
    Hoisted let = original[i];
    let.expr = cuir::Substitute(ReuseHoisted(let.expr, let.level, original, i), inlined);
    if (let.level != Level::kBlock && !Costly(let.expr)) {
      inlined.emplace_back(let.name, let.expr);
    } else {
      kept.push_back(std::move(let));
    }
  }
  h->expr = cuir::Substitute(h->expr, inlined);
  h->lets = std::move(kept);
}

}  // namespace cubridge::lower
