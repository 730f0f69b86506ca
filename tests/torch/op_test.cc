// The op library from C++, as a LibTorch user links it: torch.ops.cubridge.attention through the
// dispatcher, against a kernel folder the real CLI writes (adapt --local on the CPU). Meta shapes,
// the checks that run before any launch, and the CPU error; the numerics are GPU tests.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/torch/kernel.h"

namespace cubridge::torch_op {
namespace {

namespace fs = std::filesystem;

using Op = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                             const at::Tensor&, at::TensorList, double,
                                             c10::string_view);

class TorchOp : public ::testing::Test {
 protected:
  // One kernel for the suite: learned ALiBi slopes (float32 [H]) on a causal mask, GQA 4/2.
  static void SetUpTestSuite() {
    dir_ = new std::string((fs::temp_directory_path() / ("cubridge-op-test-" + std::to_string(::getpid()))).string());
    const std::string spec = std::string(CUBRIDGE_SOURCE_ROOT) +
                             "/examples/specs/generality/alibi_learned_slopes.py";
    const std::string cmd = std::string(CUBRIDGE_CLI) + " adapt " + spec + " --local --no-cache --out " +
                            *dir_ + " --arch sm_90 --batch 1 --heads-q 4 --heads-kv 2 --head-dim 64 " +
                            "--seqlen 40 --dtype bf16 --buffer slopes=random:float32 > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }

  static c10::TypedOperatorHandle<Op> op() {
    return c10::Dispatcher::singleton().findSchemaOrThrow("cubridge::attention", "").typed<Op>();
  }
  static at::Tensor T(std::vector<int64_t> sizes, at::ScalarType dtype = at::kBFloat16,
                      c10::Device device = at::kCPU) {
    return at::zeros(sizes, at::TensorOptions().dtype(dtype).device(device));
  }

  static std::string* dir_;
};
std::string* TorchOp::dir_ = nullptr;

TEST_F(TorchOp, TheKernelFolderSaysWhatACallMustBe) {
  auto k = ReadKernel(*dir_);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->arch, "sm_90");
  EXPECT_EQ(k->dtype, 0);
  EXPECT_EQ(k->head_dim, 64);
  EXPECT_EQ(k->heads_q, 4);
  EXPECT_EQ(k->heads_kv, 2);
  ASSERT_EQ(k->buffers.size(), 1u);
  EXPECT_EQ(k->buffers[0].name, "slopes");
  EXPECT_EQ(k->buffers[0].rank(), 1);
  EXPECT_EQ(LeastSize(k->buffers[0].extents[0], {1, 4, 2, 40, 40, 64}), 4);  // heads_q
  EXPECT_TRUE(k->entries.count("attention"));
  EXPECT_EQ(ReadKernel(*dir_ + "/nothing").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(TorchOp, LeastSizesAreExpressionsOfTheShape) {
  const CallShape s{2, 8, 2, 300, 257, 128};
  EXPECT_EQ(LeastSize("32", s), 32);
  EXPECT_EQ(LeastSize("max(seqlen_q, seqlen_kv)", s), 300);
  EXPECT_EQ(LeastSize("seqlen_kv + 1", s), 258);
  EXPECT_EQ(LeastSize("?", s), std::nullopt);
  EXPECT_EQ(LeastSize("window + 1", s), std::nullopt);  // not the shape's alone: the plan checks
}

TEST_F(TorchOp, MetaTensorsGetFlexAttentionsShapes) {
  const c10::Device meta(c10::DeviceType::Meta);
  auto [o, lse] = op().call(T({2, 4, 33, 64}, at::kBFloat16, meta), T({2, 2, 50, 64}, at::kBFloat16, meta),
                            T({2, 2, 50, 64}, at::kBFloat16, meta), {T({4}, at::kFloat, meta)}, 0.125,
                            *dir_);
  EXPECT_EQ(o.sizes(), (std::vector<int64_t>{2, 4, 33, 64}));
  EXPECT_EQ(o.scalar_type(), at::kBFloat16);
  EXPECT_EQ(lse.sizes(), (std::vector<int64_t>{2, 4, 33}));
  EXPECT_EQ(lse.scalar_type(), at::kFloat);
}

TEST_F(TorchOp, BadCallsRaiseBeforeAnyLaunchAndTheCpuSaysWhere) {
  const auto q = T({1, 4, 40, 64}), kv = T({1, 2, 40, 64});
  const auto slopes = T({4}, at::kFloat);
  auto message = [&](const at::Tensor& q, std::vector<at::Tensor> buffers) {
    try {
      op().call(q, kv, kv, buffers, 0.125, *dir_);
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message(q.to(at::kHalf), {slopes}), ::testing::HasSubstr("this kernel was built for bfloat16"));
  EXPECT_THAT(message(q, {slopes.to(at::kInt)}),
              ::testing::HasSubstr("captured tensor 'slopes' is Int; the kernel was built for float32"));
  EXPECT_THAT(message(q, {T({3}, at::kFloat)}),
              ::testing::HasSubstr("at this call's shape the variant reads 4 entries along dimension 0"));
  EXPECT_THAT(message(q, {slopes}), ::testing::HasSubstr("runs on a CUDA GPU and q is on cpu"));
}

}  // namespace
}  // namespace cubridge::torch_op
