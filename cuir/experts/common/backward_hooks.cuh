// The variant's hooks on a backward expert's transposed score fragment (issue 29), shared by the
// experts: a thread holds the keys kv0 and kv0 + 8 of the fragment's rows and, per 8-column
// n-tile j, the query columns q0 + 8j and q0 + 8j + 1 (register c of n-tile j: key row
// kv0 + 8 * (c >> 1), query q0 + 8j + (c & 1)). mma.sync's m16n8 fragments of the sm_80 expert
// and wgmma's m64nN accumulator of the sm_90 one (wgmma.cuh's acc_index) both have this shape.
// The hooks' visitors follow the contexts' hook signatures (kernel_bwd.cu, BwdBlock): the score
// hooks (score_mod, mask) get score_visit.cuh's element visitors; the gradient hooks the same
// shapes, where the element function gets the raw score (before any score_mod) in `score` and,
// for buffer_grad, dS as `ds`: score_grad's function leaves d score_mod / d score in `score`,
// by which the visitor multiplies dS; buffer_grad's adds into the learnable buffers' gradients
// itself. Row slots (j, r) are the thread's query columns, column slots (0, k) its keys; a slot
// past q_hi / kv_hi gets the last in-bounds index (no element reads it).
#pragma once

// A module built with CUBRIDGE_BWD_BUFFER_GRADS=0 computes no captured tensor's gradient: a float
// tensor the kernel can learn (ALiBi's slopes, a bias table) that learns nothing at a call then
// costs neither the buffer_grad hook nor the raw scores it reads (the lowering's keeps_raw_scores
// region reads this macro), so its kernel is the one of the same variant without the tensor's
// gradient. The PyTorch op builds that module for calls where no captured tensor learns.
#ifndef CUBRIDGE_BWD_BUFFER_GRADS
#define CUBRIDGE_BWD_BUFFER_GRADS 1
#endif

struct BwdFrag {
  int kv0;  // first key row of this thread
  int q0;   // first query column of this thread
  __device__ __forceinline__ int kv(int c) const { return kv0 + ((c >> 1) << 3); }
  __device__ __forceinline__ int q(int j, int c) const { return q0 + j * 8 + (c & 1); }
  // The column's index within the query block (for the block's LSE and D in shared memory).
  __device__ __forceinline__ int q_local(int j, int c, int q_lo) const { return q(j, c) - q_lo; }
};

// Calls f(j, c, element) on each register of a [1][NT][4] fragment.
template <int NT, class F>
__device__ __forceinline__ void for_each_fragment_t(float (&s)[1][NT][4], F&& f) {
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) f(j, c, s[0][j][c]);
}

// How the gradient visitors call a lowered buffer_grad region's element function:
// (q_idx, kv_idx, [q_f, kv_f,] ds, score&) with the raw score in `score`, and the `_at` form
// leading with the element's slots, as score_visit.cuh's helpers do for the score visitors.
template <typename F>
__device__ __forceinline__ auto cuir_call_grad_element(F& f, int q_idx, int kv_idx, float q_f,
                                                       float kv_f, float ds, float& x, int)
    -> decltype(f(q_idx, kv_idx, q_f, kv_f, ds, x)) {
  return f(q_idx, kv_idx, q_f, kv_f, ds, x);
}
template <typename F>
__device__ __forceinline__ void cuir_call_grad_element(F& f, int q_idx, int kv_idx, float, float,
                                                       float ds, float& x, long) {
  f(q_idx, kv_idx, ds, x);
}
template <typename F>
__device__ __forceinline__ auto cuir_call_grad_element_at(F& f, int mt, int r, int j, int k,
                                                          int q_idx, int kv_idx, float q_f,
                                                          float kv_f, float ds, float& x, int)
    -> decltype(f(mt, r, j, k, q_idx, kv_idx, q_f, kv_f, ds, x)) {
  return f(mt, r, j, k, q_idx, kv_idx, q_f, kv_f, ds, x);
}
template <typename F>
__device__ __forceinline__ void cuir_call_grad_element_at(F& f, int mt, int r, int j, int k,
                                                          int q_idx, int kv_idx, float, float,
                                                          float ds, float& x, long) {
  f(mt, r, j, k, q_idx, kv_idx, ds, x);
}

// The fragment's place: its coordinates and the block's bounds.
struct BwdFragBounds {
  BwdFrag at;
  int q_hi, kv_hi;
  __device__ __forceinline__ bool in(int j, int c) const {
    return at.q(j, c) < q_hi && at.kv(c) < kv_hi;
  }
  template <int NT>
  __device__ __forceinline__ auto rows() const {
    return [*this](auto&& fn) {
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int r = 0; r < 2; ++r) fn(j, r, min(at.q(j, r), q_hi - 1));
    };
  }
  __device__ __forceinline__ auto cols() const {
    return [*this](auto&& fn) {
#pragma unroll
      for (int k = 0; k < 2; ++k) fn(0, k, min(at.kv(2 * k), kv_hi - 1));
    };
  }
};

