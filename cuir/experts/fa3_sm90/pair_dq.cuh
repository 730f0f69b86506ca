// CUBRIDGE_BWD_PAIR_DQ (kernel_bwd.cu, BwdTiling::kPair): the CTAs of K tiles 2i and 2i + 1 of a
// head run as a cluster, and the dQ of each query block that both visit reaches dQ's
// accumulator once for the pair instead of once per CTA: half the reductions into L2, which
// were 12.6% of a full 8k backward (H200, CUBRIDGE_BWD_PROBE=2, bench/NOTES.md session 27).
// A warpgroup's dQ panel is its half of the head dim. Warpgroup w's panel is summed in the CTA
// of rank w: there warpgroup w waits for the partner's warpgroup w's panel in its shared memory,
// adds its own and reduces the sum into the accumulator; in the other CTA warpgroup w stores
// its panel into the partner's buffer (distributed shared memory) and goes on. Two buffers a
// CTA, exchange k using buffer k & 1; a buffer's full barrier (in the receiving CTA) counts the
// partner's 128 sending threads, its empty barrier (in the sending CTA) the receiving 128 once
// they read it. Which blocks both visit: before the cluster's first barrier each CTA writes its
// walk as a bitmap, after it each intersects its own with the partner's; both then count the
// same exchanges in the same order (the walks ascend). Every thread of the pair passes the
// cluster's barrier once more at the end, so that no arrival or store reaches a CTA that left.
// CUBRIDGE_BWD_SUM_DQ does the same between the two warpgroups of one CTA at head dim 64
// (PairDq::sum_halves). Part of kernel_bwd.cu, included after attend_bwd.cuh (bwd_smem), which
// calls these.
#pragma once

// One exchange of a warpgroup's dQ panel (32 elements a thread, at byte `offset` of a panel in
// the accumulator's fragment order) with the warpgroup of the same columns in the partner CTA
// (kCluster) or in this CTA: exchange k uses buffer k & 1 of the receiving side. The receiver
// waits for the sender's panel (full), adds its own (times `scale`) and reduces the sum into
// `span`, then frees the buffer (empty); the sender waits for the buffer's previous use to be
// read, stores its panel and arrives on full. `peer`: the partner CTA's rank.
template <int D, bool kCluster>
__device__ __forceinline__ void swap_dq_panel(uint32_t s_base, int k, bool receiver,
                                              uint32_t peer, const float (&dq)[32], float scale,
                                              uint32_t offset, float* span) {
  using namespace cubridge::fa3;
  using Tiling = BwdTiling<D>;
  const uint32_t buf = k & 1, use = static_cast<uint32_t>(k) >> 1;
  const uint32_t at = s_base + Tiling::kDqStage + buf * Tiling::kDqPanelBytes + offset;
  const uint32_t full = s_base + Tiling::kPairBars + 8 * buf, empty = full + 16;
  const auto wait = [](uint32_t bar, uint32_t parity) {
    if constexpr (kCluster) mbar_wait_cluster(bar, parity);
    else mbar_wait(bar, parity);
  };
  const auto arrive = [peer](uint32_t bar) {
    if constexpr (kCluster) mbar_arrive_cluster(cluster_map(bar, peer));
    else mbar_arrive(bar);
  };
  if (receiver) {
    wait(full, use & 1);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float a, b, c, d;
      ld_shared_v4(at + j * 512, a, b, c, d);
      red_add_v4(span + 128 * j, dq[4 * j] * scale + a, dq[4 * j + 1] * scale + b,
                 dq[4 * j + 2] * scale + c, dq[4 * j + 3] * scale + d);
    }
    arrive(empty);
  } else {
    if (use > 0) wait(empty, (use - 1) & 1);
    const uint32_t there = kCluster ? cluster_map(at, peer) : at;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float a = dq[4 * j] * scale, b = dq[4 * j + 1] * scale, c = dq[4 * j + 2] * scale,
                  d = dq[4 * j + 3] * scale;
      if constexpr (kCluster) st_cluster_v4(there + j * 512, a, b, c, d);
      else st_shared_v4(there + j * 512, a, b, c, d);
    }
    arrive(full);
  }
}

