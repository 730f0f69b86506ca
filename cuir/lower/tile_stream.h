// StreamTheTile, a lowering rewrite of element expressions: a captured tensor that a score_mod
// or mask reads at [i0, .., q_idx, kv_idx] (a full additive bias [B, H, Sq, Skv], an unstructured
// keep mask [Sq, Skv]), with leading indices that read nothing of the element, is one value per
// score: read per element from global memory it costs a load per score (bench/NOTES.md, the
// keep mask). An expert that offers a tile stream (regions `tile_stream` and `stream_coords`)
// brings such a tensor into shared memory one score tile at a time, beside K; its reads then go
// through the expert's view, `stream_tile.at(q_idx, kv_idx)`.
//
// The rewrite names those reads: each becomes a read of a rank-2 pseudo-buffer (TileStreamName)
// at [q_idx, kv_idx], which the element scope binds to the view. Reads of the tensor at other
// indices stay global reads.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cuir/ir/expr.h"
#include "cuir/ir/program.h"

namespace cubridge::lower {

struct TileStream {
  std::string buffer;                  // the captured tensor
  std::vector<cuir::ExprPtr> leading;  // its indices before q_idx, kv_idx (rank - 2 of them)
};

// The reads of a buffer of rank 2 to 4 at [leading..., q_idx, kv_idx] whose leading indices
// mention neither q_idx, kv_idx, the score nor the element's float indices (`element_symbols`),
// in statement order, each (buffer, leading indices) once. The expert streams one tensor; the
// caller picks (the smallest elements first: their tile fits where a wider one may not).
std::vector<TileStream> FindTileStreams(const std::vector<const cuir::Stmt*>& element_stmts,
                                        const std::vector<std::string>& element_symbols);

// The pseudo-buffer's name: "NAME@tile" (no CuIR identifier has an '@').
std::string TileStreamName(const TileStream& s);

// `e` with every read of s.buffer at exactly [s.leading..., q_idx, kv_idx] (leading indices
// structurally equal) replaced by TileStreamName(s)[q_idx, kv_idx].
cuir::ExprPtr StreamTheTile(const cuir::ExprPtr& e, const TileStream& s);

}  // namespace cubridge::lower
