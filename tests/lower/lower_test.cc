// Lowering of hand-written transferred programs: which regions are generated, what the generated
// code says, and the errors for programs the expert cannot express.
#include "cuir/lower/lower.h"
#include "cuir/lower/lift.h"
#include "cuir/lower/plan.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/lower/lower_test_util.h"

namespace cubridge::lower {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::LoadTestProgram;

// Every region of the fa2_sm80 expert, as docs/lowering.md lists them.
const std::set<std::string> kAllRegions = {
    "abi",          "tile_params", "variant_consts", "table_kernel", "workspace",
    "buffer_check", "variant_bind", "head_map",      "head_check",   "program_lets", "kv_range",
    "kv_loop",      "block_class", "qk_scale",       "score_mod",    "mask",
    "epilogue_sink", "epilogue_rows", "tile_stream",  "stream_coords"};

LoweredKernel LowerOrDie(const std::string& name, Arch arch = Arch::kSm80) {
  auto program = LoadTestProgram(name);
  EXPECT_TRUE(program.ok()) << program.status();
  auto lowered = Lower(*program, cuir::AttentionConfig{}, arch);
  EXPECT_TRUE(lowered.ok()) << name << ": " << lowered.status();
  return lowered.ok() ? *lowered : LoweredKernel{};
}

std::set<std::string> AsSet(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

std::string RegionText(const LoweredKernel& k, const std::string& region) {
  return testing::RegionText(k.cuda_source, region);
}

struct RegionCase {
  std::string program;
  std::set<std::string> generated;
};

class RegionSelection : public ::testing::TestWithParam<RegionCase> {};

// The constructs each transfer changes decide the generated regions; the rest is copied.
TEST_P(RegionSelection, GeneratesExactlyTheChangedConstructs) {
  const RegionCase& c = GetParam();
  for (Arch arch : {Arch::kSm80, Arch::kSm90}) {
    const LoweredKernel k = LowerOrDie(c.program, arch);
    EXPECT_EQ(AsSet(k.generated_regions), c.generated) << c.program << " " << ArchName(arch);
    std::set<std::string> copied;
    std::set_difference(kAllRegions.begin(), kAllRegions.end(), c.generated.begin(),
                        c.generated.end(), std::inserter(copied, copied.end()));
    EXPECT_EQ(AsSet(k.copied_regions), copied) << c.program << " " << ArchName(arch);
    EXPECT_EQ(k.entry_point, "cubridge_attn_fwd");
  }
}

const std::set<std::string> kTableRegions = {"table_kernel", "workspace", "buffer_check",
                                             "variant_bind", "kv_range",  "kv_loop", "mask"};

INSTANTIATE_TEST_SUITE_P(
    Programs, RegionSelection,
    ::testing::Values(
        RegionCase{"base", {}},
        RegionCase{"causal", {"kv_range", "block_class", "mask"}},
        RegionCase{"sliding_window", {"variant_consts", "kv_range", "block_class", "mask"}},
        RegionCase{"global_window", {"variant_consts", "kv_range", "block_class", "mask"}},
        RegionCase{"document", kTableRegions}, RegionCase{"document_batched", kTableRegions},
        RegionCase{"softcap_alibi",
                   {"variant_consts", "program_lets", "score_mod", "epilogue_rows"}},
        RegionCase{"gqa", {"head_map", "head_check"}},
        RegionCase{"sink", {"variant_consts", "head_map", "head_check", "epilogue_sink"}},
        RegionCase{"row_terms", {"program_lets", "score_mod", "epilogue_rows"}},
        RegionCase{"renamed_symbols",
                   {"tile_params", "variant_consts", "buffer_check", "variant_bind", "kv_range",
                    "block_class", "mask"}}),
    [](const auto& info) { return info.param.program; });

TEST(Lower, BaseProgramIsTheExpertSourceVerbatim) {
  const LoweredKernel k = LowerOrDie("base");
  EXPECT_THAT(RegionText(k, "kv_range"),
              HasSubstr("const KvUnion<1> kv_blocks = {{0}, {cuir_cdiv(seqlen_kv, BLOCK_N)}};"));
  EXPECT_THAT(RegionText(k, "head_map"), HasSubstr("const int kv_h = h;"));
  EXPECT_EQ(RegionText(k, "mask"), "");
  // Local includes are inlined: the lowered kernel is one translation unit.
  EXPECT_THAT(k.cuda_source, HasSubstr("cuir_floordiv"));
  EXPECT_THAT(k.cuda_source, Not(HasSubstr("#include \"")));
}

TEST(Lower, CausalMasksOnlyPartialBlocksAndStopsAtTheDiagonal) {
  const LoweredKernel k = LowerOrDie("causal");
  EXPECT_THAT(RegionText(k, "kv_range"),
              HasSubstr("KvUnion<1> kv_blocks = {{0}, {cuir_min<int>(cuir_cdiv<int>(seqlen_kv, "
                        "BLOCK_N), cuir_cdiv<int>(q_hi, BLOCK_N))}};"));
  EXPECT_THAT(RegionText(k, "block_class"), HasSubstr("const bool full = ((kv_hi - 1) <= q_lo);"));
  const std::string mask = RegionText(k, "mask");
  EXPECT_THAT(mask, HasSubstr("if ((!full)) {"));
  EXPECT_THAT(mask, HasSubstr("if (!(q_idx >= kv_idx)) score = -INFINITY;"));
  // The mask reads no score, the lambda still receives it by reference.
  EXPECT_THAT(mask, HasSubstr("float& score"));
}

TEST(Lower, UnionRangeListsEveryInterval) {
  const LoweredKernel k = LowerOrDie("global_window");
  EXPECT_THAT(RegionText(k, "kv_range"),
              HasSubstr("KvUnion<2> kv_blocks = {{0, cuir_max<int>(0, cuir_floordiv<int>((q_lo - "
                        "W), BLOCK_N))}, {"));
  EXPECT_THAT(RegionText(k, "variant_consts"),
              AllOf(HasSubstr("constexpr int W = 256;"), HasSubstr("constexpr int G = 64;")));
}

TEST(Lower, ScoreModsRunInProgramOrderWithFloatConsts) {
  const LoweredKernel k = LowerOrDie("softcap_alibi");
  const std::string mods = RegionText(k, "score_mod");
  const size_t softcap = mods.find("score = (cap * cuir_tanh((score * invariant)));");
  const size_t alibi = mods.find("score = (score + (kv_f * invariant_2));");
  ASSERT_NE(softcap, std::string::npos) << mods;
  ASSERT_NE(alibi, std::string::npos) << mods;
  EXPECT_LT(softcap, alibi);
  // -8 * (h + 1) is an int product (64-bit), then true division by H.
  EXPECT_THAT(RegionText(k, "program_lets"),
              HasSubstr("cuir_div_f(static_cast<float>(((-8LL) * (h + 1))), static_cast<float>(H))"));
  EXPECT_THAT(RegionText(k, "variant_consts"), HasSubstr("constexpr float cap = 20.0f;"));
}

// BlockValuesOutsideTheWalk: a score_mod's block values that read nothing of the KV walk (the
// slope of the head, softcap's reciprocal) are declared once before the walk, in program_lets.
TEST(Lower, ScoreModInvariantsAreEvaluatedOncePerWorkTile) {
  const LoweredKernel k = LowerOrDie("softcap_alibi");
  const std::string mods = RegionText(k, "score_mod");
  const std::string lets = RegionText(k, "program_lets");
  ASSERT_THAT(mods, HasSubstr("const float /*q_f*/, const float kv_f, float& score)"));
  EXPECT_THAT(lets, HasSubstr("const float invariant_2 = exp2f("));
  EXPECT_THAT(mods, Not(HasSubstr("exp2f(")));
  // The index distance is taken in floats from the visitor's float indices (FloatIndices): no
  // int-to-float conversion per element. Its q_idx part moved to the LSE (SplitRowTerms).
  EXPECT_THAT(mods, HasSubstr("score = (score + (kv_f * invariant_2));"));
  EXPECT_THAT(mods, Not(HasSubstr("static_cast<float>((kv_idx - q_idx))")));
  // The softcap reads the score: only its divisor moves out of the element loop, as a reciprocal
  // (ReciprocalOfInvariantDivisors), so each element multiplies instead of dividing.
  EXPECT_THAT(lets, HasSubstr("const float invariant = cuir_div_f(1.0f, cap);"));
  EXPECT_THAT(mods, HasSubstr("score = (cap * cuir_tanh((score * invariant)));"));
  // A value of the block index stays in the walk, beside the slope that leaves it.
  for (Arch arch : {Arch::kSm80, Arch::kSm90}) {
    const LoweredKernel rows = LowerOrDie("row_terms", arch);
    EXPECT_THAT(RegionText(rows, "score_mod"),
                HasSubstr("const float invariant = static_cast<float>(n_block);"));
    EXPECT_THAT(RegionText(rows, "program_lets"), HasSubstr("const float invariant_2 = exp2f("));
    EXPECT_THAT(RegionText(rows, "program_lets"), Not(HasSubstr("static_cast<float>(n_block)")));
  }
  // A mask's block values stay under its `when`: prefix[b] is read on partial blocks only
  // (BlockInvariantPartsOfColumnValuesRunOncePerBlock).
  EXPECT_EQ(RegionText(LowerOrDie("document_batched"), "program_lets"), "");
}

// The region's text without the indentation of its first line, on every line.
std::string Unindented(const std::string& region) {
  const size_t indent = region.find_first_not_of(' ');
  std::string out;
  for (absl::string_view line : absl::StrSplit(region, '\n')) {
    absl::StrAppend(&out, line.substr(std::min({indent, line.find_first_not_of(' '), line.size()})),
                    "\n");
  }
  return out.substr(0, out.size() - 1);
}

// The lambda a region passes to `visitor(` ... `});`, or "" when there is none.
std::string LambdaBody(const std::string& region, const std::string& visitor) {
  const size_t a = region.find(visitor + "([&](");
  if (a == std::string::npos) return "";
  return region.substr(a, region.find("});", a) - a);
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A thread's 64 score elements lie on 4 query rows and 16 key columns: doc[q_idx] is read once
// per row into doc_q[MT][2], doc[kv_idx] once per column into doc_kv[NT][2], and the element
// loop reads registers only.
TEST(Lower, DocumentMaskReadsTheBufferOncePerRowAndColumn) {
  const LoweredKernel k = LowerOrDie("document");
  const std::string mask = Unindented(RegionText(k, "mask"));
  const std::string rows = LambdaBody(mask, "for_each_score_row");
  const std::string cols = LambdaBody(mask, "for_each_score_col");
  const std::string elements = LambdaBody(mask, "for_each_score_at");
  ASSERT_NE(elements, "") << mask;
  EXPECT_EQ(Count(elements, "cuir_ld("), 0u) << mask;
  EXPECT_THAT(elements, HasSubstr("if (!((q_idx >= kv_idx) & (doc_q[mt][r] == doc_kv[j][k]))) "
                                  "score = -INFINITY;"));
  EXPECT_THAT(mask, HasSubstr("int doc_q[MT][2];"));
  EXPECT_THAT(mask, HasSubstr("int doc_kv[NT][2];"));
  EXPECT_THAT(rows, HasSubstr("doc_q[mt][r] = cuir_ld(doc + q_idx);"));
  EXPECT_THAT(cols, HasSubstr("doc_kv[j][k] = cuir_ld(doc + kv_idx);"));
  EXPECT_EQ(Count(mask, "cuir_ld("), 2u) << mask;
  // Only partial blocks pay for the reads: they are inside the `when`.
  EXPECT_LT(mask.find("if ((!block_full)) {"), mask.find("doc_q[MT]"));
  // The expert keeps the slots of a ragged tile's missing rows / columns inside the buffers.
  EXPECT_THAT(k.cuda_source, HasSubstr("min(at.row(mt, r), q_hi - 1)"));
  EXPECT_THAT(k.cuda_source, HasSubstr("min(at.col(j, k), kv_hi - 1)"));
}

// doc[q_idx] alone and inside doc[q_idx] != 0: one read per row. The comparison reads that
// value in the element loop instead of holding a second array of registers through it.
TEST(Lower, ShareQuestionMaskReadsEachBufferOncePerRowAndColumn) {
  const LoweredKernel k = LowerOrDie("share_question");
  const std::string mask = Unindented(RegionText(k, "mask"));
  const std::string rows = LambdaBody(mask, "for_each_score_row");
  const std::string cols = LambdaBody(mask, "for_each_score_col");
  const std::string elements = LambdaBody(mask, "for_each_score_at");
  EXPECT_EQ(Count(elements, "cuir_ld("), 0u) << mask;
  EXPECT_EQ(Count(rows, "cuir_ld("), 1u) << mask;
  EXPECT_EQ(Count(cols, "cuir_ld("), 1u) << mask;
  EXPECT_THAT(rows, HasSubstr("doc_q[mt][r] = cuir_ld(doc + q_idx);"));
  EXPECT_THAT(cols, HasSubstr("doc_kv[j][k] = cuir_ld(doc + kv_idx);"));
  EXPECT_THAT(elements, HasSubstr("if (!(((doc_kv[j][k] == 0) & (doc_q[mt][r] != 0)) | "
                                  "((q_idx >= kv_idx) & (doc_q[mt][r] == doc_kv[j][k])))) "
                                  "score = -INFINITY;"));
  EXPECT_EQ(Count(mask, "[MT][2];"), 1u) << mask;
  EXPECT_EQ(Count(mask, "[NT][2];"), 1u) << mask;
}

// prefix[b] is the same for the whole block, inside a per-column comparison: read once per block,
// and the comparison with it stays in the element loop.
TEST(Lower, BlockInvariantPartsOfColumnValuesRunOncePerBlock) {
  const std::string mask = Unindented(RegionText(LowerOrDie("document_batched"), "mask"));
  EXPECT_THAT(mask, HasSubstr("if ((!block_full)) {\n  const int invariant = cuir_ld(prefix + b);\n"));
  // The row offset b * seqlen_kv too (any block-invariant operation is hoisted).
  EXPECT_THAT(mask, HasSubstr("const long long invariant_2 = (static_cast<long long>(b) * "
                              "seqlen_kv);\n"));
  // Hoisted, it keeps its range (b * seqlen_kv >= 0), so the read needs no negative-index wrap.
  EXPECT_THAT(LambdaBody(mask, "for_each_score_row"),
              HasSubstr("doc_q[mt][r] = cuir_ld(doc + (invariant_2 + q_idx));"));
  EXPECT_THAT(LambdaBody(mask, "for_each_score_at"),
              HasSubstr("if (!((doc_q[mt][r] == doc_kv[j][k]) | (kv_idx < invariant))) "
                        "score = -INFINITY;"));
  EXPECT_EQ(Count(mask, "cuir_ld("), 3u) << mask;
}

// Nothing in these masks is worth a register per row: they are emitted as before.
TEST(Lower, MasksWithoutCostlyRowOrColumnPartsKeepThePlainElementLoop) {
  for (const char* name : {"causal", "sliding_window", "global_window"}) {
    const std::string mask = RegionText(LowerOrDie(name), "mask");
    EXPECT_THAT(mask, HasSubstr("for_each_score([&](const int q_idx, const int kv_idx, float& "
                                "score) {"))
        << name;
    for (const char* absent : {"for_each_score_at", "for_each_score_row", "for_each_score_col",
                               "[MT][2]", "[NT][2]", "invariant"}) {
      EXPECT_THAT(mask, Not(HasSubstr(absent))) << name;
    }
  }
  const std::string causal = Unindented(RegionText(LowerOrDie("causal"), "mask"));
  EXPECT_EQ(causal.substr(causal.find('\n') + 1),
            "if ((!full)) {\n"
            "  for_each_score([&](const int q_idx, const int kv_idx, float& score) {\n"
            "    if (!(q_idx >= kv_idx)) score = -INFINITY;\n"
            "  });\n"
            "}\n");
}

TEST(Lower, BlockCausalDivisionsRunOncePerRowAndColumn) {
  auto program = LoadTestProgram("causal");
  ASSERT_TRUE(program.ok());
  const std::string text =
      absl::StrReplaceAll(cuir::PrintProgram(*program),
                          {{"mask S = q_idx >= kv_idx when",
                            "mask S = q_idx // 128 >= kv_idx // 128 when"}});
  auto variant = cuir::ParseProgram(text, "variant.cuir");
  ASSERT_TRUE(variant.ok()) << variant.status();
  auto k = Lower(*variant, cuir::AttentionConfig{}, Arch::kSm80);
  ASSERT_TRUE(k.ok()) << k.status();
  const std::string mask = Unindented(RegionText(*k, "mask"));
  EXPECT_THAT(LambdaBody(mask, "for_each_score_row"),
              HasSubstr("q_invariant[mt][r] = (q_idx >> 7);"));
  EXPECT_THAT(LambdaBody(mask, "for_each_score_col"),
              HasSubstr("kv_invariant[j][k] = (kv_idx >> 7);"));
  EXPECT_THAT(LambdaBody(mask, "for_each_score_at"),
              HasSubstr("const int /*q_idx*/, const int /*kv_idx*/, float& score) {\n"
                        "    if (!(q_invariant[mt][r] >= kv_invariant[j][k])) score = -INFINITY;"));
}

// FloatIndices: an int sum of indices and block values that meets a float is summed in floats
// from the visitors' float indices (each block value converted once); a product of indices is
// not a sum and keeps its per-element conversion.
TEST(Lower, IndexDistancesAreSummedInFloats) {
  for (Arch arch : {Arch::kSm80, Arch::kSm90}) {
    const LoweredKernel k = LowerOrDie("index_distance", arch);
    const std::string mods = Unindented(RegionText(k, "score_mod"));
    EXPECT_THAT(Unindented(RegionText(k, "program_lets")),
                HasSubstr("const float invariant = static_cast<float>((seqlen_q - "
                          "seqlen_kv));\n"));
    EXPECT_THAT(mods, HasSubstr("for_each_score([&](const int /*q_idx*/, const int /*kv_idx*/, "
                                "const float q_f, const float kv_f, float& score) {\n"
                                "  score = (score + (((kv_f - q_f) + invariant) * 0.25f));\n"));
    EXPECT_THAT(mods, HasSubstr("for_each_score([&](const int q_idx, const int kv_idx, "
                                "float& score) {\n"
                                "  score = (score - (static_cast<float>((static_cast<long long>(q_idx) * "
                                "kv_idx)) * 0.001f));\n"));
  }
}

TEST(Lower, RowTermsOfTheLastScoreModMoveToTheLse) {
  for (Arch arch : {Arch::kSm80, Arch::kSm90}) {
    const LoweredKernel k = LowerOrDie("row_terms", arch);
    const std::string mods = Unindented(RegionText(k, "score_mod"));
    const std::string rows = Unindented(RegionText(k, "epilogue_rows"));
    // The element adds the key's part only; the block term (n_block) stays with it.
    EXPECT_THAT(mods, HasSubstr("const float /*q_f*/, const float kv_f, float& score) {\n"
                                "  score = ((score + (kv_f * invariant_2)) + (invariant * 0.01f));\n"));
    // The row's part and the constant go to the LSE, once per row.
    EXPECT_THAT(rows, HasSubstr("shift_lse_rows([&](const int /*q_idx*/, const float q_f) -> float "
                                "{ return ((-(q_f * exp2f(cuir_div_f(((-8.0f) * static_cast<float>((h + 1))), "
                                "static_cast<float>(heads_q))))) + 0.5f); });\n"));
    EXPECT_EQ(Count(rows, "shift_lse_rows("), 1u) << rows;
  }
  // A sink's logit is compared with the scores as they are: nothing moves.
  for (Arch arch : {Arch::kSm80, Arch::kSm90}) {
    const LoweredKernel k = LowerOrDie("row_terms_sink", arch);
    EXPECT_THAT(AsSet(k.generated_regions), Not(Contains("epilogue_rows")));
    EXPECT_THAT(RegionText(k, "score_mod"), HasSubstr("(kv_f - q_f)"));
  }
}

// TermsBesideTheScore: on an expert with for_each_raw_score (fa3_sm90) the first score_mod of
// the form score + terms takes the raw score and the scale in one fma; a later one, a first one
// of another form (softcap), and an expert without the raw visitor (fa2_sm80) keep the scaled
// score.
LoweredKernel LowerOnHopperOrDie(const std::string& name) {
  auto moved = testing::LoadTestProgramOnHopper(name);
  EXPECT_TRUE(moved.ok()) << moved.status();
  if (!moved.ok()) return LoweredKernel{};
  auto k = Lower(*moved, cuir::AttentionConfig{}, Arch::kSm90);
  EXPECT_TRUE(k.ok()) << name << ": " << k.status();
  return k.ok() ? *k : LoweredKernel{};
}

// Column values hold registers through the element loop: the two transcendental ones stay in
// [NT][2] arrays, the cheap integer one goes back into the element expression; the const
// product window * window is bounded, so that column arithmetic is 32-bit shifts and masks, never
// long long. kernel.h and the report name the buffer slot.
TEST(Lower, ColumnValuesKeepTranscendentalsAndStayThirtyTwoBitWhereBounded) {
  const LoweredKernel k = LowerOrDie("column_values", Arch::kSm90);
  const std::string mod = Unindented(RegionText(k, "score_mod"));
  EXPECT_EQ(Count(mod, "[NT][2];"), 2u) << mod;
  EXPECT_THAT(LambdaBody(mod, "for_each_score_col"),
              HasSubstr("kv_invariant[j][k] = sinhf((static_cast<float>(kv_idx) * 0.001f));"));
  EXPECT_THAT(LambdaBody(mod, "for_each_score_col"),
              HasSubstr("kv_invariant_2[j][k] = coshf((static_cast<float>(kv_idx) * 0.002f));"));
  EXPECT_THAT(mod, HasSubstr("((kv_idx & 255) >> 4)"));
  EXPECT_THAT(mod, Not(HasSubstr("long long"))) << mod;
  ASSERT_EQ(k.buffers.size(), 1u);
  EXPECT_EQ(k.buffers[0].name, "w");
  EXPECT_EQ(k.buffers[0].dtype, "float32");
  EXPECT_THAT(k.buffers[0].extents, ElementsAre("heads_q"));
  EXPECT_THAT(k.launcher_header, HasSubstr("//   [0] w: float32[heads_q]\n"));
  EXPECT_THAT(LowerOrDie("causal").launcher_header, HasSubstr("// Captured tensors: none"));
}

// A per-head divisor (docs/lowering.md, "Divisors fixed over the element loop"): declared once
// with its multiplier, and the element's `%` and `//` by it multiply; a literal divisor keeps
// the plain form, whose multiply-high nvcc finds itself.
TEST(Lower, AHoistedRuntimeDivisorMultipliesInTheElement) {
  for (Arch arch : {Arch::kSm80, Arch::kSm90}) {
    const LoweredKernel k = LowerOrDie("head_dilation", arch);
    const std::string text =
        Unindented(RegionText(k, "mask")) + Unindented(RegionText(k, "score_mod")) +
        Unindented(RegionText(k, "program_lets"));
    EXPECT_THAT(text, HasSubstr("const int invariant = ((h & 3) + 1);\n"
                                "[[maybe_unused]] const cuir_divisor invariant_divisor = "
                                "cuir_divisor_of(invariant);\n"))
        << text;
    // The mask's divisor is its own block value (masks keep theirs inside the walk).
    EXPECT_THAT(text, HasSubstr("[[maybe_unused]] const cuir_divisor invariant_2_divisor = "
                                "cuir_divisor_of(invariant_2);\n"));
    EXPECT_THAT(text, HasSubstr("cuir_mod_by((q_idx - kv_idx), invariant_2_divisor) == 0"));
    EXPECT_THAT(text, HasSubstr("cuir_floordiv_by((q_idx - kv_idx), invariant_divisor)"));
    // A literal divisor's residue test: the divisibility form (q - kv - 1 stays within int).
    EXPECT_THAT(text, HasSubstr("(!cuir_divisible<3>(((q_idx - kv_idx) - 1)))"));
    EXPECT_THAT(text, Not(HasSubstr("cuir_mod_pos<int>((q_idx - kv_idx), invariant")));
  }
}

// A row or column value reads the block values inside it (the divisor of q_idx // (h % 4 + 1)),
// which may have more nodes than the value itself: they are declared before it all the same
// (share-hoisted sorts by size, block values first).
TEST(Lower, RowAndColumnValuesComeAfterTheBlockValuesTheyRead) {
  for (Arch arch : {Arch::kSm80, Arch::kSm90}) {
    const std::string mask = Unindented(RegionText(LowerOrDie("row_reads_block", arch), "mask"));
    const size_t block = mask.find("const int invariant = ((h & 3) + 1);\n");
    const size_t row = mask.find("q_invariant[mt][r] = cuir_udiv_by(q_idx, invariant_divisor);");
    const size_t col = mask.find("kv_invariant[j][k] = cuir_udiv_by(kv_idx, invariant_divisor);");
    ASSERT_NE(block, std::string::npos) << mask;
    ASSERT_NE(row, std::string::npos) << mask;
    ASSERT_NE(col, std::string::npos) << mask;
    EXPECT_LT(block, row) << mask;
    EXPECT_LT(block, col) << mask;
  }
}

// The Hopper expert's head-dim-64 instance takes 192-row tiles (kBlockM) only where the program
// has no block tables, whose rows are BLOCK_M-row blocks: the workspace region says which.
TEST(Lower, TheWorkspaceRegionSaysWhetherTheProgramHasBlockTables) {
  EXPECT_THAT(RegionText(LowerOnHopperOrDie("document"), "workspace"),
              HasSubstr("constexpr bool variant_has_tables() { return true; }"));
  const LoweredKernel causal = LowerOnHopperOrDie("causal");
  EXPECT_THAT(RegionText(causal, "workspace"),
              HasSubstr("constexpr bool variant_has_tables() { return false; }"));
  EXPECT_THAT(causal.cuda_source,
              HasSubstr("static constexpr int kBlockM = D == 64 && kTileN <= 128 && "
                        "!variant_has_tables() ? 192 : BLOCK_M;"));
}

// The Hopper scheduler takes small groups under MHA where every work tile walks the same KV
// blocks; the kv_walk region says which: the expert's own (true) where the program keeps the base
// range, false where it narrows the range or walks a block table. An expert without the region
// (fa2_sm80) is not told.
TEST(Lower, TheKvWalkRegionSaysWhetherEveryTileWalksTheWholeRange) {
  const std::string whole = "constexpr bool variant_kv_walk_is_whole() { return true; }";
  const std::string narrowed = "constexpr bool variant_kv_walk_is_whole() { return false; }";
  for (const char* name : {"causal", "sliding_window", "global_window", "document"}) {
    const LoweredKernel k = LowerOnHopperOrDie(name);
    EXPECT_THAT(RegionText(k, "kv_walk"), HasSubstr(narrowed)) << name;
    EXPECT_THAT(k.generated_regions, Contains("kv_walk")) << name;
  }
  for (const char* name : {"softcap_alibi", "position_scale", "gqa"}) {
    const LoweredKernel k = LowerOnHopperOrDie(name);
    EXPECT_THAT(RegionText(k, "kv_walk"), HasSubstr(whole)) << name;
    EXPECT_THAT(k.copied_regions, Contains("kv_walk")) << name;
  }
  auto causal = LoadTestProgram("causal");
  ASSERT_TRUE(causal.ok()) << causal.status();
  auto on_sm80 = Lower(*causal, cuir::AttentionConfig{}, Arch::kSm80);
  ASSERT_TRUE(on_sm80.ok()) << on_sm80.status();
  EXPECT_THAT(on_sm80->cuda_source, Not(HasSubstr("variant_kv_walk_is_whole")));
}

TEST(Lower, TheFirstScoreModTakesTheRawScoreWhereTheExpertOffersIt) {
  const std::string mods = Unindented(RegionText(LowerOnHopperOrDie("index_distance"), "score_mod"));
  EXPECT_THAT(mods, HasSubstr("for_each_raw_score([&](const int /*q_idx*/, const int /*kv_idx*/, "
                              "const float q_f, const float kv_f, float& score) {\n"
                              "  score = fmaf(score, qk_scale, (((kv_f - q_f) + invariant) * 0.25f));\n"));
  // The second score_mod reads the scaled score: the ordinary visitor scales the tile first.
  EXPECT_THAT(mods, HasSubstr("for_each_score([&](const int q_idx, const int kv_idx, float& score) {\n"
                              "  score = (score - (static_cast<float>((static_cast<long long>(q_idx) * "
                              "kv_idx)) * 0.001f));\n"));
  EXPECT_EQ(Count(mods, "for_each_raw_score"), 1u) << mods;
  // softcap first: not score + terms, so neither score_mod folds.
  const std::string softcap =
      RegionText(LowerOnHopperOrDie("softcap_alibi"), "score_mod");
  EXPECT_THAT(softcap, Not(HasSubstr("for_each_raw_score"))) << softcap;
  EXPECT_THAT(softcap, Not(HasSubstr("qk_scale"))) << softcap;
  // fa2_sm80 scales every score before the visitors: no raw visitor, no fold.
  EXPECT_THAT(RegionText(LowerOrDie("index_distance", Arch::kSm80), "score_mod"),
              Not(HasSubstr("for_each_raw_score")));
}

// KvTermFromTileStart: the only score_mod, score + terms linear in kv_idx, on an expert with
// for_each_raw_score_kv_split (fa3_sm90): the key terms count from the lane's first key, whose term
// the expert adds to the softmax's offset. Terms with anything else beside the key (a block
// term), a second score_mod, hoisted column values or an expert without the visitor: no split.
TEST(Lower, KeyTermsCountFromTheTilesFirstKeyWhereTheExpertOffersIt) {
  const std::string mods = Unindented(RegionText(LowerOnHopperOrDie("key_bias"), "score_mod"));
  EXPECT_THAT(mods, HasSubstr("for_each_raw_score_kv_split([&](const int /*q_idx*/, const int "
                              "/*kv_idx*/, const float /*q_f*/, const float kv_f, float& score) {\n"
                              "  score = fmaf(score, qk_scale, (-(kv_f * scale_2)));\n"))
      << mods;
  EXPECT_THAT(mods, HasSubstr("the tile's first key goes to the softmax's offset"));
  // The row part still goes to the LSE.
  EXPECT_THAT(RegionText(LowerOnHopperOrDie("key_bias"), "epilogue_rows"),
              HasSubstr("shift_lse_rows("));
  // ALiBi plus a block term (row_terms): the terms are not the key's alone.
  const std::string block = RegionText(LowerOnHopperOrDie("row_terms"), "score_mod");
  EXPECT_THAT(block, HasSubstr("for_each_raw_score(")) << block;
  EXPECT_THAT(block, Not(HasSubstr("_kv_split"))) << block;
  // Two score_mods: the second would read the stored, offset-less score.
  EXPECT_THAT(RegionText(LowerOnHopperOrDie("softcap_alibi"), "score_mod"),
              Not(HasSubstr("_kv_split")));
  EXPECT_THAT(RegionText(LowerOnHopperOrDie("index_distance"), "score_mod"),
              Not(HasSubstr("_kv_split")));
  // fa2_sm80 offers neither raw visitor.
  EXPECT_THAT(RegionText(LowerOrDie("key_bias", Arch::kSm80), "score_mod"),
              Not(HasSubstr("for_each_raw_score")));
}

TEST(Lower, ScoreModRowAndColumnPartsAreHoisted) {
  const LoweredKernel k = LowerOrDie("position_scale");
  const std::string mods = Unindented(RegionText(k, "score_mod"));
  // log2 runs once per row the thread owns; the element multiplies by the row's value.
  EXPECT_THAT(mods, HasSubstr("float q_invariant[MT][2];\n"
                              "for_each_score_row([&](const int mt, const int r, "
                              "const int q_idx) {\n"
                              "  q_invariant[mt][r] = cuir_log2((static_cast<float>(q_idx) + 2.0f));\n"
                              "});\n"));
  EXPECT_THAT(mods, HasSubstr("for_each_score_at([&](const int mt, const int r, const int /*j*/, "
                              "const int /*k*/, const int /*q_idx*/, const int /*kv_idx*/, "
                              "float& score) {\n  score = (score * q_invariant[mt][r]);\n"));
  // The product stays beside the sum (one fma, as before); only the read and its conversion move.
  EXPECT_THAT(mods, HasSubstr("kv_invariant[j][k] = static_cast<float>(cuir_ld(bias + kv_idx));"));
  EXPECT_THAT(mods, HasSubstr("score = (score + (kv_invariant[j][k] * 0.5f));"));
  EXPECT_EQ(Count(mods, "cuir_log2("), 1u) << mods;
}

TEST(Lower, GqaMapsQueryHeadsToKvHeadsWithFloorDivision) {
  const LoweredKernel k = LowerOrDie("gqa");
  // The plan refuses layouts the mapping cannot serve: the last query head must land on a kv head.
  EXPECT_THAT(RegionText(k, "head_check"),
              HasSubstr("static_cast<long long>(cuir_floordiv<int>((p.heads_q - 1), "
                        "cuir_floordiv<int>(p.heads_q, p.heads_kv))) < p.heads_kv;"));
  EXPECT_THAT(RegionText(k, "head_map"),
              HasSubstr("const int kv_h = cuir_floordiv<int>(h, cuir_floordiv<int>(heads_q, "
                        "heads_kv));"));
}

TEST(Lower, DocumentTableIsBuiltByAPreKernelAndReadByTheLoop) {
  const LoweredKernel k = LowerOrDie("document");
  const std::string bind = RegionText(k, "variant_bind");
  EXPECT_THAT(bind, HasSubstr("const int* __restrict__ const doc = static_cast<const int*>(p.buffers[0].data);"));
  EXPECT_THAT(bind, HasSubstr("const int* __restrict__ const T_2 = variant_table(p, workspace, 0);"));
  // Declarations only, so that an expert may hold them as members of its call's context.
  EXPECT_THAT(bind, Not(HasSubstr("variant_workspace(")));
  const std::string classify = RegionText(k, "table_kernel");
  EXPECT_THAT(classify, HasSubstr("__device__ __forceinline__ void T_classify("));
  EXPECT_THAT(classify,
              HasSubstr("((q_idx >= kv_idx) & (cuir_ld(doc + q_idx) == cuir_ld(doc + kv_idx)))"));
  // A tile above the diagonal is empty by its corners (tile_corners.h), which one thread a tile
  // settles before any CTA scans; the documents' test is left to the element-wise scan, so no
  // tile is called full by its corners.
  EXPECT_THAT(classify, HasSubstr("__device__ __forceinline__ bool T_decide("));
  EXPECT_THAT(classify, HasSubstr("return (q_idx >= kv_idx); };"));
  EXPECT_THAT(classify, HasSubstr("if (outside) {\n    table[T_rows(p) + "));
  EXPECT_THAT(classify, HasSubstr(" = 0;\n    return true;\n  }\n  return false;\n}\n"));
  EXPECT_THAT(classify, Not(HasSubstr("inside")));
  // The scan no longer repeats the verdict.
  const std::string scan = classify.substr(classify.find("void T_classify("));
  EXPECT_THAT(scan, Not(HasSubstr("outside")));
  // The declared length max(seqlen_q, seqlen_kv) is checked by the launch plan, before anything
  // is launched.
  const std::string check = RegionText(k, "buffer_check");
  EXPECT_THAT(check, HasSubstr("p.buffers[0].data == nullptr || p.buffers[0].dtype != 0 || "
                               "p.buffers[0].rank != 1"));
  EXPECT_THAT(check, HasSubstr("p.buffers[0].sizes[0] < static_cast<long long>(cuir_max<int>("
                               "p.seqlen_q, p.seqlen_kv))"));
  EXPECT_THAT(check, HasSubstr("p.buffers[0].strides[0] != 1"));
  const std::string workspace = RegionText(k, "workspace");
  EXPECT_THAT(workspace, HasSubstr("size_t variant_workspace("));
  EXPECT_THAT(workspace, HasSubstr("return T_decide(p, "));
  EXPECT_THAT(workspace, HasSubstr("return T_classify(p, "));
  EXPECT_THAT(workspace, HasSubstr("return cuir_compact_row("));
  const std::string loop = RegionText(k, "kv_loop");
  EXPECT_THAT(loop, HasSubstr("const int n_block = "));
  // The table's `full` is the walk's `block_full`, which the expert hands on with the block.
  EXPECT_THAT(loop, HasSubstr("const bool block_full = (T_2_entry & 1) != 0;"));
  EXPECT_THAT(workspace, HasSubstr("const int* variant_table("));
}

TEST(Lower, TablePerAxisDecodesTheAxisInThePreKernel) {
  const LoweredKernel k = LowerOrDie("document_batched");
  EXPECT_THAT(RegionText(k, "table_kernel"), HasSubstr("const int b = static_cast<int>("));
  // The row of (b, m_block) is b * cdiv(seqlen_q, BLOCK_M) + m_block.
  EXPECT_THAT(RegionText(k, "kv_loop"),
              HasSubstr("(static_cast<long long>(b) * cuir_cdiv(seqlen_q, BLOCK_M) + m_block)"));
  EXPECT_THAT(RegionText(k, "buffer_check"), HasSubstr("p.buffers[1]"));
}

TEST(Lower, SymbolsThatCollideWithExpertNamesAreRenamed) {
  const LoweredKernel k = LowerOrDie("renamed_symbols");
  EXPECT_THAT(RegionText(k, "variant_consts"), HasSubstr("constexpr int c_2 = 0;"));
  EXPECT_THAT(RegionText(k, "variant_bind"), HasSubstr("const int* __restrict__ const p_2"));
  EXPECT_THAT(RegionText(k, "block_class"), HasSubstr("const bool acc_2 = "));
  EXPECT_THAT(RegionText(k, "mask"), HasSubstr("cuir_ld(p_2 + kv_idx)"));
  EXPECT_THAT(RegionText(k, "tile_params"),
              AllOf(HasSubstr("constexpr int BLOCK_M = 64;"), HasSubstr("constexpr int BLOCK_N = 32;")));
}

TEST(Lower, KernelNameBecomesTheEntryPoint) {
  auto program = LoadTestProgram("causal");
  ASSERT_TRUE(program.ok());
  program->kernel = "doc_causal";
  auto k = Lower(*program, cuir::AttentionConfig{}, Arch::kSm90);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->entry_point, "cubridge_doc_causal");
  EXPECT_THAT(k->launcher_header,
              AllOf(HasSubstr("int cubridge_doc_causal(const cubridge_doc_causal_params* p"),
                    HasSubstr("size_t cubridge_doc_causal_workspace_size("),
                    HasSubstr("extern \"C\"")));
  EXPECT_THAT(k->cuda_source, HasSubstr("extern \"C\" int cubridge_doc_causal("));
  EXPECT_THAT(k->cuda_source, Not(HasSubstr("cubridge_attn_fwd")));
  EXPECT_THAT(k->cuda_source, HasSubstr("for sm_90"));
}

// ---- programs the expert cannot express --------------------------------------------------------

absl::Status LowerText(const std::string& text) {
  auto program = cuir::ParseProgram(text, "variant.cuir");
  if (!program.ok()) return program.status();
  return Lower(*program, cuir::AttentionConfig{}, Arch::kSm80).status();
}

std::string BaseText() {
  auto base = LoadTestProgram("base");
  return base.ok() ? cuir::PrintProgram(*base) : "";
}

TEST(LowerErrors, UnknownRoleIsUnimplementedWithItsPosition) {
  // A Hopper-style producer role: line 8 of the printed base + 1, column 3.
  const std::string text = absl::StrReplaceAll(
      BaseText(), {{"  role compute warps WARPS\n",
                    "  role compute warps WARPS\n  role producer warps 1\n"}});
  const absl::Status st = LowerText(text);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_THAT(st.message(), HasSubstr("role `producer`"));
  EXPECT_THAT(st.message(), HasSubstr("variant.cuir:9:3"));
}

TEST(LowerErrors, ChangedGridIsUnimplemented) {
  const std::string text = absl::StrReplaceAll(BaseText(), {{"b < batch", "b < batch schedule longest_first"}});
  const absl::Status st = LowerText(text);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_THAT(st.message(), HasSubstr("grid"));
  EXPECT_THAT(st.message(), HasSubstr("variant.cuir:"));
}

TEST(LowerErrors, ScoreModAfterMaskIsUnimplemented) {
  const std::string text = absl::StrReplaceAll(
      BaseText(), {{"    P = softmax.online S\n",
                    "    mask S = q_idx >= kv_idx\n    score_mod S = score * 2.0\n"
                    "    P = softmax.online S\n"}});
  const absl::Status st = LowerText(text);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_THAT(st.message(), HasSubstr("score_mod after a mask"));
}

TEST(LowerErrors, ChangedQTileIsUnimplemented) {
  const std::string text = absl::StrReplaceAll(
      BaseText(), {{"let q_hi: int = min(q_lo + BLOCK_M, seqlen_q)",
                    "let q_hi: int = min(q_lo + BLOCK_M - 1, seqlen_q)"}});
  const absl::Status st = LowerText(text);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_THAT(st.message(), HasSubstr("let q_hi"));
}

// Whether an expert splits its KV walks is its scheduler's business (the Hopper expert splits
// those of its last wave): a program's loop keeps its base's `split`, like its pipeline depth.
TEST(LowerErrors, ADifferentSplitIsUnimplemented) {
  auto base = LoadTestProgram("base");
  ASSERT_TRUE(base.ok()) << base.status();
  cuir::Program split_base = *base;
  cuir::FindKvLoop(split_base)->split = true;

  // Against a base whose loop splits, a program whose loop does not is refused ...
  auto plan = MatchToBase(*base, split_base);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kUnimplemented) << plan.status();
  EXPECT_THAT(plan.status().message(),
              AllOf(HasSubstr(cuir::FindKvLoop(*base)->loc.ToString() + ": "),
                    HasSubstr("the lowering does not know a different `split`"),
                    HasSubstr("the expert's tail split is fixed by its scheduler"),
                    HasSubstr("add `split` as in its base loop `for n_block in [0, "
                              "cdiv(seqlen_kv, BLOCK_N)) pipeline STAGES split`")));
  // ... one that splits too matches, and an equal `split` is no change of the walked range.
  plan = MatchToBase(split_base, split_base);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->range_changed);
  auto causal = LoadTestProgram("causal");
  ASSERT_TRUE(causal.ok()) << causal.status();
  cuir::FindKvLoop(*causal)->split = true;
  plan = MatchToBase(*causal, split_base);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->range_changed);

  // The sm_80 expert does not split: a program that does is refused, at its loop.
  const std::string text =
      absl::StrReplaceAll(BaseText(), {{" pipeline STAGES {", " pipeline STAGES split {"}});
  const absl::Status st = LowerText(text);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_THAT(st.message(), AllOf(HasSubstr("variant.cuir:"), HasSubstr("a different `split`"),
                                  HasSubstr("drop `split`")));
}

