// Keeping the spec's names and the base program's names apart.
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
