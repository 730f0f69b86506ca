// Tile abstractions of the sm_80 expert: register fragments of the m16n8k16 tensor-core MMA,
// ldmatrix loads, cp.async copies, and swizzled shared-memory tiles.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with 16-bit inputs), with g = lane / 4, t = lane % 4:
//   A 16x16 (row-major):  a0 = (g, 2t..2t+1)  a1 = (g+8, 2t..)  a2 = (g, 2t+8..)  a3 = (g+8, 2t+8..)
//   B 16x8  (K x N):      b0 = (k 2t..2t+1, n g)                b1 = (k 2t+8.., n g)
//   C 16x8  (fp32):       c0,c1 = (g, 2t..2t+1)                 c2,c3 = (g+8, 2t..2t+1)
// The C layout of two adjacent n-tiles equals the A layout of one k16 slice, which is why the
// softmax output P can feed the second MMA straight from registers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../common/cp_async.cuh"
#include "../common/cuir_platform.cuh"

namespace cubridge {
namespace fa2 {

template <typename Elem>
struct ElemTraits;

template <>
struct ElemTraits<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4],
                                             uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct ElemTraits<__half> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4],
                                             uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// A ROWS x D tile of 16-bit elements in shared memory, stored in 16-byte chunks whose index is
// XOR-ed with (row % 8): the eight rows an ldmatrix reads at one logical column then fall into
// eight different bank groups instead of one.
template <typename Elem, int ROWS, int D>
struct SmemTile {
  static_assert(D % 64 == 0, "head dim must be a multiple of 64 for the 8-chunk swizzle");
  static constexpr int kChunks = D / 8;
  static constexpr int kBytes = ROWS * D * 2;

  Elem* base;

  __device__ __forceinline__ static int offset(int row, int col) {
    const int chunk = (col >> 3) ^ (row & 7);
    return row * D + (chunk << 3) + (col & 7);
  }
  __device__ __forceinline__ uint32_t addr(int row, int col) const {
    return smem_addr(base + offset(row, col));
  }

  // Issues cp.async for rows [0, valid_rows) of a global tile (row stride in elements); the rest
  // are zero-filled. Every thread of the CTA takes part, always at the same column, stepping
  // down the rows: the shared-memory offsets are then compile-time steps, and the global address
  // is one running pointer (laundered so the compiler cannot hoist a precomputed address per
  // step out of the KV loop: that is what used to spill).
  template <int NTHREADS>
  __device__ __forceinline__ void load_async(const Elem* gmem, int64_t row_stride, int valid_rows,
                                             int tid) const {
    static_assert(NTHREADS % kChunks == 0, "threads must cover whole rows");
    constexpr int kRowsPerPass = NTHREADS / kChunks;
    static_assert(ROWS % kRowsPerPass == 0, "threads must cover the tile evenly");
    const int row0 = tid / kChunks, col = (tid % kChunks) * 8;
    const uint32_t dst = addr(row0, col);
    const Elem* src = gmem + row0 * row_stride + col;
    const int64_t step = kRowsPerPass * row_stride;
#pragma unroll
    for (int i = 0; i < ROWS / kRowsPerPass; ++i) {
      const bool valid = row0 + i * kRowsPerPass < valid_rows;
      // A pass of a multiple of 8 rows keeps row & 7, hence the swizzle, fixed: a constant step.
      const uint32_t to = kRowsPerPass % 8 == 0 ? dst + i * kRowsPerPass * D * 2
                                                : addr(row0 + i * kRowsPerPass, col);
      cp_async_16(to, valid ? src : gmem, valid);
      src += step;
      asm volatile("" : "+l"(src));
    }
  }
};

// ldmatrix addresses for one lane into a SmemTile, precomputed so that the KV loop pays nothing:
// a lane reads row `row + R` at 16-byte chunk `chunk + C` for compile-time R (a multiple of 8)
// and even C. Because row & 7 is fixed per lane and C is even, the swizzled chunk is
// (C & ~7) + ((C & 7) ^ z) with z = chunk ^ (row & 7): four base registers (one per C & 7)
// plus immediates cover every (R, C).
template <int D>
struct LdsmAddr {
  uint32_t b[4];

  __device__ __forceinline__ LdsmAddr(uint32_t tile_base, int row, int chunk) {
    const int z = chunk ^ (row & 7);
#pragma unroll
    for (int c = 0; c < 4; ++c) b[c] = tile_base + row * D * 2 + (((2 * c) ^ z) << 4);
  }
  __device__ __forceinline__ uint32_t operator()(int R, int C) const {
    return b[(C & 7) >> 1] + R * D * 2 + ((C & ~7) << 4);
  }
};

}  // namespace fa2
}  // namespace cubridge
