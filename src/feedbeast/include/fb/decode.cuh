// Decode (chapter 10): the instructions of a kernel that streams weights once, and the split-K GEMV built on them.
//
//   C (M x N, bf16) = X (M x K, bf16: a few tokens) * W^T, W (N x K: nn.Linear's layout), M <= 64.
//
// Block (n-tile, split): Rows weight rows (128 or 64) x one K/S slice. One producer thread streams W and X tiles
// through a ring of STAGES (TMA, mbarrier full/empty), four consumer warps multiply (weights as the rows of the
// product, tokens as its columns), and the S partial tiles of an n-tile are added either through distributed
// shared memory inside a cluster of S blocks (RED 0) or by the TMA unit into C (RED 1).
// The stage arithmetic is a policy (`Math::KT`, `Math::stage`): chapter 10 gives two bf16 ones (mma.sync per warp,
// wgmma per warpgroup), lab 10 an fp8 one. A policy that sets `kWarpgroupRows` keeps the wgmma fragment order
// and has waited for its reads (wgmma.wait_group) when `stage` returns: its remote arrivals may be relaxed.
//
// PTX ISA sections: "createpolicy", "cp.async.bulk.tensor" (.L2::cache_hint, .multicast::cluster),
// "cp.async.bulk.prefetch.tensor", "cp.reduce.async.bulk", "griddepcontrol", "ld" (.shared::cluster), "mapa",
// "mbarrier.arrive" (.shared::cluster), "mbarrier.try_wait" (.cluster), "ldmatrix", "mma" (m16n8k16),
// "cvt" (e4m3x2 -> f16x2), "Special Registers: %globaltimer".
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda/std/cstdint>
#include <fb/cluster.cuh>
#include <fb/mbarrier.cuh>
#include <fb/smem.cuh>
#include <fb/tma.cuh>

namespace fb {
namespace decode {
using u32 = unsigned;
using u64 = unsigned long long;

// ---- L2 policies ------------------------------------------------------------------------------------------
// createpolicy.fractional: a 64-bit cache policy for the accesses that name it. evict_first: lines go first
// when the L2 needs room (weights, read once per step); evict_last: they stay (activations, read by every block).
__device__ inline u64 policy_evict_first() {
  u64 p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ inline u64 policy_evict_last() {
  u64 p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  return p;
}

// cp.async.bulk.tensor.2d ... .L2::cache_hint: fb::tma::load_2d with a cache policy. Multicast: with
// .multicast::cluster, as fb::tma::load_2d_multicast: the box lands at the same offset of every CTA in `mask`, and
// each one's barrier at the offset of `bar` gets its bytes.
template <bool Multicast = false>
__device__ inline void load_2d_hint(void* dst, const TensorMap& map, int c0, int c1, u64* bar, u64 policy,
                                    unsigned short mask = 0 FB_HZ_LINE) {
  if (FB_HZ_STOPPED()) return;            // a hazard build after a wait gave up (fb/hazard.cuh)
  FB_HZ_RECORD(fb::hazard::kTmaCoords, c0, c1, 0, 0);     // hazard builds: the load, as fb::tma records it
  FB_HZ_RECORD(fb::hazard::kTmaLoad, smem_addr(dst), fb::hazard::map_id(&map), smem_addr(bar), mask);
  if constexpr (Multicast)
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        ".L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5, %6;"
        ::"r"(smem_addr(dst)), "l"(&map), "r"(c0), "r"(c1), "r"(smem_addr(bar)), "h"(mask), "l"(policy) : "memory");
  else
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%2, %3}], [%4], %5;"
        ::"r"(smem_addr(dst)), "l"(&map), "r"(c0), "r"(c1), "r"(smem_addr(bar)), "l"(policy) : "memory");
}

// cp.async.bulk.prefetch.tensor.2d.L2: the box is brought into L2 only; nothing is written to shared memory,
// nothing completes on a barrier.
__device__ inline void prefetch_2d(const TensorMap& map, int c0, int c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];"
               ::"l"(&map), "r"(c0), "r"(c1) : "memory");
}

