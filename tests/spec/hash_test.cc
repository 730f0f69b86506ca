// The spec hash identifies what a kernel computes: presentation changes keep it, any change in
// the math, the kernel-relevant config or the ruleset changes it.
#include "spec_test_util.h"

namespace cubridge::spec {
namespace {

using ::testing::HasSubstr;

constexpr const char* kRules = "rules-1";

cuir::AttentionConfig Config() {
  cuir::AttentionConfig c;
  c.heads_q = 32;
  c.heads_kv = 8;
  c.head_dim = 128;
  return c;
}

std::string Hash(const std::string& source, const cuir::AttentionConfig& c = Config(),
                 const std::string& rules = kRules) {
  auto spec = LoadSpecSource(source, "h.py");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? SpecHash(*spec, c, rules) : "";
}

const char* kWindow =
    "def mask_mod(b, h, q_idx, kv_idx, doc, window: int = 256):\n"
    "    return (q_idx >= kv_idx) & (q_idx - kv_idx <= window) & (doc[q_idx] == doc[kv_idx])\n";

TEST(SpecHash, IsHexSha256) {
  const std::string h = Hash(kWindow);
  ASSERT_EQ(h.size(), 64u);
  EXPECT_EQ(h.find_first_not_of("0123456789abcdef"), std::string::npos) << h;
}

TEST(SpecHash, PresentationDoesNotMatter) {
  // Renamed arguments, buffer and helper variable, comments, blank lines, imports, a docstring.
  const std::string restyled =
      "\"\"\"Same mask.\"\"\"\nimport torch\n\n"
      "def mask_mod(batch, head, q, k, ids, window=256):\n"
      "    # causal, windowed, same document\n"
      "    causal = q >= k\n"
      "    return causal & (q - k <= window) & (ids[q] == ids[k])   # done\n";
  EXPECT_EQ(Hash(kWindow), Hash(restyled));
}

TEST(SpecHash, ParamValuesAreSubstitutedSoTheirNamesDoNotMatter) {
  std::string renamed = kWindow;
  renamed.replace(renamed.find("window: int"), 6, "w");
  renamed.replace(renamed.find("<= window"), 9, "<= w");
  EXPECT_EQ(Hash(kWindow), Hash(renamed));
}

TEST(SpecHash, ConstantsAndParamValuesChangeIt) {
  std::string other_default = kWindow;
  other_default.replace(other_default.find("256"), 3, "128");
  EXPECT_NE(Hash(kWindow), Hash(other_default));

  auto spec = LoadSpecSource(kWindow, "h.py");
  ASSERT_TRUE(spec.ok());
  const std::string before = SpecHash(*spec, Config(), kRules);
  ASSERT_TRUE(OverrideParams(*spec, {"window=128"}).ok());
  EXPECT_EQ(SpecHash(*spec, Config(), kRules), Hash(other_default));
  EXPECT_NE(SpecHash(*spec, Config(), kRules), before);

  std::string strict = kWindow;
  strict.replace(strict.find(">="), 2, "> ");
  EXPECT_NE(Hash(kWindow), Hash(strict));
}

TEST(SpecHash, KernelRelevantConfigAndRulesetChangeIt) {
  const std::string base = Hash(kWindow);
  auto with = [](auto change) {
    cuir::AttentionConfig c = Config();
    change(c);
    return Hash(kWindow, c);
  };
  EXPECT_NE(base, with([](auto& c) { c.head_dim = 64; }));
  EXPECT_NE(base, with([](auto& c) { c.dtype = cuir::DType::kFP16; }));
  EXPECT_NE(base, with([](auto& c) { c.heads_q = 64; }));
  EXPECT_NE(base, with([](auto& c) { c.heads_kv = 4; }));
  EXPECT_NE(base, with([](auto& c) { c.softmax_scale = 0.1; }));
  EXPECT_NE(base, Hash(kWindow, Config(), "rules-2"));
  // Shapes the kernel takes at run time do not.
  EXPECT_EQ(base, with([](auto& c) { c.seqlen_q = 4096; }));
  EXPECT_EQ(base, with([](auto& c) { c.batch = 3; }));
  // The default scale and the same scale given explicitly are the same kernel.
  EXPECT_EQ(base, with([](auto& c) { c.softmax_scale = 1.0 / std::sqrt(128.0); }));
}

TEST(SpecHash, MaskAndScoreModAreDistinguished) {
  EXPECT_NE(Hash("def mask_mod(b, h, q_idx, kv_idx):\n    return q_idx >= kv_idx\n"),
            Hash("def mask_mod(b, h, q_idx, kv_idx):\n    return q_idx >= kv_idx\n"
                 "def score_mod(score, b, h, q_idx, kv_idx):\n    return score\n"));
}

TEST(CanonicalForm, ShowsSubstitutedParamsRenamedBuffersAndConfig) {
  auto spec = LoadSpecSource(kWindow, "h.py");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string form = CanonicalForm(*spec, Config(), kRules);
  EXPECT_THAT(form, HasSubstr("ruleset rules-1\n"));
  EXPECT_THAT(form, HasSubstr("head_dim 128\ndtype bf16\nheads_q 32\nheads_kv 8\nscale "));
  EXPECT_THAT(form, HasSubstr(
      "mask q_idx >= kv_idx && q_idx - kv_idx <= 256 && buf0[q_idx] == buf0[kv_idx]\n"));
  EXPECT_THAT(form, HasSubstr("score none\n"));
  EXPECT_EQ(form.find("window"), std::string::npos);
  EXPECT_EQ(form.find("doc"), std::string::npos);
}

TEST(CanonicalForm, DocumentedExample) {
  // The example of docs/spec.md; its hash was computed with `sha256sum` from the text.
  auto spec = LoadSpecSource(kWindow, "h.py");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(CanonicalForm(*spec, Config(), kRules),
            "cubridge-spec 1\nruleset rules-1\nhead_dim 128\ndtype bf16\nheads_q 32\n"
            "heads_kv 8\nscale 0.088388347648318433\nmask q_idx >= kv_idx && q_idx - kv_idx <= "
            "256 && buf0[q_idx] == buf0[kv_idx]\nscore none\nbuffers 1\nbuffer buf0 int32 rank 1\n");
  EXPECT_EQ(SpecHash(*spec, Config(), kRules),
            "f6f1329073505b5ef7a83a6e74a2d1d13ef328fde7a7e33c1a9a5646b5fb6357");
}

TEST(CanonicalForm, BuffersAreNumberedByFirstUse) {
  auto spec = LoadSpecSource(
      "def mask_mod(b, h, q_idx, kv_idx, a, z):\n    return z[q_idx] <= a[kv_idx]\n", "h.py");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(CanonicalForm(*spec, Config(), kRules),
              HasSubstr("mask buf0[q_idx] <= buf1[kv_idx]\n"));
}

// The names a kernel cached for one spec is bound to another's tensors by: the canonical form's,
// by first use (not by declaration), unused ones last.
TEST(CanonicalBufferNames, FollowFirstUseAndPutUnusedOnesLast) {
  auto spec = LoadSpecSource(
      "def mask_mod(b, h, q_idx, kv_idx, unused, a, z):\n    return z[q_idx] <= a[kv_idx]\n",
      "h.py");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(CanonicalBufferNames(*spec),
            (std::map<std::string, std::string>{{"z", "buf0"}, {"a", "buf1"}, {"unused", "buf2"}}));
}

}  // namespace
}  // namespace cubridge::spec
