// Expert forward-attention kernel for sm_80 (also builds for sm_90): the CUDA behind
// cuir/experts/fa2_sm80/base.cuir, one CTA per (m_block, h, b) grid point.
//
// FlashAttention-2 orchestration on tensor cores: the Q tile stays in shared memory, K and V
// blocks stream through cp.async (V's load overlaps QK^T and the softmax, the next K's load
// overlaps PV), S and P live in registers as mma.sync fragments, the online softmax is fp32 and P
// is rounded to the input dtype as the second MMA's operand. The tile pieces are in tile.cuh,
// mainloop.cuh, softmax.cuh and epilogue.cuh (inlined into every lowered kernel).
//
// Regions: each `// @cuir-region NAME` ... `// @cuir-end NAME` pair implements one CuIR construct
// of base.cuir. The lowering (cuir/lower, docs/lowering.md) copies a region verbatim when the
// program's construct equals the base program's and regenerates it otherwise. Names the regions
// rely on are the CuIR names themselves (m_block, h, b, kv_h, q_lo, q_hi, n_block, kv_lo, kv_hi,
// BLOCK_M, ..., the builtins batch, heads_q, ..., softmax_scale), so generated code reads them
// directly. Identifiers starting with `cubridge_attn_fwd` are renamed after the program's kernel.
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
#include "epilogue.cuh"
#include "mainloop.cuh"
#include "softmax.cuh"
#include "stream.cuh"
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
      kBaseBytes + cubridge::fa2::StreamTile80<StreamElem, BLOCK_M, BLOCK_N, true>::kBytes <= 160 * 1024;
  using Stream = cubridge::fa2::StreamTile80<StreamElem, BLOCK_M, BLOCK_N, kStream>;
  static constexpr size_t kSmemBytes = kBaseBytes + Stream::kBytes;
  static_assert(MT >= 1 && BLOCK_M == MT * 16 * kWarps, "BLOCK_M must be 16 * warps * m-tiles");
  static_assert(BLOCK_N % 16 == 0, "BLOCK_N must be a multiple of 16");
};

