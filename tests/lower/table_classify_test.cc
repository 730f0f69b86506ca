// A lowered block table's classifier (region `table_kernel`, region_tables.cc) run on the host: its
// T_decide and T_classify built by nvcc as host code over the experts' headers (one thread a
// CTA), every tile of a ragged geometry classified as the expert's classify kernel does it (the
// corners' verdict, then the scan of the tiles it left open), and each entry compared with the
// tile's elements evaluated by the CuIR evaluator. Covers the corners' verdict (tile_corners.h)
// where a GPU is not at hand.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "cuir/ir/eval.h"
#include "cuir/ir/program.h"
#include "cuir/lower/expert.h"
#include "cuir/lower/lower.h"
#include "gtest/gtest.h"
#include "tests/lower/lower_test_util.h"

namespace cubridge::lower {
namespace {

// The geometry classified: ragged in both lengths, four heads (the tables are per head where
// the predicate reads h).
constexpr int kBlockM = 64, kBlockN = 64, kSeqQ = 1000, kSeqKv = 1100, kHeads = 4;

std::string Program(const std::string& pred) {
  return absl::StrCat(R"(cuir 1
kernel attn_fwd {
  expert "fa2_sm80"
  param BLOCK_M: int = )", kBlockM, R"(
  param BLOCK_N: int = )", kBlockN, R"(
  param STAGES: int = 2
  param WARPS: int = 4
  role compute warps WARPS
  grid m_block < cdiv(seqlen_q, BLOCK_M), h < heads_q, b < batch
  table T = blocks()", pred, R"() per h
  let kv_h: int = h
  let q_lo: int = m_block * BLOCK_M
  let q_hi: int = min(q_lo + BLOCK_M, seqlen_q)
  load Q = q[b, h, q_lo:q_hi]
  softmax.init
  for n_block, full in table T[h, m_block] pipeline STAGES {
    let kv_lo: int = n_block * BLOCK_N
    let kv_hi: int = min(kv_lo + BLOCK_N, seqlen_kv)
    load K = k[b, kv_h, kv_lo:kv_hi]
    load V = v[b, kv_h, kv_lo:kv_hi]
    S = qk Q, K scale softmax_scale
    mask S = )", pred, R"( when !full
    P = softmax.online S
    pv P, V
  }
  epilogue
}
)");
}

// Each tile's class by the evaluator: 0 empty, 1 partial, 2 full.
std::vector<int> Expected(const cuir::ExprPtr& pred) {
  std::vector<int> out;
  const int num_m = (kSeqQ + kBlockM - 1) / kBlockM, num_n = (kSeqKv + kBlockN - 1) / kBlockN;
  for (int h = 0; h < kHeads; ++h) {
    for (int m = 0; m < num_m; ++m) {
      for (int n = 0; n < num_n; ++n) {
        bool any = false, all = true;
        for (int q = m * kBlockM; q < std::min((m + 1) * kBlockM, kSeqQ); ++q) {
          for (int kv = n * kBlockN; kv < std::min((n + 1) * kBlockN, kSeqKv); ++kv) {
            cuir::ScalarEnv env;
            env.vars["h"] = int64_t{h};
            env.vars["q_idx"] = int64_t{q};
            env.vars["kv_idx"] = int64_t{kv};
            auto keep = cuir::EvalBool(pred, env);
            EXPECT_TRUE(keep.ok()) << keep.status();
            any = any || (keep.ok() && *keep);
            all = all && keep.ok() && *keep;
          }
        }
        out.push_back(any ? (all ? 2 : 1) : 0);
      }
    }
  }
  return out;
}

class TableClassify : public ::testing::TestWithParam<std::string> {};

TEST_P(TableClassify, EveryTileAsItsElementsSay) {
  const std::string nvcc = testing::FindNvcc();
  if (nvcc.empty()) {
    GTEST_SKIP() << "no nvcc (CUBRIDGE_NVCC unset, /usr/local/cuda/bin/nvcc absent)";
  }
  auto program = cuir::ParseProgram(Program(GetParam()), "table_classify");
  ASSERT_TRUE(program.ok()) << program.status();
  auto lowered = Lower(*program, cuir::AttentionConfig{}, Arch::kSm80);
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  std::string table = testing::RegionText(lowered->cuda_source, "table_kernel");
  ASSERT_NE(table.find("void T_classify("), std::string::npos) << lowered->cuda_source;
  ASSERT_NE(table.find("bool T_decide("), std::string::npos) << lowered->cuda_source;
  // One thread a CTA on the host: the CTA-wide votes are the thread's own.
  table = absl::StrReplaceAll(table,
                              {{"__device__ __forceinline__", "__host__ __device__ inline"}});
  const std::string experts = ExpertsDir();
  const std::string source = absl::StrCat(
      "#include <stdio.h>\n#include <vector>\n#include \"", experts,
      "/common/launch_abi.cuh\"\n#include \"", experts, "/common/cuir_scalar.cuh\"\n",
      "struct TestDim { int x; };\nconstexpr TestDim test_thread{0}, test_block{1};\n",
      "#define threadIdx test_thread\n#define blockDim test_block\n",
      "#define __syncthreads_or(x) (x)\n#define __syncthreads_and(x) (x)\n",
      "#define __syncthreads() ((void)0)\n", "constexpr int BLOCK_M = ", kBlockM,
      ", BLOCK_N = ", kBlockN, ";\n", table, R"(
int main() {
  cubridge_attn_fwd_params p{};
  p.batch = 1;
  p.heads_q = p.heads_kv = )", kHeads, R"(;
  p.seqlen_q = )", kSeqQ, R"(;
  p.seqlen_kv = )", kSeqKv, R"(;
  const long long rows = T_rows(p), cols = (p.seqlen_kv + BLOCK_N - 1) / BLOCK_N;
  std::vector<int> t(rows + rows * cols, -1);
  long long decided = 0;
  for (long long tile = 0; tile < rows * cols; ++tile) {
    if (T_decide(p, t.data(), tile)) ++decided;
    else T_classify(p, t.data(), tile);
  }
  for (long long i = 0; i < rows * cols; ++i) printf("%d\n", t[rows + i]);
  printf("%lld\n", decided);
  return 0;
}
)");
  const testing::ProgramRun r = testing::BuildAndRunProgram(nvcc, "classify", "-std=c++17 -O1",
                                                            source);
  ASSERT_EQ(r.build.exit_code, 0) << r.build.output << "\n" << source;
  ASSERT_EQ(r.run.exit_code, 0) << r.run.output;
  std::vector<int> got;
  for (absl::string_view line : absl::StrSplit(r.run.output, '\n', absl::SkipEmpty())) {
    got.push_back(std::stoi(std::string(line)));
  }
  ASSERT_FALSE(got.empty()) << r.run.output;
  const int decided = got.back();  // the tiles the corners settled, printed last
  got.pop_back();
  auto pred = testing::ParseOrFail(GetParam());
  const std::vector<int> want = Expected(pred);
  ASSERT_EQ(got.size(), want.size());
  int wrong = 0;
  for (size_t i = 0; i < want.size(); ++i) wrong += got[i] != want[i];
  EXPECT_EQ(wrong, 0) << "tiles classified unlike their elements, of " << want.size();
  // The corners settled some tiles (the predicates below all have a side they decide), and not
  // every one (each has a band whose tiles are scanned).
  EXPECT_GT(decided, 0);
  EXPECT_LT(decided, static_cast<int>(want.size()));
  testing::CleanUpTempDir(r.dir, HasFailure());
}

// Windows of per-head width with a dilation (longformer_head_dilation), a band with a stride
// (dilated_window), compressed rows (hourglass_shortened), a band of half-planes alone (the
// corners then also find full tiles), and a per-head window beside attention sinks
// (duo_attention_head_windows: a disjunction).
INSTANTIATE_TEST_SUITE_P(
    Predicates, TableClassify,
    ::testing::Values(
        "q_idx - kv_idx >= 0 && q_idx - kv_idx < (h % 4 + 1) * 32 && (q_idx - kv_idx) % (h % 4 + "
        "1) == 0",
        "abs(q_idx - kv_idx) <= 100 + 20 * h && (q_idx - kv_idx) % 3 == 0",
        "kv_idx < shl(q_idx + 1, 1) && q_idx - shr(kv_idx, 1) < 200 + h",
        "kv_idx <= q_idx + h && q_idx - kv_idx <= 150 * (h + 1)",
        "q_idx >= kv_idx && (q_idx - kv_idx <= 100 + 90 * h || kv_idx < 4)"));

}  // namespace
}  // namespace cubridge::lower