TEST(LowerErrors, MissingExpertIsNotFound) {
  const std::string text = absl::StrReplaceAll(BaseText(), {{"\"fa2_sm80\"", "\"no_such_expert\""}});
  const absl::Status st = LowerText(text);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_THAT(st.message(), HasSubstr("no_such_expert"));
}

absl::StatusOr<LoweredKernel> LowerVariantText(const std::string& text) {
  auto program = cuir::ParseProgram(text, "variant.cuir");
  if (!program.ok()) return program.status();
  return Lower(*program, cuir::AttentionConfig{}, Arch::kSm80);
}

TEST(Lower, NewTopLevelLetsGoToProgramLetsBeforeTheLoop) {
  const std::string text = absl::StrReplaceAll(
      BaseText(), {{"  softmax.init\n", "  let window_lo: int = max(0, q_lo - 128) // BLOCK_N\n  softmax.init\n"},
                   {"[0, cdiv(seqlen_kv, BLOCK_N))", "[window_lo, cdiv(seqlen_kv, BLOCK_N))"}});
  auto k = LowerVariantText(text);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(AsSet(k->generated_regions), (std::set<std::string>{"program_lets", "kv_range"}));
  EXPECT_THAT(RegionText(*k, "program_lets"),
              HasSubstr("const int window_lo = cuir_floordiv<int>(cuir_max<int>(0, (q_lo - 128)), "
                        "BLOCK_N);"));
  EXPECT_THAT(RegionText(*k, "kv_range"), HasSubstr("{{window_lo}, {"));
}

