// The analysis' building blocks, each against evaluation: simplification keeps values, solving
// for a variable keeps the truth table, monotonicity and lower bounds hold on every point tried.
#include "cuir/transfer/symbolic.h"

#include <optional>

#include "cuir/ir/eval.h"
#include "cuir/transfer/isolate.h"
#include "cuir/transfer/mask_analysis.h"
#include "gtest/gtest.h"
#include "tests/transfer/transfer_test_util.h"

namespace cubridge::transfer::testing {
namespace {

using cuir::BinaryOp;
using cuir::ExprPtr;

int64_t Int(const ExprPtr& e, int64_t q, int64_t kv) {
  cuir::ScalarEnv env;
  env.vars = {{"q_idx", q}, {"kv_idx", kv}};
  absl::StatusOr<int64_t> v = cuir::EvalInt(e, env);
  EXPECT_TRUE(v.ok()) << cuir::PrintExpr(e) << ": " << v.status();
  return v.value_or(0);
}

bool Bool(const ExprPtr& e, int64_t q, int64_t kv) {
  cuir::ScalarEnv env;
  env.vars = {{"q_idx", q}, {"kv_idx", kv}};
  absl::StatusOr<bool> v = cuir::EvalBool(e, env);
  EXPECT_TRUE(v.ok()) << cuir::PrintExpr(e) << ": " << v.status();
  return v.value_or(false);
}

bool Holds(const Formula& f, const std::string& var, int64_t q, int64_t kv) {
  switch (f.kind) {
    case Formula::Kind::kAnd:
      return Holds(f.kids[0], var, q, kv) && Holds(f.kids[1], var, q, kv);
    case Formula::Kind::kOr:
      return Holds(f.kids[0], var, q, kv) || Holds(f.kids[1], var, q, kv);
    case Formula::Kind::kOther:
      EXPECT_FALSE(cuir::Mentions(f.other, var)) << cuir::PrintExpr(f.other);
      return Bool(f.other, q, kv);
    case Formula::Kind::kAtom:
      break;
  }
  EXPECT_FALSE(cuir::Mentions(f.bound, var)) << cuir::PrintExpr(f.bound);
  int64_t x = var == "q_idx" ? q : kv;
  int64_t g = Int(f.bound, q, kv);
  return f.cmp == BinaryOp::kLe ? x <= g : x >= g;
}

TEST(Symbolic, LiteralDivisionFollowsPython) {
  EXPECT_EQ(sym::FloorDivInt(-7, 2), -4);
  EXPECT_EQ(sym::FloorDivInt(7, -2), -4);
  EXPECT_EQ(sym::FloorDivInt(-8, 2), -4);
  EXPECT_EQ(sym::CeilDivInt(-7, 2), -3);
  EXPECT_EQ(sym::CeilDivInt(7, 2), 4);
  EXPECT_TRUE(cuir::Equal(sym::FloorDiv(E("-7"), E("2")), E("-4")));
}

TEST(Symbolic, OffsetsCollect) {
  EXPECT_TRUE(cuir::Equal(sym::AddConst(sym::AddConst(E("q_hi"), -1), 1), E("q_hi")));
  EXPECT_TRUE(cuir::Equal(sym::Sub(E("q_lo + 3"), E("q_lo - 2")), E("5")));
  EXPECT_TRUE(cuir::Equal(sym::Max(E("x + 1"), E("x - 4")), E("x + 1")));
  EXPECT_TRUE(cuir::Equal(sym::Cmp(BinaryOp::kLe, E("kv_hi"), E("q_lo - 1")), E("kv_hi < q_lo")));
  EXPECT_TRUE(cuir::Equal(sym::Cmp(BinaryOp::kLt, E("3"), E("5")), E("true")));
  EXPECT_TRUE(cuir::Equal(sym::And(nullptr, E("a < b")), E("a < b")));
  EXPECT_TRUE(cuir::Equal(sym::Or(E("false"), E("a < b")), E("a < b")));
}

TEST(Symbolic, SimplifyKeepsValues) {
  RandomMask gen(5, /*rich=*/false);
  for (int i = 0; i < 300; ++i) {
    ExprPtr e = gen.Side();
    ExprPtr s = sym::Simplify(e);
    for (int64_t q = -9; q <= 9; q += 3) {
      for (int64_t kv = -9; kv <= 9; kv += 2) {
        ASSERT_EQ(Int(e, q, kv), Int(s, q, kv))
            << cuir::PrintExpr(e) << " vs " << cuir::PrintExpr(s);
      }
    }
  }
}

// Solving for kv_idx (and for q_idx) is an equivalence: same truth value on every point.
TEST(Isolate, SolvedFormKeepsTheTruthTable) {
  RandomMask gen(11, /*rich=*/true);
  int solved = 0;
  for (int i = 0; i < 400; ++i) {
    ExprPtr atom = gen.Atom();
    for (const char* var : {"kv_idx", "q_idx"}) {
      std::optional<Formula> f = Isolate(atom->binary_op, atom->args[0], atom->args[1], var);
      if (!f) continue;
      ++solved;
      for (int64_t q = -12; q <= 12; ++q) {
        for (int64_t kv = -12; kv <= 12; ++kv) {
          ASSERT_EQ(Holds(*f, var, q, kv), Bool(atom, q, kv))
              << cuir::PrintExpr(atom) << " solved for " << var << " at q=" << q << " kv=" << kv;
        }
      }
    }
  }
  EXPECT_GT(solved, 500) << "the rewrites should cover most generated atoms";
}

TEST(Isolate, DeclinesNonLinearUses) {
  EXPECT_FALSE(Isolate(BinaryOp::kLe, E("q_idx * kv_idx"), E("10"), "kv_idx"));
  EXPECT_FALSE(Isolate(BinaryOp::kEq, E("kv_idx % 4"), E("1"), "kv_idx"));
  EXPECT_FALSE(Isolate(BinaryOp::kLe, E("kv_idx // q_idx"), E("1"), "kv_idx"));
}

TEST(Monotonicity, HoldsOnEveryStep) {
  RandomMask gen(23, /*rich=*/true);
  int known = 0;
  for (int i = 0; i < 500; ++i) {
    ExprPtr g = cuir::Substitute(gen.Side(), {{"kv_idx", E("3")}});
    sym::Mono m = sym::MonotonicityIn(g, "q_idx");
    if (m == sym::Mono::kUnknown) continue;
    ++known;
    for (int64_t q = -15; q < 15; ++q) {
      int64_t a = Int(g, q, 0), b = Int(g, q + 1, 0);
      bool ok = m == sym::Mono::kInc ? a <= b : m == sym::Mono::kDec ? a >= b : a == b;
      ASSERT_TRUE(ok) << cuir::PrintExpr(g) << " at " << q << ": " << a << " then " << b;
    }
  }
  EXPECT_GT(known, 250);
  EXPECT_EQ(sym::MonotonicityIn(E("abs(q_idx - 3)"), "q_idx"), sym::Mono::kUnknown);
  EXPECT_EQ(sym::MonotonicityIn(E("q_idx % 4"), "q_idx"), sym::Mono::kUnknown);
}

TEST(LowerBound, IsBelowEveryValue) {
  sym::VarBounds bounds = {{"q_hi", 1}, {"q_lo", 0}, {"BLOCK_N", 1}};
  for (const char* text :
       {"(q_hi - 1) // 4 * 4 + 4", "max(q_lo - 7, 0) // BLOCK_N", "cdiv(q_hi, BLOCK_N)",
        "min(q_lo, 3) + q_hi", "select(q_lo < 2, q_hi, 5)"}) {
    ExprPtr e = E(text);
    std::optional<int64_t> lb = sym::LowerBound(e, bounds);
    ASSERT_TRUE(lb.has_value()) << text;
    EXPECT_GE(*lb, 0) << text;
    for (int64_t lo = 0; lo < 20; ++lo) {
      for (int64_t hi = lo + 1; hi < 24; ++hi) {
        for (int64_t bn : {1, 3, 16}) {
          cuir::ScalarEnv env;
          env.vars = {{"q_lo", lo}, {"q_hi", hi}, {"BLOCK_N", bn}};
          ASSERT_GE(cuir::EvalInt(e, env).value(), *lb) << text;
        }
      }
    }
  }
  EXPECT_FALSE(sym::LowerBound(E("q_lo - 3"), bounds).has_value() &&
               *sym::LowerBound(E("q_lo - 3"), bounds) >= 0);
}

// Caps keep `any` a superset (hull) and `all` a subset (dropping intervals).
TEST(KvSets, CapsOverAndUnderApproximate) {
  KvSet many;
  for (int i = 0; i < 6; ++i)
    many.push_back({E(std::to_string(10 * i)), E(std::to_string(10 * i + 3)), nullptr});
  KvSet over = Unite(many, {}, /*over_approximate=*/true);
  ASSERT_EQ(over.size(), 1u);
  EXPECT_TRUE(cuir::Equal(over[0].lo, E("0")));
  EXPECT_TRUE(cuir::Equal(over[0].hi, E("53")));
  KvSet under = Unite(many, {}, /*over_approximate=*/false);
  EXPECT_EQ(under.size(), kMaxIntervals);
  // Intervals sharing a bound merge exactly.
  KvSet merged = Unite({{nullptr, E("P"), nullptr}}, {{nullptr, E("q_hi"), nullptr}}, true);
  ASSERT_EQ(merged.size(), 1u);
  EXPECT_TRUE(cuir::Equal(merged[0].hi, E("max(P, q_hi)")));
  // A statically empty intersection disappears.
  EXPECT_TRUE(Intersect({{E("20"), nullptr, nullptr}}, {{nullptr, E("3"), nullptr}}, true).empty());
}

}  // namespace
}  // namespace cubridge::transfer::testing
