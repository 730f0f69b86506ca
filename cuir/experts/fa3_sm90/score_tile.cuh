// One consumer thread's score tile as the variant's hooks see it (kernel.cu, VariantBlock): the
// m64nTILE_N accumulator fragment s (wgmma.cuh), this thread's rows row0 and row0 + 8 and columns
// col0 + 8j + e, and the tile's bounds (rows below q_hi, keys below tile_hi). The visitors hand
// in-bounds elements to a generated element function (score_visit.cuh says which forms it takes);
// they are what the generated score_mod and mask call by name.


#pragma once

#include "../common/score_visit.cuh"
#include "mask.cuh"
#include "softmax.cuh"

namespace cubridge {
namespace fa3 {

// The visitors a score_mod hook receives, in the order its structured binding names them
// (kernel.cu: VariantBlock::score_mod; the mask's are CuirScoreVisitors, score_visit.cuh).
template <typename Each, typename EachAt, typename Raw, typename RawAt, typename RawKvSplit,
          typename Row, typename Col>
struct ScoreModVisitors {
  Each for_each_score;
  EachAt for_each_score_at;
  Raw for_each_raw_score;
  RawAt for_each_raw_score_at;
  RawKvSplit for_each_raw_score_kv_split;
  Row for_each_score_row;
  Col for_each_score_col;
};

template <int TILE_N>
struct ScoreTile {
  static constexpr int NT = TILE_N / 8;  // a thread's column slots: NT x 2 (rows: 1 x 2)
  float (&s)[TILE_N / 2];
  int row0, col0, q_hi, tile_hi;
  float qk_scale;
  // Scores stay raw (the scale folds into the softmax's exponent) unless a score_mod reads them:
  // its visitors scale the tile once first. Known at compile time once the hooks are inlined.
  bool scaled = false;
  float kv_shift = 0.f;  // score units, the same for every score of this lane's tile

  __device__ __forceinline__ void scale_once() {
    if (scaled) return;
#pragma unroll
    for (int i = 0; i < TILE_N / 2; ++i) s[i] *= qk_scale;
    scaled = true;
  }

  // f(mt, r, j, e, q_idx, kv_idx, q_f, kv_f, x) on the in-bounds elements; the float indices are
  // one conversion per tile plus constants. Where this thread's last row and column are in
  // bounds, so is every element, and the per-element test (a select each) is left out. kv_f
  // counts from key 0, or with KvFromTileStart{} from the lane's first key col0.
  template <typename F, typename KvFromT>
  __device__ __forceinline__ void visit(F&& f, KvFromT) {
    const float row0_f = static_cast<float>(row0);
    const float col0_f = KvFromT::value ? 0.f : static_cast<float>(col0);
    auto each = [&](auto bounds) {
      for_each_element<TILE_N>(s, [&](int j, int e, int r, float& x) {
        const int q_idx = row0 + 8 * r, kv_idx = col0 + 8 * j + e;
        if (!decltype(bounds)::kChecked || (q_idx < q_hi && kv_idx < tile_hi)) {
          f(0, r, j, e, q_idx, kv_idx, row0_f + static_cast<float>(8 * r),
            col0_f + static_cast<float>(8 * j + e), x);
        }
      });
    };
    if (row0 + 8 < q_hi && col0 + 8 * (NT - 1) + 1 < tile_hi) {
      each(Bounds<false>{});
    } else {
      each(Bounds<true>{});
    }
  }
  template <typename F, typename KvFromT>
  __device__ __forceinline__ void visit_elements(F& f, KvFromT from) {
    visit([&](int, int, int, int, int q_idx, int kv_idx, float q_f, float kv_f, float& x) {
      cuir_call_element(f, q_idx, kv_idx, q_f, kv_f, x, 0);
    }, from);
  }
  template <typename F, typename KvFromT>
  __device__ __forceinline__ void visit_elements_at(F& f, KvFromT from) {
    visit([&](int mt, int r, int j, int k, int q_idx, int kv_idx, float q_f, float kv_f,
              float& x) { cuir_call_element_at(f, mt, r, j, k, q_idx, kv_idx, q_f, kv_f, x, 0); },
          from);
  }

  // f(mt, r, q_idx) per row slot, f(j, k, kv_idx) per column slot; a slot past q_hi / tile_hi
  // gets the last in-bounds index instead: no element reads that slot, and every expression of a
  // program is defined at every in-bounds index.
  __device__ __forceinline__ auto rows() const {
    return [this](auto&& f) {
#pragma unroll
      for (int r = 0; r < 2; ++r) f(0, r, min(row0 + 8 * r, q_hi - 1));
    };
  }
  __device__ __forceinline__ auto cols() const {
    return [this](auto&& f) {
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int k = 0; k < 2; ++k) f(j, k, min(col0 + 8 * j + k, tile_hi - 1));
    };
  }

  // A score_mod's visitors: scaled scores, or raw ones for the first score_mod of the form
  // score + terms, which applies qk_scale itself in one fma with its terms (docs/lowering.md,
  // TermsBesideTheScore); with terms linear in kv_f, f at the lane's first key with a zero score
  // gives that key's term, which joins the softmax's offset, and the elements take kv_f from that
  // key, so their terms become constants (KvTermFromTileStart).
  __device__ __forceinline__ auto score_mod_visitors() {
    auto each = [this](auto&& f) { scale_once(); visit_elements(f, KvFromKeyZero{}); };
    auto each_at = [this](auto&& f) { scale_once(); visit_elements_at(f, KvFromKeyZero{}); };
    auto raw = [this](auto&& f) { scaled = true; visit_elements(f, KvFromKeyZero{}); };
    auto raw_at = [this](auto&& f) { scaled = true; visit_elements_at(f, KvFromKeyZero{}); };
    auto raw_kv_split = [this](auto&& f) {
      scaled = true;
      float first_key_term = 0.f;
      cuir_call_element(f, row0, col0, static_cast<float>(row0), static_cast<float>(col0),
                        first_key_term, 0);
      kv_shift = first_key_term;
      visit_elements(f, KvFromTileStart{});
    };
    return ScoreModVisitors<decltype(each), decltype(each_at), decltype(raw), decltype(raw_at),
                            decltype(raw_kv_split), decltype(rows()), decltype(cols())>{
        each, each_at, raw, raw_at, raw_kv_split, rows(), cols()};
  }
  // A mask's: masks only write -inf, which is -inf in any unit, so no scaling.
  __device__ __forceinline__ auto mask_visitors() {
    auto each = [this](auto&& f) { visit_elements(f, KvFromKeyZero{}); };
    auto each_at = [this](auto&& f) { visit_elements_at(f, KvFromKeyZero{}); };
    return CuirScoreVisitors<decltype(each), decltype(each_at), decltype(rows()), decltype(cols())>{
        each, each_at, rows(), cols()};
  }

  // The tile's scale for the softmax: a split (kv_shift set) took raw scores, so its unit is
  // log2(e); without one the offset is a literal 0.
  __device__ __forceinline__ TileScale scale() const {
    return {scaled ? kLog2e : qk_scale * kLog2e, kv_shift * kLog2e};
  }
};

}  // namespace fa3
}  // namespace cubridge
