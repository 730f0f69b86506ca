// The pieces every backward expert's kernel_bwd.cu shares (issue 29): where a call's scratch lies
// in the workspace, the accumulators' adds in the fast and the deterministic mode, the learnable
// buffers' gradient indexing and coalesced adds, and the pre- and postprocessing kernels. Included
// inside the expert's namespace after its `workspace` region (bwd_workspace reads
// variant_workspace; kDqTileRows, dQ's accumulator layout; kDqFused, whether its attention
// kernel converts dQ itself; kPersistent, whether its CTAs take tiles from a counter) and before
// its variant contexts, whose BwdCall uses them.
#pragma once

constexpr int kRowThreads = 256;  // threads of the pre- and postprocessing kernels

__host__ __device__ __forceinline__ long long cuir_buffer_numel(const cubridge_attn_fwd_buffer& b) {
  long long n = 1;
  for (int d = 0; d < b.rank; ++d) n *= b.sizes[d];
  return n;
}

// dQ's accumulator is row-major ([b][h][q][d]) where the expert's kDqTileRows is 0, and in
// fragment order where it is 64 (the sm_90 expert): per (b, h) the query rows padded to whole
// 64-row blocks, a block's head dim in 64-column panels of 4096 elements, and within a panel
// warp w's rows 16w .. 16w + 15, then per 8-column group j each lane's four elements (rows
// 16w + lane / 4 and 8 below, columns 8j + 2 (lane % 4) and the next): wgmma's m64nN
// accumulator as a warp holds it, so that a warp adds a group by one 512-byte contiguous vector
// reduction instead of 8 rows' 32-byte pieces (bench/NOTES.md, session 20).
static_assert(kDqTileRows == 0 || kDqTileRows == 64,
              "dQ's accumulator: row-major or in fragment order");
// Where kDqFused, the last of a head's KV tiles to finish converts the head's dQ (bwd_dq_finish),
// counted in the workspace (BwdWorkspace::done); the postprocess then runs only for what else
// it converts (GQA's dK and dV, deterministic mode).
static_assert(!kDqFused || kDqTileRows == 64, "the fused conversion reads the fragment order");
constexpr int kDqPanelElems = 64 * 64;
__host__ __device__ __forceinline__ long long bwd_dq_rows(const cubridge_attn_fwd_params& f) {
  const long long q_rows = kDqTileRows == 0 ? f.seqlen_q : cuir_cdiv(f.seqlen_q, 64) * 64;
  return static_cast<long long>(f.batch) * f.heads_q * q_rows;
}
// The fragment-order element of warp `warp`, lane `lane` and 8-column group `j` of query block
// `m_block`'s 64-column panel `panel` of head row `bh` (b * heads_q + h); + 2 r + e for row
// 8 r below, column e beside.
__host__ __device__ __forceinline__ long long bwd_dq_tiled_at(const cubridge_attn_fwd_params& f,
                                                              long long bh, int m_block,
                                                              int panel, int warp, int lane,
                                                              int j) {
  const long long block = bh * cuir_cdiv(f.seqlen_q, 64) + m_block;
  return (block * (f.head_dim / 64) + panel) * kDqPanelElems + warp * 1024 + j * 128 + lane * 4;
}

// Where the call's scratch lies in the workspace: D (rows), dQ's accumulator and, under GQA,
// dK's and dV's, in deterministic mode the learnable buffers' (grad[slot]), then the program's
// block tables (at `tables`, variant_workspace's layout). Accumulators are fp32, or 64-bit fixed
// point in deterministic mode (cubridge_attn_bwd_params::deterministic).
struct BwdWorkspace {
  size_t delta, dq, dk, dv, grad[CUBRIDGE_MAX_BUFFERS], done, sched, tables, total;
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
  w.dk = w.dq + round(size_t(bwd_dq_rows(f)) * f.head_dim * elem);
  const bool gqa = f.heads_q != f.heads_kv;
  w.dv = w.dk + (gqa ? round(kv_rows * f.head_dim * elem) : 0);
  size_t at = w.dv + (gqa ? round(kv_rows * f.head_dim * elem) : 0);
  for (int i = 0; i < CUBRIDGE_MAX_BUFFERS; ++i) {
    w.grad[i] = at;
    if (p.deterministic && p.buffer_grads[i] != nullptr) {
      at += round(size_t(cuir_buffer_numel(f.buffers[i])) * elem);
    }
  }
  // Under kDqFused, per (b, h) the count of its KV tiles done (cleared with the accumulators).
  w.done = at;
  if (kDqFused) at += round(size_t(f.batch) * f.heads_q * sizeof(unsigned));
  // Under kPersistent, the next tile to take (cleared with the accumulators).
  w.sched = at;
  if (kPersistent) at += round(sizeof(unsigned));
  w.tables = at;
  w.total = w.tables + variant_workspace(f, nullptr);
  return w;
}

