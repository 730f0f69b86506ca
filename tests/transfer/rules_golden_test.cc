// The transfer rules against their golden files (tests/transfer/golden/RULE.txt, a variant
// beside what Transfer makes of it, as MLIR's FileCheck tests keep them): every rule has one,
// showing where it applies and where it does not, and every case gives what it says. The masked
// programs the files expect are also run block by block against their masks, so an expected
// output that skips a kept element cannot be recorded. `cuir-opt FILE` runs the same files.
#include "cuir/transfer/golden.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/transfer/transfer_test_util.h"

namespace cubridge::transfer::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kGolden = fs::path(CUBRIDGE_SOURCE_ROOT) / "tests/transfer/golden";

GoldenBases Base() {
  auto base = ReadGoldenBases(std::string(CUBRIDGE_SOURCE_ROOT) + "/cuir/experts");
  if (!base.ok()) {
    ADD_FAILURE() << base.status();
    return GoldenBases{};
  }
  return *std::move(base);
}

GoldenRun RunFile(const std::string& rule) {
  const std::string path = (kGolden / (rule + ".txt")).string();
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  auto run = RunGolden(text.str(), path, Base());
  if (!run.ok()) {
    ADD_FAILURE() << run.status();
    return GoldenRun{};
  }
  return *std::move(run);
}

// The rules a case's output says applied; none when Transfer refused the variant.
std::set<std::string> AppliedIn(const std::string& got) {
  absl::string_view first = absl::string_view(got).substr(0, got.find('\n'));
  if (!absl::ConsumePrefix(&first, "applied: ") || first == "none") return {};
  return absl::StrSplit(first, ", ");
}

TEST(RuleGolden, EveryRuleHasAGoldenFileAndEveryFileARule) {
  std::set<std::string> files;
  for (const auto& entry : fs::directory_iterator(kGolden)) {
    if (entry.path().extension() == ".txt") files.insert(entry.path().stem().string());
  }
  const std::vector<std::string> names = RuleNames();
  EXPECT_EQ(files, std::set<std::string>(names.begin(), names.end()));
}

TEST(RuleGolden, EveryCaseGivesItsExpectedOutput) {
  for (const std::string& rule : RuleNames()) {
    const GoldenRun run = RunFile(rule);
    EXPECT_EQ(run.rule, rule);
    int applies = 0, not_applied = 0;
    for (const GoldenCase& c : run.cases) {
      EXPECT_EQ(c.got, c.want) << rule << ".txt:" << c.line << ": " << c.in;
      (AppliedIn(c.got).count(rule) ? applies : not_applied) += 1;
    }
    EXPECT_GT(applies, 0) << rule << ".txt: no case where the rule applies";
    EXPECT_GT(not_applied, 0) << rule << ".txt: no case where the rule declines or stays out";
  }
}

// Nondecreasing ids (document ids and the like) for the masks' 1-D int buffers.
std::vector<int64_t> RandomIds(int64_t length, std::mt19937& rng) {
  std::vector<int64_t> ids(length);
  int64_t id = 0;
  for (int64_t& v : ids) {
    id += std::uniform_int_distribution<int>(0, 3)(rng) == 0;
    v = id;
  }
  return ids;
}

TEST(RuleGolden, ExpectedMaskedProgramsAreSoundOnEveryBlock) {
  const std::vector<SeqShape> shapes = {{1, 1}, {7, 13}, {33, 17}, {70, 70}};
  int checked = 0;
  for (const std::string& rule : RuleNames()) {
    for (const GoldenCase& c : RunFile(rule).cases) {
      if (!c.variant.spec.mask || !c.program || c.got != c.want) continue;
      const VariantSpec& spec = c.variant.spec;
      std::vector<std::string> ids, read;
      cuir::CollectBuffers(spec.mask, &read);
      for (const VariantSpec::Buffer& b : spec.buffers) {
        if (std::find(read.begin(), read.end(), b.name) == read.end()) continue;  // the score's
        ASSERT_TRUE(b.extents.size() == 1 && cuir::ElementType(b.dtype) == cuir::Type::kInt)
            << rule << ".txt:" << c.line << ": only 1-D int buffers are simulated";
        ids.push_back(b.name);
      }
      std::mt19937 rng(c.line);
      auto shape = [&](int64_t sq, int64_t skv) {
        SimShape s = PlainShape(sq, skv);
        s.heads = 3;
        s.batch = 2;
        for (const std::string& name : ids) s.buffers[name] = RandomIds(std::max(sq, skv), rng);
        return s;
      };
      Totals totals;
      CheckBlocksSound(*c.program, spec, rule + ".txt:" + std::to_string(c.line), shapes, shape,
                       &totals);
      ++checked;
    }
  }
  EXPECT_GE(checked, 15);
}

