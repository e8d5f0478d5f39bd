// Attention forward on Hopper (sm_90a), chapter 09: the pieces every rung of the ladder shares.
//
//  - wgmma shapes the two GEMMs of attention need: S = Q K^T with both operands K-major in shared memory
//    (fb/wgmma.cuh's mma<N>), and O += P V with P in registers (the softmax output never touches shared
//    memory) and V read "MN-major", transposed by the instruction (imm-trans-b = 1);
//  - the descriptor of an MN-major tile with the 128-byte swizzle;
//  - the online-softmax bookkeeping of one thread's two rows of a 64 x N wgmma accumulator;
//  - the ring the TMA rungs (2-4) and lab 09 share: shared-memory plan, barriers, loads, the two GEMMs of a key
//    tile, the producer's loop and the consumer's step for one key tile.
//
// PTX ISA: "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions" (wgmma.mma_async,
// "Register Fragments and Shared Memory Matrix Layouts", "Matrix Descriptor Format").
#pragma once
#ifndef FB_ATTN_DESC_EACH
#define FB_ATTN_DESC_EACH 0
#endif
#include <cuda_bf16.h>
#include <cuda/std/cstdint>
#include <cuda/std/limits>
#include <fb/hazard.cuh>
#include <fb/smem.cuh>
#include <fb/tma.cuh>
#include <fb/trace.cuh>
#include <fb/wgmma.cuh>

namespace fb {
namespace attention {
using u32 = cuda::std::uint32_t;
using u64 = cuda::std::uint64_t;
constexpr float NEG_INF = -cuda::std::numeric_limits<float>::infinity();

// ---- descriptors --------------------------------------------------------------------------------
// An MN-major tile with the 128-byte swizzle, as a TMA load with swizzle=128 lays out rows of 64 bf16:
// along N, 64 contiguous elements (one 128-byte row); along K, rows 128 B apart in 8-row atoms of 1024 B.
//   SBO (bits 32-45): bytes from one 8-row group of K to the next (1024 when the rows are packed);
//   LBO (bits 16-29): bytes from one 64-wide block of N to the next (here: the next 64-column panel).
__device__ inline u64 descriptor_mn_major_sw128(const void* tile, u32 lbo_bytes, u32 sbo_bytes) {
  const u64 addr = static_cast<u64>(__cvta_generic_to_shared(tile));
  return fb::wgmma::descriptor_field(addr) | (fb::wgmma::descriptor_field(lbo_bytes) << 16) |
         (fb::wgmma::descriptor_field(sbo_bytes) << 32) | (1ull << 62);
}

// Where the j-th 64-column block of an MN-major SW128 operand starts (for the hazard trace): start + j LBO.
__device__ inline unsigned mn_block_start(u64 desc, int j) {
  return static_cast<unsigned>(((desc & 0x3FFF) << 4) + j * (((desc >> 16) & 0x3FFF) << 4));
}

// S = Q K^T with both operands K-major in shared memory is chapter 05's GEMM step, fb::wgmma::mma<128>.
// O += P V: D(64xN, fp32) (+)= A(64x16, bf16, in registers) * B(16xN, bf16, shared memory, MN-major: rows of N
// contiguous, transposed by the instruction, imm-trans-b = 1). A is, per warp, the m16n8k16 A fragment of its
// 16 rows: a[0] = (row g, cols 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..), a[3] = (g+8, 2t+8..).
// The trace records the 16 rows of each 64-column block of B that the step reads.
template <int N>
__device__ inline void mma_rs_tb(float (&d)[N / 2], const u32 (&a)[4], u64 desc_b, int accumulate FB_HZ_LINE) {
  static_assert(N % 64 == 0, "an MN-major SW128 operand is read in blocks of 64 columns");
#pragma unroll
  for (int j = 0; j < N / 64; ++j) FB_HZ_RECORD(fb::hazard::kWgmmaRead, mn_block_start(desc_b, j), 16 * 128, 0, 0);
  fb::wgmma::mma_rs<N, 1>(d, a, desc_b, accumulate);
}

// ---- named barriers ---------------------------------------------------------------------------------
// bar.arrive id, threads (PTX ISA, "bar, barrier"): count toward barrier `id` without waiting. With
// fb::bar_sync (fb/named_barrier.cuh) on the other side, a one-way signal between two groups of warps.
__device__ inline void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- softmax helpers -------------------------------------------------------------------------------
// 2^x on the multi-function unit alone (PTX ISA, "ex2": .approx.ftz, one MUFU.EX2 per call). exp2f also handles
// results below 2^-126 as subnormals instead of 0, at three more instructions per call (FSETP and two FMUL around the MUFU.EX2).
// Flushing them to 0 is harmless not because bf16 could not hold them (bf16 has fp32's exponent range, so it can)
// but because the row's maximum contributes 2^0 = 1 to the same sum: l >= 1, and a term below 2^-126 is more than
// 2^100 times smaller than fp32's rounding of l (2^-24 l), in l and in O alike. Rung 4 on an H100: +2 to +10 %.
__device__ inline float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// stmatrix .x4 (sm_90): lanes 8j .. 8j + 7 give the row addresses of 8x8 b16 matrix j; register j of lane l is
// row l / 4, columns 2 (l % 4) .. + 1 of matrix j (bytes 4 (l % 4) .. + 3 of its 16). PTX ISA, "stmatrix".
__device__ inline void stmatrix_x4(void* row, u32 r0, u32 r1, u32 r2, u32 r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               :: "r"(fb::smem_addr(row)), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}

// Two bf16 in one register, the first in the low half (the lower column index of a fragment pair).
__device__ inline u32 pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<u32*>(&v);
}
// The four threads of a quad (lanes 4g .. 4g+3) hold one row's columns between them.
__device__ inline float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ inline float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// One thread's share of the online softmax for a 64 x N accumulator tile (wgmma D fragment, or eight
// mma.sync m16n8 tiles side by side: the same layout). The thread holds rows r0 = 16 warp + g and
// r0 + 8; register i is row r0 + 8 ((i % 4) / 2), column 8 (i / 4) + 2 (i % 4 ... see accumulator_row_col).
// Scores are kept in log2 units: x = s * scale * log2(e), so exp becomes exp2 (one MUFU.EX2).
template <int N>
struct OnlineSoftmax {
  static constexpr int R = N / 2;          // accumulator registers per thread
  float m[2] = {NEG_INF, NEG_INF};         // running maximum of each row (log2 units)
  float l[2] = {0.f, 0.f};                 // this thread's part of each row's running sum

