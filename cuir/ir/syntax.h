// Internal to cuir/ir: the machinery shared by the parser, the printer and the per-construct
// statement syntax (stmt_syntax.cc). Each statement construct registers one StmtSyntax entry
// holding both its parse and its print function, so a construct's text form is defined once.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cuir/ir/expr.h"
#include "cuir/ir/lexer.h"
#include "cuir/ir/program.h"
#include "cuir/ir/status_macros.h"

namespace cubridge::cuir {

// Recursive-descent parser over a token list; every error names file:line:col.
class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  const Token& Peek(size_t ahead = 0) const;
  const Token& Next();
  bool AcceptPunct(std::string_view p);
  bool AcceptKeyword(std::string_view kw);
  absl::Status ExpectPunct(std::string_view p);
  absl::Status ExpectKeyword(std::string_view kw);
  // An identifier; `what` names it in the error ("a loop variable").
  absl::StatusOr<std::string> ExpectName(std::string_view what);
  absl::StatusOr<Type> ParseType();
  // An expression at most kMaxExprDepth deep (expr.h), nested at most as many levels in the text.
  absl::StatusOr<ExprPtr> ParseExpr();
  // A newline ends a statement; the end of input does too (the missing '}' is reported next).
  absl::Status ExpectEndOfLine();
  void SkipNewlines();

  // `{` NEWLINE (statement NEWLINE)* `}`, at most kMaxBlockDepth (program.h) blocks deep.
  absl::Status ParseBlock(std::vector<Stmt>* body);
  absl::Status ParseStmt(Stmt* stmt);

  // "expected WHAT, found <next token>" at the next token.
  absl::Status Expected(std::string_view what) const;
  absl::Status ErrorAt(const SourceLoc& loc, std::string_view msg) const;

 private:
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  absl::StatusOr<ExprPtr> ParseComparison();
  absl::StatusOr<ExprPtr> ParseAdditive();
  absl::StatusOr<ExprPtr> ParseMultiplicative();
  absl::StatusOr<ExprPtr> ParseUnary();
  absl::StatusOr<ExprPtr> ParsePower();
  absl::StatusOr<ExprPtr> ParsePrimary();
  absl::StatusOr<ExprPtr> ParseCall(const Token& name);
  absl::Status ParseBlockBody(std::vector<Stmt>* body);
  absl::StatusOr<ExprPtr> NumberLiteral(const Token& tok, bool negate, const SourceLoc& loc);
  // Runs `parse` one nesting level deeper (a bracket's contents, a prefix operator's operand, an
  // exponent), refusing to go past kMaxExprDepth levels: the recursion stays bounded.
  absl::StatusOr<ExprPtr> ParseNested(const SourceLoc& loc,
                                      absl::StatusOr<ExprPtr> (Parser::*parse)());

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int expr_nesting_ = 0;
  int block_depth_ = 0;
};

// Accumulates the canonical text: two spaces of indentation per nesting level.
class StmtPrinter {
 public:
  void Line(std::string_view text);
  void OpenBlock(std::string_view header);  // "header {", then indents
  void CloseBlock();                        // dedents, then "}"
  void Stmts(const std::vector<Stmt>& body);
  const std::string& text() const { return out_; }

 private:
  std::string out_;
  int depth_ = 0;
};

struct StmtSyntax {
  StmtKind kind;
  // Leading keyword (`let`, `for`, ...), or for assignment forms the keyword after `NAME =`.
  std::string_view keyword;
  bool assign_form;  // `NAME = keyword ...`: the parser fills stmt.name before `parse`
  // Parses what follows the keyword (the parser has consumed it), up to the end of the line.
  absl::Status (*parse)(Parser& p, Stmt& stmt);
  void (*print)(const Stmt& stmt, StmtPrinter& out);
};

const std::vector<StmtSyntax>& StmtSyntaxTable();
const StmtSyntax& SyntaxOf(StmtKind kind);

}  // namespace cubridge::cuir
