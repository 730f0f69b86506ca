// Text form of programs: exact round trips of canonical files, structure of what is parsed, and
// the positions and wording of parse errors.
#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cuir/ir/program.h"
#include "gtest/gtest.h"
#include "ir_test_util.h"

namespace cubridge::cuir {
namespace {

using testing::ReadFileOrDie;
using testing::SourcePath;
using testing::WithoutCommentLines;

constexpr const char* kBasePath = "cuir/experts/fa2_sm80/base.cuir";

std::vector<std::string> DataFiles() {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(SourcePath("tests/ir/data"))) {
    if (entry.path().extension() == ".cuir") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

Program ParseOrDie(const std::string& text, const std::string& file = "") {
  absl::StatusOr<Program> p = ParseProgram(text, file);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : Program{};
}

std::vector<std::string> OpNames(const std::vector<Stmt>& stmts) {
  std::vector<std::string> names;
  for (const Stmt& s : stmts) names.push_back(StmtKindName(s.kind));
  return names;
}

void CollectKinds(const std::vector<Stmt>& stmts, std::set<StmtKind>* kinds) {
  for (const Stmt& s : stmts) {
    kinds->insert(s.kind);
    CollectKinds(s.body, kinds);
  }
}

TEST(ParsePrint, BaseProgramPrintsBackExactly) {
  std::string text = ReadFileOrDie(SourcePath(kBasePath));
  Program p = ParseOrDie(text, kBasePath);
  EXPECT_EQ(PrintProgram(p), WithoutCommentLines(text));
}

TEST(ParsePrint, BaseProgramStructure) {
  Program p = ParseOrDie(ReadFileOrDie(SourcePath(kBasePath)), kBasePath);
  EXPECT_EQ(p.version, 1);
  EXPECT_EQ(p.kernel, "attn_fwd");
  EXPECT_EQ(OpNames(p.stmts),
            (std::vector<std::string>{"expert", "param", "param", "param", "param", "role", "grid",
                                      "let", "let", "let", "load", "softmax.init", "for",
                                      "epilogue"}));
  const Stmt* grid = FindDecl(p, StmtKind::kGrid);
  ASSERT_NE(grid, nullptr);
  EXPECT_EQ(grid->names, (std::vector<std::string>{"m_block", "h", "b"}));
  EXPECT_EQ(PrintExpr(grid->exprs[0]), "cdiv(seqlen_q, BLOCK_M)");
  EXPECT_EQ(grid->attr, "");

  const Stmt* block_n = FindDecl(p, StmtKind::kParam, "BLOCK_N");
  ASSERT_NE(block_n, nullptr);
  EXPECT_EQ(block_n->type, Type::kInt);
  EXPECT_TRUE(Equal(block_n->value, IntLit(64)));
  EXPECT_EQ(FindDecl(p, StmtKind::kParam, "BLOCK_K"), nullptr);

  const Stmt* loop = FindKvLoop(p);
  ASSERT_NE(loop, nullptr);
  EXPECT_EQ(loop->name, "n_block");
  ASSERT_EQ(loop->ranges.size(), 1u);
  EXPECT_TRUE(Equal(loop->ranges[0].lo, IntLit(0)));
  EXPECT_TRUE(Equal(loop->pipeline, Var("STAGES")));
  EXPECT_EQ(OpNames(loop->body), (std::vector<std::string>{"let", "let", "load", "load", "qk",
                                                           "softmax.online", "pv"}));
  const Stmt& load_k = loop->body[2];
  EXPECT_EQ(load_k.name, "K");
  EXPECT_EQ(load_k.operands, (std::vector<std::string>{"k"}));
  ASSERT_EQ(load_k.exprs.size(), 4u);
  EXPECT_TRUE(Equal(load_k.exprs[1], Var("kv_h")));
  EXPECT_TRUE(Equal(load_k.exprs[3], Var("kv_hi")));
  const Stmt& qk = loop->body[4];
  EXPECT_EQ(qk.name, "S");
  EXPECT_EQ(qk.operands, (std::vector<std::string>{"Q", "K"}));
  EXPECT_TRUE(Equal(qk.value, Var("softmax_scale")));
}

TEST(ParsePrint, LocationsNameFileLineAndColumn) {
  Program p = ParseOrDie(ReadFileOrDie(SourcePath(kBasePath)), kBasePath);
  const Stmt* loop = FindKvLoop(p);
  ASSERT_NE(loop, nullptr);
  // The loop is on line 18 of base.cuir (after 3 comment lines), indented by 2.
  EXPECT_EQ(loop->loc.ToString(), std::string(kBasePath) + ":18:3");
  EXPECT_EQ(loop->body[0].loc.line, 19);
  EXPECT_EQ(loop->body[0].loc.col, 5);
  // `cdiv(` starts at column 22 of `  for n_block in [0, cdiv(seqlen_kv, BLOCK_N)) ...`.
  EXPECT_EQ(loop->ranges[0].hi->loc.col, 22);
}

class DataFileTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DataFileTest, PrintsBackExactlyAndValidates) {
  std::string text = ReadFileOrDie(GetParam());
  Program p = ParseOrDie(text, GetParam());
  std::string printed = PrintProgram(p);
  EXPECT_EQ(printed, WithoutCommentLines(text));
  absl::Status valid = Validate(p);
  EXPECT_TRUE(valid.ok()) << valid;
  Program again = ParseOrDie(printed);
  EXPECT_TRUE(Equal(again, p));
  EXPECT_EQ(PrintProgram(again), printed);
}

INSTANTIATE_TEST_SUITE_P(Files, DataFileTest, ::testing::ValuesIn(DataFiles()),
                         [](const auto& info) {
                           return std::filesystem::path(info.param).stem().string();
                         });

// The round-trip files above are only as good as their coverage: they must exercise every
// statement kind and every optional clause.
TEST(ParsePrint, DataFilesCoverEveryStatementForm) {
  std::set<StmtKind> kinds;
  bool table_loop = false, union_range = false, mask_when = false, mask_always = false;
  bool role_regs = false, grid_schedule = false, table_per = false, loop_no_pipeline = false;
  bool epilogue_sink = false, loop_split = false, loop_no_split = false;
  for (const std::string& file : DataFiles()) {
    Program p = ParseOrDie(ReadFileOrDie(file), file);
    CollectKinds(p.stmts, &kinds);
    for (const Stmt& s : p.stmts) {
      epilogue_sink |= s.kind == StmtKind::kEpilogue && s.value != nullptr;
      role_regs |= s.kind == StmtKind::kRole && s.aux != nullptr;
      grid_schedule |= s.kind == StmtKind::kGrid && !s.attr.empty();
      table_per |= s.kind == StmtKind::kTable && !s.names.empty();
    }
    if (const Stmt* loop = FindKvLoop(p)) {
      table_loop |= !loop->table.empty();
      union_range |= loop->ranges.size() > 1;
      loop_no_pipeline |= loop->pipeline == nullptr;
      loop_split |= loop->split;
      loop_no_split |= !loop->split;
      for (const Stmt& s : loop->body) {
        mask_when |= s.kind == StmtKind::kMask && s.aux != nullptr;
        mask_always |= s.kind == StmtKind::kMask && s.aux == nullptr;
      }
    }
  }
  EXPECT_EQ(kinds.size(), static_cast<size_t>(StmtKind::kGradEpilogue) + 1);
  EXPECT_TRUE(table_loop);
  EXPECT_TRUE(union_range);
  EXPECT_TRUE(mask_when);
  EXPECT_TRUE(mask_always);
  EXPECT_TRUE(role_regs);
  EXPECT_TRUE(grid_schedule);
  EXPECT_TRUE(table_per);
  EXPECT_TRUE(loop_no_pipeline);
  EXPECT_TRUE(epilogue_sink);
  EXPECT_TRUE(loop_split);
  EXPECT_TRUE(loop_no_split);
}

TEST(ParsePrint, EpilogueSinkKeepsItsExpression) {
  Program p = ParseOrDie(ReadFileOrDie(SourcePath("tests/ir/data/sink.cuir")), "sink.cuir");
  const Stmt* epilogue = FindDecl(p, StmtKind::kEpilogue);
  ASSERT_NE(epilogue, nullptr);
  ASSERT_NE(epilogue->value, nullptr);
  EXPECT_EQ(PrintExpr(epilogue->value), "sink + 0.25 * float(h % 2)");
  // Line 29 of the file (two comment lines first); the clause's expression starts at column 17.
  EXPECT_EQ(epilogue->loc.ToString(), "sink.cuir:29:3");
  ASSERT_EQ(epilogue->value->args.size(), 2u);
  EXPECT_EQ(epilogue->value->args[0]->loc.ToString(), "sink.cuir:29:17");

  // The sink is part of the statement: dropping it or changing it makes another program.
  Program without = p;
  FindDecl(without, StmtKind::kEpilogue)->value = nullptr;
  EXPECT_FALSE(Equal(p, without));
  EXPECT_NE(PrintProgram(without).find("\n  epilogue\n}"), std::string::npos);
  Program other = ParseOrDie(PrintProgram(p));
  FindDecl(other, StmtKind::kEpilogue)->value = FloatLit(0.5);
  EXPECT_FALSE(Equal(p, other));
  EXPECT_NE(PrintProgram(other).find("\n  epilogue sink 0.5\n}"), std::string::npos);
}

TEST(ParsePrint, PlainEpilogueHasNoSink) {
  Program p = ParseOrDie(ReadFileOrDie(SourcePath(kBasePath)), kBasePath);
  const Stmt* epilogue = FindDecl(p, StmtKind::kEpilogue);
  ASSERT_NE(epilogue, nullptr);
  EXPECT_EQ(epilogue->value, nullptr);
}

TEST(ParsePrint, TableLoopAndTableDeclaration) {
  Program p = ParseOrDie(ReadFileOrDie(SourcePath("tests/ir/data/hopper_roles.cuir")));
  const Stmt* table = FindDecl(p, StmtKind::kTable, "T");
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->names, (std::vector<std::string>{"h"}));
  EXPECT_EQ(PrintExpr(table->value), "q_idx >= kv_idx && q_idx - kv_idx <= 64 * (h + 1)");
  const Stmt* loop = FindKvLoop(p);
  ASSERT_NE(loop, nullptr);
  EXPECT_TRUE(loop->ranges.empty());
  EXPECT_EQ(loop->table, "T");
  EXPECT_EQ(loop->full_var, "full");
  EXPECT_TRUE(Equal(loop->pipeline, Var("STAGES")));
  EXPECT_TRUE(loop->split);
  ASSERT_EQ(loop->exprs.size(), 2u);
  EXPECT_TRUE(Equal(loop->exprs[0], Var("h")));
  const Stmt& mask = loop->body[5];
  ASSERT_EQ(mask.kind, StmtKind::kMask);
  EXPECT_EQ(mask.operands, (std::vector<std::string>{"S"}));
  EXPECT_TRUE(Equal(mask.aux, Unary(UnaryOp::kNot, Var("full"))));
  const Stmt* consumer = FindDecl(p, StmtKind::kRole, "consumer");
  ASSERT_NE(consumer, nullptr);
  EXPECT_EQ(PrintExpr(consumer->value), "WARPS - 4");
  EXPECT_TRUE(Equal(consumer->aux, IntLit(240)));
  EXPECT_EQ(FindDecl(p, StmtKind::kGrid)->attr, "longest_first");
}

TEST(ParsePrint, UnionRangesKeepTheirOrder) {
  Program p = ParseOrDie(ReadFileOrDie(SourcePath("tests/ir/data/global_window.cuir")));
  const Stmt* loop = FindKvLoop(p);
  ASSERT_NE(loop, nullptr);
  ASSERT_EQ(loop->ranges.size(), 2u);
  EXPECT_EQ(PrintExpr(loop->ranges[0].hi), "min(cdiv(G, BLOCK_N), n_hi)");
  EXPECT_EQ(PrintExpr(loop->ranges[1].lo), "max(q_lo - W, 0) // BLOCK_N");
}

// `split` is the last word of a loop header, after the optional pipeline clause, in both loop
// forms; it is part of the statement (equality, printing) like the pipeline clause.
TEST(ParsePrint, LoopSplitRoundTripsOnBothLoopForms) {
  struct Case {
    const char* header;
    const char* pipeline;  // printed pipeline expression, "" for none
  };
  for (const Case& c : {Case{"for n_block in [0, 2) union [3, 4) pipeline 2 split {", "2"},
                        Case{"for n_block in [0, n) split {", ""},
                        Case{"for n_block, full in table T[h, m_block] pipeline STAGES split {",
                             "STAGES"},
                        Case{"for n_block, full in table T[m_block] split {", ""}}) {
    SCOPED_TRACE(c.header);
    const std::string text = std::string("cuir 1\nkernel k {\n  ") + c.header +
                             "\n    P = softmax.online S\n  }\n}\n";
    Program p = ParseOrDie(text);
    const Stmt* loop = FindKvLoop(p);
    ASSERT_NE(loop, nullptr);
    EXPECT_TRUE(loop->split);
    EXPECT_EQ(loop->pipeline ? PrintExpr(loop->pipeline) : "", c.pipeline);
    EXPECT_EQ(loop->body.size(), 1u);
    EXPECT_EQ(PrintProgram(p), text);
    EXPECT_TRUE(Equal(ParseOrDie(PrintProgram(p)), p));

    Program unsplit = p;
    FindKvLoop(unsplit)->split = false;
    EXPECT_FALSE(Equal(p, unsplit));
    EXPECT_EQ(PrintProgram(unsplit).find("split"), std::string::npos);
    EXPECT_TRUE(Equal(ParseOrDie(PrintProgram(unsplit)), unsplit));
  }
}

TEST(ParsePrint, LayoutAndCommentsDoNotMatter) {
  const char* messy =
      "# leading comment\n\n"
      "cuir   1   # version\n"
      "kernel k{\n"
      "\n"
      "\tgrid m_block<4,h<heads_q , b< batch schedule  snake\n"
      "   for n_block in [0,(2))union[3 ,4)pipeline 2{  # two intervals\n"
      "S=qk Q,K scale 0.5\r\n"
      "      }\n"
      "epilogue\n"
      "}\n\n# trailing comment";
  const char* canonical =
      "cuir 1\n"
      "kernel k {\n"
      "  grid m_block < 4, h < heads_q, b < batch schedule snake\n"
      "  for n_block in [0, 2) union [3, 4) pipeline 2 {\n"
      "    S = qk Q, K scale 0.5\n"
      "  }\n"
      "  epilogue\n"
      "}\n";
  Program p = ParseOrDie(messy);
  EXPECT_EQ(PrintProgram(p), canonical);
  EXPECT_TRUE(Equal(p, ParseOrDie(canonical)));
}

TEST(ParsePrint, EqualityIsStructural) {
  std::string text = ReadFileOrDie(SourcePath("tests/ir/data/causal.cuir"));
  Program a = ParseOrDie(text, "a.cuir");
  Program b = ParseOrDie("\n\n" + text, "b.cuir");  // different locations only
  EXPECT_TRUE(Equal(a, b));

  Program changed = b;
  FindKvLoop(changed)->body[6].aux = nullptr;  // drop `when !full`
  EXPECT_FALSE(Equal(a, changed));
  changed = b;
  FindDecl(changed, StmtKind::kParam, "BLOCK_N")->value = IntLit(128);
  EXPECT_FALSE(Equal(a, changed));
  changed = b;
  FindKvLoop(changed)->pipeline = nullptr;
  EXPECT_FALSE(Equal(a, changed));
  changed = b;
  FindKvLoop(changed)->split = true;
  EXPECT_FALSE(Equal(a, changed));
  changed = b;
  changed.stmts.pop_back();
  EXPECT_FALSE(Equal(a, changed));
  changed = b;
  changed.kernel = "other";
  EXPECT_FALSE(Equal(a, changed));
}

Stmt MakeStmt(StmtKind kind) {
  Stmt s;
  s.kind = kind;
  return s;
}

TEST(ParsePrint, PrintsProgramsBuiltInCode) {
  Program p;
  p.kernel = "built";
  Stmt grid = MakeStmt(StmtKind::kGrid);
  grid.names = {"m_block"};
  grid.exprs = {IntLit(2)};
  Stmt mask = MakeStmt(StmtKind::kMask);
  mask.operands = {"S"};
  mask.value = Binary(BinaryOp::kGe, Var("q_idx"), Var("kv_idx"));
  Stmt loop = MakeStmt(StmtKind::kFor);
  loop.name = "n_block";
  loop.ranges = {{IntLit(0), Var("n")}};
  loop.body = {mask};
  p.stmts = {grid, loop};
  EXPECT_EQ(PrintProgram(p),
            "cuir 1\n"
            "kernel built {\n"
            "  grid m_block < 2\n"
            "  for n_block in [0, n) {\n"
            "    mask S = q_idx >= kv_idx\n"
            "  }\n"
            "}\n");
}

// Rewrites print programs for error messages; an incomplete statement must not crash the printer.
TEST(ParsePrint, PrintsIncompleteStatementsVisibly) {
  Program p;
  p.kernel = "broken";
  Stmt load = MakeStmt(StmtKind::kLoad);
  load.name = "K";
  p.stmts = {load};
  EXPECT_EQ(PrintProgram(p),
            "cuir 1\nkernel broken {\n  load K = <missing>[<null>, <null>, <null>:<null>]\n}\n");
}

TEST(Program, StatementKindNamesAreTheKeywords) {
  std::set<std::string> names;
  for (int k = 0; k <= static_cast<int>(StmtKind::kEpilogue); ++k) {
    names.insert(StmtKindName(static_cast<StmtKind>(k)));
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(StmtKind::kEpilogue) + 1);
  EXPECT_STREQ(StmtKindName(StmtKind::kSoftmaxOnline), "softmax.online");
  EXPECT_STREQ(StmtKindName(StmtKind::kQK), "qk");
  EXPECT_STREQ(StmtKindName(StmtKind::kFor), "for");
}

TEST(Program, BuiltinSymbols) {
  const auto& symbols = BuiltinSymbols();
  auto type_of = [&](const std::string& name) -> std::optional<Type> {
    for (const auto& [n, t] : symbols) {
      if (n == name) return t;
    }
    return std::nullopt;
  };
  EXPECT_EQ(symbols.size(), 7u);
  for (const char* name : {"batch", "heads_q", "heads_kv", "head_dim", "seqlen_q", "seqlen_kv"}) {
    EXPECT_EQ(type_of(name), Type::kInt) << name;
  }
  EXPECT_EQ(type_of("softmax_scale"), Type::kFloat);
}

TEST(Program, FindKvLoopIsNullWithoutLoop) {
  Program p = ParseOrDie("cuir 1\nkernel k {\n  epilogue\n}\n");
  EXPECT_EQ(FindKvLoop(p), nullptr);
  EXPECT_EQ(FindDecl(p, StmtKind::kGrid), nullptr);
  EXPECT_NE(FindDecl(p, StmtKind::kEpilogue), nullptr);
}

// ----- parse errors ------------------------------------------------------------------------

struct BadInput {
  const char* label;
  const char* body;  // statements placed on line 3, inside `kernel k {`
  const char* message;
};

std::string Wrap(const char* body) { return std::string("cuir 1\nkernel k {\n") + body; }

class ParseErrorTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(ParseErrorTest, NamesLineColumnAndProblem) {
  absl::StatusOr<Program> p = ParseProgram(Wrap(GetParam().body));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.status().message(), GetParam().message);
}

