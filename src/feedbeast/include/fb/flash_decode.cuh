// Flash-decoding over a paged KV cache (chapter 10, part 2).
//
//   O (nq x HQ x 128, bf16) = softmax(Q K^T * scale) V for nq <= 64 new queries over L cached tokens, with
//   GQA: query head h*G+j (j < G) reads KV head h. K and V live in a pool of pages, [pages][HKV][P][128] bf16
//   (each page of one head is P contiguous rows of 256 B), and the sequence's i-th page is table[i].
//
// Block (split s, KV head h, row block b): RP query rows (of the G*nq of head h, padded) against the s-th slice of
// the sequence, 64 tokens per stage. Pw producer warps fill a ring of Stages stages (K and V,
// 16 KB each, 128-byte swizzle); Cw consumer warps compute S = Q K^T and O += P V and keep the online softmax in
// registers. The consumers are one of two kinds (Kind): 0, mma.sync m16n8k16 per warp (few rows: 16, 32 or 64 per
// block); 1, wgmma per warpgroup (many rows: m64 tiles, K read by the tensor cores straight from the stage as the
// K-major B operand of S = Q K^T, V as the MN-major B operand of O += P V, P from registers). The S partial results
// (O normalised, log-sum-exp) of a head are combined (Combine) 0: by the block that finishes last (an atomic count
// per head), so one launch does both steps; 1: by combine_paged, a second kernel launched with programmatic
// dependent launch, its blocks spread over the SMs.
//
// The producer is one of three ways to reach a page (Mode):
//   0  cp.async gathers: each lane copies 16-byte chunks of the stage's rows (page from the table, zero fill past
//      L); for the mma.sync consumers cp.async.mbarrier.arrive.noinc makes the stage's barrier wait for its copies,
//      for the wgmma consumers each lane waits for its own copies (cp.async.wait_group), fences the proxies, arrives;
//   1  TMA from one tensor map over the whole pool: a page of head h is the box at row (page*HKV + h)*P;
//   2  TMA from a tensor map per page: the map's global address is rewritten on the device (tensormap.replace),
//      copied to global memory with a release (tensormap.cp_fenceproxy) and acquired before the copy uses it.
//
// PTX ISA sections: "cp.async", "cp.async.mbarrier.arrive", "mbarrier", "cp.async.bulk.tensor",
// "tensormap.replace", "tensormap.cp_fenceproxy", "membar/fence" (fence.proxy.tensormap::generic), "ldmatrix"
// (.trans), "mma" (m16n8k16), "ex2", "wgmma.mma_async" (and "Matrix Descriptor Format", "Register Fragments and Shared
// Memory Matrix Layouts"), "Memory Consistency Model: Proxies" (cp.async writes are generic-proxy writes; wgmma reads
// its shared-memory operands through the async proxy, so the lane that copied fences before it arrives). The
// last-block combine follows the CUDA C++ Programming Guide, "Memory Fence Functions" (__threadfence before the
// count, the last block reads every partial).
//
// With -D FB_TRACE=1 (feedbeast.trace.TraceBuffer), thread 0 of every block records the phases of its block into lane
// blockIdx.y * gridDim.x + blockIdx.x: `load` from its start to its first full stage (Q, the barriers, the ring's
// first round trip), `consume` until every consumer is done with the last stage, `compute` the merge of its token
// slices and the partials' stores, `wait` the fence and the count, `bubble` the combine (the last block of a head).
#pragma once
#include <cuda_bf16.h>
#include <cuda/std/cstdint>
#include <cuda/std/limits>
#include <fb/cp_async.cuh>
#include <fb/decode.cuh>
#include <fb/fence.cuh>
#include <fb/mbarrier.cuh>
#include <fb/named_barrier.cuh>
#include <fb/smem.cuh>
#include <fb/tma.cuh>
#include <fb/trace.cuh>
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include <fb/wgmma.cuh>
#define FB_PAGED_WGMMA 1
#endif

