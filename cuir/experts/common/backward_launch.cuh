// The launch plan and C entry points every backward expert's kernel_bwd.cu ends with
// (common/backward_abi.cuh): one function computes what a call enqueues, for the nvcc-built
// launcher below and for the device's plan kernel (`@cuir-entry plan`). The expert defines
// CUBRIDGE_BWD_EXPERT_NS, the namespace holding its BLOCK_N, kThreads, kBwdClusterX,
// bwd_smem_bytes(head_dim, deterministic) (0: a head dim its kernel does not serve), the table
// kernels and attn_bwd_kernel<T, D>, before including this file at its end; the lowering inlines
// it like the rest.
#pragma once

// The GPU's SMs: on the device (the plan kernel) %nsmid, an upper bound of the SM ids; on the
// host the current device's count.
__host__ __device__ __forceinline__ int bwd_sm_count() {
#ifdef __CUDA_ARCH__
  unsigned n;
  asm("mov.u32 %0, %%nsmid;" : "=r"(n));
  return static_cast<int>(n);
#else
  int device = 0, n = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    n = 132;
  }
  return n > 0 ? n : 1;
#endif
}

__host__ __device__ __forceinline__ void cubridge_attn_bwd_make_plan(
    const cubridge_attn_bwd_params& p, cubridge_attn_bwd_launch_plan* plan) {
  using namespace CUBRIDGE_BWD_EXPERT_NS;
  *plan = cubridge_attn_bwd_launch_plan{};
  plan->version = CUBRIDGE_BWD_PLAN_VERSION;
  plan->status = 1;
  const cubridge_attn_fwd_params& f = p.fwd;
  const bool det = p.deterministic != 0;
  if (!bwd_params_ok(p) || bwd_smem_bytes(f.head_dim, det) == 0) return;
  plan->smem_bytes = bwd_smem_bytes(f.head_dim, det);
  const BwdWorkspace w = bwd_workspace(p);
  plan->workspace_bytes = w.total;
  plan->tables_offset = w.tables;
  // The pre- and postprocess loop over their work by grid stride. A CTA per 64 query rows (a
  // warp's 8 rows of D, a CTA's one to four 64 x 64 panels of dQ) keeps each CTA short, so the
  // last ones to start end with the rest: at a fixed 1024 CTAs, 1.3 and 1.55 waves of long CTAs
  // ran both kernels at 67% and 46% of DRAM bandwidth (ncu, bench/NOTES.md session 23).
  const long long q_rows = static_cast<long long>(f.batch) * f.heads_q * f.seqlen_q;
  plan->row_grid =
      static_cast<uint32_t>(cuir_min<long long>(cuir_cdiv<long long>(q_rows, 64), 1 << 20));
  plan->row_threads = kRowThreads;
  plan->post_grid = bwd_needs_postprocess(p) ? plan->row_grid : 0;
  // The block tables (transposed: per K tile, its query blocks).
  const long long tiles = variant_table_tiles(f), rows = variant_table_rows(f);
  plan->classify_grid = static_cast<uint32_t>(cuir_min<long long>(tiles, 16384));
  plan->compact_grid =
      static_cast<uint32_t>(cuir_min<long long>(cuir_cdiv<long long>(rows, kTableThreads), 16384));
  plan->table_threads = kTableThreads;
  if constexpr (kPersistent) {
    // A CTA an SM, each taking tiles until none is left (a CTA that starts late finds none).
    const long long tiles = bwd_tiles(p);
    if (tiles > 0x7fffffffLL) return;
    plan->grid[0] = static_cast<uint32_t>(cuir_min<long long>(tiles, bwd_sm_count()));
    plan->grid[1] = plan->grid[2] = 1;
  } else {
    // Whole clusters (kBwdClusterX CTAs along the K tiles): a CTA past the keys walks nothing.
    plan->grid[0] = static_cast<uint32_t>(cuir_cdiv(cuir_cdiv(f.seqlen_kv, BLOCK_N), kBwdClusterX) *
                                          kBwdClusterX);
    plan->grid[1] = static_cast<uint32_t>(f.heads_q);
    plan->grid[2] = static_cast<uint32_t>(f.batch);
  }
  plan->threads = kThreads;
  plan->status = 0;
}

