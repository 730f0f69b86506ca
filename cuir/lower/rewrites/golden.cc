#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cuir/ir/bounds.h"
#include "cuir/ir/program.h"
#include "cuir/lower/rewrites/rewrites.h"

namespace cubridge::lower {
namespace {

std::string Trim(absl::string_view s) { return std::string(absl::StripAsciiWhitespace(s)); }

absl::Status At(absl::string_view file, int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ":", line, ": ", what));
}

// The element visitors' names, as the lowering binds them.
EmitScope ElementScope() {
  EmitScope scope;
  scope.Bind("score", "score", CType::kFloat);
  scope.Bind("q_idx", "q_idx", CType::kInt);
  scope.Bind("kv_idx", "kv_idx", CType::kInt);
  scope.Bind(kQFloat, "q_f", CType::kFloat);
  scope.Bind(kKvFloat, "kv_f", CType::kFloat);
  scope.SetBounds(cuir::ElementBoundsEnv());  // indices in [0, 2^31 - 2], as in the visitors
  return scope;
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
  EmitScope scope = ElementScope();
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
    } else if (absl::ConsumePrefix(&rest, "# vars:")) {
      for (absl::string_view decl : absl::StrSplit(rest, ',', absl::SkipWhitespace())) {
        std::vector<std::string> parts = absl::StrSplit(Trim(decl), ' ', absl::SkipEmpty());
        if (parts.size() != 2 || (parts[1] != "int" && parts[1] != "float" && parts[1] != "bool")) {
          return At(file, n, absl::StrCat("`", Trim(decl), "`: write NAME int|float|bool"));
        }
        const CType type = parts[1] == "int" ? CType::kInt : parts[1] == "float" ? CType::kFloat
                                                                                 : CType::kBool;
        scope.Bind(parts[0], parts[0], type);
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
      absl::StatusOr<std::string> got =
          parsed.ok() ? rewrite->show(*parsed, scope) : absl::StatusOr<std::string>(parsed.status());
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
