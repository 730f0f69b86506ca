// The CuIR interpreter: the executable definition of the language (see docs/cuir.md).
//
// Declarations bind the global scope, block tables are classified, then every grid point runs the
// body, in the launch order of the grid's schedule (cuir/ir/schedule.h). Roles are declarations:
// the interpreter is one thread of control that runs each program's body once, sequentially,
// however the kernel splits it among warp roles; `pipeline` depths do not change results either.
// A `split` loop runs as two halves, each from a fresh online-softmax state, whose states are
// merged before the epilogue (the same results up to rounding), as a kernel splitting it would.
// Programs are independent and their control flow depends only on scalars, so the launch first
// dry-runs each grid point's scalar statements (lets, loop bounds, load ranges, `when`
// conditions) into a trace; points with equal traces form a group that executes as one batch
// (tiles [members, rows, cols], per-member head indices and per-member scalars as [members, 1, 1]
// tensors). Each member computes exactly what it would alone. Outputs start as NaN so that rows
// no program writes (a grid that misses a query tile, a wrong head in a load) fail comparisons.
#include "cuir/interp/interp.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>
#include <torch/utils.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuir/interp/block_table.h"
#include "cuir/interp/tensor_eval.h"
#include "cuir/ir/eval.h"
#include "cuir/ir/schedule.h"
#include "cuir/ir/status_macros.h"
#include "cuir/spec/tensors.h"

