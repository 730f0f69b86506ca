// Keeping the spec's names and the base program's names apart.
#include <functional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cuir/transfer/rule.h"

namespace cubridge::transfer {
namespace {

using cuir::ExprPtr;
using cuir::Stmt;
using cuir::StmtKind;

void RenameIn(std::vector<Stmt>& stmts, const std::string& from, const std::string& to) {
  const std::vector<std::pair<std::string, ExprPtr>> binding = {{from, cuir::Var(to)}};
  auto expr = [&](ExprPtr& e) {
    if (e) e = cuir::Substitute(e, binding);
  };
  auto name = [&](std::string& n) {
    if (n == from) n = to;
  };
  for (Stmt& s : stmts) {
    name(s.name);
    name(s.full_var);
    name(s.table);
    for (std::string& n : s.operands) name(n);
    for (std::string& n : s.names) name(n);
    expr(s.value);
    expr(s.aux);
    expr(s.pipeline);
    for (ExprPtr& e : s.exprs) expr(e);
    for (cuir::BlockRange& r : s.ranges) {
      expr(r.lo);
      expr(r.hi);
    }
    RenameIn(s.body, from, to);
  }
}

// What the base declares `name` as, when that may not be renamed (params are the tile sizes the
// lowering and the tuner look up by name).
const char* Unrenamable(const cuir::Program& p, const std::string& name) {
  // A spec's expressions read b and h as the batch and head indices whatever the base calls its
  // grid axes (MapCanonicalNames), and score as the score: a parameter of that name would be
  // read in their place. (The Python frontend refuses such names first; specs built otherwise,
  // by a tool or a test, get the same answer here.)
  if (name == "b" || name == "h") return "index variable";
  if (name == "score") return "score variable";
  for (const auto& [builtin, type] : cuir::BuiltinSymbols()) {
    if (builtin == name) return "builtin symbol";
  }
  for (const Stmt& s : p.stmts) {
    if (s.kind == StmtKind::kParam && s.name == name) return "param";
  }
  return nullptr;
}

}  // namespace

absl::Status CheckSpecReads(const VariantSpec& spec, const Layout& layout) {
  // The grid axes and a mask's `score` are the rules' to decline (not covered: a model may
  // handle them); what is left is a name of the kernel's own.
  std::set<std::string> known = {"b", "h", "q_idx", "kv_idx", "score"};
  known.insert(layout.grid_axes.begin(), layout.grid_axes.end());
  for (const auto& [builtin, type] : cuir::BuiltinSymbols()) known.insert(builtin);
  for (const VariantSpec::Const& c : spec.consts) known.insert(c.name);
  for (const VariantSpec::Buffer& b : spec.buffers) known.insert(b.name);
  // The first variable of `e` that is none of them, where it stands; null when there is none.
  std::function<const cuir::Expr*(const cuir::ExprPtr&)> unknown =
      [&](const cuir::ExprPtr& e) -> const cuir::Expr* {
    if (!e) return nullptr;
    if (e->kind == cuir::ExprKind::kVar && known.count(e->name) == 0) return e.get();
    for (const cuir::ExprPtr& a : e->args) {
      if (const cuir::Expr* found = unknown(a)) return found;
    }
    return nullptr;
  };
  auto check = [&](const cuir::ExprPtr& e, const cuir::SourceLoc& loc,
                   const char* what) -> absl::Status {
    const cuir::Expr* v = unknown(e);
    if (v == nullptr) return absl::OkStatus();
    // A name of the kernel's own (kv_lo, n_block, ...) would be read from the kernel.
    return absl::InvalidArgumentError(absl::StrCat(
        (v->loc.line > 0 ? v->loc : loc).ToString(), ": the ", what, " reads `", v->name,
        "`, which is none of its arguments, the spec's parameters and buffers, or the builtins ("
        "batch, heads_q, heads_kv, head_dim, seqlen_q, seqlen_kv, softmax_scale)"));
  };
  if (auto s = check(spec.mask, spec.mask_loc, "mask_mod"); !s.ok()) return s;
  return check(spec.score, spec.score_loc, "score_mod");
}

absl::Status AvoidNameClashes(cuir::Program& program, const VariantSpec& spec) {
  std::vector<std::pair<std::string, cuir::SourceLoc>> names;
  for (const VariantSpec::Const& c : spec.consts) names.emplace_back(c.name, c.loc);
  for (const VariantSpec::Buffer& b : spec.buffers) names.emplace_back(b.name, b.loc);
  for (const auto& [name, loc] : names) {
    if (const char* what = Unrenamable(program, name)) {
      return absl::InvalidArgumentError(absl::StrCat(loc.ToString(), ": spec parameter `", name,
                                                     "` has the name of the kernel's ", what, " `",
                                                     name, "`; rename the parameter in the spec"));
    }
    absl::StatusOr<Layout> layout = FindLayout(program);
    if (!layout.ok()) return layout.status();
    if (!layout->declared.contains(name)) continue;
    RenameIn(program.stmts, name, FreshName(*layout, spec, name));
  }
  return absl::OkStatus();
}

}  // namespace cubridge::transfer