  // Scale and mask the raw scores s (tile columns n0..n0+N-1, rows row0 and row0 + 8), fold them into
  // the running maximum, replace s by p = exp2(x - m) and return the factor alpha[r] that rescales what
  // was accumulated before. Columns >= kv_len, and with `causal` columns > row, are masked.
  __device__ inline void step(float (&s)[R], float (&alpha)[2], int row0, int n0, int kv_len, float scale_log2,
                              bool causal, int t) {
    step_masked(s, alpha, row0, n0, scale_log2, t,
                [&](int row, int col) { return col < kv_len && !(causal && col > row); });
  }

  // The same with any mask: keep(row, col) is true where the score counts.
  template <class Keep>
  __device__ inline void step_masked(float (&s)[R], float (&alpha)[2], int row0, int n0, float scale_log2, int t,
                                     Keep keep) {
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int row = row0 + 8 * ((i % 4) / 2), col = n0 + 8 * (i / 4) + 2 * t + (i % 2);
      s[i] = keep(row, col) ? s[i] * scale_log2 : NEG_INF;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = m[r];
#pragma unroll
      for (int i = 0; i < R; ++i)
        if ((i % 4) / 2 == r) mx = fmaxf(mx, s[i]);
      const float base = new_max(r, quad_max(mx), alpha);
      float sum = 0.f;
#pragma unroll
      for (int i = 0; i < R; ++i)
        if ((i % 4) / 2 == r) {
          s[i] = exp2f(s[i] - base);
          sum += s[i];
        }
      l[r] = l[r] * alpha[r] + sum;
    }
  }

  // Row r's maximum becomes mx (log2 units): alpha[r] = 2^(old - new) rescales what was accumulated, and the
  // return value is what to subtract from the scores (0 while the row has seen nothing unmasked: -inf - -inf
  // would be NaN; exp2(-inf) = 0 then gives alpha = 0 on the first tile).
  __device__ inline float new_max(int r, float mx, float (&alpha)[2]) {
    const float base = mx == NEG_INF ? 0.f : mx;
    alpha[r] = exp2f(m[r] - base);
    m[r] = mx;
    return base;
  }

