// Each generator writes one region's replacement from the program's statements, in the scope the
// expert has at that region: what the expert declares before it (builtins, grid axes, q_lo,
// kv_lo, ...) plus what earlier generated regions declared.
#include "cuir/lower/codegen.h"

#include <algorithm>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cuir/ir/bounds.h"
#include "cuir/ir/status_macros.h"
#include "cuir/lower/cuda_emit.h"
#include "cuir/lower/modular.h"
#include "cuir/lower/names.h"
#include "cuir/lower/rewrites/rewrites.h"
#include "cuir/lower/staged_tables.h"
#include "cuir/lower/tile_stream.h"

namespace cubridge::lower {
namespace {

using cuir::ExprPtr;
using cuir::Stmt;
using cuir::StmtKind;

constexpr int kMaxBuffers = 8;  // CUBRIDGE_MAX_BUFFERS of the launcher ABI
constexpr int kMaxTables = 8;   // tables a program may build (each costs a workspace pass)

// "// <statement>  (file:line:col)": generated code says which CuIR it came from.
std::string Origin(const Stmt& s) {
  return absl::StrCat("// ", StmtHeader(s), s.loc.known() ? "  (" + s.loc.ToString() + ")" : "",
                      "\n");
}

CType BaseCType(cuir::Type t) {
  switch (t) {
    case cuir::Type::kBool: return CType::kBool;
    case cuir::Type::kFloat: return CType::kFloat;
    case cuir::Type::kInt: return CType::kInt;
  }
  return CType::kInt;
}

absl::Status InvalidAt(const Stmt& s, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(s.loc.known() ? s.loc.ToString() + ": " : "", what));
}

struct BufferInfo {
  const Stmt* decl;
  std::string cpp;  // = binding.data
  int slot;
  BufferBinding binding;
};

struct TableInfo {
  const Stmt* decl;
  std::string cpp;       // device pointer to the table (attention kernel local)
  std::string rows_fn;   // host+device: number of rows
  std::string classify;  // device: classifies one tile (a whole CTA calls it)
  std::vector<std::string> axes;
  std::vector<ExprPtr> extents;  // grid extents of `axes`
  int slot;
};

// A subexpression evaluated before the element loop, as variable `name` (also its CuIR name in
// the rewritten expression).
struct Hoisted {
  Level level;
  std::string name;
  ExprPtr expr;
};

bool IsLeaf(const ExprPtr& e) { return e->args.empty(); }

// A transcendental function (every unary op but the few-instruction ones).
bool TranscendentalUnary(cuir::UnaryOp op) {
  using cuir::UnaryOp;
  switch (op) {
    case UnaryOp::kNeg: case UnaryOp::kNot: case UnaryOp::kAbs: case UnaryOp::kFloor:
    case UnaryOp::kToFloat: case UnaryOp::kToInt: case UnaryOp::kTrunc: case UnaryOp::kRound:
    case UnaryOp::kSign: case UnaryOp::kBitNot: return false;
    default: return true;
  }
}

// What the node `e` itself costs per evaluation: 3 for a transcendental function, a float
// division, pow, atan2 or fmod; 2 for a buffer read; 1 for an integer division, modulo or shift
// (torch's 64-bit shifts test their amount); 0 for the rest (a few instructions at most).
int NodeCost(const ExprPtr& e) {
  using cuir::BinaryOp;
  switch (e->kind) {
    case cuir::ExprKind::kIndex: return 2;
    case cuir::ExprKind::kUnary: return TranscendentalUnary(e->unary_op) ? 3 : 0;
    case cuir::ExprKind::kBinary:
      switch (e->binary_op) {
        case BinaryOp::kDiv: case BinaryOp::kPow: case BinaryOp::kAtan2: case BinaryOp::kFmod:
          return 3;
        case BinaryOp::kFloorDiv: case BinaryOp::kMod: case BinaryOp::kCdiv:
        case BinaryOp::kShl: case BinaryOp::kShr: return 1;
        default: return 0;
      }
    default: return 0;
  }
}

// The costliest node of `e`.
int RecomputeCost(const ExprPtr& e) {
  int cost = NodeCost(e);
  for (const ExprPtr& a : e->args) cost = std::max(cost, RecomputeCost(a));
  return cost;
}

// Buffer reads, transcendentals and divisions: an array slot per row or column costs registers
// for the whole element loop, which only these repay (a few instructions each, a global load).
bool Costly(const ExprPtr& e) { return RecomputeCost(e) > 0; }

// nvcc contracts a float `a * b` that a sum consumes into one fma, rounded once; computed apart
// the product would be rounded twice, so it stays in the element loop (its operands may move).
bool FeedsFma(const ExprPtr& e, const ExprPtr& parent, const EmitScope& types) {
  if (parent == nullptr || parent->kind != cuir::ExprKind::kBinary ||
      (parent->binary_op != cuir::BinaryOp::kAdd && parent->binary_op != cuir::BinaryOp::kSub)) {
    return false;
  }
  const ExprPtr& product =
      e->kind == cuir::ExprKind::kUnary && e->unary_op == cuir::UnaryOp::kNeg ? e->args[0] : e;
  if (product->kind != cuir::ExprKind::kBinary || product->binary_op != cuir::BinaryOp::kMul) {
    return false;
  }
  auto typed = EmitExpr(product, types);
  return typed.ok() && typed->type == CType::kFloat;
}

// Where `e` (whose parent is `parent`, null at the root) is evaluated once, if it moves out of
// the element loop: a block invariant whenever it is an operation, a row or column invariant
// when it is costly.
std::optional<Level> HoistLevel(const ExprPtr& e, const ExprPtr& parent, const EmitScope& types) {
  const Level level = LevelOf(e);
  if (level == Level::kElement || IsLeaf(e)) return std::nullopt;
  if (level != Level::kBlock && !Costly(e)) return std::nullopt;
  if (FeedsFma(e, parent, types)) return std::nullopt;
  return level;
}

size_t ExprSize(const ExprPtr& e) {
  size_t n = 1;
  for (const ExprPtr& a : e->args) n += ExprSize(a);
  return n;
}

// `e` with every subexpression equal to another hoisted value of `level` (other than
// hoisted[self]) replaced by that value's variable.
ExprPtr ReuseHoisted(const ExprPtr& e, Level level, const std::vector<Hoisted>& hoisted,
                     size_t self) {
  for (size_t i = 0; i < hoisted.size(); ++i) {
    if (i != self && hoisted[i].level == level && cuir::Equal(hoisted[i].expr, e)) {
      return cuir::Var(hoisted[i].name, e->loc);
    }
  }
  if (e->args.empty()) return e;
  auto copy = std::make_shared<cuir::Expr>(*e);
  for (ExprPtr& arg : copy->args) arg = ReuseHoisted(arg, level, hoisted, self);
  return ExprPtr(copy);
}

// Equal values are hoisted once already; here a value that contains a smaller one of its level
// reads that one instead (share-question's doc[q_idx] != 0 reads doc_q, which
// doc[q_idx] == doc[kv_idx] reads too), so a buffer is read once per row or column. A row or
// column value that is then cheap (doc_q[mt][r] != 0) goes back into the element expression
// `expr`: its array would hold registers through the element loop to save one operation per
// element, and at hdim 128 the kernel has none to spare (it spilled). Sorts by size, so that a
// value comes after the values it reads.
void ShareHoisted(std::vector<Hoisted>* hoisted, ExprPtr* expr) {
  std::stable_sort(hoisted->begin(), hoisted->end(), [](const Hoisted& a, const Hoisted& b) {
    return ExprSize(a.expr) < ExprSize(b.expr);
  });
  const std::vector<Hoisted> original = *hoisted;
  std::vector<std::pair<std::string, ExprPtr>> inlined;
  std::vector<Hoisted> kept;
  for (size_t i = 0; i < original.size(); ++i) {
    Hoisted h = original[i];
    h.expr = cuir::Substitute(ReuseHoisted(h.expr, h.level, original, i), inlined);
    if (h.level != Level::kBlock && !Costly(h.expr)) {
      inlined.emplace_back(h.name, h.expr);
    } else {
      kept.push_back(std::move(h));
    }
  }
  *expr = cuir::Substitute(*expr, inlined);
  *hoisted = std::move(kept);
}

// Column values live in [NT][2] register arrays through the element loop (32 registers each at
// BLOCK_N 128, 44 at 176) beside the expert's accumulators. A transcendental one always stays (per
// element again it costs tens of instructions: a hyperbolic distance's sinh ran at half speed
// recomputed); of the cheaper ones (integer arithmetic, buffer reads) only as many as leave
// kMaxColumnArrays in all, costliest first, since three arrays made a Hopper kernel spill (a
// haversine's: 392 B of spill stores at hdim 128). The others go back into the element expression
// and whatever reads them, computed per element as FlexAttention computes everything.
constexpr int kMaxColumnArrays = 1;

// The bytes of small tables an expert stages in shared memory per work tile (StageTheTables): a
// T5 table row is 128 bytes, Shaw's 65 floats 260; 4 KB keeps a Hopper consumer group's copy
// beside the K/V stages at every head dim, and larger tables stay in L1/L2.
constexpr int64_t kMaxStagedBytes = 4096;

void FitColumnBudget(std::vector<Hoisted>* hoisted, ExprPtr* expr) {
  std::vector<size_t> cheap;
  int transcendental = 0;
  for (size_t i = 0; i < hoisted->size(); ++i) {
    if ((*hoisted)[i].level != Level::kColumn) continue;
    if (RecomputeCost((*hoisted)[i].expr) >= 3) {
      ++transcendental;
    } else {
      cheap.push_back(i);
    }
  }
  const int room = std::max(0, kMaxColumnArrays - transcendental);
  if (static_cast<int>(cheap.size()) <= room) return;
  std::stable_sort(cheap.begin(), cheap.end(), [&](size_t a, size_t b) {
    const int ca = RecomputeCost((*hoisted)[a].expr), cb = RecomputeCost((*hoisted)[b].expr);
    return ca != cb ? ca > cb : ExprSize((*hoisted)[a].expr) > ExprSize((*hoisted)[b].expr);
  });
  std::set<size_t> back(cheap.begin() + room, cheap.end());
  // Values come smallest first (ShareHoisted) and read only smaller ones: one pass substitutes.
  std::vector<std::pair<std::string, ExprPtr>> inlined;
  std::vector<Hoisted> kept;
  for (size_t i = 0; i < hoisted->size(); ++i) {
    Hoisted h = (*hoisted)[i];
    h.expr = cuir::Substitute(h.expr, inlined);
    if (back.count(i)) {
      inlined.emplace_back(h.name, h.expr);
    } else {
      kept.push_back(std::move(h));
    }
  }
  *expr = cuir::Substitute(*expr, inlined);
  *hoisted = std::move(kept);
}

class RegionWriter {
 public:
  RegionWriter(const LoweringPlan& plan, const cuir::Program& base, const Expert& expert)
      : plan_(plan),
        base_(base),
        namer_(expert.code_identifiers),
        params_type_(absl::StrCat("cubridge_", base.kernel, "_params")),
        lse_rows_(expert.source.Find("epilogue_rows") != nullptr),
        raw_scores_(expert.code_identifiers.count("for_each_raw_score") > 0),
        kv_split_scores_(expert.code_identifiers.count("for_each_raw_score_kv_split") > 0),
        kv_walk_region_(expert.source.Find("kv_walk") != nullptr),
        stream_regions_(expert.source.Find("tile_stream") != nullptr &&
                        expert.source.Find("stream_coords") != nullptr),
        stage_regions_(expert.source.Find("staged_tables") != nullptr &&
                       expert.source.Find("stage_tables") != nullptr) {}

