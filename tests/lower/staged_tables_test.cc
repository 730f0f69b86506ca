// StageTheTables (cuir/lower/staged_tables.h): which lookups are staged, their layout, golden
// rewrites, and what stays a global read.
#include "cuir/lower/staged_tables.h"

#include "cuir/ir/program.h"
#include "gtest/gtest.h"
#include "tests/lower/lower_test_util.h"

namespace cubridge::lower {
namespace {

cuir::ExprPtr Parse(const std::string& text) { return testing::ParseOrFail(text); }

const std::vector<std::string> kElement = {"q_idx", "kv_idx", "score", "q_idx.f", "kv_idx.f"};

struct Decls {
  std::vector<cuir::Stmt> stmts;
  std::vector<const cuir::Stmt*> ptrs;
};

// `buffer NAME: DTYPE[extents]` declarations; "?" for an extent the values decide.
Decls Buffers(const std::vector<std::tuple<std::string, cuir::TensorDType, std::vector<std::string>>>& specs) {
  Decls d;
  d.stmts.resize(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    auto& [name, dtype, extents] = specs[i];
    d.stmts[i].kind = cuir::StmtKind::kBuffer;
    d.stmts[i].name = name;
    d.stmts[i].dtype = dtype;
    for (const std::string& e : extents) d.stmts[i].exprs.push_back(e == "?" ? nullptr : Parse(e));
  }
  for (const auto& s : d.stmts) d.ptrs.push_back(&s);
  return d;
}

std::vector<StagedTable> Found(const std::vector<std::string>& texts, const Decls& d,
                               const std::string& skip = "", int64_t max_bytes = 4096) {
  std::vector<cuir::Stmt> stmts(texts.size());
  std::vector<const cuir::Stmt*> ptrs;
  for (size_t i = 0; i < texts.size(); ++i) {
    stmts[i].value = Parse(texts[i]);
    ptrs.push_back(&stmts[i]);
  }
  return FindStagedTables(ptrs, d.ptrs, kElement, skip, max_bytes);
}

using cuir::TensorDType;

TEST(StageTheTables, StagesLookupsOfSmallTablesWithLiteralExtentsOnePerLeadingIndex) {
  const Decls d = Buffers({{"table", TensorDType::kFloat32, {"heads_q", "32"}},
                           {"codes", TensorDType::kInt32, {"4", "8"}},
                           {"keep", TensorDType::kBool, {"seqlen_q", "seqlen_kv"}}});
  auto t = Found({"score + table[h, (kv_idx - q_idx) % 32] + table[h, 3 - q_idx % 4]",
                  "codes[q_idx % 4, kv_idx % 8] > 2 && keep[q_idx, kv_idx]"},
                 d);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].decl->name, "table");
  ASSERT_EQ(t[0].leading.size(), 1u);
  EXPECT_EQ(cuir::PrintExpr(t[0].leading[0]), "h");
  EXPECT_EQ(t[0].extents, (std::vector<int64_t>{32}));
  EXPECT_EQ(t[0].offset, 0);
  EXPECT_EQ(t[0].bytes, 128);
  EXPECT_EQ(t[1].decl->name, "codes");  // the whole table: no leading index
  EXPECT_TRUE(t[1].leading.empty());
  EXPECT_EQ(t[1].extents, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(t[1].offset, 128);
}

TEST(StageTheTables, LeavesSizesTheValuesDecideBigTablesAndTheStreamedTensor) {
  const Decls d = Buffers({{"spatial", TensorDType::kFloat32, {"heads_q", "?"}},
                           {"big", TensorDType::kFloat32, {"heads_q", "2048"}},
                           {"doc", TensorDType::kInt32, {"seqlen_q"}},
                           {"w", TensorDType::kFloat32, {"2", "heads_q"}},
                           {"bias", TensorDType::kBFloat16, {"4", "4"}}});
  EXPECT_TRUE(Found({"score + spatial[h, kv_idx % 5] + big[h, kv_idx % 2048] + w[1, h]",
                     "doc[q_idx] == doc[kv_idx]", "bias[q_idx % 4, kv_idx % 4] > 0.0"},
                    d, "bias")
                  .empty());
  // Two tables that fit alone but not together: the second stays global.
  const Decls two = Buffers({{"a", TensorDType::kFloat32, {"512"}}, {"b", TensorDType::kFloat32, {"512"}}});
  EXPECT_EQ(Found({"score + a[kv_idx % 512] + b[q_idx % 512]"}, two, "", 3000).size(), 1u);
}

TEST(StageTheTables, RewritesTheStagedReadsToTheirLookedUpIndices) {
  const Decls d = Buffers({{"table", TensorDType::kFloat32, {"heads_q", "32"}}});
  const auto t = Found({"table[h, kv_idx % 32]"}, d);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(cuir::PrintExpr(StageTheTables(Parse("score + table[h, kv_idx % 32] * table[h, 0 * q_idx]"), t)),
            "score + table@staged0[kv_idx % 32] * table@staged0[0 * q_idx]");
  // Another head's row is another slice: a global read.
  EXPECT_EQ(cuir::PrintExpr(StageTheTables(Parse("table[h // 2, kv_idx % 32]"), t)),
            "table[h // 2, kv_idx % 32]");
}

}  // namespace
}  // namespace cubridge::lower
