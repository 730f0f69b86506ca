#include "cuir/experts/expert.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <sstream>
#include <set>
#include <string>
#include <vector>

#include "cuir/files/files.h"
#include "cuir/lower/lift.h"
#include "cuir/pipeline/candidates.h"
#include "tests/lower/lower_test_util.h"

namespace cubridge::experts {
namespace {

using ::testing::HasSubstr;

cuir::AttentionConfig Config(int64_t head_dim, int64_t seqlen) {
  cuir::AttentionConfig c;
  c.head_dim = head_dim;
  c.seqlen_q = c.seqlen_kv = seqlen;
  return c;
}

TEST(Registry, EveryArchHasOneExpertWhoseFolderHoldsItsKernelAndBaseProgram) {
  std::set<lower::Arch> archs;
  for (const Expert* e : Registry()) {
    EXPECT_TRUE(archs.insert(e->arch).second) << e->name << ": a second expert for its arch";
    const std::filesystem::path folder =
        std::filesystem::path(CUBRIDGE_SOURCE_ROOT) / "cuir" / "experts" / e->name;
    EXPECT_TRUE(std::filesystem::exists(folder / "kernel.cu")) << folder;
    EXPECT_TRUE(std::filesystem::exists(folder / "base.cuir")) << folder;
    EXPECT_TRUE(lower::LiftExpert(e->name).ok()) << e->name;
    EXPECT_FALSE(CandidateTiles(Config(128, 1024), e->arch).empty()) << e->name;
  }
  for (const lower::Arch arch : {lower::Arch::kSm80, lower::Arch::kSm90}) {
    EXPECT_EQ(ExpertFor(arch).arch, arch);
  }
  EXPECT_STREQ(ExpertFor(lower::Arch::kSm90).name, "fa3_sm90");
  EXPECT_STREQ(ExpertFor(lower::Arch::kSm80).name, "fa2_sm80");
}

// Where each region marker of an expert's kernel.cu sits: the scopes around it, outermost first
// ("namespace", "type NAME", or "code HEAD" for a function or block with the text before its
// brace). A small brace tracker: comments are dropped, and the expert's code has no braces in
// strings.
struct Scope {
  std::string kind, head;
};
std::vector<std::pair<std::string, std::vector<Scope>>> RegionScopes(const std::string& text) {
  std::vector<std::pair<std::string, std::vector<Scope>>> out;
  std::vector<Scope> open;
  std::string head;  // the text since the last ';', '{' or '}'
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (const size_t m = line.find("// @cuir-region "); m != std::string::npos) {
      out.push_back({line.substr(m + 16), open});
    }
    const std::string code = line.substr(0, line.find("//"));
    if (code.find_first_not_of(" \t") != std::string::npos && code[code.find_first_not_of(" \t")] == '#') {
      continue;  // preprocessor lines
    }
    for (const char c : code) {
      if (c == '{') {
        std::smatch type;
        if (std::regex_search(head, std::regex(R"(\bnamespace\b|extern "C")"))) {
          open.push_back({"namespace", head});
        } else if (std::regex_search(head, type, std::regex(R"(\b(?:struct|class|union)\s+(\w+))")) &&
                   head.find('(') == std::string::npos) {
          open.push_back({"type", type[1]});
        } else {
          open.push_back({"code", head});
        }
        head.clear();
      } else if (c == '}') {
        if (!open.empty()) open.pop_back();
        head.clear();
      } else if (c == ';') {
        head.clear();
      } else {
        head += c;
      }
    }
    head += ' ';
  }
  return out;
}

// Issue 28: a variant is code the expert calls at named hooks. No region sits inside a function
// of the kernel: each is at namespace scope, a member of a variant context (VariantCall, ...), or
// the body of one of a context's hooks (a member function). And the attention kernel's entry is
// short: the collectives hold the work.
TEST(Registry, EveryExpertKeepsItsRegionsOutOfTheKernelsFunctions) {
  for (const Expert* e : Registry()) {
    const std::filesystem::path path =
        std::filesystem::path(CUBRIDGE_SOURCE_ROOT) / "cuir" / "experts" / e->name / "kernel.cu";
    auto read = files::ReadFile(path.string());
    ASSERT_TRUE(read.ok()) << read.status();
    const std::string& text = *read;
    const auto regions = RegionScopes(text);
    EXPECT_GT(regions.size(), 10u) << path;
    for (const auto& [name, scopes] : regions) {
      std::string enclosing_type;
      for (const Scope& s : scopes) {
        if (s.kind == "code") {
          EXPECT_EQ(enclosing_type.rfind("Variant", 0), 0u)
              << e->name << ": region " << name << " is inside a function (" << s.head
              << ") that is no hook of a variant context";
          break;
        }
        enclosing_type = s.kind == "type" ? s.head : "";
      }
    }
    // The attention entry: from its __global__ line to the closing brace at column 0.
    const size_t entry = text.find("attn_fwd_kernel(");
    ASSERT_NE(entry, std::string::npos) << path;
    const size_t begin = text.rfind("__global__", entry), end = text.find("\n}\n", entry);
    ASSERT_NE(end, std::string::npos) << path;
    const auto lines = std::count(text.begin() + begin, text.begin() + end, '\n');
    EXPECT_LE(lines, 150) << e->name << ": the attention kernel's entry is " << lines << " lines";
  }
}

TEST(Tiles, CandidatesFitTheArchAndTheExpert) {
  for (int64_t d : {64, 128, 256}) {
    // sm_80: the mma.sync expert's tiles that fit an A100's shared memory.
    const auto tiles = CandidateTiles(Config(d, 1024), lower::Arch::kSm80);
    ASSERT_FALSE(tiles.empty());
    EXPECT_EQ(tiles.front().Name(), "128x64w4");  // the expert's own tile comes first
    for (const TileConfig& t : tiles) {
      EXPECT_LE((t.block_m + 2 * t.block_n) * d * 2, 163 * 1024) << t.Name();
      EXPECT_EQ(t.block_n % 16, 0);
    }
    // sm_90: the Hopper expert's tiles (three warpgroups), its own first except at head dim
    // 256, where the 80-key block measured faster; the 176-key score tile only where its S, P
    // and O fit a consumer's registers (head dim up to 128); two K/V stages only where that frees
    // room for a second Q buffer (head dim 128).
    std::vector<std::string> names;
    for (const TileConfig& t : CandidateTiles(Config(d, 1024), lower::Arch::kSm90)) {
      names.push_back(t.Name());
      EXPECT_TRUE(TileFits(t, Config(d, 1024), lower::Arch::kSm90).ok()) << t.Name();
    }
    const std::vector<std::string> want =
        d == 64    ? std::vector<std::string>{"128x128w12", "128x176w12", "128x64w12"}
        : d == 128 ? std::vector<std::string>{"128x128w12", "128x176w12", "128x128w12s2", "128x64w12"}
                   : std::vector<std::string>{"128x80w12", "128x128w12", "128x64w12"};
    EXPECT_EQ(names, want) << "d=" << d;
  }
  // 128x128 tiles of hdim 256 need 192 KiB: an A100 does not have it.
  auto has = [](const std::vector<TileConfig>& ts, const std::string& n) {
    for (const auto& t : ts) if (t.Name() == n) return true;
    return false;
  };
  EXPECT_FALSE(has(CandidateTiles(Config(256, 1024), lower::Arch::kSm80), "128x128w8"));
}

TEST(Tiles, NamesParseBackWithAndWithoutStages) {
  for (const std::string name : {"128x64w4", "128x128w12s2", "64x32w4s3"}) {
    auto t = ParseTile(name);
    ASSERT_TRUE(t.ok()) << name << ": " << t.status();
    EXPECT_EQ(t->Name(), name);
  }
  EXPECT_EQ(ParseTile("128x128w12s2")->stages, 2);
  EXPECT_EQ(ParseTile("128x128w12")->stages, 0);  // the program's own
  EXPECT_EQ(TileParams(*ParseTile("128x128w12s2")).at("STAGES"), 2);
  EXPECT_EQ(TileParams(*ParseTile("128x128w12")).count("STAGES"), 0u);
  for (const std::string bad : {"128x128w12s", "128x128w12s0", "128x128w12x2", "128x128w12s2 ", "128x128"}) {
    auto t = ParseTile(bad);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("BLOCK_MxBLOCK_NwWARPS[sSTAGES]")) << bad;
  }
  // Stages outside the Hopper kernel's 2 to 4, and any stages on the sm_80 expert (fixed there).
  const auto fits90 = TileFits(*ParseTile("128x128w12s5"), Config(128, 1024), lower::Arch::kSm90);
  ASSERT_FALSE(fits90.ok());
  EXPECT_THAT(std::string(fits90.message()), HasSubstr("stages 2 to 4"));
  const auto fits80 = TileFits(*ParseTile("128x64w4s3"), Config(128, 1024), lower::Arch::kSm80);
  ASSERT_FALSE(fits80.ok());
  EXPECT_THAT(std::string(fits80.message()), HasSubstr("the expert's own stages"));
}