namespace fb {
namespace paged {
using u32 = unsigned;
using u64 = unsigned long long;
using fb::decode::ldmatrix_x4;
using fb::decode::mma_bf16;
using fb::decode::swz128;

constexpr int D = 128;              // head dimension
constexpr int TT = 64;              // tokens per stage
constexpr int HALF = TT * 128;      // 64 tokens x 64 columns (bf16): one 128-byte-swizzled half of a tile
constexpr int TILE = 2 * HALF;      // K (or V) of one stage: 16 KB
constexpr int STAGE = 2 * TILE;     // K then V
constexpr float NEG_INF = -cuda::std::numeric_limits<float>::infinity();

// Byte offset of 16-byte chunk c (0..15) of row r in a tile of `rows` rows stored as two 64-column halves
// (the layout a TMA load with the 128-byte swizzle writes, box 64 columns wide).
__device__ __forceinline__ u32 chunk_off(int r, int c, int rows) { return (c >> 3) * rows * 128 + swz128(r, c & 7); }

// ldmatrix.trans: as fb::decode::ldmatrix_x4, each 8x8 matrix transposed: lane l receives rows 2(l%4) and
// 2(l%4)+1 of column l/4. With token rows and head-dimension columns this is the B fragment of P V.
__device__ inline void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// cp.async.mbarrier.arrive.noinc: the barrier gets one arrival when every cp.async this thread issued before it
// has completed. .noinc: the pending count is not raised first, so the barrier's init count includes it.
__device__ inline void cp_async_arrive_noinc(u64* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// tensormap.replace.tile.global_address (shared::cta copy of a map): the map now starts at `addr`.
// Hazard builds record the map's bytes before and after: a map that differs from a launch argument only in its
// global address has that argument's box.
__device__ inline void tensormap_set_address(void* smem_map, const void* addr FB_HZ_LINE) {
#ifdef FB_HAZARDS
  const unsigned before = fb::hazard::map_hash(smem_map);
#endif
  asm volatile("tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;"
               ::"r"(smem_addr(smem_map)), "l"(addr) : "memory");
  FB_HZ_RECORD(fb::hazard::kTensormapReplace, smem_addr(smem_map), before, fb::hazard::map_hash(smem_map), 0);
}
// tensormap.cp_fenceproxy ... release.gpu.sync.aligned: the whole warp copies the 128-byte map from shared to
// global memory and releases it to the tensormap proxy (the TMA unit's reads of maps).
// Hazard builds: recorded once per warp, by its first active lane, after the copy (the bytes it hashes are the map's).
__device__ inline void tensormap_publish(void* gmem_map, const void* smem_map FB_HZ_LINE) {
  asm volatile("tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%0], [%1], 128;"
               ::"l"(gmem_map), "r"(smem_addr(smem_map)) : "memory");
#ifdef FB_HAZARDS
  if (fb::hazard::warp_leader())
    FB_HZ_RECORD(fb::hazard::kTensormapPublish, reinterpret_cast<u64>(gmem_map), fb::hazard::map_hash(smem_map), 0, 0);
#endif
}
// fence.proxy.tensormap::generic.acquire.gpu: later TMA copies through this map see the release above.
__device__ inline void tensormap_acquire(const void* gmem_map FB_HZ_LINE) {
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(gmem_map) : "memory");
  FB_HZ_RECORD(fb::hazard::kFenceTensormapAcquire, reinterpret_cast<u64>(gmem_map), 0, 0, 0);
}

__device__ __forceinline__ u32 pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<u32*>(&v);
}

// The plan of a configuration: Rg row groups of 16 (RP = 16 Rg query rows), Cw consumer warps.
// Kind 0 (mma.sync): the warps split the rows first (WR groups of MT m16 tiles), then the 64 tokens of a stage (WT
// slices of TW tokens). Kind 1 (wgmma): the same with warpgroups and m64 tiles (MT = 1: one tile per warpgroup).
template <int Rg, int Cw, int Stages, int Pw = 1, int Kind = 0>
struct Plan {
  static constexpr int RP = 16 * Rg;
  static constexpr int UNIT = Kind ? 4 : 1;              // warps per consumer
  static constexpr int NC = Cw / UNIT;                   // consumers: warps, or warpgroups
  static constexpr int RU = Kind ? Rg / 4 : Rg;          // row tiles: m16, or m64
  static constexpr int WR = RU < NC ? RU : NC;
  static constexpr int WT = NC / WR;
  static constexpr int MT = RU / WR;
  static constexpr int TW = TT / WT;
  static constexpr int THREADS = 32 * (Cw + Pw);        // Pw producer warps after the consumers
  static constexpr int RING = Stages * STAGE;
  static constexpr int QBYTES = RP * 256;
  static constexpr int SD = D + 8;                       // a scratch row (floats): see the merge
  static constexpr int SCRATCH = (WT * RP * (SD + 2) + 2 * RP) * 4;   // per token slice O rows, m, l; per row 1/l, lse
  static constexpr int SMEM = RING + QBYTES + 2 * Stages * 8 + 1024;
  static_assert(Cw % UNIT == 0 && RU * (Kind ? 64 : 16) == RP, "wgmma consumers are warpgroups over m64 tiles");
  static_assert(WR * WT == NC && MT * WR == RU && TW % 16 == 0, "rows and tokens must split evenly over consumers");
  static_assert(Kind == 0 || MT == 1, "a wgmma consumer keeps one 64 x 128 O tile");
  static_assert(SCRATCH <= RING + QBYTES, "the combine scratch reuses the ring and Q");
};

// The pool and the page table as every producer sees them (the tensor maps of Modes 1 and 2 are separate arguments).
struct Pages {
  const __nv_bfloat16* k;
  const __nv_bfloat16* v;
  const int* table;
  int L, log2p, hkv;
};

// ---- the producer of one stage ------------------------------------------------------------------------------
// Mode 0: the 32 Pw producer lanes; lane l (0 .. 32 Pw - 1) copies chunk l%16 of rows l/16, l/16 + 2 Pw, ...
template <int Pw>
__device__ inline void gather_stage(unsigned char* st, const Pages& pg, int h, int tile, int lane) {
  const int c = lane % 16;
#pragma unroll 4
  for (int r = lane / 16; r < TT; r += 2 * Pw) {
    const int t = tile * TT + r;
    const bool ok = t < pg.L;
    const int page = ok ? __ldg(pg.table + (t >> pg.log2p)) : 0;
    const size_t row = ((size_t(page) * pg.hkv + h) << pg.log2p) + (ok ? (t & ((1 << pg.log2p) - 1)) : 0);
    const size_t e = row * D + c * 8;
    const u32 off = chunk_off(r, c, TT);
    fb::cp_async_cg16(st + off, pg.k + e, ok ? 16 : 0);
    fb::cp_async_cg16(st + TILE + off, pg.v + e, ok ? 16 : 0);
  }
}

// Mode 1 and 2: how many boxes of BR = min(P, 64) rows the stage needs to cover its tokens below L.
__device__ inline int piece_count(const Pages& pg, int tile) {
  const int br = pg.log2p < 6 ? 1 << pg.log2p : TT;
  const int left = pg.L - tile * TT;
  const int rows = left < TT ? left : TT;
  return (rows + br - 1) / br;
}

// ---- the consumer's work on one stage ---------------------------------------------------------------------
// Warp (wr, wt): rows 16 MT wr .., tokens TW wt .. of the stage, in chunks of 16 tokens.
template <int MT, int TW, int RP>
__device__ inline void consume_stage(float (&o)[MT][16][4], float (&m)[MT][2], float (&l)[MT][2], u32 q, u32 kt,
                                     u32 vt, int wr, int wt, int lane, int tok_base, int L, float scale_log2) {
  const int i = lane / 8, r8 = lane % 8, t4 = lane % 4;
#pragma unroll
  for (int kc = 0; kc < TW / 16; ++kc) {
    const int tok0 = TW * wt + 16 * kc;
    float s[MT][2][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int n = 0; n < 2; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {              // d in steps of 16: chunks 2kk, 2kk+1
      u32 b[4];
      ldmatrix_x4(b, kt + chunk_off(tok0 + r8 + 8 * (i >> 1), 2 * kk + (i & 1), TT));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        u32 a[4];
        ldmatrix_x4(a, q + chunk_off(16 * (MT * wr + mt) + r8 + 8 * (i & 1), 2 * kk + (i >> 1), RP));
        mma_bf16(s[mt][0], a, b[0], b[1]);
        mma_bf16(s[mt][1], a, b[2], b[3]);
      }
    }
    const bool tail = tok_base + tok0 + 16 > L;   // tokens past L: score -inf (their K and V may be anything)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {            // rows g (values 0, 1) and g + 8 (values 2, 3)
        float mx = m[mt][hr];
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = s[mt][n][2 * hr + e];
            x = (tail && tok_base + tok0 + 8 * n + 2 * t4 + e >= L) ? NEG_INF : x * scale_log2;
            mx = fmaxf(mx, x);
          }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float base = mx == NEG_INF ? 0.f : mx;     // a row that has seen only masked tokens
        const float alpha = exp2f(m[mt][hr] - base);
        m[mt][hr] = mx;
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = s[mt][n][2 * hr + e];
            x = exp2f(x - base);
            sum += x;
          }
        l[mt][hr] = l[mt][hr] * alpha + sum;
#pragma unroll
        for (int dn = 0; dn < 16; ++dn) {
          o[mt][dn][2 * hr] *= alpha;
          o[mt][dn][2 * hr + 1] *= alpha;
        }
      }
      // P (16 rows x 16 tokens) as the A fragment: the S accumulators' layout is the A layout (FlashAttention-2).
      const u32 a[4] = {pack_bf16(s[mt][0][0], s[mt][0][1]), pack_bf16(s[mt][0][2], s[mt][0][3]),
                        pack_bf16(s[mt][1][0], s[mt][1][1]), pack_bf16(s[mt][1][2], s[mt][1][3])};
