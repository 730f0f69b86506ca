// The lowered kernels are real CUDA: every test program, lowered for sm_80 and for sm_90,
// compiles with nvcc for its target; and the emitted expressions, compiled by nvcc as host code,
// compute what the CuIR evaluator computes. Without nvcc these tests are skipped (never passed).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "cuir/ir/eval.h"
#include "cuir/lower/cuda_emit.h"
#include "cuir/lower/expert.h"
#include "cuir/lower/lift.h"
#include "cuir/lower/lower.h"
#include "gtest/gtest.h"
#include "tests/lower/lower_test_util.h"

namespace cubridge::lower {
namespace {

using testing::BuildAndRunProgram;
using testing::CleanUpTempDir;
using testing::CommandResult;
using testing::FindNvcc;
using testing::LoadTestProgram;
using testing::MakeTempDir;
using testing::ProgramRun;
using testing::RunCommand;
using testing::WriteFile;

constexpr int kParallelCompiles = 2;  // the build machines have two cores

const char* kPrograms[] = {"base",          "causal",         "sliding_window",
                           "global_window", "document",       "document_batched",
                           "softcap_alibi", "gqa",            "renamed_symbols",
                           "share_question", "position_scale", "row_terms",
                           "row_reads_block"};

struct CompileJob {
  std::string label;
  std::string command;
};

// Runs the jobs on kParallelCompiles workers; returns the failures' labels with their output.
// ptxas's C75xx notes (wgmma serialised, e.g. C7512 for want of registers) fail a job too: they
// are only "info", but such a kernel runs its products one at a time.
std::vector<std::string> RunJobs(const std::vector<CompileJob>& jobs) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::vector<std::string> failures;
  auto worker = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      const CommandResult r = RunCommand(jobs[i].command);
      if (r.exit_code != 0 || absl::StrContains(r.output, "(C75")) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back(absl::StrCat(jobs[i].label, " (exit ", r.exit_code, "):\n", r.output));
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kParallelCompiles; ++i) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  return failures;
}

// nvcc's target flag: sm_80, or sm_90a alone (-arch=sm_90a also builds compute_90 PTX, which
// the Hopper expert's wgmma and setmaxnreg code cannot be).
std::string ArchFlag(Arch arch) {
  return arch == Arch::kSm90 ? "-gencode=arch=compute_90a,code=sm_90a" : "-arch=sm_80";
}

TEST(Nvcc, EveryLoweredProgramCompilesForItsArch) {
  const std::string nvcc = FindNvcc();
  if (nvcc.empty()) GTEST_SKIP() << "no nvcc (CUBRIDGE_NVCC unset, /usr/local/cuda/bin/nvcc absent)";
  const std::string dir = MakeTempDir("cubridge_lower_");
  ASSERT_FALSE(dir.empty());
  std::vector<CompileJob> jobs;
  for (const char* name : kPrograms) {
    auto program = LoadTestProgram(name);
    ASSERT_TRUE(program.ok()) << program.status();
    for (Arch arch : {Arch::kSm80, Arch::kSm90}) {
      auto k = Lower(*program, cuir::AttentionConfig{}, arch);
      ASSERT_TRUE(k.ok()) << name << ": " << k.status();
      const std::string stem = absl::StrCat(dir, "/", name, "_", ArchName(arch));
      WriteFile(stem + ".cu", k->cuda_source);
      WriteFile(stem + ".h", k->launcher_header);
      // Warnings of the generated code are errors, so none slip in.
      jobs.push_back({absl::StrCat(name, " for ", ArchName(arch)),
                      absl::StrCat(nvcc, " -c -std=c++17 ", ArchFlag(arch),
                                   " -Werror all-warnings -o ", stem, ".o ", stem, ".cu")});
    }
  }
  for (const std::string& failure : RunJobs(jobs)) ADD_FAILURE() << failure;
  CleanUpTempDir(dir, HasFailure());
}

