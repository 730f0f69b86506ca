// Expressions: construction, printing with minimal parentheses, exact re-parsing (including
// literals at the edges of their types), and the tree utilities.
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuir/ir/expr.h"
#include "cuir/ir/program.h"
#include "gtest/gtest.h"

namespace cubridge::cuir {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

ExprPtr Parse(const std::string& text) {
  absl::StatusOr<ExprPtr> e = ParseExpr(text);
  EXPECT_TRUE(e.ok()) << text << ": " << e.status();
  return e.ok() ? *e : nullptr;
}

ExprPtr Bin(BinaryOp op, ExprPtr a, ExprPtr b) { return Binary(op, std::move(a), std::move(b)); }
ExprPtr V(const char* name) { return Var(name); }

// Print must give `text`, and `text` must parse back to the same tree.
void ExpectPrintsAs(const ExprPtr& e, const std::string& text) {
  EXPECT_EQ(PrintExpr(e), text);
  ExprPtr back = Parse(text);
  EXPECT_TRUE(Equal(back, e)) << text << " re-parsed as " << PrintExpr(back);
}

TEST(ExprPrint, SubtractionAssociatesLeft) {
  ExpectPrintsAs(Bin(BinaryOp::kSub, V("a"), Bin(BinaryOp::kSub, V("b"), V("c"))), "a - (b - c)");
  ExpectPrintsAs(Bin(BinaryOp::kSub, Bin(BinaryOp::kSub, V("a"), V("b")), V("c")), "a - b - c");
}

TEST(ExprPrint, PowerBindsTighterThanUnaryMinusOnItsLeft) {
  // Python: -2**2 == -4.
  ExprPtr e = Parse("-2**2");
  EXPECT_TRUE(Equal(e, Unary(UnaryOp::kNeg, Bin(BinaryOp::kPow, IntLit(2), IntLit(2)))));
  ExpectPrintsAs(e, "-2 ** 2");
  ExpectPrintsAs(Bin(BinaryOp::kPow, IntLit(-2), IntLit(2)), "(-2) ** 2");
  ExpectPrintsAs(Bin(BinaryOp::kPow, Unary(UnaryOp::kNeg, V("a")), IntLit(2)), "(-a) ** 2");
  // A unary after `**` needs no parentheses, and `**` is right-associative.
  ExpectPrintsAs(Bin(BinaryOp::kPow, V("a"), IntLit(-1)), "a ** -1");
  ExpectPrintsAs(Bin(BinaryOp::kPow, V("a"), Unary(UnaryOp::kNeg, V("b"))), "a ** -b");
  ExpectPrintsAs(Bin(BinaryOp::kPow, V("a"), Bin(BinaryOp::kPow, V("b"), V("c"))), "a ** b ** c");
  ExpectPrintsAs(Bin(BinaryOp::kPow, Bin(BinaryOp::kPow, V("a"), V("b")), V("c")), "(a ** b) ** c");
}

TEST(ExprPrint, MultiplicativeOperatorsShareALevel) {
  ExprPtr e = Parse("a // b * c");
  EXPECT_TRUE(Equal(e, Bin(BinaryOp::kMul, Bin(BinaryOp::kFloorDiv, V("a"), V("b")), V("c"))));
  ExpectPrintsAs(e, "a // b * c");
  ExpectPrintsAs(Bin(BinaryOp::kFloorDiv, V("a"), Bin(BinaryOp::kMul, V("b"), V("c"))),
                 "a // (b * c)");
  ExpectPrintsAs(Bin(BinaryOp::kMod, Bin(BinaryOp::kAdd, V("a"), V("b")), V("c")), "(a + b) % c");
  ExpectPrintsAs(Bin(BinaryOp::kAdd, V("a"), Bin(BinaryOp::kDiv, V("b"), V("c"))), "a + b / c");
}

TEST(ExprPrint, ComparisonsInsideLogic) {
  ExprPtr e = Parse("q_idx >= kv_idx && doc[q_idx] == doc[kv_idx] || !full");
  ExprPtr want = Bin(BinaryOp::kOr,
                     Bin(BinaryOp::kAnd, Bin(BinaryOp::kGe, V("q_idx"), V("kv_idx")),
                         Bin(BinaryOp::kEq, Index("doc", V("q_idx")), Index("doc", V("kv_idx")))),
                     Unary(UnaryOp::kNot, V("full")));
  EXPECT_TRUE(Equal(e, want)) << PrintExpr(e);
  ExpectPrintsAs(want, "q_idx >= kv_idx && doc[q_idx] == doc[kv_idx] || !full");
  ExpectPrintsAs(Bin(BinaryOp::kAnd, V("a"), Bin(BinaryOp::kOr, V("b"), V("c"))), "a && (b || c)");
  // Comparisons do not chain, so a comparison operand of a comparison keeps its parentheses.
  ExpectPrintsAs(Bin(BinaryOp::kEq, Bin(BinaryOp::kLt, V("a"), V("b")), BoolLit(true)),
                 "(a < b) == true");
  ExpectPrintsAs(Bin(BinaryOp::kNe, V("x"), Bin(BinaryOp::kGe, V("a"), V("b"))), "x != (a >= b)");
  ExpectPrintsAs(Unary(UnaryOp::kNot, Bin(BinaryOp::kLt, V("a"), V("b"))), "!(a < b)");
}

TEST(ExprPrint, NegativeLiteralsAndNegation) {
  EXPECT_TRUE(Equal(Parse("-3"), IntLit(-3)));
  ExpectPrintsAs(IntLit(-3), "-3");
  ExpectPrintsAs(Unary(UnaryOp::kNeg, IntLit(3)), "-(3)");
  ExpectPrintsAs(Unary(UnaryOp::kNeg, IntLit(-3)), "--3");
  ExpectPrintsAs(Unary(UnaryOp::kNeg, FloatLit(kInf)), "-(inf)");
  ExpectPrintsAs(Bin(BinaryOp::kSub, V("a"), IntLit(-3)), "a - -3");
  ExpectPrintsAs(Bin(BinaryOp::kMul, IntLit(-3), V("a")), "-3 * a");
  ExpectPrintsAs(Unary(UnaryOp::kNeg, Bin(BinaryOp::kAdd, V("a"), V("b"))), "-(a + b)");
  ExpectPrintsAs(IntLit(std::numeric_limits<int64_t>::min()), "-9223372036854775808");
  ExpectPrintsAs(IntLit(std::numeric_limits<int64_t>::max()), "9223372036854775807");
}

TEST(ExprPrint, FloatsRoundTripExactly) {
  struct Case {
    double value;
    const char* text;
  };
  for (const Case& c : {Case{1.0, "1.0"}, Case{0.5, "0.5"}, Case{-0.5, "-0.5"}, Case{0.1, "0.1"},
                        Case{20.0, "20.0"}, Case{1e20, "1e+20"}, Case{-0.0, "-0.0"},
                        Case{5e-324, "5e-324"}, Case{kInf, "inf"}, Case{-kInf, "-inf"},
                        Case{std::numeric_limits<double>::max(), "1.7976931348623157e+308"}}) {
    ExpectPrintsAs(FloatLit(c.value), c.text);
  }
  EXPECT_EQ(PrintExpr(FloatLit(kNaN)), "nan");
  EXPECT_TRUE(std::isnan(Parse("nan")->float_value));
  EXPECT_TRUE(std::signbit(Parse("-0.0")->float_value));
  // 1.0 and 1 are different literals (float vs int).
  EXPECT_EQ(Parse("1.0")->kind, ExprKind::kFloatLit);
  EXPECT_EQ(Parse("1")->kind, ExprKind::kIntLit);
  EXPECT_EQ(Parse("2e-3")->float_value, 0.002);
}

TEST(ExprPrint, CallsAndIndexing) {
  ExpectPrintsAs(Bin(BinaryOp::kMin, Bin(BinaryOp::kAdd, V("q_lo"), V("BLOCK_M")), V("seqlen_q")),
                 "min(q_lo + BLOCK_M, seqlen_q)");
  ExpectPrintsAs(Select(V("c"), FloatLit(1.0), Unary(UnaryOp::kTanh, V("score"))),
                 "select(c, 1.0, tanh(score))");
  ExpectPrintsAs(Index("doc", Bin(BinaryOp::kSub, V("q_idx"), IntLit(1))), "doc[q_idx - 1]");
  // A call binds like a primary: no parentheses around it as a power base.
  ExpectPrintsAs(Bin(BinaryOp::kPow, Unary(UnaryOp::kAbs, V("x")), IntLit(2)), "abs(x) ** 2");
}

TEST(ExprPrint, EveryOperatorHasASpellingThatParses) {
  for (int op = 0; op <= static_cast<int>(UnaryOp::kToInt); ++op) {
    ExprPtr e = Unary(static_cast<UnaryOp>(op), V("x"));
    ExprPtr back = Parse(PrintExpr(e));
    EXPECT_TRUE(Equal(back, e)) << PrintExpr(e);
  }
  for (int op = 0; op <= static_cast<int>(BinaryOp::kOr); ++op) {
    ExprPtr e = Bin(static_cast<BinaryOp>(op), V("x"), V("y"));
    ExprPtr back = Parse(PrintExpr(e));
    EXPECT_TRUE(Equal(back, e)) << PrintExpr(e);
  }
  EXPECT_STREQ(UnaryOpName(UnaryOp::kToFloat), "float");
  EXPECT_STREQ(BinaryOpName(BinaryOp::kFloorDiv), "//");
  EXPECT_TRUE(IsComparison(BinaryOp::kNe));
  EXPECT_FALSE(IsComparison(BinaryOp::kAnd));
  EXPECT_TRUE(IsLogical(BinaryOp::kOr));
  EXPECT_TRUE(IsCallStyle(BinaryOp::kCdiv));
  EXPECT_FALSE(IsCallStyle(BinaryOp::kPow));
}

TEST(ExprParse, LocationsPointAtTheOperator) {
  absl::StatusOr<ExprPtr> e = ParseExpr("a +\n  b * c", "x.cuir");
  // Newlines end statements, so an expression cannot continue on the next line.
  EXPECT_FALSE(e.ok());
  e = ParseExpr("a + b * c", "x.cuir");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->loc.ToString(), "x.cuir:1:3");
  EXPECT_EQ((*e)->args[1]->loc.ToString(), "x.cuir:1:7");
  EXPECT_EQ((*e)->args[1]->args[1]->loc.ToString(), "x.cuir:1:9");
}

