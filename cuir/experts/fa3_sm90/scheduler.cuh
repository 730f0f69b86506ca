// Tile order of the sm_90 expert (`grid ... schedule longest_first`), persistent: the work tiles
// (m_block, head, batch) are numbered in the order below and each CTA takes every gridDim.x-th,
// so a launcher may start only as many CTAs as fit on the GPU at once (one per SM) and each
// CTA's next Q and K/V loads run under its current tile's last products and epilogue. With one
// CTA per work tile (gridDim.x = count) it is the plain grid. The order:
//  - the query tile is fastest: the CTAs working at one time then share a few heads, whose K/V
//    (4 MB per head at 8k x 128) stay in L2 while every query tile of the head streams them.
//    With heads fastest a wave touched 64 heads at once and read K/V from DRAM again and again
//    (measured: 87% of DRAM bandwidth, 40% L2 hits, half the tensor rate);
//  - within a head the query tiles run from the last to the first: under causal-like masks the
//    last tiles visit the most KV blocks, so the short ones fill the tail instead of a few long
//    ones running alone at the end; without such a mask the order changes nothing.
#pragma once

#include "../common/cuir_platform.cuh"

namespace cubridge {
namespace fa3 {

// The two warp roles, as types: a kernel instantiates its per-tile code once per role.
struct ProducerRole {
  static constexpr bool kProducer = true;
};
struct ConsumerRole {
  static constexpr bool kProducer = false;
};

struct Tile {
  int m_block, head, batch;
};

struct LongestFirst {
  int m_blocks, heads, count;

  __device__ __forceinline__ LongestFirst(int m_blocks_, int heads_, int batch)
      : m_blocks(m_blocks_), heads(heads_), count(m_blocks_ * heads_ * batch) {}
  __device__ __forceinline__ static int first() { return static_cast<int>(blockIdx.x); }
  __device__ __forceinline__ static int next(int w) { return w + static_cast<int>(gridDim.x); }
  __device__ __forceinline__ Tile tile(int w) const {
    Tile t;
    const int rest = w / m_blocks;
    t.m_block = m_blocks - 1 - (w - rest * m_blocks);
    t.head = rest % heads;
    t.batch = rest / heads;
    return t;
  }
};

}  // namespace fa3
}  // namespace cubridge