// The call's (n_block, h, b) work tiles: the attention grid's CTAs, or a persistent kernel's.
__host__ __device__ __forceinline__ long long bwd_tiles(const cubridge_attn_bwd_params& p) {
  return static_cast<long long>(cuir_cdiv(p.fwd.seqlen_kv, BLOCK_N)) * p.fwd.heads_q *
         p.fwd.batch;
}

// An accumulator's element i gets x: a float atomic (fast mode), or a 64-bit fixed-point one
// (deterministic mode: integer adds are associative, so any order gives the same bits).
constexpr double kFixedOne = 4294967296.0;  // 2^32: the fixed point's unit is 2^-32
// x * 2^32 is exact in fp32 (a power of two's scaling; |x| < 2^95), so rounding it to an integer
// from fp32 gives the bits the fp64 route gave, with one conversion instead of two (conversions
// run at a fraction of fp32's rate, and the deterministic mode converts every dQ element).
__device__ __forceinline__ unsigned long long acc_fixed(float x) {
  return static_cast<unsigned long long>(__float2ll_rn(x * static_cast<float>(kFixedOne)));
}
__device__ __forceinline__ void acc_add(char* acc, long long i, float x, bool deterministic) {
  if (deterministic) {
    atomicAdd(reinterpret_cast<unsigned long long*>(acc) + i, acc_fixed(x));
  } else {
    atomicAdd(reinterpret_cast<float*>(acc) + i, x);
  }
}
__device__ __forceinline__ float acc_fixed_value(unsigned long long fixed) {
  return static_cast<float>(static_cast<double>(static_cast<long long>(fixed)) / kFixedOne);
}
__device__ __forceinline__ float acc_read(const char* acc, long long i, bool deterministic) {
  if (!deterministic) return reinterpret_cast<const float*>(acc)[i];
  return acc_fixed_value(reinterpret_cast<const unsigned long long*>(acc)[i]);
}

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

// One query block's rows into shared memory, by threads 0 .. BLOCK_M - 1 of the CTA: their LSE in
// log2 units (+inf for a row past the end, or one that kept nothing: its P is exp(-inf) = 0) and
// D (from `delta`, the (b, h) rows' D in the workspace). `tile` is the expert's BwdTile.
template <int BLOCK_M, typename Tile>
__device__ __forceinline__ void bwd_load_rows(const Tile& tile, const float* delta, int q_lo,
                                              int rows, float* lse_out, float* delta_out, int tid) {
  if (tid >= BLOCK_M) return;
  const cubridge_attn_fwd_params& f = tile.p;
  const int q = q_lo + tid;
  const float lse =
      tid < rows ? f.lse[tile.b * f.lse_batch_stride + tile.h * f.lse_head_stride + q] : -INFINITY;
  lse_out[tid] = lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f;
  delta_out[tid] = tid < rows ? delta[q] : 0.f;
}

