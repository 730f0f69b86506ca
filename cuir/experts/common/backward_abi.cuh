// The launcher ABI of a backward attention call (issue 29): the gradients of one forward call
// (common/launch_abi.cuh) with respect to q, k, v and the captured tensors that learn.
//
// `fwd` is the forward call's params as given to it: q, k, v, o, lse (what the forward wrote),
// the shapes, dtype, scale and captured tensors. `d_o` is the loss's gradient with respect to O
// (O's shape, unit stride along head_dim). The kernel writes dq, dk, dv (q's, k's and v's shapes,
// unit stride along head_dim; dK and dV summed over each kv head's query group) and, for each
// buffers[i] that learns, its fp32 gradient into buffer_grads[i] (contiguous in that buffer's
// shape; null where the buffer does not learn). The call needs `workspace_bytes` of device
// scratch (cubridge_attn_bwd_workspace_size), which holds D = rowsum(dO * O) and the
// accumulators of dQ (and of dK and dV under GQA; and of the buffer gradients in deterministic
// mode).
#ifndef cubridge_attn_bwd_BACKWARD_ABI_CUH_
#define cubridge_attn_bwd_BACKWARD_ABI_CUH_
#include "launch_abi.cuh"

typedef struct cubridge_attn_bwd_params {
  cubridge_attn_fwd_params fwd;
  const void* d_o;
  int64_t do_batch_stride, do_head_stride, do_row_stride;
  void* dq;
  int64_t dq_batch_stride, dq_head_stride, dq_row_stride;
  void* dk;
  int64_t dk_batch_stride, dk_head_stride, dk_row_stride;
  void* dv;
  int64_t dv_batch_stride, dv_head_stride, dv_row_stride;
  float* buffer_grads[CUBRIDGE_MAX_BUFFERS];
  void* workspace;
  size_t workspace_size;
  // 0: fast mode, float atomics (dQ across KV tiles, GQA's dK/dV, buffer gradients), whose order
  // and so whose last bits vary from run to run; the caller zero-fills buffer_grads. 1:
  // deterministic mode, the same sums in 64-bit fixed point (units of 2^-32, so |sum| < 2^31),
  // whose integer adds give the same bits in any order; the kernel then writes buffer_grads
  // whole. The workspace differs between the modes (the plan's workspace_bytes).
  int32_t deterministic;
} cubridge_attn_bwd_params;

// What one backward call enqueues, from the params alone (workspace and workspace_size aside):
// computed by one function on the host (an nvcc-built launcher) and on the device (the plan
// kernel, `@cuir-entry plan`, which a loader of an NVRTC-compiled module runs first). In order:
// preprocess (row_grid x row_threads), the block-table kernels where classify_grid > 0
// (classify_grid and compact_grid x table_threads, over (fwd params, workspace + tables_offset)),
// attention (grid x threads, smem_bytes of dynamic shared memory), postprocess (post_grid x
// row_threads; none where post_grid is 0: the attention kernel converted everything).
// Every kernel but the table ones takes the backward params alone.
#define CUBRIDGE_BWD_PLAN_VERSION 2
typedef struct cubridge_attn_bwd_launch_plan {
  int32_t version;           // CUBRIDGE_BWD_PLAN_VERSION
  int32_t status;            // 0 = launchable, 1 = the parameters are refused
  uint64_t workspace_bytes;  // the workspace_size the call needs
  uint64_t tables_offset;    // where the block tables start in the workspace
  uint32_t row_grid, row_threads;
  uint32_t classify_grid, compact_grid, table_threads;
  uint32_t grid[3];
  int32_t threads;
  int32_t smem_bytes;
  uint32_t post_grid;
} cubridge_attn_bwd_launch_plan;

#endif  // cubridge_attn_bwd_BACKWARD_ABI_CUH_
