// The backward tile's dK and dV through shared memory (CUBRIDGE_BWD_STAGED_STORE, kernel_bwd.cu):
// a thread's accumulator pairs go into [key][column] rows of the walk's stages, then every
// thread copies whole 16-byte pieces of rows out to global memory, a warp's 32 pieces whole
// rows. The fragment stores themselves scatter 4 bytes over 8 rows a warp instruction, each
// 32-byte sector written half by one instruction and half by the next: 5.2 us of a tile's 28 at
// S = 512 (bench/NOTES.md, session 25). Part of kernel_bwd.cu, included before the tile's code.
#pragma once

// Whether dK's and dV's rows start 16-byte aligned, whatever the batch, head and row
// (backward_kernel.cuh's aligned_16 over the strides' OR: all multiples of 8).
__device__ __forceinline__ bool bwd_dkv_rows_16(const cubridge_attn_bwd_params& p) {
  return aligned_16(p.dk, p.dk_batch_stride | p.dk_head_stride | p.dk_row_stride) &&
         aligned_16(p.dv, p.dv_batch_stride | p.dv_head_stride | p.dv_row_stride);
}

// dK = scale * dk and dV = dv of the tile's keys [kv_lo, kv_hi): this thread holds keys key0 and
// key0 + 8 (tile rows) at columns col0 + 8j + 2t, t its lane's quad index, of a warpgroup's
// PART_COLS columns (acc_index's order). `staging`: 2 * BLOCK_N * D * 2 bytes of shared memory
// no product reads any more; `sync` the consumers' barrier. A row's 16-byte pieces are swizzled
// by the row (piece ^ row % 8): one fragment store instruction's 8 rows then fill 8 different
// pieces, all 32 banks once.
template <typename T, int D, int PART_COLS, typename Sync>
__device__ __forceinline__ void store_dkv_staged(const BwdTile& tile, uint32_t staging,
                                                 const float (&dk)[PART_COLS / 2],
                                                 const float (&dv)[PART_COLS / 2], float scale,
                                                 int key0, int col0, int t, int tid, Sync sync) {
  using namespace cubridge::fa3;
  static_assert(D % 64 == 0, "whole 8-piece swizzle groups a row");
  constexpr int kRowBytes = D * 2, kPieces = D / 8;
  const uint32_t sdk = staging, sdv = staging + BLOCK_N * kRowBytes;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = key0 + 8 * r;
#pragma unroll
    for (int j = 0; j < PART_COLS / 8; ++j) {
      const int piece = col0 / 8 + j;
      const uint32_t at = row * kRowBytes + ((piece ^ (row & 7)) << 4) + 4 * t;
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sdk + at),
                   "r"(pack2<T>(dk[acc_index(j, r, 0)] * scale, dk[acc_index(j, r, 1)] * scale)));
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sdv + at),
                   "r"(pack2<T>(dv[acc_index(j, r, 0)], dv[acc_index(j, r, 1)])));
    }
  }
  sync();
  const cubridge_attn_bwd_params& p = tile.bp;
  const int64_t kv_lo = tile.kv_lo;
  T* const dk_tile = static_cast<T*>(p.dk) + tile.b * p.dk_batch_stride +
                     tile.kv_h * p.dk_head_stride + kv_lo * p.dk_row_stride;
  T* const dv_tile = static_cast<T*>(p.dv) + tile.b * p.dv_batch_stride +
                     tile.kv_h * p.dv_head_stride + kv_lo * p.dv_row_stride;
  const int rows = tile.kv_hi - tile.kv_lo;
  for (int i = tid; i < rows * kPieces; i += kConsumerThreads) {
    const int row = i / kPieces, piece = i % kPieces;
    const uint32_t at = row * kRowBytes + ((piece ^ (row & 7)) << 4);
    uint4 a, b;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(a.x), "=r"(a.y), "=r"(a.z), "=r"(a.w)
                 : "r"(sdk + at));
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(b.x), "=r"(b.y), "=r"(b.z), "=r"(b.w)
                 : "r"(sdv + at));
    *reinterpret_cast<uint4*>(dk_tile + row * p.dk_row_stride + piece * 8) = a;
    *reinterpret_cast<uint4*>(dv_tile + row * p.dv_row_stride + piece * 8) = b;
  }
}
