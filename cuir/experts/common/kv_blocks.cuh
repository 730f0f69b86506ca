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

// Block tables (`table T = blocks(PRED)`): a classifier writes one class per tile (0 empty,
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
