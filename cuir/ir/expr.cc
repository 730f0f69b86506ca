#include "cuir/ir/expr.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace cubridge::cuir {
namespace {

// Non-const objects: ~Expr may take them apart (see there).
ExprPtr Make(Expr e) { return std::make_shared<Expr>(std::move(e)); }

Expr Node(ExprKind kind, SourceLoc loc) {
  Expr e;
  e.kind = kind;
  e.loc = std::move(loc);
  return e;
}

// Binding strength used by the printer; mirrors the parser's grammar levels.
enum Prec : int {
  kPrecOr = 1,
  kPrecAnd = 2,
  kPrecCmp = 3,
  kPrecAdd = 4,
  kPrecMul = 5,
  kPrecUnary = 6,
  kPrecPow = 7,
  kPrecPrimary = 8,
};

int BinaryPrec(BinaryOp op) {
  switch (op) {
    case BinaryOp::kOr: return kPrecOr;
    case BinaryOp::kAnd: return kPrecAnd;
    case BinaryOp::kAdd:
    case BinaryOp::kSub: return kPrecAdd;
    case BinaryOp::kMul:
    case BinaryOp::kDiv:
    case BinaryOp::kFloorDiv:
    case BinaryOp::kMod: return kPrecMul;
    case BinaryOp::kPow: return kPrecPow;
    default:
      return IsComparison(op) ? kPrecCmp : kPrecPrimary;  // the rest print as calls
  }
}

bool IsOperatorStyle(UnaryOp op) { return op == UnaryOp::kNeg || op == UnaryOp::kNot; }

// A literal whose text starts with '-' (it re-parses through the folded unary minus).
bool IsSignedLiteral(const Expr& e) {
  if (e.kind == ExprKind::kIntLit) return e.int_value < 0;
  if (e.kind == ExprKind::kFloatLit) {
    return std::signbit(e.float_value) && !std::isnan(e.float_value);
  }
  return false;
}

bool IsUnsignedNumber(const Expr& e) {
  return (e.kind == ExprKind::kIntLit || e.kind == ExprKind::kFloatLit) && !IsSignedLiteral(e);
}

int PrecOf(const Expr& e) {
  if (IsSignedLiteral(e)) return kPrecUnary;
  if (e.kind == ExprKind::kUnary && IsOperatorStyle(e.unary_op)) return kPrecUnary;
  if (e.kind == ExprKind::kBinary) return BinaryPrec(e.binary_op);
  return kPrecPrimary;
}

std::string FloatText(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, end);
  // Shortest form of an integral double has neither '.' nor 'e' and would re-lex as an int.
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

void PrintTo(const ExprPtr& e, std::string* out);

void PrintOperand(const ExprPtr& e, bool parens, std::string* out) {
  if (parens) out->push_back('(');
  PrintTo(e, out);
  if (parens) out->push_back(')');
}

void PrintArgs(const char* fn, const std::vector<ExprPtr>& args, std::string* out) {
  absl::StrAppend(out, fn, "(");
  for (size_t i = 0; i < args.size(); ++i) {
    if (i > 0) absl::StrAppend(out, ", ");
    PrintTo(args[i], out);
  }
  out->push_back(')');
}

void PrintUnary(const Expr& e, std::string* out) {
  if (!IsOperatorStyle(e.unary_op)) return PrintArgs(UnaryOpName(e.unary_op), e.args, out);
  const Expr& a = *e.args[0];
  // `-3` would re-parse as the literal -3, so a negation of a literal keeps its parentheses.
  bool parens = PrecOf(a) < kPrecUnary || (e.unary_op == UnaryOp::kNeg && IsUnsignedNumber(a));
  out->append(UnaryOpName(e.unary_op));
  PrintOperand(e.args[0], parens, out);
}

void PrintBinary(const Expr& e, std::string* out) {
  if (IsCallStyle(e.binary_op)) return PrintArgs(BinaryOpName(e.binary_op), e.args, out);
  int p = BinaryPrec(e.binary_op);
  int left = PrecOf(*e.args[0]);
  int right = PrecOf(*e.args[1]);
  bool left_parens, right_parens;
  if (e.binary_op == BinaryOp::kPow) {  // right-associative; a unary may follow `**`
    left_parens = left <= p;
    right_parens = right < kPrecUnary;
  } else if (IsComparison(e.binary_op)) {  // non-associative
    left_parens = left <= p;
    right_parens = right <= p;
  } else {  // left-associative
    left_parens = left < p;
    right_parens = right <= p;
  }
  PrintOperand(e.args[0], left_parens, out);
  absl::StrAppend(out, " ", BinaryOpName(e.binary_op), " ");
  PrintOperand(e.args[1], right_parens, out);
}

void PrintTo(const ExprPtr& e, std::string* out) {
  if (!e) return absl::StrAppend(out, "<null>");
  switch (e->kind) {
    case ExprKind::kBoolLit: return absl::StrAppend(out, e->bool_value ? "true" : "false");
    case ExprKind::kIntLit: return absl::StrAppend(out, e->int_value);
    case ExprKind::kFloatLit: return absl::StrAppend(out, FloatText(e->float_value));
    case ExprKind::kVar: return absl::StrAppend(out, e->name);
    case ExprKind::kUnary: return PrintUnary(*e, out);
    case ExprKind::kBinary: return PrintBinary(*e, out);
    case ExprKind::kSelect: return PrintArgs("select", e->args, out);
    case ExprKind::kIndex:
      absl::StrAppend(out, e->name, "[");
      for (size_t i = 0; i < e->args.size(); ++i) {
        if (i > 0) absl::StrAppend(out, ", ");
        PrintTo(e->args[i], out);
      }
      return out->push_back(']');
  }
}

bool SameFloat(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);  // 0.0 and -0.0 differ
}

