// Standalone check and timing of the sm_90 forward-attention expert (cuir/experts/fa3_sm90):
// fresh random inputs per check, NaN-poisoned outputs, a naive fp32 reference kernel, then
// CUDA-event timings at 8k tokens. Exits non-zero if any check fails.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <string>
#include <type_traits>
#include <vector>

#include "../../cuir/experts/fa3_sm90/kernel.cuh"

using cubridge::fa3::Config;
using cubridge::fa3::FwdParams;
using cubridge::fa3::Scheduler;

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(2);                                                                         \
    }                                                                                  \
  } while (0)

// ---------------------------------------------------------------- inputs

__device__ __forceinline__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

template <typename T>
__global__ void fill_uniform(T* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const float u = (hash32(seed * 0x9E3779B97F4A7C15ULL + i) >> 8) * (1.f / 16777216.f);
    p[i] = static_cast<T>(2.f * u - 1.f);
  }
}

template <typename T>
__global__ void fill_value(T* p, size_t n, float v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = static_cast<T>(v);
}

// ---------------------------------------------------------------- layout of one problem

struct Problem {
  int b, hq, hkv, sq, skv, d;
  bool causal;
  // Q and O are [b, s, h, d] in memory (so the row stride is h*d: exercises strides); K and V
  // are [b, h, s, d].
  __host__ __device__ int64_t q_bs() const { return (int64_t)sq * hq * d; }
  __host__ __device__ int64_t q_hs() const { return d; }
  __host__ __device__ int64_t q_rs() const { return (int64_t)hq * d; }
  __host__ __device__ int64_t kv_bs() const { return (int64_t)hkv * skv * d; }
  __host__ __device__ int64_t kv_hs() const { return (int64_t)skv * d; }
  __host__ __device__ int64_t kv_rs() const { return d; }
  size_t q_elems() const { return (size_t)b * sq * hq * d; }
  size_t kv_elems() const { return (size_t)b * hkv * skv * d; }
  size_t lse_elems() const { return (size_t)b * hq * sq; }
  double kept_pairs() const {
    if (!causal) return (double)sq * skv;
    double n = 0;
    for (int q = 0; q < sq; ++q) n += std::min(q + 1, skv);
    return n;
  }
  double flops() const { return 4.0 * b * hq * d * kept_pairs(); }
};

// ---------------------------------------------------------------- reference

template <typename T, int D>
__global__ void reference_kernel(const T* q, const T* k, const T* v, float* o, float* lse,
                                 Problem p, float scale) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= p.b * p.hq * p.sq) return;
  const int row = idx % p.sq, h = (idx / p.sq) % p.hq, b = idx / (p.sq * p.hq);
  const int hk = h / (p.hq / p.hkv);
  const T* qr = q + b * p.q_bs() + h * p.q_hs() + row * p.q_rs();
  const T* kh = k + b * p.kv_bs() + hk * p.kv_hs();
  const T* vh = v + b * p.kv_bs() + hk * p.kv_hs();
  float qf[D];
  for (int i = 0; i < D; ++i) qf[i] = static_cast<float>(qr[i]);
  const int end = p.causal ? min(p.skv, row + 1) : p.skv;
  float mx = -INFINITY;
  for (int j = 0; j < end; ++j) {
    float s = 0.f;
    for (int i = 0; i < D; ++i) s += qf[i] * static_cast<float>(kh[(int64_t)j * D + i]);
    mx = fmaxf(mx, s * scale);
  }
  float acc[D];
  for (int i = 0; i < D; ++i) acc[i] = 0.f;
  float sum = 0.f;
  for (int j = 0; j < end; ++j) {
    float s = 0.f;
    for (int i = 0; i < D; ++i) s += qf[i] * static_cast<float>(kh[(int64_t)j * D + i]);
    const float e = expf(s * scale - mx);
    sum += e;
    for (int i = 0; i < D; ++i) acc[i] += e * static_cast<float>(vh[(int64_t)j * D + i]);
  }
  float* orow = o + ((int64_t)(b * p.hq + h) * p.sq + row) * D;
  for (int i = 0; i < D; ++i) orow[i] = sum > 0.f ? acc[i] / sum : 0.f;
  lse[idx] = sum > 0.f ? mx + logf(sum) : -INFINITY;
}

