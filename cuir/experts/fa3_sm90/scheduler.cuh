// Tile order of the sm_90 expert (`grid ... schedule longest_first`), persistent: the work tiles
// (m_block, head, batch) are numbered in the order below and each CTA takes every gridDim.x-th,
// so a launcher may start only as many CTAs as fit on the GPU at once (one per SM) and each
// CTA's next Q and K/V loads run under its current tile's last products and epilogue. With one
// CTA per work tile (gridDim.x = count) it is the plain grid. The order:
//  - the (head, batch) pairs are cut into groups whose K/V fit in a share of L2 (kL2GroupBytes;
//    the query heads of a GQA group count once), and one group's tiles all come before the
//    next's: the CTAs working at one time read the K/V of a few heads, which stay in L2 while
//    every query tile of those heads streams them. With all heads at once a wave read K/V from
//    DRAM again and again (measured: 87% of DRAM bandwidth, 40% L2 hits, half the tensor rate);
//  - within a group the query tile is the slowest axis, from the last to the first: under
//    causal-like masks the last tiles visit the most KV blocks, so every wave holds tiles of about
//    one length, the long ones first and the short ones in the tail. A static stride over tiles
//    of one length is balanced; with the query tile fastest a CTA striding by gridDim.x met
//    only two query tiles (132 = 4 mod 8 at S = 1k): one CTA got the longest, another the
//    shortest, and the last CTA finished 31% after the mean (measured: causal 1k 18% slower);
//  - without such a mask the order changes nothing but the L2 reuse;
//  - MHA only: every other group, counted back from the last, runs its query tiles from the first
//    to the last instead. An MHA group holds few pairs (6 at S = 8k, 4 MB of K/V each), so one
//    pass of the CTAs spans 22 query tiles of very different lengths; with every group longest
//    first, a group ended on its shortest tiles while the next began on its longest, the static
//    stride let CTAs run two or three groups apart, and the K/V they read at once outgrew L2
//    (measured: 59% L2 hits, DRAM 6x the compulsory bytes at causal 8k; a trace model with a
//    25 MB LRU, one of the H100's two L2 halves, gives 65%). Alternating puts short tiles against
//    short and long against long at each boundary: 88% hits (model 95%), causal 8k 6.5% faster
//    at ncu's fixed clock (docs/benchmarks.md, 2026-11-25). GQA groups hold every query head of
//    their kv heads (48 pairs at Qwen's 64/8) and already met 94-95% hits; alternating them
//    measured 0.94-1.02, so they keep the plain order.
//  - MHA where every work tile walks the same KV blocks (the program keeps the base range and
//    has no block table: `whole_walks`): groups of kWholeWalkMhaPairs pairs. Tiles of one length
//    balance under any static stride, so the groups need not be large, and small ones keep a
//    pair's query tiles in flight together: at S = 1k +3.5..+7.5% on full attention, relative
//    position, ALiBi and softcap at Llama2 heads, at 8k 0.98-1.01 (A/B, docs/benchmarks.md,
//    2026-11-25; one-pair groups by hand: 1k +2.5..+7.2%, 8k -2.3..+0.6%).
#pragma once

#include "../common/cuir_platform.cuh"
#include "../common/cuir_scalar.cuh"

namespace cubridge {
namespace fa3 {

// The two warp roles, as types: a kernel instantiates its per-tile code once per role.
struct ProducerRole {
  static constexpr bool kProducer = true;
};
struct ConsumerRole {
  static constexpr bool kProducer = false;
};

struct Tile {
  int m_block, head, batch;
};

// K/V bytes one group of (head, batch) pairs may bring to L2: under half of an H100's 50 MB, so
// the next group's first tiles and the O stores find room.
constexpr long long kL2GroupBytes = 24ll << 20;
// Pairs per group under MHA when every tile walks the same KV blocks (see above).
constexpr int kWholeWalkMhaPairs = 2;

struct LongestFirst {
  int m_blocks, heads, count;
  int pairs, group;  // (head, batch) pairs; pairs per group
  int groups;        // groups of pairs, the last one perhaps short
  bool alternate;    // MHA: every other group runs its query tiles first to last (see above)
  // The decode's divisors, fixed per launch: a division per tile cost 3.6% of the samples at
  // S = 1k (bench/sm90/NOTES.md) as the subroutine; the last group may be short.
  cuir_fastdiv by_group_tiles, by_group, by_last_group, by_heads;

