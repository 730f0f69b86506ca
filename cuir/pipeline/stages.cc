#include "cuir/pipeline/stages.h"

#include <random>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cuir/experts/expert.h"
#include "cuir/lower/lift.h"

namespace cubridge::pipeline {

transfer::VariantSpec ToVariantSpec(const spec::Spec& s) {
  transfer::VariantSpec v;
  v.mask = s.mask;
  v.score = s.score;
  v.mask_loc = s.mask_loc;
  v.score_loc = s.score_loc;
  v.reference = s.has_reference;
  v.reference_loc = s.reference_loc;
  for (const auto& p : s.params) {
    cuir::ExprPtr lit = std::visit(
        [](auto x) -> cuir::ExprPtr {
          using T = decltype(x);
          if constexpr (std::is_same_v<T, bool>) return cuir::BoolLit(x);
          else if constexpr (std::is_same_v<T, int64_t>) return cuir::IntLit(x);
          else return cuir::FloatLit(x);
        },
        p.value);
    v.consts.push_back({p.name, p.type, lit, p.loc});
  }
  for (const auto& b : s.buffers) {
    if (b.rank < 0) continue;  // never read: not a kernel argument
    v.buffers.push_back({b.name, b.dtype, spec::BufferExtents(s, b), b.loc});
  }
  return v;
}

std::string ExpertFor(lower::Arch arch) { return experts::ExpertFor(arch).name; }

absl::StatusOr<spec::Spec> SpecStage(absl::StatusOr<spec::Spec> s,
                                     const std::vector<std::string>& overrides,
                                     std::string* detail) {
  if (!s.ok()) return s.status();
  if (auto st = spec::OverrideParams(*s, overrides); !st.ok()) return st;
  *detail = absl::StrFormat("%s: %s%s%s%s, %d params, %d buffers", s->path,
                            s->mask ? "mask_mod" : "", s->mask && s->score ? " + " : "",
                            s->score ? "score_mod" : "", s->has_reference ? "reference" : "",
                            s->params.size(), s->buffers.size());
  return s;
}

absl::StatusOr<cuir::Program> LiftStage(lower::Arch arch, std::string* detail) {
  const std::string expert = ExpertFor(arch);
  auto lifted = lower::LiftExpert(expert);
  if (!lifted.ok()) return lifted.status();
  *detail = absl::StrFormat("expert %s for %s: %s", expert, lower::ArchName(arch),
                            absl::StrJoin(lifted->checks, "; "));
  return lifted->base;
}

absl::StatusOr<transfer::TransferResult> TransferStage(const cuir::Program& base,
                                                       const spec::Spec& spec,
                                                       const cuir::AttentionConfig& config,
                                                       std::string* detail) {
  auto t = transfer::Transfer(base, ToVariantSpec(spec), config);
  if (!t.ok()) return t.status();
  std::vector<std::string> names;
  for (const auto& r : t->applied) names.push_back(r.name);
  *detail = names.empty() ? "no rule needed (the base program is the variant)"
                          : absl::StrJoin(names, ", ");
  return t;
}

absl::StatusOr<VerifyReport> VerifyStage(const cuir::Program& program, const spec::Spec& spec,
                                         const cuir::AttentionConfig& config,
                                         const std::map<std::string, spec::BufferSource>& buffers,
                                         uint64_t seed, const VerifyOptions& options,
                                         std::string* detail) {
  auto r = VerifyOnCpu(program, spec, config, buffers, seed, options);
  if (!r.ok()) return r.status();
  if (!r->passed) {
    return absl::InternalError(absl::StrFormat(
        "the transferred program does not match the spec's oracle (seed %d):\n%s", seed,
        r->FailureDetail()));
  }
  *detail = r->Summary();
  return r;
}

absl::StatusOr<lower::LoweredKernel> LowerStage(const cuir::Program& program,
                                                const cuir::AttentionConfig& config,
                                                lower::Arch arch, std::string* detail) {
  auto k = lower::Lower(program, config, arch);
  if (!k.ok()) return k.status();
  *detail = absl::StrFormat("%s (target %s): generated [%s], copied [%s] from expert %s",
                            lower::ArchName(arch), k->target,
                            absl::StrJoin(k->generated_regions, ", "),
                            absl::StrJoin(k->copied_regions, ", "), k->expert);
  return k;
}

nlohmann::json AppliedRulesJson(const transfer::TransferResult& t) {
  nlohmann::json applied = nlohmann::json::array();
  for (const auto& r : t.applied) applied.push_back({{"rule", r.name}, {"detail", r.detail}});
  return applied;
}

nlohmann::json BuffersJson(const std::vector<lower::LoweredBuffer>& buffers) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& b : buffers) {
    out.push_back({{"name", b.name}, {"dtype", b.dtype}, {"extents", b.extents}});
  }
  return out;
}

nlohmann::json LoweringJson(const lower::LoweredKernel& k) {
  return {{"entry_point", k.entry_point},
          {"expert", k.expert},
          {"target", k.target},
          {"generated_regions", k.generated_regions},
          {"copied_regions", k.copied_regions},
          {"buffers", BuffersJson(k.buffers)}};
}

uint64_t FreshSeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32 | rd()) | 1;
}

}  // namespace cubridge::pipeline
