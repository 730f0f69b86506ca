// Online softmax of the sm_90 expert on the wgmma accumulator layout (wgmma.cuh): each thread
// holds two rows (g and g+8 of its warp's 16), spread over the 4 lanes of a quad, so a row
// reduction is two xor-shuffles.
//
// Scores arrive in some unit u (raw Q K^T, or already scaled by a score_mod) with c = log2(e) / u
// per call: p = 2^(s*c - m), one FFMA + one EX2 per element, where m, the running row max, is
// kept in log2 units. Folding the softmax scale into c is what saves the separate multiply when
// no score_mod needs the scaled score (c > 0 is assumed: the max of s*c is the max of s times c).
// Row sums stay per-lane partial until the epilogue: every lane of a quad applies the same
// correction factor, so the partials stay consistent and the quad sum is taken once.
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

// v[i] = max(v[i], v[i + W]) for i < W, then the same for W / 2 ... 1: v[0] is the max of v[0, 2W).
// Template steps, so that every index is a constant and v stays in registers.
template <int W, int N>
__device__ __forceinline__ void halve_max(float (&v)[N]) {
#pragma unroll
  for (int i = 0; i < W; ++i) v[i] = fmaxf(v[i], v[i + W]);
  if constexpr (W > 1) halve_max<W / 2>(v);
}

// The max of this thread's TILE_N / 4 scores of row r (0 or 1) of a score tile, as a tree: the
// S-ready-to-P V chain is what the tensor cores wait on between products (the stage is
// latency-bound, NOTES.md), and a running max would put TILE_N / 4 dependent FMNMX on it.
template <int R, int TILE_N>
__device__ __forceinline__ float row_max_of(const float (&s)[TILE_N / 2]) {
  constexpr int kN = TILE_N / 4;  // 2 per 8-column block
  static_assert(kN >= 8 && kN < 64, "score tiles of 32 to 255 keys");
  float v[kN];
#pragma unroll
  for (int j = 0; j < TILE_N / 8; ++j) {
    v[2 * j] = s[acc_index(j, R, 0)];
    v[2 * j + 1] = s[acc_index(j, R, 1)];
  }
  // Fold the part above the largest power of two P <= kN onto the first, then halve.
  constexpr int P = kN >= 32 ? 32 : kN >= 16 ? 16 : 8;
#pragma unroll
  for (int i = 0; i < kN - P; ++i) v[i] = fmaxf(v[i], v[i + P]);
  halve_max<P / 2>(v);
  return v[0];
}

// The softmax works in log2 units: a score unit is log2(e) of them.
constexpr float kLog2e = 1.4426950408889634f;

// How a score tile's stored values s become log2 units: s * per_unit + offset. The offset is the
// same for every score of one lane's tile (a score_mod's key term split at the lane's first key,
// for_each_raw_score_kv_split), 0 otherwise.
struct TileScale {
  float per_unit;
  float offset;
};

template <int TILE_N, int D>
struct OnlineSoftmax {
  float row_max[2];  // running max per row, log2 units
  float row_sum[2];  // per-lane partial sums of p

  __device__ __forceinline__ OnlineSoftmax() {
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.f;
  }

  // Turns the scores s (s * c + offset in log2 units) into unnormalised probabilities in
  // place and returns, per row, the factor 2^(old max - new max) by which the output accumulator
  // must be rescaled. Split from the rescale so that it can run while a P V wgmma still owns the
  // accumulator.
  __device__ __forceinline__ void update(float (&s)[TILE_N / 2], float (&corr)[2],
                                         TileScale scale) {
    const float c = scale.per_unit;
    const float mx[2] = {row_max_of<0, TILE_N>(s), row_max_of<1, TILE_N>(s)};
    float neg_m[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // The lanes of a quad may carry different offsets: each adds its own before the quad max.
      const float m = fmaxf(row_max[r], quad_max(fmaf(mx[r], c, scale.offset)));
      // A row with nothing kept yet has max -inf: use 0 as the offset so that exp2 sees -inf
      // (giving 0) rather than -inf - -inf = NaN.
      const float m_use = m == -INFINITY ? 0.f : m;
      neg_m[r] = -(m_use - scale.offset);  // -m_use itself where the offset is a literal 0
      corr[r] = fast_exp2(row_max[r] - m_use);  // old max -inf -> 0
      row_max[r] = m;
    }
    float sum[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < TILE_N / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[acc_index(j, 0, e)] = fast_exp2(fmaf(s[acc_index(j, 0, e)], c, neg_m[0]));
        s[acc_index(j, 1, e)] = fast_exp2(fmaf(s[acc_index(j, 1, e)], c, neg_m[1]));
        sum[0] += s[acc_index(j, 0, e)];
        sum[1] += s[acc_index(j, 1, e)];
      }
    }
    row_sum[0] = fmaf(row_sum[0], corr[0], sum[0]);
    row_sum[1] = fmaf(row_sum[1], corr[1], sum[1]);
  }

  __device__ __forceinline__ static void rescale(float (&o)[D / 2], const float (&corr)[2]) {
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      o[acc_index(j, 0, 0)] *= corr[0];
      o[acc_index(j, 0, 1)] *= corr[0];
      o[acc_index(j, 1, 0)] *= corr[1];
      o[acc_index(j, 1, 1)] *= corr[1];
    }
  }

  // `epilogue sink`: one more logit per row (log2 units) that takes probability mass but has no
  // value row. The quad's first lane adds its mass, so the quad sum counts it once.
  __device__ __forceinline__ void add_sink(float logit, float (&o)[D / 2], int lane) {
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m = fmaxf(row_max[r], logit);
      // A row that kept nothing and a sink of -inf stay empty (O = 0, LSE = -inf), not NaN.
      const float m_use = m == -INFINITY ? 0.f : m;
      corr[r] = exp2f(row_max[r] - m_use);
      row_sum[r] = row_sum[r] * corr[r] + ((lane & 3) == 0 ? exp2f(logit - m_use) : 0.f);
      row_max[r] = m;
    }
    rescale(o, corr);
  }
};

// P (fp32 accumulator of m64nTILE_N) -> A fragments of the TILE_N/16 k-slices of P V.
template <typename T, int TILE_N>
__device__ __forceinline__ void p_to_a(const float (&s)[TILE_N / 2], uint32_t (&a)[TILE_N / 16][4]) {
#pragma unroll
  for (int k = 0; k < TILE_N / 16; ++k) {
    a[k][0] = pack2<T>(s[8 * k + 0], s[8 * k + 1]);
    a[k][1] = pack2<T>(s[8 * k + 2], s[8 * k + 3]);
    a[k][2] = pack2<T>(s[8 * k + 4], s[8 * k + 5]);
    a[k][3] = pack2<T>(s[8 * k + 6], s[8 * k + 7]);
  }
}

}  // namespace fa3
}  // namespace cubridge
