// The expert's own masking on the wgmma accumulator layout: key columns past the end of the
// sequence (a ragged last KV tile, whose rows TMA filled with zeros) must not take probability.
// Everything a program masks beyond that is its `mask` region, through the score visitors.
#pragma once

#include "../common/cuir_platform.cuh"
#include "wgmma.cuh"

namespace cubridge {
namespace fa3 {

// s is the m64nTILE_N accumulator of one thread; its columns are col0 + 8j + e (see wgmma.cuh).
template <int TILE_N>
__device__ __forceinline__ void mask_columns_from(float (&s)[TILE_N / 2], int col0, int limit) {
#pragma unroll
  for (int j = 0; j < TILE_N / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if (col0 + 8 * j + e >= limit) {
        s[acc_index(j, 0, e)] = -INFINITY;
        s[acc_index(j, 1, e)] = -INFINITY;
      }
    }
  }
}

// The score visitors' traversal: f(j, e, r, element) for each of the thread's elements, column
// slot by column slot (j, e: n-tile and column within the thread's pair; r: row 0 or 8).
template <int TILE_N, typename F>
__device__ __forceinline__ void for_each_element(float (&s)[TILE_N / 2], F&& f) {
#pragma unroll
  for (int j = 0; j < TILE_N / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
#pragma unroll
      for (int r = 0; r < 2; ++r) f(j, e, r, s[acc_index(j, r, e)]);
    }
  }
}

// Whether a score visitor tests each element against the tile's bounds (kChecked: a ragged
// tile) or not (every element the thread holds is in bounds): a tag, so that each case is its own
// unrolled loop.
template <bool kCheck>
struct Bounds {
  static constexpr bool kChecked = kCheck;
};

// Where a score visitor's float key index kv_f counts from: key 0 (the key's index), or the lane's
// first key of the tile (for terms linear in kv_f, whose first-key part joins the softmax's offset:
// for_each_raw_score_kv_split). A tag, so that kv_f is a constant per element in the second case.
template <bool kFromTileStart>
struct KvFrom {
  static constexpr bool value = kFromTileStart;
};
using KvFromKeyZero = KvFrom<false>;
using KvFromTileStart = KvFrom<true>;

}  // namespace fa3
}  // namespace cubridge