// Columns were counted by hand on the inputs (1-based, two-space indentation).
INSTANTIATE_TEST_SUITE_P(
    Cases, ParseErrorTest,
    ::testing::Values(
        BadInput{"MissingClosingBrace", "  epilogue\n", "4:1: expected '}', found end of input"},
        BadInput{"MissingLoopBrace", "  for n in [0, 4)\n    pv P, V\n  }\n}\n",
                 "3:18: expected '{', found end of line"},
        BadInput{"ClosedRangeBracket", "  for n in [0, 4] {\n  }\n}\n",
                 "3:17: expected ')' (block ranges are half-open: [lo, hi)), found ']'"},
        BadInput{"UnterminatedString", "  expert \"fa2_sm80\n}\n",
                 "3:10: unterminated string literal: close it with '\"' on the same line"},
        BadInput{"GarbageCharacter", "  let x: int = a @ b\n}\n",
                 "3:18: unexpected character '@'"},
        BadInput{"FloatWithoutLeadingDigit", "  const c: float = .5\n}\n",
                 "3:20: a float literal needs a digit before '.': write 0.5, not .5"},
        BadInput{"FloatWithoutTrailingDigit", "  const c: float = 1.\n}\n",
                 "3:20: a float literal needs a digit after '.': write 1.0, not 1."},
        BadInput{"MalformedNumber", "  let x: int = 12ab\n}\n", "3:16: malformed number '12ab'"},
        BadInput{"TrailingTokens", "  epilogue now\n}\n",
                 "3:12: expected end of line or 'sink EXPR' (an attention sink logit, e.g. "
                 "`epilogue sink 0.5`), found 'now'"},
        BadInput{"TrailingTokensAfterSink", "  epilogue sink 0.5 now\n}\n",
                 "3:21: expected end of line, found 'now'"},
        BadInput{"SinkWithoutExpression", "  epilogue sink\n}\n",
                 "3:16: expected an expression, found end of line"},
        BadInput{"UnknownType", "  let x: int64 = 1\n}\n",
                 "3:10: expected a type (bool, int or float), found 'int64'"},
        BadInput{"LoadFromUnknownTensor", "  load Q = o[b, h, 0:1]\n}\n",
                 "3:12: expected an input tensor (q, k, v, or do: the output's gradient), found 'o'"},
        BadInput{"LoadWithoutSlice", "  load Q = q[b, h, 0]\n}\n",
                 "3:21: expected ':', found ']'"},
        BadInput{"AssignWithoutOp", "  S = Q\n}\n",
                 "3:7: expected qk, softmax.online, softmax.recompute, dp or softmax.grad after '=', "
                 "found 'Q'"},
        BadInput{"ChainedComparison", "  mask S = a < b < c\n}\n",
                 "3:18: comparisons do not chain: write (a < b) && (b < c) instead of a < b < c"},
        BadInput{"UnknownFunction", "  let x: float = lgamma(1.0)\n}\n",
                 "3:18: unknown function 'lgamma'; the functions are abs, exp, exp2, log, log2, "
                 "sqrt, tanh, sigmoid, floor, float, int, sin, cos, tan, asin, acos, atan, sinh, "
                 "cosh, asinh, acosh, atanh, erf, erfc, log1p, expm1, log10, trunc, round, sign, "
                 "bit_not, min, max, cdiv, atan2, fmod, bit_and, bit_or, bit_xor, shl, shr, select"},
        BadInput{"WrongArity", "  let x: int = cdiv(1)\n}\n",
                 "3:16: cdiv takes 2 arguments, got 1"},
        BadInput{"TableLoopWithoutFullVar", "  for n in table T[m_block] {\n  }\n}\n",
                 "3:12: expected a block range [lo, hi) (only a loop binding 'VAR, FULL' walks a "
                 "table), found 'table'"},
        BadInput{"RangeLoopWithFullVar", "  for n, full in [0, 4) {\n  }\n}\n",
                 "3:18: expected 'table' (a loop binding 'VAR, FULL' walks a block table), found "
                 "'['"},
        BadInput{"SplitBeforePipeline", "  for n in [0, 4) split pipeline 2 {\n  }\n}\n",
                 "3:25: expected '{', found 'pipeline'"},
        BadInput{"SplitTakesNoExpression", "  for n in [0, 4) split 2 {\n  }\n}\n",
                 "3:25: expected '{', found '2'"},
        BadInput{"IntLiteralTooLarge", "  let x: int = 9223372036854775808\n}\n",
                 "3:16: integer literal 9223372036854775808 does not fit in a 64-bit signed int"},
        BadInput{"DotInName", "  let soft.max: int = 1\n}\n",
                 "3:11: unexpected '.' after 'soft': only softmax.init and softmax.online "
                 "contain a dot"},
        BadInput{"MissingExpression", "  let x: int =\n}\n",
                 "3:15: expected an expression, found end of line"}),
    [](const auto& info) { return std::string(info.param.label); });

