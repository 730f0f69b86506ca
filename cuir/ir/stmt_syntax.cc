// The text form of every statement construct: one section per construct with its parse and
// print side by side, registered in the table at the end. Parse functions run after the parser
// consumed the construct's keyword (and `NAME =` for assignment forms); they stop before the
// end of the line.
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuir/ir/syntax.h"

namespace cubridge::cuir {
namespace {

using absl::StrCat;

constexpr char kTransposed[] = "transposed";

std::string Kw(const Stmt& s) { return std::string(SyntaxOf(s.kind).keyword); }
std::string E(const ExprPtr& e) { return PrintExpr(e); }
// Statements built in code may be malformed; printing them must still work (for error dumps).
std::string Operand(const Stmt& s, size_t i) {
  return i < s.operands.size() ? s.operands[i] : "<missing>";
}
std::string ExprAt(const std::vector<ExprPtr>& es, size_t i) {
  return E(i < es.size() ? es[i] : nullptr);
}

absl::Status ParseExprInto(Parser& p, ExprPtr* out) {
  CUBRIDGE_ASSIGN_OR_RETURN(*out, p.ParseExpr());
  return absl::OkStatus();
}

// NAME (, NAME)*
absl::Status ParseNames(Parser& p, std::string_view what, std::vector<std::string>* out) {
  do {
    CUBRIDGE_ASSIGN_OR_RETURN(std::string name, p.ExpectName(what));
    out->push_back(std::move(name));
  } while (p.AcceptPunct(","));
  return absl::OkStatus();
}

// EXPR (, EXPR)*
absl::Status ParseExprList(Parser& p, std::vector<ExprPtr>* out) {
  do {
    CUBRIDGE_ASSIGN_OR_RETURN(ExprPtr e, p.ParseExpr());
    out->push_back(std::move(e));
  } while (p.AcceptPunct(","));
  return absl::OkStatus();
}

std::string JoinExprs(const std::vector<ExprPtr>& es) {
  return absl::StrJoin(es, ", ", [](std::string* out, const ExprPtr& e) { out->append(E(e)); });
}

// Optional trailing `KEYWORD EXPR` (role regs, mask when, loop pipeline, epilogue sink).
absl::Status ParseOptionalClause(Parser& p, std::string_view keyword, ExprPtr* out) {
  if (!p.AcceptKeyword(keyword)) return absl::OkStatus();
  return ParseExprInto(p, out);
}

std::string OptionalClause(std::string_view keyword, const ExprPtr& e) {
  return e ? StrCat(" ", std::string(keyword), " ", E(e)) : "";
}

// ----- statements without operands: softmax.init --------------------------------------------

absl::Status ParseBare(Parser&, Stmt&) { return absl::OkStatus(); }
void PrintBare(const Stmt& s, StmtPrinter& out) { out.Line(Kw(s)); }

// ----- expert "NAME" -------------------------------------------------------------------------

absl::Status ParseExpert(Parser& p, Stmt& s) {
  if (p.Peek().kind != TokKind::kString) return p.Expected("the expert's name in quotes");
  s.name = p.Next().text;
  return absl::OkStatus();
}
void PrintExpert(const Stmt& s, StmtPrinter& out) { out.Line(StrCat(Kw(s), " \"", s.name, "\"")); }

// ----- param / const / let: KEYWORD NAME: TYPE = EXPR -----------------------------------------

absl::Status ParseTypedValue(Parser& p, Stmt& s) {
  CUBRIDGE_ASSIGN_OR_RETURN(s.name, p.ExpectName("a name"));
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct(":"));
  CUBRIDGE_ASSIGN_OR_RETURN(s.type, p.ParseType());
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct("="));
  return ParseExprInto(p, &s.value);
}
void PrintTypedValue(const Stmt& s, StmtPrinter& out) {
  out.Line(StrCat(Kw(s), " ", s.name, ": ", TypeName(s.type), " = ", E(s.value)));
}

