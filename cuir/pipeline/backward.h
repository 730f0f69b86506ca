// The backward half of `adapt` (issue 29): the backward expert lifted, the variant transferred onto
// its base_bwd.cuir by the forward's rules (the mask's blocks transposed, the score_mod's
// derivative, the learnable captured tensors' gradients), the result verified on the CPU against
// the float64 autograd of the spec, and lowered into its kernel_bwd.cu. A kernel folder then holds
// kernel_bwd.{cuir,cu,h} beside the forward's, and its report a `backward` section.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "cuir/experts/expert.h"
#include "cuir/ir/config.h"
#include "cuir/lower/lower.h"
#include "cuir/pipeline/verify_backward.h"
#include "cuir/spec/spec.h"
#include "cuir/spec/tensors.h"
#include "cuir/transfer/transfer.h"

namespace cubridge::pipeline {

// The files of a kernel folder's backward.
inline constexpr const char* kBackwardFiles[] = {"kernel_bwd.cuir", "kernel_bwd.cu",
                                                 "kernel_bwd.h"};

// Whether a training job gets a backward kernel: kAuto makes one where the pipeline can and says
// why not elsewhere (the forward is still served), kRequire fails the job without one, kOff
// makes none.
enum class BackwardMode { kAuto, kOff, kRequire };
absl::StatusOr<BackwardMode> ParseBackwardMode(const std::string& s);  // auto | off | require

// The expert whose backward kernel serves `arch` at `head_dim`: the arch's own where its
// kernel_bwd.cu serves that head dim, else the newest older one that does (fa2_sm80's mma.sync
// kernel also runs on sm_90 GPUs). UNIMPLEMENTED naming the head dims there are otherwise.
absl::StatusOr<std::string> BackwardExpertFor(lower::Arch arch, int64_t head_dim);

struct BackwardKernel {
  std::string expert;
  std::string tile;  // the backward program's tile (experts::TileConfig::Name, e.g. "64x128w8")
  std::vector<std::string> grad_buffers;  // the captured tensors whose gradients it computes
  transfer::TransferResult transfer;
  BackwardVerifyReport verification;
  lower::LoweredKernel kernel;
  // "ir" (the CPU verification above), or "gpu" once the kernel also passed on a GPU (adapt's GPU
  // stage: `gpu` holds that check's report).
  std::string verification_level = "ir";
  nlohmann::json gpu;

  // The GPU stage's choice (GpuStage::TuneBackward): its kernel, the program at its tile
  // (report["best_tile"]), verification level "gpu" and the stage's report under `gpu`.
  absl::Status TakeGpuResult(lower::LoweredKernel chosen, const nlohmann::json& report);

  // The report's `backward` section: expert, tile, rules, verification, lowering (entry points
  // and buffer slots, as the forward's `lowering`), grad_buffers.
  nlohmann::json ToJson() const;
  std::map<std::string, std::string> Files() const;  // kBackwardFiles
};

// Lift, transfer, CPU verification and lowering of the spec's backward, for `arch`, at the
// expert's first backward tile for the head dim (experts::Expert::backward_tiles). Failures
// name the step ("transfer: ...", "verify: ...") and keep the cause's status code; `detail` gets
// one line on success.
absl::StatusOr<BackwardKernel> BuildBackward(const spec::Spec& spec,
                                             const cuir::AttentionConfig& config,
                                             const std::map<std::string, spec::BufferSource>& buffers,
                                             lower::Arch arch, uint64_t seed,
                                             const VerifyOptions& verify, std::string* detail);

// The backward tiles of `expert` at the config's head dim, the pipeline's first (empty for an
// expert without backward tiles).
std::vector<experts::TileConfig> BackwardTiles(const std::string& expert,
                                               const cuir::AttentionConfig& config);

// The `backward` section of a report that has no backward kernel, and why.
nlohmann::json BackwardUnavailableJson(const std::string& reason);

}  // namespace cubridge::pipeline