TEST(ExprParse, Errors) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c : {
           Case{"a +", "1:4: expected an expression, found end of input"},
           Case{"(a", "1:3: expected ')', found end of input"},
           Case{"a b", "1:3: expected end of expression, found 'b'"},
           Case{"doc[1", "1:6: expected ']', found end of input"},
           Case{"select(a, b)", "1:1: select takes 3 arguments, got 2"},
           Case{"1e999",
                "1:1: float literal 1e999 is out of range for a 64-bit float (write inf or 0.0)"},
           Case{"a = b", "1:3: expected end of expression, found '='"},
       }) {
    absl::StatusOr<ExprPtr> e = ParseExpr(c.text);
    ASSERT_FALSE(e.ok()) << c.text;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(e.status().message(), c.message) << c.text;
  }
}

TEST(ExprEqual, IgnoresLocationsButNotStructure) {
  SourceLoc here{"f.cuir", 3, 4};
  EXPECT_TRUE(Equal(Var("a", here), Var("a")));
  EXPECT_FALSE(Equal(Var("a"), Var("b")));
  EXPECT_FALSE(Equal(IntLit(1), FloatLit(1.0)));
  EXPECT_FALSE(Equal(FloatLit(0.0), FloatLit(-0.0)));
  EXPECT_TRUE(Equal(FloatLit(kNaN), FloatLit(-kNaN)));
  EXPECT_FALSE(Equal(Var("doc"), Index("doc", IntLit(0))));
  EXPECT_FALSE(Equal(Bin(BinaryOp::kLt, V("a"), V("b")), Bin(BinaryOp::kLe, V("a"), V("b"))));
  EXPECT_FALSE(Equal(Bin(BinaryOp::kSub, V("a"), V("b")), Bin(BinaryOp::kSub, V("b"), V("a"))));
  EXPECT_FALSE(Equal(Unary(UnaryOp::kExp, V("a")), Unary(UnaryOp::kExp2, V("a"))));
  EXPECT_FALSE(Equal(nullptr, V("a")));
  EXPECT_TRUE(Equal(nullptr, nullptr));
}