// The sink joins the softmax statistics after the loop, in the expert's log2 units; the const
// named like the expert's accumulator is renamed, the accumulator itself is not.
TEST(Lower, EpilogueSinkFoldsIntoTheSoftmaxBeforeTheEpilogue) {
  const LoweredKernel k = LowerOrDie("sink");
  const std::string sink = RegionText(k, "epilogue_sink");
  EXPECT_THAT(sink, HasSubstr("// epilogue sink sink + acc * float(h % 2)  ("));
  EXPECT_THAT(sink, HasSubstr("softmax.add_sink((sink + (acc_2 * static_cast<float>("));
  EXPECT_THAT(sink, HasSubstr(" * kLog2e, acc, lane);"));
  EXPECT_THAT(RegionText(k, "variant_consts"), HasSubstr("constexpr float acc_2 = 0.25f;"));
  // The region is the body of the sink hook, which the expert calls after the loop's last
  // barrier, before the epilogue call that normalises.
  const size_t hook = k.cuda_source.find("tile.epilogue_sink(softmax, acc, lane);");
  EXPECT_LT(k.cuda_source.find("void epilogue_sink("), k.cuda_source.find("softmax.add_sink("));
  EXPECT_LT(k.cuda_source.find("no copy into sQ is in flight"), hook);
  EXPECT_LT(hook, k.cuda_source.find("epilogue<T, MT, DT"));
  // Without a sink the region stays empty.
  EXPECT_EQ(RegionText(LowerOrDie("gqa"), "epilogue_sink"), "");
}

