// docs/cuir.md is the users' reference: every ```cuir block in it must be a program that parses,
// is written in canonical form, and validates, and the base listing must match the expert's file.
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cuir/ir/program.h"
#include "gtest/gtest.h"
#include "ir_test_util.h"

namespace cubridge::cuir {
namespace {

using testing::ReadFileOrDie;
using testing::SourcePath;
using testing::WithoutCommentLines;

struct Block {
  int first_line;  // 1-based line of the block's first content line in the markdown file
  std::string text;
};

std::vector<Block> CuirBlocks(const std::string& markdown) {
  std::vector<Block> blocks;
  std::istringstream in(markdown);
  std::string line;
  int line_no = 0;
  Block* open = nullptr;
  while (std::getline(in, line)) {
    ++line_no;
    if (open == nullptr && line == "```cuir") {
      blocks.push_back({line_no + 1, ""});
      open = &blocks.back();
    } else if (open != nullptr && line.rfind("```", 0) == 0) {
      open = nullptr;
    } else if (open != nullptr) {
      open->text += line + "\n";
    }
  }
  EXPECT_EQ(open, nullptr) << "unterminated ```cuir block";
  return blocks;
}

TEST(Docs, EveryCuirBlockParsesPrintsBackAndValidates) {
  std::vector<Block> blocks = CuirBlocks(ReadFileOrDie(SourcePath("docs/cuir.md")));
  ASSERT_GE(blocks.size(), 6u);
  std::set<std::string> kernels;
  for (const Block& b : blocks) {
    SCOPED_TRACE("```cuir block at docs/cuir.md:" + std::to_string(b.first_line));
    absl::StatusOr<Program> p = ParseProgram(b.text, "docs/cuir.md block");
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(PrintProgram(*p), WithoutCommentLines(b.text));
    absl::Status valid = Validate(*p);
    EXPECT_TRUE(valid.ok()) << valid;
    kernels.insert(p->kernel);
  }
  for (const char* name : {"attn_fwd", "attn_fwd_causal", "attn_fwd_sliding_window",
                           "attn_fwd_document", "attn_fwd_softcap_alibi", "attn_fwd_sink"}) {
    EXPECT_TRUE(kernels.count(name)) << "docs/cuir.md lacks the example kernel " << name;
  }
}

TEST(Docs, BaseListingMatchesTheExpertFile) {
  std::string base = ReadFileOrDie(SourcePath("cuir/experts/fa2_sm80/base.cuir"));
  bool found = false;
  for (const Block& b : CuirBlocks(ReadFileOrDie(SourcePath("docs/cuir.md")))) {
    found |= b.text == base;
  }
  EXPECT_TRUE(found) << "docs/cuir.md must list cuir/experts/fa2_sm80/base.cuir verbatim";
}

// The sm_90 listing (roles, schedule) is shown without the file's comment lines.
TEST(Docs, Sm90BaseListingMatchesTheExpertFile) {
  std::string base =
      WithoutCommentLines(ReadFileOrDie(SourcePath("cuir/experts/fa3_sm90/base.cuir")));
  bool found = false;
  for (const Block& b : CuirBlocks(ReadFileOrDie(SourcePath("docs/cuir.md")))) {
    found |= b.text == base;
  }
  EXPECT_TRUE(found) << "docs/cuir.md must list cuir/experts/fa3_sm90/base.cuir (without its "
                        "comment lines) in a ```cuir block";
}

// The backward section's listing of the sm_80 backward base, without the file's comment lines.
TEST(Docs, BackwardBaseListingMatchesTheExpertFile) {
  std::string base =
      WithoutCommentLines(ReadFileOrDie(SourcePath("cuir/experts/fa2_sm80/base_bwd.cuir")));
  bool found = false;
  for (const Block& b : CuirBlocks(ReadFileOrDie(SourcePath("docs/cuir.md")))) {
    found |= b.text == base;
  }
  EXPECT_TRUE(found) << "docs/cuir.md must list cuir/experts/fa2_sm80/base_bwd.cuir (without "
                        "its comment lines) in a ```cuir block";
}

}  // namespace
}  // namespace cubridge::cuir
