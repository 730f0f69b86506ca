// Expert backward-attention kernel for sm_80 (also builds for sm_90): the CUDA behind
// cuir/experts/fa2_sm80/base_bwd.cuir (issue 29), written here from the FlashAttention-2
// backward's orchestration.
//
// Three launches per call: `preprocess` computes D = rowsum(dO * O) per query row (CuIR: delta)
// and clears the fp32 accumulators; `attention` runs one CTA per (n_block, h, b) grid point,
// which keeps its K/V tile and its dK/dV accumulators (a warp per 16 keys, or at head dim 256 two
// warps per 16 keys splitting the columns) and walks the query blocks (attend_bwd.cuh):
// S^T = K Q^T, the variant's score hooks, P^T from the forward's LSE, dV += P^T dO,
// dP^T = V dO^T, dS^T = P^T (dP^T - D), the variant's gradient hooks, dK += dS^T Q, and dS staged
// in shared memory for dQ += dS K, added into the fp32 accumulator with atomics; `postprocess`
// converts dQ (and under GQA dK and dV, whose query heads add up) to the input dtype.
//
// The variant sits at named hooks of three contexts, as in the forward expert (kernel.cu):
// BwdCall (the call: the forward call's params as `p`, the backward's as `bp`, the builtins and
// the program's buffers), BwdTile (the CTA's K/V tile, its head map, and its walk over query
// blocks) and BwdBlock (one query block: score_mod, mask, buffer_grad, score_grad). Regions are
// named after base_bwd.cuir's constructs (docs/lowering.md); generated code reads the CuIR names
// (n_block, h, b, kv_h, kv_lo, kv_hi, m_block, q_lo, q_hi, BLOCK_M, ..., the builtins) as
// members, and the visitors as the hooks' arguments. This base instance is full attention.
//
// @cuir-arch sm_80
//
// Device entry points by role ({T}, {D}: the element type and head dim of the instance):
// @cuir-entry plan cubridge_attn_bwd_plan
// @cuir-entry classify cubridge_fa2_bwd::cubridge_attn_fwd_classify
// @cuir-entry compact cubridge_fa2_bwd::cubridge_attn_fwd_compact
// @cuir-entry preprocess cubridge_fa2_bwd::attn_bwd_preprocess<{T}>
// @cuir-entry attention cubridge_fa2_bwd::attn_bwd_kernel<{T}, {D}>
// @cuir-entry postprocess cubridge_fa2_bwd::attn_bwd_postprocess<{T}>

// @cuir-region abi
#ifndef cubridge_attn_bwd_ABI_H_
#define cubridge_attn_bwd_ABI_H_
// The params of one backward call and its C entry points (nvcc builds only).
#include "../common/backward_abi.cuh"
#ifdef __cplusplus
extern "C" {
#endif
struct CUstream_st;
// Bytes of device workspace the call needs (less is refused).
size_t cubridge_attn_bwd_workspace_size(const cubridge_attn_bwd_params* p);
// Enqueues the backward on `stream`; returns a cudaError_t value (0 = cudaSuccess),
// cudaErrorInvalidValue (1) for parameters the kernel does not serve.
int cubridge_attn_bwd(const cubridge_attn_bwd_params* p, struct CUstream_st* stream);
#ifdef __cplusplus
}
#endif
#endif  // cubridge_attn_bwd_ABI_H_
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
#include "../common/backward_hooks.cuh"
#include "mainloop_bwd.cuh"
#include "softmax.cuh"
#include "tile.cuh"

