// Family (d), buffer inputs: params.const and buffers.declare.
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuir/transfer/rule.h"

namespace cubridge::transfer {
namespace {

using cuir::ExprKind;
using cuir::ExprPtr;
using cuir::Stmt;
using cuir::StmtKind;
using cuir::Type;

bool IsLiteral(const ExprPtr& e) {
  return e && (e->kind == ExprKind::kBoolLit || e->kind == ExprKind::kIntLit ||
               e->kind == ExprKind::kFloatLit);
}

// The literal as a value of `type` (an int literal may initialise a float const); null when the
// literal's kind does not fit.
ExprPtr AsType(const ExprPtr& lit, Type type) {
  switch (type) {
    case Type::kBool:
      return lit->kind == ExprKind::kBoolLit ? lit : nullptr;
    case Type::kInt:
      return lit->kind == ExprKind::kIntLit ? lit : nullptr;
    case Type::kFloat:
      if (lit->kind == ExprKind::kFloatLit) return lit;
      if (lit->kind == ExprKind::kIntLit) {
        return cuir::FloatLit(static_cast<double>(lit->int_value), lit->loc);
      }
      return nullptr;
  }
  return nullptr;
}

// The declaration's position when the spec gave one, else where the value was parsed.
cuir::SourceLoc BestLoc(const cuir::SourceLoc& decl, const ExprPtr& value) {
  return decl.known() || !value ? decl : value->loc;
}

}  // namespace

absl::Status ApplyParamsConst(cuir::Program& program, RuleContext& ctx) {
  size_t at = AfterLast(program.stmts, StmtKind::kParam, 0);
  std::vector<std::string> declared;
  for (const VariantSpec::Const& c : ctx.spec.consts) {
    std::string key = ConstKey(c.name);
    ExprPtr value = IsLiteral(c.value) ? AsType(c.value, c.type) : nullptr;
    if (!value) {
      std::string shown = c.value ? cuir::PrintExpr(c.value) : "<none>";
      ctx.claims.Decline(key,
                         absl::StrCat("its value `", shown, "` is not a literal of type ",
                                      cuir::TypeName(c.type), "; spec scalars are bound by value"),
                         BestLoc(c.loc, c.value));
      continue;
    }
    Stmt s;
    s.kind = StmtKind::kConst;
    s.loc = c.loc;
    s.name = c.name;
    s.type = c.type;
    s.value = value;
    program.stmts.insert(program.stmts.begin() + at++, std::move(s));
    declared.push_back(absl::StrCat(c.name, " = ", cuir::PrintExpr(value)));
    ctx.claims.Claim(key);
  }
  if (!declared.empty()) {
    ctx.applied.push_back({"params.const", "const " + absl::StrJoin(declared, ", ")});
  }
  return absl::OkStatus();
}

absl::Status ApplyBuffersDeclare(cuir::Program& program, RuleContext& ctx) {
  size_t at =
      AfterLast(program.stmts, StmtKind::kConst, AfterLast(program.stmts, StmtKind::kParam, 0));
  std::vector<std::string> declared;
  for (const VariantSpec::Buffer& b : ctx.spec.buffers) {
    std::string key = BufferKey(b.name);
    Stmt s;
    s.kind = StmtKind::kBuffer;
    s.loc = b.loc;
    s.name = b.name;
    s.dtype = b.dtype;
    s.type = cuir::ElementType(b.dtype);
    s.exprs = b.extents;
    std::vector<std::string> dims;
    for (const ExprPtr& e : b.extents) dims.push_back(e ? cuir::PrintExpr(e) : "?");
    declared.push_back(absl::StrCat(b.name, ": ", cuir::TensorDTypeName(b.dtype), "[",
                                    absl::StrJoin(dims, ", "), "]"));
    program.stmts.insert(program.stmts.begin() + at++, std::move(s));
    ctx.claims.Claim(key);
  }
  if (!declared.empty()) {
    ctx.applied.push_back({"buffers.declare", "buffer " + absl::StrJoin(declared, ", ")});
  }
  return absl::OkStatus();
}

}  // namespace cubridge::transfer
