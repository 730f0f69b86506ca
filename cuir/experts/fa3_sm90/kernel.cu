// Expert forward-attention kernel for sm_90a (H100 / H200): the CUDA behind
// cuir/experts/fa3_sm90/base.cuir. Persistent CTAs (one per SM; one per work tile at head dim
// 256 with 64-key tiles) stride over the (m_block, h, b) work tiles in the longest-first order
// (scheduler.cuh). Where every tile walks the whole KV range and the last wave is partial, the
// tail tiles' walks are split across the idle CTAs (`for ... split`, TailSplit) and a combine
// kernel merges the parts.
//
// FlashAttention-3 orchestration with warp specialisation: a producer warpgroup (setmaxnreg 24)
// whose one thread issues TMA bulk tensor copies of the Q tile and of K/V tiles into a STAGES-deep
// shared-memory ring completing on mbarriers; two consumer warpgroups (setmaxnreg 240) of 64
// query rows each (three at 160 registers on 192-row tiles at head dim 64: kBlockM), running
// S = Q K^T and O += P V on wgmma (P from registers). Each consumer overlaps the softmax of
// tile n with the P V product of tile n-1 (intra-warpgroup overlap). (Turns at the tensor cores
// through named barriers, FA3's ping-pong, measured 0-4% slower here and were removed: the two
// consumers fall into alternation on their own; docs/benchmarks.md.) The collectives: the
// producer's copies (producer.cuh), the consumers' products, softmax and epilogue
// (consumer.cuh), the variant's score visitors (score_tile.cuh), on the tile pieces in
// pipeline.cuh (smem plan, ring), tma.cuh, wgmma.cuh, mainloop.cuh (the two products),
// softmax.cuh, mask.cuh, epilogue.cuh and scheduler.cuh, all inlined into every lowered kernel.
//
// Regions: each `// @cuir-region NAME` ... `// @cuir-end NAME` pair implements one CuIR construct
// of base.cuir, as in every expert (docs/lowering.md): copied when the program's construct equals
// the base program's, regenerated otherwise. None sits inside a function of the kernel: those the
// device runs are members and hook bodies of the variant's contexts (VariantCall, VariantTile,
// VariantBlock, below), which the collectives call at named hooks; the generated code reads the
// CuIR names (m_block, h, b, kv_h, q_lo, q_hi, n_block, kv_lo, kv_hi, BLOCK_M, ..., the builtins)
// as members, and the score visitors (for_each_score, ...) as the hooks' arguments.
//
// The GPU target the code is written for (the lowering refuses an older one):
// @cuir-arch sm_90a
//
// Device entry points by role, for loaders of the NVRTC-compiled module (worker/gpu/module.h);
// {T} and {D} are the element type and head dim of the instance. The launch plan asks the loader
// for three TMA maps (Q, K, V), which the attention kernel takes as its third parameter, and
// names the combine kernel that runs after it where the call may split (plan version 3).
// @cuir-entry plan cubridge_attn_fwd_plan
// @cuir-entry classify cubridge_fa3::cubridge_attn_fwd_classify
// @cuir-entry compact cubridge_fa3::cubridge_attn_fwd_compact
// @cuir-entry attention cubridge_fa3::attn_fwd_kernel<{T}, {D}>
// @cuir-entry combine cubridge_fa3::cubridge_attn_fwd_combine

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
#include <cuda.h>
#include <cuda_runtime.h>
#endif

#include "../common/cuir_platform.cuh"
#include "../common/cuir_scalar.cuh"
#include "../common/kv_blocks.cuh"
#include "../common/score_visit.cuh"
#include "epilogue.cuh"
#include "mainloop.cuh"
#include "mask.cuh"
#include "pipeline.cuh"
#include "scheduler.cuh"
#include "score_tile.cuh"
#include "softmax.cuh"
#include "stream.cuh"
#include "tma.cuh"
#include "wgmma.cuh"