// ----- buffer NAME: DTYPE[EXTENT, ...] ------------------------------------------------------

absl::Status ParseBuffer(Parser& p, Stmt& s) {
  CUBRIDGE_ASSIGN_OR_RETURN(s.name, p.ExpectName("a buffer name"));
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct(":"));
  const Token& dtype = p.Peek();
  const auto d = dtype.kind == TokKind::kIdent ? TensorDTypeFromName(dtype.text) : std::nullopt;
  if (!d) return p.Expected(StrCat("a buffer dtype (", TensorDTypeNames(), ")"));
  p.Next();
  s.dtype = *d;
  s.type = ElementType(*d);
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct("["));
  if (p.AcceptPunct("]")) return absl::OkStatus();  // rank 0
  do {
    if (s.exprs.size() == kMaxBufferRank) {
      return p.ErrorAt(p.Peek().loc, StrCat("buffers have at most ", kMaxBufferRank,
                                            " dimensions"));
    }
    ExprPtr extent;  // `?`: the reach depends on data
    if (!p.AcceptPunct("?")) CUBRIDGE_RETURN_IF_ERROR(ParseExprInto(p, &extent));
    s.exprs.push_back(std::move(extent));
  } while (p.AcceptPunct(","));
  return p.ExpectPunct("]");
}
void PrintBuffer(const Stmt& s, StmtPrinter& out) {
  std::string dims;
  for (size_t i = 0; i < s.exprs.size(); ++i) {
    absl::StrAppend(&dims, i > 0 ? ", " : "", s.exprs[i] ? E(s.exprs[i]) : "?");
  }
  out.Line(StrCat(Kw(s), " ", s.name, ": ", TensorDTypeName(s.dtype), "[", dims, "]"));
}

// ----- role NAME warps EXPR [regs EXPR] -------------------------------------------------------

absl::Status ParseRole(Parser& p, Stmt& s) {
  CUBRIDGE_ASSIGN_OR_RETURN(s.name, p.ExpectName("a role name"));
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectKeyword("warps"));
  CUBRIDGE_RETURN_IF_ERROR(ParseExprInto(p, &s.value));
  return ParseOptionalClause(p, "regs", &s.aux);
}
void PrintRole(const Stmt& s, StmtPrinter& out) {
  out.Line(StrCat(Kw(s), " ", s.name, " warps ", E(s.value), OptionalClause("regs", s.aux)));
}

// ----- grid AXIS < EXPR (, AXIS < EXPR)* [schedule NAME] ---------------------------------------

absl::Status ParseGrid(Parser& p, Stmt& s) {
  do {
    CUBRIDGE_ASSIGN_OR_RETURN(std::string axis, p.ExpectName("a grid axis name"));
    CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct("<"));
    CUBRIDGE_ASSIGN_OR_RETURN(ExprPtr extent, p.ParseExpr());
    s.names.push_back(std::move(axis));
    s.exprs.push_back(std::move(extent));
  } while (p.AcceptPunct(","));
  if (!p.AcceptKeyword("schedule")) return absl::OkStatus();
  CUBRIDGE_ASSIGN_OR_RETURN(s.attr, p.ExpectName("a schedule name"));
  return absl::OkStatus();
}
void PrintGrid(const Stmt& s, StmtPrinter& out) {
  std::vector<std::string> axes;
  for (size_t i = 0; i < s.names.size(); ++i) {
    axes.push_back(StrCat(s.names[i], " < ", ExprAt(s.exprs, i)));
  }
  std::string schedule = s.attr.empty() ? "" : StrCat(" schedule ", s.attr);
  out.Line(StrCat(Kw(s), " ", absl::StrJoin(axes, ", "), schedule));
}

// ----- table NAME = blocks(PRED) [per AXIS (, AXIS)*] ------------------------------------------

