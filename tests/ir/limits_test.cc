// The parser and the validator bound how deep expressions and blocks nest, so that untrusted
// CuIR text (an LLM's proposal, a user's lift) and programs built in memory cannot drive the
// recursive walks over them (printing, evaluation, type checks, destruction) off the stack. A
// refusal names file:line:col; a program at the limits still round-trips.
#include <algorithm>
#include <string>

#include "cuir/ir/program.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir_test_util.h"

namespace cubridge::cuir {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing::ReadFileOrDie;
using testing::SourcePath;

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

const std::string kLet = "  let deep: int = ";

// The sm_80 base program with `let deep: int = <value>` as its first body statement.
std::string BaseWithLet(const std::string& value) {
  std::string text = ReadFileOrDie(SourcePath("cuir/experts/fa2_sm80/base.cuir"));
  const std::string anchor = "  let kv_h: int = h\n";
  text.replace(text.find(anchor), 0, kLet + value + "\n");
  return text;
}

// Offset of the n-th (1-based) `what` in `text` from `from` on.
size_t Nth(const std::string& text, const std::string& what, int n, size_t from = 0) {
  size_t at = from - 1;
  for (int i = 0; i < n; ++i) at = text.find(what, at + 1);
  return at;
}

// Offset of the n-th `what` in the let's value.
size_t NthInValue(const std::string& text, const std::string& what, int n) {
  return Nth(text, what, n, text.find(kLet) + kLet.size());
}

// "line:col" (1-based) of byte `offset`.
std::string Where(const std::string& text, size_t offset) {
  const size_t newline = text.rfind('\n', offset - 1);
  const size_t col = newline == std::string::npos ? offset + 1 : offset - newline;
  return std::to_string(1 + std::count(text.begin(), text.begin() + offset, '\n')) + ":" +
         std::to_string(col);
}

void ExpectRefused(const std::string& text, size_t offset, const std::string& what) {
  auto p = ParseProgram(text, "deep.cuir");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()),
              StartsWith("deep.cuir:" + Where(text, offset) + ": "));
  EXPECT_THAT(std::string(p.status().message()), HasSubstr(what));
}

TEST(CuirLimits, ParenthesesNestedPastTheLimitAreRefusedAtTheFirstOneTooMany) {
  const std::string text =
      BaseWithLet(Repeat("(", kMaxExprDepth + 1) + "1" + Repeat(")", kMaxExprDepth + 1));
  ExpectRefused(text, NthInValue(text, "(", kMaxExprDepth + 1),
                "expression nested deeper than 512 levels");
}

TEST(CuirLimits, ParenthesesFromAHostileInputDoNotOverflowTheStack) {
  const std::string text = BaseWithLet(Repeat("(", 200000) + "1" + Repeat(")", 200000));
  ExpectRefused(text, NthInValue(text, "(", kMaxExprDepth + 1), "nested deeper than 512");
}

TEST(CuirLimits, PrefixOperatorChainsAreRefused) {
  const std::string text = BaseWithLet(Repeat("-", 100000) + "h");
  ExpectRefused(text, NthInValue(text, "-", kMaxExprDepth + 1), "nested deeper than 512");
  const std::string nots = BaseWithLet(Repeat("!", 100000) + "true");
  ExpectRefused(nots, NthInValue(nots, "!", kMaxExprDepth + 1), "nested deeper than 512");
}

TEST(CuirLimits, CallsAndIndicesCountAsNesting) {
  const int n = kMaxExprDepth + 1;
  const std::string calls = BaseWithLet(Repeat("abs(", n) + "h" + Repeat(")", n));
  ExpectRefused(calls, NthInValue(calls, "(", n), "nested deeper than 512");
  const std::string indices = BaseWithLet(Repeat("buf[", n) + "h" + Repeat("]", n));
  ExpectRefused(indices, NthInValue(indices, "[", n), "nested deeper than 512");
}

// `h + h + ...` nests nothing in the text, but is a tree as deep as the chain is long.
TEST(CuirLimits, LongOperatorChainsAreRefusedWhereTheTreeGetsTooDeep) {
  const int n = 100000;
  const std::string text = BaseWithLet("h" + Repeat(" + h", n));
  // The root is the last `+`; going down the left spine, level 513 is the (n - 512)-th.
  ExpectRefused(text, NthInValue(text, "+", n - kMaxExprDepth), "nested deeper than 512 levels");
  auto e = ParseExpr("h" + Repeat(" ** h", n), "e.cuir");  // right-nested: a level per `**`
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(std::string(e.status().message()),
              StartsWith("e.cuir:1:" + std::to_string(3 + 5 * kMaxExprDepth) + ": "));
}

