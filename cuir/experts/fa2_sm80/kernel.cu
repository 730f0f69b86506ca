// Expert forward-attention kernel for sm_80 (also builds for sm_90): the CUDA behind
// cuir/experts/fa2_sm80/base.cuir, one CTA per (m_block, h, b) grid point.
//
// This first version keeps the FlashAttention-2 orchestration (Q tile resident in shared memory,
// K/V blocks streamed through shared memory, online softmax in fp32, P rounded to the input dtype
// before P.V) but computes the two matmuls with plain FMAs. The tensor-core mainloop
// (mma.sync / ldmatrix / cp.async) replaces the three "mainloop" functions and `for_each_score`
// without touching any region.
//
// Regions: each `// @cuir-region NAME` ... `// @cuir-end NAME` pair implements one CuIR construct
// of base.cuir. The lowering (cuir/lower, docs/lowering.md) copies a region verbatim when the
// program's construct equals the base program's and regenerates it otherwise. Names the regions
// rely on are the CuIR names themselves (m_block, h, b, kv_h, q_lo, q_hi, n_block, kv_lo, kv_hi,
// BLOCK_M, ..., the builtins batch, heads_q, ..., softmax_scale), so generated code reads them
// directly. Identifiers starting with `cubridge_attn_fwd` are renamed after the program's kernel.

// @cuir-region abi
#ifndef cubridge_attn_fwd_ABI_H_
#define cubridge_attn_fwd_ABI_H_
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

#define CUBRIDGE_MAX_BUFFERS 8

struct CUstream_st;  // cudaStream_t without the CUDA headers

// One forward attention call. Tensors are [batch, heads, seqlen, head_dim] with unit stride along
// head_dim; strides are in elements. lse is fp32 [batch, heads_q, seqlen_q] (row stride 1).
typedef struct cubridge_attn_fwd_params {
  const void* q;  // bf16 or fp16 (dtype)
  const void* k;
  const void* v;
  void* o;        // same dtype as q
  float* lse;
  int64_t q_batch_stride, q_head_stride, q_row_stride;
  int64_t k_batch_stride, k_head_stride, k_row_stride;
  int64_t v_batch_stride, v_head_stride, v_row_stride;
  int64_t o_batch_stride, o_head_stride, o_row_stride;
  int64_t lse_batch_stride, lse_head_stride;
  int32_t batch, heads_q, heads_kv, head_dim, seqlen_q, seqlen_kv;
  int32_t dtype;        // 0 = bf16, 1 = fp16
  float softmax_scale;  // used as given (resolve a default of 1/sqrt(head_dim) before the call)
  // The program's `buffer` declarations in declaration order: int32 device arrays and their
  // lengths in elements (checked against the declared length before the launch).
  const int32_t* buffers[CUBRIDGE_MAX_BUFFERS];
  int64_t buffer_lengths[CUBRIDGE_MAX_BUFFERS];
  // Device scratch for block tables: at least cubridge_attn_fwd_workspace_size() bytes.
  void* workspace;
  size_t workspace_size;
} cubridge_attn_fwd_params;

// Bytes of device workspace the call needs (0 when the program has no block table).
size_t cubridge_attn_fwd_workspace_size(const cubridge_attn_fwd_params* p);
// Enqueues the attention on `stream`; returns a cudaError_t value (0 = cudaSuccess).
// cudaErrorInvalidValue (1) for unusable parameters.
int cubridge_attn_fwd(const cubridge_attn_fwd_params* p, struct CUstream_st* stream);

#ifdef __cplusplus
}
#endif
#endif  // cubridge_attn_fwd_ABI_H_
// @cuir-end abi

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>

#include "../common/cuir_scalar.cuh"

namespace cubridge_fa2 {

// @cuir-region tile_params
constexpr int BLOCK_M = 128;
constexpr int BLOCK_N = 64;
constexpr int STAGES = 2;
constexpr int WARPS = 4;
// @cuir-end tile_params

// @cuir-region variant_consts
// @cuir-end variant_consts

constexpr int kThreads = WARPS * 32;
static_assert(STAGES >= 1, "the simple mainloop is single-buffered; STAGES is a hint");
constexpr int kMaxTables = 8;

// The KV blocks a program visits: the union of N half-open intervals, ascending, each block once.
// next(n) is the smallest visited block >= n, which is also what a pipelined mainloop prefetches.
template <int N>
struct KvUnion {
  static constexpr int kEnd = INT_MAX;  // "no further KV block"
  int lo[N];
  int hi[N];
  __device__ __forceinline__ int next(int n) const {
    int best = kEnd;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int c = n > lo[i] ? n : lo[i];
      if (c < hi[i] && c < best) best = c;
    }
    return best;
  }
  __device__ __forceinline__ int first() const { return next(INT_MIN); }
};

