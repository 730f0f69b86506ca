// Standalone check + timing of the sm_80 expert mainloop, with hand-written full and causal
// variants. Not the product path (that is lowering + the GPU verifier); this exists to iterate on
// the kernel quickly on a lent GPU:  nvcc -O3 -std=c++17 -arch=sm_90 fa2_check.cu && ./a.out
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "../../cuir/experts/fa2_sm80/fwd_kernel.cuh"

using namespace cubridge::fa2;

#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e = (x);                                                                  \
    if (e != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

template <bool kCausal>
struct HandVariant {
  struct Args {};
  static constexpr bool kScoreMod = false;
  static constexpr bool kMask = kCausal;
  __device__ static int kv_head(int h, const Problem& p) { return h / (p.heads_q / p.heads_kv); }
  template <int BN>
  __device__ static BlockList blocks_for(int q_hi, const Problem& p) {
    const int n_max = (p.seqlen_kv + BN - 1) / BN;
    const int hi = kCausal ? min(n_max, (q_hi + BN - 1) / BN) : n_max;
    return BlockList::ranges(0, hi, 0, 0, n_max);
  }
  __device__ static float score_mod(float s, int, int, int, int, const Args&) { return s; }
  __device__ static bool mask(int, int, int q, int kv, const Args&) { return q >= kv; }
};

template <int BN, bool kCausal>
struct Variant : HandVariant<kCausal> {
  using Args = typename HandVariant<kCausal>::Args;
  __device__ static BlockList blocks(int, int, int, int, int q_hi, const Problem& p, const Args&) {
    return HandVariant<kCausal>::template blocks_for<BN>(q_hi, p);
  }
  __device__ static bool full(const BlockList&, int, int n_block, int q_lo, int, const Problem&,
                              const Args&) {
    return !kCausal || (n_block + 1) * BN - 1 <= q_lo;
  }
};

// Reference: one thread per (b, h, q) row, fp32, two passes.
template <typename Elem>
__global__ void reference(Problem p, bool causal, int D) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  const int h = blockIdx.y, b = blockIdx.z;
  if (row >= p.seqlen_q) return;
  const int kv_h = h / (p.heads_q / p.heads_kv);
  auto q = static_cast<const Elem*>(p.q) + b * p.q_stride[0] + h * p.q_stride[1] + row * p.q_stride[2];
  auto k = static_cast<const Elem*>(p.k) + b * p.k_stride[0] + kv_h * p.k_stride[1];
  auto v = static_cast<const Elem*>(p.v) + b * p.v_stride[0] + kv_h * p.v_stride[1];
  float m = -INFINITY;
  for (int j = 0; j < p.seqlen_kv; ++j) {
    if (causal && j > row) break;
    float s = 0;
    for (int d = 0; d < D; ++d) s += float(q[d]) * float(k[j * p.k_stride[2] + d]);
    m = fmaxf(m, s * p.scale);
  }
  float l = 0, acc[256];
  for (int d = 0; d < D; ++d) acc[d] = 0;
  for (int j = 0; j < p.seqlen_kv; ++j) {
    if (causal && j > row) break;
    float s = 0;
    for (int d = 0; d < D; ++d) s += float(q[d]) * float(k[j * p.k_stride[2] + d]);
    const float e = expf(s * p.scale - m);
    l += e;
    for (int d = 0; d < D; ++d) acc[d] += e * float(v[j * p.v_stride[2] + d]);
  }
  float* o = static_cast<float*>(p.o) + ((int64_t(b) * p.heads_q + h) * p.seqlen_q + row) * D;
  for (int d = 0; d < D; ++d) o[d] = l > 0 ? acc[d] / l : 0.f;
  p.lse[(int64_t(b) * p.heads_q + h) * p.seqlen_q + row] = l > 0 ? m + logf(l) : -INFINITY;
}

struct Buffers {
  void *q, *k, *v, *o;
  float* lse;
};

template <typename Traits, bool kCausal>
float run(const Problem& p, int iters) {
  using V = Variant<Traits::BN, kCausal>;
  auto kernel = attn_fwd_kernel<Traits, V>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes));
  dim3 grid((p.seqlen_q + Traits::BM - 1) / Traits::BM, p.heads_q, p.batch);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> times;
  for (int i = 0; i < iters + 3; ++i) {
    cudaEventRecord(a);
    kernel<<<grid, Traits::kThreads, Traits::kSmemBytes>>>(p, typename V::Args{});
    cudaEventRecord(b);
    CHECK(cudaEventSynchronize(b));
    CHECK(cudaGetLastError());
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    if (i >= 3) times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  return times.empty() ? 0 : times[times.size() / 2];
}

