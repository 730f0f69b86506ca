// One CTA's backward work tile on wgmma (kernel_bwd.cu): its K/V tile into shared memory, then
// per visited query block, in each of the two warpgroups (64 keys each, their own or, on a
// 64-key tile, the same with half of dK's and dV's columns each): S^T and dP^T issued back to
// back; the variant's score hooks on S^T and P^T from the forward's LSE; dV += P^T dO issued,
// retiring under dS^T = P^T (dP^T - D) and the variant's gradient hooks; dK += dS^T Q issued,
// retiring under dS^T's store to shared memory; then, once the tile's dS^T is there, dQ = dS K
// for this warpgroup's half of the head dim (at head dim 64: over its own keys), 64 columns at a
// time, added into dQ's accumulator (in the accumulator's fragment order). With a producer
// warpgroup (kProducer) the consumers only compute: the producer fills the Q/dO ring and the
// warpgroups wait on its mbarriers.
// Then dK and dV. Part of kernel_bwd.cu (its tile parameters and variant contexts), included
// after them.
#pragma once

// The producer's mbarriers (kProducer): K and V landed (count: the 128 producer threads), a
// Q/dO stage landed with its rows' LSE and D (the same), a stage's last reads done (count: the 8
// consumer warps, one elected lane each). Stage s's k-th use is block 2k + s of the walk, whose
// full phase has parity k & 1 and whose refill waits on empty's phase of use k - 1.
// Persistent (kPersistent): kv_empty, K and V read for the last time by the tile's consumers
// (count: the 8 consumer warps), and the tiles' slots, by the tile's parity (which tile, or
// past the last).
struct BwdBars {
  uint64_t kv_full, full[STAGES], empty[STAGES], kv_empty;
  int tile[2];
};

__device__ __forceinline__ void init_bwd_bars(BwdBars* b) {
  using namespace cubridge::fa3;
  mbar_init(&b->kv_full, 128);
  for (int s = 0; s < STAGES; ++s) {
    mbar_init(&b->full[s], 128);
    mbar_init(&b->empty[s], kConsumerThreads / 32);
  }
  mbar_init(&b->kv_empty, kConsumerThreads / 32);
  mbar_init_fence();
}

// The tile's shared memory (BwdTiling's layout), from the 16-byte-aligned dynamic allocation.
template <int D>
struct BwdSmem {
  unsigned char* base;  // 1024-byte aligned
  uint32_t s_base;
  float* lse;    // per stage, the block's LSE (log2 units) per query row
  float* delta;  // per stage, D per query row
  BwdBars* bars;
  __device__ __forceinline__ uint32_t stage(int s) const {
    return s_base + BwdTiling<D>::kStage0 + s * BwdTiling<D>::kStageBytes;  // Q, then dO
  }
  // Stage s's tile of the streamed tensor (BwdTiling::kStream).
  __device__ __forceinline__ uint8_t* stream(int s) const {
    return base + BwdTiling<D>::kStreamAt + s * BwdTiling<D>::kStreamTileBytes;
  }
};
template <int D>
__device__ __forceinline__ BwdSmem<D> bwd_smem() {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw_addr = cubridge::fa3::smem_u32(smem_raw);
  unsigned char* const smem = smem_raw + (((raw_addr + 1023u) & ~1023u) - raw_addr);
  float* const lse = reinterpret_cast<float*>(smem + BwdTiling<D>::kRows);
  return {smem, cubridge::fa3::smem_u32(smem), lse, lse + STAGES * BLOCK_M,
          reinterpret_cast<BwdBars*>(smem + BwdTiling<D>::kBars)};
}