// ---- programmatic dependent launch -------------------------------------------------------------------------
// griddepcontrol.launch_dependents: this block no longer holds back the next kernel of the stream (launched with
// the programmatic stream serialization attribute); once every block has said so (or exited), it may start.
// Hazard builds record both: the order they set is between launches, which one launch's trace cannot check.
__device__ inline void launch_dependents(FB_HZ_LINE_PARAM) {
  FB_HZ_RECORD(fb::hazard::kGridDepLaunch, 0, 0, 0, 0);
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
// griddepcontrol.wait: until the kernels this one depends on have completed and their memory is visible.
// Without the launch attribute it returns at once.
__device__ inline void wait_dependencies(FB_HZ_LINE_PARAM) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  FB_HZ_RECORD(fb::hazard::kGridDepWait, 0, 0, 0, 0);
}

// ---- TMA reduce --------------------------------------------------------------------------------------------
// cp.reduce.async.bulk .add.noftz.bf16: global[dst .. dst+bytes) += shared[src ..] element-wise, done by the TMA
// unit (each element read-modify-written atomically with respect to other reductions). bytes and both addresses
// are multiples of 16. Completes in a bulk group (fb::tma::commit_group / wait_group_read).
__device__ inline void reduce_add_bf16(void* dst, const void* src, u32 bytes FB_HZ_LINE) {
  FB_HZ_RECORD(fb::hazard::kBulkReduce, smem_addr(src), bytes, reinterpret_cast<u64>(dst),
               reinterpret_cast<u64>(dst) >> 32);
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16 [%0], [%1], %2;"
               ::"l"(dst), "r"(smem_addr(src)), "r"(bytes) : "memory");
}

// ---- distributed shared memory ------------------------------------------------------------------------------
// ld.shared::cluster: 16 bytes at a .shared::cluster address (from fb::mapa_shared_cluster) of any CTA of the cluster.
__device__ inline float4 ld_cluster_f4(u32 addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr) : "memory");
  return v;
}

__device__ inline u64 globaltimer() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// ---- tensor-core fragments ----------------------------------------------------------------------------------
// ldmatrix.x4: four 8x8 matrices of 16-bit elements; lane l gives the row address of row l%8 of matrix l/8 and
// receives, of each matrix, row l/4, elements 2(l%4) and 2(l%4)+1.
__device__ inline void ldmatrix_x4(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
// mma.sync m16n8k16, fp32 accumulators: d (16 x 8) += a (16 x 16, row) * b (16 x 8, col).
__device__ inline void mma_bf16(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9},"
               " {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ inline void mma_f16(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9},"
               " {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// cvt.rn.f16x2.e4m3x2: two fp8 e4m3 (the low 16 bits of v) to two halves, exactly (every e4m3 is an f16).
__device__ inline u32 e4m3x2_to_f16x2(unsigned short v) {
#ifdef FB_E4M3_AS_BITS   // lab 10's probe: the pair's bits as they are, so that integer code alone says where they went
  return v;
#else
  u32 r;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(v));
  return r;
#endif
}
// Two bf16 (one register) to two halves (rounded; |x| must stay under 65504).
__device__ inline u32 bf16x2_to_f16x2(u32 v) {
  __nv_bfloat162 b = *reinterpret_cast<__nv_bfloat162*>(&v);
  __half2 h = __float22half2_rn(__bfloat1622float2(b));
  return *reinterpret_cast<u32*>(&h);
}

// Byte offset of the 16-byte chunk `chunk` of row `row` in a tile of 128-byte rows written by TMA with
// CU_TENSOR_MAP_SWIZZLE_128B: the chunk index is XORed with row % 8 (the tile starts on a 1024 B boundary).
__device__ __forceinline__ u32 swz128(int row, int chunk) { return row * 128 + ((chunk ^ (row & 7)) << 4); }

