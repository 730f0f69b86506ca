// The backward's tile pieces on the sm_90 expert's wgmma (kernel_bwd.cu): the 128B-swizzled panel
// layout of wgmma.cuh filled by cp.async, and the five products of one query block, each issued
// by one consumer warpgroup on its 64 keys as one committed wgmma group:
//   S^T  = K Q^T    SS, K and Q K-major (A = the warpgroup's 64 K rows, B = the block's Q)
//   dP^T = V dO^T   SS, the same with V and dO
//   dV  += P^T dO   RS, P^T packed from S^T's accumulator, dO MN-major (as the forward's P V)
//   dK  += dS^T Q   RS, the same with dS^T and Q
//   (at head dim 256, BwdTiling::kSplitQueries: S^T and dP^T of each warpgroup's half of the
//   block's queries, dV and dK SS from P^T and dS^T gathered in shared memory, mma_kt)
//   dQ   = dS K     SS, both MN-major: dS^T stored key-major (a [key][query] panel) read as A,
//                   K's panel of this warpgroup's head-dim half as B
// Per-k offsets are added to the descriptors' 14-bit address field as in mainloop.cuh.
#pragma once

#include "../common/cp_async.cuh"
#include "../common/cuir_platform.cuh"
#include "wgmma.cuh"

namespace cubridge {
namespace fa3 {

// A ROWS x D tile in 64-column panels (wgmma.cuh): row r, 16-byte chunk c of panel p at
// p * ROWS * 128 + r * 128 + ((c ^ (r & 7)) * 16).
template <int ROWS, int D>
struct PanelTile {
  static constexpr int kPanelBytes = ROWS * 128;
  static constexpr int kBytes = ROWS * D * 2;

  // cp.async of rows [0, valid_rows) of a global tile (row stride in elements; rows past it
  // zero-filled) by NTHREADS threads, each at one 16-byte chunk column, stepping down the rows.
  template <int NTHREADS, typename T>
  static __device__ __forceinline__ void load_async(uint32_t smem, const T* gmem,
                                                    int64_t row_stride, int valid_rows, int tid) {
    constexpr int kChunks = D / 8;
    static_assert(NTHREADS % kChunks == 0, "threads cover whole rows");
    constexpr int kRowsPerPass = NTHREADS / kChunks;
    static_assert(kRowsPerPass % 8 == 0 && ROWS % kRowsPerPass == 0,
                  "a pass of a multiple of 8 rows keeps the swizzle fixed");
    const int row0 = tid / kChunks, c = tid % kChunks;
    const uint32_t dst =
        smem + (c >> 3) * kPanelBytes + row0 * 128 + (((c & 7) ^ (row0 & 7)) << 4);
    const T* src = gmem + row0 * row_stride + c * 8;
    const int64_t step = kRowsPerPass * row_stride;
#pragma unroll
    for (int i = 0; i < ROWS / kRowsPerPass; ++i) {
      const bool valid = row0 + i * kRowsPerPass < valid_rows;
      cp_async_16(dst + i * kRowsPerPass * 128, valid ? src : gmem, valid);
      src += step;
      asm volatile("" : "+l"(src));  // one running pointer, not one hoisted address per row
    }
  }
};

// C[64 x N] (+)= A[64 x D] B[N x D]^T, both K-major panel tiles: A_PANEL / B_PANEL are the bytes
// between their 64-column panels. Not committed.
template <typename T, int N, int D, int A_PANEL, int B_PANEL>
__device__ __forceinline__ void mma_kmajor(float (&c)[N / 2], uint64_t a, uint64_t b) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    // k-slice kk: panel kk / 4, 32-byte step kk % 4 inside the 128-byte row.
    Mma<T, N>::ss(c, a + (((kk >> 2) * A_PANEL + (kk & 3) * 32) >> 4),
                  b + (((kk >> 2) * B_PANEL + (kk & 3) * 32) >> 4), kk > 0 ? 1 : 0);
  }
}

// C[64 x D] += A[64 x K] B[K x D], A from registers (K / 16 slices), B MN-major. Not committed.
template <typename T, int D, int K>
__device__ __forceinline__ void mma_rs(float (&c)[D / 2], const uint32_t (&a)[K / 16][4],
                                       uint64_t b) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) Mma<T, D>::rs(c, a[kk], b + ((kk * 16 * 128) >> 4), 1);
}