  // The same step with three savings (decided per warp: `warp_row0` is the warp's first row): only the tiles
  // on the diagonal or at the ragged end are masked; the maximum is taken on the raw scores and the scale folded
  // into one FFMA per score, exp2(s * scale_log2 - m), instead of a multiply, a select and a subtract; and 2^x
  // is exp2_approx, one MUFU.EX2.
  __device__ inline void step_fast(float (&s)[R], float (&alpha)[2], int row0, int warp_row0, int n0, int kv_len,
                                   float scale_log2, bool causal, int t) {
    const bool edge = n0 + N > kv_len || (causal && n0 + N - 1 > warp_row0);
    if (edge) {
#pragma unroll
      for (int i = 0; i < R; ++i) {
        const int row = row0 + 8 * ((i % 4) / 2), col = n0 + 8 * (i / 4) + 2 * t + (i % 2);
        if (col >= kv_len || (causal && col > row)) s[i] = NEG_INF;
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = NEG_INF;
#pragma unroll
      for (int i = 0; i < R; ++i)
        if ((i % 4) / 2 == r) mx = fmaxf(mx, s[i]);
      const float base = new_max(r, fmaxf(m[r], quad_max(mx) * scale_log2), alpha);   // log2 units, as m
      float sum = 0.f;
#pragma unroll
      for (int i = 0; i < R; ++i)
        if ((i % 4) / 2 == r) {
          s[i] = exp2_approx(fmaf(s[i], scale_log2, -base));
          sum += s[i];
        }
      l[r] = l[r] * alpha[r] + sum;
    }
  }

  // Natural-log log-sum-exp of each row, after the last tile (needs the whole row's sum).
  __device__ inline void finish(float (&inv_l)[2], float (&lse)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float total = quad_sum(l[r]);
      inv_l[r] = total > 0.f ? __frcp_rn(total) : 0.f;
      lse[r] = total > 0.f ? (m[r] + __log2f(total)) * 0.69314718055994531f : NEG_INF;
    }
  }
};

// ptxas may move a wgmma.wait_group up to the first instruction that does not depend on the softmax before
// it: in rung 4 the wait for O += P V then came before the softmax it was meant to overlap (the SASS showed
// WARPGROUP.DEPBAR ahead of every MUFU.EX2). A memory fence between the two is an order ptxas keeps; the
// consumer warps have no memory accesses of their own in flight for it to wait on.
__device__ inline void order_before_wait() { asm volatile("fence.acq_rel.cta;" ::: "memory"); }

// Multiply accumulator registers (same fragment layout, D/2 of them) row by row.
template <int R>
__device__ inline void scale_rows(float (&o)[R], const float (&f)[2]) {
#pragma unroll
  for (int i = 0; i < R; ++i) o[i] *= f[(i % 4) / 2];
}

// The same, skipped when no row of this warp changed its maximum (every alpha exactly 1, as exp2(0) is):
// after the first tiles the running maximum rarely moves. The test is warp-uniform, so no divergence.
template <int R>
__device__ inline void scale_rows_if_changed(float (&o)[R], const float (&f)[2]) {
  if (__any_sync(0xffffffffu, f[0] != 1.f || f[1] != 1.f)) scale_rows(o, f);
}

// P (the softmax numerator, fp32 accumulator layout) as bf16 A fragments for the k16 steps of O += P V:
// step j takes columns 16j .. 16j+15, i.e. accumulator registers 8j .. 8j+7, with no data movement.
template <int R>
__device__ inline void p_fragments(const float (&p)[R], u32 (&a)[R / 8][4]) {
#pragma unroll
  for (int j = 0; j < R / 8; ++j) {
    a[j][0] = pack_bf16(p[8 * j + 0], p[8 * j + 1]);
    a[j][1] = pack_bf16(p[8 * j + 2], p[8 * j + 3]);
    a[j][2] = pack_bf16(p[8 * j + 4], p[8 * j + 5]);
    a[j][3] = pack_bf16(p[8 * j + 6], p[8 * j + 7]);
  }
}

