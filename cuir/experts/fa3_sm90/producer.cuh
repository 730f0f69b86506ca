// The producer's part of one work unit (kernel.cu): one thread issues every copy. Q waits until
// the consumers are done reading the previous tile's Q buffer; the walk's KV tiles go round the
// K/V ring, each into its slot once the consumers released the slot's last use. Part of
// kernel.cu (its instance traits and variant contexts), included after them.
#pragma once

template <typename T, int D>
__device__ __forceinline__ void produce_unit(const Cta<T, D>& cta, const VariantTile& tile,
                                             const WorkUnit<T, D>& u, int& ring) {
  using namespace cubridge::fa3;
  using G = Geo<T, D>;
  using H = HeadDim<D>;
  typename G::Bars* const bars = cta.bars;
  const int slot = u.q_at.slot;
  if (u.q_at.reused()) mbar_wait(&bars->q_empty[slot], u.q_at.empty_parity());
  // load Q = q[b, h, q_lo:q_hi]
  mbar_arrive_expect_tx(&bars->q_full[slot], G::kQBytes);
#pragma unroll
  for (int c = 0; c < G::kPanels; ++c)
    tma_load_4d(cta.sp.q(slot) + c * G::kQPanelBytes, cta.maps.map[0], &bars->q_full[slot],
                c * 64, tile.q_lo, tile.h, tile.b);
  tile.for_each_kv_block(u.part_lo, u.part_hi, [&](int n_block, bool) {
    const int kv_lo = n_block * BLOCK_N;
    const int kv_hi = min(kv_lo + BLOCK_N, tile.seqlen_kv);
    for (int lo = kv_lo; lo < kv_hi; lo += H::kTileN, ++ring) {
      const RingPos<G::kStages> at(ring);
      // One KV tile into its ring slot; `extra` bytes more complete `full` (a streamed tile's,
      // issued after).
      auto load = [&](const void* map, uint8_t* dst, uint64_t* full, uint64_t* empty, int extra) {
        if (at.reused()) mbar_wait(empty, at.empty_parity());
        mbar_arrive_expect_tx(full, G::kKVBytes + extra);
#pragma unroll
        for (int c = 0; c < G::kPanels; ++c)
          tma_load_4d(dst + c * G::kKVPanelBytes, map, full, c * 64, lo, tile.kv_h, tile.b);
      };
      // load K = k[b, kv_h, kv_lo:kv_hi], then V: K first, so Q K^T can start under V's copy.
      // A streamed tensor's tile rides with K: k_full covers it, k_empty frees it.
      load(cta.maps.map[1], cta.sp.k(at.slot), &bars->k_full[at.slot], &bars->k_empty[at.slot],
           cta.stream_tma ? G::kStreamBytes : 0);
      if (H::kStream && cta.stream_tma) {
        using SL = StreamL<D>;
#pragma unroll
        for (int c = 0; c < SL::kPanels; ++c)
          tma_load_4d(cta.sp.stream(at.slot) + c * (H::kBlockM * SL::kPanelBytes), cta.maps.map[3],
                      &bars->k_full[at.slot], lo + c * SL::kPanelCols, tile.q_lo, tile.stream_c2,
                      tile.stream_c3);
      }
      load(cta.maps.map[2], cta.sp.v(at.slot), &bars->v_full[at.slot], &bars->v_empty[at.slot], 0);
    }
  });
}