// ---------------------------------------------------------------- launch

typedef CUresult (*EncodeTiledFn)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                  const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                  const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                  CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

template <typename T>
static CUtensorMapDataType tmap_dtype() {
  return sizeof(T) == 2 && std::is_same<T, __half>::value ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                          : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
}

// 4-D map (d, row, head, batch); box = 64 columns (one 128-byte swizzle panel) x box_rows.
template <typename T>
static CUtensorMap make_map(const T* ptr, int d, int rows, int heads, int batch, int64_t rs,
                            int64_t hs, int64_t bs, int box_rows) {
  CUtensorMap m;
  const cuuint64_t dims[4] = {(cuuint64_t)d, (cuuint64_t)rows, (cuuint64_t)heads,
                              (cuuint64_t)batch};
  const cuuint64_t strides[3] = {(cuuint64_t)rs * sizeof(T), (cuuint64_t)hs * sizeof(T),
                                 (cuuint64_t)bs * sizeof(T)};
  const cuuint32_t box[4] = {64, (cuuint32_t)box_rows, 1, 1};
  const cuuint32_t estr[4] = {1, 1, 1, 1};
  CUresult r = cuTensorMapEncodeTiled(&m, tmap_dtype<T>(), 4, const_cast<T*>(ptr), dims, strides,
                                      box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                      CU_TENSOR_MAP_SWIZZLE_128B,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "cuTensorMapEncodeTiled failed (%d)\n", (int)r);
    exit(2);
  }
  return m;
}

template <typename T, int D, int OV>
struct Launcher {
  using Cfg = Config<T, D>;
  CUtensorMap tq, tk, tv;
  FwdParams prm;
  dim3 grid;

  Launcher(const Problem& p, const T* q, const T* k, const T* v, T* o, float* lse) {
    tq = make_map(q, D, p.sq, p.hq, p.b, p.q_rs(), p.q_hs(), p.q_bs(), Cfg::kBlockM);
    tk = make_map(k, D, p.skv, p.hkv, p.b, p.kv_rs(), p.kv_hs(), p.kv_bs(), Cfg::kBlockN);
    tv = make_map(v, D, p.skv, p.hkv, p.b, p.kv_rs(), p.kv_hs(), p.kv_bs(), Cfg::kBlockN);
    prm.o = o;
    prm.lse = lse;
    prm.o_batch_stride = p.q_bs();
    prm.o_head_stride = p.q_hs();
    prm.o_row_stride = p.q_rs();
    prm.batch = p.b;
    prm.heads_q = p.hq;
    prm.heads_kv = p.hkv;
    prm.seqlen_q = p.sq;
    prm.seqlen_kv = p.skv;
    prm.scale = 1.f / sqrtf((float)D);
    prm.scale_log2 = prm.scale * 1.4426950408889634f;
    prm.causal = p.causal ? 1 : 0;
    grid = Scheduler<Cfg::kBlockM>::grid(p.b, p.hq, p.sq);
    CK(cudaFuncSetAttribute(cubridge::fa3::fwd_kernel<T, D, OV>,
                            cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  }
  void launch() {
    cubridge::fa3::fwd_kernel<T, D, OV><<<grid, Cfg::kThreads, Cfg::kSmemBytes>>>(tq, tk, tv, prm);
  }
};

// ---------------------------------------------------------------- check

// A barrier-protocol bug shows as a kernel that never ends: give up after a deadline instead of
// hanging the whole run.
static void sync_or_die(const char* what) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t e = cudaStreamQuery(0);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) {
      fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
      exit(2);
    }
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(30)) {
      fprintf(stderr, "%s: still running after 30 s (deadlock?)\n", what);
      fflush(stdout);
      _exit(4);
    }
  }
}