template <typename T>
__device__ __forceinline__ float to_float(T x);
template <>
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <>
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half from_float(float x) { return __float2half_rn(x); }

// Block tables (`table T = blocks(PRED)`): a classifier kernel writes one class per tile
// (0 empty, 1 partial, 2 full) into the entry array of each row; this pass compacts every row in
// place into its non-empty blocks, ascending, encoded as (n_block << 1) | full, and stores the
// count. Layout of a table of R rows: counts[R], then entries[R][num_n].
__global__ void cuir_compact_table(int* __restrict__ table, long long rows, int num_n) {
  const long long row = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  int* entries = table + rows + row * num_n;
  int count = 0;
  for (int n = 0; n < num_n; ++n) {
    const int cls = entries[n];
    if (cls != 0) entries[count++] = (n << 1) | (cls == 2 ? 1 : 0);
  }
  table[row] = count;
}

// @cuir-region table_kernel
// @cuir-end table_kernel

// @cuir-region workspace
// Device workspace of the program's block tables; offsets[i] receives where table i starts.
static size_t variant_workspace(const cubridge_attn_fwd_params* p, size_t* offsets) {
  (void)p;
  (void)offsets;
  return 0;
}
// @cuir-end workspace

// Shared memory: the resident Q tile, one K and one V block, the fp32 score / probability tile
// and the per-row softmax state. K and S rows are padded so that threads reading different rows
// at the same column hit different banks.
template <typename T, int D>
struct SmemLayout {
  static constexpr int kKPitch = D + 2;
  static constexpr int kSPitch = BLOCK_N + 1;
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + sizeof(T) * BLOCK_M * D;
  static constexpr size_t kV = kK + sizeof(T) * BLOCK_N * kKPitch;
  static constexpr size_t kS = (kV + sizeof(T) * BLOCK_N * D + 15) / 16 * 16;
  static constexpr size_t kRowMax = kS + sizeof(float) * BLOCK_M * kSPitch;
  static constexpr size_t kRowSum = kRowMax + sizeof(float) * BLOCK_M;
  static constexpr size_t kAlpha = kRowSum + sizeof(float) * BLOCK_M;
  static constexpr size_t kBytes = kAlpha + sizeof(float) * BLOCK_M;
};

// Rows [lo, hi) of one [seqlen, D] slice into a ROWS x D shared tile with the given pitch; tile
// rows past hi (ragged last block) and rows outside [0, seqlen) are zero.
template <typename T, int D, int ROWS>
__device__ __forceinline__ void load_tile(T* dst, int pitch, const T* src, int64_t row_stride,
                                          int lo, int hi, int seqlen) {
  for (int e = threadIdx.x; e < ROWS * D; e += kThreads) {
    const int r = e / D;
    const int d = e % D;
    const int row = lo + r;
    const bool valid = row < hi && row >= 0 && row < seqlen;
    dst[r * pitch + d] = valid ? src[static_cast<int64_t>(row) * row_stride + d] : from_float<T>(0.0f);
  }
}

// Mainloop step 1: S = (Q K^T) * qk_scale for the valid rows / columns of the tile, -inf
// elsewhere. Thread t owns the score elements t, t + kThreads, ... (row-major in the tile);
// for_each_score visits the same elements, so no barrier separates them.
template <typename T, int D>
__device__ __forceinline__ void mainloop_qk(float* sS, const T* sQ, const T* sK, int q_rows,
                                            int kv_cols, float qk_scale) {
  using L = SmemLayout<T, D>;
  for (int e = threadIdx.x; e < BLOCK_M * BLOCK_N; e += kThreads) {
    const int r = e / BLOCK_N;
    const int c = e % BLOCK_N;
    float s = -INFINITY;
    if (r < q_rows && c < kv_cols) {
      float dot = 0.0f;
      const T* qrow = sQ + r * D;
      const T* krow = sK + c * L::kKPitch;
#pragma unroll 4
      for (int d = 0; d < D; ++d) dot = fmaf(to_float(qrow[d]), to_float(krow[d]), dot);
      s = dot * qk_scale;
    }
    sS[r * L::kSPitch + c] = s;
  }
}

