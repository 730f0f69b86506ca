#include "worker/gpu/autotune.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "worker/gpu/driver.h"

namespace cubridge::gpu {
namespace {

using ::testing::HasSubstr;

TEST(Autotuner, WithoutAGpuTheProbeSaysWhy) {
  if (ProbeDevice(0).ok()) GTEST_SKIP() << "this machine has a GPU; the gpu suite covers it";
  GpuAutotuner tuner({});
  auto probe = tuner.Probe(lower::Arch::kSm80);
  ASSERT_FALSE(probe.ok());
  EXPECT_THAT(probe.status().message(), ::testing::AnyOf(HasSubstr("CUDA driver"), HasSubstr("cuInit"),
                                                         HasSubstr("no GPU")));
}

}  // namespace
}  // namespace cubridge::gpu