// Epilogue: O rows (bf16) and the log-sum-exp of each row, for rows < q_len. `o` holds D/2 registers of a
// 64 x D accumulator (row0 = this thread's first row in the sequence); O points at row 0 of this head.
template <int D>
__device__ inline void store_rows(const float (&o)[D / 2], const float (&inv_l)[2], const float (&lse)[2],
                                  __nv_bfloat16* O, float* lse_out, int row0, int q_len, int t) {
#pragma unroll
  for (int i = 0; i < D / 2; i += 2) {
    const int r = (i % 4) / 2, row = row0 + 8 * r, col = 8 * (i / 4) + 2 * t;
    if (row < q_len)
      *reinterpret_cast<__nv_bfloat162*>(O + static_cast<size_t>(row) * D + col) =
          __floats2bfloat162_rn(o[i] * inv_l[r], o[i + 1] * inv_l[r]);
  }
  if (t == 0) {
    if (row0 < q_len) lse_out[row0] = lse[0];
    if (row0 + 8 < q_len) lse_out[row0 + 8] = lse[1];
  }
}

// ---- the ring of rungs 2-4 (and lab 09): shared memory, barriers, loads, the two GEMMs, one key tile ------
// Dynamic shared memory of a block, 1024-byte aligned: Q (BM rows), then NSTAGES tiles of K, then NSTAGES of V
// (BN rows each). A tile of ROWS rows is D / 64 panels of ROWS x 128 B, as TMA writes boxes of ROWS x 64 bf16
// with the 128-byte swizzle. (NSTAGES, not STAGES: the kernels take STAGES as a -D macro.)
template <int D, int BM, int BN, int NSTAGES> struct Plan {
  static constexpr int Q_BYTES = BM * D * 2, KV_BYTES = BN * D * 2;
  static constexpr int K_OFF = Q_BYTES, V_OFF = K_OFF + NSTAGES * KV_BYTES;
  static constexpr int BYTES = V_OFF + NSTAGES * KV_BYTES + 1024;   // + alignment slack
};

// Which work block (x, y) of the grid owns: query rows m0 .. m0 + BM - 1 of head y (x taken in reverse, so
// that with a causal mask the longest blocks start first), that head's first row in the 2-D tensor maps, and
// how many key tiles of BN rows it visits (with `causal`, those up to the diagonal).
struct BlockTiles { int m0, head_row, tiles; };
template <int BM, int BN>
__device__ inline BlockTiles block_tiles(int seq, int causal) {
  const int m0 = (gridDim.x - 1 - blockIdx.x) * BM;
  const int kv_end = causal ? min(seq, m0 + BM) : seq;
  return {m0, static_cast<int>(blockIdx.y) * seq, (kv_end + BN - 1) / BN};
}

// ---- persistent blocks (rung 6 and the persistent fp8 rung) ----------------------------------------------------
// Work tile w, longest first: query tile m_tiles - 1 - r / g of head grp * group + r % g, with grp = w / (m_tiles *
// group), r = w % (m_tiles * group), g the heads of that group (the last group may have fewer). Causal: the host
// picks `group` so that a group's K and V fit in part of the L2; without a mask group = 1 (head-major).
template <int BM, int BN>
__device__ inline BlockTiles work_tile(u32 w, int seq, int causal, u32 heads, u32 group) {
  const u32 m_tiles = (seq + BM - 1) / BM, per = m_tiles * group, grp = w / per, r = w % per;
  const u32 g = min(group, heads - grp * group);         // unsigned: no sign fix-ups (the producer has 24 registers)
  const int m0 = (m_tiles - 1 - r / g) * BM, head = grp * group + r % g;
  const int kv_end = causal ? min(seq, m0 + BM) : seq;
  return {m0, head * seq, (kv_end + BN - 1) / BN};
}

// The next work tile from a global counter: block x starts with tile x, and each further tile is gridDim.x plus
// the next number drawn. Every block draws until it gets a number past the `total` tiles, so a launch makes
// exactly `total` draws; the block with the last one resets the counter for the next launch.
__device__ inline int draw_work_tile(int total, int* counter) {
  const int drawn = atomicAdd(counter, 1);
  if (drawn == total - 1) *counter = 0;
  return static_cast<int>(gridDim.x) + drawn;
}

