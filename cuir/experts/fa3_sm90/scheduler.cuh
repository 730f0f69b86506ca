// Tile order of the sm_90 expert (one CTA per tile; `grid ... schedule longest_first`). The
// hardware dispatches CTAs in linear-id order (x fastest), so:
//  - the query tile is the fastest grid dimension: the CTAs of one wave then share a few heads,
//    whose K/V (4 MB per head at 8k x 128) stay in L2 while every query tile of the head streams
//    them. With heads fastest a wave touched 64 heads at once and read K/V from DRAM again and
//    again (measured: 87% of DRAM bandwidth, 40% L2 hits, half the tensor rate);
//  - within a head the query tiles run from the last to the first: under causal-like masks the
//    last tiles visit the most KV blocks, so the short ones fill the tail of the wave instead of a
//    few long ones running alone at the end; without such a mask the order changes nothing.
#pragma once

#include "../common/cuir_platform.cuh"

namespace cubridge {
namespace fa3 {

struct Tile {
  int m_block, head, batch;
};

struct LongestFirst {
  // grid = (m_blocks, heads_q, batch)
  __device__ __forceinline__ static Tile tile() {
    Tile t;
    t.m_block = static_cast<int>(gridDim.x - 1 - blockIdx.x);
    t.head = static_cast<int>(blockIdx.y);
    t.batch = static_cast<int>(blockIdx.z);
    return t;
  }
};

}  // namespace fa3
}  // namespace cubridge
