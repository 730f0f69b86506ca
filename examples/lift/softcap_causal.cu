// A user's own attention kernel, written plainly (one warp per query row), to show what
// `cubridge-cli lift` takes: causal attention with grouped KV heads and a tanh softcap of 4 on the
// scaled scores (strong enough that random inputs tell a program with it from one without). It
// follows the launcher ABI (cuir/experts/common/launch_abi.cuh, which CuBridge puts in front of
// this file); the two lines below name its entry points.
//
// @cuir-entry plan softcap_causal_plan
// @cuir-entry attention softcap_causal<{T}, {D}>

constexpr int kRowsPerBlock = 4;  // one warp per query row

extern "C" __global__ void softcap_causal_plan(cubridge_attn_fwd_params p,
                                               cubridge_attn_fwd_launch_plan* plan) {
  *plan = cubridge_attn_fwd_launch_plan{};
  plan->version = CUBRIDGE_PLAN_VERSION;
  const bool ok = p.q != nullptr && p.k != nullptr && p.v != nullptr && p.o != nullptr &&
                  p.lse != nullptr && p.batch > 0 && p.seqlen_q > 0 && p.seqlen_kv > 0 &&
                  p.heads_kv > 0 && p.heads_q % p.heads_kv == 0 &&
                  (p.head_dim == 64 || p.head_dim == 128 || p.head_dim == 256);
  plan->status = ok ? 0 : 1;
  plan->grid[0] = (p.seqlen_q + kRowsPerBlock - 1) / kRowsPerBlock;
  plan->grid[1] = p.heads_q;
  plan->grid[2] = p.batch;
  plan->threads = 32 * kRowsPerBlock;
  plan->smem_bytes = 0;
}

template <typename T>
__device__ float to_float(T x);
template <>
__device__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <>
__device__ float to_float(__half x) { return __half2float(x); }

template <typename T>
__device__ T from_float(float x);
template <>
__device__ __nv_bfloat16 from_float(float x) { return __float2bfloat16(x); }
template <>
__device__ __half from_float(float x) { return __float2half(x); }

template <typename T, int D>
__global__ void softcap_causal(cubridge_attn_fwd_params p, void* /*workspace*/) {
  constexpr int kPerLane = D / 32;
  constexpr float kCap = 4.0f;
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  const int h = blockIdx.y, b = blockIdx.z;
  if (row >= p.seqlen_q) return;
  const int kv_h = h / (p.heads_q / p.heads_kv);
  const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride +
               row * p.q_row_stride;
  const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + kv_h * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + kv_h * p.v_head_stride;

  float qf[kPerLane], acc[kPerLane];
  for (int i = 0; i < kPerLane; ++i) {
    qf[i] = to_float(q[lane + 32 * i]);
    acc[i] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const int last = min(row, p.seqlen_kv - 1);  // causal: key j is seen by query i when j <= i
  for (int j = 0; j <= last; ++j) {
    float dot = 0.f;
    for (int i = 0; i < kPerLane; ++i) dot += qf[i] * to_float(k[j * p.k_row_stride + lane + 32 * i]);
    for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    const float s = kCap * tanhf(dot * p.softmax_scale / kCap);
    const float m_new = fmaxf(m, s);
    const float rescale = __expf(m - m_new);
    const float e = __expf(s - m_new);
    l = l * rescale + e;
    for (int i = 0; i < kPerLane; ++i) {
      acc[i] = acc[i] * rescale + e * to_float(v[j * p.v_row_stride + lane + 32 * i]);
    }
    m = m_new;
  }
  T* o = static_cast<T*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride + row * p.o_row_stride;
  const float inv = l > 0.f ? 1.f / l : 0.f;
  for (int i = 0; i < kPerLane; ++i) o[lane + 32 * i] = from_float<T>(acc[i] * inv);
  if (lane == 0) {
    p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + row] = l > 0.f ? m + logf(l) : -INFINITY;
  }
}