// O through shared memory: a consumer's staging tile of 64 rows holds D / 64 panels of 64 rows x 128 B (8 KB each),
// swizzled as the TMA's 128-byte mode lays them out. The byte of row r (0-63), 16-byte column chunk k: panel k / 8,
// then the row, then the chunk XOR the row's low three bits.
__host__ __device__ constexpr int o_tile_byte(int r, int k) {
  return (k / 8) * 64 * 128 + r * 128 + (((k ^ r) & 7) << 4);
}
// This warp's 16 rows of O / l as bf16 into the consumer's staging tile: stmatrix .x4 takes the 8x8 matrices of
// rows 0-7 and 8-15 for two 8-column blocks, which is how the accumulator holds them (stmatrix_x4).
template <int D>
__device__ inline void o_to_stage(const float (&o)[D / 2], const float (&inv_l)[2], unsigned char* stage) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32, m = lane / 8;
  const int r = 16 * warp + lane % 8 + 8 * (m % 2);
#pragma unroll
  for (int b = 0; b < D / 8; b += 2) {
    u32 x[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int rr = j % 2, bb = b + j / 2;
      x[j] = pack_bf16(o[4 * bb + 2 * rr] * inv_l[rr], o[4 * bb + 2 * rr + 1] * inv_l[rr]);
    }
    stmatrix_x4(stage + o_tile_byte(r, b + m / 2), x[0], x[1], x[2], x[3]);
  }
}

// Thread 0 prefetches the three tensor maps and initialises the barriers: q_full, full_k[s] and full_v[s] wait
// for one arrival (the producer's arrive.expect_tx) and a tile's bytes, empty[s] for one arrival per consumer
// warpgroup. Then the whole block synchronises once.
template <int NSTAGES>
__device__ inline void init_ring(const fb::TensorMap& qmap, const fb::TensorMap& kmap, const fb::TensorMap& vmap,
                                 u64* q_full, u64* full_k, u64* full_v, u64* empty, int consumers) {
  if (threadIdx.x == 0) {
    fb::tma::prefetch_tensormap(qmap);
    fb::tma::prefetch_tensormap(kmap);
    fb::tma::prefetch_tensormap(vmap);
    fb::mbar::init(q_full, 1);
    for (int s = 0; s < NSTAGES; ++s) {
      fb::mbar::init(&full_k[s], 1);
      fb::mbar::init(&full_v[s], 1);
      fb::mbar::init(&empty[s], consumers);
    }
    fb::mbar::fence_init();
  }
  __syncthreads();
}

// The stage barriers of a ring whose K and V slots are released apart (rungs 5 and 6; thread 0, before
// fb::mbar::fence_init): full_k[s] and full_v[s] wait for the producer's arrive.expect_tx and a tile's bytes,
// empty_k[s] and empty_v[s] for one arrival per consumer warpgroup.
template <int NSTAGES>
__device__ inline void init_split_ring(u64* full_k, u64* full_v, u64* empty_k, u64* empty_v, int consumers) {
  for (int s = 0; s < NSTAGES; ++s) {
    fb::mbar::init(&full_k[s], 1);
    fb::mbar::init(&full_v[s], 1);
    fb::mbar::init(&empty_k[s], consumers);
    fb::mbar::init(&empty_v[s], consumers);
  }
}

// ROWS rows from global row `row` of a 2-D map (all D columns: D / 64 boxes) onto barrier `bar`.
template <int D, int ROWS>
__device__ inline void load_tile(unsigned char* dst, const fb::TensorMap& map, int row, u64* bar) {
#pragma unroll
  for (int p = 0; p < D / 64; ++p) fb::tma::load_2d(dst + p * ROWS * 128, map, 64 * p, row, bar);
}

// S(64 x BN) = Q(64 x D) K^T: D / 16 wgmma steps of 32 B along K; the 64-column panels are ROWS * 128 B apart.
// Each step's descriptor is the first one plus the step's byte offset / 16 (the start-address field, bits 0-13,
// holds address / 16 and a shared-memory address stays below 2^18, so the sum never carries out of it): one
// add per wgmma instead of building every descriptor from its address.
// (-D FB_ATTN_DESC_EACH=1 builds each descriptor from its address instead, to compare.)
template <int D, int BM, int BN>
__device__ inline void qk_gemm(float (&s)[BN / 2], const unsigned char* q, const unsigned char* k) {
  static_assert(BN == 128, "key tiles of 128 rows: one m64n128k16 wgmma per k16 step");
  const u64 dq = fb::wgmma::descriptor_k_major_sw128(q), dk = fb::wgmma::descriptor_k_major_sw128(k);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const int qoff = (kk / 4) * BM * 128 + (kk % 4) * 32, koff = (kk / 4) * BN * 128 + (kk % 4) * 32;
#if FB_ATTN_DESC_EACH
    fb::wgmma::mma<BN>(s, fb::wgmma::descriptor_k_major_sw128(q + qoff), fb::wgmma::descriptor_k_major_sw128(k + koff),
                       kk > 0);
#else
    fb::wgmma::mma<BN>(s, dq + qoff / 16, dk + koff / 16, kk > 0);
#endif
  }
}

