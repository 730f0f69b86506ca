// Family (b), score modification: score.inline, and for backward programs score.derivative.
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuir/ir/derivative.h"
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

// The types of every name a spec expression may read, for the differentiator.
cuir::TypeEnv SpecTypes(const VariantSpec& spec, const Layout& layout) {
  cuir::TypeEnv env;
  for (const auto& [name, type] : cuir::BuiltinSymbols()) env.vars[name] = type;
  for (const std::string& axis : layout.grid_axes) env.vars[axis] = cuir::Type::kInt;
  for (const char* v : {"b", "h", "q_idx", "kv_idx"}) env.vars[v] = cuir::Type::kInt;
  env.vars["score"] = cuir::Type::kFloat;
  for (const VariantSpec::Const& c : spec.consts) env.vars[c.name] = c.type;
  for (const VariantSpec::Buffer& b : spec.buffers) env.buffers[b.name] = cuir::ElementType(b.dtype);
  return env;
}

bool IsOne(const ExprPtr& e) {
  return (e->kind == ExprKind::kFloatLit && e->float_value == 1.0) ||
         (e->kind == ExprKind::kIntLit && e->int_value == 1);
}

cuir::Stmt GradStmt(cuir::StmtKind kind, const std::string& ds, const cuir::SourceLoc& loc) {
  cuir::Stmt s;
  s.kind = kind;
  s.loc = loc;
  s.operands = {ds};
  return s;
}

// A derivative the differentiator refused: the score_mod is not covered, with its position and
// the reason.
absl::Status NotDifferentiable(const VariantSpec& spec, const absl::Status& why) {
  return NotCovered("the derivative of score_mod `" + cuir::PrintExpr(spec.score) + "`",
                    spec.score_loc, std::string(why.message()));
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


// The backward's chain rule through the score_mod: after dS = softmax.grad, each learnable
// captured tensor's gradient takes dS times the score_mod's partial at each element it reads,
// then dS is multiplied by d score_mod / d score (at the raw score) before dK and dQ use it.
// A derivative that is the literal 1 (ALiBi, additive biases) leaves dS as it is.
absl::Status ApplyScoreDerivative(cuir::Program& program, RuleContext& ctx) {
  if (!cuir::IsBackward(program)) return absl::OkStatus();
  const ExprPtr& score = ctx.spec.score;
  absl::StatusOr<Layout> layout = FindLayout(program);
  if (!layout.ok()) return layout.status();
  const cuir::TypeEnv types = SpecTypes(ctx.spec, *layout);
  std::vector<cuir::Stmt> stmts;
  std::vector<std::string> learned;
  for (const std::string& name : ctx.spec.grad_buffers) {
    auto it = types.buffers.find(name);
    if (it == types.buffers.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a gradient is asked for `", name, "`, which is no captured tensor of the spec"));
    }
    if (it->second != cuir::Type::kFloat) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a gradient is asked for `", name, "`, an integer or bool tensor, which has none; "
          "only floating captured tensors are learnable"));
    }
    if (!score) continue;  // read by the mask only: its gradient is 0
    absl::StatusOr<std::vector<cuir::BufferReadPartial>> reads =
        cuir::DifferentiateBufferReads(score, name, types);
    if (!reads.ok()) return NotDifferentiable(ctx.spec, reads.status());
    for (const cuir::BufferReadPartial& read : *reads) {
      cuir::Stmt s = GradStmt(cuir::StmtKind::kBufferGrad, layout->softmax_grad, ctx.spec.score_loc);
      s.name = name;
      s.exprs = read.index;
      s.value = read.partial;
      stmts.push_back(std::move(s));
    }
    learned.push_back(name);
  }
  ExprPtr d_score;
  if (score && !(score->kind == ExprKind::kVar && score->name == "score")) {
    absl::StatusOr<ExprPtr> d = cuir::Differentiate(score, "score", types);
    if (!d.ok()) return NotDifferentiable(ctx.spec, d.status());
    if (!IsOne(*d)) d_score = *d;
  }
  if (d_score) {
    cuir::Stmt s = GradStmt(cuir::StmtKind::kScoreGrad, layout->softmax_grad, ctx.spec.score_loc);
    s.value = d_score;
    stmts.push_back(std::move(s));
  }
  if (stmts.empty()) return absl::OkStatus();
  std::vector<cuir::Stmt>& body = program.stmts[layout->loop_index].body;
  const size_t at = FindStmt(body, cuir::StmtKind::kSoftmaxGrad) + 1;
  body.insert(body.begin() + at, stmts.begin(), stmts.end());
  std::string detail = d_score ? absl::StrCat("score_grad ", layout->softmax_grad, " = ",
                                              cuir::PrintExpr(d_score))
                               : "d score_mod / d score = 1";
  if (!learned.empty()) absl::StrAppend(&detail, "; gradients of ", absl::StrJoin(learned, ", "));
  ctx.applied.push_back({"score.derivative", detail});
  return absl::OkStatus();
}

}  // namespace cubridge::transfer