#pragma unroll
      for (int dp = 0; dp < 8; ++dp) {            // d chunks 2dp, 2dp+1: tokens +0/+8 (i&1) x chunk (i>>1)
        u32 b[4];
        ldmatrix_x4_trans(b, vt + chunk_off(tok0 + r8 + 8 * (i & 1), 2 * dp + (i >> 1), TT));
        mma_bf16(o[mt][2 * dp], a, b[0], b[1]);
        mma_bf16(o[mt][2 * dp + 1], a, b[2], b[3]);
      }
    }
  }
}

#ifdef FB_PAGED_WGMMA
// ---- the wgmma consumer's work on one stage ------------------------------------------------------------------
// One warpgroup: its 64 query rows (q: their first row in Q, RP rows per 64-column half) against TN tokens of the
// stage (kt, vt: the first of them in K and V, 64 rows per half). o is the 64 x 128 fp32 accumulator in the wgmma D
// layout: thread t has rows 16 (t/32) + (t%32)/4 (+8) and, in register i, column 8 (i/4) + 2 (t%4) + i%2.
// 2^x is ex2.approx.ftz (one MUFU.EX2): a term below 2^-126 flushed to 0 is far below the rounding of l >= 1.
__device__ __forceinline__ float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// An MN-major operand with the 128-byte swizzle (V: token rows of 64 contiguous columns per half): LBO is the step
// to the next 64-column half, SBO to the next 8 token rows (PTX ISA, "Matrix Descriptor Format").
__device__ inline u64 descriptor_mn_major_sw128(const void* tile, u32 lbo, u32 sbo) {
  return fb::wgmma::descriptor_field(static_cast<u64>(__cvta_generic_to_shared(tile))) |
         (fb::wgmma::descriptor_field(lbo) << 16) | (fb::wgmma::descriptor_field(sbo) << 32) | (1ull << 62);
}

// S (64 x TN) = Q K^T, issued and committed as one group: 8 k16 steps over d, both operands K-major; step kk is
// 32 B along a row, kk / 4 picks the half. The descriptor's address field holds address / 16, so a step adds its
// byte offset / 16.
template <int TN, int RP>
__device__ inline void qk_wg(float (&s)[TN / 2], const unsigned char* q, const unsigned char* kt FB_HZ_LINE) {
  const u64 dq = fb::wgmma::descriptor_k_major_sw128(q), dk = fb::wgmma::descriptor_k_major_sw128(kt);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const int qo = (kk / 4) * RP * 128 + (kk % 4) * 32, ko = (kk / 4) * HALF + (kk % 4) * 32;
    fb::wgmma::mma<TN>(s, dq + qo / 16, dk + ko / 16, kk > 0 FB_HZ_PASS);
  }
}

// The online softmax of this thread's two rows (registers with (i % 4) / 2 == hr), tokens tok0 .. tok0 + TN - 1,
// masked past L: s becomes p = 2^(x - m) in fp32, alpha the factor for what O accumulated before.
template <int TN>
__device__ inline void softmax_wg(float (&s)[TN / 2], float (&m)[2], float (&l)[2], float (&alpha)[2], int tok0, int L,
                                  float scale_log2, int lane) {
  const int t4 = lane % 4;
  const bool tail = tok0 + TN > L;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float mx = NEG_INF;
#pragma unroll
    for (int i = 0; i < TN / 2; ++i)
      if ((i % 4) / 2 == hr) {
        if (tail && tok0 + 8 * (i / 4) + 2 * t4 + (i % 2) >= L) s[i] = NEG_INF;    // a NaN past L becomes -inf
        mx = fmaxf(mx, s[i]);
      }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mnew = fmaxf(m[hr], mx * scale_log2);             // log2 units, as m
    const float base = mnew == NEG_INF ? 0.f : mnew;              // a row that has seen only masked tokens
    alpha[hr] = exp2f(m[hr] - base);
    m[hr] = mnew;
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < TN / 2; ++i)
      if ((i % 4) / 2 == hr) {
        s[i] = exp2_fast(fmaf(s[i], scale_log2, -base));
        sum += s[i];
      }
    l[hr] = l[hr] * alpha[hr] + sum;
  }
}

