// RegionWriter's block tables (region_writer.h): for each `table T per AXES = blocks(PRED)`, the
// rows function, the corners' verdict a thread gives a tile and the classifier a CTA runs per
// tile the corners left open (region table_kernel), and the workspace
// functions that lay the tables out and route the expert's table kernels
// (cuir/experts/common/table_kernels.cuh) to them (region workspace). The text is built here, not
// kept as templates beside table_kernels.cuh: the classifier's locals are named by a Namer that
// knows the program's names (a buffer may be called `row` or `tile`), and the lowered kernels'
// text stays what it was. The walk over a tile's elements was also tried as an expert template
// taking the predicate as a lambda (session 12): the attention kernels were unchanged, but the
// tables of modulo predicates took longer to build (dilated_window 0.81-0.85x,
// longformer_head_dilation 0.85-0.88x, bench/NOTES.md), so the walk stays generated.
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuir/ir/status_macros.h"
#include "cuir/lower/region_writer.h"
#include "cuir/lower/tile_corners.h"

namespace cubridge::lower {
namespace {

constexpr int kMaxTables = 8;  // tables a program may build (each costs a workspace pass)

constexpr char kHostDevice[] = "__host__ __device__ __forceinline__ ";
constexpr char kDevice[] = "__device__ __forceinline__ ";

// "QUALIFIERS SIGNATURE {\nBODY}\n": `body` is whole lines, indented.
std::string Function(absl::string_view qualifiers, absl::string_view signature,
                     absl::string_view body) {
  return absl::StrCat(qualifiers, signature, " {\n", body, "}\n");
}

// `parts` joined by `sep`, in parentheses when there are several.
std::string Joined(const std::vector<std::string>& parts, absl::string_view sep) {
  if (parts.size() == 1) return parts[0];
  return absl::StrCat("(", absl::StrJoin(parts, sep), ")");
}

}  // namespace

using cuir::ExprPtr;
using cuir::Stmt;

absl::Status RegionWriter::Tables() {
  std::string kernels;
  for (const Stmt* s : plan_.tables) {
    if (static_cast<int>(tables_.size()) == kMaxTables) {
      return absl::UnimplementedError(absl::StrCat(
          s->loc.ToString(), ": the lowering does not know more than ", kMaxTables,
          " block tables (`", StmtHeader(*s), "`)"));
    }
    TableInfo t{s, Fresh(s->name), Fresh(s->name + "_rows"), Fresh(s->name + "_decide"),
                Fresh(s->name + "_classify"), s->names, {}, static_cast<int>(tables_.size())};
    t.transposed = !s->attr.empty();
    for (const std::string& axis : t.axes) {
      auto it = std::find(plan_.grid->names.begin(), plan_.grid->names.end(), axis);
      if (it == plan_.grid->names.end()) {
        return InvalidAt(*s, absl::StrCat("table `", s->name, "`: `per ", axis,
                                          "` is not a grid axis"));
      }
      t.extents.push_back(plan_.grid->exprs[it - plan_.grid->names.begin()]);
    }
    tables_.push_back(t);
    CUBRIDGE_ASSIGN_OR_RETURN(auto rows, RowsFunction(t));
    CUBRIDGE_ASSIGN_OR_RETURN(auto classify, ClassifyKernel(t));
    absl::StrAppend(&kernels, Origin(*s), rows, classify);
  }
  if (tables_.empty()) return absl::OkStatus();
  out_["table_kernel"] = kernels;
  out_["workspace"] = WorkspaceFunctions();
  return absl::OkStatus();
}

// Rows of a table: one per (per-axes values..., m_block), transposed (per-axes values...,
// n_block).
absl::StatusOr<std::string> RegionWriter::RowsFunction(const TableInfo& t) {
  EmitScope scope = ns_;
  BindBuiltins(&scope, "p.");
  std::string product = absl::StrCat("static_cast<long long>(", t.tile_rows("p."), ")");
  for (const ExprPtr& extent : t.extents) {
    CUBRIDGE_ASSIGN_OR_RETURN(auto e, EmitExpr(extent, scope));
    absl::StrAppend(&product, " * ", Convert(e, CType::kLong));
  }
  return Function(kHostDevice,
                  absl::StrCat("long long ", t.rows_fn, "(const ", params_type_, "& p)"),
                  absl::StrCat("  return ", product, ";\n"));
}

// A tile (axes..., m_block, n_block) gets its table entry, 0 (empty), 1 (partial) or 2 (full),
// which cuir_compact_row then turns into the row's block list, in two steps:
// - `T_decide`, one thread a tile: the corners' verdict (CornerVerdict), which writes the entry
//   and returns true where the corners settle the tile. A thread a tile, not a CTA: where most
//   tiles are settled (a dilated window's far from its band), the CTA-wide decode and verdict
//   of each tile cost more than the attention (longformer_head_dilation at 8k: 0.50 ms of
//   tables against a 0.80-ms backward kernel, H100, bench/NOTES.md session 27).
// - `T_classify`, a whole CTA a tile, for the others: evaluates the predicate on the tile's
//   elements inside the sequence bounds, eight rows at a time. Each thread takes whole key
//   columns: what the predicate reads per query is the same address across the warp (one
//   broadcast load), what it reads per key is loaded once per eight rows. (Element order with
//   two loads per element took 105 us of an 8k causal document call's 1.07 ms on an H100.)
//   After each eight rows the CTA votes, and stops once its threads together have seen a kept
//   and a dropped element: the tile is partial then. A thread stopping on its own columns
//   alone walked every row of a column that kept nothing, which is most columns of a band's
//   edge tiles (longformer_head_dilation's tables 0.16 ms at 8k, H200, session 27).
absl::StatusOr<std::string> RegionWriter::ClassifyKernel(const TableInfo& t) {
  std::set<std::string> seed = assigned_;
  seed.insert({params_type_, "BLOCK_M", "BLOCK_N"});
  Namer local(seed);
  const std::string p = local.Fresh("p"), table = local.Fresh("table"),
                    num_m = local.Fresh("num_m"), num_n = local.Fresh("num_n"),
                    tile = local.Fresh("tile"), row = local.Fresh("row"),
                    rest = local.Fresh("rest"), m_block = local.Fresh("m_block"),
                    n_block = local.Fresh("n_block"), q_end = local.Fresh("q_end"),
                    kv_end = local.Fresh("kv_end"), col = local.Fresh("col"),
                    q0 = local.Fresh("q0"), r = local.Fresh("r"), visit = local.Fresh("visit"),
                    any = local.Fresh("any"), all = local.Fresh("all"),
                    keep = local.Fresh("keep");
  EmitScope scope = ns_;
  BindBuiltins(&scope, p + ".");
  BindBuffers(&scope);
  std::string decode = BufferLocals(p);
  // A tile is (row, column): column n_block of the row (axes..., m_block), or, transposed,
  // column m_block of the row (axes..., n_block).
  const std::string& col_block = t.transposed ? m_block : n_block;
  const std::string& row_block = t.transposed ? n_block : m_block;
  const std::string& num_cols = t.transposed ? num_m : num_n;
  const std::string& num_rows = t.transposed ? num_n : num_m;
  absl::StrAppend(&decode, "  int ", n_block, ", ", m_block, ";\n  const long long ", row,
                  " = cuir_udivmod(", tile, ", ", num_cols, ", &", col_block, ");\n  ",
                  t.axes.empty() ? "" : absl::StrCat("long long ", rest, " = "), "cuir_udivmod(",
                  row, ", ", num_rows, ", &", row_block, ");\n");
  for (size_t i = t.axes.size(); i-- > 0;) {
    CUBRIDGE_ASSIGN_OR_RETURN(auto extent, EmitExpr(t.extents[i], scope));
    const std::string axis = local.Fresh(t.axes[i]);
    absl::StrAppend(&decode, "  const int ", axis, " = static_cast<int>(", rest, " % ",
                    Convert(extent, CType::kLong), ");\n  ", rest, " /= ",
                    Convert(extent, CType::kLong), ";\n");
    scope.Bind(t.axes[i], axis, CType::kInt);
  }
  scope.Bind("q_idx", "q_idx", CType::kInt);
  scope.Bind("kv_idx", "kv_idx", CType::kInt);
  CUBRIDGE_ASSIGN_OR_RETURN(auto pred, EmitExpr(t.decl->value, scope));
  if (pred.type != CType::kBool) {
    return InvalidAt(*t.decl, absl::StrCat("table `", t.decl->name, "`: blocks(...) needs a bool"));
  }
  // Both functions' start: the tile decoded, its bounds.
  const std::string signature = absl::StrCat("(const ", params_type_, "& ", p,
                                             ", int* __restrict__ ", table, ", const long long ",
                                             tile, ")");
  const std::string prologue = absl::StrCat(
      "  const int ", num_m, " = cuir_cdiv(", p, ".seqlen_q, BLOCK_M);\n",
      "  const int ", num_n, " = cuir_cdiv(", p, ".seqlen_kv, BLOCK_N);\n", decode,
      "  const int ", q_end, " = min(", m_block, " * BLOCK_M + BLOCK_M, ", p, ".seqlen_q);\n",
      "  const int ", kv_end, " = min(", n_block, " * BLOCK_N + BLOCK_N, ", p, ".seqlen_kv);\n");
  // The tile's entry in the table, which the corners' verdict or the scan writes.
  const std::string entry = absl::StrCat(table, "[", t.rows_fn, "(", p, ") + ", row, " * ",
                                         num_cols, " + ", col_block, "]");
  CUBRIDGE_ASSIGN_OR_RETURN(const std::string corners,
                            CornerVerdict(t, scope, local, entry, m_block, n_block, q_end, kv_end));
  const std::string decide = absl::StrCat(
      kDevice, "bool ", t.decide, signature, " {\n",
      corners.empty()
          ? absl::StrCat("  // No conjunct the corners decide: every tile is scanned.\n  (void)", p,
                         ", (void)", table, ", (void)", tile, ";\n")
          : absl::StrCat(prologue, corners),
      "  return false;\n}\n");
  return absl::StrCat(
      decide, kDevice, "void ", t.classify, signature, " {\n", prologue, "  bool ", any,
      " = false;\n  bool ", all, " = true;\n",
      // Eight rows at a time, then the CTA's vote: once its threads together have seen a kept
      // and a dropped element the tile is partial, whatever the rest holds.
      "  for (int ", q0, " = ", m_block, " * BLOCK_M; ", q0, " < ", q_end, "; ", q0, " += 8) {\n",
      "    for (int ", col, " = threadIdx.x; ", col, " < BLOCK_N; ", col, " += blockDim.x) {\n",
      "      const int kv_idx = ", n_block, " * BLOCK_N + ", col, ";\n",
      "      if (kv_idx >= ", kv_end, ") break;\n",
      "      auto ", visit, " = [&](const int q_idx) {\n",
      "        const bool ", keep, " = ", pred.text, ";\n",
      "        ", any, " = ", any, " || ", keep, ";\n        ", all, " = ", all, " && ", keep,
      ";\n",
      "      };\n",
      // The eight loads are independent; only a last short group tests the row bound per row.
      "      if (", q0, " + 8 <= ", q_end, ") {\n",
      "#pragma unroll\n",
      "        for (int ", r, " = 0; ", r, " < 8; ++", r, ") ", visit, "(", q0, " + ", r, ");\n",
      "      } else {\n",
      "        for (int ", r, " = ", q0, "; ", r, " < ", q_end, "; ++", r, ") ", visit, "(", r,
      ");\n",
      "      }\n",
      "    }\n",
      "    if (__syncthreads_or(", any, ") && !__syncthreads_and(", all, ")) break;\n",
      "  }\n",
      "  ", any, " = __syncthreads_or(", any, ");\n  ", all, " = __syncthreads_and(", all, ");\n",
      "  if (threadIdx.x == 0) ", entry, " = ", any, " ? (", all, " ? 2 : 1) : 0;\n",
      // The next tile's classification reuses the CTA: no thread may still read any/all.
      "  __syncthreads();\n}\n");
}

// The corners' verdict on a tile (tile_corners.h), in one thread: empty where a half-plane
// conjunct fails at all four corners, full where the predicate is half-plane conjuncts alone
// and all hold at all four; the entry written and `return true` then. Empty text when no
// conjunct qualifies.
absl::StatusOr<std::string> RegionWriter::CornerVerdict(
    const TableInfo& t, const EmitScope& scope, Namer& local, const std::string& entry,
    const std::string& m_block, const std::string& n_block, const std::string& q_end,
    const std::string& kv_end) {
  TileCorners found = FindTileCorners(t.decl->value);
  // Each decided conjunct's disjuncts, as C++ (a plain comparison is one disjunct).
  std::vector<std::vector<std::string>> conjuncts;
  for (const cuir::ExprPtr& c : found.decided) {
    const std::vector<cuir::ExprPtr> parts = Disjuncts(c);
    std::vector<std::string> texts;
    for (const cuir::ExprPtr& d : parts) {
      CUBRIDGE_ASSIGN_OR_RETURN(auto a, EmitExpr(d->args[0], scope));
      CUBRIDGE_ASSIGN_OR_RETURN(auto b, EmitExpr(d->args[1], scope));
      CUBRIDGE_ASSIGN_OR_RETURN(auto text, EmitExpr(d, scope));
      // Integer sides only: exact, so the half-plane holds as computed.
      if (!IsInt(a.type) || !IsInt(b.type)) break;
      texts.push_back(text.text);
    }
    if (texts.size() == parts.size()) conjuncts.push_back(texts);
    else found.all_decided = false;
  }
  if (conjuncts.empty()) return std::string();
  const std::string qa = local.Fresh("q_first"), qb = local.Fresh("q_last"),
                    ka = local.Fresh("kv_first"), kb = local.Fresh("kv_last"),
                    out = local.Fresh("outside"), in = local.Fresh("inside");
  std::string code = absl::StrCat(
      "  // The corners' verdict (tile_corners.h).\n", "  const int ", qa, " = ", m_block,
      " * BLOCK_M, ", qb, " = ", q_end, " - 1, ", ka, " = ", n_block, " * BLOCK_N, ", kb, " = ",
      kv_end, " - 1;\n  bool ", out, " = false;\n",
      found.all_decided ? absl::StrCat("  bool ", in, " = true;\n") : "");
  for (const std::vector<std::string>& texts : conjuncts) {
    // The conjunct fails on the tile if every disjunct fails at the four corners, holds on it
    // if one disjunct holds at all four.
    std::vector<std::string> none, all;
    absl::StrAppend(&code, "  {\n");
    for (const std::string& text : texts) {
      const std::string c = local.Fresh("corner"), held = local.Fresh("held");
      absl::StrAppend(&code, "    const auto ", c,
                      " = [&](const int q_idx, const int kv_idx) { return ", text, "; };\n",
                      "    const int ", held, " = ", c, "(", qa, ", ", ka, ") + ", c, "(", qa,
                      ", ", kb, ") + ", c, "(", qb, ", ", ka, ") + ", c, "(", qb, ", ", kb,
                      ");\n");
      none.push_back(held + " == 0");
      all.push_back(held + " == 4");
    }
    absl::StrAppend(&code, "    ", out, " = ", out, " || ", Joined(none, " && "), ";\n",
                    found.all_decided
                        ? absl::StrCat("    ", in, " = ", in, " && ", Joined(all, " || "), ";\n")
                        : "",
                    "  }\n");
  }
  absl::StrAppend(&code, "  if (", out, ") {\n    ", entry, " = 0;\n    return true;\n  }\n");
  if (found.all_decided) {
    absl::StrAppend(&code, "  if (", in, ") {\n    ", entry, " = 2;\n    return true;\n  }\n");
  }
  return code;
}

// Tables are laid out one after the other, 256-byte aligned: counts[rows], entries[rows][cols]
// (cols: the KV blocks, or a transposed table's query blocks). The table kernels of the expert
// visit tiles and rows of all tables as one range each; these functions map a position in that
// range to its table.
std::string RegionWriter::WorkspaceFunctions() const {
  const std::string P = absl::StrCat("const ", params_type_, "& p");
  std::string layout, tiles, rows, decide, classify, compact;
  bool any_transposed = false, any_plain = false;
  for (const TableInfo& t : tables_) {
    any_transposed |= t.transposed;
    any_plain |= !t.transposed;
    // The row's entries: its KV blocks, or a transposed table's query blocks (num_m below).
    const std::string num_n = t.transposed ? "cuir_cdiv<long long>(p.seqlen_q, BLOCK_M)"
                                           : "cuir_cdiv<long long>(p.seqlen_kv, BLOCK_N)";
    const std::string cols = t.transposed ? "num_m" : "num_n";
    const std::string at =
        absl::StrCat("reinterpret_cast<int*>(workspace + offsets[", t.slot, "])");
    absl::StrAppend(&layout, "  if (offsets != nullptr) offsets[", t.slot, "] = bytes;  // ",
                    t.decl->name, "\n  bytes += static_cast<size_t>(", t.rows_fn,
                    "(p)) * static_cast<size_t>(1 + ", num_n,
                    ") * sizeof(int);\n  bytes = (bytes + 255) / 256 * 256;\n");
    absl::StrAppend(&tiles, " + ", t.rows_fn, "(p) * ", num_n);
    absl::StrAppend(&rows, " + ", t.rows_fn, "(p)");
    absl::StrAppend(&decide, "  if (tile < ", t.rows_fn, "(p) * ", cols, ") return ",
                    t.decide, "(p, ", at, ", tile);\n  tile -= ", t.rows_fn, "(p) * ", cols,
                    ";\n");
    absl::StrAppend(&classify, "  if (tile < ", t.rows_fn, "(p) * ", cols, ") return ",
                    t.classify, "(p, ", at, ", tile);\n  tile -= ", t.rows_fn, "(p) * ", cols,
                    ";\n");
    absl::StrAppend(&compact, "  if (row < ", t.rows_fn, "(p)) return cuir_compact_row(", at,
                    ", ", t.rows_fn, "(p), static_cast<int>(", cols, "), row);\n  row -= ",
                    t.rows_fn, "(p);\n");
  }
  // Where each table starts, for the two routing functions.
  const std::string locate = absl::StrCat(
      "  size_t offsets[", tables_.size(), "];\n  variant_workspace(p, offsets);\n",
      any_plain ? "  const long long num_n = cuir_cdiv<long long>(p.seqlen_kv, BLOCK_N);\n" : "",
      any_transposed ? "  const long long num_m = cuir_cdiv<long long>(p.seqlen_q, BLOCK_M);\n"
                     : "");
  return absl::StrCat(
      "// Block tables, each counts[rows] then entries[rows][num_n], 256-byte aligned; their rows\n"
      "// are BLOCK_M-row blocks, which an expert's tile choices must keep.\n",
      kHostDevice, "constexpr bool variant_has_tables() { return true; }\n",
      Function(kHostDevice, absl::StrCat("size_t variant_workspace(", P, ", size_t* offsets)"),
               absl::StrCat("  size_t bytes = 0;\n", layout, "  return bytes;\n")),
      Function(kHostDevice,
               absl::StrCat("const int* variant_table(", P, ", const char* workspace, int slot)"),
               absl::StrCat("  size_t offsets[", tables_.size(), "];\n  variant_workspace(p, offsets);\n",
                            "  return reinterpret_cast<const int*>(workspace + offsets[slot]);\n")),
      Function(kHostDevice, absl::StrCat("long long variant_table_tiles(", P, ")"),
               absl::StrCat("  return 0", tiles, ";\n")),
      Function(kHostDevice, absl::StrCat("long long variant_table_rows(", P, ")"),
               absl::StrCat("  return 0", rows, ";\n")),
      Function(kDevice,
               absl::StrCat("bool variant_decide_tile(", P, ", char* workspace, long long tile)"),
               absl::StrCat(locate, decide, "  return false;\n")),
      Function(kDevice,
               absl::StrCat("void variant_classify_tile(", P, ", char* workspace, long long tile)"),
               locate + classify),
      Function(kDevice,
               absl::StrCat("void variant_compact_row(", P, ", char* workspace, long long row)"),
               locate + compact));
}

}  // namespace cubridge::lower
