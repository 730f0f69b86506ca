// Warpgroup MMA (wgmma, sm_90a) pieces of the sm_90 expert: shared-memory matrix descriptors for
// 128-byte-swizzled tiles, the fence/commit/wait protocol, and m64nNk16 wrappers.
//
// Shared-memory tiles are stored as "panels" of 64 16-bit columns (128 bytes per row), which is
// the widest box a 128B-swizzled TMA copy may write; a D-wide tile is D/64 panels one after the
// other. Inside a panel, row r sits at r*128 bytes and its 16-byte chunk c at ((c ^ (r & 7)) * 16),
// so every 8 rows form a 1024-byte swizzle atom. Panels are 1024-byte aligned, which is what lets
// the hardware apply the XOR from the address bits alone (descriptor base offset 0).
//
// Accumulator layout of m64nN (fp32), per warp w of the warpgroup, g = lane / 4, t = lane % 4:
//   d[4j+0], d[4j+1] = (row 16w+g,   cols 8j+2t, 8j+2t+1)
//   d[4j+2], d[4j+3] = (row 16w+g+8, cols 8j+2t, 8j+2t+1)
// A-from-registers of m64nNk16 (16-bit) uses the mma.m16n8k16 A layout with rows offset by 16w:
//   a0 = (g, 2t..), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
// so accumulator n-tiles 2k and 2k+1 packed pairwise are exactly the A operand of k-slice k.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../common/cuir_platform.cuh"

namespace cubridge {
namespace fa3 {

// The one spelling of the layout above: the index in a thread's m64nN accumulator of n-tile j,
// row half r (0: row g, 1: row g+8) and column e of the thread's pair (0: 2t, 1: 2t+1). The
// softmax, the masks, the score visitors and the epilogue all index through it.
__host__ __device__ __forceinline__ constexpr int acc_index(int j, int r, int e) {
  return 4 * j + 2 * r + e;
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Matrix descriptor, 128B swizzle (layout type 1 in bits 62-63). Addresses and offsets are in
// 16-byte units in 14-bit fields.
//  K-major operand (Q as A, K as B; the reduction dim is the contiguous one): the k16 slice sits
//  inside one 128-byte row, so LBO is unused (1 by convention) and SBO = 1024 bytes between
//  8-row atoms. Stepping k by 16 elements moves the start by 32 bytes; the swizzle still
//  resolves because it is applied to the final address.
//  MN-major operand (V as B of P V; N = head dim is contiguous): LBO = bytes between 64-column
//  panels along N, SBO = 1024 bytes between 8-row atoms along K (kv).
__device__ __forceinline__ uint64_t make_desc(uint32_t saddr, uint32_t lbo_bytes,
                                              uint32_t sbo_bytes) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((saddr >> 4) & 0x3FFF);
  d |= static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16;
  d |= static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32;
  d |= static_cast<uint64_t>(1) << 62;
  return d;
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Pins accumulator registers at a point in program order: the async MMA writes them behind the
// compiler's back, so no read or write of them may be moved across the fence/wait.
template <int N>
__device__ __forceinline__ void reg_fence(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// Same for A fragments held in registers: their conversion must not sink below wgmma.fence.
template <int K>
__device__ __forceinline__ void reg_fence(uint32_t (&r)[K][4]) {
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(r[k][i])::"memory");
}

template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// ss: A and B from shared memory, both K-major. rs: A from registers, B MN-major (transposed).
// ss_mn (head-dim widths): both from shared memory, both MN-major.
// `accumulate` = 0 overwrites D (first k-slice of a fresh product).
template <typename T, int N>
struct Mma;

// One definition per width serves bf16 and fp16. REGS names the NREG accumulator operands
// %0..%NREG-1, which __VA_ARGS__ binds to d[]; the operands after them are numbered on: ss takes
// A, B and the accumulate flag (SS: "%A, %B", then the flag's), rs the four A registers, B and the
// flag (RS: "{%a0,...,%a3}, %B", then the flag's).
// ss_as(NAME, TRANS): a product with both operands in shared memory, TRANS the transpose flags
// of A and B: ss ("0, 0"), both K-major; ss_mn ("1, 1"), both MN-major (the transposes of ss's:
// the backward's dQ = dS K, which reads dS stored key-major as A and K as B); ss_kt ("0, 1"), A
// K-major and B MN-major (rs's B with A in shared memory: the backward's dV += P^T dO and
// dK += dS^T Q where the warpgroups split the query block, BwdTiling::kSplitQueries).
#define CUBRIDGE_FA3_MMA_SS_AS(NAME, TRANS, PTX, N, NREG, REGS, SS, SS_FLAG, ...)             \
  static __device__ __forceinline__ void NAME(float (&d)[NREG], uint64_t da, uint64_t db,   \
                                              int accumulate) {                             \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SS_FLAG ", 0;\n"                       \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX "." PTX " {" REGS   \
                 "}, " SS ", p, 1, 1, " TRANS ";\n}\n"                                      \
                 : __VA_ARGS__                                                              \
                 : "l"(da), "l"(db), "r"(accumulate));                                      \
  }
#define CUBRIDGE_FA3_MMA_RS(PTX, N, NREG, REGS, RS, RS_FLAG, ...)                             \
  static __device__ __forceinline__ void rs(float (&d)[NREG], const uint32_t (&a)[4],       \
                                            uint64_t db, int accumulate) {                  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " RS_FLAG ", 0;\n"                       \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX "." PTX " {" REGS   \
                 "}, " RS ", p, 1, 1, 1;\n}\n"                                              \
                 : __VA_ARGS__                                                              \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));   \
  }
// Head-dim widths (64, 128, 256): the score product and O += P V.
#define CUBRIDGE_FA3_MMA_TYPED(CT, PTX, N, NREG, REGS, SS, SS_FLAG, RS, RS_FLAG, ...)         \
  template <> struct Mma<CT, N> {                                                           \
    CUBRIDGE_FA3_MMA_SS_AS(ss, "0, 0", PTX, N, NREG, REGS, SS, SS_FLAG, __VA_ARGS__)        \
    CUBRIDGE_FA3_MMA_SS_AS(ss_mn, "1, 1", PTX, N, NREG, REGS, SS, SS_FLAG, __VA_ARGS__)     \
    CUBRIDGE_FA3_MMA_SS_AS(ss_kt, "0, 1", PTX, N, NREG, REGS, SS, SS_FLAG, __VA_ARGS__)     \
    CUBRIDGE_FA3_MMA_RS(PTX, N, NREG, REGS, RS, RS_FLAG, __VA_ARGS__)                       \
  };
#define CUBRIDGE_FA3_MMA(N, NREG, REGS, SS, SS_FLAG, RS, RS_FLAG, ...)                        \
  CUBRIDGE_FA3_MMA_TYPED(__nv_bfloat16, "bf16", N, NREG, REGS, SS, SS_FLAG, RS, RS_FLAG,    \
                         __VA_ARGS__)                                                       \
  CUBRIDGE_FA3_MMA_TYPED(__half, "f16", N, NREG, REGS, SS, SS_FLAG, RS, RS_FLAG, __VA_ARGS__)
// Score-tile widths beside them (176, 80): the score product only.
#define CUBRIDGE_FA3_SCORE_MMA_TYPED(CT, PTX, N, NREG, REGS, SS, SS_FLAG, ...)                \
  template <> struct Mma<CT, N> {                                                           \
    CUBRIDGE_FA3_MMA_SS_AS(ss, "0, 0", PTX, N, NREG, REGS, SS, SS_FLAG, __VA_ARGS__)        \
  };
#define CUBRIDGE_FA3_SCORE_MMA(N, NREG, REGS, SS, SS_FLAG, ...)                               \
  CUBRIDGE_FA3_SCORE_MMA_TYPED(__nv_bfloat16, "bf16", N, NREG, REGS, SS, SS_FLAG,           \
                               __VA_ARGS__)                                                 \
  CUBRIDGE_FA3_SCORE_MMA_TYPED(__half, "f16", N, NREG, REGS, SS, SS_FLAG, __VA_ARGS__)

CUBRIDGE_FA3_MMA(64, 32, "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31",
                 "%32, %33", "%34", "{%32,%33,%34,%35}, %36", "%37",
                 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]))