// O (64 x 128) += P V, issued: TN / 16 k16 steps of 16 token rows (2 KB apart), P as A fragments from registers
// (k16 step j is accumulator registers 8j .. 8j+7 of S: FlashAttention-2's reuse), V MN-major (imm-trans-b = 1).
template <int TN>
__device__ inline void pv_wg(float (&o)[D / 2], const u32 (&p)[TN / 16][4], const unsigned char* vt FB_HZ_LINE) {
  const u64 dv = descriptor_mn_major_sw128(vt, HALF, 1024);
#pragma unroll
  for (int kk = 0; kk < TN / 16; ++kk) {
#pragma unroll
    for (int j = 0; j < 2; ++j)
      FB_HZ_RECORD(fb::hazard::kWgmmaRead, static_cast<u32>(__cvta_generic_to_shared(vt)) + j * HALF + kk * 2048,
                   16 * 128, 0, 0);
    fb::wgmma::mma_rs<D, 1>(o, p[kk], dv + kk * 2048 / 16, 1);
  }
}

// One stage j for a warpgroup, software-pipelined by one stage (FlashAttention-3's intra-warpgroup overlap):
// S_j = Q K_j^T and O += P_{j-1} V_{j-1} are issued back to back as two groups; wait_group 1 returns with S_j while
// P V still runs under the softmax of S_j; wait_group 0 then frees stage j-1 (returned: the caller releases it),
// O is rescaled by alpha_j and P_j packed for the next call. `first`: no P V is pending yet.
// FIRST: the first stage (no P V pending; a wgmma under a run-time condition makes ptxas serialise every wgmma of
// the kernel, so the first stage is its own instantiation).
template <int TN, int RP, bool FIRST>
__device__ inline void consume_stage_wg(float (&o)[D / 2], u32 (&p)[TN / 16][4], float (&m)[2], float (&l)[2],
                                        const unsigned char* q, const unsigned char* kt, const unsigned char* vprev,
                                        int tok0, int L, float scale_log2, int lane) {
  float s[TN / 2], alpha[2];
  fb::wgmma::fence();                            // O and P were last written by ordinary instructions
  qk_wg<TN, RP>(s, q, kt);
  fb::wgmma::commit_group();
  if constexpr (!FIRST) {
    pv_wg<TN>(o, p, vprev);
    fb::wgmma::commit_group();
    fb::wgmma::wait_group<1>();
  } else {
    fb::wgmma::wait_group<0>();
  }
  fb::wgmma::fence_operand(s);
  softmax_wg<TN>(s, m, l, alpha, tok0, L, scale_log2, lane);
  // ptxas moved this wait_group 0 above the softmax it is meant to overlap (the SASS showed both waits ahead of every
  // MUFU.EX2); a memory fence between them is an order it keeps (chapter 09 found the same). The consumer warps have
  // no memory accesses of their own in flight for it to wait on.
  if constexpr (!FIRST) asm volatile("fence.acq_rel.cta;" ::: "memory");
  fb::wgmma::wait_group<0>();
  fb::wgmma::fence_operand(o);
  // Rescale O only where a row's maximum moved in this warp (after the first stages it rarely does).
  if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] *= alpha[(i % 4) / 2];
  }
#pragma unroll
  for (int j = 0; j < TN / 16; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) p[j][e] = pack_bf16(s[8 * j + 2 * e], s[8 * j + 2 * e + 1]);
}

// The last P V of a warpgroup (stage `vlast`), waited for.
template <int TN>
__device__ inline void finish_pv_wg(float (&o)[D / 2], const u32 (&p)[TN / 16][4], const unsigned char* vlast) {
  fb::wgmma::fence();
  pv_wg<TN>(o, p, vlast);
  fb::wgmma::commit_group();
  fb::wgmma::wait_group<0>();
  fb::wgmma::fence_operand(o);
}
#endif

