// Family (b), score modification: score.inline.
#include <utility>

#include "absl/strings/str_cat.h"
#include "cuir/transfer/rule.h"

namespace cubridge::transfer {
namespace {

using cuir::ExprKind;
using cuir::ExprPtr;

// The first buffer read whose index depends on `score` (a data-dependent gather: no tile of the
// kernel holds the buffer at positions known before the scores are computed).
const cuir::Expr* ScoreIndexedRead(const ExprPtr& e) {
  if (e->kind == ExprKind::kIndex) {
    for (const ExprPtr& index : e->args) {
      if (cuir::Mentions(index, "score")) return e.get();
    }
  }
  for (const ExprPtr& a : e->args) {
    if (const cuir::Expr* hit = ScoreIndexedRead(a)) return hit;
  }
  return nullptr;
}

}  // namespace

absl::Status ApplyScoreInline(cuir::Program& program, RuleContext& ctx) {
  const ExprPtr& score = ctx.spec.score;
  if (!score) return absl::OkStatus();
  if (const cuir::Expr* read = ScoreIndexedRead(score)) {
    ctx.claims.Decline(ScoreKey(),
                       absl::StrCat("score_mod reads buffer `", read->name,
                                    "` at an index that depends on `score`"),
                       read->loc.known() ? read->loc : ctx.spec.score_loc);
    return absl::OkStatus();
  }
  // `return score` changes nothing: claim it without a statement, so the program stays the
  // expert's own and the lowering copies every region.
  if (score->kind == ExprKind::kVar && score->name == "score") {
    ctx.claims.Claim(ScoreKey());
    return absl::OkStatus();
  }
  absl::StatusOr<Layout> layout = FindLayout(program);
  if (!layout.ok()) return layout.status();
  std::vector<cuir::Stmt>& body = program.stmts[layout->loop_index].body;
  cuir::Stmt s;
  s.kind = cuir::StmtKind::kScoreMod;
  s.loc = ctx.spec.score_loc;
  s.operands = {layout->qk_result};
  s.value = score;
  size_t qk = FindStmt(body, cuir::StmtKind::kQK);
  body.insert(body.begin() + qk + 1, std::move(s));
  ctx.claims.Claim(ScoreKey());
  ctx.applied.push_back({"score.inline", absl::StrCat("score_mod ", layout->qk_result, " = ",
                                                      cuir::PrintExpr(score))});
  return absl::OkStatus();
}

}  // namespace cubridge::transfer