// ---- the split-K GEMV ------------------------------------------------------------------------------------------
constexpr int BN = 128;           // weight rows per block by default (Rows): 4 consumer warps x 2 m16 tiles
constexpr int THREADS = 160;      // warps 0-3 consume, warp 4 produces

// The first weight row of accumulator tile mt of consumer warp `warp` (rows g and g + 8 of it are the thread's).
// mma.sync policies: warp w owns 16 MT consecutive rows. wgmma policies (Math::kWarpgroupRows): tile mt is the
// warpgroup's m64 tile mt, of which warp w holds rows 16w .. 16w + 15 (PTX ISA, wgmma .m64nNk16 D fragment).
template <class Math, class = void> struct WarpgroupRows { static constexpr bool value = false; };
template <class Math> struct WarpgroupRows<Math, decltype(void(Math::kWarpgroupRows))> {
  static constexpr bool value = Math::kWarpgroupRows;
};
template <class Math, int MT> __device__ __forceinline__ int tile_row(int warp, int mt) {
  return WarpgroupRows<Math>::value ? 64 * mt + 16 * warp : 16 * MT * warp + 16 * mt;
}

// Rows weight rows per block: 128 (2 m16 tiles per consumer warp, or 2 m64 tiles of the warpgroup) or 64 (1 tile:
// twice the blocks for the same N).
// A stage's weights are KT / BoxK boxes of Rows rows x 128 bytes side by side along k (Math::kBoxK: the weight
// elements of one 128-byte box row; without it a stage is one box). More boxes per stage, fewer stages: the same
// ring, fewer full/empty round trips per byte.
template <class Math, class = void> struct BoxK { static constexpr int value = Math::KT; };
template <class Math> struct BoxK<Math, decltype(void(Math::kBoxK))> { static constexpr int value = Math::kBoxK; };

template <int Tok, int Stages, class Math, int Rows = BN>
struct Shape {
  static constexpr int MT = Rows / 64;                  // m16 tiles per warp (mma.sync), m64 tiles (wgmma)
  static constexpr int PB = Rows + 4;                   // a token's fp32 partial row: +4 floats against bank conflicts
  static constexpr int KT = Math::KT;                   // k per stage
  static constexpr int W_BOX = Rows * 128;              // box of Rows rows x 128 bytes
  static constexpr int W_BOXES = KT / BoxK<Math>::value;
  static constexpr int W_BYTES = W_BOXES * W_BOX;
  static constexpr int X_BOXES = KT / 64;               // bf16 activations: 64 per 128-byte box row
  static constexpr int X_BYTES = X_BOXES * Tok * 128;
  static constexpr int STAGE = W_BYTES + X_BYTES;       // a multiple of 1024: every box stays swizzle-aligned
  static constexpr int RING = Stages * STAGE;
  static constexpr int SMEM = RING + 2 * Stages * 8 + 1024;   // + barriers, + alignment slack
  static_assert(Rows == 128 || Rows == 64, "Rows is 128 or 64: 2 or 1 row tiles of the consumers");
  static_assert(Tok % 8 == 0 && Tok <= 64, "Tok is 8, 16, 32 or 64");
  static_assert(STAGE % 1024 == 0, "stages must stay on 1024 B boundaries");
  static_assert(KT % BoxK<Math>::value == 0, "a stage is a whole number of weight boxes");
  static_assert(RING >= Tok * PB * 4, "the partial tile reuses the ring");
};

