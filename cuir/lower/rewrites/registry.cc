#include "absl/strings/str_cat.h"
#include "cuir/ir/status_macros.h"
#include "cuir/lower/modular.h"
#include "cuir/lower/rewrites/hoisting.h"
#include "cuir/lower/rewrites/rewrites.h"

namespace cubridge::lower {
namespace {

std::string Print(const cuir::ExprPtr& e) { return e == nullptr ? "none" : cuir::PrintExpr(e); }

const cuir::BoundsEnv& BoundsOrElement(const EmitScope& scope) {
  static const auto* element = new cuir::BoundsEnv(cuir::ElementBoundsEnv());
  return scope.bounds() != nullptr ? *scope.bounds() : *element;
}

// The hoisting pipeline (hoisting.h) through its first `passes` passes, as the lowering runs it
// on an element expression (it names the lets between the third and the fourth; here they keep
// their "hoisted.N"). "none" where nothing moves.
absl::StatusOr<std::string> ShowHoisting(const cuir::ExprPtr& e, const RewriteScopes& scopes,
                                         int passes) {
  Hoisting h = HoistInvariants(e, scopes.element);
  if (passes >= 2) ShareHoisted(&h);
  if (passes >= 3) FitColumnBudget(&h);
  if (h.lets.empty() && cuir::Equal(h.expr, e)) return std::string("none");
  if (passes < 4) return PrintHoisting(h);
  EmitScope element = scopes.element;
  CUBRIDGE_ASSIGN_OR_RETURN(auto placed, PlaceHoisted(h.lets, &scopes.before_walk, scopes.block,
                                                      BoundsOrElement(scopes.element), &element));
  return PrintHoisting(h, &placed);
}

const char* PlacementName(Placement p) {
  switch (p) {
    case Placement::kLiteral: return "literal";
    case Placement::kBeforeWalk: return "before walk";
    case Placement::kPerBlock: return "per block";
    case Placement::kRow: return "row";
    case Placement::kColumn: return "column";
  }
  return "?";
}

const char* LevelName(Level l) {
  switch (l) {
    case Level::kBlock: return "block";
    case Level::kRow: return "row";
    case Level::kColumn: return "column";
    case Level::kElement: return "element";
  }
  return "?";
}

}  // namespace

std::string PrintHoisting(const Hoisting& h, const std::vector<PlacedLet>* placed) {
  std::string text;
  for (size_t i = 0; i < h.lets.size(); ++i) {
    const Hoisted& let = h.lets[i];
    if (placed == nullptr) {
      absl::StrAppend(&text, LevelName(let.level));
    } else {
      const PlacedLet& p = (*placed)[i];
      absl::StrAppend(&text, PlacementName(p.where),
                      p.where == Placement::kLiteral ? " " + p.value.text : "",
                      p.divisor ? ", divisor" : "");
    }
    absl::StrAppend(&text, ": ", let.name, " = ", cuir::PrintExpr(let.expr), "; ");
  }
  return absl::StrCat(text, "element: ", cuir::PrintExpr(h.expr));
}

const std::vector<ExprRewrite>& ExprRewrites() {
  static const auto* rewrites = new std::vector<ExprRewrite>{
      {"reciprocal-divisors", "a / b, b a block value -> a * (1 / b)",
       [](const cuir::ExprPtr& e, const RewriteScopes&) -> absl::StatusOr<std::string> {
         return Print(ReciprocalOfInvariantDivisors(e));
       }},
      {"float-indices", "float(index sum), index sum (op) float -> the sum in float indices",
       [](const cuir::ExprPtr& e, const RewriteScopes& s) -> absl::StatusOr<std::string> {
         CUBRIDGE_ASSIGN_OR_RETURN(auto out, FloatIndices(e, s.element));
         return Print(out);
       }},
      {"row-terms", "score + R(q) + T -> element: score + T, row (to the LSE): R(q)",
       [](const cuir::ExprPtr& e, const RewriteScopes& s) -> absl::StatusOr<std::string> {
         const std::optional<RowSplit> split = SplitRowTerms(e, s.element);
         if (!split) return std::string("none");
         return absl::StrCat("element: ", Print(split->element), "; row: ", Print(split->row));
       }},
      {"fold-scale", "score + T -> T, for fmaf(raw score, qk_scale, T)",
       [](const cuir::ExprPtr& e, const RewriteScopes&) -> absl::StatusOr<std::string> {
         return Print(TermsBesideTheScore(e));
       }},
      {"reduce-modulo", "x % c with a 64-bit x -> the sum of its terms' residues, % c (modular.h)",
       [](const cuir::ExprPtr& e, const RewriteScopes& s) -> absl::StatusOr<std::string> {
         return Print(ReduceModulo(e, BoundsOrElement(s.element)));
       }},
      {"kv-term-from-tile-start", "sum of block values * kv_idx.f -> linear in the key (yes/no)",
       [](const cuir::ExprPtr& e, const RewriteScopes&) -> absl::StatusOr<std::string> {
         return std::string(LinearInTheKey(e) ? "linear" : "not linear");
       }},
      // The hoisting passes (hoisting.h), in the order they run: each shows the lets so far.
      {"hoist-invariants", "values the same for a block, a row or a column -> lets",
       [](const cuir::ExprPtr& e, const RewriteScopes& s) { return ShowHoisting(e, s, 1); }},
      {"share-hoisted", "lets read smaller lets; cheap row/column lets back into the element",
       [](const cuir::ExprPtr& e, const RewriteScopes& s) { return ShowHoisting(e, s, 2); }},
      {"fit-column-budget", "cheap column lets past kMaxColumnArrays back into the element",
       [](const cuir::ExprPtr& e, const RewriteScopes& s) { return ShowHoisting(e, s, 3); }},
      {"place-hoisted", "each let: a literal, before the KV walk, per block, a row or column",
       [](const cuir::ExprPtr& e, const RewriteScopes& s) { return ShowHoisting(e, s, 4); }},
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
