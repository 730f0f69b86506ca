// The CPU verification runs the interpreter on Llama3.1-405B-like head configurations; this
// keeps such a run fast and checks a few heads of it against a direct float64 computation.
#include <chrono>
#include <iostream>

#include <torch/types.h>

#include "cuir/spec/spec.h"
#include "gtest/gtest.h"
#include "tests/interp/interp_test_util.h"

namespace cubridge::interp::testing {
namespace {

// softmax(q k^T * scale) v for one query head, in float64.
torch::Tensor ReferenceHead(const spec::AttentionInputs& in, const cuir::AttentionConfig& c,
                            int64_t h) {
  const int64_t kv_h = h / (c.heads_q / c.heads_kv);
  const torch::Tensor q = in.q[0][h].to(torch::kDouble);
  const torch::Tensor k = in.k[0][kv_h].to(torch::kDouble);
  const torch::Tensor v = in.v[0][kv_h].to(torch::kDouble);
  return torch::softmax(torch::mm(q, k.t()) * c.scale(), 1).mm(v);
}

TEST(Performance, Llama405BHeadsAtRaggedLength) {
  const auto config = Config(cuir::DType::kBF16, 128, 257, 257, /*heads_q=*/128, /*heads_kv=*/8);
  Pieces p;
  p.kv_head = "h // (heads_q // heads_kv)";
  const cuir::Program program = Parse(ProgramText(p));
  auto spec = spec::LoadSpecSource(kFullSpec, "full.py");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto inputs = spec::MakeInputs(*spec, config, {}, 11);
  ASSERT_TRUE(inputs.ok()) << inputs.status();

  const auto start = std::chrono::steady_clock::now();
  auto out = Interpret(program, config, *inputs);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(out.ok()) << out.status();
  std::cout << "interpreter: " << config.ToString() << " in " << seconds << " s\n";
  RecordProperty("interpreter_seconds", std::to_string(seconds));
  // Generous: the target is ~2 s on two cores; this only catches a regression by a large factor.
  EXPECT_LT(seconds, 30.0);

  EXPECT_FALSE(torch::any(torch::isnan(out->o)).item<bool>()) << "rows left unwritten";
  for (int64_t h : {0, 77, 127}) {
    EXPECT_LE(MaxErrors(out->o[0][h], ReferenceHead(*inputs, config, h)).max_abs,
              OTolerance(config.dtype))
        << "head " << h;
  }
}

}  // namespace
}  // namespace cubridge::interp::testing