template <typename T, int D>
__global__ void __launch_bounds__(kThreadsFor<D>)
    attn_fwd_kernel(const cubridge_attn_fwd_params p, char* __restrict__ workspace) {
  using namespace cubridge::fa2;
  constexpr int MT = Tiling<D>::MT, NT = Tiling<D>::NT, DT = Tiling<D>::DT;
  constexpr int kThreads = kThreadsFor<D>;
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ __align__(128) unsigned char smem[];
  const SmemTile<T, BLOCK_M, D> sQ{reinterpret_cast<T*>(smem)};
  const SmemTile<T, BLOCK_N, D> sK{sQ.base + BLOCK_M * D};
  const SmemTile<T, BLOCK_N, D> sV{sK.base + BLOCK_N * D};

  // Builtin symbols.
  const int batch = p.batch;
  const int heads_q = p.heads_q;
  const int heads_kv = p.heads_kv;
  const int head_dim = D;
  const int seqlen_q = p.seqlen_q;
  const int seqlen_kv = p.seqlen_kv;
  const float softmax_scale = p.softmax_scale;
  (void)batch, (void)heads_q, (void)heads_kv, (void)head_dim, (void)softmax_scale, (void)workspace;
  // @cuir-region variant_bind
  // @cuir-end variant_bind

  // grid m_block < cdiv(seqlen_q, BLOCK_M), h < heads_q, b < batch
  const int m_block = blockIdx.x;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const int q_lo = m_block * BLOCK_M;
  const int q_hi = min(q_lo + BLOCK_M, seqlen_q);
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
  using Stream = typename Tiling<D>::Stream;
  uint8_t* const s_stream = smem + Tiling<D>::kBaseBytes;
  const CuirStreamSource<StreamElem> stream_src =
      cuir_stream_source<StreamElem, kStreamBuffer, kStreamRank>(p, stream_c2, stream_c3);
  // cp.async takes rows that all start 16-byte aligned.
  const bool stream_vector =
      reinterpret_cast<uintptr_t>(stream_src.data) % 16 == 0 &&
      stream_src.row_stride * static_cast<long long>(sizeof(StreamElem)) % 16 == 0;

  const int tid = threadIdx.x, lane = tid & 31, warp_row0 = (tid >> 5) * MT * 16;
  // load Q = q[b, h, q_lo:q_hi]
  const T* q_ptr = static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride +
                   static_cast<int64_t>(q_lo) * p.q_row_stride;
  const T* k_ptr = static_cast<const T*>(p.k) + b * p.k_batch_stride + kv_h * p.k_head_stride;
  const T* v_ptr = static_cast<const T*>(p.v) + b * p.v_batch_stride + kv_h * p.v_head_stride;
  sQ.template load_async<kThreads>(q_ptr, p.q_row_stride, q_hi - q_lo, tid);
  cp_async_commit();
  auto load_kv = [&](const SmemTile<T, BLOCK_N, D>& tile, const T* base, int64_t row_stride,
                     int block) {
    const int lo = block * BLOCK_N;
    tile.template load_async<kThreads>(base + lo * row_stride, row_stride,
                                       min(BLOCK_N, seqlen_kv - lo), tid);
    cp_async_commit();
  };
  // K's block and a streamed tensor's tile of it, in one cp.async group.
  auto load_k = [&](int block) {
    Stream::template load<kThreads>(s_stream, stream_src, q_lo, block * BLOCK_N, stream_vector, tid);
    load_kv(sK, k_ptr, p.k_row_stride, block);
  };

  // softmax.init
  float acc[MT][DT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int d = 0; d < DT; ++d)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mt][d][c] = 0.f;
  OnlineSoftmax<MT> softmax;
  softmax.init();
  const MainloopAddrs<D> lds(smem_addr(sQ.base), smem_addr(sK.base), smem_addr(sV.base),
                             warp_row0, lane);
  bool first_block = true;

  // @cuir-region kv_range
  const KvUnion<1> kv_blocks = {{0}, {cuir_cdiv(seqlen_kv, BLOCK_N)}};
  // @cuir-end kv_range
  // @cuir-region kv_loop
  for (int n_block = kv_blocks.first(), n_next; n_block != kv_blocks.kEnd; n_block = n_next) {
    n_next = kv_blocks.next(n_block + 1);
  // @cuir-end kv_loop
    const int kv_lo = n_block * BLOCK_N;
    const int kv_hi = min(kv_lo + BLOCK_N, seqlen_kv);
    // @cuir-region block_class
    // @cuir-end block_class

    if (first_block) {  // the prologue: the first K block is not prefetched by a previous one
      load_k(n_block);
      first_block = false;
    }
    cp_async_wait<0>();
    __syncthreads();  // K(n_block) and its streamed tile landed; every warp is done with the previous V
    load_kv(sV, v_ptr, p.v_row_stride, n_block);

    float s[MT][NT][4];
    gemm_qk<T, MT, NT, D>(s, lds);
    // @cuir-region qk_scale
    const float qk_scale = softmax_scale;
    // @cuir-end qk_scale
    // Thread-owned score elements: row q0 + mt*16 + 8*(c >= 2), column kv0 + j*8 + (c & 1).
    const FragCoord at{q_lo + warp_row0 + (lane >> 2), kv_lo + 2 * (lane & 3)};
    const bool ragged = kv_lo + BLOCK_N > seqlen_kv;
    for_each_fragment(s, [&](int, int j, int c, float& x) {
      x *= qk_scale;
      if (ragged && at.kv(j, c) >= kv_hi) x = -INFINITY;
    });
    // Visits the in-bounds score elements this thread owns as f(q_idx, kv_idx, score&), or with
    // the indices as floats too (score_visit.cuh): one conversion per tile plus constants.
    const float q0_f = static_cast<float>(at.q0), kv0_f = static_cast<float>(at.kv0);
    auto q_float = [&](int mt, int c) { return q0_f + static_cast<float>(at.q(mt, c) - at.q0); };
    auto kv_float = [&](int j, int c) { return kv0_f + static_cast<float>(at.kv(j, c) - at.kv0); };
    auto for_each_score = [&](auto&& f) {
      for_each_fragment(s, [&](int mt, int j, int c, float& x) {
        const int q_idx = at.q(mt, c), kv_idx = at.kv(j, c);
        if (q_idx < q_hi && kv_idx < kv_hi) {
          cuir_call_element(f, q_idx, kv_idx, q_float(mt, c), kv_float(j, c), x, 0);
        }
      });
    };
    // The same as f(mt, r, j, k, q_idx, kv_idx, score&), n-tile by n-tile: (mt, r) and (j, k)
    // are the element's row and column slots (FragCoord), which index the values the regions
    // computed per row and per column with the two visitors below.
    auto for_each_score_at = [&](auto&& f) {
      for_each_fragment_by_col(s, [&](int mt, int j, int c, float& x) {
        const int q_idx = at.q(mt, c), kv_idx = at.kv(j, c);
        if (q_idx < q_hi && kv_idx < kv_hi) {
          cuir_call_element_at(f, mt, FragCoord::row_slot(c), j, FragCoord::col_slot(c), q_idx,
                               kv_idx, q_float(mt, c), kv_float(j, c), x, 0);
        }
      });
    };
    // f(mt, r, q_idx) per row slot, f(j, k, kv_idx) per column slot. A slot past q_hi / kv_hi
    // (a ragged tile) gets the last in-bounds index instead: no element reads that slot, and a
    // program's expressions are defined at every in-bounds index (the interpreter evaluates each
    // of them, `&&` operands included, everywhere), so evaluating one there reads no buffer out
    // of bounds, where the element loop would skip the out-of-bounds index.
    auto for_each_score_row = [&](auto&& f) {
      for_each_row_slot<MT>([&](int mt, int r) { f(mt, r, min(at.row(mt, r), q_hi - 1)); });
    };
    auto for_each_score_col = [&](auto&& f) {
      for_each_col_slot<NT>([&](int j, int k) { f(j, k, min(at.col(j, k), kv_hi - 1)); });
    };
    (void)for_each_score, (void)for_each_score_at;
    (void)for_each_score_row, (void)for_each_score_col;
    const Stream stream_tile{s_stream, stream_src, q_lo, kv_lo};
    (void)stream_tile;
    // @cuir-region score_mod
    // @cuir-end score_mod
    // @cuir-region mask
    // @cuir-end mask
    for_each_fragment(s, [](int, int, int, float& x) { x *= kLog2e; });
    softmax.step(s, acc);

    cp_async_wait<0>();
    __syncthreads();  // V(n_block) landed; every warp is done with K(n_block) and its tile
    if (n_next != INT_MAX) load_k(n_next);
    gemm_pv<T, MT, NT, DT, D>(acc, s, lds);
  }
  cp_async_wait<0>();
  __syncthreads();  // no copy into sQ is in flight when the epilogue reuses it (empty loops too)

  // @cuir-region epilogue_sink
  // @cuir-end epilogue_sink
  // f(q_idx, q_f) per row this thread owns, in score units, added to that row's LSE only: a
  // score_mod's terms that are the same along a row (docs/lowering.md, SplitRowTerms).
  const FragCoord rows{q_lo + warp_row0 + (lane >> 2), 0};  // the rows only (no key columns here)
  auto shift_lse_rows = [&](auto&& f) {
    for_each_row_slot<MT>([&](int mt, int r) {
      const int q = min(rows.row(mt, r), q_hi - 1);
      softmax.row_max[mt][r] += f(q, static_cast<float>(q)) * kLog2e;
    });
  };
  (void)shift_lse_rows;
  // @cuir-region epilogue_rows
  // @cuir-end epilogue_rows
  // epilogue: O = acc / l (0 where l = 0), LSE = m + log(l) (-inf where l = 0)
  T* o_ptr = static_cast<T*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride +
             static_cast<int64_t>(q_lo) * p.o_row_stride;
  float* lse_ptr = p.lse + b * p.lse_batch_stride + h * p.lse_head_stride + q_lo;
  epilogue<T, MT, DT, BLOCK_M, D, kThreads>(acc, softmax, sQ, o_ptr, p.o_row_stride, lse_ptr,
                                            q_hi - q_lo, warp_row0, lane, tid);
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
