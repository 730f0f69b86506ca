// From kv sets to the loop's block ranges and the `full` test (see mask_analysis.h).
#include <utility>

#include "cuir/transfer/mask_analysis.h"
#include "cuir/transfer/symbolic.h"

namespace cubridge::transfer {
namespace {

using cuir::BinaryOp;
using cuir::BlockRange;
using cuir::ExprPtr;

// max(x, 0), skipped when x is provably non-negative: floor and ceil divisions then never see a
// negative operand, which keeps the generated index math unsigned-friendly.
ExprPtr ClampLow(const ExprPtr& x, const BlockSymbols& s) {
  return sym::NonNegative(x, s.var_bounds) ? x : sym::Max(x, sym::Int(0));
}

bool SameRange(const BlockRange& a, const BlockRange& b) {
  return cuir::Equal(a.lo, b.lo) && cuir::Equal(a.hi, b.hi);
}

// Blocks n whose kv rows [n*BN, min((n+1)*BN, seqlen_kv)) meet [lo, hi): floor(lo / BN) <= n <
// cdiv(hi, BN), restricted to one range of the universe, and none when lo >= seqlen_kv or the
// guard fails. Exact whenever lo < hi.
BlockRange ClipToUniverse(const KvInterval& iv, const BlockRange& u, const BlockSymbols& s) {
  ExprPtr lo = u.lo, hi = u.hi;
  if (iv.lo) {
    ExprPtr first = sym::FloorDiv(ClampLow(iv.lo, s), s.block_n);
    int64_t ulo = 0;
    bool trivial = sym::IsInt(u.lo, &ulo) && ulo == 0 && sym::NonNegative(first, s.var_bounds);
    lo = trivial ? first : sym::Max(first, u.lo);
  }
  if (iv.hi) hi = sym::Min(sym::Cdiv(ClampLow(iv.hi, s), s.block_n), u.hi);
  // A lower bound at or past seqlen_kv would still select the last (partial) block.
  ExprPtr guard = iv.guard;
  int64_t v = 0;
  if (iv.lo && !(sym::IsInt(iv.lo, &v) && v <= 0)) {
    guard = sym::And(guard, sym::Cmp(BinaryOp::kLt, iv.lo, s.seqlen_kv));
  }
  if (guard) hi = sym::Select(guard, hi, lo);
  return BlockRange{lo, hi};
}

// kv_lo >= lo && kv_hi <= hi && guard, leaving out what holds for every block anyway.
ExprPtr InsideTest(const KvInterval& iv, const BlockSymbols& s) {
  ExprPtr test = iv.guard;
  int64_t v = 0;
  if (iv.lo && !(sym::IsInt(iv.lo, &v) && v <= 0)) {
    test = sym::And(test, sym::Cmp(BinaryOp::kGe, s.kv_lo, iv.lo));
  }
  if (iv.hi && !cuir::Equal(iv.hi, s.seqlen_kv)) {
    test = sym::And(test, sym::Cmp(BinaryOp::kLe, s.kv_hi, iv.hi));
  }
  return test ? test : cuir::BoolLit(true);
}

}  // namespace

BlockPlan PlanBlocks(const MaskAnalysis& analysis, const BlockSymbols& s) {
  BlockPlan plan;
  for (const KvInterval& iv : analysis.any) {
    for (const BlockRange& u : s.universe) {
      BlockRange r = ClipToUniverse(iv, u, s);
      bool seen = false;
      for (const BlockRange& old : plan.ranges) seen = seen || SameRange(old, r);
      if (!seen) plan.ranges.push_back(std::move(r));
    }
  }
  if (plan.ranges.empty()) plan.ranges.push_back(BlockRange{sym::Int(0), sym::Int(0)});
  for (const KvInterval& iv : analysis.all) {
    ExprPtr inside = InsideTest(iv, s);
    plan.full = plan.full ? sym::Or(plan.full, inside) : inside;
  }
  return plan;
}

}  // namespace cubridge::transfer
