// Golden files for the transfer rules (tests/transfer/golden/RULE.txt), kept as MLIR keeps its
// FileCheck tests: each case a variant, written compactly, beside what Transfer makes of it on
// the base program (cuir/experts/fa2_sm80/base.cuir). `cuir-opt FILE` and
// tests/transfer/rules_golden_test.cc run them; the lowering's rewrites have the same in
// cuir/lower/rewrites (RunGolden there).
//
// A file:
//   # rule: mask.analytic-range           the rule it is about, once, before the cases
//   # any other line starting with # is a comment
//   in:   mask: q_idx >= kv_idx && q_idx - kv_idx <= W
//         const W: int = 8
//   out:
//   applied: params.const, mask.analytic-range
//     param WARPS: int = 4
//   + const W: int = 8
//     role compute warps WARPS
//     ...
//       let kv_hi: int = min(kv_lo + BLOCK_N, seqlen_kv)
//   +   let full: bool = kv_lo >= q_hi - 9 && kv_hi <= q_lo + 1
//       load K = k[b, kv_h, kv_lo:kv_hi]
//     ...
//
// The variant after `in:` (on its line and the lines up to `out:`), one item a line:
//   mask: EXPR                        mask_mod's predicate, a CuIR expression
//   score: EXPR                       score_mod's expression
//   const NAME: TYPE = EXPR           a spec scalar; TYPE int | float | bool
//   buffer NAME: DTYPE[EXTENT, ...]   a captured tensor; EXTENT an expression or `?` (its reach
//                                     depends on data), `[]` for rank 0; DTYPE as in CuIR
//   heads: q=N kv=N                   the config's head counts (else 8 and 8)
//   backward                          transfer the expert's backward program (base_bwd.cuir)
//                                     instead of the forward one
//   grad: NAME, ...                   backward: the captured tensors whose gradient it computes
// Its items form a little file, `variant`: the rules' messages say `variant:LINE:COL`, LINE the
// item's place in the case (from 1), COL the column in the item as written (from its first
// non-blank character).
//
// The expected output after `out:`, on that line when it is one line, else on the lines below
// it up to a blank line, a comment or the next `in:` (taken as they stand; trailing blanks
// dropped). Each case runs the whole of Transfer, the rules together as they interact (the
// consts a mask reads, the analytic mask rule before the table), so its output is
//   error: CODE: MESSAGE              when it refuses the variant (CODE as absl prints it), or
//   applied: RULE, ...                the rules that reported a change (`none`), then the
//                                     printed program against the base's, line by line: `+`
//                                     only in the result, `-` only in the base, ` ` unchanged,
//                                     one unchanged line either side of a change; `  ...`
//                                     stands for unchanged lines left out. Nothing after the
//                                     `applied:` line: the program is the base's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cuir/ir/config.h"
#include "cuir/ir/program.h"
#include "cuir/transfer/transfer.h"

namespace cubridge::transfer {

// The base programs the files are written against: EXPERTS_DIR/fa2_sm80/base.cuir and, for
// `backward` cases, base_bwd.cuir beside it, named as below in the messages that cite them, so
// that they read the same wherever the tree is.
inline constexpr char kGoldenBase[] = "fa2_sm80/base.cuir";
inline constexpr char kGoldenBackwardBase[] = "fa2_sm80/base_bwd.cuir";
struct GoldenBases {
  cuir::Program forward, backward;
};
absl::StatusOr<GoldenBases> ReadGoldenBases(const std::string& experts_dir);

struct GoldenVariant {
  VariantSpec spec;
  cuir::AttentionConfig config;
  bool backward = false;  // the `backward` item
};

// The items of one variant, in order. INVALID_ARGUMENT "`ITEM`: what" for one it cannot read.
absl::StatusOr<GoldenVariant> ParseVariant(const std::vector<std::string>& items);

// What Transfer makes of the variant on `base`, as the golden files write it; `whole_program`
// prints the transferred program instead of the lines where it differs from the base.
std::string ShowTransfer(const GoldenBases& bases, const GoldenVariant& variant,
                         bool whole_program = false);

struct GoldenCase {
  int line = 0;                          // of its `in:`
  std::string in;                        // its items, joined by "; "
  std::string want, got;                 // several lines joined by '\n'
  GoldenVariant variant;
  std::optional<cuir::Program> program;  // what Transfer made, when it did not refuse
};
struct GoldenRun {
  std::string rule;
  std::vector<GoldenCase> cases;
};
// INVALID_ARGUMENT ("file:line: what") for a file it cannot read, an item included.
absl::StatusOr<GoldenRun> RunGolden(absl::string_view text, absl::string_view file,
                                    const GoldenBases& bases);

}  // namespace cubridge::transfer
