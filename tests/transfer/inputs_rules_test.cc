// Family (d): params.const declares spec scalars by value after the params; buffers.declare sizes
// each int buffer by what indexes it. Base names that clash with spec names are renamed.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/transfer/transfer_test_util.h"

namespace cubridge::transfer::testing {
namespace {

using cuir::Stmt;
using cuir::StmtKind;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// The top-level statements of `kind`, in order.
std::vector<const Stmt*> TopLevel(const cuir::Program& p, StmtKind kind) {
  std::vector<const Stmt*> out;
  for (const Stmt& s : p.stmts) {
    if (s.kind == kind) out.push_back(&s);
  }
  return out;
}

size_t IndexOf(const cuir::Program& p, const std::string& name) {
  for (size_t i = 0; i < p.stmts.size(); ++i) {
    if (p.stmts[i].name == name) return i;
  }
  return p.stmts.size();
}

TEST(ParamsConst, DeclaresEachScalarAfterTheParamsInSpecOrder) {
  VariantSpec spec = MaskSpec("q_idx >= kv_idx && q_idx - kv_idx <= window || flag");
  spec.consts = {{"window", cuir::Type::kInt, cuir::IntLit(256), {}},
                 {"cap", cuir::Type::kFloat, cuir::IntLit(30), {}},  // an int literal for a float
                 {"flag", cuir::Type::kBool, cuir::BoolLit(false), {}}};
  spec.score = E("cap * tanh(score / cap)");
  absl::StatusOr<TransferResult> r = TransferOnBase(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<const Stmt*> consts = TopLevel(r->program, StmtKind::kConst);
  ASSERT_EQ(consts.size(), 3u);
  EXPECT_EQ(consts[0]->name, "window");
  EXPECT_EQ(consts[1]->name, "cap");
  EXPECT_EQ(consts[2]->name, "flag");
  EXPECT_TRUE(cuir::Equal(consts[0]->value, cuir::IntLit(256)));
  EXPECT_TRUE(cuir::Equal(consts[1]->value, cuir::FloatLit(30.0)));
  EXPECT_EQ(consts[1]->type, cuir::Type::kFloat);
  size_t last_param = 0;
  for (size_t i = 0; i < r->program.stmts.size(); ++i) {
    if (r->program.stmts[i].kind == StmtKind::kParam) last_param = i;
  }
  EXPECT_EQ(IndexOf(r->program, "window"), last_param + 1);
  EXPECT_TRUE(Applied(*r, "params.const"));
  ExpectValidRoundTrip(r->program);
}

TEST(ParamsConst, NonLiteralValueIsNotCovered) {
  VariantSpec spec = MaskSpec("q_idx - kv_idx <= window");
  spec.consts = {{"window", cuir::Type::kInt, E("2 * 128"), {"variant.py", 5, 3}}};
  absl::StatusOr<TransferResult> r = TransferOnBase(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()),
              StartsWith("not covered by the rules: const `window` at variant.py:5:3 (its value "
                         "`2 * 128` is not a literal of type int"));
}

TEST(ParamsConst, LiteralOfTheWrongKindIsNotCovered) {
  VariantSpec spec = MaskSpec("q_idx - kv_idx <= window");
  spec.consts = {{"window", cuir::Type::kInt, cuir::FloatLit(2.5), {}}};
  absl::StatusOr<TransferResult> r = TransferOnBase(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("const `window`"));
}

TEST(BuffersDeclare, DeclaresDtypeAndExtents) {
  VariantSpec spec = MaskSpec("qb[q_idx] == kb[kv_idx] && doc[q_idx] == doc[kv_idx] && t[h, 3] > 0.5");
  spec.consts = {{"unused", cuir::Type::kInt, cuir::IntLit(1), {}}};
  spec.buffers = {{"qb", cuir::TensorDType::kInt32, {E("seqlen_q")}, {}},
                  {"kb", cuir::TensorDType::kInt64, {E("seqlen_kv")}, {}},
                  {"doc", cuir::TensorDType::kInt32, {E("max(seqlen_q, seqlen_kv)")}, {}},
                  {"t", cuir::TensorDType::kBFloat16, {E("heads_q"), E("4")}, {}}};
  absl::StatusOr<TransferResult> r = TransferOnBase(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<const Stmt*> buffers = TopLevel(r->program, StmtKind::kBuffer);
  ASSERT_EQ(buffers.size(), 4u);
  EXPECT_TRUE(cuir::Equal(buffers[0]->exprs[0], E("seqlen_q")));
  EXPECT_TRUE(cuir::Equal(buffers[1]->exprs[0], E("seqlen_kv")));
  EXPECT_TRUE(cuir::Equal(buffers[2]->exprs[0], E("max(seqlen_q, seqlen_kv)")));
  EXPECT_EQ(buffers[1]->dtype, cuir::TensorDType::kInt64);
  EXPECT_EQ(buffers[3]->type, cuir::Type::kFloat);
  EXPECT_EQ(buffers[3]->exprs.size(), 2u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(buffers[i]->type, cuir::Type::kInt);
  // Declarations in the order params, consts, buffers, then the rest.
  EXPECT_EQ(IndexOf(r->program, "qb"), IndexOf(r->program, "unused") + 1);
  EXPECT_TRUE(Applied(*r, "buffers.declare"));
  ExpectValidRoundTrip(r->program);
}

TEST(NameHygiene, SpecNamesWinOverTheBasesTileNames) {
  // VARIANTS.md calls the prefix length P, which is also the base's probability tile.
  VariantSpec spec = MaskSpec("kv_idx < P || q_idx >= kv_idx", {{"P", 16}});
  absl::StatusOr<TransferResult> r = TransferOnBase(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_NE(cuir::FindDecl(r->program, StmtKind::kConst, "P"), nullptr);
  std::vector<const Stmt*> pv = LoopStmts(r->program, StmtKind::kPV);
  ASSERT_EQ(pv.size(), 1u);
  EXPECT_NE(pv[0]->operands[0], "P");
  std::vector<const Stmt*> online = LoopStmts(r->program, StmtKind::kSoftmaxOnline);
  ASSERT_EQ(online.size(), 1u);
  EXPECT_EQ(online[0]->name, pv[0]->operands[0]);
  ExpectValidRoundTrip(r->program);
}

TEST(NameHygiene, SpecNameEqualToAParamIsRejected) {
  VariantSpec spec = MaskSpec("kv_idx < BLOCK_N", {{"BLOCK_N", 16}});
  spec.consts[0].loc = {"variant.py", 1, 20};
  absl::StatusOr<TransferResult> r = TransferOnBase(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              StartsWith("variant.py:1:20: spec parameter `BLOCK_N`"));
}

}  // namespace
}  // namespace cubridge::transfer::testing
