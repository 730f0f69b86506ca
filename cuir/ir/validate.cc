// cuir::Validate: the static rules of a CuIR program (docs/cuir.md, "Validity").
//
// The checks are organised like MLIR verifiers: one table (kStmtRules) says, for each statement
// kind, where it may appear and which member function verifies it, so a new construct adds one
// row and one function. Scoping is a stack of frames (top level, loop body); names may be
// neither redeclared nor shadowed, which keeps rewrites by transfer rules free of capture bugs.
#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "cuir/ir/eval.h"
#include "cuir/ir/program.h"
#include "cuir/ir/schedule.h"
#include "cuir/ir/syntax.h"

namespace cubridge::cuir {
namespace {

enum class SymKind {
  kBuiltin, kParam, kConst, kBuffer, kAxis, kLet, kLoopVar, kFullVar,
  kTile,    // a `load` result; Symbol::tensor says which tensor
  kScores,  // a `qk` result
  kProbs,   // a `softmax.online` result
  kTable,
  kDelta,       // a `delta` declaration (backward)
  kRecomputed,  // a `softmax.recompute` result
  kDP,          // a `dp` result
  kDS,          // a `softmax.grad` result
};

const char* Describe(SymKind k) {
  switch (k) {
    case SymKind::kBuiltin: return "a builtin symbol";
    case SymKind::kParam: return "a param";
    case SymKind::kConst: return "a const";
    case SymKind::kBuffer: return "a buffer";
    case SymKind::kAxis: return "a grid axis";
    case SymKind::kLet: return "a let";
    case SymKind::kLoopVar: return "the loop variable";
    case SymKind::kFullVar: return "the loop's full-block flag";
    case SymKind::kTile: return "a loaded tile";
    case SymKind::kScores: return "a qk result";
    case SymKind::kProbs: return "a softmax.online result";
    case SymKind::kTable: return "a table";
    case SymKind::kDelta: return "a delta (the rows' dO.O sums)";
    case SymKind::kRecomputed: return "a softmax.recompute result";
    case SymKind::kDP: return "a dp result";
    case SymKind::kDS: return "a softmax.grad result";
  }
  return "a symbol";
}

bool IsScalar(SymKind k) {
  switch (k) {
    case SymKind::kBuffer: case SymKind::kTile: case SymKind::kScores: case SymKind::kProbs:
    case SymKind::kTable: case SymKind::kDelta: case SymKind::kRecomputed: case SymKind::kDP:
    case SymKind::kDS:
      return false;
    default:
      return true;
  }
}

struct Symbol {
  Symbol() = default;
  Symbol(SymKind k, Type t, SourceLoc l = {}, std::string tensor_name = "",
         const Stmt* declaration = nullptr)
      : kind(k), type(t), loc(std::move(l)), tensor(std::move(tensor_name)), decl(declaration) {}

  SymKind kind = SymKind::kLet;
  Type type = Type::kInt;
  SourceLoc loc;
  std::string tensor;                // kTile: "q", "k" or "v"
  const Stmt* decl = nullptr;        // kTable: its declaration (the `per` axes)
  const Stmt* softmaxed = nullptr;   // kScores: the softmax.online / recompute that consumed it
  const Stmt* score_graded = nullptr;  // kDS: its score_grad
  const Stmt* multiplied = nullptr;    // kDS: its first dk / dq
};

// Names bound per element by mask / score_mod / table predicates; never declarable.
constexpr absl::string_view kElementNames[] = {"score", "q_idx", "kv_idx"};

bool IsElementName(absl::string_view n) {
  for (auto r : kElementNames) {
    if (r == n) return true;
  }
  return false;
}

// What an expression may see beyond the frames: element names, and for table predicates a
// restriction to static symbols plus the table's `per` axes.
struct ExprScope {
  std::vector<std::pair<std::string, Type>> element;
  const Stmt* table = nullptr;
};

const ExprScope kPlain{};
const ExprScope kMaskScope{{{"q_idx", Type::kInt}, {"kv_idx", Type::kInt}}};
const ExprScope kScoreModScope{
    {{"score", Type::kFloat}, {"q_idx", Type::kInt}, {"kv_idx", Type::kInt}}};

std::string TypeList(std::initializer_list<Type> types) {
  std::vector<std::string> names;
  for (Type t : types) names.push_back(TypeName(t));
  return absl::StrJoin(names, " or ");
}

bool Contains(const std::vector<std::string>& v, absl::string_view s) {
  for (const auto& x : v) {
    if (x == s) return true;
  }
  return false;
}

class Validator;
using Verifier = absl::Status (Validator::*)(const Stmt&);

struct StmtRule {
  StmtKind kind;
  bool decl;     // top level, before any body statement
  bool top;      // may appear at top level
  bool in_loop;  // may appear inside the KV loop
  Verifier verify;
};

class Validator {
 public:
  explicit Validator(const Program& p) : p_(p) {}
  absl::Status Run();

  absl::Status VerifyExpert(const Stmt& s);
  absl::Status VerifyParam(const Stmt& s) { return VerifyTypedDecl(s, SymKind::kParam); }
  absl::Status VerifyConst(const Stmt& s) { return VerifyTypedDecl(s, SymKind::kConst); }
  absl::Status VerifyLet(const Stmt& s) { return VerifyTypedDecl(s, SymKind::kLet); }
  absl::Status VerifyBuffer(const Stmt& s);
  absl::Status VerifyRole(const Stmt& s);
  absl::Status VerifyGrid(const Stmt& s);
  absl::Status VerifyTable(const Stmt& s);
  absl::Status VerifyLoad(const Stmt& s);
  absl::Status VerifySoftmaxInit(const Stmt& s);
  absl::Status VerifyFor(const Stmt& s);
  absl::Status VerifyQK(const Stmt& s);
  absl::Status VerifyScoreMod(const Stmt& s);
  absl::Status VerifyMask(const Stmt& s);
  absl::Status VerifySoftmaxOnline(const Stmt& s);
  absl::Status VerifyPV(const Stmt& s);
  absl::Status VerifyEpilogue(const Stmt& s);
  absl::Status VerifyDelta(const Stmt& s);
  absl::Status VerifyGradInit(const Stmt& s);
  absl::Status VerifySoftmaxRecompute(const Stmt& s);
  absl::Status VerifyDV(const Stmt& s);
  absl::Status VerifyDP(const Stmt& s);
  absl::Status VerifySoftmaxGrad(const Stmt& s);
  absl::Status VerifyScoreGrad(const Stmt& s);
  absl::Status VerifyBufferGrad(const Stmt& s);
  absl::Status VerifyDK(const Stmt& s) { return VerifyGradProduct(s, "q"); }
  absl::Status VerifyDQ(const Stmt& s) { return VerifyGradProduct(s, "k"); }
  absl::Status VerifyGradEpilogue(const Stmt& s);

