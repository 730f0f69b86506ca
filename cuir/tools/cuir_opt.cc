// cuir-opt: the lowering's expression rewrites and the transfer rules one at a time, as MLIR's
// mlir-opt runs passes.
//   cuir-opt --list
//   cuir-opt --rewrite NAME [--vars "slope float, n int"] EXPR   prints what NAME makes of EXPR
//   cuir-opt --transfer [--program] ITEM...                       prints what the transfer rules
//       make of a variant on the fa2_sm80 base (its backward base with the item `backward`):
//       ITEMs as the golden files write them
//       (cuir/transfer/golden.h), e.g. "mask: q_idx >= kv_idx - W" "const W: int = 8";
//       --program prints the whole program instead of the lines that changed
//   cuir-opt FILE...                                               runs golden files: a
//       `# rewrite:` file (tests/lower/golden) or a `# rule:` file (tests/transfer/golden)
// With files: each case's input, expected and actual output on a mismatch; exit 1 if any.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cuir/files/files.h"
#include "cuir/lower/expert.h"
#include "cuir/lower/rewrites/rewrites.h"
#include "cuir/transfer/golden.h"
#include "cuir/transfer/transfer.h"

namespace {

using namespace cubridge;

int Usage() {
  std::fprintf(stderr,
               "usage: cuir-opt --list\n"
               "       cuir-opt --rewrite NAME [--vars \"NAME TYPE, ...\"] EXPR\n"
               "       cuir-opt --transfer [--program] ITEM...   (e.g. \"mask: q_idx >= kv_idx\")\n"
               "       cuir-opt GOLDEN_FILE...\n");
  return 2;
}

int Fail(absl::string_view message) {
  std::fprintf(stderr, "cuir-opt: %s\n", std::string(message).c_str());
  return 2;
}

// A golden file's kind, told by its header: `# rule:` (transfer) or `# rewrite:` (lowering).
enum class GoldenKind { kRewrite, kRule, kUnknown };
GoldenKind KindOf(absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (absl::StartsWith(line, "# rule:")) return GoldenKind::kRule;
    if (absl::StartsWith(line, "# rewrite:")) return GoldenKind::kRewrite;
  }
  return GoldenKind::kUnknown;
}

// A transfer case's outputs span lines: shown indented under their label.
std::string Block(const std::string& text) {
  return absl::StrCat("\n      ", absl::StrReplaceAll(text, {{"\n", "\n      "}}));
}

int List() {
  std::printf("expression rewrites (--rewrite NAME EXPR; tests/lower/golden/NAME.txt):\n");
  for (const auto& r : lower::ExprRewrites()) std::printf("  %-26s %s\n", r.name, r.summary);
  std::printf("transfer rules, in the order Transfer runs them (--transfer ITEM...; "
              "tests/transfer/golden/NAME.txt):\n");
  for (const std::string& name : transfer::RuleNames()) std::printf("  %s\n", name.c_str());
  return 0;
}

int Rewrite(const std::vector<std::string>& args) {
  std::string name, vars, expr;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--vars" && i + 1 < args.size()) {
      vars = args[++i];
    } else if (name.empty()) {
      name = args[i];
    } else if (expr.empty()) {
      expr = args[i];
    } else {
      return Usage();
    }
  }
  if (name.empty() || expr.empty()) return Usage();
  const std::string text = absl::StrCat("# rewrite: ", name, "\n",
                                        vars.empty() ? "" : "# vars: " + vars + "\n",
                                        "in: ", expr, "\nout: ?\n");
  auto run = lower::RunGolden(text, "<command line>");
  if (!run.ok()) return Fail(run.status().message());
  std::printf("%s\n", run->cases[0].got.c_str());
  return absl::StartsWith(run->cases[0].got, "error: ") ? 1 : 0;
}

int TransferVariant(const std::vector<std::string>& args) {
  bool whole_program = false;
  std::vector<std::string> items;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--program") {
      whole_program = true;
    } else {
      items.push_back(args[i]);
    }
  }
  if (items.empty()) return Usage();
  auto base = transfer::ReadGoldenBases(lower::ExpertsDir());
  if (!base.ok()) return Fail(base.status().message());
  auto variant = transfer::ParseVariant(items);
  if (!variant.ok()) return Fail(variant.status().message());
  const std::string shown = transfer::ShowTransfer(*base, *variant, whole_program);
  std::printf("%s\n", shown.c_str());
  return absl::StartsWith(shown, "error: ") ? 1 : 0;
}

int GoldenFiles(const std::vector<std::string>& paths) {
  std::optional<transfer::GoldenBases> base;  // read by the first `# rule:` file
  int failed = 0, total = 0;
  for (const std::string& path : paths) {
    auto text = files::ReadFile(path);
    if (!text.ok()) return Fail(text.status().message());
    switch (KindOf(*text)) {
      case GoldenKind::kUnknown:
        return Fail(absl::StrCat(path, ": neither a `# rewrite: NAME` nor a `# rule: NAME` line"));
      case GoldenKind::kRewrite: {
        auto run = lower::RunGolden(*text, path);
        if (!run.ok()) return Fail(run.status().message());
        for (const auto& c : run->cases) {
          ++total;
          if (c.got == c.want) continue;
          ++failed;
          std::printf("%s:%d: %s\n  in:   %s\n  want: %s\n  got:  %s\n", path.c_str(), c.line,
                      run->rewrite.c_str(), c.in.c_str(), c.want.c_str(), c.got.c_str());
        }
        break;
      }
      case GoldenKind::kRule: {
        if (!base) {
          auto read = transfer::ReadGoldenBases(lower::ExpertsDir());
          if (!read.ok()) return Fail(read.status().message());
          base = *std::move(read);
        }
        auto run = transfer::RunGolden(*text, path, *base);
        if (!run.ok()) return Fail(run.status().message());
        for (const auto& c : run->cases) {
          ++total;
          if (c.got == c.want) continue;
          ++failed;
          std::printf("%s:%d: %s\n  in:   %s\n  want:%s\n  got:%s\n", path.c_str(), c.line,
                      run->rule.c_str(), c.in.c_str(), Block(c.want).c_str(),
                      Block(c.got).c_str());
        }
        break;
      }
    }
  }
  std::printf("%d of %d cases as expected\n", total - failed, total);
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return Usage();
  if (args[0] == "--list") return List();
  if (args[0] == "--rewrite") return Rewrite(args);
  if (args[0] == "--transfer") return TransferVariant(args);
  return GoldenFiles(args);
}
