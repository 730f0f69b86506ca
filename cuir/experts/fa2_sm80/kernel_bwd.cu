// Expert backward-attention kernel for sm_80 (also builds for sm_90): the CUDA behind
// cuir/experts/fa2_sm80/base_bwd.cuir (issue 29), written here from the FlashAttention-2
// backward's orchestration.
//
// Three launches per call: `preprocess` computes D = rowsum(dO * O) per query row (CuIR: delta)
// and clears the fp32 accumulators; `attention` runs one CTA per (n_block, h, b) grid point,
// which keeps its K/V tile and its dK/dV accumulators and walks the query blocks (attend_bwd.cuh):
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

// One warp per 16 keys of the K/V tile; for dQ the warps split the query block's 16-row m-tiles
// and, PARTS ways, the head dim.
static_assert(BLOCK_N == 16 * WARPS, "each warp owns 16 rows of the K/V tile");
static_assert(STAGES >= 1, "Q and dO are double-buffered; STAGES is a hint");
constexpr int kQTiles = BLOCK_M / 16;
static_assert(WARPS % kQTiles == 0, "the warps split the query block's m-tiles evenly for dQ");
constexpr int kDqParts = WARPS / kQTiles;
constexpr int kThreads = WARPS * 32;
constexpr int kRowThreads = 256;  // threads of the pre- and postprocessing kernels

template <int D>
struct BwdTiling {
  static constexpr int NT = BLOCK_M / 8;  // the query block's 8-column n-tiles of S^T
  static constexpr int DT = D / 8;
  // K and V, then two stages of Q and dO, then dS, then two stages of the rows' LSE and D.
  static constexpr size_t kTileBytes = size_t(2 * BLOCK_N + 4 * BLOCK_M) * D * 2;
  static constexpr size_t kDsBytes = size_t(BLOCK_M) * BLOCK_N * 2;
  static constexpr size_t kSmemBytes = kTileBytes + kDsBytes + 4 * BLOCK_M * sizeof(float);
};

__host__ __device__ __forceinline__ long long cuir_buffer_numel(const cubridge_attn_fwd_buffer& b) {
  long long n = 1;
  for (int d = 0; d < b.rank; ++d) n *= b.sizes[d];
  return n;
}

// Where the call's scratch lies in the workspace: D (rows), dQ's accumulator and, under GQA,
// dK's and dV's, in deterministic mode the learnable buffers' (grad[slot]), then the program's
// block tables (at `tables`, variant_workspace's layout). Accumulators are fp32, or 64-bit fixed
// point in deterministic mode (cubridge_attn_bwd_params::deterministic).
struct BwdWorkspace {
  size_t delta, dq, dk, dv, grad[CUBRIDGE_MAX_BUFFERS], tables, total;
};
__host__ __device__ __forceinline__ BwdWorkspace bwd_workspace(const cubridge_attn_bwd_params& p) {
  const cubridge_attn_fwd_params& f = p.fwd;
  const size_t rows = size_t(f.batch) * f.heads_q * f.seqlen_q;
  const size_t kv_rows = size_t(f.batch) * f.heads_kv * f.seqlen_kv;
  const size_t elem = p.deterministic ? sizeof(unsigned long long) : sizeof(float);
  auto round = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  BwdWorkspace w;
  w.delta = 0;
  w.dq = round(rows * sizeof(float));
  w.dk = w.dq + round(rows * f.head_dim * elem);
  const bool gqa = f.heads_q != f.heads_kv;
  w.dv = w.dk + (gqa ? round(kv_rows * f.head_dim * elem) : 0);
  size_t at = w.dv + (gqa ? round(kv_rows * f.head_dim * elem) : 0);
  for (int i = 0; i < CUBRIDGE_MAX_BUFFERS; ++i) {
    w.grad[i] = at;
    if (p.deterministic && p.buffer_grads[i] != nullptr) {
      at += round(size_t(cuir_buffer_numel(f.buffers[i])) * elem);
    }
  }
  w.tables = at;
  w.total = w.tables + variant_workspace(f, nullptr);
  return w;
}

