// Scalar expressions of CuIR: index arithmetic, mask predicates, score modifications.
//
// One expression language serves the whole IR (grid extents, loop bounds, block classification,
// mask_mod and score_mod bodies), so that transfer rules, the interpreter and the lowering all
// reason about the same tree. Expressions are immutable and shared (ExprPtr); rewrites build new
// trees.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuir/ir/source_loc.h"

namespace cubridge::cuir {

// Value types. `int` is 64-bit in the interpreter and the oracle, 32-bit in generated CUDA for
// index math; `float` is fp32 in kernels (the oracle evaluates the spec in float64).
enum class Type { kBool, kInt, kFloat };
const char* TypeName(Type t);

enum class ExprKind {
  kBoolLit,   // true / false
  kIntLit,    // 42
  kFloatLit,  // 0.5, 1e-3 (printed so that it re-parses as a float, exactly)
  kVar,       // a named symbol: builtin, param, const, let, loop variable, `score`, ...
  kUnary,     // op(args[0])
  kBinary,    // args[0] op args[1]
  kSelect,    // select(args[0], args[1], args[2]): cond ? a : b
  kIndex,     // name[args...]: element of a buffer (a captured tensor); one int index per
              // dimension (none for rank 0), Python semantics: -size <= i < size, negative i
              // counts from the end
};

enum class UnaryOp {
  kNeg,      // -x
  kNot,      // !x (bool)
  kAbs,      // abs(x)
  kExp,      // exp(x)
  kExp2,     // exp2(x)
  kLog,      // log(x)
  kLog2,     // log2(x)
  kSqrt,     // sqrt(x)
  kTanh,     // tanh(x)
  kSigmoid,  // sigmoid(x)
  kFloor,    // floor(x) -> float
  kToFloat,  // float(x)
  kToInt,    // int(x): truncation toward zero, like torch's .to(int64)
  // Float math (the result is float whatever the operand), as torch and CUDA's libm define them.
  kSin, kCos, kTan, kAsin, kAcos, kAtan,
  kSinh, kCosh, kAsinh, kAcosh, kAtanh,
  kErf, kErfc, kLog1p, kExpm1, kLog10,
  kTrunc,    // trunc(x) -> float: toward zero
  kRound,    // round(x) -> float: half to even, like torch.round
  kSign,     // sign(x): -1, 0 or 1 of x's type (NaN stays NaN)
  kBitNot,   // bit_not(x): ~x on ints
};

enum class BinaryOp {
  kAdd, kSub, kMul,
  kDiv,       // true division: always float (Python / torch semantics)
  kFloorDiv,  // a // b: floor division (Python semantics for negative operands)
  kMod,       // a % b: result has the sign of b (Python semantics)
  kPow,       // a ** b
  kMin, kMax,  // min(a, b), max(a, b)
  kCdiv,      // cdiv(a, b) = ceil(a / b) for ints
  kLt, kLe, kGt, kGe, kEq, kNe,
  kAnd, kOr,  // && and || on bools (no short-circuit semantics needed: expressions are pure)
  kAtan2,     // atan2(a, b) -> float
  kFmod,      // fmod(a, b): C remainder, sign of a (torch.fmod); ints stay ints
  kBitAnd, kBitOr, kBitXor,  // bit_and / bit_or / bit_xor(a, b) on ints
  kShl, kShr,  // shl(a, b) = a << b, shr(a, b) = a >> b (arithmetic) on 64-bit ints, as torch:
               // a shift by a negative amount or by 64 or more gives 0 (shl) or the sign (shr)
};

// Every op, in declaration order (tests and tables walk them all).
inline constexpr int kUnaryOpCount = static_cast<int>(UnaryOp::kBitNot) + 1;
inline constexpr int kBinaryOpCount = static_cast<int>(BinaryOp::kShr) + 1;

const char* UnaryOpName(UnaryOp op);    // spelling in the text form, e.g. "exp" or "-"
const char* BinaryOpName(BinaryOp op);  // spelling in the text form, e.g. "+" or "min"
bool IsComparison(BinaryOp op);
bool IsLogical(BinaryOp op);
// Ops printed as calls `name(a, b)` rather than infix.
bool IsCallStyle(BinaryOp op);

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
  ExprKind kind;
  bool bool_value = false;
  int64_t int_value = 0;
  double float_value = 0.0;
  std::string name;  // kVar: symbol; kIndex: buffer name (args: the indices)
  UnaryOp unary_op = UnaryOp::kNeg;
  BinaryOp binary_op = BinaryOp::kAdd;
  std::vector<ExprPtr> args;
  SourceLoc loc;  // where it was parsed or translated from; ignored by equality and hashing

