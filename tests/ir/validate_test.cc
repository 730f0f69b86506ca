// cuir::Validate: the base program and the transferred shapes pass; each rule's violation, made
// by editing the base text, fails with the offending statement's or expression's line:col and a
// message that says what is wrong (and how to fix it where that is obvious).
#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cuir/ir/program.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ir/ir_test_util.h"

namespace cubridge::cuir {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const char kFile[] = "base.cuir";

std::string BaseText() {
  std::ifstream in(std::string(CUBRIDGE_SOURCE_ROOT) + "/cuir/experts/fa2_sm80/base.cuir");
  EXPECT_TRUE(in.good()) << "cannot read base.cuir under " << CUBRIDGE_SOURCE_ROOT;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Replace(const std::string& text, const std::string& from, const std::string& to) {
  return testing::ReplaceOnce(text, from, to);
}

// Inserts `lines` after the line that contains `anchor`.
std::string InsertAfter(const std::string& text, const std::string& anchor,
                        const std::string& lines) {
  const size_t at = text.find(anchor);
  EXPECT_NE(at, std::string::npos) << "anchor not found: " << anchor;
  if (at == std::string::npos) return text;
  const size_t eol = text.find('\n', at);
  return text.substr(0, eol + 1) + lines + text.substr(eol + 1);
}

// "line:col" (1-based) of the first occurrence of `needle`, `skip` characters into it.
std::string PosOf(const std::string& text, const std::string& needle, size_t skip = 0) {
  const size_t found = text.find(needle);
  EXPECT_NE(found, std::string::npos) << "not in text: " << needle;
  if (found == std::string::npos) return "?";
  const size_t at = found + skip;
  const size_t newline = text.rfind('\n', at);
  const size_t line_start = newline == std::string::npos ? 0 : newline + 1;
  const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + at, '\n'));
  return std::to_string(line) + ":" + std::to_string(at - line_start + 1);
}

absl::Status ValidateText(const std::string& text) {
  auto p = ParseProgram(text, kFile);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return absl::OkStatus();  // already failed; keep the caller's checks quiet
  return Validate(*p);
}

void ExpectInvalid(const std::string& text, const std::string& pos,
                   const std::vector<std::string>& says) {
  absl::Status s = ValidateText(text);
  ASSERT_FALSE(s.ok()) << "accepted:\n" << text;
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), StartsWith(std::string(kFile) + ":" + pos + ": "));
  for (const auto& part : says) EXPECT_THAT(std::string(s.message()), HasSubstr(part));
}

const char kKvHi[] = "    let kv_hi: int = min(kv_lo + BLOCK_N, seqlen_kv)\n";
const char kQK[] = "S = qk Q, K scale softmax_scale";
const char kLoop[] = "for n_block in [0, cdiv(seqlen_kv, BLOCK_N)) pipeline STAGES {";

std::string WithMask(const std::string& mask_line) {
  return InsertAfter(BaseText(), kQK, "    " + mask_line + "\n");
}

// The document-mask shape; `per` and the loop's indices are parameters so that the table rules
// can be broken one at a time.
std::string DocumentMask(const std::string& table_decl, const std::string& loop_indices,
                         bool declare_buffer = true) {
  std::string decls = declare_buffer ? "  buffer doc: int32[max(seqlen_q, seqlen_kv)]\n" : "";
  std::string text = InsertAfter(BaseText(), "  grid ", decls + "  " + table_decl + "\n");
  text = Replace(text, kLoop, "for n_block, full in table T[" + loop_indices +
                                  "] pipeline STAGES {");
  return InsertAfter(text, kQK,
                     "    mask S = q_idx >= kv_idx && doc[q_idx] == doc[kv_idx] when !full\n");
}

const char kDocTable[] = "table T = blocks(q_idx >= kv_idx && doc[q_idx] == doc[kv_idx])";

// ---------------------------------------------------------------------------------------------
// Valid programs.

TEST(ValidateTest, BaseProgramIsValid) {
  EXPECT_TRUE(ValidateText(BaseText()).ok()) << ValidateText(BaseText());
}

