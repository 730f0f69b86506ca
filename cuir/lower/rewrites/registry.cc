#include "absl/strings/str_cat.h"
#include "cuir/ir/status_macros.h"
#include "cuir/lower/modular.h"
#include "cuir/lower/rewrites/rewrites.h"

namespace cubridge::lower {
namespace {

std::string Print(const cuir::ExprPtr& e) { return e == nullptr ? "none" : cuir::PrintExpr(e); }

}  // namespace

const std::vector<ExprRewrite>& ExprRewrites() {
  static const auto* rewrites = new std::vector<ExprRewrite>{
      {"reciprocal-divisors", "a / b, b a block value -> a * (1 / b)",
       [](const cuir::ExprPtr& e, const EmitScope&) -> absl::StatusOr<std::string> {
         return Print(ReciprocalOfInvariantDivisors(e));
       }},
      {"float-indices", "float(index sum), index sum (op) float -> the sum in float indices",
       [](const cuir::ExprPtr& e, const EmitScope& types) -> absl::StatusOr<std::string> {
         CUBRIDGE_ASSIGN_OR_RETURN(auto out, FloatIndices(e, types));
         return Print(out);
       }},
      {"row-terms", "score + R(q) + T -> element: score + T, row (to the LSE): R(q)",
       [](const cuir::ExprPtr& e, const EmitScope& types) -> absl::StatusOr<std::string> {
         const std::optional<RowSplit> split = SplitRowTerms(e, types);
         if (!split) return std::string("none");
         return absl::StrCat("element: ", Print(split->element), "; row: ", Print(split->row));
       }},
      {"fold-scale", "score + T -> T, for fmaf(raw score, qk_scale, T)",
       [](const cuir::ExprPtr& e, const EmitScope&) -> absl::StatusOr<std::string> {
         return Print(TermsBesideTheScore(e));
       }},
      {"reduce-modulo", "x % c with a 64-bit x -> the sum of its terms' residues, % c (modular.h)",
       [](const cuir::ExprPtr& e, const EmitScope& types) -> absl::StatusOr<std::string> {
         const cuir::BoundsEnv element = cuir::ElementBoundsEnv();
         return Print(ReduceModulo(e, types.bounds() != nullptr ? *types.bounds() : element));
       }},
      {"kv-term-from-tile-start", "sum of block values * kv_idx.f -> linear in the key (yes/no)",
       [](const cuir::ExprPtr& e, const EmitScope&) -> absl::StatusOr<std::string> {
         return std::string(LinearInTheKey(e) ? "linear" : "not linear");
       }},
  };
  return *rewrites;
}

const ExprRewrite* FindExprRewrite(std::string_view name) {
  for (const ExprRewrite& r : ExprRewrites()) {
    if (name == r.name) return &r;
  }
  return nullptr;
}

}  // namespace cubridge::lower