  Expr() = default;
  Expr(const Expr&) = default;
  Expr(Expr&&) = default;
  Expr& operator=(const Expr&) = default;
  Expr& operator=(Expr&&) = default;
  // Releasing the last reference to a tree frees it without recursing, however deep it is: the
  // nodes it alone owns are taken apart one by one. For that, make nodes with the constructors
  // below or as non-const `Expr`s (std::make_shared<Expr>), never as `const Expr` objects.
  ~Expr();
};

// How far the recursive walks over expressions (printer, evaluator, type checker, rewrites) may
// go: the parser refuses deeper text and the validator deeper programs, with file:line:col.
inline constexpr int kMaxExprDepth = 512;

// Buffers (captured tensors) have rank 0 to 4, like the layouts attention variants index
// (a scalar, per head, [H, buckets], [B, H, Sq, Skv]).
inline constexpr size_t kMaxBufferRank = 4;

// Constructors. `loc` is optional everywhere.
ExprPtr BoolLit(bool v, SourceLoc loc = {});
ExprPtr IntLit(int64_t v, SourceLoc loc = {});
ExprPtr FloatLit(double v, SourceLoc loc = {});
ExprPtr Var(std::string name, SourceLoc loc = {});
ExprPtr Unary(UnaryOp op, ExprPtr a, SourceLoc loc = {});
ExprPtr Binary(BinaryOp op, ExprPtr a, ExprPtr b, SourceLoc loc = {});
ExprPtr Select(ExprPtr cond, ExprPtr a, ExprPtr b, SourceLoc loc = {});
ExprPtr Index(std::string buffer, ExprPtr index, SourceLoc loc = {});
ExprPtr Index(std::string buffer, std::vector<ExprPtr> indices, SourceLoc loc = {});

// Structural equality (locations ignored).
bool Equal(const ExprPtr& a, const ExprPtr& b);

// Canonical text form, minimal parentheses by precedence; ParseExpr(PrintExpr(e)) is Equal to e.
std::string PrintExpr(const ExprPtr& e);

// Every variable / buffer name the expression mentions.
void CollectVars(const ExprPtr& e, std::vector<std::string>* vars);
void CollectBuffers(const ExprPtr& e, std::vector<std::string>* buffers);
bool Mentions(const ExprPtr& e, const std::string& name);

// The size of an expression as a tree: a leaf is 1 deep; a subexpression shared by several
// parents counts once per parent, as printing and evaluating visit it. Computed without recursion
// in time linear in the distinct nodes; the walk stops once a cap is passed (the other field is
// then only a lower bound).
inline constexpr int64_t kNoNodeCap = INT64_MAX;  // as max_nodes: count, never stop
struct ExprExtent {
  int64_t depth = 0;  // at most max_depth + 1
  int64_t nodes = 0;  // at most max_nodes + 1 (kNoNodeCap saturates)
  // Where a cap was passed (the node max_depth + 1 levels down, or the first subtree with more
  // than max_nodes nodes); null when neither was.
  const Expr* over = nullptr;
};
ExprExtent MeasureExpr(const ExprPtr& e, int64_t max_depth, int64_t max_nodes);
// True when `e` is more than `limit` levels deep.
bool ExprDepthExceeds(const ExprPtr& e, int limit);

// Replaces variables by expressions (names not in the map stay).
ExprPtr Substitute(const ExprPtr& e,
                   const std::vector<std::pair<std::string, ExprPtr>>& bindings);

}  // namespace cubridge::cuir
