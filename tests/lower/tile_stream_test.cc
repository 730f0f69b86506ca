// StreamTheTile (cuir/lower/tile_stream.h): which reads are found, golden rewrites, and the
// reads it leaves as global reads.
#include "cuir/lower/tile_stream.h"

#include "cuir/ir/program.h"
#include "gtest/gtest.h"
#include "tests/lower/lower_test_util.h"

namespace cubridge::lower {
namespace {

cuir::ExprPtr Parse(const std::string& text) { return testing::ParseOrFail(text); }

const std::vector<std::string> kElement = {"q_idx", "kv_idx", "score", "q_idx.f", "kv_idx.f"};

std::vector<TileStream> Found(const std::vector<std::string>& texts) {
  std::vector<cuir::Stmt> stmts(texts.size());
  std::vector<const cuir::Stmt*> ptrs;
  for (size_t i = 0; i < texts.size(); ++i) {
    stmts[i].value = Parse(texts[i]);
    ptrs.push_back(&stmts[i]);
  }
  return FindTileStreams(ptrs, kElement);
}

std::string Streamed(const std::string& text, const TileStream& s) {
  return cuir::PrintExpr(StreamTheTile(Parse(text), s));
}

TEST(StreamTheTile, FindsReadsAtTheElementWithLeadingIndicesOfTheWorkTile) {
  auto found = Found({"score + bias[b, h, q_idx, kv_idx]", "keep[q_idx, kv_idx] && q_idx >= kv_idx",
                      "adj[b, q_idx, kv_idx] || bias[b, h, q_idx, kv_idx] > 0.0"});
  ASSERT_EQ(found.size(), 3u);  // bias once
  EXPECT_EQ(found[0].buffer, "bias");
  ASSERT_EQ(found[0].leading.size(), 2u);
  EXPECT_EQ(cuir::PrintExpr(found[0].leading[1]), "h");
  EXPECT_EQ(found[1].buffer, "keep");
  EXPECT_TRUE(found[1].leading.empty());
  EXPECT_EQ(found[2].buffer, "adj");
}

TEST(StreamTheTile, LeavesReadsThatAreNotOnePerScore) {
  // Transposed, offset, row or column reads, a leading index that moves with the element, rank 1.
  EXPECT_TRUE(Found({"keep[kv_idx, q_idx]", "keep[q_idx, kv_idx + 1]", "doc[q_idx] == doc[kv_idx]",
                     "bias[q_idx % 2, q_idx, kv_idx] > 0.0", "table[h, q_idx]"})
                  .empty());
}

TEST(StreamTheTile, RewritesEveryReadOfTheChosenTensorAtTheSameLeadingIndices) {
  const TileStream bias{"bias", {Parse("b"), Parse("h // 2")}};
  EXPECT_EQ(Streamed("score + bias[b, h // 2, q_idx, kv_idx] * bias[b, h // 2, q_idx, kv_idx]", bias),
            "score + bias@tile[q_idx, kv_idx] * bias@tile[q_idx, kv_idx]");
  // Other leading indices, or another position, stay global reads.
  EXPECT_EQ(Streamed("bias[b, h, q_idx, kv_idx] + bias[b, h // 2, 0, kv_idx]", bias),
            "bias[b, h, q_idx, kv_idx] + bias[b, h // 2, 0, kv_idx]");
  const TileStream keep{"keep", {}};
  EXPECT_EQ(Streamed("keep[q_idx, kv_idx] && q_idx >= kv_idx", keep),
            "keep@tile[q_idx, kv_idx] && q_idx >= kv_idx");
}

}  // namespace
}  // namespace cubridge::lower