namespace cubridge_fa3 {

// @cuir-region tile_params
constexpr int BLOCK_M = 128;
constexpr int BLOCK_N = 128;
constexpr int STAGES = 3;
constexpr int WARPS = 12;
// @cuir-end tile_params

// @cuir-region variant_consts
// @cuir-end variant_consts

// The KV tile one wgmma step takes: the whole BLOCK_N block up to 176 keys (the widest score tile
// whose S, P and O fit in a consumer's 240 registers at head dim 128), else 128 keys; at head dim
// 256, where a 128-key score tile next to the 256-wide output accumulator would not fit, 64, or
// the whole block of an 80-key tile (S 40 + P 20 + O 128 registers). A block wider than its tile
// is walked tile by tile, the last one cut at the block's end.
constexpr int score_tile_keys(int head_dim, int block_n) {
  if (head_dim > 128) return block_n == 80 ? 80 : 64;
  return block_n <= 176 ? block_n : 128;
}
static_assert(BLOCK_N == 64 || BLOCK_N == 80 || BLOCK_N == 176 || BLOCK_N % 128 == 0,
              "BLOCK_N: 64, 80, 176 or a multiple of 128 (score tiles of 64, 80, 128 or 176 keys)");
static_assert(WARPS == 12,
              "one producer and two consumer warpgroups (three at head dim 64: kBlockM)");
constexpr int kTableThreads = 128;  // threads of the table-building kernels

// @cuir-region table_kernel
// @cuir-end table_kernel

// @cuir-region workspace
// The program's block tables: their device workspace (offsets[i] receives where table i
// starts), the tiles the classifier visits, the rows the compaction visits. None here.
__host__ __device__ __forceinline__ constexpr bool variant_has_tables() { return false; }
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

// @cuir-region kv_walk
// Whether every work tile walks the same KV blocks: the base program's whole range. The lowering
// says false where a program narrows the range or walks a block table. The scheduler orders such
// tiles for L2 reuse alone (scheduler.cuh).
__host__ __device__ __forceinline__ constexpr bool variant_kv_walk_is_whole() { return true; }
// @cuir-end kv_walk

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

// The variant at named hooks (docs/lowering.md, "Variant hooks"): three contexts, each the one
// before plus what it adds. VariantCall: the call's builtins, params and workspace, and the
// program's buffers and tables (variant_bind). VariantTile: one work tile's grid indices, its
// head map, the program's values hoisted to the tile, the streamed tensor's coordinates, the walk
// over the visited KV blocks, and the epilogue hooks. VariantBlock: one KV block's bounds,
// whether its table entry marked it full, the block lets, qk_scale, and the hooks that change
// scores. Generated regions are member declarations and hook bodies, reading every name of their
// context unqualified; the defaults here are the base program's.
// The softmax's unit, which a generated sink is given in (epilogue_sink).
using cubridge::fa3::kLog2e;

struct VariantCall {
  const cubridge_attn_fwd_params& p;
  char* workspace;
  int BLOCK_M;  // this call's rows per work tile (rows_per_tile), which block tables' rows follow
  int batch, heads_q, heads_kv, head_dim, seqlen_q, seqlen_kv;
  float softmax_scale;
  // @cuir-region variant_bind
  // @cuir-end variant_bind
};

struct VariantTile : VariantCall {
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

