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

}  // namespace

// kernel_bwd.cu: head dim 256 needs a narrower tile for dK and dV in registers (not yet written).
extern const Expert kFa2Sm80 = {"fa2_sm80", lower::Arch::kSm80, Tiles, Breaks, {64, 128}};

}  // namespace cubridge::experts
