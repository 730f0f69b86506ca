#include "cuir/transfer/mask_analysis.h"

#include <memory>
#include <utility>

#include "cuir/transfer/isolate.h"
#include "cuir/transfer/symbolic.h"

namespace cubridge::transfer {
namespace {

using cuir::BinaryOp;
using cuir::ExprKind;
using cuir::ExprPtr;

// Bounds where null means "unbounded": the max of lower bounds ignores -inf, and so on.
ExprPtr LowerMax(const ExprPtr& a, const ExprPtr& b) { return !a ? b : !b ? a : sym::Max(a, b); }
ExprPtr UpperMin(const ExprPtr& a, const ExprPtr& b) { return !a ? b : !b ? a : sym::Min(a, b); }
ExprPtr LowerMin(const ExprPtr& a, const ExprPtr& b) {
  return (!a || !b) ? nullptr : sym::Min(a, b);
}
ExprPtr UpperMax(const ExprPtr& a, const ExprPtr& b) {
  return (!a || !b) ? nullptr : sym::Max(a, b);
}
ExprPtr GuardOr(const ExprPtr& a, const ExprPtr& b) { return (!a || !b) ? nullptr : sym::Or(a, b); }

bool SameExpr(const ExprPtr& a, const ExprPtr& b) {
  if (!a || !b) return !a && !b;
  return cuir::Equal(a, b);
}

bool SameInterval(const KvInterval& a, const KvInterval& b) {
  return SameExpr(a.lo, b.lo) && SameExpr(a.hi, b.hi) && SameExpr(a.guard, b.guard);
}

bool StaticallyEmpty(const KvInterval& iv) {
  if (iv.guard && sym::IsBool(iv.guard, false)) return true;
  return iv.lo && iv.hi && sym::IsBool(sym::Cmp(BinaryOp::kLt, iv.lo, iv.hi), false);
}

KvSet Everything() { return {KvInterval{}}; }

// The smallest single interval containing the whole set.
KvInterval Hull(const KvSet& set) {
  KvInterval h = set.front();
  for (size_t i = 1; i < set.size(); ++i) {
    h.lo = LowerMin(h.lo, set[i].lo);
    h.hi = UpperMax(h.hi, set[i].hi);
    h.guard = GuardOr(h.guard, set[i].guard);
  }
  return h;
}

// Adds `iv` to `set`, merging it with an interval that shares a bound and the guard: the union of
// [lo, h1) and [lo, h2) is exactly [lo, max(h1, h2)).
void AddInterval(KvSet* set, KvInterval iv) {
  if (StaticallyEmpty(iv)) return;
  for (KvInterval& old : *set) {
    if (SameInterval(old, iv)) return;
    if (!SameExpr(old.guard, iv.guard)) continue;
    if (SameExpr(old.lo, iv.lo)) {
      old.hi = UpperMax(old.hi, iv.hi);
      return;
    }
    if (SameExpr(old.hi, iv.hi)) {
      old.lo = LowerMin(old.lo, iv.lo);
      return;
    }
  }
  set->push_back(std::move(iv));
}

KvSet Capped(KvSet set, bool over_approximate) {
  if (set.size() <= kMaxIntervals) return set;
  if (over_approximate) return {Hull(set)};
  set.resize(kMaxIntervals);  // a subset of the union is still inside it
  return set;
}

struct Sets {
  KvSet any, all;
};

// `any` sets may only grow when capped and `all` sets only shrink (see Capped).
Sets Connect(bool conjunction, const Sets& a, const Sets& b) {
  if (conjunction) return {Intersect(a.any, b.any, true), Intersect(a.all, b.all, false)};
  return {Unite(a.any, b.any, true), Unite(a.all, b.all, false)};
}

class Analyzer {
 public:
  explicit Analyzer(const TileSymbols& tile) : tile_(tile) {}