// An accumulator's element i gets x: a float atomic (fast mode), or a 64-bit fixed-point one
// (deterministic mode: integer adds are associative, so any order gives the same bits).
constexpr double kFixedOne = 4294967296.0;  // 2^32: the fixed point's unit is 2^-32
__device__ __forceinline__ void acc_add(char* acc, long long i, float x, bool deterministic) {
  if (deterministic) {
    atomicAdd(reinterpret_cast<unsigned long long*>(acc) + i,
              static_cast<unsigned long long>(__double2ll_rn(static_cast<double>(x) * kFixedOne)));
  } else {
    atomicAdd(reinterpret_cast<float*>(acc) + i, x);
  }
}
__device__ __forceinline__ float acc_read(const char* acc, long long i, bool deterministic) {
  if (!deterministic) return reinterpret_cast<const float*>(acc)[i];
  const long long fixed = static_cast<long long>(reinterpret_cast<const unsigned long long*>(acc)[i]);
  return static_cast<float>(static_cast<double>(fixed) / kFixedOne);
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

// A learnable buffer's gradient (contiguous in the buffer's shape) at the element its read
// reaches: the index Python-wrapped as reads are (-size <= i < size, negatives from the end).
__device__ __forceinline__ long long cuir_grad_offset(const cubridge_attn_fwd_buffer& b) {
  (void)b;
  return 0;
}
template <typename... I>
__device__ __forceinline__ long long cuir_grad_offset(const cubridge_attn_fwd_buffer& b,
                                                      I... index) {
  const long long at[] = {static_cast<long long>(index)...};
  long long flat = 0;
#pragma unroll
  for (int d = 0; d < static_cast<int>(sizeof...(I)); ++d) {
    flat = flat * b.sizes[d] + (at[d] < 0 ? at[d] + b.sizes[d] : at[d]);
  }
  return flat;
}

// A thread's adds into one buffer gradient, coalesced: consecutive adds to one element sum in a
// register, and where every lane of the warp holds the same element (a learnable slope, which
// every score of a head reads) the warp adds once. Without it each score is an atomic on a few
// addresses (a learnable ALiBi backward ran at 5 TFLOP/s). flush() needs the whole warp.
struct GradRun {
  long long offset = -1;  // the element being summed; -1: none yet
  float sum = 0.f;
  template <typename Call>
  __device__ __forceinline__ void add(const Call& call, int slot, long long at, float x) {
    if (at == offset) {
      sum += x;
      return;
    }
    if (offset >= 0) call.grad_add(slot, offset, sum);
    offset = at;
    sum = x;
  }
  template <typename Call>
  __device__ __forceinline__ void flush(const Call& call, int slot) {
    const long long first = __shfl_sync(0xffffffffu, offset, 0);
    if (__all_sync(0xffffffffu, offset == first)) {
      float total = sum;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
      if ((threadIdx.x & 31) == 0 && first >= 0) call.grad_add(slot, first, total);
    } else if (offset >= 0) {
      call.grad_add(slot, offset, sum);
    }
  }
};

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

// The hooks' visitors (attend_bwd.cuh), in the order the structured bindings name them. The
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

// delta: D[b, h, i] = sum_d dO[b, h, i, d] * O[b, h, i, d] in fp32, one warp per row; and the
// fp32 accumulators cleared.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    attn_bwd_preprocess(const __grid_constant__ cubridge_attn_bwd_params p) {
  const cubridge_attn_fwd_params& f = p.fwd;
  const BwdWorkspace w = bwd_workspace(p);
  char* ws = static_cast<char*>(p.workspace);
  float* delta = reinterpret_cast<float*>(ws + w.delta);
  const long long rows = static_cast<long long>(f.batch) * f.heads_q * f.seqlen_q;
  const int lane = threadIdx.x & 31;
  const long long warps = static_cast<long long>(gridDim.x) * (kRowThreads / 32);
  for (long long row = blockIdx.x * (kRowThreads / 32) + (threadIdx.x >> 5); row < rows;
       row += warps) {
    const int i = static_cast<int>(row % f.seqlen_q);
    const int h = static_cast<int>(row / f.seqlen_q % f.heads_q);
    const int b = static_cast<int>(row / f.seqlen_q / f.heads_q);
    const T* o = static_cast<const T*>(f.o) + b * f.o_batch_stride + h * f.o_head_stride +
                 i * f.o_row_stride;
    const T* d_o = static_cast<const T*>(p.d_o) + b * p.do_batch_stride + h * p.do_head_stride +
                   i * p.do_row_stride;
    float sum = 0.f;
    for (int d = lane; d < f.head_dim; d += 32) {
      sum += cubridge::fa2::ElemTraitsConvert<T>::to(o[d]) *
             cubridge::fa2::ElemTraitsConvert<T>::to(d_o[d]);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == 0) delta[row] = sum;
  }
  // The accumulators (dQ's; under GQA dK's and dV's; in deterministic mode the buffer
  // gradients') are contiguous after D's rows.
  float4* acc = reinterpret_cast<float4*>(ws + w.dq);
  const long long n4 = static_cast<long long>(w.tables - w.dq) / 16;
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  for (long long i = blockIdx.x * kRowThreads + threadIdx.x; i < n4;
       i += static_cast<long long>(gridDim.x) * kRowThreads) {
    acc[i] = zero;
  }
}

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

