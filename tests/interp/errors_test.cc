// Errors of the interpreter: what went wrong, and where (file:line:col of the statement or
// expression), with the status code callers branch on.
#include <torch/types.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "cuir/spec/spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/interp/interp_test_util.h"

namespace cubridge::interp::testing {
namespace {

using ::testing::HasSubstr;

// "test.cuir:LINE:COL" of the first line of `text` containing `needle` (1-based, at its first
// non-blank character), computed from the text rather than copied from an error message.
std::string LocOf(const std::string& text, const std::string& needle) {
  int line = 1;
  size_t start = 0;
  while (true) {
    const size_t end = text.find('\n', start);
    const std::string l = text.substr(start, end - start);
    if (l.find(needle) != std::string::npos) {
      return absl::StrCat("test.cuir:", line, ":", l.find_first_not_of(' ') + 1);
    }
    if (end == std::string::npos) return "<not found>";
    start = end + 1;
    ++line;
  }
}

spec::AttentionInputs Inputs(const cuir::AttentionConfig& config) {
  auto spec = spec::LoadSpecSource(kFullSpec, "full.py");
  EXPECT_TRUE(spec.ok()) << spec.status();
  auto inputs = spec::MakeInputs(*spec, config, {}, 3);
  EXPECT_TRUE(inputs.ok()) << inputs.status();
  return *std::move(inputs);
}

absl::Status RunText(const std::string& text, const cuir::AttentionConfig& config,
                     const spec::AttentionInputs& inputs) {
  return Interpret(Parse(text), config, inputs).status();
}

const cuir::AttentionConfig kConfig = Config(cuir::DType::kBF16, 64, 100, 300);

TEST(Errors, LoadOutsideTheSequenceNamesTheStatement) {
  Pieces p;
  p.k_rows = "kv_lo - BLOCK_N:kv_hi - BLOCK_N";  // block 0 reads rows [-64, 0)
  const std::string text = ProgramText(p);
  const absl::Status s = RunText(text, kConfig, Inputs(kConfig));
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_THAT(s.message(), HasSubstr(LocOf(text, "load K") + ": load K: rows [-64, 0) outside k"));
  EXPECT_THAT(s.message(), HasSubstr("seqlen_kv=300"));
}

TEST(Errors, LoadPastTheEndIsAnError) {
  Pieces p;
  p.k_rows = "kv_lo:kv_lo + BLOCK_N";  // the ragged last block would read past row 300
  const std::string text = ProgramText(p);
  const absl::Status s = RunText(text, kConfig, Inputs(kConfig));
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_THAT(s.message(), HasSubstr(LocOf(text, "load K")));
  EXPECT_THAT(s.message(), HasSubstr("rows [256, 320)"));
}

TEST(Errors, HeadOutsideTheTensor) {
  Pieces p;
  p.kv_head = "h + 1";
  const std::string text = ProgramText(p);
  const absl::Status s = RunText(text, kConfig, Inputs(kConfig));
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_THAT(s.message(), HasSubstr(LocOf(text, "load K")));
  EXPECT_THAT(s.message(), HasSubstr("head 2 outside k with heads_kv=2"));
}

Pieces DocumentProgram(const std::string& length) {
  Pieces p;
  p.decls = {absl::StrCat("buffer doc: int32[", length, "]")};
  p.after_qk = {"mask S = doc[q_idx] == doc[kv_idx]"};
  return p;
}

TEST(Errors, MissingBufferIsNamed) {
  const std::string text = ProgramText(DocumentProgram("max(seqlen_q, seqlen_kv)"));
  const absl::Status s = RunText(text, kConfig, Inputs(kConfig));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr(LocOf(text, "buffer doc")));
  EXPECT_THAT(s.message(), HasSubstr("buffer doc has no values"));
}

TEST(Errors, BufferOfTheWrongLength) {
  const std::string text = ProgramText(DocumentProgram("max(seqlen_q, seqlen_kv)"));
  auto inputs = Inputs(kConfig);
  inputs.buffers["doc"] = torch::zeros({10}, torch::kLong);
  const absl::Status s = RunText(text, kConfig, inputs);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("buffer doc must be an int tensor of shape at least [300]"));
  EXPECT_THAT(s.message(), HasSubstr("got Long of shape [10]"));
}

TEST(Errors, BufferIndexOutOfRangeNamesTheExpression) {
  // A buffer sized by seqlen_q (100) but indexed by kv_idx, which runs to 299.
  const std::string text = ProgramText(DocumentProgram("seqlen_q"));
  auto inputs = Inputs(kConfig);
  inputs.buffers["doc"] = torch::zeros({100}, torch::kLong);
  const absl::Status s = RunText(text, kConfig, inputs);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  const std::string mask_loc = LocOf(text, "mask S");
  // The error is at the `doc[kv_idx]` on the mask's line, not merely somewhere in the program.
  const std::string line_prefix = mask_loc.substr(0, mask_loc.rfind(':') + 1);
  EXPECT_THAT(s.message(), HasSubstr(line_prefix));
  // The first block whose keys pass the end is n_block 1, keys [64, 128).
  EXPECT_THAT(s.message(), HasSubstr("index 127 is out of range for dimension 0 of buffer `doc` "
                                     "of shape [100]"));
}

TEST(Errors, InvalidProgramIsRejectedBeforeRunning) {
  Pieces p;
  p.after_qk = {"mask S = q_idx >= undeclared_name"};
  const absl::Status s = RunText(ProgramText(p), kConfig, Inputs(kConfig));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("undeclared_name"));
}

TEST(Errors, InputsThatDoNotFitTheConfig) {
  auto inputs = Inputs(kConfig);
  inputs.q = inputs.q.to(torch::kHalf);
  absl::Status s = RunText(BaseProgramText(), kConfig, inputs);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("input q has dtype"));

  inputs = Inputs(kConfig);
  inputs.k = inputs.k.narrow(2, 0, 299);
  s = RunText(BaseProgramText(), kConfig, inputs);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("input k has shape [1, 2, 299, 64]"));
}

TEST(Errors, MismatchedKAndVRanges) {
  const std::string text =
      absl::StrReplaceAll(BaseProgramText(), {{"v[b, kv_h, kv_lo:kv_hi]", "v[b, kv_h, 0:kv_hi]"}});
  const absl::Status s = RunText(text, kConfig, Inputs(kConfig));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("load K and V with the same range"));
}

}  // namespace
}  // namespace cubridge::interp::testing