  Sets Predicate(const ExprPtr& e, bool negate) {
    switch (e->kind) {
      case ExprKind::kBoolLit:
        return e->bool_value != negate ? Sets{Everything(), Everything()} : Sets{};
      case ExprKind::kUnary:
        if (e->unary_op == cuir::UnaryOp::kNot) return Predicate(e->args[0], !negate);
        return Unknown(e);
      case ExprKind::kBinary:
        break;
      default:
        return Unknown(e);
    }
    BinaryOp op = e->binary_op;
    if (op == BinaryOp::kAnd || op == BinaryOp::kOr) {
      bool conjunction = (op == BinaryOp::kAnd) != negate;  // De Morgan under negation
      return Connect(conjunction, Predicate(e->args[0], negate), Predicate(e->args[1], negate));
    }
    if (!cuir::IsComparison(op)) return Unknown(e);
    return Atom(negate ? sym::Negated(op) : op, e->args[0], e->args[1], e);
  }

  MaskAnalysis Finish(Sets sets) {
    MaskAnalysis out;
    out.any = std::move(sets.any);
    out.all = std::move(sets.all);
    out.understood = unknown_.empty();
    out.not_understood = std::move(unknown_);
    return out;
  }

 private:
  Sets Unknown(const ExprPtr& e) {
    unknown_.push_back(cuir::PrintExpr(e));
    return {Everything(), {}};
  }

  static Sets Guarded(const ExprPtr& any_guard, const ExprPtr& all_guard) {
    return {{KvInterval{nullptr, nullptr, any_guard}}, {KvInterval{nullptr, nullptr, all_guard}}};
  }

  Sets Atom(BinaryOp op, const ExprPtr& lhs, const ExprPtr& rhs, const ExprPtr& whole) {
    std::vector<std::string> buffers;
    cuir::CollectBuffers(whole, &buffers);
    if (!buffers.empty() || !sym::IsIntValued(lhs, tile_.int_vars) ||
        !sym::IsIntValued(rhs, tile_.int_vars)) {
      return Unknown(whole);
    }
    if (cuir::Mentions(whole, tile_.kv_var)) {
      std::optional<Formula> f = Isolate(op, lhs, rhs, tile_.kv_var);
      return f ? FromFormula(*f, /*kv_atoms=*/true, whole) : Unknown(whole);
    }
    if (cuir::Mentions(whole, tile_.q_var)) {
      std::optional<Formula> f = Isolate(op, lhs, rhs, tile_.q_var);
      return f ? FromFormula(*f, /*kv_atoms=*/false, whole) : Unknown(whole);
    }
    ExprPtr cond = sym::Cmp(op, lhs, rhs);  // same for every element of the tile
    return Guarded(cond, cond);
  }

  Sets FromFormula(const Formula& f, bool kv_atoms, const ExprPtr& whole) {
    switch (f.kind) {
      case Formula::Kind::kOther:
        return Predicate(f.other, false);
      case Formula::Kind::kAnd:
      case Formula::Kind::kOr: {
        return Connect(f.kind == Formula::Kind::kAnd, FromFormula(f.kids[0], kv_atoms, whole),
                       FromFormula(f.kids[1], kv_atoms, whole));
      }
      case Formula::Kind::kAtom:
        break;
    }
    return kv_atoms ? KvAtom(f.cmp, f.bound, whole) : RowAtom(f.cmp, f.bound);
  }

  // The first select in g whose condition depends on the row.
  const cuir::Expr* RowDependentSelect(const ExprPtr& g) const {
    if (g->kind == ExprKind::kSelect && cuir::Mentions(g->args[0], tile_.q_var)) return g.get();
    for (const ExprPtr& a : g->args) {
      if (const cuir::Expr* hit = RowDependentSelect(a)) return hit;
    }
    return nullptr;
  }

  static ExprPtr Replace(const ExprPtr& e, const cuir::Expr* node, const ExprPtr& with) {
    if (e.get() == node) return with;
    if (e->args.empty()) return e;
    cuir::Expr copy = *e;
    for (ExprPtr& a : copy.args) a = Replace(a, node, with);
    return std::make_shared<const cuir::Expr>(std::move(copy));
  }

