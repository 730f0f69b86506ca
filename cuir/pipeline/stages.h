// The pipeline's stages as functions: `adapt --local` runs them in a row (adapt.h), the service's
// workers run them one task at a time. Each returns its result and a one-line detail for the
// stage event; failures say what and where.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "cuir/ir/config.h"
#include "cuir/lower/lower.h"
#include "cuir/pipeline/verify.h"
#include "cuir/spec/spec.h"
#include "cuir/spec/tensors.h"
#include "cuir/transfer/transfer.h"

namespace cubridge::pipeline {

// The name of the expert kernel an arch is adapted from (cuir/experts/registry.cc): sm_90 the
// Hopper one (wgmma, TMA, warp specialisation), sm_80 the mma.sync one.
std::string ExpertFor(lower::Arch arch);

// What the transfer rules see of a spec: its translated mask and score_mod, its params as consts,
// its read captured tensors as buffers (no gradients asked for: set grad_buffers for a backward).
transfer::VariantSpec ToVariantSpec(const spec::Spec& s);

// Parameter overrides applied; detail "file: mask_mod + score_mod, N params, M buffers".
absl::StatusOr<spec::Spec> SpecStage(absl::StatusOr<spec::Spec> loaded,
                                     const std::vector<std::string>& overrides,
                                     std::string* detail);
// The expert's annotated source checked against its base program (cuir/lower/lift.h).
absl::StatusOr<cuir::Program> LiftStage(lower::Arch arch, std::string* detail);
absl::StatusOr<transfer::TransferResult> TransferStage(const cuir::Program& base,
                                                       const spec::Spec& spec,
                                                       const cuir::AttentionConfig& config,
                                                       std::string* detail);
// Fails (INTERNAL, with the worst mismatches) when the program does not match the oracle.
absl::StatusOr<VerifyReport> VerifyStage(const cuir::Program& program, const spec::Spec& spec,
                                         const cuir::AttentionConfig& config,
                                         const std::map<std::string, spec::BufferSource>& buffers,
                                         uint64_t seed, const VerifyOptions& options,
                                         std::string* detail);
absl::StatusOr<lower::LoweredKernel> LowerStage(const cuir::Program& program,
                                                const cuir::AttentionConfig& config,
                                                lower::Arch arch, std::string* detail);

nlohmann::json AppliedRulesJson(const transfer::TransferResult& t);
// Where the kernel came from and which params.buffers slot holds which captured tensor.
nlohmann::json LoweringJson(const lower::LoweredKernel& k);
nlohmann::json BuffersJson(const std::vector<lower::LoweredBuffer>& buffers);
uint64_t FreshSeed();  // odd, from the system's entropy

}  // namespace cubridge::pipeline
