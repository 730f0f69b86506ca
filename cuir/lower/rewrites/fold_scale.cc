#include "cuir/lower/rewrites/rewrites.h"

namespace cubridge::lower {

using cuir::ExprPtr;

// Rewrite "fold the score scale": the first score_mod reads the score already multiplied by
// qk_scale, which the expert's visitors apply to the whole tile first (one multiply per
// element). Where the mod is the score plus terms that do not read it (ALiBi, relative position,
// a bias), an expert that offers `for_each_raw_score` hands over the raw score instead and the
// element computes fmaf(score, qk_scale, terms): the multiply joins the add, and a column term
// such as kv * slope is computed once for the thread's rows. Returns the terms; null where the
// mod is not of that form.
ExprPtr TermsBesideTheScore(const ExprPtr& e) {
  std::vector<SignedTerm> terms, rest;
  AdditiveTerms(e, false, {}, &terms, /*distribute=*/false);
  int scores = 0;
  for (SignedTerm& t : terms) {  // (no factors: nothing was distributed)
    const bool score = t.leaf->kind == cuir::ExprKind::kVar && t.leaf->name == "score";
    if (score && !t.negative) {
      ++scores;
      continue;
    }
    if (cuir::Mentions(t.leaf, "score")) return nullptr;
    rest.push_back(std::move(t));
  }
  if (scores != 1 || rest.empty()) return nullptr;
  return SumOfTerms(rest, e->loc);
}

}  // namespace cubridge::lower