  // body(n_block, block_full) per visited KV block within [part_lo, part_hi), ascending: the one
  // walk that the producer and the consumers both run, so a changed range or a block table
  // reaches both alike. (n_next, the block after, is for experts that prefetch; TMA runs ahead.)
  template <typename F>
  __device__ __forceinline__ void for_each_kv_block(int part_lo, int part_hi, F&& body) const {
    // @cuir-region kv_range
    const KvUnion<1> kv_blocks = {{0}, {cuir_cdiv(seqlen_kv, BLOCK_N)}};
    // @cuir-end kv_range
    // @cuir-region kv_loop
    for (int n_block = kv_blocks.first(), n_next; n_block != kv_blocks.kEnd; n_block = n_next) {
      n_next = kv_blocks.next(n_block + 1);
      const bool block_full = false;
    // @cuir-end kv_loop
      (void)n_next;
      if (n_block < part_lo) continue;
      if (n_block >= part_hi) break;
      body(n_block, block_full);
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

  // The program's score_mods, then its masks, on one score tile (score_tile.cuh: the visitors
  // and NT, a thread's column slots; MT, its row slots, is 1) and the streamed tensor's tile.
  template <int NT, typename Visitors, typename Stream>
  __device__ __forceinline__ void score_mod(Visitors&& v, const Stream& stream_tile) const {
    constexpr int MT = 1;
    [[maybe_unused]] auto& [for_each_score, for_each_score_at, for_each_raw_score,
                            for_each_raw_score_at, for_each_raw_score_kv_split,
                            for_each_score_row, for_each_score_col] = v;
    (void)MT, (void)stream_tile;
    // @cuir-region score_mod
    // @cuir-end score_mod
  }
  template <int NT, typename Visitors, typename Stream>
  __device__ __forceinline__ void mask(Visitors&& v, const Stream& stream_tile) const {
    constexpr int MT = 1;
    [[maybe_unused]] auto& [for_each_score, for_each_score_at, for_each_score_row,
                            for_each_score_col] = v;
    (void)MT, (void)stream_tile;
    // @cuir-region mask
    // @cuir-end mask
  }
};

// What an instance of head dim D is built with: its score tile, its work tile's rows, whether a
// streamed tensor's tile lives in shared memory, its K/V stages and Q buffers, and whether its
// CTAs are persistent and may split the last wave. Every choice below is a function of D and the
// tile parameters, made once here.
//
// kBlockM: query rows per work tile: BLOCK_M, except at head dim 64 without block tables from
// kWideFromRows query rows on, where a work tile has 192 rows for three consumer warpgroups (one
// exponential costs about as long as its share of the two products there, and two consumers left
// the tensor pipe latency-bound; FlashAttention-3 runs head dim 64 the same way; bench/NOTES.md).
// Short sequences keep 128 rows (rows_per_tile: the third consumer idles). Block tables keep
// BLOCK_M: their rows are the lowering's BLOCK_M-row blocks (the table kernels' code is generated
// with it). So do score tiles over 128 keys: S, P and O of a 176-key tile do not fit a third
// consumer's 160 registers (ptxas: spills, wgmma serialised). kBlockM sizes the instance
// (threads, shared memory); rows_per_tile is one call's choice.
//
// Shared memory: STAGES K/V stages where they fit (three do up to head dim 128), else two; and a
// second Q buffer where it fits beside them, so that a persistent CTA's next Q lands while the
// current tile runs instead of after its last Q K^T. At head dim 128 it fits beside two stages
// only: STAGES = 2 (tile 128x128w12s2) trades the third stage for it, an autotuning candidate.
// A streamed tensor's tile (stream.cuh) takes a slot per stage beside K where two stages and one
// Q buffer leave room for it (up to 32 KB a tile: bf16 at 128 x 128) and two consumer
// warpgroups run (a third one's 160 registers have none to spare); otherwise the instance reads
// it per score from global memory.
//
// kPersistent: persistent CTAs (cubridge_attn_fwd_make_plan), except at head dim 256 with
// 64-key tiles, where one CTA per work tile is faster. kSplits: the tail tiles' walks may be
// split across idle CTAs (TailSplit), where every tile walks the whole KV range.
template <int D>
struct HeadDim {
  static constexpr int kTileN = score_tile_keys(D, BLOCK_N);
  static constexpr int kBlockM = D == 64 && kTileN <= 128 && !variant_has_tables() ? 192 : BLOCK_M;
  using Stream = cubridge::fa3::StreamLayout<StreamElem, kBlockM, kTileN, 32 * 1024>;
  template <int S, int QB, int SB>
  static constexpr bool kFitsWith =
      cubridge::fa3::Geometry<__nv_bfloat16, D, kBlockM, kTileN, S, QB, SB>::kSmemBytes <=
      227 * 1024;
  static constexpr int kStreamWant =
      kStreamBuffer >= 0 && Stream::kInSmem && kBlockM == 128 ? Stream::kBytes : 0;
  static constexpr int kStreamBytes = kFitsWith<2, 1, kStreamWant> ? kStreamWant : 0;
  static constexpr bool kStream = kStreamBytes > 0;
  template <int S, int QB>
  static constexpr bool kFits = kFitsWith<S, QB, kStreamBytes>;
  static constexpr int kStages = kFits<STAGES, 1> ? STAGES : 2;
  static constexpr int kQBuffers = kFits<kStages, 2> ? 2 : 1;
  static constexpr bool kPersistent = !(D == 256 && kTileN != 80);
  static constexpr bool kSplits = variant_kv_walk_is_whole() && kPersistent;
};
constexpr int kWideFromRows = 2048;
template <int D>
__host__ __device__ __forceinline__ int rows_per_tile(int seqlen_q) {
  return HeadDim<D>::kBlockM > BLOCK_M && seqlen_q >= kWideFromRows ? HeadDim<D>::kBlockM : BLOCK_M;
}
template <int D>
using StreamL = typename HeadDim<D>::Stream;
template <typename T, int D, typename H = HeadDim<D>>
using Geo = cubridge::fa3::Geometry<T, D, H::kBlockM, H::kTileN, H::kStages, H::kQBuffers,
                                    H::kStreamBytes>;

// Whether this call's streamed tensor comes by TMA: an instance with the tile in shared memory
// and a tensor TMA can take (16-byte aligned, every outer stride a positive multiple of 16 bytes
// below 2^40); other calls fill the tile from global memory (stream_fill_rows).
template <int D>
__host__ __device__ __forceinline__ bool stream_tma_ok(const cubridge_attn_fwd_params& p) {
  if constexpr (!HeadDim<D>::kStream || !StreamL<D>::kTmaShape) {
    (void)p;
    return false;
  } else {
    const cubridge_attn_fwd_buffer& b = p.buffers[kStreamBuffer < 0 ? 0 : kStreamBuffer];
    if (reinterpret_cast<uintptr_t>(b.data) % 16 != 0 || b.rank != kStreamRank) return false;
    for (int d = 0; d + 1 < kStreamRank; ++d) {
      const int64_t bytes = b.strides[d] * static_cast<int64_t>(sizeof(StreamElem));
      if (b.sizes[d] > 1 && (bytes <= 0 || bytes % 16 != 0 || bytes >= (int64_t(1) << 40))) {
        return false;
      }
      if (b.sizes[d] < 1 || b.sizes[d] >= (int64_t(1) << 32)) return false;
    }
    return b.sizes[kStreamRank - 1] >= 1 && b.sizes[kStreamRank - 1] < (int64_t(1) << 32);
  }
}

// The work tiles' order (scheduler.cuh), the same for the attention and the combine kernel.
template <int D>
__host__ __device__ __forceinline__ cubridge::fa3::LongestFirst work_order(
    const cubridge_attn_fwd_params& p, int block_m) {
  // K and V of one kv head: 2 bytes per element in bf16 and fp16 alike.
  return cubridge::fa3::LongestFirst(cuir_cdiv(p.seqlen_q, block_m), p.heads_q, p.batch,
                                     2ll * p.seqlen_kv * D * 2, p.heads_q / max(1, p.heads_kv),
                                     variant_kv_walk_is_whole());
}

// The split units' workspace (TailSplit, scheduler.cuh), after the block tables: a header that
// the attention kernel fills with its CTA count, from which the combine kernel recomputes the
// split, then kMaxSplitUnits slots of rows x (D + 1) fp32 (store_partial). Only programs whose
// tiles all walk the whole KV range split, and only on persistent instances; the plan asks for
// these bytes beside the tables' (split_workspace_bytes), and with less workspace the call
// simply does not split.
struct SplitHeader {
  int ctas;   // the attention launch's CTAs, from which the combine recomputes the split
  int parts;  // runs per tail tile (1: no split), for tools (bench/sm90/tail_split.py)
};
constexpr size_t kSplitHeaderBytes = 256;
template <int D>
__host__ __device__ __forceinline__ size_t split_slot_floats(int block_m) {
  return static_cast<size_t>(block_m) * (D + 1);
}
template <int D>
__host__ __device__ __forceinline__ size_t split_workspace_bytes(const cubridge_attn_fwd_params& p) {
  if (!HeadDim<D>::kSplits) return 0;
  return kSplitHeaderBytes + cubridge::fa3::kMaxSplitUnits *
                                 split_slot_floats<D>(rows_per_tile<D>(p.seqlen_q)) * sizeof(float);
}
__host__ __device__ __forceinline__ size_t split_workspace_offset(const cubridge_attn_fwd_params& p) {
  return (variant_workspace(p, nullptr) + 255) / 256 * 256;
}
// The split area of this call's workspace, or null where the call has none (then no split).
template <int D>
__host__ __device__ __forceinline__ char* split_area(const cubridge_attn_fwd_params& p,
                                                     char* workspace) {
  const size_t bytes = split_workspace_bytes<D>(p);
  if (bytes == 0 || workspace == nullptr ||
      p.workspace_size < split_workspace_offset(p) + bytes) {
    return nullptr;
  }
  return workspace + split_workspace_offset(p);
}

// The one construction of a call's split, for the attention kernel, the combine and the
// launcher, which must agree on it: `ctas` persistent CTAs (0: the call has no split area).
template <int D>
__host__ __device__ __forceinline__ cubridge::fa3::TailSplit call_split(
    const cubridge_attn_fwd_params& p, const cubridge::fa3::LongestFirst& work, int ctas) {
  return cubridge::fa3::TailSplit(work.count, ctas, cuir_cdiv(p.seqlen_kv, BLOCK_N),
                                  variant_kv_walk_is_whole());
}

// What both roles of a CTA share across its work units: the shared-memory plan and barriers,
// the TMA maps, whether this call's streamed tensor comes by TMA, whether O rows take 16-byte
// stores, and the work order with its tail split (TailSplit; split_ws: the split's workspace,
// null where the call has none, and then nothing splits).
template <typename T, int D>
struct Cta {
  using G = Geo<T, D>;
  cubridge::fa3::SmemPlan<G> sp;
  typename G::Bars* bars;
  const cubridge_attn_fwd_tma_maps& maps;
  bool stream_tma;
  bool o_wide;
  cubridge::fa3::LongestFirst work;
  char* split_ws;
  cubridge::fa3::TailSplit split;

  __device__ __forceinline__ Cta(const cubridge_attn_fwd_params& p, char* workspace,
                                 const cubridge_attn_fwd_tma_maps& maps_, uint8_t* smem,
                                 int block_m)
      : sp(smem),
        bars(sp.bars()),
        maps(maps_),
        stream_tma(stream_tma_ok<D>(p)),
        o_wide(cubridge::fa3::o_rows_16_byte_aligned(p.o, p.o_batch_stride, p.o_head_stride,
                                                     p.o_row_stride)),
        work(work_order<D>(p, block_m)),
        split_ws(HeadDim<D>::kSplits ? split_area<D>(p, workspace) : nullptr),
        split(call_split<D>(p, work, split_ws != nullptr ? static_cast<int>(gridDim.x) : 0)) {}
};

// One work unit (a work tile, or one part of a split tile's KV walk): its index, its part (-1:
// the whole walk) and the part's KV blocks, and the Q buffer its tile uses.
template <typename T, int D>
struct WorkUnit {
  int unit, part, part_lo, part_hi;
  cubridge::fa3::RingPos<Geo<T, D>::kQBuffers> q_at;

  __device__ __forceinline__ WorkUnit(const Cta<T, D>& cta, int unit_, int work_round)
      : unit(unit_),
        part(HeadDim<D>::kSplits ? cta.split.part_of(unit_) : -1),
        part_lo(cta.split.first_block(part)),
        part_hi(cta.split.end_block(part)),
        q_at(work_round) {}
  // The variant's context of this unit's work tile.
  __device__ __forceinline__ VariantTile tile(const Cta<T, D>& cta, const VariantCall& call) const {
    const cubridge::fa3::Tile t = cta.work.tile(cta.split.tile_of(unit));
    const int q_lo = t.m_block * call.BLOCK_M;
    return VariantTile{call, t.m_block, t.head, t.batch, q_lo, min(q_lo + call.BLOCK_M, call.seqlen_q)};
  }
};

#include "producer.cuh"
#include "consumer.cuh"

// The attention kernel: warp-specialised persistent CTAs. The ring position (KV tiles so far)
// and the work tiles so far run on across work units, so the next tile's Q and K/V loads overlap
// this tile's last products and epilogue. Each role runs its own loop over the units, so the
// code of each lies after that role's setmaxnreg and ptxas gives it that role's registers.
template <typename T, int D>
__global__ void __launch_bounds__(Geo<T, D>::kThreads, 1)
    attn_fwd_kernel(const __grid_constant__ cubridge_attn_fwd_params p, char* __restrict__ workspace,
                    const __grid_constant__ cubridge_attn_fwd_tma_maps maps) {
  using namespace cubridge::fa3;
  using G = Geo<T, D>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const VariantCall call{p,         workspace,  rows_per_tile<D>(p.seqlen_q), p.batch,
                         p.heads_q, p.heads_kv, D,          p.seqlen_q,       p.seqlen_kv,
                         p.softmax_scale};
  const Cta<T, D> cta(p, workspace, maps, smem_raw, call.BLOCK_M);
  const int wg = threadIdx.x / 128;
  // The consumer warpgroups that take part in this call (64 rows each).
  const int consumers = call.BLOCK_M / 64;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < 3; ++i) tma_prefetch_desc(maps.map[i]);
    if (cta.stream_tma) tma_prefetch_desc(maps.map[3]);
    init_barriers(cta.bars, consumers * 4);
  }
  __syncthreads();
  if (cta.split_ws != nullptr && blockIdx.x == 0 && threadIdx.x == 0) {
    *reinterpret_cast<SplitHeader*>(cta.split_ws) =
        SplitHeader{static_cast<int>(gridDim.x), cta.split.parts};
  }
  int ring = 0;
  int work_round = 0;
  // The producer keeps one thread with few registers; the consumers take the freed ones.
  if (wg == 0) {
    setmaxnreg_dec<G::kProducerRegs>();
    if (threadIdx.x != 0) return;
    for (int u = cta.work.first(); u < cta.split.units; u = cta.work.next(u), ++work_round) {
      const WorkUnit<T, D> unit(cta, u, work_round);
      produce_unit<T, D>(cta, unit.tile(cta, call), unit, ring);
    }
  } else {
    setmaxnreg_inc<G::kConsumerRegs>();
    // A consumer beyond this call's rows has no part: no barrier counts its warps.
    if (wg > consumers) return;
    for (int u = cta.work.first(); u < cta.split.units; u = cta.work.next(u), ++work_round) {
      const WorkUnit<T, D> unit(cta, u, work_round);
      consume_unit<T, D>(cta, unit.tile(cta, call), unit, ring);
    }
  }
}

// TMA reads rows at 16-byte-aligned addresses with strides that are multiples of 16 bytes (and
// below 2^40); the epilogue's 4-byte stores need O 4-byte aligned with even strides.
__host__ __device__ __forceinline__ bool tma_ok(const void* ptr, int64_t row_stride,
                                                int64_t head_stride, int64_t batch_stride) {
  const auto ok = [](int64_t s) { return s > 0 && s % 8 == 0 && s < (int64_t(1) << 39); };
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && ok(row_stride) && ok(head_stride) &&
         ok(batch_stride);
}

// The instance's part of the plan; returns the call's rows per work tile.
template <int D>
__host__ __device__ __forceinline__ int main_launch(const cubridge_attn_fwd_params& p,
                                                    cubridge_attn_fwd_launch_plan* plan) {
  using G = Geo<__nv_bfloat16, D>;
  using H = HeadDim<D>;
  plan->threads = G::kThreads;
  plan->smem_bytes = G::kSmemBytes;
  // Q, K and V as 64-column (128-byte) swizzled panels of kBlockM / kTileN rows.
  const cubridge_attn_fwd_tma_request q{0, 64, H::kBlockM, 3}, k{1, 64, H::kTileN, 3},
      v{2, 64, H::kTileN, 3};
  plan->tma_count = 3;
  plan->tma[0] = q;
  plan->tma[1] = k;
  plan->tma[2] = v;
  if (stream_tma_ok<D>(p)) {  // the streamed tensor's panels (stream.cuh)
    plan->tma[3] = cubridge_attn_fwd_tma_request{CUBRIDGE_TMA_BUFFER0 + kStreamBuffer,
                                                 static_cast<uint32_t>(StreamL<D>::kPanelCols),
                                                 static_cast<uint32_t>(H::kBlockM),
                                                 StreamL<D>::kSwizzle};
    plan->tma_count = 4;
  }
  plan->split_workspace_bytes = split_workspace_bytes<D>(p);
  return rows_per_tile<D>(p.seqlen_q);
}

// The combine of a split launch (TailSplit, scheduler.cuh): one warp per query row of a split
// tile merges that row's parts into O and LSE. It reads the attention launch's CTA count from
// the workspace header and recomputes the split from it, so a launch that did not split (or a
// call without the workspace for it) makes it return at once.
template <typename T, int D>
__device__ __forceinline__ void combine_split(const cubridge_attn_fwd_params& p, char* workspace) {
  using namespace cubridge::fa3;
  char* const area = split_area<D>(p, workspace);
  if (area == nullptr) return;
  const int block_m = rows_per_tile<D>(p.seqlen_q);
  const LongestFirst work = work_order<D>(p, block_m);
  const TailSplit split =
      call_split<D>(p, work, reinterpret_cast<const SplitHeader*>(area)->ctas);
  if (!split.active()) return;
  const size_t slot_floats = split_slot_floats<D>(block_m);
  const float* const slots = reinterpret_cast<const float*>(area + kSplitHeaderBytes);
  const int rows = (split.units - split.whole) / split.parts * block_m;
  const int warps = static_cast<int>(gridDim.x * (blockDim.x / 32));
  const int lane = threadIdx.x & 31;
  for (int row = static_cast<int>(blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32); row < rows;
       row += warps) {
    const int k = row / block_m, r = row - k * block_m;
    const Tile tile = work.tile(split.whole + k);
    const int q = tile.m_block * block_m + r;
    if (q >= p.seqlen_q) continue;
    const float* const first = slots + static_cast<size_t>(k) * split.parts * slot_floats;
    T* const o_row = static_cast<T*>(p.o) + tile.batch * p.o_batch_stride +
                     tile.head * p.o_head_stride + static_cast<int64_t>(q) * p.o_row_stride;
    float* const lse = p.lse + tile.batch * p.lse_batch_stride + tile.head * p.lse_head_stride + q;
    combine_row<T, D>(first + static_cast<size_t>(r) * D,
                      first + static_cast<size_t>(block_m) * D + r, slot_floats, split.parts,
                      o_row, lse, lane);
  }
}

constexpr int kCombineThreads = 128;

__global__ void __launch_bounds__(kCombineThreads)
    cubridge_attn_fwd_combine(const __grid_constant__ cubridge_attn_fwd_params p,
                              char* __restrict__ workspace) {
  const bool fp16 = p.dtype == 1;
  switch (p.head_dim) {
    case 64: return fp16 ? combine_split<__half, 64>(p, workspace) : combine_split<__nv_bfloat16, 64>(p, workspace);
    case 128: return fp16 ? combine_split<__half, 128>(p, workspace) : combine_split<__nv_bfloat16, 128>(p, workspace);
    case 256: return fp16 ? combine_split<__half, 256>(p, workspace) : combine_split<__nv_bfloat16, 256>(p, workspace);
    default: return;
  }
}

}  // namespace cubridge_fa3



