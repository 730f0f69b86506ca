// The launcher ABI of every CuBridge kernel, declared once: the params struct of one call, the
// launch plan a kernel computes for it, and the TMA map requests of plan version 2.
//  - The experts' `abi` regions include this file; the lowering inlines it into every lowered
//    kernel.cu and kernel.h (plain C: a C11 compiler accepts it).
//  - The worker's loader reads kernels through it (worker/gpu/abi.h).
//  - A user's own kernel lifted by a model (`cubridge-cli lift`, docs/llm.md) follows it: CuBridge
//    puts this file in front of the kernel's source, so the kernel uses these types without
//    including anything (cuda_bf16.h, cuda_fp16.h and the C library pieces of
//    common/cuir_platform.cuh come with it).//
// A kernel names two device entry points in comment lines, each `// @cuir-entry ROLE NAME`:
//   plan:      extern "C" __global__ void NAME(cubridge_attn_fwd_params p,
//                                              cubridge_attn_fwd_launch_plan* plan)
//              run by one thread before each call: fills the plan (version, status, grid,
//              threads, dynamic shared memory bytes) or sets status = 1 to refuse the parameters;
//   attention: template <typename T, int D> __global__ void NAME(cubridge_attn_fwd_params p,
//              void* workspace), named with {T} and {D} (e.g. `my_attention<{T}, {D}>`):
//              T is __nv_bfloat16 or __half, D the head dim. A kernel whose plan asks for TMA
//              tensor maps (plan version 2, tma_count > 0) takes them as a third parameter,
//              `const __grid_constant__ cubridge_attn_fwd_tma_maps maps`.
// Experts name more, optional ones: `classify` and `compact` (block tables, before the
// attention) and `combine` (after it, plan version 3), each __global__ void NAME(params, char*
// workspace).
// The guard and every type carry the kernel's name (the lowering renames `cubridge_attn_fwd...`
// after the program's kernel), so the headers of several lowered kernels go in one file.
#ifndef cubridge_attn_fwd_LAUNCH_ABI_CUH_
#define cubridge_attn_fwd_LAUNCH_ABI_CUH_

#ifdef __CUDACC_RTC__
#include <cuda/std/cstddef>
#include <cuda/std/cstdint>
#else
#include <stddef.h>
#include <stdint.h>
#endif

#define CUBRIDGE_MAX_BUFFERS 8
#define CUBRIDGE_MAX_BUFFER_RANK 4
#define CUBRIDGE_PLAN_VERSION 3
#define CUBRIDGE_MAX_TMA 4

// A captured tensor of the spec (docs/lowering.md, "Captured tensors"): `rank` sizes and strides
// (in elements; the innermost stride must be 1 unless that size is 1, a broadcast stride 0
// elsewhere is fine), `dtype` one of CUBRIDGE_DTYPE_*. A kernel checks dtype, rank and that each
// size covers what its indexing reaches at the call's shape, and refuses the call otherwise.
#define CUBRIDGE_DTYPE_INT32 0
#define CUBRIDGE_DTYPE_INT64 1
#define CUBRIDGE_DTYPE_BOOL 2
#define CUBRIDGE_DTYPE_FLOAT32 3
#define CUBRIDGE_DTYPE_BFLOAT16 4
#define CUBRIDGE_DTYPE_FLOAT16 5
typedef struct cubridge_attn_fwd_buffer {
  const void* data;
  int32_t dtype;
  int32_t rank;
  int64_t sizes[CUBRIDGE_MAX_BUFFER_RANK];
  int64_t strides[CUBRIDGE_MAX_BUFFER_RANK];
} cubridge_attn_fwd_buffer;