// ---- the block ----------------------------------------------------------------------------------------------
// q, out: [nq][HQ][128] bf16 (HQ = hkv * group). part_o: [hkv][RB][S][RP][128] fp32, part_lse: [hkv][RB][S][RP]
// (base 2, scaled units), count: [hkv][RB] zeros (left at zero). maps: Mode 1 the K and V pool maps (rows of 128 columns, box
// 64 x min(P, 64), 128-byte swizzle); Mode 2 one page's K and V maps (P rows), and slots: a global area of
// 2 * Stages * 64/min(P,64) maps of 128 bytes per block. trace: a TraceBuffer's array with one lane per block, or
// nullptr (with FB_TRACE=1; without it nothing is recorded and the timer is never read).
template <int Rg, int Cw, int Stages, int Mode, int Pw = 1, int Kind = 0, int Combine = 0>
__device__ void decode_paged(const TensorMap& kmap, const TensorMap& vmap, TensorMap* slots, const Pages pg,
                             const __nv_bfloat16* q, __nv_bfloat16* out, float* part_o, float* part_lse,
                             unsigned* count, int nq, int group, float scale_log2, long long* trace = nullptr) {
  static_assert(Pw == 1 || Mode == 0, "the TMA producers are one thread");
#ifndef FB_PAGED_WGMMA
  static_assert(Kind == 0, "wgmma consumers need the arch-specific Hopper target (sm_90a)");
#endif
  using Pl = Plan<Rg, Cw, Stages, Pw, Kind>;
  constexpr int RP = Pl::RP, MT = Pl::MT, TW = Pl::TW;
  extern __shared__ unsigned char raw[];
  unsigned char* smem = align_up<1024>(raw);
  unsigned char* qs = smem + Pl::RING;
  u64* full = reinterpret_cast<u64*>(qs + Pl::QBYTES);
  u64* empty = full + Stages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, tid = threadIdx.x;
  // blockIdx.x = split * RB + b: the RB row blocks of a slice run side by side, the later ones finding K and V in L2.
  const int RB = (nq * group + RP - 1) / RP, S = gridDim.x / RB, split = blockIdx.x / RB, rb = blockIdx.x % RB;
  const int h = blockIdx.y, hq = pg.hkv * group, row0 = rb * RP;
  const int rows = nq * group - row0 < RP ? nq * group - row0 : RP;
  const int hb = h * RB + rb;                    // this row block's partials and count
  const int ntiles = (pg.L + TT - 1) / TT;
  const int tile0 = int((long long)split * ntiles / S), iters = int((long long)(split + 1) * ntiles / S) - tile0;
  Tracer tr(trace, blockIdx.y * gridDim.x + blockIdx.x, tid == 0);
  const long long t_start = tr.now();
  long long t_first = 0;                         // thread 0 (a consumer): its first stage is full

  if (tid == 0) {
    for (int s = 0; s < Stages; ++s) {
      mbar::init(&full[s], Mode == 0 ? 32 * Pw : 1);   // Mode 0: one arrival per producer lane's copies
      mbar::init(&empty[s], Cw);                  // one arrival per consumer warp
    }
    mbar::fence_init();
  }
  if (Combine == 1) fb::decode::launch_dependents();   // combine_paged may launch (it waits for this grid's end)
  // Q rows r = query * group + j of head h*group + j; rows past nq*group are zeros. Loaded by the consumers alone while
  // the producer issued the first stages, Q cost the TMA pool map with 16-token pages 7-10 % more time at 128k tokens
  // (H200), so every thread loads it first.
  for (int x = tid; x < RP * 16; x += Pl::THREADS) {
    const int r = x / 16, c = x % 16;
    uint4 val = make_uint4(0, 0, 0, 0);
    const int rg = row0 + r;
    if (r < rows) val = *reinterpret_cast<const uint4*>(q + ((size_t)(rg / group) * hq + h * group + rg % group) * D + c * 8);
    *reinterpret_cast<uint4*>(qs + chunk_off(r, c, RP)) = val;
  }
  if (Kind == 1) fence_proxy_async();            // Q, written by ordinary stores, is read by wgmma (async proxy)
  __syncthreads();

  // Kind 0: o[MT][16][4], m and l per m16 tile; Kind 1 uses o[0] as the 64 x 128 wgmma accumulator (64 floats).
  float o[MT][16][4], m[MT][2], l[MT][2];
  const int cons = warp / Pl::UNIT;              // this consumer (warp, or warpgroup)
  const int wr = cons / Pl::WT, wt = cons % Pl::WT;
  if (warp >= Cw) {                              // ---- producer warps
    if (Mode == 0 && Kind == 0) {
      for (int it = 0; it < iters; ++it) {
        const int s = it % Stages;
        if (it >= Stages) mbar::wait(&empty[s], ((it / Stages) & 1) ^ 1, "empty", s);
        gather_stage<Pw>(smem + s * STAGE, pg, h, tile0 + it, tid - 32 * Cw);
        cp_async_arrive_noinc(&full[s]);
      }
    } else if (Mode == 0) {
      // wgmma reads the stage through the async proxy, and a proxy fence orders the accesses of the thread that
      // executes it: each lane waits for its own copies of a stage (cp.async.wait_group), fences, then arrives.
      // The arrival for stage j waits until stage j + LAG is issued. LAG = Stages - 1 would deadlock: the consumers
      // release stage j only after acquiring j + 1, so the refill of stage j (issued Stages stages after it) needs
      // full[j + 1] to have been arrived on. Stages - 2 keeps that arrival ahead of the wait.
      static_assert(Stages >= 2, "the gathers of the wgmma path need two stages");
      constexpr int LAG = Stages - 2;
      for (int it = 0; it < iters + LAG; ++it) {
        if (it < iters) {
          const int s = it % Stages;
          if (it >= Stages) mbar::wait(&empty[s], ((it / Stages) & 1) ^ 1, "empty", s);
          gather_stage<Pw>(smem + s * STAGE, pg, h, tile0 + it, tid - 32 * Cw);
        }
        cp_async_commit();                                  // one group per iteration (empty after the last stage)
        if (it >= LAG) {
          cp_async_wait<LAG>();
          fence_proxy_async();
          mbar::arrive(&full[(it - LAG) % Stages]);
        }
      }
    } else {
      const int br = pg.log2p < 6 ? 1 << pg.log2p : TT;     // rows per box
      const int pieces = TT / br;
      __shared__ alignas(128) TensorMap staged[2];          // Mode 2: K and V maps being rewritten
      if (Mode == 2) {
        for (int x = lane; x < 32; x += 32) {               // one 128-byte map per 16 lanes, 8 bytes each
          reinterpret_cast<u64*>(&staged[x / 16])[x % 16] = (x < 16 ? kmap : vmap).v[x % 16];
        }
        __syncwarp();
      } else if (lane == 0) {
        tma::prefetch_tensormap(kmap);
        tma::prefetch_tensormap(vmap);
      }
      TensorMap* my = slots + (size_t)(blockIdx.y * gridDim.x + blockIdx.x) * 2 * Stages * pieces;   // this block's
      // The pages of a stage's boxes: lane p reads the table entry of box p, one load for all of them, and the next
      // stage's entries are loaded one stage ahead, before this stage's wait for its slot, so the table's latency is
      // not paid box after box.
      auto pages_of = [&](int tile) {
        const int t = tile * TT + lane * br;
        return lane < pieces && t < pg.L ? __ldg(pg.table + (t >> pg.log2p)) : 0;
      };
      int next = pages_of(tile0);
      for (int it = 0; it < iters; ++it) {
        const int s = it % Stages, tile = tile0 + it;
        const int mine = next;
        if (it + 1 < iters) next = pages_of(tile + 1);
        if (it >= Stages) mbar::wait(&empty[s], ((it / Stages) & 1) ^ 1, "empty", s);
        const int n = piece_count(pg, tile);
        if (lane == 0) mbar::arrive_expect_tx(&full[s], n * br * 128 * 4);   // 2 halves x (K, V)
        for (int p = 0; p < n; ++p) {
          const int t = tile * TT + p * br;
          const int page = __shfl_sync(0xffffffffu, mine, p);
          const int in_page = t & ((1 << pg.log2p) - 1);
          unsigned char* kd = smem + s * STAGE + p * br * 128;
          if (Mode == 1) {
            if (lane == 0) {
              const int row = ((page * pg.hkv + h) << pg.log2p) + in_page;
              for (int half = 0; half < 2; ++half) {
                tma::load_2d(kd + half * HALF, kmap, 64 * half, row, &full[s]);
                tma::load_2d(kd + TILE + half * HALF, vmap, 64 * half, row, &full[s]);
              }
            }
          } else {
            const size_t base = ((size_t(page) * pg.hkv + h) << pg.log2p) * D;
            TensorMap* km = my + 2 * (s * pieces + p);
            if (lane == 0) {
              tensormap_set_address(&staged[0], pg.k + base);
              tensormap_set_address(&staged[1], pg.v + base);
            }
            __syncwarp();
            tensormap_publish(km, &staged[0]);
            tensormap_publish(km + 1, &staged[1]);
            if (lane == 0) {
              tensormap_acquire(km);
              tensormap_acquire(km + 1);
              for (int half = 0; half < 2; ++half) {
                tma::load_2d(kd + half * HALF, km[0], 64 * half, in_page, &full[s]);
                tma::load_2d(kd + TILE + half * HALF, km[1], 64 * half, in_page, &full[s]);
              }
            }
            __syncwarp();
          }
        }
      }
    }
  } else if constexpr (Kind == 0) {              // ---- consumer warps (mma.sync)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      m[mt][0] = m[mt][1] = NEG_INF;
      l[mt][0] = l[mt][1] = 0.f;
#pragma unroll
      for (int dn = 0; dn < 16; ++dn) o[mt][dn][0] = o[mt][dn][1] = o[mt][dn][2] = o[mt][dn][3] = 0.f;
    }
    const u32 qa = smem_addr(qs);
    for (int it = 0; it < iters; ++it) {
      const int s = it % Stages, tile = tile0 + it;
      mbar::wait(&full[s], (it / Stages) & 1, "full", s);
      if (it == 0) t_first = tr.now();
      unsigned char* st = smem + s * STAGE;
      if (Mode != 0 && (tile + 1) * TT > pg.L) {
        // The last tile by TMA: rows past L hold whatever the page (or an earlier stage) held, maybe NaN, and
        // 0 x NaN is NaN in P V. The WR warps that read this token slice zero its V rows past L, each a share (two
        // warps writing the same bytes unordered would be a race, if a harmless-looking one), then meet.
        for (int x = 32 * wr + lane; x < TW * 16; x += 32 * Pl::WR) {
          const int r = TW * wt + x / 16;
          if (tile * TT + r >= pg.L) *reinterpret_cast<uint4*>(st + TILE + chunk_off(r, x % 16, TT)) = make_uint4(0, 0, 0, 0);
        }
        if (Pl::WR == 1) __syncwarp();
        else bar_sync(1 + wt, 32 * Pl::WR);
      }
      consume_stage<MT, TW, RP>(o, m, l, qa, smem_addr(st), smem_addr(st + TILE), wr, wt, lane, tile * TT, pg.L,
                                scale_log2);
      if (Mode != 0) fence_proxy_async();       // these generic reads (and writes) before the TMA refills it
      __syncwarp();
      if (lane == 0) mbar::arrive(&empty[s]);
    }
  } else {                                       // ---- consumer warpgroups (wgmma)
#ifdef FB_PAGED_WGMMA
    float (&acc)[D / 2] = reinterpret_cast<float (&)[D / 2]>(o[0]);
    m[0][0] = m[0][1] = NEG_INF;
    l[0][0] = l[0][1] = 0.f;
#pragma unroll
    for (int i = 0; i < D / 2; ++i) acc[i] = 0.f;
    fb::wgmma::fence_operand(acc);
    const unsigned char* qw = qs + wr * 64 * 128;          // this warpgroup's 64 rows of Q
    u32 p[TW / 16][4];
    // Stage it is released one step late, once the P V that reads its V has completed.
    auto release = [&](int s) {
      if (Mode != 0) fence_proxy_async();       // the zeros below (generic writes) before the TMA refills the stage
      __syncwarp();
      if (lane == 0) mbar::arrive(&empty[s]);   // each warp after its own wait_group 0: the stage's reads are done
    };
    // Stage it: wait for it, make its bytes fit for wgmma, then consume it (the first one on its own, see above).
    auto ready = [&](int it) -> unsigned char* {
      const int s = it % Stages, tile = tile0 + it;
      mbar::wait(&full[s], (it / Stages) & 1, "full", s);
      if (it == 0) t_first = tr.now();
      unsigned char* st = smem + s * STAGE;
      if (Mode != 0 && (tile + 1) * TT > pg.L) {
        // As above (rows past L of a TMA stage may be NaN): the WR warpgroups of the token slice share the zeroing;
        // the zeros are ordinary stores that wgmma reads next: fence, then the slice's barrier.
        for (int x = 128 * wr + tid % 128; x < TW * 16; x += 128 * Pl::WR) {
          const int r = TW * wt + x / 16;
          if (tile * TT + r >= pg.L) *reinterpret_cast<uint4*>(st + TILE + chunk_off(r, x % 16, TT)) = make_uint4(0, 0, 0, 0);
        }
        fence_proxy_async();
        bar_sync(1 + wt, 128 * Pl::WR);
      }
      return st;
    };
    // (every slice has at least one stage: the host's plan keeps S <= the number of stages)
    consume_stage_wg<TW, RP, true>(acc, p, m[0], l[0], qw, ready(0) + TW * wt * 128, nullptr, tile0 * TT + TW * wt,
                                     pg.L, scale_log2, lane);
    for (int it = 1; it < iters; ++it) {
      const int sp = (it - 1) % Stages;
      consume_stage_wg<TW, RP, false>(acc, p, m[0], l[0], qw, ready(it) + TW * wt * 128,
                                      smem + sp * STAGE + TILE + TW * wt * 128, (tile0 + it) * TT + TW * wt, pg.L,
                                      scale_log2, lane);
      release(sp);
    }
    const int sl = (iters - 1) % Stages;
    finish_pv_wg<TW>(acc, p, smem + sl * STAGE + TILE + TW * wt * 128);
    release(sl);
#endif
  }
  __syncthreads();                               // every stage consumed: the ring and Q are free for the scratch
  const long long t_consumed = tr.now();
  tr.span(TraceKind::load, t_start, t_first);
  tr.span(TraceKind::consume, t_first, t_consumed);

  // Scratch: [WT][RP][SD] O (unnormalised), [WT][RP] m and l, then [RP] 1 / l and [RP] log-sum-exp.
  float* so = reinterpret_cast<float*>(smem);
  // A row of O is SD = D + 8 floats apart: the 8 rows (g) of a warp's 8-byte stores then start 8 banks apart, two
  // wavefronts per store, the least for 256 bytes (with D apart the 8 rows share their banks: 8 wavefronts per 4-byte
  // store).
  constexpr int SD = Pl::SD;
  float* sm = so + Pl::WT * RP * SD;
  float* sl = sm + Pl::WT * RP;
  float* inv = sl + Pl::WT * RP;                 // per row: 1 / l of the merged slices (0 for a row with no token)
  float* lse = inv + RP;                         // per row: its log-sum-exp (base 2, scaled units)
  if (warp < Cw) {
    const int g = lane / 4, t4 = lane % 4;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        // Kind 1: warp w of the warpgroup holds rows 16 w + g (+8) of its m64 tile, in the same layout as an m16 tile
        const int r = Kind ? 64 * wr + 16 * (warp % 4) + g + 8 * hr : 16 * (MT * wr + mt) + g + 8 * hr;
        float lsum = l[mt][hr];
        lsum += __shfl_xor_sync(0xffffffffu, lsum, 1);
        lsum += __shfl_xor_sync(0xffffffffu, lsum, 2);
        if (t4 == 0) {
          sm[wt * RP + r] = m[mt][hr];
          sl[wt * RP + r] = lsum;
        }
#pragma unroll
        for (int dn = 0; dn < 16; ++dn)
          *reinterpret_cast<float2*>(so + (wt * RP + r) * SD + 8 * dn + 2 * t4) =
              make_float2(o[mt][dn][2 * hr], o[mt][dn][2 * hr + 1]);
      }
  }
  __syncthreads();
  // Merge the token slices: this block's result for rows < nq*group, normalised, with its log-sum-exp. First the
  // weight of each slice in each row (once per row, in place of its maximum), then 4 columns per thread.
  for (int r = tid; r < rows; r += Pl::THREADS) {
    float mx = NEG_INF;
    for (int w = 0; w < Pl::WT; ++w) mx = fmaxf(mx, sm[w * RP + r]);
    const float base = mx == NEG_INF ? 0.f : mx;
    float den = 0.f;
    for (int w = 0; w < Pl::WT; ++w) {
      const float f = exp2f(sm[w * RP + r] - base);
      sm[w * RP + r] = f;
      den += f * sl[w * RP + r];
    }
    inv[r] = den > 0.f ? 1.f / den : 0.f;
    lse[r] = den > 0.f ? base + __log2f(den) : NEG_INF;
  }
  __syncthreads();
  for (int x = tid; x < rows * (D / 4); x += Pl::THREADS) {
    const int r = x / (D / 4), d = 4 * (x % (D / 4));
    float4 val = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int w = 0; w < Pl::WT; ++w) {
      const float f = sm[w * RP + r];
      const float4 v = *reinterpret_cast<const float4*>(so + (w * RP + r) * SD + d);
      val.x += f * v.x; val.y += f * v.y; val.z += f * v.z; val.w += f * v.w;
    }
    const float iv = inv[r];
    val.x *= iv; val.y *= iv; val.z *= iv; val.w *= iv;
    if (S == 1) {
      const int rg = row0 + r;
      __nv_bfloat16* o4 = out + ((size_t)(rg / group) * hq + h * group + rg % group) * D + d;
      *reinterpret_cast<__nv_bfloat162*>(o4) = __floats2bfloat162_rn(val.x, val.y);
      *reinterpret_cast<__nv_bfloat162*>(o4 + 2) = __floats2bfloat162_rn(val.z, val.w);
    } else {
      *reinterpret_cast<float4*>(part_o + (((size_t)hb * S + split) * RP + r) * D + d) = val;
      if (d == 0) part_lse[((size_t)hb * S + split) * RP + r] = lse[r];
    }
  }
  const long long t_merged = tr.now();
  tr.span(TraceKind::compute, t_consumed, t_merged);
  if (S == 1 || Combine == 1) return;            // Combine 1: combine_paged, the next kernel, combines the partials

  // The last block of head h to finish combines the S partials (CUDA Programming Guide, "Memory Fence Functions").
  __shared__ unsigned last;
  __threadfence();                               // this block's partials are visible before the count says so
  __syncthreads();
  if (tid == 0) last = atomicAdd(&count[hb], 1u) == unsigned(S - 1);
  __syncthreads();
  const long long t_counted = tr.now();
  tr.span(TraceKind::wait, t_merged, t_counted);
  if (!last) return;
  __threadfence();
  // The weight of each slice for each row, once, in shared memory (the scratch is free again) ...
  float* wts = reinterpret_cast<float*>(smem);   // [S][RP]
  for (int x = tid; x < S * rows; x += Pl::THREADS) wts[(x / rows) * RP + x % rows] = __ldcg(part_lse + ((size_t)hb * S + x / rows) * RP + x % rows);
  __syncthreads();
  for (int r = tid; r < rows; r += Pl::THREADS) {
    float mx = NEG_INF;
    for (int s = 0; s < S; ++s) mx = fmaxf(mx, wts[s * RP + r]);
    const float base = mx == NEG_INF ? 0.f : mx;
    float den = 0.f;
    for (int s = 0; s < S; ++s) den += exp2f(wts[s * RP + r] - base);
    for (int s = 0; s < S; ++s) wts[s * RP + r] = den > 0.f ? exp2f(wts[s * RP + r] - base) / den : 0.f;
  }
  __syncthreads();
  // ... then 16 bytes of O per thread and slice, the loads of up to CB slices issued before any is used: this block
  // alone finishes the head, so its time is the launch's tail, and L2 round trips are what it is made of. The
  // 128-row wgmma build keeps 4: with 16, ptxas scheduled its main loop differently and it ran 4-9 % slower at 32k
  // and 128k tokens with the pool map (H200, nq = 64).
  constexpr int CB = Kind == 1 && RP == 128 ? 4 : 16;
  for (int x = tid; x < rows * (D / 4); x += Pl::THREADS) {
    const int r = x / (D / 4), d = 4 * (x % (D / 4));
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if constexpr (CB == 4) {
#pragma unroll 4
      for (int s = 0; s < S; ++s) {
        const float4 v = __ldcg(reinterpret_cast<const float4*>(part_o + (((size_t)hb * S + s) * RP + r) * D + d));
        const float w = wts[s * RP + r];
        acc.x += w * v.x; acc.y += w * v.y; acc.z += w * v.z; acc.w += w * v.w;
      }
    } else {
      for (int s0 = 0; s0 < S; s0 += CB) {
        float4 v[CB];
#pragma unroll
        for (int j = 0; j < CB; ++j)
          v[j] = s0 + j < S
                     ? __ldcg(reinterpret_cast<const float4*>(part_o + (((size_t)hb * S + s0 + j) * RP + r) * D + d))
                     : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int j = 0; j < CB; ++j) {
          const float w = s0 + j < S ? wts[(s0 + j) * RP + r] : 0.f;
          acc.x += w * v[j].x; acc.y += w * v[j].y; acc.z += w * v[j].z; acc.w += w * v[j].w;
        }
      }
    }
    const int rg = row0 + r;
    __nv_bfloat16* o4 = out + ((size_t)(rg / group) * hq + h * group + rg % group) * D + d;
    *reinterpret_cast<__nv_bfloat162*>(o4) = __floats2bfloat162_rn(acc.x, acc.y);
    *reinterpret_cast<__nv_bfloat162*>(o4 + 2) = __floats2bfloat162_rn(acc.z, acc.w);
  }
  if (tid == 0) count[hb] = 0;                    // ready for the next launch
  tr.span(TraceKind::bubble, t_counted, tr.now());
}

