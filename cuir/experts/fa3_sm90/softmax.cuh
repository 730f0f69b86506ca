// Online softmax of the sm_90 expert on the wgmma accumulator layout (wgmma.cuh): each thread
// holds two rows (g and g+8 of its warp's 16), spread over the 4 lanes of a quad, so a row
// reduction is two xor-shuffles. The scale is folded into the exponent: p = 2^(s*c - m*c) with
// c = scale * log2(e), one FFMA + one EX2 per element. Row sums stay per-lane partial until the
// epilogue: every lane of a quad applies the same correction factor, so the partials stay
// consistent and the quad sum is taken once.
#pragma once

#include "../common/cuir_platform.cuh"
#include "wgmma.cuh"

namespace cubridge {
namespace fa3 {

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

template <int BLOCK_N, int D>
struct OnlineSoftmax {
  float row_max[2];  // raw (unscaled) running max per row
  float row_sum[2];  // per-lane partial sums of p
  float scale_log2;

  __device__ __forceinline__ explicit OnlineSoftmax(float c) : scale_log2(c) {
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.f;
  }

  // Turns the scores s into unnormalised probabilities in place and returns, per row, the factor
  // exp(old max - new max) by which the output accumulator must be rescaled. Split from the
  // rescale so that it can run while a P V wgmma still owns the accumulator.
  __device__ __forceinline__ void update(float (&s)[BLOCK_N / 2], float (&corr)[2]) {
    float mx[2] = {row_max[0], row_max[1]};
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) {
      mx[0] = fmaxf(mx[0], fmaxf(s[4 * j], s[4 * j + 1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[4 * j + 2], s[4 * j + 3]));
    }
    float neg_ms[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = quad_max(mx[r]);
      // A row with nothing kept yet has max -inf: use 0 as the offset so that exp2 sees -inf
      // (giving 0) rather than -inf - -inf = NaN.
      const float ms = mx[r] == -INFINITY ? 0.f : mx[r] * scale_log2;
      neg_ms[r] = -ms;
      corr[r] = fast_exp2(row_max[r] * scale_log2 - ms);  // old max -inf -> 0
      row_max[r] = mx[r];
    }
    float sum[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[4 * j + e] = fast_exp2(fmaf(s[4 * j + e], scale_log2, neg_ms[0]));
        s[4 * j + 2 + e] = fast_exp2(fmaf(s[4 * j + 2 + e], scale_log2, neg_ms[1]));
        sum[0] += s[4 * j + e];
        sum[1] += s[4 * j + 2 + e];
      }
    }
    row_sum[0] = fmaf(row_sum[0], corr[0], sum[0]);
    row_sum[1] = fmaf(row_sum[1], corr[1], sum[1]);
  }

  __device__ __forceinline__ static void rescale(float (&o)[D / 2], const float (&corr)[2]) {
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      o[4 * j] *= corr[0];
      o[4 * j + 1] *= corr[0];
      o[4 * j + 2] *= corr[1];
      o[4 * j + 3] *= corr[1];
    }
  }

  __device__ __forceinline__ void step(float (&s)[BLOCK_N / 2], float (&o)[D / 2]) {
    float corr[2];
    update(s, corr);
    rescale(o, corr);
  }
};

// P (fp32 accumulator of m64nBLOCK_N) -> A fragments of the BLOCK_N/16 k-slices of P V.
template <typename T, int BLOCK_N>
__device__ __forceinline__ void p_to_a(const float (&s)[BLOCK_N / 2], uint32_t (&a)[BLOCK_N / 16][4]) {
#pragma unroll
  for (int k = 0; k < BLOCK_N / 16; ++k) {
    a[k][0] = pack2<T>(s[8 * k + 0], s[8 * k + 1]);
    a[k][1] = pack2<T>(s[8 * k + 2], s[8 * k + 3]);
    a[k][2] = pack2<T>(s[8 * k + 4], s[8 * k + 5]);
    a[k][3] = pack2<T>(s[8 * k + 6], s[8 * k + 7]);
  }
}

}  // namespace fa3
}  // namespace cubridge
