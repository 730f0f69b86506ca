// A consumer warpgroup's part of one work unit (kernel.cu): per KV tile S = Q K^T, the variant's
// score hooks on S, the online softmax, and O += P V, with the previous tile's P V issued beside
// this tile's Q K^T and retiring under its softmax (intra-warpgroup overlap); then the epilogue.
// Part of kernel.cu (its instance traits and variant contexts), included after them.
#pragma once

// The epilogue: the variant's sink and row terms, then O and LSE, or a split part's partial
// result into its workspace slot (the combine merges the parts).
template <typename T, int D, typename Softmax>
__device__ __forceinline__ void finish_unit(const Cta<T, D>& cta, const VariantTile& tile,
                                            const WorkUnit<T, D>& u, float (&acc)[D / 2],
                                            Softmax& softmax, int row0, int lane) {
  const int t = lane & 3;
  // A sink's mass joins one part of a split walk only; the combine adds the parts.
  if (u.part <= 0) tile.epilogue_sink(softmax, acc, lane);
  tile.epilogue_rows([&](auto&& f) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int q = min(row0 + 8 * r, tile.q_hi - 1);
      softmax.row_max[r] += f(q, static_cast<float>(q)) * kLog2e;
    }
  });
  const cubridge_attn_fwd_params& p = tile.p;
  // Row terms shift every part's LSE alike, so the merged LSE carries them once.
  if (HeadDim<D>::kSplits && u.part >= 0) {
    const size_t slot_floats = split_slot_floats<D>(tile.BLOCK_M);
    float* const slot = reinterpret_cast<float*>(cta.split_ws + kSplitHeaderBytes) +
                        static_cast<size_t>(u.unit - cta.split.whole) * slot_floats;
    cubridge::fa3::store_partial<HeadDim<D>::kTileN, D>(
        acc, softmax, slot, slot + static_cast<size_t>(tile.BLOCK_M) * D, row0 - tile.q_lo, t);
    return;
  }
  // O = acc / l (0 where l = 0), LSE = m + log(l) (-inf where l = 0)
  T* const o_row0 = static_cast<T*>(p.o) + tile.b * p.o_batch_stride + tile.h * p.o_head_stride +
                    static_cast<int64_t>(row0) * p.o_row_stride;
  float* const lse_row0 = p.lse + tile.b * p.lse_batch_stride + tile.h * p.lse_head_stride + row0;
  cubridge::fa3::store_output<T, HeadDim<D>::kTileN, D>(acc, softmax, o_row0, p.o_row_stride,
                                                        lse_row0, row0, tile.q_hi, t, cta.o_wide);
}