// ---- the combine as a kernel of its own (Combine = 1) -----------------------------------------------------------
// The last-block combine above is one block per row block of a head reading all S partials: at 64 rows and S = 16,
// 512 KB through one SM, the launch's tail. Here every 4 rows of a row block are a block of 128 threads (a warp per
// row, 4 columns per lane), launched with programmatic dependent launch (PTX ISA "griddepcontrol"): decode_paged
// lets it launch early (launch_dependents) and its blocks wait (griddepcontrol.wait) until decode_paged has completed
// and its partials are visible. Each thread reads the slices' log-sum-exp and O, 16 slices' loads at once, and keeps
// a running maximum so that one pass suffices. Grid: (RP / 4, HKV x RB); rows past the row block's last return.
__device__ void combine_paged(const float* part_o, const float* part_lse, __nv_bfloat16* out, int S, int rp, int nq,
                              int group, int hkv) {
  fb::decode::wait_dependencies();
  constexpr int CB = 16;
  const int RB = (nq * group + rp - 1) / rp, hb = blockIdx.y, h = hb / RB, row0 = (hb % RB) * rp;
  const int r = 4 * blockIdx.x + threadIdx.x / 32, d = 4 * (threadIdx.x % 32), rg = row0 + r;
  if (r >= rp || rg >= nq * group) return;
  const float* lr = part_lse + (size_t)hb * S * rp + r;              // slice s: lr[s * rp]
  const float* orow = part_o + ((size_t)hb * S * rp + r) * D + d;    // slice s: orow[s * rp * D]
  float m = NEG_INF, den = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s0 = 0; s0 < S; s0 += CB) {
    float l[CB];
    float4 v[CB];
#pragma unroll
    for (int j = 0; j < CB; ++j) {
      const bool in = s0 + j < S;
      l[j] = in ? __ldcg(lr + (size_t)(s0 + j) * rp) : NEG_INF;
      v[j] = in ? __ldcg(reinterpret_cast<const float4*>(orow + (size_t)(s0 + j) * rp * D)) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float mb = m;
#pragma unroll
    for (int j = 0; j < CB; ++j) mb = fmaxf(mb, l[j]);
    if (mb == NEG_INF) continue;                 // no slice so far has a token for this row
    const float c = exp2f(m - mb);               // 0 while m is -inf
    den *= c; acc.x *= c; acc.y *= c; acc.z *= c; acc.w *= c;
#pragma unroll
    for (int j = 0; j < CB; ++j) {
      const float f = exp2f(l[j] - mb);
      den += f;
      acc.x += f * v[j].x; acc.y += f * v[j].y; acc.z += f * v[j].z; acc.w += f * v[j].w;
    }
    m = mb;
  }
  const float iv = den > 0.f ? 1.f / den : 0.f;
  __nv_bfloat16* o4 = out + ((size_t)(rg / group) * hkv * group + h * group + rg % group) * D + d;
  *reinterpret_cast<__nv_bfloat162*>(o4) = __floats2bfloat162_rn(acc.x * iv, acc.y * iv);
  *reinterpret_cast<__nv_bfloat162*>(o4 + 2) = __floats2bfloat162_rn(acc.z * iv, acc.w * iv);
}

}  // namespace paged
}  // namespace fb
