// Attention backward on Hopper (sm_90a), chapter 09: the pieces of the backward pass.
//
// From Q, K, V, O, dO and the log-sum-exp L that the forward saved (P = exp(S - L) is rebuilt, never stored):
//   D_i   = sum_c dO_ic O_ic                       (preprocess, one row per warp)
//   dV_j  = sum_i P_ij dO_i
//   dS_ij = P_ij (dO_i . V_j - D_i)
//   dK_j  = scale sum_i dS_ij Q_i,   dQ_i = scale sum_j dS_ij K_j
// One block owns a block of 128 keys (two consumer warpgroups of 64 keys each) and walks the query tiles of QM rows
// (query_rows<D>: 128 at d = 64, 64 at d = 128): dK and dV stay in registers, dQ is a sum over key blocks and goes
// to an fp32 buffer, by TMA reduces (cp.reduce.async.bulk(.tensor) .add.f32) or with red.global.add (atomics). A
// producer warpgroup loads Q, dO and each tile's L and D into a ring of stages and issues the dQ reduces, so the
// consumers never wait on either.
// The transposed products S^T = K Q^T and dP^T = V dO^T put the keys on the wgmma M dimension, so that P^T and
// dS^T are already the register A operands of dV += P^T dO and dK += dS^T Q (the forward's P V step).
//
// PTX ISA: "wgmma.mma_async" (imm-trans-a / imm-trans-b: operands read MN-major from shared memory),
// "cp.reduce.async.bulk", "red" (.v2.f32 needs sm_90), "fence.proxy.async", "mbarrier", "stmatrix".
#pragma once
#include <cuda_bf16.h>
#include <cuda/std/cstdint>
#include <fb/attention.cuh>
#include <fb/fence.cuh>
#include <fb/smem.cuh>
#include <fb/wgmma.cuh>