// Mainloop step 2 (softmax.online), one thread per row: m_new = max(m, rowmax S); the exponent
// is taken against m_new where finite, else 0 (a row with no kept score yet stays all-zero);
// P is stored rounded to the input dtype, the row sum uses the unrounded P.
template <typename T, int D>
__device__ __forceinline__ void mainloop_softmax(float* sS, float* sRowMax, float* sRowSum,
                                                 float* sAlpha) {
  using L = SmemLayout<T, D>;
  for (int r = threadIdx.x; r < BLOCK_M; r += kThreads) {
    float* srow = sS + r * L::kSPitch;
    float mx = -INFINITY;
    for (int c = 0; c < BLOCK_N; ++c) mx = fmaxf(mx, srow[c]);
    const float m_old = sRowMax[r];
    const float m_new = fmaxf(m_old, mx);
    const float m_use = isfinite(m_new) ? m_new : 0.0f;
    const float alpha = expf(m_old - m_use);
    float sum = 0.0f;
    for (int c = 0; c < BLOCK_N; ++c) {
      const float pr = expf(srow[c] - m_use);
      sum += pr;
      srow[c] = to_float(from_float<T>(pr));
    }
    sRowSum[r] = sRowSum[r] * alpha + sum;
    sRowMax[r] = m_new;
    sAlpha[r] = alpha;
  }
}

// Mainloop step 3 (pv): acc = acc * alpha + P V. Thread t owns accumulator elements t,
// t + kThreads, ... of the BLOCK_M x D tile (row-major).
template <typename T, int D, int ACC>
__device__ __forceinline__ void mainloop_pv(float (&acc)[ACC], const float* sS, const T* sV,
                                            const float* sAlpha) {
  using L = SmemLayout<T, D>;
#pragma unroll 1
  for (int i = 0; i < ACC; ++i) {
    const int e = threadIdx.x + i * kThreads;
    const int r = e / D;
    const int d = e % D;
    const float* prow = sS + r * L::kSPitch;
    float a = acc[i] * sAlpha[r];
#pragma unroll 4
    for (int c = 0; c < BLOCK_N; ++c) a = fmaf(prow[c], to_float(sV[c * D + d]), a);
    acc[i] = a;
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) attn_fwd_kernel(const cubridge_attn_fwd_params p
    // @cuir-region variant_params
    // @cuir-end variant_params
) {
  using L = SmemLayout<T, D>;
  static_assert((BLOCK_M * D) % kThreads == 0, "accumulator must split evenly over threads");
  constexpr int kAcc = BLOCK_M * D / kThreads;
  extern __shared__ __align__(16) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem + L::kQ);
  T* sK = reinterpret_cast<T*>(smem + L::kK);
  T* sV = reinterpret_cast<T*>(smem + L::kV);
  float* sS = reinterpret_cast<float*>(smem + L::kS);
  float* sRowMax = reinterpret_cast<float*>(smem + L::kRowMax);
  float* sRowSum = reinterpret_cast<float*>(smem + L::kRowSum);
  float* sAlpha = reinterpret_cast<float*>(smem + L::kAlpha);

  // Builtin symbols.
  const int batch = p.batch;
  const int heads_q = p.heads_q;
  const int heads_kv = p.heads_kv;
  const int head_dim = D;
  const int seqlen_q = p.seqlen_q;
  const int seqlen_kv = p.seqlen_kv;
  const float softmax_scale = p.softmax_scale;
  (void)batch, (void)heads_q, (void)heads_kv, (void)head_dim, (void)softmax_scale;

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

  // load Q = q[b, h, q_lo:q_hi]
  const T* q_ptr = static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride;
  const T* k_ptr = static_cast<const T*>(p.k) + b * p.k_batch_stride + kv_h * p.k_head_stride;
  const T* v_ptr = static_cast<const T*>(p.v) + b * p.v_batch_stride + kv_h * p.v_head_stride;
  load_tile<T, D, BLOCK_M>(sQ, D, q_ptr, p.q_row_stride, q_lo, q_hi, seqlen_q);

  // softmax.init
  float acc[kAcc];  // indexed at run time: local memory until the tensor-core mainloop
#pragma unroll 1
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
  for (int r = threadIdx.x; r < BLOCK_M; r += kThreads) {
    sRowMax[r] = -INFINITY;
    sRowSum[r] = 0.0f;
  }

  // @cuir-region kv_range
  const KvUnion<1> kv_blocks = {{0}, {cuir_cdiv(seqlen_kv, BLOCK_N)}};
  // @cuir-end kv_range
  // @cuir-region kv_loop
  for (int n_block = kv_blocks.first(); n_block != kv_blocks.kEnd; n_block = kv_blocks.next(n_block + 1)) {
  // @cuir-end kv_loop
    const int kv_lo = n_block * BLOCK_N;
    const int kv_hi = min(kv_lo + BLOCK_N, seqlen_kv);
    // @cuir-region block_class
    // @cuir-end block_class

    __syncthreads();  // the previous block's readers of sK / sV / sS are done
    load_tile<T, D, BLOCK_N>(sK, L::kKPitch, k_ptr, p.k_row_stride, kv_lo, kv_hi, seqlen_kv);
    load_tile<T, D, BLOCK_N>(sV, D, v_ptr, p.v_row_stride, kv_lo, kv_hi, seqlen_kv);
    __syncthreads();

    // @cuir-region qk_scale
    const float qk_scale = softmax_scale;
    // @cuir-end qk_scale
    mainloop_qk<T, D>(sS, sQ, sK, q_hi - q_lo, kv_hi - kv_lo, qk_scale);

    // Visits the kept-range score elements this thread owns as f(q_idx, kv_idx, score&).
    auto for_each_score = [&](auto&& f) {
      for (int e = threadIdx.x; e < BLOCK_M * BLOCK_N; e += kThreads) {
        const int r = e / BLOCK_N;
        const int c = e % BLOCK_N;
        if (q_lo + r < q_hi && kv_lo + c < kv_hi) f(q_lo + r, kv_lo + c, sS[r * L::kSPitch + c]);
      }
    };
    (void)for_each_score;
    // @cuir-region score_mod
    // @cuir-end score_mod
    // @cuir-region mask
    // @cuir-end mask
    __syncthreads();

    mainloop_softmax<T, D>(sS, sRowMax, sRowSum, sAlpha);
    __syncthreads();
    mainloop_pv<T, D>(acc, sS, sV, sAlpha);
  }
  __syncthreads();

  // epilogue: O = acc / l (0 where l = 0), LSE = m + log(l) (-inf where l = 0)
  T* o_ptr = static_cast<T*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride;
#pragma unroll 1
  for (int i = 0; i < kAcc; ++i) {
    const int e = threadIdx.x + i * kThreads;
    const int r = e / D;
    const int d = e % D;
    if (q_lo + r < q_hi) {
      const float l = sRowSum[r];
      o_ptr[static_cast<int64_t>(q_lo + r) * p.o_row_stride + d] =
          from_float<T>(l > 0.0f ? acc[i] / l : 0.0f);
    }
  }
  float* lse_ptr = p.lse + b * p.lse_batch_stride + h * p.lse_head_stride;
  for (int r = threadIdx.x; r < q_hi - q_lo; r += kThreads) {
    const float l = sRowSum[r];
    lse_ptr[q_lo + r] = l > 0.0f ? sRowMax[r] + logf(l) : -INFINITY;
  }
}

