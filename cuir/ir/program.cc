#include "cuir/ir/program.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "cuir/ir/syntax.h"

namespace cubridge::cuir {
namespace {

bool SameExprs(const std::vector<ExprPtr>& a, const std::vector<ExprPtr>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const ExprPtr& x, const ExprPtr& y) { return Equal(x, y); });
}

bool SameRanges(const std::vector<BlockRange>& a, const std::vector<BlockRange>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const BlockRange& x, const BlockRange& y) {
                      return Equal(x.lo, y.lo) && Equal(x.hi, y.hi);
                    });
}

bool SameStmts(const std::vector<Stmt>& a, const std::vector<Stmt>& b);

bool SameStmt(const Stmt& a, const Stmt& b) {
  return a.kind == b.kind && a.name == b.name && a.type == b.type && Equal(a.value, b.value) &&
         Equal(a.aux, b.aux) && a.attr == b.attr && a.dtype == b.dtype && a.operands == b.operands &&
         a.names == b.names && SameExprs(a.exprs, b.exprs) && SameRanges(a.ranges, b.ranges) &&
         a.table == b.table && a.full_var == b.full_var && Equal(a.pipeline, b.pipeline) &&
         a.split == b.split && SameStmts(a.body, b.body);
}

bool SameStmts(const std::vector<Stmt>& a, const std::vector<Stmt>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), SameStmt);
}

template <typename P>
auto* FindDeclIn(P& p, StmtKind kind, std::string_view name) {
  auto it = std::find_if(p.stmts.begin(), p.stmts.end(), [&](const Stmt& s) {
    return s.kind == kind && (name.empty() || s.name == name);
  });
  return it == p.stmts.end() ? nullptr : &*it;
}

}  // namespace

// The statement's keyword in the text form (the syntax table is the single source of truth).
const char* StmtKindName(StmtKind k) { return SyntaxOf(k).keyword.data(); }

bool Equal(const Program& a, const Program& b) {
  return a.version == b.version && a.kernel == b.kernel && SameStmts(a.stmts, b.stmts);
}

const std::vector<std::pair<std::string, Type>>& BuiltinSymbols() {
  static const std::vector<std::pair<std::string, Type>> symbols = {
      {"batch", Type::kInt},    {"heads_q", Type::kInt},   {"heads_kv", Type::kInt},
      {"head_dim", Type::kInt}, {"seqlen_q", Type::kInt},  {"seqlen_kv", Type::kInt},
      {"softmax_scale", Type::kFloat},
  };
  return symbols;
}

const Stmt* FindDecl(const Program& p, StmtKind kind, std::string_view name) {
  return FindDeclIn(p, kind, name);
}

Stmt* FindDecl(Program& p, StmtKind kind, std::string_view name) {
  return FindDeclIn(p, kind, name);
}

namespace {
bool HasBackwardStmt(const std::vector<Stmt>& stmts) {
  return std::any_of(stmts.begin(), stmts.end(), [](const Stmt& s) {
    return IsBackwardKind(s.kind) || HasBackwardStmt(s.body);
  });
}
}  // namespace

bool IsBackwardKind(StmtKind k) {
  switch (k) {
    case StmtKind::kDelta: case StmtKind::kGradInit: case StmtKind::kSoftmaxRecompute:
    case StmtKind::kDV: case StmtKind::kDP: case StmtKind::kSoftmaxGrad:
    case StmtKind::kScoreGrad: case StmtKind::kBufferGrad: case StmtKind::kDK:
    case StmtKind::kDQ: case StmtKind::kGradEpilogue:
      return true;
    default:
      return false;
  }
}

bool IsBackward(const Program& p) { return HasBackwardStmt(p.stmts); }

const Stmt* FindKvLoop(const Program& p) { return FindDecl(p, StmtKind::kFor); }
Stmt* FindKvLoop(Program& p) { return FindDecl(p, StmtKind::kFor); }

absl::StatusOr<Program> WithParams(const Program& p, const std::map<std::string, int64_t>& values) {
  Program out = p;
  for (const auto& [name, value] : values) {
    Stmt* param = FindDecl(out, StmtKind::kParam, name);
    if (param == nullptr) {
      std::string declared;
      for (const Stmt& s : out.stmts) {
        if (s.kind == StmtKind::kParam) declared += (declared.empty() ? "" : ", ") + s.name;
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "kernel `", p.kernel, "` has no param `", name, "` (it declares: ",
          declared.empty() ? "none" : declared, ")"));
    }
    param->value = IntLit(value);
  }
  return out;
}

}  // namespace cubridge::cuir
