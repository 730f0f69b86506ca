#include "cuir/lower/rewrites/rewrites.h"

namespace cubridge::lower {

using cuir::ExprPtr;

Level LevelOf(const ExprPtr& e) {
  if (cuir::Mentions(e, "score")) return Level::kElement;
  const bool q = cuir::Mentions(e, "q_idx") || cuir::Mentions(e, kQFloat);
  const bool kv = cuir::Mentions(e, "kv_idx") || cuir::Mentions(e, kKvFloat);
  if (q && kv) return Level::kElement;
  return q ? Level::kRow : kv ? Level::kColumn : Level::kBlock;
}

}  // namespace cubridge::lower
