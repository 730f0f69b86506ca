// Expert backward-attention kernel for sm_90a (H100 / H200): the CUDA behind
// cuir/experts/fa3_sm90/base_bwd.cuir (issue 29), written here from FlashAttention-3's backward
// orchestration (bench/NOTES.md, "Plan for the sm_90a backward expert").
//
// Three launches per call, as the sm_80 expert's (common/backward_kernel.cuh): `preprocess`
// computes D = rowsum(dO * O) per query row and clears the fp32 accumulators; `attention` runs
// one CTA per (n_block, h, b) grid point; `postprocess` converts dQ (and under GQA dK and dV).
// The attention CTA keeps a 128-key K/V tile in shared memory and the tile's dK and dV
// accumulators in the registers of two warpgroups of 64 keys each (at head dim 256 a 64-key tile
// whose two warpgroups split dK's and dV's columns instead), and walks the query blocks
// (attend_bwd.cuh): all five products on wgmma (mainloop_bwd.cuh: S^T and dP^T from shared
// memory, dV and dK with P^T and dS^T from registers, dQ = dS K from dS^T staged in shared
// memory), the variant's hooks between them (common/backward_hooks.cuh), and dQ added into its
// fp32 accumulator (kept in wgmma's fragment order) with 16-byte vector reductions. On the
// 128-key tile a third, producer warpgroup copies K, V and each block's Q and dO (with the rows'
// LSE and D) by cp.async into a two-stage ring and signals mbarriers, so that the two consumer
// warpgroups only compute (setmaxnreg 24 / 240); on the 64-key tile all 256 threads fill the
// ring, the next block's copies under this block's products. (TMA for the copies: issue 30.)
//
// The variant sits at named hooks of three contexts, as in the sm_80 backward (BwdCall, BwdTile,
// BwdBlock); regions are named after base_bwd.cuir's constructs (docs/lowering.md). This base
// instance is full attention.
//
// @cuir-arch sm_90a
//
// Device entry points by role ({T}, {D}: the element type and head dim of the instance):
// @cuir-entry plan cubridge_attn_bwd_plan
// @cuir-entry classify cubridge_fa3_bwd::cubridge_attn_fwd_classify
// @cuir-entry compact cubridge_fa3_bwd::cubridge_attn_fwd_compact
// @cuir-entry preprocess cubridge_fa3_bwd::attn_bwd_preprocess<{T}>
// @cuir-entry attention cubridge_fa3_bwd::attn_bwd_kernel<{T}, {D}>
// @cuir-entry postprocess cubridge_fa3_bwd::attn_bwd_postprocess<{T}>

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
#include "../common/stream_rows.cuh"
#include "mainloop_bwd.cuh"
#include "softmax.cuh"
#include "tma.cuh"

