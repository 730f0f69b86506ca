// The engine: runs the rules in a fixed order, checks every construct of the spec was claimed,
// validates the result.
#include "cuir/transfer/transfer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "cuir/ir/status_util.h"
#include "cuir/transfer/rule.h"

namespace cubridge::transfer {
namespace {

// Declarations first (the mask and score expressions refer to them), then the head mapping, then
// the loop body rewrites; the analytic mask rule runs before the table so it wins when it applies.
constexpr Rule kRules[] = {
    {"params.const", ApplyParamsConst},
    {"buffers.declare", ApplyBuffersDeclare},
    {"heads.gqa", ApplyHeadsGqa},
    {"score.inline", ApplyScoreInline},
    {"mask.analytic-range", ApplyMaskAnalytic},
    {"mask.block-table", ApplyMaskTable},
    {"score.derivative", ApplyScoreDerivative},
};

// Spec expressions use the canonical b / h; the base may call its grid axes otherwise.
VariantSpec MapCanonicalNames(const VariantSpec& spec, const Layout& layout) {
  std::vector<std::pair<std::string, cuir::ExprPtr>> names;
  if (!cuir::Equal(layout.batch, cuir::Var("b"))) names.emplace_back("b", layout.batch);
  if (!cuir::Equal(layout.head, cuir::Var("h"))) names.emplace_back("h", layout.head);
  VariantSpec out = spec;
  if (names.empty()) return out;
  if (out.mask) out.mask = cuir::Substitute(out.mask, names);
  if (out.score) out.score = cuir::Substitute(out.score, names);
  return out;
}

Claims Constructs(const VariantSpec& spec) {
  Claims claims;
  if (spec.mask)
    claims.Add(MaskKey(), "mask_mod `" + cuir::PrintExpr(spec.mask) + "`", spec.mask_loc);
  if (spec.score)
    claims.Add(ScoreKey(), "score_mod `" + cuir::PrintExpr(spec.score) + "`", spec.score_loc);
  for (const VariantSpec::Const& c : spec.consts) {
    claims.Add(ConstKey(c.name), "const `" + c.name + "`", c.loc);
  }
  for (const VariantSpec::Buffer& b : spec.buffers) {
    claims.Add(BufferKey(b.name), "buffer `" + b.name + "`", b.loc);
  }
  return claims;
}

}  // namespace

const std::string& RulesetVersion() {
  static const std::string* version = new std::string("rules-1");
  return *version;
}

std::vector<std::string> RuleNames() {
  std::vector<std::string> names;
  for (const Rule& rule : kRules) names.emplace_back(rule.name);
  return names;
}

absl::StatusOr<TransferResult> Transfer(const cuir::Program& base, const VariantSpec& spec,
                                        const cuir::AttentionConfig& config) {
  if (absl::Status s = cuir::ValidateConfig(config); !s.ok()) return s;
  if (spec.reference) {
    return NotCovered("reference(q, k, v)", spec.reference_loc,
                      "the spec computes the whole attention in PyTorch instead of giving "
                      "mask_mod/score_mod, and the rules rewrite only those; the LLM proposer "
                      "(`--proposer llm` or `hybrid`) handles it");
  }
  absl::StatusOr<Layout> layout = FindLayout(base);
  if (!layout.ok()) return layout.status();
  if (absl::Status s = CheckSpecReads(spec, *layout); !s.ok()) return s;
  VariantSpec mapped = MapCanonicalNames(spec, *layout);
  RuleContext ctx{mapped, config, Constructs(mapped), {}};
  cuir::Program program = base;
  if (absl::Status s = AvoidNameClashes(program, mapped); !s.ok()) return s;
  for (const Rule& rule : kRules) {
    if (absl::Status s = rule.apply(program, ctx); !s.ok()) return cuir::Prefixed(rule.name, s);
  }
  if (absl::Status s = ctx.claims.CheckAllClaimed(); !s.ok()) return s;
  if (absl::Status s = cuir::Validate(program); !s.ok()) {
    return cuir::Prefixed("transfer produced an invalid program (check the spec's names and types)", s);
  }
  return TransferResult{std::move(program), std::move(ctx.applied)};
}

}  // namespace cubridge::transfer
