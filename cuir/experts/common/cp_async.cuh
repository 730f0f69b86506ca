// Ampere's asynchronous global -> shared copies (cp.async), which both the sm_80 expert and the
// sm_90 backward load their tiles with: 16 bytes per copy, bypassing L1; rows past the end are
// zero-filled (src-size 0) so ragged tiles need no separate clearing pass.
#pragma once

#include "cuir_platform.cuh"

// 16 bytes global -> shared of which the first `bytes` are read, the rest zero.
__device__ __forceinline__ void cp_async_16_partial(uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  cp_async_16_partial(dst, src, valid ? 16 : 0);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
