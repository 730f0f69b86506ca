// Finding the base program's structure, the claims book and the not-covered error.
#include <algorithm>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuir/transfer/rule.h"

namespace cubridge::transfer {
namespace {

using cuir::ExprPtr;
using cuir::Program;
using cuir::Stmt;
using cuir::StmtKind;

absl::Status Missing(const std::string& what) {
  return absl::FailedPreconditionError(
      absl::StrCat("transfer: the base program has no ", what,
                   " (the rules need the shape of cuir/experts/fa2_sm80/base.cuir, or of "
                   "base_bwd.cuir for a backward)"));
}

const Stmt* FindLoad(const std::vector<Stmt>& stmts, const std::string& tensor) {
  for (const Stmt& s : stmts) {
    if (s.kind == StmtKind::kLoad && !s.operands.empty() && s.operands[0] == tensor &&
        s.exprs.size() == 4) {
      return &s;
    }
  }
  return nullptr;
}

void CollectDeclared(const std::vector<Stmt>& stmts, absl::flat_hash_set<std::string>* out) {
  for (const Stmt& s : stmts) {
    if (!s.name.empty()) out->insert(s.name);
    if (!s.full_var.empty()) out->insert(s.full_var);
    if (s.kind == StmtKind::kGrid) out->insert(s.names.begin(), s.names.end());
    CollectDeclared(s.body, out);
  }
}

// The grid axis the top-level tile's first row depends on, through the top-level lets.
absl::StatusOr<std::string> TileAxis(const Program& p, const Layout& l) {
  std::vector<std::pair<std::string, ExprPtr>> lets;
  for (const Stmt& s : p.stmts) {
    if (s.kind == StmtKind::kLet) lets.emplace_back(s.name, cuir::Substitute(s.value, lets));
  }
  const ExprPtr& own_lo = l.backward ? l.kv_lo : l.q_lo;
  ExprPtr lo = cuir::Substitute(own_lo, lets);
  std::vector<std::string> axes;
  for (const std::string& axis : l.grid_axes) {
    bool batch_or_head = cuir::Mentions(l.batch, axis) || cuir::Mentions(l.head, axis);
    if (!batch_or_head && cuir::Mentions(lo, axis)) axes.push_back(axis);
  }
  if (axes.size() != 1) {
    return Missing(absl::StrCat("single grid axis enumerating ", l.backward ? "K" : "Q",
                                " tiles (the top-level load's first row ", cuir::PrintExpr(own_lo),
                                " depends on [", absl::StrJoin(axes, ", "), "])"));
  }
  return axes[0];
}

}  // namespace

size_t FindStmt(const std::vector<Stmt>& stmts, StmtKind kind) {
  for (size_t i = 0; i < stmts.size(); ++i) {
    if (stmts[i].kind == kind) return i;
  }
  return stmts.size();
}

size_t AfterLast(const std::vector<Stmt>& stmts, StmtKind kind, size_t fallback) {
  size_t at = fallback;
  for (size_t i = 0; i < stmts.size(); ++i) {
    if (stmts[i].kind == kind) at = i + 1;
  }
  return at;
}

absl::StatusOr<Layout> FindLayout(const Program& p) {
  Layout l;
  l.loop_index = FindStmt(p.stmts, StmtKind::kFor);
  if (l.loop_index == p.stmts.size()) return Missing("top-level KV loop (`for ... {`)");
  const Stmt& loop = p.stmts[l.loop_index];
  size_t grid = FindStmt(p.stmts, StmtKind::kGrid);
  if (grid == p.stmts.size()) return Missing("`grid` statement");
  l.grid_axes = p.stmts[grid].names;

  l.backward = cuir::IsBackward(p);
  // Forward: Q at the top, K in the loop; backward: the other way round.
  const std::vector<Stmt>& q_scope = l.backward ? loop.body : p.stmts;
  const std::vector<Stmt>& k_scope = l.backward ? p.stmts : loop.body;
  const char* q_where = l.backward ? " inside the loop" : " at the top level";
  const char* k_where = l.backward ? " at the top level" : " inside the KV loop";
  const Stmt* q = FindLoad(q_scope, "q");
  if (!q) return Missing(absl::StrCat("`load ... = q[b, h, lo:hi]`", q_where));
  l.batch = q->exprs[0];
  l.head = q->exprs[1];
  l.q_lo = q->exprs[2];
  l.q_hi = q->exprs[3];
  const Stmt* k = FindLoad(k_scope, "k");
  if (!k) return Missing(absl::StrCat("`load ... = k[b, kv_h, lo:hi]`", k_where));
  l.kv_head = k->exprs[1];
  l.kv_lo = k->exprs[2];
  l.kv_hi = k->exprs[3];
  size_t qk = FindStmt(loop.body, StmtKind::kQK);
  if (qk == loop.body.size()) return Missing("`S = qk Q, K scale ...` inside the loop");
  l.qk_result = loop.body[qk].name;
  if (l.backward) {
    size_t grad = FindStmt(loop.body, StmtKind::kSoftmaxGrad);
    if (grad == loop.body.size()) return Missing("`DS = softmax.grad P, DP, D` inside the loop");
    l.softmax_grad = loop.body[grad].name;
  }

  absl::StatusOr<std::string> axis = TileAxis(p, l);
  if (!axis.ok()) return axis.status();
  l.tile_axis = *axis;
  CollectDeclared(p.stmts, &l.declared);
  return l;
}

std::string FreshName(const Layout& layout, const VariantSpec& spec, const std::string& wanted) {
  absl::flat_hash_set<std::string> taken = layout.declared;
  for (const auto& [name, type] : cuir::BuiltinSymbols()) taken.insert(name);
  for (const auto& c : spec.consts) taken.insert(c.name);
  for (const auto& b : spec.buffers) taken.insert(b.name);
  for (const char* canonical : {"b", "h", "q_idx", "kv_idx", "score"}) taken.insert(canonical);
  std::string name = wanted;
  for (int i = 1; taken.contains(name); ++i) name = absl::StrCat(wanted, "_", i);
  return name;
}

absl::Status NotCovered(const std::string& construct, const cuir::SourceLoc& loc,
                        const std::string& why) {
  absl::Status s = absl::FailedPreconditionError(absl::StrCat(
      "not covered by the rules: ", construct, " at ", loc.ToString(), " (", why, ")"));
  s.SetPayload(kNotCoveredPayload, absl::Cord(construct));
  return s;
}

void Claims::Add(const std::string& key, const std::string& construct, const cuir::SourceLoc& loc) {
  entries_.push_back(Entry{key, construct, "", loc, false});
}

Claims::Entry* Claims::Find(const std::string& key) {
  auto it =
      std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; });
  return it == entries_.end() ? nullptr : &*it;
}

const Claims::Entry* Claims::Find(const std::string& key) const {
  auto it =
      std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; });
  return it == entries_.end() ? nullptr : &*it;
}

void Claims::Claim(const std::string& key) {
  if (Entry* e = Find(key)) e->claimed = true;
}

void Claims::Decline(const std::string& key, const std::string& why, const cuir::SourceLoc& loc) {
  Entry* e = Find(key);
  if (!e || !e->why.empty()) return;  // the first reason given is the most specific
  e->why = why;
  if (loc.known()) e->loc = loc;
}

bool Claims::Claimed(const std::string& key) const {
  const Entry* e = Find(key);
  return e && e->claimed;
}

absl::Status Claims::CheckAllClaimed() const {
  for (const Entry& e : entries_) {
    if (e.claimed) continue;
    std::string why =
        e.why.empty() ? "no rule of ruleset " + RulesetVersion() + " matches it" : e.why;
    return NotCovered(e.construct, e.loc,
                      why +
                          "; rewrite it with the supported constructs of docs/transfer.md or "
                          "let the LLM proposer handle it");
  }
  return absl::OkStatus();
}

}  // namespace cubridge::transfer
