// RegionWriter, private to cuir/lower: writes the regions GenerateRegions (codegen.h) returns,
// each from the program's statements in the scope the expert has at that region: what the expert
// declares before it (builtins, grid axes, q_lo, kv_lo, ...) plus what earlier generated regions
// declared. Run (codegen.cc) calls the families in the order the regions see each other; each
// family's members are defined in its own file:
//   codegen.cc         symbols and declarations every family uses
//   region_decls.cc    tile_params, variant_consts, the buffers' names, head_map, program_lets
//   region_tables.cc   block tables: table_kernel (rows, classifier), workspace
//   region_work_tile.cc  tile_stream, stream_coords
//   region_loop.cc     kv_walk, kv_range, kv_loop, block_class, qk_scale
//   region_element.cc  score_mod, mask, epilogue_rows (called by the loop's body): element
//                      expressions through the rewrites (rewrites/rewrites.h) and the hoisting
//                      passes (rewrites/hoisting.h), the element visitors
//   region_checks.cc   epilogue_sink, head_check, buffer_check, variant_bind
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cuir/ir/bounds.h"
#include "cuir/ir/program.h"
#include "cuir/lower/cuda_emit.h"
#include "cuir/lower/expert.h"
#include "cuir/lower/names.h"
#include "cuir/lower/plan.h"
#include "cuir/lower/rewrites/hoisting.h"
#include "cuir/lower/tile_stream.h"

namespace cubridge::lower {

class RegionWriter {
 public:
  RegionWriter(const LoweringPlan& plan, const cuir::Program& base, const Expert& expert);

  // Region name -> replacement body, for the regions the plan changed.
  absl::StatusOr<std::map<std::string, std::string>> Run();

 private:
  struct BufferInfo {
    const cuir::Stmt* decl;
    std::string cpp;  // = binding.data
    int slot;
    BufferBinding binding;
  };

  struct TableInfo {
    const cuir::Stmt* decl;
    std::string cpp;       // device pointer to the table (attention kernel local)
    std::string rows_fn;   // host+device: number of rows
    std::string decide;    // device: the corners' verdict on one tile (one thread calls it)
    std::string classify;  // device: classifies one tile (a whole CTA calls it)
    std::vector<std::string> axes;
    std::vector<cuir::ExprPtr> extents;  // grid extents of `axes`
    int slot;
    // A backward's table: a row per (axes..., n_block), its entries query blocks.
    bool transposed = false;
    // Entries per row and rows per value of the axes, in the params' names (p.): the counts of
    // query and key blocks, swapped when transposed.
    std::string cols(const std::string& p) const {
      return transposed ? "cuir_cdiv(" + p + "seqlen_q, BLOCK_M)"
                        : "cuir_cdiv(" + p + "seqlen_kv, BLOCK_N)";
    }
    std::string tile_rows(const std::string& p) const {
      return transposed ? "cuir_cdiv(" + p + "seqlen_kv, BLOCK_N)"
                        : "cuir_cdiv(" + p + "seqlen_q, BLOCK_M)";
    }
  };

  // An element expression (a score_mod's value or a mask's predicate) as the element loop runs
  // it: the named rewrites, then its invariants hoisted and declared before the loop.
  struct ElementCode {
    std::string decls;            // the hoisted values, before the loop
    std::string outside_walk;     // those placed before the KV walk (PlaceHoisted)
    cuir::ExprPtr expr;           // what each element evaluates
    std::vector<Hoisted> hoisted;
    CExpr value;                  // `expr` emitted
    cuir::ExprPtr row_terms;      // moved to the LSE (SplitRowTerms), or null
    bool raw_score = false;       // `value` takes the raw score and the scale (TermsBesideTheScore)
    bool kv_split = false;        // ... and kv_f from the lane's first key (KvTermFromTileStart)
  };

  // ---- codegen.cc: symbols ----
  // "// <statement>  (file:line:col)": generated code says which CuIR it came from.
  static std::string Origin(const cuir::Stmt& s);
  static CType BaseCType(cuir::Type t);
  static absl::Status InvalidAt(const cuir::Stmt& s, absl::string_view what);
  std::string Fresh(const std::string& want);
  void Bind(EmitScope* scope, const std::string& cuir_name, const std::string& cpp, CType t);
  static void BindBuiltins(EmitScope* scope, const std::string& prefix);
  void BindBuffers(EmitScope* scope) const;
  bool InBase(cuir::StmtKind kind, const std::string& name) const;
  absl::StatusOr<std::string> Declare(const cuir::Stmt& s, const std::string& cpp,
                                      EmitScope* scope, absl::string_view qualifier = "const");

