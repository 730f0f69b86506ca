// RegionWriter's KV loop (region_writer.h): the walk's header (kv_walk, kv_range, or kv_loop for
// a walk that comes from a block table) and its body: the block lets (block_class), the score
// scale (qk_scale), and the element statements, which region_element.cc writes (score_mod,
// mask).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuir/ir/status_macros.h"
#include "cuir/lower/region_writer.h"

namespace cubridge::lower {

using cuir::Stmt;
using cuir::StmtKind;

absl::Status RegionWriter::LoopHeader() {
  const Stmt& loop = *plan_.loop;
  loop_ = kernel_;
  loop_.Bind(loop.name, loop.name, CType::kInt);
  // An expert that orders tiles by whether their KV walks are all alike hears that they are
  // not wherever the walk is narrowed or comes from a table.
  if (kv_walk_region_ && (plan_.table_loop || plan_.range_changed)) {
    out_["kv_walk"] = absl::StrCat(
        "// The KV walk differs between work tiles (",
        plan_.table_loop ? "a block table" : "narrowed bounds", ": kv_loop / kv_range).\n",
        "__host__ __device__ __forceinline__ constexpr bool variant_kv_walk_is_whole() { "
        "return false; }\n");
  }
  if (plan_.table_loop) return TableLoop(loop);
  if (!plan_.range_changed) return absl::OkStatus();
  // The expert's kv_loop iterates `kv_blocks`, a KvUnion<N> of half-open block intervals (a
  // backward's walk `q_blocks`, region q_range).
  std::vector<std::string> los, his;
  for (const cuir::BlockRange& r : loop.ranges) {
    CUBRIDGE_ASSIGN_OR_RETURN(auto lo, EmitExpr(r.lo, kernel_));
    CUBRIDGE_ASSIGN_OR_RETURN(auto hi, EmitExpr(r.hi, kernel_));
    if (lo.type == CType::kFloat || hi.type == CType::kFloat || lo.type == CType::kBool ||
        hi.type == CType::kBool) {
      return InvalidAt(loop, "KV block bounds must be ints");
    }
    los.push_back(Convert(lo, CType::kInt));
    his.push_back(Convert(hi, CType::kInt));
  }
  out_[backward_ ? "q_range" : "kv_range"] = absl::StrCat(
      Origin(loop), "const KvUnion<", loop.ranges.size(), "> ",
      backward_ ? "q_blocks" : "kv_blocks", " = {{", absl::StrJoin(los, ", "), "}, {",
      absl::StrJoin(his, ", "), "}};\n");
  return absl::OkStatus();
}

// for VAR, FULL in table T[axes..., m_block]: the row's count, then its entries
// (n_block << 1 | full), ascending. Like the range form it also binds `n_next`, the block
// after this one, which the expert prefetches.
absl::Status RegionWriter::TableLoop(const Stmt& loop) {
  const TableInfo* t = nullptr;
  for (const TableInfo& info : tables_) {
    if (info.decl->name == loop.table) t = &info;
  }
  if (t == nullptr) return InvalidAt(loop, absl::StrCat("no table `", loop.table, "`"));
  if (loop.exprs.size() != t->axes.size() + 1) {
    return InvalidAt(loop, absl::StrCat("table `", loop.table, "` has ", t->axes.size() + 1,
                                        " indices (its per axes, then m_block)"));
  }
  std::string row;
  for (size_t i = 0; i < loop.exprs.size(); ++i) {
    CUBRIDGE_ASSIGN_OR_RETURN(auto index, EmitExpr(loop.exprs[i], kernel_));
    if (i == 0) {
      row = Convert(index, CType::kLong);
      continue;
    }
    std::string extent = t->tile_rows("");
    if (i < t->axes.size()) {
      CUBRIDGE_ASSIGN_OR_RETURN(auto e, EmitExpr(t->extents[i], kernel_));
      extent = e.text;
    }
    row = absl::StrCat("(", row, " * ", extent, " + ", index.text, ")");
  }
  const std::string row_var = Fresh(t->cpp + "_row"), entries = Fresh(t->cpp + "_entries"),
                    count = Fresh(t->cpp + "_count"), i = Fresh(t->cpp + "_i"),
                    entry = Fresh(t->cpp + "_entry");
  // `block_full` (and `n_block`, `n_next`) are the names the expert's walk hands on with the
  // block (docs/lowering.md, "Variant hooks").
  loop_.Bind(loop.full_var, "block_full", CType::kBool);
  // A backward's walk (regions q_range, q_loop) hands on `m_next`.
  const char* const range = backward_ ? "q_range" : "kv_range";
  const char* const walk = backward_ ? "q_loop" : "kv_loop";
  out_[range] = absl::StrCat("// table form: the blocks come from table ", loop.table, " (", walk,
                             ")\n");
  out_[walk] = absl::StrCat(
      "// table_loop\n", Origin(loop),
      "const long long ", row_var, " = ", row, ";\n",
      "const int* const ", entries, " = ", t->cpp, " + ", t->rows_fn, "(p) + ", row_var,
      " * ", t->cols(""), ";\n",
      "const int ", count, " = __ldg(", t->cpp, " + ", row_var, ");\n",
      "for (int ", i, " = 0; ", i, " < ", count, "; ++", i, ") {\n",
      "  const int ", entry, " = __ldg(", entries, " + ", i, ");\n",
      "  const int ", loop.name, " = ", entry, " >> 1;\n",
      "  const bool block_full = (", entry, " & 1) != 0;\n",
      // The expert's pipelined mainloop prefetches the next visited block (INT_MAX: none).
      "  const int ", backward_ ? "m_next" : "n_next", " = ", i, " + 1 < ", count,
      " ? __ldg(", entries, " + ", i, " + 1) >> 1 : INT_MAX;\n");
  return absl::OkStatus();
}

absl::Status RegionWriter::LoopBody() {
  const Stmt* base_loop = cuir::FindKvLoop(base_);
  for (const Stmt& s : base_loop->body) {
    if (s.kind == StmtKind::kLet) loop_.Bind(s.name, s.name, BaseCType(s.type));
  }
  std::string lets;
  for (const Stmt* s : plan_.block_lets) {
    CUBRIDGE_ASSIGN_OR_RETURN(auto line, Declare(*s, Fresh(s->name), &loop_));
    lets += line;
  }
  if (!plan_.block_lets.empty()) out_["block_class"] = lets;
  if (plan_.scale_changed) {
    CUBRIDGE_ASSIGN_OR_RETURN(auto scale, EmitExpr(plan_.qk->value, loop_));
    out_["qk_scale"] =
        absl::StrCat(Origin(*plan_.qk), "const float qk_scale = ", AsFloat(scale), ";\n");
  }
  std::string mods;
  for (const Stmt* s : plan_.score_mods) {
    // A later score_mod would read the shifted score, and a sink is compared with it.
    // An expert without `epilogue_rows` keeps them in the element.
    const bool rows_to_lse = lse_rows_ && s == plan_.score_mods.back() && plan_.sink == nullptr;
    // Only the first sees the raw score: the visitors scale the tile before any later one.
    const bool fold_scale = raw_scores_ && s == plan_.score_mods.front();
    // The tile's offset rides beside the stored scores: only where no later score_mod reads them.
    const bool kv_split = fold_scale && kv_split_scores_ && plan_.score_mods.size() == 1;
    CUBRIDGE_ASSIGN_OR_RETURN(auto text, ScoreMod(*s, rows_to_lse, fold_scale, kv_split));
    mods += text;
  }
  if (!plan_.score_mods.empty()) out_["score_mod"] = mods;
  std::string masks;
  for (const Stmt* s : plan_.masks) {
    CUBRIDGE_ASSIGN_OR_RETURN(auto text, Mask(*s));
    masks += text;
  }
  if (!plan_.masks.empty()) out_["mask"] = masks;
  // A backward's chain rule: the learnable buffers' gradients, then dS's factor.
  std::string grads;
  for (const Stmt* s : plan_.buffer_grads) {
    CUBRIDGE_ASSIGN_OR_RETURN(auto text, BufferGrad(*s));
    grads += text;
  }
  if (!plan_.buffer_grads.empty()) out_["buffer_grad"] = grads;
  if (plan_.score_grad != nullptr) {
    CUBRIDGE_ASSIGN_OR_RETURN(out_["score_grad"], ScoreGrad(*plan_.score_grad));
  }
  // Buffer gradients alone keep them only in a module that computes them
  // (CUBRIDGE_BWD_BUFFER_GRADS, common/backward_hooks.cuh).
  if (plan_.score_grad != nullptr) {
    out_["keeps_raw_scores"] =
        "// the gradient statements read the raw scores\nstatic constexpr bool kKeepsRawScores = "
        "true;\n";
  } else if (!plan_.buffer_grads.empty()) {
    out_["keeps_raw_scores"] =
        "// the buffer gradients read the raw scores, where the module computes them\n"
        "static constexpr bool kKeepsRawScores = CUBRIDGE_BWD_BUFFER_GRADS != 0;\n";
  }
  return absl::OkStatus();
}

}  // namespace cubridge::lower