// The Hopper expert at every tile its autotuner offers (worker/gpu/autotune.cc: the expert's
// own, 176-, 80- and 64-key blocks, two K/V stages), lowered from a masked program, compiles for
// sm_90a without register spills (ptxas -warn-spills, an error here) or serialised wgmma, at every
// head dim of the file. A tile that does not fit (the 176-key tile with head dim 64's third
// consumer did not) fails here, not on a GPU.
TEST(Nvcc, HopperTileCandidatesCompileWithoutSpills) {
  const std::string nvcc = FindNvcc();
  if (nvcc.empty()) GTEST_SKIP() << "no nvcc (CUBRIDGE_NVCC unset, /usr/local/cuda/bin/nvcc absent)";
  auto program = testing::LoadTestProgramOnHopper("causal");
  ASSERT_TRUE(program.ok()) << program.status();
  const std::string dir = MakeTempDir("cubridge_tiles_");
  ASSERT_FALSE(dir.empty());
  // The program's own params are the Hopper base's (128-key blocks, three stages).
  const std::vector<std::map<std::string, int64_t>> tiles = {
      {}, {{"BLOCK_N", 176}}, {{"BLOCK_N", 80}}, {{"BLOCK_N", 64}}, {{"STAGES", 2}}};
  std::vector<CompileJob> jobs;
  for (const auto& params : tiles) {
    auto tiled = cuir::WithParams(*program, params);
    ASSERT_TRUE(tiled.ok()) << tiled.status();
    auto k = Lower(*tiled, cuir::AttentionConfig{}, Arch::kSm90);
    ASSERT_TRUE(k.ok()) << k.status();
    std::string label = "causal";
    for (const auto& [name, value] : params) absl::StrAppend(&label, "_", name, value);
    const std::string stem = absl::StrCat(dir, "/", label);
    WriteFile(stem + ".cu", k->cuda_source);
    WriteFile(stem + ".h", k->launcher_header);
    jobs.push_back({label, absl::StrCat(nvcc, " -cubin -std=c++17 -O3 ",
                                        "-gencode=arch=compute_90a,code=sm_90a -Xptxas -warn-spills ",
                                        "-Werror all-warnings -o ", stem, ".cubin ", stem, ".cu")});
  }
  for (const std::string& failure : RunJobs(jobs)) ADD_FAILURE() << failure;
  CleanUpTempDir(dir, HasFailure());
}

// A program with `epilogue sink` lowers to code nvcc accepts (the generated add_sink call and
// the expert's OnlineSoftmax::add_sink it relies on), for both targets, warnings as errors.
TEST(Nvcc, EpilogueSinkProgramCompiles) {
  const std::string nvcc = FindNvcc();
  if (nvcc.empty()) GTEST_SKIP() << "no nvcc (CUBRIDGE_NVCC unset, /usr/local/cuda/bin/nvcc absent)";
  auto program = LoadTestProgram("sink");
  ASSERT_TRUE(program.ok()) << program.status();
  const std::string dir = MakeTempDir("cubridge_sink_");
  ASSERT_FALSE(dir.empty());
  // On the sm_80 expert's base, and moved onto the Hopper expert's (whose sink is a hook of its
  // VariantTile, handed the softmax, the accumulator and the lane).
  auto sm80 = LiftExpert("fa2_sm80");
  auto hopper = LiftExpert("fa3_sm90");
  ASSERT_TRUE(sm80.ok() && hopper.ok());
  auto moved = Rebase(*program, sm80->base, hopper->base);
  ASSERT_TRUE(moved.ok()) << moved.status();
  std::vector<CompileJob> jobs;
  for (Arch arch : {Arch::kSm80, Arch::kSm90}) {
    auto k = Lower(arch == Arch::kSm80 ? *program : *moved, cuir::AttentionConfig{}, arch);
    ASSERT_TRUE(k.ok()) << k.status();
    ASSERT_NE(std::find(k->generated_regions.begin(), k->generated_regions.end(), "epilogue_sink"),
              k->generated_regions.end());
    EXPECT_EQ(k->expert, arch == Arch::kSm80 ? "fa2_sm80" : "fa3_sm90");
    const std::string stem = absl::StrCat(dir, "/sink_", ArchName(arch));
    WriteFile(stem + ".cu", k->cuda_source);
    jobs.push_back({absl::StrCat("sink for ", ArchName(arch)),
                    absl::StrCat(nvcc, " -c -std=c++17 ", ArchFlag(arch),
                                 " -Werror all-warnings -o ", stem, ".o ", stem, ".cu")});
  }
  for (const std::string& failure : RunJobs(jobs)) ADD_FAILURE() << failure;
  CleanUpTempDir(dir, HasFailure());
}