namespace fb {
namespace attention_bwd {
using u32 = cuda::std::uint32_t;
using u64 = cuda::std::uint64_t;
namespace fa = fb::attention;

// The query tile: 128 rows at d = 64, 64 at d = 128. A consumer thread holds S^T and dP^T of its 64 keys x QM
// queries (QM / 2 fp32 registers each) beside dK and dV (D / 2 each): at QM = 128 and d = 128 that is 256 of the
// 240 registers setmaxnreg gives it. At d = 64 the wider tile halves what each query costs in barriers, waits,
// loads of L and D and dQ reduces, where the tile's GEMMs are short.
template <int D> inline constexpr int query_rows = D == 64 ? 128 : 64;

// The wgmma here: fb::wgmma::mma_ss<N, TA, TB> with both operands in shared memory, TA / TB the instruction's
// imm-trans-a / imm-trans-b (1 reads the operand MN-major, which only 16-bit types allow), and fa::mma_rs_tb.

// X^T (64 keys x QM queries) = A(64 x D) B^T with A = 64 rows of K (or V), B = the query tile's Q (or dO), both
// K-major tiles of D / 64 panels (`a_panel`, `b_panel` bytes apart): D / 16 steps of 32 B along the row.
template <int D, int QM>
__device__ inline void gemm_t(float (&x)[QM / 2], const unsigned char* a, int a_panel, const unsigned char* b,
                              int b_panel) {
  const u64 da = fb::wgmma::descriptor_k_major_sw128(a), db = fb::wgmma::descriptor_k_major_sw128(b);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    fb::wgmma::mma_ss<QM, 0, 0>(x, da + ((kk / 4) * a_panel + (kk % 4) * 32) / 16,
                                db + ((kk / 4) * b_panel + (kk % 4) * 32) / 16, kk > 0);
}

// acc(64 keys x D) += X^T(64 x QM, bf16 A fragments in registers) T(QM queries x D): the query tile T read
// MN-major (its rows of D contiguous), QM / 16 steps of 16 rows; panels of QM rows x 128 B.
template <int D, int QM>
__device__ inline void gemm_acc(float (&acc)[D / 2], const u32 (&x)[QM / 16][4], const unsigned char* t) {
  const u64 dt = fa::descriptor_mn_major_sw128(t, QM * 128, 1024);
#pragma unroll
  for (int kk = 0; kk < QM / 16; ++kk) {
    fa::mma_rs_tb<D>(acc, x[kk], dt + kk * 16 * 128 / 16, 1);
  }
}

// dQ tile (64 queries x NC columns from `col`) = dS (64 x 128 keys) K: dS read from `ds` where it is stored
// transposed (128 rows of keys x 64 queries, 128 B a row: A MN-major), K from the key block (128 rows, D / 64
// panels of 128 x 128 B: B MN-major). 8 steps of 16 keys, 16 * 128 B each on both sides.
template <int NC>
__device__ inline void gemm_dq(float (&dq)[NC / 2], const unsigned char* ds, const unsigned char* k, int col) {
  const u64 da = fa::descriptor_mn_major_sw128(ds, 128 * 128, 1024);
  const u64 db = fa::descriptor_mn_major_sw128(k + (col / 64) * 128 * 128 + (col % 64) * 2, 128 * 128, 1024);
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    fb::wgmma::mma_ss<NC, 1, 1>(dq, da + kk * 128, db + kk * 128, kk > 0);
  }
}

// ---- shared memory and the query tiles -----------------------------------------------------------------------
// K and V of the key block (128 rows); NST stages of the query tile's Q and dO (QM rows) and of its L log2 e and
// D (QM floats each); dS^T (128 keys x QM bf16, in panels of 64 queries) twice, so that one warpgroup may write the
// next tile's while the other still reads this one's; for the TMA reduces the fp32 dQ tile (QM x D) they read
// from. The tiles are 1024-byte aligned (128-byte swizzle).
template <int D, int NST, int QM = query_rows<D>> struct Plan {
  static constexpr int KV = 128 * D * 2, QT = QM * D * 2, DS = 128 * QM * 2, ROW = QM * 4;
  static constexpr int K_OFF = 0, V_OFF = KV, Q_OFF = 2 * KV, DO_OFF = Q_OFF + NST * QT, DS_OFF = DO_OFF + NST * QT;
  static constexpr int DQ_OFF = DS_OFF + 2 * DS, LSE_OFF = DQ_OFF + QM * D * 4, DLT_OFF = LSE_OFF + NST * ROW;
  static constexpr int BYTES = DLT_OFF + NST * ROW + 1024;
  static_assert(QM == 64 || D == 64, "a 128-row query tile is one panel of 128-byte rows: d = 64 only");
};

// This thread's elements of a 64 x QM transposed score tile (rows: keys, columns: queries): element i is at key
// row 16 w + lane / 4 + 8 ((i % 4) / 2) of the warpgroup's 64, query column 8 (i / 4) + 2 t + (i % 2).
// The QM / 8 values of L log2 e that this thread's columns need, x[j] for columns 8 j + 2 t and + 1: read from
// shared memory before the tile's GEMMs are issued, they are in registers when S^T is.
template <int QM> __device__ inline void column_stats(float2 (&x)[QM / 8], const float* stat) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int j = 0; j < QM / 8; ++j) x[j] = *reinterpret_cast<const float2*>(stat + 8 * j + 2 * t);
}

// P^T = 2^(S^T scale log2 e - L log2 e) in place of S^T, 0 where masked. l: column_stats of L log2 e. MASK: the
// tile reaches past the sequence or the diagonal (the caller branches on it, uniform in a warp, so that the other
// tiles carry no compares).
template <bool MASK, int QM>
__device__ inline void probabilities(float (&s)[QM / 2], const float2 (&l)[QM / 8], int key0, int q0, int seq,
                                     float scale_log2, bool causal) {
  const int lane = threadIdx.x % 32, t = lane % 4, reach = causal ? 0 : seq;
#pragma unroll
  for (int i = 0; i < QM / 2; i += 2) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int key = key0 + lane / 4 + 8 * ((i % 4) / 2), q = q0 + 8 * (i / 4) + 2 * t + e;
      float p = fa::exp2_approx(fmaf(s[i + e], scale_log2, -(e ? l[i / 4].y : l[i / 4].x)));
      // the last key query q sees: none past the sequence, else the sequence's last key or, causal, q (one compare
      // per element: three made ptxas spill in the masked copy at 128 queries)
      if (MASK && key > (q >= seq ? -1 : min(q + reach, seq - 1))) p = 0.f;
      s[i + e] = p;
    }
  }
}

