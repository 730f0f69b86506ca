// End-to-end tests of `cubridge-cli adapt --local`: the real binary, run as a user would.
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cuir/files/files.h"

namespace {
namespace fs = std::filesystem;

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

RunResult RunCli(const std::string& args) {
  const std::string cmd = std::string(CUBRIDGE_CLI) + " " + args + " 2>&1";
  RunResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string Example(const std::string& name) {
  return std::string(CUBRIDGE_SOURCE_ROOT) + "/examples/specs/" + name;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "cubridge-cli-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { cubridge::files::RemoveTree(path_); }
  std::string operator/(const std::string& name) const { return (fs::path(path_) / name).string(); }

 private:
  std::string path_;
};

std::string WriteFile(const TempDir& dir, const std::string& name, const std::string& content) {
  const std::string path = dir / name;
  std::ofstream(path) << content;
  return path;
}

// ---------------------------------------------------------------------------------------------
// Every example variant, for the model head layouts and head dims the issue names.

struct HeadLayout {
  const char* name;
  int heads_q, heads_kv, head_dim;
};
constexpr HeadLayout kLayouts[] = {
    {"llama2_7b", 32, 32, 128},
    {"qwen25_72b", 64, 8, 128},
    {"llama31_405b", 128, 8, 128},
    {"hdim64", 16, 4, 64},
    {"hdim256", 8, 8, 256},
};

struct Variant {
  const char* file;
  const char* extra;  // flags that make the mask bite at the verification sizes
};
constexpr Variant kVariants[] = {
    {"full.py", ""},
    {"causal.py", ""},
    {"sliding_window.py", "--param window=70"},
    {"global_sliding_window.py", "--param window=50 --param global_tokens=20"},
    {"prefix_lm.py", "--param prefix=90"},
    {"block_causal.py", "--param block=48"},
    {"causal_document.py", ""},
    {"share_question.py", ""},
    {"relative_position.py", ""},
    {"alibi.py", ""},
    {"softcap.py", ""},
    {"alibi_window_softcap.py", "--param window=70"},
};

// Readable parameter names in ctest's output instead of byte dumps.
void PrintTo(const Variant& v, std::ostream* os) { *os << v.file << " " << v.extra; }
void PrintTo(const HeadLayout& l, std::ostream* os) {
  *os << l.name << " " << l.heads_q << "/" << l.heads_kv << "/" << l.head_dim;
}

class AdaptExample : public testing::TestWithParam<std::tuple<Variant, HeadLayout>> {};

TEST_P(AdaptExample, VerifiesOnCpuAndWritesOutputs) {
  const auto& [variant, layout] = GetParam();
  TempDir tmp;
  const std::string out = tmp / "out";
  auto r = RunCli("adapt " + Example(variant.file) + " --local --no-cache --batch 2" +
                  " --heads-q " + std::to_string(layout.heads_q) + " --heads-kv " +
                  std::to_string(layout.heads_kv) + " --head-dim " +
                  std::to_string(layout.head_dim) + " --seqlen-q 200 --seqlen-kv 333 " +
                  "--arch sm_80 --out " + out + " " + variant.extra);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* f : {"kernel.cuir", "kernel.cu", "kernel.h", "report.json"}) {
    EXPECT_TRUE(fs::exists(fs::path(out) / f)) << f << "\n" << r.output;
  }
  std::ifstream in(fs::path(out) / "report.json");
  auto report = nlohmann::json::parse(in);
  EXPECT_TRUE(report["verification"]["passed"].get<bool>());
  EXPECT_GE(report["verification"]["shapes"].size(), 3u);
  for (const auto& s : report["verification"]["shapes"]) {
    EXPECT_EQ(s["o"]["violations"].get<int64_t>(), 0);
    EXPECT_EQ(s["o"]["unwritten"].get<int64_t>(), 0);
    EXPECT_LT(s["o"]["max_abs"].get<double>(), s["o"]["atol"].get<double>() * 4);
  }
  for (const char* stage : {"[spec", "[lift", "[transfer", "[verify", "[lower", "[write"}) {
    EXPECT_NE(r.output.find(stage), std::string::npos) << stage << "\n" << r.output;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Examples, AdaptExample, testing::Combine(testing::ValuesIn(kVariants), testing::ValuesIn(kLayouts)),
    [](const testing::TestParamInfo<AdaptExample::ParamType>& info) {
      std::string name = std::get<0>(info.param).file;
      name = name.substr(0, name.find('.'));
      return name + "_" + std::get<1>(info.param).name;
    });

TEST(AdaptDtype, Fp16VerifiesWithTheTighterTolerance) {
  TempDir tmp;
  const std::string out = tmp / "out";
  auto r = RunCli("adapt " + Example("alibi_window_softcap.py") +
                  " --local --no-cache --dtype fp16 --heads-q 8 --heads-kv 2 --head-dim 64" +
                  " --seqlen-q 150 --seqlen-kv 260 --param window=40 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(fs::path(out) / "report.json");
  auto report = nlohmann::json::parse(in);
  EXPECT_EQ(report["config"]["dtype"], "fp16");
  for (const auto& s : report["verification"]["shapes"]) {
    EXPECT_LE(s["o"]["atol"].get<double>(), 2e-3);  // fp16 is checked tighter than bf16
    EXPECT_EQ(s["o"]["violations"].get<int64_t>(), 0);
  }
}

// ---------------------------------------------------------------------------------------------

TEST(AdaptCache, SecondIdenticalRunIsACacheHit) {
  TempDir tmp;
  const std::string common = "adapt " + Example("causal.py") + " --local --heads-q 4 --heads-kv 2" +
                             " --seqlen 100 --cache-dir " + (tmp / "cache");
  auto first = RunCli(common + " --out " + (tmp / "a"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(first.output.find("cache hit"), std::string::npos) << first.output;
  auto second = RunCli(common + " --out " + (tmp / "b"));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("cache hit"), std::string::npos) << second.output;
  std::ifstream a(tmp / "a/kernel.cu"), b(tmp / "b/kernel.cu");
  std::string sa((std::istreambuf_iterator<char>(a)), {}), sb((std::istreambuf_iterator<char>(b)), {});
  EXPECT_FALSE(sa.empty());
  EXPECT_EQ(sa, sb);
  // A different constant is a different variant: no hit.
  auto third = RunCli(common + " --out " + (tmp / "c") + " --scale 0.5");
  ASSERT_EQ(third.exit_code, 0) << third.output;
  EXPECT_EQ(third.output.find("cache hit"), std::string::npos) << third.output;
}

// One hash, two specs: the same math with its tensors named and declared otherwise. The second
// is served from the cache, and its report names the kernel's buffers (in the kernel's order)
// as the second spec does, so a caller binding tensors by name binds the right ones.
TEST(AdaptCache, AHitIsBoundToTheRequestersBufferNames) {
  TempDir tmp;
  const std::string a = WriteFile(tmp, "a.py", R"(
def score_mod(score, b, h, q_idx, kv_idx, slopes, bias):
    return score + slopes[h] * (kv_idx - q_idx) + bias[h]
)");
  const std::string b = WriteFile(tmp, "b.py", R"(
def score_mod(score, b, h, q_idx, kv_idx, offset, w):
    return score + w[h] * (kv_idx - q_idx) + offset[h]
)");
  const std::string common = " --local --heads-q 4 --heads-kv 2 --seqlen 64 --cache-dir " +
                             (tmp / "cache");
  auto names = [](const std::string& dir) {
    std::ifstream in(fs::path(dir) / "report.json");
    const auto report = nlohmann::json::parse(in);
    std::vector<std::string> out;
    for (const auto& buf : report["lowering"]["buffers"]) out.push_back(buf["name"]);
    return out;
  };
  auto first = RunCli("adapt " + a + common + " --buffer slopes=random:float32" +
                      " --buffer bias=random:float32 --out " + (tmp / "a"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(names(tmp / "a"), (std::vector<std::string>{"slopes", "bias"}));
  auto second = RunCli("adapt " + b + common + " --buffer w=random:float32" +
                       " --buffer offset=random:float32 --out " + (tmp / "b"));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("cache hit"), std::string::npos) << second.output;
  EXPECT_EQ(names(tmp / "b"), (std::vector<std::string>{"w", "offset"}));
}

TEST(AdaptTile, APinnedTileIsVerifiedAtItLoweredAtItAndCachedApart) {
  TempDir tmp;
  const std::string common = "adapt " + Example("causal.py") + " --local --arch sm_90" +
                             " --heads-q 4 --heads-kv 2 --seqlen 300 --cache-dir " + (tmp / "cache");
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  };
  auto pinned = RunCli(common + " --tile 128x176w12 --out " + (tmp / "a"));
  ASSERT_EQ(pinned.exit_code, 0) << pinned.output;
  EXPECT_NE(pinned.output.find("BLOCK_N = 176"), std::string::npos) << pinned.output;
  EXPECT_NE(slurp(tmp / "a/kernel.cuir").find("param BLOCK_N: int = 176"), std::string::npos);
  EXPECT_NE(slurp(tmp / "a/kernel.cu").find("constexpr int BLOCK_N = 176;"), std::string::npos);
  // The expert's own tile is another kernel: no hit on the pinned one.
  auto own = RunCli(common + " --out " + (tmp / "b"));
  ASSERT_EQ(own.exit_code, 0) << own.output;
  EXPECT_EQ(own.output.find("cache hit"), std::string::npos) << own.output;
  EXPECT_NE(slurp(tmp / "b/kernel.cu").find("constexpr int BLOCK_N = 128;"), std::string::npos);
  auto again = RunCli(common + " --tile 128x176w12 --out " + (tmp / "c"));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("cache hit"), std::string::npos) << again.output;
  EXPECT_EQ(slurp(tmp / "a/kernel.cu"), slurp(tmp / "c/kernel.cu"));
}

// ---------------------------------------------------------------------------------------------
// The backward kernel beside the forward's (issue 29).

nlohmann::json ReadReport(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "report.json");
  return nlohmann::json::parse(in);
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Learned slopes under a causal mask: the backward gets the score_mod's derivative, the slopes'
// gradient, and transposed causal ranges; verified on the CPU against the spec's autograd.
TEST(AdaptBackward, WritesAVerifiedBackwardKernelBesideTheForward) {
  TempDir tmp;
  const std::string spec = WriteFile(tmp, "slopes.py", R"(
def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx

def score_mod(score, b, h, q_idx, kv_idx, slopes):
    return score + slopes[h] * (kv_idx - q_idx)
)");
  const std::string common = "adapt " + spec + " --local --heads-q 4 --heads-kv 2 --seqlen 100" +
                             " --arch sm_90 --buffer slopes=random:float32 --cache-dir " +
                             (tmp / "cache");
  auto r = RunCli(common + " --out " + (tmp / "a"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[backward"), std::string::npos) << r.output;
  for (const char* f : {"kernel_bwd.cuir", "kernel_bwd.cu", "kernel_bwd.h"}) {
    EXPECT_TRUE(fs::exists(fs::path(tmp / "a") / f)) << f << "\n" << r.output;
  }
  const auto report = ReadReport(tmp / "a");
  const auto& backward = report["backward"];
  ASSERT_TRUE(backward["available"].get<bool>()) << backward.dump(2);
  // sm_90 at head dim 128: the Hopper backward expert.
  EXPECT_EQ(backward["expert"], "fa3_sm90");
  EXPECT_EQ(backward["grad_buffers"], nlohmann::json::array({"slopes"}));
  EXPECT_TRUE(backward["verification"]["passed"].get<bool>());
  for (const auto& shape : backward["verification"]["shapes"]) {
    for (const char* grad : {"dq", "dk", "dv", "slopes"}) {
      EXPECT_EQ(shape["grads"][grad]["violations"].get<int64_t>(), 0) << grad;
    }
  }
  std::vector<std::string> rules;
  for (const auto& rule : backward["transfer"]) rules.push_back(rule["rule"]);
  EXPECT_NE(std::find(rules.begin(), rules.end(), "score.derivative"), rules.end())
      << backward["transfer"].dump();
  for (const char* role : {"plan", "preprocess", "attention", "postprocess"}) {
    EXPECT_TRUE(backward["entries"].contains(role)) << role;
  }
  std::ifstream cu(fs::path(tmp / "a") / "kernel_bwd.cu");
  const std::string source((std::istreambuf_iterator<char>(cu)), {});
  EXPECT_NE(source.find("grad_run.add(*this, 0, cuir_grad_offset("), std::string::npos);

  // The second run is a cache hit with the backward; a forward-only run takes the same kernel.
  auto hit = RunCli(common + " --out " + (tmp / "b"));
  ASSERT_EQ(hit.exit_code, 0) << hit.output;
  EXPECT_NE(hit.output.find("cache hit"), std::string::npos) << hit.output;
  EXPECT_TRUE(fs::exists(fs::path(tmp / "b") / "kernel_bwd.cu"));
  auto off = RunCli(common + " --backward off --out " + (tmp / "c"));
  ASSERT_EQ(off.exit_code, 0) << off.output;
  EXPECT_NE(off.output.find("cache hit"), std::string::npos) << off.output;
}

TEST(AdaptBackward, OffMakesNoneAndAForwardOnlyCacheEntryIsRedoneForABackward) {
  TempDir tmp;
  const std::string common = "adapt " + Example("causal.py") + " --local --heads-q 2 --heads-kv 2" +
                             " --seqlen 64 --cache-dir " + (tmp / "cache");
  auto off = RunCli(common + " --backward off --out " + (tmp / "a"));
  ASSERT_EQ(off.exit_code, 0) << off.output;
  EXPECT_EQ(off.output.find("[backward"), std::string::npos) << off.output;
  EXPECT_FALSE(fs::exists(fs::path(tmp / "a") / "kernel_bwd.cu"));
  EXPECT_FALSE(ReadReport(tmp / "a").contains("backward"));
  auto require = RunCli(common + " --backward require --out " + (tmp / "b"));
  ASSERT_EQ(require.exit_code, 0) << require.output;
  EXPECT_EQ(require.output.find("cache hit"), std::string::npos) << require.output;
  EXPECT_TRUE(ReadReport(tmp / "b")["backward"]["available"].get<bool>());
  EXPECT_TRUE(fs::exists(fs::path(tmp / "b") / "kernel_bwd.cu"));
  auto bad = RunCli(common + " --backward sometimes --out " + (tmp / "c"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--backward sometimes: accepted values are auto"), std::string::npos)
      << bad.output;
  EXPECT_FALSE(fs::exists(tmp / "c"));
}

// Head dim 256 gets a backward kernel at the expert's narrower backward tile (32 x 64 on sm_80:
// two warps per 16 keys, each half of dK's and dV's columns), CPU-verified; the lowered kernel
// carries that tile. (A spec whose backward the pipeline cannot make is explained or refused:
// tests/propose/llm_proposer_test.cc, the sink spec.)
TEST(AdaptBackward, HeadDim256GetsABackwardAtItsOwnTile) {
  TempDir tmp;
  auto r = RunCli("adapt " + Example("causal.py") + " --local --no-cache --heads-q 2" +
                  " --heads-kv 1 --head-dim 256 --seqlen 64 --backward require --out " +
                  (tmp / "a"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto backward = ReadReport(tmp / "a")["backward"];
  ASSERT_TRUE(backward["available"].get<bool>()) << backward.dump();
  EXPECT_EQ(backward["expert"], "fa2_sm80");
  EXPECT_EQ(backward["tile"], "32x64w8");
  EXPECT_TRUE(backward["verification"]["passed"].get<bool>());
  const std::string cu = ReadText(tmp / "a/kernel_bwd.cu");
  EXPECT_NE(cu.find("constexpr int BLOCK_M = 32;"), std::string::npos);
  EXPECT_NE(cu.find("constexpr int BLOCK_N = 64;"), std::string::npos);
  const std::string cuir = ReadText(tmp / "a/kernel_bwd.cuir");
  EXPECT_NE(cuir.find("param BLOCK_N: int = 64"), std::string::npos) << cuir;
}

// ---------------------------------------------------------------------------------------------
// Bad input: what and where, non-zero exit, nothing written.

struct BadInput {
  const char* name;
  const char* spec_source;  // null = use `spec_path` as is
  const char* spec_path;
  const char* flags;
  const char* expect_in_message;
};

constexpr BadInput kBadInputs[] = {
    {"syntax_error", "import torch\n\ndef mask_mod(b, h, q_idx, kv_idx):\n    return (q_idx >= kv_idx\n",
     nullptr, "", "spec.py:"},
    {"unsupported_op", "def mask_mod(b, h, q_idx, kv_idx):\n    return torch.lgamma(q_idx) > 0\n",
     nullptr, "", "spec.py:2:"},
    {"wrong_signature", "def mask_mod(b, q_idx, kv_idx):\n    return q_idx >= kv_idx\n", nullptr,
     "", "mask_mod"},
    {"mask_not_bool", "def mask_mod(b, h, q_idx, kv_idx):\n    return q_idx - kv_idx\n", nullptr, "",
     "bool"},
    {"score_wrong_shape",
     "def score_mod(score, b, h, q_idx, kv_idx):\n    return score.sum()\n", nullptr, "",
     "spec.py:2:"},
    {"heads_do_not_divide", nullptr, "causal.py", "--heads-q 6 --heads-kv 4", "heads-q (6)"},
    {"zero_size", nullptr, "causal.py", "--seqlen-q 0", "seqlen-q"},
    {"negative_size", nullptr, "causal.py", "--batch -2", "batch"},
    {"unknown_arch", nullptr, "causal.py", "--arch sm_75", "sm_75"},
    {"missing_file", nullptr, "does_not_exist.py", "", "does_not_exist.py"},
    {"unknown_param", nullptr, "sliding_window.py", "--param windw=3", "windw"},
    {"malformed_tile", nullptr, "causal.py", "--tile 128x176", "BLOCK_MxBLOCK_NwWARPS"},
    {"tile_and_tiles", nullptr, "causal.py", "--tile 128x176w12 --tiles 128x64w12",
     "pass one of them"},
    {"tile_the_expert_cannot_run", nullptr, "causal.py", "--tile 128x176w12",
     "does not fit expert fa2_sm80"},
    {"tile_the_hopper_expert_cannot_run", nullptr, "causal.py", "--arch sm_90 --tile 128x96w12",
     "does not fit expert fa3_sm90"},
};

void PrintTo(const BadInput& b, std::ostream* os) { *os << b.name; }

class AdaptBadInput : public testing::TestWithParam<BadInput> {};

TEST_P(AdaptBadInput, FailsClearlyAndWritesNothing) {
  const BadInput& bad = GetParam();
  TempDir tmp;
  const std::string spec =
      bad.spec_source ? WriteFile(tmp, "spec.py", bad.spec_source) : Example(bad.spec_path);
  const std::string out = tmp / "out";
  auto r = RunCli("adapt " + spec + " --local --heads-q 4 --heads-kv 4 --seqlen 64 --cache-dir " +
                  (tmp / "cache") + " --out " + out + " " + bad.flags);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(bad.expect_in_message), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out)) << "output directory was created for a failed run";
  EXPECT_FALSE(fs::exists(tmp / "cache") && !fs::is_empty(tmp / "cache"))
      << "a failed run wrote to the cache";
}

INSTANTIATE_TEST_SUITE_P(Errors, AdaptBadInput, testing::ValuesIn(kBadInputs),
                         [](const testing::TestParamInfo<BadInput>& info) {
                           return std::string(info.param.name);
                         });

TEST(AdaptBadInput, UnreadableFile) {
  if (geteuid() == 0) {
    // root reads any file regardless of mode; a directory is unreadable as a spec for everyone.
    TempDir tmp;
    fs::create_directory(tmp / "dir.py");
    auto r = RunCli("adapt " + (tmp / "dir.py") + " --local --out " + (tmp / "out"));
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("dir.py"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(tmp / "out"));
    return;
  }
  TempDir tmp;
  const std::string spec = WriteFile(tmp, "spec.py", "def mask_mod(b, h, q, kv):\n    return q >= kv\n");
  fs::permissions(spec, fs::perms::none);
  auto r = RunCli("adapt " + spec + " --local --out " + (tmp / "out"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("spec.py"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(tmp / "out"));
}

TEST(AdaptBadInput, FailureLeavesEarlierOutputsIntact) {
  TempDir tmp;
  const std::string out = tmp / "out";
  auto ok = RunCli("adapt " + Example("causal.py") + " --local --no-cache --heads-q 2 --heads-kv 2" +
                   " --seqlen 64 --out " + out);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  std::ifstream before_in(out + "/kernel.cu");
  std::string before((std::istreambuf_iterator<char>(before_in)), {});
  const std::string bad = WriteFile(tmp, "bad.py", "def mask_mod(b, h, q_idx, kv_idx):\n    return q_idx\n");
  auto r = RunCli("adapt " + bad + " --local --no-cache --out " + out);
  EXPECT_NE(r.exit_code, 0);
  std::ifstream after_in(out + "/kernel.cu");
  std::string after((std::istreambuf_iterator<char>(after_in)), {});
  EXPECT_EQ(before, after);
}

}  // namespace