// The launcher header is plain C: a C compiler accepts it without CUDA headers.
TEST(Nvcc, LauncherHeaderIsPlainC) {
  auto program = LoadTestProgram("document");
  ASSERT_TRUE(program.ok());
  auto k = Lower(*program, cuir::AttentionConfig{}, Arch::kSm80);
  ASSERT_TRUE(k.ok()) << k.status();
  const std::string dir = MakeTempDir("cubridge_header_");
  WriteFile(dir + "/kernel.h", k->launcher_header);
  WriteFile(dir + "/use.c",
            "#include \"kernel.h\"\n"
            "int call(cubridge_attn_fwd_params* p) {\n"
            "  p->buffers[0].data = 0;\n  p->buffers[0].rank = 1;\n"
            "  return cubridge_attn_fwd(p, 0) + (int)cubridge_attn_fwd_workspace_size(p) +\n"
            "         cubridge_attn_fwd_tables(p, 0) + cubridge_attn_fwd_attention(p, 0);\n"
            "}\n");
  const CommandResult r = RunCommand(absl::StrCat("cc -std=c99 -Wall -Werror -c -o ", dir,
                                                  "/use.o ", dir, "/use.c"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  CleanUpTempDir(dir, HasFailure());
}

// ---- emitted expressions vs the evaluator ------------------------------------------------------

// Variables the expressions read: negative and positive ints (for floor semantics), floats.
const std::vector<std::pair<std::string, cuir::Value>> kVars = {
    {"a", int64_t{-7}}, {"b", int64_t{2}},    {"c", int64_t{-3}},
    {"d", int64_t{9}},  {"x", double{-7.5}},  {"y", double{2.0}},
};

const char* kNumericCases[] = {
    "a // b", "a % b", "d // c", "d % c", "a // c", "a % c", "cdiv(a, b)", "cdiv(d, b)",
    "cdiv(a, c)", "x // y", "x % y", "(-x) % y", "x % (-y)", "int(x)", "int(-x)",
    "select(a < 0, a, x)", "select(a > 0, a, b)", "2 ** 10", "b ** 3 * a", "a ** 2",
    "min(a, c)", "max(x, a)", "abs(a) + abs(x)", "floor(x)", "a / b", "exp2(c) * y",
    "tanh(x / 8.0) * 20.0", "float(a * d) / 4", "(a - d) * (c - b) // 5",
};

std::string EvalText(const cuir::Value& v) {
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "1" : "0";
  if (const auto* i = std::get_if<int64_t>(&v)) return absl::StrCat(*i);
  return absl::StrCat(std::get<double>(v));
}

TEST(Nvcc, EmittedExpressionsComputeWhatTheEvaluatorComputes) {
  const std::string nvcc = FindNvcc();
  if (nvcc.empty()) GTEST_SKIP() << "no nvcc (CUBRIDGE_NVCC unset, /usr/local/cuda/bin/nvcc absent)";
  EmitScope scope(EmitTarget::kHost);
  cuir::ScalarEnv env;
  std::string program = absl::StrCat("#include <stdio.h>\n#include \"", ExpertsDir(),
                                     "/common/cuir_scalar.cuh\"\nint main() {\n");
  for (const auto& [name, value] : kVars) {
    const bool is_int = std::holds_alternative<int64_t>(value);
    scope.Bind(name, name, is_int ? CType::kInt : CType::kFloat);
    env.vars[name] = value;
    absl::StrAppend(&program, is_int ? "  const int " : "  const float ", name, " = ",
                    EvalText(value), ";\n");
  }
  std::vector<cuir::Value> expected;
  for (const char* text : kNumericCases) {
    auto e = cuir::ParseExpr(text);
    ASSERT_TRUE(e.ok()) << text << ": " << e.status();
    auto c = EmitExpr(*e, scope);
    ASSERT_TRUE(c.ok()) << text << ": " << c.status();
    auto v = cuir::EvalScalar(*e, env);
    ASSERT_TRUE(v.ok()) << text << ": " << v.status();
    expected.push_back(*v);
    absl::StrAppend(&program, "  printf(\"%.9g\\n\", static_cast<double>(", c->text, "));\n");
  }
  program += "  return 0;\n}\n";
  const std::string dir = MakeTempDir("cubridge_emit_");
  WriteFile(dir + "/exprs.cu", program);
  const CommandResult build = RunCommand(
      absl::StrCat(nvcc, " -std=c++17 -o ", dir, "/exprs ", dir, "/exprs.cu"));
  ASSERT_EQ(build.exit_code, 0) << build.output << "\n" << program;
  const CommandResult run = RunCommand(dir + "/exprs");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::vector<std::string> lines = absl::StrSplit(run.output, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), expected.size()) << run.output;
  for (size_t i = 0; i < lines.size(); ++i) {
    const double got = std::stod(lines[i]);
    const cuir::Value& want = expected[i];
    if (std::holds_alternative<int64_t>(want)) {
      EXPECT_EQ(got, static_cast<double>(std::get<int64_t>(want))) << kNumericCases[i];
    } else {
      const double w = std::get<double>(want);
      EXPECT_NEAR(got, w, 1e-5 * std::max(1.0, std::fabs(w))) << kNumericCases[i];
    }
  }
  CleanUpTempDir(dir, HasFailure());
}

// cuir_fastdiv (the persistent scheduler's tile decode) against / and % on the host side of the
// same header: every small divisor with every small numerator, the edges of its stated range
// (n < 2^31, d < 2^31), and pseudo-random pairs; then the scheduler's decode itself against the
// order written with plain division. The program prints the number of mismatches.
// Builds `program` (host code over the experts' headers) with nvcc, runs it, and expects exit 0
// and output starting with `first_words` (its count of mismatches).
void ExpectHostProgramReports(const std::string& nvcc, const std::string& name,
                              const std::string& program, const std::string& first_words) {
  const ProgramRun r = BuildAndRunProgram(nvcc, name, "-std=c++17 -O2", program);
  ASSERT_EQ(r.build.exit_code, 0) << r.build.output;
  EXPECT_EQ(r.run.exit_code, 0) << r.run.output;
  EXPECT_TRUE(absl::StartsWith(r.run.output, first_words)) << r.run.output;
  CleanUpTempDir(r.dir, ::testing::Test::HasFailure());
}

TEST(Nvcc, FastDivisionMatchesIntegerDivision) {
  const std::string nvcc = FindNvcc();
  if (nvcc.empty()) GTEST_SKIP() << "no nvcc (CUBRIDGE_NVCC unset, /usr/local/cuda/bin/nvcc absent)";
  const std::string program = absl::StrCat(
      "#include <stdio.h>\n#include \"", ExpertsDir(), "/common/cuir_scalar.cuh\"\n#include \"",
      ExpertsDir(), "/fa3_sm90/scheduler.cuh\"\n", R"(
static long bad = 0, checked = 0;
static void check(int n, int d) {
  const cuir_fastdiv f(d);
  int r = -1;
  const int q = f.divmod(n, &r);
  ++checked;
  if (q != n / d || r != n % d) {
    if (bad++ < 5) printf("n=%d d=%d: %d rem %d\n", n, d, q, r);
  }
}
int main() {
  for (int d = 1; d < 600; ++d)
    for (int n = 0; n < 2000; ++n) check(n, d);
  const int edges[] = {1, 2, 3, 7, 127, 128, 129, 65535, 65536, 65537, 1 << 30, (1 << 30) + 1,
                       0x7ffffffe, 0x7fffffff};
  for (int d : edges)
    for (int n : edges) { check(n, d); check(n - 1, d); }
  unsigned long long x = 88172645463325252ull;  // xorshift64
  for (int i = 0; i < 2000000; ++i) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    const int n = static_cast<int>(x & 0x7fffffff);
    const int d = 1 + static_cast<int>((x >> 31) % (i % 2 ? 100000u : 0x7fffffffu));
    check(n, d);
  }
  // The Hopper scheduler's decode (fa3_sm90/scheduler.cuh) against the order written with plain
  // division: groups of pairs, the last one short where pairs % group != 0, query tile slowest
  // and last first within a group; under MHA (one query head per kv head) every other group,
  // counted back from the last, first to last; under MHA with whole KV walks (last column 1)
  // groups of two pairs.
  long tiles = 0, wrong = 0;
  const int shapes[][6] = {{8, 32, 16, 32, 4 << 20, 0}, {64, 32, 2, 32, 4 << 20, 0}, {8, 64, 16, 8, 512 << 10, 0},
                           {64, 128, 2, 8, 4 << 20, 0}, {3, 5, 7, 1, 9 << 20, 0}, {1, 1, 1, 1, 1, 0}, {17, 6, 5, 3, 1 << 22, 0},
                           {64, 32, 2, 1, 4 << 20, 0}, {8, 32, 16, 1, 512 << 10, 0}, {5, 7, 3, 1, 1 << 20, 0},
                           {8, 32, 16, 1, 512 << 10, 1}, {64, 7, 3, 1, 4 << 20, 1}, {1, 1, 1, 1, 1, 1},
                           {8, 64, 16, 8, 512 << 10, 1}};
  for (const auto& sh : shapes) {
    const int m_blocks = sh[0], heads = sh[1], batch = sh[2], per_kv = sh[3];
    const cubridge::fa3::LongestFirst order(m_blocks, heads, batch, sh[4], per_kv, sh[5] != 0);
    const int pairs = heads * batch;
    const int mha_whole = sh[5] != 0 && per_kv <= 1 ? (pairs < 2 ? pairs : 2) : 0;
    if (mha_whole != 0 && order.group != mha_whole) {
      if (wrong++ < 5) printf("shape %d/%d/%d: group %d, want %d\n", m_blocks, heads, batch, order.group, mha_whole);
    }
    const int groups = (pairs + order.group - 1) / order.group;
    for (int w = 0; w < order.count; ++w, ++tiles) {
      const int g = w / (order.group * m_blocks), first = g * order.group;
      const int size = pairs - first < order.group ? pairs - first : order.group;
      const int in = w - first * m_blocks, pair = first + in % size;
      const bool descending = per_kv > 1 || (groups - 1 - g) % 2 == 0;
      const int m_block = descending ? m_blocks - 1 - in / size : in / size;
      const cubridge::fa3::Tile t = order.tile(w);
      if (t.m_block != m_block || t.head != pair % heads || t.batch != pair / heads) {
        if (wrong++ < 5) printf("tile %d of shape %d/%d/%d: %d %d %d\n", w, m_blocks, heads, batch, t.m_block, t.head, t.batch);
      }
    }
  }
  bad += wrong;
  printf("%ld mismatches of %ld (%ld scheduler tiles)\n", bad, checked, tiles);
  return bad == 0 ? 0 : 1;
}
)");
  ExpectHostProgramReports(nvcc, "fastdiv", program, "0 mismatches of");
}