TEST(LowerErrors, NonNumericSinkIsRejectedBeforeLowering) {
  // Lower validates first: a bool sink never reaches the generator.
  const std::string text = absl::StrReplaceAll(BaseText(), {{"  epilogue\n", "  epilogue sink true\n"}});
  const absl::Status st = LowerText(text);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("an epilogue sink must be int or float"));
}

TEST(Lower, ChangedQkScaleIsGenerated) {
  const std::string text = absl::StrReplaceAll(
      BaseText(), {{"scale softmax_scale", "scale softmax_scale * 0.5"}});
  auto k = LowerVariantText(text);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(AsSet(k->generated_regions), (std::set<std::string>{"qk_scale"}));
  EXPECT_THAT(RegionText(*k, "qk_scale"), HasSubstr("const float qk_scale = (softmax_scale * 0.5f);"));
}

TEST(Arch, ParsesTheTwoTargetsAndNamesTheAcceptedOnes) {
  EXPECT_EQ(*ParseArch("sm_80"), Arch::kSm80);
  EXPECT_EQ(*ParseArch("sm_90"), Arch::kSm90);
  EXPECT_STREQ(ArchName(Arch::kSm80), "sm_80");
  EXPECT_STREQ(ArchName(Arch::kSm90), "sm_90");
  for (const char* bad : {"sm_86", "SM_80", "", "sm80"}) {
    auto a = ParseArch(bad);
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(a.status().message(), AllOf(HasSubstr("sm_80"), HasSubstr("sm_90")));
  }
}

}  // namespace
}  // namespace cubridge::lower

