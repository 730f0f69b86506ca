#include "cuir/pipeline/backward.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cuir/experts/expert.h"
#include "cuir/ir/program.h"
#include "cuir/lower/expert.h"
#include "cuir/lower/lift.h"
#include "cuir/pipeline/stages.h"

namespace cubridge::pipeline {
namespace {

// Prefixes a failure with the step it happened in, keeping its code.
absl::Status At(const std::string& step, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(step, ": ", s.message()));
}

}  // namespace

absl::StatusOr<BackwardMode> ParseBackwardMode(const std::string& s) {
  if (s == "auto") return BackwardMode::kAuto;
  if (s == "off") return BackwardMode::kOff;
  if (s == "require") return BackwardMode::kRequire;
  return absl::InvalidArgumentError(absl::StrCat(
      "--backward ", s, ": accepted values are auto (a backward kernel where the pipeline can "
      "make one), off (forward only) and require (fail without one)"));
}

absl::StatusOr<std::string> BackwardExpertFor(lower::Arch arch, int64_t head_dim) {
  // Newest first: the arch's own expert, then the older ones.
  std::vector<const experts::Expert*> candidates;
  for (const experts::Expert* e : experts::Registry()) {
    if (e->arch == arch) candidates.insert(candidates.begin(), e);
    // Arch is ordered oldest first: an older arch's kernel runs on newer GPUs.
    else if (static_cast<int>(e->arch) < static_cast<int>(arch)) candidates.push_back(e);
  }
  std::vector<std::string> served;
  for (const experts::Expert* e : candidates) {
    const auto& dims = e->backward_head_dims;
    if (dims.empty()) continue;
    if (std::find(dims.begin(), dims.end(), head_dim) != dims.end()) return std::string(e->name);
    served.push_back(absl::StrCat(e->name, "'s serves head dims ", absl::StrJoin(dims, ", ")));
  }
  return absl::UnimplementedError(absl::StrCat(
      "no backward kernel for ", lower::ArchName(arch), " serves head dim ", head_dim, " yet",
      served.empty() ? "" : absl::StrCat(" (", absl::StrJoin(served, "; "), ")")));
}

std::vector<experts::TileConfig> BackwardTiles(const std::string& expert,
                                               const cuir::AttentionConfig& config) {
  for (const experts::Expert* e : experts::Registry()) {
    if (expert == e->name && e->backward_tiles != nullptr) return e->backward_tiles(config);
  }
  return {};
}

absl::Status BackwardKernel::TakeGpuResult(lower::LoweredKernel chosen,
                                           const nlohmann::json& report) {
  const std::string best = report.value("best_tile", tile);
  if (best != tile) {
    auto parsed = experts::ParseTile(best);
    if (!parsed.ok()) return parsed.status();
    auto program = experts::WithTile(transfer.program, *parsed);
    if (!program.ok()) return program.status();
    transfer.program = *std::move(program);
    tile = best;
  }
  kernel = std::move(chosen);
  verification_level = "gpu";
  gpu = report;
  return absl::OkStatus();
}

nlohmann::json BackwardKernel::ToJson() const {
  nlohmann::json out = {{"available", true},
                        {"expert", expert},
                        {"tile", tile},
                        {"grad_buffers", grad_buffers},
                        {"transfer", AppliedRulesJson(transfer)},
                        {"verification", verification.ToJson()},
                        {"verification_level", verification_level},
                        {"lowering", LoweringJson(kernel)},
                        {"entries", kernel.device_entries}};
  if (!gpu.is_null()) out["gpu"] = gpu;
  return out;
}

std::map<std::string, std::string> BackwardKernel::Files() const {
  return {{"kernel_bwd.cuir", cuir::PrintProgram(transfer.program)},
          {"kernel_bwd.cu", kernel.cuda_source},
          {"kernel_bwd.h", kernel.launcher_header}};
}

nlohmann::json BackwardUnavailableJson(const std::string& reason) {
  return {{"available", false}, {"reason", reason}};
}

absl::StatusOr<BackwardKernel> BuildBackward(const spec::Spec& spec,
                                             const cuir::AttentionConfig& config,
                                             const std::map<std::string, spec::BufferSource>& buffers,
                                             lower::Arch arch, uint64_t seed,
                                             const VerifyOptions& verify, std::string* detail) {
  BackwardKernel out;
  auto expert = BackwardExpertFor(arch, config.head_dim);
  if (!expert.ok()) return At("lift", expert.status());
  out.expert = *expert;
  auto lifted = lower::LiftExpert(out.expert, /*backward=*/true);
  if (!lifted.ok()) return At("lift", lifted.status());
  // The expert's first backward tile for the head dim (the base program's params otherwise).
  cuir::Program base = lifted->base;
  if (const auto tiles = BackwardTiles(out.expert, config); !tiles.empty()) {
    auto tiled = experts::WithTile(base, tiles.front());
    if (!tiled.ok()) return At("lift", tiled.status());
    base = *std::move(tiled);
    out.tile = tiles.front().Name();
  }

  out.grad_buffers = LearnableBuffers(spec);
  transfer::VariantSpec variant = ToVariantSpec(spec);
  variant.grad_buffers = out.grad_buffers;
  auto transferred = transfer::Transfer(base, variant, config);
  if (!transferred.ok()) return At("transfer", transferred.status());
  out.transfer = *std::move(transferred);

  auto verified = VerifyBackwardOnCpu(out.transfer.program, spec, config, buffers,
                                      out.grad_buffers, seed, verify);
  if (!verified.ok()) return At("verify", verified.status());
  if (!verified->passed) {
    return absl::InternalError(absl::StrFormat(
        "verify: the transferred backward program does not match the spec's gradients (seed "
        "%d):\n%s",
        seed, verified->FailureDetail()));
  }
  out.verification = *std::move(verified);

  auto lowered = lower::Lower(out.transfer.program, config, arch);
  if (!lowered.ok()) return At("lower", lowered.status());
  out.kernel = *std::move(lowered);

  std::vector<std::string> rules;
  for (const auto& r : out.transfer.applied) rules.push_back(r.name);
  *detail = absl::StrFormat("expert %s (%s, tile %s): rules [%s]; %s; lowered, generated [%s]",
                            out.expert, out.kernel.target, out.tile, absl::StrJoin(rules, ", "),
                            out.verification.Summary(),
                            absl::StrJoin(out.kernel.generated_regions, ", "));
  return out;
}

}  // namespace cubridge::pipeline
