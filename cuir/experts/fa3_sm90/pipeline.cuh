// Shared-memory plan and the K/V stage ring of the sm_90 expert.
//
// One work tile = one BLOCK_M-row Q tile of one (batch, head). Q stays resident for the work
// tile, in one of QBUFS buffers: with two, a persistent CTA's next Q lands while the current tile
// still runs (work tile w uses buffer w % QBUFS; q_full / q_empty per buffer, parities as for the
// ring below). K and V each have STAGES slots of one KV tile (TILE_N rows). Per slot there are
// four barriers:
//   k_full / v_full (count 1): the producer's arrive.expect_tx plus the TMA bytes complete them;
//     V has its own so that Q K^T can start while V is still in flight.
//   k_empty / v_empty (count = consumer warps): every consumer warp arrives on k_empty once its
//     Q K^T wgmma of that slot has retired (last read of K) and on v_empty once its P V wgmma has
//     retired (last read of V). Split so that the next K load need not wait for P V: with one
//     shared 'empty' the overlapped loop freed a slot only mid-way through the next iteration.
// The producer and the consumers walk the same sequence of KV tiles; tile i of that walk uses
// slot i % STAGES in its (i / STAGES)-th round: consumers wait on full with parity round & 1, the
// producer (from round 1 on) waits on k_/v_empty with parity (round - 1) & 1 (RingPos).
#pragma once

#include "../common/cuir_platform.cuh"
#include "tma.cuh"

namespace cubridge {
namespace fa3 {

template <int STAGES, int QBUFS>
struct Barriers {
  uint64_t q_full[QBUFS];
  uint64_t q_empty[QBUFS];  // the consumers' Q K^T of a work tile retired: the next Q may land
  uint64_t k_full[STAGES];
  uint64_t v_full[STAGES];
  uint64_t k_empty[STAGES];
  uint64_t v_empty[STAGES];
};

// STREAM_BYTES: one stage's tile of a streamed tensor (stream.cuh), in K's ring slot; 0: none.
template <typename T, int D, int BLOCK_M, int TILE_N, int STAGES, int QBUFS, int STREAM_BYTES = 0>
struct Geometry {
  static_assert(D == 64 || D == 128 || D == 256, "head dim 64, 128 or 256");
  static_assert(sizeof(T) == 2, "16-bit inputs");
  static_assert(BLOCK_M == 128 || (BLOCK_M == 192 && D == 64),
                "consumer warpgroups of 64 query rows: two, or three at head dim 64");
  static_assert(TILE_N == 64 || TILE_N == 80 || TILE_N == 128 || TILE_N == 176,
                "wgmma n of the score tile: 64, 80, 128 or 176 (the Mma shapes of wgmma.cuh)");
  static_assert(STAGES >= 2 && STAGES <= 4, "2 to 4 K/V stages");
  static_assert(QBUFS == 1 || QBUFS == 2, "one or two Q buffers");
  static_assert(STREAM_BYTES % 1024 == 0, "a streamed tile keeps the next one 1024-byte aligned");
  static constexpr int kStages = STAGES;
  static constexpr int kQBuffers = QBUFS;
  using Bars = Barriers<STAGES, QBUFS>;
  static constexpr int kPanels = D / 64;  // 128-byte-wide swizzle panels
  static constexpr int kConsumerWGs = BLOCK_M / 64;
  static constexpr int kThreads = 128 * (1 + kConsumerWGs);
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = kConsumerWGs == 2 ? 240 : 160;
  // setmaxnreg moves registers within what the CTA got at launch (under __launch_bounds__(N, 1):
  // the 64K register file over N threads, in steps of 8: 168 per thread of 384, 128 of 512), not
  // within the register file: past it, setmaxnreg.inc waits forever (a producer at 32 registers
  // beside two 240-register consumers hung the kernel).
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static_assert(128 * (kProducerRegs + kConsumerWGs * kConsumerRegs) <= kThreads * kLaunchRegs,
                "registers the CTA is launched with");

  static constexpr int kQPanelBytes = BLOCK_M * 128;
  static constexpr int kKVPanelBytes = TILE_N * 128;
  static constexpr int kQBytes = BLOCK_M * D * 2;
  static constexpr int kKVBytes = TILE_N * D * 2;
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = QBUFS * kQBytes;
  static constexpr int kVOffset = kKOffset + STAGES * kKVBytes;
  static constexpr int kStreamBytes = STREAM_BYTES;
  static constexpr int kStreamOffset = kVOffset + STAGES * kKVBytes;  // 1024-aligned: swizzled
  static constexpr int kBarOffset = kStreamOffset + STAGES * kStreamBytes;
  // Dynamic shared memory is only guaranteed 16-byte alignment; the swizzle needs 1024.
  static constexpr int kSmemBytes = kBarOffset + static_cast<int>(sizeof(Bars)) + 1024;
};

template <typename G>
struct SmemPlan {
  uint8_t* base;

  __device__ __forceinline__ explicit SmemPlan(uint8_t* raw) {
    const uint32_t a = smem_u32(raw);
    base = raw + (((a + 1023u) & ~1023u) - a);
  }
  __device__ __forceinline__ uint8_t* q(int buf) const { return base + G::kQOffset + buf * G::kQBytes; }
  __device__ __forceinline__ uint8_t* k(int s) const { return base + G::kKOffset + s * G::kKVBytes; }
  __device__ __forceinline__ uint8_t* v(int s) const { return base + G::kVOffset + s * G::kKVBytes; }
  __device__ __forceinline__ uint8_t* stream(int s) const {
    return base + G::kStreamOffset + s * G::kStreamBytes;
  }
  __device__ __forceinline__ typename G::Bars* bars() const {
    return reinterpret_cast<typename G::Bars*>(base + G::kBarOffset);
  }
};

template <int STAGES, int QBUFS>
__device__ __forceinline__ void init_barriers(Barriers<STAGES, QBUFS>* b, int consumer_warps) {
#pragma unroll
  for (int i = 0; i < QBUFS; ++i) {
    mbar_init(&b->q_full[i], 1);
    mbar_init(&b->q_empty[i], consumer_warps);
  }
#pragma unroll
  for (int s = 0; s < STAGES; ++s) {
    mbar_init(&b->k_full[s], 1);
    mbar_init(&b->v_full[s], 1);
    mbar_init(&b->k_empty[s], consumer_warps);
    mbar_init(&b->v_empty[s], consumer_warps);
  }
  mbar_init_fence();
}

// Where tile i of the walk sits in the ring.
template <int STAGES>
struct RingPos {
  int slot;
  uint32_t round;
  __device__ __forceinline__ explicit RingPos(int i)
      : slot(i % STAGES), round(static_cast<uint32_t>(i / STAGES)) {}
  __device__ __forceinline__ uint32_t full_parity() const { return round & 1; }
  __device__ __forceinline__ bool reused() const { return round > 0; }
  __device__ __forceinline__ uint32_t empty_parity() const { return (round - 1) & 1; }
};

}  // namespace fa3
}  // namespace cubridge