namespace cubridge::lower::testing {
namespace {

using ::testing::HasSubstr;

// An expert states the oldest arch it runs on (`// @cuir-arch`): the Hopper expert's wgmma and
// setmaxnreg need sm_90a, so it lowers for sm_90 with that target and refuses sm_80; the sm_80
// expert lowers for both with the plain targets.
TEST(LowerArch, TheHopperExpertNeedsSm90aAndSaysSo) {
  auto hopper = LiftExpert("fa3_sm90");
  ASSERT_TRUE(hopper.ok()) << hopper.status();
  auto k = Lower(hopper->base, cuir::AttentionConfig{}, Arch::kSm90);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->target, "sm_90a");
  EXPECT_EQ(k->expert, "fa3_sm90");
  EXPECT_EQ(NvccGencode(k->target), "-gencode=arch=compute_90a,code=sm_90a");
  auto old = Lower(hopper->base, cuir::AttentionConfig{}, Arch::kSm80);
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(old.status().message(), HasSubstr("needs sm_90a"));
  EXPECT_THAT(old.status().message(), HasSubstr("sm_80"));

  auto ampere = LiftExpert("fa2_sm80");
  ASSERT_TRUE(ampere.ok()) << ampere.status();
  for (Arch arch : {Arch::kSm80, Arch::kSm90}) {
    auto a = Lower(ampere->base, cuir::AttentionConfig{}, arch);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->target, ArchName(arch));
  }
}