template <int D>
struct PairDq {
  using Tiling = BwdTiling<D>;
  static constexpr int kWords = Tiling::kPairMaxBlocks / 32;
  // The layout (BwdTiling::kPairBits, kPairBars): this CTA's walk, then the blocks both visit;
  // full[2], then empty[2].
  static constexpr int kBoth = Tiling::kPairBits + 4 * kWords;

  // Whether both CTAs visit query block m_block (s_base: the CTA's aligned shared memory).
  static __device__ __forceinline__ bool paired(uint32_t s_base, int m_block) {
    return m_block < Tiling::kPairMaxBlocks &&
           ((cubridge::fa3::ld_shared_u32(s_base + kBoth + 4 * (m_block >> 5)) >>
             (m_block & 31)) & 1) != 0;
  }

  // CUBRIDGE_BWD_SUM_DQ (BwdTiling::kSumHalves): at head dim 64 on the 128-key tile each
  // warpgroup's dQ covers the whole head dim over its own 64 keys, and both reduced the same
  // panel into the accumulator. Summed in shared memory first: in block k warpgroup k & 1
  // receives the other's panel, adds its own and reduces the sum, so each does half the
  // reductions.
  static __device__ __forceinline__ void sum_halves(uint32_t s_base, int k, int wg,
                                                    const float (&dq)[32], float scale,
                                                    uint32_t offset, float* span) {
    swap_dq_panel<D, false>(s_base, k, wg == (k & 1), 0, dq, scale, offset, span);
  }

  // Exchange k (the k-th paired block, counted alike in both CTAs): warpgroup `wg` receives
  // where it is this CTA's rank.
  static __device__ __forceinline__ void exchange(uint32_t s_base, int k, int wg,
                                                  const float (&dq)[32], float scale,
                                                  uint32_t offset, float* span) {
    const uint32_t rank = cubridge::fa3::cluster_rank();
    swap_dq_panel<D, true>(s_base, k, wg == static_cast<int>(rank), rank ^ 1, dq, scale,
                           offset, span);
  }
};

// The exchanges' full and empty barriers (thread 0; not in a deterministic call, whose staged
// panels take their place).
template <int D>
__device__ __forceinline__ void init_dq_swap_bars() {
  uint64_t* const bars =
      reinterpret_cast<uint64_t*>(bwd_smem<D>().base + BwdTiling<D>::kPairBars);
  for (int i = 0; i < 4; ++i) cubridge::fa3::mbar_init(bars + i, 128);
}

// The pair's setup, by every thread of the CTA (its producer too) before the walk: the exchange's
// barriers and this CTA's walk (thread 0; no block where the tile is past the keys, a CTA of the
// grid's round-up, or where the walk has more than kPairMaxBlocks blocks: then neither CTA pairs
// any), the cluster's barrier, the blocks both visit (warp 0), the CTA's barrier.
template <int D>
__device__ __forceinline__ void pair_dq_begin(const BwdTile& tile, bool live) {
  using namespace cubridge::fa3;
  using Tiling = BwdTiling<D>;
  constexpr int kWords = PairDq<D>::kWords;
  unsigned char* const base = bwd_smem<D>().base;
  uint32_t* const mine = reinterpret_cast<uint32_t*>(base + Tiling::kPairBits);
  uint32_t* const both = mine + kWords;
  const int words = cuir_cdiv(cuir_cdiv(tile.seqlen_q, BLOCK_M), 32);
  const bool walks = live && words <= kWords;
  if (threadIdx.x == 0) {
    init_dq_swap_bars<D>();
    for (int w = 0; w < words && w < kWords; ++w) mine[w] = 0;
    if (walks) {
      tile.for_each_q_block([&](int m_block, int, bool) {
        mine[m_block >> 5] |= 1u << (m_block & 31);
      });
    }
    mbar_init_fence();
  }
  cluster_arrive();
  cluster_wait();
  if (threadIdx.x < 32) {
    const uint32_t theirs = cluster_map(smem_u32(mine), cluster_rank() ^ 1);
    for (int w = threadIdx.x; w < words && w < kWords; w += 32) {
      both[w] = walks ? mine[w] & ld_cluster_u32(theirs + 4 * w) : 0u;
    }
  }
  __syncthreads();
}

// The pair's end, by every thread of the CTA: the partner's exchanges with this CTA are over.
__device__ __forceinline__ void pair_dq_end() {
  cubridge::fa3::cluster_arrive();
  cubridge::fa3::cluster_wait();
}
