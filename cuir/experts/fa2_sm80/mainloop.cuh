// The two matmuls of one KV block (CuIR: qk, pv) on tensor cores, and the coordinates and visitor
// of the score fragment between them, which kernel.cu's score_mod / mask regions use.
//
// Warp w owns query rows [w * 16 * MT, (w + 1) * 16 * MT) of the CTA's tile: MT m-tiles of 16.
// Q and K are read from swizzled shared memory with ldmatrix; P stays in registers; V is read
// transposed with ldmatrix.trans.
#pragma once

#include "tile.cuh"

// How many head-dim steps of QK^T are unrolled. 4 steps = 8 chunks keep every LdsmAddr index a
// compile-time constant (fewer would put it in local memory) without letting the compiler hoist
// a whole head dim of addresses into registers the accumulators need.
#ifndef CUBRIDGE_QK_UNROLL
#define CUBRIDGE_QK_UNROLL 4
#endif

namespace cubridge {
namespace fa2 {

constexpr int kQkUnroll = CUBRIDGE_QK_UNROLL;

// acc_s[mt][j] += Q[rows of m-tile mt] . K[kv rows of n-tile j]^T over the whole head dim.
// Lane patterns of the three ldmatrix uses (see the fragment layouts in tile.cuh).
template <int D>
struct MainloopAddrs {
  LdsmAddr<D> q;  // A of QK^T: rows lane & 15, chunk lane >> 4, per m-tile of the warp
  LdsmAddr<D> k;  // B of QK^T: four 8x8 (kv, d) matrices of two n-tiles
  LdsmAddr<D> v;  // B of PV (transposed): four 8x8 (kv, d) matrices of two d-tiles
  __device__ __forceinline__ MainloopAddrs(uint32_t sq, uint32_t sk, uint32_t sv, int warp_row0,
                                           int lane)
      : q(sq, warp_row0 + (lane & 15), lane >> 4),
        k(sk, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1),
        v(sv, (lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4) {}
};

template <typename Elem, int MT, int NT, int D>
__device__ __forceinline__ void gemm_qk(float (&acc_s)[MT][NT][4], const MainloopAddrs<D>& at) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc_s[mt][j][c] = 0.f;

#pragma unroll kQkUnroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      ldmatrix_x4(a[mt], at.q(mt * 16, 2 * kk));
    }
#pragma unroll
    for (int j2 = 0; j2 < NT / 2; ++j2) {
      // Four 8x8 matrices: (kv 0-7, d 0-7) (kv 0-7, d 8-15) (kv 8-15, d 0-7) (kv 8-15, d 8-15)
      // = B fragments (b0, b1) of n-tiles 2*j2 and 2*j2+1.
      uint32_t b[4];
      ldmatrix_x4(b, at.k(j2 * 16, 2 * kk));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        ElemTraits<Elem>::mma(acc_s[mt][2 * j2], a[mt], b[0], b[1]);
        ElemTraits<Elem>::mma(acc_s[mt][2 * j2 + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// acc_o[mt][dt] += P[m-tile mt] . V[kv block, d-tile dt], P taken from the score registers.
template <typename Elem, int MT, int NT, int DT, int D>
__device__ __forceinline__ void gemm_pv(float (&acc_o)[MT][DT][4], const float (&p)[MT][NT][4],
                                        const MainloopAddrs<D>& at) {
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      a[mt][0] = ElemTraits<Elem>::pack(p[mt][2 * kk][0], p[mt][2 * kk][1]);
      a[mt][1] = ElemTraits<Elem>::pack(p[mt][2 * kk][2], p[mt][2 * kk][3]);
      a[mt][2] = ElemTraits<Elem>::pack(p[mt][2 * kk + 1][0], p[mt][2 * kk + 1][1]);
      a[mt][3] = ElemTraits<Elem>::pack(p[mt][2 * kk + 1][2], p[mt][2 * kk + 1][3]);
    }
#pragma unroll
    for (int d2 = 0; d2 < DT / 2; ++d2) {
      // Transposed: (kv 0-7, d 0-7) (kv 8-15, d 0-7) (kv 0-7, d 8-15) (kv 8-15, d 8-15)
      // = B fragments (b0, b1) of d-tiles 2*d2 and 2*d2+1.
      uint32_t b[4];
      ldmatrix_x4_trans(b, at.v(kk * 16, 2 * d2));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        ElemTraits<Elem>::mma(acc_o[mt][2 * d2], a[mt], b[0], b[1]);
        ElemTraits<Elem>::mma(acc_o[mt][2 * d2 + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// Where one thread's score registers sit in the problem: element (mt, j, c) is query row
// q0 + mt*16 + (c >= 2 ? 8 : 0) and key column kv0 + j*8 + (c & 1).
//
// So the thread's MT x NT x 4 elements lie on only MT x 2 rows and NT x 2 columns: row slot
// (mt, r) and column slot (j, k), with element (mt, j, c) on row slot (mt, c >> 1) and column
// slot (j, c & 1). What depends on the row alone can be computed once per row slot instead of
// once per element.
struct FragCoord {
  int q0;   // first query row of this thread (m-tile 0, c < 2)
  int kv0;  // first key column of this thread (n-tile 0, c even)
  __device__ __forceinline__ int row(int mt, int r) const { return q0 + mt * 16 + (r << 3); }
  __device__ __forceinline__ int col(int j, int k) const { return kv0 + j * 8 + k; }
  __device__ __forceinline__ static int row_slot(int c) { return c >> 1; }
  __device__ __forceinline__ static int col_slot(int c) { return c & 1; }
  __device__ __forceinline__ int q(int mt, int c) const { return row(mt, row_slot(c)); }
  __device__ __forceinline__ int kv(int j, int c) const { return col(j, col_slot(c)); }
};

// Calls f(mt, j, c, element) on every score register of the thread (fully unrolled, so the
// indices stay compile-time and the fragment stays in registers).
template <int MT, int NT, class F>
__device__ __forceinline__ void for_each_fragment(float (&s)[MT][NT][4], F&& f) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) f(mt, j, c, s[mt][j][c]);
}

// for_each_fragment n-tile by n-tile: then a value kept per key column (for_each_col_slot) is
// dead once its n-tile is done. In m-tile order all of them stay live across the first m-tiles,
// which at hdim 128 (MT = 2, NT = 8) made the kernel spill.
template <int MT, int NT, class F>
__device__ __forceinline__ void for_each_fragment_by_col(float (&s)[MT][NT][4], F&& f) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int c = 0; c < 4; ++c) f(mt, j, c, s[mt][j][c]);
}

// Call f(mt, r) on every row slot / f(j, k) on every column slot of the thread (unrolled, so
// that per-slot values kept in [MT][2] / [NT][2] arrays stay in registers).
template <int MT, class F>
__device__ __forceinline__ void for_each_row_slot(F&& f) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) f(mt, r);
}
template <int NT, class F>
__device__ __forceinline__ void for_each_col_slot(F&& f) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int k = 0; k < 2; ++k) f(j, k);
}

}  // namespace fa2
}  // namespace cubridge
