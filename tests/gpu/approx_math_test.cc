// The device forms of cuir_scalar.cuh's approximate math (docs/lowering.md, "Approximate math")
// against double-precision libm on the host, over the ranges the documentation states bounds
// for: a program compiled by nvcc evaluates every function on the GPU at inputs spread over
// each range and prints, per function, how far the worst one lands from its documented bound.
// Without a usable GPU (or nvcc) the test reports itself skipped.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "cuir/lower/expert.h"
#include "tests/lower/lower_test_util.h"
#include "worker/gpu/driver.h"

namespace cubridge::gpu {
namespace {

// Each line of the program's output: NAME worst-ratio, where ratio = |f(x) - ref(x)| / bound(x)
// and bound is the documented one plus one ulp for rounding the double reference to float.
const char kProgram[] = R"(
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <vector>

enum Fn { kExp, kLog, kLog2, kLog10, kSin, kCos, kSqrt, kDiv, kCount };
const char* const kNames[] = {"exp", "log", "log2", "log10", "sin", "cos", "sqrt", "div"};

__global__ void eval(int fn, const float* x, const float* y, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float r = 0.f;
  switch (fn) {
    case kExp: r = cuir_exp(x[i]); break;
    case kLog: r = cuir_log(x[i]); break;
    case kLog2: r = cuir_log2(x[i]); break;
    case kLog10: r = cuir_log10(x[i]); break;
    case kSin: r = cuir_sin(x[i]); break;
    case kCos: r = cuir_cos(x[i]); break;
    case kSqrt: r = cuir_sqrt(x[i]); break;
    case kDiv: r = cuir_div_f(x[i], y[i]); break;
  }
  out[i] = r;
}

static double ulp(double v) {  // the spacing of floats at |v| (denormal spacing below)
  const float f = fabsf((float)v);
  return f < 1.17549435e-38f ? 1.4e-45 : (double)nextafterf(f, INFINITY) - f;
}

static uint32_t state = 12345u;
static double uniform() {
  state = state * 1664525u + 1013904223u;
  return (state >> 8) / 16777216.0;
}

int main() {
  const int n = 1 << 20;
  std::vector<float> x(n), y(n, 1.f), out(n);
  float *dx, *dy, *dout;
  cudaMalloc(&dx, n * 4), cudaMalloc(&dy, n * 4), cudaMalloc(&dout, n * 4);
  int failures = 0;
  for (int fn = 0; fn < kCount; ++fn) {
    for (int i = 0; i < n; ++i) {
      const double u = uniform();
      switch (fn) {
        case kExp: x[i] = (float)(-87.0 + 175.0 * u); break;
        case kLog: case kLog2: case kLog10: case kSqrt:
          // half in [0.5, 2], half log-uniform over [1e-30, 1e30]
          x[i] = (float)(i % 2 ? 0.5 + 1.5 * u : pow(10.0, -30.0 + 60.0 * u)); break;
        case kSin: case kCos:
          // [-pi, pi], the reduced range up to 2^17, and past it (libm: CUDA's sinf is 2 ulp)
          x[i] = (float)(i % 3 == 0 ? -3.2 + 6.4 * u
                         : i % 3 == 1 ? -131072.0 + 262144.0 * u : -1e6 + 2e6 * u); break;
        case kDiv:
          x[i] = (float)((uniform() - 0.5) * pow(10.0, -30.0 + 60.0 * u));
          y[i] = (float)((uniform() - 0.5) * pow(10.0, -30.0 + 60.0 * uniform()));
          if (y[i] == 0.f) y[i] = 1.f;
          break;
      }
    }
    cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dy, y.data(), n * 4, cudaMemcpyHostToDevice);
    eval<<<n / 256, 256>>>(fn, dx, dy, dout, n);
    if (cudaMemcpy(out.data(), dout, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
      printf("cuda error\n");
      return 2;
    }
    double worst = 0.0;
    int worst_i = 0;
    for (int i = 0; i < n; ++i) {
      const double v = x[i];
      double ref = 0.0, bound = 0.0;
      switch (fn) {
        case kExp: ref = exp(v); bound = (2.0 + 1.17 * fabs(v)) * ulp(ref); break;
        case kLog: ref = log(v); bound = (v >= 0.5 && v <= 2.0) ? 0x1p-21 : 3 * ulp(ref); break;
        case kLog2: ref = log2(v); bound = (v >= 0.5 && v <= 2.0) ? 0x1p-21 : 3 * ulp(ref); break;
        case kLog10: ref = log10(v); bound = (v >= 0.5 && v <= 2.0) ? 0x1p-21 : 3 * ulp(ref); break;
        case kSin: ref = sin(v); bound = fabs(v) <= 131072.0 ? 0x1p-21 + 3e-7 : 2 * ulp(ref); break;
        case kCos: ref = cos(v); bound = fabs(v) <= 131072.0 ? 0x1p-21 + 3e-7 : 2 * ulp(ref); break;
        case kSqrt: ref = sqrt(v); bound = 0x1p-23 * ref; break;
        case kDiv: ref = v / (double)y[i]; bound = 2 * ulp(ref); break;
      }
      // Past float's range, or (division) a result below its normal range, which div.full
      // need not keep: not values the bounds are about.
      if (fabs(ref) > 3.4e38 || (fn == kDiv && fabs(ref) < 1.18e-38)) continue;
      bound += ulp(ref);
      const double ratio = fabs(out[i] - ref) / bound;
      if (!(ratio <= worst)) worst = ratio, worst_i = i;
    }
    printf("%s %.3f at x=%.9g y=%.9g\n", kNames[fn], worst, x[worst_i], y[worst_i]);
    if (!(worst <= 1.0)) ++failures;
  }
  return failures;
}
)";

TEST(GpuApproxMath, EveryDeviceFormStaysWithinItsDocumentedBound) {
  auto device = ProbeDevice(0);
  if (!device.ok()) GTEST_SKIP() << "no usable GPU: " << device.status().message();
  const std::string nvcc = lower::testing::FindNvcc();
  if (nvcc.empty()) GTEST_SKIP() << "no nvcc";
  const auto r = lower::testing::BuildAndRunProgram(
      nvcc, "approx", absl::StrCat("-std=c++17 -O3 -arch=sm_", device->cc_major, device->cc_minor),
      absl::StrCat("#include \"", lower::ExpertsDir(), "/common/cuir_scalar.cuh\"\n", kProgram));
  ASSERT_EQ(r.build.exit_code, 0) << r.build.output;
  const auto& run = r.run;
  EXPECT_EQ(run.exit_code, 0) << "a function exceeds its bound (worst |error| / bound per "
                                 "function, > 1 fails):\n" << run.output;
  std::printf("%s", run.output.c_str());
  lower::testing::CleanUpTempDir(r.dir, HasFailure());
}

}  // namespace
}  // namespace cubridge::gpu