// Whether a launch of `ctas` persistent CTAs splits its last wave (with the split area present).
__host__ __device__ __forceinline__ bool launch_splits(const cubridge_attn_fwd_params& p,
                                                       int block_m, int ctas) {
  using namespace cubridge_fa3;
  switch (p.head_dim) {
    case 64: return call_split<64>(p, work_order<64>(p, block_m), ctas).active();
    case 128: return call_split<128>(p, work_order<128>(p, block_m), ctas).active();
    case 256: return call_split<256>(p, work_order<256>(p, block_m), ctas).active();
    default: return false;
  }
}

// What one call enqueues (cubridge_attn_fwd_launch_plan, common/launch_abi.cuh), computed from
// the parameters alone by one function that runs on the host (the launcher below, built by nvcc)
// and on the device (cubridge_attn_fwd_plan, which a loader of an NVRTC-compiled module runs
// first), TMA map requests included.
__host__ __device__ __forceinline__ void cubridge_attn_fwd_make_plan(
    const cubridge_attn_fwd_params& p, cubridge_attn_fwd_launch_plan* plan) {
  using namespace cubridge_fa3;
  const uint32_t sm_count = plan->sm_count;  // the loader's input; the reset below keeps it
  *plan = cubridge_attn_fwd_launch_plan{};
  plan->sm_count = sm_count;
  plan->version = CUBRIDGE_PLAN_VERSION;
  plan->status = 1;
  if (p.q == nullptr || p.k == nullptr || p.v == nullptr || p.o == nullptr || p.lse == nullptr ||
      p.batch <= 0 || p.heads_q <= 0 || p.heads_kv <= 0 || p.seqlen_q <= 0 || p.seqlen_kv <= 0 ||
      p.batch > 65535 || p.heads_q > 65535 || (p.dtype != 0 && p.dtype != 1) ||
      !tma_ok(p.q, p.q_row_stride, p.q_head_stride, p.q_batch_stride) ||
      !tma_ok(p.k, p.k_row_stride, p.k_head_stride, p.k_batch_stride) ||
      !tma_ok(p.v, p.v_row_stride, p.v_head_stride, p.v_batch_stride) ||
      reinterpret_cast<uintptr_t>(p.o) % 4 != 0 || p.o_row_stride % 2 != 0 ||
      !variant_heads_ok(p) || !variant_buffers_ok(p)) {
    return;
  }
  int block_m = 0;
  switch (p.head_dim) {
    case 64: block_m = main_launch<64>(p, plan); break;
    case 128: block_m = main_launch<128>(p, plan); break;
    case 256: block_m = main_launch<256>(p, plan); break;
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
  // schedule longest_first (scheduler.cuh): one work tile per CTA at most; the kernel strides
  // over them, so a launcher may start fewer CTAs (one per SM: resident_ctas_per_sm).
  const long long work =
      static_cast<long long>(cuir_cdiv(p.seqlen_q, block_m)) * p.heads_q * p.batch;
  if (work > INT_MAX) return;
  plan->grid[0] = static_cast<uint32_t>(work);
  // Fewer tiles than SMs leave SMs idle that a split walk can use (TailSplit): offer enough CTAs
  // for every tile's parts; those past the split's units exit at once.
  if (plan->split_workspace_bytes > 0 && work < cubridge::fa3::kMaxSplitUnits) {
    plan->grid[0] = static_cast<uint32_t>(
        cuir_min<long long>(work * cubridge::fa3::kMaxSplitParts, cubridge::fa3::kMaxSplitUnits));
  }
  plan->grid[1] = plan->grid[2] = 1;
  // Persistent CTAs except where HeadDim<256> says not (64-key tiles at head dim 256: the 256-wide
  // epilogue stays unhidden either way, and the hardware's dispatch balances the tiles better;
  // bench/NOTES.md has the A/B).
  plan->resident_ctas_per_sm = p.head_dim == 256 && !HeadDim<256>::kPersistent ? 0 : 1;
  // The combine of a split last wave (for ... split): 264 CTAs of four warps, a warp per split
  // row in a grid-stride loop (at most 80 tail tiles of 192 rows). Where the loader told its SM
  // count, only if the launch it will make splits.
  if (plan->split_workspace_bytes > 0 &&
      (sm_count == 0 ||
       launch_splits(p, block_m, static_cast<int>(cubridge_attn_fwd_launch_ctas(plan, sm_count))))) {
    plan->combine_grid = 264;
    plan->combine_threads = kCombineThreads;
  }
  plan->status = 0;
}

extern "C" __global__ void cubridge_attn_fwd_plan(const cubridge_attn_fwd_params p,
                                                  cubridge_attn_fwd_launch_plan* plan) {
  cubridge_attn_fwd_make_plan(p, plan);
}

#ifndef __CUDACC_RTC__
namespace cubridge_fa3 {

// The driver's tensor-map encoder, through the runtime (no -lcuda needed).
typedef CUresult (*EncodeTiledFn)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                  const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                  const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                  CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static EncodeTiledFn encode_tiled() {
  static EncodeTiledFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      f = nullptr;
    }
    return reinterpret_cast<EncodeTiledFn>(f);
  }();
  return fn;
}

