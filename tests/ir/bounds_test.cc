// Interval analysis of int expressions (cuir/ir/bounds.h): golden bounds of index expressions
// mask_mods and score_mods use, and, for random expressions and random symbol values within the
// element environment's ranges, the evaluated value inside the numeric bounds and inside the
// symbolic ones evaluated at the same values.
#include "cuir/ir/bounds.h"

#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cuir/ir/eval.h"
#include "cuir/ir/program.h"
#include "gtest/gtest.h"

namespace cubridge::cuir {
namespace {

constexpr int64_t kSizeMax = std::numeric_limits<int32_t>::max();  // a builtin's largest value
constexpr int64_t kIndexMax = kSizeMax - 1;

ExprPtr P(const std::string& text) {
  auto e = ParseExpr(text, "t.cuir");
  EXPECT_TRUE(e.ok()) << text << ": " << e.status();
  return e.ok() ? *e : IntLit(0);
}

std::string Text(const ExprPtr& e) { return e ? PrintExpr(e) : "<none>"; }

struct Golden {
  std::string expr;
  std::optional<int64_t> lo, hi;
  std::string lo_expr, hi_expr;  // printed; "<none>" for unbounded
};

class GoldenBounds : public ::testing::TestWithParam<Golden> {};

TEST_P(GoldenBounds, InTheElementEnvironment) {
  const Golden& g = GetParam();
  const IntBounds b = BoundsOf(P(g.expr), ElementBoundsEnv());
  EXPECT_EQ(b.lo, g.lo) << g.expr;
  EXPECT_EQ(b.hi, g.hi) << g.expr;
  EXPECT_EQ(Text(b.lo_expr), g.lo_expr) << g.expr;
  EXPECT_EQ(Text(b.hi_expr), g.hi_expr) << g.expr;
}

const std::optional<int64_t> kNone;

INSTANTIATE_TEST_SUITE_P(
    IndexExpressions, GoldenBounds,
    ::testing::Values(
        Golden{"-1", -1, -1, "-1", "-1"},
        Golden{"h", 0, kIndexMax, "0", "heads_q - 1"},
        Golden{"seqlen_kv", 1, kSizeMax, "seqlen_kv", "seqlen_kv"},
        // A relative position: negative below the diagonal, -(seqlen_kv - 1) at worst.
        Golden{"q_idx - kv_idx", -kIndexMax, kIndexMax, "-seqlen_kv + 1", "seqlen_q - 1"},
        // T5's bidirectional bucket (31 distances per direction).
        Golden{"min(abs(q_idx - kv_idx), 31) + select(q_idx < kv_idx, 32, 0)", 0, 63, "0",
               "min(max(seqlen_kv - 1, seqlen_q - 1), 31) + 32"},
        Golden{"(q_idx - kv_idx) % 64", 0, 63, "0", "63"},
        Golden{"kv_idx % 64", 0, 63, "0", "min(seqlen_kv - 1, 63)"},
        Golden{"(q_idx - kv_idx) // 8", -kIndexMax / 8 - 1, kIndexMax / 8, "(-seqlen_kv + 1) // 8",
               "(seqlen_q - 1) // 8"},
        Golden{"q_idx // 64", 0, kIndexMax / 64, "0", "(seqlen_q - 1) // 64"},
        Golden{"q_idx + 1", 1, kSizeMax, "1", "seqlen_q"},
        // The symbolic bound sees that q_idx <= seqlen_q - 1; the numbers alone do not.
        Golden{"seqlen_q - 1 - q_idx", 0, kIndexMax, "0", "seqlen_q - 1"},
        Golden{"cdiv(kv_idx + 1, 64)", 1, (kSizeMax + 63) / 64, "1", "cdiv(seqlen_kv, 64)"},
        Golden{"q_idx * -2", -2 * kIndexMax, 0, "(seqlen_q - 1) * -2", "0"},
        Golden{"b * heads_q + h", 0, kIndexMax * kSizeMax + kIndexMax, "0",
               "(batch - 1) * heads_q + heads_q - 1"},
        Golden{"q_idx ** 2", 0, kIndexMax * kIndexMax, "0", "(seqlen_q - 1) ** 2"},
        Golden{"q_idx // heads_q", 0, kIndexMax, "0", "(seqlen_q - 1) // heads_q"},
        Golden{"q_idx % -8", -7, 0, "-7", "0"},
        Golden{"max(q_idx, 4096) // 4096", 1, kIndexMax / 4096, "1", "max(seqlen_q - 1, 4096) // 4096"},
        Golden{"int(q_idx < kv_idx)", 0, 1, "0", "1"},
        // A divisor that may be 0 (heads_kv > heads_q), a product that may leave int64, a float,
        // a buffer element (it may hold floats), a symbol the environment does not know.
        Golden{"h // (heads_q // heads_kv)", kNone, kNone, "<none>", "<none>"},
        Golden{"q_idx * kv_idx * seqlen_q", kNone, kNone, "<none>", "<none>"},
        Golden{"int(float(q_idx) * 0.5)", kNone, kNone, "<none>", "<none>"},
        Golden{"doc[q_idx] % 8", kNone, kNone, "<none>", "<none>"},
        Golden{"x + 1", kNone, kNone, "<none>", "<none>"},
        // int(x) of an unknown x is some int: x % 8 is in [0, 7] all the same (without int(),
        // x might be a float, and x % 8 might be 7.5).
        Golden{"(int(x) % 8) // 2", 0, 3, "0", "3"},
        Golden{"(x % 8) // 2", kNone, kNone, "<none>", "<none>"},
        Golden{"min(int(x), q_idx)", kNone, kIndexMax, "<none>", "seqlen_q - 1"},
        // Shifts by one known amount are products and floors; & with a side >= 0 is in [0, it].
        Golden{"shr(kv_idx, 1)", 0, kIndexMax / 2, "0", "(seqlen_kv - 1) // 2"},
        Golden{"shl(q_idx + 1, 2)", 4, kSizeMax * 4, "4", "seqlen_q * 4"},
        Golden{"shl(q_idx, kv_idx)", kNone, kNone, "<none>", "<none>"},
        Golden{"bit_and(q_idx - kv_idx, 7)", 0, 7, "0", "7"},
        Golden{"bit_xor(q_idx, kv_idx) % 4", 0, 3, "0", "3"}));

TEST(Bounds, SymbolicLowerBoundOfADistanceIsMinusTheLastKey) {
  const IntBounds b = BoundsOf(P("q_idx - kv_idx"), ElementBoundsEnv());
  ASSERT_NE(b.lo_expr, nullptr);
  for (int64_t seqlen_kv : {int64_t{1}, int64_t{2}, int64_t{77}, kSizeMax}) {
    ScalarEnv env;
    env.vars["seqlen_kv"] = seqlen_kv;
    auto lo = EvalInt(b.lo_expr, env);
    ASSERT_TRUE(lo.ok()) << lo.status();
    EXPECT_EQ(*lo, -(seqlen_kv - 1));
  }
}

TEST(Bounds, ProvablyNonNegative) {
  const BoundsEnv env = ElementBoundsEnv();
  EXPECT_TRUE(ProvablyNonNegative(P("q_idx // 3"), env));
  EXPECT_TRUE(ProvablyNonNegative(P("seqlen_q - 1 - q_idx"), env));
  EXPECT_TRUE(ProvablyNonNegative(P("abs(q_idx - kv_idx)"), env));
  EXPECT_TRUE(ProvablyNonNegative(P("7"), BoundsEnv{}));
  EXPECT_FALSE(ProvablyNonNegative(P("q_idx - kv_idx"), env));
  EXPECT_FALSE(ProvablyNonNegative(P("q_idx"), BoundsEnv{}));
  EXPECT_FALSE(ProvablyNonNegative(P("abs(x)"), env));  // abs(INT64_MIN) wraps
}

TEST(Bounds, ASymbolOfKnownValueIsThatValue) {
  BoundsEnv env = ElementBoundsEnv();
  env["BLOCK_N"] = SymbolRange{nullptr, nullptr, 64, 64};
  const IntBounds b = BoundsOf(P("kv_idx // BLOCK_N"), env);
  EXPECT_EQ(b.lo, 0);
  EXPECT_EQ(b.hi, kIndexMax / 64);
  EXPECT_EQ(Text(b.hi_expr), "(seqlen_kv - 1) // 64");
}

// Shared operands (each level reads the one below twice) are walked once, and deeper trees than
// the validator allows give up rather than recurse without end.
TEST(Bounds, DeepAndSharedExpressionsStayCheap) {
  ExprPtr shared = Var("q_idx");
  for (int i = 0; i < 200; ++i) {
    shared = Binary(BinaryOp::kMin, shared, Binary(BinaryOp::kSub, shared, IntLit(1)));
  }
  const IntBounds s = BoundsOf(shared, ElementBoundsEnv());
  EXPECT_EQ(s.lo, -200);
  EXPECT_EQ(s.hi, kIndexMax - 200);

  ExprPtr chain = Var("q_idx");
  for (int i = 0; i < 5000; ++i) chain = Binary(BinaryOp::kAdd, chain, IntLit(1));
  const IntBounds c = BoundsOf(chain, ElementBoundsEnv());
  EXPECT_FALSE(c.lo.has_value());
  EXPECT_FALSE(c.hi.has_value());

  ExprPtr ok = Var("q_idx");
  for (int i = 0; i < 400; ++i) ok = Binary(BinaryOp::kAdd, ok, IntLit(1));
  EXPECT_EQ(BoundsOf(ok, ElementBoundsEnv()).lo, 400);
}

// ---- randomized: the bounds hold at random symbol values ---------------------------------------

class RandomExprs {
 public:
  explicit RandomExprs(uint32_t seed) : rng_(seed) {}

