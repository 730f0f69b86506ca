// The block-table kernels every expert launches before its attention kernel, included inside the
// expert's namespace after its `workspace` region: they call that region's variant_* functions
// and the expert's kTableThreads. Two grid-stride kernels, so any table size launches on a
// bounded grid: every tile is classified, then every row compacted. The lowering renames
// `cubridge_attn_fwd_...` after the program's kernel, as everywhere in a lowered source.
#pragma once

// A CTA takes `chunk` consecutive tiles at a time (up to a warp's 32, fewer where the grid
// covers the tiles in fewer, so that small tables still spread over every CTA): the first warp's
// lanes give each its corners' verdict (variant_decide_tile, one thread a tile), then the whole
// CTA scans the tiles the corners left open, one after the other (variant_classify_tile). Where
// no conjunct is decided by the corners every tile is scanned, as before the verdict existed.
extern "C" __global__ void __launch_bounds__(kTableThreads)
    cubridge_attn_fwd_classify(const cubridge_attn_fwd_params p, char* workspace) {
  static_assert(kTableThreads >= 32, "the first warp decides a chunk's tiles");
  __shared__ unsigned open_tiles;  // bit i: tile first + i still to scan
  const long long tiles = variant_table_tiles(p);
  const int chunk = static_cast<int>(
      cuir_min<long long>(32, cuir_cdiv<long long>(tiles, static_cast<long long>(gridDim.x))));
  const long long stride = static_cast<long long>(gridDim.x) * chunk;
  for (long long first = static_cast<long long>(blockIdx.x) * chunk; first < tiles;
       first += stride) {
    if (threadIdx.x < 32) {
      const long long tile = first + threadIdx.x;
      const bool open = static_cast<int>(threadIdx.x) < chunk && tile < tiles &&
                        !variant_decide_tile(p, workspace, tile);
      const unsigned ballot = __ballot_sync(0xffffffffu, open);
      if (threadIdx.x == 0) open_tiles = ballot;
    }
    __syncthreads();
    for (unsigned left = open_tiles; left != 0; left &= left - 1) {
      variant_classify_tile(p, workspace, first + __ffs(static_cast<int>(left)) - 1);
    }
    __syncthreads();  // open_tiles is the next chunk's
  }
}
extern "C" __global__ void __launch_bounds__(kTableThreads)
    cubridge_attn_fwd_compact(const cubridge_attn_fwd_params p, char* workspace) {
  const long long rows = variant_table_rows(p);
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long row = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; row < rows;
       row += stride) {
    variant_compact_row(p, workspace, row);
  }
}