struct Row {
  std::string name, status;
  double err, ms, tflops;
};
static std::vector<Row> g_rows;
static int g_failed = 0;
static uint64_t g_seed = 12345;

template <typename T>
static const char* tname() {
  return std::is_same<T, __half>::value ? "fp16" : "bf16";
}

static const char* vname(int ov) { return ov == 2 ? "pp" : ov == 1 ? "ovl" : "v0"; }

static std::string case_name(const char* t, int ov, const Problem& p) {
  char buf[160];
  snprintf(buf, sizeof buf, "%s %s d%d %s b%d h%d/%d s%d/%d", vname(ov), t, p.d,
           p.causal ? "causal" : "full", p.b, p.hq, p.hkv, p.sq, p.skv);
  return buf;
}

// Returns whether the check passed; *rel_out gets the relative L2 error of O.
template <typename T, int D, int OV>
static bool check(Problem p, double* rel_out) {
  p.d = D;
  T *q, *k, *v, *o;
  float *lse, *ref_o, *ref_lse;
  CK(cudaMalloc(&q, p.q_elems() * sizeof(T)));
  CK(cudaMalloc(&k, p.kv_elems() * sizeof(T)));
  CK(cudaMalloc(&v, p.kv_elems() * sizeof(T)));
  CK(cudaMalloc(&o, p.q_elems() * sizeof(T)));
  CK(cudaMalloc(&lse, p.lse_elems() * sizeof(float)));
  CK(cudaMalloc(&ref_o, p.q_elems() * sizeof(float)));
  CK(cudaMalloc(&ref_lse, p.lse_elems() * sizeof(float)));
  fill_uniform<<<256, 256>>>(q, p.q_elems(), g_seed++);
  fill_uniform<<<256, 256>>>(k, p.kv_elems(), g_seed++);
  fill_uniform<<<256, 256>>>(v, p.kv_elems(), g_seed++);
  fill_value<<<256, 256>>>(o, p.q_elems(), NAN);
  fill_value<<<256, 256>>>(lse, p.lse_elems(), NAN);
  CK(cudaGetLastError());

  Launcher<T, D, OV> L(p, q, k, v, o, lse);
  L.launch();
  CK(cudaGetLastError());
  sync_or_die(case_name(tname<T>(), OV, p).c_str());
  const int nrows = p.b * p.hq * p.sq;
  reference_kernel<T, D><<<(nrows + 127) / 128, 128>>>(q, k, v, ref_o, ref_lse, p, L.prm.scale);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());

  std::vector<T> ho(p.q_elems());
  std::vector<float> hl(p.lse_elems()), hro(p.q_elems()), hrl(p.lse_elems());
  CK(cudaMemcpy(ho.data(), o, ho.size() * sizeof(T), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hl.data(), lse, hl.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hro.data(), ref_o, hro.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hrl.data(), ref_lse, hrl.size() * sizeof(float), cudaMemcpyDeviceToHost));

  double max_do = 0, num = 0, den = 0, max_dl = 0;
  long nan_o = 0, nan_l = 0, inf_mismatch = 0;
  for (int b = 0; b < p.b; ++b)
    for (int h = 0; h < p.hq; ++h)
      for (int r = 0; r < p.sq; ++r) {
        const size_t li = ((size_t)b * p.hq + h) * p.sq + r;
        const float* ref = &hro[li * D];
        const T* got = &ho[b * p.q_bs() + h * p.q_hs() + (size_t)r * p.q_rs()];
        for (int i = 0; i < D; ++i) {
          const float g = static_cast<float>(got[i]);
          if (std::isnan(g)) {
            ++nan_o;
            continue;
          }
          const double dd = (double)g - ref[i];
          max_do = std::max(max_do, std::fabs(dd));
          num += dd * dd;
          den += (double)ref[i] * ref[i];
        }
        const float gl = hl[li], rl = hrl[li];
        if (std::isnan(gl)) ++nan_l;
        else if (std::isinf(rl) || std::isinf(gl)) inf_mismatch += (gl != rl);
        else max_dl = std::max(max_dl, (double)std::fabs(gl - rl));
      }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  const bool ok = rel < 1e-2 && max_dl < 1e-2 && nan_o == 0 && nan_l == 0 && inf_mismatch == 0;
  const std::string name = case_name(tname<T>(), OV, p);
  printf("%-44s %s max|dO| %.3e relL2 %.3e max|dLSE| %.3e NaN O %ld LSE %ld inf-mismatch %ld\n",
         name.c_str(), ok ? "ok  " : "FAIL", max_do, rel, max_dl, nan_o, nan_l, inf_mismatch);
  fflush(stdout);
  CK(cudaFree(q));
  CK(cudaFree(k));
  CK(cudaFree(v));
  CK(cudaFree(o));
  CK(cudaFree(lse));
  CK(cudaFree(ref_o));
  CK(cudaFree(ref_lse));
  *rel_out = rel;
  if (!ok) ++g_failed;
  return ok;
}

