// CuIR programs: the orchestration of a forward attention kernel, made explicit.
//
// A program is a list of statements. Declarations (expert, param, const, buffer, role, grid,
// table) come first; then the body that one program instance (one grid point, i.e. one CTA /
// one tile of query rows) executes: lets, loads, the KV-block loop, the epilogue.
// docs/cuir.md is the language reference; this header is the in-memory form.
//
// Text form of the base program (cuir/experts/fa2_sm80/base.cuir):
//
//   cuir 1
//   kernel attn_fwd {
//     expert "fa2_sm80"
//     param BLOCK_M: int = 128
//     param BLOCK_N: int = 64
//     param STAGES: int = 2
//     param WARPS: int = 4
//     role compute warps WARPS
//     grid m_block < cdiv(seqlen_q, BLOCK_M), h < heads_q, b < batch
//     let kv_h: int = h
//     let q_lo: int = m_block * BLOCK_M
//     let q_hi: int = min(q_lo + BLOCK_M, seqlen_q)
//     load Q = q[b, h, q_lo:q_hi]
//     softmax.init
//     for n_block in [0, cdiv(seqlen_kv, BLOCK_N)) pipeline STAGES {
//       let kv_lo: int = n_block * BLOCK_N
//       let kv_hi: int = min(kv_lo + BLOCK_N, seqlen_kv)
//       load K = k[b, kv_h, kv_lo:kv_hi]
//       load V = v[b, kv_h, kv_lo:kv_hi]
//       S = qk Q, K scale softmax_scale
//       P = softmax.online S
//       pv P, V
//     }
//     epilogue
//   }
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cuir/ir/dtype.h"
#include "cuir/ir/expr.h"

namespace cubridge::cuir {

enum class StmtKind {
  // --- declarations (top level only) ---
  kExpert,  // expert "NAME"                       name = expert kernel id
  kParam,   // param NAME: TYPE = EXPR             orchestration knob (tile size, stages, warps)
  kConst,   // const NAME: TYPE = EXPR             a spec's scalar parameter, by value
  kBuffer,  // buffer NAME: DTYPE[EXTENT, ...]     a spec's captured tensor, rank 0-4; dtype =
            //   storage, type = element type; exprs = per dimension the size the program
            //   reaches (the least size a call's tensor must have), null (`?`) where the index
            //   depends on data
  kRole,    // role NAME warps EXPR [regs EXPR]     a warp role; value = warps, aux = regs or null
  kGrid,    // grid AXIS < EXPR (, AXIS < EXPR)* [schedule NAME]
            //   names = axis names, exprs = extents, attr = schedule ("" = linear)
  kTable,   // table NAME = blocks(EXPR) [transposed] [per AXIS (, AXIS)*]
            //   block classification precomputed before the launch by evaluating the predicate
            //   `value` on every (BLOCK_M x BLOCK_N) tile; names = the grid axes it varies over;
            //   attr = "transposed" for rows per KV block listing query blocks (the backward's)
  kDelta,   // delta NAME                          backward: D = rowsum(dO * O) per query row,
            //   fp32, computed before the launch (the expert's preprocessing kernel)
  // --- body statements ---
  kLet,          // let NAME: TYPE = EXPR
  kLoad,         // load NAME = TENSOR[EXPR_b, EXPR_h, EXPR_lo:EXPR_hi]
                 //   operands = {TENSOR} (q | k | v | do), exprs = {b, h, lo, hi}
  kSoftmaxInit,  // softmax.init                    running max = -inf, sum = 0, acc = 0
  kFor,          // for VAR in RANGES [pipeline EXPR] [split] { BODY }
                 // for VAR, FULL in table T[EXPR, ...] [pipeline EXPR] [split] { BODY }
  kQK,           // NAME = qk Q, K scale EXPR       S = (Q K^T) * scale, fp32 accumulate
                 //   operands = {Q, K}, value = scale
  kScoreMod,     // score_mod S = EXPR              elementwise; `score`, q_idx, kv_idx in scope
                 //   operands = {S}
  kMask,         // mask S = EXPR [when EXPR]       S = pred ? S : -inf, only when `cond` holds
                 //   operands = {S}, value = predicate, aux = cond or null (= always)
  kSoftmaxOnline,// NAME = softmax.online S         online softmax step; rescales acc
                 //   operands = {S}
  kPV,           // pv P, V                         acc += P V (P rounded to the input dtype)
                 //   operands = {P, V}
  kEpilogue,     // epilogue [sink EXPR]             O = acc / l, LSE = m + log(l); 0 / -inf if l = 0
                 //   value = the sink logit or null: one extra score per row (same scaled
                 //   domain as S) that joins the softmax denominator but adds nothing to O
  // --- backward body statements (a program has either the forward's or these) ---
  kGradInit,         // grad.init                   dK = dV = 0 for the program's K/V tile
  kSoftmaxRecompute, // NAME = softmax.recompute S  P = exp(S - LSE) from the forward's LSE
                     //   operands = {S}
  kDV,               // dv P, DO                     dV += P^T dO (P rounded to the input dtype)
                     //   operands = {P, DO}
  kDP,               // NAME = dp DO, V              dP = dO V^T, fp32; operands = {DO, V}
  kSoftmaxGrad,      // NAME = softmax.grad P, DP, D dS = P * (dP - D); operands = {P, DP, D}
  kScoreGrad,        // score_grad DS = EXPR         dS *= EXPR where dS != 0; `score` is the raw
                     //   scaled score (before every score_mod); operands = {DS}
  kBufferGrad,       // buffer_grad NAME[EXPR, ...] += DS * EXPR
                     //   grad of buffer NAME at the index += dS * EXPR where dS != 0;
                     //   operands = {DS}, exprs = the index, value = the partial
  kDK,               // dk DS, Q scale EXPR          dK += scale * dS^T Q; operands = {DS, Q}
  kDQ,               // dq DS, K scale EXPR          dQ[rows of DS] += scale * dS K (accumulated
                     //   across programs); operands = {DS, K}
  kGradEpilogue,     // grad.epilogue                dK, dV of the tile added into the KV head's
                     //   rows (GQA: the group's query heads add up)
};

const char* StmtKindName(StmtKind k);

// Half-open interval of block indices [lo, hi).
struct BlockRange {
  ExprPtr lo;
  ExprPtr hi;
};

struct Stmt {
  StmtKind kind;
  SourceLoc loc;
  std::string name;                   // declared / result name (see StmtKind)
  Type type = Type::kInt;             // param, const, buffer element, let
  TensorDType dtype = TensorDType::kInt32;        // buffer storage
  ExprPtr value;                      // main expression (see StmtKind); epilogue: sink or null
  ExprPtr aux;                        // secondary expression (mask `when`, role `regs`)
  std::string attr;                   // grid schedule
  std::vector<std::string> operands;  // tile / tensor operands
  std::vector<std::string> names;     // grid axes, table `per` axes
  std::vector<ExprPtr> exprs;         // grid extents, load indices, table-loop row indices