void AddUnique(const std::string& name, std::vector<std::string>* out) {
  if (std::find(out->begin(), out->end(), name) == out->end()) out->push_back(name);
}

template <typename Fn>
void Walk(const ExprPtr& e, const Fn& fn) {
  if (!e) return;
  fn(*e);
  for (const ExprPtr& a : e->args) Walk(a, fn);
}

}  // namespace

Expr::~Expr() {
  std::vector<ExprPtr> pending = std::move(args);
  while (!pending.empty()) {
    ExprPtr e = std::move(pending.back());
    pending.pop_back();
    // The last owner empties the node before releasing it, so its own destructor finds no
    // children. Only the last owner: the node is then no one else's to look at, and it was made
    // non-const (Make), so taking its children is allowed.
    if (e != nullptr && e.use_count() == 1 && !e->args.empty()) {
      auto& children = const_cast<Expr&>(*e).args;
      for (ExprPtr& c : children) pending.push_back(std::move(c));
      children.clear();
    }
  }
}

ExprExtent MeasureExpr(const ExprPtr& e, int64_t max_depth, int64_t max_nodes) {
  ExprExtent out;
  if (e == nullptr) return out;
  const int64_t saturated = max_nodes == kNoNodeCap ? kNoNodeCap : max_nodes + 1;
  struct Done {
    int64_t depth, nodes;
  };
  absl::flat_hash_map<const Expr*, Done> done;
  std::vector<std::pair<const Expr*, size_t>> stack = {{e.get(), 0}};  // node, next child
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->args.size()) {
      const Expr* child = node->args[next++].get();
      if (child == nullptr || done.contains(child)) continue;
      if (static_cast<int64_t>(stack.size()) >= max_depth) {
        return {max_depth + 1, out.nodes, child};
      }
      stack.emplace_back(child, 0);
      continue;
    }
    Done d{1, 1};
    for (const ExprPtr& a : node->args) {
      if (a == nullptr) continue;
      const Done& c = done.at(a.get());
      d.depth = std::max(d.depth, c.depth + 1);
      d.nodes = c.nodes > saturated - d.nodes ? saturated : d.nodes + c.nodes;
    }
    // A shared subtree is measured once, on the first path that reaches it; a longer path to it
    // shows here.
    if (d.depth > max_depth) return {max_depth + 1, d.nodes, node};
    if (d.nodes > max_nodes) return {d.depth, saturated, node};
    done[node] = d;
    out = {d.depth, d.nodes, nullptr};
    stack.pop_back();
  }
  return out;
}

bool ExprDepthExceeds(const ExprPtr& e, int limit) {
  return MeasureExpr(e, limit, kNoNodeCap).depth > limit;
}

const char* TypeName(Type t) {
  switch (t) {
    case Type::kBool: return "bool";
    case Type::kInt: return "int";
    case Type::kFloat: return "float";
  }
  return "?";
}