// The variant's score_mods, then its masks, on the fragment's scaled scores.
template <int NT, typename Block>
__device__ __forceinline__ void bwd_score_hooks(const Block& block, float (&s)[1][NT][4],
                                                const BwdFragBounds& f) {
  auto for_each_score = [&](auto&& fn) {
    for_each_fragment_t<NT>(s, [&](int j, int c, float& x) {
      const int q_idx = f.at.q(j, c), kv_idx = f.at.kv(c);
      if (f.in(j, c)) {
        cuir_call_element(fn, q_idx, kv_idx, static_cast<float>(q_idx),
                          static_cast<float>(kv_idx), x, 0);
      }
    });
  };
  auto for_each_score_at = [&](auto&& fn) {
    for_each_fragment_t<NT>(s, [&](int j, int c, float& x) {
      const int q_idx = f.at.q(j, c), kv_idx = f.at.kv(c);
      if (f.in(j, c)) {
        cuir_call_element_at(fn, j, c & 1, 0, c >> 1, q_idx, kv_idx, static_cast<float>(q_idx),
                             static_cast<float>(kv_idx), x, 0);
      }
    });
  };
  const auto rows = f.template rows<NT>();
  const auto cols = f.cols();
  const CuirScoreVisitors<decltype(for_each_score), decltype(for_each_score_at), decltype(rows),
                          decltype(cols)>
      visitors{for_each_score, for_each_score_at, rows, cols};
  block.template score_mod<NT, 1>(visitors);
  block.template mask<NT, 1>(visitors);
}

// The chain rule's hooks on dS: the learnable buffers' gradients (buffer_grad), then dS times
// d score_mod / d score (score_grad). Where dS is 0 (a masked score, a row that kept nothing)
// neither does anything. `add_buffer_grads` false (uniform over the warp) skips buffer_grad: a
// warp whose fragment another warp also holds (a tile split by head-dim parts) must not add its
// gradient twice.
template <int NT, typename Block>
__device__ __forceinline__ void bwd_grad_hooks(const Block& block, float (&ds)[1][NT][4],
                                               const float (&raw)[1][NT][4],
                                               const BwdFragBounds& f, bool add_buffer_grads) {
  auto for_each_buffer_grad = [&](auto&& fn) {
    for_each_fragment_t<NT>(ds, [&](int j, int c, float& x) {
      const int q_idx = f.at.q(j, c), kv_idx = f.at.kv(c);
      float score = raw[0][j][c];
      if (f.in(j, c) && x != 0.f) {
        cuir_call_grad_element(fn, q_idx, kv_idx, static_cast<float>(q_idx),
                               static_cast<float>(kv_idx), x, score, 0);
      }
    });
  };
  auto for_each_buffer_grad_at = [&](auto&& fn) {
    for_each_fragment_t<NT>(ds, [&](int j, int c, float& x) {
      const int q_idx = f.at.q(j, c), kv_idx = f.at.kv(c);
      float score = raw[0][j][c];
      if (f.in(j, c) && x != 0.f) {
        cuir_call_grad_element_at(fn, j, c & 1, 0, c >> 1, q_idx, kv_idx,
                                  static_cast<float>(q_idx), static_cast<float>(kv_idx), x, score,
                                  0);
      }
    });
  };
  const auto rows = f.template rows<NT>();
  const auto cols = f.cols();
  const CuirScoreVisitors<decltype(for_each_buffer_grad), decltype(for_each_buffer_grad_at),
                          decltype(rows), decltype(cols)>
      buffer_visitors{for_each_buffer_grad, for_each_buffer_grad_at, rows, cols};
  if constexpr (CUBRIDGE_BWD_BUFFER_GRADS != 0) {
    if (add_buffer_grads) block.template buffer_grad<NT, 1>(buffer_visitors);
  }
  auto for_each_score_grad = [&](auto&& fn) {
    for_each_fragment_t<NT>(ds, [&](int j, int c, float& x) {
      const int q_idx = f.at.q(j, c), kv_idx = f.at.kv(c);
      float factor = raw[0][j][c];
      if (f.in(j, c) && x != 0.f) {
        cuir_call_element(fn, q_idx, kv_idx, static_cast<float>(q_idx),
                          static_cast<float>(kv_idx), factor, 0);
        x *= factor;
      }
    });
  };
  auto for_each_score_grad_at = [&](auto&& fn) {
    for_each_fragment_t<NT>(ds, [&](int j, int c, float& x) {
      const int q_idx = f.at.q(j, c), kv_idx = f.at.kv(c);
      float factor = raw[0][j][c];
      if (f.in(j, c) && x != 0.f) {
        cuir_call_element_at(fn, j, c & 1, 0, c >> 1, q_idx, kv_idx, static_cast<float>(q_idx),
                             static_cast<float>(kv_idx), factor, 0);
        x *= factor;
      }
    });
  };
  const CuirScoreVisitors<decltype(for_each_score_grad), decltype(for_each_score_grad_at),
                          decltype(rows), decltype(cols)>
      grad_visitors{for_each_score_grad, for_each_score_grad_at, rows, cols};
  block.template score_grad<NT, 1>(grad_visitors);
}
