// FP8 (e4m3) attention forward on Hopper (sm_90a), chapter 09: what changes from the bf16 rungs.
//
//  - The two GEMMs on fp8 wgmma (m64n128k32, e4m3 x e4m3 -> fp32). For 8-bit types wgmma has no transpose
//    immediates: both operands must be K-major (PTX ISA, wgmma.mma_async: imm-trans-a/b only for .f16/.bf16).
//    S = Q K^T is K-major on both sides as loaded; for O += P V the B operand is V^T, which is not in memory.
//  - So the kernel transposes each V tile in shared memory (keys x d -> d x keys) before the second GEMM, with
//    ldmatrix .trans, byte permutes and stmatrix: 16 bytes per lane and instruction, no bank conflict.
//  - P goes to the second GEMM in registers. The fp32 accumulator of S and the 8-bit A fragment hold different
//    columns in a thread (pairs 2t, 2t+1 in each 8-column block against runs of four 4t .. 4t+3), but the order of
//    the keys inside a k32 step is ours to choose, as long as P and V^T agree. The transpose writes the keys of V^T
//    in the order the accumulator already holds them: each thread packs its own scores, with no shuffle.
//  - P is scaled by 2^8 before it is rounded to e4m3 (free: the exponent gets + 8) so that terms down to 2^-14 of
//    the row maximum's keep their 3 mantissa bits instead of falling into e4m3's subnormals below 2^-6.
//
// PTX ISA: "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions" (wgmma.mma_async with .e4m3,
// "Register Fragments and Shared Memory Matrix Layouts": the k32 A fragment of 8-bit types), "cvt" (.e4m3x2),
// "prmt", "Warp-level matrix load instruction: ldmatrix", "Warp-level matrix store instruction: stmatrix";
// FlashAttention-3 (Shah et al., 2024), section 3.3, for the in-kernel V transpose.
#pragma once
#include <cuda_bf16.h>
#include <cuda/std/cstdint>
#include <fb/attention.cuh>
#include <fb/fence.cuh>
#include <fb/mbarrier.cuh>
#include <fb/smem.cuh>
#include <fb/wgmma.cuh>

namespace fb {
namespace attention_fp8 {
using u32 = cuda::std::uint32_t;
using u64 = cuda::std::uint64_t;
namespace fa = fb::attention;

constexpr int BM = 128, BN = 128, D = 128;   // d = 128: a row of Q, K or V is 128 bytes, one SW128 row
constexpr float P_SCALE_LOG2 = 8.f;           // P is stored as 2^8 p: the row maximum's term is 256 (e4m3 max 448)

// ---- the key order inside a k32 step ----------------------------------------------------------------------
// Position p (0..31) of the k32 A fragment of thread t's row holds, per the PTX ISA's 8-bit k32 layout, columns
// 4t .. 4t+3 in register a0 (a1: the row 8 below) and 16 + 4t .. 16 + 4t + 3 in a2 (a3). The fp32 accumulator of
// S gives that thread columns 2t, 2t+1 and 8 + 2t, 9 + 2t of each 16 (fb::wgmma::accumulator_row_col). So position
// p = 16 h + 4 t + e holds key 16 h + 2 t + (e & 1) + 8 (e >> 1): the transpose below puts that key there.
__host__ __device__ constexpr int key_at(int p) {
  return 16 * (p / 16) + 2 * ((p % 16) / 4) + (p % 4 % 2) + 8 * (p % 4 / 2);
}
// The order is a permutation of the 32 keys (checked at compile time, on every build).
__host__ __device__ constexpr bool key_order_is_a_permutation() {
  for (int k = 0; k < 32; ++k) {
    int hits = 0;
    for (int p = 0; p < 32; ++p) hits += key_at(p) == k;
    if (hits != 1) return false;
  }
  return true;
}
static_assert(key_order_is_a_permutation(), "key_at must be a permutation of the 32 keys of a k32 step");

// ---- fp8 wgmma ----------------------------------------------------------------------------------------------
// S: fb::wgmma::mma_e4m3<BN> (A = Q, B = K, both K-major). O: D(64xN, fp32) += A(64x32, e4m3, in registers:
// a[0..3] as key_at describes) * B(32xN, e4m3, shared memory, K-major: V^T).
template <int N> __device__ inline void mma_rs_vt(float (&d)[N / 2], const u32 (&a)[4], u64 desc_b FB_HZ_LINE) {
  FB_HZ_RECORD_WARPGROUP(fb::hazard::kWgmmaRead, fb::wgmma::descriptor_tile_start(desc_b), N * 128, 0, 0);
  fb::wgmma::mma_rs_e4m3<N>(d, a, desc_b);
}

// ---- P: fp32 accumulator -> e4m3 A fragments, in place ------------------------------------------------------
// Four fp32 in one register as e4m3, x0 in the lowest byte. cvt.rn.satfinite.e4m3x2.f32 d, a, b puts a in the
// upper byte of d and b in the lower one.
__device__ inline u32 pack_e4m3x4(float x0, float x1, float x2, float x3) {
  unsigned short lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(x1), "f"(x0));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(x3), "f"(x2));
  return static_cast<u32>(lo) | (static_cast<u32>(hi) << 16);
}

