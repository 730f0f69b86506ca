// Text form -> Program. The generic parts live here (tokens, expressions, blocks, the program
// header); each statement's own syntax is in stmt_syntax.cc.
#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuir/ir/syntax.h"

namespace cubridge::cuir {
namespace {

struct OpSpelling {
  std::string_view text;
  BinaryOp op;
};

constexpr std::array<OpSpelling, 6> kComparisons = {{{"<", BinaryOp::kLt},
                                                      {"<=", BinaryOp::kLe},
                                                      {">", BinaryOp::kGt},
                                                      {">=", BinaryOp::kGe},
                                                      {"==", BinaryOp::kEq},
                                                      {"!=", BinaryOp::kNe}}};
constexpr std::array<OpSpelling, 2> kAdditive = {{{"+", BinaryOp::kAdd}, {"-", BinaryOp::kSub}}};
constexpr std::array<OpSpelling, 4> kMultiplicative = {{{"*", BinaryOp::kMul},
                                                        {"/", BinaryOp::kDiv},
                                                        {"//", BinaryOp::kFloorDiv},
                                                        {"%", BinaryOp::kMod}}};

template <size_t N>
const OpSpelling* MatchOp(const Token& t, const std::array<OpSpelling, N>& ops) {
  if (t.kind != TokKind::kPunct) return nullptr;
  for (const OpSpelling& s : ops) {
    if (t.text == s.text) return &s;
  }
  return nullptr;
}

// Every op but the operators (`-`, `!`, infix binaries) is written as a call `name(args)`.
std::vector<UnaryOp> UnaryCalls() {
  std::vector<UnaryOp> ops;
  for (int i = 0; i < kUnaryOpCount; ++i) {
    const auto op = static_cast<UnaryOp>(i);
    if (op != UnaryOp::kNeg && op != UnaryOp::kNot) ops.push_back(op);
  }
  return ops;
}
std::vector<BinaryOp> BinaryCalls() {
  std::vector<BinaryOp> ops;
  for (int i = 0; i < kBinaryOpCount; ++i) {
    if (IsCallStyle(static_cast<BinaryOp>(i))) ops.push_back(static_cast<BinaryOp>(i));
  }
  return ops;
}
const std::vector<UnaryOp> kUnaryCalls = UnaryCalls();
const std::vector<BinaryOp> kBinaryCalls = BinaryCalls();

std::string KnownFunctions() {
  std::vector<std::string> names;
  for (UnaryOp op : kUnaryCalls) names.push_back(UnaryOpName(op));
  for (BinaryOp op : kBinaryCalls) names.push_back(BinaryOpName(op));
  names.push_back("select");
  return absl::StrJoin(names, ", ");
}

std::string AssignKeywords() {
  std::vector<std::string> names;
  for (const StmtSyntax& s : StmtSyntaxTable()) {
    if (s.assign_form) names.push_back(std::string(s.keyword));
  }
  const std::string last = names.back();
  names.pop_back();
  return absl::StrCat(absl::StrJoin(names, ", "), " or ", last);
}

std::string StatementList() {
  std::vector<std::string> names;
  for (const StmtSyntax& s : StmtSyntaxTable()) {
    std::string keyword(s.keyword);
    names.push_back(s.assign_form ? absl::StrCat("NAME = ", keyword) : keyword);
  }
  return absl::StrJoin(names, ", ");
}

}  // namespace

const Token& Parser::Peek(size_t ahead) const {
  return toks_[std::min(pos_ + ahead, toks_.size() - 1)];  // the last token is kEnd
}

const Token& Parser::Next() {
  const Token& t = toks_[pos_];
  if (pos_ + 1 < toks_.size()) ++pos_;
  return t;
}

bool Parser::AcceptPunct(std::string_view p) {
  if (!Peek().IsPunct(p)) return false;
  Next();
  return true;
}

bool Parser::AcceptKeyword(std::string_view kw) {
  if (!Peek().IsIdent(kw)) return false;
  Next();
  return true;
}

absl::Status Parser::ExpectPunct(std::string_view p) {
  if (AcceptPunct(p)) return absl::OkStatus();
  return Expected(absl::StrCat("'", std::string(p), "'"));
}

absl::Status Parser::ExpectKeyword(std::string_view kw) {
  if (AcceptKeyword(kw)) return absl::OkStatus();
  return Expected(absl::StrCat("'", std::string(kw), "'"));
}

absl::StatusOr<std::string> Parser::ExpectName(std::string_view what) {
  if (Peek().kind != TokKind::kIdent || Peek().text.find('.') != std::string::npos) {
    return Expected(what);
  }
  return Next().text;
}

absl::StatusOr<Type> Parser::ParseType() {
  for (Type t : {Type::kBool, Type::kInt, Type::kFloat}) {
    if (AcceptKeyword(TypeName(t))) return t;
  }
  return Expected("a type (bool, int or float)");
}

absl::Status Parser::ExpectEndOfLine() {
  if (Peek().kind == TokKind::kEnd) return absl::OkStatus();
  if (Peek().kind != TokKind::kNewline) return Expected("end of line");
  Next();
  return absl::OkStatus();
}

void Parser::SkipNewlines() {
  while (Peek().kind == TokKind::kNewline) Next();
}

absl::Status Parser::Expected(std::string_view what) const {
  return ErrorAt(Peek().loc,
                 absl::StrCat("expected ", std::string(what), ", found ", Peek().Describe()));
}

absl::Status Parser::ErrorAt(const SourceLoc& loc, std::string_view msg) const {
  return absl::InvalidArgumentError(absl::StrCat(loc.ToString(), ": ", std::string(msg)));
}

// ---------------------------------------------------------------------------------------------
// Expressions, lowest precedence first.

absl::StatusOr<ExprPtr> Parser::ParseExpr() {
  const SourceLoc loc = Peek().loc;
  CUBRIDGE_ASSIGN_OR_RETURN(ExprPtr e, ParseOr());
  // A chain of binary operators nests no text, yet builds a tree as deep as it is long.
  const ExprExtent extent = MeasureExpr(e, kMaxExprDepth, kNoNodeCap);
  if (extent.over == nullptr) return e;
  return ErrorAt(extent.over->loc.known() ? extent.over->loc : loc,
                 absl::StrCat("expression nested deeper than ", kMaxExprDepth,
                              " levels (operators applied to the results of operators); bind "
                              "parts with `let NAME: TYPE = ...` and use the names"));
}

absl::StatusOr<ExprPtr> Parser::ParseNested(const SourceLoc& loc,
                                            absl::StatusOr<ExprPtr> (Parser::*parse)()) {
  // The text of any expression no deeper than kMaxExprDepth nests at most as many levels (each
  // level enters a subexpression; the printer's only parentheses around a leaf, in `-(3)`, come
  // with a level the tree has and the text does not), so printed programs re-parse.
  if (expr_nesting_ >= kMaxExprDepth) {
    return ErrorAt(loc, absl::StrCat("expression nested deeper than ", kMaxExprDepth,
                                     " levels (brackets, calls, prefix operators); bind parts "
                                     "with `let NAME: TYPE = ...` and use the names"));
  }
  ++expr_nesting_;
  absl::StatusOr<ExprPtr> e = (this->*parse)();
  --expr_nesting_;
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseOr() {
  CUBRIDGE_ASSIGN_OR_RETURN(ExprPtr lhs, ParseAnd());
  while (Peek().IsPunct("||")) {
    SourceLoc loc = Next().loc;
    CUBRIDGE_ASSIGN_OR_RETURN(ExprPtr rhs, ParseAnd());
    lhs = Binary(BinaryOp::kOr, std::move(lhs), std::move(rhs), std::move(loc));
  }
  return lhs;
}

absl::StatusOr<ExprPtr> Parser::ParseAnd() {
  CUBRIDGE_ASSIGN_OR_RETURN(ExprPtr lhs, ParseComparison());
  while (Peek().IsPunct("&&")) {
    SourceLoc loc = Next().loc;
    CUBRIDGE_ASSIGN_OR_RETURN(ExprPtr rhs, ParseComparison());
    lhs = Binary(BinaryOp::kAnd, std::move(lhs), std::move(rhs), std::move(loc));
  }
  return lhs;
}

absl::StatusOr<ExprPtr> Parser::ParseComparison() {
  CUBRIDGE_ASSIGN_OR_RETURN(ExprPtr lhs, ParseAdditive());
  const OpSpelling* op = MatchOp(Peek(), kComparisons);
  if (!op) return lhs;
  SourceLoc loc = Next().loc;
  CUBRIDGE_ASSIGN_OR_RETURN(ExprPtr rhs, ParseAdditive());
  if (MatchOp(Peek(), kComparisons)) {
    return ErrorAt(Peek().loc,
                   "comparisons do not chain: write (a < b) && (b < c) instead of a < b < c");
  }
  return Binary(op->op, std::move(lhs), std::move(rhs), std::move(loc));
}

absl::StatusOr<ExprPtr> Parser::ParseAdditive() {
  CUBRIDGE_ASSIGN_OR_RETURN(ExprPtr lhs, ParseMultiplicative());
  while (const OpSpelling* op = MatchOp(Peek(), kAdditive)) {
    SourceLoc loc = Next().loc;
    CUBRIDGE_ASSIGN_OR_RETURN(ExprPtr rhs, ParseMultiplicative());
    lhs = Binary(op->op, std::move(lhs), std::move(rhs), std::move(loc));
  }
  return lhs;
}

absl::StatusOr<ExprPtr> Parser::ParseMultiplicative() {
  CUBRIDGE_ASSIGN_OR_RETURN(ExprPtr lhs, ParseUnary());
  while (const OpSpelling* op = MatchOp(Peek(), kMultiplicative)) {
    SourceLoc loc = Next().loc;
    CUBRIDGE_ASSIGN_OR_RETURN(ExprPtr rhs, ParseUnary());
    lhs = Binary(op->op, std::move(lhs), std::move(rhs), std::move(loc));
  }
  return lhs;
}

absl::StatusOr<ExprPtr> Parser::ParseUnary() {
  if (Peek().IsPunct("-")) {
    SourceLoc loc = Next().loc;
    // `-3` is the literal -3, but in `-3 ** 2` the minus applies to the power (Python rules).
    if (Peek().IsNumber() && !Peek(1).IsPunct("**")) return NumberLiteral(Next(), true, loc);
    CUBRIDGE_ASSIGN_OR_RETURN(ExprPtr operand, ParseNested(loc, &Parser::ParseUnary));
    return Unary(UnaryOp::kNeg, std::move(operand), std::move(loc));
  }
  if (Peek().IsPunct("!")) {
    SourceLoc loc = Next().loc;
    CUBRIDGE_ASSIGN_OR_RETURN(ExprPtr operand, ParseNested(loc, &Parser::ParseUnary));
    return Unary(UnaryOp::kNot, std::move(operand), std::move(loc));
  }
  return ParsePower();
}

absl::StatusOr<ExprPtr> Parser::ParsePower() {
  CUBRIDGE_ASSIGN_OR_RETURN(ExprPtr base, ParsePrimary());
  if (!Peek().IsPunct("**")) return base;
  SourceLoc loc = Next().loc;
  // The exponent is a unary expression, which makes `**` right-associative.
  CUBRIDGE_ASSIGN_OR_RETURN(ExprPtr exponent, ParseNested(loc, &Parser::ParseUnary));
  return Binary(BinaryOp::kPow, std::move(base), std::move(exponent), std::move(loc));
}

absl::StatusOr<ExprPtr> Parser::NumberLiteral(const Token& tok, bool negate,
                                              const SourceLoc& loc) {
  if (tok.kind == TokKind::kFloat) {
    return FloatLit(negate ? -tok.float_value : tok.float_value, loc);
  }
  constexpr uint64_t kMinMagnitude = uint64_t{1} << 63;
  if (negate) {
    return IntLit(tok.int_value == kMinMagnitude ? std::numeric_limits<int64_t>::min()
                                                 : -static_cast<int64_t>(tok.int_value),
                  loc);
  }
  if (tok.int_value == kMinMagnitude) {
    return ErrorAt(tok.loc, absl::StrCat("integer literal ", tok.text,
                                         " does not fit in a 64-bit signed int"));
  }
  return IntLit(static_cast<int64_t>(tok.int_value), loc);
}

absl::StatusOr<ExprPtr> Parser::ParsePrimary() {
  const Token& t = Peek();
  if (t.IsNumber()) return NumberLiteral(Next(), false, t.loc);
  if (t.IsPunct("(")) {
    Next();
    CUBRIDGE_ASSIGN_OR_RETURN(ExprPtr inner, ParseNested(t.loc, &Parser::ParseOr));
    CUBRIDGE_RETURN_IF_ERROR(ExpectPunct(")"));
    return inner;
  }
  if (t.kind != TokKind::kIdent || t.text.find('.') != std::string::npos) {
    return Expected("an expression");
  }
  const Token& name = Next();
  if (name.text == "true" || name.text == "false") return BoolLit(name.text == "true", name.loc);
  if (Peek().IsPunct("(")) return ParseCall(name);
  if (Peek().IsPunct("[")) {
    const SourceLoc open = Next().loc;
    std::vector<ExprPtr> indices;  // `x[]` reads a rank-0 buffer
    if (!Peek().IsPunct("]")) {
      do {
        if (indices.size() == kMaxBufferRank) {
          return ErrorAt(Peek().loc, absl::StrCat("buffers have at most ", kMaxBufferRank,
                                                  " dimensions; index with at most ",
                                                  kMaxBufferRank, " expressions"));
        }
        CUBRIDGE_ASSIGN_OR_RETURN(ExprPtr index, ParseNested(open, &Parser::ParseOr));
        indices.push_back(std::move(index));
      } while (AcceptPunct(","));
    }
    CUBRIDGE_RETURN_IF_ERROR(ExpectPunct("]"));
    return Index(name.text, std::move(indices), name.loc);
  }
  return Var(name.text, name.loc);
}

absl::StatusOr<ExprPtr> Parser::ParseCall(const Token& name) {
  const SourceLoc& open = Next().loc;  // (
  std::vector<ExprPtr> args;
  if (!Peek().IsPunct(")")) {
    do {
      CUBRIDGE_ASSIGN_OR_RETURN(ExprPtr arg, ParseNested(open, &Parser::ParseOr));
      args.push_back(std::move(arg));
    } while (AcceptPunct(","));
  }
  CUBRIDGE_RETURN_IF_ERROR(ExpectPunct(")"));
  auto arity = [&](size_t n) -> absl::Status {
    if (args.size() == n) return absl::OkStatus();
    return ErrorAt(name.loc, absl::StrCat(name.text, " takes ", n, " argument", n == 1 ? "" : "s",
                                          ", got ", args.size()));
  };
  for (UnaryOp op : kUnaryCalls) {
    if (name.text != UnaryOpName(op)) continue;
    CUBRIDGE_RETURN_IF_ERROR(arity(1));
    return Unary(op, args[0], name.loc);
  }
  for (BinaryOp op : kBinaryCalls) {
    if (name.text != BinaryOpName(op)) continue;
    CUBRIDGE_RETURN_IF_ERROR(arity(2));
    return Binary(op, args[0], args[1], name.loc);
  }
  if (name.text == "select") {
    CUBRIDGE_RETURN_IF_ERROR(arity(3));
    return Select(args[0], args[1], args[2], name.loc);
  }
  return ErrorAt(name.loc, absl::StrCat("unknown function '", name.text, "'; the functions are ",
                                        KnownFunctions()));
}

// ---------------------------------------------------------------------------------------------
// Statements and blocks.

absl::Status Parser::ParseBlock(std::vector<Stmt>* body) {
  if (block_depth_ >= kMaxBlockDepth && Peek().IsPunct("{")) {
    return ErrorAt(Peek().loc, absl::StrCat("blocks nested deeper than ", kMaxBlockDepth,
                                            " levels; a kernel has one KV loop, not nested "
                                            "ones: close the loop before this '{'"));
  }
  CUBRIDGE_RETURN_IF_ERROR(ExpectPunct("{"));
  CUBRIDGE_RETURN_IF_ERROR(ExpectEndOfLine());
  ++block_depth_;
  absl::Status status = ParseBlockBody(body);
  --block_depth_;
  return status;
}

absl::Status Parser::ParseBlockBody(std::vector<Stmt>* body) {
  while (true) {
    SkipNewlines();
    if (AcceptPunct("}")) return absl::OkStatus();
    if (Peek().kind == TokKind::kEnd) return Expected("'}'");
    Stmt stmt;
    CUBRIDGE_RETURN_IF_ERROR(ParseStmt(&stmt));
    body->push_back(std::move(stmt));
    CUBRIDGE_RETURN_IF_ERROR(ExpectEndOfLine());
  }
}

absl::Status Parser::ParseStmt(Stmt* stmt) {
  stmt->loc = Peek().loc;
  bool assign = Peek().kind == TokKind::kIdent && Peek(1).IsPunct("=");
  if (assign) {
    stmt->name = Next().text;
    Next();  // =
  }
  for (const StmtSyntax& syntax : StmtSyntaxTable()) {
    if (syntax.assign_form != assign || !Peek().IsIdent(syntax.keyword)) continue;
    Next();
    stmt->kind = syntax.kind;
    return syntax.parse(*this, *stmt);
  }
  if (assign) return Expected(absl::StrCat(AssignKeywords(), " after '='"));
  return Expected(absl::StrCat("a statement (", StatementList(), ")"));
}

// ---------------------------------------------------------------------------------------------
// Entry points.

absl::StatusOr<Program> ParseProgram(std::string_view text, std::string_view filename) {
  CUBRIDGE_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(text, filename));
  Parser p(std::move(tokens));
  Program prog;
  p.SkipNewlines();
  prog.loc = p.Peek().loc;
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectKeyword("cuir"));
  if (p.Peek().kind != TokKind::kInt) return p.Expected("a version number after 'cuir'");
  const Token& version = p.Next();
  if (version.int_value != 1) {
    return p.ErrorAt(version.loc, absl::StrCat("unsupported CuIR version ", version.text,
                                               "; this build reads version 1 (write 'cuir 1')"));
  }
  prog.version = 1;
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectEndOfLine());
  p.SkipNewlines();
  CUBRIDGE_RETURN_IF_ERROR(p.ExpectKeyword("kernel"));
  CUBRIDGE_ASSIGN_OR_RETURN(prog.kernel, p.ExpectName("a kernel name"));
  CUBRIDGE_RETURN_IF_ERROR(p.ParseBlock(&prog.stmts));
  p.SkipNewlines();
  if (p.Peek().kind != TokKind::kEnd) return p.Expected("end of input after the kernel's '}'");
  return prog;
}

absl::StatusOr<ExprPtr> ParseExpr(std::string_view text, std::string_view filename) {
  CUBRIDGE_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(text, filename));
  Parser p(std::move(tokens));
  p.SkipNewlines();
  CUBRIDGE_ASSIGN_OR_RETURN(ExprPtr e, p.ParseExpr());
  p.SkipNewlines();
  if (p.Peek().kind != TokKind::kEnd) return p.Expected("end of expression");
  return e;
}

}  // namespace cubridge::cuir
