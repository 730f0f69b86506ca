// One CTA's work tile (kernel.cu): the Q tile into shared memory, then per visited KV block
// S = Q K^T, the variant's score hooks on S, the online softmax and O += P V, with K and V
// streaming through cp.async (V's load under Q K^T and the softmax, the next K's under P V);
// then the variant's epilogue hooks and O and LSE. Part of kernel.cu (its tile parameters,
// Tiling and variant contexts), included after them.
#pragma once

template <typename T, int D>
__device__ __forceinline__ void attend_tile(const VariantTile& tile) {
  using namespace cubridge::fa2;
  constexpr int MT = Tiling<D>::MT, NT = Tiling<D>::NT, DT = Tiling<D>::DT;
  constexpr int kThreads = kThreadsFor<D>;
  using Stream = typename Tiling<D>::Stream;
  const cubridge_attn_fwd_params& p = tile.p;
  const int q_lo = tile.q_lo, q_hi = tile.q_hi, seqlen_kv = tile.seqlen_kv;
  extern __shared__ __align__(128) unsigned char smem[];
  const SmemTile<T, BLOCK_M, D> sQ{reinterpret_cast<T*>(smem)};
  const SmemTile<T, BLOCK_N, D> sK{sQ.base + BLOCK_M * D};
  const SmemTile<T, BLOCK_N, D> sV{sK.base + BLOCK_N * D};
  uint8_t* const s_stream = smem + Tiling<D>::kBaseBytes;
  const CuirStreamSource<StreamElem> stream_src =
      cuir_stream_source<StreamElem, kStreamBuffer, kStreamRank>(p, tile.stream_c2, tile.stream_c3);
  const bool stream_vector = Stream::vector_rows(stream_src);  // cp.async takes every row

  const int tid = threadIdx.x, lane = tid & 31, warp_row0 = (tid >> 5) * MT * 16;
  // load Q = q[b, h, q_lo:q_hi]
  const T* q_ptr = static_cast<const T*>(p.q) + tile.b * p.q_batch_stride +
                   tile.h * p.q_head_stride + static_cast<int64_t>(q_lo) * p.q_row_stride;
  const T* k_ptr = static_cast<const T*>(p.k) + tile.b * p.k_batch_stride +
                   tile.kv_h * p.k_head_stride;
  const T* v_ptr = static_cast<const T*>(p.v) + tile.b * p.v_batch_stride +
                   tile.kv_h * p.v_head_stride;
  sQ.template load_async<kThreads>(q_ptr, p.q_row_stride, q_hi - q_lo, tid);
  cp_async_commit();
  auto load_kv = [&](const SmemTile<T, BLOCK_N, D>& to, const T* base, int64_t row_stride,
                     int block) {
    const int lo = block * BLOCK_N;
    to.template load_async<kThreads>(base + lo * row_stride, row_stride,
                                     min(BLOCK_N, seqlen_kv - lo), tid);
    cp_async_commit();
  };
  // K's block and a streamed tensor's tile of it, in one cp.async group.
  auto load_k = [&](int block) {
    Stream::template load<kThreads>(s_stream, stream_src, q_lo, block * BLOCK_N, stream_vector, tid);
    load_kv(sK, k_ptr, p.k_row_stride, block);
  };

  // softmax.init
  float acc[MT][DT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int d = 0; d < DT; ++d)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mt][d][c] = 0.f;
  OnlineSoftmax<MT> softmax;
  softmax.init();
  const MainloopAddrs<D> lds(smem_addr(sQ.base), smem_addr(sK.base), smem_addr(sV.base),
                             warp_row0, lane);
  bool first_block = true;

  tile.for_each_kv_block([&](int n_block, int n_next, bool block_full) {
    const int kv_lo = n_block * BLOCK_N;
    const int kv_hi = min(kv_lo + BLOCK_N, seqlen_kv);
    const VariantBlock block{tile, n_block, kv_lo, kv_hi, block_full};

    if (first_block) {  // the prologue: the first K block is not prefetched by a previous one
      load_k(n_block);
      first_block = false;
    }
    cp_async_wait<0>();
    __syncthreads();  // K(n_block) and its streamed tile landed; every warp is done with the previous V
    load_kv(sV, v_ptr, p.v_row_stride, n_block);

    float s[MT][NT][4];
    gemm_qk<T, MT, NT, D>(s, lds);
    // Thread-owned score elements: row q0 + mt*16 + 8*(c >= 2), column kv0 + j*8 + (c & 1).
    const FragCoord at{q_lo + warp_row0 + (lane >> 2), kv_lo + 2 * (lane & 3)};
    const bool ragged = kv_lo + BLOCK_N > seqlen_kv;
    const float qk_scale = block.qk_scale;
    for_each_fragment(s, [&](int, int j, int c, float& x) {
      x *= qk_scale;
      if (ragged && at.kv(j, c) >= kv_hi) x = -INFINITY;
    });
    // Visits the in-bounds score elements this thread owns as f(q_idx, kv_idx, score&), or with
    // the indices as floats too (score_visit.cuh): one conversion per tile plus constants.
    const float q0_f = static_cast<float>(at.q0), kv0_f = static_cast<float>(at.kv0);
    auto q_float = [&](int mt, int c) { return q0_f + static_cast<float>(at.q(mt, c) - at.q0); };
    auto kv_float = [&](int j, int c) { return kv0_f + static_cast<float>(at.kv(j, c) - at.kv0); };
    auto for_each_score = [&](auto&& f) {
      for_each_fragment(s, [&](int mt, int j, int c, float& x) {
        const int q_idx = at.q(mt, c), kv_idx = at.kv(j, c);
        if (q_idx < q_hi && kv_idx < kv_hi) {
          cuir_call_element(f, q_idx, kv_idx, q_float(mt, c), kv_float(j, c), x, 0);
        }
      });
    };
    // The same as f(mt, r, j, k, q_idx, kv_idx, score&), n-tile by n-tile: (mt, r) and (j, k)
    // are the element's row and column slots (FragCoord), which index the values the regions
    // computed per row and per column with the two visitors below.
    auto for_each_score_at = [&](auto&& f) {
      for_each_fragment_by_col(s, [&](int mt, int j, int c, float& x) {
        const int q_idx = at.q(mt, c), kv_idx = at.kv(j, c);
        if (q_idx < q_hi && kv_idx < kv_hi) {
          cuir_call_element_at(f, mt, FragCoord::row_slot(c), j, FragCoord::col_slot(c), q_idx,
                               kv_idx, q_float(mt, c), kv_float(j, c), x, 0);
        }
      });
    };
    // f(mt, r, q_idx) per row slot, f(j, k, kv_idx) per column slot. A slot past q_hi / kv_hi
    // (a ragged tile) gets the last in-bounds index instead: no element reads that slot, and a
    // program's expressions are defined at every in-bounds index (the interpreter evaluates each
    // of them, `&&` operands included, everywhere), so evaluating one there reads no buffer out
    // of bounds, where the element loop would skip the out-of-bounds index.
    auto for_each_score_row = [&](auto&& f) {
      for_each_row_slot<MT>([&](int mt, int r) { f(mt, r, min(at.row(mt, r), q_hi - 1)); });
    };
    auto for_each_score_col = [&](auto&& f) {
      for_each_col_slot<NT>([&](int j, int k) { f(j, k, min(at.col(j, k), kv_hi - 1)); });
    };
    const CuirScoreVisitors<decltype(for_each_score), decltype(for_each_score_at),
                            decltype(for_each_score_row), decltype(for_each_score_col)>
        visitors{for_each_score, for_each_score_at, for_each_score_row, for_each_score_col};
    const Stream stream_tile{s_stream, stream_src, q_lo, kv_lo};
    block.template score_mod<MT, NT>(visitors, stream_tile);
    block.template mask<MT, NT>(visitors, stream_tile);
    for_each_fragment(s, [](int, int, int, float& x) { x *= kLog2e; });
    softmax.step(s, acc);

    cp_async_wait<0>();
    __syncthreads();  // V(n_block) landed; every warp is done with K(n_block) and its tile
    if (n_next != INT_MAX) load_k(n_next);
    gemm_pv<T, MT, NT, DT, D>(acc, s, lds);
  });
  cp_async_wait<0>();
  __syncthreads();  // no copy into sQ is in flight when the epilogue reuses it (empty loops too)

  tile.epilogue_sink(softmax, acc, lane);
  // f(q_idx, q_f) per row this thread owns, in score units, added to that row's LSE only: a
  // score_mod's terms that are the same along a row (docs/lowering.md, SplitRowTerms).
  const FragCoord rows{q_lo + warp_row0 + (lane >> 2), 0};  // the rows only (no key columns here)
  tile.epilogue_rows([&](auto&& f) {
    for_each_row_slot<MT>([&](int mt, int r) {
      const int q = min(rows.row(mt, r), q_hi - 1);
      softmax.row_max[mt][r] += f(q, static_cast<float>(q)) * kLog2e;
    });
  });
  // epilogue: O = acc / l (0 where l = 0), LSE = m + log(l) (-inf where l = 0)
  T* o_ptr = static_cast<T*>(p.o) + tile.b * p.o_batch_stride + tile.h * p.o_head_stride +
             static_cast<int64_t>(q_lo) * p.o_row_stride;
  float* lse_ptr = p.lse + tile.b * p.lse_batch_stride + tile.h * p.lse_head_stride + q_lo;
  epilogue<T, MT, DT, BLOCK_M, D, kThreads>(acc, softmax, sQ, o_ptr, p.o_row_stride, lse_ptr,
                                            q_hi - q_lo, warp_row0, lane, tid);
}
