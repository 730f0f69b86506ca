// Epilogue of the sm_90 expert: normalise O by the row sum, store O rows < q_hi from the
// accumulator, and store the natural-log LSE. A row that kept nothing gets O = 0, LSE = -inf.
//
// In the accumulator a quad holds 8 columns of a row (2 per thread) per 8-column block, so
// stores straight from it are 4 bytes per thread, and a warp's store touches 8 rows for 16
// bytes each. At S = 1k those narrow stores were the largest per-tile cost (ncu warp sampling,
// bench/sm90/NOTES.md: 16% of all samples, the stores waiting on the LSU queue and the next
// tile's first instructions waiting on the stores). Where O's rows are 16-byte aligned the quad
// transposes each 4 blocks among its threads first, so that each thread stores 16 contiguous
// bytes of one row (a quarter of the store instructions, whole 32-byte sectors).
#pragma once

#include "../common/cuir_platform.cuh"
#include "softmax.cuh"
#include "wgmma.cuh"

namespace cubridge {
namespace fa3 {

// O rows start 16-byte aligned for every (batch, head, row): the wide stores apply.
__host__ __device__ __forceinline__ bool o_rows_16_byte_aligned(const void* o, int64_t batch_stride,
                                                              int64_t head_stride,
                                                              int64_t row_stride) {
  return reinterpret_cast<uintptr_t>(o) % 16 == 0 && batch_stride % 8 == 0 &&
         head_stride % 8 == 0 && row_stride % 8 == 0;
}

// v[k] of quad thread t becomes v[t] of quad thread k (a 4 x 4 transpose across the quad): two
// exchange rounds, over index bit 1 with thread t ^ 2, then over bit 0 with thread t ^ 1. In each
// round a thread gives its partner the two values whose index bit differs from its own bit and
// takes the partner's in their place. Every lane of the warp must call it (shuffles).
__device__ __forceinline__ void quad_transpose(uint32_t (&v)[4], int t) {
#pragma unroll
  for (int bit = 1; bit >= 0; --bit) {
    const int m = 1 << bit;
    const bool hi = (t & m) != 0;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      if (q & m) continue;  // q: the index with the bit clear; q + m with it set
      const uint32_t give = hi ? v[q] : v[q + m];
      const uint32_t take = __shfl_xor_sync(0xffffffffu, give, m);
      v[q] = hi ? take : v[q];
      v[q + m] = hi ? v[q + m] : take;
    }
  }
}

// o_rows / lse_rows point at this thread's first row (row0); row0 + 8 is its second. `wide`:
// o_rows_16_byte_aligned holds (uniform over the grid).
template <typename T, int TILE_N, int D>
__device__ __forceinline__ void store_output(const float (&o)[D / 2],
                                             const OnlineSoftmax<TILE_N, D>& sm, T* o_row0,
                                             int64_t o_row_stride, float* lse_row0, int row0,
                                             int q_hi, int t, bool wide) {
  constexpr float kLn2 = 0.6931471805599453f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_sum(sm.row_sum[r]);
    const bool empty = !(l > 0.f);
    const float inv = empty ? 0.f : 1.f / l;
    const bool in_rows = row0 + 8 * r < q_hi;
    T* const dst = o_row0 + 8 * r * o_row_stride;
    // Column pair 8j + 2t of the row, scaled (an empty row is 0 whatever the accumulator holds).
    auto pair = [&](int j) {
      return pack2<T>(empty ? 0.f : o[4 * j + 2 * r] * inv, empty ? 0.f : o[4 * j + 2 * r + 1] * inv);
    };
    if (wide) {
#pragma unroll
      for (int g = 0; g < D / 32; ++g) {
        uint32_t v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) v[k] = pair(4 * g + k);
        quad_transpose(v, t);  // v[k]: columns 32g + 8t + 2k, +1
        if (in_rows) *reinterpret_cast<uint4*>(dst + 32 * g + 8 * t) = make_uint4(v[0], v[1], v[2], v[3]);
      }
    } else if (in_rows) {
#pragma unroll
      for (int j = 0; j < D / 8; ++j) *reinterpret_cast<uint32_t*>(dst + 8 * j + 2 * t) = pair(j);
    }
    if (in_rows && t == 0) lse_row0[8 * r] = empty ? -INFINITY : sm.row_max[r] * kLn2 + logf(l);
  }
}

}  // namespace fa3
}  // namespace cubridge