CUBRIDGE_FA3_MMA(128, 64, "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63",
                 "%64, %65", "%66", "{%64,%65,%66,%67}, %68", "%69",
                 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]))

CUBRIDGE_FA3_MMA(256, 128, "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127",
                 "%128, %129", "%130", "{%128,%129,%130,%131}, %132", "%133",
                 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]))

// m64n176: the score tile of a 176-key block (head dims up to 128): 37% more keys than 128 per
// row max, rescale and barrier round, in the 240 registers a consumer has (S 88 + P 44 + O 64).
CUBRIDGE_FA3_SCORE_MMA(176, 88, "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87", "%88, %89", "%90",
                       "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]))

// m64n80: the score tile of an 80-key block at head dim 256 (FlashAttention-3's choice there): 25%
// more keys than 64 per row max and rescale of the 128-register output accumulator, in the 240
// registers a consumer has (S 40 + P 20 + O 128).
CUBRIDGE_FA3_SCORE_MMA(80, 40, "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39", "%40, %41", "%42",
                       "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]))

// m64n32: half a 64-query block's S^T, where the backward's warpgroups split the block's queries
// (BwdTiling::kSplitQueries: head dim 256).
CUBRIDGE_FA3_SCORE_MMA(32, 16, "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15", "%16, %17", "%18",
                       "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]))

#undef CUBRIDGE_FA3_SCORE_MMA
#undef CUBRIDGE_FA3_SCORE_MMA_TYPED
#undef CUBRIDGE_FA3_MMA
#undef CUBRIDGE_FA3_MMA_TYPED
#undef CUBRIDGE_FA3_MMA_RS
#undef CUBRIDGE_FA3_MMA_SS_AS

}  // namespace fa3
}  // namespace cubridge
