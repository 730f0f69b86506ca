// The GPU stage of the pipeline: lower the verified program once per tile configuration,
// compile every candidate with NVRTC, verify and profile each in a runner child, keep the
// fastest verified one. One of these also checks the lift (base program vs compiled expert).
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cuir/pipeline/adapt.h"
#include "worker/gpu/isolate.h"
#include "worker/gpu/nvrtc.h"
#include "worker/gpu/run_request.h"

namespace cubridge::gpu {

struct TileConfig {
  int block_m = 128, block_n = 64, warps = 4;
  // K/V pipeline stages (the program's STAGES param); 0 keeps the program's own. On sm_90 two
  // stages at head dim 128 leave room for a second Q buffer (cuir/experts/fa3_sm90/kernel.cu).
  int stages = 0;
  std::string Name() const;  // "128x64w4", with stages "128x128w12s2"
};
absl::StatusOr<TileConfig> ParseTile(const std::string& name);  // inverse of Name()

// How a candidate report ranks: -1 failed, 0 verified but not profiled, else its TFLOP/s on
// kept elements.
double Score(const nlohmann::json& candidate);

// The tile configurations worth trying for a head dim on an arch: valid for the expert (rows
// per warp a multiple of 16, BLOCK_N a multiple of 16) and within the arch's shared memory.
std::vector<TileConfig> CandidateTiles(const cuir::AttentionConfig& config, lower::Arch arch);
// Whether the arch's expert can run `tile` at the config's head dim; the error says its rule.
absl::Status TileFits(const TileConfig& tile, const cuir::AttentionConfig& config, lower::Arch arch);
// Autotuning results hold for a shape class: head dim, dtype, GQA or not, and the seqlen bucket.
std::string ShapeClass(const cuir::AttentionConfig& config);
// The kernel params a tile sets (BLOCK_M, BLOCK_N, WARPS, and STAGES where it names them), and
// the program with them set.
std::map<std::string, int64_t> TileParams(const TileConfig& tile);
absl::StatusOr<cuir::Program> WithTile(const cuir::Program& program, const TileConfig& tile);

struct AutotuneOptions {
  IsolateOptions isolate;          // runner, per-candidate time limit
  std::string work_root;           // scratch folders; empty = a fresh folder under /tmp
  std::vector<TileConfig> tiles;   // empty = CandidateTiles()
  ProfileOptions profile;
  bool lift_check = true;
};

class GpuAutotuner : public pipeline::GpuStage {
 public:
  explicit GpuAutotuner(AutotuneOptions options);
  absl::StatusOr<std::string> Probe(lower::Arch arch) override;
  absl::StatusOr<pipeline::GpuStageOutput> Run(const pipeline::GpuStageInput& input) override;
  std::string ShapeClass(const cuir::AttentionConfig& config) const override {
    return gpu::ShapeClass(config);
  }

  ~GpuAutotuner() override;

  // The device document the runner reported (after a successful Probe).
  const nlohmann::json& device() const { return device_; }
  // The compiled module of a candidate this tuner checked (by its name: the tile's), with the
  // file name a kernel folder keeps it under for this GPU; nullopt when it did not compile.
  std::optional<std::pair<std::string, CompiledModule>> ModuleOf(const std::string& name) const;

  // The lift check: the expert compiled from its base program against the interpreter running
  // that program, on the job's shape with MHA heads. The check's report ("passed", ...).
  absl::StatusOr<nlohmann::json> LiftCheck(const pipeline::GpuStageInput& in);
  // One autotuning candidate: the program at `tile`, lowered, compiled, verified and profiled.
  // Its report; `kernel` receives the lowered kernel when it lowered.
  absl::StatusOr<nlohmann::json> CheckTile(const pipeline::GpuStageInput& in, const TileConfig& tile,
                                           lower::LoweredKernel* kernel);

  // Compiles one kernel and checks it in a runner child (after a successful Probe): the
  // candidate's report, {"passed": false, "error": ...} for a candidate that does not compile,
  // crashes or hangs. `reference_program` non-empty: compare with its interpretation instead of
  // the oracle. Errors only for failures on this side.
  absl::StatusOr<nlohmann::json> CheckCandidate(const pipeline::GpuStageInput& in,
                                                const lower::LoweredKernel& kernel,
                                                const cuir::Program& program,
                                                const std::string& name,
                                                const std::string& reference_program,
                                                bool profile);

 private:
  absl::StatusOr<std::string> WorkDir(const std::string& name);

  AutotuneOptions options_;
  bool own_work_root_ = false;
  std::optional<absl::StatusOr<std::string>> probe_;
  nlohmann::json device_;
  int device_cc_ = 0;  // 80, 90, ...
  // Each candidate's compiled module, by name, this Run: the chosen one's goes to the folder.
  std::map<std::string, CompiledModule> compiled_;
};

}  // namespace cubridge::gpu
