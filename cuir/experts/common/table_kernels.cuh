// The block-table kernels every expert launches before its attention kernel, included inside the
// expert's namespace after its `workspace` region: they call that region's variant_* functions
// and the expert's kTableThreads. Two grid-stride kernels, so any table size launches on a
// bounded grid: every tile is classified, then every row compacted. The lowering renames
// `cubridge_attn_fwd_...` after the program's kernel, as everywhere in a lowered source.
#pragma once

extern "C" __global__ void __launch_bounds__(kTableThreads)
    cubridge_attn_fwd_classify(const cubridge_attn_fwd_params p, char* workspace) {
  const long long tiles = variant_table_tiles(p);
  for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    variant_classify_tile(p, workspace, tile);
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
