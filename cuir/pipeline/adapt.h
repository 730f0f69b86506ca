// The local pipeline: lift -> transfer -> verify (CPU) -> lower, with an on-disk cache.
// `cubridge-cli adapt --local` is a thin shell over Adapt(); the service's workers run the same
// stages one at a time.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "cuir/experts/expert.h"
#include "cuir/ir/config.h"
#include "cuir/lower/lower.h"
#include "cuir/pipeline/backward.h"
#include "cuir/pipeline/proposer.h"
#include "cuir/pipeline/verify.h"
#include "cuir/spec/tensors.h"

namespace cubridge::pipeline {

// One stage's outcome, reported as it finishes (the CLI prints these live).
struct StageEvent {
  std::string stage;   // spec | lift | transfer | verify | lower | gpu | backward | backward-gpu | write | cache
  bool ok = true;
  double seconds = 0;
  std::string detail;  // one line
};

// The GPU stages: lift check, candidate lowering, run-time compilation, verification and
// profiling on a real GPU, autotuning. worker/gpu implements them; Adapt() runs without them
// (CPU verification only) when none is given.
struct GpuStageInput {
  const cuir::Program& program;  // transferred, CPU-verified
  const cuir::Program& base;     // the expert's base program (lift check)
  std::string spec_path;
  std::vector<std::string> param_overrides;
  std::map<std::string, spec::BufferSource> buffers;
  cuir::AttentionConfig config;
  lower::Arch arch;
  uint64_t seed;
  VerifyOptions verify;
  std::function<void(const std::string&)> progress;  // one line per candidate
};

struct GpuStageOutput {
  lower::LoweredKernel kernel;  // the fastest verified candidate
  nlohmann::json report;        // device, lift check, every candidate, the choice
  std::string summary;          // one line
  // More files for the kernel folder: the chosen candidate's compiled module for this GPU
  // (worker/gpu's ModuleFileName), so that its users load it without compiling.
  std::map<std::string, std::string> files;
};

class GpuStage {
 public:
  virtual ~GpuStage() = default;
  // A description of the GPU that would run `arch` kernels, or why there is none.
  virtual absl::StatusOr<std::string> Probe(lower::Arch arch) = 0;
  virtual absl::StatusOr<GpuStageOutput> Run(const GpuStageInput& input) = 0;
  // The class of shapes one autotuning result holds for (e.g. "d128-bf16-gqa-s>4k"): GPU-tuned
  // kernels are cached per (spec hash, arch, shape class).
  virtual std::string ShapeClass(const cuir::AttentionConfig& config) const = 0;
  // The backward's GPU stage: the backward `program` (CPU-verified; in.program is the
  // forward's) at each of `tiles` (experts::Expert::backward_tiles), lowered, checked on the GPU
  // against the spec's gradients and profiled at the job's shape; the fastest that passed is the
  // output's kernel, `report` {"candidates", "best"} (a candidate as the forward's, with "tile").
  // FAILED_PRECONDITION when no candidate passed (their reports in the message), other codes
  // for failures on this side.
  virtual absl::StatusOr<GpuStageOutput> TuneBackward(const GpuStageInput& in,
                                                      const cuir::Program& program,
                                                      const std::vector<std::string>& grad_buffers,
                                                      const std::vector<experts::TileConfig>& tiles) = 0;
};

enum class GpuMode { kAuto, kOff, kRequire };

struct AdaptOptions {
  std::string spec_path;
  cuir::AttentionConfig config;
  std::vector<std::string> param_overrides;              // "name=value"
  std::map<std::string, spec::BufferSource> buffers;     // name -> source; default random
  // Kernel params set on the lifted base before transfer, so that verification, lowering and the
  // cache key all see them: a tile other than the expert's own (`--tile`), e.g. BLOCK_N = 176.
  std::map<std::string, int64_t> kernel_params;
  lower::Arch arch = lower::Arch::kSm80;
  std::string out_dir;    // required: where kernel.cuir, kernel.cu, kernel.h, report.json go
  std::string cache_dir;  // empty = DefaultCacheDir()
  bool use_cache = true;
  uint64_t seed = 0;      // verification inputs; 0 = fresh random seed per run
  VerifyOptions verify;
  std::function<void(const StageEvent&)> on_stage;
  // kAuto: run the GPU stages when `gpu` finds a usable GPU, else say they were skipped.
  // kRequire: fail without one. kOff: CPU verification only.
  GpuStage* gpu = nullptr;
  GpuMode gpu_mode = GpuMode::kAuto;
  // The backward kernel (kernel_bwd.*, the report's `backward`): by default made where the
  // pipeline can, its absence explained in the report otherwise (backward.h).
  BackwardMode backward = BackwardMode::kAuto;
  // Who proposes the transferred program; null = the rules. An LLM conversation is written to
  // out_dir/transcript.json with the outputs, and to *transcript whatever the outcome.
  Proposer* proposer = nullptr;
  nlohmann::json* transcript = nullptr;
};

struct AdaptResult {
  std::string spec_hash;
  bool cache_hit = false;
  nlohmann::json report;
};

// Runs the pipeline. On any failure nothing is written to out_dir (it is not even created) and
// the status names the stage: "transfer: not covered by the rules: ...".
absl::StatusOr<AdaptResult> Adapt(const AdaptOptions& options);

// $CUBRIDGE_CACHE_DIR, else $XDG_CACHE_HOME/cubridge, else ~/.cache/cubridge.
std::string DefaultCacheDir();
// $CUBRIDGE_EXPERTS_DIR, else the source tree's cuir/experts.
std::string ExpertsDir();

}  // namespace cubridge::pipeline