  absl::StatusOr<std::map<std::string, std::string>> Run() {
    CUBRIDGE_RETURN_IF_ERROR(Params());
    CUBRIDGE_RETURN_IF_ERROR(Consts());
    CUBRIDGE_RETURN_IF_ERROR(Buffers());
    CUBRIDGE_RETURN_IF_ERROR(Tables());
    CUBRIDGE_RETURN_IF_ERROR(TopLets());
    CUBRIDGE_RETURN_IF_ERROR(TileStreamRegions());
    CUBRIDGE_RETURN_IF_ERROR(StagedTableRegions());
    CUBRIDGE_RETURN_IF_ERROR(LoopHeader());
    CUBRIDGE_RETURN_IF_ERROR(LoopBody());
    CUBRIDGE_RETURN_IF_ERROR(EpilogueSink());
    CUBRIDGE_RETURN_IF_ERROR(BufferCheck());
    CUBRIDGE_RETURN_IF_ERROR(KernelBindings());
    return out_;
  }

 private:
  // ---- symbols ------------------------------------------------------------------------------

  std::string Fresh(const std::string& want) {
    std::string name = namer_.Fresh(want);
    assigned_.insert(name);
    return name;
  }
  void Bind(EmitScope* scope, const std::string& cuir_name, const std::string& cpp, CType t) {
    scope->Bind(cuir_name, cpp, t);
    assigned_.insert(cpp);
  }
  // Builtins read as `<prefix>name` (a params struct) or as the expert's locals (prefix "").
  static void BindBuiltins(EmitScope* scope, const std::string& prefix) {
    for (const auto& [name, type] : cuir::BuiltinSymbols()) {
      scope->Bind(name, prefix + name, BaseCType(type));
    }
  }
  void BindBuffers(EmitScope* scope) const {
    for (const BufferInfo& b : buffers_) scope->BindBuffer(b.decl->name, b.binding);
  }
  bool InBase(StmtKind kind, const std::string& name) const {
    return cuir::FindDecl(base_, kind, name) != nullptr;
  }

