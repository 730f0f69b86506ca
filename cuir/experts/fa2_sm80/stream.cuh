// The tile stream of the sm_80 expert: a captured tensor that a score_mod or mask reads at
// [..., q_idx, kv_idx] comes into shared memory one BLOCK_M x BLOCK_N tile per KV block with
// cp.async, issued with that block's K and waited with it, instead of one global load per score
// (docs/lowering.md, "Streamed tiles").
//
// Rows are padded by 16 bytes: the eight rows a warp's score fragment touches per column pair
// then start in eight different bank groups. Rows whose addresses cp.async cannot take (not 16-byte
// aligned: a ragged sequence of bools) are copied by the threads element by element, the same
// layout; an instance without room for the tile (StreamTile80::kInSmem false) reads global
// memory per score.
#pragma once

#include "../common/cuir_platform.cuh"
#include "../common/cuir_scalar.cuh"
#include "../common/stream_source.cuh"

namespace cubridge {
namespace fa2 {

// 16 bytes global -> shared of which the first `bytes` are read, the rest zero.
__device__ __forceinline__ void cp_async_16_partial(uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}

template <typename E, int ROWS, int COLS, bool IN_SMEM>
struct StreamTile80 {
  static constexpr int kElem = static_cast<int>(sizeof(E));
  static constexpr int kPitch = COLS * kElem + 16;
  static constexpr int kBytes = IN_SMEM ? ROWS * kPitch : 0;
  static constexpr int kChunkCols = 16 / kElem;  // elements per 16-byte chunk
  static_assert(COLS * kElem % 16 == 0, "rows of whole 16-byte chunks");

  const uint8_t* smem;
  CuirStreamSource<E> src;
  int q_lo, kv_lo;

  // The element as a CuIR value (cuir_buffers.cuh).
  __device__ __forceinline__ auto at(int q_idx, int kv_idx) const {
    if constexpr (IN_SMEM) {
      return cuir_value(
          *reinterpret_cast<const E*>(smem + (q_idx - q_lo) * kPitch + (kv_idx - kv_lo) * kElem));
    } else {
      return src.at(q_idx, kv_idx);
    }
  }

  // All THREADS threads: the tile at (q_lo, kv_lo) into `tile`, by cp.async where every row
  // starts 16-byte aligned (`vector`), else element by element (then complete on return; the
  // caller's barrier publishes it either way).
  template <int THREADS>
  __device__ __forceinline__ static void load(uint8_t* tile, const CuirStreamSource<E>& src,
                                              int q_lo, int kv_lo, bool vector, int tid) {
    if constexpr (IN_SMEM) {
      if (vector) {
        constexpr int kChunks = COLS / kChunkCols;
        for (int i = tid; i < ROWS * kChunks; i += THREADS) {
          const int r = i / kChunks, chunk = i - r * kChunks;
          const long long q = q_lo + r, kv = kv_lo + chunk * kChunkCols;
          const long long left = q < src.rows ? (src.cols - kv) * kElem : 0;
          const int bytes = static_cast<int>(left < 0 ? 0 : left > 16 ? 16 : left);
          const E* from = bytes > 0 ? src.data + q * src.row_stride + kv : src.data;
          cp_async_16_partial(static_cast<uint32_t>(__cvta_generic_to_shared(tile + r * kPitch + chunk * 16)),
                              from, bytes);
        }
      } else {
        for (int i = tid; i < ROWS * COLS; i += THREADS) {
          const int r = i / COLS, c = i - r * COLS;
          const long long q = q_lo + r, kv = kv_lo + c;
          E v{};
          if (q < src.rows && kv < src.cols) v = src.data[q * src.row_stride + kv];
          *reinterpret_cast<E*>(tile + r * kPitch + c * kElem) = v;
        }
      }
    }
    (void)tile, (void)src, (void)q_lo, (void)kv_lo, (void)vector, (void)tid;
  }
};

}  // namespace fa2
}  // namespace cubridge