const char* UnaryOpName(UnaryOp op) {
  switch (op) {
    case UnaryOp::kNeg: return "-";
    case UnaryOp::kNot: return "!";
    case UnaryOp::kAbs: return "abs";
    case UnaryOp::kExp: return "exp";
    case UnaryOp::kExp2: return "exp2";
    case UnaryOp::kLog: return "log";
    case UnaryOp::kLog2: return "log2";
    case UnaryOp::kSqrt: return "sqrt";
    case UnaryOp::kTanh: return "tanh";
    case UnaryOp::kSigmoid: return "sigmoid";
    case UnaryOp::kFloor: return "floor";
    case UnaryOp::kToFloat: return "float";
    case UnaryOp::kToInt: return "int";
    case UnaryOp::kSin: return "sin";
    case UnaryOp::kCos: return "cos";
    case UnaryOp::kTan: return "tan";
    case UnaryOp::kAsin: return "asin";
    case UnaryOp::kAcos: return "acos";
    case UnaryOp::kAtan: return "atan";
    case UnaryOp::kSinh: return "sinh";
    case UnaryOp::kCosh: return "cosh";
    case UnaryOp::kAsinh: return "asinh";
    case UnaryOp::kAcosh: return "acosh";
    case UnaryOp::kAtanh: return "atanh";
    case UnaryOp::kErf: return "erf";
    case UnaryOp::kErfc: return "erfc";
    case UnaryOp::kLog1p: return "log1p";
    case UnaryOp::kExpm1: return "expm1";
    case UnaryOp::kLog10: return "log10";
    case UnaryOp::kTrunc: return "trunc";
    case UnaryOp::kRound: return "round";
    case UnaryOp::kSign: return "sign";
    case UnaryOp::kBitNot: return "bit_not";
  }
  return "?";
}

const char* BinaryOpName(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "+";
    case BinaryOp::kSub: return "-";
    case BinaryOp::kMul: return "*";
    case BinaryOp::kDiv: return "/";
    case BinaryOp::kFloorDiv: return "//";
    case BinaryOp::kMod: return "%";
    case BinaryOp::kPow: return "**";
    case BinaryOp::kMin: return "min";
    case BinaryOp::kMax: return "max";
    case BinaryOp::kCdiv: return "cdiv";
    case BinaryOp::kLt: return "<";
    case BinaryOp::kLe: return "<=";
    case BinaryOp::kGt: return ">";
    case BinaryOp::kGe: return ">=";
    case BinaryOp::kEq: return "==";
    case BinaryOp::kNe: return "!=";
    case BinaryOp::kAnd: return "&&";
    case BinaryOp::kOr: return "||";
    case BinaryOp::kAtan2: return "atan2";
    case BinaryOp::kFmod: return "fmod";
    case BinaryOp::kBitAnd: return "bit_and";
    case BinaryOp::kBitOr: return "bit_or";
    case BinaryOp::kBitXor: return "bit_xor";
    case BinaryOp::kShl: return "shl";
    case BinaryOp::kShr: return "shr";
  }
  return "?";
}

bool IsComparison(BinaryOp op) {
  switch (op) {
    case BinaryOp::kLt:
    case BinaryOp::kLe:
    case BinaryOp::kGt:
    case BinaryOp::kGe:
    case BinaryOp::kEq:
    case BinaryOp::kNe: return true;
    default: return false;
  }
}

bool IsLogical(BinaryOp op) { return op == BinaryOp::kAnd || op == BinaryOp::kOr; }

bool IsCallStyle(BinaryOp op) {
  switch (op) {
    case BinaryOp::kMin: case BinaryOp::kMax: case BinaryOp::kCdiv: case BinaryOp::kAtan2:
    case BinaryOp::kFmod: case BinaryOp::kBitAnd: case BinaryOp::kBitOr: case BinaryOp::kBitXor:
    case BinaryOp::kShl: case BinaryOp::kShr:
      return true;
    default:
      return false;
  }
}

ExprPtr BoolLit(bool v, SourceLoc loc) {
  Expr e = Node(ExprKind::kBoolLit, std::move(loc));
  e.bool_value = v;
  return Make(std::move(e));
}

ExprPtr IntLit(int64_t v, SourceLoc loc) {
  Expr e = Node(ExprKind::kIntLit, std::move(loc));
  e.int_value = v;
  return Make(std::move(e));
}