// One table row per (variant, type, D, mode): the worst relative error over the shapes.
template <typename T, int D, int OV>
static void check_all() {
  const Problem shapes[] = {
      {2, 4, 2, 1000, 777, D, false},   // GQA, ragged, sq > skv
      {2, 4, 1, 1000, 1000, D, false},  // MQA, ragged
      {1, 2, 2, 1, 1, D, false},        // single row, single key
      {1, 4, 1, 77, 77, D, false},      // one partial tile each way
      {1, 2, 1, 77, 4097, D, false},    // many kv blocks, last one ragged
      {2, 2, 2, 1024, 1024, D, false},  // tile multiples: no masking except causal diagonal
  };
  for (int c = 0; c < 2; ++c) {
    int bad = 0;
    double worst = 0;
    for (const Problem& s : shapes) {
      Problem p = s;
      p.causal = c == 1;
      double rel = 0;
      if (!check<T, D, OV>(p, &rel)) ++bad;
      worst = std::max(worst, std::isnan(rel) ? INFINITY : rel);
    }
    char buf[96];
    snprintf(buf, sizeof buf, "%s %s d%d %s (6 shapes)", vname(OV), tname<T>(), D,
             c ? "causal" : "full");
    g_rows.push_back({buf, bad ? "FAIL" : "ok", worst, 0, 0});
  }
}

// ---------------------------------------------------------------- timing

