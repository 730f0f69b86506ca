// Column masking of the sm_90 expert: kv columns past seqlen_kv and, for causal (top-left
// aligned), columns past the query row. Only blocks that straddle a boundary pay for it.
#pragma once

#include "../common/cuir_platform.cuh"

namespace cubridge {
namespace fa3 {

// kv blocks this m-block must visit: causal stops at the block holding the tile's last row.
template <int BLOCK_M, int BLOCK_N>
__device__ __forceinline__ int kv_blocks(int m_block, int seqlen_kv, bool causal) {
  int end = seqlen_kv;
  if (causal) end = min(end, (m_block + 1) * BLOCK_M);
  return end <= 0 ? 0 : (end + BLOCK_N - 1) / BLOCK_N;
}

template <int BLOCK_M, int BLOCK_N>
__device__ __forceinline__ bool block_needs_mask(int n_block, int m_block, int seqlen_kv,
                                                 bool causal) {
  const int last_col = (n_block + 1) * BLOCK_N - 1;
  return last_col >= seqlen_kv || (causal && last_col > m_block * BLOCK_M);
}

// s is the m64nBLOCK_N accumulator of one thread (rows row0, row0+8; see wgmma.cuh). A column is
// kept iff col < limit, limit = seqlen_kv, or min(seqlen_kv, row + 1) for causal.
template <int BLOCK_N>
__device__ __forceinline__ void apply_mask(float (&s)[BLOCK_N / 2], int col0, int row0,
                                           int seqlen_kv, bool causal) {
  const int lim0 = causal ? min(seqlen_kv, row0 + 1) : seqlen_kv;
  const int lim1 = causal ? min(seqlen_kv, row0 + 9) : seqlen_kv;
#pragma unroll
  for (int j = 0; j < BLOCK_N / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int col = col0 + 8 * j + e;
      if (col >= lim0) s[4 * j + e] = -INFINITY;
      if (col >= lim1) s[4 * j + 2 + e] = -INFINITY;
    }
  }
}

}  // namespace fa3
}  // namespace cubridge
