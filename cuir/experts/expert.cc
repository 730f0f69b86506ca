#include "cuir/experts/expert.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cubridge::experts {

std::string TileConfig::Name() const {
  std::string name = absl::StrFormat("%dx%dw%d", block_m, block_n, warps);
  if (stages > 0) absl::StrAppend(&name, "s", stages);
  return name;
}

absl::StatusOr<TileConfig> ParseTile(const std::string& name) {
  TileConfig tile;
  char w = 0, s = 0, extra = 0;
  const int n = std::sscanf(name.c_str(), "%dx%d%c%d%c%d%c", &tile.block_m, &tile.block_n, &w,
                            &tile.warps, &s, &tile.stages, &extra);
  if ((n != 4 && n != 6) || w != 'w' || (n == 6 && (s != 's' || tile.stages <= 0)) ||
      tile.block_m <= 0 || tile.block_n <= 0 || tile.warps <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tile '", name, "' must be BLOCK_MxBLOCK_NwWARPS[sSTAGES], e.g. 128x64w4 or 128x128w12s2"));
  }
  return tile;
}

std::map<std::string, int64_t> TileParams(const TileConfig& tile) {
  std::map<std::string, int64_t> params = {
      {"BLOCK_M", tile.block_m}, {"BLOCK_N", tile.block_n}, {"WARPS", tile.warps}};
  if (tile.stages > 0) params["STAGES"] = tile.stages;
  return params;
}

absl::StatusOr<cuir::Program> WithTile(const cuir::Program& program, const TileConfig& tile) {
  return cuir::WithParams(program, TileParams(tile));
}

const Expert& ExpertFor(lower::Arch arch) {
  for (const Expert* e : Registry()) {
    if (e->arch == arch) return *e;
  }
  // lower::Arch has no value without an expert: registry_test checks every one has one.
  std::abort();
}

std::vector<TileConfig> CandidateTiles(const cuir::AttentionConfig& config, lower::Arch arch) {
  const Expert& e = ExpertFor(arch);
  std::vector<TileConfig> out;
  for (const TileConfig& t : e.tiles(config)) {
    if (e.breaks(t, config).empty()) out.push_back(t);
  }
  return out;
}

absl::Status TileFits(const TileConfig& t, const cuir::AttentionConfig& config, lower::Arch arch) {
  const Expert& e = ExpertFor(arch);
  const std::string rule = e.breaks(t, config);
  if (rule.empty()) return absl::OkStatus();
  const auto fits = CandidateTiles(config, arch);
  return absl::InvalidArgumentError(absl::StrCat(
      "tile ", t.Name(), " does not fit expert ", e.name, " at head dim ", config.head_dim, " (",
      rule, ")", fits.empty() ? "" : absl::StrCat("; e.g. ", fits.front().Name())));
}

std::string ShapeClass(const cuir::AttentionConfig& c) {
  const int64_t s = std::max(c.seqlen_q, c.seqlen_kv);
  const char* bucket = s <= 1024 ? "s<=1k" : s <= 4096 ? "s<=4k" : "s>4k";
  return absl::StrCat("d", c.head_dim, "-", cuir::DTypeName(c.dtype), "-",
                      c.heads_q == c.heads_kv ? "mha" : "gqa", "-", bucket);
}

}  // namespace cubridge::experts