  // `const T cpp = value;` for a let-like declaration, binding it in `scope`.
  absl::StatusOr<std::string> Declare(const Stmt& s, const std::string& cpp, EmitScope* scope,
                                      absl::string_view qualifier = "const") {
    CUBRIDGE_ASSIGN_OR_RETURN(auto value, EmitExpr(s.value, *scope));
    const CType t = DeclaredCType(s.type, value.type);
    if ((t == CType::kBool) != (value.type == CType::kBool)) {
      return InvalidAt(s, absl::StrCat("`", s.name, "` is declared ", cuir::TypeName(s.type),
                                       " but its value is ", CTypeName(value.type)));
    }
    Bind(scope, s.name, cpp, t);
    return absl::StrCat(Origin(s), qualifier, " ", CTypeName(t), " ", cpp, " = ",
                        Convert(value, t), ";\n");
  }

  // ---- declarations ---------------------------------------------------------------------------

  absl::Status Params() {
    std::string text;
    for (const Stmt* s : plan_.params) {
      const std::string cpp = InBase(StmtKind::kParam, s->name) ? s->name : Fresh(s->name);
      CUBRIDGE_ASSIGN_OR_RETURN(auto line, Declare(*s, cpp, &ns_, "constexpr"));
      text += line;
    }
    if (plan_.params_changed) out_["tile_params"] = text;
    return absl::OkStatus();
  }

  // Adds `name`'s range `b` to `env` where both sides are known: later expressions that read it
  // get exact integer forms (`% area` by a const area).
  static void AddRange(cuir::BoundsEnv* env, const std::string& name, const cuir::IntBounds& b) {
    if (b.lo && b.hi) {
      (*env)[name] = cuir::SymbolRange{cuir::IntLit(*b.lo), cuir::IntLit(*b.hi), b.lo, b.hi};
    }
  }

  absl::Status Consts() {
    std::string text;
    for (const Stmt* s : plan_.consts) {
      // Unused where every read was folded into a literal (the interval analysis knows its value).
      CUBRIDGE_ASSIGN_OR_RETURN(auto line,
                             Declare(*s, Fresh(s->name), &ns_, "[[maybe_unused]] constexpr"));
      text += line;
      if (s->value != nullptr) {
        AddRange(&element_bounds_, s->name, cuir::BoundsOf(s->value, element_bounds_));
      }
    }
    if (!plan_.consts.empty()) out_["variant_consts"] = text;
    kernel_ = ns_;
    BindBuiltins(&kernel_, "");
    return absl::OkStatus();
  }

  absl::Status Buffers() {
    for (const Stmt* s : plan_.buffers) {
      if (static_cast<int>(buffers_.size()) == kMaxBuffers) {
        return absl::UnimplementedError(absl::StrCat(
            s->loc.ToString(), ": the lowering does not know more than ", kMaxBuffers,
            " buffers (`", StmtHeader(*s), "`): the launcher ABI has ", kMaxBuffers, " slots"));
      }
      BufferBinding binding;
      binding.data = Fresh(s->name);
      binding.dtype = s->dtype;
      for (size_t d = 0; d < s->exprs.size(); ++d) {
        binding.sizes.push_back(Fresh(absl::StrCat(s->name, "_size", d)));
        if (d + 1 < s->exprs.size()) binding.strides.push_back(Fresh(absl::StrCat(s->name, "_stride", d)));
      }
      buffers_.push_back({s, binding.data, static_cast<int>(buffers_.size()), binding});
    }
    BindBuffers(&kernel_);
    return absl::OkStatus();
  }

  // ---- block tables ---------------------------------------------------------------------------