template <typename T, int D>
__device__ __forceinline__ void consume_unit(const Cta<T, D>& cta, const VariantTile& tile,
                                             const WorkUnit<T, D>& u, int& ring) {
  using namespace cubridge::fa3;
  using G = Geo<T, D>;
  using H = HeadDim<D>;
  constexpr int TILE_N = H::kTileN;
  using StreamTileT = StreamTile<StreamElem, H::kBlockM, TILE_N, H::kStream>;
  typename G::Bars* const bars = cta.bars;
  const int cw = threadIdx.x / 128 - 1;
  const int lane = threadIdx.x & 31;
  const int warp = (threadIdx.x >> 5) & 3;
  // This thread's rows: row0, row0 + 8.
  const int row0 = tile.q_lo + cw * 64 + warp * 16 + (lane >> 2);
  const int t = lane & 3;
  const Operands<G, TILE_N> ops(cta.sp.q(0), cta.sp.k(0), cta.sp.v(0), cw);
  const uint64_t q_desc = ops.q(u.q_at.slot);
  // The streamed tensor at this work tile's leading indices (global reads and the fill).
  const CuirStreamSource<StreamElem> stream_src = cuir_stream_source<StreamElem, kStreamBuffer,
                                                                     kStreamRank>(
      tile.p, tile.stream_c2, tile.stream_c3);

  // softmax.init
  float acc[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) acc[i] = 0.f;
  OnlineSoftmax<TILE_N, D> softmax;
  float s[TILE_N / 2];
  uint32_t pa[TILE_N / 16][4];
  float corr[2];
  int pv_slot = -1;  // the ring slot of the tile whose P V is still to issue (-1: none)
  uint32_t pv_parity = 0;

  mbar_wait(&bars->q_full[u.q_at.slot], u.q_at.full_parity());

  tile.for_each_kv_block(u.part_lo, u.part_hi, [&](int n_block, bool block_full) {
    const int kv_lo = n_block * BLOCK_N;
    const VariantBlock block{tile, n_block, kv_lo, min(kv_lo + BLOCK_N, tile.seqlen_kv),
                             block_full};
    for (int lo = kv_lo; lo < block.kv_hi; lo += TILE_N, ++ring) {
      const RingPos<G::kStages> at(ring);
      const int tile_hi = min(lo + TILE_N, block.kv_hi);
      mbar_wait(&bars->k_full[at.slot], at.full_parity());
      // S = qk Q, K, issued with the previous tile's P V behind it (none before the first);
      // wait for S only. (O's rescale stays before the Q K^T issue: between the two issues,
      // as FlashAttention-3 places it, ptxas injected a wgmma wait there, C7517.)
      if (pv_slot < 0) {
        issue_qk<T, G, D, TILE_N>(s, q_desc, ops.k(at.slot));
        wgmma_wait<0>();
      } else {
        mbar_wait(&bars->v_full[pv_slot], pv_parity);
        issue_qk<T, G, D, TILE_N>(s, q_desc, ops.k(at.slot));
        issue_pv<T, D, TILE_N>(acc, pa, ops.v(pv_slot));
        wgmma_wait<1>();
      }
      reg_fence(s);
      // K's slot is free once Q K^T retired, unless a streamed tile in it is still to be read.
      if (!H::kStream && lane == 0) mbar_arrive(&bars->k_empty[at.slot]);
      if (tile_hi - lo < TILE_N) mask_columns_from<TILE_N>(s, lo + 2 * t, tile_hi);
      if (H::kStream && !cta.stream_tma) {
        stream_fill_rows<StreamElem, H::kBlockM, TILE_N>(cta.sp.stream(at.slot), stream_src,
                                                         tile.q_lo, lo, cw * 64 + warp * 16, lane);
      }
      // The variant: score_mods, then masks.
      ScoreTile<TILE_N> scores{s, row0, lo + 2 * t, tile.q_hi, tile_hi, block.qk_scale};
      const StreamTileT stream_tile{cta.sp.stream(at.slot), stream_src, tile.q_lo, lo};
      block.template score_mod<TILE_N / 8>(scores.score_mod_visitors(), stream_tile);
      block.template mask<TILE_N / 8>(scores.mask_visitors(), stream_tile);
      if (H::kStream && lane == 0) mbar_arrive(&bars->k_empty[at.slot]);
      // P = softmax.online S, under the previous P V; then that P V retires (a no-op wait on the
      // first tile, kept unconditional so that no wgmma wait sits on a branch).
      softmax.update(s, corr, scores.scale());
      wgmma_wait<0>();
      reg_fence(acc);
      // Ties the packing of P below the wait: the previous P fragments are read by that P V
      // until then, and the packed values may land in the same registers.
      reg_fence(s);
      if (pv_slot >= 0 && lane == 0) mbar_arrive(&bars->v_empty[pv_slot]);
      OnlineSoftmax<TILE_N, D>::rescale(acc, corr);
      p_to_a<T, TILE_N>(s, pa);
      pv_slot = at.slot;
      pv_parity = at.full_parity();
    }
  });
  // Every Q K^T of this work tile has retired: the producer may load the next tile's Q.
  if (lane == 0) mbar_arrive(&bars->q_empty[u.q_at.slot]);
  // pv P, V of the last tile.
  if (pv_slot >= 0) {
    mbar_wait(&bars->v_full[pv_slot], pv_parity);
    issue_pv<T, D, TILE_N>(acc, pa, ops.v(pv_slot));
    wgmma_wait<0>();
    reg_fence(acc);
    if (lane == 0) mbar_arrive(&bars->v_empty[pv_slot]);
  }
  finish_unit<T, D>(cta, tile, u, acc, softmax, row0, lane);
}
