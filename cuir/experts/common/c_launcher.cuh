// The C entry points of the abi region, as every expert's kernel.cu ends them (nvcc builds only):
// one launch plan per call, then the block tables, the attention, or both. The expert defines
// CUBRIDGE_EXPERT_NS, the namespace of its table kernels, variant_workspace and
// launch_head_dim<T>, before including this file; the lowering inlines it like the rest.
#pragma once

namespace cubridge_c_launcher {

// `tables` / `attention`: which half of the call to enqueue. The tables depend only on the
// buffers and shapes, so a caller that keeps them in the workspace may skip rebuilding them.
static int enqueue(const cubridge_attn_fwd_params* p, cudaStream_t stream, bool tables,
                   bool attention) {
  if (p == nullptr) return cudaErrorInvalidValue;
  // Zeroed: no SM count offered (the launcher decides the combine from its own grid).
  cubridge_attn_fwd_launch_plan plan{};
  cubridge_attn_fwd_make_plan(*p, &plan);
  if (plan.status != 0) return cudaErrorInvalidValue;
  if (plan.workspace_bytes > 0 &&
      (p->workspace == nullptr || p->workspace_size < plan.workspace_bytes)) {
    return cudaErrorInvalidValue;
  }
  char* const workspace = static_cast<char*>(p->workspace);
  if (tables && plan.classify_grid > 0) {
    CUBRIDGE_EXPERT_NS::cubridge_attn_fwd_classify<<<plan.classify_grid, plan.table_threads, 0, stream>>>(*p, workspace);
    CUBRIDGE_EXPERT_NS::cubridge_attn_fwd_compact<<<plan.compact_grid, plan.table_threads, 0, stream>>>(*p, workspace);
  }
  if (!attention) return cudaGetLastError();
  switch (p->dtype) {
    case 0: return CUBRIDGE_EXPERT_NS::launch_head_dim<__nv_bfloat16>(p, plan, stream);
    case 1: return CUBRIDGE_EXPERT_NS::launch_head_dim<__half>(p, plan, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace cubridge_c_launcher

// The tables' bytes and, where the plan offers it, those with which the kernel splits its last
// partial wave (plan version 3): the size that makes the call fastest.
extern "C" size_t cubridge_attn_fwd_workspace_size(const cubridge_attn_fwd_params* p) {
  if (p == nullptr) return 0;
  cubridge_attn_fwd_launch_plan plan{};
  cubridge_attn_fwd_make_plan(*p, &plan);
  if (plan.status != 0) return CUBRIDGE_EXPERT_NS::variant_workspace(*p, nullptr);
  return plan.workspace_bytes + plan.split_workspace_bytes;
}
extern "C" int cubridge_attn_fwd(const cubridge_attn_fwd_params* p, cudaStream_t stream) {
  return cubridge_c_launcher::enqueue(p, stream, true, true);
}
extern "C" int cubridge_attn_fwd_tables(const cubridge_attn_fwd_params* p, cudaStream_t stream) {
  return cubridge_c_launcher::enqueue(p, stream, true, false);
}
extern "C" int cubridge_attn_fwd_attention(const cubridge_attn_fwd_params* p, cudaStream_t stream) {
  return cubridge_c_launcher::enqueue(p, stream, false, true);
}
