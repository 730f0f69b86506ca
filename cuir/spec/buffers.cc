// What a spec's indexing asks of its captured tensors: the rank each use fixes, and per dimension
// the least size the indices reach (interval analysis over the element's index ranges).
#include <algorithm>
#include <functional>
#include <optional>

#include "absl/strings/str_cat.h"
#include "cuir/ir/bounds.h"
#include "cuir/ir/eval.h"
#include "cuir/spec/internal.h"

namespace cubridge::spec {
namespace {

using cuir::BinaryOp;
using cuir::Expr;
using cuir::ExprKind;

void ForEachUse(const ExprPtr& e, const std::string& name,
                const std::function<void(const Expr&)>& fn) {
  if (e == nullptr) return;
  std::vector<const Expr*> stack = {e.get()};
  while (!stack.empty()) {
    const Expr* n = stack.back();
    stack.pop_back();
    if (n->kind == ExprKind::kIndex && n->name == name) fn(*n);
    // Right to left onto the stack: uses are visited in reading order.
    for (auto a = n->args.rbegin(); a != n->args.rend(); ++a) stack.push_back(a->get());
  }
}

ExprPtr ParamLiteral(const SpecParam& p) {
  return std::visit(
      [](auto x) -> ExprPtr {
        using T = decltype(x);
        if constexpr (std::is_same_v<T, bool>) return cuir::BoolLit(x);
        else if constexpr (std::is_same_v<T, int64_t>) return cuir::IntLit(x);
        else return cuir::FloatLit(x);
      },
      p.value);
}

// e + c, folding a literal offset already there (`seqlen_q - 1` + 1 is `seqlen_q`).
ExprPtr PlusConst(const ExprPtr& e, int64_t c) {
  if (e->kind == ExprKind::kIntLit) return cuir::IntLit(e->int_value + c);
  if (e->kind == ExprKind::kBinary && e->args[1]->kind == ExprKind::kIntLit &&
      (e->binary_op == BinaryOp::kAdd || e->binary_op == BinaryOp::kSub)) {
    const int64_t k = e->binary_op == BinaryOp::kAdd ? e->args[1]->int_value + c
                                                     : c - e->args[1]->int_value;
    if (k == 0) return e->args[0];
    return k > 0 ? cuir::Binary(BinaryOp::kAdd, e->args[0], cuir::IntLit(k))
                 : cuir::Binary(BinaryOp::kSub, e->args[0], cuir::IntLit(-k));
  }
  return c == 0 ? e : cuir::Binary(BinaryOp::kAdd, e, cuir::IntLit(c));
}

ExprPtr Negated(const ExprPtr& e) {
  if (e->kind == ExprKind::kIntLit) return cuir::IntLit(-e->int_value);
  if (e->kind == ExprKind::kUnary && e->unary_op == cuir::UnaryOp::kNeg) return e->args[0];
  if (e->kind == ExprKind::kBinary && e->binary_op == BinaryOp::kSub) {
    return cuir::Binary(BinaryOp::kSub, e->args[1], e->args[0]);
  }
  return cuir::Unary(cuir::UnaryOp::kNeg, e);
}

void MaxTerms(const ExprPtr& e, std::vector<ExprPtr>* terms) {
  if (e->kind == ExprKind::kBinary && e->binary_op == BinaryOp::kMax) {
    MaxTerms(e->args[0], terms);
    MaxTerms(e->args[1], terms);
    return;
  }
  for (const ExprPtr& t : *terms) {
    if (cuir::Equal(t, e)) return;
  }
  terms->push_back(e);
}

// max(a, b) with nested maxes flattened, equal terms once and literals merged, in one order
// whatever the order of the uses (`seqlen_q` before `seqlen_kv`: text order, descending).
ExprPtr MaxOf(const ExprPtr& a, const ExprPtr& b) {
  std::vector<ExprPtr> terms;
  MaxTerms(a, &terms);
  MaxTerms(b, &terms);
  std::optional<int64_t> literal;
  std::vector<std::pair<std::string, ExprPtr>> symbolic;
  for (const ExprPtr& t : terms) {
    if (t->kind == ExprKind::kIntLit) {
      literal = std::max(literal.value_or(t->int_value), t->int_value);
    } else {
      symbolic.emplace_back(cuir::PrintExpr(t), t);
    }
  }
  std::sort(symbolic.begin(), symbolic.end(),
            [](const auto& x, const auto& y) { return x.first > y.first; });
  ExprPtr out;
  for (const auto& [text, t] : symbolic) out = out ? cuir::Binary(BinaryOp::kMax, out, t) : t;
  if (literal) out = out ? cuir::Binary(BinaryOp::kMax, out, cuir::IntLit(*literal)) : cuir::IntLit(*literal);
  return out;
}

// The least size a dimension must have for an index in `r` (Python: -size <= i < size); null
// when a side is unbounded or cannot be written down.
ExprPtr Reach(const cuir::IntBounds& r) {
  if (!r.lo || !r.hi) return nullptr;
  if (*r.lo >= 0) return r.hi_expr ? PlusConst(r.hi_expr, 1) : nullptr;
  if (*r.hi < 0) return r.lo_expr ? Negated(r.lo_expr) : nullptr;
  if (!r.hi_expr || !r.lo_expr) return nullptr;
  return MaxOf(PlusConst(r.hi_expr, 1), Negated(r.lo_expr));
}

}  // namespace

std::vector<ExprPtr> BufferExtents(const Spec& spec, const SpecBuffer& b) {
  if (b.rank < 0) return {};
  std::vector<std::pair<std::string, ExprPtr>> values;
  for (const SpecParam& p : spec.params) values.emplace_back(p.name, ParamLiteral(p));
  const cuir::BoundsEnv env = cuir::ElementBoundsEnv();
  std::vector<ExprPtr> extents(b.rank);
  std::vector<bool> unknown(b.rank, false);
  for (const ExprPtr& root : {spec.mask, spec.score}) {
    ForEachUse(root, b.name, [&](const Expr& use) {
      for (size_t d = 0; d < use.args.size() && d < extents.size(); ++d) {
        const ExprPtr index = cuir::FoldConstants(cuir::Substitute(use.args[d], values));
        const ExprPtr need = Reach(cuir::BoundsOf(index, env));
        if (need == nullptr) {
          unknown[d] = true;
        } else {
          extents[d] = cuir::FoldConstants(extents[d] ? MaxOf(extents[d], need) : need);
        }
      }
    });
  }
  for (size_t d = 0; d < extents.size(); ++d) {
    if (unknown[d]) extents[d] = nullptr;
  }
  return extents;
}

std::string BufferUseText(const Spec& spec, const std::string& name) {
  std::string text;
  for (const ExprPtr& root : {spec.mask, spec.score}) {
    ForEachUse(root, name, [&](const Expr& use) {
      if (!text.empty()) return;
      // The node is owned by the spec's tree; print it through a non-owning pointer.
      const ExprPtr alias(std::shared_ptr<const Expr>{}, &use);
      std::string printed = cuir::PrintExpr(alias);
      if (printed.size() > 80) printed = printed.substr(0, 77) + "...";  // the position says where
      text = absl::StrCat("`", printed, "`",
                          use.loc.known() ? absl::StrCat(" at ", use.loc.ToString()) : "");
    });
  }
  return text;
}

}  // namespace cubridge::spec