  ExprPtr Int(int depth) {
    if (depth == 0 || Pick(4) == 0) return Leaf();
    switch (Pick(14)) {
      case 0: return Unary(UnaryOp::kNeg, Int(depth - 1));
      case 1: return Unary(UnaryOp::kAbs, Int(depth - 1));
      case 2: return Unary(UnaryOp::kToInt, Pick(2) ? Int(depth - 1) : Cond(depth - 1));
      case 3: return Select(Cond(depth - 1), Int(depth - 1), Int(depth - 1));
      case 4: return Binary(BinaryOp::kPow, Int(depth - 1), IntLit(Pick(4)));
      default: break;
    }
    static constexpr BinaryOp kOps[] = {BinaryOp::kAdd, BinaryOp::kSub,      BinaryOp::kMul,
                                        BinaryOp::kMin, BinaryOp::kMax,      BinaryOp::kFloorDiv,
                                        BinaryOp::kMod, BinaryOp::kCdiv,     BinaryOp::kFloorDiv,
                                        BinaryOp::kMod};
    const BinaryOp op = kOps[Pick(std::size(kOps))];
    ExprPtr b = Int(depth - 1);
    // Divisions mostly by literals, as index math has them.
    if ((op == BinaryOp::kFloorDiv || op == BinaryOp::kMod || op == BinaryOp::kCdiv) && Pick(2)) {
      static constexpr int64_t kDivisors[] = {1, 2, 3, 7, 8, 64, 100, -1, -3, -8};
      b = IntLit(kDivisors[Pick(std::size(kDivisors))]);
    }
    return Binary(op, Int(depth - 1), b);
  }