namespace cubridge_fa3_bwd {

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

// The captured tensor a score_mod or mask reads at [..., q_idx, kv_idx], which can come a query
// block's tile at a time beside its Q and dO (common/stream_rows.cuh): its slot in p.buffers
// (-1: none), rank and element type. Not yet a region, nor stream_coords below: the lowering
// streams where an expert declares both (`tile_stream`, `stream_coords`), and the backward's
// stream is built but not yet verified or timed on a GPU (bench/NOTES.md session 26). Declared
// as regions, the hooks read the tensor through `stream_tile` (BwdBlock), from shared memory
// where BwdTiling::kStream. Their markers wait as "dormant" comments, which the lift reads as
// plain text; a copy of the experts with "// dormant @cuir-" turned into "// @cuir-" declares
// them (device-backward.sh op_ab's `@tile_stream @stream_coords`).
// dormant @cuir-region tile_stream
constexpr int kStreamBuffer = -1;
constexpr int kStreamRank = 2;
using StreamElem = unsigned char;
// dormant @cuir-end tile_stream

// Two warpgroups; the query block is one 64-column swizzle panel of dS^T. A 128-key tile gives
// each warpgroup its own 64 keys; a 64-key tile gives both the same keys and each half of dK's
// and dV's columns (kDParts = 2): both then compute the same S^T and dP^T over the whole head
// dim, but each holds only 64 x D/2 of each accumulator, which keeps them in registers at head
// dim 256 (64 x 256 x 2 would need 256 of them per thread).
static_assert(BLOCK_M == 64, "a query block of 64: one 128-byte panel of dS^T per key row");
static_assert((BLOCK_N == 128 || BLOCK_N == 64) && WARPS == 8,
              "two warpgroups: of 64 keys each (BLOCK_N 128), or of 64 keys together (64)");
static_assert(STAGES == 2, "Q and dO are double-buffered");
// A producer warpgroup beside the consumers (the base tile only; issue 30): it copies K, V and
// the Q/dO ring with cp.async and signals mbarriers, the consumers wait on those instead of a
// CTA barrier and issue no copies; setmaxnreg gives the consumers the producer's registers.
#ifndef CUBRIDGE_BWD_PRODUCER
#define CUBRIDGE_BWD_PRODUCER 1
#endif
constexpr bool kProducer = CUBRIDGE_BWD_PRODUCER && BLOCK_N == 128;
// Speed-of-light probes, for timing only (their results are wrong; bench/NOTES.md session 27):
// bit 1, the Q/dO tiles are not copied (the stages keep what they held); bit 2, the fast mode's
// dQ is computed but not added. What a lever on the loads or on the adds could buy at most.
#ifndef CUBRIDGE_BWD_PROBE
#define CUBRIDGE_BWD_PROBE 0
#endif
constexpr int kProbe = CUBRIDGE_BWD_PROBE;
// Persistent CTAs beside a producer (CUBRIDGE_BWD_PERSISTENT): a CTA an SM takes (n_block, h, b)
// tiles from a counter in the workspace until none is left, and its producer loads the next
// tile's K and V (and fills the ring) while the consumers store the last tile's dK and dV. Off:
// no faster at 8k and 1.8% slower at 1k (H100, bench/NOTES.md session 24): with one K/V buffer
// the next tile's loads still wait for the last tile's products, as a fresh CTA's do.
#ifndef CUBRIDGE_BWD_PERSISTENT
#define CUBRIDGE_BWD_PERSISTENT 0
#endif
constexpr bool kPersistent = CUBRIDGE_BWD_PERSISTENT && kProducer;
// dQ of a CTA pair's two K tiles summed in shared memory before it reaches dQ's accumulator
// (pair_dq.cuh, BwdTiling::kPair; the grid's K tiles two by two as clusters): half the fast
// mode's reductions into L2. Off: 1.39-1.42x slower on full and causal at head dim 128 (H100,
// bench/NOTES.md session 28): a warpgroup that receives waits each block for the other CTA's
// panel, which ties the two CTAs' walks together block by block.
#ifndef CUBRIDGE_BWD_PAIR_DQ
#define CUBRIDGE_BWD_PAIR_DQ 0
#endif
constexpr bool kPairDq = CUBRIDGE_BWD_PAIR_DQ && kProducer && !kPersistent;
// The CTAs of a cluster along the grid's K tiles; the launch plan rounds the grid up to them.
constexpr int kBwdClusterX = kPairDq ? 2 : 1;
// At head dim 64, where both warpgroups reduce a panel of the same columns (their own keys), the
// two summed in shared memory before one reduction (pair_dq.cuh's PairDq::sum_halves,
// BwdTiling::kSumHalves): half the fast mode's reductions. Off: no faster (H100, full and causal
// at 8k within 0.3% against the same process's cuDNN, with the pairs' clusters on;
// bench/NOTES.md session 28).
#ifndef CUBRIDGE_BWD_SUM_DQ
#define CUBRIDGE_BWD_SUM_DQ 0
#endif
// At head dim 256 (the 64-key tile, each warpgroup half of dK's and dV's columns) the
// warpgroups split the query block instead of both computing the whole S^T and dP^T: each the
// products of its 32 queries, P^T and dS^T gathered in shared memory for dV and dK (read from
// there, not registers). A warpgroup's products 3.5 -> 2.5 M multiply-adds a block.
#ifndef CUBRIDGE_BWD_SPLIT_Q
#define CUBRIDGE_BWD_SPLIT_Q 0
#endif
// dK and dV leave through shared memory (the walk's stages) in 16-byte row pieces instead of
// each thread's 4-byte fragment pairs (epilogue_bwd.cuh): 1 always, 2 in deterministic mode
// only, 0 never (the default). Off: with either compiled in, the fast mode's walk is 7-8%
// slower at 8k (a block 2.40 -> 2.49 us, whether or not the call stores through the stages);
// deterministic mode gains 1-7% (H100, bench/NOTES.md session 26). Not in a persistent CTA,
// whose producer refills the stages for its next tile meanwhile.
#ifndef CUBRIDGE_BWD_STAGED_STORE
#define CUBRIDGE_BWD_STAGED_STORE 0
#endif
constexpr int kStagedStore = kPersistent ? 0 : CUBRIDGE_BWD_STAGED_STORE;
constexpr int kConsumerThreads = WARPS * 32;
constexpr int kThreads = kConsumerThreads + (kProducer ? 128 : 0);
// Registers per thread after setmaxnreg: the launch gives 65536 / 384 (168) each; the producer
// keeps 24 (addresses of its copies), the consumers take 240 (the bound at which the kernel
// compiled without spills, bench/NOTES.md session 18).
constexpr int kProducerRegs = 24, kConsumerRegs = 240;
static_assert(!kProducer ||
                  128 * (kProducerRegs + 2 * kConsumerRegs) <= 65536 / kThreads / 8 * 8 * kThreads,
              "registers the CTA is launched with");
constexpr int kKeyGroups = BLOCK_N / 64;
constexpr int kDParts = 2 / kKeyGroups;
// dQ staged in shared memory and added by the bulk-copy engine (BwdTiling::kDqBulk). Off: 0.8%
// slower than the warps' vector reductions (H100, bench/NOTES.md session 23).
#ifndef CUBRIDGE_BWD_DQ_BULK
#define CUBRIDGE_BWD_DQ_BULK 0
#endif
// In deterministic mode, dQ's panel in 64-bit fixed point staged the same way and added by one
// bulk `add.u64` instead of 32 scalar atomics a thread (BwdTiling::kDetBulk).
#ifndef CUBRIDGE_BWD_DET_BULK
#define CUBRIDGE_BWD_DET_BULK 1
#endif
#ifndef CUBRIDGE_BWD_LAG_DQ
#define CUBRIDGE_BWD_LAG_DQ 1
#endif
// The streamed tensor per score from global memory (an instance without the tiles), its address
// taken from the call's parameters at each read, as the lowering's other buffer reads are. (A
// template, so that `at` is instantiated only where a hook reads it.)
template <typename E, int SLOT, int RANK>
struct BwdStreamGlobal {
  const cubridge_attn_fwd_params& p;
  int c2, c3;  // the leading indices (stream_coords)
  __device__ __forceinline__ auto at(int q_idx, int kv_idx) const {
    return cuir_stream_source<E, SLOT, RANK>(p, c2, c3).at(q_idx, kv_idx);
  }
};

// A if B, else C (no <type_traits> under NVRTC).
template <bool B, typename A, typename C>
struct BwdPick {
  using type = A;
};
template <typename A, typename C>
struct BwdPick<false, A, C> {
  using type = C;
};

template <int D>
struct BwdTiling {
  using KvTile = cubridge::fa3::PanelTile<BLOCK_N, D>;
  using QTile = cubridge::fa3::PanelTile<BLOCK_M, D>;
  static constexpr int kPartCols = D / kDParts;  // a warpgroup's columns of dK and dV
  // K and V, then the stages of Q and dO, then dS^T ([key][query]), then the stages' LSE and D;
  // every tile 1024-byte aligned for the swizzle.
  static constexpr int kK = 0;
  static constexpr int kV = KvTile::kBytes;
  static constexpr int kStage0 = 2 * KvTile::kBytes;
  static constexpr int kStageBytes = 2 * QTile::kBytes;  // Q, then dO
  // dQ = dS K split between the warpgroups: by head-dim halves (each reads the whole tile's
  // dS^T), or at head dim 64 on a 128-key tile by keys (each its own 64 keys over the whole head
  // dim, both adding into dQ's accumulator: twice the reductions, but no wait for the other
  // warpgroup's dS^T; at head dim 128 that was 21% slower, bench/NOTES.md session 20).
  static constexpr bool kSplitKeys = D == 64 && kKeyGroups == 2;
  static constexpr int kDqCols = kSplitKeys ? D : D / 2;  // dQ's head-dim columns per warpgroup
  // Where a warpgroup's dQ is one 64-column panel, block i's dQ product is issued in block i+1,
  // ahead of its S^T and dP^T, so that the tensor cores have it while the warps add block i's
  // dQ and exponentiate (attend_bwd.cuh); dS^T is then double-buffered.
  // (Not beside a producer: at the consumers' 240 registers the late dQ spills 256 bytes.)
  static constexpr bool kLagDq = CUBRIDGE_BWD_LAG_DQ && kDqCols == 64 && !kProducer;
  static constexpr int kDs = kStage0 + STAGES * kStageBytes;
  static constexpr int kDsBytes = BLOCK_N * BLOCK_M * 2;
  // Two dS^T buffers by the Q/dO stage's index where dQ is late or a producer runs (no CTA
  // barrier orders a buffer's reuse then).
  static constexpr int kDsBuffers = kLagDq || kProducer ? 2 : 1;
  // Where a warpgroup's dQ is one 64-column panel, under CUBRIDGE_BWD_DQ_BULK the panel is
  // stored into shared memory in the accumulator's fragment order (16 KB, conflict-free) and one
  // thread adds it to the accumulator by one bulk reduce-add, instead of every thread's 8 vector
  // reductions through the LSU: two buffers a warpgroup, so that a panel's add has a block to
  // read its buffer before the buffer's next store (attend_bwd.cuh).
  static constexpr bool kDqBulk = CUBRIDGE_BWD_DQ_BULK && kDqCols == 64;
  static constexpr int kDqPanelBytes = 64 * 64 * 4;
  // CUBRIDGE_BWD_SPLIT_Q: the warpgroups split the query block (32 queries each) where they
  // share the keys at head dim 256; P^T's buffers after dS^T's.
  static constexpr bool kSplitQueries = CUBRIDGE_BWD_SPLIT_Q && kDParts == 2 && D == 256;
  static constexpr int kPs = kDs + kDsBuffers * kDsBytes;
  static constexpr int kRows = kPs + (kSplitQueries ? kDsBuffers * kDsBytes : 0);
  static constexpr int kBars = kRows + 2 * STAGES * BLOCK_M * 4;  // the producer's mbarriers
  // BwdBars: kv_full, full and empty per stage, kv_empty and the two tile slots.
  static constexpr int kBarsBytes = kProducer ? 8 * (2 + 2 * STAGES) + 2 * 4 : 0;
  // A streamed tensor's tile per stage (the query block's [BLOCK_M x BLOCK_N] of it, loaded with
  // its Q and dO: common/stream_rows.cuh) after the barriers, then the staged dQ panels last, so
  // that a call that stages none (the fast mode without kDqBulk) allocates none of them: the
  // fast mode keeps its 167 KB at head dim 128, and the L1 that the rest leaves (measured alike
  // within 0.3%, session 24). Dynamic shared memory is only 16-byte aligned: 1024 bytes of
  // slack.
  static constexpr int kStreamAt = (kBars + kBarsBytes + 15) / 16 * 16;
  static constexpr int kStreamTileBytes =
      kStreamBuffer >= 0 ? CuirStreamRows<StreamElem, BLOCK_M, BLOCK_N, true>::kBytes : 0;
  __host__ __device__ static constexpr int stream_end(bool stream) {
    return stream ? kStreamAt + STAGES * kStreamTileBytes : kBars + kBarsBytes;
  }
  __host__ __device__ static constexpr int dq_stage_at(bool stream) {
    return (stream_end(stream) + 127) / 128 * 128;
  }
  __host__ __device__ static constexpr int layout_bytes(bool stream, bool dq_stage) {
    return (dq_stage ? dq_stage_at(stream) + 2 * 2 * kDqPanelBytes : stream_end(stream)) + 1024;
  }
  static constexpr int kSmemLimit = 227 * 1024;  // sm_90's per block
  // The tile streams where its tiles fit beside what the fast mode stages, and where the loads'
  // registers are there: a producer's, or consumers below head dim 256 (at 256 the prefetch
  // beside dK's and dV's accumulators spills); otherwise the hooks read the tensor per score
  // from global memory.
  static constexpr bool kStream = kStreamBuffer >= 0 && (kProducer || D < 256) &&
                                  layout_bytes(true, kDqBulk) <= kSmemLimit;
  using Stream = CuirStreamRows<StreamElem, BLOCK_M, BLOCK_N, kStream>;  // the loader
  using StreamView =  // what the hooks read
      typename BwdPick<kStream, Stream,
                       BwdStreamGlobal<StreamElem, kStreamBuffer, kStreamRank>>::type;
  static constexpr int kDqStage = dq_stage_at(kStream);
  // In deterministic mode (CUBRIDGE_BWD_DET_BULK), a warpgroup's fixed-point panel (32 KB, the
  // bytes of its two fp32 buffers) is staged and added by one bulk add.u64 instead of 32 scalar
  // 64-bit atomics a thread (4.5x -> 1.4x the fast mode's time, bench/NOTES.md session 24); one
  // buffer, so the panel waits for the previous one's add to have read it (a block earlier: done
  // by then). Where a streamed tile leaves no room for it (any at head dim 128: ~186 KB with
  // bools, and the panels' 64 KB on top), the atomics (deterministic mode ~3x slower there).
  static constexpr bool kDetBulk = CUBRIDGE_BWD_DET_BULK && kDqCols == 64 &&
                                   layout_bytes(kStream, true) <= kSmemLimit;
  // CUBRIDGE_BWD_PAIR_DQ's exchange (pair_dq.cuh) where the deterministic mode stages its
  // panels (a call is in one mode): two receive buffers of a panel, the walk's query blocks as
  // bitmaps (this CTA's, then those both CTAs of the pair visit), the buffers' full and empty
  // barriers.
  static constexpr int kPairMaxBlocks = 4096;  // a longer walk's dQ is not exchanged
  static constexpr int kPairBits = kDqStage + 2 * kDqPanelBytes;
  static constexpr int kPairBars = kPairBits + 2 * (kPairMaxBlocks / 8);
  static constexpr int kPairEnd = kPairBars + 4 * 8;
  static constexpr bool kPair = kPairDq && kDqCols == 64 && !kSplitKeys && !kDqBulk &&
                                kPairEnd + 1024 <= kSmemLimit;
  // CUBRIDGE_BWD_SUM_DQ's exchange between the warpgroups (the same buffers and barriers).
  static constexpr bool kSumHalves = CUBRIDGE_BWD_SUM_DQ && kSplitKeys && kProducer &&
                                     !kDqBulk && kPairEnd + 1024 <= kSmemLimit;
  __host__ __device__ static constexpr int smem_bytes(bool deterministic) {
    return kDqBulk || (deterministic && kDetBulk) ? layout_bytes(kStream, true)
           : kPair || kSumHalves                    ? kPairEnd + 1024
                                                    : layout_bytes(kStream, false);
  }
  // Whether the tile serves head dim D: a warpgroup's part whole 64-column panels, at most 128
  // columns of each accumulator (64 + 64 registers), within sm_90's 227 KiB of shared memory
  // (without a stream, which yields where it does not fit).
  static constexpr bool kServed =
      kPartCols % 64 == 0 && kPartCols <= 128 &&
      layout_bytes(false, kDqBulk || (CUBRIDGE_BWD_DET_BULK && kDqCols == 64)) <= kSmemLimit;
};

// Dynamic shared memory of the head dims the kernel serves at this tile (BwdTiling::kServed),
// 0 for the others: 64 and 128 at the base tile (64 x 128 keys), 128 and 256 at 64 x 64; more in
// deterministic mode (its staged dQ panels).
__host__ __device__ constexpr int bwd_smem_bytes(int head_dim, bool deterministic) {
  return head_dim == 64 && BwdTiling<64>::kServed     ? BwdTiling<64>::smem_bytes(deterministic)
         : head_dim == 128 && BwdTiling<128>::kServed ? BwdTiling<128>::smem_bytes(deterministic)
         : head_dim == 256 && BwdTiling<256>::kServed ? BwdTiling<256>::smem_bytes(deterministic)
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

// dQ's accumulator in wgmma's fragment order (common/backward_kernel.cuh): a warp adds 512
// contiguous bytes a reduction, 20% faster than row-major's 8 rows of 32 (bench/NOTES.md,
// session 20).
constexpr int kDqTileRows = 64;
// Under CUBRIDGE_BWD_FUSED_DQ the last of a head's KV tiles to finish converts the head's dQ
// (common/backward_kernel.cuh, bwd_dq_finish) and no postprocess runs under MHA in fast mode.
// Off: measured slower than the postprocess it replaces (+0.36 ms on full attention at 16k
// tokens of d 128, +0.6 ms on a 256 sliding window, H100; bench/NOTES.md session 23): every CTA's
// fence waits for its reductions and dK / dV stores, and one CTA a head converts at a fraction
// of the bandwidth the postprocess's grid gets.
#ifndef CUBRIDGE_BWD_FUSED_DQ
#define CUBRIDGE_BWD_FUSED_DQ 0
#endif
static_assert(!(CUBRIDGE_BWD_FUSED_DQ && CUBRIDGE_BWD_PERSISTENT),
              "the fused conversion counts a head's CTAs by the grid, which persistent CTAs are not");
static_assert(!(CUBRIDGE_BWD_FUSED_DQ && (CUBRIDGE_BWD_DQ_BULK || CUBRIDGE_BWD_DET_BULK)),
              "the fused conversion counts a CTA done after its own reductions, not bulk ones");
constexpr bool kDqFused = CUBRIDGE_BWD_FUSED_DQ;
static_assert(!(kDqFused && kPairDq), "the fused conversion counts a head's CTAs, not pairs");
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
  // The streamed tensor's indices before [q_idx, kv_idx] for this work tile (dimensions
  // rank - 3 and rank - 4): none here (the region `stream_coords` once streamed, above).
  // dormant @cuir-region stream_coords
  const int stream_c2 = 0, stream_c3 = 0;
  // dormant @cuir-end stream_coords

  // The streamed tensor at this work tile's leading indices (an empty source without one).
  __device__ __forceinline__ CuirStreamSource<StreamElem> stream_source() const {
    return cuir_stream_source<StreamElem, kStreamBuffer, kStreamRank>(p, stream_c2, stream_c3);
  }

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
template <int D>
struct BwdBlock : BwdTile {
  int m_block, q_lo, q_hi;
  bool block_full;
  // The streamed tensor's [q_lo, q_lo + BLOCK_M) x [kv_lo, kv_lo + BLOCK_N) tile, which the
  // hooks read as stream_tile.at(q_idx, kv_idx).
  typename BwdTiling<D>::StreamView stream_tile;
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

}  // namespace cubridge_fa3_bwd

namespace cubridge_fa3_bwd {
#include "trace_bwd.cuh"
#include "epilogue_bwd.cuh"
template <int D>
struct PairDq;  // pair_dq.cuh, which reads attend_bwd.cuh's shared-memory layout
#include "attend_bwd.cuh"
#include "pair_dq.cuh"

// Under kDqFused, the consumers count the tile done for its head, the head's last converts dQ.
// The head row from the grid (b, h: blockIdx.z, .y), not from the tile's registers, which would
// then stay live through the walk (8 bytes of spills at head dim 64).
template <typename T>
__device__ __forceinline__ void finish_dq(const cubridge_attn_bwd_params& p, int tid) {
  if constexpr (kDqFused) {
    bwd_dq_finish<T, kConsumerThreads>(
        p, static_cast<long long>(blockIdx.z) * gridDim.y + blockIdx.y, gridDim.x, tid,
        [](bool pred) {
          if constexpr (kProducer) {
            return cubridge::fa3::named_barrier_or(1, kConsumerThreads, pred);
          } else {
            return __syncthreads_or(pred) != 0;
          }
        });
  }
}

// kPersistent: tile t of the call (bwd_tiles) is KV tile t % n_blocks of head row t / n_blocks,
// so that the CTAs at work at once share a few heads' Q and dO in L2, as the grid's order did.
__device__ __forceinline__ BwdTile bwd_tile_at(const BwdCall& call, int t) {
  const int n_blocks = cuir_cdiv(call.seqlen_kv, BLOCK_N);
  const int n_block = t % n_blocks, bh = t / n_blocks, kv_lo = n_block * BLOCK_N;
  return BwdTile{call, n_block, bh % call.heads_q, bh / call.heads_q, kv_lo,
                 min(kv_lo + BLOCK_N, call.seqlen_kv)};
}

// The persistent CTA: the producer's thread 0 takes the next tile from the workspace's counter
// into a slot (by the tile's parity) and the producer fills K, V and the ring for it; the
// consumers read the slot once K and V landed. Past the last tile the slot says so and every
// thread leaves. The ring's stage and phase run on across tiles (`ring`: blocks so far).
template <typename T, int D>
__device__ __forceinline__ void persistent_bwd(const BwdCall& call) {
  using namespace cubridge::fa3;
  const BwdSmem<D> sm = bwd_smem<D>();
  BwdBars* const bars = sm.bars;
  const int tiles = static_cast<int>(bwd_tiles(call.bp));  // < 2^31: the plan checked
  if (threadIdx.x == 0) init_bwd_bars(bars);
  __syncthreads();
  int ring = 0;
  if (threadIdx.x < 128) {
    setmaxnreg_dec<kProducerRegs>();
    unsigned* const next = reinterpret_cast<unsigned*>(call.scratch + call.ws.sched);
    for (int k = 0;; ++k) {
      // The consumers are done with the K and V (and so the slot) of tile k - 1.
      if (k > 0) mbar_wait(&bars->kv_empty, (k - 1) & 1);
      if (threadIdx.x == 0) bars->tile[k & 1] = static_cast<int>(atomicAdd(next, 1u));
      named_barrier_sync(7, 128);
      const int t = bars->tile[k & 1];
      if (t >= tiles) {
        mbar_arrive(&bars->kv_full);  // the consumers wake to the slot's end
        return;
      }
      produce_bwd_tile<T, D>(bwd_tile_at(call, t), threadIdx.x, ring);
    }
  } else {
    setmaxnreg_inc<kConsumerRegs>();
    for (int k = 0;; ++k) {
      mbar_wait(&bars->kv_full, k & 1);
      const int t = bars->tile[k & 1];
      if (t >= tiles) return;
      attend_bwd_tile<T, D>(bwd_tile_at(call, t), threadIdx.x - 128, ring);
    }
  }
}

// A cluster of kBwdClusterX CTAs along the K tiles where CTA pairs exchange dQ (kPairDq).
#if CUBRIDGE_BWD_PAIR_DQ
#define CUBRIDGE_BWD_CLUSTER __cluster_dims__(kBwdClusterX, 1, 1)
#else
#define CUBRIDGE_BWD_CLUSTER
#endif
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1) CUBRIDGE_BWD_CLUSTER
    attn_bwd_kernel(const __grid_constant__ cubridge_attn_bwd_params p) {
  const cubridge_attn_fwd_params& f = p.fwd;
  char* const scratch = static_cast<char*>(p.workspace);
  const BwdWorkspace w = bwd_workspace(p);
  const BwdCall call{p, f, scratch, scratch + w.tables, f.batch, f.heads_q,
                     f.heads_kv, D, f.seqlen_q, f.seqlen_kv, f.softmax_scale, w};
  if constexpr (kPersistent) {
    persistent_bwd<T, D>(call);
    return;
  }
  const int n_block = blockIdx.x, kv_lo = n_block * BLOCK_N;
  const BwdTile tile{call, n_block, static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z),
                     kv_lo, min(kv_lo + BLOCK_N, f.seqlen_kv)};
  const int consumer = static_cast<int>(threadIdx.x) - (kProducer ? 128 : 0);
  bwd_trace_stamp(consumer, kTraceStart);
  if constexpr (kProducer) {
    // Warpgroup 0 produces, 1 and 2 consume; each role one branch (setmaxnreg, HOPPER.md).
    BwdBars* const bars = bwd_smem<D>().bars;
    // CTA pairs exchange dQ in the fast mode where the head dim's tiling pairs (kPair: not at
    // head dim 64, whose layout then has no room for the pair's bitmaps and barriers, though its
    // grid still runs in clusters); a CTA of the grid's round-up to whole pairs, past the keys,
    // only keeps its partner company at the cluster's barriers. At head dim 64 the warpgroups
    // may exchange instead (kSumHalves).
    const bool pairing = BwdTiling<D>::kPair && p.deterministic == 0;
    if (threadIdx.x == 0) {
      init_bwd_bars(bars);
      if (BwdTiling<D>::kSumHalves && p.deterministic == 0 && !pairing) init_dq_swap_bars<D>();
    }
    const bool live = !kPairDq || kv_lo < f.seqlen_kv;  // only pairs round the grid up
    if (pairing) pair_dq_begin<D>(tile, live);
    else __syncthreads();
    int ring = 0;
    if (threadIdx.x < 128) {
      cubridge::fa3::setmaxnreg_dec<kProducerRegs>();
      if (live) produce_bwd_tile<T, D>(tile, threadIdx.x, ring);
      if (pairing) pair_dq_end();
      return;
    }
    cubridge::fa3::setmaxnreg_inc<kConsumerRegs>();
    if (live) attend_bwd_tile<T, D>(tile, consumer, ring);
    if (pairing) pair_dq_end();
    if (!live) return;
  } else {
    int ring = 0;
    attend_bwd_tile<T, D>(tile, consumer, ring);
  }
  finish_dq<T>(p, consumer);
  bwd_trace_stamp(consumer, kTraceEnd);
}

}  // namespace cubridge_fa3_bwd

#define CUBRIDGE_BWD_EXPERT_NS cubridge_fa3_bwd
#include "../common/backward_launch.cuh"
