// The backward on the CPU for every example and generality spec (issue 29, items 2, 3 and 6): the
// rules transfer each expert's base backward program (base_bwd.cuir) to the spec — the mask's
// query blocks per K tile, the score_mod and its derivatives, the learnable captured tensors'
// gradients — and the interpreter's dQ, dK, dV and buffer gradients match the float64 autograd
// of the spec at ragged shapes (Sq != Skv both ways, a batch of 2, a problem smaller than one
// tile), under MHA and GQA.
#include <string>

#include "cuir/ir/program.h"
#include "cuir/pipeline/stages.h"
#include "cuir/pipeline/verify_backward.h"
#include "cuir/transfer/transfer.h"
#include "gtest/gtest.h"
#include "tests/generality_suite.h"
#include "tests/ir/ir_test_util.h"

namespace cubridge::pipeline {
namespace {

using cubridge::testing::GeneralitySpec;

cuir::Program BaseBackward(const std::string& expert) {
  auto p = cuir::ParseProgram(cuir::testing::ReadFileOrDie(cuir::testing::SourcePath(
                                  "cuir/experts/" + expert + "/base_bwd.cuir")),
                              expert + "/base_bwd.cuir");
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : cuir::Program{};
}

// Transfers the expert's backward to the spec and verifies it on the CPU, for an MHA bf16 config
// on the Hopper expert's program and a GQA fp16 one on the sm_80 expert's.
void ExpectBackwardVerifies(const GeneralitySpec& g) {
  auto loaded = cubridge::testing::LoadSuiteSpec(g);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const spec::Spec& s = *loaded;
  for (const auto& [hq, hkv, dtype, expert] :
       {std::tuple{4, 4, cuir::DType::kBF16, "fa3_sm90"},
        std::tuple{8, 2, cuir::DType::kFP16, "fa2_sm80"}}) {
    SCOPED_TRACE(expert);
    cuir::AttentionConfig c;
    c.batch = 2;
    c.heads_q = hq;
    c.heads_kv = hkv;
    c.head_dim = 64;
    c.seqlen_q = 130;
    c.seqlen_kv = 130;
    c.dtype = dtype;
    transfer::VariantSpec v = ToVariantSpec(s);
    v.grad_buffers = LearnableBuffers(s);
    auto t = transfer::Transfer(BaseBackward(expert), v, c);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_TRUE(cuir::IsBackward(t->program));
    // The default shapes (BackwardVerifyShapes), as adapt verifies.
    auto r = VerifyBackwardOnCpu(t->program, s, c, g.buffers, v.grad_buffers, 20261129, {});
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << cuir::PrintProgram(t->program);
    EXPECT_TRUE(r->passed) << r->FailureDetail() << "\n" << cuir::PrintProgram(t->program);
  }
}

class BackwardGenerality : public ::testing::TestWithParam<GeneralitySpec> {};

TEST_P(BackwardGenerality, GradientsMatchTheOracle) { ExpectBackwardVerifies(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Suite, BackwardGenerality,
                         ::testing::ValuesIn(cubridge::testing::GeneralitySuite()),
                         cubridge::testing::GeneralityName);

class BackwardExamples : public ::testing::TestWithParam<GeneralitySpec> {};

TEST_P(BackwardExamples, GradientsMatchTheOracle) { ExpectBackwardVerifies(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Examples, BackwardExamples, ::testing::ValuesIn(cubridge::testing::ExampleSpecs()),
                         cubridge::testing::GeneralityName);

}  // namespace
}  // namespace cubridge::pipeline