// One forward attention call: q, k, v, o are [batch, heads, seqlen, head_dim] with unit stride
// along head_dim, strides in elements; lse is fp32 [batch, heads_q, seqlen_q] (row stride 1),
// the natural-log sum of exp of the scaled scores (-inf for a row that keeps nothing, whose O
// row is 0). softmax_scale is used as given.
typedef struct cubridge_attn_fwd_params {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  int64_t q_batch_stride, q_head_stride, q_row_stride;
  int64_t k_batch_stride, k_head_stride, k_row_stride;
  int64_t v_batch_stride, v_head_stride, v_row_stride;
  int64_t o_batch_stride, o_head_stride, o_row_stride;
  int64_t lse_batch_stride, lse_head_stride;
  int32_t batch, heads_q, heads_kv, head_dim, seqlen_q, seqlen_kv;
  int32_t dtype;  // 0 = bf16, 1 = fp16
  float softmax_scale;
  cubridge_attn_fwd_buffer buffers[CUBRIDGE_MAX_BUFFERS];  // in the program's order; unused by
                                                          // lifted kernels
  void* workspace;
  size_t workspace_size;
} cubridge_attn_fwd_params;

// A TMA tensor map the attention kernel reads (plan version 2). The loader encodes it over one of
// the call's tensors as a 4-D tiled map, innermost dimension first: (head_dim, seqlen, heads,
// batch) with the call's strides in bytes (elements * 2), the element type of `dtype`, box
// (box_cols, box_rows, 1, 1), unit element strides, no interleave, the given swizzle, 256-byte L2
// promotion and zero fill out of bounds; then it passes the maps, in request order, as the
// attention kernel's third parameter. Hopper's bulk tensor copies need the map built on the host,
// which is why the kernel asks and the loader (or the nvcc-built launcher) builds.
//
// A request may also name a captured tensor: tensor CUBRIDGE_TMA_BUFFER0 + i is buffers[i]. Its
// map is 4-D too, innermost first: (sizes[rank - 1], sizes[rank - 2], sizes[rank - 3],
// sizes[rank - 4]), a size 1 where the rank is lower; strides in bytes (strides * the element
// size; a dimension of size 1, or one the rank lacks, takes the extent of those inside it); the
// element type of the buffer's dtype (bool as uint8); box (box_cols, box_rows, 1, 1). A kernel
// asks for one only where the buffer allows (16-byte aligned, outer strides multiples of 16
// bytes).
#define CUBRIDGE_TMA_BUFFER0 4
typedef struct cubridge_attn_fwd_tma_request {
  int32_t tensor;     // 0 = q, 1 = k, 2 = v, 3 = o; CUBRIDGE_TMA_BUFFER0 + i = buffers[i]
  uint32_t box_cols;  // head-dim elements per box (a buffer's: innermost elements)
  uint32_t box_rows;  // sequence rows per box (at most 256)
  int32_t swizzle;    // CUtensorMapSwizzle: 0 none, 1 = 32B, 2 = 64B, 3 = 128B
} cubridge_attn_fwd_tma_request;

// The attention kernel's third parameter: CUtensorMap images (128 bytes each, 64-byte aligned as
// TMA requires of a map's address).
#ifdef __cplusplus
#define CUBRIDGE_ALIGNAS(n) alignas(n)
#else
#define CUBRIDGE_ALIGNAS(n) _Alignas(n)
#endif
typedef struct cubridge_attn_fwd_tma_maps {
  CUBRIDGE_ALIGNAS(64) uint64_t map[CUBRIDGE_MAX_TMA][16];
} cubridge_attn_fwd_tma_maps;

