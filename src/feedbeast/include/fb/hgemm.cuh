// Building blocks of the Hopper GEMMs of chapters 06 and 07 (sm_90a): the 64x256 wgmma, register
// reallocation, named barriers, cluster operations and the two epilogues (direct stores; staging in
// shared memory for a TMA store). Each is one small device function; the chapters explain them.
#pragma once
#include <cuda_bf16.h>
#include <cuda/std/cstdint>
#include <fb/tma.cuh>
#include <fb/wgmma.cuh>

namespace fb {
namespace hgemm {
using u32 = cuda::std::uint32_t;
using u64 = cuda::std::uint64_t;

// D(64x256, fp32) (+)= A(64x16) * B(16x256), both bf16 K-major in shared memory (128 B swizzle).
// accumulate = 0 overwrites D (the first K step of a tile), 1 adds to it.
__device__ inline void mma_m64n256k16_bf16(float (&d)[128], cuda::std::uint64_t desc_a,
                                           cuda::std::uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// setmaxnreg (PTX ISA "setmaxnreg"): give registers back (dec) or take them (inc), per warpgroup.
// ptxas honours it only with __launch_bounds__(threads, 1) and one role per branch of an if/else.
template <int N> __device__ inline void release_registers() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N)); }
template <int N> __device__ inline void claim_registers() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N)); }

// bar.sync on a named barrier (1..15; 0 is __syncthreads) among `threads` threads (a multiple of 32).
__device__ inline void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- clusters (PTX ISA: %cluster_ctarank, barrier.cluster, mapa, mbarrier.arrive .shared::cluster,
// ---- cp.async.bulk.tensor .multicast::cluster)
__device__ inline u32 cluster_rank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ inline void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// Arrive on the mbarrier at the same shared-memory offset in CTA `rank` of this cluster.
__device__ inline void arrive_cluster(u64* bar, u32 rank) {
  u32 local = static_cast<u32>(__cvta_generic_to_shared(bar)), remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
// One box written to the same offset of every CTA in `mask`; each destination's barrier gets the bytes.
__device__ inline void load_2d_multicast(void* dst, const TensorMap& map, int c0, int c1, u64* bar,
                                         cuda::std::uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(static_cast<u32>(__cvta_generic_to_shared(dst))),
      "l"(&map), "r"(c0), "r"(c1), "r"(static_cast<u32>(__cvta_generic_to_shared(bar))), "h"(mask)
      : "memory");
}

// ---- epilogues: a warpgroup's 64x256 fp32 accumulator (wgmma D fragment) as bf16 --------------
// Straight to global memory, dropping what lies outside M x N.
__device__ inline void store_tile_bf16(const float (&d)[128], __nv_bfloat16* C, int M, int N, int row0, int col0) {
  const int t = threadIdx.x % 128;
#pragma unroll
  for (int i = 0; i < 128; i += 2) {
    int r, c;
    wgmma::accumulator_row_col(t, i, r, c);
    r += row0;
    c += col0;
    if (r >= M) continue;
    __nv_bfloat16* p = C + static_cast<size_t>(r) * N + c;
    if ((N % 2) == 0 && c + 1 < N) {
      *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(d[i], d[i + 1]);
    } else {
      if (c < N) p[0] = __float2bfloat16_rn(d[i]);
      if (c + 1 < N) p[1] = __float2bfloat16_rn(d[i + 1]);
    }
  }
}

// Into shared memory as four 64x64 panels in the 128-byte swizzle a TMA store with swizzle=128 reads:
// the 16-byte chunk j of row r sits at chunk j ^ (r % 8), which spreads a warp's writes over the banks.
__device__ inline void stage_tile_bf16(const float (&d)[128], unsigned char* panels) {
  const int t = threadIdx.x % 128;
#pragma unroll
  for (int i = 0; i < 128; i += 2) {
    int r, c;
    wgmma::accumulator_row_col(t, i, r, c);
    const int panel = c / 64, byte = (c % 64) * 2;
    const int off = panel * 64 * 128 + r * 128 + (((byte / 16) ^ (r % 8)) * 16) + byte % 16;
    *reinterpret_cast<__nv_bfloat162*>(panels + off) = __floats2bfloat162_rn(d[i], d[i + 1]);
  }
}
}  // namespace hgemm
}  // namespace fb
