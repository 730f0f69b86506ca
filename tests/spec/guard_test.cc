// The lexical guard in front of TorchScript: each limit is reported at the token that crosses
// it, with the number found and the limit; the hostile specs that used to overflow TorchScript's
// stack (SIGSEGV) are refused with INVALID_ARGUMENT; what real specs write passes. Then the
// limits on the translated expressions, which the guard cannot see: a chain of small statements
// builds a deep expression, reuse of a name a wide one.
#include <filesystem>

#include "cuir/spec/guard.h"
#include "spec_test_util.h"

namespace cubridge::spec {
namespace {

using testing::ExpectError;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kMaskDef = "def mask_mod(b, h, q_idx, kv_idx):\n";
const std::string kScoreDef = "def score_mod(score, b, h, q_idx, kv_idx):\n";

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

void ExpectGuardError(const std::string& source, const std::string& where,
                      const std::string& what) {
  const absl::Status s = GuardSpecSource(source, "t.py");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), StartsWith("t.py:" + where + ": "));
  EXPECT_THAT(std::string(s.message()), HasSubstr(what));
}

void ExpectGuardOk(const std::string& source) {
  const absl::Status s = GuardSpecSource(source, "t.py");
  EXPECT_TRUE(s.ok()) << s << "\n" << source;
}

// ---- the inputs of the bug, at full size, through the whole frontend ----------------------------

TEST(SpecGuard, TenThousandNestedParenthesesAreRefused) {
  ExpectError(kMaskDef + "    return " + Repeat("(", 10000) + "q_idx >= kv_idx" +
                  Repeat(")", 10000) + "\n",
              "2:44", "brackets nested 33 deep; this service accepts at most 32 (give parts of "
                      "the expression names");
}

TEST(SpecGuard, TwentyThousandUnaryMinusesAreRefused) {
  ExpectError(kScoreDef + "    return " + Repeat("-", 20000) + "score\n", "2:20",
              "9 prefix operators in a row; this service accepts at most 8");
}

TEST(SpecGuard, FifteenThousandPlusZerosAreRefused) {
  // Its line passes the line limit first; the operator limit is below, on one line and over many.
  ExpectError(kScoreDef + "    return score" + Repeat(" + 0", 15000) + "\n", "2:1025",
              "this line is 60016 bytes long; this service accepts at most 1024 per line");
}

// Found by probing TorchScript's lexer and the frontend's error parsing: both recurse per line
// skipped or per character of a quoted line.
TEST(SpecGuard, TwoHundredThousandBlankLinesAreRefused) {
  ExpectError(kMaskDef + Repeat("\n", 200000) + "    return q_idx >= kv_idx\n", "1002:1",
              "1001 line breaks with no code between them (blank lines, comments, `\\` "
              "continuations); this service accepts at most 1000 (remove blank and comment "
              "lines)");
  ExpectError(kMaskDef + "    return (q_idx >= kv_idx" + Repeat("\n#", 100000) + "\n)\n",
              "1003:1", "1001 line breaks with no code between them");
  ExpectError(kMaskDef + "    return q_idx >= kv_idx" + Repeat(" \\\n", 80000) + "\n", "1003:1",
              "1001 line breaks with no code between them");
}

TEST(SpecGuard, AFortyThousandByteLineIsRefused) {
  ExpectError(kMaskDef + "    return q_idx >= kv_idx" + Repeat(" ", 40000) + "x )\n", "2:1025",
              "this line is 40029 bytes long; this service accepts at most 1024 per line (break "
              "it");
}

// ---- each limit, at its boundary ------------------------------------------------------------------

TEST(SpecGuard, BracketDepthCountsEveryKindOfBracketAcrossLines) {
  ExpectGuardOk(kMaskDef + "    return " + Repeat("(", 32) + "q_idx" + Repeat(")", 32) + "\n");
  ExpectGuardError(kMaskDef + "    return " + Repeat("([{\n", 11) + "q_idx\n", "12:3",
                   "brackets nested 33 deep");
}

TEST(SpecGuard, OperatorsPerStatement) {
  // `    return score` is 16 columns; the k-th `+0` puts its `+` at column 2k + 15.
  ExpectGuardOk(kScoreDef + "    return score" + Repeat("+0", 256) + "\n");
  ExpectGuardError(kScoreDef + "    return score" + Repeat("+0", 257) + "\n", "2:529",
                   "the statement starting at line 2 reaches 257 operators here; this service "
                   "accepts at most 256 per statement (split it: give parts names");
}