  // ---- region_decls.cc ----
  absl::Status Params();
  absl::Status Consts();
  absl::Status Buffers();
  absl::Status TopLets();

  // ---- region_tables.cc ----
  absl::Status Tables();
  absl::StatusOr<std::string> RowsFunction(const TableInfo& t);
  absl::StatusOr<std::string> ClassifyKernel(const TableInfo& t);
  // `entry`: the tile's table element; the others, the classifier's names of the tile's bounds.
  absl::StatusOr<std::string> CornerVerdict(const TableInfo& t, const EmitScope& scope,
                                            Namer& local, const std::string& entry,
                                            const std::string& m_block,
                                            const std::string& n_block, const std::string& q_end,
                                            const std::string& kv_end);
  std::string WorkspaceFunctions() const;

  // ---- region_work_tile.cc ----
  absl::Status TileStreamRegions();
  std::vector<const cuir::Stmt*> ElementStmts() const;
  static std::vector<std::string> ElementSymbols();
  std::optional<std::string> WorkTileIndex(const cuir::ExprPtr& arg,
                                           const std::string& size) const;

  // ---- region_loop.cc ----
  absl::Status LoopHeader();
  absl::Status TableLoop(const cuir::Stmt& loop);
  absl::Status LoopBody();

  // ---- region_element.cc ----
  absl::StatusOr<std::string> ScoreMod(const cuir::Stmt& s, bool rows_to_lse, bool fold_scale,
                                       bool kv_split);
  absl::StatusOr<std::string> Mask(const cuir::Stmt& s);
  absl::StatusOr<std::string> ScoreGrad(const cuir::Stmt& s);
  absl::StatusOr<std::string> BufferGrad(const cuir::Stmt& s);
  absl::StatusOr<ElementCode> Element(const cuir::Stmt& s, bool with_score,
                                      bool rows_to_lse = false, bool fold_scale = false,
                                      bool kv_split = false, bool outside_walk = false);
  EmitScope ElementScope(bool with_score) const;
  EmitScope RowScope() const;
  void NameHoisted(Hoisting* h);
  std::string HoistedName(const cuir::ExprPtr& e, Level level) const;
  absl::StatusOr<std::string> DeclareHoisted(const std::vector<Hoisted>& hoisted,
                                             EmitScope* element,
                                             std::string* outside_walk = nullptr);
  // `visitor` names the visitor family (for_each_score, or a backward's for_each_score_grad /
  // for_each_buffer_grad); `extra` is a parameter the element function takes before `score`
  // (a backward's `const float ds, `).
  static std::string ForEachScore(const cuir::ExprPtr& e, const std::vector<Hoisted>& hoisted,
                                  absl::string_view body, bool raw = false,
                                  bool kv_split = false,
                                  absl::string_view visitor = "for_each_score",
                                  absl::string_view extra = "");

  // ---- region_checks.cc ----
  absl::Status EpilogueSink();
  absl::Status HeadCheck(const cuir::Stmt& head_map);
  absl::Status BufferCheck();
  absl::Status KernelBindings();
  static std::string BufferSlot(const std::string& params, const BufferInfo& b);
  std::string BufferLocals(const std::string& params, absl::string_view indent = "  ") const;

  const LoweringPlan& plan_;
  const cuir::Program& base_;
  Namer namer_;
  std::set<std::string> assigned_;  // C++ names given to CuIR symbols and generated helpers
  const std::string params_type_;
  const bool lse_rows_;  // the expert has region epilogue_rows (shift_lse_rows)
  const bool raw_scores_;  // the expert offers for_each_raw_score (TermsBesideTheScore)
  const bool kv_split_scores_;  // ... and for_each_raw_score_kv_split (KvTermFromTileStart)
  const bool kv_walk_region_;   // the expert has a `kv_walk` region (variant_kv_walk_is_whole)
  const bool stream_regions_;   // ... regions `tile_stream` and `stream_coords` (StreamTheTile)
  const bool backward_;         // a backward expert: its walk is over query blocks (q_range)
  std::optional<TileStream> stream_;  // the tensor that comes tile by tile, if any
  EmitScope ns_;      // namespace scope: params, consts
  EmitScope kernel_;  // kernel body before the loop
  EmitScope loop_;    // inside the KV loop
  std::vector<BufferInfo> buffers_;
  cuir::BoundsEnv element_bounds_ = cuir::ElementBoundsEnv();  // + the consts' values (Consts)
  std::vector<TableInfo> tables_;
  std::map<std::string, std::string> out_;
};

}  // namespace cubridge::lower
