// The launcher ABI of lowered and lifted kernels, as the worker sees it: the params struct and the
// launch plan, declared once in cuir/experts/common/launch_abi.cuh, which every expert's `abi`
// region includes (the lowering inlines it into each kernel.cu and kernel.h) and user kernels are
// compiled with. tests/worker/abi_test.cc compiles a lowered kernel.h beside this header and checks
// every field offset, so the inlined, renamed copy cannot drift from what the loader reads.
#pragma once

#include "cuir/experts/common/launch_abi.cuh"

namespace cubridge::gpu {

inline constexpr int kMaxBuffers = CUBRIDGE_MAX_BUFFERS;
inline constexpr int kTmaBuffer0 = CUBRIDGE_TMA_BUFFER0;  // a TMA request's tensor for buffers[0]
inline constexpr int kPlanVersion = CUBRIDGE_PLAN_VERSION;
// The oldest plan the loader still reads: version 1 had no TMA requests (a user's kernel compiled
// against the old header fills only the fields it knows; the loader zero-fills the rest).
inline constexpr int kMinPlanVersion = 1;
inline constexpr int kMaxTma = CUBRIDGE_MAX_TMA;

using AttnParams = ::cubridge_attn_fwd_params;
using LaunchPlan = ::cubridge_attn_fwd_launch_plan;
using TmaRequest = ::cubridge_attn_fwd_tma_request;
using TmaMaps = ::cubridge_attn_fwd_tma_maps;
using BufferDesc = ::cubridge_attn_fwd_buffer;

}  // namespace cubridge::gpu
