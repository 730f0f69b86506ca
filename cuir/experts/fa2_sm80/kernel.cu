// Expert forward-attention kernel for sm_80 (also builds for sm_90): the CUDA behind
// cuir/experts/fa2_sm80/base.cuir, one CTA per (m_block, h, b) grid point.
//
// FlashAttention-2 orchestration on tensor cores: the Q tile stays in shared memory, K and V
// blocks stream through cp.async (V's load overlaps QK^T and the softmax, the next K's load
// overlaps PV), S and P live in registers as mma.sync fragments, the online softmax is fp32 and P
// is rounded to the input dtype as the second MMA's operand. The kernel entry builds the
// variant's contexts and calls the CTA's collective (attend.cuh), on the tile pieces in tile.cuh,
// mainloop.cuh, softmax.cuh, stream.cuh and epilogue.cuh (all inlined into every lowered kernel).
//
// Regions: each `// @cuir-region NAME` ... `// @cuir-end NAME` pair implements one CuIR construct
// of base.cuir, as in every expert (docs/lowering.md): copied when the program's construct equals
// the base program's, regenerated otherwise. None sits inside a function of the kernel: those the
// device runs are members and hook bodies of the variant's contexts (VariantCall, VariantTile,
// VariantBlock, below), which the collective calls at named hooks; the generated code reads the
// CuIR names (m_block, h, b, kv_h, q_lo, q_hi, n_block, kv_lo, kv_hi, BLOCK_M, ..., the builtins
// batch, heads_q, ..., softmax_scale) as members, and the score visitors (for_each_score, ...) as
// the hooks' arguments. Identifiers starting with `cubridge_attn_fwd` are renamed after the
// program's kernel.
//
// The GPU target the code is written for (the lowering refuses an older one):
// @cuir-arch sm_80
//
// Device entry points by role, for loaders of the NVRTC-compiled module (worker/gpu/module.h);
// {T} and {D} are the element type and head dim of the instance:
// @cuir-entry plan cubridge_attn_fwd_plan
// @cuir-entry classify cubridge_fa2::cubridge_attn_fwd_classify
// @cuir-entry compact cubridge_fa2::cubridge_attn_fwd_compact
// @cuir-entry attention cubridge_fa2::attn_fwd_kernel<{T}, {D}>

// @cuir-region abi
#ifndef cubridge_attn_fwd_ABI_H_
#define cubridge_attn_fwd_ABI_H_
// The params struct of one call (one forward attention: tensors [batch, heads, seqlen, head_dim]
// with unit stride along head_dim, strides in elements, lse fp32 [batch, heads_q, seqlen_q]) and
// the launch plan, shared by every expert; the lowering inlines it here.
#include "../common/launch_abi.cuh"
#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;  // cudaStream_t without the CUDA headers

// Bytes of device workspace for the call: its block tables' (0 without tables; less is refused)
// and, where the kernel can split its last partial wave, the bytes that let it (optional).
size_t cubridge_attn_fwd_workspace_size(const cubridge_attn_fwd_params* p);
// Enqueues the attention on `stream`; returns a cudaError_t value (0 = cudaSuccess).
// cudaErrorInvalidValue (1) for unusable parameters.
int cubridge_attn_fwd(const cubridge_attn_fwd_params* p, struct CUstream_st* stream);
// The two halves of cubridge_attn_fwd, for layers that share one mask: the block tables depend
// only on the buffers and the shapes, so they may be built once into p->workspace and each
// layer's call then runs the attention alone, as FlexAttention reuses one block mask. Build them
// again after any change of the buffers or shapes. Without tables, _tables enqueues nothing.
int cubridge_attn_fwd_tables(const cubridge_attn_fwd_params* p, struct CUstream_st* stream);
int cubridge_attn_fwd_attention(const cubridge_attn_fwd_params* p, struct CUstream_st* stream);

#ifdef __cplusplus
}
#endif
#endif  // cubridge_attn_fwd_ABI_H_
// @cuir-end abi

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#ifndef __CUDACC_RTC__
#include <cuda_runtime.h>
#endif

#include "../common/cuir_platform.cuh"
#include "../common/cuir_scalar.cuh"
#include "../common/kv_blocks.cuh"
#include "../common/score_visit.cuh"
#include "../common/stream_rows.cuh"
#include "epilogue.cuh"
#include "mainloop.cuh"
#include "softmax.cuh"
#include "tile.cuh"