// One element of the input dtype from fp32: dS for dQ's product, the gradients' conversion.
template <typename T>
__device__ __forceinline__ T bwd_from_float(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 bwd_from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half bwd_from_float<__half>(float x) {
  return __float2half_rn(x);
}
__device__ __forceinline__ float bwd_to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float bwd_to_float(__half x) { return __half2float(x); }
// Two or four consecutive elements by one access (4- / 8-byte aligned).
__device__ __forceinline__ float2 bwd_to_float2(uint32_t x, __nv_bfloat16) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x));
}
__device__ __forceinline__ float2 bwd_to_float2(uint32_t x, __half) {
  return __half22float2(*reinterpret_cast<const __half2*>(&x));
}
template <typename T>
__device__ __forceinline__ float4 bwd_load4(const T* at) {
  const uint2 u = *reinterpret_cast<const uint2*>(at);
  const float2 a = bwd_to_float2(u.x, T{}), b = bwd_to_float2(u.y, T{});
  return make_float4(a.x, a.y, b.x, b.y);
}
template <typename T>
__device__ __forceinline__ void bwd_store2(T* at, float x, float y) {
  T two[2] = {bwd_from_float<T>(x), bwd_from_float<T>(y)};
  *reinterpret_cast<uint32_t*>(at) = *reinterpret_cast<const uint32_t*>(two);
}
// delta: D[b, h, i] = sum_d dO[b, h, i, d] * O[b, h, i, d] in fp32, one warp per row, four
// elements a lane a load where the rows allow (8-byte aligned; else one); and the accumulators
// cleared. Memory-bound: it reads O and dO once and clears dQ's fp32 accumulator, a fixed cost
// that a short walk (a sliding window) pays in full.
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
    if (((reinterpret_cast<uintptr_t>(o) | reinterpret_cast<uintptr_t>(d_o)) & 7) == 0 &&
        f.head_dim % 4 == 0) {
      for (int d = 4 * lane; d < f.head_dim; d += 128) {
        const float4 x = bwd_load4(o + d), y = bwd_load4(d_o + d);
        sum += x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
      }
    } else {
      for (int d = lane; d < f.head_dim; d += 32) sum += bwd_to_float(o[d]) * bwd_to_float(d_o[d]);
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

// dQ's rows from the fragment-order accumulator (bwd_dq_tiled_at), a 64 x 64 panel's 8-column
// group j by one warp: panel `panel` of query block `m_block` of head row bh (b * heads_q + h);
// each lane holds four 16-byte pieces, one of each of the panel's four warps' 16 rows. Read
// (bwd_dq_load) apart from written (bwd_dq_store), so that a caller issues its reads before any
// store: the compiler may not move a read above a store that may alias it.
struct DqPiece {
  float4 x[4];
};
__device__ __forceinline__ DqPiece bwd_dq_load(const cubridge_attn_bwd_params& p, const char* acc,
                                               long long bh, int m_block, int panel, int j,
                                               int lane, bool det) {
  DqPiece piece;
#pragma unroll
  for (int warp = 0; warp < 4; ++warp) {
    // L2's copy (ld.global.cg): under kDqFused other CTAs' reductions wrote it in this kernel.
    const long long i = bwd_dq_tiled_at(p.fwd, bh, m_block, panel, warp, lane, j) / 4;
    if (det) {
      const ulonglong2* const fixed = reinterpret_cast<const ulonglong2*>(acc) + 2 * i;
      const ulonglong2 a = __ldcg(fixed), b = __ldcg(fixed + 1);
      piece.x[warp] = make_float4(acc_fixed_value(a.x), acc_fixed_value(a.y),
                                  acc_fixed_value(b.x), acc_fixed_value(b.y));
    } else {
      piece.x[warp] = __ldcg(reinterpret_cast<const float4*>(acc) + i);
    }
  }
  return piece;
}
// Whether a tensor's rows start 16-byte aligned (row_stride in elements of 2 bytes; pass the OR
// of several strides for all of them).
__host__ __device__ __forceinline__ bool aligned_16(const void* ptr, int64_t row_stride) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && row_stride % 8 == 0;
}

