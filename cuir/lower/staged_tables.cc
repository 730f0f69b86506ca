#include "cuir/lower/staged_tables.h"

#include "absl/strings/str_cat.h"
#include "cuir/ir/dtype.h"
#include "cuir/lower/map_args.h"

namespace cubridge::lower {
namespace {

using cuir::ExprKind;
using cuir::ExprPtr;

bool MentionsAny(const ExprPtr& e, const std::vector<std::string>& symbols) {
  for (const std::string& s : symbols) {
    if (cuir::Mentions(e, s)) return true;
  }
  return false;
}

// The number of leading indices that are the work tile's (mention no element symbol).
size_t LeadingCount(const ExprPtr& e, const std::vector<std::string>& element_symbols) {
  size_t k = 0;
  while (k < e->args.size() && !MentionsAny(e->args[k], element_symbols)) ++k;
  return k;
}

bool SameLeading(const std::vector<ExprPtr>& a, const ExprPtr& read, size_t k) {
  if (a.size() != k) return false;
  for (size_t i = 0; i < k; ++i) {
    if (!cuir::Equal(a[i], read->args[i])) return false;
  }
  return true;
}

void Find(const ExprPtr& e, const std::vector<const cuir::Stmt*>& buffers,
          const std::vector<std::string>& element_symbols, const std::string& skip,
          int64_t max_bytes, std::vector<StagedTable>* out, int64_t* used) {
  if (e == nullptr) return;
  for (const ExprPtr& a : e->args) Find(a, buffers, element_symbols, skip, max_bytes, out, used);
  if (e->kind != ExprKind::kIndex || e->name == skip) return;
  const size_t k = LeadingCount(e, element_symbols);
  if (k == e->args.size()) return;  // the same for the whole tile: hoisted, not staged
  const cuir::Stmt* decl = nullptr;
  for (const cuir::Stmt* b : buffers) {
    if (b->name == e->name) decl = b;
  }
  if (decl == nullptr || decl->exprs.size() != e->args.size()) return;
  for (const StagedTable& t : *out) {
    if (t.decl == decl && SameLeading(t.leading, e, k)) return;
  }
  StagedTable t;
  t.decl = decl;
  t.leading.assign(e->args.begin(), e->args.begin() + static_cast<std::ptrdiff_t>(k));
  int64_t elements = 1;
  for (size_t d = k; d < decl->exprs.size(); ++d) {
    const ExprPtr& extent = decl->exprs[d];
    if (extent == nullptr || extent->kind != ExprKind::kIntLit || extent->int_value < 1) return;
    t.extents.push_back(extent->int_value);
    elements *= extent->int_value;
    if (elements * cuir::TensorDTypeBytes(decl->dtype) > max_bytes) return;
  }
  t.bytes = elements * cuir::TensorDTypeBytes(decl->dtype);
  t.offset = *used;
  const int64_t padded = (t.bytes + 15) / 16 * 16;
  if (*used + padded > max_bytes) return;
  *used += padded;
  out->push_back(std::move(t));
}

}  // namespace

std::vector<StagedTable> FindStagedTables(const std::vector<const cuir::Stmt*>& element_stmts,
                                          const std::vector<const cuir::Stmt*>& buffers,
                                          const std::vector<std::string>& element_symbols,
                                          const std::string& skip, int64_t max_bytes) {
  std::vector<StagedTable> out;
  int64_t used = 0;
  for (const cuir::Stmt* s : element_stmts) {
    Find(s->value, buffers, element_symbols, skip, max_bytes, &out, &used);
  }
  return out;
}

std::string StagedName(const StagedTable& t, size_t k) {
  return absl::StrCat(t.decl->name, "@staged", k);
}

ExprPtr StageTheTables(const ExprPtr& e, const std::vector<StagedTable>& tables) {
  const ExprPtr mapped = MapArgs(e, [&](const ExprPtr& a) { return StageTheTables(a, tables); });
  if (mapped == nullptr || mapped->kind != ExprKind::kIndex) return mapped;
  for (size_t i = 0; i < tables.size(); ++i) {
    const StagedTable& t = tables[i];
    const size_t k = t.leading.size();
    // The leading indices as written (they read nothing a staged table could replace).
    if (t.decl->name != e->name || e->args.size() != k + t.extents.size() || !SameLeading(t.leading, e, k)) {
      continue;
    }
    return cuir::Index(StagedName(t, i),
                       std::vector<ExprPtr>(mapped->args.begin() + static_cast<std::ptrdiff_t>(k),
                                            mapped->args.end()),
                       e->loc);
  }
  return mapped;
}

}  // namespace cubridge::lower