TEST(Tiles, WithTileSetsTheParamsTheLoweringReads) {
  auto base = lower::testing::LoadTestProgram("causal");
  ASSERT_TRUE(base.ok()) << base.status();
  auto p = WithTile(*base, {64, 32, 4});
  ASSERT_TRUE(p.ok()) << p.status();
  auto k = lower::Lower(*p, cuir::AttentionConfig{}, lower::Arch::kSm80);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_THAT(k->cuda_source, HasSubstr("constexpr int BLOCK_M = 64;"));
  EXPECT_THAT(k->cuda_source, HasSubstr("constexpr int BLOCK_N = 32;"));
  // A tile that names its stages sets STAGES too; the Hopper expert lowers at it.
  auto hopper = lower::LiftExpert("fa3_sm90");
  ASSERT_TRUE(hopper.ok()) << hopper.status();
  auto two = WithTile(hopper->base, {128, 128, 12, 2});
  ASSERT_TRUE(two.ok()) << two.status();
  auto k90 = lower::Lower(*two, cuir::AttentionConfig{}, lower::Arch::kSm90);
  ASSERT_TRUE(k90.ok()) << k90.status();
  EXPECT_THAT(k90->cuda_source, HasSubstr("constexpr int STAGES = 2;"));
  // A kernel without one of the params: the error names it and what the kernel declares.
  cuir::Program bare = *base;
  std::erase_if(bare.stmts, [](const cuir::Stmt& s) {
    return s.kind == cuir::StmtKind::kParam && s.name == "WARPS";
  });
  auto missing = WithTile(bare, {64, 32, 4});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("has no param `WARPS`"));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("BLOCK_M, BLOCK_N"));
}