namespace cubridge_fa2 {

// @cuir-region tile_params
constexpr int BLOCK_M = 128;
constexpr int BLOCK_N = 64;
constexpr int STAGES = 2;
constexpr int WARPS = 4;
// @cuir-end tile_params

// @cuir-region variant_consts
// @cuir-end variant_consts

// hdim 256 doubles the warps (when the tile has rows for them) so each warp keeps 16 query rows:
// 32 rows of a 256-wide fp32 accumulator would not fit in registers.
template <int D>
constexpr int kWarpsFor = D > 128 && BLOCK_M >= 32 * WARPS ? 2 * WARPS : WARPS;
template <int D>
constexpr int kThreadsFor = kWarpsFor<D> * 32;
static_assert(STAGES >= 1, "K and V are double-buffered against each other; STAGES is a hint");
constexpr int kTableThreads = 128;  // threads of the table-building kernels

// @cuir-region table_kernel
// @cuir-end table_kernel

// @cuir-region workspace
// The program's block tables: their device workspace (offsets[i] receives where table i
// starts), the tiles the classifier visits, the rows the compaction visits. None here.
__host__ __device__ __forceinline__ size_t variant_workspace(const cubridge_attn_fwd_params& p,
                                                             size_t* offsets) {
  (void)p, (void)offsets;
  return 0;
}
__host__ __device__ __forceinline__ long long variant_table_tiles(const cubridge_attn_fwd_params& p) {
  (void)p;
  return 0;
}
__host__ __device__ __forceinline__ long long variant_table_rows(const cubridge_attn_fwd_params& p) {
  (void)p;
  return 0;
}
__device__ __forceinline__ bool variant_decide_tile(const cubridge_attn_fwd_params& p,
                                                    char* workspace, long long tile) {
  (void)p, (void)workspace, (void)tile;
  return false;
}
__device__ __forceinline__ void variant_classify_tile(const cubridge_attn_fwd_params& p,
                                                      char* workspace, long long tile) {
  (void)p, (void)workspace, (void)tile;
}
__device__ __forceinline__ void variant_compact_row(const cubridge_attn_fwd_params& p,
                                                    char* workspace, long long row) {
  (void)p, (void)workspace, (void)row;
}
// @cuir-end workspace

// @cuir-region head_check
// The head layouts the head mapping serves: this one maps query head h to kv head h (MHA only).
__host__ __device__ __forceinline__ bool variant_heads_ok(const cubridge_attn_fwd_params& p) {
  return p.heads_q == p.heads_kv;
}
// @cuir-end head_check

// @cuir-region buffer_check
// The program's buffers are given and long enough. None here.
__host__ __device__ __forceinline__ bool variant_buffers_ok(const cubridge_attn_fwd_params& p) {
  (void)p;
  return true;
}
// @cuir-end buffer_check

// @cuir-region tile_stream
// The captured tensor a score_mod or mask reads at [..., q_idx, kv_idx], which comes tile by tile
// beside K (stream.cuh): its slot in p.buffers (-1: none), rank and element type.
constexpr int kStreamBuffer = -1;
constexpr int kStreamRank = 2;
using StreamElem = unsigned char;
// @cuir-end tile_stream

// The block-table kernels (classify, then compact), on the regions above.
#include "../common/table_kernels.cuh"

// The fragment shapes of one warp: MT m-tiles of 16 query rows, the score block as NT n-tiles of
// 8 keys, the output as DT n-tiles of 8 head-dim columns.
template <int D>
struct Tiling {
  static constexpr int kWarps = kWarpsFor<D>;
  static constexpr int MT = BLOCK_M / (16 * kWarps);
  static constexpr int NT = BLOCK_N / 8;
  static constexpr int DT = D / 8;
  static constexpr size_t kBaseBytes = size_t(BLOCK_M + 2 * BLOCK_N) * D * 2;
  // A streamed tensor's tile after V where the total stays within an A100's 163 KB per block;
  // otherwise the instance reads it per score from global memory.
  static constexpr bool kStream =
      kStreamBuffer >= 0 &&
      kBaseBytes + CuirStreamRows<StreamElem, BLOCK_M, BLOCK_N, true>::kBytes <= 160 * 1024;
  using Stream = CuirStreamRows<StreamElem, BLOCK_M, BLOCK_N, kStream>;
  static constexpr size_t kSmemBytes = kBaseBytes + Stream::kBytes;
  static_assert(MT >= 1 && BLOCK_M == MT * 16 * kWarps, "BLOCK_M must be 16 * warps * m-tiles");
  static_assert(BLOCK_N % 16 == 0, "BLOCK_N must be a multiple of 16");
};

// The variant at named hooks (docs/lowering.md, "Variant hooks"), as in every expert: three
// contexts, each the one before plus what it adds. VariantCall: the call's builtins, params and
// workspace, and the program's buffers and tables (variant_bind). VariantTile: the CTA's work
// tile (grid indices), its head map, the program's values hoisted to the tile, the streamed
// tensor's coordinates, the walk over the visited KV blocks, and the epilogue hooks.
// VariantBlock: one KV block's bounds, whether its table entry marked it full, the block lets,
// qk_scale, and the hooks that change scores. Generated regions are member declarations and
// hook bodies, reading every name of their context unqualified; the defaults here are the base
// program's.
using cubridge::fa2::kLog2e;  // the softmax's unit, which a generated sink is given in

struct VariantCall {
  const cubridge_attn_fwd_params& p;
  char* workspace;
  int batch, heads_q, heads_kv, head_dim, seqlen_q, seqlen_kv;
  float softmax_scale;
  // @cuir-region variant_bind
  // @cuir-end variant_bind
};

struct VariantTile : VariantCall {
  // grid m_block < cdiv(seqlen_q, BLOCK_M), h < heads_q, b < batch
  int m_block, h, b, q_lo, q_hi;
  // @cuir-region head_map
  const int kv_h = h;
  // @cuir-end head_map
  // @cuir-region program_lets
  // @cuir-end program_lets
  // @cuir-region stream_coords
  // The streamed tensor's indices before [q_idx, kv_idx] for this work tile (dimensions
  // rank - 3 and rank - 4): none here.
  const int stream_c2 = 0, stream_c3 = 0;
  // @cuir-end stream_coords

