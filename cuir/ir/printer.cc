// Program -> canonical text. Statement layouts are defined next to their parsers in
// stmt_syntax.cc; this file owns the program frame and indentation.
#include "absl/strings/str_cat.h"
#include "cuir/ir/syntax.h"

namespace cubridge::cuir {

void StmtPrinter::Line(std::string_view text) {
  out_.append(2 * depth_, ' ');
  out_.append(text);
  out_.push_back('\n');
}

void StmtPrinter::OpenBlock(std::string_view header) {
  Line(absl::StrCat(std::string(header), " {"));
  ++depth_;
}

void StmtPrinter::CloseBlock() {
  --depth_;
  Line("}");
}

void StmtPrinter::Stmts(const std::vector<Stmt>& body) {
  for (const Stmt& s : body) SyntaxOf(s.kind).print(s, *this);
}

std::string PrintProgram(const Program& p) {
  StmtPrinter out;
  out.Line(absl::StrCat("cuir ", p.version));
  out.OpenBlock(absl::StrCat("kernel ", p.kernel));
  out.Stmts(p.stmts);
  out.CloseBlock();
  return out.text();
}

}  // namespace cubridge::cuir
