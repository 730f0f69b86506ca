// RegionWriter's block tables (region_writer.h): for each `table T per AXES = blocks(PRED)`, the
// rows function and the classifier a CTA runs per tile (region table_kernel), and the workspace
// functions that lay the tables out and route the expert's table kernels
// (cuir/experts/common/table_kernels.cuh) to them (region workspace). The walk over a tile's
// elements is a template of the experts (cuir_classify_tile, common/kv_blocks.cuh); what is the
// program's is built here: the decode of the tile's axes, the predicate, and the workspace
// functions, whose locals a Namer names apart from the program's (a buffer may be called `row`
// or `tile`).
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "cuir/ir/status_macros.h"
#include "cuir/lower/region_writer.h"

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
    TableInfo t{s, Fresh(s->name), Fresh(s->name + "_rows"), Fresh(s->name + "_classify"),
                s->names, {}, static_cast<int>(tables_.size())};
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

// Rows of a table: one per (per-axes values..., m_block).
absl::StatusOr<std::string> RegionWriter::RowsFunction(const TableInfo& t) {
  EmitScope scope = ns_;
  BindBuiltins(&scope, "p.");
  std::string product = "static_cast<long long>(cuir_cdiv(p.seqlen_q, BLOCK_M))";
  for (const ExprPtr& extent : t.extents) {
    CUBRIDGE_ASSIGN_OR_RETURN(auto e, EmitExpr(extent, scope));
    absl::StrAppend(&product, " * ", Convert(e, CType::kLong));
  }
  return Function(kHostDevice,
                  absl::StrCat("long long ", t.rows_fn, "(const ", params_type_, "& p)"),
                  absl::StrCat("  return ", product, ";\n"));
}

// A CTA classifies one tile (axes..., m_block, n_block): decodes it, and stores the class that
// cuir_classify_tile (experts/common/kv_blocks.cuh) finds for the program's predicate, 0
// (empty), 1 (partial) or 2 (full), into the table's entry array, which cuir_compact_row then
// turns into the row's block list. Only the decode of the tile's axes and the predicate are the
// program's; the walk over the tile's elements is the template's.
absl::StatusOr<std::string> RegionWriter::ClassifyKernel(const TableInfo& t) {
  std::set<std::string> seed = assigned_;
  seed.insert({params_type_, "BLOCK_M", "BLOCK_N"});
  Namer local(seed);
  const std::string p = local.Fresh("p"), table = local.Fresh("table"),
                    num_m = local.Fresh("num_m"), num_n = local.Fresh("num_n"),
                    tile = local.Fresh("tile"), row = local.Fresh("row"),
                    rest = local.Fresh("rest"), m_block = local.Fresh("m_block"),
                    n_block = local.Fresh("n_block"), cls = local.Fresh("cls");
  EmitScope scope = ns_;
  BindBuiltins(&scope, p + ".");
  BindBuffers(&scope);
  std::string decode = BufferLocals(p);
  absl::StrAppend(&decode, "  int ", n_block, ", ", m_block, ";\n  const long long ", row,
                  " = cuir_udivmod(", tile, ", ", num_n, ", &", n_block, ");\n  ",
                  t.axes.empty() ? "" : absl::StrCat("long long ", rest, " = "), "cuir_udivmod(",
                  row, ", ", num_m, ", &", m_block, ");\n");
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
  return absl::StrCat(
      "__device__ __forceinline__ void ", t.classify, "(const ", params_type_, "& ", p,
      ", int* __restrict__ ", table, ", const long long ", tile, ") {\n",
      "  const int ", num_m, " = cuir_cdiv(", p, ".seqlen_q, BLOCK_M);\n",
      "  const int ", num_n, " = cuir_cdiv(", p, ".seqlen_kv, BLOCK_N);\n", decode,
      "  const int ", cls, " = cuir_classify_tile<BLOCK_M, BLOCK_N>(\n      ", m_block, ", ",
      n_block, ", ", p, ".seqlen_q, ", p, ".seqlen_kv,\n",
      "      [&](const int q_idx, const int kv_idx) { return ", pred.text, "; });\n",
      "  if (threadIdx.x == 0) ", table, "[", t.rows_fn, "(", p, ") + ", row, " * ", num_n,
      " + ", n_block, "] = ", cls, ";\n",
      // The next tile's classification reuses the CTA: no thread may still read the class.
      "  __syncthreads();\n}\n");
}

// Tables are laid out one after the other, 256-byte aligned: counts[rows], entries[rows][num_n].
// The table kernels of the expert visit tiles and rows of all tables as one range each; these
// functions map a position in that range to its table.
std::string RegionWriter::WorkspaceFunctions() const {
  const std::string P = absl::StrCat("const ", params_type_, "& p");
  const std::string num_n = "cuir_cdiv<long long>(p.seqlen_kv, BLOCK_N)";
  std::string layout, tiles, rows, classify, compact;
  for (const TableInfo& t : tables_) {
    const std::string at =
        absl::StrCat("reinterpret_cast<int*>(workspace + offsets[", t.slot, "])");
    absl::StrAppend(&layout, "  if (offsets != nullptr) offsets[", t.slot, "] = bytes;  // ",
                    t.decl->name, "\n  bytes += static_cast<size_t>(", t.rows_fn,
                    "(p)) * static_cast<size_t>(1 + ", num_n,
                    ") * sizeof(int);\n  bytes = (bytes + 255) / 256 * 256;\n");
    absl::StrAppend(&tiles, " + ", t.rows_fn, "(p) * ", num_n);
    absl::StrAppend(&rows, " + ", t.rows_fn, "(p)");
    absl::StrAppend(&classify, "  if (tile < ", t.rows_fn, "(p) * num_n) return ", t.classify,
                    "(p, ", at, ", tile);\n  tile -= ", t.rows_fn, "(p) * num_n;\n");
    absl::StrAppend(&compact, "  if (row < ", t.rows_fn, "(p)) return cuir_compact_row(", at,
                    ", ", t.rows_fn, "(p), static_cast<int>(num_n), row);\n  row -= ", t.rows_fn,
                    "(p);\n");
  }
  // Where each table starts, for the two routing functions.
  const std::string locate =
      absl::StrCat("  size_t offsets[", tables_.size(), "];\n  variant_workspace(p, offsets);\n",
                   "  const long long num_n = ", num_n, ";\n");
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
               absl::StrCat("void variant_classify_tile(", P, ", char* workspace, long long tile)"),
               locate + classify),
      Function(kDevice,
               absl::StrCat("void variant_compact_row(", P, ", char* workspace, long long row)"),
               locate + compact));
}

}  // namespace cubridge::lower
