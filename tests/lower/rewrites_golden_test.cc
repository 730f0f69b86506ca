// The lowering's expression rewrites and hoisting passes against their golden files
// (tests/lower/golden/NAME.txt, input expressions beside the expected output, as MLIR's FileCheck
// tests keep them): every rewrite has one, and every case in it gives what it says. `cuir-opt
// FILE` runs the same files.
#include <filesystem>
#include <set>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "cuir/files/files.h"
#include "cuir/lower/rewrites/rewrites.h"

namespace cubridge::lower {
namespace {

namespace fs = std::filesystem;

const fs::path kGolden = fs::path(CUBRIDGE_SOURCE_ROOT) / "tests/lower/golden";

TEST(RewriteGolden, EveryRewriteHasAGoldenFileAndEveryFileARewrite) {
  std::set<std::string> files, rewrites;
  for (const auto& entry : fs::directory_iterator(kGolden)) {
    if (entry.path().extension() == ".txt") files.insert(entry.path().stem().string());
  }
  for (const ExprRewrite& r : ExprRewrites()) rewrites.insert(r.name);
  EXPECT_EQ(files, rewrites);
}

TEST(RewriteGolden, EveryCaseGivesItsExpectedOutput) {
  int cases = 0;
  for (const ExprRewrite& r : ExprRewrites()) {
    const std::string path = (kGolden / (std::string(r.name) + ".txt")).string();
    auto text = files::ReadFile(path);
    ASSERT_TRUE(text.ok()) << text.status();
    auto run = RunGolden(*text, path);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run->rewrite, r.name) << path;
    EXPECT_GE(run->cases.size(), 3u) << path << ": a rewrite's file shows where it applies and where not";
    for (const GoldenCase& c : run->cases) {
      ++cases;
      EXPECT_EQ(c.got, c.want) << path << ":" << c.line << ": " << c.in;
    }
  }
  EXPECT_GT(cases, 0);
}

TEST(RewriteGolden, AMalformedFileIsRefusedWithItsLine) {
  auto no_rewrite = RunGolden("in: score\nout: score\n", "f.txt");
  EXPECT_EQ(no_rewrite.status().message(), "f.txt:2: no `# rewrite: NAME` line before the cases");
  auto unknown = RunGolden("# rewrite: no-such\n", "f.txt");
  EXPECT_EQ(unknown.status().message(), "f.txt:1: no rewrite named 'no-such'");
  auto dangling = RunGolden("# rewrite: fold-scale\nin: score\n", "f.txt");
  EXPECT_EQ(dangling.status().message(), "f.txt:2: an `in:` without its `out:`");
  auto bad_var = RunGolden("# rewrite: fold-scale\n# vars: x double\n", "f.txt");
  EXPECT_EQ(bad_var.status().message(),
            "f.txt:2: `x double`: write NAME int|float|bool or NAME DTYPE[RANK]");
  // A buffer needs a dtype torch names and a rank of at least one; `# walk:` reads the same.
  for (const char* decl : {"doc int32[0]", "doc int99[1]", "doc int32[", "doc int32[x]"}) {
    auto bad_buffer = RunGolden(absl::StrCat("# rewrite: place-hoisted\n# walk: ", decl, "\n"),
                                "f.txt");
    EXPECT_EQ(bad_buffer.status().message(),
              absl::StrCat("f.txt:2: `", decl, "`: write NAME int|float|bool or NAME DTYPE[RANK]"));
  }
}

TEST(RewriteGolden, AnInputThatDoesNotParseIsACaseThatFails) {
  auto run = RunGolden("# rewrite: fold-scale\nin: score +\nout: none\n", "f.txt");
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->cases.size(), 1u);
  EXPECT_EQ(run->cases[0].got.rfind("error: ", 0), 0u) << run->cases[0].got;
}

}  // namespace
}  // namespace cubridge::lower
