// The backward's tile math on tensor cores beyond the forward's two GEMM shapes (mainloop.cuh),
// which it reuses transposed: a warp owns 16 KV rows of the CTA's K/V tile, so S^T = K Q^T and
// dP^T = V dO^T are gemm_qk with K (or V) as A and Q (or dO) as B, and dV += P^T dO and
// dK += dS^T Q are gemm_pv with P^T (or dS^T) from registers and dO (or Q) read transposed. What
// is new here: dQ = dS K, with dS staged in shared memory as [query row][key], and the element
// coordinates of a transposed score fragment.
#pragma once

#include "mainloop.cuh"

namespace cubridge {
namespace fa2 {

// One element between fp32 and the input dtype: dS into shared memory for dQ's MMA, the
// preprocessing's reads of O and dO, the postprocessing's writes of the gradients.
template <typename Elem>
struct ElemTraitsConvert;
template <>
struct ElemTraitsConvert<__nv_bfloat16> {
  static __device__ __forceinline__ __nv_bfloat16 from(float x) { return __float2bfloat16_rn(x); }
  static __device__ __forceinline__ float to(__nv_bfloat16 x) { return __bfloat162float(x); }
};
template <>
struct ElemTraitsConvert<__half> {
  static __device__ __forceinline__ __half from(float x) { return __float2half_rn(x); }
  static __device__ __forceinline__ float to(__half x) { return __half2float(x); }
};

// acc[dt] += dS[16 query rows] . K[the block's BN keys, head-dim columns of part PART of PARTS]:
// dS as A from shared memory (ds: the A pattern at the warp's rows), K as B read transposed
// (kt: gemm_pv's V pattern on sK). PART is a template argument so that every ldmatrix address
// offset stays a compile-time immediate.
template <typename Elem, int BN, int D, int PARTS, int PART>
__device__ __forceinline__ void gemm_dq(float (&acc)[D / 8 / PARTS][4], const LdsmAddr<BN>& ds,
                                        const LdsmAddr<D>& kt) {
  constexpr int kTiles = D / 8 / PARTS;  // 8-column d-tiles of the part
  static_assert(kTiles % 2 == 0, "a part holds whole 16-column pairs of d-tiles");
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[t][c] = 0.f;
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
    uint32_t a[4];
    ldmatrix_x4(a, ds(0, 2 * kk));
#pragma unroll
    for (int d2 = 0; d2 < kTiles / 2; ++d2) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, kt(kk * 16, 2 * d2 + PART * (D / 8 / PARTS)));
      ElemTraits<Elem>::mma(acc[2 * d2], a, b[0], b[1]);
      ElemTraits<Elem>::mma(acc[2 * d2 + 1], a, b[2], b[3]);
    }
  }
}

// Where one thread's transposed score registers sit: element (j, c) of the warp's single m-tile
// is key row kv0 + 8 * (c >= 2) and query column q0 + j * 8 + (c & 1).
struct FragCoordT {
  int kv0;  // first key row of this thread
  int q0;   // first query column of this thread
  __device__ __forceinline__ int kv(int c) const { return kv0 + ((c >> 1) << 3); }
  __device__ __forceinline__ int q(int j, int c) const { return q0 + j * 8 + (c & 1); }
  // The column's index within the query block (for the block's LSE and D in shared memory).
  __device__ __forceinline__ int q_local(int j, int c, int q_lo) const { return q(j, c) - q_lo; }
};

// Calls f(j, c, element) on each register of a [1][NT][4] fragment.
template <int NT, class F>
__device__ __forceinline__ void for_each_fragment_t(float (&s)[1][NT][4], F&& f) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) f(j, c, s[0][j][c]);
}

}  // namespace fa2
}  // namespace cubridge

// How the backward's gradient visitors call a lowered buffer_grad region's element function:
// (q_idx, kv_idx, [q_f, kv_f,] ds, score&) with the raw score in `score`, and the `_at` form
// leading with the element's slots, as score_visit.cuh's helpers do for the score visitors.
template <typename F>
__device__ __forceinline__ auto cuir_call_grad_element(F& f, int q_idx, int kv_idx, float q_f,
                                                       float kv_f, float ds, float& x, int)
    -> decltype(f(q_idx, kv_idx, q_f, kv_f, ds, x)) {
  return f(q_idx, kv_idx, q_f, kv_f, ds, x);
}
template <typename F>
__device__ __forceinline__ void cuir_call_grad_element(F& f, int q_idx, int kv_idx, float, float,
                                                       float ds, float& x, long) {
  f(q_idx, kv_idx, ds, x);
}
template <typename F>
__device__ __forceinline__ auto cuir_call_grad_element_at(F& f, int mt, int r, int j, int k,
                                                          int q_idx, int kv_idx, float q_f,
                                                          float kv_f, float ds, float& x, int)
    -> decltype(f(mt, r, j, k, q_idx, kv_idx, q_f, kv_f, ds, x)) {
  return f(mt, r, j, k, q_idx, kv_idx, q_f, kv_f, ds, x);
}
template <typename F>
__device__ __forceinline__ void cuir_call_grad_element_at(F& f, int mt, int r, int j, int k,
                                                          int q_idx, int kv_idx, float, float,
                                                          float ds, float& x, long) {
  f(mt, r, j, k, q_idx, kv_idx, ds, x);
}