  // Values for every symbol: sizes first, then indices within them.
  ScalarEnv Values() {
    static constexpr int64_t kSizes[] = {1, 2, 3, 5, 8, 64, 100, 4096, kSizeMax};
    ScalarEnv env;
    for (const char* size : {"batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_kv", "head_dim"}) {
      env.vars[size] = kSizes[Pick(std::size(kSizes))];
    }
    const std::pair<const char*, const char*> indices[] = {
        {"b", "batch"}, {"h", "heads_q"}, {"q_idx", "seqlen_q"}, {"kv_idx", "seqlen_kv"}};
    for (const auto& [index, size] : indices) {
      const int64_t n = std::get<int64_t>(env.vars[size]);
      const int64_t choice = Pick(4);
      env.vars[index] = choice == 0 ? int64_t{0}
                        : choice == 1 ? n - 1
                                      : std::uniform_int_distribution<int64_t>(0, n - 1)(rng_);
    }
    // Unknown to the analysis, so any value at all.
    static constexpr int64_t kAny[] = {-5, 0, 9, std::numeric_limits<int64_t>::min(),
                                       std::numeric_limits<int64_t>::max()};
    env.vars["x"] = kAny[Pick(std::size(kAny))];
    return env;
  }

 private:
  size_t Pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

  ExprPtr Leaf() {
    static constexpr const char* kVars[] = {"b",        "h",       "q_idx",     "kv_idx",
                                            "q_idx",    "kv_idx",  "batch",     "heads_q",
                                            "heads_kv", "seqlen_q", "seqlen_kv", "head_dim", "x"};
    static constexpr int64_t kLits[] = {0,   1,    2,     -1,         -3,         7,
                                        31,  32,   64,    1000,       -1000,      int64_t{1} << 40,
                                        -(int64_t{1} << 40), int64_t{1} << 62,
                                        std::numeric_limits<int64_t>::min()};
    switch (Pick(7)) {
      case 0: case 1: case 2: return IntLit(kLits[Pick(std::size(kLits))]);
      case 3: return Pick(4) == 0 ? FloatLit(0.5) : IntLit(static_cast<int64_t>(Pick(10)) - 4);
      default: return Var(kVars[Pick(std::size(kVars))]);
    }
  }