// The base program of the Hopper expert is its kernel.cu verbatim (every region copied), and the
// launch plan asks for its three TMA maps.
TEST(LowerArch, TheHopperBaseLowersToItsOwnSource) {
  auto hopper = LiftExpert("fa3_sm90");
  ASSERT_TRUE(hopper.ok()) << hopper.status();
  auto k = Lower(hopper->base, cuir::AttentionConfig{}, Arch::kSm90);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_TRUE(k->generated_regions.empty());
  EXPECT_THAT(k->cuda_source, HasSubstr("plan->tma_count = 3;"));
  EXPECT_THAT(k->cuda_source, HasSubstr("const __grid_constant__ cubridge_attn_fwd_tma_maps maps"));
  EXPECT_EQ(k->device_entries.at("attention"), "cubridge_fa3::attn_fwd_kernel<{T}, {D}>");
}

// The service transfers once per spec from the sm_80 expert's base; each arch then lowers the
// program on its own expert: the Hopper base differs only in declarations, so the body moves.
TEST(Rebase, ATransferredProgramMovesOntoTheHopperExpert) {
  auto sm80 = LiftExpert("fa2_sm80");
  auto hopper = LiftExpert("fa3_sm90");
  ASSERT_TRUE(sm80.ok() && hopper.ok());
  auto program = LoadTestProgram("document");
  ASSERT_TRUE(program.ok()) << program.status();
  auto moved = Rebase(*program, sm80->base, hopper->base);
  ASSERT_TRUE(moved.ok()) << moved.status();
  ASSERT_TRUE(cuir::Validate(*moved).ok());
  const std::string text = cuir::PrintProgram(*moved);
  EXPECT_THAT(text, HasSubstr("expert \"fa3_sm90\""));
  EXPECT_THAT(text, HasSubstr("schedule longest_first"));
  EXPECT_THAT(text, HasSubstr("table T = blocks("));  // the transferred body is kept
  auto k = Lower(*moved, cuir::AttentionConfig{}, Arch::kSm90);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->expert, "fa3_sm90");
  // And back: the same statements as the program (declarations first).
  auto back = Rebase(*moved, hopper->base, sm80->base);
  ASSERT_TRUE(back.ok()) << back.status();
  auto again = Rebase(*program, sm80->base, sm80->base);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(cuir::Equal(*back, *again));
  EXPECT_EQ(back->stmts.size(), program->stmts.size());
}

