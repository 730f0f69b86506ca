// Hand-written transferred programs (the shapes the transfer rules produce) against the oracle of
// the matching spec, plus deliberately broken programs that the comparison must reject.
#include <algorithm>
#include <functional>
#include <utility>

#include "gtest/gtest.h"
#include "tests/interp/interp_test_util.h"

namespace cubridge::interp::testing {
namespace {

using cuir::DType;

constexpr char kCausalLoop[] = "n_block in [0, min(cdiv(seqlen_kv, BLOCK_N), cdiv(q_hi, BLOCK_N)))";

Pieces Causal() {
  Pieces p;
  p.loop = kCausalLoop;
  p.block_lets = {"let full: bool = kv_hi - 1 <= q_lo"};
  p.after_qk = {"mask S = q_idx >= kv_idx when !full"};
  return p;
}

constexpr char kWindowSpec[] =
    "import torch\n"
    "def mask_mod(b, h, q_idx, kv_idx, window: int = 100):\n"
    "    return (q_idx >= kv_idx) & (q_idx - kv_idx <= window)\n";

Pieces SlidingWindow() {
  Pieces p;
  p.block_m = 64;
  p.block_n = 32;
  p.decls = {"const window: int = 100"};
  p.loop = "n_block in [max(q_lo - window, 0) // BLOCK_N, "
           "min(cdiv(seqlen_kv, BLOCK_N), cdiv(q_hi, BLOCK_N)))";
  p.block_lets = {"let full: bool = kv_hi - 1 <= q_lo && q_hi - 1 - kv_lo <= window"};
  p.after_qk = {"mask S = q_idx >= kv_idx && q_idx - kv_idx <= window when !full"};
  return p;
}

constexpr char kDocumentSpec[] =
    "import torch\n"
    "from torch import Tensor\n"
    "def mask_mod(b, h, q_idx, kv_idx, doc: Tensor):\n"
    "    return (q_idx >= kv_idx) & (doc[q_idx] == doc[kv_idx])\n";

Pieces Document() {
  Pieces p;
  p.block_m = 64;
  p.block_n = 32;
  p.decls = {"buffer doc: int32[max(seqlen_q, seqlen_kv)]"};
  p.tables = {"table T = blocks(q_idx >= kv_idx && doc[q_idx] == doc[kv_idx])"};
  p.loop = "n_block, full in table T[m_block]";
  p.after_qk = {"mask S = q_idx >= kv_idx && doc[q_idx] == doc[kv_idx] when !full"};
  return p;
}

// The cap is small so that tanh visibly changes the scores of unit-normal inputs.
constexpr char kSoftcapSpec[] =
    "import torch\n"
    "def score_mod(score, b, h, q_idx, kv_idx, cap: float = 2.0):\n"
    "    return cap * torch.tanh(score / cap)\n";

Pieces Softcap() {
  Pieces p;
  p.decls = {"const cap: float = 2.0"};
  p.after_qk = {"score_mod S = cap * tanh(score / cap)"};
  return p;
}

// Head-dependent score: programs of different heads share a batch, each with its own h.
constexpr char kAlibiSpec[] =
    "import torch\n"
    "def score_mod(score, b, h, q_idx, kv_idx, heads: int = 4):\n"
    "    return score + (kv_idx - q_idx) * torch.exp2(-8 * (h + 1) / heads)\n";

Pieces Alibi() {
  Pieces p;
  p.decls = {"const heads: int = 4"};
  p.after_qk = {"score_mod S = score + (kv_idx - q_idx) * exp2(-8 * (h + 1) / heads)"};
  return p;
}

// Head-dependent mask classified per head: each head visits different blocks.
constexpr char kHeadWindowSpec[] =
    "import torch\n"
    "def mask_mod(b, h, q_idx, kv_idx):\n"
    "    return (q_idx >= kv_idx) & (q_idx - kv_idx <= 40 * (h + 1))\n";

Pieces HeadWindow() {
  Pieces p;
  p.block_m = 64;
  p.block_n = 32;
  p.tables = {"table T = blocks(q_idx >= kv_idx && q_idx - kv_idx <= 40 * (h + 1)) per h"};
  p.loop = "n_block, full in table T[h, m_block]";
  p.after_qk = {"mask S = q_idx >= kv_idx && q_idx - kv_idx <= 40 * (h + 1) when !full"};
  return p;
}

// Attention sinks plus a causal window: two block intervals that overlap for early query tiles.
constexpr char kSinkWindowSpec[] =
    "import torch\n"
    "def mask_mod(b, h, q_idx, kv_idx, window: int = 64, sink: int = 40):\n"
    "    return (q_idx >= kv_idx) & ((q_idx - kv_idx <= window) | (kv_idx < sink))\n";

Pieces SinkWindow() {
  Pieces p;
  p.block_m = 64;
  p.block_n = 32;
  p.decls = {"const window: int = 64", "const sink: int = 40"};
  p.loop = "n_block in [0, min(cdiv(sink, BLOCK_N), cdiv(q_hi, BLOCK_N))) union "
           "[max(q_lo - window, 0) // BLOCK_N, min(cdiv(seqlen_kv, BLOCK_N), cdiv(q_hi, BLOCK_N)))";
  p.after_qk = {"mask S = q_idx >= kv_idx && (q_idx - kv_idx <= window || kv_idx < sink)"};
  return p;
}

// FlexAttention applies score_mod to the scaled score before the mask.
constexpr char kSoftcapCausalSpec[] =
    "import torch\n"
    "def mask_mod(b, h, q_idx, kv_idx):\n"
    "    return q_idx >= kv_idx\n"
    "def score_mod(score, b, h, q_idx, kv_idx, cap: float = 2.0):\n"
    "    return cap * torch.tanh(score / cap)\n";

void ExpectMatches(const Pieces& pieces, const std::string& spec,
                   const cuir::AttentionConfig& config,
                   const std::map<std::string, spec::BufferSource>& buffers = {}) {
  auto run = RunAgainstOracle(ProgramText(pieces), spec, config, buffers);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_LE(run->o.max_abs, OTolerance(config.dtype)) << config.ToString();
  EXPECT_LE(run->lse.max_abs, kLseTolerance) << config.ToString();
}

// A wrong program must miss the oracle by far more than the tolerance.
void ExpectFails(const Pieces& pieces, const std::string& spec,
                 const cuir::AttentionConfig& config) {
  auto run = RunAgainstOracle(ProgramText(pieces), spec, config);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_GT(run->o.max_abs, 10 * OTolerance(config.dtype)) << config.ToString();
  EXPECT_FALSE(run->Matches(config.dtype));
}

TEST(Variants, Causal) {
  ExpectMatches(Causal(), kCausalSpec, Config(DType::kBF16, 128, 257, 300));
  ExpectMatches(Causal(), kCausalSpec, Config(DType::kFP16, 64, 300, 257));
  ExpectMatches(Causal(), kCausalSpec, Config(DType::kBF16, 256, 37, 50));
}

TEST(Variants, SlidingWindow) {
  ExpectMatches(SlidingWindow(), kWindowSpec, Config(DType::kBF16, 64, 300, 300));
  ExpectMatches(SlidingWindow(), kWindowSpec, Config(DType::kFP16, 128, 257, 190));
}

TEST(Variants, DocumentMaskWithBlockTable) {
  ExpectMatches(Document(), kDocumentSpec, Config(DType::kBF16, 64, 257, 257),
                {{"doc", {"lengths:100,57,100"}}});
  ExpectMatches(Document(), kDocumentSpec, Config(DType::kFP16, 128, 257, 300),
                {{"doc", {"random"}}});
}

TEST(Variants, SoftcapScoreMod) {
  ExpectMatches(Softcap(), kSoftcapSpec, Config(DType::kBF16, 128, 257, 300));
  ExpectMatches(Softcap(), kSoftcapSpec, Config(DType::kFP16, 64, 70, 40));
}

TEST(Variants, GqaAndMqaHeadMapping) {
  Pieces p;
  p.kv_head = "h // (heads_q // heads_kv)";
  ExpectMatches(p, kFullSpec, Config(DType::kBF16, 64, 257, 300, /*heads_q=*/8, /*heads_kv=*/2));
  ExpectMatches(p, kFullSpec, Config(DType::kFP16, 128, 130, 70, /*heads_q=*/4, /*heads_kv=*/1));
  Pieces causal_gqa = Causal();
  causal_gqa.kv_head = p.kv_head;
  ExpectMatches(causal_gqa, kCausalSpec, Config(DType::kBF16, 128, 200, 200, 6, 3));
}

TEST(Variants, HeadDependentScoreMod) {
  ExpectMatches(Alibi(), kAlibiSpec, Config(DType::kBF16, 64, 257, 300, /*heads_q=*/4, 4));
}

TEST(Variants, HeadDependentTablePerHead) {
  ExpectMatches(HeadWindow(), kHeadWindowSpec, Config(DType::kFP16, 64, 300, 300, 4, 4));
}

TEST(Variants, UnionOfOverlappingRangesVisitsEachBlockOnce) {
  const auto config = Config(DType::kBF16, 64, 300, 300);
  auto run = RunAgainstOracle(ProgramText(SinkWindow()), kSinkWindowSpec, config);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(run->Matches(config.dtype)) << "O " << run->o.max_abs;
  // A block visited twice would be counted twice here (and double its weight in O).
  int64_t non_empty = 0;
  for (int64_t q0 = 0; q0 < 300; q0 += 64) {
    for (int64_t k0 = 0; k0 < 300; k0 += 32) {
      bool any = false;
      for (int64_t q = q0; q < std::min<int64_t>(q0 + 64, 300); ++q) {
        for (int64_t kv = k0; kv < std::min<int64_t>(k0 + 32, 300); ++kv) {
          any |= q >= kv && (q - kv <= 64 || kv < 40);
        }
      }
      non_empty += any;
    }
  }
  EXPECT_EQ(run->stats.blocks_visited, non_empty * config.heads_q);
  EXPECT_EQ(run->stats.blocks_masked, run->stats.blocks_visited);  // no `when`: always masks
}

TEST(Variants, ScoreModThenMask) {
  Pieces p = Causal();
  p.decls = {"const cap: float = 2.0"};
  p.after_qk = {"score_mod S = cap * tanh(score / cap)", "mask S = q_idx >= kv_idx when !full"};
  ExpectMatches(p, kSoftcapCausalSpec, Config(DType::kBF16, 128, 257, 257));
  // The other order turns masked -inf scores into -cap: keys from the future leak in.
  std::swap(p.after_qk[0], p.after_qk[1]);
  ExpectFails(p, kSoftcapCausalSpec, Config(DType::kBF16, 128, 257, 257));
}

TEST(Variants, EmptyTilesPastTheEndContributeNothing) {
  // One block past the end: kv rows [128, 100) form an empty (reversed) range, not an error.
  Pieces p;
  p.loop = "n_block in [0, cdiv(seqlen_kv, BLOCK_N) + 1)";
  ExpectMatches(p, kFullSpec, Config(DType::kFP16, 64, 100, 100));
}

TEST(BrokenPrograms, SkippedNonEmptyBlockFails) {
  Pieces p = Causal();
  // Drops the last (diagonal) block of every query tile: those keys are never seen.
  p.loop = "n_block in [0, min(cdiv(seqlen_kv, BLOCK_N), cdiv(q_hi, BLOCK_N)) - 1)";
  ExpectFails(p, kCausalSpec, Config(DType::kBF16, 64, 257, 300));
}

TEST(BrokenPrograms, WrongGqaHeadMappingFails) {
  Pieces p;
  p.kv_head = "h % heads_kv";  // interleaved instead of grouped
  ExpectFails(p, kFullSpec, Config(DType::kBF16, 64, 100, 100, /*heads_q=*/8, /*heads_kv=*/2));
}

TEST(BrokenPrograms, MissingScoreModFails) {
  ExpectFails(Pieces{}, kSoftcapSpec, Config(DType::kBF16, 128, 100, 100));
}

TEST(BrokenPrograms, MaskSkippedOnPartialBlocksFails) {
  Pieces p = Causal();
  p.block_lets = {"let full: bool = kv_hi - 1 <= q_hi"};  // claims diagonal blocks are full
  ExpectFails(p, kCausalSpec, Config(DType::kFP16, 64, 200, 200));
}

// Brute-force block classification of a mask over the (BLOCK_M x BLOCK_N) tiles.
struct BlockCounts {
  int64_t non_empty = 0, partial = 0;
};
BlockCounts CountBlocks(int64_t sq, int64_t skv, int64_t bm, int64_t bn,
                        const std::function<bool(int64_t, int64_t)>& keep) {
  BlockCounts c;
  for (int64_t q0 = 0; q0 < sq; q0 += bm) {
    for (int64_t k0 = 0; k0 < skv; k0 += bn) {
      int64_t kept = 0, total = 0;
      for (int64_t q = q0; q < std::min(q0 + bm, sq); ++q) {
        for (int64_t kv = k0; kv < std::min(k0 + bn, skv); ++kv, ++total) kept += keep(q, kv);
      }
      c.non_empty += kept > 0;
      c.partial += kept > 0 && kept < total;
    }
  }
  return c;
}

TEST(Stats, CausalMasksOnlyDiagonalBlocks) {
  const auto config = Config(DType::kBF16, 64, 257, 257, /*heads_q=*/2, 2, /*batch=*/2);
  auto run = RunAgainstOracle(ProgramText(Causal()), kCausalSpec, config);
  ASSERT_TRUE(run.ok()) << run.status();
  const auto want = CountBlocks(257, 257, 128, 64, [](int64_t q, int64_t kv) { return q >= kv; });
  const int64_t programs_per_tile = config.heads_q * config.batch;
  EXPECT_EQ(run->stats.programs, 3 * programs_per_tile);
  EXPECT_EQ(run->stats.blocks_visited, want.non_empty * programs_per_tile);
  EXPECT_EQ(run->stats.blocks_masked, want.partial * programs_per_tile);
  // Tile rows [0,128) cut diagonal blocks 0-1, [128,256) blocks 2-3; the last tile (row 256)
  // against block 4 (key 256) is one kept element, so full.
  EXPECT_EQ(want.partial, 4);
}

TEST(Stats, SlidingWindowVisitsOnlyNonEmptyBlocks) {
  const auto config = Config(DType::kBF16, 64, 300, 300);
  auto run = RunAgainstOracle(ProgramText(SlidingWindow()), kWindowSpec, config);
  ASSERT_TRUE(run.ok()) << run.status();
  const auto want = CountBlocks(300, 300, 64, 32, [](int64_t q, int64_t kv) {
    return q >= kv && q - kv <= 100;
  });
  EXPECT_EQ(run->stats.blocks_visited, want.non_empty * config.heads_q);
  EXPECT_EQ(run->stats.blocks_masked, want.partial * config.heads_q);
}

TEST(Stats, DocumentTableSkipsEmptyAndFullBlocks) {
  const auto config = Config(DType::kBF16, 64, 257, 257);
  auto run = RunAgainstOracle(ProgramText(Document()), kDocumentSpec, config,
                              {{"doc", {"lengths:100,57,100"}}});
  ASSERT_TRUE(run.ok()) << run.status();
  const at::Tensor doc = run->inputs.buffers.at("doc").to(at::kLong).contiguous();
  const int64_t* d = doc.data_ptr<int64_t>();
  const auto want = CountBlocks(257, 257, 64, 32, [d](int64_t q, int64_t kv) {
    return q >= kv && d[q] == d[kv];
  });
  EXPECT_EQ(run->stats.blocks_visited, want.non_empty * config.heads_q);
  EXPECT_EQ(run->stats.blocks_masked, want.partial * config.heads_q);
  // Cross-document blocks exist, so the table must have skipped some.
  const int64_t all_causal =
      CountBlocks(257, 257, 64, 32, [](int64_t q, int64_t kv) { return q >= kv; }).non_empty;
  EXPECT_LT(want.non_empty, all_causal);
}

}  // namespace
}  // namespace cubridge::interp::testing