TEST(ValidateTest, TransferredShapesAreValid) {
  std::string causal = Replace(BaseText(), kLoop,
                               "for n_block in [0, min(cdiv(seqlen_kv, BLOCK_N), cdiv(q_hi, "
                               "BLOCK_N))) pipeline STAGES {");
  causal = InsertAfter(causal, kKvHi, "    let full: bool = kv_hi - 1 <= q_lo\n");
  causal = InsertAfter(causal, kQK, "    mask S = q_idx >= kv_idx when !full\n");

  std::string softcap = InsertAfter(BaseText(), "param WARPS", "  const cap: float = 20.0\n");
  softcap = InsertAfter(softcap, kQK, "    score_mod S = cap * tanh(score / cap)\n");

  const std::string gqa = Replace(BaseText(), "let kv_h: int = h\n",
                                  "let kv_h: int = h // (heads_q // heads_kv)\n");
  const std::string per_head =
      DocumentMask("table T = blocks(q_idx >= kv_idx + h) per h", "h, m_block");
  const std::string windows = Replace(BaseText(), kLoop,
                                      "for n_block in [0, 1) union [2, cdiv(seqlen_kv, BLOCK_N))"
                                      " pipeline STAGES {");

  for (const std::string& text :
       {causal, softcap, gqa, DocumentMask(kDocTable, "m_block"), per_head, windows}) {
    absl::Status s = ValidateText(text);
    EXPECT_TRUE(s.ok()) << s << "\n" << text;
  }
}

TEST(ValidateTest, IntValueForFloatDeclarationIsAllowed) {
  EXPECT_TRUE(ValidateText(InsertAfter(BaseText(), "param WARPS", "  const cap: float = 20\n"))
                  .ok());
}

// ---------------------------------------------------------------------------------------------
// Names.

TEST(ValidateTest, UndeclaredName) {
  const std::string text =
      Replace(BaseText(), "let kv_h: int = h\n", "let kv_h: int = h // group\n");
  ExpectInvalid(text, PosOf(text, "group"),
                {"undeclared name `group`", "const group: int = ..."});
}

TEST(ValidateTest, NameUsedBeforeItsDeclaration) {
  const std::string text = Replace(BaseText(), "let kv_h: int = h\n", "let kv_h: int = q_lo\n");
  ExpectInvalid(text, PosOf(text, "q_lo\n"), {"`q_lo`", PosOf(text, "let q_lo"), "before"});
}

TEST(ValidateTest, Redeclaration) {
  const std::string text = InsertAfter(BaseText(), kKvHi, "    let q_lo: int = 0\n");
  ExpectInvalid(text, PosOf(text, "let q_lo: int = 0"),
                {"`q_lo`", "another name",
                 "already declared at " + std::string(kFile) + ":" + PosOf(text, "let q_lo")});
}

TEST(ValidateTest, BuiltinCannotBeRedeclared) {
  const std::string text = InsertAfter(BaseText(), "param WARPS", "  const seqlen_q: int = 3\n");
  ExpectInvalid(text, PosOf(text, "const seqlen_q"), {"`seqlen_q` is a builtin"});
}

TEST(ValidateTest, ElementNamesAreReserved) {
  const std::string text = InsertAfter(BaseText(), "let q_hi", "  let q_idx: int = 0\n");
  ExpectInvalid(text, PosOf(text, "let q_idx"), {"`q_idx` is reserved"});
}

TEST(ValidateTest, ScoreIsOnlyVisibleInScoreMod) {
  const std::string text = WithMask("mask S = score > 0.0");
  ExpectInvalid(text, PosOf(text, "score >"), {"`score`", "score_mod"});
}

TEST(ValidateTest, UndeclaredBuffer) {
  const std::string text = DocumentMask(kDocTable, "m_block", /*declare_buffer=*/false);
  ExpectInvalid(text, PosOf(text, "doc[q_idx]"),
                {"undeclared buffer `doc`", "buffer doc: DTYPE[EXTENT, ...]"});
}

// ---------------------------------------------------------------------------------------------
// Types.

TEST(ValidateTest, DeclaredTypeMustMatchValue) {
  const std::string text = Replace(BaseText(), "let q_lo: int", "let q_lo: bool");
  ExpectInvalid(text, PosOf(text, "* BLOCK_M"), {"`q_lo` is declared bool", "is int"});
}