// One block of the GEMV. Red 0: the S blocks of an n-tile form a cluster (1, S, TokenBlocks) and add their partials
// through DSMEM into C (with S = 1 and one token block the launch needs no cluster). Red 1: each adds its partial
// (bf16) into C with the TMA unit; C must be zero before.
// Hint: weights evict-first, activations evict-last. Pdl: weights of the first Stages tiles are requested before
// griddepcontrol.wait (they do not depend on the previous kernel; the activations do).
// stamps (or null): [0] gets the earliest block start, [1] the latest block end (%globaltimer, ns).
// Rows: weight rows per block, 128 or 64 (the weight tensor map's box is Rows / TokenBlocks x 128 bytes);
// Math::stage gets the accumulators of Rows / 64 tiles (m16 per warp with mma.sync, m64 per warpgroup with wgmma).
// Prefetch: weight stages requested into the L2 (cp.async.bulk.prefetch.tensor, one per box) ahead of the ring: once the
// ring's first Stages loads are issued, the next Prefetch stages; then stage it + Prefetch with each load of stage
// it. With Pdl the first of them go before griddepcontrol.wait too.
// TokenBlocks 2: the tokens are split over two blocks (grid z) that share each weight tile. They are in one cluster,
// (1, S, 2) with Red 0 (rank split + S z) and (1, 1, 2) with Red 1 (rank z); each block's producer loads half of the
// tile's rows and multicasts it to both, so the pair requests each tile from memory once; a stage is free when the
// consumers of both blocks are done with it (8 arrivals on each block's empty barrier, 4 of them remote, so the
// producer waits at cluster scope). The tensor map's box is Rows / 2 rows.
template <int Tok, int Stages, int Red, bool Hint, bool Pdl, class Math, int Rows = BN, int Prefetch = 0,
          int TokenBlocks = 1>