TEST(RuleGolden, ItemsAreLocatedWhereTheyStandInTheVariant) {
  auto v = ParseVariant({"mask: kv_idx < W", "const W: int = 8", "buffer doc: int32[?, seqlen_q]",
                         "heads: q=32 kv=8"});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->spec.mask_loc.ToString(), "variant:1:7");
  ASSERT_EQ(v->spec.consts.size(), 1u);
  EXPECT_EQ(v->spec.consts[0].loc.ToString(), "variant:2:7");
  ASSERT_EQ(v->spec.buffers.size(), 1u);
  EXPECT_EQ(v->spec.buffers[0].loc.ToString(), "variant:3:8");
  ASSERT_EQ(v->spec.buffers[0].extents.size(), 2u);
  EXPECT_EQ(v->spec.buffers[0].extents[0], nullptr);
  EXPECT_EQ(v->spec.buffers[0].extents[1]->loc.ToString(), "variant:3:22");
  EXPECT_EQ(v->config.heads_q, 32);
  EXPECT_EQ(v->config.heads_kv, 8);
}

TEST(RuleGolden, AWrongExpectationIsAMismatchNotAnError) {
  auto run = RunGolden("# rule: heads.gqa\nin: heads: q=8 kv=8\nout: applied: heads.gqa\n",
                       "f.txt", Base());
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->cases.size(), 1u);
  EXPECT_EQ(run->cases[0].got, "applied: none");
  EXPECT_NE(run->cases[0].got, run->cases[0].want);
}

TEST(RuleGolden, AMultiLineOutputEndsAtABlankLineOrTheNextCase) {
  const std::string gqa =
      "out:\napplied: heads.gqa\n  grid m_block < cdiv(seqlen_q, BLOCK_M), h < heads_q, b < "
      "batch\n- let kv_h: int = h\n+ let kv_h: int = h // (heads_q // heads_kv)\n  let q_lo: "
      "int = m_block * BLOCK_M\n";
  auto run = RunGolden("# rule: heads.gqa\nin: heads: q=4 kv=2\n" + gqa +
                           "in: heads: q=4 kv=1\n" + gqa + "\n# a comment\n",
                       "f.txt", Base());
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->cases.size(), 2u);
  for (const GoldenCase& c : run->cases) EXPECT_EQ(c.got, c.want) << c.line;
}

TEST(RuleGolden, AMalformedFileIsRefusedWithItsLine) {
  const GoldenBases base = Base();
  auto message = [&](const std::string& text) {
    auto run = RunGolden(text, "f.txt", base);
    return run.ok() ? std::string("ok") : std::string(run.status().message());
  };
  EXPECT_EQ(message("in: heads: q=8 kv=8\nout: applied: none\n"),
            "f.txt:1: no `# rule: NAME` line before the cases");
  EXPECT_EQ(message("# rule: mask.analytic\n"),
            "f.txt:1: no rule named 'mask.analytic' (the rules are params.const, "
            "buffers.declare, heads.gqa, score.inline, mask.analytic-range, mask.block-table, "
            "score.derivative)");
  EXPECT_EQ(message("# rule: heads.gqa\nin: heads: q=8 kv=8\n"),
            "f.txt:2: an `in:` without its `out:`");
  EXPECT_EQ(message("# rule: heads.gqa\nout: applied: none\n"), "f.txt:2: an `out:` without its `in:`");
  EXPECT_EQ(message("# rule: heads.gqa\nin:\nout: applied: none\n"), "f.txt:3: an `in:` with no item");
  EXPECT_EQ(message("# rule: heads.gqa\nin: heads: q=8\n  window: 3\nout: none\n"),
            "f.txt:3: `window: 3`: expected mask:, score:, const, buffer, heads:, backward or grad:");
  EXPECT_EQ(message("# rule: heads.gqa\nin: const W: long = 3\nout: none\n"),
            "f.txt:2: `const W: long = 3`: `long`: the type is int, float or bool");
  EXPECT_EQ(message("# rule: heads.gqa\nin: mask: q_idx >=\nout: none\n"),
            "f.txt:2: `mask: q_idx >=`: variant:1:15: expected an expression, found end of input");
  EXPECT_EQ(message("# rule: heads.gqa\nin: buffer d: int32[seqlen_q\nout: none\n"),
            "f.txt:2: `buffer d: int32[seqlen_q`: write buffer NAME: DTYPE[EXTENT, ...]");
}

}  // namespace
}  // namespace cubridge::transfer::testing
