// The KV blocks a lowered kernel visits, shared by every expert: the range form (a union of
// half-open block intervals, KvUnion) and the table form's row compaction. Generated regions
// (kv_range, kv_loop, workspace) name these, so each expert includes this file; the lowering
// inlines it.
#pragma once

#include "cuir_platform.cuh"

// The KV blocks a program visits: the union of N half-open intervals, ascending, each block once.
// next(n) is the smallest visited block >= n, which is also what a pipelined mainloop prefetches.
template <int N>
struct KvUnion {
  static constexpr int kEnd = INT_MAX;  // "no further KV block"
  int lo[N];
  int hi[N];
  __device__ __forceinline__ int next(int n) const {
    int best = kEnd;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int c = n > lo[i] ? n : lo[i];
      if (c < hi[i] && c < best) best = c;
    }
    return best;
  }
  __device__ __forceinline__ int first() const { return next(INT_MIN); }
};

// Block tables (`table T = blocks(PRED)`): the class of one tile (m_block, n_block) for the CTA
// classifying it: 0 when keep(q_idx, kv_idx) is false on every element inside the sequence
// bounds (empty), 2 when it is true on all (full), else 1 (partial); every thread of the CTA
// gets it. The generated classifier (region table_kernel) decodes the tile and hands the
// program's predicate in as `keep`. Each thread walks whole key columns, rows innermost: what
// the predicate reads per key (a document id) is loop-invariant there and hoisted, what it reads
// per query is the same address across the warp (one broadcast load), and a thread stops once
// its columns have shown a kept and a dropped element, because the tile is then partial
// whatever the others find. (Element order with two loads per element took 105 us of an 8k
// causal document call's 1.07 ms on an H100.)
template <int BM, int BN, typename Keep>
__device__ __forceinline__ int cuir_classify_tile(const int m_block, const int n_block,
                                                  const int seqlen_q, const int seqlen_kv,
                                                  Keep&& keep) {
  const int q_end = min(m_block * BM + BM, seqlen_q);
  const int kv_end = min(n_block * BN + BN, seqlen_kv);
  bool any = false, all = true;
  for (int col = threadIdx.x; col < BN && (all || !any); col += blockDim.x) {
    const int kv_idx = n_block * BN + col;
    if (kv_idx >= kv_end) break;
    auto visit = [&](const int q_idx) {
      const bool kept = keep(q_idx, kv_idx);
      any = any || kept;
      all = all && kept;
    };
    // Eight rows at a time: their loads are independent, the stop test runs per eight, and only
    // a last short group tests the row bound per row.
    int q0 = m_block * BM;
    for (; q0 + 8 <= q_end && (all || !any); q0 += 8) {
#pragma unroll
      for (int r = 0; r < 8; ++r) visit(q0 + r);
    }
    for (; q0 < q_end && (all || !any); ++q0) visit(q0);
  }
  any = __syncthreads_or(any);
  all = __syncthreads_and(all);
  return any ? (all ? 2 : 1) : 0;
}

// A classifier writes one class per tile (0 empty,
// 1 partial, 2 full) into the entry array of each row; this pass compacts one row in place into
// its non-empty blocks, ascending, encoded as (n_block << 1) | full, and stores the count.
// Layout of a table of R rows: counts[R], then entries[R][num_n].
__device__ __forceinline__ void cuir_compact_row(int* __restrict__ table, long long rows, int num_n,
                                                 long long row) {
  int* entries = table + rows + row * num_n;
  int count = 0;
  for (int n = 0; n < num_n; ++n) {
    const int cls = entries[n];
    if (cls != 0) entries[count++] = (n << 1) | (cls == 2 ? 1 : 0);
  }
  table[row] = count;
}