__device__ void gemv(const TensorMap& tw, const TensorMap& tx, __nv_bfloat16* C, const float* scale,
                     u64* stamps, int M, int N, int K, int ldc) {
  using Sh = Shape<Tok, Stages, Math, Rows>;
  constexpr int MT = Sh::MT, PB = Sh::PB;
  extern __shared__ unsigned char raw[];
  unsigned char* smem = align_up<1024>(raw);
  u64* full = reinterpret_cast<u64*>(smem + Sh::RING);
  u64* empty = full + Stages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, tid = threadIdx.x;
  static_assert(TokenBlocks == 1 || TokenBlocks == 2, "the tokens go to one block or to two");
  const int n0 = blockIdx.x * Rows, S = gridDim.y, split = blockIdx.y, half = TokenBlocks > 1 ? blockIdx.z : 0;
  const int cs = Red == 0 ? split : 0, cS = Red == 0 ? S : 1;   // this block's place in the cluster's y extent
  const u32 peer = cs + cS * (1 - half);           // the other block of the pair (TokenBlocks 2)
  const int tok0 = half * Tok, wrow = n0 + half * (Rows / TokenBlocks);   // its first token, its first row to load
  if (TokenBlocks > 1) {                           // from here on C and M are this block's tokens
    C += (size_t)tok0 * ldc;
    M = M - tok0 < Tok ? M - tok0 : Tok;
  }
  const int ktiles = (K + Sh::KT - 1) / Sh::KT;
  const int kt0 = int((long long)split * ktiles / S), kt1 = int((long long)(split + 1) * ktiles / S);
  const int iters = kt1 - kt0;
  if (stamps && tid == 0) atomicMin(&stamps[0], globaltimer());
  if (tid == 0) {
    for (int s = 0; s < Stages; ++s) {
      mbar::init(&full[s], 1);
      mbar::init(&empty[s], 4 * TokenBlocks);   // one arrival per consumer warp of each block that reads the tile
    }
    mbar::fence_init();
  }
  if (Pdl) launch_dependents();
  if (TokenBlocks > 1) cluster_sync();  // the peer's barriers are initialised before anything lands on them
  else __syncthreads();

  float acc[MT][Tok / 8][4];          // consumers: fragment (mt, j) of weight rows tile_row(w, mt).., tokens 8j..
  if (warp == 4) {                   // ---- producer: one thread streams the tiles
    if (lane == 0) {
      tma::prefetch_tensormap(tw);
      tma::prefetch_tensormap(tx);
      const u64 pw = policy_evict_first(), px = policy_evict_last();
      auto load_w = [&](int it) {
        const int s = it % Stages;
        mbar::arrive_expect_tx(&full[s], Sh::STAGE);
        for (int b = 0; b < Sh::W_BOXES; ++b) {        // the stage's boxes, side by side along k
          const int k = (kt0 + it) * Sh::KT + b * BoxK<Math>::value;   // in weight elements
          unsigned char* box = smem + s * Sh::STAGE + b * Sh::W_BOX;
          if (TokenBlocks > 1) {            // this block's half of the rows, to the same offset in both blocks
            unsigned char* dst = box + half * (Rows / 2) * 128;
            const unsigned short both = (1u << cs) | (1u << (cs + cS));
            if (Hint) load_2d_hint<true>(dst, tw, k, wrow, &full[s], pw, both);
            else tma::load_2d_multicast(dst, tw, k, wrow, &full[s], both);
          } else if (Hint) {
            load_2d_hint(box, tw, k, n0, &full[s], pw);
          } else {
            tma::load_2d(box, tw, k, n0, &full[s]);
          }
        }
        if (Prefetch > 0) {            // keep the Prefetch stages after the ring's requested into the L2
          const int first = it == Stages - 1 ? Stages : it + Prefetch, last = it + Prefetch;
          for (int p = it >= Stages - 1 ? first : last + 1; p <= last && p < iters; ++p)
            for (int b = 0; b < Sh::W_BOXES; ++b) prefetch_2d(tw, (kt0 + p) * Sh::KT + b * BoxK<Math>::value, wrow);
        }
      };
      const int early = Pdl ? (iters < Stages ? iters : Stages) : 0;
      for (int it = 0; it < early; ++it) load_w(it);
      if (Pdl) wait_dependencies();
      for (int it = 0; it < iters; ++it) {
        const int s = it % Stages;
        if (it >= early) {
          if (TokenBlocks > 1) mbar::wait_cluster(&empty[s], ((it / Stages) & 1) ^ 1, "empty", s);   // remote arrivals
          else mbar::wait(&empty[s], ((it / Stages) & 1) ^ 1, "empty", s);
          load_w(it);
        }
        unsigned char* xs = smem + s * Sh::STAGE + Sh::W_BYTES;
        for (int b = 0; b < Sh::X_BOXES; ++b) {
          const int k = (kt0 + it) * Sh::KT + 64 * b;
          if (Hint) load_2d_hint(xs + b * Tok * 128, tx, k, tok0, &full[s], px);
          else tma::load_2d(xs + b * Tok * 128, tx, k, tok0, &full[s]);
        }
      }
    }
  } else {                           // ---- consumers: warp w owns the rows tile_row(w, mt) + 0 .. 15 of each tile mt
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < Tok / 8; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;
    for (int it = 0; it < iters; ++it) {
      const int s = it % Stages;
      mbar::wait(&full[s], (it / Stages) & 1, "full", s);
      const u32 w = smem_addr(smem + s * Sh::STAGE);
      Math::template stage<Tok>(acc, w, w + Sh::W_BYTES, warp, lane);   // returns when the stage has been read
      fence_proxy_async();           // this lane's reads (ldmatrix: generic proxy) before the TMA refill (async proxy)
      __syncwarp();
      if (lane == 0) {
        mbar::arrive(&empty[s]);
        if (TokenBlocks > 1) {         // the peer multicasts into this slot too
          // wgmma policies have waited for their reads (wgmma.wait_group): a relaxed arrival says enough. ldmatrix
          // reads are ordered before the peer's write only by a release at cluster scope (a MEMBAR.ALL.GPU).
          if (WarpgroupRows<Math>::value) mbar::arrive_remote_relaxed(&empty[s], peer);
          else mbar::arrive_remote_release(&empty[s], peer);
        }
      }
    }
  }
  __syncthreads();                   // (A) every consumer is past its last stage: the ring is free
  if (warp < 4) {
    // Fragment (mt, j): rows tile_row(w, mt) + g (+8), tokens 8j + 2t (+1), g = lane / 4, t = lane % 4.
    const int g = lane / 4, t = lane % 4;
    if (Red == 0) {
      float* P = reinterpret_cast<float*>(smem);          // [Tok][PB]
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < Tok / 8; ++j) {
          const int r = tile_row<Math, MT>(warp, mt) + g, m = 8 * j + 2 * t;
          P[m * PB + r] = acc[mt][j][0];
          P[(m + 1) * PB + r] = acc[mt][j][1];
          P[m * PB + r + 8] = acc[mt][j][2];
          P[(m + 1) * PB + r + 8] = acc[mt][j][3];
        }
    } else {
      __nv_bfloat16* P = reinterpret_cast<__nv_bfloat16*>(smem);   // [Tok][Rows], rows of 2 Rows bytes for the TMA unit
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < Tok / 8; ++j) {
          const int r = tile_row<Math, MT>(warp, mt) + g, m = 8 * j + 2 * t;
          const float s0 = scale && n0 + r < N ? scale[n0 + r] : 1.f;
          const float s1 = scale && n0 + r + 8 < N ? scale[n0 + r + 8] : 1.f;
          P[m * Rows + r] = __float2bfloat16(acc[mt][j][0] * s0);
          P[(m + 1) * Rows + r] = __float2bfloat16(acc[mt][j][1] * s0);
          P[m * Rows + r + 8] = __float2bfloat16(acc[mt][j][2] * s1);
          P[(m + 1) * Rows + r + 8] = __float2bfloat16(acc[mt][j][3] * s1);
        }
      fence_proxy_async();           // the TMA unit (async proxy) reads what these threads wrote
    }
  }
  __syncthreads();                   // (B) the partial tile is written

  if (Red == 0) {
    // S = 1: the tile's sum is this block's partial: no barrier before the sum, no distributed shared memory
    // (chapter 10 reports what the two barriers and the remote loads cost).
    const bool alone = S == 1;
    if (!alone) cluster_sync();      // every partial of the cluster is written (release/acquire at cluster scope)
    // This block adds the chunks [lo, hi) of 4 weight rows x 1 token, over the S blocks in rank order.
    const int chunks = M * (Rows / 4), lo = split * chunks / S, hi = (split + 1) * chunks / S;
    const u32 P = smem_addr(smem);
    for (int c = lo + tid; c < hi; c += THREADS) {
      const int m = c / (Rows / 4), r = 4 * (c % (Rows / 4));
      const u32 off = P + (m * PB + r) * 4;
      float4 sum = alone ? *reinterpret_cast<const float4*>(smem + (m * PB + r) * 4)
                         : ld_cluster_f4(mapa_shared_cluster(off, S * half));
      for (int q = 1; q < S; ++q) {
        const float4 v = ld_cluster_f4(mapa_shared_cluster(off, q + S * half));
        sum.x += v.x; sum.y += v.y; sum.z += v.z; sum.w += v.w;
      }
      const float vals[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int n = n0 + r + e;
        if (n < N) C[(size_t)m * ldc + n] = __float2bfloat16(scale ? vals[e] * scale[n] : vals[e]);
      }
    }
    // No block leaves while a peer still reads its shared memory, or (two token blocks) may still arrive on its
    // barriers.
    if (!alone || TokenBlocks > 1) cluster_sync();
  } else {
    if (tid < M) {
      const int cols = N - n0 < Rows ? N - n0 : Rows;
      reduce_add_bf16(C + (size_t)tid * ldc + n0, smem + tid * Rows * 2, cols * 2);
      tma::commit_group();
      tma::wait_group_read<0>();     // the shared memory read before the block exits
    }
    if (TokenBlocks > 1) cluster_sync();  // no block leaves while its peer may still arrive on its barriers
  }
  if (stamps && tid == 0) atomicMax(&stamps[1], globaltimer());
}

}  // namespace decode
}  // namespace fb
