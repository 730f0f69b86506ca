// The tile stream of the sm_90 expert: a captured tensor that a score_mod or mask reads at
// [..., q_idx, kv_idx] (a full bias, an unstructured keep mask) comes into shared memory one
// BLOCK_M x TILE_N tile per KV tile, beside K, instead of one global load per score
// (docs/lowering.md, "Which load each read gets").
//
// Layout: panels of kPanelCols key columns (128 bytes wide where the tile is, as K's panels),
// each BLOCK_M rows, swizzled as TMA writes them (16-byte chunk c of row r at c ^ (r % 8) for
// 128-byte rows; the 64- and 32-byte modes likewise, by address bits 7+). A warp's reads of one
// column pair then fall in eight distinct chunks: one shared-memory wavefront per load.
//
// Two ways in, one way out:
//  - TMA: the producer issues the tile's panels with K's, their bytes in K's expect_tx, so
//    k_full covers both; the consumers release k_empty only after the variant ran.
//  - A call whose tensor TMA cannot take (an address or a row pitch not a multiple of 16 bytes:
//    a ragged sequence of bools; a broadcast stride 0) fills the same layout from global memory,
//    each consumer warp its own 16 rows (the rows it alone reads), before the variant runs.
//  - An instance with no room for the tile (StreamLayout::kInSmem false: more than 32 KB per
//    stage, or the stages do not fit) reads global memory per score, as without a stream.
#pragma once

#include "../common/cuir_platform.cuh"
#include "../common/cuir_scalar.cuh"
#include "../common/stream_source.cuh"

namespace cubridge {
namespace fa3 {

template <typename E, int ROWS, int TILE_N, int MAX_STAGE_BYTES = 32 * 1024>
struct StreamLayout {
  static constexpr int kElem = static_cast<int>(sizeof(E));
  static constexpr int kRowBytes = TILE_N * kElem;
  static constexpr int kPanelBytes = kRowBytes < 128 ? kRowBytes : 128;
  static constexpr int kPanelCols = kPanelBytes / kElem;
  static constexpr int kPanels = TILE_N / kPanelCols;
  // TMA's swizzle modes: the panel row must be 32, 64 or 128 bytes; other widths are filled by
  // the warps unswizzled.
  static constexpr int kSwizzle = kPanelBytes == 128 ? 3 : kPanelBytes == 64 ? 2 : kPanelBytes == 32 ? 1 : 0;
  static constexpr int kBytes = ROWS * kRowBytes;
  static constexpr bool kTmaShape = kSwizzle > 0 && TILE_N % kPanelCols == 0 && ROWS <= 256;
  static constexpr bool kInSmem = kBytes <= MAX_STAGE_BYTES;

  // Byte offset of element (r, c) within the tile. Unsigned: r and c are within the tile, and
  // a signed division by kPanelCols costs its sign fix-up per element wherever the compiler
  // cannot prove c non-negative (it once could and once not for the same source; bench/NOTES.md).
  __device__ __forceinline__ static unsigned offset(unsigned r, unsigned c) {
    const unsigned panel = c / kPanelCols;
    const unsigned o =
        panel * (ROWS * kPanelBytes) + r * kPanelBytes + (c - panel * kPanelCols) * kElem;
    constexpr unsigned mask = kSwizzle == 3 ? 7 : kSwizzle == 2 ? 3 : kSwizzle == 1 ? 1 : 0;
    return o ^ (((o >> 7) & mask) << 4);
  }
};

// The view a variant reads through: at(q_idx, kv_idx) of the current KV tile.
template <typename E, int ROWS, int TILE_N, bool IN_SMEM>
struct StreamTile {
  using L = StreamLayout<E, ROWS, TILE_N>;
  const uint8_t* smem;       // this ring slot's tile (IN_SMEM)
  CuirStreamSource<E> src;   // the tensor (global reads, !IN_SMEM)
  int q_lo, kv_lo;
  // The element as a CuIR value (cuir_buffers.cuh: bool, int, long long or float).
  __device__ __forceinline__ auto at(int q_idx, int kv_idx) const {
    if constexpr (IN_SMEM) {
      const unsigned r = q_idx - q_lo, c = kv_idx - kv_lo;  // within the tile
      return cuir_value(*reinterpret_cast<const E*>(smem + L::offset(r, c)));
    } else {
      return src.at(q_idx, kv_idx);
    }
  }
};

// A consumer warp's 16 rows [row_lo, row_lo + 16) of the tile at (q_lo, kv_lo), from global
// memory into the swizzled layout (calls TMA cannot serve). The warp alone reads these rows, so
// warp barriers suffice: before (the slot's last readers are this warp's lanes) and after.
template <typename E, int ROWS, int TILE_N>
__device__ __forceinline__ void stream_fill_rows(uint8_t* tile, const CuirStreamSource<E>& src,
                                                 int q_lo, int kv_lo, int row_lo, int lane) {
  using L = StreamLayout<E, ROWS, TILE_N>;
  __syncwarp();
  // One row at a time, a lane per column: few registers live beside the accumulators (this
  // runs between the products, where O, S and P hold most of them).
  const E* row = src.data + static_cast<long long>(q_lo + row_lo) * src.row_stride;
  const int cols = static_cast<int>(min(src.cols - kv_lo, static_cast<long long>(TILE_N)));
  const int rows = static_cast<int>(min(src.rows - (q_lo + row_lo), 16ll));
#pragma unroll 1
  for (int r = 0; r < 16; ++r, row += src.row_stride) {
#pragma unroll 1
    for (int c = lane; c < TILE_N; c += 32) {
      const E v = r < rows && c < cols ? row[kv_lo + c] : E{};
      *reinterpret_cast<E*>(tile + L::offset(row_lo + r, c)) = v;
    }
  }
  __syncwarp();
}

}  // namespace fa3
}  // namespace cubridge