absl::Status ParseTable(Parser& p, Stmt& s) {
  CUBRIDGE_ASSIGN_OR_RETURN(s.name, p.ExpectName("a table name"));
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct("="));
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectKeyword("blocks"));
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct("("));
  CUBRIDGE_RETURN_IF_ERROR(ParseExprInto(p, &s.value));
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct(")"));
  if (p.AcceptKeyword(kTransposed)) s.attr = kTransposed;
  if (!p.AcceptKeyword("per")) return absl::OkStatus();
  return ParseNames(p, "a grid axis name", &s.names);
}
void PrintTable(const Stmt& s, StmtPrinter& out) {
  std::string per = s.names.empty() ? "" : StrCat(" per ", absl::StrJoin(s.names, ", "));
  std::string transposed = s.attr.empty() ? "" : StrCat(" ", s.attr);
  out.Line(StrCat(Kw(s), " ", s.name, " = blocks(", E(s.value), ")", transposed, per));
}

// ----- delta NAME -------------------------------------------------------------------------------

absl::Status ParseDelta(Parser& p, Stmt& s) {
  CUBRIDGE_ASSIGN_OR_RETURN(s.name, p.ExpectName("the name of the rows' dO.O sums"));
  return absl::OkStatus();
}
void PrintDelta(const Stmt& s, StmtPrinter& out) { out.Line(StrCat(Kw(s), " ", s.name)); }

// ----- load NAME = TENSOR[b, head, lo:hi] -----------------------------------------------------

absl::Status ParseLoad(Parser& p, Stmt& s) {
  CUBRIDGE_ASSIGN_OR_RETURN(s.name, p.ExpectName("a tile name"));
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct("="));
  const Token& tensor = p.Peek();
  if (!tensor.IsIdent("q") && !tensor.IsIdent("k") && !tensor.IsIdent("v") &&
      !tensor.IsIdent("do")) {
    return p.Expected("an input tensor (q, k, v, or do: the output's gradient)");
  }
  s.operands = {p.Next().text};
  s.exprs.resize(4);
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct("["));
  CUBRIDGE_RETURN_IF_ERROR(ParseExprInto(p, &s.exprs[0]));
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct(","));
  CUBRIDGE_RETURN_IF_ERROR(ParseExprInto(p, &s.exprs[1]));
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct(","));
  CUBRIDGE_RETURN_IF_ERROR(ParseExprInto(p, &s.exprs[2]));
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct(":"));
  CUBRIDGE_RETURN_IF_ERROR(ParseExprInto(p, &s.exprs[3]));
  return p.ExpectPunct("]");
}
void PrintLoad(const Stmt& s, StmtPrinter& out) {
  out.Line(StrCat(Kw(s), " ", s.name, " = ", Operand(s, 0), "[", ExprAt(s.exprs, 0), ", ",
                  ExprAt(s.exprs, 1), ", ", ExprAt(s.exprs, 2), ":", ExprAt(s.exprs, 3), "]"));
}

// ----- for: range form and table form ---------------------------------------------------------
//   for VAR in [LO, HI) (union [LO, HI))* [pipeline EXPR] [split] {
//   for VAR, FULL in table NAME[EXPR (, EXPR)*] [pipeline EXPR] [split] {

absl::Status ParseRange(Parser& p, BlockRange* r) {
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct("["));
  CUBRIDGE_RETURN_IF_ERROR(ParseExprInto(p, &r->lo));
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct(","));
  CUBRIDGE_RETURN_IF_ERROR(ParseExprInto(p, &r->hi));
  if (p.Peek().IsPunct("]")) return p.Expected("')' (block ranges are half-open: [lo, hi))");
  return p.ExpectPunct(")");
}

