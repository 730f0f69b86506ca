// Epilogue (CuIR: epilogue): O = acc / l in the input dtype, LSE = m + log(l); rows that kept
// nothing get O = 0 and LSE = -inf. O is staged through shared memory so that global stores are
// 16-byte vectors along rows.
#pragma once

#include "softmax.cuh"
#include "tile.cuh"

namespace cubridge {
namespace fa2 {

template <typename Elem, int MT, int DT, int BM, int D, int NTHREADS>
__device__ __forceinline__ void epilogue(float (&acc_o)[MT][DT][4], OnlineSoftmax<MT>& softmax,
                                         const SmemTile<Elem, BM, D>& sO, Elem* o, int64_t o_row_stride,
                                         float* lse, int rows, int warp_row0, int lane, int tid) {
  float inv[MT][2], row_lse[MT][2];
  softmax.finalize(inv, row_lse);
  const int g = lane >> 2, t = lane & 3;
  // Each warp overwrites only the Q rows it alone read, so no barrier is needed before this.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp_row0 + mt * 16 + g + 8 * r;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        const uint32_t packed = ElemTraits<Elem>::pack(acc_o[mt][dt][2 * r] * inv[mt][r],
                                                       acc_o[mt][dt][2 * r + 1] * inv[mt][r]);
        *reinterpret_cast<uint32_t*>(sO.base + sO.offset(row, dt * 8 + 2 * t)) = packed;
      }
      if (t == 0 && row < rows) lse[row] = row_lse[mt][r];
    }
  }
  __syncthreads();
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int i = 0; i < BM * kChunks / NTHREADS; ++i) {
    const int idx = i * NTHREADS + tid;
    const int row = idx / kChunks, col = (idx % kChunks) * 8;
    if (row < rows) {
      *reinterpret_cast<uint4*>(o + row * o_row_stride + col) =
          *reinterpret_cast<const uint4*>(sO.base + sO.offset(row, col));
    }
  }
}

// A program with no KV block to visit (fully masked rows): O = 0, LSE = -inf.
template <typename Elem, int D, int NTHREADS>
__device__ __forceinline__ void epilogue_empty(Elem* o, int64_t o_row_stride, float* lse, int rows,
                                               int tid) {
  constexpr int kChunks = D / 8;
  for (int idx = tid; idx < rows * kChunks; idx += NTHREADS) {
    *reinterpret_cast<uint4*>(o + (idx / kChunks) * o_row_stride + (idx % kChunks) * 8) =
        make_uint4(0, 0, 0, 0);
  }
  for (int row = tid; row < rows; row += NTHREADS) lse[row] = -CUDART_INF_F;
}

}  // namespace fa2
}  // namespace cubridge