  ExprPtr Cond(int depth) {
    static constexpr BinaryOp kCmps[] = {BinaryOp::kLt, BinaryOp::kLe, BinaryOp::kGt,
                                         BinaryOp::kGe, BinaryOp::kEq, BinaryOp::kNe};
    return Binary(kCmps[Pick(std::size(kCmps))], Int(depth), Int(depth));
  }

  std::mt19937 rng_;
};

std::optional<int64_t> AsInt(const Value& v) {
  if (const auto* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  return std::nullopt;
}

// The symbolic bound at the sample's symbol values; it must read only the environment's symbols
// and evaluate to an int there.
std::optional<int64_t> AtValues(const ExprPtr& bound, const ScalarEnv& values,
                                const std::string& what) {
  std::vector<std::string> names;
  CollectVars(bound, &names);
  for (const std::string& n : names) {
    EXPECT_NE(n, "x") << what << ": the bound reads a symbol outside the environment";
  }
  auto v = EvalScalar(bound, values);
  EXPECT_TRUE(v.ok()) << what << ": " << v.status();
  if (!v.ok()) return std::nullopt;
  const std::optional<int64_t> i = AsInt(*v);
  EXPECT_TRUE(i.has_value()) << what << ": the bound is not an int";
  return i;
}

TEST(Bounds, RandomExpressionsStayWithinTheirBounds) {
  RandomExprs gen(20240517);
  const BoundsEnv env = ElementBoundsEnv();
  int checked = 0, bounded = 0;
  for (int n = 0; n < 4000 && !HasFailure(); ++n) {
    const ExprPtr e = gen.Int(1 + n % 4);
    const IntBounds b = BoundsOf(e, env);
    if (b.lo || b.hi) ++bounded;
    EXPECT_EQ(b.lo.has_value(), b.lo_expr != nullptr) << PrintExpr(e);
    EXPECT_EQ(b.hi.has_value(), b.hi_expr != nullptr) << PrintExpr(e);
    for (int s = 0; s < 24; ++s) {
      const ScalarEnv values = gen.Values();
      auto v = EvalScalar(e, values);
      if (!v.ok()) continue;  // a division by zero, an index out of range, a type mismatch
      const std::string what = absl::StrCat(PrintExpr(e), " at ", ValueToString(values.vars.at("q_idx")),
                                            ", ", ValueToString(values.vars.at("kv_idx")), " (",
                                            ValueToString(values.vars.at("seqlen_q")), ", ",
                                            ValueToString(values.vars.at("seqlen_kv")), ") = ",
                                            ValueToString(*v));
      const std::optional<int64_t> value = AsInt(*v);
      if (!b.lo && !b.hi) continue;
      ++checked;
      ASSERT_TRUE(value.has_value()) << what << ": bounded, but not an int";
      if (b.lo) {
        EXPECT_GE(*value, *b.lo) << what;
        const auto lo = AtValues(b.lo_expr, values, what + ", lo " + PrintExpr(b.lo_expr));
        if (lo) {
          EXPECT_GE(*value, *lo) << what << ", lo " << PrintExpr(b.lo_expr);
        }
      }
      if (b.hi) {
        EXPECT_LE(*value, *b.hi) << what;
        const auto hi = AtValues(b.hi_expr, values, what + ", hi " + PrintExpr(b.hi_expr));
        if (hi) {
          EXPECT_LE(*value, *hi) << what << ", hi " << PrintExpr(b.hi_expr);
        }
      }
    }
  }
  // The generator must exercise the analysis, not only its unbounded answers.
  EXPECT_GT(bounded, 1000);
  EXPECT_GT(checked, 10000);
}

}  // namespace
}  // namespace cubridge::cuir