TEST(ValidateTest, MaskPredicateMustBeBool) {
  const std::string text = WithMask("mask S = q_idx - kv_idx");
  ExpectInvalid(text, PosOf(text, "- kv_idx"), {"mask predicate must be bool", "is int"});
}

TEST(ValidateTest, MaskConditionMustBeBool) {
  const std::string text = WithMask("mask S = q_idx >= kv_idx when n_block");
  ExpectInvalid(text, PosOf(text, "n_block\n"), {"`when` condition must be bool"});
}

TEST(ValidateTest, LoopBoundMustBeInt) {
  const std::string text = Replace(BaseText(), "[0, cdiv", "[0.5, cdiv");
  ExpectInvalid(text, PosOf(text, "0.5"), {"loop bound must be int", "is float"});
}

// ---------------------------------------------------------------------------------------------
// Operand kinds.

TEST(ValidateTest, QKOperandsSwapped) {
  const std::string text = Replace(BaseText(), kQK, "S = qk K, Q scale softmax_scale");
  ExpectInvalid(text, PosOf(text, "S = qk"),
                {"must be a tile loaded from q", "`K` is a tile loaded from k", "Q tile first"});
}

TEST(ValidateTest, PVNeedsSoftmaxResult) {
  const std::string text = Replace(BaseText(), "pv P, V", "pv S, V");
  ExpectInvalid(text, PosOf(text, "pv S"), {"softmax.online result", "`S` is a qk result"});
}

TEST(ValidateTest, MaskAfterSoftmaxHasNoEffect) {
  const std::string text =
      InsertAfter(BaseText(), "P = softmax.online S", "    mask S = q_idx >= kv_idx\n");
  ExpectInvalid(text, PosOf(text, "mask S"), {"after its softmax.online", "before the softmax"});
}

// ---------------------------------------------------------------------------------------------
// Placement and structure.

TEST(ValidateTest, MaskOutsideTheLoop) {
  const std::string text = InsertAfter(BaseText(), "softmax.init", "  mask S = q_idx >= kv_idx\n");
  ExpectInvalid(text, PosOf(text, "mask S"), {"`mask` must be inside the KV loop"});
}

TEST(ValidateTest, DeclarationInsideTheLoop) {
  const std::string text = InsertAfter(BaseText(), kKvHi, "    const cap: float = 1.0\n");
  ExpectInvalid(text, PosOf(text, "const cap"), {"not allowed inside the KV loop"});
}

TEST(ValidateTest, DeclarationAfterTheBodyStarts) {
  const std::string text = InsertAfter(BaseText(), "let q_hi", "  const cap: float = 1.0\n");
  ExpectInvalid(text, PosOf(text, "const cap"),
                {"must come before the body", PosOf(text, "let kv_h")});
}

TEST(ValidateTest, TwoGrids) {
  const std::string text = InsertAfter(BaseText(), "  grid ", "  grid x < 4\n");
  ExpectInvalid(text, PosOf(text, "grid x"), {"second `grid`", PosOf(text, "grid m_block")});
}

TEST(ValidateTest, MissingGrid) {
  const std::string base = BaseText();
  const size_t start = base.find("  grid ");
  const std::string text = base.substr(0, start) + base.substr(base.find('\n', start) + 1);
  ExpectInvalid(text, PosOf(text, "let kv_h"), {"missing `grid`"});
}

TEST(ValidateTest, MissingEpilogue) {
  const std::string text = Replace(BaseText(), "  epilogue\n", "");
  ExpectInvalid(text, PosOf(text, "for n_block"), {"`epilogue`"});
}

TEST(ValidateTest, LoopNeedsSoftmaxInit) {
  const std::string text = Replace(BaseText(), "  softmax.init\n", "");
  ExpectInvalid(text, PosOf(text, "for n_block"), {"`softmax.init` must come before"});
}

TEST(ValidateTest, SecondExpert) {
  const std::string text = InsertAfter(BaseText(), "expert \"", "  expert \"fa3_sm90\"\n");
  ExpectInvalid(text, PosOf(text, "expert \"fa3"), {"second `expert`"});
}

TEST(ValidateTest, UnsupportedVersion) {
  auto p = ParseProgram(BaseText(), kFile);
  ASSERT_TRUE(p.ok()) << p.status();
  p->version = 2;
  absl::Status s = Validate(*p);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("version 2"));
}