namespace cubridge::interp {
namespace {

using cuir::SourceLoc;
using cuir::Stmt;
using cuir::StmtKind;
using cuir::Value;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Bounds the memory of one batch: acc is [members, BLOCK_M, head_dim] fp32.
constexpr size_t kMaxGroup = 128;


std::string At(const SourceLoc& loc) {
  return loc.known() ? absl::StrCat(loc.ToString(), ": ") : std::string();
}

absl::Status InvalidAt(const SourceLoc& loc, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat(At(loc), msg));
}

absl::Status OutOfRangeAt(const SourceLoc& loc, absl::string_view msg) {
  return absl::OutOfRangeError(absl::StrCat(At(loc), msg));
}

torch::ScalarType TorchDType(cuir::DType d) {
  return d == cuir::DType::kBF16 ? torch::kBFloat16 : torch::kHalf;
}

// A declared float whose initializer is an int takes the declared type.
Value Coerce(Value v, cuir::Type declared) {
  if (declared == cuir::Type::kFloat) {
    if (const int64_t* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  }
  return v;
}

bool Consecutive(const std::vector<int64_t>& heads) {
  for (size_t i = 1; i < heads.size(); ++i) {
    if (heads[i] != heads[0] + static_cast<int64_t>(i)) return false;
  }
  return true;
}

torch::Tensor HeadIndex(const std::vector<int64_t>& heads) {
  return torch::tensor(heads, torch::kLong);
}

// One tile per group member: data is [members, rows, cols]. Loads hold rows [row0, row0 + rows)
// of q/k/v/do[batch, heads[i]] (fp32); score / probability tiles (and the backward's dP and dS)
// have q rows from row0 and kv columns from col0, and know the query heads and batch of their
// rows and, in `raw`, the scaled scores before any score_mod (what score_grad differentiates at).
struct Tile {
  enum Kind { kLoad, kScore, kProb, kRecomputed, kDP, kDS } kind = kLoad;
  torch::Tensor data, raw;
  // kDS: P * (|dP| + sum |dO * O|) per element, the scale of dS's rounding error (dS =
  // P * (dP - D) loses what dP and D have in common, and D = sum dO * O is only as exact as the
  // stored O, rounded to the input dtype), which buffer gradients sum as their error bound.
  torch::Tensor error_scale;
  int64_t batch = 0;
  std::vector<int64_t> heads;
  int64_t row0 = 0, col0 = 0;
  int64_t rows() const { return data.size(1); }
  int64_t cols() const { return data.size(2); }
};

// The rows of the tile a program keeps state for (softmax.init's Q tile, grad.init's K tile).
struct StateRows {
  bool active = false;
  int64_t batch = 0, row0 = 0, rows = 0;
  std::vector<int64_t> heads;

  void Start(const Tile& t) {
    active = true;
    batch = t.batch;
    heads = t.heads;
    row0 = t.row0;
    rows = t.rows();
  }
};

// Online-softmax statistics of the members' Q tiles.
struct SoftmaxState : StateRows {
  torch::Tensor m, l, acc;  // [members, rows], [members, rows], [members, rows, head_dim]
};

// The backward's accumulators of the members' K/V tiles (heads are kv heads): dK and dV,
// [members, rows, head_dim].
struct GradState : StateRows {
  torch::Tensor dk, dv;
};

// Grid points executed together. With `trace` set, only scalar statements run and every
// control decision is appended to it (the dry run of one grid point).
struct Group {
  std::vector<cuir::ScalarEnv> envs;
  absl::flat_hash_map<std::string, Tile> tiles;
  SoftmaxState softmax;
  GradState grad;
  std::string last_q;  // the most recent load from q: the tile softmax.init and epilogue use
  std::string last_k;  // the most recent load from k: the tile grad.init accumulates for
  std::vector<int64_t>* trace = nullptr;
  int64_t size() const { return static_cast<int64_t>(envs.size()); }
  bool dry() const { return trace != nullptr; }
};

class Interpreter {
 public:
  Interpreter(const cuir::Program& program, const cuir::AttentionConfig& config,
              const spec::AttentionInputs& inputs, const spec::BackwardInputs* backward,
              InterpStats* stats)
      : program_(program), config_(config), inputs_(inputs), backward_(backward), stats_(stats) {}

  absl::StatusOr<spec::AttentionOutputs> Run() {
    CUBRIDGE_RETURN_IF_ERROR(Launch());
    return spec::AttentionOutputs{o_, lse_};
  }

  absl::StatusOr<spec::AttentionGrads> RunBackward() {
    CUBRIDGE_RETURN_IF_ERROR(Launch());
    spec::AttentionGrads grads{dq_.to(dtype_), dk_.to(dtype_), dv_.to(dtype_), {}};
    for (const auto& [name, grad] : buffer_grads_) grads.buffers[name] = grad;
    grads.buffer_masses = buffer_masses_;
    return grads;
  }

 private:
  absl::Status Launch() {
    CUBRIDGE_RETURN_IF_ERROR(cuir::Validate(program_));
    CUBRIDGE_RETURN_IF_ERROR(cuir::ValidateConfig(config_));
    if (cuir::IsBackward(program_) != (backward_ != nullptr)) {
      return InvalidAt(program_.loc,
                       backward_ != nullptr
                           ? "this is a forward program; run it with the interpreter's forward "
                             "entry (Interpret), or give a backward program (grad.init ...)"
                           : "this is a backward program (it has grad.init); run it with "
                             "InterpretBackward, which takes O, LSE and dO");
    }
    CUBRIDGE_RETURN_IF_ERROR(CheckInputs());
    PrepareTensors();
    CUBRIDGE_RETURN_IF_ERROR(BindDeclarations());
    if (grid_ == nullptr) return InvalidAt(program_.loc, "program has no `grid` statement");
    for (const Stmt& s : program_.stmts) {
      if (s.kind != StmtKind::kTable) continue;
      CUBRIDGE_ASSIGN_OR_RETURN(BlockTable table,
                            ComputeBlockTable(s, *grid_, grid_extents_, globals_, buffers_,
                                              config_.seqlen_q, config_.seqlen_kv));
      tables_[s.name] = std::move(table);
    }
    CUBRIDGE_RETURN_IF_ERROR(RunGrid());
    return absl::OkStatus();
  }

  // ---- setup ----

  absl::Status CheckShape(const char* name, const torch::Tensor& t, int64_t heads,
                          int64_t seqlen) const {
    const std::vector<int64_t> want = {config_.batch, heads, seqlen, config_.head_dim};
    if (!t.defined() || t.sizes().vec() != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          "interpreter input ", name, " has shape [",
          t.defined() ? absl::StrJoin(t.sizes().vec(), ", ") : "undefined", "], the config (",
          config_.ToString(), ") needs [", absl::StrJoin(want, ", "), "]"));
    }
    if (t.scalar_type() != dtype_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "interpreter input ", name, " has dtype ", c10::toString(t.scalar_type()),
          ", the config needs ", cuir::DTypeName(config_.dtype)));
    }
    return absl::OkStatus();
  }

  absl::Status CheckInputs() {
    dtype_ = TorchDType(config_.dtype);
    CUBRIDGE_RETURN_IF_ERROR(CheckShape("q", inputs_.q, config_.heads_q, config_.seqlen_q));
    CUBRIDGE_RETURN_IF_ERROR(CheckShape("k", inputs_.k, config_.heads_kv, config_.seqlen_kv));
    CUBRIDGE_RETURN_IF_ERROR(CheckShape("v", inputs_.v, config_.heads_kv, config_.seqlen_kv));
    if (backward_ == nullptr) return absl::OkStatus();
    CUBRIDGE_RETURN_IF_ERROR(CheckShape("o", backward_->o, config_.heads_q, config_.seqlen_q));
    CUBRIDGE_RETURN_IF_ERROR(
        CheckShape("grad_o", backward_->grad_o, config_.heads_q, config_.seqlen_q));
    const std::vector<int64_t> rows = {config_.batch, config_.heads_q, config_.seqlen_q};
    const torch::Tensor& lse = backward_->lse;
    if (!lse.defined() || lse.sizes().vec() != rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          "interpreter input lse has shape [",
          lse.defined() ? absl::StrJoin(lse.sizes().vec(), ", ") : "undefined",
          "], the config needs [", absl::StrJoin(rows, ", "), "] (the forward's LSE)"));
    }
    return absl::OkStatus();
  }

  void PrepareTensors() {
    // bf16/fp16 products are exact in fp32, so fp32 matmuls of the widened inputs give exact
    // products with fp32 sums, as the tensor cores do.
    qf_ = inputs_.q.to(torch::kFloat).contiguous();
    kf_ = inputs_.k.to(torch::kFloat).contiguous();
    vf_ = inputs_.v.to(torch::kFloat).contiguous();
    const double nan = std::numeric_limits<double>::quiet_NaN();
    o_ = torch::full(inputs_.q.sizes(), nan, torch::TensorOptions().dtype(dtype_));
    lse_ = torch::full({config_.batch, config_.heads_q, config_.seqlen_q}, nan, torch::kFloat);
    neg_inf_ = torch::scalar_tensor(kNegInf, torch::kFloat);
    zero_ = torch::scalar_tensor(0.0f, torch::kFloat);
    if (backward_ == nullptr) return;
    dof_ = backward_->grad_o.to(torch::kFloat).contiguous();
    lsef_ = backward_->lse.to(torch::kFloat).contiguous();
    // The preprocessing pass's D = rowsum(dO * O): the stored O in the input dtype, fp32 sums.
    const torch::Tensor dof_o = dof_ * backward_->o.to(torch::kFloat);
    delta_ = dof_o.sum(3);
    delta_abs_ = dof_o.abs().sum(3);
    dq_ = torch::zeros(inputs_.q.sizes(), torch::kFloat);
    dk_ = torch::zeros(inputs_.k.sizes(), torch::kFloat);
    dv_ = torch::zeros(inputs_.v.sizes(), torch::kFloat);
  }

  absl::Status BindDeclarations() {
    auto& vars = globals_.vars;
    vars["batch"] = config_.batch;
    vars["heads_q"] = config_.heads_q;
    vars["heads_kv"] = config_.heads_kv;
    vars["head_dim"] = config_.head_dim;
    vars["seqlen_q"] = config_.seqlen_q;
    vars["seqlen_kv"] = config_.seqlen_kv;
    vars["softmax_scale"] = config_.scale();
    for (const Stmt& s : program_.stmts) {
      if (s.kind == StmtKind::kParam || s.kind == StmtKind::kConst) {
        CUBRIDGE_ASSIGN_OR_RETURN(Value v, cuir::EvalScalar(s.value, globals_));
        vars[s.name] = Coerce(v, s.type);
      } else if (s.kind == StmtKind::kBuffer) {
        CUBRIDGE_RETURN_IF_ERROR(BindBuffer(s));
      } else if (s.kind == StmtKind::kGrid) {
        CUBRIDGE_RETURN_IF_ERROR(BindGrid(s));
      }
    }
    tenv_.buffers = buffers_;
    return absl::OkStatus();
  }

  // A captured tensor: the dtype and rank the program declares, and per dimension at least the
  // size the program reaches at this shape (where that is known statically).
  absl::Status BindBuffer(const Stmt& s) {
    auto it = inputs_.buffers.find(s.name);
    if (it == inputs_.buffers.end() || !it->second.defined()) {
      return InvalidAt(s.loc, absl::StrCat("buffer ", s.name,
                                           " has no values in the job's inputs: provide it (e.g. "
                                           "--buffer ", s.name, "=random:",
                                           cuir::TensorDTypeName(s.dtype), ")"));
    }
    const torch::Tensor& t = it->second;
    const auto dtype = spec::TensorDTypeOf(t.scalar_type());
    // The interpreter computes on values: an int64 tensor serves an int32 declaration (the
    // kernel's launcher is the one that needs the exact storage type).
    bool fits = dtype && cuir::ElementType(*dtype) == cuir::ElementType(s.dtype) &&
                t.dim() == static_cast<int64_t>(s.exprs.size());
    std::vector<std::string> least;
    for (size_t d = 0; d < s.exprs.size(); ++d) {
      if (s.exprs[d] == nullptr) {
        least.push_back("?");
        continue;
      }
      CUBRIDGE_ASSIGN_OR_RETURN(int64_t need, cuir::EvalInt(s.exprs[d], globals_));
      least.push_back(absl::StrCat(need));
      fits = fits && d < static_cast<size_t>(t.dim()) && t.size(d) >= need;
    }
    if (!fits) {
      return InvalidAt(s.loc, absl::StrCat(
                                  "buffer ", s.name, " must be an ",
                                  cuir::TypeName(cuir::ElementType(s.dtype)),
                                  " tensor of shape at least [", absl::StrJoin(least, ", "),
                                  "] (`", cuir::PrintExpr(cuir::Index(s.name, s.exprs)),
                                  "` at this shape), got ", c10::toString(t.scalar_type()),
                                  " of shape [", absl::StrJoin(t.sizes().vec(), ", "), "]"));
    }
    const torch::Tensor values = t.contiguous();
    buffers_[s.name] = values;
    cuir::BufferData data;
    data.element = s.type;
    data.sizes = values.sizes().vec();
    data.values.reserve(values.numel());
    if (s.type == cuir::Type::kBool) {
      const auto flat = values.reshape({-1}).contiguous();
      const bool* p = flat.data_ptr<bool>();
      for (int64_t i = 0; i < flat.numel(); ++i) data.values.emplace_back(p[i]);
    } else if (s.type == cuir::Type::kInt) {
      const auto flat = values.to(torch::kLong).reshape({-1});
      const int64_t* p = flat.data_ptr<int64_t>();
      for (int64_t i = 0; i < flat.numel(); ++i) data.values.emplace_back(p[i]);
    } else {
      const auto flat = values.to(torch::kDouble).reshape({-1});
      const double* p = flat.data_ptr<double>();
      for (int64_t i = 0; i < flat.numel(); ++i) data.values.emplace_back(p[i]);
    }
    globals_.buffers[s.name] = std::move(data);
    return absl::OkStatus();
  }

  absl::Status BindGrid(const Stmt& s) {
    grid_ = &s;
    grid_extents_.clear();
    for (size_t i = 0; i < s.exprs.size(); ++i) {
      CUBRIDGE_ASSIGN_OR_RETURN(int64_t extent, cuir::EvalInt(s.exprs[i], globals_));
      if (extent < 0) {
        return InvalidAt(s.exprs[i]->loc, absl::StrCat("grid axis ", s.names[i],
                                                       " has negative extent ", extent));
      }
      grid_extents_.push_back(extent);
    }
    return absl::OkStatus();
  }

  // ---- the launch ----

  cuir::ScalarEnv PointEnv(const std::vector<int64_t>& point) const {
    cuir::ScalarEnv env = globals_;
    for (size_t i = 0; i < point.size(); ++i) env.vars[grid_->names[i]] = point[i];
    return env;
  }

  // Groups grid points by their dry-run trace, in the launch order of the grid's schedule: the
  // dry runs visit the points in that order, and the groups run in the order of their first
  // points, each group's members in launch order.
  absl::StatusOr<std::vector<std::vector<std::vector<int64_t>>>> GroupPoints() {
    std::vector<std::vector<std::vector<int64_t>>> groups;
    absl::flat_hash_map<std::vector<int64_t>, size_t> by_trace;
    auto order = cuir::GridOrder(grid_->attr, grid_extents_);
    if (!order.ok()) return InvalidAt(grid_->loc, order.status().message());
    for (const std::vector<int64_t>& point : *order) {
      std::vector<int64_t> trace;
      Group dry;
      dry.envs.push_back(PointEnv(point));
      dry.trace = &trace;
      CUBRIDGE_RETURN_IF_ERROR(ExecList(program_.stmts, dry));
      auto [it, inserted] = by_trace.try_emplace(std::move(trace), groups.size());
      if (inserted || groups[it->second].size() == kMaxGroup) {
        it->second = groups.size();
        groups.emplace_back();
      }
      groups[it->second].push_back(point);
    }
    return groups;
  }

  absl::Status RunGrid() {
    CUBRIDGE_ASSIGN_OR_RETURN(auto groups, GroupPoints());
    for (const auto& points : groups) {
      Group g;
      for (const auto& p : points) g.envs.push_back(PointEnv(p));
      CUBRIDGE_RETURN_IF_ERROR(ExecList(program_.stmts, g));
      if (stats_ != nullptr) stats_->programs += g.size();
    }
    return absl::OkStatus();
  }

  absl::Status ExecList(const std::vector<Stmt>& stmts, Group& g) {
    for (const Stmt& s : stmts) CUBRIDGE_RETURN_IF_ERROR(Exec(s, g));
    return absl::OkStatus();
  }

  absl::Status Exec(const Stmt& s, Group& g) {
    switch (s.kind) {
      case StmtKind::kLet: return ExecLet(s, g);
      case StmtKind::kLoad: return ExecLoad(s, g);
      case StmtKind::kSoftmaxInit: return ExecSoftmaxInit(s, g);
      case StmtKind::kFor: return s.table.empty() ? ExecRangeFor(s, g) : ExecTableFor(s, g);
      case StmtKind::kQK: return ExecQK(s, g);
      case StmtKind::kScoreMod: return g.dry() ? absl::OkStatus() : ExecScoreMod(s, g);
      case StmtKind::kMask: return ExecMask(s, g);
      case StmtKind::kSoftmaxOnline: return g.dry() ? absl::OkStatus() : ExecSoftmaxOnline(s, g);
      case StmtKind::kPV: return g.dry() ? absl::OkStatus() : ExecPV(s, g);
      case StmtKind::kEpilogue: return g.dry() ? absl::OkStatus() : ExecEpilogue(s, g);
      case StmtKind::kGradInit: return g.dry() ? absl::OkStatus() : ExecGradInit(s, g);
      case StmtKind::kSoftmaxRecompute: return g.dry() ? absl::OkStatus() : ExecRecompute(s, g);
      case StmtKind::kDV: return g.dry() ? absl::OkStatus() : ExecDV(s, g);
      case StmtKind::kDP: return g.dry() ? absl::OkStatus() : ExecDP(s, g);
      case StmtKind::kSoftmaxGrad: return g.dry() ? absl::OkStatus() : ExecSoftmaxGrad(s, g);
      case StmtKind::kScoreGrad: return g.dry() ? absl::OkStatus() : ExecScoreGrad(s, g);
      case StmtKind::kBufferGrad: return g.dry() ? absl::OkStatus() : ExecBufferGrad(s, g);
      case StmtKind::kDK: case StmtKind::kDQ: return ExecGradProduct(s, g);
      case StmtKind::kGradEpilogue: return g.dry() ? absl::OkStatus() : ExecGradEpilogue(s, g);
      default: return absl::OkStatus();  // declarations were bound before the launch
    }
  }

  // A decision every member must share: the dry run records it, a group checks it (members were
  // grouped by equal traces, so a difference is an interpreter bug).
  absl::StatusOr<std::vector<int64_t>> Agree(Group& g, const Stmt& s,
                                             std::vector<std::vector<int64_t>> per_member) {
    for (size_t i = 1; i < per_member.size(); ++i) {
      if (per_member[i] != per_member[0]) {
        return absl::InternalError(absl::StrCat(At(s.loc), "interpreter: grouped programs "
                                                           "diverged at this statement"));
      }
    }
    if (g.dry()) {
      g.trace->push_back(static_cast<int64_t>(per_member[0].size()));
      g.trace->insert(g.trace->end(), per_member[0].begin(), per_member[0].end());
    }
    return std::move(per_member[0]);
  }

  absl::Status ExecLet(const Stmt& s, Group& g) {
    for (auto& env : g.envs) {
      CUBRIDGE_ASSIGN_OR_RETURN(Value v, cuir::EvalScalar(s.value, env));
      env.vars[s.name] = Coerce(v, s.type);
    }
    return absl::OkStatus();
  }

  // ---- loads ----

  absl::StatusOr<std::vector<int64_t>> LoadIndices(const Stmt& s, const cuir::ScalarEnv& env) {
    std::vector<int64_t> idx;
    for (const auto& e : s.exprs) {
      CUBRIDGE_ASSIGN_OR_RETURN(int64_t v, cuir::EvalInt(e, env));
      idx.push_back(v);
    }
    const std::string& tensor = s.operands[0];
    const bool is_q = tensor == "q" || tensor == "do";  // dO has Q's rows
    const int64_t heads = is_q ? config_.heads_q : config_.heads_kv;
    const int64_t seqlen = is_q ? config_.seqlen_q : config_.seqlen_kv;
    const std::string what = absl::StrCat("load ", s.name, ": ");
    const int64_t b = idx[0], head = idx[1], lo = idx[2], hi = idx[3];
    if (b < 0 || b >= config_.batch) {
      return OutOfRangeAt(s.loc, absl::StrCat(what, "batch ", b, " outside ", tensor,
                                              " with batch=", config_.batch));
    }
    if (head < 0 || head >= heads) {
      return OutOfRangeAt(s.loc, absl::StrCat(what, "head ", head, " outside ", tensor, " with ",
                                              is_q ? "heads_q=" : "heads_kv=", heads,
                                              " (check the head mapping)"));
    }
    if (lo < 0 || hi > seqlen) {
      return OutOfRangeAt(s.loc, absl::StrCat(what, "rows [", lo, ", ", hi, ") outside ", tensor,
                                              "[", b, ", ", head, "] with ",
                                              is_q ? "seqlen_q=" : "seqlen_kv=", seqlen));
    }
    return idx;
  }

  // Rows [lo, hi) of src[b, heads[i]] for each member: [members, rows, head_dim].
  torch::Tensor GatherRows(const torch::Tensor& src, int64_t b, const std::vector<int64_t>& heads,
                           int64_t lo, int64_t hi) const {
    const int64_t members = static_cast<int64_t>(heads.size());
    if (lo >= hi) return torch::zeros({members, 0, config_.head_dim}, torch::kFloat);
    const torch::Tensor rows = src.select(0, b).narrow(1, lo, hi - lo);
    if (Consecutive(heads)) return rows.narrow(0, heads[0], members);
    return rows.index_select(0, HeadIndex(heads));
  }

  absl::Status ExecLoad(const Stmt& s, Group& g) {
    std::vector<std::vector<int64_t>> shared;
    std::vector<int64_t> heads;
    for (const auto& env : g.envs) {
      CUBRIDGE_ASSIGN_OR_RETURN(std::vector<int64_t> idx, LoadIndices(s, env));
      heads.push_back(idx[1]);
      shared.push_back({idx[0], idx[2], idx[3]});
    }
    CUBRIDGE_ASSIGN_OR_RETURN(std::vector<int64_t> brange, Agree(g, s, std::move(shared)));
    const std::string& tensor = s.operands[0];
    if (tensor == "q") g.last_q = s.name;
    if (tensor == "k") g.last_k = s.name;
    if (g.dry()) return absl::OkStatus();
    const torch::Tensor& src = tensor == "q"   ? qf_
                               : tensor == "k" ? kf_
                               : tensor == "v" ? vf_
                                               : dof_;
    Tile tile;
    tile.batch = brange[0];
    tile.row0 = brange[1];
    tile.data = GatherRows(src, brange[0], heads, brange[1], brange[2]);
    tile.heads = std::move(heads);
    g.tiles[s.name] = std::move(tile);
    return absl::OkStatus();
  }

  // ---- loops ----

  // One run of the loop body: the block and, in the table form, whether it is full.
  struct BlockVisit {
    int64_t block;
    bool full;
  };

  // The union of the loop's [lo, hi) intervals as sorted disjoint intervals.
  absl::StatusOr<std::vector<int64_t>> MergedRanges(const Stmt& s, const cuir::ScalarEnv& env) {
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const cuir::BlockRange& r : s.ranges) {
      CUBRIDGE_ASSIGN_OR_RETURN(int64_t lo, cuir::EvalInt(r.lo, env));
      CUBRIDGE_ASSIGN_OR_RETURN(int64_t hi, cuir::EvalInt(r.hi, env));
      if (lo < hi) ranges.emplace_back(lo, hi);
    }
    std::sort(ranges.begin(), ranges.end());
    std::vector<int64_t> merged;  // lo0, hi0, lo1, hi1, ...
    for (const auto& [lo, hi] : ranges) {
      if (!merged.empty() && lo <= merged.back()) {
        merged.back() = std::max(merged.back(), hi);
      } else {
        merged.push_back(lo);
        merged.push_back(hi);
      }
    }
    return merged;
  }

  absl::Status ExecRangeFor(const Stmt& s, Group& g) {
    std::vector<std::vector<int64_t>> per_member;
    for (const auto& env : g.envs) {
      CUBRIDGE_ASSIGN_OR_RETURN(std::vector<int64_t> merged, MergedRanges(s, env));
      per_member.push_back(std::move(merged));
    }
    CUBRIDGE_ASSIGN_OR_RETURN(std::vector<int64_t> merged, Agree(g, s, std::move(per_member)));
    std::vector<BlockVisit> visits;
    for (size_t i = 0; i < merged.size(); i += 2) {
      for (int64_t block = merged[i]; block < merged[i + 1]; ++block) {
        visits.push_back({block, false});
      }
    }
    return RunLoop(s, g, visits);
  }

  absl::Status ExecTableFor(const Stmt& s, Group& g) {
    auto it = tables_.find(s.table);
    if (it == tables_.end()) return InvalidAt(s.loc, absl::StrCat("unknown table ", s.table));
    std::vector<std::vector<int64_t>> per_member;
    for (const auto& env : g.envs) {
      std::vector<int64_t> index;
      for (const auto& e : s.exprs) {
        CUBRIDGE_ASSIGN_OR_RETURN(int64_t v, cuir::EvalInt(e, env));
        index.push_back(v);
      }
      CUBRIDGE_ASSIGN_OR_RETURN(const auto* row, it->second.Row(index, s.loc));
      std::vector<int64_t> flat;
      for (const auto& [block, full] : *row) {
        flat.push_back(block);
        flat.push_back(full ? 1 : 0);
      }
      per_member.push_back(std::move(flat));
    }
    CUBRIDGE_ASSIGN_OR_RETURN(std::vector<int64_t> row, Agree(g, s, std::move(per_member)));
    std::vector<BlockVisit> visits;
    for (size_t i = 0; i < row.size(); i += 2) visits.push_back({row[i], row[i + 1] != 0});
    return RunLoop(s, g, visits);
  }

  // Runs the loop body once per visit, in order. A `split` loop runs the first half of its
  // visits and then the second half as two parts, each from a fresh softmax state, and merges
  // their states into the one the loop started from. Dry runs record scalar decisions only, which
  // a split does not change, so they visit the blocks as an unsplit loop does.
  absl::Status RunLoop(const Stmt& s, Group& g, const std::vector<BlockVisit>& visits) {
    if (!s.split || g.dry() || !g.softmax.active) {
      return RunVisits(s, g, visits.begin(), visits.end());
    }
    const SoftmaxState start = g.softmax;
    const auto middle = visits.begin() + static_cast<std::ptrdiff_t>(visits.size() / 2);
    std::vector<SoftmaxState> parts;
    for (const auto& [first, last] : {std::pair{visits.begin(), middle},
                                      std::pair{middle, visits.end()}}) {
      ResetSoftmax(g.softmax, g.size());  // new tensors: `start` keeps its own
      CUBRIDGE_RETURN_IF_ERROR(RunVisits(s, g, first, last));
      parts.push_back(g.softmax);
    }
    g.softmax = start;
    MergeSoftmax(g.softmax, parts);
    return absl::OkStatus();
  }

  absl::Status RunVisits(const Stmt& s, Group& g, std::vector<BlockVisit>::const_iterator first,
                         std::vector<BlockVisit>::const_iterator last) {
    for (auto it = first; it != last; ++it) {
      for (auto& env : g.envs) {
        env.vars[s.name] = it->block;
        if (!s.full_var.empty()) env.vars[s.full_var] = it->full;
      }
      if (stats_ != nullptr && !g.dry()) stats_->blocks_visited += g.size();
      CUBRIDGE_RETURN_IF_ERROR(ExecList(s.body, g));
    }
    return absl::OkStatus();
  }

  // ---- tile math ----

  absl::StatusOr<Tile*> GetTile(const Stmt& s, Group& g, size_t operand, Tile::Kind kind,
                                const char* what) {
    const std::string& name = s.operands[operand];
    auto it = g.tiles.find(name);
    if (it == g.tiles.end() || it->second.kind != kind) {
      return InvalidAt(s.loc, absl::StrCat(cuir::StmtKindName(s.kind), ": ", name, " is not ",
                                           what, " here"));
    }
    return &it->second;
  }

  // The most recent load `name` (of q for softmax.init, of k for grad.init).
  absl::StatusOr<const Tile*> LastLoad(const Stmt& s, Group& g, const std::string& name,
                                       const char* tile, const char* tensor) {
    auto it = g.tiles.find(name);
    if (it == g.tiles.end()) {
      return InvalidAt(s.loc, absl::StrCat(cuir::StmtKindName(s.kind), " needs a ", tile,
                                           " tile loaded before it (load ", tile, " = ", tensor,
                                           "[...])"));
    }
    return &it->second;
  }

  absl::Status ExecSoftmaxInit(const Stmt& s, Group& g) {
    if (g.dry()) return absl::OkStatus();
    CUBRIDGE_ASSIGN_OR_RETURN(const Tile* q, LastLoad(s, g, g.last_q, "Q", "q"));
    g.softmax.Start(*q);
    ResetSoftmax(g.softmax, g.size());
    return absl::OkStatus();
  }

  // m = -inf, l = 0, acc = 0 in new tensors of the state's shape.
  void ResetSoftmax(SoftmaxState& sm, int64_t members) const {
    sm.m = torch::full({members, sm.rows}, kNegInf, torch::kFloat);
    sm.l = torch::zeros({members, sm.rows}, torch::kFloat);
    sm.acc = torch::zeros({members, sm.rows, config_.head_dim}, torch::kFloat);
  }

  // Folds the states of disjoint sets of KV blocks into `sm`: m = max m_i,
  // l = sum l_i exp(m_i - m), acc = sum acc_i exp(m_i - m). As in softmax.online, rows with
  // nothing unmasked anywhere (m = -inf) subtract 0 instead, so they keep l = 0 and acc = 0.
  void MergeSoftmax(SoftmaxState& sm, const std::vector<SoftmaxState>& parts) const {
    torch::Tensor m = sm.m;
    for (const SoftmaxState& part : parts) m = torch::maximum(m, part.m);
    const torch::Tensor m_use = torch::where(torch::isfinite(m), m, zero_);
    torch::Tensor alpha = torch::exp(sm.m - m_use);
    torch::Tensor l = sm.l * alpha;
    torch::Tensor acc = sm.acc * alpha.unsqueeze(2);
    for (const SoftmaxState& part : parts) {
      alpha = torch::exp(part.m - m_use);
      l = l + part.l * alpha;
      acc = acc + part.acc * alpha.unsqueeze(2);
    }
    sm.m = std::move(m);
    sm.l = std::move(l);
    sm.acc = std::move(acc);
  }

  // The `scale` of a qk / dk / dq, one value for the whole group (the dry run records it).
  absl::StatusOr<float> AgreedScale(const Stmt& s, Group& g) {
    std::vector<std::vector<int64_t>> per_member;
    for (const auto& env : g.envs) {
      CUBRIDGE_ASSIGN_OR_RETURN(Value v, cuir::EvalScalar(s.value, env));
      if (std::holds_alternative<bool>(v)) {
        return InvalidAt(s.value->loc, absl::StrCat(cuir::StmtKindName(s.kind),
                                                    ": the scale must be a number"));
      }
      const double scale = std::holds_alternative<double>(v)
                               ? std::get<double>(v)
                               : static_cast<double>(std::get<int64_t>(v));
      per_member.push_back({std::bit_cast<int64_t>(scale)});
    }
    CUBRIDGE_ASSIGN_OR_RETURN(std::vector<int64_t> bits, Agree(g, s, std::move(per_member)));
    return static_cast<float>(std::bit_cast<double>(bits[0]));
  }

  // a . b^T of two loads (fp32, exact products of the input dtype): rows of a's rows, columns of
  // b's, and a's batch and heads.
  static Tile RowProduct(Tile::Kind kind, const Tile& a, const Tile& b) {
    Tile tile;
    tile.kind = kind;
    tile.row0 = a.row0;
    tile.col0 = b.row0;
    tile.batch = a.batch;
    tile.heads = a.heads;
    tile.data = torch::bmm(a.data, b.data.transpose(1, 2));
    return tile;
  }

  absl::Status ExecQK(const Stmt& s, Group& g) {
    CUBRIDGE_ASSIGN_OR_RETURN(const float scale, AgreedScale(s, g));
    if (g.dry()) return absl::OkStatus();
    CUBRIDGE_ASSIGN_OR_RETURN(Tile * q, GetTile(s, g, 0, Tile::kLoad, "a loaded tile"));
    CUBRIDGE_ASSIGN_OR_RETURN(Tile * k, GetTile(s, g, 1, Tile::kLoad, "a loaded tile"));
    Tile tile = RowProduct(Tile::kScore, *q, *k);
    tile.data.mul_(scale);
    tile.raw = tile.data;  // score_mod and mask replace `data`, never write into it
    g.tiles[s.name] = std::move(tile);
    return absl::OkStatus();
  }

  // Index tensors [1, rows, 1] / [1, 1, cols], reused across blocks.
  torch::Tensor IndexTensor(int64_t start, int64_t len, bool rows) {
    auto [it, inserted] = index_cache_.try_emplace(std::tuple{start, len, rows});
    if (inserted) {
      const torch::Tensor r = torch::arange(start, start + len, torch::kLong);
      it->second = rows ? r.view({1, len, 1}) : r.view({1, 1, len});
    }
    return it->second;
  }

  const std::vector<std::string>& VarsOf(const cuir::ExprPtr& e) {
    auto [it, inserted] = vars_cache_.try_emplace(e.get());
    if (inserted) cuir::CollectVars(e, &it->second);
    return it->second;
  }

  // A scalar whose value differs between members, as a [members, 1, 1] tensor; undefined when
  // all members agree (then the evaluator reads it from the first member's scope).
  torch::Tensor PerMember(const std::string& name, const Group& g) const {
    const auto& first = g.envs[0].vars;
    auto it = first.find(name);
    if (it == first.end()) return {};
    bool uniform = true;
    for (const auto& env : g.envs) {
      auto other = env.vars.find(name);
      uniform = uniform && other != env.vars.end() && other->second == it->second;
    }
    if (uniform) return {};
    const int64_t n = g.size();
    if (std::holds_alternative<int64_t>(it->second)) {
      std::vector<int64_t> ints;  // not through double: int64 beyond 2^53 must stay exact
      for (const auto& env : g.envs) ints.push_back(std::get<int64_t>(env.vars.at(name)));
      return torch::tensor(ints, torch::kLong).view({n, 1, 1});
    }
    std::vector<double> values;
    for (const auto& env : g.envs) {
      const Value& v = env.vars.at(name);
      values.push_back(std::holds_alternative<bool>(v) ? (std::get<bool>(v) ? 1.0 : 0.0)
                                                        : std::get<double>(v));
    }
    const auto dtype = std::holds_alternative<bool>(it->second) ? torch::kBool : torch::kFloat;
    return torch::tensor(values, torch::kDouble).to(dtype).view({n, 1, 1});
  }

  // Evaluates a per-element expression over the tile t, broadcast to [members, rows, cols].
  absl::StatusOr<torch::Tensor> EvalOnTile(const cuir::ExprPtr& e, const Group& g, const Tile& t,
                                           bool with_score) {
    tenv_.tensors.clear();
    tenv_.scalars = &g.envs[0];
    if (g.size() > 1) {
      for (const std::string& name : VarsOf(e)) {
        if (torch::Tensor v = PerMember(name, g); v.defined()) tenv_.tensors[name] = v;
      }
    }
    tenv_.tensors["q_idx"] = IndexTensor(t.row0, t.rows(), true);
    tenv_.tensors["kv_idx"] = IndexTensor(t.col0, t.cols(), false);
    if (with_score) tenv_.tensors["score"] = t.data;
    CUBRIDGE_ASSIGN_OR_RETURN(torch::Tensor r, EvalTensor(e, tenv_));
    return r.expand({g.size(), t.rows(), t.cols()});
  }

  absl::Status ExecScoreMod(const Stmt& s, Group& g) {
    CUBRIDGE_ASSIGN_OR_RETURN(Tile * t, GetTile(s, g, 0, Tile::kScore, "a qk result"));
    CUBRIDGE_ASSIGN_OR_RETURN(torch::Tensor r, EvalOnTile(s.value, g, *t, true));
    if (r.scalar_type() == torch::kBool) {
      return InvalidAt(s.value->loc, "score_mod needs a number, got bool");
    }
    t->data = r.to(torch::kFloat);
    return absl::OkStatus();
  }

  absl::Status ExecMask(const Stmt& s, Group& g) {
    std::vector<std::vector<int64_t>> per_member;
    for (const auto& env : g.envs) {
      bool when = true;
      if (s.aux != nullptr) {
        CUBRIDGE_ASSIGN_OR_RETURN(when, cuir::EvalBool(s.aux, env));
      }
      per_member.push_back({when ? 1 : 0});
    }
    CUBRIDGE_ASSIGN_OR_RETURN(std::vector<int64_t> when, Agree(g, s, std::move(per_member)));
    if (g.dry() || when[0] == 0) return absl::OkStatus();
    if (stats_ != nullptr) stats_->blocks_masked += g.size();
    CUBRIDGE_ASSIGN_OR_RETURN(Tile * t, GetTile(s, g, 0, Tile::kScore, "a qk result"));
    CUBRIDGE_ASSIGN_OR_RETURN(torch::Tensor pred, EvalOnTile(s.value, g, *t, false));
    if (pred.scalar_type() != torch::kBool) {
      return InvalidAt(s.value->loc, absl::StrCat("mask needs a bool predicate, got ",
                                                  cuir::TypeName(TensorType(pred))));
    }
    t->data = torch::where(pred, t->data, neg_inf_);
    return absl::OkStatus();
  }

  absl::Status CheckRows(const Stmt& s, const SoftmaxState& sm, int64_t rows) const {
    if (!sm.active) return InvalidAt(s.loc, "softmax.init must run before this statement");
    if (rows != sm.rows) {
      return InvalidAt(s.loc, absl::StrCat(cuir::StmtKindName(s.kind), ": tile has ", rows,
                                           " rows but the softmax state (Q tile) has ", sm.rows));
    }
    return absl::OkStatus();
  }

  absl::Status ExecSoftmaxOnline(const Stmt& s, Group& g) {
    CUBRIDGE_ASSIGN_OR_RETURN(Tile * t, GetTile(s, g, 0, Tile::kScore, "a qk result"));
    SoftmaxState& sm = g.softmax;
    CUBRIDGE_RETURN_IF_ERROR(CheckRows(s, sm, t->rows()));
    const torch::Tensor& S = t->data;
    const torch::Tensor row_max =
        t->cols() > 0 ? std::get<0>(S.max(2)) : torch::full_like(sm.m, kNegInf);
    torch::Tensor m_new = torch::maximum(sm.m, row_max);
    // Rows with nothing unmasked yet keep m = -inf; subtracting 0 instead keeps exp() at 0
    // rather than exp(-inf - (-inf)) = NaN.
    const torch::Tensor m_use = torch::where(torch::isfinite(m_new), m_new, zero_);
    const torch::Tensor alpha = torch::exp(sm.m - m_use);
    torch::Tensor p = torch::exp(S - m_use.unsqueeze(2));
    sm.l = sm.l * alpha + p.sum(2);
    sm.acc.mul_(alpha.unsqueeze(2));
    sm.m = std::move(m_new);
    Tile tile;
    tile.kind = Tile::kProb;
    tile.row0 = t->row0;
    tile.col0 = t->col0;
    tile.data = std::move(p);
    g.tiles[s.name] = std::move(tile);
    return absl::OkStatus();
  }

  absl::Status ExecPV(const Stmt& s, Group& g) {
    CUBRIDGE_ASSIGN_OR_RETURN(Tile * p, GetTile(s, g, 0, Tile::kProb, "a softmax.online result"));
    CUBRIDGE_ASSIGN_OR_RETURN(Tile * v, GetTile(s, g, 1, Tile::kLoad, "a loaded tile"));
    SoftmaxState& sm = g.softmax;
    CUBRIDGE_RETURN_IF_ERROR(CheckRows(s, sm, p->rows()));
    if (p->cols() != v->rows() || p->col0 != v->row0) {
      return InvalidAt(s.loc, absl::StrCat("pv: P covers kv rows [", p->col0, ", ",
                                           p->col0 + p->cols(), ") but ", s.operands[1],
                                           " holds rows [", v->row0, ", ", v->row0 + v->rows(),
                                           "); load K and V with the same range"));
    }
    // The kernel feeds P to the second MMA in the input dtype.
    sm.acc.baddbmm_(p->data.to(dtype_).to(torch::kFloat), v->data);
    return absl::OkStatus();
  }

  // Writes rows [row0, row0 + rows) of dst[b, heads[i]] from src[i].
  static void Scatter(const torch::Tensor& dst, int64_t b, const std::vector<int64_t>& heads,
                      int64_t row0, const torch::Tensor& src) {
    const torch::Tensor rows = dst.select(0, b).narrow(1, row0, src.size(1));
    if (Consecutive(heads)) {
      rows.narrow(0, heads[0], static_cast<int64_t>(heads.size())).copy_(src);
      return;
    }
    for (size_t i = 0; i < heads.size(); ++i) rows.select(0, heads[i]).copy_(src[i]);
  }

  // The sink logit of each member as a [members, 1] fp32 tensor (it may depend on the head).
  absl::StatusOr<torch::Tensor> SinkLogits(const Stmt& s, const Group& g) const {
    std::vector<float> values;
    for (const auto& env : g.envs) {
      CUBRIDGE_ASSIGN_OR_RETURN(Value v, cuir::EvalScalar(s.value, env));
      if (std::holds_alternative<bool>(v)) {
        return InvalidAt(s.value->loc, "epilogue sink: the sink must be a number, got bool");
      }
      values.push_back(static_cast<float>(std::holds_alternative<double>(v)
                                              ? std::get<double>(v)
                                              : static_cast<double>(std::get<int64_t>(v))));
    }
    return torch::tensor(values, torch::kFloat).view({g.size(), 1});
  }

  absl::Status ExecEpilogue(const Stmt& s, Group& g) {
    const SoftmaxState& sm = g.softmax;
    if (!sm.active) return InvalidAt(s.loc, "epilogue needs softmax.init before it");
    if (sm.rows == 0) return absl::OkStatus();
    torch::Tensor m = sm.m, l = sm.l, acc = sm.acc;
    if (s.value != nullptr) {
      // One more online-softmax step with a single column, the sink, whose probability mass
      // joins l but whose value row is zero (it adds nothing to acc). A row that kept nothing
      // (m = -inf, l = 0) ends with l = 1 and m = sink: O = 0, LSE = sink.
      CUBRIDGE_ASSIGN_OR_RETURN(torch::Tensor sink, SinkLogits(s, g));
      const torch::Tensor m_new = torch::maximum(m, sink);
      const torch::Tensor m_use = torch::where(torch::isfinite(m_new), m_new, zero_);
      const torch::Tensor alpha = torch::exp(m - m_use);
      l = l * alpha + torch::exp(sink - m_use);
      acc = acc * alpha.unsqueeze(2);
      m = m_new;
    }
    const torch::Tensor has_mass = l > 0;
    const torch::Tensor o = torch::where(has_mass.unsqueeze(2), acc / l.unsqueeze(2), zero_);
    const torch::Tensor lse = torch::where(has_mass, m + torch::log(l), neg_inf_);
    Scatter(o_, sm.batch, sm.heads, sm.row0, o.to(dtype_));
    Scatter(lse_, sm.batch, sm.heads, sm.row0, lse);
    return absl::OkStatus();
  }

  // ---- the backward (docs/cuir.md, "backward statements") ----

  absl::Status ExecGradInit(const Stmt& s, Group& g) {
    CUBRIDGE_ASSIGN_OR_RETURN(const Tile* k, LastLoad(s, g, g.last_k, "K", "k"));
    GradState& gs = g.grad;
    gs.Start(*k);
    gs.dk = torch::zeros({g.size(), gs.rows, config_.head_dim}, torch::kFloat);
    gs.dv = torch::zeros_like(gs.dk);
    return absl::OkStatus();
  }

  // Rows [row0, row0 + rows) of a [batch, heads_q, seqlen_q] tensor (LSE, D) for the members'
  // query heads: [members, rows, 1].
  torch::Tensor RowStats(const torch::Tensor& src, const Tile& t) const {
    const torch::Tensor rows = src.select(0, t.batch).narrow(1, t.row0, t.rows());
    const torch::Tensor picked = Consecutive(t.heads)
                                     ? rows.narrow(0, t.heads[0], static_cast<int64_t>(t.heads.size()))
                                     : rows.index_select(0, HeadIndex(t.heads));
    return picked.unsqueeze(2);
  }

  // A tile derived from `from` (same rows, columns, heads and raw scores).
  static Tile Derived(const Tile& from, Tile::Kind kind, torch::Tensor data) {
    Tile t = from;
    t.kind = kind;
    t.data = std::move(data);
    return t;
  }

  // P = exp(S - LSE) with the forward's LSE; a row that kept nothing (LSE = -inf) and a masked
  // score (S = -inf) give 0.
  absl::Status ExecRecompute(const Stmt& s, Group& g) {
    CUBRIDGE_ASSIGN_OR_RETURN(Tile * t, GetTile(s, g, 0, Tile::kScore, "a qk result"));
    const torch::Tensor lse = RowStats(lsef_, *t);
    const torch::Tensor lse_use = torch::where(torch::isfinite(lse), lse, zero_);
    torch::Tensor p = torch::where(torch::isfinite(lse), torch::exp(t->data - lse_use), zero_);
    g.tiles[s.name] = Derived(*t, Tile::kRecomputed, std::move(p));
    return absl::OkStatus();
  }

  absl::Status CheckGradTile(const Stmt& s, const GradState& gs, const Tile& t) const {
    if (!gs.active) return InvalidAt(s.loc, "grad.init must run before this statement");
    if (t.cols() != gs.rows || t.col0 != gs.row0) {
      return InvalidAt(s.loc, absl::StrCat(cuir::StmtKindName(s.kind), ": the tile covers kv rows [",
                                           t.col0, ", ", t.col0 + t.cols(),
                                           ") but the program's K/V tile holds [", gs.row0, ", ",
                                           gs.row0 + gs.rows, ")"));
    }
    return absl::OkStatus();
  }

  absl::Status CheckSameRows(const Stmt& s, const Tile& a, const Tile& b) const {
    if (a.rows() == b.rows() && a.row0 == b.row0) return absl::OkStatus();
    return InvalidAt(s.loc, absl::StrCat(cuir::StmtKindName(s.kind), ": ", s.operands[0],
                                         " covers query rows [", a.row0, ", ", a.row0 + a.rows(),
                                         ") but ", s.operands[1], " holds [", b.row0, ", ",
                                         b.row0 + b.rows(), "); load Q and dO with one range"));
  }

  // dV += P^T dO, P in the input dtype (as the kernel feeds it to the MMA).
  absl::Status ExecDV(const Stmt& s, Group& g) {
    CUBRIDGE_ASSIGN_OR_RETURN(Tile * p, GetTile(s, g, 0, Tile::kRecomputed,
                                                "a softmax.recompute result"));
    CUBRIDGE_ASSIGN_OR_RETURN(Tile * d_o, GetTile(s, g, 1, Tile::kLoad, "a loaded tile"));
    CUBRIDGE_RETURN_IF_ERROR(CheckGradTile(s, g.grad, *p));
    CUBRIDGE_RETURN_IF_ERROR(CheckSameRows(s, *p, *d_o));
    g.grad.dv.baddbmm_(p->data.to(dtype_).to(torch::kFloat).transpose(1, 2), d_o->data);
    return absl::OkStatus();
  }

  absl::Status ExecDP(const Stmt& s, Group& g) {
    CUBRIDGE_ASSIGN_OR_RETURN(Tile * d_o, GetTile(s, g, 0, Tile::kLoad, "a loaded tile"));
    CUBRIDGE_ASSIGN_OR_RETURN(Tile * v, GetTile(s, g, 1, Tile::kLoad, "a loaded tile"));
    g.tiles[s.name] = RowProduct(Tile::kDP, *d_o, *v);
    return absl::OkStatus();
  }

  // dS = P * (dP - D): the gradient with respect to the (modified) score.
  absl::Status ExecSoftmaxGrad(const Stmt& s, Group& g) {
    CUBRIDGE_ASSIGN_OR_RETURN(Tile * p, GetTile(s, g, 0, Tile::kRecomputed,
                                                "a softmax.recompute result"));
    CUBRIDGE_ASSIGN_OR_RETURN(Tile * dp, GetTile(s, g, 1, Tile::kDP, "a dp result"));
    if (dp->row0 != p->row0 || dp->col0 != p->col0 || dp->rows() != p->rows() ||
        dp->cols() != p->cols()) {
      return InvalidAt(s.loc, "softmax.grad: P and dP cover different elements; compute them from "
                              "the same Q/dO rows and K/V block");
    }
    const torch::Tensor d = RowStats(delta_, *p);
    torch::Tensor ds = p->data * (dp->data - d);
    Tile tile = Derived(*p, Tile::kDS, std::move(ds));
    tile.error_scale = p->data * (dp->data.abs() + RowStats(delta_abs_, *p));
    g.tiles[s.name] = std::move(tile);
    return absl::OkStatus();
  }

  // The raw scores of a dS tile as a score tile, for expressions over `score`.
  static Tile RawScores(const Tile& ds) {
    Tile t = ds;
    t.kind = Tile::kScore;
    t.data = ds.raw;
    return t;
  }

  // dS *= EXPR where dS != 0: a score that took no part (masked, or a row that kept nothing)
  // passes no gradient, whatever the derivative there.
  absl::Status ExecScoreGrad(const Stmt& s, Group& g) {
    CUBRIDGE_ASSIGN_OR_RETURN(Tile * ds, GetTile(s, g, 0, Tile::kDS, "a softmax.grad result"));
    CUBRIDGE_ASSIGN_OR_RETURN(torch::Tensor d, EvalOnTile(s.value, g, RawScores(*ds), true));
    if (d.scalar_type() == torch::kBool) {
      return InvalidAt(s.value->loc, "score_grad needs a number, got bool");
    }
    ds->data = torch::where(ds->data != 0, ds->data * d.to(torch::kFloat), zero_);
    return absl::OkStatus();
  }

  // grad[NAME][index] += dS * EXPR over the elements where dS != 0, in element order.
  absl::Status ExecBufferGrad(const Stmt& s, Group& g) {
    CUBRIDGE_ASSIGN_OR_RETURN(Tile * ds, GetTile(s, g, 0, Tile::kDS, "a softmax.grad result"));
    const torch::Tensor& values = buffers_.at(s.name);
    torch::Tensor& grad = buffer_grads_[s.name];
    if (!grad.defined()) grad = torch::zeros(values.sizes(), torch::kFloat);
    const Tile raw = RawScores(*ds);
    CUBRIDGE_ASSIGN_OR_RETURN(torch::Tensor partial, EvalOnTile(s.value, g, raw, true));
    const torch::Tensor live = ds->data != 0;
    torch::Tensor flat = torch::zeros({g.size(), raw.rows(), raw.cols()}, torch::kLong);
    int64_t stride = 1;
    for (size_t d = s.exprs.size(); d-- > 0;) {
      CUBRIDGE_ASSIGN_OR_RETURN(torch::Tensor index, EvalOnTile(s.exprs[d], g, raw, false));
      const int64_t size = values.size(static_cast<int64_t>(d));
      // Python indexing, as reads have it: -size <= i < size, negatives from the end.
      const torch::Tensor bad = live & ((index < -size) | (index >= size));
      if (bad.any().item<bool>()) {
        return OutOfRangeAt(s.exprs[d]->loc.known() ? s.exprs[d]->loc : s.loc,
                            absl::StrCat("buffer_grad: index ", d, " of ", s.name,
                                         " leaves [", -size, ", ", size, ") at a kept score"));
      }
      flat = flat + torch::remainder(index, size) * stride;
      stride *= size;
    }
    const torch::Tensor partial_f = partial.to(torch::kFloat);
    const torch::Tensor contrib = (ds->data * partial_f).masked_select(live);
    const torch::Tensor at = flat.masked_select(live);
    grad.view({-1}).index_add_(0, at, contrib);
    torch::Tensor& mass = buffer_masses_[s.name];
    if (!mass.defined()) mass = torch::zeros(values.sizes(), torch::kFloat);
    mass.view({-1}).index_add_(0, at, (ds->error_scale * partial_f.abs()).masked_select(live));
    return absl::OkStatus();
  }

  // dk: dK += scale * dS^T Q; dq: dQ[rows] += scale * dS K, dS in the input dtype.
  absl::Status ExecGradProduct(const Stmt& s, Group& g) {
    CUBRIDGE_ASSIGN_OR_RETURN(const float scale, AgreedScale(s, g));
    if (g.dry()) return absl::OkStatus();
    CUBRIDGE_ASSIGN_OR_RETURN(Tile * ds, GetTile(s, g, 0, Tile::kDS, "a softmax.grad result"));
    CUBRIDGE_ASSIGN_OR_RETURN(Tile * x, GetTile(s, g, 1, Tile::kLoad, "a loaded tile"));
    CUBRIDGE_RETURN_IF_ERROR(CheckGradTile(s, g.grad, *ds));
    const torch::Tensor ds_in = ds->data.to(dtype_).to(torch::kFloat);
    if (s.kind == StmtKind::kDK) {
      CUBRIDGE_RETURN_IF_ERROR(CheckSameRows(s, *ds, *x));
      g.grad.dk.baddbmm_(ds_in.transpose(1, 2), x->data, 1.0, scale);
      return absl::OkStatus();
    }
    const torch::Tensor dq = torch::bmm(ds_in, x->data).mul_(scale);
    // Members may share query rows (other KV blocks of one head): add one by one, as atomics do.
    const torch::Tensor rows = dq_.select(0, ds->batch).narrow(1, ds->row0, ds->rows());
    for (size_t i = 0; i < ds->heads.size(); ++i) rows.select(0, ds->heads[i]).add_(dq[i]);
    return absl::OkStatus();
  }

  absl::Status ExecGradEpilogue(const Stmt& s, Group& g) {
    const GradState& gs = g.grad;
    if (!gs.active) return InvalidAt(s.loc, "grad.epilogue needs grad.init before it");
    if (gs.rows == 0) return absl::OkStatus();
    for (const auto& [dst, src] : {std::pair{&dk_, &gs.dk}, std::pair{&dv_, &gs.dv}}) {
      const torch::Tensor rows = dst->select(0, gs.batch).narrow(1, gs.row0, gs.rows);
      // GQA: the group's query heads add into one KV head's rows.
      for (size_t i = 0; i < gs.heads.size(); ++i) rows.select(0, gs.heads[i]).add_((*src)[i]);
    }
    return absl::OkStatus();
  }

  const cuir::Program& program_;
  const cuir::AttentionConfig& config_;
  const spec::AttentionInputs& inputs_;
  const spec::BackwardInputs* backward_;  // null for a forward program
  InterpStats* stats_;

  torch::ScalarType dtype_ = torch::kBFloat16;
  torch::Tensor qf_, kf_, vf_, o_, lse_, neg_inf_, zero_;
  torch::Tensor dof_, lsef_, delta_, dq_, dk_, dv_;  // the backward's inputs and fp32 gradients
  torch::Tensor delta_abs_;  // sum |dO * O| per row: the scale of D's rounding error
  std::map<std::string, torch::Tensor> buffer_grads_, buffer_masses_;
  cuir::ScalarEnv globals_;
  absl::flat_hash_map<std::string, torch::Tensor> buffers_;
  const Stmt* grid_ = nullptr;
  std::vector<int64_t> grid_extents_;
  absl::flat_hash_map<std::string, BlockTable> tables_;
  absl::flat_hash_map<std::tuple<int64_t, int64_t, bool>, torch::Tensor> index_cache_;
  absl::flat_hash_map<const cuir::Expr*, std::vector<std::string>> vars_cache_;
  TensorEnv tenv_;
};

}  // namespace

absl::StatusOr<spec::AttentionOutputs> Interpret(const cuir::Program& program,
                                                 const cuir::AttentionConfig& config,
                                                 const spec::AttentionInputs& inputs,
                                                 InterpStats* stats) {
  torch::NoGradGuard no_grad;
  if (stats != nullptr) *stats = InterpStats{};
  try {
    return Interpreter(program, config, inputs, nullptr, stats).Run();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("interpreter: tensor operation failed: ",
                                            e.what_without_backtrace()));
  }
}

absl::StatusOr<spec::AttentionGrads> InterpretBackward(const cuir::Program& program,
                                                       const cuir::AttentionConfig& config,
                                                       const spec::AttentionInputs& inputs,
                                                       const spec::BackwardInputs& backward,
                                                       InterpStats* stats) {
  torch::NoGradGuard no_grad;
  if (stats != nullptr) *stats = InterpStats{};
  try {
    return Interpreter(program, config, inputs, &backward, stats).RunBackward();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("interpreter: tensor operation failed: ",
                                            e.what_without_backtrace()));
  }
}

}  // namespace cubridge::interp
