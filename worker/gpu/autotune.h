// The GPU stage of the pipeline: lower the verified program once per tile configuration,
// compile every candidate with NVRTC, verify and profile each in a runner child, keep the
// fastest verified one. One of these also checks the lift (base program vs compiled expert).
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cuir/experts/expert.h"
#include "cuir/pipeline/adapt.h"
#include "worker/gpu/isolate.h"
#include "worker/gpu/nvrtc.h"
#include "worker/gpu/run_request.h"

namespace cubridge::gpu {

using experts::TileConfig;

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
    return experts::ShapeClass(config);
  }

  ~GpuAutotuner() override;

  // The device document the runner reported (after a successful Probe).
  const nlohmann::json& device() const { return device_; }
  // Every GPU the probe saw (DeviceJson each, by ordinal), after a successful Probe.
  const nlohmann::json& devices() const { return devices_; }
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
  // CheckTile of another program than in.program, under `name`; `grad_buffers` non-null: a
  // backward program, checked against the spec's gradients (CheckCandidate's backward).
  absl::StatusOr<nlohmann::json> CheckProgramTile(const pipeline::GpuStageInput& in,
                                                  const cuir::Program& program,
                                                  const TileConfig& tile, const std::string& name,
                                                  const std::vector<std::string>* grad_buffers,
                                                  lower::LoweredKernel* kernel);

  // Compiles one kernel and checks it in a runner child (after a successful Probe): the
  // candidate's report, {"passed": false, "error": ...} for a candidate that does not compile,
  // crashes or hangs. `reference_program` non-empty: compare with its interpretation instead of
  // the oracle. `grad_buffers` non-null: the kernel is a backward (RunRequest::backward) and
  // `reference_program` its program. Errors only for failures on this side.
  absl::StatusOr<nlohmann::json> CheckCandidate(const pipeline::GpuStageInput& in,
                                                const lower::LoweredKernel& kernel,
                                                const cuir::Program& program,
                                                const std::string& name,
                                                const std::string& reference_program,
                                                bool profile,
                                                const std::vector<std::string>* grad_buffers = nullptr);

  // Each backward tile in a runner child: against the spec's float64 autograd (fast mode and
  // twice deterministic, bitwise equal; every element from NaN; at BackwardVerifyShapes), then
  // profiled at the job's shape; the fastest that passed is kept.
  absl::StatusOr<pipeline::GpuStageOutput> TuneBackward(
      const pipeline::GpuStageInput& in, const cuir::Program& program,
      const std::vector<std::string>& grad_buffers,
      const std::vector<TileConfig>& tiles) override;

 private:
  absl::StatusOr<std::string> WorkDir(const std::string& name);

  AutotuneOptions options_;
  bool own_work_root_ = false;
  std::optional<absl::StatusOr<std::string>> probe_;
  nlohmann::json device_, devices_;
  int device_cc_ = 0;  // 80, 90, ...
  // Each candidate's compiled module, by name, this Run: the chosen one's goes to the folder.
  std::map<std::string, CompiledModule> compiled_;
};

}  // namespace cubridge::gpu