// dQ's pointer and strides keep a row's two columns aligned for one 4-byte store.
__device__ __forceinline__ bool bwd_dq_pairs(const cubridge_attn_bwd_params& p) {
  return ((reinterpret_cast<uintptr_t>(p.dq) & 3) |
          ((p.dq_batch_stride | p.dq_head_stride | p.dq_row_stride) & 1)) == 0;
}
template <typename T>
__device__ __forceinline__ void bwd_dq_store(const cubridge_attn_bwd_params& p, const DqPiece& piece,
                                             long long bh, int m_block, int panel, int j,
                                             int lane, bool pairs) {
  const cubridge_attn_fwd_params& f = p.fwd;
  const int h = static_cast<int>(bh % f.heads_q), b = static_cast<int>(bh / f.heads_q);
  const int col = panel * 64 + 8 * j + 2 * (lane & 3);
  T* const out = static_cast<T*>(p.dq) + b * p.dq_batch_stride + h * p.dq_head_stride + col;
#pragma unroll
  for (int warp = 0; warp < 4; ++warp) {
    const float4 x = piece.x[warp];
    const int row = m_block * 64 + warp * 16 + (lane >> 2);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (row + 8 * r >= f.seqlen_q) continue;
      T* const to = out + static_cast<int64_t>(row + 8 * r) * p.dq_row_stride;
      const float lo = r == 0 ? x.x : x.z, hi = r == 0 ? x.y : x.w;
      if (pairs) {
        bwd_store2(to, lo, hi);
      } else {
        to[0] = bwd_from_float<T>(lo);
        to[1] = bwd_from_float<T>(hi);
      }
    }
  }
}

// The conversion of head row bh's dQ (bwd_dq_finish), its own function so that its registers
// are allocated apart from the attention's (inlined, its unrolled reads spilled 8 bytes at head
// dim 64).
template <typename T, int NTHREADS>
__device__ __noinline__ void bwd_dq_convert_head(const cubridge_attn_bwd_params& p, long long bh,
                                                 int tid) {
  constexpr int kUnroll = 4, kPanelsAtOnce = NTHREADS / 256;
  const BwdWorkspace w = bwd_workspace(p);
  const char* const ws = static_cast<const char*>(p.workspace);
  const int lane = tid & 31, j = (tid >> 5) & 7, first = tid >> 8;
  // Panel k of the head: query block k / head_panels, its panel k % head_panels.
  const int head_panels = p.fwd.head_dim / 64;
  const int panels = cuir_cdiv(p.fwd.seqlen_q, 64) * head_panels;
  const bool pairs = bwd_dq_pairs(p), det = p.deterministic != 0;
  constexpr int kStep = kUnroll * kPanelsAtOnce;
  for (int k0 = first; k0 < panels; k0 += kStep) {
    DqPiece piece[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = k0 + u * kPanelsAtOnce;
      if (k < panels) {
        piece[u] = bwd_dq_load(p, ws + w.dq, bh, k / head_panels, k % head_panels, j, lane, det);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = k0 + u * kPanelsAtOnce;
      if (k < panels) {
        bwd_dq_store<T>(p, piece[u], bh, k / head_panels, k % head_panels, j, lane, pairs);
      }
    }
  }
}

// Under kDqFused, after this CTA's last reduction into dQ's accumulator (by every thread that
// made one, NTHREADS of them, tid from 0): the CTA counts itself done for its head row bh, and
// the last of the head's `tiles` KV tiles converts the head's dQ, its NTHREADS / 32 warps a
// panel's column groups each, kUnroll panels' reads in flight a lane. `sync_or(pred)` is the
// threads' barrier, returning whether any passed pred. (The reductions come before the count by
// each thread's fence before the barrier; the last CTA's reads after it by the fence after.)
template <typename T, int NTHREADS, typename SyncOr>
__device__ __forceinline__ void bwd_dq_finish(const cubridge_attn_bwd_params& p, long long bh,
                                              unsigned tiles, int tid, SyncOr&& sync_or) {
  static_assert(NTHREADS % 256 == 0, "whole panels: 8 warps a panel");
  const BwdWorkspace w = bwd_workspace(p);
  char* const ws = static_cast<char*>(p.workspace);
  __threadfence();
  sync_or(false);
  const bool last =
      tid == 0 && atomicAdd(reinterpret_cast<unsigned*>(ws + w.done) + bh, 1u) == tiles - 1;
  if (!sync_or(last)) return;
  __threadfence();
  bwd_dq_convert_head<T, NTHREADS>(p, bh, tid);
}

// The postprocess's fragment-order dQ through shared memory (CUBRIDGE_BWD_POST_ROWS): a CTA's
// 64 x 64 panel converted into 64 row pieces of 128 bytes, then written out 16 bytes a lane, a
// warp's stores 4 whole rows, instead of each lane's 4-byte pairs (a warp's store 8 rows' 16-byte
// halves of sectors). Where dQ's rows are 16-byte aligned; otherwise bwd_dq_store.
#ifndef CUBRIDGE_BWD_POST_ROWS
#define CUBRIDGE_BWD_POST_ROWS 1
#endif
// Warp j's piece of panel `panel` of query block m_block (bwd_dq_load) into `rows` (64 rows of
// 64 elements of T, 16-byte pieces swizzled by the row: a store's 8 rows on 8 pieces), then,
// after the CTA's barrier, the panel's valid rows out, each of the 256 threads two pieces.
template <typename T>
__device__ __forceinline__ void bwd_dq_store_rows(const cubridge_attn_bwd_params& p,
                                                  const DqPiece& piece, long long bh, int m_block,
                                                  int panel, int j, int lane, uint32_t* rows) {
  const cubridge_attn_fwd_params& f = p.fwd;
#pragma unroll
  for (int warp = 0; warp < 4; ++warp) {
    const float4 x = piece.x[warp];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp * 16 + (lane >> 2) + 8 * r;
      T two[2] = {bwd_from_float<T>(r == 0 ? x.x : x.z), bwd_from_float<T>(r == 0 ? x.y : x.w)};
      rows[row * 32 + ((j ^ (row & 7)) * 4) + (lane & 3)] = *reinterpret_cast<const uint32_t*>(two);
    }
  }
  __syncthreads();
  const int h = static_cast<int>(bh % f.heads_q), b = static_cast<int>(bh / f.heads_q);
  T* const out = static_cast<T*>(p.dq) + b * p.dq_batch_stride + h * p.dq_head_stride + panel * 64;
#pragma unroll
  for (int i = threadIdx.x; i < 64 * 8; i += kRowThreads) {
    const int row = i >> 3, at = i & 7, q = m_block * 64 + row;
    if (q >= f.seqlen_q) continue;
    *reinterpret_cast<uint4*>(out + static_cast<int64_t>(q) * p.dq_row_stride + at * 8) =
        *reinterpret_cast<const uint4*>(rows + row * 32 + ((at ^ (row & 7)) * 4));
  }
  __syncthreads();  // the next panel's stores into `rows` after these reads
}