// load Q = q[b, h, q_lo:q_hi], load DO = do[b, h, q_lo:q_hi] and the streamed tensor's tile of the
// block (BwdTiling::kStream) into a stage by NTHREADS threads (committed), and the rows' LSE and
// D by threads 0 .. BLOCK_M - 1. A row past q_hi, or one that kept nothing (LSE = -inf), gets
// LSE = +inf: its P is exp(-inf) = 0. `stream_vector`: cp.async takes the tensor's rows
// (otherwise the threads store the tile, complete on return).
template <int NTHREADS, typename T, int D>
__device__ __forceinline__ void load_q_block(const BwdTile& tile, const BwdSmem<D>& sm, int m_block,
                                             int stage, int tid,
                                             const CuirStreamSource<StreamElem>& stream_src,
                                             bool stream_vector) {
  using QTile = typename BwdTiling<D>::QTile;
  const cubridge_attn_bwd_params& p = tile.bp;
  const cubridge_attn_fwd_params& f = p.fwd;
  const int q_lo = m_block * BLOCK_M, rows = min(BLOCK_M, tile.seqlen_q - q_lo);
  const T* q = static_cast<const T*>(f.q) + tile.b * f.q_batch_stride + tile.h * f.q_head_stride +
               static_cast<int64_t>(q_lo) * f.q_row_stride;
  const T* d_o = static_cast<const T*>(p.d_o) + tile.b * p.do_batch_stride +
                 tile.h * p.do_head_stride + static_cast<int64_t>(q_lo) * p.do_row_stride;
  const uint32_t q_tile = sm.stage(stage);
  if constexpr (!(kProbe & 1)) {
    QTile::template load_async<NTHREADS>(q_tile, q, f.q_row_stride, rows, tid);
    QTile::template load_async<NTHREADS>(q_tile + QTile::kBytes, d_o, p.do_row_stride, rows, tid);
  }
  BwdTiling<D>::Stream::template load<NTHREADS>(sm.stream(stage), stream_src, q_lo, tile.kv_lo,
                                                stream_vector, tid);
  cp_async_commit();
  const int64_t row0 = (static_cast<int64_t>(tile.b) * f.heads_q + tile.h) * tile.seqlen_q;
  bwd_load_rows<BLOCK_M>(tile, reinterpret_cast<const float*>(tile.scratch + tile.ws.delta) + row0,
                         q_lo, rows, sm.lse + stage * BLOCK_M, sm.delta + stage * BLOCK_M, tid);
}

// The producer warpgroup's part (kProducer): K and V, then each visited query block's Q, dO and
// rows into the stage the consumers released, each completing its mbarrier once this thread's
// copies landed (made visible to wgmma's async proxy first). `ring`: the blocks the ring has
// carried before this tile (0 but in a persistent CTA), advanced by this tile's.
template <typename T, int D>
__device__ __forceinline__ void produce_bwd_tile(const BwdTile& tile, int tid, int& ring) {
  using namespace cubridge::fa3;
  using KvTile = typename BwdTiling<D>::KvTile;
  const BwdSmem<D> sm = bwd_smem<D>();
  const cubridge_attn_fwd_params& f = tile.p;
  const int kv_rows = tile.kv_hi - tile.kv_lo;
  const CuirStreamSource<StreamElem> stream_src = tile.stream_source();
  const bool stream_vector = BwdTiling<D>::Stream::vector_rows(stream_src);
  KvTile::template load_async<128>(
      sm.s_base + BwdTiling<D>::kK,
      static_cast<const T*>(f.k) + tile.b * f.k_batch_stride + tile.kv_h * f.k_head_stride +
          static_cast<int64_t>(tile.kv_lo) * f.k_row_stride,
      f.k_row_stride, kv_rows, tid);
  KvTile::template load_async<128>(
      sm.s_base + BwdTiling<D>::kV,
      static_cast<const T*>(f.v) + tile.b * f.v_batch_stride + tile.kv_h * f.v_head_stride +
          static_cast<int64_t>(tile.kv_lo) * f.v_row_stride,
      f.v_row_stride, kv_rows, tid);
  cp_async_commit();
  // The copy groups in flight, oldest first: K and V's (if kv_pending), then `pending` blocks'
  // stages from ring index `first`; each published (landed, fenced for wgmma, its barrier
  // arrived on) oldest first.
  bool kv_pending = true;
  int first = ring, pending = 0;
  const auto publish = [&] {
    static_assert(STAGES == 2, "at most three groups in flight (cp_async_wait<2>)");
    for (int newer = kv_pending + pending - 1; newer >= 0; --newer) {
      if (newer >= 2) cp_async_wait<2>();
      else if (newer == 1) cp_async_wait<1>();
      else cp_async_wait<0>();
      fence_proxy_async();
      if (kv_pending) {
        mbar_arrive(&sm.bars->kv_full);
        kv_pending = false;
      } else {
        mbar_arrive(&sm.bars->full[first++ & 1]);
        --pending;
      }
    }
  };
  publish();
  int i = ring;
  tile.for_each_q_block([&](int m_block, int, bool) {
    const int stage = i & 1, use = i >> 1;
    if (use > 0) {
      publish();
      mbar_wait(&sm.bars->empty[stage], (use - 1) & 1);
    }
    load_q_block<128, T, D>(tile, sm, m_block, stage, tid, stream_src, stream_vector);
    ++pending;
    publish();
    ++i;
  });
  publish();
  ring = i;
}