TEST(ParseErrors, UnknownStatementListsTheStatements) {
  absl::StatusOr<Program> p = ParseProgram(Wrap("  frobnicate x\n}\n"));
  ASSERT_FALSE(p.ok());
  std::string msg(p.status().message());
  EXPECT_EQ(msg.rfind("3:3: expected a statement (", 0), 0u) << msg;
  EXPECT_NE(msg.find("softmax.init"), std::string::npos) << msg;
  EXPECT_NE(msg.find("NAME = qk"), std::string::npos) << msg;
  EXPECT_NE(msg.find("found 'frobnicate'"), std::string::npos) << msg;
}

TEST(ParseErrors, PrefixWithFileName) {
  absl::StatusOr<Program> p = ParseProgram(Wrap("  epilogue\n"), "variant.cuir");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), "variant.cuir:4:1: expected '}', found end of input");
}

TEST(ParseErrors, Header) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c : {
           Case{"kernel k {\n}\n", "1:1: expected 'cuir', found 'kernel'"},
           Case{"cuir 2\nkernel k {\n}\n",
                "1:6: unsupported CuIR version 2; this build reads version 1 (write 'cuir 1')"},
           Case{"cuir 1 kernel k {\n}\n", "1:8: expected end of line, found 'kernel'"},
           Case{"cuir 1\nkernel {\n}\n", "2:8: expected a kernel name, found '{'"},
           Case{"cuir 1\nkernel k {\n}\nepilogue\n",
                "4:1: expected end of input after the kernel's '}', found 'epilogue'"},
           Case{"", "1:1: expected 'cuir', found end of input"},
       }) {
    absl::StatusOr<Program> p = ParseProgram(c.text);
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_EQ(p.status().message(), c.message) << c.text;
  }
}

}  // namespace
}  // namespace cubridge::cuir
