// Forward attention kernel of the sm_90 expert: 1 producer warpgroup (TMA) + 2 consumer
// warpgroups (wgmma), each consumer owning 64 of the tile's 128 query rows.
#pragma once

#include <cuda.h>

#include "../common/cuir_platform.cuh"
#include "epilogue.cuh"
#include "mask.cuh"
#include "pipeline.cuh"
#include "scheduler.cuh"
#include "softmax.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace cubridge {
namespace fa3 {

struct FwdParams {
  void* o;          // [batch, heads_q, seqlen_q, D] with the strides below (elements)
  float* lse;       // [batch, heads_q, seqlen_q] contiguous
  int64_t o_batch_stride, o_head_stride, o_row_stride;
  int batch, heads_q, heads_kv, seqlen_q, seqlen_kv;
  float scale;       // softmax scale (1/sqrt(D) usually)
  float scale_log2;  // scale * log2(e)
  int causal;
};

template <typename T, int D>
__device__ __forceinline__ void producer(const CUtensorMap* tq, const CUtensorMap* tk,
                                         const CUtensorMap* tv, const SmemPlan<Config<T, D>>& sp,
                                         const Tile& tile, int kv_head, int n_blocks) {
  using Cfg = Config<T, D>;
  Barriers* b = sp.bars();
  const int m0 = tile.m_block * Cfg::kBlockM;
  mbar_arrive_expect_tx(&b->q_full, Cfg::kQBytes);
#pragma unroll
  for (int p = 0; p < Cfg::kPanels; ++p)
    tma_load_4d(sp.q() + p * Cfg::kQPanelBytes, tq, &b->q_full, p * 64, m0, tile.head, tile.batch);
  for (int n = 0; n < n_blocks; ++n) {
    const int s = n & 1;
    const uint32_t round = static_cast<uint32_t>(n >> 1);
    if (round > 0) mbar_wait(&b->k_empty[s], (round - 1) & 1);
    mbar_arrive_expect_tx(&b->k_full[s], Cfg::kKVBytes);
#pragma unroll
    for (int p = 0; p < Cfg::kPanels; ++p)
      tma_load_4d(sp.k(s) + p * Cfg::kKVPanelBytes, tk, &b->k_full[s], p * 64, n * Cfg::kBlockN,
                  kv_head, tile.batch);
    if (round > 0) mbar_wait(&b->v_empty[s], (round - 1) & 1);
    mbar_arrive_expect_tx(&b->v_full[s], Cfg::kKVBytes);
#pragma unroll
    for (int p = 0; p < Cfg::kPanels; ++p)
      tma_load_4d(sp.v(s) + p * Cfg::kKVPanelBytes, tv, &b->v_full[s], p * 64, n * Cfg::kBlockN,
                  kv_head, tile.batch);
  }
}

template <typename T, int D>
__device__ __forceinline__ void consumer(const FwdParams& prm, const SmemPlan<Config<T, D>>& sp,
                                         const Tile& tile, int n_blocks, int cw) {
  using Cfg = Config<T, D>;
  constexpr int BN = Cfg::kBlockN;
  Barriers* b = sp.bars();
  const int lane = threadIdx.x & 31;
  const int warp = (threadIdx.x >> 5) & 3;
  const int g = lane >> 2, t = lane & 3;
  const int m0 = tile.m_block * Cfg::kBlockM;
  const int row0 = m0 + cw * 64 + warp * 16 + g;  // this thread's rows: row0, row0 + 8
  const bool causal = prm.causal != 0;

  // Descriptor bases; per-k offsets are added as immediates to the 14-bit address field, which
  // cannot carry out of it because every tile lies below 228 KB (address >> 4 < 2^14).
  const uint64_t q_desc = make_desc(smem_u32(sp.q()) + cw * 64 * 128, 16, 1024);
  const uint64_t k_desc0 = make_desc(smem_u32(sp.k(0)), 16, 1024);
  const uint64_t v_desc0 = make_desc(smem_u32(sp.v(0)), Cfg::kKVPanelBytes, 1024);
  constexpr uint64_t kStageStep = Cfg::kKVBytes >> 4;

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  OnlineSoftmax<BN, D> sm(prm.scale_log2);

  mbar_wait(&b->q_full, 0);
  for (int n = 0; n < n_blocks; ++n) {
    const int s = n & 1;
    const uint32_t parity = static_cast<uint32_t>(n >> 1) & 1;
    const uint64_t k_desc = k_desc0 + s * kStageStep;
    const uint64_t v_desc = v_desc0 + s * kStageStep;

    float sc[BN / 2];
    mbar_wait(&b->k_full[s], parity);
    reg_fence(sc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      // k-slice kk: panel kk / 4, 32-byte step kk % 4 inside the 128-byte row.
      const uint64_t qa = q_desc + (((kk >> 2) * Cfg::kQPanelBytes + (kk & 3) * 32) >> 4);
      const uint64_t kb = k_desc + (((kk >> 2) * Cfg::kKVPanelBytes + (kk & 3) * 32) >> 4);
      Mma<T, BN>::ss(sc, qa, kb, kk > 0 ? 1 : 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence(sc);
    if (lane == 0) mbar_arrive(&b->k_empty[s]);

    if (block_needs_mask<Cfg::kBlockM, BN>(n, tile.m_block, prm.seqlen_kv, causal))
      apply_mask<BN>(sc, n * BN + 2 * t, row0, prm.seqlen_kv, causal);
    sm.step(sc, o);
    uint32_t pa[BN / 16][4];
    p_to_a<T, BN>(sc, pa);

    mbar_wait(&b->v_full[s], parity);
    reg_fence(pa);
    reg_fence(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      // 16 kv rows = two 1024-byte swizzle atoms.
      Mma<T, D>::rs(o, pa[kk], v_desc + ((kk * 16 * 128) >> 4), 1);
    }
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence(o);
    if (lane == 0) mbar_arrive(&b->v_empty[s]);
  }

  T* o_head = static_cast<T*>(prm.o) + tile.batch * prm.o_batch_stride +
              tile.head * prm.o_head_stride;
  float* lse_head =
      prm.lse + (static_cast<int64_t>(tile.batch) * prm.heads_q + tile.head) * prm.seqlen_q;
  store_output<T, BN, D>(o, sm, o_head, prm.o_row_stride, lse_head, row0, prm.seqlen_q, prm.scale,
                         t);
}

// One S = Q K^T product, committed as its own wgmma group (not waited for).
template <typename T, int D>
__device__ __forceinline__ void issue_qk(float (&sc)[Config<T, D>::kBlockN / 2], uint64_t q_desc,
                                         uint64_t k_desc) {
  using Cfg = Config<T, D>;
  reg_fence(sc);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint64_t qa = q_desc + (((kk >> 2) * Cfg::kQPanelBytes + (kk & 3) * 32) >> 4);
    const uint64_t kb = k_desc + (((kk >> 2) * Cfg::kKVPanelBytes + (kk & 3) * 32) >> 4);
    Mma<T, Cfg::kBlockN>::ss(sc, qa, kb, kk > 0 ? 1 : 0);
  }
  wgmma_commit();
}

// One O += P V product, committed as its own wgmma group (not waited for).
template <typename T, int D>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2],
                                         uint32_t (&pa)[Config<T, D>::kBlockN / 16][4],
                                         uint64_t v_desc) {
  using Cfg = Config<T, D>;
  reg_fence(pa);
  reg_fence(o);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Cfg::kBlockN / 16; ++kk)
    Mma<T, D>::rs(o, pa[kk], v_desc + ((kk * 16 * 128) >> 4), 1);
  wgmma_commit();
}

