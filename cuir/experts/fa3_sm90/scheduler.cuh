// Tile order of the sm_90 expert (one CTA per tile, no persistence yet). The hardware dispatches
// CTAs in linear-id order (x fastest), so the m-block is the slowest grid dimension and, for
// causal, runs from the last (longest: most kv blocks) to the first: the short tiles fill the
// tail of the wave instead of a few long ones running alone at the end.
#pragma once

#include "../common/cuir_platform.cuh"

namespace cubridge {
namespace fa3 {

struct Tile {
  int m_block, head, batch;
};

__host__ __device__ __forceinline__ int ceil_div(int a, int b) { return (a + b - 1) / b; }

template <int BLOCK_M>
struct Scheduler {
  static dim3 grid(int batch, int heads_q, int seqlen_q) {
    return dim3(heads_q, batch, ceil_div(seqlen_q, BLOCK_M));
  }
  __device__ __forceinline__ static Tile tile(bool causal) {
    Tile t;
    t.head = blockIdx.x;
    t.batch = blockIdx.y;
    t.m_block = causal ? static_cast<int>(gridDim.z - 1 - blockIdx.z) : static_cast<int>(blockIdx.z);
    return t;
  }
};

}  // namespace fa3
}  // namespace cubridge
