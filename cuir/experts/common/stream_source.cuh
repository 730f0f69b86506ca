// The captured tensor an expert streams tile by tile (docs/lowering.md, "Streamed tiles"), as
// rows: the lowering names it in region `tile_stream` (its slot in p.buffers, rank, element
// type) and each work tile's leading indices in `stream_coords`; both experts read it from here.
#pragma once

#include "cuir_scalar.cuh"
#include "launch_abi.cuh"

// The rows data + row * row_stride + col of one work tile's slice, valid below `rows` x `cols`.
template <typename E>
struct CuirStreamSource {
  const E* data = nullptr;  // at the work tile's leading indices already
  long long row_stride = 0;
  long long rows = 0, cols = 0;

  // Element (q_idx, kv_idx) read per score from global memory (an instance without room for the
  // tile), as a CuIR value (cuir_buffers.cuh).
  __device__ __forceinline__ auto at(int q_idx, int kv_idx) const {
    return cuir_ld(data + static_cast<long long>(q_idx) * row_stride + kv_idx);
  }
};

// Buffer SLOT of rank RANK (2 to 4) at leading indices c2 (dimension RANK - 3) and c3 (RANK - 4);
// an empty source where SLOT < 0 (no stream).
template <typename E, int SLOT, int RANK>
__device__ __forceinline__ CuirStreamSource<E> cuir_stream_source(const cubridge_attn_fwd_params& p,
                                                                   int c2, int c3) {
  CuirStreamSource<E> s;
  if constexpr (SLOT >= 0) {
    const cubridge_attn_fwd_buffer& b = p.buffers[SLOT];
    s.data = static_cast<const E*>(b.data);
    if constexpr (RANK >= 3) s.data += c2 * b.strides[RANK - 3];
    if constexpr (RANK >= 4) s.data += c3 * b.strides[RANK - 4];
    s.row_stride = b.strides[RANK - 2];
    s.rows = b.sizes[RANK - 2];
    s.cols = b.sizes[RANK - 1];
  }
  (void)p, (void)c2, (void)c3;
  return s;
}
