// One CTA's backward work tile (kernel_bwd.cu): its K/V tile into shared memory, then per visited
// query block the recomputed scores and probabilities, dV, dP, dS, dK and dQ (kernel_bwd.cu's
// header says how); then dK and dV. Q and dO (and the rows' LSE and D) are double-buffered: the
// next visited block's load runs under this block's math. Part of kernel_bwd.cu (its tile
// parameters and variant contexts), included after them.
#pragma once

template <typename T, int D>
__device__ __forceinline__ void attend_bwd_tile(const BwdTile& tile) {
  using namespace cubridge::fa2;
  using Tiling = BwdTiling<D>;
  static_assert(Tiling::kServed, "the tile does not serve this head dim (bwd_smem_bytes is 0)");
  constexpr int NT = Tiling::NT, DTP = Tiling::DTP, kPartCols = Tiling::kPartCols;
  const cubridge_attn_bwd_params& p = tile.bp;
  const cubridge_attn_fwd_params& f = p.fwd;
  const int kv_lo = tile.kv_lo, kv_hi = tile.kv_hi, seqlen_q = tile.seqlen_q;
  extern __shared__ __align__(128) unsigned char smem[];
  const SmemTile<T, BLOCK_N, D> sK{reinterpret_cast<T*>(smem)};
  const SmemTile<T, BLOCK_N, D> sV{sK.base + BLOCK_N * D};
  // Stage i holds Q at stage_base + i * kStage and dO right after it.
  T* const stage_base = sV.base + BLOCK_N * D;
  constexpr int kStage = 2 * BLOCK_M * D;
  const SmemTile<T, BLOCK_M, BLOCK_N> sdS{stage_base + 2 * kStage};
  // Per stage, the block's LSE (log2 units) and D per query row.
  float* const s_lse = reinterpret_cast<float*>(sdS.base + BLOCK_M * BLOCK_N);
  float* const s_delta = s_lse + 2 * BLOCK_M;

  // The warp's 16 keys (key group) and its part of dK's and dV's columns; the parts of a group
  // compute the same dS, which part 0 alone stores and adds into the buffers' gradients.
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int part = kDParts == 1 ? 0 : warp / kKeyGroups;  // (a constant for one part)
  const int warp_row0 = (kDParts == 1 ? warp : warp % kKeyGroups) * 16;
  const bool first_part = part == 0;
  const uint32_t part_bytes = part * kPartCols * 2;  // the part's column offset in a tile row
  const BwdWorkspace& ws = tile.ws;
  const bool det = p.deterministic != 0;
  char* const dq_acc = tile.scratch + ws.dq;
  const int64_t row0 = (static_cast<int64_t>(tile.b) * f.heads_q + tile.h) * seqlen_q;
  const float* const delta_rows_g = reinterpret_cast<const float*>(tile.scratch + ws.delta) + row0;

  // load K = k[b, kv_h, kv_lo:kv_hi], load V = v[b, kv_h, kv_lo:kv_hi]
  const T* k_ptr = static_cast<const T*>(f.k) + tile.b * f.k_batch_stride +
                   tile.kv_h * f.k_head_stride + static_cast<int64_t>(kv_lo) * f.k_row_stride;
  const T* v_ptr = static_cast<const T*>(f.v) + tile.b * f.v_batch_stride +
                   tile.kv_h * f.v_head_stride + static_cast<int64_t>(kv_lo) * f.v_row_stride;
  sK.template load_async<kThreads>(k_ptr, f.k_row_stride, kv_hi - kv_lo, tid);
  sV.template load_async<kThreads>(v_ptr, f.v_row_stride, kv_hi - kv_lo, tid);
  cp_async_commit();
  const T* q_base = static_cast<const T*>(f.q) + tile.b * f.q_batch_stride + tile.h * f.q_head_stride;
  const T* do_base =
      static_cast<const T*>(p.d_o) + tile.b * p.do_batch_stride + tile.h * p.do_head_stride;

  // grad.init
  float acc_dk[1][DTP][4], acc_dv[1][DTP][4];
#pragma unroll
  for (int d = 0; d < DTP; ++d)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc_dk[0][d][c] = acc_dv[0][d][c] = 0.f;
  // dQ: the warp's m-tile of dS (A) and K read transposed (B).
  const int dq_tile = warp % kQTiles, dq_part = warp / kQTiles;
  const LdsmAddr<BLOCK_N> at_ds(smem_addr(sdS.base), dq_tile * 16 + (lane & 15), lane >> 4);
  const LdsmAddr<D> at_kt(smem_addr(sK.base), (lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4);
  const float scale = tile.softmax_scale;

  // load Q = q[b, h, q_lo:q_hi], load DO = do[b, h, q_lo:q_hi] into a stage (cp.async), and the
  // rows' LSE and D. A row past q_hi, or one that kept nothing (LSE = -inf), gets LSE = +inf:
  // its P is exp(-inf) = 0.
  auto load_q_block = [&](int m_block, int stage) {
    const int q_lo = m_block * BLOCK_M, rows = min(BLOCK_M, seqlen_q - q_lo);
    const SmemTile<T, BLOCK_M, D> q_tile{stage_base + stage * kStage};
    const SmemTile<T, BLOCK_M, D> do_tile{q_tile.base + BLOCK_M * D};
    q_tile.template load_async<kThreads>(q_base + static_cast<int64_t>(q_lo) * f.q_row_stride,
                                         f.q_row_stride, rows, tid);
    do_tile.template load_async<kThreads>(do_base + static_cast<int64_t>(q_lo) * p.do_row_stride,
                                          p.do_row_stride, rows, tid);
    cp_async_commit();
    bwd_load_rows<BLOCK_M>(tile, delta_rows_g, q_lo, rows, s_lse + stage * BLOCK_M,
                           s_delta + stage * BLOCK_M, tid);
  };
  int stage = 0;
  bool first_block = true;

  tile.for_each_q_block([&](int m_block, int m_next, bool block_full) {
    const int q_lo = m_block * BLOCK_M, q_hi = min(q_lo + BLOCK_M, seqlen_q);
    const BwdBlock block{tile, m_block, q_lo, q_hi, block_full};
    if (first_block) {  // the prologue: no earlier block prefetched this one
      load_q_block(m_block, stage);
      first_block = false;
    }
    cp_async_wait<0>();
    __syncthreads();  // this stage landed (and K, V); every warp is done with the other stage
    if (m_next != KvUnion<1>::kEnd) load_q_block(m_next, stage ^ 1);
    const SmemTile<T, BLOCK_M, D> sQ{stage_base + stage * kStage};
    const SmemTile<T, BLOCK_M, D> sdO{sQ.base + BLOCK_M * D};
    const float* const lse_rows = s_lse + stage * BLOCK_M;
    const float* const delta_rows = s_delta + stage * BLOCK_M;
    stage ^= 1;
    // S^T and dV: A = K, B = Q, dO read transposed; dP^T and dK: A = V, B = dO, Q read
    // transposed (from the part's first column: a whole number of swizzle rows on).
    const MainloopAddrs<D> at_s(smem_addr(sK.base), smem_addr(sQ.base),
                                smem_addr(sdO.base) + part_bytes, warp_row0, lane);
    const MainloopAddrs<D> at_dp(smem_addr(sV.base), smem_addr(sdO.base),
                                 smem_addr(sQ.base) + part_bytes, warp_row0, lane);

    // S^T = K Q^T * scale, then the variant's score_mods and masks on it.
    float s[1][NT][4];
    gemm_qk<T, 1, NT, D>(s, at_s);
    const BwdFrag at{kv_lo + warp_row0 + (lane >> 2), q_lo + 2 * (lane & 3)};
    const float qk_scale = block.qk_scale;
    for_each_fragment_t<NT>(s, [&](int, int c, float& x) {
      x = at.kv(c) < kv_hi ? x * qk_scale : -INFINITY;
    });
    [[maybe_unused]] float raw[1][NT][4];
    if constexpr (BwdBlock::kKeepsRawScores) {
      for_each_fragment_t<NT>(s, [&](int j, int c, float& x) { raw[0][j][c] = x; });
    }
    const BwdFragBounds bounds{at, q_hi, kv_hi};
    bwd_score_hooks<NT>(block, s, bounds);
    // P^T = exp(S^T - LSE), in log2 units.
    for_each_fragment_t<NT>(s, [&](int j, int c, float& x) {
      x = exp2f(x * kLog2e - lse_rows[at.q_local(j, c, q_lo)]);
    });
    // dV += P^T dO
    gemm_pv<T, 1, NT, DTP, D>(acc_dv, s, at_s);
    // dP^T = V dO^T; dS^T = P^T (dP^T - D), over dP's registers.
    float ds[1][NT][4];
    gemm_qk<T, 1, NT, D>(ds, at_dp);
    for_each_fragment_t<NT>(ds, [&](int j, int c, float& x) {
      x = s[0][j][c] * (x - delta_rows[at.q_local(j, c, q_lo)]);
    });
    if constexpr (BwdBlock::kKeepsRawScores) {
      bwd_grad_hooks<NT>(block, ds, raw, bounds, first_part);
    }
    // dK += dS^T Q (scaled at the end)
    gemm_pv<T, 1, NT, DTP, D>(acc_dk, ds, at_dp);
    // dS into shared memory as [query row][key], for dQ = dS K across the warps' keys.
    if (first_part) {
      for_each_fragment_t<NT>(ds, [&](int j, int c, float& x) {
        sdS.base[sdS.offset(at.q(j, c) - q_lo, at.kv(c) - kv_lo)] = bwd_from_float<T>(x);
      });
    }
    __syncthreads();
    float acc_dq[D / 8 / kDqParts][4];
    gemm_dq_part<T, BLOCK_N, D, kDqParts>(dq_part, acc_dq, at_ds, at_kt);
    // dQ[rows] += scale * dS K, into the accumulator shared by the KV tiles.
    const int g = lane >> 2, t2 = 2 * (lane & 3);
#pragma unroll
    for (int dt = 0; dt < D / 8 / kDqParts; ++dt) {
      const int col = dq_part * (D / kDqParts) + dt * 8 + t2;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int q = q_lo + dq_tile * 16 + g + 8 * r;
        if (q < q_hi) {
          const long long at = (row0 + q) * D + col;
          acc_add(dq_acc, at, acc_dq[dt][2 * r] * scale, det);
          acc_add(dq_acc, at + 1, acc_dq[dt][2 * r + 1] * scale, det);
        }
      }
    }
    // The next block's top barrier orders this block's reads of sdS and of the stage before
    // their next writes.
  });
  cp_async_wait<0>();

  // grad.epilogue: dK = scale * acc_dk, dV; under GQA the group's query heads add up in fp32.
  const bool gqa = f.heads_q != f.heads_kv;
  const int g = lane >> 2, t2 = 2 * (lane & 3);
  const int64_t kv_row0 = (static_cast<int64_t>(tile.b) * f.heads_kv + tile.kv_h) * tile.seqlen_kv;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int kv = kv_lo + warp_row0 + g + 8 * r;
    if (kv >= kv_hi) continue;
#pragma unroll
    for (int dt = 0; dt < DTP; ++dt) {
      const int col = part * kPartCols + dt * 8 + t2;
      const float dk0 = acc_dk[0][dt][2 * r] * scale, dk1 = acc_dk[0][dt][2 * r + 1] * scale;
      const float dv0 = acc_dv[0][dt][2 * r], dv1 = acc_dv[0][dt][2 * r + 1];
      if (gqa) {
        const long long at = (kv_row0 + kv) * D + col;
        acc_add(tile.scratch + ws.dk, at, dk0, det);
        acc_add(tile.scratch + ws.dk, at + 1, dk1, det);
        acc_add(tile.scratch + ws.dv, at, dv0, det);
        acc_add(tile.scratch + ws.dv, at + 1, dv1, det);
      } else {
        T* dk = static_cast<T*>(p.dk) + tile.b * p.dk_batch_stride + tile.kv_h * p.dk_head_stride +
                static_cast<int64_t>(kv) * p.dk_row_stride + col;
        T* dv = static_cast<T*>(p.dv) + tile.b * p.dv_batch_stride + tile.kv_h * p.dv_head_stride +
                static_cast<int64_t>(kv) * p.dv_row_stride + col;
        *reinterpret_cast<uint32_t*>(dk) = ElemTraits<T>::pack(dk0, dk1);
        *reinterpret_cast<uint32_t*>(dv) = ElemTraits<T>::pack(dv0, dv1);
      }
    }
  }
}
