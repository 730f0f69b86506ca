// The Hopper expert (kernel.cu): one producer and two consumer warpgroups, wgmma, TMA.
#include "absl/strings/str_cat.h"
#include "cuir/experts/expert.h"

namespace cubridge::experts {
namespace {

// 128 query rows, 128- or 64-key blocks; the kernel fits its K/V stages in shared memory itself
// (kStages) and walks a 128-key block as two tiles at head dim 256, so both serve every head dim.
// Up to head dim 128 a 176-key score tile fits too: faster on long dense rows and at head dim 64,
// slower at S = 1k and on document masks, so a candidate, not the default. At head dim 128 a
// 128-key tile with two K/V stages instead of three has room for a second Q buffer: faster on
// document masks (short KV walks per query tile), slower on long dense rows. At head dim 256
// the 80-key block (one 80-key score tile, FlashAttention-3's choice there) comes first, so the
// `ir` level gets it too. Measurements: docs/benchmarks.md.
std::vector<TileConfig> Tiles(const cuir::AttentionConfig& config) {
  if (config.head_dim == 128) {
    return {{128, 128, 12}, {128, 176, 12}, {128, 128, 12, 2}, {128, 64, 12}};
  }
  if (config.head_dim < 128) return {{128, 128, 12}, {128, 176, 12}, {128, 64, 12}};
  return {{128, 80, 12}, {128, 128, 12}, {128, 64, 12}};
}

// The kernel's own static_asserts: two consumer warpgroups of 64 rows, blocks of 64, 80, 176 or
// a multiple of 128 keys, and 2 to 4 K/V stages (it drops to two by itself where more do not fit).
std::string Breaks(const TileConfig& t, const cuir::AttentionConfig&) {
  const bool ok = t.block_m == 128 && t.warps == 12 &&
                  (t.block_n == 64 || t.block_n == 80 || t.block_n == 176 ||
                   (t.block_n > 0 && t.block_n % 128 == 0)) &&
                  (t.stages == 0 || (t.stages >= 2 && t.stages <= 4));
  return ok ? "" : "BLOCK_M 128, 12 warps, BLOCK_N 64, 80, 176 or a multiple of 128, stages 2 to 4";
}

// kernel_bwd.cu: 64 query rows x 128 keys (a warpgroup per 64 keys) up to head dim 128; at 256,
// 64 x 64 with both warpgroups on the same keys, each holding half of dK's and dV's columns
// (202 KiB of shared memory). At 128 that split tile is an alternative.
std::vector<TileConfig> BackwardTiles(const cuir::AttentionConfig& config) {
  if (config.head_dim == 256) return {{64, 64, 8}};
  if (config.head_dim == 128) return {{64, 128, 8}, {64, 64, 8}};
  return {{64, 128, 8}};
}

}  // namespace

extern const Expert kFa3Sm90 = {"fa3_sm90", lower::Arch::kSm90, Tiles, Breaks, {64, 128, 256},
                                BackwardTiles};

}  // namespace cubridge::experts