// Same contract as consumer(), with the P V product of block n-1 in flight while the softmax of
// block n runs: iteration n issues S(n), then PV(n-1), waits for S(n) only (wait_group 1), does
// the max/exp/sum of S(n) (which touch neither O nor P), then waits for PV(n-1), frees its slot,
// rescales O and packs P(n). Registers: S + O + P, as in the plain loop.
//
// PINGPONG (FA3's inter-warpgroup schedule): every issue section (S(0); S(n) + PV(n-1); the last
// PV) is bracketed by named barriers so that the two consumer WGs issue alternately: WG c waits
// on barrier 1 + c (bar.sync, 256 = its 128 threads + the other WG's 128 arriving), issues, and
// then arrives on the other WG's barrier. The tensor core runs the groups in issue order, so one
// WG's softmax runs while the other WG's GEMMs are executing. Start: WG 1 arrives once on
// barrier 1 so that WG 0 goes first. End: both WGs run the same number of sections (same tile),
// so WG 0 does one extra bar.sync on barrier 1 to consume WG 1's last arrive and leave both
// barriers balanced (needed once a persistent loop reuses them; harmless here).
template <typename T, int D, bool PINGPONG>
__device__ __forceinline__ void consumer_overlap(const FwdParams& prm,
                                                 const SmemPlan<Config<T, D>>& sp,
                                                 const Tile& tile, int n_blocks, int cw) {
  using Cfg = Config<T, D>;
  constexpr int BN = Cfg::kBlockN;
  Barriers* b = sp.bars();
  const int lane = threadIdx.x & 31;
  const int warp = (threadIdx.x >> 5) & 3;
  const int g = lane >> 2, t = lane & 3;
  const int m0 = tile.m_block * Cfg::kBlockM;
  const int row0 = m0 + cw * 64 + warp * 16 + g;
  const bool causal = prm.causal != 0;

  const uint64_t q_desc = make_desc(smem_u32(sp.q()) + cw * 64 * 128, 16, 1024);
  const uint64_t k_desc0 = make_desc(smem_u32(sp.k(0)), 16, 1024);
  const uint64_t v_desc0 = make_desc(smem_u32(sp.v(0)), Cfg::kKVPanelBytes, 1024);
  constexpr uint64_t kStageStep = Cfg::kKVBytes >> 4;

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  OnlineSoftmax<BN, D> sm(prm.scale_log2);
  float sc[BN / 2];
  uint32_t pa[BN / 16][4];
  float corr[2];

  if (PINGPONG && cw == 1) named_bar_arrive<kBarIssueWG0, kPingPongThreads>();

  mbar_wait(&b->q_full, 0);
  if (n_blocks > 0) {
    mbar_wait(&b->k_full[0], 0);
    if (PINGPONG) pingpong_wait_turn(cw);
    issue_qk<T, D>(sc, q_desc, k_desc0);
    if (PINGPONG) pingpong_pass_turn(cw);
    wgmma_wait<0>();
    reg_fence(sc);
    if (lane == 0) mbar_arrive(&b->k_empty[0]);
    if (block_needs_mask<Cfg::kBlockM, BN>(0, tile.m_block, prm.seqlen_kv, causal))
      apply_mask<BN>(sc, 2 * t, row0, prm.seqlen_kv, causal);
    sm.update(sc, corr);  // O is still zero: nothing to rescale
    p_to_a<T, BN>(sc, pa);

    for (int n = 1; n < n_blocks; ++n) {
      const int s = n & 1, ps = (n - 1) & 1;
      mbar_wait(&b->k_full[s], static_cast<uint32_t>(n >> 1) & 1);
      mbar_wait(&b->v_full[ps], static_cast<uint32_t>((n - 1) >> 1) & 1);
      if (PINGPONG) pingpong_wait_turn(cw);
      issue_qk<T, D>(sc, q_desc, k_desc0 + s * kStageStep);
      issue_pv<T, D>(o, pa, v_desc0 + ps * kStageStep);
      if (PINGPONG) pingpong_pass_turn(cw);
      wgmma_wait<1>();
      reg_fence(sc);
      if (lane == 0) mbar_arrive(&b->k_empty[s]);
      if (block_needs_mask<Cfg::kBlockM, BN>(n, tile.m_block, prm.seqlen_kv, causal))
        apply_mask<BN>(sc, n * BN + 2 * t, row0, prm.seqlen_kv, causal);
      sm.update(sc, corr);
      wgmma_wait<0>();
      reg_fence(o);
      // Ties the packing of P(n) below the wait: the previous P fragments are still read by
      // PV(n-1) until then, and the packed values may land in the same registers.
      reg_fence(sc);
      if (lane == 0) mbar_arrive(&b->v_empty[ps]);
      OnlineSoftmax<BN, D>::rescale(o, corr);
      p_to_a<T, BN>(sc, pa);
    }

    const int ls = (n_blocks - 1) & 1;
    mbar_wait(&b->v_full[ls], static_cast<uint32_t>((n_blocks - 1) >> 1) & 1);
    if (PINGPONG) pingpong_wait_turn(cw);
    issue_pv<T, D>(o, pa, v_desc0 + ls * kStageStep);
    if (PINGPONG) pingpong_pass_turn(cw);
    wgmma_wait<0>();
    reg_fence(o);
    if (lane == 0) mbar_arrive(&b->v_empty[ls]);
  }
  if (PINGPONG && cw == 0) named_bar_sync<kBarIssueWG0, kPingPongThreads>();

  T* o_head = static_cast<T*>(prm.o) + tile.batch * prm.o_batch_stride +
              tile.head * prm.o_head_stride;
  float* lse_head =
      prm.lse + (static_cast<int64_t>(tile.batch) * prm.heads_q + tile.head) * prm.seqlen_q;
  store_output<T, BN, D>(o, sm, o_head, prm.o_row_stride, lse_head, row0, prm.seqlen_q, prm.scale,
                         t);
}

