// RegionWriter's work-tile regions (region_writer.h): the tensor read per score at [.., q_idx,
// kv_idx] that the expert streams tile by tile beside K (tile_stream, stream_coords;
// tile_stream.h). Small tables looked up per score stay global reads through L1: staging them in
// shared memory per work tile measured 1.14-1.38x slower (bench/NOTES.md, lever 13).
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "cuir/ir/bounds.h"
#include "cuir/lower/region_writer.h"

namespace cubridge::lower {
using cuir::ExprPtr;
using cuir::Stmt;

// StreamTheTile (tile_stream.h): the tensor read per score at [..., q_idx, kv_idx], where the
// expert streams tiles and the work tile knows the leading indices; the expert learns its slot,
// rank and element type (`tile_stream`) and this work tile's leading indices (`stream_coords`),
// and the element scope reads it through the expert's view. Otherwise nothing changes.
absl::Status RegionWriter::TileStreamRegions() {
  if (!stream_regions_) return absl::OkStatus();
  // The narrowest elements first: the expert streams one tensor, and a wide one's tile may
  // not fit its shared memory.
  const BufferInfo* info = nullptr;
  std::optional<TileStream> found;
  for (TileStream& t : FindTileStreams(ElementStmts(), ElementSymbols())) {
    for (const BufferInfo& b : buffers_) {
      if (b.decl->name != t.buffer) continue;
      if (info == nullptr || cuir::TensorDTypeBytes(b.binding.dtype) <
                                 cuir::TensorDTypeBytes(info->binding.dtype)) {
        info = &b;
        found = std::move(t);
      }
      break;
    }
  }
  if (info == nullptr) return absl::OkStatus();
  const size_t rank = info->binding.sizes.size();
  std::string coords[2] = {"0", "0"};  // dimensions rank - 3 and rank - 4
  for (size_t d = 0; d + 2 < rank; ++d) {
    auto text = WorkTileIndex(found->leading[d], info->binding.sizes[d]);
    // An index the work tile does not know (a block value): the reads stay per score.
    if (!text) return absl::OkStatus();
    coords[rank - 3 - d] = absl::StrCat("static_cast<int>(", *text, ")");
  }
  stream_ = std::move(found);
  out_["tile_stream"] = absl::StrCat(
      Origin(*info->decl), "// read per score at [..., q_idx, kv_idx]: streamed tile by tile\n",
      "constexpr int kStreamBuffer = ", info->slot, ";\nconstexpr int kStreamRank = ", rank,
      ";\nusing StreamElem = ", StorageCType(info->binding.dtype), ";\n");
  out_["stream_coords"] = absl::StrCat("const int stream_c2 = ", coords[0],
                                       ", stream_c3 = ", coords[1], ";\n");
  BufferBinding view;
  view.data = "stream_tile";
  view.dtype = info->binding.dtype;
  view.sizes = {"", ""};
  view.strides = {""};
  view.tile_view = true;
  kernel_.BindBuffer(TileStreamName(*stream_), view);
  return absl::OkStatus();
}

// The statements whose expressions run per score element (score_mods, then masks), and the
// symbols that move with the element there.
std::vector<const Stmt*> RegionWriter::ElementStmts() const {
  std::vector<const Stmt*> stmts(plan_.score_mods.begin(), plan_.score_mods.end());
  stmts.insert(stmts.end(), plan_.masks.begin(), plan_.masks.end());
  return stmts;
}

std::vector<std::string> RegionWriter::ElementSymbols() {
  return {"q_idx", "kv_idx", "score", kQFloat, kKvFloat};
}

// A leading index of a streamed tensor as the work tile computes it, wrapped Python
// style as EmitIndex wraps (a negative literal from the size, a value not provably non-negative
// through cuir_wrap); nullopt where the work tile does not know it.
std::optional<std::string> RegionWriter::WorkTileIndex(const ExprPtr& arg,
                                                       const std::string& size) const {
  auto index = EmitExpr(arg, kernel_);
  if (!index.ok() || !IsInt(index->type)) return std::nullopt;
  if (arg->kind == cuir::ExprKind::kIntLit && arg->int_value < 0) {
    return absl::StrCat("(", size, " - ", -arg->int_value, ")");
  }
  if (cuir::ProvablyNonNegative(arg, element_bounds_)) return Convert(*index, CType::kLong);
  return absl::StrCat("cuir_wrap(", Convert(*index, CType::kLong), ", ", size, ")");
}

}  // namespace cubridge::lower
