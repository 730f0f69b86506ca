// Region markers of an annotated expert source, and the names generated code may take.
#include "cuir/lower/regions.h"

#include "cuir/lower/names.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cubridge::lower {
namespace {

using ::testing::HasSubstr;

constexpr char kSource[] =
    "int a;\n"
    "// @cuir-region first\n"
    "int b;\n"
    "// @cuir-end first\n"
    "void f() {\n"
    "    // @cuir-region second\n"
    "    // @cuir-end second\n"
    "}\n";

TEST(Regions, FindsRegionsWithTheirBodiesAndIndentation) {
  auto src = ParseRegions(kSource, "k.cu");
  ASSERT_TRUE(src.ok()) << src.status();
  ASSERT_EQ(src->regions.size(), 2u);
  EXPECT_EQ(src->regions[0].name, "first");
  EXPECT_EQ(src->Body(src->regions[0]), "int b;\n");
  EXPECT_EQ(src->regions[1].indent, "    ");
  EXPECT_EQ(src->Body(*src->Find("second")), "");
  EXPECT_EQ(src->Find("third"), nullptr);
}

TEST(Regions, RenderReplacesOnlyTheNamedBodiesKeepingMarkers) {
  auto src = ParseRegions(kSource, "k.cu");
  ASSERT_TRUE(src.ok());
  EXPECT_EQ(RenderRegions(*src, {}), kSource);
  EXPECT_EQ(RenderRegions(*src, {{"second", "g();\nif (x) {\n  h();\n}\n"}}),
            "int a;\n"
            "// @cuir-region first\n"
            "int b;\n"
            "// @cuir-end first\n"
            "void f() {\n"
            "    // @cuir-region second\n"
            "    g();\n"
            "    if (x) {\n"
            "      h();\n"
            "    }\n"
            "    // @cuir-end second\n"
            "}\n");
  // An empty replacement empties the region.
  EXPECT_THAT(RenderRegions(*src, {{"first", ""}}),
              HasSubstr("// @cuir-region first\n// @cuir-end first\n"));
}

struct BadSource {
  std::string text;
  std::string message;
};

class MalformedRegions : public ::testing::TestWithParam<BadSource> {};

TEST_P(MalformedRegions, AreRejectedWithTheLine) {
  auto src = ParseRegions(GetParam().text, "k.cu");
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(src.status().message(), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Markers, MalformedRegions,
    ::testing::Values(
        BadSource{"// @cuir-region a\n// @cuir-region b\n// @cuir-end b\n// @cuir-end a\n",
                  "k.cu:2: region `b` opens inside region `a`"},
        BadSource{"// @cuir-region a\n// @cuir-end b\n", "k.cu:2: `@cuir-end b` does not close"},
        BadSource{"// @cuir-end a\n", "k.cu:1:"},
        BadSource{"// @cuir-region a\n// @cuir-end a\n// @cuir-region a\n// @cuir-end a\n",
                  "k.cu:3: region `a` is defined twice"},
        BadSource{"x\n// @cuir-region a\n", "k.cu:2: region `a` is never closed"},
        BadSource{"// @cuir-region\n", "k.cu:1: malformed region marker"},
        BadSource{"// @cuir-regionfoo\n", "malformed region marker"},
        BadSource{"// @cuir-region a b\n", "malformed region marker"}));

TEST(Names, CodeIdentifiersSkipCommentsAndStrings) {
  const auto ids = CodeIdentifiers(
      "int alpha = 1.5e3f; // beta\n/* gamma */ const char* s = \"delta\"; x_1 += 0x1F;\n");
  EXPECT_TRUE(ids.count("alpha"));
  EXPECT_TRUE(ids.count("x_1"));
  EXPECT_FALSE(ids.count("beta"));
  EXPECT_FALSE(ids.count("gamma"));
  EXPECT_FALSE(ids.count("delta"));
  EXPECT_FALSE(ids.count("e3f"));
  EXPECT_FALSE(ids.count("x1F"));
}

TEST(Names, FreshAvoidsTakenNamesKeywordsAndMacros) {
  Namer namer({"acc", "acc_2"});
  EXPECT_EQ(namer.Fresh("doc"), "doc");
  EXPECT_EQ(namer.Fresh("doc"), "doc_2");  // taken by the first call
  EXPECT_EQ(namer.Fresh("acc"), "acc_3");
  EXPECT_EQ(namer.Fresh("float"), "float_2");
  EXPECT_EQ(namer.Fresh("INFINITY"), "INFINITY_2");
  EXPECT_EQ(namer.Fresh("__x"), "v_x");  // reserved spellings are respelled
  EXPECT_EQ(namer.Fresh("a__b"), "a_b");
}

}  // namespace
}  // namespace cubridge::lower