// Step kk takes the accumulator's columns 32 kk .. 32 kk + 31, registers 16 kk .. 16 kk + 15: in each 8-column
// block i a thread has (row g: 4i, 4i+1; row g+8: 4i+2, 4i+3). a0 = row g of blocks 4kk and 4kk+1, a1 = row g+8
// of the same, a2 / a3 = blocks 4kk+2 and 4kk+3: keys in the order of key_at.
__device__ inline void p_fragments(const float (&p)[64], u32 (&a)[4][4]) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const float* s = p + 16 * kk;
    a[kk][0] = pack_e4m3x4(s[0], s[1], s[4], s[5]);
    a[kk][1] = pack_e4m3x4(s[2], s[3], s[6], s[7]);
    a[kk][2] = pack_e4m3x4(s[8], s[9], s[12], s[13]);
    a[kk][3] = pack_e4m3x4(s[10], s[11], s[14], s[15]);
  }
}

// ---- the V transpose ------------------------------------------------------------------------------------------
// Byte `col` of row `row` in a tile of 128-byte rows with the 128-byte swizzle (what TMA writes with swizzle 128,
// and what a K-major SW128 wgmma descriptor reads): the 16-byte chunk index is XORed with row % 8.
__device__ inline u32 prmt(u32 a, u32 b, u32 sel) {
  u32 r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

__device__ inline void ldmatrix_x4_trans(u32 (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(fb::smem_addr(row)) : "memory");
}

// V (BN keys x D, e4m3, as loaded) -> V^T (D rows x BN keys, K-major, keys of each k32 step in key_at order), both
// SW128, 16 bytes per lane and instruction. One unit: 16 keys (key chunk kc) x 32 columns of d (dc):
//  - ldmatrix .x4 .trans reads it as four 8x8 b16 matrices, keys 0-7 / 8-15 of d bytes 0-15 (r0 / r1) and of
//    16-31 (r2 / r3). Lane (c = lane / 4, t = lane % 4) gets from each the b16 column c, rows 2t and 2t + 1:
//    bytes V[2t][2c], V[2t][2c + 1], V[2t + 1][2c], V[2t + 1][2c + 1] (keys 8 higher in r1).
//  - Two byte permutes give row 2c of V^T, keys 2t, 2t + 1, 2t + 8, 2t + 9 (prmt 0x6420 of r0, r1), and row
//    2c + 1 (0x7531): four keys in key_at order, bytes 4t .. 4t + 3 of the 16-byte chunk kc of those rows.
//  - stmatrix .x4 writes them back as four 8x8 b16 matrices, each row address given by a lane: matrix 0 takes
//    rows 0, 2, 4, 6, 9, 11, 13, 15 (the lanes with c < 4 put their even row in it, the others their odd row) and
//    matrix 1 the other eight, so each matrix's rows differ mod 8: eight different swizzled chunks, no conflict.
//    ldmatrix reads keys of 8 consecutive rows: 8 chunks too.
// The 32 units are split between `warps` warps in contiguous runs.
__device__ inline void transpose_v(const unsigned char* v, unsigned char* vt, unsigned warp, unsigned warps) {
  static_assert(D == 128 && BN == 128, "one SW128 row per key of V and per column of V^T");
  const unsigned lane = threadIdx.x % 32, m = lane / 8, i = lane % 8, c = lane / 4;
  // This lane's row address for ldmatrix: key 8 (m % 2) + i of the unit, 16-byte chunk 2 dc + m / 2 of d.
  const unsigned ld_off = (8 * (m % 2) + i) * 128, ld_half = m / 2;
  // ... and for stmatrix: matrix m holds d rows 16 (m / 2) + rowsel of the unit, at key chunk kc.
  const unsigned rowsel = 2 * i + ((m % 2) ^ (i >= 4 ? 1u : 0u));
  const unsigned st_off = (16 * (m / 2) + rowsel) * 128, st_r8 = rowsel % 8;
  const u32 sel_a = c >= 4 ? 0x7531u : 0x6420u, sel_b = sel_a ^ 0x1111u;   // this lane's row of matrix 0 / 1
  const unsigned first = warp * 32 / warps, last = (warp + 1) * 32 / warps;
#pragma unroll 4
  for (unsigned u = first; u < last; ++u) {
    const unsigned kc = u % 8, dc = u / 8;
    u32 r[4];
    ldmatrix_x4_trans(r, v + kc * 2048 + ld_off + ((((2 * dc + ld_half) ^ i) & 7) << 4));
    fa::stmatrix_x4(vt + dc * 4096 + st_off + (((kc ^ st_r8) & 7) << 4), prmt(r[0], r[1], sel_a),
                    prmt(r[0], r[1], sel_b), prmt(r[2], r[3], sel_a), prmt(r[2], r[3], sel_b));
  }
}

// ---- shared memory and the two GEMMs ------------------------------------------------------------------------
// Q (BM x 128 B), then NSTAGES tiles each of K, of V as loaded, and of V^T (16 KB each), 1024-byte aligned.
template <int NSTAGES> struct Plan {
  static constexpr int Q_BYTES = BM * D, KV_BYTES = BN * D;
  static constexpr int K_OFF = Q_BYTES, V_OFF = K_OFF + NSTAGES * KV_BYTES, VT_OFF = V_OFF + NSTAGES * KV_BYTES;
  static constexpr int BYTES = VT_OFF + NSTAGES * KV_BYTES + 1024;
};

// S(64 x BN) = Q(64 x D) K^T: D / 32 steps of 32 bytes along one SW128 row (descriptor start + 2 per step).
__device__ inline void qk_gemm(float (&s)[64], const unsigned char* q, const unsigned char* k) {
  const u64 dq = fb::wgmma::descriptor_k_major_sw128(q), dk = fb::wgmma::descriptor_k_major_sw128(k);
#pragma unroll
  for (int kk = 0; kk < D / 32; ++kk) fb::wgmma::mma_e4m3<BN>(s, dq + 2 * kk, dk + 2 * kk, kk > 0);
}

// Q in registers: the A fragments of this warp's 16 rows of Q (64 x D, K-major SW128, the warpgroup's half of the
// Q tile) for the D / 32 steps, read once. A row of D e4m3 is 128 bytes, as one of 64 bf16, and each step reads
// 32 of them: fb::attention::q_fragments of a 64-column bf16 tile reads the same bytes into the same registers;
// lane (c, t) gets bytes 4t .. 4t + 3 of row c, the 8-bit k32 A layout in natural column order.
__device__ inline void q_fragments(const unsigned char* q, u32 (&a)[D / 32][4]) { fa::q_fragments<64, 64>(q, a); }

// S(64 x BN) = Q K^T with Q's fragments in registers: K the only operand read from shared memory.
__device__ inline void qk_gemm_rs(float (&s)[64], const u32 (&qa)[D / 32][4], const unsigned char* k FB_HZ_LINE) {
  const u64 dk = fb::wgmma::descriptor_k_major_sw128(k);
  FB_HZ_RECORD_WARPGROUP(fb::hazard::kWgmmaRead, fb::wgmma::descriptor_tile_start(dk), BN * 128, 0, 0);
#pragma unroll
  for (int kk = 0; kk < D / 32; ++kk) fb::wgmma::mma_rs_e4m3<BN>(s, qa[kk], dk + 2 * kk, kk > 0);
}

// O(64 x D) += P(64 x BN) V, V^T (D x BN) K-major: BN / 32 steps.
__device__ inline void pv_gemm(float (&o)[64], const u32 (&p)[4][4], const unsigned char* vt) {
  const u64 dv = fb::wgmma::descriptor_k_major_sw128(vt);
#pragma unroll
  for (int kk = 0; kk < BN / 32; ++kk) mma_rs_vt<D>(o, p[kk], dv + 2 * kk);
}

// ---- softmax -----------------------------------------------------------------------------------------------------
// fb::attention::OnlineSoftmax::step_fast with P scaled by 2^8: 2^(s scale - m + 8), one FFMA and one MUFU.EX2 per
// score as there. The running sums hold 2^8 l; O / l is unchanged, and finish() takes the 8 off the LSE.
// The maximum and the sum of a row's 32 scores are trees (8 partial maxima of 4, 4 partial sums of 8) where
// step_fast has one chain of 32 dependent instructions: the first exponential waits for 7 FMNMX instead of 32.
// FP8_TREE=0 builds the chains (the ablation).
#ifndef FP8_TREE
#define FP8_TREE 1
#endif
struct Softmax : fa::OnlineSoftmax<BN> {
  __device__ inline void step(float (&s)[64], float (&alpha)[2], int row0, int warp_row0, int n0, int kv_len,
                              float scale_log2, bool causal, int t) {
    const bool edge = n0 + BN > kv_len || (causal && n0 + BN - 1 > warp_row0);
    if (edge) {
#pragma unroll
      for (int i = 0; i < 64; ++i) {
        const int row = row0 + 8 * ((i % 4) / 2), col = n0 + 8 * (i / 4) + 2 * t + (i % 2);
        if (col >= kv_len || (causal && col > row)) s[i] = fa::NEG_INF;
      }
    }
    // Register i = 4 b + 2 r + e (b: 8-column block 0..15, r: row, e: 0/1) holds row r.
    float mx[2], base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (FP8_TREE) {
        float part[8];                                   // part[2 j + e]: blocks j, j + 4, j + 8, j + 12
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const int i = 4 * (k / 2) + 2 * r + k % 2;
          part[k] = fmaxf(fmaxf(s[i], s[i + 16]), fmaxf(s[i + 32], s[i + 48]));
        }
        mx[r] = fmaxf(fmaxf(fmaxf(part[0], part[1]), fmaxf(part[2], part[3])),
                      fmaxf(fmaxf(part[4], part[5]), fmaxf(part[6], part[7])));
      } else {
        mx[r] = fa::NEG_INF;
#pragma unroll
        for (int i = 0; i < 64; ++i)
          if ((i % 4) / 2 == r) mx[r] = fmaxf(mx[r], s[i]);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) base[r] = new_max(r, fmaxf(m[r], fa::quad_max(mx[r]) * scale_log2), alpha) - P_SCALE_LOG2;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int b = 0; b < 16; ++b)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int i = 4 * b + 2 * r + e;
          s[i] = fa::exp2_approx(fmaf(s[i], scale_log2, -base[r]));
          if (FP8_TREE) sum[2 * (b % 2) + e] += s[i];
          else sum[0] += s[i];
        }
      l[r] = l[r] * alpha[r] + ((sum[0] + sum[1]) + (sum[2] + sum[3]));
    }
  }
  // 1 / l times the V scale (O = v_scale P V / l), and the natural-log LSE of each row.
  __device__ inline void finish(float (&inv_l)[2], float (&lse)[2], float v_scale) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float total = fa::quad_sum(l[r]);
      inv_l[r] = total > 0.f ? v_scale * __frcp_rn(total) : 0.f;
      lse[r] = total > 0.f ? (m[r] + __log2f(total) - P_SCALE_LOG2) * 0.69314718055994531f : fa::NEG_INF;
    }
  }
};
}  // namespace attention_fp8
}  // namespace fb