namespace cubridge_fa2_bwd {

// @cuir-region tile_params
constexpr int BLOCK_M = 64;
constexpr int BLOCK_N = 128;
constexpr int STAGES = 2;
constexpr int WARPS = 8;
// @cuir-end tile_params

// @cuir-region variant_consts
// @cuir-end variant_consts

constexpr int kTableThreads = 128;  // threads of the table-building kernels

// @cuir-region table_kernel
// @cuir-end table_kernel

// @cuir-region workspace
// The program's block tables (transposed: a row per K tile listing query blocks): their device
// workspace (offsets[i] receives where table i starts), the tiles the classifier visits, the rows
// the compaction visits. None here.
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

// The block-table kernels (classify, then compact), on the regions above.
#include "../common/table_kernels.cuh"

// The warps split the K/V tile's keys in 16-row groups and, where there are more warps than
// groups, the head dim of dK and dV in kDParts parts: each warp then recomputes its group's S^T
// and dP^T over the whole head dim (the parts' products are the same) but holds only its part's
// columns of the two accumulators, which keeps them in registers at head dim 256 (16 keys x 256
// columns x 2 would need 256 of them per thread). For dQ the warps split the query block's 16-row
// m-tiles and, kDqParts ways, the head dim.
static_assert(BLOCK_N % 16 == 0 && WARPS % (BLOCK_N / 16) == 0,
              "each warp owns 16 rows of the K/V tile, every group as many warps");
static_assert(STAGES >= 1, "Q and dO are double-buffered; STAGES is a hint");
constexpr int kKeyGroups = BLOCK_N / 16;
constexpr int kDParts = WARPS / kKeyGroups;
constexpr int kQTiles = BLOCK_M / 16;
static_assert(BLOCK_M % 16 == 0 && WARPS % kQTiles == 0,
              "the warps split the query block's m-tiles evenly for dQ");
constexpr int kDqParts = WARPS / kQTiles;
constexpr int kThreads = WARPS * 32;
constexpr int kBwdClusterX = 1;  // no clusters (common/backward_launch.cuh)

template <int D>
struct BwdTiling {
  static constexpr int NT = BLOCK_M / 8;  // the query block's 8-column n-tiles of S^T
  static constexpr int DT = D / 8;
  static constexpr int kPartCols = D / kDParts;  // a warp's columns of dK and dV
  static constexpr int DTP = kPartCols / 8;
  // K and V, then two stages of Q and dO, then dS, then two stages of the rows' LSE and D.
  static constexpr size_t kTileBytes = size_t(2 * BLOCK_N + 4 * BLOCK_M) * D * 2;
  static constexpr size_t kDsBytes = size_t(BLOCK_M) * BLOCK_N * 2;
  static constexpr size_t kSmemBytes = kTileBytes + kDsBytes + 4 * BLOCK_M * sizeof(float);
  // Whether the tile serves head dim D: a part a whole number of 8-chunk swizzle rows (so that
  // a part's columns are a shift of the tile's addresses), at most 128 columns of each
  // accumulator per warp (64 + 64 registers), dQ's parts whole pairs of d-tiles, and shared
  // memory within an A100's 163 KiB.
  static constexpr bool kServed = kPartCols % 64 == 0 && kPartCols <= 128 &&
                                  (D / 8 / kDqParts) % 2 == 0 && D / 8 / kDqParts > 0 &&
                                  kSmemBytes <= 163 * 1024;
};

// Dynamic shared memory of the head dims the kernel serves at this tile (BwdTiling::kServed),
// 0 for the others: 64 and 128 at the base tile (64 x 128 keys), 128 and 256 at 32 x 64; the
// same in deterministic mode (whose sums go to global memory only).
__host__ __device__ constexpr int bwd_smem_bytes(int head_dim, bool /*deterministic*/) {
  return head_dim == 64 && BwdTiling<64>::kServed     ? static_cast<int>(BwdTiling<64>::kSmemBytes)
         : head_dim == 128 && BwdTiling<128>::kServed ? static_cast<int>(BwdTiling<128>::kSmemBytes)
         : head_dim == 256 && BwdTiling<256>::kServed ? static_cast<int>(BwdTiling<256>::kSmemBytes)
                                                      : 0;
}

// @cuir-region head_check
// The head layouts the head mapping serves: query head h reads kv head h / (heads_q / heads_kv).
__host__ __device__ __forceinline__ bool variant_heads_ok(const cubridge_attn_fwd_params& p) {
  return p.heads_kv > 0 && p.heads_q % p.heads_kv == 0;
}
// @cuir-end head_check

// @cuir-region buffer_check
// The program's buffers are given and long enough. None here.
__host__ __device__ __forceinline__ bool variant_buffers_ok(const cubridge_attn_fwd_params& p) {
  (void)p;
  return true;
}
// @cuir-end buffer_check

// dQ's accumulator row-major (common/backward_kernel.cuh): mma.sync's fragments have no
// wider reduction than a pair.
constexpr int kDqTileRows = 0;
// dQ converted by the postprocess (the fused conversion reads the fragment order).
constexpr bool kDqFused = false;
constexpr bool kPersistent = false;  // a CTA a tile (the grid's)
// The backward's shared pieces: workspace, accumulators, buffer gradients, pre/postprocess.
#include "../common/backward_kernel.cuh"

struct BwdCall {
  const cubridge_attn_bwd_params& bp;
  const cubridge_attn_fwd_params& p;  // the forward call's: buffers, shapes, scale
  char* scratch;    // the backward's own: D and the accumulators (BwdWorkspace)
  char* workspace;  // the program's block tables
  int batch, heads_q, heads_kv, head_dim, seqlen_q, seqlen_kv;
  float softmax_scale;
  BwdWorkspace ws;
  // buffer_grad's add of x into element `offset` of the gradient of the buffer in `slot`.
  __device__ __forceinline__ void grad_add(int slot, long long offset, float x) const {
    if (bp.deterministic) acc_add(scratch + ws.grad[slot], offset, x, true);
    else atomicAdd(bp.buffer_grads[slot] + offset, x);
  }
  // @cuir-region variant_bind
  // @cuir-end variant_bind
};

struct BwdTile : BwdCall {
  // grid n_block < cdiv(seqlen_kv, BLOCK_N), h < heads_q, b < batch
  int n_block, h, b, kv_lo, kv_hi;
  // @cuir-region head_map
  const int kv_h = h / (heads_q / heads_kv);
  // @cuir-end head_map
  // @cuir-region program_lets
  // @cuir-end program_lets

