// Epilogue of the sm_90 expert: normalise O by the row sum, store O rows < q_hi from the
// accumulator, and store the natural-log LSE. A row that kept nothing gets O = 0, LSE = -inf.
//
// In the accumulator a quad holds 8 columns of a row (2 per thread) per 8-column block, so
// stores straight from it are 4 bytes per thread, and a warp's store touches 8 rows for 16
// bytes each. At S = 1k those narrow stores were the largest per-tile cost (ncu warp sampling,
// bench/sm90/NOTES.md: 16% of all samples, the stores waiting on the LSU queue and the next
// tile's first instructions waiting on the stores). Where O's rows are 16-byte aligned the quad
// transposes each 4 blocks among its threads first, so that each thread stores 16 contiguous
// bytes of one row (a quarter of the store instructions, whole 32-byte sectors).
#pragma once

#include "../common/cuir_platform.cuh"
#include "softmax.cuh"
#include "wgmma.cuh"

namespace cubridge {
namespace fa3 {

// O rows start 16-byte aligned for every (batch, head, row): the wide stores apply.
__host__ __device__ __forceinline__ bool o_rows_16_byte_aligned(const void* o, int64_t batch_stride,
                                                              int64_t head_stride,
                                                              int64_t row_stride) {
  return reinterpret_cast<uintptr_t>(o) % 16 == 0 && batch_stride % 8 == 0 &&
         head_stride % 8 == 0 && row_stride % 8 == 0;
}

// v[k] of quad thread t becomes v[t] of quad thread k (a 4 x 4 transpose across the quad): two
// exchange rounds, over index bit 1 with thread t ^ 2, then over bit 0 with thread t ^ 1. In each
// round a thread gives its partner the two values whose index bit differs from its own bit and
// takes the partner's in their place. Every lane of the warp must call it (shuffles).
__device__ __forceinline__ void quad_transpose(uint32_t (&v)[4], int t) {
#pragma unroll
  for (int bit = 1; bit >= 0; --bit) {
    const int m = 1 << bit;
    const bool hi = (t & m) != 0;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      if (q & m) continue;  // q: the index with the bit clear; q + m with it set
      const uint32_t give = hi ? v[q] : v[q + m];
      const uint32_t take = __shfl_xor_sync(0xffffffffu, give, m);
      v[q] = hi ? take : v[q];
      v[q + m] = hi ? v[q + m] : take;
    }
  }
}

// Row r (0 or 1) of this thread: 1 / l for O (0 where l = 0: the row kept nothing) and the
// natural-log LSE (-inf there). Every lane of the quad must call it (shuffles).
struct RowResult {
  bool empty;
  float inv, lse;
};
template <int TILE_N, int D>
__device__ __forceinline__ RowResult row_result(const OnlineSoftmax<TILE_N, D>& sm, int r) {
  constexpr float kLn2 = 0.6931471805599453f;
  const float l = quad_sum(sm.row_sum[r]);
  const bool empty = !(l > 0.f);
  return {empty, empty ? 0.f : 1.f / l, empty ? -INFINITY : sm.row_max[r] * kLn2 + logf(l)};
}

// o_rows / lse_rows point at this thread's first row (row0); row0 + 8 is its second. `wide`:
// o_rows_16_byte_aligned holds (uniform over the grid).
template <typename T, int TILE_N, int D>
__device__ __forceinline__ void store_output(const float (&o)[D / 2],
                                             const OnlineSoftmax<TILE_N, D>& sm, T* o_row0,
                                             int64_t o_row_stride, float* lse_row0, int row0,
                                             int q_hi, int t, bool wide) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const RowResult res = row_result(sm, r);
    const bool empty = res.empty, in_rows = row0 + 8 * r < q_hi;
    const float inv = res.inv;
    T* const dst = o_row0 + 8 * r * o_row_stride;
    // Column pair 8j + 2t of the row, scaled (an empty row is 0 whatever the accumulator holds).
    auto pair = [&](int j) {
      return pack2<T>(empty ? 0.f : o[acc_index(j, r, 0)] * inv,
                      empty ? 0.f : o[acc_index(j, r, 1)] * inv);
    };
    if (wide) {
#pragma unroll
      for (int g = 0; g < D / 32; ++g) {
        uint32_t v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) v[k] = pair(4 * g + k);
        quad_transpose(v, t);  // v[k]: columns 32g + 8t + 2k, +1
        if (in_rows) *reinterpret_cast<uint4*>(dst + 32 * g + 8 * t) = make_uint4(v[0], v[1], v[2], v[3]);
      }
    } else if (in_rows) {
#pragma unroll
      for (int j = 0; j < D / 8; ++j) *reinterpret_cast<uint32_t*>(dst + 8 * j + 2 * t) = pair(j);
    }
    if (in_rows && t == 0) lse_row0[8 * r] = res.lse;
  }
}

// A split unit's result (TailSplit, scheduler.cuh) for the combine: O = acc / l and the LSE in
// fp32, its rows in a workspace slot as o[rows][D] and lse[rows]. row_local: this thread's first
// row within the work tile. Rows past the sequence are stored too (the combine skips them).
template <int TILE_N, int D>
__device__ __forceinline__ void store_partial(const float (&o)[D / 2],
                                              const OnlineSoftmax<TILE_N, D>& sm, float* slot_o,
                                              float* slot_lse, int row_local, int t) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const RowResult res = row_result(sm, r);
    float* const dst = slot_o + static_cast<size_t>(row_local + 8 * r) * D;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      *reinterpret_cast<float2*>(dst + 8 * j + 2 * t) =
          make_float2(o[acc_index(j, r, 0)] * res.inv, o[acc_index(j, r, 1)] * res.inv);
    }
    if (t == 0) slot_lse[row_local + 8 * r] = res.lse;
  }
}

// One query row of a split tile, by one warp: its parts' results (store_partial; part i's row at
// o + i * part_stride, its LSE at lse + i * part_stride) merged as the online softmax merges
// states, O = sum_i e^(LSE_i - LSE) O_i with LSE = log sum_i e^(LSE_i); a row no part kept
// anything of stays O = 0, LSE = -inf. Lane k takes columns [k * D / 32, (k + 1) * D / 32).
template <typename T, int D>
__device__ __forceinline__ void combine_row(const float* o, const float* lse, size_t part_stride,
                                            int parts, T* o_row, float* lse_out, int lane) {
  constexpr int C = D / 32;
  static_assert(C % 2 == 0, "head dims of 64 and up: column pairs per lane");
  float m = -INFINITY;
  for (int i = 0; i < parts; ++i) m = fmaxf(m, lse[i * part_stride]);
  float acc[C], l = 0.f;
#pragma unroll
  for (int c = 0; c < C; ++c) acc[c] = 0.f;
  if (m != -INFINITY) {
    for (int i = 0; i < parts; ++i) {
      const float w = expf(lse[i * part_stride] - m);
      const float* const src = o + i * part_stride + lane * C;
      l += w;
#pragma unroll
      for (int c = 0; c < C; c += 2) {
        const float2 v = *reinterpret_cast<const float2*>(src + c);
        acc[c] = fmaf(w, v.x, acc[c]);
        acc[c + 1] = fmaf(w, v.y, acc[c + 1]);
      }
    }
  }
  const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
  for (int c = 0; c < C; c += 2) {
    *reinterpret_cast<uint32_t*>(o_row + lane * C + c) = pack2<T>(acc[c] * inv, acc[c + 1] * inv);
  }
  if (lane == 0) *lse_out = l > 0.f ? m + logf(l) : -INFINITY;
}

}  // namespace fa3
}  // namespace cubridge
