// Family (c), head mapping: heads.gqa.
#include "absl/strings/str_cat.h"
#include "cuir/transfer/rule.h"

namespace cubridge::transfer {

using cuir::BinaryOp;
using cuir::ExprKind;
using cuir::Stmt;
using cuir::StmtKind;

absl::Status ApplyHeadsGqa(cuir::Program& program, RuleContext& ctx) {
  const cuir::AttentionConfig& c = ctx.config;
  // MHA: the expert's head mapping is already right; leaving it untouched lets the lowering copy
  // the expert's region verbatim.
  // (Transfer validated the config first: heads_q is a positive multiple of heads_kv.)
  if (c.heads_q == c.heads_kv) return absl::OkStatus();
  absl::StatusOr<Layout> layout = FindLayout(program);
  if (!layout.ok()) return layout.status();
  if (layout->kv_head->kind != ExprKind::kVar) {
    return absl::FailedPreconditionError(
        absl::StrCat("the K load's head index `", cuir::PrintExpr(layout->kv_head),
                     "` is not a let-bound name, so the rule cannot remap it"));
  }
  cuir::ExprPtr group =
      cuir::Binary(BinaryOp::kFloorDiv, cuir::Var("heads_q"), cuir::Var("heads_kv"));
  const cuir::ExprPtr grouped = cuir::Binary(BinaryOp::kFloorDiv, layout->head, group);
  for (Stmt& s : program.stmts) {
    if (s.kind != StmtKind::kLet || s.name != layout->kv_head->name) continue;
    // A base that maps query-head groups already (the backward experts') needs nothing.
    if (cuir::Equal(s.value, grouped)) return absl::OkStatus();
    if (!cuir::Equal(s.value, layout->head)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "expected `let ", s.name, ": int = ", cuir::PrintExpr(layout->head), "` at ",
          s.loc.ToString(), ", found `", cuir::PrintExpr(s.value), "`"));
    }
    s.value = grouped;
    ctx.applied.push_back(
        {"heads.gqa", absl::StrCat(s.name, " = ", cuir::PrintExpr(s.value), " (", c.heads_q,
                                   " query heads share ", c.heads_kv, " kv heads)")});
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "no top-level `let ", layout->kv_head->name, "` defines the K load's head"));
}

}  // namespace cubridge::transfer
