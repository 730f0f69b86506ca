// IRTransfer, rule-based: rewrites the lifted base program into the user's variant.
//
// Each rule is a small named rewrite from the taxonomy in docs/transfer.md:
//   (a) mask insertion      mask.analytic-range, mask.block-table
//   (b) score modification  score.inline, score.derivative (backward programs)
//   (c) head mapping        heads.gqa
//   (d) buffer inputs       buffers.declare, params.const
// A delta no rule covers fails with FAILED_PRECONDITION "not covered by the rules: <construct>
// at file:line:col", which later goes to the LLM proposer.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuir/ir/config.h"
#include "cuir/ir/dtype.h"
#include "cuir/ir/program.h"

namespace cubridge::transfer {

// What the transfer needs to know of the spec, without LibTorch: the translated expressions and
// declarations (filled by the pipeline from spec::Spec).
struct VariantSpec {
  cuir::ExprPtr mask;   // bool over b, h, q_idx, kv_idx, consts, buffers; null = no mask
  cuir::ExprPtr score;  // float over score, b, h, q_idx, kv_idx, ...; null = identity
  cuir::SourceLoc mask_loc, score_loc;
  // The spec gives `reference(q, k, v, scale)`, the whole attention in PyTorch, instead of the
  // mods: no rule can read it, so Transfer reports it not covered (the LLM proposer's case).
  bool reference = false;
  cuir::SourceLoc reference_loc;
  struct Const {
    std::string name;
    cuir::Type type;
    cuir::ExprPtr value;  // literal
    cuir::SourceLoc loc;  // where the spec declares it (for messages)
  };
  std::vector<Const> consts;
  // A captured tensor the spec reads: its dtype and, per dimension, the size its indexing
  // reaches (the spec frontend's BufferExtents; null where that depends on data).
  struct Buffer {
    std::string name;
    cuir::TensorDType dtype = cuir::TensorDType::kInt32;
    std::vector<cuir::ExprPtr> extents;
    cuir::SourceLoc loc;  // where the spec declares it (for messages)
  };
  std::vector<Buffer> buffers;
  // Backward programs only: the floating captured tensors whose gradient the backward computes
  // (the learnable ones); each must be one of `buffers`.
  std::vector<std::string> grad_buffers;
};

struct AppliedRule {
  std::string name;    // e.g. "mask.analytic-range"
  std::string detail;  // one line on what it did, e.g. "kv blocks [0, cdiv(q_hi, BLOCK_N))"
};

struct TransferResult {
  cuir::Program program;
  std::vector<AppliedRule> applied;
};

// Version of the ruleset; part of every spec hash and cache key.
const std::string& RulesetVersion();

// The rules' names, in the order Transfer runs them (cuir-opt --list, and the golden tests, which
// want a file per rule).
std::vector<std::string> RuleNames();

// `base` is an expert's forward program (base.cuir) or its backward program (base_bwd.cuir):
// the same rules give the variant of either, the backward's mask walking query blocks per KV
// tile (transposed ranges or tables) and its score_mod followed by its derivatives.
absl::StatusOr<TransferResult> Transfer(const cuir::Program& base, const VariantSpec& spec,
                                        const cuir::AttentionConfig& config);

}  // namespace cubridge::transfer
