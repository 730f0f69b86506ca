// The backward's tile math on tensor cores beyond the forward's two GEMM shapes (mainloop.cuh),
// which it reuses transposed: a warp owns 16 KV rows of the CTA's K/V tile, so S^T = K Q^T and
// dP^T = V dO^T are gemm_qk with K (or V) as A and Q (or dO) as B, and dV += P^T dO and
// dK += dS^T Q are gemm_pv with P^T (or dS^T) from registers and dO (or Q) read transposed. What
// is new here: dQ = dS K, with dS staged in shared memory as [query row][key], and the element
// coordinates of a transposed score fragment (common/backward_hooks.cuh).
#pragma once

#include "mainloop.cuh"

namespace cubridge {
namespace fa2 {

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

// gemm_dq for the warp's run-time part (0 <= part < PARTS), each part its own instance.
template <typename Elem, int BN, int D, int PARTS, int PART = 0>
__device__ __forceinline__ void gemm_dq_part(int part, float (&acc)[D / 8 / PARTS][4],
                                             const LdsmAddr<BN>& ds, const LdsmAddr<D>& kt) {
  if constexpr (PART + 1 < PARTS) {
    if (part != PART) return gemm_dq_part<Elem, BN, D, PARTS, PART + 1>(part, acc, ds, kt);
  }
  gemm_dq<Elem, BN, D, PARTS, PART>(acc, ds, kt);
}

}  // namespace fa2
}  // namespace cubridge
