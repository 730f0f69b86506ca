// heads.gqa: query head h reads kv head h // (heads_q // heads_kv); MHA stays the expert's program.
#include "cuir/ir/eval.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/transfer/transfer_test_util.h"

namespace cubridge::transfer::testing {
namespace {

using cuir::StmtKind;

cuir::AttentionConfig Heads(int64_t q, int64_t kv) {
  cuir::AttentionConfig c;
  c.heads_q = q;
  c.heads_kv = kv;
  return c;
}

const cuir::Stmt& KvHeadLet(const cuir::Program& p) {
  const cuir::Stmt* let = cuir::FindDecl(p, StmtKind::kLet, "kv_h");
  if (!let) {
    ADD_FAILURE() << "no let kv_h";
    static const cuir::Stmt empty{};
    return empty;
  }
  return *let;
}

TEST(HeadsGqa, MhaLeavesTheProgramUntouched) {
  absl::StatusOr<TransferResult> r = TransferOnBase(VariantSpec{}, Heads(8, 8));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(cuir::Equal(r->program, LoadBase()));
  EXPECT_TRUE(r->applied.empty());
}

TEST(HeadsGqa, GroupsQueryHeadsOntoKvHeads) {
  for (auto [hq, hkv] : {std::pair{32, 8}, {64, 8}, {8, 1}, {6, 3}}) {
    absl::StatusOr<TransferResult> r = TransferOnBase(VariantSpec{}, Heads(hq, hkv));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(Applied(*r, "heads.gqa"));
    const cuir::Stmt& let = KvHeadLet(r->program);
    EXPECT_TRUE(cuir::Equal(let.value, E("h // (heads_q // heads_kv)")))
        << cuir::PrintExpr(let.value);
    // Every query head lands on its group's kv head, and every kv head is used.
    std::vector<int> uses(hkv, 0);
    for (int64_t h = 0; h < hq; ++h) {
      cuir::ScalarEnv env;
      env.vars = {{"h", h}, {"heads_q", int64_t{hq}}, {"heads_kv", int64_t{hkv}}};
      absl::StatusOr<int64_t> kv = cuir::EvalInt(let.value, env);
      ASSERT_TRUE(kv.ok()) << kv.status();
      ASSERT_GE(*kv, 0);
      ASSERT_LT(*kv, hkv);
      EXPECT_EQ(*kv, h * hkv / hq) << "hq=" << hq << " hkv=" << hkv << " h=" << h;
      ++uses[*kv];
    }
    for (int u : uses) EXPECT_EQ(u, hq / hkv);
    ExpectValidRoundTrip(r->program);
  }
}

TEST(HeadsGqa, OnlyTheHeadMappingChanges) {
  absl::StatusOr<TransferResult> r = TransferOnBase(VariantSpec{}, Heads(32, 8));
  ASSERT_TRUE(r.ok()) << r.status();
  cuir::Program expected = LoadBase();
  cuir::FindDecl(expected, StmtKind::kLet, "kv_h")->value = E("h // (heads_q // heads_kv)");
  EXPECT_TRUE(cuir::Equal(r->program, expected)) << cuir::PrintProgram(r->program);
}

TEST(HeadsGqa, CombinesWithAMask) {
  absl::StatusOr<TransferResult> r = TransferOnBase(MaskSpec("q_idx >= kv_idx"), Heads(64, 8));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(Applied(*r, "heads.gqa"));
  EXPECT_TRUE(Applied(*r, "mask.analytic-range"));
  ExpectValidRoundTrip(r->program);
}

// The engine validates the config before any rule runs, so the rule never sees 6 / 4.
TEST(HeadsGqa, HeadCountsThatDoNotDivideAreRefusedBeforeAnyRule) {
  absl::StatusOr<TransferResult> r = TransferOnBase(VariantSpec{}, Heads(6, 4));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("heads-q (6) must be a multiple of heads-kv (4)"));
}

}  // namespace
}  // namespace cubridge::transfer::testing