TEST(ExprUtil, CollectsNamesOnceInOrder) {
  ExprPtr e = Parse("doc[q_idx] == doc[kv_idx] && q_idx >= kv_idx + off[h]");
  std::vector<std::string> vars, buffers;
  CollectVars(e, &vars);
  CollectBuffers(e, &buffers);
  EXPECT_EQ(vars, (std::vector<std::string>{"q_idx", "kv_idx", "h"}));
  EXPECT_EQ(buffers, (std::vector<std::string>{"doc", "off"}));
  EXPECT_TRUE(Mentions(e, "doc"));
  EXPECT_TRUE(Mentions(e, "h"));
  EXPECT_FALSE(Mentions(e, "score"));
}

TEST(ExprUtil, SubstituteReplacesVariablesOnly) {
  ExprPtr e = Parse("doc[q_idx] + q_idx * n");
  ExprPtr r = Substitute(e, {{"q_idx", Parse("i + 1")}, {"doc", V("never")}});
  EXPECT_EQ(PrintExpr(r), "doc[i + 1] + (i + 1) * n");
  // Untouched subtrees are shared, and an expression without the names is returned as is.
  EXPECT_EQ(r->args[1]->args[1], e->args[1]->args[1]);
  EXPECT_EQ(Substitute(e, {{"absent", IntLit(0)}}), e);
}