TEST(CuirLimits, ProgramsAtTheLimitsRoundTrip) {
  // 512 levels as a tree and as text: each `-(h * ` is two of each, and the printer writes the
  // deepest leaf's negation with parentheses, `-(1)`.
  const int pairs = kMaxExprDepth / 2 - 1;
  const std::string deepest = Repeat("-(h * ", pairs) + "-(1)" + Repeat(")", pairs);
  auto p = ParseProgram(BaseWithLet(deepest), "deep.cuir");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(Validate(*p).ok()) << Validate(*p);
  const std::string printed = PrintProgram(*p);
  EXPECT_NE(printed.find(deepest), std::string::npos);
  auto again = ParseProgram(printed, "printed.cuir");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(Equal(*p, *again));
  EXPECT_FALSE(ParseProgram(BaseWithLet("-(h * " + deepest + ")"), "deeper.cuir").ok());
}

TEST(CuirLimits, BlocksNestedPastTheLimitAreRefusedAtTheirBrace) {
  // The kernel's block is level 1; loop bodies nest below it.
  std::string loops;
  for (int i = 0; i < kMaxBlockDepth; ++i) loops += "for i" + std::to_string(i) + " in [0, 1) {\n";
  const std::string text = "cuir 1\nkernel k {\n" + loops + Repeat("}\n", kMaxBlockDepth + 1);
  // The kernel's `{` is the first.
  ExpectRefused(text, Nth(text, "{", kMaxBlockDepth + 1), "blocks nested deeper than 64 levels");
}

TEST(CuirLimits, HostileBlockNestingDoesNotOverflowTheStack) {
  const std::string text = "cuir 1\nkernel k {\n" + Repeat("for i in [0, 1) {\n", 100000);
  ExpectRefused(text, Nth(text, "{", kMaxBlockDepth + 1), "blocks nested deeper than 64");
}

// Programs built in memory by the transfer rules reach the validator without the parser's
// checks; it measures before it recurses, and a deep tree is freed without recursing.
TEST(CuirLimits, ValidatorRefusesDeepExpressionsBuiltInMemory) {
  auto p = ParseProgram(BaseWithLet("h"), "base.cuir");
  ASSERT_TRUE(p.ok()) << p.status();
  ExprPtr deep = Var("h");
  for (int i = 0; i < 1000000; ++i) deep = Binary(BinaryOp::kAdd, deep, IntLit(1));
  Stmt* let = FindDecl(*p, StmtKind::kLet, "deep");
  ASSERT_NE(let, nullptr);
  let->value = deep;
  const absl::Status s = Validate(*p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  // No node of the chain has a position: the statement's is given.
  EXPECT_THAT(std::string(s.message()),
              StartsWith("base.cuir:" + std::to_string(let->loc.line) +
                         ":3: expression nested deeper than 512 levels in `let`"));
}

TEST(CuirLimits, ValidatorRefusesDeepBlocksBuiltInMemory) {
  auto p = ParseProgram(BaseWithLet("h"), "base.cuir");
  ASSERT_TRUE(p.ok()) << p.status();
  Stmt* loop = FindKvLoop(*p);
  ASSERT_NE(loop, nullptr);
  const Stmt template_loop = *loop;
  for (int depth = 2; depth <= kMaxBlockDepth; ++depth) {
    loop->body.push_back(template_loop);
    loop->body.back().body.clear();
    loop = &loop->body.back();
  }
  const absl::Status s = Validate(*p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("blocks nested deeper than 64 levels"));
}

TEST(CuirLimits, MeasureExprCountsSharedSubtreesPerUseInLinearTime) {
  ExprPtr e = Var("x");
  for (int i = 0; i < 100; ++i) e = Binary(BinaryOp::kAdd, e, e);  // 2^101 - 1 nodes as a tree
  const ExprExtent capped = MeasureExpr(e, 1000, 1000000);
  EXPECT_EQ(capped.nodes, 1000001);
  EXPECT_NE(capped.over, nullptr);
  const ExprExtent whole = MeasureExpr(e, 1000, kNoNodeCap);
  EXPECT_EQ(whole.depth, 101);
  EXPECT_EQ(whole.nodes, kNoNodeCap);
  EXPECT_EQ(whole.over, nullptr);
  EXPECT_FALSE(ExprDepthExceeds(e, 101));
  EXPECT_TRUE(ExprDepthExceeds(e, 100));
  const ExprExtent small = MeasureExpr(Binary(BinaryOp::kMul, Var("x"), IntLit(2)), 10, 10);
  EXPECT_EQ(small.depth, 2);
  EXPECT_EQ(small.nodes, 3);
  EXPECT_EQ(small.over, nullptr);
}

}  // namespace
}  // namespace cubridge::cuir