// The consumer warpgroups' part (or, without a producer, the whole CTA's); tid counts the
// consumers' threads from 0; `ring` as produce_bwd_tile's (a persistent CTA's loop waited for
// this tile's K and V already).
template <typename T, int D>
__device__ __forceinline__ void attend_bwd_tile(const BwdTile& tile, int tid, int& ring) {
  using namespace cubridge::fa3;
  using Tiling = BwdTiling<D>;
  using KvTile = typename Tiling::KvTile;
  using QTile = typename Tiling::QTile;
  using Block = BwdBlock<D>;
  static_assert(Tiling::kServed, "the tile does not serve this head dim (bwd_smem_bytes is 0)");
  // The query columns of S^T this warpgroup computes: the block's, or its half of them where the
  // warpgroups split the block (kSplitQueries), whose P^T and dS^T then meet in shared memory.
  constexpr bool kSplitQ = Tiling::kSplitQueries;
  constexpr int QN = kSplitQ ? BLOCK_M / 2 : BLOCK_M;
  constexpr int NT = QN / 8;  // 8-column query n-tiles of S^T
  constexpr int kPartCols = Tiling::kPartCols;  // this warpgroup's columns of dK and dV
  // dQ one block late (BwdTiling::kLagDq), except where the variant's gradient hooks keep the
  // raw scores: their 32 registers beside dQ's spill (bench/NOTES.md, session 18).
  constexpr bool kSplitKeys = Tiling::kSplitKeys;
  constexpr bool kLagDq = Tiling::kLagDq && !Block::kKeepsRawScores;
  constexpr int DQ_N = Tiling::kDqCols;  // dQ's head-dim columns per warpgroup
  constexpr int DQ_K = kSplitKeys ? 64 : BLOCK_N;  // keys each warpgroup's dQ product sums
  static_assert(DQ_N % 64 == 0, "dQ in 64-column panels of K");
  const cubridge_attn_bwd_params& p = tile.bp;
  const cubridge_attn_fwd_params& f = p.fwd;
  const int kv_lo = tile.kv_lo, kv_hi = tile.kv_hi, seqlen_q = tile.seqlen_q;
  const BwdSmem<D> sm = bwd_smem<D>();
  const CuirStreamSource<StreamElem> stream_src = tile.stream_source();
  [[maybe_unused]] const bool stream_vector = Tiling::Stream::vector_rows(stream_src);
  const uint32_t s_base = sm.s_base;
  const uint32_t sK = s_base + Tiling::kK, sV = s_base + Tiling::kV;
  const uint32_t sdS = s_base + Tiling::kDs;
  [[maybe_unused]] const uint32_t sP = s_base + Tiling::kPs;
  float* const s_lse = sm.lse;
  float* const s_delta = sm.delta;
  // The consumers' barriers: the dS^T of both warpgroups (id 1), of one (2 + wg), a warpgroup's
  // staged dQ panel under kDqBulk / kDetBulk (4 + wg); without a producer the first is the CTA's.
  const auto consumers_sync = [] {
    if constexpr (kProducer) named_barrier_sync(1, kConsumerThreads);
    else __syncthreads();
  };

  const int lane = tid & 31, wg = tid >> 7, warp = (tid >> 5) & 3;
  const int g = lane >> 2, t = lane & 3;
  // The warpgroup's 64 keys (key group) and its part of dK's and dV's columns; where both
  // warpgroups hold the same keys, part 0 alone stores dS^T and adds into the buffers' gradients.
  const int key_group = kKeyGroups == 1 ? 0 : wg, part = kDParts == 1 ? 0 : wg;
  // Whether this warpgroup's S^T columns are its own (the other's are other queries).
  const bool first_part = part == 0 || kSplitQ;
  const int q_part = kSplitQ ? wg * QN : 0;  // this warpgroup's first query column of the block
  static_assert(!(kSplitQ && kLagDq), "the split block's dV and dK wait for its own dS^T");
  const int key0 = key_group * 64 + warp * 16 + g;  // this thread's first key row in the tile
  const BwdWorkspace& ws = tile.ws;
  const bool det = p.deterministic != 0;
  char* const dq_acc = tile.scratch + ws.dq;

  // load K = k[b, kv_h, kv_lo:kv_hi], load V = v[b, kv_h, kv_lo:kv_hi] (by the producer, if any)
  if constexpr (kProducer) {
    if constexpr (!kPersistent) {
      mbar_wait(&sm.bars->kv_full, 0);
      bwd_trace_stamp(tid, kTraceKv);
    }
  } else {
    const T* k_ptr = static_cast<const T*>(f.k) + tile.b * f.k_batch_stride +
                     tile.kv_h * f.k_head_stride + static_cast<int64_t>(kv_lo) * f.k_row_stride;
    const T* v_ptr = static_cast<const T*>(f.v) + tile.b * f.v_batch_stride +
                     tile.kv_h * f.v_head_stride + static_cast<int64_t>(kv_lo) * f.v_row_stride;
    KvTile::template load_async<kConsumerThreads>(sK, k_ptr, f.k_row_stride, kv_hi - kv_lo, tid);
    KvTile::template load_async<kConsumerThreads>(sV, v_ptr, f.v_row_stride, kv_hi - kv_lo, tid);
    cp_async_commit();
  }

  // The operands' descriptors: this warpgroup's 64 rows of K and V as A (K-major), dS^T as A
  // and this warpgroup's head-dim panels of K as B of dQ (both MN-major), its part's panels of
  // dO and Q as B of dV and dK.
  const uint64_t k_a = make_desc(sK + key_group * 64 * 128, 16, 1024);
  const uint64_t v_a = make_desc(sV + key_group * 64 * 128, 16, 1024);
  const uint64_t ds_a = make_desc(sdS, Tiling::kDsBytes, 1024);
  const uint64_t k_b_dq =
      kSplitKeys ? make_desc(sK + wg * 64 * 128, KvTile::kPanelBytes, 1024)
                 : make_desc(sK + wg * (DQ_N / 64) * KvTile::kPanelBytes, KvTile::kPanelBytes,
                             1024);
  const uint64_t ds_a_dq = kSplitKeys ? ds_a + ((wg * 64 * 128) >> 4) : ds_a;
  const int dq_col0 = kSplitKeys ? 0 : wg * DQ_N;
  // dQ's accumulator at query block 0's first panel of this warpgroup's columns, and this
  // lane's first element there.
  static_assert(kDqTileRows == BLOCK_M, "dQ's accumulator in fragment order, a block a tile");
  const long long dq_head = static_cast<long long>(tile.b) * f.heads_q + tile.h;
  const long long dq_tiled0 = bwd_dq_tiled_at(f, dq_head, 0, dq_col0 / 64, warp, lane, 0);
  // Under kDqBulk / kDetBulk: who issues the adds (warp 0's lane 0, whose first element is its
  // panel's: dq_tiled0 is the panel's start there), and this lane's element in a staged panel
  // (a function of warp and lane, kept out of the loop's live registers).
  const bool wg_leader = (tid & 127) == 0;
  const auto in_panel = [&] {
    return static_cast<uint32_t>(bwd_dq_tiled_at(f, 0, 0, 0, warp, lane, 0));
  };
  [[maybe_unused]] int dq_adds = 0;  // under kDqBulk, this warpgroup's panels added so far
  [[maybe_unused]] int pair_swaps = 0;  // under kPair / kSumHalves, the exchanges so far
  const uint32_t part_panels = part * (kPartCols / 64) * QTile::kPanelBytes;

  // grad.init
  float dk[kPartCols / 2], dv[kPartCols / 2];
#pragma unroll
  for (int i = 0; i < kPartCols / 2; ++i) dk[i] = dv[i] = 0.f;
  const float scale = tile.softmax_scale;

  // dQ[:, this warpgroup's columns, panel] = dS K from dS^T buffer `buffer`, issued and
  // committed; then its scaled add into the accumulator shared by the KV tiles.
  auto issue_dq = [&](float(&dq)[32], int buffer, int panel) {
    reg_fence(dq);
    wgmma_fence();
    mma_mn<T, 64, DQ_K>(dq, ds_a_dq + ((buffer * Tiling::kDsBytes) >> 4),
                        k_b_dq + ((panel * KvTile::kPanelBytes) >> 4));
    wgmma_commit();
  };
  // In dQ's accumulator's fragment order (common/backward_kernel.cuh, kDqTileRows), group j's
  // four elements are this lane's in one 512-byte span of the warp's: one vector reduction each.
  // A padded block's rows past the end add dS = 0 there and are never read.
  auto add_dq = [&](const float(&dq)[32], int q_lo, int panel) {
    const long long block_at = (q_lo / BLOCK_M) * (D / 64 * kDqPanelElems) + panel * kDqPanelElems;
    if constexpr (Tiling::kDqBulk) {
      if (!det) {
        // The panel into buffer dq_adds & 1 (its last add, two panels ago, was read before the
        // barrier of the one after it), then one thread adds it once the warpgroup stored it and
        // its previous add has read the other buffer.
        const uint32_t buffer = s_base + Tiling::kDqStage +
                                ((dq_adds++ & 1) * 2 + wg) * Tiling::kDqPanelBytes;
        const uint32_t mine = buffer + in_panel() * 4;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          st_shared_v4(mine + j * 512, dq[4 * j] * scale, dq[4 * j + 1] * scale,
                       dq[4 * j + 2] * scale, dq[4 * j + 3] * scale);
        }
        fence_proxy_async();
        if (wg_leader) bulk_wait_read<0>();
        named_barrier_sync(4 + wg, 128);
        if (wg_leader) {
          bulk_reduce_add_f32(reinterpret_cast<float*>(dq_acc) + dq_tiled0 + block_at, buffer,
                              Tiling::kDqPanelBytes);
        }
        return;
      }
    }
    if constexpr (Tiling::kDetBulk) {
      if (det) {
        // This warpgroup's 32-KB buffer, once the previous panel's add has read it (its leader
        // waits, the barrier tells the rest), then the panel in fixed point in the
        // accumulator's order (a lane's four elements 32 contiguous bytes), then one bulk add.
        const uint32_t buffer = s_base + Tiling::kDqStage + wg * 2 * Tiling::kDqPanelBytes;
        const uint32_t mine = buffer + in_panel() * 8;
        if (wg_leader) bulk_wait_read<0>();
        named_barrier_sync(4 + wg, 128);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          st_shared_v2_u64(mine + j * 1024, acc_fixed(dq[4 * j] * scale),
                           acc_fixed(dq[4 * j + 1] * scale));
          st_shared_v2_u64(mine + j * 1024 + 16, acc_fixed(dq[4 * j + 2] * scale),
                           acc_fixed(dq[4 * j + 3] * scale));
        }
        fence_proxy_async();
        named_barrier_sync(4 + wg, 128);
        if (wg_leader) {
          bulk_reduce_add_u64(
              reinterpret_cast<unsigned long long*>(dq_acc) + dq_tiled0 + block_at, buffer,
              2 * Tiling::kDqPanelBytes);
        }
        return;
      }
    }
    const long long at = dq_tiled0 + block_at;
    if (det) {
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        acc_add(dq_acc, at + 128 * (i >> 2) + (i & 3), dq[i] * scale, true);
      }
    } else if constexpr ((kProbe & 2) == 0) {  // (the probe adds nothing)
      float* const span = reinterpret_cast<float*>(dq_acc) + at;
      if constexpr (Tiling::kSumHalves) {
        // The two key halves' panels summed before one reduction (pair_dq.cuh).
        PairDq<D>::sum_halves(s_base, pair_swaps++, wg, dq, scale, in_panel() * 4, span);
      } else {
        if constexpr (Tiling::kPair) {
          // A block the CTA pair both visit: its dQ reduced once for the two (pair_dq.cuh).
          if (PairDq<D>::paired(s_base, q_lo / BLOCK_M)) {
            PairDq<D>::exchange(s_base, pair_swaps++, wg, dq, scale, in_panel() * 4, span);
            return;
          }
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          red_add_v4(span + 128 * j, dq[4 * j] * scale, dq[4 * j + 1] * scale,
                     dq[4 * j + 2] * scale, dq[4 * j + 3] * scale);
        }
      }
    }
  };
  // Under kLagDq, the first query row of the block whose dQ is still to do (-1: none). Its dS^T
  // is in the buffer of its Q/dO stage (the other one than this block's).
  int prev_q_lo = -1;
  int stage = ring & 1, block_index = ring;
  [[maybe_unused]] bool first_block = true;

  tile.for_each_q_block([&](int m_block, int m_next, bool block_full) {
    const int q_lo = m_block * BLOCK_M, q_hi = min(q_lo + BLOCK_M, seqlen_q);
    const Block block{tile, m_block, q_lo, q_hi, block_full, [&] {
                        if constexpr (Tiling::kStream) {
                          return typename Tiling::StreamView{sm.stream(stage), {}, q_lo, kv_lo};
                        } else {
                          return typename Tiling::StreamView{tile.p, tile.stream_c2,
                                                             tile.stream_c3};
                        }
                      }()};
    if constexpr (kProducer) {
      // This stage's copies landed (the producer fenced them for wgmma); under kLagDq the
      // previous block's dS^T of both warpgroups is there too.
      mbar_wait(&sm.bars->full[stage], (block_index >> 1) & 1);
      if (block_index == ring) bwd_trace_stamp(tid, kTraceFirst);
      if constexpr (kLagDq) consumers_sync();
    } else {
      if (first_block) {  // the prologue: no earlier block prefetched this one
        load_q_block<kConsumerThreads, T, D>(tile, sm, m_block, stage, tid, stream_src,
                                             stream_vector);
        first_block = false;
      }
      cp_async_wait<0>();
      fence_proxy_async();  // the copies, visible to wgmma's reads
      __syncthreads();      // this stage landed (and K, V); every warp is done with the other stage
      if (block_index == ring) {
        bwd_trace_stamp(tid, kTraceKv);
        bwd_trace_stamp(tid, kTraceFirst);
      }
      if (m_next != KvUnion<1>::kEnd) {
        load_q_block<kConsumerThreads, T, D>(tile, sm, m_next, stage ^ 1, tid, stream_src,
                                             stream_vector);
      }
    }
    const int block_stage = stage;
    const uint32_t sQ = sm.stage(stage);
    const uint32_t sdO = sQ + QTile::kBytes;
    const float* const lse_rows = s_lse + stage * BLOCK_M;
    const float* const delta_rows = s_delta + stage * BLOCK_M;
    const int ds_buffer = Tiling::kDsBuffers == 2 ? stage : 0;  // this block's dS^T
    stage ^= 1;
    ++block_index;

    // Under kLagDq the previous block's dQ first (its group empty at the first block), added
    // while S^T = K Q^T runs (dP^T after it: the three accumulators at once would not fit);
    // otherwise S^T and dP^T = V dO^T back to back. Wait for S^T.
    float s[QN / 2], dp[QN / 2];
    [[maybe_unused]] float dq[32];
    if constexpr (kLagDq) {
      if (prev_q_lo >= 0) issue_dq(dq, ds_buffer ^ 1, 0);
      else wgmma_commit();
    }
    reg_fence(s);
    if constexpr (!kLagDq) reg_fence(dp);
    wgmma_fence();
    mma_kmajor<T, QN, D, KvTile::kPanelBytes, QTile::kPanelBytes>(
        s, k_a, make_desc(sQ + q_part * 128, 16, 1024));
    wgmma_commit();
    if constexpr (kLagDq) {
      wgmma_wait<1>();
      reg_fence(dq);
      if (prev_q_lo >= 0) add_dq(dq, prev_q_lo, 0);
      reg_fence(dp);
      wgmma_fence();
    }
    mma_kmajor<T, QN, D, KvTile::kPanelBytes, QTile::kPanelBytes>(
        dp, v_a, make_desc(sdO + q_part * 128, 16, 1024));
    wgmma_commit();
    wgmma_wait<1>();
    reg_fence(s);

    // S^T * scale, then the variant's score_mods and masks on it (common/backward_hooks.cuh:
    // the accumulator's layout is the hooks' fragment).
    float(&sf)[1][NT][4] = *reinterpret_cast<float(*)[1][NT][4]>(&s);
    float(&dsf)[1][NT][4] = *reinterpret_cast<float(*)[1][NT][4]>(&dp);
    const BwdFrag at{kv_lo + key0, q_lo + q_part + 2 * t};
    const float qk_scale = block.qk_scale;
    for_each_fragment_t<NT>(sf, [&](int, int c, float& x) {
      x = at.kv(c) < kv_hi ? x * qk_scale : -INFINITY;
    });
    [[maybe_unused]] float raw[1][NT][4];
    if constexpr (Block::kKeepsRawScores) {
      for_each_fragment_t<NT>(sf, [&](int j, int c, float& x) { raw[0][j][c] = x; });
    }
    const BwdFragBounds bounds{at, q_hi, kv_hi};
    bwd_score_hooks<NT>(block, sf, bounds);
    // P^T = exp(S^T - LSE), in log2 units (the two columns of a pair are adjacent rows of LSE).
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const float2 l = *reinterpret_cast<const float2*>(lse_rows + q_part + 8 * j + 2 * t);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        sf[0][j][2 * r] = exp2f(sf[0][j][2 * r] * kLog2e - l.x);
        sf[0][j][2 * r + 1] = exp2f(sf[0][j][2 * r + 1] * kLog2e - l.y);
      }
    }
    // Into dS^T's (or P^T's) buffer of this block as [key][query], one 128-byte swizzled row
    // per key: n-tile j's 16-byte chunk at (j ^ g) in row key0 + 8 r (key & 7 == g), this
    // warpgroup's n-tiles from q_part / 8; `word(j, r)` the thread's two 16-bit values there.
    const auto store_t = [&](uint32_t buffer, auto&& word) {
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(buffer + (key0 + 8 * r) * 128 +
                                                         (((j + q_part / 8) ^ g) << 4) + 4 * t),
                       "r"(word(j, r))
                       : "memory");
        }
    };
    // The words of an accumulator `x` (under kSplitQ, where no A operand was packed).
    [[maybe_unused]] const auto packed = [](const float(&x)[QN / 2]) {
      return [&x](int j, int r) { return pack2<T>(x[acc_index(j, r, 0)], x[acc_index(j, r, 1)]); };
    };
    // acc += X^T B, X^T from its accumulator `x` packed into `a` (the A operand), B this
    // warpgroup's part of the stage's tile at `tile`: issued and committed (not under kSplitQ).
    const auto issue_rs = [&](auto& acc, auto& x, auto& a, uint32_t tile) {
      p_to_a<T, BLOCK_M>(x, a);
      reg_fence(a);
      reg_fence(acc);
      wgmma_fence();
      mma_rs<T, kPartCols, BLOCK_M>(acc, a,
                                    make_desc(tile + part_panels, QTile::kPanelBytes, 1024));
      wgmma_commit();
    };
    if constexpr (kSplitQ) {
      // P^T into shared memory for dV (both halves read after the barrier below); dP^T retired.
      store_t(sP + ds_buffer * Tiling::kDsBytes, packed(s));
      wgmma_wait<0>();
    } else {
      // dV += P^T dO
      uint32_t pa[BLOCK_M / 16][4];
      issue_rs(dv, s, pa, sdO);
      // dP^T retired (dV may still run)
      wgmma_wait<1>();
    }
    // dS^T = P^T (dP^T - D), then the chain rule's hooks.
    reg_fence(dp);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const float2 dl = *reinterpret_cast<const float2*>(delta_rows + q_part + 8 * j + 2 * t);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        dsf[0][j][2 * r] = sf[0][j][2 * r] * (dsf[0][j][2 * r] - dl.x);
        dsf[0][j][2 * r + 1] = sf[0][j][2 * r + 1] * (dsf[0][j][2 * r + 1] - dl.y);
      }
    }
    if constexpr (Block::kKeepsRawScores) {
      bwd_grad_hooks<NT>(block, dsf, raw, bounds, first_part);
    }
    if constexpr (kSplitQ) {
      // dS^T into shared memory (this warpgroup's queries), dK's A and dQ's.
      store_t(sdS + ds_buffer * Tiling::kDsBytes, packed(dp));
      fence_proxy_async();
    } else {
      // dK += dS^T Q (scaled at the end)
      uint32_t dsa[BLOCK_M / 16][4];
      issue_rs(dk, dp, dsa, sQ);
      // dS^T into shared memory, dQ's A, from dK's packed operand.
      if (first_part) {
        store_t(sdS + ds_buffer * Tiling::kDsBytes,
                [&dsa](int j, int r) { return dsa[j >> 1][(j & 1) * 2 + r]; });
        fence_proxy_async();
      }
    }
    if (kLagDq && m_next != KvUnion<1>::kEnd) {
      // dQ waits for the next block: its first barrier publishes this dS^T. dV and dK retire
      // here, so that no product is in flight across blocks.
      wgmma_wait<0>();
      reg_fence(dk);
      reg_fence(dv);
      prev_q_lo = q_lo;
    } else {
      // The dS^T that this warpgroup's dQ reads is there: its own (four warps), or the tile's.
      if constexpr (kSplitKeys) named_barrier_sync(2 + wg, 128);
      else consumers_sync();
      if constexpr (kSplitQ) {
        // Both halves of P^T and dS^T are there: dV += P^T dO, dK += dS^T Q, on this
        // warpgroup's part of the head dim (retired with dQ's first panel below).
        reg_fence(dv);
        reg_fence(dk);
        wgmma_fence();
        mma_kt<T, kPartCols, BLOCK_M>(dv, make_desc(sP + ds_buffer * Tiling::kDsBytes, 16, 1024),
                                      make_desc(sdO + part_panels, QTile::kPanelBytes, 1024));
        mma_kt<T, kPartCols, BLOCK_M>(dk, make_desc(sdS + ds_buffer * Tiling::kDsBytes, 16, 1024),
                                      make_desc(sQ + part_panels, QTile::kPanelBytes, 1024));
        wgmma_commit();
      }
      // dQ[:, this warpgroup's half] = dS K, one 64-column panel of K at a time (a second
      // panel's 32 accumulator registers would not fit beside dK's and dV's at head dim 256).
#pragma unroll
      for (int panel = 0; panel < DQ_N / 64; ++panel) {
        issue_dq(dq, ds_buffer, panel);
        wgmma_wait<0>();
        reg_fence(dq);
        reg_fence(dk);
        reg_fence(dv);
        add_dq(dq, q_lo, panel);
      }
    }
    if constexpr (kProducer) {
      // The stage's Q, dO and rows read for the last time (dV and dK retired): the producer
      // may refill it. A dS^T buffer's next write comes after the next block's barrier.
      __syncwarp();
      if (lane == 0) mbar_arrive(&sm.bars->empty[block_stage]);
    }
    // Without a producer, the next block's top barrier orders this block's reads of dS^T and of
    // the stage before their next writes.
  });
  bwd_trace_stamp(tid, kTraceWalked);
  bwd_trace_note(tid, kTraceBlocks, block_index - ring);
  ring = block_index;
  if constexpr (kPersistent) {
    // Every product of the tile retired (each block waited for its dQ): K and V may go.
    __syncwarp();
    if (lane == 0) mbar_arrive(&sm.bars->kv_empty);
  }
  cp_async_wait<0>();
  // The bulk adds done before the CTA's shared memory goes.
  if ((Tiling::kDqBulk || Tiling::kDetBulk) && wg_leader) bulk_wait<0>();

  // grad.epilogue: dK = scale * dk, dV; under GQA the group's query heads add up in fp32.
  const bool gqa = f.heads_q != f.heads_kv;
  if constexpr (kStagedStore != 0) {
    static_assert(2 * BLOCK_N * D * 2 <= STAGES * Tiling::kStageBytes, "dK and dV fit the stages");
    if (!gqa && (kStagedStore == 1 || det) && bwd_dkv_rows_16(p)) {
      // Every warpgroup's products retired before any stage is overwritten.
      consumers_sync();
      store_dkv_staged<T, D, kPartCols>(tile, s_base + Tiling::kStage0, dk, dv, scale, key0,
                                        part * kPartCols, t, tid, consumers_sync);
      bwd_trace_stamp(tid, kTraceStored);
      return;
    }
  }
  const int64_t kv_row0 = (static_cast<int64_t>(tile.b) * f.heads_kv + tile.kv_h) * tile.seqlen_kv;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int kv = kv_lo + key0 + 8 * r;
    if (kv >= kv_hi) continue;