// Transfer rules build statements and expressions in code, without source positions.
TEST(ValidateTest, BuiltExpressionsWithoutPositionsReportTheStatement) {
  const std::string text = WithMask("mask S = q_idx >= kv_idx");
  auto p = ParseProgram(text, kFile);
  ASSERT_TRUE(p.ok()) << p.status();
  Stmt* loop = FindKvLoop(*p);
  ASSERT_NE(loop, nullptr);
  auto mask = std::find_if(loop->body.begin(), loop->body.end(),
                           [](const Stmt& s) { return s.kind == StmtKind::kMask; });
  ASSERT_NE(mask, loop->body.end());
  const std::string at = std::string(kFile) + ":" + PosOf(text, "mask S") + ": ";

  mask->value = Binary(BinaryOp::kSub, Var("q_idx"), Var("kv_idx"));
  EXPECT_THAT(std::string(Validate(*p).message()), AllOf(StartsWith(at), HasSubstr("bool")));
  mask->value = Binary(BinaryOp::kGe, Var("q_idx"), Var("window"));
  EXPECT_THAT(std::string(Validate(*p).message()), AllOf(StartsWith(at), HasSubstr("`window`")));
}

TEST(ValidateTest, LoadReadsOnlyQKV) {
  const std::string text = BaseText();
  auto p = ParseProgram(text, kFile);
  ASSERT_TRUE(p.ok()) << p.status();
  Stmt* load = FindDecl(*p, StmtKind::kLoad, "Q");
  ASSERT_NE(load, nullptr);
  load->operands = {"o"};
  absl::Status s = Validate(*p);
  EXPECT_THAT(std::string(s.message()),
              AllOf(StartsWith(std::string(kFile) + ":" + PosOf(text, "load Q")),
                    HasSubstr("q, k, v or do")));
}

// ---------------------------------------------------------------------------------------------
// Tables.

TEST(ValidateTest, TablePerAxisMustBeAGridAxis) {
  const std::string text = DocumentMask(std::string(kDocTable) + " per x", "x, m_block");
  ExpectInvalid(text, PosOf(text, "table T"),
                {"`x`", "not a grid axis", "m_block, h, b"});
}

TEST(ValidateTest, TablePredicateUsesAxisNotInPer) {
  const std::string text = DocumentMask("table T = blocks(q_idx >= kv_idx + h)", "m_block");
  ExpectInvalid(text, PosOf(text, "+ h)", 2), {"grid axis `h`", "per h"});
}

TEST(ValidateTest, TableLoopIndexCount) {
  const std::string text = DocumentMask("table T = blocks(q_idx >= kv_idx + h) per h", "m_block");
  ExpectInvalid(text, PosOf(text, "for n_block"), {"T[h, m_block]", "2 indices", "gives 1"});
}

TEST(ValidateTest, TableLoopNeedsDeclaredTable) {
  const std::string text = Replace(BaseText(), kLoop, "for n_block, full in table T[m_block] {");
  ExpectInvalid(text, PosOf(text, "for n_block"), {"undeclared table `T`", "table T = blocks("});
}

// ---------------------------------------------------------------------------------------------
// Epilogue sink.

std::string WithSink(const std::string& sink, const std::string& decls = "") {
  std::string text = Replace(BaseText(), "  epilogue\n", "  epilogue sink " + sink + "\n");
  return decls.empty() ? text : InsertAfter(text, "param WARPS", decls);
}

TEST(ValidateTest, SinkOverConstsBuiltinsAxesAndLetsIsValid) {
  for (const char* sink : {"0.5", "1", "-inf", "sink", "sink * float(h + 1) / heads_q",
                           "log(float(seqlen_kv))", "select(b == 0, sink, 0.0)",
                           "float(kv_h) + BLOCK_M"}) {
    absl::Status s = ValidateText(WithSink(sink, "  const sink: float = 0.5\n"));
    EXPECT_TRUE(s.ok()) << sink << ": " << s;
  }
}

TEST(ValidateTest, SinkMustBeANumber) {
  const std::string text = WithSink("h > 0");
  ExpectInvalid(text, PosOf(text, "> 0"), {"an epilogue sink must be int or float", "is bool",
                                           "epilogue sink 0.5"});
}