  // body(n_block, n_next, block_full) per visited KV block, ascending; n_next is the block
  // after it (INT_MAX: none), which the mainloop prefetches.
  template <typename F>
  __device__ __forceinline__ void for_each_kv_block(F&& body) const {
    // @cuir-region kv_range
    const KvUnion<1> kv_blocks = {{0}, {cuir_cdiv(seqlen_kv, BLOCK_N)}};
    // @cuir-end kv_range
    // @cuir-region kv_loop
    for (int n_block = kv_blocks.first(), n_next; n_block != kv_blocks.kEnd; n_block = n_next) {
      n_next = kv_blocks.next(n_block + 1);
      const bool block_full = false;
    // @cuir-end kv_loop
      body(n_block, n_next, block_full);
    }
  }

  // A sink's mass, into the softmax's row sums and this thread's accumulator (softmax.add_sink,
  // in log2 units).
  template <typename Softmax, typename Acc>
  __device__ __forceinline__ void epilogue_sink(Softmax& softmax, Acc& acc, int lane) const {
    (void)softmax, (void)acc, (void)lane;
    // @cuir-region epilogue_sink
    // @cuir-end epilogue_sink
  }
  // A score_mod's terms that are the same along a row, added to that row's LSE only
  // (docs/lowering.md, SplitRowTerms): shift_lse_rows(f) with f(q_idx, q_f) in score units.
  template <typename ShiftRows>
  __device__ __forceinline__ void epilogue_rows(ShiftRows&& shift_lse_rows) const {
    (void)shift_lse_rows;
    // @cuir-region epilogue_rows
    // @cuir-end epilogue_rows
  }
};

struct VariantBlock : VariantTile {
  int n_block, kv_lo, kv_hi;
  bool block_full;
  // @cuir-region block_class
  // @cuir-end block_class
  // @cuir-region qk_scale
  const float qk_scale = softmax_scale;
  // @cuir-end qk_scale

  // The program's score_mods, then its masks, on one block's scores (attend.cuh: the visitors;
  // MT x 2 row slots and NT x 2 column slots per thread) and the streamed tensor's tile.
  template <int MT, int NT, typename Visitors, typename Stream>
  __device__ __forceinline__ void score_mod(Visitors&& v, const Stream& stream_tile) const {
    [[maybe_unused]] auto& [for_each_score, for_each_score_at, for_each_score_row,
                            for_each_score_col] = v;
    (void)stream_tile;
    // @cuir-region score_mod
    // @cuir-end score_mod
  }
  template <int MT, int NT, typename Visitors, typename Stream>
  __device__ __forceinline__ void mask(Visitors&& v, const Stream& stream_tile) const {
    [[maybe_unused]] auto& [for_each_score, for_each_score_at, for_each_score_row,
                            for_each_score_col] = v;
    (void)stream_tile;
    // @cuir-region mask
    // @cuir-end mask
  }
};

#include "attend.cuh"

// The attention kernel: one CTA per (m_block, h, b) work tile.
template <typename T, int D>
__global__ void __launch_bounds__(kThreadsFor<D>)
    attn_fwd_kernel(const __grid_constant__ cubridge_attn_fwd_params p,
                    char* __restrict__ workspace) {
  const VariantCall call{p, workspace, p.batch, p.heads_q, p.heads_kv, D, p.seqlen_q, p.seqlen_kv,
                         p.softmax_scale};
  const int m_block = blockIdx.x, q_lo = m_block * BLOCK_M;
  const VariantTile tile{call, m_block, static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z),
                         q_lo, min(q_lo + BLOCK_M, p.seqlen_q)};
  attend_tile<T, D>(tile);
}