// dQ from its accumulator (already scaled) and, under GQA, dK and dV from theirs.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    attn_bwd_postprocess(const __grid_constant__ cubridge_attn_bwd_params p) {
  const cubridge_attn_fwd_params& f = p.fwd;
  const BwdWorkspace w = bwd_workspace(p);
  const char* ws = static_cast<const char*>(p.workspace);
  const long long stride = static_cast<long long>(gridDim.x) * kRowThreads;
  const long long start = blockIdx.x * kRowThreads + threadIdx.x;
  const bool det = p.deterministic != 0;
  auto convert = [&](const char* acc, void* out, int heads, int seqlen, int64_t bs, int64_t hs,
                     int64_t rs) {
    const long long n = static_cast<long long>(f.batch) * heads * seqlen * f.head_dim;
    for (long long i = start; i < n; i += stride) {
      const int d = static_cast<int>(i % f.head_dim);
      const long long row = i / f.head_dim;
      const int s = static_cast<int>(row % seqlen);
      const int h = static_cast<int>(row / seqlen % heads);
      const int b = static_cast<int>(row / seqlen / heads);
      static_cast<T*>(out)[b * bs + h * hs + s * rs + d] =
          cubridge::fa2::ElemTraitsConvert<T>::from(acc_read(acc, i, det));
    }
  };
  convert(ws + w.dq, p.dq, f.heads_q, f.seqlen_q, p.dq_batch_stride, p.dq_head_stride,
          p.dq_row_stride);
  if (f.heads_q != f.heads_kv) {
    convert(ws + w.dk, p.dk, f.heads_kv, f.seqlen_kv, p.dk_batch_stride, p.dk_head_stride,
            p.dk_row_stride);
    convert(ws + w.dv, p.dv, f.heads_kv, f.seqlen_kv, p.dv_batch_stride, p.dv_head_stride,
            p.dv_row_stride);
  }
  // Deterministic mode: the buffer gradients, from their fixed-point accumulators, written whole.
  if (!det) return;
  for (int slot = 0; slot < CUBRIDGE_MAX_BUFFERS; ++slot) {
    if (p.buffer_grads[slot] == nullptr) continue;
    const long long n = cuir_buffer_numel(f.buffers[slot]);
    for (long long i = start; i < n; i += stride) {
      p.buffer_grads[slot][i] = acc_read(ws + w.grad[slot], i, true);
    }
  }
}

__host__ __device__ __forceinline__ bool aligned_16(const void* ptr, int64_t row_stride) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && row_stride % 8 == 0;
}

}  // namespace cubridge_fa2_bwd

// What one call enqueues (cubridge_attn_bwd_launch_plan, common/backward_abi.cuh), computed from
// the parameters by one function for the host launcher below and the device's plan kernel.
__host__ __device__ __forceinline__ void cubridge_attn_bwd_make_plan(
    const cubridge_attn_bwd_params& p, cubridge_attn_bwd_launch_plan* plan) {
  using namespace cubridge_fa2_bwd;
  *plan = cubridge_attn_bwd_launch_plan{};
  plan->version = CUBRIDGE_BWD_PLAN_VERSION;
  plan->status = 1;
  const cubridge_attn_fwd_params& f = p.fwd;
  if (f.q == nullptr || f.k == nullptr || f.v == nullptr || f.o == nullptr || f.lse == nullptr ||
      p.d_o == nullptr || p.dq == nullptr || p.dk == nullptr || p.dv == nullptr ||
      f.batch <= 0 || f.heads_q <= 0 || f.heads_kv <= 0 || f.seqlen_q <= 0 ||
      f.seqlen_kv <= 0 || f.batch > 65535 || f.heads_q > 65535 || f.heads_q % f.heads_kv != 0 ||
      (f.dtype != 0 && f.dtype != 1) || !aligned_16(f.q, f.q_row_stride) ||
      !aligned_16(f.k, f.k_row_stride) || !aligned_16(f.v, f.v_row_stride) ||
      !aligned_16(p.d_o, p.do_row_stride) || !variant_heads_ok(f) || !variant_buffers_ok(f)) {
    return;
  }
  switch (f.head_dim) {
    case 64: plan->smem_bytes = static_cast<int>(BwdTiling<64>::kSmemBytes); break;
    case 128: plan->smem_bytes = static_cast<int>(BwdTiling<128>::kSmemBytes); break;
    default: return;  // hdim 256: not yet (the accumulators need a narrower tile)
  }
  const BwdWorkspace w = bwd_workspace(p);
  plan->workspace_bytes = w.total;
  plan->tables_offset = w.tables;
  plan->row_grid = 1024;  // grid-stride loops: enough CTAs to fill any GPU
  plan->row_threads = kRowThreads;
  // The block tables (transposed: per K tile, its query blocks).
  const long long tiles = variant_table_tiles(f), rows = variant_table_rows(f);
  plan->classify_grid = static_cast<uint32_t>(cuir_min<long long>(tiles, 16384));
  plan->compact_grid =
      static_cast<uint32_t>(cuir_min<long long>(cuir_cdiv<long long>(rows, kTableThreads), 16384));
  plan->table_threads = kTableThreads;
  plan->grid[0] = static_cast<uint32_t>(cuir_cdiv(f.seqlen_kv, BLOCK_N));
  plan->grid[1] = static_cast<uint32_t>(f.heads_q);
  plan->grid[2] = static_cast<uint32_t>(f.batch);
  plan->threads = kThreads;
  plan->status = 0;
}

