// How the experts' score visitors call a lowered region's element function. The function takes
// the element's indices (q_idx, kv_idx, score&), and, when the lowering's "float indices" rewrite
// used them, the same indices as floats too (q_idx, kv_idx, q_f, kv_f, score&): a visitor derives
// those from one conversion per tile plus compile-time offsets, where converting each element's
// index would cost an int-to-float per element. The `_at` form leads with the element's row and
// column slots (mt, r, j, k). Overload order picks the float form when the function takes it.
#pragma once

template <typename F>
__device__ __forceinline__ auto cuir_call_element(F& f, int q_idx, int kv_idx, float q_f,
                                                  float kv_f, float& x, int)
    -> decltype(f(q_idx, kv_idx, q_f, kv_f, x)) {
  return f(q_idx, kv_idx, q_f, kv_f, x);
}
template <typename F>
__device__ __forceinline__ void cuir_call_element(F& f, int q_idx, int kv_idx, float, float,
                                                  float& x, long) {
  f(q_idx, kv_idx, x);
}

template <typename F>
__device__ __forceinline__ auto cuir_call_element_at(F& f, int mt, int r, int j, int k, int q_idx,
                                                     int kv_idx, float q_f, float kv_f, float& x,
                                                     int)
    -> decltype(f(mt, r, j, k, q_idx, kv_idx, q_f, kv_f, x)) {
  return f(mt, r, j, k, q_idx, kv_idx, q_f, kv_f, x);
}
template <typename F>
__device__ __forceinline__ void cuir_call_element_at(F& f, int mt, int r, int j, int k, int q_idx,
                                                     int kv_idx, float, float, float& x, long) {
  f(mt, r, j, k, q_idx, kv_idx, x);
}

// The visitors a variant's mask hook receives (and an sm_80 score_mod hook), in the order the
// hook's structured binding names them: each element, each element with its row and column
// slots, each row slot, each column slot.
template <typename Each, typename EachAt, typename Row, typename Col>
struct CuirScoreVisitors {
  Each for_each_score;
  EachAt for_each_score_at;
  Row for_each_score_row;
  Col for_each_score_col;
};