// O(64 x D) += P(64 x BN) V: BN / 16 wgmma steps, V rows 16 kk .. 16 kk + 15 at 16 * 128 B per step.
template <int D, int BN>
__device__ inline void pv_gemm(float (&o)[D / 2], const u32 (&p)[BN / 16][4], const unsigned char* v) {
  constexpr u32 LBO = BN * 128, SBO = 1024;        // next 64-column panel; next 8 rows of V
  const u64 dv = descriptor_mn_major_sw128(v, LBO, SBO);
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
#if FB_ATTN_DESC_EACH
    const u64 desc = descriptor_mn_major_sw128(v + kk * 16 * 128, LBO, SBO);
#else
    const u64 desc = dv + kk * 16 * 128 / 16;
#endif
    mma_rs_tb<D>(o, p[kk], desc, 1);
  }
}

// One consumer's tensor-core turn in rung 5: S_j = Q K_j^T and O += P_{j-1} V_{j-1} issued back to back
// as two wgmma groups, so that wait_group<1> returns with S_j while P V still runs under the softmax of S_j.
template <int D, int BM, int BN>
__device__ inline void issue_qk_then_pv(float (&s)[BN / 2], float (&o)[D / 2], const u32 (&p)[BN / 16][4],
                                        const unsigned char* q, const unsigned char* k, const unsigned char* v) {
  fb::wgmma::fence();
  qk_gemm<D, BM, BN>(s, q, k);
  fb::wgmma::commit_group();
  pv_gemm<D, BN>(o, p, v);
  fb::wgmma::commit_group();
}

// The producer (one thread): Q, then key tiles 0 .. tiles - 1 of K and V, each into stage j % NSTAGES once
// both consumers released it. With a recording Tracer: a `wait` span per free-stage wait, an `issue` span
// per pair of loads.
template <int D, int BM, int BN, int NSTAGES>
__device__ inline void produce_ring(const fb::TensorMap& qmap, const fb::TensorMap& kmap, const fb::TensorMap& vmap,
                                    unsigned char* smem, u64* q_full, u64* full_k, u64* full_v, u64* empty,
                                    const BlockTiles& b, fb::Tracer& tr) {
  using P = Plan<D, BM, BN, NSTAGES>;
  fb::mbar::arrive_expect_tx(q_full, P::Q_BYTES);
  load_tile<D, BM>(smem, qmap, b.head_row + b.m0, q_full);
  for (int j = 0; j < b.tiles; ++j) {
    const int s = j % NSTAGES;
    const long long t0 = tr.now();
    fb::mbar::wait(&empty[s], ((j / NSTAGES) & 1) ^ 1, "empty", s);   // the first lap passes at once
    const long long t1 = tr.now();
    fb::mbar::arrive_expect_tx(&full_k[s], P::KV_BYTES);
    load_tile<D, BN>(smem + P::K_OFF + s * P::KV_BYTES, kmap, b.head_row + j * BN, &full_k[s]);
    fb::mbar::arrive_expect_tx(&full_v[s], P::KV_BYTES);
    load_tile<D, BN>(smem + P::V_OFF + s * P::KV_BYTES, vmap, b.head_row + j * BN, &full_v[s]);
    tr.span(fb::TraceKind::wait, t0, t1);
    tr.span(fb::TraceKind::issue, t1, tr.now());
  }
}