 private:
  absl::Status Visit(const Stmt& s, bool in_loop);
  absl::Status CheckPlacement(const Stmt& s, const StmtRule& rule, bool in_loop);
  absl::Status CheckFinished() const;
  absl::Status CheckDirection(const Stmt& s) const;
  absl::Status VerifyGradProduct(const Stmt& s, absl::string_view tile);
  absl::Status CheckRoles() const;
  absl::Status VerifyTypedDecl(const Stmt& s, SymKind kind);
  absl::Status VerifyTableLoop(const Stmt& s);
  absl::Status VerifySink(const Stmt& s) const;
  absl::Status CheckSinkNames(const ExprPtr& e, const SourceLoc& outer) const;

  // The value of an int expression over literals and params, with the params' defaults (the
  // values they have when the kernel is compiled); nullopt when it needs anything else.
  std::optional<int64_t> ConstInt(const ExprPtr& e) const;

  // Scopes.
  const Symbol* Find(const std::string& name) const;
  Symbol* FindMutable(const std::string& name);
  absl::Status Declare(const std::string& name, Symbol sym);
  void CollectDeclarations(const std::vector<Stmt>& stmts);

  // Expressions.
  absl::Status CheckNames(const ExprPtr& e, const ExprScope& scope, const SourceLoc& outer) const;
  absl::Status CheckVisible(const ExprPtr& e, const ExprScope& scope, const SourceLoc& loc) const;
  TypeEnv MakeTypeEnv(const ExprScope& scope) const;
  absl::StatusOr<Type> TypeIn(const ExprPtr& e, const ExprScope& scope, const Stmt& s) const;
  absl::Status Expect(const ExprPtr& e, const ExprScope& scope, const Stmt& s,
                      std::initializer_list<Type> allowed, absl::string_view what,
                      absl::string_view hint = "") const;

  // Operands.
  absl::StatusOr<Symbol*> Operand(const Stmt& s, size_t i, SymKind want,
                                  absl::string_view tensor = "");
  absl::Status ScoresNotYetConsumed(const Stmt& s, const Symbol& scores) const;