// The last-wave split (TailSplit, fa3_sm90/scheduler.cuh), on the host over many launches: the
// whole tiles fill whole waves, every split unit runs in the last one, every tail tile's parts
// cover its KV blocks once, in order, at least kMinSplitBlocks each, and the unit decode visits
// each work tile once (whole) or once per part. Llama2 heads at S = 8k (4096 tiles, 132 CTAs, 64
// KV blocks) split their 4 tail tiles 16 ways.
TEST(Nvcc, TailSplitCoversEveryTileOnce) {
  const std::string nvcc = FindNvcc();
  if (nvcc.empty()) GTEST_SKIP() << "no nvcc (CUBRIDGE_NVCC unset, /usr/local/cuda/bin/nvcc absent)";
  const std::string program = absl::StrCat(
      "#include <stdio.h>\n#include <vector>\n#include \"", ExpertsDir(),
      "/common/cuir_scalar.cuh\"\n#include \"", ExpertsDir(), "/fa3_sm90/scheduler.cuh\"\n", R"split(
using cubridge::fa3::TailSplit;
static long bad = 0, launches = 0, split = 0;
#define EXPECT(c, ...) do { if (!(c)) { if (bad++ < 8) { printf(__VA_ARGS__); printf("\n"); } } } while (0)
static void check(int tiles, int ctas, int blocks, bool whole_walks) {
  ++launches;
  const TailSplit s(tiles, ctas, blocks, whole_walks);
  const int tail = ctas > 0 ? tiles % ctas : 0;
  if (!s.active()) {
    EXPECT(s.units == tiles && s.whole == tiles, "%d/%d/%d: inactive but %d units", tiles, ctas, blocks, s.units);
    EXPECT(!whole_walks || tail == 0 || ctas / tail < 2 || blocks / cubridge::fa3::kMinSplitBlocks < 2 ||
           cubridge::fa3::kMaxSplitUnits / tail < 2,
           "%d/%d/%d: could split", tiles, ctas, blocks);
    return;
  }
  ++split;
  EXPECT(whole_walks && tail > 0 && s.whole == tiles - tail && s.whole % ctas == 0,
         "%d/%d/%d: whole %d", tiles, ctas, blocks, s.whole);
  EXPECT(s.parts >= 2 && s.parts <= cubridge::fa3::kMaxSplitParts && tail * s.parts <= ctas &&
         tail * s.parts <= cubridge::fa3::kMaxSplitUnits && s.units == s.whole + tail * s.parts,
         "%d/%d/%d: %d parts", tiles, ctas, blocks, s.parts);
  EXPECT(ctas / tail < 2 * s.parts || s.parts == cubridge::fa3::kMaxSplitParts ||
         blocks / cubridge::fa3::kMinSplitBlocks == s.parts || cubridge::fa3::kMaxSplitUnits / tail == s.parts,
         "%d/%d/%d: only %d parts", tiles, ctas, blocks, s.parts);
  std::vector<int> seen(tiles, 0);
  for (int u = 0; u < s.units; ++u) {
    const int w = s.tile_of(u), k = s.part_of(u);
    EXPECT(w >= 0 && w < tiles, "%d/%d/%d: unit %d tile %d", tiles, ctas, blocks, u, w);
    if (w < 0 || w >= tiles) continue;
    if (w < s.whole) {
      EXPECT(k == -1 && s.first_block(k) == 0, "%d/%d/%d: whole tile %d part %d", tiles, ctas, blocks, w, k);
    } else {
      EXPECT(k == seen[w], "%d/%d/%d: tile %d part %d, want %d", tiles, ctas, blocks, w, k, seen[w]);
      EXPECT(u / ctas == s.whole / ctas, "%d/%d/%d: unit %d not in the last wave", tiles, ctas, blocks, u);
      const int lo = s.first_block(k), hi = s.end_block(k);
      EXPECT(hi - lo >= cubridge::fa3::kMinSplitBlocks && lo == (k == 0 ? 0 : s.end_block(k - 1)) &&
             (k != s.parts - 1 || hi == blocks), "%d/%d/%d: part %d blocks [%d, %d)", tiles, ctas, blocks, k, lo, hi);
    }
    ++seen[w];
  }
  for (int w = 0; w < tiles; ++w)
    EXPECT(seen[w] == (w < s.whole ? 1 : s.parts), "%d/%d/%d: tile %d seen %d times", tiles, ctas, blocks, w, seen[w]);
}
int main() {
  const TailSplit llama(4096, 132, 64, true);
  EXPECT(llama.active() && llama.whole == 4092 && llama.parts == 16 && llama.units == 4156,
         "Llama2 8k: whole %d parts %d units %d", llama.whole, llama.parts, llama.units);
  for (int ctas : {1, 2, 7, 114, 132, 144, 160, 200})
    for (int tiles = 1; tiles < 700; tiles += (tiles < 300 ? 1 : 7))
      for (int blocks : {1, 2, 3, 5, 8, 64, 513})
        for (bool whole : {true, false}) check(tiles, ctas, blocks, whole);
  printf("%ld mismatches (%ld launches, %ld split)\n", bad, launches, split);
  return bad == 0 && split > 0 ? 0 : 1;
}
)split");
  ExpectHostProgramReports(nvcc, "tailsplit", program, "0 mismatches");
}