  absl::Status Tables() {
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
  absl::StatusOr<std::string> RowsFunction(const TableInfo& t) {
    EmitScope scope = ns_;
    BindBuiltins(&scope, "p.");
    std::string product = "static_cast<long long>(cuir_cdiv(p.seqlen_q, BLOCK_M))";
    for (const ExprPtr& extent : t.extents) {
      CUBRIDGE_ASSIGN_OR_RETURN(auto e, EmitExpr(extent, scope));
      absl::StrAppend(&product, " * ", Convert(e, CType::kLong));
    }
    return absl::StrCat("__host__ __device__ __forceinline__ long long ", t.rows_fn, "(const ",
                        params_type_, "& p) {\n  return ", product, ";\n}\n");
  }

  // A CTA classifies one tile (axes..., m_block, n_block): evaluates the predicate on every
  // element of the tile inside the sequence bounds and stores 0 (empty), 1 (partial) or 2 (full)
  // into the table's entry array, which cuir_compact_row then turns into the row's block list.
  // Each thread walks whole key columns, rows innermost: what the predicate reads per key (a
  // document id) is loop-invariant there and hoisted by the compiler, what it reads per query
  // is the same address across the warp (one broadcast load), and a thread stops once its
  // columns have shown a kept and a dropped element, because the tile is then partial whatever
  // the others find. (Element order with two loads per element took 105 us of an 8k causal
  // document call's 1.07 ms on an H100.)
  absl::StatusOr<std::string> ClassifyKernel(const TableInfo& t) {
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
    // A thread goes on while its columns have not shown both a kept and a dropped element.
    const std::string undecided = absl::StrCat("(", all, " || !", any, ")");
    if (pred.type != CType::kBool) {
      return InvalidAt(*t.decl, absl::StrCat("table `", t.decl->name, "`: blocks(...) needs a bool"));
    }
    return absl::StrCat(
        "__device__ __forceinline__ void ", t.classify, "(const ", params_type_, "& ", p,
        ", int* __restrict__ ", table, ", const long long ", tile, ") {\n",
        "  const int ", num_m, " = cuir_cdiv(", p, ".seqlen_q, BLOCK_M);\n",
        "  const int ", num_n, " = cuir_cdiv(", p, ".seqlen_kv, BLOCK_N);\n", decode,
        "  const int ", q_end, " = min(", m_block, " * BLOCK_M + BLOCK_M, ", p, ".seqlen_q);\n",
        "  const int ", kv_end, " = min(", n_block, " * BLOCK_N + BLOCK_N, ", p, ".seqlen_kv);\n",
        "  bool ", any, " = false;\n  bool ", all, " = true;\n",
        "  for (int ", col, " = threadIdx.x; ", col, " < BLOCK_N && ", undecided, "; ", col,
        " += blockDim.x) {\n",
        "    const int kv_idx = ", n_block, " * BLOCK_N + ", col, ";\n",
        "    if (kv_idx >= ", kv_end, ") break;\n",
        "    auto ", visit, " = [&](const int q_idx) {\n",
        "      const bool ", keep, " = ", pred.text, ";\n",
        "      ", any, " = ", any, " || ", keep, ";\n      ", all, " = ", all, " && ", keep, ";\n",
        "    };\n",
        // Eight rows at a time: their loads are independent, the stop test runs per eight, and
        // only a last short group tests the row bound per row.
        "    int ", q0, " = ", m_block, " * BLOCK_M;\n",
        "    for (; ", q0, " + 8 <= ", q_end, " && ", undecided, "; ", q0, " += 8) {\n",
        "#pragma unroll\n",
        "      for (int ", r, " = 0; ", r, " < 8; ++", r, ") ", visit, "(", q0, " + ", r, ");\n",
        "    }\n",
        "    for (; ", q0, " < ", q_end, " && ", undecided, "; ++", q0, ") ", visit, "(", q0,
        ");\n",
        "  }\n",
        "  ", any, " = __syncthreads_or(", any, ");\n  ", all, " = __syncthreads_and(", all, ");\n",
        "  if (threadIdx.x == 0) ", table, "[", t.rows_fn, "(", p, ") + ", row, " * ", num_n,
        " + ", n_block, "] = ", any, " ? (", all, " ? 2 : 1) : 0;\n",
        // The next tile's classification reuses the CTA: no thread may still read any/all.
        "  __syncthreads();\n}\n");
  }

  static std::string BufferSlot(const std::string& params, const BufferInfo& b) {
    return absl::StrCat(params, ".buffers[", b.slot, "]");
  }
  // `const int* doc = ...data;` and the sizes and strides of every buffer: generated code reads
  // buffers by these names (nvcc keeps only what an expression uses).
  std::string BufferLocals(const std::string& params, absl::string_view indent = "  ") const {
    std::string text;
    for (const BufferInfo& b : buffers_) {
      const std::string slot = BufferSlot(params, b);
      const char* type = StorageCType(b.binding.dtype);
      // [[maybe_unused]]: a table's classifier binds every buffer and reads only its mask's.
      absl::StrAppend(&text, indent, "[[maybe_unused]] const ", type, "* __restrict__ const ",
                      b.cpp, " = static_cast<const ", type, "*>(", slot, ".data);  // buffer ",
                      b.decl->name, "\n");
      for (size_t d = 0; d < b.binding.sizes.size(); ++d) {
        absl::StrAppend(&text, indent, "[[maybe_unused]] const long long ", b.binding.sizes[d],
                        " = ", slot, ".sizes[", d, "];\n");
        if (d < b.binding.strides.size()) {
          absl::StrAppend(&text, indent, "[[maybe_unused]] const long long ", b.binding.strides[d],
                          " = ", slot, ".strides[", d, "];\n");
        }
      }
    }
    return text;
  }

  // Tables are laid out one after the other, 256-byte aligned: counts[rows], entries[rows][num_n].
  // The table kernels of the expert visit tiles and rows of all tables as one range each; these
  // functions map a position in that range to its table.
  std::string WorkspaceFunctions() const {
    const std::string P = absl::StrCat("const ", params_type_, "& p");
    const std::string num_n = "cuir_cdiv<long long>(p.seqlen_kv, BLOCK_N)";
    std::string layout, tiles, rows, classify, compact;
    for (const TableInfo& t : tables_) {
      const std::string at = absl::StrCat("reinterpret_cast<int*>(workspace + offsets[", t.slot, "])");
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
    const std::string hd = "__host__ __device__ __forceinline__ ";
    const std::string locate = absl::StrCat("  size_t offsets[", tables_.size(), "];\n  variant_workspace(p, offsets);\n  const long long num_n = ", num_n, ";\n");
    return absl::StrCat(
        "// Block tables, each counts[rows] then entries[rows][num_n], 256-byte aligned; their rows\n"
        "// are BLOCK_M-row blocks, which an expert's tile choices must keep.\n",
        hd, "constexpr bool variant_has_tables() { return true; }\n", hd,
        "size_t variant_workspace(", P, ", size_t* offsets) {\n  size_t bytes = 0;\n", layout,
        "  return bytes;\n}\n", hd, "long long variant_table_tiles(", P, ") {\n  return 0", tiles,
        ";\n}\n", hd, "long long variant_table_rows(", P, ") {\n  return 0", rows, ";\n}\n",
        "__device__ __forceinline__ void variant_classify_tile(", P,
        ", char* workspace, long long tile) {\n", locate, classify, "}\n",
        "__device__ __forceinline__ void variant_compact_row(", P,
        ", char* workspace, long long row) {\n", locate, compact, "}\n");
  }

  // ---- kernel body ----------------------------------------------------------------------------

  // Base lets first (the expert declares q_lo / q_hi before its head_map region), then the head
  // map, then the lets the transfer added (program_lets).
  absl::Status TopLets() {
    for (const std::string& axis : plan_.grid->names) kernel_.Bind(axis, axis, CType::kInt);
    for (const Stmt& s : base_.stmts) {
      if (s.kind == StmtKind::kLet && s.name != kHeadMapLet) {
        kernel_.Bind(s.name, s.name, BaseCType(s.type));
      }
    }
    if (plan_.head_map != nullptr && plan_.head_map_changed) {
      CUBRIDGE_ASSIGN_OR_RETURN(auto line, Declare(*plan_.head_map, kHeadMapLet, &kernel_));
      out_["head_map"] = line;
      CUBRIDGE_RETURN_IF_ERROR(HeadCheck(*plan_.head_map));
    } else {
      kernel_.Bind(kHeadMapLet, kHeadMapLet, CType::kInt);
    }
    std::string lets;
    for (const Stmt* s : plan_.program_lets) {
      CUBRIDGE_ASSIGN_OR_RETURN(auto line, Declare(*s, Fresh(s->name), &kernel_));
      lets += line;
    }
    if (!plan_.program_lets.empty()) out_["program_lets"] = lets;
    return absl::OkStatus();
  }

  // StreamTheTile (tile_stream.h): the tensor read per score at [..., q_idx, kv_idx], where the
  // expert streams tiles and the work tile knows the leading indices; the expert learns its slot,
  // rank and element type (`tile_stream`) and this work tile's leading indices (`stream_coords`),
  // and the element scope reads it through the expert's view. Otherwise nothing changes.
  absl::Status TileStreamRegions() {
    if (!stream_regions_) return absl::OkStatus();
    // The narrowest elements first: the expert streams one tensor, and a wide one's tile may
    // not fit its shared memory.
    const BufferInfo* info = nullptr;
    std::optional<TileStream> found;
    for (TileStream& t : FindTileStreams(ElementStmts(), ElementSymbols())) {
      for (const BufferInfo& b : buffers_) {
        if (b.decl->name != t.buffer) continue;
        if (info == nullptr || cuir::TensorDTypeBytes(b.binding.dtype) < cuir::TensorDTypeBytes(info->binding.dtype)) {
          info = &b;
          found = std::move(t);
        }
        break;
      }
    }
    if (info == nullptr) return absl::OkStatus();
    const size_t rank = info->binding.sizes.size();
    std::string coords[2] = {"0", "0"};  // dimensions rank - 3 and rank - 4
    for (size_t d = 0; d + 2 < rank; ++d) {
      auto text = WorkTileIndex(found->leading[d], info->binding.sizes[d]);
      // An index the work tile does not know (a block value): the reads stay per score.
      if (!text) return absl::OkStatus();
      coords[rank - 3 - d] = absl::StrCat("static_cast<int>(", *text, ")");
    }
    stream_ = std::move(found);
    out_["tile_stream"] = absl::StrCat(
        Origin(*info->decl), "// read per score at [..., q_idx, kv_idx]: streamed tile by tile\n",
        "constexpr int kStreamBuffer = ", info->slot, ";\nconstexpr int kStreamRank = ", rank,
        ";\nusing StreamElem = ", StorageCType(info->binding.dtype), ";\n");
    out_["stream_coords"] = absl::StrCat("const int stream_c2 = ", coords[0],
                                         ", stream_c3 = ", coords[1], ";\n");
    BufferBinding view;
    view.data = "stream_tile";
    view.dtype = info->binding.dtype;
    view.sizes = {"", ""};
    view.strides = {""};
    view.tile_view = true;
    kernel_.BindBuffer(TileStreamName(*stream_), view);
    return absl::OkStatus();
  }

  // The statements whose expressions run per score element (score_mods, then masks), and the
  // symbols that move with the element there.
  std::vector<const Stmt*> ElementStmts() const {
    std::vector<const Stmt*> stmts(plan_.score_mods.begin(), plan_.score_mods.end());
    stmts.insert(stmts.end(), plan_.masks.begin(), plan_.masks.end());
    return stmts;
  }
  static std::vector<std::string> ElementSymbols() {
    return {"q_idx", "kv_idx", "score", kQFloat, kKvFloat};
  }

  // A leading index of a streamed or staged tensor as the work tile computes it, wrapped Python
  // style as EmitIndex wraps (a negative literal from the size, a value not provably non-negative
  // through cuir_wrap); nullopt where the work tile does not know it.
  std::optional<std::string> WorkTileIndex(const ExprPtr& arg, const std::string& size) const {
    auto index = EmitExpr(arg, kernel_);
    if (!index.ok() || !IsInt(index->type)) return std::nullopt;
    if (arg->kind == cuir::ExprKind::kIntLit && arg->int_value < 0) {
      return absl::StrCat("(", size, " - ", -arg->int_value, ")");
    }
    if (cuir::ProvablyNonNegative(arg, element_bounds_)) return Convert(*index, CType::kLong);
    return absl::StrCat("cuir_wrap(", Convert(*index, CType::kLong), ", ", size, ")");
  }

  // StageTheTables (staged_tables.h): small tables looked up per score, copied by the expert into
  // shared memory once per work tile. The expert learns the bytes (`staged_tables`) and gets the
  // copy as `stage_tables(dst, i0, n)` (threads i0, i0 + n, ... of a group that syncs around it);
  // the element scope reads each table from `staged_area` at its offset.
  absl::Status StagedTableRegions() {
    if (!stage_regions_) return absl::OkStatus();
    std::vector<const Stmt*> decls;
    for (const BufferInfo& b : buffers_) decls.push_back(b.decl);
    std::vector<StagedTable> found =
        FindStagedTables(ElementStmts(), decls, ElementSymbols(), stream_ ? stream_->buffer : "",
                         kMaxStagedBytes);
    std::string copies;
    int64_t bytes = 0;
    for (StagedTable& t : found) {
      const BufferInfo* info = nullptr;
      for (const BufferInfo& b : buffers_) {
        if (b.decl == t.decl) info = &b;
      }
      const size_t k = t.leading.size();
      std::string base;  // the slice's first element, in elements from the data pointer
      bool known = info != nullptr;
      for (size_t d = 0; known && d < k; ++d) {
        auto index = WorkTileIndex(t.leading[d], info->binding.sizes[d]);
        known = index.has_value();
        if (known) absl::StrAppend(&base, " + ", *index, " * ", info->binding.strides[d]);
      }
      if (!known) continue;  // stays a global read (its bytes stay reserved, unused)
      const char* type = StorageCType(info->binding.dtype);
      std::string at = absl::StrCat("0", base);
      int64_t elements = 1;
      for (int64_t e : t.extents) elements *= e;
      // i's index in each staged dimension, innermost last (row-major), times its stride.
      int64_t inner = elements;
      for (size_t d = k; d < info->binding.sizes.size(); ++d) {
        inner /= t.extents[d - k];
        const std::string j = absl::StrCat("(i / ", inner, " % ", t.extents[d - k], ")");
        absl::StrAppend(&at, " + ", j,
                        d + 1 < info->binding.sizes.size() ? " * " + info->binding.strides[d] : "");
      }
      absl::StrAppend(&copies, Origin(*t.decl), "for (int i = i0; i < ", elements, "; i += n) {\n",
                      "  reinterpret_cast<", type, "*>(dst + ", t.offset, ")[i] = ", info->cpp, "[",
                      at, "];\n}\n");
      BufferBinding view;
      view.data = absl::StrCat("reinterpret_cast<const ", type, "*>(staged_area + ", t.offset, ")");
      view.dtype = info->binding.dtype;
      view.shared = true;
      int64_t stride = elements;
      for (size_t d = 0; d < t.extents.size(); ++d) {
        stride /= t.extents[d];
        view.sizes.push_back(absl::StrCat(t.extents[d]));
        if (d + 1 < t.extents.size()) view.strides.push_back(absl::StrCat(stride));
      }
      kernel_.BindBuffer(StagedName(t, staged_.size()), view);
      bytes = t.offset + (t.bytes + 15) / 16 * 16;
      staged_.push_back(std::move(t));
    }
    if (staged_.empty()) return absl::OkStatus();
    out_["staged_tables"] = absl::StrCat(
        "// looked up per score: copied into shared memory once per work tile\n",
        "constexpr int kStagedBytes = ", bytes, ";\n");
    std::string indented;
    for (absl::string_view line : absl::StrSplit(copies, '\n', absl::SkipEmpty())) {
      absl::StrAppend(&indented, "  ", line, "\n");
    }
    out_["stage_tables"] = absl::StrCat(
        "auto stage_tables = [&](uint8_t* __restrict__ dst, const int i0, const int n) {\n", indented,
        "};\n");
    return absl::OkStatus();
  }

  absl::Status LoopHeader() {
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
    // The expert's kv_loop iterates `kv_blocks`, a KvUnion<N> of half-open block intervals.
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
    out_["kv_range"] = absl::StrCat(Origin(loop), "const KvUnion<", loop.ranges.size(),
                                    "> kv_blocks = {{", absl::StrJoin(los, ", "), "}, {",
                                    absl::StrJoin(his, ", "), "}};\n");
    return absl::OkStatus();
  }

  // for VAR, FULL in table T[axes..., m_block]: the row's count, then its entries
  // (n_block << 1 | full), ascending. Like the range form it also binds `n_next`, the block
  // after this one, which the expert prefetches.
  absl::Status TableLoop(const Stmt& loop) {
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
      std::string extent = "cuir_cdiv(seqlen_q, BLOCK_M)";
      if (i < t->axes.size()) {
        CUBRIDGE_ASSIGN_OR_RETURN(auto e, EmitExpr(t->extents[i], kernel_));
        extent = e.text;
      }
      row = absl::StrCat("(", row, " * ", extent, " + ", index.text, ")");
    }
    const std::string row_var = Fresh(t->cpp + "_row"), entries = Fresh(t->cpp + "_entries"),
                      count = Fresh(t->cpp + "_count"), i = Fresh(t->cpp + "_i"),
                      entry = Fresh(t->cpp + "_entry"), full = Fresh(loop.full_var);
    loop_.Bind(loop.full_var, full, CType::kBool);
    out_["kv_range"] = absl::StrCat("// table form: the blocks come from table ", loop.table,
                                    " (kv_loop)\n");
    out_["kv_loop"] = absl::StrCat(
        "// table_loop\n", Origin(loop), "const long long ", row_var, " = ", row, ";\n", "const int* const ",
        entries, " = ", t->cpp, " + ", t->rows_fn, "(p) + ", row_var,
        " * cuir_cdiv(seqlen_kv, BLOCK_N);\n", "const int ", count, " = __ldg(", t->cpp, " + ",
        row_var, ");\n", "for (int ", i, " = 0; ", i, " < ", count, "; ++", i, ") {\n",
        "  const int ", entry, " = __ldg(", entries, " + ", i, ");\n", "  const int ", loop.name,
        " = ", entry, " >> 1;\n", "  const bool ", full, " = (", entry, " & 1) != 0;\n",
        // The expert's pipelined mainloop prefetches the next visited block (INT_MAX: none).
        "  const int n_next = ", i, " + 1 < ", count, " ? __ldg(", entries, " + ", i,
        " + 1) >> 1 : INT_MAX;\n");
    return absl::OkStatus();
  }

  absl::Status LoopBody() {
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
    return absl::OkStatus();
  }

  // The expert's element visitors: for_each_score passes (q_idx, kv_idx, score&);
  // for_each_score_at also the element's row slot (mt, r) and column slot (j, k), which index the
  // arrays of hoisted row and column values; their `raw` forms (for_each_raw_score...) pass the
  // score before the scale (TermsBesideTheScore), and for_each_raw_score_kv_split also counts
  // kv_f from the lane's first key of the tile (KvTermFromTileStart).
  static std::string ForEachScore(const ExprPtr& e, const std::vector<Hoisted>& hoisted,
                                  absl::string_view body, bool raw = false,
                                  bool kv_split = false) {
    auto param = [](bool used, absl::string_view decl, absl::string_view name) {
      return used ? absl::StrCat(decl, name) : absl::StrCat(decl, "/*", name, "*/");
    };
    const bool rows = std::any_of(hoisted.begin(), hoisted.end(),
                                  [](const Hoisted& h) { return h.level == Level::kRow; });
    const bool cols = std::any_of(hoisted.begin(), hoisted.end(),
                                  [](const Hoisted& h) { return h.level == Level::kColumn; });
    const bool floats = cuir::Mentions(e, kQFloat) || cuir::Mentions(e, kKvFloat);
    std::string slots;
    if (rows || cols) {
      slots = absl::StrCat(param(rows, "const int ", "mt"), ", ", param(rows, "const int ", "r"),
                           ", ", param(cols, "const int ", "j"), ", ",
                           param(cols, "const int ", "k"), ", ");
    }
    return absl::StrCat(raw ? "for_each_raw_score" : "for_each_score", rows || cols ? "_at" : "",
                        kv_split ? "_kv_split" : "",
                        "([&](", slots,
                        param(cuir::Mentions(e, "q_idx"), "const int ", "q_idx"), ", ",
                        param(cuir::Mentions(e, "kv_idx"), "const int ", "kv_idx"),
                        floats ? absl::StrCat(", ", param(cuir::Mentions(e, kQFloat), "const float ", "q_f"),
                                              ", ", param(cuir::Mentions(e, kKvFloat), "const float ", "kv_f"))
                               : "",
                        ", float& score) {\n  ", body, "\n});\n");
  }

  EmitScope ElementScope(bool with_score) const {
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

  // Moves what does not change from element to element out of the element loop: each maximal
  // subexpression that is the same for the whole block (ALiBi's per-head slope
  // exp2(-8 * (h + 1) / H)), or for a whole query row (doc[q_idx]) or key column (doc[kv_idx])
  // and worth it (HoistLevel), becomes a variable, collected in `hoisted` (equal ones once).
  // `element` types the subexpressions. Returns the rewritten expression.
  absl::StatusOr<ExprPtr> HoistInvariants(const ExprPtr& e, const ExprPtr& parent,
                                          const EmitScope& element, std::vector<Hoisted>* hoisted,
                                          bool block_only = false) {
    std::optional<Level> level = HoistLevel(e, parent, element);
    if (block_only && level != Level::kBlock) level.reset();
    if (!level.has_value()) return HoistInArgs(e, element, hoisted, block_only);
    ExprPtr value = e;
    if (*level != Level::kBlock) {
      // Its block-invariant parts (prefix[b] in kv_idx < prefix[b]) still run once per block.
      CUBRIDGE_ASSIGN_OR_RETURN(auto inner, HoistInArgs(e, element, hoisted, /*block_only=*/true));
      value = inner;
    }
    for (const Hoisted& h : *hoisted) {
      if (h.level == *level && cuir::Equal(h.expr, value)) return cuir::Var(h.name, e->loc);
    }
    // Named once it is known to stay (ShareHoisted); "." keeps this apart from CuIR names.
    hoisted->push_back({*level, absl::StrCat("hoisted.", hoisted->size()), value});
    return cuir::Var(hoisted->back().name, e->loc);
  }
  absl::StatusOr<ExprPtr> HoistInArgs(const ExprPtr& e, const EmitScope& element,
                                      std::vector<Hoisted>* hoisted, bool block_only) {
    if (e->args.empty()) return e;
    auto copy = std::make_shared<cuir::Expr>(*e);
    for (ExprPtr& arg : copy->args) {
      CUBRIDGE_ASSIGN_OR_RETURN(auto rewritten, HoistInvariants(arg, e, element, hoisted, block_only));
      arg = rewritten;
    }
    return ExprPtr(copy);
  }

  void NameHoisted(std::vector<Hoisted>* hoisted, ExprPtr* expr) {
    std::vector<std::pair<std::string, ExprPtr>> names;
    for (Hoisted& h : *hoisted) {
      const std::string name = Fresh(HoistedName(h.expr, h.level));
      names.emplace_back(h.name, cuir::Var(name));
      h.name = name;
    }
    for (Hoisted& h : *hoisted) h.expr = cuir::Substitute(h.expr, names);
    *expr = cuir::Substitute(*expr, names);
  }

  // doc[q_idx] -> doc_q[mt][r], doc[kv_idx] -> doc_kv[j][k]; anything else is an invariant.
  std::string HoistedName(const ExprPtr& e, Level level) const {
    if (level == Level::kBlock) return "invariant";
    const char* suffix = level == Level::kRow ? "q" : "kv";
    if (e->kind == cuir::ExprKind::kIndex) {
      for (const BufferInfo& b : buffers_) {
        if (b.decl->name == e->name) return absl::StrCat(b.cpp, "_", suffix);
      }
    }
    return absl::StrCat(suffix, "_invariant");
  }

  // The hoisted values, before the element loop: block values as consts; row values in
  // [MT][2] arrays filled by the expert's for_each_score_row, one slot per query row the thread
  // owns; column values in [NT][2] arrays by for_each_score_col. Binds each name in `element`
  // to what the element reads: the const, or its row / column slot.
  // With `outside_walk` (BlockValuesOutsideTheWalk), a block value that reads nothing of the KV
  // walk (no block index, bound or block let) goes there instead, to the program_lets region:
  // once per work tile rather than once per KV block.
  absl::StatusOr<std::string> DeclareHoisted(const std::vector<Hoisted>& hoisted,
                                             EmitScope* element,
                                             std::string* outside_walk = nullptr) {
    EmitScope top = kernel_, block = loop_, row = loop_, col = loop_;
    // Row and column slots past the tile's end read its last in-bounds index.
    cuir::BoundsEnv env = element_bounds_;  // grows by each hoisted int value's range
    for (EmitScope* scope : {&top, &block, &row, &col}) scope->SetBounds(env);
    row.Bind("q_idx", "q_idx", CType::kInt);
    col.Bind("kv_idx", "kv_idx", CType::kInt);
    row.Bind(kQFloat, "static_cast<float>(q_idx)", CType::kFloat);
    col.Bind(kKvFloat, "static_cast<float>(kv_idx)", CType::kFloat);
    std::string consts, row_arrays, row_values, col_arrays, col_values;
    for (const Hoisted& h : hoisted) {
      switch (h.level) {
        case Level::kBlock: {
          // An int value the interval analysis pins to one number (`window * window`) is that
          // literal: declared, it would go unread wherever the emitter folded it already.
          // (A bool can be one number to the analysis too: `select(true, true, x)` is 1.)
          const cuir::IntBounds v = cuir::BoundsOf(h.expr, env);
          if (v.lo && v.hi && *v.lo == *v.hi && cuir::WithinInt32(v)) {
            const auto typed = EmitExpr(h.expr, block);
            if (typed.ok() && IsInt(typed->type)) {
              const std::string literal =
                  *v.lo < 0 ? absl::StrCat("(", *v.lo, ")") : absl::StrCat(*v.lo);
              AddRange(&env, h.name, v);
              for (EmitScope* scope : {&top, &block, &row, &col, element}) {
                scope->Bind(h.name, literal, CType::kInt);
                scope->SetBounds(env);
              }
              break;
            }
          }
          // Values come smallest first (ShareHoisted), so one that reads another moved value
          // finds it bound in `top`; a KV-walk name fails to emit there and the value stays.
          const bool to_top = outside_walk != nullptr && EmitExpr(h.expr, top).ok();
          CUBRIDGE_ASSIGN_OR_RETURN(auto value, EmitExpr(h.expr, to_top ? top : block));
          absl::StrAppend(to_top ? outside_walk : &consts, "const ", CTypeName(value.type), " ",
                          h.name, " = ", value.text, ";\n");
          // A positive int may divide elements (a per-head dilation): its multiplier once here
          // (cuir_divisor_of), and the emitter's `//` / `%` by it multiply (unused: dropped).
          const bool divisor = value.type == CType::kInt && v.lo && *v.lo >= 1 && v.hi &&
                               *v.hi <= INT32_MAX && *v.lo != *v.hi;
          if (divisor) {
            absl::StrAppend(to_top ? outside_walk : &consts,
                            "[[maybe_unused]] const cuir_divisor ", DivisorName(h.name),
                            " = cuir_divisor_of(", h.name, ");\n");
          }
          if (to_top) top.Bind(h.name, h.name, value.type);
          AddRange(&env, h.name, v);
          for (EmitScope* scope : {&top, &block, &row, &col, element}) {
            if (scope != &top || to_top) {
              scope->Bind(h.name, h.name, value.type);
              if (divisor) scope->Bind(DivisorKey(h.name), DivisorName(h.name), CType::kInt);
            }
            scope->SetBounds(env);
          }
          break;
        }
        case Level::kRow:
        case Level::kColumn: {
          // One register array per owned fragment row (MT x 2) or column (NT x 2).
          const bool is_row = h.level == Level::kRow;
          EmitScope& scope = is_row ? row : col;
          const std::string slot = h.name + (is_row ? "[mt][r]" : "[j][k]");
          CUBRIDGE_ASSIGN_OR_RETURN(auto value, EmitExpr(h.expr, scope));
          // A 64-bit value that provably fits int is kept as int: half the registers per slot.
          const cuir::IntBounds range = cuir::BoundsOf(h.expr, env);
          if (value.type == CType::kLong && cuir::WithinInt32(range)) {
            value = CExpr{Convert(value, CType::kInt), CType::kInt};
          }
          AddRange(&env, h.name, range);
          for (EmitScope* s : {&row, &col, element}) s->SetBounds(env);
          absl::StrAppend(is_row ? &row_arrays : &col_arrays, CTypeName(value.type), " ", h.name,
                          is_row ? "[MT][2];\n" : "[NT][2];\n");
          absl::StrAppend(is_row ? &row_values : &col_values, "  ", slot, " = ", value.text, ";\n");
          scope.Bind(h.name, slot, value.type);
          element->Bind(h.name, slot, value.type);
          break;
        }
        case Level::kElement: break;
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

  // An element expression (a score_mod's value or a mask's predicate) as the element loop runs
  // it: the named rewrites, then its invariants hoisted and declared before the loop.
  struct ElementCode {
    std::string decls;            // the hoisted values, before the loop
    std::string outside_walk;     // those before the KV walk (BlockValuesOutsideTheWalk)
    ExprPtr expr;                 // what each element evaluates
    std::vector<Hoisted> hoisted;
    CExpr value;                  // `expr` emitted
    ExprPtr row_terms;            // moved to the LSE (SplitRowTerms), or null
    bool raw_score = false;       // `value` takes the raw score and the scale (TermsBesideTheScore)
    bool kv_split = false;        // ... and kv_f from the lane's first key (KvTermFromTileStart)
  };
  // `rows_to_lse`: the value's row terms may move to the LSE (the last score_mod, no sink).
  // `fold_scale`: the value may take the raw score (the first score_mod, an expert with
  // for_each_raw_score); `kv_split`: its key terms may count from the tile's start (the only
  // score_mod, an expert with for_each_raw_score_kv_split). `outside_walk`: its block values
  // may move before the KV walk (a score_mod; a mask's run only on the blocks its `when` picks).
  absl::StatusOr<ElementCode> Element(const Stmt& s, bool with_score, bool rows_to_lse = false,
                                      bool fold_scale = false, bool kv_split = false,
                                      bool outside_walk = false) {
    EmitScope scope = ElementScope(with_score);
    ElementCode code;
    ExprPtr streamed = stream_ ? StreamTheTile(s.value, *stream_) : s.value;
    if (!staged_.empty()) streamed = StageTheTables(streamed, staged_);
    const ExprPtr residues = ReduceModulo(streamed, element_bounds_);
    CUBRIDGE_ASSIGN_OR_RETURN(auto rewritten, FloatIndices(ReciprocalOfInvariantDivisors(residues), scope));
    if (rows_to_lse) {
      if (std::optional<RowSplit> split = SplitRowTerms(rewritten, RowScope())) {
        rewritten = split->element;
        code.row_terms = split->row;
      }
    }
    CUBRIDGE_ASSIGN_OR_RETURN(auto hoisted_expr, HoistInvariants(rewritten, nullptr, scope, &code.hoisted));
    code.expr = hoisted_expr;
    ShareHoisted(&code.hoisted, &code.expr);
    FitColumnBudget(&code.hoisted, &code.expr);
    NameHoisted(&code.hoisted, &code.expr);
    CUBRIDGE_ASSIGN_OR_RETURN(auto decls, DeclareHoisted(code.hoisted, &scope,
                                                 outside_walk ? &code.outside_walk : nullptr));
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
  EmitScope RowScope() const {
    EmitScope scope = kernel_;
    scope.Bind("q_idx", "q_idx", CType::kInt);
    scope.Bind(kQFloat, "q_f", CType::kFloat);
    scope.SetBounds(element_bounds_);  // shift_lse_rows clamps q_idx into the tile
    return scope;
  }

  absl::StatusOr<std::string> ScoreMod(const Stmt& s, bool rows_to_lse, bool fold_scale,
                                       bool kv_split) {
    CUBRIDGE_ASSIGN_OR_RETURN(auto code, Element(s, /*with_score=*/true, rows_to_lse, fold_scale, kv_split,
                                         /*outside_walk=*/true));
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

  // The predicate runs only on blocks where `when` holds (the partial ones).
  absl::StatusOr<std::string> Mask(const Stmt& s) {
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

  // `epilogue sink EXPR`: the expert's online softmax takes the sink as one more logit per row
  // after the loop, in its log2 units (scores are multiplied by log2(e) before each step too).
  // EXPR reads only what the kernel knows before the loop (validated), so the kernel scope serves.
  absl::Status EpilogueSink() {
    if (plan_.sink == nullptr) return absl::OkStatus();
    CUBRIDGE_ASSIGN_OR_RETURN(auto sink, EmitExpr(plan_.sink->value, kernel_));
    if (sink.type == CType::kBool) return InvalidAt(*plan_.sink, "an epilogue sink must be a number");
    out_["epilogue_sink"] = absl::StrCat(Origin(*plan_.sink), "softmax.add_sink(", AsFloat(sink),
                                         " * kLog2e, acc, lane);\n");
    return absl::OkStatus();
  }

  // The launch plan refuses a head layout the kernel's mapping does not serve: the mapping is
  // monotone in h, so the first and the last query head bound every kv head it reads.
  absl::Status HeadCheck(const Stmt& head_map) {
    EmitScope scope = ns_.WithTarget(EmitTarget::kHost);
    BindBuiltins(&scope, "p.");
    std::string kv[2];
    for (int i = 0; i < 2; ++i) {
      EmitScope at = scope;
      at.Bind("h", i == 0 ? "0" : "(p.heads_q - 1)", CType::kInt);
      auto e = EmitExpr(head_map.value, at);
      if (!e.ok()) {
        return InvalidAt(head_map, absl::StrCat("the head mapping may depend on the query head `h` "
                                                "and the builtins only: ", e.status().message()));
      }
      kv[i] = Convert(*e, CType::kLong);
    }
    out_["head_check"] = absl::StrCat(
        Origin(head_map), "__host__ __device__ __forceinline__ bool variant_heads_ok(const ",
        params_type_, "& p) {\n  if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0) return false;\n",
        "  return 0 <= ", kv[0], " && ", kv[1], " < p.heads_kv;\n}\n");
    return absl::OkStatus();
  }

  // ---- buffers and tables outside the loop ---------------------------------------------------

  // A buffer must be given with the dtype and rank the kernel was lowered for, at least the sizes
  // its indexing reaches at this call's shape, and unit stride innermost; the launch plan, on
  // the host or the device, refuses the call otherwise.
  absl::Status BufferCheck() {
    if (buffers_.empty()) return absl::OkStatus();
    EmitScope scope = ns_.WithTarget(EmitTarget::kHost);
    BindBuiltins(&scope, "p.");
    std::string checks;
    for (const BufferInfo& b : buffers_) {
      const std::string slot = BufferSlot("p", b);
      const size_t rank = b.decl->exprs.size();
      absl::StrAppend(&checks, Origin(*b.decl), "  if (", slot, ".data == nullptr || ", slot,
                      ".dtype != ", static_cast<int>(b.decl->dtype), " || ", slot, ".rank != ",
                      rank, ") return false;\n");
      for (size_t d = 0; d < rank; ++d) {
        if (b.decl->exprs[d] == nullptr) continue;  // the reach depends on data
        CUBRIDGE_ASSIGN_OR_RETURN(auto extent, EmitExpr(b.decl->exprs[d], scope));
        absl::StrAppend(&checks, "  if (", slot, ".sizes[", d, "] < ",
                        Convert(extent, CType::kLong), ") return false;\n");
      }
      if (rank > 0) {  // reads assume a unit stride innermost
        absl::StrAppend(&checks, "  if (", slot, ".sizes[", rank - 1, "] > 1 && ", slot,
                        ".strides[", rank - 1, "] != 1) return false;\n");
      }
    }
    out_["buffer_check"] = absl::StrCat(
        "__host__ __device__ __forceinline__ bool variant_buffers_ok(const ", params_type_,
        "& p) {\n", checks, "  return true;\n}\n");
    return absl::OkStatus();
  }

  // The attention kernel's names for the buffers and tables its generated regions read.
  absl::Status KernelBindings() {
    if (buffers_.empty() && tables_.empty()) return absl::OkStatus();
    std::string text;
    for (const BufferInfo& b : buffers_) absl::StrAppend(&text, Origin(*b.decl));
    absl::StrAppend(&text, BufferLocals("p", ""));
    if (!tables_.empty()) {
      const std::string offsets = Fresh("table_offsets");
      absl::StrAppend(&text, "size_t ", offsets, "[", tables_.size(), "];\nvariant_workspace(p, ", offsets,
                      ");\n");
      for (const TableInfo& t : tables_) {
        absl::StrAppend(&text, Origin(*t.decl), "const int* __restrict__ const ", t.cpp,
                        " = reinterpret_cast<const int*>(workspace + ", offsets, "[", t.slot,
                        "]);\n");
      }
    }
    out_["variant_bind"] = text;
    return absl::OkStatus();
  }

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
  std::optional<TileStream> stream_;  // the tensor that comes tile by tile, if any
  const bool stage_regions_;    // ... regions `staged_tables` and `stage_tables` (StageTheTables)
  std::vector<StagedTable> staged_;  // the tables copied into shared memory per work tile
  EmitScope ns_;      // namespace scope: params, consts
  EmitScope kernel_;  // kernel body before the loop
  EmitScope loop_;    // inside the KV loop
  std::vector<BufferInfo> buffers_;
  cuir::BoundsEnv element_bounds_ = cuir::ElementBoundsEnv();  // + the consts' values (Consts)
  std::vector<TableInfo> tables_;
  std::map<std::string, std::string> out_;
};

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> GenerateRegions(const LoweringPlan& plan,
                                                                   const cuir::Program& base,
                                                                   const Expert& expert) {
  return RegionWriter(plan, base, expert).Run();
}

}  // namespace cubridge::lower