absl::Status ParseForIteration(Parser& p, Stmt& s) {
  bool table_form = p.Peek().IsIdent("table");
  if (table_form && s.full_var.empty()) {
    return p.Expected("a block range [lo, hi) (only a loop binding 'VAR, FULL' walks a table)");
  }
  if (!table_form && !s.full_var.empty()) {
    return p.Expected("'table' (a loop binding 'VAR, FULL' walks a block table)");
  }
  if (table_form) {
    p.Next();
    CUBRIDGE_ASSIGN_OR_RETURN(s.table, p.ExpectName("a table name"));
    CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct("["));
    CUBRIDGE_RETURN_IF_ERROR(ParseExprList(p, &s.exprs));
    return p.ExpectPunct("]");
  }
  do {
    s.ranges.emplace_back();
    CUBRIDGE_RETURN_IF_ERROR(ParseRange(p, &s.ranges.back()));
  } while (p.AcceptKeyword("union"));
  return absl::OkStatus();
}

absl::Status ParseFor(Parser& p, Stmt& s) {
  CUBRIDGE_ASSIGN_OR_RETURN(s.name, p.ExpectName("a loop variable"));
  if (p.AcceptPunct(",")) {
    CUBRIDGE_ASSIGN_OR_RETURN(s.full_var, p.ExpectName("the 'full block' variable"));
  }
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectKeyword("in"));
  CUBRIDGE_RETURN_IF_ERROR(ParseForIteration(p, s));
  CUBRIDGE_RETURN_IF_ERROR(ParseOptionalClause(p, "pipeline", &s.pipeline));
  s.split = p.AcceptKeyword("split");
  return p.ParseBlock(&s.body);
}

void PrintFor(const Stmt& s, StmtPrinter& out) {
  std::string header = StrCat(Kw(s), " ", s.name);
  if (!s.table.empty()) {
    absl::StrAppend(&header, ", ", s.full_var, " in table ", s.table, "[", JoinExprs(s.exprs), "]");
  } else {
    std::vector<std::string> ranges;
    for (const BlockRange& r : s.ranges) ranges.push_back(StrCat("[", E(r.lo), ", ", E(r.hi), ")"));
    absl::StrAppend(&header, " in ", absl::StrJoin(ranges, " union "));
  }
  absl::StrAppend(&header, OptionalClause("pipeline", s.pipeline), s.split ? " split" : "");
  out.OpenBlock(header);
  out.Stmts(s.body);
  out.CloseBlock();
}

// ----- NAME = qk Q, K scale EXPR --------------------------------------------------------------

absl::Status ParseQK(Parser& p, Stmt& s) {
  CUBRIDGE_RETURN_IF_ERROR(ParseNames(p, "a tile name", &s.operands));
  if (s.operands.size() != 2) {
    return p.ErrorAt(s.loc, StrCat("qk takes two tiles (Q, K), got ", s.operands.size()));
  }
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectKeyword("scale"));
  return ParseExprInto(p, &s.value);
}
void PrintQK(const Stmt& s, StmtPrinter& out) {
  out.Line(StrCat(s.name, " = ", Kw(s), " ", absl::StrJoin(s.operands, ", "), " scale ",
                  E(s.value)));
}

// ----- score_mod S = EXPR / mask S = PRED [when COND] -----------------------------------------

absl::Status ParseScoreMod(Parser& p, Stmt& s) {
  CUBRIDGE_ASSIGN_OR_RETURN(std::string scores, p.ExpectName("a score tile name"));
  s.operands = {std::move(scores)};
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct("="));
  return ParseExprInto(p, &s.value);
}
void PrintScoreMod(const Stmt& s, StmtPrinter& out) {
  out.Line(StrCat(Kw(s), " ", Operand(s, 0), " = ", E(s.value)));
}

absl::Status ParseMask(Parser& p, Stmt& s) {
  CUBRIDGE_RETURN_IF_ERROR(ParseScoreMod(p, s));  // same `S = EXPR` shape
  return ParseOptionalClause(p, "when", &s.aux);
}
void PrintMask(const Stmt& s, StmtPrinter& out) {
  out.Line(StrCat(Kw(s), " ", Operand(s, 0), " = ", E(s.value), OptionalClause("when", s.aux)));
}