// Consumer variants: 0 = v0 (plain loop), 1 = ovl (intra-WG overlap), 2 = pp (ovl + ping-pong).
enum : int { kVarV0 = 0, kVarOvl = 1, kVarPingPong = 2 };

template <typename T, int D, int VARIANT>
__global__ void __launch_bounds__(Config<T, D>::kThreads, 1)
    fwd_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
               const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ FwdParams prm) {
  using Cfg = Config<T, D>;
  extern __shared__ uint8_t smem_raw[];
  const SmemPlan<Cfg> sp(smem_raw);
  const Tile tile = Scheduler<Cfg::kBlockM>::tile(prm.causal != 0);
  const int n_blocks = kv_blocks<Cfg::kBlockM, Cfg::kBlockN>(tile.m_block, prm.seqlen_kv,
                                                             prm.causal != 0);
  const int wg = threadIdx.x >> 7;

  if (threadIdx.x == 0) {
    tma_prefetch_desc(&tm_q);
    tma_prefetch_desc(&tm_k);
    tma_prefetch_desc(&tm_v);
    init_barriers<Cfg>(sp.bars());
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<Cfg::kProducerRegs>();
    if (threadIdx.x == 0) {
      const int kv_head = tile.head / (prm.heads_q / prm.heads_kv);
      producer<T, D>(&tm_q, &tm_k, &tm_v, sp, tile, kv_head, n_blocks);
    }
  } else {
    setmaxnreg_inc<Cfg::kConsumerRegs>();
    if constexpr (VARIANT == kVarOvl)
      consumer_overlap<T, D, false>(prm, sp, tile, n_blocks, wg - 1);
    else if constexpr (VARIANT == kVarPingPong)
      consumer_overlap<T, D, true>(prm, sp, tile, n_blocks, wg - 1);
    else
      consumer<T, D>(prm, sp, tile, n_blocks, wg - 1);
  }
}

}  // namespace fa3
}  // namespace cubridge
