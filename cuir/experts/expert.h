// An expert kernel as its users outside the kernel see it: its folder, the arch it serves, the
// tiles worth trying and the rule a tile must keep. The pipeline picks the expert of an arch
// here, the autotuner and the coordinator enumerate its tiles, the CLI checks a --tile against
// its rule. Adding an expert is its folder (kernel, base.cuir, descriptor.cc) and one line in
// registry.cc.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuir/ir/config.h"
#include "cuir/ir/program.h"
#include "cuir/lower/lower.h"

namespace cubridge::experts {

struct TileConfig {
  int block_m = 128, block_n = 64, warps = 4;
  // K/V pipeline stages (the program's STAGES param); 0 keeps the program's own.
  int stages = 0;
  std::string Name() const;  // "128x64w4", with stages "128x128w12s2"
};
absl::StatusOr<TileConfig> ParseTile(const std::string& name);  // inverse of Name()

// The kernel params a tile sets (BLOCK_M, BLOCK_N, WARPS, and STAGES where it names them), and
// the program with them set.
std::map<std::string, int64_t> TileParams(const TileConfig& tile);
absl::StatusOr<cuir::Program> WithTile(const cuir::Program& program, const TileConfig& tile);

struct Expert {
  const char* name;  // its folder under cuir/experts, e.g. "fa3_sm90"
  lower::Arch arch;
  // The tiles worth trying at a config, the expert's own first: the `ir` level takes it alone,
  // unprofiled.
  std::vector<TileConfig> (*tiles)(const cuir::AttentionConfig& config);
  // "" when the kernel runs `tile` at the config, else the rule it breaks, in words.
  std::string (*breaks)(const TileConfig& tile, const cuir::AttentionConfig& config);
  // The head dims its backward kernel (kernel_bwd.cu) serves; empty: it has none.
  std::vector<int> backward_head_dims = {};
  // The backward's tiles at a config of one of those head dims, the one the pipeline lowers
  // first (the backward program's BLOCK_M, BLOCK_N, WARPS; the kernel's static_asserts and
  // BwdTiling::kServed are the rule), the others valid alternatives at that head dim.
  std::vector<TileConfig> (*backward_tiles)(const cuir::AttentionConfig& config) = nullptr;
};

// Every expert (registry.cc), one per arch.
const std::vector<const Expert*>& Registry();
const Expert& ExpertFor(lower::Arch arch);

// The arch's expert's tiles that keep its rule at the config, its own first.
std::vector<TileConfig> CandidateTiles(const cuir::AttentionConfig& config, lower::Arch arch);
// Whether the arch's expert runs `tile` at the config's head dim; the error says its rule.
absl::Status TileFits(const TileConfig& tile, const cuir::AttentionConfig& config,
                      lower::Arch arch);
// Autotuning results hold for a shape class: head dim, dtype, GQA or not, and the seqlen bucket.
std::string ShapeClass(const cuir::AttentionConfig& config);

}  // namespace cubridge::experts
