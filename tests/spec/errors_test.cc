// Every error a spec author can make is reported as PATH:LINE:COL with what is wrong and how to
// fix it. The positions below are counted by hand from the sources.
#include <sys/stat.h>
#include <unistd.h>

#include "spec_test_util.h"

namespace cubridge::spec {
namespace {

using testing::ExpectError;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const char* kDef = "def mask_mod(b, h, q_idx, kv_idx):\n";
const char* kScoreDef = "def score_mod(score, b, h, q_idx, kv_idx):\n";

TEST(SpecErrors, PythonSyntaxError) {
  ExpectError(std::string(kDef) + "    return q_idx >= kv_idx)\n", "2:27", "syntax error: ");
}

TEST(SpecErrors, SyntaxErrorAtEndOfFile) {
  ExpectError(std::string(kDef) + "    return q_idx >= (kv_idx +\n", "3:1", "syntax error: ");
}

TEST(SpecErrors, UnsupportedOperationNamesTheOpAndTheSupportedOnes) {
  ExpectError(std::string(kScoreDef) + "    return score + torch.lgamma(score)\n", "2:20",
              "unsupported operation `aten::lgamma` in score_mod; supported: + - * /");
}

TEST(SpecErrors, UnsupportedOperationInAHelperPointsIntoTheHelper) {
  ExpectError(std::string(kDef) + "    return odd(q_idx)\n\ndef odd(x):\n    return torch.lgamma(x) > 0\n",
              "5:12", "unsupported operation `aten::lgamma` in mask_mod");
}

TEST(SpecErrors, MaskModWithTooFewPositionalParameters) {
  ExpectError("def mask_mod(b, h, q_idx):\n    return q_idx >= 0\n", "1:5",
              "mask_mod must take (b, h, q_idx, kv_idx) first; found 3 parameters (b, h, q_idx)");
}

TEST(SpecErrors, ScoreModWithoutTheScoreArgument) {
  ExpectError("def score_mod(b, h, q_idx, kv_idx, bias: float = 1.0):\n    return q_idx * bias\n",
              "1:5", "score_mod must take (score, b, h, q_idx, kv_idx) first; found 4 parameters");
}

TEST(SpecErrors, AnnotatedIndexArgument) {
  ExpectError("def mask_mod(b, h, q_idx: int, kv_idx):\n    return kv_idx <= q_idx\n", "1:20",
              "`q_idx` receives index tensors: remove its `int` annotation");
}

TEST(SpecErrors, MaskReturningInt) {
  ExpectError(std::string(kDef) + "    x = q_idx - kv_idx\n    return x\n", "3:5",
              "mask_mod returns int: a mask must return a bool, e.g. a comparison such as q_idx >= kv_idx");
}

TEST(SpecErrors, MaskReturningFloat) {
  ExpectError(std::string(kDef) + "    return (q_idx - kv_idx) * 0.5\n", "2:5",
              "mask_mod returns float: a mask must return a bool");
}

TEST(SpecErrors, ScoreModReturningAReduction) {
  ExpectError(std::string(kScoreDef) + "    return score.sum(-1)\n", "2:5",
              "score_mod returns a tensor of shape [2, 3, 5] for scores of shape [2, 3, 5, 7]: it "
              "must be elementwise");
}

TEST(SpecErrors, ScoreModReturningBool) {
  ExpectError(std::string(kScoreDef) + "    return score > 0\n", "2:5",
              "score_mod returns bool: it must return the modified score");
}

TEST(SpecErrors, ScalarParameterWithoutDefault) {
  ExpectError("def mask_mod(b, h, q_idx, kv_idx, window: int):\n    return q_idx - kv_idx < window\n",
              "1:35", "parameter `window: int` has no default: scalar parameters need one");
}

TEST(SpecErrors, ParameterOfUnsupportedType) {
  ExpectError("def mask_mod(b, h, q_idx, kv_idx, mode: str = 'a'):\n    return q_idx >= kv_idx\n",
              "1:35", "parameter `mode` has type str");
}

TEST(SpecErrors, ReservedParameterName) {
  ExpectError("def mask_mod(b, h, q_idx, kv_idx, full: int = 1):\n    return q_idx >= full\n",
              "1:35", "parameter name `full` is reserved");
}

TEST(SpecErrors, ParameterDeclaredTwiceWithDifferentDefaults) {
  ExpectError("def mask_mod(b, h, q_idx, kv_idx, w: int = 4):\n    return q_idx - kv_idx < w\n"
              "def score_mod(score, b, h, q_idx, kv_idx, w: int = 8):\n    return score * w\n",
              "3:43", "parameter `w` is also declared at line 1");
}

TEST(SpecErrors, IfStatement) {
  ExpectError(std::string(kDef) + "    if q_idx > 3:\n        return q_idx >= kv_idx\n"
                                  "    return q_idx < kv_idx\n",
              "2:5", "use torch.where(cond, a, b) instead of if");
}

TEST(SpecErrors, LoopInAHelper) {
  ExpectError(std::string(kDef) + "    return f(q_idx) >= kv_idx\n\ndef f(x):\n"
                                  "    for i in range(3):\n        x = x + i\n    return x\n",
              "5:5", "control flow (`if`, loops) is not supported");
}

TEST(SpecErrors, PythonAndOnTensors) {
  ExpectError(std::string(kDef) + "    return (q_idx > 1) and (kv_idx > 2)\n", "2:13",
              "combine masks with & | ~");
}

// TorchScript reads `~a & b` as ~(a & b), Python (and FlexAttention) as (~a) & b: refused at the
// `~`, so the kernel cannot silently compute the other mask. Parenthesized, both forms load.
TEST(SpecErrors, BitNotOverAnUnparenthesizedBinaryOperand) {
  ExpectError(std::string(kDef) + "    return ~(q_idx < 2) & (kv_idx <= q_idx)\n", "2:12",
              "`~` here applies to all of `(q_idx < 2) & (kv_idx <= q_idx)`");
  ExpectError(std::string(kDef) + "    return (~kv_idx + q_idx) > 0\n", "2:13",
              "write `(~x) ...` for Python's meaning");
  ExpectError(std::string(kDef) + "    return (~kv_idx & 7) == (q_idx & 7)\n", "2:13",
              "TorchScript, which reads the spec, gives `~` lower precedence");
  // Parentheses inside the operand do not make it parenthesized.
  ExpectError(std::string(kDef) + "    return ~ ( (kv_idx & 7) == 0 ) | (q_idx >= kv_idx)\n",
              "2:12", "`~` here applies to all of");
  for (const char* body : {"    return ((~kv_idx) & 7) == (q_idx & 7)\n",
                           "    return (~(kv_idx & 7)) == (q_idx & 7)\n",
                           "    return ~(q_idx < kv_idx)\n",
                           "    return (~ ( (kv_idx & 7) == 0 )) | (q_idx >= kv_idx)\n",
                           "    return ~((q_idx < 2) & (kv_idx <= q_idx))\n"}) {
    SCOPED_TRACE(body);
    EXPECT_TRUE(spec::LoadSpecSource(std::string(kDef) + body, "spec.py").ok());
  }
}

TEST(SpecErrors, BitOperationOnFloats) {
  ExpectError(std::string(kDef) + "    return (q_idx.float() & 1) == 0\n", "2:13",
              "mask_mod failed on whole index tensors");
}

TEST(SpecErrors, SlicedCapturedTensor) {
  ExpectError("def mask_mod(b, h, q_idx, kv_idx, doc):\n    return doc[:, q_idx] == 0\n", "2:12",
              "slices (`:`, `...`) of `doc` are not supported: index every dimension");
}

TEST(SpecErrors, CapturedTensorUsedWithTwoRanks) {
  ExpectError("def mask_mod(b, h, q_idx, kv_idx, doc):\n    return (doc[q_idx] == 0) & (doc + q_idx > 0)\n",
              "2:33", "`doc` is used as a value (rank 0) here but with 1 index at t.py:2:13");
}

TEST(SpecErrors, PythonMinOnTensorsFailsOnWholeTensors) {
  ExpectError(std::string(kDef) + "    return min(q_idx, kv_idx) > 3\n", "2:12",
              "mask_mod failed on whole index tensors: ");
}

TEST(SpecErrors, UndefinedName) {
  ExpectError(std::string(kDef) + "    return q_idx >= windw\n", "2:21", "undefined value windw");
}

TEST(SpecErrors, TopLevelStatement) {
  ExpectError(std::string("WINDOW = 3\n") + kDef + "    return q_idx - kv_idx < WINDOW\n", "1:1",
              "a spec file holds only imports and function definitions");
}

TEST(SpecErrors, NeitherFunction) {
  ExpectError("def helper(x):\n    return x\n", "1:1",
              "defines neither mask_mod(b, h, q_idx, kv_idx) nor score_mod");
}

TEST(SpecErrors, FunctionDefinedTwice) {
  ExpectError(std::string(kDef) + "    return q_idx >= kv_idx\n" + kDef + "    return q_idx > 0\n",
              "3:5", "mask_mod is defined twice (first at line 1)");
}

TEST(SpecErrors, MissingFileIsNotFound) {
  const std::string path = ::testing::TempDir() + "/no_such_dir/missing_spec.py";
  auto spec = LoadSpecFile(path);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr(path));
}

TEST(SpecErrors, UnreadableFileIsPermissionDenied) {
  const std::string path = testing::WriteTempFile("unreadable.py", "def mask_mod(b, h, q, k):\n"
                                                                   "    return q >= k\n");
  ASSERT_EQ(chmod(path.c_str(), 0), 0);
  if (access(path.c_str(), R_OK) == 0) {
    chmod(path.c_str(), 0644);
    GTEST_SKIP() << "running with privileges that read any file (root)";
  }
  auto spec = LoadSpecFile(path);
  chmod(path.c_str(), 0644);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr(path));
}

TEST(SpecErrors, FileErrorsNameTheFilePath) {
  const std::string path = testing::WriteTempFile("bad.py", std::string(kDef) + "    return q_idx\n");
  auto spec = LoadSpecFile(path);
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), StartsWith(path + ":2:5: mask_mod returns int"));
}

}  // namespace
}  // namespace cubridge::spec
