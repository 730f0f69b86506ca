// RegionWriter's work-tile regions (region_writer.h): what the expert brings into shared memory
// once per work tile for the element loop to read, the tensor read per score at [.., q_idx,
// kv_idx] that streams tile by tile (tile_stream, stream_coords; tile_stream.h) and the small
// tables looked up per score (staged_tables, stage_tables; staged_tables.h).
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cuir/ir/bounds.h"
#include "cuir/lower/region_writer.h"

namespace cubridge::lower {
namespace {

// The bytes of small tables an expert stages in shared memory per work tile (StageTheTables): a
// T5 table row is 128 bytes, Shaw's 65 floats 260; 4 KB keeps a Hopper consumer group's copy
// beside the K/V stages at every head dim, and larger tables stay in L1/L2.
constexpr int64_t kMaxStagedBytes = 4096;

}  // namespace

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

// A leading index of a streamed or staged tensor as the work tile computes it, wrapped Python
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

// StageTheTables (staged_tables.h): small tables looked up per score, copied by the expert into
// shared memory once per work tile. The expert learns the bytes (`staged_tables`) and gets the
// copy as `stage_tables(dst, i0, n)` (threads i0, i0 + n, ... of a group that syncs around it);
// the element scope reads each table from `staged_area` at its offset.
absl::Status RegionWriter::StagedTableRegions() {
  if (!stage_regions_) return absl::OkStatus();
  std::vector<const Stmt*> decls;
  for (const BufferInfo& b : buffers_) decls.push_back(b.decl);
  std::vector<StagedTable> found =
      FindStagedTables(ElementStmts(), decls, ElementSymbols(), stream_ ? stream_->buffer : "",
                       kMaxStagedBytes);
  std::string copies;
  int64_t bytes = 0;
  for (StagedTable& t : found) {
    const BufferInfo* info = nullptr;
    for (const BufferInfo& b : buffers_) {
      if (b.decl == t.decl) info = &b;
    }
    const size_t k = t.leading.size();
    std::string base;  // the slice's first element, in elements from the data pointer
    bool known = info != nullptr;
    for (size_t d = 0; known && d < k; ++d) {
      auto index = WorkTileIndex(t.leading[d], info->binding.sizes[d]);
      known = index.has_value();
      if (known) absl::StrAppend(&base, " + ", *index, " * ", info->binding.strides[d]);
    }
    if (!known) continue;  // stays a global read (its bytes stay reserved, unused)
    const char* type = StorageCType(info->binding.dtype);
    std::string at = absl::StrCat("0", base);
    int64_t elements = 1;
    for (int64_t e : t.extents) elements *= e;
    // i's index in each staged dimension, innermost last (row-major), times its stride.
    int64_t inner = elements;
    for (size_t d = k; d < info->binding.sizes.size(); ++d) {
      inner /= t.extents[d - k];
      const std::string j = absl::StrCat("(i / ", inner, " % ", t.extents[d - k], ")");
      absl::StrAppend(&at, " + ", j,
                      d + 1 < info->binding.sizes.size() ? " * " + info->binding.strides[d] : "");
    }
    absl::StrAppend(&copies, Origin(*t.decl), "for (int i = i0; i < ", elements, "; i += n) {\n",
                    "  reinterpret_cast<", type, "*>(dst + ", t.offset, ")[i] = ", info->cpp, "[",
                    at, "];\n}\n");
    BufferBinding view;
    view.data = absl::StrCat("reinterpret_cast<const ", type, "*>(staged_area + ", t.offset, ")");
    view.dtype = info->binding.dtype;
    view.shared = true;
    int64_t stride = elements;
    for (size_t d = 0; d < t.extents.size(); ++d) {
      stride /= t.extents[d];
      view.sizes.push_back(absl::StrCat(t.extents[d]));
      if (d + 1 < t.extents.size()) view.strides.push_back(absl::StrCat(stride));
    }
    kernel_.BindBuffer(StagedName(t, staged_.size()), view);
    bytes = t.offset + (t.bytes + 15) / 16 * 16;
    staged_.push_back(std::move(t));
  }
  if (staged_.empty()) return absl::OkStatus();
  out_["staged_tables"] = absl::StrCat(
      "// looked up per score: copied into shared memory once per work tile\n",
      "constexpr int kStagedBytes = ", bytes, ";\n");
  std::string indented;
  for (absl::string_view line : absl::StrSplit(copies, '\n', absl::SkipEmpty())) {
    absl::StrAppend(&indented, "  ", line, "\n");
  }
  out_["stage_tables"] = absl::StrCat(
      "auto stage_tables = [&](uint8_t* __restrict__ dst, const int i0, const int n) {\n", indented,
      "};\n");
  return absl::OkStatus();
}

}  // namespace cubridge::lower
