#include "cuir/lower/rewrites/rewrites.h"

namespace cubridge::lower {

using cuir::ExprPtr;

// Rewrite "key term from the tile's start" (KvTermFromTileStart): terms that are a sum of block
// values times kv_f (relative position's -(kv * scale), ALiBi's kv * slope) are linear in the key,
// T(col0 + k) = T(col0) + T(k). An expert that offers for_each_raw_score_kv_split evaluates T once
// per lane at its first key col0, which the softmax takes as the tile's offset, and each element
// at k = kv - col0, a constant once the element loop is unrolled: the per-column add and
// multiply leave the element loop, and a constant coefficient folds into the fma.
bool LinearInTheKey(const ExprPtr& terms) {
  std::vector<SignedTerm> parts;
  AdditiveTerms(terms, false, {}, &parts);
  for (const SignedTerm& t : parts) {
    if (t.leaf->kind != cuir::ExprKind::kVar || t.leaf->name != kKvFloat) return false;
    for (const ExprPtr& f : t.factors) {
      if (LevelOf(f) != Level::kBlock) return false;
    }
  }
  return !parts.empty();
}

}  // namespace cubridge::lower
