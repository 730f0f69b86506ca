// The launcher ABI of lowered kernels, as the worker sees it: the params struct of the expert's
// `abi` region and the launch plan its plan kernel writes. Mirrors of the structs in
// cuir/experts/fa2_sm80/kernel.cu; tests/gpu/abi_test.cc compiles a lowered kernel.h next to
// this header and checks every field offset, so the two cannot drift apart silently.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cubridge::gpu {

inline constexpr int kMaxBuffers = 8;
inline constexpr int kPlanVersion = 1;

struct AttnParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  int64_t q_batch_stride, q_head_stride, q_row_stride;
  int64_t k_batch_stride, k_head_stride, k_row_stride;
  int64_t v_batch_stride, v_head_stride, v_row_stride;
  int64_t o_batch_stride, o_head_stride, o_row_stride;
  int64_t lse_batch_stride, lse_head_stride;
  int32_t batch, heads_q, heads_kv, head_dim, seqlen_q, seqlen_kv;
  int32_t dtype;  // 0 = bf16, 1 = fp16
  float softmax_scale;
  const int32_t* buffers[kMaxBuffers];
  int64_t buffer_lengths[kMaxBuffers];
  void* workspace;
  size_t workspace_size;
};

struct LaunchPlan {
  int32_t version;
  int32_t status;  // 0 = launchable; otherwise the parameters are unusable
  uint64_t workspace_bytes;
  uint32_t classify_grid;
  uint32_t compact_grid;
  uint32_t table_threads;
  uint32_t grid[3];
  int32_t threads;
  int32_t smem_bytes;
};

}  // namespace cubridge::gpu
