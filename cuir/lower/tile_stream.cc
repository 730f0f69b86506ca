#include "cuir/lower/tile_stream.h"

#include <algorithm>

#include "cuir/lower/map_args.h"

namespace cubridge::lower {
namespace {

using cuir::ExprKind;
using cuir::ExprPtr;

bool IsVar(const ExprPtr& e, const char* name) {
  return e != nullptr && e->kind == ExprKind::kVar && e->name == name;
}

// Reads at [..., q_idx, kv_idx] of rank 2 to 4.
bool AtTheElement(const ExprPtr& e) {
  return e->kind == ExprKind::kIndex && e->args.size() >= 2 && e->args.size() <= 4 &&
         IsVar(e->args[e->args.size() - 2], "q_idx") && IsVar(e->args.back(), "kv_idx");
}

bool Same(const TileStream& a, const TileStream& b) {
  if (a.buffer != b.buffer || a.leading.size() != b.leading.size()) return false;
  for (size_t i = 0; i < a.leading.size(); ++i) {
    if (!cuir::Equal(a.leading[i], b.leading[i])) return false;
  }
  return true;
}

void Find(const ExprPtr& e, const std::vector<std::string>& element_symbols,
          std::vector<TileStream>* out) {
  if (e == nullptr) return;
  if (AtTheElement(e)) {
    bool invariant = true;
    for (size_t i = 0; i + 2 < e->args.size(); ++i) {
      for (const std::string& s : element_symbols) invariant = invariant && !cuir::Mentions(e->args[i], s);
    }
    TileStream found{e->name, {e->args.begin(), e->args.end() - 2}};
    if (invariant && std::none_of(out->begin(), out->end(),
                                  [&](const TileStream& t) { return Same(t, found); })) {
      out->push_back(std::move(found));
    }
  }
  for (const ExprPtr& a : e->args) Find(a, element_symbols, out);
}

}  // namespace

std::vector<TileStream> FindTileStreams(const std::vector<const cuir::Stmt*>& element_stmts,
                                        const std::vector<std::string>& element_symbols) {
  std::vector<TileStream> out;
  for (const cuir::Stmt* s : element_stmts) Find(s->value, element_symbols, &out);
  return out;
}

std::string TileStreamName(const TileStream& s) { return s.buffer + "@tile"; }

ExprPtr StreamTheTile(const ExprPtr& e, const TileStream& s) {
  if (e == nullptr || e->args.empty()) return e;
  if (AtTheElement(e) && e->name == s.buffer && e->args.size() == s.leading.size() + 2) {
    bool same = true;
    for (size_t i = 0; i < s.leading.size(); ++i) same = same && cuir::Equal(e->args[i], s.leading[i]);
    if (same) return cuir::Index(TileStreamName(s), {e->args[e->args.size() - 2], e->args.back()}, e->loc);
  }
  return MapArgs(e, [&](const ExprPtr& a) { return StreamTheTile(a, s); });
}

}  // namespace cubridge::lower
