// mbarrier and bulk-tensor (TMA) copy wrappers of the sm_90 expert. The tensor maps are built on
// the host (cuTensorMapEncodeTiled, by the launcher or the worker's loader from the launch plan's
// requests) and reach the kernel as a __grid_constant__ parameter, so a map's address below is a
// generic address of kernel-parameter space, as TMA requires. The maps are opaque 128-byte
// images here, so the file needs no driver header (NVRTC has none).
#pragma once

#include "../common/cuir_platform.cuh"
#include "wgmma.cuh"

namespace cubridge {
namespace fa3 {

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count)
               : "memory");
}

// Makes the initialised barriers visible to the async proxy (TMA completes on them) before use.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival plus `bytes` of expected transaction: the phase completes only when the copies
// signalling this barrier have delivered that many bytes.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)),
               "r"(bytes)
               : "memory");
}

// At a shared::cta address (uint32_t), or at a pointer into shared memory.
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) { mbar_arrive(smem_u32(bar)); }

// Waits for the phase with the given parity to complete. A barrier starts in phase 0; waiting on
// parity 0 returns once phase 0 completed, parity 1 once phase 1 did; with a ring of S stages the
// k-th use of a stage (k = iteration / S) waits on parity k & 1. SEM: the wait's memory
// semantics ("" for this CTA's arrivals, ".acquire.cluster" for other CTAs', mbar_wait_cluster).
#define CUBRIDGE_FA3_MBAR_WAIT(SEM, bar, parity)                                           \
  asm volatile("{\n.reg .pred done;\n"                                                    \
               "WAIT_%=:\n"                                                                \
               "mbarrier.try_wait.parity" SEM ".shared::cta.b64 done, [%0], %1;\n"         \
               "@!done bra WAIT_%=;\n}\n" ::"r"(bar),                                      \
               "r"(parity)                                                                 \
               : "memory")
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  CUBRIDGE_FA3_MBAR_WAIT("", bar, parity);
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  mbar_wait(smem_u32(bar), parity);
}

// Thread-block clusters (the backward's CTA pairs, pair_dq.cuh): this CTA's rank, the cluster's
// barrier (every thread of every CTA arrives; arrive releases, wait acquires), and another CTA's
// shared memory at the address of this CTA's (`mapa`: a shared::cluster address).
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
}
__device__ __forceinline__ uint32_t cluster_map(uint32_t shared_cta, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(shared_cta), "r"(rank));
  return r;
}
__device__ __forceinline__ uint32_t ld_cluster_u32(uint32_t shared_cluster) {
  uint32_t v;
  asm volatile("ld.shared::cluster.u32 %0, [%1];\n" : "=r"(v) : "r"(shared_cluster) : "memory");
  return v;
}
__device__ __forceinline__ void st_cluster_v4(uint32_t shared_cluster, float a, float b, float c,
                                              float d) {
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(shared_cluster),
               "f"(a), "f"(b), "f"(c), "f"(d)
               : "memory");
}
// One arrival on another CTA's barrier, releasing this thread's earlier accesses to the cluster.
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t shared_cluster) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(
                   shared_cluster)
               : "memory");
}
// mbar_wait, acquiring what the arrivals of other CTAs released.
// (`bar`: this CTA's shared address.)
__device__ __forceinline__ void mbar_wait_cluster(uint32_t bar, uint32_t parity) {
  CUBRIDGE_FA3_MBAR_WAIT(".acquire.cluster", bar, parity);
}
#undef CUBRIDGE_FA3_MBAR_WAIT

__device__ __forceinline__ void tma_prefetch_desc(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// 4-D tiled copy global -> shared (coordinates innermost first: col, row, head, batch). Out-of-
// bounds elements of the box are written as zeros and still count toward the transaction bytes.
__device__ __forceinline__ void tma_load_4d(void* dst, const void* map, uint64_t* bar,
                                            int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

}  // namespace fa3
}  // namespace cubridge
