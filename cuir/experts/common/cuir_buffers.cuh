// Reads of captured tensors (docs/lowering.md, "Captured tensors"): one overload per storage
// type, giving the value in CuIR's type (ints as int / long long, floats as float, bools as
// bool). A captured tensor is read-only for the whole call, so reads take the non-coherent path.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

__device__ __forceinline__ int cuir_ld(const int* p) { return __ldg(p); }
__device__ __forceinline__ long long cuir_ld(const long long* p) { return __ldg(p); }
__device__ __forceinline__ float cuir_ld(const float* p) { return __ldg(p); }
__device__ __forceinline__ float cuir_ld(const __nv_bfloat16* p) {
  return __bfloat162float(__ldg(p));
}
__device__ __forceinline__ float cuir_ld(const __half* p) { return __half2float(__ldg(p)); }
// torch stores bools as one byte holding 0 or 1.
__device__ __forceinline__ bool cuir_ld(const bool* p) {
  return __ldg(reinterpret_cast<const unsigned char*>(p)) != 0;
}

// The same conversions for an element already read (a tile streamed into shared memory).
__device__ __forceinline__ int cuir_value(int v) { return v; }
__device__ __forceinline__ long long cuir_value(long long v) { return v; }
__device__ __forceinline__ float cuir_value(float v) { return v; }
__device__ __forceinline__ float cuir_value(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float cuir_value(__half v) { return __half2float(v); }
__device__ __forceinline__ bool cuir_value(bool v) {
  return *reinterpret_cast<const unsigned char*>(&v) != 0;
}

// Python indexing: a negative index counts from the end of its dimension.
__host__ __device__ __forceinline__ long long cuir_wrap(long long i, long long n) {
  return i < 0 ? i + n : i;
}
