// The padded-O check of the GPU verifier, run here on CPU tensors: O is a view of rows
// head_dim + 2 wide, a kernel that stores into the padding columns (even a different NaN) fails
// the shape, and the summary, the failure detail and the JSON say what was written where. Reports
// of unpadded shapes (the CPU verifier's) read as before.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <torch/types.h>
#include <torch/utils.h>

#include "cuir/pipeline/verify.h"

namespace cubridge::pipeline {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kHeadDim = 8;

// A padded O of [2, 3, 5, kHeadDim] whose rows the "kernel" has written, as a correct one does.
torch::Tensor WrittenPaddedO(torch::ScalarType dtype) {
  const torch::Tensor like = torch::zeros({2, 3, 5, kHeadDim}, torch::dtype(dtype));
  torch::Tensor padded = PaddedPoison(like);
  torch::manual_seed(3);
  padded.narrow(3, 0, kHeadDim).copy_(torch::randn(like.sizes()));
  return padded;
}

// O compared with itself, so only the padding can fail the shape.
ShapeResult Check(const torch::Tensor& padded) {
  ShapeResult r;
  r.shape = {2, 5, 7};
  r.o_atol = r.o_rtol = 1e-2;
  const torch::Tensor o = padded.narrow(3, 0, kHeadDim);
  CompareShape(o, torch::Tensor(), o.to(torch::kFloat64), torch::Tensor(), &r);
  CheckOPadding(padded, kHeadDim, &r);
  return r;
}

VerifyReport Report(const ShapeResult& r) {
  VerifyReport report;
  report.shapes = {r};
  report.passed = r.passed;
  return report;
}

TEST(VerifyPadding, PaddedPoisonIsANanViewWithRowStrideHeadDimPlusTwo) {
  const torch::Tensor padded = PaddedPoison(torch::zeros({2, 3, 5, kHeadDim}, torch::kBFloat16));
  EXPECT_THAT(padded.sizes(), ElementsAre(2, 3, 5, kHeadDim + kOPadColumns));
  EXPECT_EQ(padded.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(padded.isnan().all().item<bool>());
  const torch::Tensor o = padded.narrow(3, 0, kHeadDim);
  EXPECT_THAT(o.strides(), ElementsAre(3 * 5 * (kHeadDim + 2), 5 * (kHeadDim + 2), kHeadDim + 2, 1));
  // 16-bit rows of head_dim + 2 elements: 4-byte aligned, never 16-byte aligned.
  EXPECT_EQ(o.stride(2) * o.element_size() % 4, 0);
  EXPECT_NE(o.stride(2) * o.element_size() % 16, 0);
}

TEST(VerifyPadding, UntouchedPaddingPasses) {
  for (torch::ScalarType dtype : {torch::kBFloat16, torch::kHalf}) {
    const ShapeResult r = Check(WrittenPaddedO(dtype));
    EXPECT_TRUE(r.passed) << Report(r).FailureDetail();
    EXPECT_TRUE(r.o_padded);
    EXPECT_EQ(r.o_padding_written, 0);
    EXPECT_TRUE(r.o_padding_at.empty());
    const VerifyReport report = Report(r);
    EXPECT_THAT(report.Summary(), HasSubstr("1 shapes (1 with padded O rows) match the oracle"));
    const nlohmann::json j = report.ToJson()["shapes"][0];
    EXPECT_EQ(j["o_padded"], true);
    EXPECT_EQ(j["o_padding"]["written"], 0);
    EXPECT_EQ(j["o_padding"]["row_stride"], "head_dim + 2");
    EXPECT_FALSE(j["o_padding"].contains("first_written"));
  }
}

TEST(VerifyPadding, WrittenPaddingFailsAndEveryReportSaysWhere) {
  torch::Tensor padded = WrittenPaddedO(torch::kBFloat16);
  // Zeros, as a kernel storing whole 16-byte chunks past the row's end would leave.
  padded.index_put_({1, 2, 3, kHeadDim}, 0.0);
  padded.index_put_({1, 2, 4, kHeadDim + 1}, 0.0);
  const ShapeResult r = Check(padded);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.o.violations, 0);
  EXPECT_EQ(r.o.unwritten, 0);
  EXPECT_EQ(r.o_padding_written, 2);
  EXPECT_THAT(r.o_padding_at, ElementsAre(1, 2, 3, kHeadDim));

  const VerifyReport report = Report(r);
  EXPECT_THAT(report.Summary(),
              HasSubstr("1 shapes (1 with padded O rows, 2 padding elements written) FAILED"));
  EXPECT_THAT(report.FailureDetail(),
              HasSubstr("b=2 sq=5 skv=7: O: 0 elements out of tolerance, 0 unwritten"));
  EXPECT_THAT(report.FailureDetail(),
              HasSubstr("O: 2 elements written outside the rows (the padding columns of an O with "
                        "row stride head_dim + 2), first at [1,2,3,8]"));
  const nlohmann::json j = report.ToJson()["shapes"][0];
  EXPECT_EQ(j["passed"], false);
  EXPECT_EQ(j["o_padded"], true);
  EXPECT_EQ(j["o_padding"]["written"], 2);
  EXPECT_EQ(j["o_padding"]["first_written"], nlohmann::json({1, 2, 3, kHeadDim}));
}

// The poison is compared by its bits: a kernel that writes NaN there has still written.
TEST(VerifyPadding, AnotherNanInThePaddingIsAWrite) {
  for (torch::ScalarType dtype : {torch::kBFloat16, torch::kHalf}) {
    torch::Tensor padded = WrittenPaddedO(dtype);
    // Negative quiet NaN: the sign bit flipped on the poison's bits.
    torch::Tensor bits = padded.view(torch::kInt16);
    bits.index_put_({0, 1, 2, kHeadDim + 1}, bits.index({0, 1, 2, kHeadDim + 1}) | -32768);
    ASSERT_TRUE(padded.index({0, 1, 2, kHeadDim + 1}).isnan().item<bool>());
    const ShapeResult r = Check(padded);
    EXPECT_FALSE(r.passed);
    EXPECT_EQ(r.o_padding_written, 1);
    EXPECT_THAT(r.o_padding_at, ElementsAre(0, 1, 2, kHeadDim + 1));
  }
}

// CompareShape run after CheckOPadding keeps the padding's verdict.
TEST(VerifyPadding, PaddingDecidesPassedWhicheverCheckRunsLast) {
  torch::Tensor padded = WrittenPaddedO(torch::kHalf);
  padded.index_put_({0, 0, 0, kHeadDim}, 1.0);
  ShapeResult r;
  r.o_atol = r.o_rtol = 1e-2;
  CheckOPadding(padded, kHeadDim, &r);
  const torch::Tensor o = padded.narrow(3, 0, kHeadDim);
  CompareShape(o, torch::Tensor(), o.to(torch::kFloat64), torch::Tensor(), &r);
  EXPECT_EQ(r.o_padding_written, 1);
  EXPECT_FALSE(r.passed);
}

// A report of shapes that all matched the oracle.
ShapeResult PassedShape(VerifyShape shape) {
  ShapeResult r;
  r.shape = shape;
  r.passed = true;
  return r;
}
VerifyReport PassedReport(std::vector<ShapeResult> shapes) {
  VerifyReport report;
  report.shapes = std::move(shapes);
  report.passed = true;
  return report;
}

TEST(VerifyPadding, UnpaddedAndRefusedShapesSaySo) {
  const ShapeResult plain = PassedShape({1, 65, 65});
  ShapeResult refused = plain;
  refused.o_padding_refused = true;
  const VerifyReport report = PassedReport({plain, refused});
  EXPECT_THAT(report.Summary(), HasSubstr("2 shapes match the oracle"));
  EXPECT_THAT(report.Summary(), Not(HasSubstr("padd")));
  const nlohmann::json j = report.ToJson();
  for (const auto& s : j["shapes"]) {
    EXPECT_EQ(s["o_padded"], false);
    EXPECT_FALSE(s.contains("o_padding"));
  }
  EXPECT_FALSE(j["shapes"][0].contains("o_padding_refused"));
  EXPECT_EQ(j["shapes"][1]["o_padding_refused"], true);
  EXPECT_FALSE(j["shapes"][0].contains("combined"));
}

// A shape whose launch split its last wave says so; the others carry no such key.
TEST(VerifyPadding, SplitShapesSaySo) {
  ShapeResult split = PassedShape({1, 1000, 1000});
  split.combined = true;
  const nlohmann::json j = PassedReport({split, PassedShape({1, 1000, 1000})}).ToJson();
  EXPECT_EQ(j["shapes"][0]["combined"], true);
  EXPECT_FALSE(j["shapes"][1].contains("combined"));
}

}  // namespace
}  // namespace cubridge::pipeline