TEST(Tiles, ShapeClassesSeparateSeqlenBucketsAndLayouts) {
  cuir::AttentionConfig a = Config(128, 1024), b = Config(128, 8192), c = Config(128, 8192);
  c.heads_kv = 2;
  EXPECT_NE(ShapeClass(a), ShapeClass(b));
  EXPECT_NE(ShapeClass(b), ShapeClass(c));
  EXPECT_EQ(ShapeClass(b), "d128-bf16-mha-s>4k");
}

TEST(Candidates, TheFastestVerifiedWinsAndTheFirstOfEquals) {
  const nlohmann::json failed = {{"name", "a"}, {"passed", false}};
  const nlohmann::json verified = {{"name", "b"}, {"passed", true}};
  auto profiled = [](const char* name, double tflops) {
    return nlohmann::json{{"name", name}, {"passed", true}, {"profile", {{"tflops_kept", tflops}}}};
  };
  EXPECT_EQ(pipeline::CandidateScore(failed), -1);
  EXPECT_EQ(pipeline::CandidateScore(verified), 0);
  EXPECT_EQ(pipeline::CandidateScore(profiled("c", 412.5)), 412.5);
  EXPECT_EQ(pipeline::BestCandidate(nlohmann::json::array()), -1);
  EXPECT_EQ(pipeline::BestCandidate(nlohmann::json::array({failed})), -1);
  EXPECT_EQ(pipeline::BestCandidate(nlohmann::json::array({failed, verified})), 1);
  EXPECT_EQ(pipeline::BestCandidate(
                nlohmann::json::array({profiled("c", 300), failed, profiled("d", 410),
                                       profiled("e", 410)})),
            2);
}

}  // namespace
}  // namespace cubridge::experts
