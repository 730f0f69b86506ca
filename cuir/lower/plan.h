// Matching a (transferred) program against its expert's base program: which constructs are
// unchanged (their regions are copied) and which changed (their regions are generated).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuir/ir/program.h"

namespace cubridge::lower {

// The let of the base program that the head_map region implements.
inline constexpr char kHeadMapLet[] = "kv_h";

struct LoweringPlan {
  bool backward = false;  // a backward program (cuir::IsBackward): its walk is over query blocks
  // tile_params: base params overridden by the program's, then the program's new ones.
  std::vector<const cuir::Stmt*> params;
  bool params_changed = false;
  std::vector<const cuir::Stmt*> consts;   // variant_consts
  std::vector<const cuir::Stmt*> buffers;  // buffer_check / variant_bind
  std::vector<const cuir::Stmt*> tables;   // + table_kernel / workspace
  const cuir::Stmt* grid = nullptr;        // always equal to the base grid

  const cuir::Stmt* head_map = nullptr;  // the program's `let kv_h`
  bool head_map_changed = false;
  std::vector<const cuir::Stmt*> program_lets;  // top-level lets the base lacks

  const cuir::Stmt* loop = nullptr;  // the KV loop (header; body below)
  bool range_changed = false;        // kv_range
  bool table_loop = false;           // kv_loop: `for VAR, FULL in table T[...]`
  std::vector<const cuir::Stmt*> block_lets;  // block_class: loop-body lets the base lacks
  const cuir::Stmt* qk = nullptr;
  bool scale_changed = false;                 // qk_scale
  std::vector<const cuir::Stmt*> score_mods;  // score_mod, in program order
  std::vector<const cuir::Stmt*> masks;       // mask, in program order
  const cuir::Stmt* sink = nullptr;           // epilogue_sink: the `epilogue sink EXPR`, if any
  // A backward's chain rule: score_grad (at most one) and buffer_grad, in program order.
  const cuir::Stmt* score_grad = nullptr;
  std::vector<const cuir::Stmt*> buffer_grads;
};

// UNIMPLEMENTED "file:line:col: ..." for a construct no region of the expert implements (a new
// role, a changed grid, a changed Q tile, a second loop, a mask before a score_mod, ...), naming
// the construct and where it is.
absl::StatusOr<LoweringPlan> MatchToBase(const cuir::Program& program, const cuir::Program& base);

// The first line of a statement's text form, e.g. "mask S = q_idx >= kv_idx when !full".
std::string StmtHeader(const cuir::Stmt& s);

// Statement equality through cuir::Equal (locations ignored); loops compare their headers only
// when `header_only`.
bool SameStmt(const cuir::Stmt& a, const cuir::Stmt& b, bool header_only = false);

}  // namespace cubridge::lower