TEST(SpecGuard, UnaryRunsCountMinusTildeNotAndPlusUntilSomethingElseComes) {
  ExpectGuardOk(kScoreDef + "    return " + Repeat("-", 8) + "score\n");
  ExpectGuardError(kMaskDef + "    return " + Repeat("~ ", 4) + Repeat("not ", 5) + "q_idx\n",
                   "2:36", "9 prefix operators in a row");
  ExpectGuardError(kScoreDef + "    return " + Repeat("+-", 5) + "score\n", "2:20",
                   "9 prefix operators in a row");
  // A bracket or an operand ends the run.
  ExpectGuardOk(kScoreDef + "    return " + Repeat("-(", 10) + "score" + Repeat(")", 10) + "\n");
  ExpectGuardOk(kScoreDef + "    return " + Repeat("score - -", 10) + "score\n");
}

TEST(SpecGuard, AStatementContinuedOverLinesIsOneStatement) {
  ExpectGuardOk(kScoreDef + Repeat("    score = score" + Repeat(" + 1", 200) + "\n", 2) +
                "    return score\n");
  ExpectGuardError(kScoreDef + "    return (score\n" + Repeat("        + 1\n", 300) + "    )\n",
                   "259:9", "the statement starting at line 2 reaches 257 operators here");
  ExpectGuardError(kScoreDef + "    return score \\\n" + Repeat("        + 1 \\\n", 300) + "\n",
                   "259:9", "the statement starting at line 2 reaches 257 operators here");
}

TEST(SpecGuard, OperatorsAreCountedOverTheWholeFile) {
  // 2 statements of 200 operators, then the 113th operator of the third is the 513th.
  const std::string statement = "    a = q_idx" + Repeat(" + 1", 200) + "\n";
  ExpectGuardError(kMaskDef + Repeat(statement, 2) + "    a = q_idx" + Repeat(" + 1", 120) +
                       "\n    return a >= kv_idx\n",
                   "4:463",
                   "the spec reaches 513 operators here; this service accepts at most 512 in one "
                   "file");
}

TEST(SpecGuard, AttributesCallsAndConditionalsAreOperators) {
  ExpectGuardError(kScoreDef + "    return score" + Repeat(".x", 257) + "\n", "2:529",
                   "reaches 257 operators");
  ExpectGuardError(kScoreDef + "    return f" + Repeat("()", 257) + "\n", "2:525",
                   "reaches 257 operators");
  ExpectGuardError(kScoreDef + "    return (score" + Repeat("\n        if c else score", 129) +
                       ")\n",
                   "131:9", "reaches 257 operators");
}

TEST(SpecGuard, HelpersCountOncePerCallWhenInlined) {
  // Each helper calls the one before twice: 40 lines, 2^40 calls once inlined. Costs: h0 0,
  // hk = 2 calls + 2 cost(h(k-1)); h8 = 510, and h9's second call of it passes 512. (Each
  // returns its argument, so the values stay one part.)
  std::string source = "def h0(x):\n    return x\n";
  for (int k = 1; k < 40; ++k) {
    const std::string prev = "h" + std::to_string(k - 1);
    source += "def h" + std::to_string(k) + "(x):\n    return " + prev + "(" + prev + "(x))\n";
  }
  source += kScoreDef + "    return h39(score)\n";
  ExpectGuardError(source, "20:17",
                   "`h9` has more than 512 operators once the functions it calls are inlined "
                   "(this call of `h8` adds 510); this service accepts at most 512");
  ExpectError(source, "20:17", "`h9` has more than 512 operators");
}

std::string NestedIfs(int depth) {
  std::string s = "def reference(q, k, v, scale: float):\n";
  for (int i = 1; i <= depth; ++i) s += Repeat("    ", i) + "if True:\n";
  return s + Repeat("    ", depth + 1) + "pass\n";
}

std::string ElifChain(int elifs) {
  return "def reference(q, k, v, scale: float, c: bool = True):\n    if c:\n        pass\n" +
         Repeat("    elif c:\n        pass\n", elifs) + "    return q\n";
}