template <typename T, int D, int OV>
static void bench(int b, int h, int s, bool causal) {
  Problem p{b, h, h, s, s, D, causal};
  T *q, *k, *v, *o;
  float* lse;
  CK(cudaMalloc(&q, p.q_elems() * sizeof(T)));
  CK(cudaMalloc(&k, p.kv_elems() * sizeof(T)));
  CK(cudaMalloc(&v, p.kv_elems() * sizeof(T)));
  CK(cudaMalloc(&o, p.q_elems() * sizeof(T)));
  CK(cudaMalloc(&lse, p.lse_elems() * sizeof(float)));
  fill_uniform<<<1024, 256>>>(q, p.q_elems(), g_seed++);
  fill_uniform<<<1024, 256>>>(k, p.kv_elems(), g_seed++);
  fill_uniform<<<1024, 256>>>(v, p.kv_elems(), g_seed++);
  fill_value<<<1024, 256>>>(o, p.q_elems(), NAN);
  CK(cudaGetLastError());
  Launcher<T, D, OV> L(p, q, k, v, o, lse);
  for (int i = 0; i < 3; ++i) L.launch();
  CK(cudaGetLastError());
  sync_or_die("bench warm-up");
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ts;
  for (int i = 0; i < 25; ++i) {
    CK(cudaEventRecord(e0));
    L.launch();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ts.push_back(ms);
  }
  std::sort(ts.begin(), ts.end());
  const float med = ts[ts.size() / 2];
  const double tf = p.flops() / (med * 1e-3) / 1e12;
  const std::string name = "time " + case_name(tname<T>(), OV, p);
  printf("%-44s median %.3f ms (min %.3f max %.3f) %.1f TFLOP/s\n", name.c_str(), med, ts.front(),
         ts.back(), tf);
  fflush(stdout);
  g_rows.push_back({name, "timed", 0, med, tf});
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaFree(q));
  CK(cudaFree(k));
  CK(cudaFree(v));
  CK(cudaFree(o));
  CK(cudaFree(lse));
}

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device %s sm_%d%d, %d SMs, smem/block optin %zu\n", prop.name, prop.major, prop.minor,
         prop.multiProcessorCount, prop.sharedMemPerBlockOptin);
  if (prop.major != 9) {
    fprintf(stderr, "needs an sm_90 GPU\n");
    return 2;
  }
  check_all<__nv_bfloat16, 64, 0>();
  check_all<__nv_bfloat16, 128, 0>();
  check_all<__nv_bfloat16, 256, 0>();
  check_all<__half, 64, 0>();
  check_all<__half, 128, 0>();
  check_all<__half, 256, 0>();
  check_all<__nv_bfloat16, 64, 1>();
  check_all<__nv_bfloat16, 128, 1>();
  check_all<__nv_bfloat16, 256, 1>();
  check_all<__half, 64, 1>();
  check_all<__half, 128, 1>();
  check_all<__half, 256, 1>();
  check_all<__nv_bfloat16, 64, 2>();
  check_all<__nv_bfloat16, 128, 2>();
  check_all<__nv_bfloat16, 256, 2>();
  check_all<__half, 64, 2>();
  check_all<__half, 128, 2>();
  check_all<__half, 256, 2>();

  // 16k tokens (batch 2 x 8192); heads x head dim = 4096 for d128 (Llama2-7B), 2048 otherwise.
  bench<__nv_bfloat16, 128, 0>(2, 32, 8192, false);
  bench<__nv_bfloat16, 128, 0>(2, 32, 8192, true);
  bench<__nv_bfloat16, 64, 0>(2, 32, 8192, true);
  bench<__nv_bfloat16, 256, 0>(2, 8, 8192, true);
  bench<__nv_bfloat16, 128, 1>(2, 32, 8192, false);
  bench<__nv_bfloat16, 128, 1>(2, 32, 8192, true);
  bench<__nv_bfloat16, 64, 1>(2, 32, 8192, false);
  bench<__nv_bfloat16, 64, 1>(2, 32, 8192, true);
  bench<__nv_bfloat16, 256, 1>(2, 8, 8192, false);
  bench<__nv_bfloat16, 256, 1>(2, 8, 8192, true);
  bench<__half, 128, 1>(2, 32, 8192, true);
  bench<__nv_bfloat16, 128, 2>(2, 32, 8192, false);
  bench<__nv_bfloat16, 128, 2>(2, 32, 8192, true);
  bench<__nv_bfloat16, 64, 2>(2, 32, 8192, false);
  bench<__nv_bfloat16, 64, 2>(2, 32, 8192, true);
  bench<__nv_bfloat16, 256, 2>(2, 8, 8192, false);
  bench<__nv_bfloat16, 256, 2>(2, 8, 8192, true);

  printf("\n%-44s %-6s %-10s %-9s %s\n", "case", "status", "relL2", "ms", "TFLOP/s");
  for (const Row& r : g_rows)
    printf("%-44s %-6s %-10.3e %-9.3f %.1f\n", r.name.c_str(), r.status.c_str(), r.err, r.ms,
           r.tflops);
  printf("%d check(s) failed\n", g_failed);
  return g_failed ? 1 : 0;
}