// dS^T = P^T (dP^T - D) in place of dP^T, in two steps around the wait for dV's GEMM. (1) dP^T - D, with D read from
// shared memory here, while dV's GEMM still runs. (2) after that wait, times P^T read back from the bf16 A fragments
// that dV's GEMM took (fa::p_fragments: p[j][r] packs columns 8 j + 2 r in its low half, + 1 in its high half):
// the registers of a wgmma's A operand may be read only once a wait covers it (PTX ISA, "wgmma.mma_async"). So
// neither S^T's fp32 registers nor D's stay live beside dP^T's across dV's GEMM, and dS = P (dP - D) takes the
// same rounded P as dV = P^T dO.
template <int QM> __device__ inline void minus_d(float (&dp)[QM / 2], const float* dlt) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int i = 0; i < QM / 2; i += 2) {
    const float2 d = *reinterpret_cast<const float2*>(dlt + 8 * (i / 4) + 2 * t);
    dp[i] -= d.x;
    dp[i + 1] -= d.y;
  }
}
template <int QM> __device__ inline void times_p(const u32 (&p)[QM / 16][4], float (&dp)[QM / 2]) {
#pragma unroll
  for (int i = 0; i < QM / 2; i += 2) {
    const u32 x = p[i / 8][(i % 8) / 2];
    dp[i] *= __uint_as_float(x << 16);
    dp[i + 1] *= __uint_as_float(x & 0xffff0000u);
  }
}

// One warp: L log2 e and D of the 64 query rows from q0 into shared memory, two rows a lane; 0 past the end of the
// sequence (those columns are masked). A tile of 128 rows takes two calls.
__device__ inline void load_row_stats(float* lse2, float* dlt, const float* lse, const float* delta, int q0, int seq) {
  const int q = q0 + 2 * (threadIdx.x % 32);
  float2 l = make_float2(0.f, 0.f), d = make_float2(0.f, 0.f);
  if (q < seq) l.x = lse[q] * 1.4426950408889634f, d.x = delta[q];
  if (q + 1 < seq) l.y = lse[q + 1] * 1.4426950408889634f, d.y = delta[q + 1];
  *reinterpret_cast<float2*>(lse2 + 2 * (threadIdx.x % 32)) = l;
  *reinterpret_cast<float2*>(dlt + 2 * (threadIdx.x % 32)) = d;
}

// dS^T of warpgroup w's 64 keys, as the bf16 pairs fa::p_fragments packed, into shared memory: rows = keys, 128 B
// a row, with the 128-byte swizzle (TMA's: 16-byte chunk c of row r at chunk c ^ (r % 8)), one panel of 128 rows
// per 64 queries. x[kk] holds the four 8x8 matrices of queries 16 kk .. 16 kk + 15 in the order of a wgmma A
// fragment (keys 0-7 / 8-15 of the warp's 16, then the same for the upper 8 queries), which is the order stmatrix
// .x4 takes them in: one instruction per 16 queries instead of four 4-byte stores. Lane l gives the address of its
// row of matrix l / 8, a 16-byte chunk that the swizzle keeps whole: chunk 2 (kk % 4) + m / 2 of row r lands at
// (2 (kk % 4) + m / 2) ^ (r % 8) = 2 (kk % 4) ^ key, one XOR per store from the row's address (at QM = 128, eight
// addresses kept apart made ptxas spill one of them).
template <int QM> __device__ inline void store_ds(unsigned char* ds, const u32 (&x)[QM / 16][4], int w) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32, m = lane / 8;
  const int r = 64 * w + 16 * warp + lane % 8 + 8 * (m % 2), key = (m / 2) ^ (r % 8);
  unsigned char* row = ds + r * 128;
#pragma unroll
  for (int kk = 0; kk < QM / 16; ++kk)
    fa::stmatrix_x4(row + (kk / 4) * 128 * 128 + ((2 * (kk % 4) ^ key) << 4), x[kk][0], x[kk][1], x[kk][2], x[kk][3]);
}

