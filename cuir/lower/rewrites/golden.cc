#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cuir/ir/bounds.h"
#include "cuir/ir/dtype.h"
#include "cuir/ir/program.h"
#include "cuir/lower/rewrites/rewrites.h"

namespace cubridge::lower {
namespace {

std::string Trim(absl::string_view s) { return std::string(absl::StripAsciiWhitespace(s)); }

absl::Status At(absl::string_view file, int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ":", line, ": ", what));
}

// The element visitors' names, as the lowering binds them; the block and before-the-walk scopes
// start empty (the file's `# vars:` and `# walk:` fill them).
RewriteScopes GoldenScopes() {
  RewriteScopes scopes;
  EmitScope& scope = scopes.element;
  scope.Bind("score", "score", CType::kFloat);
  scope.Bind("q_idx", "q_idx", CType::kInt);
  scope.Bind("kv_idx", "kv_idx", CType::kInt);
  scope.Bind(kQFloat, "q_f", CType::kFloat);
  scope.Bind(kKvFloat, "kv_f", CType::kFloat);
  scope.SetBounds(cuir::ElementBoundsEnv());  // indices in [0, 2^31 - 2], as in the visitors
  return scopes;
}

// One `NAME TYPE` of a `# vars:` or `# walk:` line, bound in `scopes`: TYPE int, float or bool, or
// (a buffer) DTYPE[RANK], whose sizes and strides are NAME_size0, ..., NAME_stride0, ....
bool BindDecl(absl::string_view decl, const std::vector<EmitScope*>& scopes) {
  std::vector<std::string> parts = absl::StrSplit(Trim(decl), ' ', absl::SkipEmpty());
  if (parts.size() != 2) return false;
  const std::string& name = parts[0];
  const std::string& type = parts[1];
  if (type == "int" || type == "float" || type == "bool") {
    const CType t = type == "int" ? CType::kInt : type == "float" ? CType::kFloat : CType::kBool;
    for (EmitScope* scope : scopes) scope->Bind(name, name, t);
    return true;
  }
  const size_t open = type.find('[');
  int rank = 0;
  if (open == std::string::npos || type.back() != ']' ||
      !absl::SimpleAtoi(type.substr(open + 1, type.size() - open - 2), &rank) || rank < 1) {
    return false;
  }
  const std::optional<cuir::TensorDType> dtype = cuir::TensorDTypeFromName(type.substr(0, open));
  if (!dtype) return false;
  BufferBinding binding;
  binding.data = name;
  binding.dtype = *dtype;
  for (int d = 0; d < rank; ++d) {
    binding.sizes.push_back(absl::StrCat(name, "_size", d));
    if (d + 1 < rank) binding.strides.push_back(absl::StrCat(name, "_stride", d));
  }
  for (EmitScope* scope : scopes) scope->BindBuffer(name, binding);
  return true;
}

// CuIR has no dotted names, but the rewrites read and write the float indices q_idx.f and
// kv_idx.f: a golden file writes them as they print; they parse as stand-ins, renamed after.
constexpr std::pair<const char*, const char*> kFloatIndexStandIns[] = {
    {kQFloat, "q_idx__f"}, {kKvFloat, "kv_idx__f"}};

cuir::ExprPtr RenameStandIns(const cuir::ExprPtr& e) {
  auto copy = std::make_shared<cuir::Expr>(*e);
  for (const auto& [name, stand_in] : kFloatIndexStandIns) {
    if (copy->kind == cuir::ExprKind::kVar && copy->name == stand_in) copy->name = name;
  }
  for (cuir::ExprPtr& a : copy->args) a = RenameStandIns(a);
  return copy;
}

absl::StatusOr<cuir::ExprPtr> ParseGoldenExpr(std::string text, absl::string_view file) {
  for (const auto& [name, stand_in] : kFloatIndexStandIns) {
    text = absl::StrReplaceAll(text, {{name, stand_in}});
  }
  auto parsed = cuir::ParseExpr(text, std::string_view(file.data(), file.size()));
  if (!parsed.ok()) return parsed.status();
  return RenameStandIns(*parsed);
}

}  // namespace

absl::StatusOr<GoldenRun> RunGolden(absl::string_view text, absl::string_view file) {
  GoldenRun run;
  RewriteScopes scopes = GoldenScopes();
  const ExprRewrite* rewrite = nullptr;
  std::optional<GoldenCase> open;
  int n = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++n;
    const std::string line = Trim(raw);
    if (line.empty()) continue;
    absl::string_view rest = line;
    if (absl::ConsumePrefix(&rest, "# rewrite:")) {
      run.rewrite = Trim(rest);
      rewrite = FindExprRewrite(run.rewrite);
      if (rewrite == nullptr) return At(file, n, absl::StrCat("no rewrite named '", run.rewrite, "'"));
    } else if (absl::StartsWith(line, "# vars:") || absl::StartsWith(line, "# walk:")) {
      // The walk's names are not known before it.
      const bool walk = absl::ConsumePrefix(&rest, "# walk:");
      if (!walk) absl::ConsumePrefix(&rest, "# vars:");
      std::vector<EmitScope*> in = {&scopes.element, &scopes.block};
      if (!walk) in.push_back(&scopes.before_walk);
      for (absl::string_view decl : absl::StrSplit(rest, ',', absl::SkipWhitespace())) {
        if (!BindDecl(decl, in)) {
          return At(file, n, absl::StrCat("`", Trim(decl),
                                          "`: write NAME int|float|bool or NAME DTYPE[RANK]"));
        }
      }
    } else if (absl::StartsWith(line, "#")) {
      continue;  // a comment
    } else if (absl::ConsumePrefix(&rest, "in:")) {
      if (open) return At(file, n, "an `in:` without the `out:` of the one before");
      open = GoldenCase{n, Trim(rest), "", ""};
    } else if (absl::ConsumePrefix(&rest, "out:")) {
      if (!open) return At(file, n, "an `out:` without its `in:`");
      if (rewrite == nullptr) return At(file, n, "no `# rewrite: NAME` line before the cases");
      open->want = Trim(rest);
      auto parsed = ParseGoldenExpr(open->in, file);
      absl::StatusOr<std::string> got = parsed.ok() ? rewrite->show(*parsed, scopes)
                                                    : absl::StatusOr<std::string>(parsed.status());
      open->got = got.ok() ? *got : absl::StrCat("error: ", got.status().message());
      run.cases.push_back(*std::move(open));
      open.reset();
    } else {
      return At(file, n, "expected `# rewrite:`, `# vars:`, `in:` or `out:`");
    }
  }
  if (open) return At(file, open->line, "an `in:` without its `out:`");
  if (rewrite == nullptr) return At(file, 1, "no `# rewrite: NAME` line");
  return run;
}

}  // namespace cubridge::lower