// A map over captured tensor `b` (launch_abi.cuh, cubridge_attn_fwd_buffer_map_shape).
static int encode_buffer_map(const cubridge_attn_fwd_buffer& b,
                             const cubridge_attn_fwd_tma_request& r, void* out) {
  static const CUtensorMapDataType kTypes[6] = {
      CU_TENSOR_MAP_DATA_TYPE_INT32,   CU_TENSOR_MAP_DATA_TYPE_INT64,
      CU_TENSOR_MAP_DATA_TYPE_UINT8,   CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
      CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, CU_TENSOR_MAP_DATA_TYPE_FLOAT16};
  int64_t shape[4], stride_bytes[3];
  if (cubridge_attn_fwd_buffer_map_shape(&b, shape, stride_bytes) == 0) return cudaErrorInvalidValue;
  cuuint64_t dims[4], bytes[3];
  for (int i = 0; i < 4; ++i) dims[i] = static_cast<cuuint64_t>(shape[i]);
  for (int i = 0; i < 3; ++i) bytes[i] = static_cast<cuuint64_t>(stride_bytes[i]);
  const cuuint32_t box[4] = {r.box_cols, r.box_rows, 1, 1};
  const cuuint32_t unit[4] = {1, 1, 1, 1};
  const CUresult e = encode_tiled()(
      static_cast<CUtensorMap*>(out), kTypes[b.dtype], 4, const_cast<void*>(b.data), dims, bytes,
      box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, static_cast<CUtensorMapSwizzle>(r.swizzle),
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return e == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// The request's map over the call's tensor (launch_abi.cuh: 4-D, innermost first).
static int encode_map(const cubridge_attn_fwd_params& p, const cubridge_attn_fwd_tma_request& r,
                      void* out) {
  const EncodeTiledFn encode = encode_tiled();
  if (encode == nullptr) return cudaErrorNotSupported;
  if (r.tensor >= CUBRIDGE_TMA_BUFFER0) {
    const int i = r.tensor - CUBRIDGE_TMA_BUFFER0;
    if (i >= CUBRIDGE_MAX_BUFFERS) return cudaErrorInvalidValue;
    return encode_buffer_map(p.buffers[i], r, out);
  }
  const void* ptr = r.tensor == 0 ? p.q : r.tensor == 1 ? p.k : r.tensor == 2 ? p.v : p.o;
  const bool is_q = r.tensor == 0 || r.tensor == 3;
  const int64_t* strides = r.tensor == 0   ? &p.q_batch_stride
                           : r.tensor == 1 ? &p.k_batch_stride
                           : r.tensor == 2 ? &p.v_batch_stride
                                           : &p.o_batch_stride;  // batch, head, row
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(p.head_dim),
                              static_cast<cuuint64_t>(is_q ? p.seqlen_q : p.seqlen_kv),
                              static_cast<cuuint64_t>(is_q ? p.heads_q : p.heads_kv),
                              static_cast<cuuint64_t>(p.batch)};
  const cuuint64_t bytes[3] = {static_cast<cuuint64_t>(strides[2]) * 2,
                               static_cast<cuuint64_t>(strides[1]) * 2,
                               static_cast<cuuint64_t>(strides[0]) * 2};
  const cuuint32_t box[4] = {r.box_cols, r.box_rows, 1, 1};
  const cuuint32_t unit[4] = {1, 1, 1, 1};
  const CUresult e = encode(
      static_cast<CUtensorMap*>(out),
      p.dtype == 1 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4,
      const_cast<void*>(ptr), dims, bytes, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
      static_cast<CUtensorMapSwizzle>(r.swizzle), CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return e == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

template <typename T, int D>
static int launch(const cubridge_attn_fwd_params* p, const cubridge_attn_fwd_launch_plan& plan,
                  cudaStream_t stream) {
  cubridge_attn_fwd_tma_maps maps{};
  for (int i = 0; i < plan.tma_count; ++i) {
    if (const int e = encode_map(*p, plan.tma[i], maps.map[i]); e != cudaSuccess) return e;
  }
  cudaError_t err = cudaFuncSetAttribute(
      attn_fwd_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, plan.smem_bytes);
  if (err != cudaSuccess) return err;
  int device = 0, sms = 0;
  if (plan.resident_ctas_per_sm > 0 &&
      (cudaGetDevice(&device) != cudaSuccess ||
       cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)) {
    sms = 0;  // unknown: the whole grid
  }
  const dim3 grid(cubridge_attn_fwd_launch_ctas(&plan, static_cast<uint32_t>(sms)), plan.grid[1],
                  plan.grid[2]);
  char* const workspace = static_cast<char*>(p->workspace);
  attn_fwd_kernel<T, D><<<grid, plan.threads, plan.smem_bytes, stream>>>(*p, workspace, maps);
  // The combine only where this launch splits (the kernel decides the same from its gridDim).
  if (plan.combine_grid > 0 && split_area<D>(*p, workspace) != nullptr &&
      launch_splits(*p, rows_per_tile<D>(p->seqlen_q), static_cast<int>(grid.x))) {
    cubridge_attn_fwd_combine<<<plan.combine_grid, plan.combine_threads, 0, stream>>>(*p,
                                                                                     workspace);
  }
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

}  // namespace cubridge_fa3

#define CUBRIDGE_EXPERT_NS cubridge_fa3
#include "../common/c_launcher.cuh"
#endif  // __CUDACC_RTC__
