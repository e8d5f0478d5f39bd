// Epilogues of the Hopper GEMMs (chapters 06 and 07): a warpgroup's 64x256 fp32 wgmma accumulator written
// out as bf16, either straight to global memory or staged in shared memory for a TMA store.
#pragma once
#include <cuda_bf16.h>
#include <fb/hazard.cuh>
#include <fb/wgmma.cuh>

namespace fb {
namespace epilogue {

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
// These are ordinary stores: fb::fence_proxy_async() must come between them and the TMA store.
__device__ inline void stage_tile_bf16(const float (&d)[128], unsigned char* panels FB_HZ_LINE) {
  FB_HZ_RECORD(fb::hazard::kGenericWrite, fb::hazard::addr(panels), 4 * 64 * 128, 0, 0);
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

}  // namespace epilogue
}  // namespace fb
