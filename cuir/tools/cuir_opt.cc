// cuir-opt: the lowering's expression rewrites one at a time, as MLIR's mlir-opt runs passes.
//   cuir-opt --list
//   cuir-opt --rewrite NAME [--vars "slope float, n int"] EXPR   prints what NAME makes of EXPR
//   cuir-opt FILE...                                               runs golden files (tests/lower/golden)
// With files: each case's input, expected and actual output on a mismatch; exit 1 if any.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cuir/files/files.h"
#include "cuir/lower/rewrites/rewrites.h"

namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: cuir-opt --list\n"
               "       cuir-opt --rewrite NAME [--vars \"NAME TYPE, ...\"] EXPR\n"
               "       cuir-opt GOLDEN_FILE...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cubridge;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return Usage();
  if (args[0] == "--list") {
    for (const auto& r : lower::ExprRewrites()) std::printf("%-26s %s\n", r.name, r.summary);
    return 0;
  }
  if (args[0] == "--rewrite") {
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
    if (!run.ok()) {
      std::fprintf(stderr, "cuir-opt: %s\n", std::string(run.status().message()).c_str());
      return 2;
    }
    std::printf("%s\n", run->cases[0].got.c_str());
    return absl::StartsWith(run->cases[0].got, "error: ") ? 1 : 0;
  }
  int failed = 0, total = 0;
  for (const std::string& path : args) {
    auto text = files::ReadFile(path);
    if (!text.ok()) {
      std::fprintf(stderr, "cuir-opt: %s\n", std::string(text.status().message()).c_str());
      return 2;
    }
    auto run = lower::RunGolden(*text, path);
    if (!run.ok()) {
      std::fprintf(stderr, "cuir-opt: %s\n", std::string(run.status().message()).c_str());
      return 2;
    }
    for (const auto& c : run->cases) {
      ++total;
      if (c.got == c.want) continue;
      ++failed;
      std::printf("%s:%d: %s\n  in:   %s\n  want: %s\n  got:  %s\n", path.c_str(), c.line,
                  run->rewrite.c_str(), c.in.c_str(), c.want.c_str(), c.got.c_str());
    }
  }
  std::printf("%d of %d cases as expected\n", total - failed, total);
  return failed == 0 ? 0 : 1;
}
