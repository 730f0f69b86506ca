// The two matrix products of the sm_90 expert, each issued by one consumer warpgroup as one
// committed wgmma group (not waited for): S = Q K^T (both from shared memory, K-major) and
// O += P V (P from registers, V MN-major). Descriptor bases come from `Operands`; per-k offsets
// are added as immediates to the 14-bit address field, which cannot carry out of it because
// every tile lies below 228 KB (address >> 4 < 2^14).
#pragma once

#include "../common/cuir_platform.cuh"
#include "wgmma.cuh"

namespace cubridge {
namespace fa3 {

template <typename G, int TILE_N>
struct Operands {
  uint64_t q0;  // this warpgroup's 64 query rows of Q buffer 0; buffer i adds i * kQBufferStep
  uint64_t k0;  // K slot 0; slot s adds s * kStageStep
  uint64_t v0;
  static constexpr uint64_t kStageStep = G::kKVBytes >> 4;
  static constexpr uint64_t kQBufferStep = G::kQBytes >> 4;

  __device__ __forceinline__ Operands(const void* q_smem, const void* k_smem, const void* v_smem,
                                      int consumer_wg)
      : q0(make_desc(smem_u32(q_smem) + consumer_wg * 64 * 128, 16, 1024)),
        k0(make_desc(smem_u32(k_smem), 16, 1024)),
        v0(make_desc(smem_u32(v_smem), G::kKVPanelBytes, 1024)) {}
  __device__ __forceinline__ uint64_t q(int buf) const { return q0 + buf * kQBufferStep; }
  __device__ __forceinline__ uint64_t k(int slot) const { return k0 + slot * kStageStep; }
  __device__ __forceinline__ uint64_t v(int slot) const { return v0 + slot * kStageStep; }
};

template <typename T, typename G, int D, int TILE_N>
__device__ __forceinline__ void issue_qk(float (&s)[TILE_N / 2], uint64_t q_desc, uint64_t k_desc) {
  reg_fence(s);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    // k-slice kk: panel kk / 4, 32-byte step kk % 4 inside the 128-byte row.
    const uint64_t qa = q_desc + (((kk >> 2) * G::kQPanelBytes + (kk & 3) * 32) >> 4);
    const uint64_t kb = k_desc + (((kk >> 2) * G::kKVPanelBytes + (kk & 3) * 32) >> 4);
    Mma<T, TILE_N>::ss(s, qa, kb, kk > 0 ? 1 : 0);
  }
  wgmma_commit();
}

template <typename T, int D, int TILE_N>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2], uint32_t (&pa)[TILE_N / 16][4],
                                         uint64_t v_desc) {
  reg_fence(pa);
  reg_fence(o);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < TILE_N / 16; ++kk) {
    // 16 kv rows = two 1024-byte swizzle atoms.
    Mma<T, D>::rs(o, pa[kk], v_desc + ((kk * 16 * 128) >> 4), 1);
  }
  wgmma_commit();
}

}  // namespace fa3
}  // namespace cubridge
