// RegionWriter's element statements (region_writer.h): score_mod, mask and the score_mod's row
// terms (epilogue_rows). An element expression goes through the expression rewrites
// (rewrites/rewrites.h) and the hoisting passes (rewrites/hoisting.h); what stays per element runs
// in the expert's element visitors, and the hoisted values are declared before them.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cuir/ir/status_macros.h"
#include "cuir/lower/modular.h"
#include "cuir/lower/region_writer.h"
#include "cuir/lower/rewrites/rewrites.h"

namespace cubridge::lower {

using cuir::ExprPtr;
using cuir::Stmt;

absl::StatusOr<std::string> RegionWriter::ScoreMod(const Stmt& s, bool rows_to_lse,
                                                   bool fold_scale, bool kv_split) {
  CUBRIDGE_ASSIGN_OR_RETURN(auto code, Element(s, /*with_score=*/true, rows_to_lse, fold_scale,
                                               kv_split, /*outside_walk=*/true));
  if (code.value.type == CType::kBool) return InvalidAt(s, "score_mod must give a number");
  if (!code.outside_walk.empty()) {
    absl::StrAppend(&out_["program_lets"], Origin(s),
                    "// its values that read nothing of the KV walk: once per work tile\n",
                    code.outside_walk);
  }
  if (code.row_terms != nullptr) {
    CUBRIDGE_ASSIGN_OR_RETURN(auto row, EmitExpr(code.row_terms, RowScope()));
    const bool q = cuir::Mentions(code.row_terms, "q_idx");
    const bool q_f = cuir::Mentions(code.row_terms, kQFloat);
    absl::StrAppend(&out_["epilogue_rows"], Origin(s),
                    "// its terms without kv_idx: the same for a whole row, so the softmax "
                    "ignores them and the LSE takes them\n",
                    "shift_lse_rows([&](const int ", q ? "" : "/*", "q_idx", q ? "" : "*/",
                    ", const float ", q_f ? "" : "/*", "q_f", q_f ? "" : "*/",
                    ") -> float { return ", AsFloat(row), "; });\n");
  }
  const char* split_note =
      code.kv_split ? "// its key terms are linear in kv_idx: the tile's first key goes to the "
                      "softmax's offset, kv_f counts from that key\n"
                    : "";
  return absl::StrCat(Origin(s), code.decls, split_note,
                      ForEachScore(code.expr, code.hoisted,
                                   absl::StrCat("score = ", AsFloat(code.value), ";"),
                                   code.raw_score, code.kv_split));
}

// score_grad DS = EXPR: the backward's visitor hands the raw score in `score` and multiplies dS by
// what the function leaves there (kernel_bwd.cu, BwdBlock).
absl::StatusOr<std::string> RegionWriter::ScoreGrad(const Stmt& s) {
  CUBRIDGE_ASSIGN_OR_RETURN(auto code, Element(s, /*with_score=*/true));
  if (code.value.type == CType::kBool) return InvalidAt(s, "score_grad must give a number");
  return absl::StrCat(Origin(s), code.decls,
                      ForEachScore(code.expr, code.hoisted,
                                   absl::StrCat("score = ", AsFloat(code.value), ";"), false,
                                   false, "for_each_score_grad"));
}

// buffer_grad NAME[I, ...] += DS * EXPR: each element with dS != 0 adds dS times the partial into
// the buffer's gradient (contiguous in its shape) at the element's index, through the expert's
// GradRun (consecutive adds to one element summed, a warp's adds to one element made once) and
// `grad_add(slot, offset, x)`: an atomic add (elements of many CTAs reach one buffer element),
// float or fixed point as the call's mode says (backward_abi.cuh, `deterministic`). Nothing runs
// for a buffer whose gradient the call did not ask for (a null bp.buffer_grads[slot]).
absl::StatusOr<std::string> RegionWriter::BufferGrad(const Stmt& s) {
  const BufferInfo* buffer = nullptr;
  for (const BufferInfo& b : buffers_) {
    if (b.decl->name == s.name) buffer = &b;
  }
  if (buffer == nullptr) return InvalidAt(s, absl::StrCat("no buffer `", s.name, "`"));
  CUBRIDGE_ASSIGN_OR_RETURN(auto code, Element(s, /*with_score=*/true));
  if (code.value.type == CType::kBool) return InvalidAt(s, "a buffer_grad partial is a number");
  const EmitScope scope = ElementScope(/*with_score=*/false);
  std::string offset = absl::StrCat("cuir_grad_offset(", BufferSlot("p", *buffer));
  cuir::ExprPtr indices = code.expr;  // what the element function reads, for its parameters
  for (const cuir::ExprPtr& index : s.exprs) {
    CUBRIDGE_ASSIGN_OR_RETURN(auto i, EmitExpr(index, scope));
    if (i.type != CType::kInt && i.type != CType::kLong) {
      return InvalidAt(s, "a buffer_grad index must be an int");
    }
    absl::StrAppend(&offset, ", ", i.text);
    indices = cuir::Binary(cuir::BinaryOp::kAdd, indices, index);
  }
  absl::StrAppend(&offset, ")");
  return absl::StrCat(
      Origin(s), "if (bp.buffer_grads[", buffer->slot, "] != nullptr) {\nGradRun grad_run;\n",
      code.decls,
      ForEachScore(indices, code.hoisted,
                   absl::StrCat("grad_run.add(*this, ", buffer->slot, ", ", offset, ", ds * ",
                                AsFloat(code.value), ");"),
                   false, false, "for_each_buffer_grad", "const float ds, "),
      "grad_run.flush(*this, ", buffer->slot, ");\n}\n");
}

// The predicate runs only on blocks where `when` holds (the partial ones).
absl::StatusOr<std::string> RegionWriter::Mask(const Stmt& s) {
  CUBRIDGE_ASSIGN_OR_RETURN(auto code, Element(s, /*with_score=*/false));
  if (code.value.type != CType::kBool) return InvalidAt(s, "a mask predicate must be a bool");
  const std::string apply = absl::StrCat(
      code.decls, ForEachScore(code.expr, code.hoisted,
                               absl::StrCat("if (!", code.value.text, ") score = -INFINITY;")));
  if (s.aux == nullptr) return absl::StrCat(Origin(s), apply);
  CUBRIDGE_ASSIGN_OR_RETURN(auto when, EmitExpr(s.aux, loop_));
  if (when.type != CType::kBool) return InvalidAt(s, "a mask's `when` must be a bool");
  std::string indented;
  for (absl::string_view line : absl::StrSplit(apply, '\n', absl::SkipEmpty())) {
    absl::StrAppend(&indented, "  ", line, "\n");
  }
  return absl::StrCat(Origin(s), "if (", when.text, ") {\n", indented, "}\n");
}

// `rows_to_lse`: the value's row terms may move to the LSE (the last score_mod, no sink).
// `fold_scale`: the value may take the raw score (the first score_mod, an expert with
// for_each_raw_score); `kv_split`: its key terms may count from the tile's start (the only
// score_mod, an expert with for_each_raw_score_kv_split). `outside_walk`: its block values
// may move before the KV walk (a score_mod; a mask's run only on the blocks its `when` picks).
absl::StatusOr<RegionWriter::ElementCode> RegionWriter::Element(const Stmt& s, bool with_score,
                                                                bool rows_to_lse, bool fold_scale,
                                                                bool kv_split, bool outside_walk) {
  EmitScope scope = ElementScope(with_score);
  ElementCode code;
  // The expression rewrites (rewrites.h), in order.
  ExprPtr streamed = stream_ ? StreamTheTile(s.value, *stream_) : s.value;
  const ExprPtr residues = ReduceModulo(streamed, element_bounds_);
  CUBRIDGE_ASSIGN_OR_RETURN(auto rewritten,
                            FloatIndices(ReciprocalOfInvariantDivisors(residues), scope));
  if (rows_to_lse) {
    if (std::optional<RowSplit> split = SplitRowTerms(rewritten, RowScope())) {
      rewritten = split->element;
      code.row_terms = split->row;
    }
  }
  // The hoisting passes (hoisting.h), in order; the lets get their C++ names before they are
  // placed and declared.
  Hoisting hoisting = HoistInvariants(rewritten, scope);
  ShareHoisted(&hoisting);
  FitColumnBudget(&hoisting);
  NameHoisted(&hoisting);
  code.expr = hoisting.expr;
  code.hoisted = std::move(hoisting.lets);
  CUBRIDGE_ASSIGN_OR_RETURN(
      auto decls,
      DeclareHoisted(code.hoisted, &scope, outside_walk ? &code.outside_walk : nullptr));
  code.decls = decls;
  if (ExprPtr terms = fold_scale ? TermsBesideTheScore(code.expr) : nullptr) {
    CUBRIDGE_ASSIGN_OR_RETURN(auto t, EmitExpr(terms, scope));
    code.value = {absl::StrCat("fmaf(score, qk_scale, ", AsFloat(t), ")"), CType::kFloat};
    code.raw_score = true;
    // Row or column arrays index the element's slots: only the plain visitor form splits.
    code.kv_split = kv_split &&
                    std::all_of(code.hoisted.begin(), code.hoisted.end(),
                                [](const Hoisted& h) { return h.level == Level::kBlock; }) &&
                    LinearInTheKey(terms);
    return code;
  }
  CUBRIDGE_ASSIGN_OR_RETURN(auto value, EmitExpr(code.expr, scope));
  code.value = value;
  return code;
}

// The epilogue's per-row scope: the kernel's names and the row's q_idx (and its float).
EmitScope RegionWriter::RowScope() const {
  EmitScope scope = kernel_;
  scope.Bind("q_idx", "q_idx", CType::kInt);
  scope.Bind(kQFloat, "q_f", CType::kFloat);
  scope.SetBounds(element_bounds_);  // shift_lse_rows clamps q_idx into the tile
  return scope;
}

EmitScope RegionWriter::ElementScope(bool with_score) const {
  EmitScope scope = loop_;
  scope.Bind("q_idx", "q_idx", CType::kInt);
  scope.Bind("kv_idx", "kv_idx", CType::kInt);
  scope.Bind(kQFloat, "q_f", CType::kFloat);
  scope.Bind(kKvFloat, "kv_f", CType::kFloat);
  if (with_score) scope.Bind("score", "score", CType::kFloat);
  // The visitors pass in-bounds indices only, so int `//` and `%` may take cheaper exact forms.
  scope.SetBounds(element_bounds_);
  return scope;
}

// The hoisted values' C++ names, once the passes have settled which stay (the passes call them
// hoisted.N), in the lets and in the expression.
void RegionWriter::NameHoisted(Hoisting* h) {
  std::vector<std::pair<std::string, ExprPtr>> names;
  for (Hoisted& let : h->lets) {
    const std::string name = Fresh(HoistedName(let.expr, let.level));
    names.emplace_back(let.name, cuir::Var(name));
    let.name = name;
  }
  for (Hoisted& let : h->lets) let.expr = cuir::Substitute(let.expr, names);
  h->expr = cuir::Substitute(h->expr, names);
}

// doc[q_idx] -> doc_q[mt][r], doc[kv_idx] -> doc_kv[j][k]; anything else is an invariant.
std::string RegionWriter::HoistedName(const ExprPtr& e, Level level) const {
  if (level == Level::kBlock) return "invariant";
  const char* suffix = level == Level::kRow ? "q" : "kv";
  if (e->kind == cuir::ExprKind::kIndex) {
    for (const BufferInfo& b : buffers_) {
      if (b.decl->name == e->name) return absl::StrCat(b.cpp, "_", suffix);
    }
  }
  return absl::StrCat(suffix, "_invariant");
}

// The hoisted values, before the element loop, where PlaceHoisted puts them: block values as
// consts (with `outside_walk`, those that read nothing of the KV walk go there instead, to the
// program_lets region: once per work tile rather than once per KV block); row values in [MT][2]
// arrays filled by the expert's for_each_score_row, one slot per query row the thread owns;
// column values in [NT][2] arrays by for_each_score_col. Binds each name in `element` to what
// the element reads: the literal, the const, or its row / column slot.
absl::StatusOr<std::string> RegionWriter::DeclareHoisted(const std::vector<Hoisted>& hoisted,
                                                         EmitScope* element,
                                                         std::string* outside_walk) {
  CUBRIDGE_ASSIGN_OR_RETURN(
      auto placed, PlaceHoisted(hoisted, outside_walk != nullptr ? &kernel_ : nullptr, loop_,
                                element_bounds_, element));
  std::string consts, row_arrays, row_values, col_arrays, col_values;
  for (size_t i = 0; i < hoisted.size(); ++i) {
    const std::string& name = hoisted[i].name;
    const PlacedLet& p = placed[i];
    switch (p.where) {
      case Placement::kLiteral: break;  // the element reads the literal itself
      case Placement::kBeforeWalk:
      case Placement::kPerBlock: {
        std::string* to = p.where == Placement::kBeforeWalk ? outside_walk : &consts;
        absl::StrAppend(to, "const ", CTypeName(p.value.type), " ", name, " = ", p.value.text,
                        ";\n");
        // Unused where no `//` or `%` divides by it (nvcc drops it).
        if (p.divisor) {
          absl::StrAppend(to, "[[maybe_unused]] const cuir_divisor ", DivisorName(name),
                          " = cuir_divisor_of(", name, ");\n");
        }
        break;
      }
      case Placement::kRow:
      case Placement::kColumn: {
        const bool is_row = p.where == Placement::kRow;
        absl::StrAppend(is_row ? &row_arrays : &col_arrays, CTypeName(p.value.type), " ", name,
                        is_row ? "[MT][2];\n" : "[NT][2];\n");
        absl::StrAppend(is_row ? &row_values : &col_values, "  ", name,
                        is_row ? "[mt][r]" : "[j][k]", " = ", p.value.text, ";\n");
        break;
      }
    }
  }
  std::string text = consts;
  if (!row_values.empty()) {
    absl::StrAppend(&text, row_arrays,
                    "for_each_score_row([&](const int mt, const int r, const int q_idx) {\n",
                    row_values, "});\n");
  }
  if (!col_values.empty()) {
    absl::StrAppend(&text, col_arrays,
                    "for_each_score_col([&](const int j, const int k, const int kv_idx) {\n",
                    col_values, "});\n");
  }
  return text;
}

// The expert's element visitors: for_each_score passes (q_idx, kv_idx, score&);
// for_each_score_at also the element's row slot (mt, r) and column slot (j, k), which index the
// arrays of hoisted row and column values; their `raw` forms (for_each_raw_score...) pass the
// score before the scale (TermsBesideTheScore), and for_each_raw_score_kv_split also counts
// kv_f from the lane's first key of the tile (KvTermFromTileStart).
std::string RegionWriter::ForEachScore(const ExprPtr& e, const std::vector<Hoisted>& hoisted,
                                       absl::string_view body, bool raw, bool kv_split,
                                       absl::string_view visitor, absl::string_view extra) {
  auto param = [](bool used, absl::string_view decl, absl::string_view name) {
    return used ? absl::StrCat(decl, name) : absl::StrCat(decl, "/*", name, "*/");
  };
  const bool rows = std::any_of(hoisted.begin(), hoisted.end(),
                                [](const Hoisted& h) { return h.level == Level::kRow; });
  const bool cols = std::any_of(hoisted.begin(), hoisted.end(),
                                [](const Hoisted& h) { return h.level == Level::kColumn; });
  const bool floats = cuir::Mentions(e, kQFloat) || cuir::Mentions(e, kKvFloat);
  const std::string float_indices =
      floats ? absl::StrCat(", ", param(cuir::Mentions(e, kQFloat), "const float ", "q_f"), ", ",
                            param(cuir::Mentions(e, kKvFloat), "const float ", "kv_f"))
             : "";
  std::string slots;
  if (rows || cols) {
    slots = absl::StrCat(param(rows, "const int ", "mt"), ", ", param(rows, "const int ", "r"),
                         ", ", param(cols, "const int ", "j"), ", ",
                         param(cols, "const int ", "k"), ", ");
  }
  return absl::StrCat(raw ? "for_each_raw_score" : visitor, rows || cols ? "_at" : "",
                      kv_split ? "_kv_split" : "",
                      "([&](", slots,
                      param(cuir::Mentions(e, "q_idx"), "const int ", "q_idx"), ", ",
                      param(cuir::Mentions(e, "kv_idx"), "const int ", "kv_idx"), float_indices,
                      ", ", extra, "float& score) {\n  ", body, "\n});\n");
}

}  // namespace cubridge::lower