// ----- NAME = softmax.online S ----------------------------------------------------------------

absl::Status ParseSoftmaxOnline(Parser& p, Stmt& s) {
  CUBRIDGE_ASSIGN_OR_RETURN(std::string scores, p.ExpectName("a score tile name"));
  s.operands = {std::move(scores)};
  return absl::OkStatus();
}
void PrintSoftmaxOnline(const Stmt& s, StmtPrinter& out) {
  out.Line(StrCat(s.name, " = ", Kw(s), " ", Operand(s, 0)));
}

// ----- pv P, V --------------------------------------------------------------------------------

absl::Status ParsePV(Parser& p, Stmt& s) {
  CUBRIDGE_RETURN_IF_ERROR(ParseNames(p, "a tile name", &s.operands));
  if (s.operands.size() != 2) {
    return p.ErrorAt(s.loc, StrCat("pv takes two tiles (P, V), got ", s.operands.size()));
  }
  return absl::OkStatus();
}
void PrintPV(const Stmt& s, StmtPrinter& out) {
  out.Line(StrCat(Kw(s), " ", absl::StrJoin(s.operands, ", ")));
}

// ----- backward tile statements: `KEYWORD A, B [, C]` with an optional `scale EXPR` -----------
//   NAME = softmax.recompute S / NAME = dp DO, V / NAME = softmax.grad P, DP, D / dv P, DO /
//   dk DS, Q scale EXPR / dq DS, K scale EXPR

size_t OperandCount(StmtKind kind) {
  switch (kind) {
    case StmtKind::kSoftmaxRecompute: return 1;
    case StmtKind::kSoftmaxGrad: return 3;
    default: return 2;
  }
}
bool HasScale(StmtKind kind) { return kind == StmtKind::kDK || kind == StmtKind::kDQ; }

absl::Status ParseTileOp(Parser& p, Stmt& s) {
  CUBRIDGE_RETURN_IF_ERROR(ParseNames(p, "a tile name", &s.operands));
  if (s.operands.size() != OperandCount(s.kind)) {
    return p.ErrorAt(s.loc, StrCat(Kw(s), " takes ", OperandCount(s.kind), " operand",
                                   OperandCount(s.kind) == 1 ? "" : "s", ", got ",
                                   s.operands.size()));
  }
  if (!HasScale(s.kind)) return absl::OkStatus();
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectKeyword("scale"));
  return ParseExprInto(p, &s.value);
}
void PrintTileOp(const Stmt& s, StmtPrinter& out) {
  const bool assign = SyntaxOf(s.kind).assign_form;
  out.Line(StrCat(assign ? StrCat(s.name, " = ") : "", Kw(s), " ",
                  absl::StrJoin(s.operands, ", "),
                  HasScale(s.kind) ? StrCat(" scale ", E(s.value)) : ""));
}

// ----- buffer_grad NAME[EXPR, ...] += DS * EXPR -----------------------------------------------

absl::Status ParseBufferGrad(Parser& p, Stmt& s) {
  CUBRIDGE_ASSIGN_OR_RETURN(s.name, p.ExpectName("a buffer name"));
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct("["));
  if (!p.AcceptPunct("]")) {
    CUBRIDGE_RETURN_IF_ERROR(ParseExprList(p, &s.exprs));
    CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct("]"));
  }
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct("+"));
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct("="));
  CUBRIDGE_ASSIGN_OR_RETURN(std::string grads, p.ExpectName("a softmax.grad result"));
  s.operands = {std::move(grads)};
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectPunct("*"));
  return ParseExprInto(p, &s.value);
}
void PrintBufferGrad(const Stmt& s, StmtPrinter& out) {
  out.Line(StrCat(Kw(s), " ", s.name, "[", JoinExprs(s.exprs), "] += ", Operand(s, 0), " * ",
                  E(s.value)));
}

