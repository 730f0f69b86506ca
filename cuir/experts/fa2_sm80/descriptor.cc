// The Ampere expert (kernel.cu): mma.sync, cp.async, its own K/V stages.
#include <cstddef>

#include "absl/strings/str_cat.h"
#include "cuir/experts/expert.h"

namespace cubridge::experts {
namespace {

// Opt-in shared memory per block on an A100 (the arch's smallest): 163 KiB usable.
constexpr size_t kSmemLimit = 163 * 1024;

std::vector<TileConfig> Tiles(const cuir::AttentionConfig&) {
  return {{128, 64, 4}, {128, 128, 8}, {64, 64, 4}, {128, 32, 4}, {64, 128, 4}};
}

// Tiling<D>: 16 rows per warp and keys in multiples of 16; head dim 256 doubles the warps when
// the tile has 32 rows per warp; Q and two K/V blocks in bf16/fp16 within shared memory.
std::string Breaks(const TileConfig& t, const cuir::AttentionConfig& config) {
  const int warps = config.head_dim > 128 && t.block_m >= 32 * t.warps ? 2 * t.warps : t.warps;
  const size_t smem = static_cast<size_t>(t.block_m + 2 * t.block_n) * config.head_dim * 2;
  const bool ok = t.block_m > 0 && t.block_n > 0 && t.warps > 0 && t.stages == 0 &&
                  t.block_m % (16 * warps) == 0 && t.block_n % 16 == 0 && smem <= kSmemLimit;
  return ok ? ""
            : absl::StrCat("BLOCK_M a multiple of 16 rows per warp, BLOCK_N a multiple of 16, "
                           "(BLOCK_M + 2 BLOCK_N) x head dim x 2 bytes within ",
                           kSmemLimit / 1024, " KiB, the expert's own stages");
}

// kernel_bwd.cu: 64 query rows x 128 keys (a warp per 16 keys) up to head dim 128; at 256, 32 x 64
// with two warps per 16 keys, each holding half of dK's and dV's columns (the tile's 16 x 256 x 2
// accumulators would not fit in one warp's registers), which keeps K, V and two stages of Q and dO
// within an A100's shared memory (132.5 KiB). At 128 that split tile is an alternative.
std::vector<TileConfig> BackwardTiles(const cuir::AttentionConfig& config) {
  if (config.head_dim == 256) return {{32, 64, 8}};
  if (config.head_dim == 128) return {{64, 128, 8}, {32, 64, 8}};
  return {{64, 128, 8}};
}

}  // namespace

extern const Expert kFa2Sm80 = {"fa2_sm80", lower::Arch::kSm80, Tiles, Breaks, {64, 128, 256},
                                BackwardTiles};

}  // namespace cubridge::experts