ExprPtr FloatLit(double v, SourceLoc loc) {
  Expr e = Node(ExprKind::kFloatLit, std::move(loc));
  e.float_value = v;
  return Make(std::move(e));
}

ExprPtr Var(std::string name, SourceLoc loc) {
  Expr e = Node(ExprKind::kVar, std::move(loc));
  e.name = std::move(name);
  return Make(std::move(e));
}

ExprPtr Unary(UnaryOp op, ExprPtr a, SourceLoc loc) {
  Expr e = Node(ExprKind::kUnary, std::move(loc));
  e.unary_op = op;
  e.args = {std::move(a)};
  return Make(std::move(e));
}

ExprPtr Binary(BinaryOp op, ExprPtr a, ExprPtr b, SourceLoc loc) {
  Expr e = Node(ExprKind::kBinary, std::move(loc));
  e.binary_op = op;
  e.args = {std::move(a), std::move(b)};
  return Make(std::move(e));
}

ExprPtr Select(ExprPtr cond, ExprPtr a, ExprPtr b, SourceLoc loc) {
  Expr e = Node(ExprKind::kSelect, std::move(loc));
  e.args = {std::move(cond), std::move(a), std::move(b)};
  return Make(std::move(e));
}

ExprPtr Index(std::string buffer, ExprPtr index, SourceLoc loc) {
  return Index(std::move(buffer), std::vector<ExprPtr>{std::move(index)}, std::move(loc));
}

ExprPtr Index(std::string buffer, std::vector<ExprPtr> indices, SourceLoc loc) {
  Expr e = Node(ExprKind::kIndex, std::move(loc));
  e.name = std::move(buffer);
  e.args = std::move(indices);
  return Make(std::move(e));
}

bool Equal(const ExprPtr& a, const ExprPtr& b) {
  if (a == b) return true;
  if (!a || !b || a->kind != b->kind || a->args.size() != b->args.size()) return false;
  bool same_node = false;
  switch (a->kind) {
    case ExprKind::kBoolLit: same_node = a->bool_value == b->bool_value; break;
    case ExprKind::kIntLit: same_node = a->int_value == b->int_value; break;
    case ExprKind::kFloatLit: same_node = SameFloat(a->float_value, b->float_value); break;
    case ExprKind::kVar:
    case ExprKind::kIndex: same_node = a->name == b->name; break;
    case ExprKind::kUnary: same_node = a->unary_op == b->unary_op; break;
    case ExprKind::kBinary: same_node = a->binary_op == b->binary_op; break;
    case ExprKind::kSelect: same_node = true; break;
  }
  if (!same_node) return false;
  for (size_t i = 0; i < a->args.size(); ++i) {
    if (!Equal(a->args[i], b->args[i])) return false;
  }
  return true;
}

std::string PrintExpr(const ExprPtr& e) {
  std::string out;
  PrintTo(e, &out);
  return out;
}

void CollectVars(const ExprPtr& e, std::vector<std::string>* vars) {
  Walk(e, [&](const Expr& n) {
    if (n.kind == ExprKind::kVar) AddUnique(n.name, vars);
  });
}

void CollectBuffers(const ExprPtr& e, std::vector<std::string>* buffers) {
  Walk(e, [&](const Expr& n) {
    if (n.kind == ExprKind::kIndex) AddUnique(n.name, buffers);
  });
}

bool Mentions(const ExprPtr& e, const std::string& name) {
  bool found = false;
  Walk(e, [&](const Expr& n) {
    if ((n.kind == ExprKind::kVar || n.kind == ExprKind::kIndex) && n.name == name) found = true;
  });
  return found;
}

ExprPtr Substitute(const ExprPtr& e,
                   const std::vector<std::pair<std::string, ExprPtr>>& bindings) {
  if (!e) return e;
  if (e->kind == ExprKind::kVar) {
    for (const auto& [name, value] : bindings) {
      if (name == e->name) return value;
    }
    return e;
  }
  // Unchanged subtrees stay shared with the input.
  bool changed = false;
  std::vector<ExprPtr> args;
  args.reserve(e->args.size());
  for (const ExprPtr& a : e->args) {
    args.push_back(Substitute(a, bindings));
    changed |= args.back() != a;
  }
  if (!changed) return e;
  Expr copy = *e;
  copy.args = std::move(args);
  return Make(std::move(copy));
}

}  // namespace cubridge::cuir
