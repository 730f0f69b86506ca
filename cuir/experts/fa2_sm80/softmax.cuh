// Online softmax over register fragments (CuIR: softmax.init / softmax.online / epilogue stats
// and its sink).
//
// Scores arrive in log2 units (score * log2(e)); -inf marks masked elements. Each thread owns
// two rows per 16-row m-tile (g and g+8); the four threads of a quad share a row, so the row max
// is reduced over the quad every step, while the row sum stays thread-partial until the end
// (the rescale factor is identical across the quad, so partial sums rescale correctly).
#pragma once

#include <math_constants.h>

namespace cubridge {
namespace fa2 {

// The softmax works in log2 units: a score unit is log2(e) of them.
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <int MT>
struct OnlineSoftmax {
  float row_max[MT][2];
  float row_sum[MT][2];

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        row_max[mt][r] = -CUDART_INF_F;
        row_sum[mt][r] = 0.f;
      }
    }
  }

  // s: scores of one KV block (log2 units) -> P = exp2(s - m_new), in place; acc rescaled.
  template <int NT, int DT>
  __device__ __forceinline__ void step(float (&s)[MT][NT][4], float (&acc)[MT][DT][4]) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = row_max[mt][r];
#pragma unroll
        for (int j = 0; j < NT; ++j) mx = fmaxf(mx, fmaxf(s[mt][j][2 * r], s[mt][j][2 * r + 1]));
        mx = quad_max(mx);
        // A row with nothing kept yet keeps max -inf; subtracting 0 instead keeps exp2 at 0.
        const float m_use = mx == -CUDART_INF_F ? 0.f : mx;
        const float alpha = exp2f(row_max[mt][r] - m_use);
        row_max[mt][r] = mx;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          s[mt][j][2 * r] = exp2f(s[mt][j][2 * r] - m_use);
          s[mt][j][2 * r + 1] = exp2f(s[mt][j][2 * r + 1] - m_use);
          sum += s[mt][j][2 * r] + s[mt][j][2 * r + 1];
        }
        row_sum[mt][r] = row_sum[mt][r] * alpha + sum;
#pragma unroll
        for (int d = 0; d < DT; ++d) {
          acc[mt][d][2 * r] *= alpha;
          acc[mt][d][2 * r + 1] *= alpha;
        }
      }
    }
  }

  // CuIR `epilogue sink EXPR`: one more logit per row (log2 units, like the scores) that joins
  // the denominator with a zero value row, folded in after the last block as a one-column step.
  // The quad agrees on row_max, so each thread rescales its partial sum and acc alike; only the
  // quad's first thread adds the sink's mass, since finalize sums the quad's partial sums.
  template <int DT>
  __device__ __forceinline__ void add_sink(float logit, float (&acc)[MT][DT][4], int lane) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float mx = fmaxf(row_max[mt][r], logit);
        // A row that kept nothing and a sink of -inf stay empty (O = 0, LSE = -inf), not NaN.
        const float m_use = mx == -CUDART_INF_F ? 0.f : mx;
        const float alpha = exp2f(row_max[mt][r] - m_use);
        row_sum[mt][r] = row_sum[mt][r] * alpha + ((lane & 3) == 0 ? exp2f(logit - m_use) : 0.f);
        row_max[mt][r] = mx;
#pragma unroll
        for (int d = 0; d < DT; ++d) {
          acc[mt][d][2 * r] *= alpha;
          acc[mt][d][2 * r + 1] *= alpha;
        }
      }
    }
  }

  // Turns the statistics into 1/l (0 for rows that kept nothing) and the natural-log LSE.
  __device__ __forceinline__ void finalize(float (&inv_sum)[MT][2], float (&lse)[MT][2]) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float l = quad_sum(row_sum[mt][r]);
        inv_sum[mt][r] = l > 0.f ? 1.f / l : 0.f;
        lse[mt][r] = l > 0.f ? (row_max[mt][r] + __log2f(l)) * 0.6931471805599453f
                             : -CUDART_INF_F;
      }
    }
  }
};

}  // namespace fa2
}  // namespace cubridge
