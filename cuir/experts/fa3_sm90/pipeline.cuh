// Shared-memory plan and the K/V stage ring of the sm_90 expert.
//
// One CTA = one 128-row Q tile of one (batch, head). Q stays resident; K and V each have kStages
// slots. Per slot there are three barriers:
//   k_full / v_full (count 1): the producer's arrive.expect_tx plus the TMA bytes complete them;
//     V has its own so that Q K^T can start while V is still in flight.
//   k_empty / v_empty (count = consumer warps): every consumer warp arrives on k_empty once its
//     Q K^T wgmma of that slot has retired (last read of K) and on v_empty once its P V wgmma has
//     retired (last read of V). Split so that the next K load need not wait for P V: with one
//     shared 'empty' the overlapped loop freed a slot only mid-way through the next iteration,
//     leaving the TMA about half an iteration to land the block after that.
// Iteration n uses slot n % kStages in its (n / kStages)-th round; consumers wait on full with
// parity round & 1, the producer (from round 1 on) waits on k_/v_empty with parity (round - 1) & 1.
#pragma once

#include "../common/cuir_platform.cuh"
#include "tma.cuh"

namespace cubridge {
namespace fa3 {

template <typename T, int D>
struct Config {
  static_assert(D == 64 || D == 128 || D == 256, "head dim 64, 128 or 256");
  static_assert(sizeof(T) == 2, "16-bit inputs");
  static constexpr int kBlockM = 128;                 // two consumer warpgroups x 64 rows
  static constexpr int kBlockN = D <= 128 ? 128 : 64;  // keeps S + O + P under 240 registers
  static constexpr int kStages = 2;
  static constexpr int kPanels = D / 64;              // 128-byte-wide swizzle panels
  static constexpr int kConsumerWGs = 2;
  static constexpr int kThreads = 128 * (1 + kConsumerWGs);
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
  static_assert(128 * (kProducerRegs + kConsumerWGs * kConsumerRegs) <= 65536, "register file");

  static constexpr int kQPanelBytes = kBlockM * 128;
  static constexpr int kKVPanelBytes = kBlockN * 128;
  static constexpr int kQBytes = kBlockM * D * 2;
  static constexpr int kKVBytes = kBlockN * D * 2;
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQBytes;
  static constexpr int kVOffset = kKOffset + kStages * kKVBytes;
  static constexpr int kBarOffset = kVOffset + kStages * kKVBytes;
  static constexpr int kBarBytes = 8 * (1 + 4 * kStages);
  // Dynamic shared memory is only guaranteed 16-byte alignment; the swizzle needs 1024.
  static constexpr int kSmemBytes = kBarOffset + kBarBytes + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

struct Barriers {
  uint64_t q_full;
  uint64_t k_full[2];
  uint64_t v_full[2];
  uint64_t k_empty[2];
  uint64_t v_empty[2];
};

template <typename Cfg>
struct SmemPlan {
  uint8_t* base;

  __device__ __forceinline__ explicit SmemPlan(uint8_t* raw) {
    const uint32_t a = smem_u32(raw);
    base = raw + (((a + 1023u) & ~1023u) - a);
  }
  __device__ __forceinline__ uint8_t* q() const { return base + Cfg::kQOffset; }
  __device__ __forceinline__ uint8_t* k(int s) const { return base + Cfg::kKOffset + s * Cfg::kKVBytes; }
  __device__ __forceinline__ uint8_t* v(int s) const { return base + Cfg::kVOffset + s * Cfg::kKVBytes; }
  __device__ __forceinline__ Barriers* bars() const {
    return reinterpret_cast<Barriers*>(base + Cfg::kBarOffset);
  }
};

template <typename Cfg>
__device__ __forceinline__ void init_barriers(Barriers* b) {
  static_assert(Cfg::kStages == 2, "Barriers holds two slots");
  mbar_init(&b->q_full, 1);
#pragma unroll
  for (int s = 0; s < Cfg::kStages; ++s) {
    mbar_init(&b->k_full[s], 1);
    mbar_init(&b->v_full[s], 1);
    mbar_init(&b->k_empty[s], Cfg::kConsumerWGs * 4);
    mbar_init(&b->v_empty[s], Cfg::kConsumerWGs * 4);
  }
  mbar_init_fence();
}

// Named hardware barriers (id 0 is __syncthreads). The ping-pong of the two consumer warpgroups
// uses id 1 ("consumer WG 0 may issue") and id 2 ("consumer WG 1 may issue"), 256 threads each:
// the 128 threads of the waiting WG bar.sync, the 128 of the other WG bar.arrive.
enum : int { kBarIssueWG0 = 1, kBarIssueWG1 = 2, kPingPongThreads = 256 };

template <int ID, int THREADS>
__device__ __forceinline__ void named_bar_sync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(THREADS) : "memory");
}
template <int ID, int THREADS>
__device__ __forceinline__ void named_bar_arrive() {
  asm volatile("bar.arrive %0, %1;\n" ::"n"(ID), "n"(THREADS) : "memory");
}
// Ping-pong turn of consumer WG cw (0 or 1; warp-uniform branch, immediate barrier ids).
__device__ __forceinline__ void pingpong_wait_turn(int cw) {
  if (cw == 0) named_bar_sync<kBarIssueWG0, kPingPongThreads>();
  else named_bar_sync<kBarIssueWG1, kPingPongThreads>();
}
__device__ __forceinline__ void pingpong_pass_turn(int cw) {
  if (cw == 0) named_bar_arrive<kBarIssueWG1, kPingPongThreads>();
  else named_bar_arrive<kBarIssueWG0, kPingPongThreads>();
}

}  // namespace fa3
}  // namespace cubridge