  // kv_head_bytes: K and V of one kv head; heads_per_kv: query heads sharing it (GQA);
  // whole_walks: every tile walks the same KV blocks.
  __host__ __device__ __forceinline__ LongestFirst(int m_blocks_, int heads_, int batch,
                                          long long kv_head_bytes, int heads_per_kv,
                                          bool whole_walks)
      : m_blocks(m_blocks_), heads(heads_), count(m_blocks_ * heads_ * batch),
        pairs(heads_ * batch) {
    const long long kv_heads = kv_head_bytes > 0 ? kL2GroupBytes / kv_head_bytes : pairs;
    group = whole_walks && heads_per_kv <= 1
                ? cuir_min(pairs, kWholeWalkMhaPairs)
                : static_cast<int>(cuir_min<long long>(
                      pairs, cuir_max<long long>(1, kv_heads) * cuir_max(1, heads_per_kv)));
    groups = cuir_cdiv(pairs, group);
    alternate = heads_per_kv <= 1;
    by_group_tiles = cuir_fastdiv(group * m_blocks);
    by_group = cuir_fastdiv(group);
    const int last = pairs - (pairs - 1) / group * group;
    by_last_group = cuir_fastdiv(last);
    by_heads = cuir_fastdiv(heads);
  }
  __device__ __forceinline__ static int first() { return static_cast<int>(blockIdx.x); }
  __device__ __forceinline__ static int next(int w) { return w + static_cast<int>(gridDim.x); }
  // Host and device: tests/lower/nvcc_test.cc checks it against plain division.
  __host__ __device__ __forceinline__ Tile tile(int w) const {
    const int group_index = by_group_tiles.div(w);
    const int first_pair = group_index * group;
    const int in = w - first_pair * m_blocks;
    // The last group may be short. Both divisions, then a select: a divider picked by reference
    // at run time would put *this in local memory.
    int slot_full, slot_last, head;
    const int row_full = by_group.divmod(in, &slot_full);
    const int row_last = by_last_group.divmod(in, &slot_last);
    const bool full = first_pair + group <= pairs;
    Tile t;
    const int row = full ? row_full : row_last;
    // The last group always runs longest first, so the tail holds the short tiles.
    const bool descending = !alternate || ((groups - 1 - group_index) & 1) == 0;
    t.m_block = descending ? m_blocks - 1 - row : row;
    t.batch = by_heads.divmod(first_pair + (full ? slot_full : slot_last), &head);
    t.head = head;
    return t;
  }
};

// The last wave split (`for ... split`, base.cuir). Where every work tile walks the same KV
// blocks, tiles cost alike, and `tiles` tiles on `ctas` persistent CTAs end in a partial wave:
// tiles % ctas CTAs run one more tile while the rest idle (Llama2 heads at S = 8k: 4096 tiles,
// 31.03 waves on 132 SMs; 33 heads, 32 waves even, ran 2.7% faster, for cuDNN alike). Instead
// the tail tiles' KV walks are cut into `parts` runs of consecutive blocks, each a work unit of
// its own after every whole tile; each unit stores its O and LSE (fp32) in the workspace and a
// combine kernel merges them (kernel.cu). Units in order: the `whole` tiles first (a multiple
// of ctas, so the split units all run in the last wave), then tail tile k's parts 0..parts-1.
constexpr int kMaxSplitParts = 16;   // the combine reads parts x 4 B per output element
constexpr int kMinSplitBlocks = 2;   // KV blocks per part at least
constexpr int kMaxSplitUnits = 160;  // partial results the workspace holds (>= any H100's SMs)

struct TailSplit {
  int whole;  // work tiles run whole, first
  int parts;  // runs per tail tile's KV walk (1: no split)
  int units;  // work units in all
  int kv_blocks;

  __host__ __device__ __forceinline__ TailSplit(int tiles, int ctas, int kv_blocks_,
                                                bool whole_walks)
      : whole(tiles), parts(1), units(tiles), kv_blocks(kv_blocks_) {
    if (!whole_walks || ctas <= 0 || tiles <= 0) return;
    const int tail = tiles % ctas;
    if (tail == 0) return;
    // s = min(ctas / tail, kMaxSplitParts, kv_blocks / kMinSplitBlocks, kMaxSplitUnits / tail),
    // counted up. Not written with those divisions: kv_blocks is -floordiv(-seqlen_kv, BLOCK_N),
    // and CUDA 13.0's ptxas (sm_90a; the 580 driver's JIT alike) fuses min(x, -y) into a
    // following min as one three-way min that reads y without its negation, so that form gave
    // -kv_blocks / 2 at the kernel's entry and nothing split. tests/gpu/split_count_test.cc
    // holds the reduced case and checks this loop at a kernel's entry against the host.
    int s = 1;
    while (s < kMaxSplitParts && (s + 1) * tail <= ctas && (s + 1) * tail <= kMaxSplitUnits &&
           (s + 1) * kMinSplitBlocks <= kv_blocks) {
      ++s;
    }
    if (s < 2) return;
    whole = tiles - tail;
    parts = s;
    units = whole + tail * s;
  }
  __host__ __device__ __forceinline__ bool active() const { return parts > 1; }
  // Unit u's work tile (LongestFirst::tile's index) and part (-1: the whole walk).
  __host__ __device__ __forceinline__ int tile_of(int u) const {
    return u < whole ? u : whole + (u - whole) / parts;
  }
  __host__ __device__ __forceinline__ int part_of(int u) const {
    return u < whole ? -1 : (u - whole) % parts;
  }
  // Part k's KV blocks [first_block(k), first_block(k + 1)); the whole walk for k = -1.
  __host__ __device__ __forceinline__ int first_block(int k) const {
    return k < 0 ? 0 : static_cast<int>(static_cast<long long>(k) * kv_blocks / parts);
  }
  __host__ __device__ __forceinline__ int end_block(int k) const {
    return k < 0 ? INT_MAX : first_block(k + 1);
  }
};

}  // namespace fa3
}  // namespace cubridge