// ----- randomized round trip -----------------------------------------------------------------

class ExprGenerator {
 public:
  explicit ExprGenerator(uint64_t seed) : rng_(seed) {}

  ExprPtr Gen(int depth) {
    if (depth == 0 || Pick(4) == 0) return Leaf();
    switch (Pick(4)) {
      case 0: return Unary(static_cast<UnaryOp>(Pick(13)), Gen(depth - 1));
      case 1: return Select(Gen(depth - 1), Gen(depth - 1), Gen(depth - 1));
      default: return Binary(static_cast<BinaryOp>(Pick(18)), Gen(depth - 1), Gen(depth - 1));
    }
  }

 private:
  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

  ExprPtr Leaf() {
    static const char* const kNames[] = {"a", "b", "q_idx", "kv_idx", "score", "BLOCK_N", "h"};
    static const int64_t kInts[] = {0, 1, -1, 7, -42, std::numeric_limits<int64_t>::max(),
                                    std::numeric_limits<int64_t>::min()};
    static const double kFloats[] = {0.0, -0.0, 0.5, -2.5, 1e-300, 5e-324, -4.9e-320, 1e300,
                                     std::numeric_limits<double>::max(), kInf, -kInf, kNaN};
    switch (Pick(7)) {
      case 0: return Var(kNames[Pick(7)]);
      case 1: return IntLit(kInts[Pick(7)]);
      case 2: return IntLit(static_cast<int64_t>(rng_()));
      case 3: return FloatLit(kFloats[Pick(12)]);
      case 4: return FloatLit(std::bit_cast<double>(rng_()));  // any bit pattern
      case 5: return BoolLit(Pick(2) == 1);
      default: return Index("doc", Gen(1));
    }
  }

  std::mt19937_64 rng_;
};

// Offsets of the parentheses the printer added (not those of calls or `select`).
std::vector<std::pair<size_t, size_t>> GroupingParens(const std::string& s) {
  std::vector<std::pair<size_t, size_t>> pairs;
  std::vector<std::pair<size_t, bool>> open;  // offset, is grouping
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '(') {
      unsigned char prev = i > 0 ? s[i - 1] : ' ';
      bool after_name = std::isalnum(prev) || prev == '_';
      open.emplace_back(i, !after_name);
    } else if (s[i] == ')') {
      if (open.back().second) pairs.emplace_back(open.back().first, i);
      open.pop_back();
    }
  }
  return pairs;
}

TEST(ExprRandom, PrintParseRoundTripWithMinimalParentheses) {
  ExprGenerator gen(20240611);
  int checked_parens = 0;
  for (int i = 0; i < 3000; ++i) {
    ExprPtr e = gen.Gen(5);
    std::string text = PrintExpr(e);
    absl::StatusOr<ExprPtr> back = ParseExpr(text);
    ASSERT_TRUE(back.ok()) << text << ": " << back.status();
    ASSERT_TRUE(Equal(*back, e)) << text << " re-parsed as " << PrintExpr(*back);
    ASSERT_EQ(PrintExpr(*back), text);
    // Minimality: dropping any one pair of grouping parentheses changes the meaning.
    for (auto [open, close] : GroupingParens(text)) {
      std::string fewer = text.substr(0, open) + text.substr(open + 1, close - open - 1) +
                          text.substr(close + 1);
      absl::StatusOr<ExprPtr> other = ParseExpr(fewer);
      EXPECT_TRUE(!other.ok() || !Equal(*other, e)) << "redundant parentheses in " << text;
      ++checked_parens;
    }
  }
  EXPECT_GT(checked_parens, 1000);  // the generator does produce nested precedence conflicts
}

}  // namespace
}  // namespace cubridge::cuir