// Whether the postprocess has work: dQ unless the attention kernel converts it, GQA's dK and
// dV, deterministic mode's buffer gradients.
__host__ __device__ __forceinline__ bool bwd_needs_postprocess(const cubridge_attn_bwd_params& p) {
  return !kDqFused || p.fwd.heads_q != p.fwd.heads_kv || p.deterministic != 0;
}

// dQ from its accumulator (already scaled) and, under GQA, dK and dV from theirs; in
// deterministic mode the buffer gradients, written whole. Memory-bound like the preprocess: the
// index arithmetic (64-bit divisions) is done once a row or a 64 x 64 panel, not per element,
// and the fragment-order dQ is read 16 bytes and written 4 a thread at a time.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    attn_bwd_postprocess(const __grid_constant__ cubridge_attn_bwd_params p) {
  static_assert(kRowThreads == 256, "a dQ panel's 8 column groups, a warp each");
  const cubridge_attn_fwd_params& f = p.fwd;
  const BwdWorkspace w = bwd_workspace(p);
  const char* ws = static_cast<const char*>(p.workspace);
  const long long stride = static_cast<long long>(gridDim.x) * kRowThreads;
  const long long start = blockIdx.x * kRowThreads + threadIdx.x;
  const int lane = threadIdx.x & 31;
  const bool det = p.deterministic != 0;
  // Row-major accumulators ([b][h][s][d]): a warp per row.
  auto convert = [&](const char* acc, void* out, int heads, int seqlen, int64_t bs, int64_t hs,
                     int64_t rs) {
    const long long rows = static_cast<long long>(f.batch) * heads * seqlen;
    for (long long row = start >> 5; row < rows; row += stride >> 5) {
      const int s = static_cast<int>(row % seqlen);
      const int h = static_cast<int>(row / seqlen % heads);
      const int b = static_cast<int>(row / seqlen / heads);
      T* const o = static_cast<T*>(out) + b * bs + h * hs + s * rs;
      for (int d = lane; d < f.head_dim; d += 32) {
        o[d] = bwd_from_float<T>(acc_read(acc, row * f.head_dim + d, det));
      }
    }
  };
  if constexpr (kDqTileRows == 0) {
    convert(ws + w.dq, p.dq, f.heads_q, f.seqlen_q, p.dq_batch_stride, p.dq_head_stride,
            p.dq_row_stride);
  } else if constexpr (!kDqFused) {
    // Fragment order: a CTA per 64 x 64 panel (bwd_dq_load), warp j its column group j.
    const int panels = f.head_dim / 64, q_blocks = cuir_cdiv(f.seqlen_q, 64);
    const long long n_panels = bwd_dq_rows(f) / 64 * panels;
    // Every row 16-byte aligned: the batch's, head's and row's strides all multiples of 8.
    const bool pairs = bwd_dq_pairs(p),
               rows_16 = CUBRIDGE_BWD_POST_ROWS &&
                         aligned_16(p.dq, p.dq_batch_stride | p.dq_head_stride | p.dq_row_stride);
    const int j = threadIdx.x >> 5;
    __shared__ __align__(16) uint32_t rows[CUBRIDGE_BWD_POST_ROWS ? 64 * 32 : 1];
    for (long long at = blockIdx.x; at < n_panels; at += gridDim.x) {
      const int panel = static_cast<int>(at % panels);
      const long long block = at / panels;
      const int m_block = static_cast<int>(block % q_blocks);
      const long long bh = block / q_blocks;
      const DqPiece piece = bwd_dq_load(p, ws + w.dq, bh, m_block, panel, j, lane, det);
      if (rows_16) {
        bwd_dq_store_rows<T>(p, piece, bh, m_block, panel, j, lane, rows);
      } else {
        bwd_dq_store<T>(p, piece, bh, m_block, panel, j, lane, pairs);
      }
    }
  }
  if (f.heads_q != f.heads_kv) {
    convert(ws + w.dk, p.dk, f.heads_kv, f.seqlen_kv, p.dk_batch_stride, p.dk_head_stride,
            p.dk_row_stride);
    convert(ws + w.dv, p.dv, f.heads_kv, f.seqlen_kv, p.dv_batch_stride, p.dv_head_stride,
            p.dv_row_stride);
  }
  if (!det) return;
  for (int slot = 0; slot < CUBRIDGE_MAX_BUFFERS; ++slot) {
    if (p.buffer_grads[slot] == nullptr) continue;
    const long long n = cuir_buffer_numel(f.buffers[slot]);
    for (long long i = start; i < n; i += stride) {
      p.buffer_grads[slot][i] = acc_read(ws + w.grad[slot], i, true);
    }
  }
}

// The parameters every backward expert refuses: missing tensors, empty or oversized shapes, head
// layouts and buffers the variant does not serve, unaligned rows. (The expert adds its own: head
// dims, shared memory.)
__host__ __device__ __forceinline__ bool bwd_params_ok(const cubridge_attn_bwd_params& p) {
  const cubridge_attn_fwd_params& f = p.fwd;
  return f.q != nullptr && f.k != nullptr && f.v != nullptr && f.o != nullptr &&
         f.lse != nullptr && p.d_o != nullptr && p.dq != nullptr && p.dk != nullptr &&
         p.dv != nullptr && f.batch > 0 && f.heads_q > 0 && f.heads_kv > 0 && f.seqlen_q > 0 &&
         f.seqlen_kv > 0 && f.batch <= 65535 && f.heads_q <= 65535 &&
         f.heads_q % f.heads_kv == 0 && (f.dtype == 0 || f.dtype == 1) &&
         aligned_16(f.q, f.q_row_stride) && aligned_16(f.k, f.k_row_stride) &&
         aligned_16(f.v, f.v_row_stride) && aligned_16(p.d_o, p.do_row_stride) &&
         variant_heads_ok(f) && variant_buffers_ok(f);
}
