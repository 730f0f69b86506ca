// StageTheTables, a lowering rewrite of element expressions: a small captured table that a
// score_mod or mask looks up at an index computed per score (T5's table[h, bucket(q_idx -
// kv_idx)], Shaw's table[h, clamp(kv_idx - q_idx) + k]) is read from shared memory instead of
// through L1. Such a read touches the same few hundred bytes for every score of a work tile; the
// expert copies that slice (the indices before the first one that moves with the element are
// the work tile's: h, b, params) into shared memory once per work tile, where lookups cost one
// shared-memory load and no L1 tag traffic beside the mask's and the products' (docs/lowering.md,
// "Which load each read gets").
//
// Only slices whose extent the program knows as constants (the declared sizes of the looked-up
// dimensions are literals: the interval analysis bounded the bucket) and whose bytes fit
// `max_bytes` are staged; anything else stays a global read. The rewrite names the reads: each
// becomes a read of the pseudo-buffer StagedName(t) at the looked-up indices, which the element
// scope binds to the expert's copy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cuir/ir/expr.h"
#include "cuir/ir/program.h"

namespace cubridge::lower {

struct StagedTable {
  const cuir::Stmt* decl = nullptr;    // the buffer declaration
  std::vector<cuir::ExprPtr> leading;  // the work tile's indices (may be none)
  std::vector<int64_t> extents;        // the staged dimensions' sizes (the declared literals)
  int64_t offset = 0;                  // bytes into the staging area, 16-byte aligned
  int64_t bytes = 0;                   // extents' product x element size
};

// The tables to stage, in statement order, each (buffer, leading indices) once, laid out one
// after the other from offset 0: reads of a declared buffer whose first k indices mention none
// of `element_symbols` and whose remaining ones (at least one, one of them mentioning an
// element symbol) span declared literal sizes; `skip` (the streamed tensor) is left alone; at
// most `max_bytes` in all (a table that would pass it stays global).
std::vector<StagedTable> FindStagedTables(const std::vector<const cuir::Stmt*>& element_stmts,
                                          const std::vector<const cuir::Stmt*>& buffers,
                                          const std::vector<std::string>& element_symbols,
                                          const std::string& skip, int64_t max_bytes);

// "NAME@staged<K>" (no CuIR identifier has an '@'), K the table's position in the list.
std::string StagedName(const StagedTable& t, size_t k);

// `e` with every read that a table of `tables` stages (same buffer, structurally equal leading
// indices) replaced by StagedName(t, k)[looked-up indices].
cuir::ExprPtr StageTheTables(const cuir::ExprPtr& e, const std::vector<StagedTable>& tables);

}  // namespace cubridge::lower