// FloatIndices (docs/lowering.md): ALiBi's index distance is summed in floats, so the Hopper
// kernel's element loop holds no int-to-float conversion; a product of indices (which the rewrite
// leaves alone) keeps one per element. Counted in the PTX of the bf16, head-dim-128 attention
// entry, where a thread's 64 score elements per tile are unrolled.
int ConversionsInAttentionEntry(const std::string& ptx) {
  int count = 0;
  bool inside = false;
  for (absl::string_view line : absl::StrSplit(ptx, '\n')) {
    if (absl::StartsWith(line, ".visible .entry ")) {
      inside = absl::StrContains(line, "attn_fwd_kernel") &&
               absl::StrContains(line, "bfloat16Li128E");
    }
    if (inside && absl::StrContains(line, "cvt.rn.f32.s")) ++count;
  }
  return count;
}

TEST(Nvcc, IndexDistancesAreNotConvertedPerElement) {
  const std::string nvcc = FindNvcc();
  if (nvcc.empty()) GTEST_SKIP() << "no nvcc (CUBRIDGE_NVCC unset, /usr/local/cuda/bin/nvcc absent)";
  const std::string dir = MakeTempDir("cubridge_cvt_");
  ASSERT_FALSE(dir.empty());
  int conversions[2] = {0, 0};
  const char* names[2] = {"softcap_alibi", "index_distance"};
  for (int i = 0; i < 2; ++i) {
    auto program = LoadTestProgram(names[i]);
    ASSERT_TRUE(program.ok()) << program.status();
    auto k = Lower(*program, cuir::AttentionConfig{}, Arch::kSm90);
    ASSERT_TRUE(k.ok()) << k.status();
    const std::string stem = absl::StrCat(dir, "/", names[i]);
    WriteFile(stem + ".cu", k->cuda_source);
    const CommandResult r = RunCommand(absl::StrCat(nvcc, " -ptx -std=c++17 -arch=compute_90a -o ",
                                                    stem, ".ptx ", stem, ".cu"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(stem + ".ptx");
    std::stringstream ptx;
    ptx << in.rdbuf();
    conversions[i] = ConversionsInAttentionEntry(ptx.str());
  }
  // A handful per tile (the tile's first row and column), not one per element.
  EXPECT_LE(conversions[0], 8) << "softcap_alibi";
  EXPECT_GE(conversions[1], 64) << "index_distance: the product keeps its per-element conversion";
  CleanUpTempDir(dir, HasFailure());
}

}  // namespace
}  // namespace cubridge::lower