#pragma unroll
    for (int j = 0; j < kPartCols / 8; ++j) {
      const int col = part * kPartCols + 8 * j + 2 * t;
      const float dk0 = dk[acc_index(j, r, 0)] * scale, dk1 = dk[acc_index(j, r, 1)] * scale;
      const float dv0 = dv[acc_index(j, r, 0)], dv1 = dv[acc_index(j, r, 1)];
      if (gqa) {
        const long long at = (kv_row0 + kv) * D + col;
        acc_add(tile.scratch + ws.dk, at, dk0, det);
        acc_add(tile.scratch + ws.dk, at + 1, dk1, det);
        acc_add(tile.scratch + ws.dv, at, dv0, det);
        acc_add(tile.scratch + ws.dv, at + 1, dv1, det);
      } else {
        T* dk_out = static_cast<T*>(p.dk) + tile.b * p.dk_batch_stride +
                    tile.kv_h * p.dk_head_stride + static_cast<int64_t>(kv) * p.dk_row_stride + col;
        T* dv_out = static_cast<T*>(p.dv) + tile.b * p.dv_batch_stride +
                    tile.kv_h * p.dv_head_stride + static_cast<int64_t>(kv) * p.dv_row_stride + col;
        *reinterpret_cast<uint32_t*>(dk_out) = pack2<T>(dk0, dk1);
        *reinterpret_cast<uint32_t*>(dv_out) = pack2<T>(dv0, dv1);
      }
    }
  }
  bwd_trace_stamp(tid, kTraceStored);
}