TEST(ValidateTest, SinkNameMustBeDeclared) {
  const std::string text = WithSink("sink");
  ExpectInvalid(text, PosOf(text, "sink sink", 5),
                {"undeclared name `sink`", "const sink: int = ..."});
}

TEST(ValidateTest, SinkCannotUseElementNames) {
  for (const char* name : {"q_idx", "kv_idx", "score"}) {
    const std::string text = WithSink(std::string("0.1 * float(") + name + ")");
    ExpectInvalid(text, PosOf(text, name),
                  {std::string("cannot use `") + name + "`", "one logit per row",
                   "grid axes (e.g. h)"});
  }
}

TEST(ValidateTest, SinkCannotReadBuffers) {
  const std::string text =
      WithSink("float(doc[h])", "  buffer doc: int32[max(seqlen_q, seqlen_kv)]\n");
  ExpectInvalid(text, PosOf(text, "doc[h]"), {"cannot read buffer `doc`", "as a const"});
}

TEST(ValidateTest, SinkCannotUseLoopNames) {
  const std::string text = WithSink("float(kv_lo)");
  ExpectInvalid(text, PosOf(text, "kv_lo)"),
                {"`kv_lo` is not declared here", "inside the loop"});
}

// ---------------------------------------------------------------------------------------------
// Warp roles, grid schedules and pipeline depths (the sm_90 base program uses all three).