// C[64 x N] = A[64 x K] B[K x N], both MN-major (K rows of 128 bytes). Not committed.
template <typename T, int N, int K>
__device__ __forceinline__ void mma_mn(float (&c)[N / 2], uint64_t a, uint64_t b) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    Mma<T, N>::ss_mn(c, a + ((kk * 16 * 128) >> 4), b + ((kk * 16 * 128) >> 4), kk > 0 ? 1 : 0);
  }
}

// C[64 x N] += A[64 x K] B[K x N], A K-major (K <= 64: one panel of 128-byte rows), B MN-major
// (K rows of 128 bytes, N in panels LBO apart). Not committed.
template <typename T, int N, int K>
__device__ __forceinline__ void mma_kt(float (&c)[N / 2], uint64_t a, uint64_t b) {
  static_assert(K <= 64, "A's reduction dim inside one 128-byte row");
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    Mma<T, N>::ss_kt(c, a + ((kk * 32) >> 4), b + ((kk * 16 * 128) >> 4), 1);
  }
}

// Barrier `id` (1-15; 0 is __syncthreads') among `threads` threads (a multiple of 32).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// The same barrier, returning whether any of its threads passed `pred`.
__device__ __forceinline__ bool named_barrier_or(int id, int threads, bool pred) {
  unsigned any;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, %2, %3, p;\n"
      " selp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(any)
      : "r"(static_cast<unsigned>(pred)), "r"(id), "r"(threads)
      : "memory");
  return any != 0;
}

// Four adjacent fp32 values added into global memory by one vector reduction (sm_90; 16-byte
// aligned).
__device__ __forceinline__ void red_add_v4(float* at, float a, float b, float c, float d) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(at), "f"(a), "f"(b),
               "f"(c), "f"(d)
               : "memory");
}

// Four fp32 values into shared memory by one 16-byte store (16-byte aligned).
__device__ __forceinline__ void st_shared_v4(uint32_t at, float a, float b, float c, float d) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(at), "f"(a), "f"(b), "f"(c),
               "f"(d)
               : "memory");
}

// Four fp32 values from shared memory by one 16-byte load (16-byte aligned), and one 32-bit word.
__device__ __forceinline__ void ld_shared_v4(uint32_t at, float& a, float& b, float& c, float& d) {
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(a), "=f"(b), "=f"(c), "=f"(d)
               : "r"(at)
               : "memory");
}
__device__ __forceinline__ uint32_t ld_shared_u32(uint32_t at) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(at) : "memory");
  return v;
}

// `bytes` of fp32 in shared memory added element-wise into global memory by the bulk-copy engine
// (each element's add atomic, as a reduction's), committed as one bulk group of this thread.
__device__ __forceinline__ void bulk_reduce_add_f32(float* global, uint32_t shared, int bytes) {
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
      "cp.async.bulk.commit_group;\n" ::"l"(global),
      "r"(shared), "r"(bytes)
      : "memory");
}
// The same for 64-bit integers (deterministic mode's fixed point: integer adds, any order).
__device__ __forceinline__ void bulk_reduce_add_u64(unsigned long long* global, uint32_t shared,
                                                    int bytes) {
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u64 [%0], [%1], %2;\n"
      "cp.async.bulk.commit_group;\n" ::"l"(global),
      "r"(shared), "r"(bytes)
      : "memory");
}
// Two 64-bit values into shared memory by one 16-byte store.
__device__ __forceinline__ void st_shared_v2_u64(uint32_t at, unsigned long long a,
                                                 unsigned long long b) {
  asm volatile("st.shared.v2.u64 [%0], {%1, %2};\n" ::"r"(at), "l"(a), "l"(b) : "memory");
}
// Waits until this thread's bulk groups but the N newest have read their shared memory
// (bulk_wait_read) or completed (bulk_wait).
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// Makes this thread's generic-proxy writes to shared memory (cp.async, st.shared) visible to
// the async proxy that wgmma reads through; a barrier after it publishes them to the CTA.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

}  // namespace fa3
}  // namespace cubridge