// ---- dQ: three ways to add a tile into the fp32 buffer ---------------------------------------------------------
// (1) red.global.add.v2.f32 from registers (PTX ISA "red": .v2.f32 from sm_90): one atomic per column pair.
template <int NC>
__device__ inline void dq_atomic(float* dq, const float (&x)[NC / 2], int q0, int col0, int seq, int D) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32, t = lane % 4;
#pragma unroll
  for (int i = 0; i < NC / 2; i += 2) {
    const int q = q0 + 16 * warp + lane / 4 + 8 * ((i % 4) / 2), c = col0 + 8 * (i / 4) + 2 * t;
    if (q < seq)
      asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(dq + static_cast<size_t>(q) * D + c),
                   "f"(x[i]), "f"(x[i + 1]) : "memory");
  }
}
// (2) the tile in shared memory (QM rows x D fp32, row-major, as in global memory; a warpgroup writes 64 of the rows
// from `tile`), then one TMA reduce:
// cp.reduce.async.bulk .add.f32 adds `bytes` contiguous bytes (multiple of 16, both addresses 16-aligned).
template <int NC>
__device__ inline void dq_stage(float* tile, const float (&x)[NC / 2], int col0, int D) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32, t = lane % 4;
#pragma unroll
  for (int i = 0; i < NC / 2; i += 2) {
    const int r = 16 * warp + lane / 4 + 8 * ((i % 4) / 2), c = col0 + 8 * (i / 4) + 2 * t;
    *reinterpret_cast<float2*>(tile + r * D + c) = make_float2(x[i], x[i + 1]);
  }
}
// (3) the tile in shared memory as D / 32 panels of 64 rows x 128 B per 64 rows (a warpgroup writes those of its 64
// rows from `tile`), each with the 128-byte swizzle, then one tensor TMA reduce per panel (fb::tma::reduce_add_2d).
// A row-major tile puts the 8 rows a warp stores at once 4 D bytes apart, all in the same banks (8 wavefronts per
// st.shared.v2); swizzled, they fill all 32 banks (2, the least).
template <int NC>
__device__ inline void dq_stage_swizzled(unsigned char* tile, const float (&x)[NC / 2], int col0) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32, t = lane % 4;
  // Rows 16 warp + lane / 4 (+ 8): the swizzle's key r % 8 is lane / 4. Column col0 + 8 j + 2 t (col0 a multiple
  // of 32) lies in panel j / 4, 16-byte chunk 2 (j % 4) + t / 2, at byte 8 (t % 2); the chunk lands at
  // (2 (j % 4) + t / 2) ^ (lane / 4) = 2 (j % 4) ^ key, so one XOR per thread serves every store.
  unsigned char* row = tile + (col0 / 32) * 64 * 128 + (16 * warp + lane / 4) * 128 + (t % 2) * 8;
  const int key = (t / 2) ^ (lane / 4);
#pragma unroll
  for (int i = 0; i < NC / 2; i += 2) {
    const int j = i / 4;
    *reinterpret_cast<float2*>(row + (j / 4) * 64 * 128 + ((i % 4) / 2) * 8 * 128 + ((2 * (j % 4) ^ key) << 4)) =
        make_float2(x[i], x[i + 1]);
  }
}
__device__ inline void reduce_add_f32(float* dst, const float* src, u32 bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
               ::"l"(dst), "r"(fb::smem_addr(src)), "r"(bytes) : "memory");
}

// dK (times the softmax scale) or dV rows of this warpgroup (64 keys from key0) as bf16, keys < seq.
template <int D>
__device__ inline void store_kv_rows(__nv_bfloat16* out, const float (&acc)[D / 2], float scale, int key0, int seq) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32, t = lane % 4;
#pragma unroll
  for (int i = 0; i < D / 2; i += 2) {
    const int key = key0 + 16 * warp + lane / 4 + 8 * ((i % 4) / 2), c = 8 * (i / 4) + 2 * t;
    if (key < seq)
      *reinterpret_cast<__nv_bfloat162*>(out + static_cast<size_t>(key) * D + c) =
          __floats2bfloat162_rn(acc[i] * scale, acc[i + 1] * scale);
  }
}
}  // namespace attention_bwd
}  // namespace fb