std::string HopperText() {
  std::ifstream in(std::string(CUBRIDGE_SOURCE_ROOT) + "/cuir/experts/fa3_sm90/base.cuir");
  EXPECT_TRUE(in.good()) << "cannot read fa3_sm90/base.cuir under " << CUBRIDGE_SOURCE_ROOT;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const char kConsumer[] = "  role consumer warps WARPS - 4 regs 240\n";

TEST(ValidateTest, HopperBaseProgramIsValid) {
  EXPECT_TRUE(ValidateText(HopperText()).ok()) << ValidateText(HopperText());
}

TEST(ValidateTest, RolesThatDoNotFoldAreNotChecked) {
  // Warp counts and budgets over builtins (or params over builtins) are known only at launch.
  std::string text = Replace(HopperText(), kConsumer,
                             "  role consumer warps head_dim // 16 - 4 regs 240\n");
  EXPECT_TRUE(ValidateText(text).ok()) << ValidateText(text);
  text = Replace(HopperText(), "param WARPS: int = 12", "param WARPS: int = heads_q - 4");
  EXPECT_TRUE(ValidateText(text).ok()) << ValidateText(text);
  // Roles without a register budget take no part in the register-file check.
  text = Replace(HopperText(), kConsumer, "  role consumer warps 64\n");
  EXPECT_TRUE(ValidateText(text).ok()) << ValidateText(text);
}

TEST(ValidateTest, ProducerNeedsAnotherRole) {
  const std::string text = Replace(HopperText(), kConsumer, "");
  ExpectInvalid(text, PosOf(text, "role producer"),
                {"`producer` is the only role", "role consumer warps WARPS - 4 regs 240"});
}

TEST(ValidateTest, AtMostOneProducer) {
  const std::string text =
      InsertAfter(HopperText(), "role consumer", "  role producer warps 2 regs 24\n");
  ExpectInvalid(text, PosOf(text, "role producer warps 2"),
                {"role `producer` is already declared at " + std::string(kFile) + ":" +
                     PosOf(text, "role producer"),
                 "at most one producer"});
}

TEST(ValidateTest, RoleNeedsAWarp) {
  // WARPS = 4 leaves the consumer `WARPS - 4` = 0 warps; the error points at the expression.
  std::string text = Replace(HopperText(), "param WARPS: int = 12", "param WARPS: int = 4");
  ExpectInvalid(text, PosOf(text, "WARPS - 4", 6),
                {"role `consumer` has `WARPS - 4` = 0 warps with the param defaults",
                 "at least one warp"});
  text = Replace(HopperText(), "role producer warps 4", "role producer warps 0");
  ExpectInvalid(text, PosOf(text, "warps 0", 6), {"role `producer` has `0` warps"});
}

TEST(ValidateTest, RegisterBudgetFollowsSetmaxnreg) {
  struct Case {
    const char* regs;
    const char* says;
  };
  for (const Case& c : {Case{"16", "`16` registers per thread"},
                        Case{"244", "e.g. `regs 240`"},
                        Case{"264", "e.g. `regs 256`"},
                        Case{"20", "e.g. `regs 24`"}}) {
    SCOPED_TRACE(c.regs);
    const std::string text = Replace(HopperText(), "warps 4 regs 24",
                                     std::string("warps 4 regs ") + c.regs);
    ExpectInvalid(text, PosOf(text, std::string("regs ") + c.regs, 5),
                  {"role `producer` asks for", c.says, "multiple of 8 in [24, 256]"});
  }
  // A budget from a param is checked with the param's default.
  std::string text = InsertAfter(HopperText(), "param WARPS", "  param REGS: int = 250\n");
  text = Replace(text, "regs 240", "regs REGS");
  ExpectInvalid(text, PosOf(text, "regs REGS", 5), {"`REGS` = 250 registers per thread"});
}

TEST(ValidateTest, RolesMustFitTheRegisterFile) {
  // 4 x 32 x 24 + 8 x 32 x 256 = 68608 > 65536.
  const std::string text = Replace(HopperText(), "regs 240", "regs 256");
  ExpectInvalid(text, PosOf(text, "role producer"),
                {"producer 4 warps x 32 x 24 regs + consumer 8 warps x 32 x 256 regs = 68608",
                 "more than the 65536"});
}

TEST(ValidateTest, KnownSchedulesAreValid) {
  for (const char* schedule : {"", " schedule linear", " schedule longest_first"}) {
    const std::string text = Replace(HopperText(), " schedule longest_first", schedule);
    EXPECT_TRUE(ValidateText(text).ok()) << schedule << ": " << ValidateText(text);
  }
}

TEST(ValidateTest, UnknownSchedule) {
  const std::string text =
      Replace(HopperText(), "schedule longest_first", "schedule swizzle_l2");
  ExpectInvalid(text, PosOf(text, "grid m_block"),
                {"unknown grid schedule `swizzle_l2`", "linear (", "longest_first (",
                 "drop `schedule swizzle_l2`"});
}

TEST(ValidateTest, PipelineDepthIsAtLeastOne) {
  std::string text = Replace(BaseText(), "pipeline STAGES {", "pipeline 0 {");
  ExpectInvalid(text, PosOf(text, "pipeline 0", 9),
                {"the pipeline depth `0` with the param defaults must be at least 1"});
  text = Replace(BaseText(), "param STAGES: int = 2", "param STAGES: int = 1 - 2");
  ExpectInvalid(text, PosOf(text, "pipeline STAGES", 9), {"the pipeline depth `STAGES` = -1"});
  text = Replace(BaseText(), "pipeline STAGES {", "pipeline 1 {");
  EXPECT_TRUE(ValidateText(text).ok()) << ValidateText(text);
}

// `split` lets the loop run as parts whose online-softmax states are merged: it needs a
// softmax.online in the loop, in either loop form.
TEST(ValidateTest, SplitNeedsTheOnlineSoftmaxInItsLoop) {
  const std::string split = Replace(BaseText(), "pipeline STAGES {", "pipeline STAGES split {");
  EXPECT_TRUE(ValidateText(split).ok()) << ValidateText(split);
  const std::string table = Replace(DocumentMask(kDocTable, "m_block"), "pipeline STAGES {",
                                    "pipeline STAGES split {");
  EXPECT_TRUE(ValidateText(table).ok()) << ValidateText(table);

  // The same loops without their softmax.online (and the pv that reads it) are valid unsplit ...
  const auto without_softmax = [](std::string text) {
    text = Replace(text, "    P = softmax.online S\n", "");
    return Replace(text, "    pv P, V\n", "");
  };
  EXPECT_TRUE(ValidateText(without_softmax(BaseText())).ok())
      << ValidateText(without_softmax(BaseText()));
  // ... and not split.
  for (const std::string& text : {without_softmax(split), without_softmax(table)}) {
    ExpectInvalid(text, PosOf(text, "for n_block"),
                  {"`split` lets the KV loop run as parts whose online-softmax states are merged",
                   "this loop has no `softmax.online`", "e.g. `P = softmax.online S`",
                   "or drop `split`"});
  }
}

}  // namespace
}  // namespace cubridge::cuir
