// A tile stream loaded by the threads with cp.async (docs/lowering.md, "Streamed tiles"): a
// captured tensor that a score_mod or mask reads at [..., q_idx, kv_idx] comes into shared
// memory one ROWS x COLS tile (queries x keys) at a time, issued with the copies of the block it
// belongs to and waited with them, instead of one global load per score. The sm_80 expert's
// forward streams it beside K (fa2_sm80/attend.cuh), the sm_90 expert's backward beside each
// query block's Q and dO (fa3_sm90/attend_bwd.cuh).
//
// Rows are padded by 16 bytes: the eight rows a warp's score fragment touches per column pair
// (the backward's transposed fragment: four query rows of eight keys) then start in distinct
// bank groups. Rows whose addresses cp.async cannot take (not 16-byte aligned: a ragged sequence
// of bools) are copied by the threads element by element, the same layout; an instance without
// room for the tile (IN_SMEM false) reads global memory per score.
#pragma once

#include "cp_async.cuh"
#include "cuir_platform.cuh"
#include "cuir_scalar.cuh"
#include "stream_source.cuh"

// Stores v at shared-memory address `addr` (a 32-bit address: one register less than a pointer).
template <typename E>
__device__ __forceinline__ void cuir_st_shared(uint32_t addr, E v) {
  static_assert(sizeof(E) == 1 || sizeof(E) == 2 || sizeof(E) == 4 || sizeof(E) == 8, "a scalar");
  if constexpr (sizeof(E) == 8) {
    unsigned long long bits;
    memcpy(&bits, &v, 8);
    asm volatile("st.shared.b64 [%0], %1;\n" ::"r"(addr), "l"(bits));
  } else {
    unsigned bits = 0;
    memcpy(&bits, &v, sizeof(E));
    if constexpr (sizeof(E) == 1) asm volatile("st.shared.b8 [%0], %1;\n" ::"r"(addr), "r"(bits));
    if constexpr (sizeof(E) == 2) {
      asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(addr), "h"(static_cast<unsigned short>(bits)));
    }
    if constexpr (sizeof(E) == 4) asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(bits));
  }
}

template <typename E, int ROWS, int COLS, bool IN_SMEM>
struct CuirStreamRows {
  static constexpr int kElem = static_cast<int>(sizeof(E));
  static constexpr int kPitch = COLS * kElem + 16;
  static constexpr int kBytes = IN_SMEM ? ROWS * kPitch : 0;
  static constexpr int kChunkCols = 16 / kElem;  // elements per 16-byte chunk
  static_assert(COLS * kElem % 16 == 0, "rows of whole 16-byte chunks");

  const uint8_t* smem;
  CuirStreamSource<E> src;
  int q_lo, kv_lo;

  // The element as a CuIR value (cuir_buffers.cuh).
  __device__ __forceinline__ auto at(int q_idx, int kv_idx) const {
    if constexpr (IN_SMEM) {
      return cuir_value(
          *reinterpret_cast<const E*>(smem + (q_idx - q_lo) * kPitch + (kv_idx - kv_lo) * kElem));
    } else {
      return src.at(q_idx, kv_idx);
    }
  }

  // Whether cp.async can take every row of `src`: its start and row pitch 16-byte aligned.
  __device__ __forceinline__ static bool vector_rows(const CuirStreamSource<E>& src) {
    return reinterpret_cast<uintptr_t>(src.data) % 16 == 0 &&
           src.row_stride * static_cast<long long>(kElem) % 16 == 0;
  }

  // THREADS threads (tid < THREADS): the tile at (q_lo, kv_lo) into `tile`, by cp.async where
  // every row starts 16-byte aligned (`vector`; the caller commits and waits), else element by
  // element (then complete on return; the caller's barrier publishes it either way). Elements
  // past the tensor's rows or columns are zero.
  template <int THREADS>
  __device__ __forceinline__ static void load(uint8_t* tile, const CuirStreamSource<E>& src,
                                              int q_lo, int kv_lo, bool vector, int tid) {
    if constexpr (IN_SMEM) {
      if (vector) {
        // Each thread one 16-byte column chunk of every kStep-th row: its bytes within the
        // tensor's columns fixed, its source and destination stepped a row group at a time (few
        // registers live: the sm_90 backward's producer has 24).
        constexpr int kChunks = COLS / kChunkCols, kStep = THREADS / kChunks;
        static_assert(THREADS % kChunks == 0 && ROWS % kStep == 0, "whole row groups a pass");
        const int chunk = tid % kChunks, r0 = tid / kChunks;
        const long long kv = kv_lo + chunk * kChunkCols;
        const long long left = (src.cols - kv) * kElem;
        const int bytes = static_cast<int>(left < 0 ? 0 : left > 16 ? 16 : left);
        const long long below = src.rows - q_lo - r0;  // the tensor's rows from this thread's first
        int rows_left = static_cast<int>(below > ROWS ? ROWS : below);
        // `from` stays on an element of the tensor: a copy past its rows or columns reads nothing
        // (0 bytes) at the last address in range.
        const E* from = rows_left > 0 && bytes > 0
                            ? src.data + kv + (q_lo + r0) * src.row_stride
                            : src.data;
        const long long step = kStep * src.row_stride;
        uint32_t dst =
            static_cast<uint32_t>(__cvta_generic_to_shared(tile)) + r0 * kPitch + chunk * 16;
#pragma unroll
        for (int k = 0; k < ROWS / kStep; ++k) {
          cp_async_16_partial(dst, from, rows_left > 0 ? bytes : 0);
          if (rows_left > kStep && bytes > 0) from += step;
          dst += kStep * kPitch;
          rows_left -= kStep;
        }
      } else if constexpr (THREADS % COLS == 0) {
        // Each thread one column of every kStep-th row, stepped as above.
        constexpr int kStep = THREADS / COLS;
        static_assert(ROWS % kStep == 0, "whole row groups a pass");
        const int c = tid % COLS, r0 = tid / COLS;
        const bool col_in = kv_lo + c < src.cols;
        const long long below = src.rows - q_lo - r0;
        int rows_left = static_cast<int>(below > ROWS ? ROWS : below);
        const E* from = src.data + (kv_lo + c) + (q_lo + r0) * src.row_stride;
        const long long step = kStep * src.row_stride;
        uint32_t to =
            static_cast<uint32_t>(__cvta_generic_to_shared(tile)) + r0 * kPitch + c * kElem;
#pragma unroll 1
        for (int k = 0; k < ROWS / kStep; ++k) {
          E v{};
          if (rows_left > 0 && col_in) v = *from;
          cuir_st_shared(to, v);
          from += step;
          to += kStep * kPitch;
          rows_left -= kStep;
        }
      } else {
        for (int i = tid; i < ROWS * COLS; i += THREADS) {
          const int r = i / COLS, c = i - r * COLS;
          const long long q = q_lo + r, kv = kv_lo + c;
          E v{};
          if (q < src.rows && kv < src.cols) v = src.data[q * src.row_stride + kv];
          *reinterpret_cast<E*>(tile + r * kPitch + c * kElem) = v;
        }
      }
    }
    (void)tile, (void)src, (void)q_lo, (void)kv_lo, (void)vector, (void)tid;
  }
};
