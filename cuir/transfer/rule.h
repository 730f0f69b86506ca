// Internals shared by the rules: where things are in the base program, which constructs of the
// VariantSpec are claimed, and the "not covered" error.
#pragma once

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cuir/ir/program.h"
#include "cuir/transfer/transfer.h"

namespace cubridge::transfer {

// The base program's structure, found by shape rather than by assumed names: the Q tile is the
// top-level `load` of q, the KV loop the top-level `for`, the K tile its `load` of k, ... A
// backward program turns it around: its K tile is the top-level one and its loop walks query
// blocks, loading Q (and dO).
struct Layout {
  bool backward = false;       // cuir::IsBackward
  size_t loop_index = 0;       // the loop in program.stmts (over KV blocks; query blocks backward)
  std::string qk_result;       // S
  cuir::ExprPtr batch, head;   // the Q load's batch / head indices (b, h)
  cuir::ExprPtr q_lo, q_hi;    // the Q tile's rows
  cuir::ExprPtr kv_lo, kv_hi;  // the K tile's rows
  cuir::ExprPtr kv_head;       // the K load's head index (kv_h)
  std::string tile_axis;       // grid axis enumerating the program's own tiles: the top-level
                               // tile's (m_block; n_block in a backward)
  std::string softmax_grad;    // backward: the softmax.grad result (DS)
  std::vector<std::string> grid_axes;
  absl::flat_hash_set<std::string> declared;  // every name the program declares
};

// FAILED_PRECONDITION naming what is missing when the base does not have the expected shape.
absl::StatusOr<Layout> FindLayout(const cuir::Program& p);

// Index of the first statement of `kind` in `stmts`; stmts.size() when absent.
size_t FindStmt(const std::vector<cuir::Stmt>& stmts, cuir::StmtKind kind);
// Index just past the last statement of `kind`, or `fallback` when there is none.
size_t AfterLast(const std::vector<cuir::Stmt>& stmts, cuir::StmtKind kind, size_t fallback);

// A name not declared by the program, the spec or the builtins, starting from `wanted`.
std::string FreshName(const Layout& layout, const VariantSpec& spec, const std::string& wanted);

// INVALID_ARGUMENT at the expression when the mask or score expression reads a name that is none
// of the variant's arguments (b, h, q_idx, kv_idx, score), its consts and buffers, the builtins
// or the grid axes (which the rules decline by name): such a name would be read from the kernel
// (`kv_lo`, a loop variable). The Python frontend never produces one; specs built otherwise get
// the same answer.
absl::Status CheckSpecReads(const VariantSpec& spec, const Layout& layout);

// Renames the base program's own names (tiles, lets, loop and grid variables) that a spec const
// or buffer also uses, so the spec keeps its names; a spec name equal to a param or builtin is an
// INVALID_ARGUMENT naming where it is declared.
absl::Status AvoidNameClashes(cuir::Program& program, const VariantSpec& spec);

// FAILED_PRECONDITION "not covered by the rules: <construct> at <loc> (<why>)", carrying the
// payload kNotCoveredPayload: what the hybrid proposer hands to the model is told by it, not by
// the message.
inline constexpr char kNotCoveredPayload[] = "type.cubridge.dev/not-covered-by-rules";
absl::Status NotCovered(const std::string& construct, const cuir::SourceLoc& loc,
                        const std::string& why);

// Constructs of the spec (the mask, the score modification, each const and buffer). A rule claims
// what it handled or declines with the reason; the engine reports the first unclaimed construct.
class Claims {
 public:
  void Add(const std::string& key, const std::string& construct, const cuir::SourceLoc& loc);
  void Claim(const std::string& key);
  void Decline(const std::string& key, const std::string& why, const cuir::SourceLoc& loc);
  bool Claimed(const std::string& key) const;
  absl::Status CheckAllClaimed() const;

 private:
  struct Entry {
    std::string key, construct, why;
    cuir::SourceLoc loc;
    bool claimed = false;
  };
  Entry* Find(const std::string& key);
  const Entry* Find(const std::string& key) const;
  std::vector<Entry> entries_;
};

// Everything a rule sees. `spec` has canonical names already mapped to the base's grid axes.
struct RuleContext {
  const VariantSpec& spec;
  const cuir::AttentionConfig& config;
  Claims claims;
  std::vector<AppliedRule> applied;
};

struct Rule {
  const char* name;
  absl::Status (*apply)(cuir::Program& program, RuleContext& ctx);
};

// Rules of each family, in the order the engine runs them (transfer.cc).
absl::Status ApplyParamsConst(cuir::Program& program, RuleContext& ctx);     // params.const
absl::Status ApplyBuffersDeclare(cuir::Program& program, RuleContext& ctx);  // buffers.declare
absl::Status ApplyHeadsGqa(cuir::Program& program, RuleContext& ctx);        // heads.gqa
absl::Status ApplyScoreInline(cuir::Program& program, RuleContext& ctx);     // score.inline
absl::Status ApplyMaskAnalytic(cuir::Program& program, RuleContext& ctx);    // mask.analytic-range
absl::Status ApplyMaskTable(cuir::Program& program, RuleContext& ctx);       // mask.block-table
absl::Status ApplyScoreDerivative(cuir::Program& program, RuleContext& ctx); // score.derivative

// Claim keys.
inline std::string MaskKey() { return "mask"; }
inline std::string ScoreKey() { return "score"; }
inline std::string ConstKey(const std::string& name) { return "const " + name; }
inline std::string BufferKey(const std::string& name) { return "buffer " + name; }

}  // namespace cubridge::transfer