typedef struct cubridge_attn_fwd_launch_plan {
  int32_t version;           // CUBRIDGE_PLAN_VERSION
  int32_t status;            // 0 = launchable, 1 = the parameters are refused
  uint64_t workspace_bytes;  // device scratch the call needs (0 for most kernels)
  uint32_t classify_grid;    // block-table kernels: 0 for a lifted kernel
  uint32_t compact_grid;
  uint32_t table_threads;
  uint32_t grid[3];          // the attention kernel's grid, threads and dynamic shared memory
  int32_t threads;
  int32_t smem_bytes;
  // Version 2: the tensor maps the attention kernel takes (0: none, and no third parameter). A
  // loader zero-fills the plan before the plan kernel runs, so a version-1 kernel reads as none.
  int32_t tma_count;
  cubridge_attn_fwd_tma_request tma[CUBRIDGE_MAX_TMA];
  // Persistent kernels (0: not one): the attention kernel strides over its grid's work (grid[0]
  // CTAs' worth, grid[1] = grid[2] = 1), so a launcher may start only
  // min(grid[0], SMs x resident_ctas_per_sm) CTAs; starting all of them is correct too.
  uint32_t resident_ctas_per_sm;
  // Version 3: a persistent kernel whose last wave is partial may split its tail tiles' KV walks
  // across the idle CTAs when the workspace holds split_workspace_bytes more after
  // workspace_bytes (optional: with less the call runs unsplit), and then a combine kernel
  // (`@cuir-entry combine`, same parameters as the block-table kernels) must run after the
  // attention with combine_grid x combine_threads (0: none). It returns at once where the
  // launch did not split.
  uint64_t split_workspace_bytes;
  uint32_t combine_grid;
  uint32_t combine_threads;
  // Input, not output: the SMs the loader launches a persistent kernel on, written into the
  // plan's memory before the plan kernel runs (0: unknown; a loader that zero-fills leaves it
  // so). Knowing them, a kernel names a combine (combine_grid > 0) only for a launch that splits,
  // rather than for every call that may split. A kernel from before this field ignores it.
  uint32_t sm_count;
} cubridge_attn_fwd_launch_plan;

#ifdef __cplusplus
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define CUBRIDGE_ABI_FN inline __host__ __device__
#else
#define CUBRIDGE_ABI_FN inline
#endif
// The CTAs a loader starts for `plan` on a device of `sms` SMs (0: unknown): a persistent
// kernel's grid[0] bounded by what fits at once, min(grid[0], sms x resident_ctas_per_sm); any
// other grid[0] whole. The worker's loader, the nvcc launcher and the plan kernel (whose combine
// depends on how this launch splits) all count them here.
CUBRIDGE_ABI_FN uint32_t cubridge_attn_fwd_launch_ctas(const cubridge_attn_fwd_launch_plan* plan,
                                                       uint32_t sms) {
  const uint32_t fit = sms * plan->resident_ctas_per_sm;
  return fit > 0 && fit < plan->grid[0] ? fit : plan->grid[0];
}
// The 4-D map over captured tensor `b` (CUBRIDGE_TMA_BUFFER0 above): dims innermost first, a
// size 1 where the rank is lower; strides in bytes of dims 1..3, a dimension of size 1 (or one
// the rank lacks) taking the extent inside it. Returns the element size in bytes, or 0 for a
// dtype or rank no map takes. The worker's loader and the nvcc launcher both encode from here;
// the loader also names what TMA refuses (a size below 1, a stride not positive).
CUBRIDGE_ABI_FN int cubridge_attn_fwd_buffer_map_shape(const cubridge_attn_fwd_buffer* b,
                                                       int64_t dims[4], int64_t strides[3]) {
  const int bytes[6] = {4, 8, 1, 4, 2, 2};  // CUBRIDGE_DTYPE_* order
  if (b->dtype < 0 || b->dtype > 5 || b->rank < 1 || b->rank > 4) return 0;
  const int e = bytes[b->dtype];
  int64_t extent = e;  // bytes inside the current dimension
  for (int i = 0; i < 4; ++i) {
    const int d = b->rank - 1 - i;  // the buffer's dimension
    dims[i] = d >= 0 ? b->sizes[d] : 1;
    if (i > 0) {
      strides[i - 1] = d >= 0 && b->sizes[d] > 1 ? b->strides[d] * e : extent;
      extent = strides[i - 1];
    }
    extent *= dims[i];
  }
  return e;
}
#endif  // __cplusplus

#endif  // cubridge_attn_fwd_LAUNCH_ABI_CUH_
