// Epilogue of the sm_90 expert: normalise O by the row sum, store O rows < q_hi straight from the
// accumulator (a quad writes 16 contiguous bytes per 8 columns), and store the natural-log LSE.
// A row that kept nothing gets O = 0 and LSE = -inf.
#pragma once

#include "../common/cuir_platform.cuh"
#include "softmax.cuh"
#include "wgmma.cuh"

namespace cubridge {
namespace fa3 {

// o_rows / lse_rows point at this thread's first row (row0); row0 + 8 is its second.
template <typename T, int TILE_N, int D>
__device__ __forceinline__ void store_output(const float (&o)[D / 2],
                                             const OnlineSoftmax<TILE_N, D>& sm, T* o_row0,
                                             int64_t o_row_stride, float* lse_row0, int row0,
                                             int q_hi, int t) {
  constexpr float kLn2 = 0.6931471805599453f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_sum(sm.row_sum[r]);
    const bool empty = !(l > 0.f);
    const float inv = empty ? 0.f : 1.f / l;
    if (row0 + 8 * r < q_hi) {
      T* dst = o_row0 + 8 * r * o_row_stride + 2 * t;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        *reinterpret_cast<uint32_t*>(dst + 8 * j) =
            pack2<T>(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
      }
      if (t == 0) lse_row0[8 * r] = empty ? -INFINITY : sm.row_max[r] * kLn2 + logf(l);
    }
  }
}

}  // namespace fa3
}  // namespace cubridge