  ExprPtr At(const ExprPtr& g, const ExprPtr& q) {
    return sym::Simplify(cuir::Substitute(g, {{tile_.q_var, q}}));
  }

  // kv <= g(q) or kv >= g(q) for every / some row q of the tile, g monotone in q: the extreme
  // values of g over the tile are at its first and last row.
  Sets KvAtom(BinaryOp cmp, const ExprPtr& g, const ExprPtr& whole) {
    sym::Mono mono = sym::MonotonicityIn(g, tile_.q_var);
    if (mono == sym::Mono::kUnknown) {
      // kv cmp g[select(c, x, y)]  <=>  (c && kv cmp g[x]) || (!c && kv cmp g[y]): each branch
      // may be monotone where g is not (e.g. a bound that switches at a row threshold).
      if (const cuir::Expr* sel = RowDependentSelect(g)) {
        ExprPtr kv = cuir::Var(tile_.kv_var);
        ExprPtr then_atom = cuir::Binary(cmp, kv, Replace(g, sel, sel->args[1]));
        ExprPtr else_atom = cuir::Binary(cmp, kv, Replace(g, sel, sel->args[2]));
        return Predicate(
            cuir::Binary(BinaryOp::kOr, cuir::Binary(BinaryOp::kAnd, sel->args[0], then_atom),
                         cuir::Binary(BinaryOp::kAnd, sym::Not(sel->args[0]), else_atom)),
            false);
      }
      return Unknown(whole);
    }
    ExprPtr first = At(g, tile_.q_lo), last = At(g, sym::AddConst(tile_.q_hi, -1));
    ExprPtr gmin = mono == sym::Mono::kDec ? last : first;
    ExprPtr gmax = mono == sym::Mono::kDec ? first : last;
    if (cmp == BinaryOp::kLe) {
      return {{KvInterval{nullptr, sym::AddConst(gmax, 1), nullptr}},
              {KvInterval{nullptr, sym::AddConst(gmin, 1), nullptr}}};
    }
    return {{KvInterval{gmin, nullptr, nullptr}}, {KvInterval{gmax, nullptr, nullptr}}};
  }

  // q <= g or q >= g with g free of q and kv: holds for some / every row of [q_lo, q_hi).
  Sets RowAtom(BinaryOp cmp, const ExprPtr& g) {
    ExprPtr first = tile_.q_lo, last = sym::AddConst(tile_.q_hi, -1);
    if (cmp == BinaryOp::kLe) return Guarded(sym::Cmp(cmp, first, g), sym::Cmp(cmp, last, g));
    return Guarded(sym::Cmp(cmp, last, g), sym::Cmp(cmp, first, g));
  }

  const TileSymbols& tile_;
  std::vector<std::string> unknown_;
};

}  // namespace

KvSet Intersect(const KvSet& a, const KvSet& b, bool over_approximate) {
  KvSet out;
  for (const KvInterval& x : a) {
    for (const KvInterval& y : b) {
      AddInterval(
          &out, KvInterval{LowerMax(x.lo, y.lo), UpperMin(x.hi, y.hi), sym::And(x.guard, y.guard)});
    }
  }
  return Capped(std::move(out), over_approximate);
}

KvSet Unite(const KvSet& a, const KvSet& b, bool over_approximate) {
  KvSet out;
  for (const KvSet* s : {&a, &b}) {
    for (const KvInterval& iv : *s) AddInterval(&out, iv);
  }
  return Capped(std::move(out), over_approximate);
}

MaskAnalysis AnalyzeMask(const ExprPtr& mask, const TileSymbols& tile) {
  Analyzer analyzer(tile);
  Sets sets = analyzer.Predicate(mask, false);
  return analyzer.Finish(std::move(sets));
}

}  // namespace cubridge::transfer