// A KV loop's `split` belongs to its expert, like the declarations: the bases may differ in it,
// and a moved program's loop takes the target base's.
TEST(Rebase, TheMovedLoopTakesTheTargetBasesSplit) {
  auto sm80 = LiftExpert("fa2_sm80");
  auto hopper = LiftExpert("fa3_sm90");
  ASSERT_TRUE(sm80.ok() && hopper.ok());
  cuir::Program split_hopper = hopper->base;
  cuir::FindKvLoop(split_hopper)->split = true;
  auto program = LoadTestProgram("document");
  ASSERT_TRUE(program.ok()) << program.status();
  ASSERT_FALSE(cuir::FindKvLoop(*program)->split);

  auto moved = Rebase(*program, sm80->base, split_hopper);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_TRUE(cuir::FindKvLoop(*moved)->split);
  EXPECT_TRUE(cuir::Validate(*moved).ok()) << cuir::Validate(*moved);
  EXPECT_THAT(cuir::PrintProgram(*moved),
              HasSubstr("for n_block, full in table T[m_block] pipeline STAGES split {"));
  auto plan = MatchToBase(*moved, split_hopper);
  EXPECT_TRUE(plan.ok()) << plan.status();

  auto back = Rebase(*moved, split_hopper, sm80->base);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(cuir::FindKvLoop(*back)->split);
  auto again = Rebase(*program, sm80->base, sm80->base);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(cuir::Equal(*back, *again));

  // A program that changed its base's `split` stays: the target's would undo the change.
  cuir::Program added = *program;
  cuir::FindKvLoop(added)->split = true;
  auto refused = Rebase(added, sm80->base, split_hopper);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              AllOf(HasSubstr(cuir::FindKvLoop(added)->loc.ToString() + ": "),
                    HasSubstr("added the `split` of its base's KV loop")));
}

TEST(Rebase, AProgramThatChangedItsBasesDeclarationsStays) {
  auto sm80 = LiftExpert("fa2_sm80");
  auto hopper = LiftExpert("fa3_sm90");
  ASSERT_TRUE(sm80.ok() && hopper.ok());
  auto program = cuir::ParseProgram(
      absl::StrReplaceAll(cuir::PrintProgram(sm80->base),
                          {{"role compute warps WARPS", "role compute warps 8"}}),
      "changed.cuir");
  ASSERT_TRUE(program.ok()) << program.status();
  auto moved = Rebase(*program, sm80->base, hopper->base);
  ASSERT_FALSE(moved.ok());
  EXPECT_EQ(moved.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(moved.status().message(), HasSubstr("changed.cuir:"));
  EXPECT_THAT(moved.status().message(), HasSubstr("role `compute`"));
}

}  // namespace
}  // namespace cubridge::lower::testing