extern "C" __global__ void cubridge_attn_bwd_plan(const cubridge_attn_bwd_params p,
                                                  cubridge_attn_bwd_launch_plan* plan) {
  cubridge_attn_bwd_make_plan(p, plan);
}

#ifndef __CUDACC_RTC__
extern "C" size_t cubridge_attn_bwd_workspace_size(const cubridge_attn_bwd_params* p) {
  return cubridge_fa2_bwd::bwd_workspace(*p).total;
}

namespace cubridge_fa2_bwd {
template <typename T, int D>
static int launch_bwd(const cubridge_attn_bwd_params* p, const cubridge_attn_bwd_launch_plan& plan,
                      cudaStream_t stream) {
  attn_bwd_preprocess<T><<<plan.row_grid, plan.row_threads, 0, stream>>>(*p);
  if (plan.classify_grid > 0) {
    char* tables = static_cast<char*>(p->workspace) + plan.tables_offset;
    cubridge_attn_fwd_classify<<<plan.classify_grid, plan.table_threads, 0, stream>>>(p->fwd,
                                                                                     tables);
    cubridge_attn_fwd_compact<<<plan.compact_grid, plan.table_threads, 0, stream>>>(p->fwd, tables);
  }
  cudaError_t err = cudaFuncSetAttribute(attn_bwd_kernel<T, D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         plan.smem_bytes);
  if (err != cudaSuccess) return err;
  attn_bwd_kernel<T, D><<<dim3(plan.grid[0], plan.grid[1], plan.grid[2]), plan.threads,
                          plan.smem_bytes, stream>>>(*p);
  attn_bwd_postprocess<T><<<plan.row_grid, plan.row_threads, 0, stream>>>(*p);
  return cudaGetLastError();
}
template <typename T>
static int launch_bwd_head_dim(const cubridge_attn_bwd_params* p,
                               const cubridge_attn_bwd_launch_plan& plan, cudaStream_t stream) {
  switch (p->fwd.head_dim) {
    case 64: return launch_bwd<T, 64>(p, plan, stream);
    case 128: return launch_bwd<T, 128>(p, plan, stream);
    default: return cudaErrorInvalidValue;
  }
}
}  // namespace cubridge_fa2_bwd

// Enqueues the backward on `stream`; cudaErrorInvalidValue (1) for parameters it does not serve.
extern "C" int cubridge_attn_bwd(const cubridge_attn_bwd_params* p, struct CUstream_st* stream) {
  using namespace cubridge_fa2_bwd;
  if (p == nullptr) return cudaErrorInvalidValue;
  cubridge_attn_bwd_launch_plan plan;
  cubridge_attn_bwd_make_plan(*p, &plan);
  if (plan.status != 0 || p->workspace_size < plan.workspace_bytes) return cudaErrorInvalidValue;
  return p->fwd.dtype == 0 ? launch_bwd_head_dim<__nv_bfloat16>(p, plan, stream)
                           : launch_bwd_head_dim<__half>(p, plan, stream);
}
#endif  // __CUDACC_RTC__
