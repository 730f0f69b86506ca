#include <algorithm>
#include <set>

#include "cuir/lower/rewrites/hoisting.h"

namespace cubridge::lower {

using cuir::ExprPtr;

// Pass "fit the column budget": column values live in [NT][2] register arrays through the
// element loop (32 registers each at BLOCK_N 128, 44 at 176) beside the expert's accumulators. A
// transcendental one always stays (per element again it costs tens of instructions: a hyperbolic
// distance's sinh ran at half speed recomputed); of the cheaper ones (integer arithmetic, buffer
// reads) only as many as leave kMaxColumnArrays in all, costliest first (then largest), since
// three arrays made a Hopper kernel spill (a haversine's: 392 B of spill stores at hdim 128). The
// others go back into the element expression and whatever reads them, computed per element as
// FlexAttention computes everything. Row values are not limited by this pass.
void FitColumnBudget(Hoisting* h) {
  std::vector<Hoisted>& lets = h->lets;
  std::vector<size_t> cheap;
  int transcendental = 0;
  for (size_t i = 0; i < lets.size(); ++i) {
    if (lets[i].level != Level::kColumn) continue;
    if (RecomputeCost(lets[i].expr) >= 3) {
      ++transcendental;
    } else {
      cheap.push_back(i);
    }
  }
  const int room = std::max(0, kMaxColumnArrays - transcendental);
  if (static_cast<int>(cheap.size()) <= room) return;
  std::stable_sort(cheap.begin(), cheap.end(), [&](size_t a, size_t b) {
    const int ca = RecomputeCost(lets[a].expr), cb = RecomputeCost(lets[b].expr);
    return ca != cb ? ca > cb : ExprSize(lets[a].expr) > ExprSize(lets[b].expr);
  });
  const std::set<size_t> back(cheap.begin() + room, cheap.end());
  // Values come after the values they read (ShareHoisted): one pass substitutes.
  std::vector<std::pair<std::string, ExprPtr>> inlined;
  std::vector<Hoisted> kept;
  for (size_t i = 0; i < lets.size(); ++i) {
    Hoisted let = lets[i];
    let.expr = cuir::Substitute(let.expr, inlined);
    if (back.count(i)) {
      inlined.emplace_back(let.name, let.expr);
    } else {
      kept.push_back(std::move(let));
    }
  }
  h->expr = cuir::Substitute(h->expr, inlined);
  lets = std::move(kept);
}

}  // namespace cubridge::lower
