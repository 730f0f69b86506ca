// A C entry over contiguous tensors for the backward expert check (backward_expert_check.py):
// fills the backward ABI's params (common/backward_abi.cuh) from pointers and sizes, so the
// Python side needs no mirror of the struct. CUBRIDGE_BWD_KERNEL names the expert's kernel_bwd.cu
// (fa2_sm80's by default).
#ifndef CUBRIDGE_BWD_KERNEL
#define CUBRIDGE_BWD_KERNEL "../../../cuir/experts/fa2_sm80/kernel_bwd.cu"
#endif
#include CUBRIDGE_BWD_KERNEL

extern "C" size_t bwd_check_workspace(int batch, int heads_q, int heads_kv, int head_dim,
                                      int seqlen_q, int seqlen_kv, int deterministic) {
  cubridge_attn_bwd_params p{};
  p.deterministic = deterministic;
  p.fwd.batch = batch;
  p.fwd.heads_q = heads_q;
  p.fwd.heads_kv = heads_kv;
  p.fwd.head_dim = head_dim;
  p.fwd.seqlen_q = seqlen_q;
  p.fwd.seqlen_kv = seqlen_kv;
  return cubridge_attn_bwd_workspace_size(&p);
}

// q, o, d_o, dq: [batch, heads_q, seqlen_q, head_dim]; k, v, dk, dv: [batch, heads_kv,
// seqlen_kv, head_dim]; lse fp32 [batch, heads_q, seqlen_q]; all contiguous. deterministic:
// the params' mode (0 fast, 1 deterministic), whose workspace is bwd_check_workspace's with it.
extern "C" int bwd_check_run(const void* q, const void* k, const void* v, const void* o,
                             float* lse, const void* d_o, void* dq, void* dk, void* dv,
                             void* workspace, size_t workspace_size, int batch, int heads_q,
                             int heads_kv, int head_dim, int seqlen_q, int seqlen_kv, int dtype,
                             float softmax_scale, int deterministic, void* stream) {
  cubridge_attn_bwd_params p{};
  p.deterministic = deterministic;
  cubridge_attn_fwd_params& f = p.fwd;
  const int64_t d = head_dim;
  f.q = q, f.k = k, f.v = v, f.o = const_cast<void*>(o), f.lse = lse;
  f.q_row_stride = f.o_row_stride = d;
  f.q_head_stride = f.o_head_stride = d * seqlen_q;
  f.q_batch_stride = f.o_batch_stride = d * seqlen_q * heads_q;
  f.k_row_stride = f.v_row_stride = d;
  f.k_head_stride = f.v_head_stride = d * seqlen_kv;
  f.k_batch_stride = f.v_batch_stride = d * seqlen_kv * heads_kv;
  f.lse_head_stride = seqlen_q;
  f.lse_batch_stride = int64_t(seqlen_q) * heads_q;
  f.batch = batch, f.heads_q = heads_q, f.heads_kv = heads_kv, f.head_dim = head_dim;
  f.seqlen_q = seqlen_q, f.seqlen_kv = seqlen_kv, f.dtype = dtype;
  f.softmax_scale = softmax_scale;
  p.d_o = d_o;
  p.do_row_stride = p.dq_row_stride = d;
  p.do_head_stride = p.dq_head_stride = f.q_head_stride;
  p.do_batch_stride = p.dq_batch_stride = f.q_batch_stride;
  p.dq = dq, p.dk = dk, p.dv = dv;
  p.dk_row_stride = p.dv_row_stride = d;
  p.dk_head_stride = p.dv_head_stride = f.k_head_stride;
  p.dk_batch_stride = p.dv_batch_stride = f.k_batch_stride;
  p.workspace = workspace;
  p.workspace_size = workspace_size;
  return cubridge_attn_bwd(&p, static_cast<struct CUstream_st*>(stream));
}

#if CUBRIDGE_BWD_TRACE
#include <algorithm>

// The phase stamps of the last call (fa3_sm90's trace_bwd.cuh) into host memory (`count`
// values, at most the trace's), then cleared for the next call. A CUDA error code, 0 on success.
extern "C" int bwd_check_trace(long long* host, size_t count) {
  using CUBRIDGE_BWD_EXPERT_NS::cubridge_bwd_trace;
  const size_t bytes = std::min(count * sizeof(long long), sizeof(cubridge_bwd_trace));
  if (cudaError_t e = cudaMemcpyFromSymbol(host, cubridge_bwd_trace, bytes); e != cudaSuccess) {
    return e;
  }
  void* at = nullptr;
  if (cudaError_t e = cudaGetSymbolAddress(&at, cubridge_bwd_trace); e != cudaSuccess) return e;
  return cudaMemset(at, 0, sizeof(cubridge_bwd_trace));
}
#endif
