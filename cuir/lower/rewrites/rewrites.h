// The expression rewrites the lowering applies to a score_mod or mask before it emits CUDA. Each
// is in its own file under cuir/lower/rewrites/ with its formula and why it holds; registry.cc
// lists them by name for `cuir-opt` (cuir/tools/cuir_opt.cc) and the golden tests
// (tests/lower/golden/NAME.txt: input expressions beside the expected output). The hoisting
// passes, which give lets beside an expression, have their own interface (hoisting.h) and are
// listed here too, each shown as the hoisting pipeline up to it.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cuir/ir/expr.h"
#include "cuir/lower/cuda_emit.h"

namespace cubridge::lower {

// How often a subexpression of a score_mod or mask must be evaluated. One that reads neither the
// element's indices nor its score is the same for the whole block; one that reads only q_idx is
// the same along a query row, and a thread's MT x NT x 4 score elements lie on MT x 2 rows only
// (only kv_idx: NT x 2 key columns).
enum class Level { kBlock, kRow, kColumn, kElement };

// The element's indices as floats, which the experts' score visitors pass beside the ints when
// the element function takes them ("." keeps the names apart from CuIR's).
inline constexpr char kQFloat[] = "q_idx.f";
inline constexpr char kKvFloat[] = "kv_idx.f";

Level LevelOf(const cuir::ExprPtr& e);

// A sum's terms (row terms, the folded scale, key terms): each a leaf times the block values
// distributed over it, with its sign.
struct SignedTerm {
  bool negative;
  std::vector<cuir::ExprPtr> factors;  // block values multiplying the leaf
  cuir::ExprPtr leaf;
};

// `distribute`: also through products by block values (else a product is one term).
void AdditiveTerms(const cuir::ExprPtr& e, bool negative, std::vector<cuir::ExprPtr> factors,
                   std::vector<SignedTerm>* out, bool distribute = true);
cuir::ExprPtr SumOfTerms(const std::vector<SignedTerm>& terms, cuir::SourceLoc loc);

// reciprocal_divisors.cc: a / b with b a block value becomes a * (1 / b).
cuir::ExprPtr ReciprocalOfInvariantDivisors(const cuir::ExprPtr& e);
// float_indices.cc: an int sum of indices that meets a float is summed in floats.
absl::StatusOr<cuir::ExprPtr> FloatIndices(const cuir::ExprPtr& e, const EmitScope& types);
// row_terms.cc: the terms that read no key index move to the row's LSE.
struct RowSplit {
  cuir::ExprPtr element;  // what each element still adds
  cuir::ExprPtr row;      // per query row, to its LSE
};
std::optional<RowSplit> SplitRowTerms(const cuir::ExprPtr& e, const EmitScope& row_scope);
// fold_scale.cc: score + terms -> the terms, for fmaf(raw score, qk_scale, terms); null otherwise.
cuir::ExprPtr TermsBesideTheScore(const cuir::ExprPtr& e);
// reduce-modulo: ReduceModulo, cuir/lower/modular.h (its own file and tests before this folder).
// kv_term_from_tile_start.cc: whether the terms are block values times kv_idx.f only.
bool LinearInTheKey(const cuir::ExprPtr& terms);

// What a rewrite's input may read, as the lowering binds it: `element` inside the element
// visitors (the kernel's and the KV walk's names, the element's indices and its score); `block`
// the KV walk's names around the element loop; `before_walk` the kernel's, before the KV walk.
struct RewriteScopes {
  EmitScope element, block, before_walk;
};

// Each rewrite by name, its result printed (CuIR text; "none" where it does not apply), for
// cuir-opt and the golden tests.
struct ExprRewrite {
  const char* name;
  const char* summary;
  std::function<absl::StatusOr<std::string>(const cuir::ExprPtr&, const RewriteScopes&)> show;
};
const std::vector<ExprRewrite>& ExprRewrites();
const ExprRewrite* FindExprRewrite(std::string_view name);

// A golden file (tests/lower/golden/NAME.txt) run through its rewrite:
//   # rewrite: float-indices
//   # vars: slope float, seqlen_q int       (score, q_idx, kv_idx and their floats are bound)
//   in:  (kv_idx - q_idx) * slope
//   out: (kv_idx.f - q_idx.f) * slope
// `# vars:` also declares buffers, as NAME DTYPE[RANK] (doc int32[1]); `# walk: n_block int, ...`
// declares names of the KV walk, which the element and the block see but not `before_walk`.
// Each in/out pair is a case; `got` is what the rewrite gives now.
struct GoldenCase {
  int line = 0;  // of its `in:`
  std::string in, want, got;
};
struct GoldenRun {
  std::string rewrite;
  std::vector<GoldenCase> cases;
};
// INVALID_ARGUMENT ("file:line: what") for a file it cannot read; a case whose input does not
// parse or whose rewrite fails has that status's message as `got`.
absl::StatusOr<GoldenRun> RunGolden(absl::string_view text, absl::string_view file);

}  // namespace cubridge::lower