template <typename T, int D>
static int launch(const cubridge_attn_fwd_params* p, cudaStream_t stream) {
  using L = SmemLayout<T, D>;
  // Builtin symbols, for the launch-time expressions of the program (buffer lengths, tables).
  const int batch = p->batch;
  const int heads_q = p->heads_q;
  const int heads_kv = p->heads_kv;
  const int head_dim = D;
  const int seqlen_q = p->seqlen_q;
  const int seqlen_kv = p->seqlen_kv;
  const float softmax_scale = p->softmax_scale;
  (void)heads_kv, (void)head_dim, (void)seqlen_kv, (void)softmax_scale;

  size_t offsets[kMaxTables] = {};
  const size_t workspace_bytes = variant_workspace(p, offsets);
  if (workspace_bytes > 0 && (p->workspace == nullptr || p->workspace_size < workspace_bytes)) {
    return cudaErrorInvalidValue;
  }
  char* const workspace = static_cast<char*>(p->workspace);
  (void)workspace;
  // @cuir-region variant_setup
  // @cuir-end variant_setup

  cudaError_t err = cudaFuncSetAttribute(attn_fwd_kernel<T, D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(L::kBytes));
  if (err != cudaSuccess) return err;
  const dim3 grid(cuir_cdiv(seqlen_q, BLOCK_M), heads_q, batch);
  attn_fwd_kernel<T, D><<<grid, kThreads, L::kBytes, stream>>>(*p
      // @cuir-region variant_args
      // @cuir-end variant_args
  );
  return cudaGetLastError();
}

template <typename T>
static int launch_head_dim(const cubridge_attn_fwd_params* p, cudaStream_t stream) {
  switch (p->head_dim) {
    case 64: return launch<T, 64>(p, stream);
    case 128: return launch<T, 128>(p, stream);
    case 256: return launch<T, 256>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace cubridge_fa2

extern "C" size_t cubridge_attn_fwd_workspace_size(const cubridge_attn_fwd_params* p) {
  return p == nullptr ? 0 : cubridge_fa2::variant_workspace(p, nullptr);
}

extern "C" int cubridge_attn_fwd(const cubridge_attn_fwd_params* p, cudaStream_t stream) {
  if (p == nullptr || p->q == nullptr || p->k == nullptr || p->v == nullptr || p->o == nullptr ||
      p->lse == nullptr || p->batch <= 0 || p->heads_q <= 0 || p->heads_kv <= 0 ||
      p->seqlen_q <= 0 || p->seqlen_kv <= 0) {
    return cudaErrorInvalidValue;
  }
  switch (p->dtype) {
    case 0: return cubridge_fa2::launch_head_dim<__nv_bfloat16>(p, stream);
    case 1: return cubridge_fa2::launch_head_dim<__half>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}
