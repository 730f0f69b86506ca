#include "cuir/lower/rewrites/rewrites.h"

namespace cubridge::lower {

using cuir::ExprPtr;

// Rewrite "row terms to the LSE": the terms of a score_mod's sum that read no key index (ALiBi's
// -q_idx * slope, relative position's q_idx * scale, a constant) add one amount to every score
// of a query row, and the softmax of a row does not see such an amount: O stays the same, and
// LSE = log sum exp(S) moves by exactly that amount. So those terms leave the element loop and
// the epilogue adds them to their row's LSE (the expert's `shift_lse_rows`, region
// `epilogue_rows`). ALiBi's element work drops from score + (kv - q) * slope (a subtraction and
// an fma after the scale) to score + kv * slope (one fma). Products by block values are
// distributed over sums to find the terms; rounding differs from the undistributed form by an
// ulp of kv * slope, far inside the verified tolerance.

// `row_scope` holds what the epilogue sees (the kernel's names, q_idx and its float): a term
// that reads a name of the KV loop (a block let) stays, since it may change from block to block.
std::optional<RowSplit> SplitRowTerms(const ExprPtr& e, const EmitScope& row_scope) {
  std::vector<SignedTerm> terms, element, row;
  AdditiveTerms(e, false, {}, &terms);
  for (SignedTerm& t : terms) {
    const Level level = LevelOf(t.leaf);
    const bool lifts = (level == Level::kRow || level == Level::kBlock) &&
                       EmitExpr(SumOfTerms({t}, e->loc), row_scope).ok();
    (lifts ? row : element).push_back(std::move(t));
  }
  if (row.empty() || element.empty()) return std::nullopt;
  RowSplit split{SumOfTerms(element, e->loc), SumOfTerms(row, e->loc)};
  if (!cuir::Mentions(split.element, "score")) return std::nullopt;  // S = R(q): nothing to gain
  return split;
}

}  // namespace cubridge::lower
