// Family (a), mask insertion: mask.analytic-range and mask.block-table.
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuir/transfer/mask_analysis.h"
#include "cuir/transfer/rule.h"
#include "cuir/transfer/symbolic.h"

namespace cubridge::transfer {
namespace {

using cuir::ExprKind;
using cuir::ExprPtr;
using cuir::Stmt;
using cuir::StmtKind;
using cuir::Type;

// `mask S = pred [when !full]` after the score_mod of S (FlexAttention applies score_mod to the
// scaled score before masking), else after the qk producing S.
void InsertMask(std::vector<Stmt>& body, const Layout& l, const ExprPtr& pred,
                const std::string& full_var, const cuir::SourceLoc& loc) {
  size_t at = FindStmt(body, StmtKind::kQK);
  for (size_t i = at; i < body.size(); ++i) {
    if (body[i].kind == StmtKind::kScoreMod && body[i].operands == std::vector{l.qk_result}) at = i;
  }
  Stmt mask;
  mask.kind = StmtKind::kMask;
  mask.loc = loc;
  mask.operands = {l.qk_result};
  mask.value = pred;
  if (!full_var.empty()) mask.aux = cuir::Unary(cuir::UnaryOp::kNot, cuir::Var(full_var));
  body.insert(body.begin() + at + 1, std::move(mask));
}

// Consts are bound by value: the analysis sees their literals (a window's sign matters).
ExprPtr BindConsts(const ExprPtr& e, const VariantSpec& spec) {
  std::vector<std::pair<std::string, ExprPtr>> values;
  for (const VariantSpec::Const& c : spec.consts) {
    if (c.value) values.emplace_back(c.name, c.value);
  }
  return cuir::Substitute(e, values);
}

// Int symbols a mask may use: positions, builtins, and the grid axes that mean b and h (fixed
// within one program, so fine in loop bounds). The Q-tile axis is not a spec name.
absl::flat_hash_set<std::string> TileIntSymbols(const Layout& l) {
  absl::flat_hash_set<std::string> vars = {"q_idx", "kv_idx"};
  for (const auto& [name, type] : cuir::BuiltinSymbols()) {
    if (type == Type::kInt) vars.insert(name);
  }
  for (const std::string& axis : l.grid_axes) {
    if (axis != l.tile_axis) vars.insert(axis);
  }
  return vars;
}

// Lower bounds the semantics guarantee: sizes are positive, grid axes count from 0, and tiles are
// non-empty loads inside the tensors (so q_lo >= 0 and q_hi >= 1).
sym::VarBounds KnownBounds(const cuir::Program& p, const Layout& l) {
  sym::VarBounds bounds;
  for (const auto& [name, type] : cuir::BuiltinSymbols()) {
    if (type == Type::kInt) bounds[name] = 1;
  }
  for (const Stmt& s : p.stmts) {
    if (s.kind == StmtKind::kParam && s.type == Type::kInt) bounds[s.name] = 1;
  }
  for (const std::string& axis : l.grid_axes) bounds[axis] = 0;
  for (const auto& [bound, lowest] :
       {std::pair{l.q_lo, 0}, {l.q_hi, 1}, {l.kv_lo, 0}, {l.kv_hi, 1}}) {
    if (bound->kind == ExprKind::kVar) bounds[bound->name] = lowest;
  }
  return bounds;
}

std::string PrintRanges(const std::vector<cuir::BlockRange>& ranges) {
  std::vector<std::string> parts;
  for (const cuir::BlockRange& r : ranges) {
    parts.push_back(absl::StrCat("[", cuir::PrintExpr(r.lo), ", ", cuir::PrintExpr(r.hi), ")"));
  }
  return absl::StrJoin(parts, " union ");
}

bool MaskPending(const RuleContext& ctx) { return ctx.spec.mask && !ctx.claims.Claimed(MaskKey()); }

}  // namespace

absl::Status ApplyMaskAnalytic(cuir::Program& program, RuleContext& ctx) {
  if (!MaskPending(ctx)) return absl::OkStatus();
  const ExprPtr& mask = ctx.spec.mask;
  if (cuir::Mentions(mask, "score")) {
    ctx.claims.Decline(MaskKey(), "mask_mod reads `score`; masks may depend on positions only",
                       ctx.spec.mask_loc);
    return absl::OkStatus();
  }
  std::vector<std::string> buffers;
  cuir::CollectBuffers(mask, &buffers);
  if (!buffers.empty()) return absl::OkStatus();  // data-dependent: mask.block-table

  absl::StatusOr<Layout> layout = FindLayout(program);
  if (!layout.ok()) return layout.status();
  Stmt& loop = program.stmts[layout->loop_index];
  if (!loop.table.empty() || loop.ranges.empty()) return absl::OkStatus();
  // The forward walks KV blocks for a Q tile; the backward, transposed, query blocks for a K
  // tile: the same analysis with the roles of q_idx and kv_idx exchanged.
  const Layout& l = *layout;
  const bool bwd = l.backward;
  TileSymbols tile{bwd ? "kv_idx" : "q_idx", bwd ? "q_idx" : "kv_idx", bwd ? l.kv_lo : l.q_lo,
                   bwd ? l.kv_hi : l.q_hi, TileIntSymbols(l)};
  MaskAnalysis analysis = AnalyzeMask(BindConsts(mask, ctx.spec), tile);
  if (!analysis.understood) return absl::OkStatus();  // the table is exact where we are not

  BlockSymbols symbols{cuir::Var(bwd ? "BLOCK_M" : "BLOCK_N"), loop.ranges,
                       cuir::Var(bwd ? "seqlen_q" : "seqlen_kv"), bwd ? l.q_lo : l.kv_lo,
                       bwd ? l.q_hi : l.kv_hi, KnownBounds(program, l)};
  BlockPlan plan = PlanBlocks(analysis, symbols);
  loop.ranges = plan.ranges;
  std::string full_var;
  if (plan.full) {
    full_var = FreshName(*layout, ctx.spec, "full");
    Stmt let;
    let.kind = StmtKind::kLet;
    let.loc = ctx.spec.mask_loc;
    let.name = full_var;
    let.type = Type::kBool;
    let.value = plan.full;
    // Next to the K tile's bounds, before the loads: the lowering may then skip per-element work.
    size_t at = FindStmt(loop.body, StmtKind::kLoad);
    loop.body.insert(loop.body.begin() + at, std::move(let));
  }
  InsertMask(loop.body, *layout, mask, full_var, ctx.spec.mask_loc);
  ctx.claims.Claim(MaskKey());
  std::string detail = absl::StrCat(bwd ? "q blocks " : "kv blocks ", PrintRanges(plan.ranges),
                                    "; full when ",
                                    plan.full ? cuir::PrintExpr(plan.full) : "never");
  ctx.applied.push_back({"mask.analytic-range", detail});
  return absl::OkStatus();
}

absl::Status ApplyMaskTable(cuir::Program& program, RuleContext& ctx) {
  if (!MaskPending(ctx)) return absl::OkStatus();
  const ExprPtr& mask = ctx.spec.mask;
  if (cuir::Mentions(mask, "score")) return absl::OkStatus();  // declined by the analytic rule
  absl::StatusOr<Layout> layout = FindLayout(program);
  if (!layout.ok()) return layout.status();
  if (cuir::Mentions(mask, layout->tile_axis)) {
    ctx.claims.Decline(MaskKey(),
                       absl::StrCat("mask_mod mentions the grid axis `", layout->tile_axis, "`"),
                       ctx.spec.mask_loc);
    return absl::OkStatus();
  }
  // One table row per value of the grid axes the predicate depends on (b, h), and per Q tile (per
  // K tile, listing query blocks, for a backward).
  std::vector<std::string> per;
  std::vector<ExprPtr> row;
  for (const std::string& axis : layout->grid_axes) {
    if (axis != layout->tile_axis && cuir::Mentions(mask, axis)) {
      per.push_back(axis);
      row.push_back(cuir::Var(axis));
    }
  }
  row.push_back(cuir::Var(layout->tile_axis));

  Stmt table;
  table.kind = StmtKind::kTable;
  table.loc = ctx.spec.mask_loc;
  table.name = FreshName(*layout, ctx.spec, "T");
  table.value = mask;
  table.names = per;
  if (layout->backward) table.attr = "transposed";
  std::string full_var = FreshName(*layout, ctx.spec, "full");
  Stmt& loop = program.stmts[layout->loop_index];
  loop.ranges.clear();
  loop.table = table.name;
  loop.full_var = full_var;
  loop.exprs = row;
  InsertMask(loop.body, *layout, mask, full_var, ctx.spec.mask_loc);

  std::string detail = absl::StrCat("table ", table.name, " = blocks(", cuir::PrintExpr(mask), ")",
                                    layout->backward ? " transposed" : "",
                                    per.empty() ? "" : " per " + absl::StrJoin(per, ", "),
                                    "; the loop visits its non-empty blocks");
  size_t grid = FindStmt(program.stmts, StmtKind::kGrid);
  program.stmts.insert(program.stmts.begin() + grid + 1, std::move(table));
  ctx.claims.Claim(MaskKey());
  ctx.applied.push_back({"mask.block-table", detail});
  return absl::OkStatus();
}

}  // namespace cubridge::transfer