// ----- epilogue [sink EXPR] ------------------------------------------------------------------
//   value = the sink logit, null = no sink

absl::Status ParseEpilogue(Parser& p, Stmt& s) {
  CUBRIDGE_RETURN_IF_ERROR(ParseOptionalClause(p, "sink", &s.value));
  if (s.value != nullptr || p.Peek().kind == TokKind::kNewline || p.Peek().kind == TokKind::kEnd) {
    return absl::OkStatus();
  }
  return p.Expected("end of line or 'sink EXPR' (an attention sink logit, e.g. `epilogue sink "
                    "0.5`)");
}
void PrintEpilogue(const Stmt& s, StmtPrinter& out) {
  out.Line(StrCat(Kw(s), OptionalClause("sink", s.value)));
}

}  // namespace

const std::vector<StmtSyntax>& StmtSyntaxTable() {
  static const std::vector<StmtSyntax> table = {
      {StmtKind::kExpert, "expert", false, ParseExpert, PrintExpert},
      {StmtKind::kParam, "param", false, ParseTypedValue, PrintTypedValue},
      {StmtKind::kConst, "const", false, ParseTypedValue, PrintTypedValue},
      {StmtKind::kBuffer, "buffer", false, ParseBuffer, PrintBuffer},
      {StmtKind::kRole, "role", false, ParseRole, PrintRole},
      {StmtKind::kGrid, "grid", false, ParseGrid, PrintGrid},
      {StmtKind::kTable, "table", false, ParseTable, PrintTable},
      {StmtKind::kDelta, "delta", false, ParseDelta, PrintDelta},
      {StmtKind::kLet, "let", false, ParseTypedValue, PrintTypedValue},
      {StmtKind::kLoad, "load", false, ParseLoad, PrintLoad},
      {StmtKind::kSoftmaxInit, "softmax.init", false, ParseBare, PrintBare},
      {StmtKind::kFor, "for", false, ParseFor, PrintFor},
      {StmtKind::kQK, "qk", true, ParseQK, PrintQK},
      {StmtKind::kScoreMod, "score_mod", false, ParseScoreMod, PrintScoreMod},
      {StmtKind::kMask, "mask", false, ParseMask, PrintMask},
      {StmtKind::kSoftmaxOnline, "softmax.online", true, ParseSoftmaxOnline, PrintSoftmaxOnline},
      {StmtKind::kPV, "pv", false, ParsePV, PrintPV},
      {StmtKind::kEpilogue, "epilogue", false, ParseEpilogue, PrintEpilogue},
      {StmtKind::kGradInit, "grad.init", false, ParseBare, PrintBare},
      {StmtKind::kSoftmaxRecompute, "softmax.recompute", true, ParseTileOp, PrintTileOp},
      {StmtKind::kDV, "dv", false, ParseTileOp, PrintTileOp},
      {StmtKind::kDP, "dp", true, ParseTileOp, PrintTileOp},
      {StmtKind::kSoftmaxGrad, "softmax.grad", true, ParseTileOp, PrintTileOp},
      {StmtKind::kScoreGrad, "score_grad", false, ParseScoreMod, PrintScoreMod},
      {StmtKind::kBufferGrad, "buffer_grad", false, ParseBufferGrad, PrintBufferGrad},
      {StmtKind::kDK, "dk", false, ParseTileOp, PrintTileOp},
      {StmtKind::kDQ, "dq", false, ParseTileOp, PrintTileOp},
      {StmtKind::kGradEpilogue, "grad.epilogue", false, ParseBare, PrintBare},
  };
  return table;
}

const StmtSyntax& SyntaxOf(StmtKind kind) {
  for (const StmtSyntax& s : StmtSyntaxTable()) {
    if (s.kind == kind) return s;
  }
  return StmtSyntaxTable().front();  // unreachable: every kind is registered (tested)
}

}  // namespace cubridge::cuir