// Q in registers (rung 6): the m64nNk16 A fragments of this warpgroup's 64 rows of Q, read once per tile, so that
// Q's buffer is free for the next tile as soon as they are read. q: the warpgroup's first row in a K-major SW128
// tile of D / 64 panels, BM rows each. Per k16 step ldmatrix .x4 reads four 8 x 16-byte matrices: this warp's rows
// 0-7 and 8-15 of bytes 0-15 (a0, a1) and of bytes 16-31 (a2, a3), the A fragment's order (PTX ISA, "Warp-level
// matrix load instruction: ldmatrix"); lane l gives the address of row l % 8 of matrix l / 8.
template <int D, int BM>
__device__ inline void q_fragments(const unsigned char* q, u32 (&a)[D / 16][4]) {
  const unsigned lane = threadIdx.x % 32, m = lane / 8, row = 16 * ((threadIdx.x % 128) / 32) + 8 * (m % 2) + lane % 8;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const unsigned chunk = (2 * (kk % 4) + m / 2) ^ (row % 8);   // the 128-byte swizzle
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(a[kk][0]), "=r"(a[kk][1]), "=r"(a[kk][2]), "=r"(a[kk][3])
                 : "r"(fb::smem_addr(q + (kk / 4) * BM * 128 + row * 128 + chunk * 16)) : "memory");
  }
}

// S(64 x BN) = Q K^T with Q's fragments in registers: K, all D / 16 steps of it, the only operand in shared memory.
template <int D, int BN>
__device__ inline void qk_gemm_rs(float (&s)[BN / 2], const u32 (&qa)[D / 16][4], const unsigned char* k FB_HZ_LINE) {
  const u64 dk = fb::wgmma::descriptor_k_major_sw128(k);
  FB_HZ_RECORD_WARPGROUP(fb::hazard::kWgmmaRead, fb::wgmma::descriptor_tile_start(dk), BN * D * 2, 0, 0);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    fb::wgmma::mma_rs<BN, 0>(s, qa[kk], dk + ((kk / 4) * BN * 128 + (kk % 4) * 32) / 16, kk > 0);
}

// Key tile j for one consumer warpgroup, one step after the other (rungs 2 and 3): wait for K, S = Q K^T, the
// online softmax (FAST: step_fast and the skipped rescale), wait for V, O += P V, then the warpgroup's first
// thread releases the stage. `q`: this warpgroup's 64 rows of Q; row0: this thread's first query row.
template <int D, int BM, int BN, int NSTAGES, bool FAST>
__device__ inline void attend_tile(float (&o)[D / 2], OnlineSoftmax<BN>& sm, const unsigned char* q,
                                   const unsigned char* smem, u64* full_k, u64* full_v, u64* empty, int j,
                                   int row0, int seq, float scale_log2, int causal) {
  using P = Plan<D, BM, BN, NSTAGES>;
  const int s = j % NSTAGES, t = threadIdx.x % 4;
  const u32 parity = (j / NSTAGES) & 1;
  float sc[BN / 2], alpha[2];
  fb::mbar::wait(&full_k[s], parity, "full_k", s);
  fb::wgmma::fence();
  qk_gemm<D, BM, BN>(sc, q, smem + P::K_OFF + s * P::KV_BYTES);
  fb::wgmma::commit_group();
  fb::wgmma::wait_group<0>();
  fb::wgmma::fence_operand(sc);
  if constexpr (FAST) {
    sm.step_fast(sc, alpha, row0, row0 - (threadIdx.x % 32) / 4, j * BN, seq, scale_log2, causal, t);
    scale_rows_if_changed(o, alpha);
  } else {
    sm.step(sc, alpha, row0, j * BN, seq, scale_log2, causal, t);
    scale_rows(o, alpha);
  }
  u32 p[BN / 16][4];
  p_fragments(sc, p);
  fb::mbar::wait(&full_v[s], parity, "full_v", s);
  fb::wgmma::fence();
  pv_gemm<D, BN>(o, p, smem + P::V_OFF + s * P::KV_BYTES);
  fb::wgmma::commit_group();
  fb::wgmma::wait_group<0>();
  fb::wgmma::fence_operand(o);
  if (threadIdx.x % 128 == 0) fb::mbar::arrive(&empty[s]);   // this warpgroup is done with stage s
}

// The epilogue of a consumer warpgroup: O / l and the log-sum-exp of this thread's two rows, for rows < seq
// (O and lse point at row 0 of this head).
template <int D, int BN>
__device__ inline void finish_rows(OnlineSoftmax<BN>& sm, const float (&o)[D / 2], __nv_bfloat16* O, float* lse,
                                   int row0, int seq) {
  float inv_l[2], lse_row[2];
  sm.finish(inv_l, lse_row);
  store_rows<D>(o, inv_l, lse_row, O, lse, row0, seq, threadIdx.x % 4);
}
}  // namespace attention
}  // namespace fb