extern "C" __global__ void cubridge_attn_bwd_plan(const cubridge_attn_bwd_params p,
                                                  cubridge_attn_bwd_launch_plan* plan) {
  cubridge_attn_bwd_make_plan(p, plan);
}

#ifndef __CUDACC_RTC__
extern "C" size_t cubridge_attn_bwd_workspace_size(const cubridge_attn_bwd_params* p) {
  return CUBRIDGE_BWD_EXPERT_NS::bwd_workspace(*p).total;
}

namespace CUBRIDGE_BWD_EXPERT_NS {
template <typename T, int D>
static int launch_bwd(const cubridge_attn_bwd_params* p, const cubridge_attn_bwd_launch_plan& plan,
                      cudaStream_t stream) {
  attn_bwd_preprocess<T><<<plan.row_grid, plan.row_threads, 0, stream>>>(*p);
  if (plan.classify_grid > 0) {
    char* tables = static_cast<char*>(p->workspace) + plan.tables_offset;
    cubridge_attn_fwd_classify<<<plan.classify_grid, plan.table_threads, 0, stream>>>(p->fwd,
                                                                                     tables);
    cubridge_attn_fwd_compact<<<plan.compact_grid, plan.table_threads, 0, stream>>>(p->fwd, tables);
  }
  cudaError_t err = cudaFuncSetAttribute(attn_bwd_kernel<T, D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         plan.smem_bytes);
  if (err != cudaSuccess) return err;
  attn_bwd_kernel<T, D><<<dim3(plan.grid[0], plan.grid[1], plan.grid[2]), plan.threads,
                          plan.smem_bytes, stream>>>(*p);
  if (plan.post_grid > 0) {
    attn_bwd_postprocess<T><<<plan.post_grid, plan.row_threads, 0, stream>>>(*p);
  }
  return cudaGetLastError();
}
// The head dims the expert serves (bwd_smem_bytes > 0), each its own instance.
template <typename T>
static int launch_bwd_head_dim(const cubridge_attn_bwd_params* p,
                               const cubridge_attn_bwd_launch_plan& plan, cudaStream_t stream) {
  switch (p->fwd.head_dim) {
    case 64:
      if constexpr (bwd_smem_bytes(64, true) > 0) return launch_bwd<T, 64>(p, plan, stream);
      break;
    case 128:
      if constexpr (bwd_smem_bytes(128, true) > 0) return launch_bwd<T, 128>(p, plan, stream);
      break;
    case 256:
      if constexpr (bwd_smem_bytes(256, true) > 0) return launch_bwd<T, 256>(p, plan, stream);
      break;
    default: break;
  }
  return cudaErrorInvalidValue;
}
}  // namespace CUBRIDGE_BWD_EXPERT_NS

// Enqueues the backward on `stream`; cudaErrorInvalidValue (1) for parameters it does not serve.
extern "C" int cubridge_attn_bwd(const cubridge_attn_bwd_params* p, struct CUstream_st* stream) {
  using namespace CUBRIDGE_BWD_EXPERT_NS;
  if (p == nullptr) return cudaErrorInvalidValue;
  cubridge_attn_bwd_launch_plan plan;
  cubridge_attn_bwd_make_plan(*p, &plan);
  if (plan.status != 0 || p->workspace_size < plan.workspace_bytes) return cudaErrorInvalidValue;
  return p->fwd.dtype == 0 ? launch_bwd_head_dim<__nv_bfloat16>(p, plan, stream)
                           : launch_bwd_head_dim<__half>(p, plan, stream);
}
#endif  // __CUDACC_RTC__