// cp.async moves 16-byte chunks: rows must start 16-byte aligned.
__host__ __device__ __forceinline__ bool aligned_16(const void* ptr, int64_t row_stride) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && row_stride % 8 == 0;
}

template <int D>
__host__ __device__ __forceinline__ void main_launch(int* threads, int* smem_bytes) {
  *threads = kThreadsFor<D>;
  *smem_bytes = static_cast<int>(Tiling<D>::kSmemBytes);
}

}  // namespace cubridge_fa2

// What one call enqueues (cubridge_attn_fwd_launch_plan, common/launch_abi.cuh), computed from
// the parameters alone by one function that runs on the host (the launcher below, built by nvcc)
// and on the device (cubridge_attn_fwd_plan, which a loader of an NVRTC-compiled module runs
// first).
__host__ __device__ __forceinline__ void cubridge_attn_fwd_make_plan(
    const cubridge_attn_fwd_params& p, cubridge_attn_fwd_launch_plan* plan) {
  using namespace cubridge_fa2;
  *plan = cubridge_attn_fwd_launch_plan{};
  plan->version = CUBRIDGE_PLAN_VERSION;
  plan->status = 1;
  if (p.q == nullptr || p.k == nullptr || p.v == nullptr || p.o == nullptr || p.lse == nullptr ||
      p.batch <= 0 || p.heads_q <= 0 || p.heads_kv <= 0 || p.seqlen_q <= 0 || p.seqlen_kv <= 0 ||
      p.batch > 65535 || p.heads_q > 65535 || (p.dtype != 0 && p.dtype != 1) ||
      !aligned_16(p.q, p.q_row_stride) || !aligned_16(p.k, p.k_row_stride) ||
      !aligned_16(p.v, p.v_row_stride) || !aligned_16(p.o, p.o_row_stride) ||
      !variant_heads_ok(p) || !variant_buffers_ok(p)) {
    return;
  }
  switch (p.head_dim) {
    case 64: main_launch<64>(&plan->threads, &plan->smem_bytes); break;
    case 128: main_launch<128>(&plan->threads, &plan->smem_bytes); break;
    case 256: main_launch<256>(&plan->threads, &plan->smem_bytes); break;
    default: return;
  }
  plan->workspace_bytes = variant_workspace(p, nullptr);
  // Enough CTAs to fill any GPU; the grid-stride loops cover the rest.
  const long long tiles = variant_table_tiles(p);
  const long long rows = variant_table_rows(p);
  plan->classify_grid = static_cast<uint32_t>(cuir_min<long long>(tiles, 16384));
  plan->compact_grid =
      static_cast<uint32_t>(cuir_min<long long>(cuir_cdiv<long long>(rows, kTableThreads), 16384));
  plan->table_threads = kTableThreads;
  plan->grid[0] = static_cast<uint32_t>(cuir_cdiv(p.seqlen_q, BLOCK_M));
  plan->grid[1] = static_cast<uint32_t>(p.heads_q);
  plan->grid[2] = static_cast<uint32_t>(p.batch);
  plan->status = 0;
}

extern "C" __global__ void cubridge_attn_fwd_plan(const cubridge_attn_fwd_params p,
                                                  cubridge_attn_fwd_launch_plan* plan) {
  cubridge_attn_fwd_make_plan(p, plan);
}

#ifndef __CUDACC_RTC__
namespace cubridge_fa2 {

template <typename T, int D>
static int launch(const cubridge_attn_fwd_params* p, const cubridge_attn_fwd_launch_plan& plan,
                  cudaStream_t stream) {
  cudaError_t err = cudaFuncSetAttribute(
      attn_fwd_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, plan.smem_bytes);
  if (err != cudaSuccess) return err;
  const dim3 grid(plan.grid[0], plan.grid[1], plan.grid[2]);
  attn_fwd_kernel<T, D><<<grid, plan.threads, plan.smem_bytes, stream>>>(
      *p, static_cast<char*>(p->workspace));
  return cudaGetLastError();
}

template <typename T>
static int launch_head_dim(const cubridge_attn_fwd_params* p,
                           const cubridge_attn_fwd_launch_plan& plan, cudaStream_t stream) {
  switch (p->head_dim) {
    case 64: return launch<T, 64>(p, plan, stream);
    case 128: return launch<T, 128>(p, plan, stream);
    case 256: return launch<T, 256>(p, plan, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace cubridge_fa2

#define CUBRIDGE_EXPERT_NS cubridge_fa2
#include "../common/c_launcher.cuh"
#endif  // __CUDACC_RTC__