TEST(SpecGuard, BlockDepth) {
  ExpectGuardOk(NestedIfs(31));  // the def's block and 31 more
  ExpectGuardError(NestedIfs(32), "34:133",
                   "blocks nested 33 deep (each `elif` counts as a block in the one before); "
                   "this service accepts at most 32 (move inner blocks into a helper function)");
  // The body of the k-th elif is k + 2 blocks deep.
  ExpectGuardOk(ElifChain(30));
  ExpectGuardError(ElifChain(31), "65:9", "blocks nested 33 deep");
}

TEST(SpecGuard, FiveThousandElifsAreRefused) {
  ExpectError(ElifChain(5000), "65:9", "blocks nested 33 deep");
}

TEST(SpecGuard, LinesWithoutCode) {
  // The def line's own break counts: TorchScript skips it the same way.
  ExpectGuardOk(kMaskDef + Repeat("\n", 999) + "    return q_idx >= kv_idx\n");
  ExpectGuardError(kMaskDef + Repeat("  # note\n", 1000) + "    return q_idx >= kv_idx\n",
                   "1002:1", "1001 line breaks with no code between them");
  // A string's lines are one token.
  ExpectGuardOk(kMaskDef + "    \"\"\"" + Repeat("\n", 5000) + "\"\"\"\n    return q_idx\n");
}

TEST(SpecGuard, LineLength) {
  ExpectGuardOk("# " + Repeat("x", 1022) + "\n");
  ExpectGuardError("\n# " + Repeat("x", 1023) + "\n", "2:1025", "this line is 1025 bytes long");
}

TEST(SpecGuard, SourceSize) {
  const std::string big = Repeat(Repeat("#", 1023) + "\n", 257);
  ExpectGuardError(big, "257:1", "the spec is 263168 bytes; this service accepts at most 262144");
}

TEST(SpecGuard, LimitsCanBeChosen) {
  GuardLimits limits;
  limits.max_bracket_depth = 2;
  const absl::Status s = GuardSpecSource("x = (((1)))\n", "t.py", limits);
  EXPECT_THAT(std::string(s.message()), StartsWith("t.py:1:7: brackets nested 3 deep; this "
                                                   "service accepts at most 2"));
}

// ---- what is not code -------------------------------------------------------------------------

TEST(SpecGuard, BracketsAndOperatorsInStringsAndCommentsAreNotCounted) {
  const std::string deep = Repeat("(-", 40);
  ExpectGuardOk("\"\"\"Module docstring " + deep + "\n\"\"\"\n" + kMaskDef +  //
                "    '''" + deep + " \" ''\n" + deep + "'''\n" +           //
                "    # " + deep + "\n" +                                   //
                "    s = \"" + deep + "\\\"" + deep + "\"\n" +             //
                "    t = '" + deep + "\\\n" + deep + "'\n" +               //
                "    u = r'" + deep + "\\'' + b\"" + deep + "\" + f'{" + deep + "'\n" +
                "    return q_idx >= kv_idx  # " + deep + "\n");
  // TorchScript itself agrees with the guard on what is text.
  auto spec = LoadSpecSource("\"\"\"" + deep + "\"\"\"\n" + kMaskDef + "    # " + deep +
                                 "\n    s = '" + deep + "\\'" + deep + "'\n" +
                                 "    return q_idx >= kv_idx\n",
                             "t.py");
  EXPECT_TRUE(spec.ok()) << spec.status();
}

TEST(SpecGuard, TypeCommentsAreCodeForTorchScript) {
  ExpectGuardError("def f(x):\n    # type: " + Repeat("(", 33) + "\n    return x\n", "2:45",
                   "brackets nested 33 deep");
}

TEST(SpecGuard, NumbersHideNoOperators) {
  ExpectGuardOk(kScoreDef + "    return score * 1e-3 + 0x1F + 1.5e+2 + .5 + 2j\n");
  // `e`, `_` and `.` after a number do not swallow what follows.
  ExpectGuardError(kScoreDef + "    return (score" + Repeat("\n        + 1_e+1", 129) + ")\n",
                   "131:9", "reaches 257 operators");
  ExpectGuardError(kScoreDef + "    return 1.5" + Repeat(".x", 257) + "\n", "2:527",
                   "reaches 257 operators");
}