  // body(m_block, m_next, block_full) per visited query block, ascending; m_next is the block
  // after it (KvUnion's kEnd: none), which the mainloop prefetches.
  template <typename F>
  __device__ __forceinline__ void for_each_q_block(F&& body) const {
    // @cuir-region q_range
    const KvUnion<1> q_blocks = {{0}, {cuir_cdiv(seqlen_q, BLOCK_M)}};
    // @cuir-end q_range
    // @cuir-region q_loop
    for (int m_block = q_blocks.first(), m_next; m_block != q_blocks.kEnd; m_block = m_next) {
      m_next = q_blocks.next(m_block + 1);
      const bool block_full = false;
    // @cuir-end q_loop
      body(m_block, m_next, block_full);
    }
  }
};

// The hooks' visitors (common/backward_hooks.cuh), in the order the structured bindings name them. The
// score hooks (score_mod, mask) take the element visitors of score_visit.cuh over the block's
// scores; the gradient hooks take the same shapes, where the element function gets the raw score
// (before any score_mod) in `score` and, for buffer_grad, dS as `ds`: score_grad's function
// leaves d score_mod / d score in `score`, by which the visitor multiplies dS; buffer_grad's adds
// into the learnable buffers' gradients itself. MT x 2 row slots are the thread's query columns,
// NT x 2 column slots its keys (the fragment is transposed).
struct BwdBlock : BwdTile {
  int m_block, q_lo, q_hi;
  bool block_full;
  // @cuir-region block_class
  // @cuir-end block_class
  // @cuir-region qk_scale
  const float qk_scale = softmax_scale;
  // @cuir-end qk_scale
  // The gradient hooks need the raw scores, which the tile keeps only where they exist.
  // @cuir-region keeps_raw_scores
  static constexpr bool kKeepsRawScores = false;
  // @cuir-end keeps_raw_scores
  template <int MT, int NT, typename Visitors>
  __device__ __forceinline__ void score_mod(Visitors&& v) const {
    [[maybe_unused]] auto& [for_each_score, for_each_score_at, for_each_score_row,
                            for_each_score_col] = v;
    // @cuir-region score_mod
    // @cuir-end score_mod
  }
  template <int MT, int NT, typename Visitors>
  __device__ __forceinline__ void mask(Visitors&& v) const {
    [[maybe_unused]] auto& [for_each_score, for_each_score_at, for_each_score_row,
                            for_each_score_col] = v;
    // @cuir-region mask
    // @cuir-end mask
  }
  template <int MT, int NT, typename Visitors>
  __device__ __forceinline__ void buffer_grad(Visitors&& v) const {
    [[maybe_unused]] auto& [for_each_buffer_grad, for_each_buffer_grad_at, for_each_score_row,
                            for_each_score_col] = v;
    // @cuir-region buffer_grad
    // @cuir-end buffer_grad
  }
  template <int MT, int NT, typename Visitors>
  __device__ __forceinline__ void score_grad(Visitors&& v) const {
    [[maybe_unused]] auto& [for_each_score_grad, for_each_score_grad_at, for_each_score_row,
                            for_each_score_col] = v;
    // @cuir-region score_grad
    // @cuir-end score_grad
  }
};

}  // namespace cubridge_fa2_bwd

namespace cubridge_fa2_bwd {
#include "attend_bwd.cuh"

template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    attn_bwd_kernel(const __grid_constant__ cubridge_attn_bwd_params p) {
  const cubridge_attn_fwd_params& f = p.fwd;
  char* const scratch = static_cast<char*>(p.workspace);
  const BwdWorkspace w = bwd_workspace(p);
  const BwdCall call{p, f, scratch, scratch + w.tables, f.batch, f.heads_q,
                     f.heads_kv, D, f.seqlen_q, f.seqlen_kv, f.softmax_scale, w};
  const int n_block = blockIdx.x, kv_lo = n_block * BLOCK_N;
  const BwdTile tile{call, n_block, static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z),
                     kv_lo, min(kv_lo + BLOCK_N, f.seqlen_kv)};
  attend_bwd_tile<T, D>(tile);
}

}  // namespace cubridge_fa2_bwd

#define CUBRIDGE_BWD_EXPERT_NS cubridge_fa2_bwd
#include "../common/backward_launch.cuh"