Problem make_problem(int B, int Hq, int Hkv, int Sq, int Skv, int D, Buffers& buf) {
  Problem p{};
  const size_t nq = size_t(B) * Hq * Sq * D, nk = size_t(B) * Hkv * Skv * D;
  CHECK(cudaMalloc(&buf.q, nq * 2));
  CHECK(cudaMalloc(&buf.k, nk * 2));
  CHECK(cudaMalloc(&buf.v, nk * 2));
  CHECK(cudaMalloc(&buf.o, nq * 2));
  CHECK(cudaMalloc(&buf.lse, size_t(B) * Hq * Sq * 4));
  std::mt19937 rng(1234 + Sq);
  std::normal_distribution<float> dist;
  std::vector<__nv_bfloat16> hq(nq), hk(nk), hv(nk);
  for (auto& x : hq) x = __float2bfloat16(dist(rng));
  for (auto& x : hk) x = __float2bfloat16(dist(rng));
  for (auto& x : hv) x = __float2bfloat16(dist(rng));
  CHECK(cudaMemcpy(buf.q, hq.data(), nq * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(buf.k, hk.data(), nk * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(buf.v, hv.data(), nk * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(buf.o, 0xff, nq * 2));  // poison: NaN in bf16
  p.q = buf.q; p.k = buf.k; p.v = buf.v; p.o = buf.o; p.lse = buf.lse;
  for (auto* s : {p.q_stride, p.o_stride}) { s[0] = int64_t(Hq) * Sq * D; s[1] = int64_t(Sq) * D; s[2] = D; }
  for (auto* s : {p.k_stride, p.v_stride}) { s[0] = int64_t(Hkv) * Skv * D; s[1] = int64_t(Skv) * D; s[2] = D; }
  p.batch = B; p.heads_q = Hq; p.heads_kv = Hkv; p.seqlen_q = Sq; p.seqlen_kv = Skv;
  p.scale = 1.f / std::sqrt(float(D));
  p.scale_log2 = p.scale * 1.4426950408889634f;
  return p;
}

void free_buffers(Buffers& b) { cudaFree(b.q); cudaFree(b.k); cudaFree(b.v); cudaFree(b.o); cudaFree(b.lse); }

template <typename Traits, bool kCausal>
bool check(int B, int Hq, int Hkv, int Sq, int Skv) {
  constexpr int D = Traits::D;
  Buffers buf;
  Problem p = make_problem(B, Hq, Hkv, Sq, Skv, D, buf);
  run<Traits, kCausal>(p, 0);
  CHECK(cudaDeviceSynchronize());
  const size_t nq = size_t(B) * Hq * Sq * D;
  std::vector<__nv_bfloat16> got(nq);
  std::vector<float> got_lse(size_t(B) * Hq * Sq);
  CHECK(cudaMemcpy(got.data(), buf.o, nq * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(got_lse.data(), buf.lse, got_lse.size() * 4, cudaMemcpyDeviceToHost));
  Problem r = p;
  float *ro, *rlse;
  CHECK(cudaMalloc(&ro, nq * 4));
  CHECK(cudaMalloc(&rlse, got_lse.size() * 4));
  r.o = ro; r.lse = rlse;
  reference<__nv_bfloat16><<<dim3((Sq + 127) / 128, Hq, B), 128>>>(r, kCausal, D);
  CHECK(cudaGetLastError());
  std::vector<float> want(nq), want_lse(got_lse.size());
  CHECK(cudaMemcpy(want.data(), ro, nq * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(want_lse.data(), rlse, want_lse.size() * 4, cudaMemcpyDeviceToHost));
  double max_err = 0, max_lse = 0;
  size_t bad = 0;
  for (size_t i = 0; i < nq; ++i) {
    const double e = std::fabs(double(__bfloat162float(got[i])) - want[i]);
    if (!(e <= 2e-2 + 2e-2 * std::fabs(want[i]))) ++bad;
    if (!(e <= max_err)) max_err = e;
  }
  for (size_t i = 0; i < want_lse.size(); ++i) {
    const double e = std::isinf(want_lse[i]) && want_lse[i] == got_lse[i] ? 0 : std::fabs(double(got_lse[i]) - want_lse[i]);
    if (!(e <= 1e-3)) ++bad;
    if (!(e <= max_lse)) max_lse = e;
  }
  std::printf("check D=%d BM=%d BN=%d W=%d %s B=%d Hq=%d Hkv=%d Sq=%d Skv=%d: max|dO|=%.3g max|dLSE|=%.3g bad=%zu %s\n",
              D, Traits::BM, Traits::BN, Traits::kWarps, kCausal ? "causal" : "full", B, Hq, Hkv, Sq, Skv,
              max_err, max_lse, bad, bad ? "FAIL" : "ok");
  cudaFree(ro); cudaFree(rlse);
  free_buffers(buf);
  return bad == 0;
}

template <typename Traits, bool kCausal>
void bench(int S, int Hq, int Hkv) {
  constexpr int D = Traits::D;
  const int B = std::max(1, 16384 / S);
  Buffers buf;
  Problem p = make_problem(B, Hq, Hkv, S, S, D, buf);
  const float ms = run<Traits, kCausal>(p, 20);
  const double kept = kCausal ? double(S) * (S + 1) / 2 : double(S) * S;
  const double tflops = 4.0 * B * Hq * kept * D / (ms * 1e-3) / 1e12;
  std::printf("bench D=%d BM=%d BN=%d W=%d %s S=%d B=%d Hq=%d: %.3f ms  %.1f TFLOP/s\n", D, Traits::BM,
              Traits::BN, Traits::kWarps, kCausal ? "causal" : "full", S, B, Hq, ms, tflops);
  free_buffers(buf);
}

int main() {
  using T128 = KernelTraits<__nv_bfloat16, 128, 128, 64, 4>;
  using T64 = KernelTraits<__nv_bfloat16, 64, 128, 64, 4>;
  using T256 = KernelTraits<__nv_bfloat16, 256, 128, 64, 8>;
  bool ok = true;
  ok &= check<T128, false>(2, 4, 2, 257, 300);
  ok &= check<T128, true>(2, 4, 2, 300, 300);
  ok &= check<T128, true>(1, 2, 1, 77, 200);
  ok &= check<T64, true>(1, 4, 4, 333, 333);
  ok &= check<T256, true>(1, 2, 2, 200, 257);
  bench<T128, false>(8192, 32, 32);
  bench<T128, true>(8192, 32, 32);
  bench<T128, false>(1024, 32, 32);
  bench<T64, true>(8192, 32, 32);
  bench<T256, true>(8192, 32, 32);
  std::printf(ok ? "ALL OK\n" : "SOME CHECKS FAILED\n");
  return ok ? 0 : 1;
}