  const Program& p_;
  std::vector<absl::flat_hash_map<std::string, Symbol>> frames_;
  absl::flat_hash_map<std::string, SourceLoc> all_decls_;  // anywhere in the program, for hints
  absl::flat_hash_map<std::string, SourceLoc> roles_;
  std::vector<const Stmt*> role_stmts_;  // in declaration order
  ScalarEnv params_;                     // params whose defaults fold to constants
  const Stmt* first_body_ = nullptr;
  const Stmt* expert_ = nullptr;
  const Stmt* grid_ = nullptr;
  const Stmt* softmax_init_ = nullptr;
  const Stmt* q_load_ = nullptr;
  const Stmt* loop_ = nullptr;
  const Stmt* epilogue_ = nullptr;
  // Backward programs: the K tile the program keeps, grad.init and grad.epilogue.
  bool backward_ = false;
  const Stmt* k_load_ = nullptr;
  const Stmt* grad_init_ = nullptr;
  const Stmt* grad_epilogue_ = nullptr;
};

constexpr StmtRule kStmtRules[] = {
    {StmtKind::kExpert, true, true, false, &Validator::VerifyExpert},
    {StmtKind::kParam, true, true, false, &Validator::VerifyParam},
    {StmtKind::kConst, true, true, false, &Validator::VerifyConst},
    {StmtKind::kBuffer, true, true, false, &Validator::VerifyBuffer},
    {StmtKind::kRole, true, true, false, &Validator::VerifyRole},
    {StmtKind::kGrid, true, true, false, &Validator::VerifyGrid},
    {StmtKind::kTable, true, true, false, &Validator::VerifyTable},
    {StmtKind::kLet, false, true, true, &Validator::VerifyLet},
    {StmtKind::kLoad, false, true, true, &Validator::VerifyLoad},
    {StmtKind::kSoftmaxInit, false, true, false, &Validator::VerifySoftmaxInit},
    {StmtKind::kFor, false, true, false, &Validator::VerifyFor},
    {StmtKind::kQK, false, false, true, &Validator::VerifyQK},
    {StmtKind::kScoreMod, false, false, true, &Validator::VerifyScoreMod},
    {StmtKind::kMask, false, false, true, &Validator::VerifyMask},
    {StmtKind::kSoftmaxOnline, false, false, true, &Validator::VerifySoftmaxOnline},
    {StmtKind::kPV, false, false, true, &Validator::VerifyPV},
    {StmtKind::kEpilogue, false, true, false, &Validator::VerifyEpilogue},
    {StmtKind::kDelta, true, true, false, &Validator::VerifyDelta},
    {StmtKind::kGradInit, false, true, false, &Validator::VerifyGradInit},
    {StmtKind::kSoftmaxRecompute, false, false, true, &Validator::VerifySoftmaxRecompute},
    {StmtKind::kDV, false, false, true, &Validator::VerifyDV},
    {StmtKind::kDP, false, false, true, &Validator::VerifyDP},
    {StmtKind::kSoftmaxGrad, false, false, true, &Validator::VerifySoftmaxGrad},
    {StmtKind::kScoreGrad, false, false, true, &Validator::VerifyScoreGrad},
    {StmtKind::kBufferGrad, false, false, true, &Validator::VerifyBufferGrad},
    {StmtKind::kDK, false, false, true, &Validator::VerifyDK},
    {StmtKind::kDQ, false, false, true, &Validator::VerifyDQ},
    {StmtKind::kGradEpilogue, false, true, false, &Validator::VerifyGradEpilogue},
};

const StmtRule* RuleFor(StmtKind kind) {
  for (const auto& r : kStmtRules) {
    if (r.kind == kind) return &r;
  }
  return nullptr;
}

absl::Status ErrorAt(const SourceLoc& loc, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat(loc.ToString(), ": ", msg));
}

// Every expression a statement holds (not those of its body).
template <typename Fn>
void ForEachExpr(const Stmt& s, const Fn& fn) {
  for (const ExprPtr* e : {&s.value, &s.aux, &s.pipeline}) fn(*e);
  for (const ExprPtr& e : s.exprs) fn(e);
  for (const BlockRange& r : s.ranges) {
    fn(r.lo);
    fn(r.hi);
  }
}

// Run before anything else walks the program: the checks, the printer and the evaluator recurse
// once per block and per expression level, and programs built in memory by the transfer rules
// get here without the parser's limits.
absl::Status CheckNesting(const Program& p) {
  std::vector<std::pair<const std::vector<Stmt>*, int>> blocks = {{&p.stmts, 1}};
  while (!blocks.empty()) {
    const auto [body, depth] = blocks.back();
    blocks.pop_back();
    for (const Stmt& s : *body) {
      absl::Status status;
      ForEachExpr(s, [&](const ExprPtr& e) {
        if (!status.ok() || e == nullptr) return;
        const ExprExtent extent = MeasureExpr(e, kMaxExprDepth, kNoNodeCap);
        if (extent.over == nullptr) return;
        status = ErrorAt(extent.over->loc.known() ? extent.over->loc : s.loc,
                         absl::StrCat("expression nested deeper than ", kMaxExprDepth,
                                      " levels in `", StmtKindName(s.kind), "`; bind parts with "
                                      "`let NAME: TYPE = ...` and use the names"));
      });
      if (!status.ok()) return status;
      if (s.kind != StmtKind::kFor) continue;  // the only statement with a block
      if (depth >= kMaxBlockDepth) {
        return ErrorAt(s.loc, absl::StrCat("blocks nested deeper than ", kMaxBlockDepth,
                                           " levels; a kernel has one KV loop, not nested ones"));
      }
      blocks.emplace_back(&s.body, depth + 1);
    }
  }
  return absl::OkStatus();
}

absl::Status MissingGrid(const SourceLoc& loc) {
  return ErrorAt(loc, "missing `grid` before the body; declare the launch grid, e.g. `grid "
                      "m_block < cdiv(seqlen_q, BLOCK_M), h < heads_q, b < batch`");
}

// ---------------------------------------------------------------------------------------------
// Program structure.

absl::Status Validator::Run() {
  if (p_.version != 1) {
    return ErrorAt(p_.loc, absl::StrCat("unsupported CuIR version ", p_.version,
                                        "; this build reads `cuir 1`"));
  }
  CUBRIDGE_RETURN_IF_ERROR(CheckNesting(p_));
  frames_.emplace_back();
  for (const auto& [name, type] : BuiltinSymbols()) {
    frames_.back()[name] = Symbol{SymKind::kBuiltin, type};
  }
  CollectDeclarations(p_.stmts);
  backward_ = IsBackward(p_);
  for (const Stmt& s : p_.stmts) CUBRIDGE_RETURN_IF_ERROR(Visit(s, /*in_loop=*/false));
  return CheckFinished();
}

absl::Status Validator::Visit(const Stmt& s, bool in_loop) {
  const StmtRule* rule = RuleFor(s.kind);
  if (rule == nullptr) return ErrorAt(s.loc, "unknown statement kind");
  CUBRIDGE_RETURN_IF_ERROR(CheckPlacement(s, *rule, in_loop));
  CUBRIDGE_RETURN_IF_ERROR(CheckDirection(s));
  return (this->*rule->verify)(s);
}

// A program computes the forward (softmax.init ... epilogue) or the backward (grad.init ...
// grad.epilogue) of attention; the two sets of tile statements do not mix.
absl::Status Validator::CheckDirection(const Stmt& s) const {
  if (!backward_) return absl::OkStatus();
  switch (s.kind) {
    case StmtKind::kSoftmaxInit: case StmtKind::kSoftmaxOnline: case StmtKind::kPV:
    case StmtKind::kEpilogue:
      return ErrorAt(s.loc, absl::StrCat(
                                "`", StmtKindName(s.kind), "` belongs to a forward program, but "
                                "this one is a backward program (it has backward statements "
                                "such as grad.init); a backward program recomputes P with "
                                "softmax.recompute and writes dK/dV with grad.epilogue"));
    default:
      return absl::OkStatus();
  }
}

absl::Status Validator::CheckPlacement(const Stmt& s, const StmtRule& rule, bool in_loop) {
  const std::string kw = absl::StrCat("`", StmtKindName(s.kind), "`");
  if (in_loop && !rule.in_loop) {
    absl::string_view where = rule.decl ? "declarations go at the top of the kernel"
                             : s.kind == StmtKind::kFor ? "loops do not nest"
                                                        : "move it out of the loop";
    return ErrorAt(s.loc, absl::StrCat(kw, " is not allowed inside the KV loop; ", where));
  }
  if (!in_loop && !rule.top) {
    return ErrorAt(s.loc, absl::StrCat(kw, " must be inside the KV loop (`for ... { ... }`)"));
  }
  if (rule.decl && first_body_ != nullptr) {
    return ErrorAt(s.loc, absl::StrCat("declaration ", kw, " must come before the body, which "
                                       "starts at ", first_body_->loc.ToString(),
                                       "; move it up"));
  }
  if (!rule.decl && first_body_ == nullptr) {
    first_body_ = &s;
    // The body runs per grid point, so its grid axes must exist by now.
    if (grid_ == nullptr) return MissingGrid(s.loc);
  }
  return absl::OkStatus();
}

absl::Status Validator::CheckFinished() const {
  if (grid_ == nullptr) return MissingGrid(p_.loc);
  CUBRIDGE_RETURN_IF_ERROR(CheckRoles());
  if (backward_) {
    if (loop_ == nullptr) {
      return ErrorAt(p_.loc, "missing the loop over query blocks; add `for m_block in [0, "
                             "cdiv(seqlen_q, BLOCK_M)) { ... }` after `grad.init`");
    }
    if (grad_epilogue_ == nullptr) {
      return ErrorAt(loop_->loc, "the backward loop is not followed by `grad.epilogue`; add it "
                                 "after the loop's closing `}` to write dK and dV");
    }
    return absl::OkStatus();
  }
  if (loop_ == nullptr) {
    return ErrorAt(p_.loc, "missing the KV loop; add `for n_block in [0, cdiv(seqlen_kv, "
                           "BLOCK_N)) { ... }` after `softmax.init`");
  }
  if (epilogue_ == nullptr) {
    return ErrorAt(loop_->loc, "the KV loop is not followed by `epilogue`; add `epilogue` after "
                               "the loop's closing `}` to write O and LSE");
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Scopes.

const Symbol* Validator::Find(const std::string& name) const {
  for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
    auto found = it->find(name);
    if (found != it->end()) return &found->second;
  }
  return nullptr;
}

Symbol* Validator::FindMutable(const std::string& name) {
  return const_cast<Symbol*>(static_cast<const Validator*>(this)->Find(name));
}

absl::Status Validator::Declare(const std::string& name, Symbol sym) {
  if (IsElementName(name)) {
    return ErrorAt(sym.loc, absl::StrCat("`", name, "` is reserved: mask, score_mod and table "
                                         "predicates bind it per element; pick another name"));
  }
  if (const Symbol* prev = Find(name)) {
    if (prev->kind == SymKind::kBuiltin) {
      return ErrorAt(sym.loc, absl::StrCat("`", name, "` is a builtin symbol bound from the "
                                           "job's config; pick another name"));
    }
    return ErrorAt(sym.loc, absl::StrCat("`", name, "` is already declared at ",
                                         prev->loc.ToString(), " as ", Describe(prev->kind),
                                         "; names may not be redeclared or shadowed, pick "
                                         "another name"));
  }
  frames_.back()[name] = std::move(sym);
  return absl::OkStatus();
}

void Validator::CollectDeclarations(const std::vector<Stmt>& stmts) {
  for (const Stmt& s : stmts) {
    const bool named = s.kind != StmtKind::kExpert && s.kind != StmtKind::kRole &&
                       !s.name.empty();
    if (named) all_decls_.try_emplace(s.name, s.loc);
    if (s.kind == StmtKind::kGrid) {
      for (const auto& axis : s.names) all_decls_.try_emplace(axis, s.loc);
    }
    if (s.kind == StmtKind::kFor) {
      all_decls_.try_emplace(s.name, s.loc);
      if (!s.full_var.empty()) all_decls_.try_emplace(s.full_var, s.loc);
      CollectDeclarations(s.body);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Expressions.

absl::Status Validator::CheckNames(const ExprPtr& e, const ExprScope& scope,
                                   const SourceLoc& outer) const {
  const SourceLoc& loc = e->loc.known() ? e->loc : outer;
  if (e->kind == ExprKind::kVar || e->kind == ExprKind::kIndex) {
    CUBRIDGE_RETURN_IF_ERROR(CheckVisible(e, scope, loc));
  }
  for (const auto& a : e->args) CUBRIDGE_RETURN_IF_ERROR(CheckNames(a, scope, loc));
  return absl::OkStatus();
}

// OK when e (a name or a buffer element) refers to something visible and of the right sort.
absl::Status Validator::CheckVisible(const ExprPtr& e, const ExprScope& scope,
                                   const SourceLoc& loc) const {
  const std::string& n = e->name;
  const bool indexed = e->kind == ExprKind::kIndex;
  if (!indexed) {
    for (const auto& [name, type] : scope.element) {
      if (name == n) return absl::OkStatus();
    }
  }
  const Symbol* sym = Find(n);
  if (sym == nullptr) {
    if (!indexed && IsElementName(n)) {
      return ErrorAt(loc, absl::StrCat("`", n, "` is only defined in ",
                                       n == "score" ? "score_mod expressions"
                                                    : "mask, score_mod and table predicates"));
    }
    auto later = all_decls_.find(n);
    if (later != all_decls_.end()) {
      return ErrorAt(loc, absl::StrCat("`", n, "` is not declared here: its declaration at ",
                                       later->second.ToString(), " comes later or is inside "
                                       "the loop; declare it before this use"));
    }
    if (indexed) {
      return ErrorAt(loc, absl::StrCat("undeclared buffer `", n, "`; declare it at the top with "
                                       "`buffer ", n, ": DTYPE[EXTENT, ...]`, e.g. `buffer ", n,
                                       ": int32[seqlen_q]`"));
    }
    return ErrorAt(loc, absl::StrCat("undeclared name `", n, "`; declare it before use, e.g. "
                                     "`const ", n, ": int = ...` for a spec parameter or `let ",
                                     n, ": int = ...`"));
  }
  if (indexed && sym->kind != SymKind::kBuffer) {
    return ErrorAt(loc, absl::StrCat("`", n, "` is ", Describe(sym->kind),
                                     ", not a buffer; only buffers can be indexed"));
  }
  if (indexed && sym->decl != nullptr && e->args.size() != sym->decl->exprs.size()) {
    const size_t rank = sym->decl->exprs.size();
    return ErrorAt(loc, absl::StrCat("buffer `", n, "` has ", rank, " dimension",
                                     rank == 1 ? "" : "s", " (declared at ", sym->loc.ToString(),
                                     ") but is indexed with ", e->args.size(), " index",
                                     e->args.size() == 1 ? "" : "es", ": `", PrintExpr(e), "`"));
  }
  if (!indexed && !IsScalar(sym->kind)) {
    std::string hint = sym->kind == SymKind::kBuffer ? absl::StrCat("; index it: `", n, "[i]`")
                                                     : "; expressions take scalars only";
    return ErrorAt(loc, absl::StrCat("`", n, "` is ", Describe(sym->kind), " (declared at ",
                                     sym->loc.ToString(), "), not a scalar", hint));
  }
  if (scope.table == nullptr) return absl::OkStatus();
  switch (sym->kind) {
    case SymKind::kBuiltin: case SymKind::kParam: case SymKind::kConst: case SymKind::kBuffer:
      return absl::OkStatus();
    case SymKind::kAxis:
      if (Contains(scope.table->names, n)) return absl::OkStatus();
      return ErrorAt(loc, absl::StrCat("table `", scope.table->name, "` uses grid axis `", n,
                                       "`, but is not computed per `", n, "`; add `per ", n,
                                       "` to its declaration"));
    default:
      return ErrorAt(loc, absl::StrCat("`", n, "` is ", Describe(sym->kind),
                                       ", not visible in a table predicate; it may use consts, "
                                       "params, builtins, buffers, q_idx, kv_idx and its `per` "
                                       "axes"));
  }
}

TypeEnv Validator::MakeTypeEnv(const ExprScope& scope) const {
  TypeEnv env;
  for (const auto& frame : frames_) {
    for (const auto& [name, sym] : frame) {
      if (sym.kind == SymKind::kBuffer) env.buffers[name] = sym.type;
      if (IsScalar(sym.kind)) env.vars[name] = sym.type;
    }
  }
  for (const auto& [name, type] : scope.element) env.vars[name] = type;
  return env;
}

absl::StatusOr<Type> Validator::TypeIn(const ExprPtr& e, const ExprScope& scope,
                                       const Stmt& s) const {
  if (!e) return ErrorAt(s.loc, absl::StrCat("`", StmtKindName(s.kind), "` lacks an expression"));
  CUBRIDGE_RETURN_IF_ERROR(CheckNames(e, scope, s.loc));
  auto t = TypeOf(e, MakeTypeEnv(scope));
  // Expressions built by rewrites may carry no position: fall back to the statement's.
  if (!t.ok() && !e->loc.known()) return ErrorAt(s.loc, t.status().message());
  return t;
}

absl::Status Validator::Expect(const ExprPtr& e, const ExprScope& scope, const Stmt& s,
                               std::initializer_list<Type> allowed, absl::string_view what,
                               absl::string_view hint) const {
  CUBRIDGE_ASSIGN_OR_RETURN(Type t, TypeIn(e, scope, s));
  for (Type a : allowed) {
    if (a == t) return absl::OkStatus();
  }
  const SourceLoc& loc = e->loc.known() ? e->loc : s.loc;
  return ErrorAt(loc, absl::StrCat(what, " must be ", TypeList(allowed), ", but `",
                                   PrintExpr(e), "` is ", TypeName(t), hint));
}

// ---------------------------------------------------------------------------------------------
// Operands.

absl::StatusOr<Symbol*> Validator::Operand(const Stmt& s, size_t i, SymKind want,
                                           absl::string_view tensor) {
  const std::string kw = absl::StrCat("`", StmtKindName(s.kind), "`");
  std::string wanted = tensor.empty() ? Describe(want)
                                      : absl::StrCat("a tile loaded from ", tensor);
  if (i >= s.operands.size()) {
    return ErrorAt(s.loc, absl::StrCat(kw, " is missing operand ", i + 1, " (", wanted, ")"));
  }
  const std::string& n = s.operands[i];
  Symbol* sym = FindMutable(n);
  if (sym == nullptr) {
    return ErrorAt(s.loc, absl::StrCat(kw, " operand `", n, "` is not declared; it must be ",
                                       wanted, " defined earlier"));
  }
  if (sym->kind == want && (tensor.empty() || sym->tensor == tensor)) return sym;
  std::string got = sym->kind == SymKind::kTile
                        ? absl::StrCat("a tile loaded from ", sym->tensor)
                        : std::string(Describe(sym->kind));
  std::string hint;
  if (s.kind == StmtKind::kQK && sym->kind == SymKind::kTile) {
    hint = "; qk takes the Q tile first, then the K tile: `S = qk Q, K scale ...`";
  }
  return ErrorAt(s.loc, absl::StrCat(kw, " operand ", i + 1, " must be ", wanted, ", but `", n,
                                     "` is ", got, " (declared at ", sym->loc.ToString(), ")",
                                     hint));
}

absl::Status Validator::ScoresNotYetConsumed(const Stmt& s, const Symbol& scores) const {
  if (scores.softmaxed == nullptr) return absl::OkStatus();
  return ErrorAt(s.loc, absl::StrCat("`", StmtKindName(s.kind), "` on `", s.operands[0],
                                     "` after its ", StmtKindName(scores.softmaxed->kind), " at ",
                                     scores.softmaxed->loc.ToString(),
                                     " has no effect; move it before the softmax"));
}

// ---------------------------------------------------------------------------------------------
// Per-statement verifiers.

absl::Status Validator::VerifyExpert(const Stmt& s) {
  if (expert_ != nullptr) {
    return ErrorAt(s.loc, absl::StrCat("second `expert` (the first is at ",
                                       expert_->loc.ToString(),
                                       "); a program is lifted from one expert kernel"));
  }
  expert_ = &s;
  return absl::OkStatus();
}

absl::Status Validator::VerifyTypedDecl(const Stmt& s, SymKind kind) {
  CUBRIDGE_ASSIGN_OR_RETURN(Type t, TypeIn(s.value, kPlain, s));
  if (t != s.type && !(s.type == Type::kFloat && t == Type::kInt)) {
    const SourceLoc& loc = s.value->loc.known() ? s.value->loc : s.loc;
    return ErrorAt(loc, absl::StrCat("`", s.name, "` is declared ", TypeName(s.type),
                                     " but its value `", PrintExpr(s.value), "` is ", TypeName(t),
                                     "; change the declared type to ", TypeName(t),
                                     " or convert the value"));
  }
  CUBRIDGE_RETURN_IF_ERROR(Declare(s.name, Symbol{kind, s.type, s.loc}));
  if (kind == SymKind::kParam) {
    // Params are fixed when the kernel is compiled: a default over literals and earlier params
    // is a constant the role and pipeline checks can use. Anything else (a builtin) is not.
    if (auto v = EvalScalar(s.value, params_); v.ok()) {
      if (s.type == Type::kFloat && std::holds_alternative<int64_t>(*v)) {
        *v = static_cast<double>(std::get<int64_t>(*v));
      }
      params_.vars[s.name] = *v;
    }
  }
  return absl::OkStatus();
}

std::optional<int64_t> Validator::ConstInt(const ExprPtr& e) const {
  if (!e) return std::nullopt;
  auto v = EvalScalar(e, params_);
  if (!v.ok() || !std::holds_alternative<int64_t>(*v)) return std::nullopt;
  return std::get<int64_t>(*v);
}

absl::Status Validator::VerifyBuffer(const Stmt& s) {
  if (s.type != ElementType(s.dtype)) {
    return ErrorAt(s.loc, absl::StrCat("buffer `", s.name, "` of dtype ", TensorDTypeName(s.dtype),
                                       " has element type ", TypeName(s.type), ", expected ",
                                       TypeName(ElementType(s.dtype))));
  }
  if (s.exprs.size() > kMaxBufferRank) {
    return ErrorAt(s.loc, absl::StrCat("buffer `", s.name, "` has ", s.exprs.size(),
                                       " dimensions; buffers have at most ", kMaxBufferRank));
  }
  for (const ExprPtr& extent : s.exprs) {
    if (extent == nullptr) continue;  // `?`
    CUBRIDGE_RETURN_IF_ERROR(Expect(extent, kPlain, s, {Type::kInt}, "a buffer extent"));
  }
  return Declare(s.name, Symbol{SymKind::kBuffer, s.type, s.loc, "", &s});
}

// ----- role NAME warps EXPR [regs EXPR] -----------------------------------------------------
// A warp role of the program (docs/cuir.md, "role"). Role names are unique, so there is at most
// one `producer`; it needs another role to do the math (CheckRoles). Warp counts that fold to
// constants are positive; a register budget follows Hopper's `setmaxnreg`: a multiple of 8 in
// [24, 256]; and the roles' budgets together fit the SM's register file (CheckRoles).

constexpr absl::string_view kProducerRole = "producer";
constexpr int64_t kMinRegs = 24, kMaxRegs = 256, kRegsGranule = 8;
constexpr int64_t kRegisterFile = 65536;  // 32-bit registers of one SM, all a CTA may use
constexpr int64_t kThreadsPerWarp = 32;

// "`WARPS - 4` = 0" for a folded expression, "`0`" for a literal.
std::string Folded(const ExprPtr& e, int64_t v) {
  const std::string text = PrintExpr(e);
  return text == absl::StrCat(v) ? absl::StrCat("`", text, "`")
                                 : absl::StrCat("`", text, "` = ", v);
}

absl::Status Validator::VerifyRole(const Stmt& s) {
  auto [it, inserted] = roles_.try_emplace(s.name, s.loc);
  if (!inserted) {
    absl::string_view hint = s.name == kProducerRole
                                 ? "; a program has at most one producer role, give it all the "
                                   "loading warps"
                                 : "; pick another name";
    return ErrorAt(s.loc, absl::StrCat("role `", s.name, "` is already declared at ",
                                       it->second.ToString(), hint));
  }
  role_stmts_.push_back(&s);
  CUBRIDGE_RETURN_IF_ERROR(Expect(s.value, kPlain, s, {Type::kInt}, "a role's warp count"));
  if (std::optional<int64_t> warps = ConstInt(s.value); warps && *warps <= 0) {
    return ErrorAt(s.value->loc.known() ? s.value->loc : s.loc,
                   absl::StrCat("role `", s.name, "` has ", Folded(s.value, *warps),
                                " warps with the param defaults; a role needs at least one "
                                "warp: raise its warp count or drop the role"));
  }
  if (!s.aux) return absl::OkStatus();
  CUBRIDGE_RETURN_IF_ERROR(Expect(s.aux, kPlain, s, {Type::kInt}, "a role's registers"));
  std::optional<int64_t> regs = ConstInt(s.aux);
  if (regs && (*regs < kMinRegs || *regs > kMaxRegs || *regs % kRegsGranule != 0)) {
    const int64_t nearest =
        std::clamp(*regs / kRegsGranule * kRegsGranule, kMinRegs, kMaxRegs);
    return ErrorAt(s.aux->loc.known() ? s.aux->loc : s.loc,
                   absl::StrCat("role `", s.name, "` asks for ", Folded(s.aux, *regs),
                                " registers per thread; a register budget (Hopper's setmaxnreg) "
                                "is a multiple of ", kRegsGranule, " in [", kMinRegs, ", ",
                                kMaxRegs, "], e.g. `regs ", nearest, "`"));
  }
  return absl::OkStatus();
}

// The rules over all roles, once they are all declared.
absl::Status Validator::CheckRoles() const {
  for (const Stmt* role : role_stmts_) {
    if (role->name == kProducerRole && role_stmts_.size() == 1) {
      return ErrorAt(role->loc, "role `producer` is the only role; a producer only feeds the "
                                "pipeline, so declare the role that does the math too, e.g. "
                                "`role consumer warps WARPS - 4 regs 240`, or rename the role "
                                "(e.g. `role compute`) if it does everything");
    }
  }
  // The register file: only when every role states a constant budget and warp count.
  int64_t total = 0;
  std::vector<std::string> terms;
  for (const Stmt* role : role_stmts_) {
    std::optional<int64_t> warps = ConstInt(role->value), regs = ConstInt(role->aux);
    if (!warps || !regs) return absl::OkStatus();
    // Warps beyond the register file cannot fit even at 1 register: cap to avoid overflow.
    total += std::min(*warps, kRegisterFile) * kThreadsPerWarp * *regs;
    terms.push_back(absl::StrCat(role->name, " ", *warps, " warps x ", kThreadsPerWarp,
                                 " x ", *regs, " regs"));
  }
  if (total <= kRegisterFile) return absl::OkStatus();
  return ErrorAt(role_stmts_.front()->loc,
                 absl::StrCat("the roles need ", absl::StrJoin(terms, " + "), " = ", total,
                              " registers with the param defaults, more than the ",
                              kRegisterFile, " of an SM's register file; lower a role's "
                              "`regs` or its warps"));
}

absl::Status Validator::VerifyGrid(const Stmt& s) {
  if (grid_ != nullptr) {
    return ErrorAt(s.loc, absl::StrCat("second `grid` (the first is at ", grid_->loc.ToString(),
                                       "); a kernel has one launch grid, list all axes in it"));
  }
  grid_ = &s;
  if (s.names.size() != s.exprs.size() || s.names.empty()) {
    return ErrorAt(s.loc, "a grid needs one extent per axis: `grid AXIS < EXTENT, ...`");
  }
  // The schedule orders the launch (cuir/ir/schedule.h); only known orders have a meaning.
  if (FindGridSchedule(s.attr) == nullptr) {
    return ErrorAt(s.loc, absl::StrCat("unknown grid schedule `", s.attr, "`; the known "
                                       "schedules are ", DescribeGridSchedules(), "; drop `schedule ",
                                       s.attr, "` for the default linear order"));
  }
  // Extents are checked before the axes exist: an extent may not depend on another axis.
  for (size_t i = 0; i < s.names.size(); ++i) {
    CUBRIDGE_RETURN_IF_ERROR(Expect(s.exprs[i], kPlain, s, {Type::kInt},
                                absl::StrCat("the extent of grid axis `", s.names[i], "`")));
  }
  for (const auto& axis : s.names) {
    CUBRIDGE_RETURN_IF_ERROR(Declare(axis, Symbol{SymKind::kAxis, Type::kInt, s.loc}));
  }
  return absl::OkStatus();
}

absl::Status Validator::VerifyTable(const Stmt& s) {
  absl::flat_hash_set<std::string> seen;
  for (const auto& axis : s.names) {
    if (grid_ == nullptr) {
      return ErrorAt(s.loc, absl::StrCat("table `", s.name, "` is per `", axis,
                                         "`, but no grid is declared yet; declare the grid "
                                         "before the table"));
    }
    if (!Contains(grid_->names, axis)) {
      return ErrorAt(s.loc, absl::StrCat("`", axis, "` in the `per` list of table `", s.name,
                                         "` is not a grid axis; the grid's axes are ",
                                         absl::StrJoin(grid_->names, ", ")));
    }
    if (!seen.insert(axis).second) {
      return ErrorAt(s.loc, absl::StrCat("`", axis, "` appears twice in the `per` list of table `",
                                         s.name, "`"));
    }
  }
  CUBRIDGE_RETURN_IF_ERROR(Declare(s.name, Symbol{SymKind::kTable, Type::kBool, s.loc, "", &s}));
  ExprScope scope = kMaskScope;
  scope.table = &s;
  return Expect(s.value, scope, s, {Type::kBool}, "a table predicate",
                " (write a condition on q_idx and kv_idx, e.g. `q_idx >= kv_idx`)");
}

absl::Status Validator::VerifyLoad(const Stmt& s) {
  const std::string tensor = s.operands.empty() ? "" : s.operands[0];
  if (tensor != "q" && tensor != "k" && tensor != "v" && tensor != "do") {
    return ErrorAt(s.loc, absl::StrCat("`load` reads q, k, v or do, not `", tensor,
                                       "`: `load NAME = k[b, head, lo:hi]`"));
  }
  if (tensor == "do" && !backward_) {
    return ErrorAt(s.loc, "`load ... = do[...]` reads the output's gradient, which only a "
                          "backward program (with grad.init) has");
  }
  constexpr absl::string_view kWhat[] = {"the batch index", "the head index", "the first row",
                                        "the row end"};
  if (s.exprs.size() != 4) {
    return ErrorAt(s.loc, "`load` takes [batch, head, lo:hi]");
  }
  for (size_t i = 0; i < 4; ++i) {
    CUBRIDGE_RETURN_IF_ERROR(Expect(s.exprs[i], kPlain, s, {Type::kInt},
                                absl::StrCat(kWhat[i], " of a load")));
  }
  if (tensor == "q" && frames_.size() == 1 && q_load_ == nullptr) q_load_ = &s;
  if (tensor == "k" && frames_.size() == 1 && k_load_ == nullptr) k_load_ = &s;
  return Declare(s.name, Symbol{SymKind::kTile, Type::kFloat, s.loc, tensor});
}

absl::Status Validator::VerifySoftmaxInit(const Stmt& s) {
  if (softmax_init_ != nullptr) {
    return ErrorAt(s.loc, absl::StrCat("second `softmax.init` (the first is at ",
                                       softmax_init_->loc.ToString(), "); remove one"));
  }
  softmax_init_ = &s;
  return absl::OkStatus();
}

absl::Status Validator::VerifyFor(const Stmt& s) {
  if (loop_ != nullptr) {
    return ErrorAt(s.loc, absl::StrCat("second KV loop (the first is at ", loop_->loc.ToString(),
                                       "); a program has one top-level `for`"));
  }
  loop_ = &s;
  if (backward_) {
    if (grad_init_ == nullptr) {
      return ErrorAt(s.loc, "`grad.init` must come before the backward loop over query blocks");
    }
  } else if (q_load_ == nullptr) {
    return ErrorAt(s.loc, "the KV loop needs the Q tile loaded before it, e.g. "
                          "`load Q = q[b, h, q_lo:q_hi]`");
  } else if (softmax_init_ == nullptr) {
    return ErrorAt(s.loc, "`softmax.init` must come before the KV loop");
  }
  if (s.table.empty()) {
    if (s.ranges.empty()) return ErrorAt(s.loc, "the loop has no range: `for VAR in [LO, HI)`");
    for (const auto& r : s.ranges) {
      CUBRIDGE_RETURN_IF_ERROR(Expect(r.lo, kPlain, s, {Type::kInt}, "a loop bound"));
      CUBRIDGE_RETURN_IF_ERROR(Expect(r.hi, kPlain, s, {Type::kInt}, "a loop bound"));
    }
  } else {
    CUBRIDGE_RETURN_IF_ERROR(VerifyTableLoop(s));
  }
  if (s.pipeline) {
    CUBRIDGE_RETURN_IF_ERROR(Expect(s.pipeline, kPlain, s, {Type::kInt}, "the pipeline depth"));
    if (std::optional<int64_t> stages = ConstInt(s.pipeline); stages && *stages < 1) {
      return ErrorAt(s.pipeline->loc.known() ? s.pipeline->loc : s.loc,
                     absl::StrCat("the pipeline depth ", Folded(s.pipeline, *stages),
                                  " with the param defaults must be at least 1: it counts the "
                                  "KV blocks in flight (drop the clause for a single stage)"));
    }
  }
  // A split loop's parts are merged as online-softmax states; without softmax.online there are
  // none to merge.
  if (s.split && std::none_of(s.body.begin(), s.body.end(), [](const Stmt& b) {
        return b.kind == StmtKind::kSoftmaxOnline;
      })) {
    return ErrorAt(s.loc, "`split` lets the KV loop run as parts whose online-softmax states are "
                          "merged, but this loop has no `softmax.online` in its body; add one "
                          "(e.g. `P = softmax.online S`) or drop `split`");
  }
  frames_.emplace_back();
  absl::Status status = Declare(s.name, Symbol{SymKind::kLoopVar, Type::kInt, s.loc});
  if (status.ok() && !s.full_var.empty()) {
    status = Declare(s.full_var, Symbol{SymKind::kFullVar, Type::kBool, s.loc});
  }
  for (size_t i = 0; status.ok() && i < s.body.size(); ++i) status = Visit(s.body[i], true);
  frames_.pop_back();
  return status;
}

absl::Status Validator::VerifyTableLoop(const Stmt& s) {
  const Symbol* table = Find(s.table);
  if (table == nullptr) {
    return ErrorAt(s.loc, absl::StrCat("undeclared table `", s.table, "`; declare it at the top "
                                       "with `table ", s.table, " = blocks(PREDICATE)`"));
  }
  if (table->kind != SymKind::kTable) {
    return ErrorAt(s.loc, absl::StrCat("`", s.table, "` is ", Describe(table->kind),
                                       ", not a table"));
  }
  const std::vector<std::string>& per = table->decl->names;
  if (s.exprs.size() != per.size() + 1) {
    std::vector<std::string> want = per;
    const bool transposed = !table->decl->attr.empty();
    want.push_back(transposed ? "n_block" : "m_block");
    return ErrorAt(s.loc, absl::StrCat("table `", s.table, "` is indexed by its `per` axes and "
                                       "the ", transposed ? "KV" : "query", " block: `", s.table,
                                       "[",
                                       absl::StrJoin(want, ", "), "]` (", want.size(),
                                       " indices), but the loop gives ", s.exprs.size()));
  }
  for (const auto& index : s.exprs) {
    CUBRIDGE_RETURN_IF_ERROR(Expect(index, kPlain, s, {Type::kInt}, "a table row index"));
  }
  return absl::OkStatus();
}

absl::Status Validator::VerifyQK(const Stmt& s) {
  CUBRIDGE_RETURN_IF_ERROR(Operand(s, 0, SymKind::kTile, "q").status());
  CUBRIDGE_RETURN_IF_ERROR(Operand(s, 1, SymKind::kTile, "k").status());
  CUBRIDGE_RETURN_IF_ERROR(Expect(s.value, kPlain, s, {Type::kInt, Type::kFloat}, "the qk scale"));
  return Declare(s.name, Symbol{SymKind::kScores, Type::kFloat, s.loc});
}

absl::Status Validator::VerifyScoreMod(const Stmt& s) {
  CUBRIDGE_ASSIGN_OR_RETURN(Symbol * scores, Operand(s, 0, SymKind::kScores));
  CUBRIDGE_RETURN_IF_ERROR(ScoresNotYetConsumed(s, *scores));
  return Expect(s.value, kScoreModScope, s, {Type::kInt, Type::kFloat}, "a score_mod value",
                " (a score_mod computes the new score; use `mask` for conditions)");
}

absl::Status Validator::VerifyMask(const Stmt& s) {
  CUBRIDGE_ASSIGN_OR_RETURN(Symbol * scores, Operand(s, 0, SymKind::kScores));
  CUBRIDGE_RETURN_IF_ERROR(ScoresNotYetConsumed(s, *scores));
  CUBRIDGE_RETURN_IF_ERROR(Expect(s.value, kMaskScope, s, {Type::kBool}, "a mask predicate",
                              " (write the condition that keeps a score, e.g. "
                              "`q_idx >= kv_idx`)"));
  if (!s.aux) return absl::OkStatus();
  return Expect(s.aux, kPlain, s, {Type::kBool}, "a mask's `when` condition");
}

absl::Status Validator::VerifySoftmaxRecompute(const Stmt& s) {
  CUBRIDGE_ASSIGN_OR_RETURN(Symbol * scores, Operand(s, 0, SymKind::kScores));
  scores->softmaxed = &s;  // before Declare, which may rehash the frame holding `scores`
  return Declare(s.name, Symbol{SymKind::kRecomputed, Type::kFloat, s.loc});
}

absl::Status Validator::VerifySoftmaxOnline(const Stmt& s) {
  CUBRIDGE_ASSIGN_OR_RETURN(Symbol * scores, Operand(s, 0, SymKind::kScores));
  // Before Declare, which may rehash the frame that holds `scores` (found by fuzz_cuir_roundtrip).
  scores->softmaxed = &s;
  return Declare(s.name, Symbol{SymKind::kProbs, Type::kFloat, s.loc});
}

absl::Status Validator::VerifyPV(const Stmt& s) {
  CUBRIDGE_RETURN_IF_ERROR(Operand(s, 0, SymKind::kProbs).status());
  return Operand(s, 1, SymKind::kTile, "v").status();
}

// ---------------------------------------------------------------------------------------------
// Backward statements.

absl::Status Validator::VerifyDelta(const Stmt& s) {
  return Declare(s.name, Symbol{SymKind::kDelta, Type::kFloat, s.loc});
}

absl::Status Validator::VerifyGradInit(const Stmt& s) {
  if (grad_init_ != nullptr) {
    return ErrorAt(s.loc, absl::StrCat("second `grad.init` (the first is at ",
                                       grad_init_->loc.ToString(), "); remove one"));
  }
  if (k_load_ == nullptr) {
    return ErrorAt(s.loc, "`grad.init` starts dK and dV for the program's K/V tile: load it "
                          "before, e.g. `load K = k[b, kv_h, kv_lo:kv_hi]`");
  }
  grad_init_ = &s;
  return absl::OkStatus();
}

absl::Status Validator::VerifyDV(const Stmt& s) {
  CUBRIDGE_RETURN_IF_ERROR(Operand(s, 0, SymKind::kRecomputed).status());
  return Operand(s, 1, SymKind::kTile, "do").status();
}

absl::Status Validator::VerifyDP(const Stmt& s) {
  CUBRIDGE_RETURN_IF_ERROR(Operand(s, 0, SymKind::kTile, "do").status());
  CUBRIDGE_RETURN_IF_ERROR(Operand(s, 1, SymKind::kTile, "v").status());
  return Declare(s.name, Symbol{SymKind::kDP, Type::kFloat, s.loc});
}

absl::Status Validator::VerifySoftmaxGrad(const Stmt& s) {
  CUBRIDGE_RETURN_IF_ERROR(Operand(s, 0, SymKind::kRecomputed).status());
  CUBRIDGE_RETURN_IF_ERROR(Operand(s, 1, SymKind::kDP).status());
  CUBRIDGE_RETURN_IF_ERROR(Operand(s, 2, SymKind::kDelta).status());
  return Declare(s.name, Symbol{SymKind::kDS, Type::kFloat, s.loc});
}

// The chain rule through the score_mods: dS must reach dk / dq multiplied by the derivative,
// and buffer gradients take dS as it was before (the gradient with respect to the modified score).
absl::Status Validator::VerifyScoreGrad(const Stmt& s) {
  CUBRIDGE_ASSIGN_OR_RETURN(Symbol * ds, Operand(s, 0, SymKind::kDS));
  if (ds->score_graded != nullptr) {
    return ErrorAt(s.loc, absl::StrCat("second `score_grad` of `", s.operands[0], "` (the first "
                                       "is at ", ds->score_graded->loc.ToString(), "); one "
                                       "score_grad carries the derivative of all score_mods"));
  }
  if (ds->multiplied != nullptr) {
    return ErrorAt(s.loc, absl::StrCat("`score_grad` of `", s.operands[0], "` after its `",
                                       StmtKindName(ds->multiplied->kind), "` at ",
                                       ds->multiplied->loc.ToString(), "; move it before, so "
                                       "that dK and dQ get the derivative"));
  }
  ds->score_graded = &s;
  return Expect(s.value, kScoreModScope, s, {Type::kInt, Type::kFloat}, "a score_grad value",
                " (d score_mod / d score)");
}

absl::Status Validator::VerifyBufferGrad(const Stmt& s) {
  CUBRIDGE_ASSIGN_OR_RETURN(Symbol * ds, Operand(s, 0, SymKind::kDS));
  if (ds->score_graded != nullptr) {
    return ErrorAt(s.loc, absl::StrCat("`buffer_grad` after the `score_grad` of `", s.operands[0],
                                       "` at ", ds->score_graded->loc.ToString(), "; move it "
                                       "before: a buffer's gradient takes dS with respect to "
                                       "the modified score"));
  }
  const Symbol* buffer = Find(s.name);
  if (buffer == nullptr || buffer->kind != SymKind::kBuffer) {
    return ErrorAt(s.loc, absl::StrCat("`buffer_grad` of `", s.name, "`, which is ",
                                       buffer == nullptr ? "not declared"
                                                         : Describe(buffer->kind),
                                       "; it accumulates the gradient of a declared float "
                                       "buffer"));
  }
  if (buffer->type != Type::kFloat) {
    return ErrorAt(s.loc, absl::StrCat("buffer `", s.name, "` holds ", TypeName(buffer->type),
                                       "s, which have no gradient; only float buffers do"));
  }
  if (s.exprs.size() != buffer->decl->exprs.size()) {
    return ErrorAt(s.loc, absl::StrCat("buffer `", s.name, "` has ", buffer->decl->exprs.size(),
                                       " dimensions but `buffer_grad` gives ", s.exprs.size(),
                                       " indices"));
  }
  for (const ExprPtr& index : s.exprs) {
    CUBRIDGE_RETURN_IF_ERROR(Expect(index, kMaskScope, s, {Type::kInt}, "a buffer_grad index"));
  }
  return Expect(s.value, kScoreModScope, s, {Type::kInt, Type::kFloat}, "a buffer_grad partial",
                " (d score_mod / d the buffer element)");
}

absl::Status Validator::VerifyGradProduct(const Stmt& s, absl::string_view tile) {
  CUBRIDGE_ASSIGN_OR_RETURN(Symbol * ds, Operand(s, 0, SymKind::kDS));
  if (ds->multiplied == nullptr) ds->multiplied = &s;
  CUBRIDGE_RETURN_IF_ERROR(Operand(s, 1, SymKind::kTile, tile).status());
  return Expect(s.value, kPlain, s, {Type::kInt, Type::kFloat},
                absl::StrCat("the ", StmtKindName(s.kind), " scale"));
}

absl::Status Validator::VerifyGradEpilogue(const Stmt& s) {
  if (grad_epilogue_ != nullptr) {
    return ErrorAt(s.loc, absl::StrCat("second `grad.epilogue` (the first is at ",
                                       grad_epilogue_->loc.ToString(), "); remove one"));
  }
  if (loop_ == nullptr) return ErrorAt(s.loc, "`grad.epilogue` must come after the loop");
  grad_epilogue_ = &s;
  return absl::OkStatus();
}

absl::Status Validator::VerifyEpilogue(const Stmt& s) {
  if (epilogue_ != nullptr) {
    return ErrorAt(s.loc, absl::StrCat("second `epilogue` (the first is at ",
                                       epilogue_->loc.ToString(), "); remove one"));
  }
  if (loop_ == nullptr) {
    return ErrorAt(s.loc, "`epilogue` must come after the KV loop");
  }
  epilogue_ = &s;
  return s.value ? VerifySink(s) : absl::OkStatus();
}

// The sink is one logit per row, folded in after the loop: it may read what a program knows
// before its first block (builtins, params, consts, grid axes, top-level lets), not per-element
// names and not buffers, which the expert kernels read only inside the loop.
absl::Status Validator::VerifySink(const Stmt& s) const {
  CUBRIDGE_RETURN_IF_ERROR(CheckSinkNames(s.value, s.loc));
  return Expect(s.value, kPlain, s, {Type::kInt, Type::kFloat}, "an epilogue sink",
                " (the sink is a logit added to every row's softmax, e.g. `epilogue sink 0.5` "
                "or `epilogue sink sink` with `const sink: float = 0.5`)");
}

absl::Status Validator::CheckSinkNames(const ExprPtr& e, const SourceLoc& outer) const {
  const SourceLoc& loc = e->loc.known() ? e->loc : outer;
  if (e->kind == ExprKind::kIndex) {
    return ErrorAt(loc, absl::StrCat("an epilogue sink cannot read buffer `", e->name,
                                     "`: the sink is one logit per (batch, head) row, computed "
                                     "after the KV loop; pass its value as a const or compute "
                                     "it from builtins, params, consts and grid axes (e.g. h)"));
  }
  if (e->kind == ExprKind::kVar && IsElementName(e->name) && Find(e->name) == nullptr) {
    return ErrorAt(loc, absl::StrCat("an epilogue sink cannot use `", e->name,
                                     "`: it is one logit per row, not per score element; use "
                                     "builtins, params, consts and grid axes (e.g. h), or move "
                                     "per-element terms into a score_mod"));
  }
  for (const auto& a : e->args) CUBRIDGE_RETURN_IF_ERROR(CheckSinkNames(a, loc));
  return absl::OkStatus();
}

}  // namespace

absl::Status Validate(const Program& p) { return Validator(p).Run(); }

}  // namespace cubridge::cuir
