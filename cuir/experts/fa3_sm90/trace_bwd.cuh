// The backward's phase stamps (CUBRIDGE_BWD_TRACE; only tests/gpu/backward's --trace builds it,
// never a lowered kernel): the consumers' first thread writes its CTA's SM clock at each phase
// boundary into cubridge_bwd_trace, kTraceSlots a CTA for the grid's first kTraceCtas CTAs, so
// that a short walk's time splits into launch, loads, blocks and epilogue (bench/NOTES.md,
// session 25). Off, every stamp compiles to nothing. Part of kernel_bwd.cu, included before the
// tile's code.
#pragma once

#ifndef CUBRIDGE_BWD_TRACE
#define CUBRIDGE_BWD_TRACE 0
#endif

// The slots of a CTA's row, in the order the CTA passes them; then the SM's index, the blocks
// walked, and the global timer (ns) at entry and at the end (the SM clock's rate from them).
enum BwdTraceSlot : int {
  kTraceStart,   // kernel entry
  kTraceKv,      // K and V landed (the consumers' wait returned)
  kTraceFirst,   // the first query block's stage landed
  kTraceWalked,  // the walk's last product retired
  kTraceStored,  // dK and dV stored
  kTraceEnd,     // dQ's conversion, if any, done
  kTraceSm,
  kTraceBlocks,
  kTraceStartNs,
  kTraceEndNs,
  kTraceSlots
};
#if CUBRIDGE_BWD_TRACE
constexpr int kTraceCtas = 1 << 16;
__device__ long long cubridge_bwd_trace[kTraceCtas * kTraceSlots];
#endif

// `value` into this CTA's `slot`, by the consumers' thread 0 (tid counts the consumers).
__device__ __forceinline__ void bwd_trace_note(int tid, BwdTraceSlot slot, long long value) {
#if CUBRIDGE_BWD_TRACE
  const long long grid_yz = blockIdx.y + static_cast<long long>(gridDim.y) * blockIdx.z;
  const long long cta = blockIdx.x + static_cast<long long>(gridDim.x) * grid_yz;
  if (tid == 0 && cta < kTraceCtas) cubridge_bwd_trace[cta * kTraceSlots + slot] = value;
#else
  (void)tid, (void)slot, (void)value;
#endif
}

// The SM's clock now into `slot` (at kTraceStart also the SM's index, at both ends the global
// timer).
__device__ __forceinline__ void bwd_trace_stamp(int tid, BwdTraceSlot slot) {
#if CUBRIDGE_BWD_TRACE
  bwd_trace_note(tid, slot, clock64());
  if (slot == kTraceStart || slot == kTraceEnd) {
    unsigned long long ns;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(ns));
    bwd_trace_note(tid, slot == kTraceStart ? kTraceStartNs : kTraceEndNs, ns);
  }
  if (slot == kTraceStart) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
    bwd_trace_note(tid, kTraceSm, sm);
  }
#else
  (void)tid, (void)slot;
#endif
}