TEST(SpecGuard, ArbitraryBytesAreAnswered) {
  std::string bytes;
  for (int i = 0; i < 4096; ++i) bytes.push_back(static_cast<char>((i * 7919) % 256));
  const absl::Status s = GuardSpecSource(bytes, "t.py");
  EXPECT_TRUE(s.ok() || s.code() == absl::StatusCode::kInvalidArgument) << s;
  ExpectGuardOk("");
  ExpectGuardOk("'''unterminated (((\n");
}

TEST(SpecGuard, EveryExampleSpecPasses) {
  int checked = 0;
  for (const char* dir : {"/examples/specs", "/examples/llm"}) {
    for (const auto& entry :
         std::filesystem::directory_iterator(std::string(CUBRIDGE_SOURCE_ROOT) + dir)) {
      if (entry.path().extension() != ".py") continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      EXPECT_TRUE(GuardSpecSource(text.str(), entry.path().string()).ok()) << entry.path();
      ++checked;
    }
  }
  EXPECT_GE(checked, 13);
}

// ---- the translation: what the guard cannot see ----------------------------------------------

TEST(SpecTranslationLimits, ChainedAssignmentsBuildingADeepExpressionAreRefused) {
  std::string source = kScoreDef + "    x0 = score\n";
  for (int i = 1; i <= 300; ++i) {
    source += "    x" + std::to_string(i) + " = x" + std::to_string(i - 1) + " + 1\n";
  }
  ExpectError(source + "    return x300\n", "1:5",
              "score_mod computes an expression more than 256 operations deep (each value "
              "computed from the one before); this service accepts at most 256");
}

// As long a chain as the guard lets through: translating it must not exhaust the stack either.
TEST(SpecTranslationLimits, TheLongestChainTheGuardAcceptsIsRefusedCleanly) {
  const int n = GuardLimits{}.max_operators_total - 10;
  std::string source = kMaskDef + "    x0 = q_idx\n";
  for (int i = 1; i <= n; ++i) {
    source += "    x" + std::to_string(i) + " = x" + std::to_string(i - 1) + " + 1\n";
  }
  ExpectError(source + "    return x" + std::to_string(n) + " >= kv_idx\n", "1:5",
              "mask_mod computes an expression more than 256 operations deep");
}

TEST(SpecTranslationLimits, ReusedNamesMultiplyingTheExpressionAreRefused) {
  std::string source = kScoreDef + "    x = score\n";
  for (int i = 0; i < 64; ++i) source += "    x = x + x\n";  // 2^64 leaves once printed
  // The guard's count of a value's parts stops it first, at 2^11 (line 13), before TorchScript.
  ExpectError(source + "    return x\n", "13:13", "may have more than 1024 parts");
}

// The translation's own bound, for what passes the guard: a helper defined below its caller is
// not yet known to the guard when the call is read.
TEST(SpecTranslationLimits, ExpressionsGrownThroughHelpersAreRefused) {
  std::string source = kScoreDef + "    x = score\n";
  for (int i = 0; i < 64; ++i) source += "    x = twice(x)\n";
  source += "    return x\n\ndef twice(v):\n    return v + v\n";
  ExpectError(source, "1:5",
              "score_mod computes an expression of more than 4096 operations once its local "
              "names are replaced by their values");
}

// Tuples joined per statement grow exponentially in TorchScript's compile (fuzz_spec_frontend
// found it: fuzz/regressions/spec_frontend/timeout_tuple_doubled_per_statement.py).
TEST(SpecGuard, TuplesDoubledPerStatementAreRefused) {
  std::string source = kScoreDef + "    x = score, score\n";
  for (int i = 0; i < 40; ++i) source += "    x = x + x\n";
  ExpectGuardError(source + "    return x[0]\n", "12:13",
                   "the value of the statement starting at line 12 may have more than 1024 parts");
  // Through a helper defined above, too.
  std::string helper = "def pair(v):\n    return v, v\n\n" + kScoreDef + "    x = score\n";
  for (int i = 0; i < 40; ++i) helper += "    x = pair(x)\n";
  ExpectGuardError(helper + "    return score\n", "16:15", "may have more than 1024 parts");
  // What real specs do stays far below.
  ExpectGuardOk(kScoreDef + "    q, k = q_idx, kv_idx\n    rel = q - k\n"
                "    return score + torch.where(rel > 0, rel, -rel) * 0.5\n");
}

}  // namespace
}  // namespace cubridge::spec