  // kFor only.
  std::vector<BlockRange> ranges;  // range form: union of intervals, visited in ascending order,
                                   // each block once
  std::string table;               // table form: table name (ranges empty)
  std::string full_var;            // table form: bool bound to "this block is full"
  ExprPtr pipeline;                // stages; null = 1
  // `split`: the blocks may run as contiguous parts from fresh softmax states, merged before the
  // epilogue (same results up to rounding), so an expert may spread a last wave's walks over SMs.
  bool split = false;
  std::vector<Stmt> body;
};

// How deeply `for` bodies may nest (the kernel's own block is level 1): the parser, the validator
// and the printer recurse once per level. The validator allows one loop; the parser reads up to
// this many levels so that a misplaced loop gets the validator's message.
inline constexpr int kMaxBlockDepth = 64;

struct Program {
  int version = 1;
  std::string kernel;  // kernel name
  std::vector<Stmt> stmts;
  SourceLoc loc;
};

// Text form. Parse errors are INVALID_ARGUMENT with "file:line:col: message".
absl::StatusOr<Program> ParseProgram(std::string_view text, std::string_view filename = "");
absl::StatusOr<ExprPtr> ParseExpr(std::string_view text, std::string_view filename = "");
std::string PrintProgram(const Program& p);

// Structural equality (locations ignored): ParseProgram(PrintProgram(p)) equals p.
bool Equal(const Program& a, const Program& b);

// Checks names are declared before use and not redeclared, types, operand kinds (a `pv` takes a
// softmax.online result and a loaded V, ...), statement placement (declarations at top level,
// qk / mask / pv inside the KV loop), exactly one grid, one epilogue after the loop. A backward
// program (one with backward statements) has grad.init before its loop over query blocks and
// grad.epilogue after it, and none of the forward's softmax.init / online / pv / epilogue.
// Errors are INVALID_ARGUMENT with "file:line:col: message".
absl::Status Validate(const Program& p);

// Builtin symbols bound from the job's attention config (all int except softmax_scale: float).
const std::vector<std::pair<std::string, Type>>& BuiltinSymbols();

// Lookup helpers for rules and backends.
const Stmt* FindDecl(const Program& p, StmtKind kind, std::string_view name = "");
Stmt* FindDecl(Program& p, StmtKind kind, std::string_view name = "");
// Whether the program is a backward one (it has a backward statement, e.g. grad.init).
bool IsBackward(const Program& p);
bool IsBackwardKind(StmtKind k);  // the statements only a backward program has

// The (single) KV-block loop at top level; null if absent.
const Stmt* FindKvLoop(const Program& p);
Stmt* FindKvLoop(Program& p);

// The program with some of its params set, e.g. a tile (BLOCK_M, BLOCK_N, WARPS) other than the
// expert's own. INVALID_ARGUMENT names a param the kernel does not declare, and those it does.
absl::StatusOr<Program> WithParams(const Program& p, const std::map<std::string, int64_t>& values);

}  // namespace cubridge::cuir
