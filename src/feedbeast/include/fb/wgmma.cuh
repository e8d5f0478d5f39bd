// wgmma (sm_90a): warpgroup matrix multiply-accumulate reading its operands from shared memory through
// 64-bit matrix descriptors, accumulating in registers. Chapter 05 explains every field.
//
// Only what the course's GEMMs use: bf16 x bf16 -> fp32, both operands K-major in shared memory, laid out
// by a TMA load with the 128-byte swizzle (rows of 64 bf16 = 128 B, 8-row atoms of 1024 B).
// PTX ISA: "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions" (wgmma.fence,
// wgmma.mma_async, wgmma.commit_group, wgmma.wait_group) and "Matrix Descriptor Format".
#pragma once
#include <cuda/std/cstdint>
#include <fb/hazard.cuh>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "fb/wgmma.cuh needs the arch-specific Hopper target: compile with --arch sm_90a"
#endif

namespace fb {
namespace wgmma {
using u64 = cuda::std::uint64_t;

// PTX ISA, "Matrix Descriptor Format" (wgmma): a 64-bit value
//   bits  0-13  start address        >> 4   (shared-memory byte address)
//   bits 16-29  leading byte offset  >> 4   (LBO)
//   bits 32-45  stride byte offset   >> 4   (SBO)
//   bits 49-51  base offset                 (0: our tiles start on 1024 B boundaries)
//   bits 62-63  swizzle mode: 0 none, 1 128-byte, 2 64-byte, 3 32-byte
__device__ inline u64 descriptor_field(u64 bytes) { return (bytes & 0x3FFFF) >> 4; }

// A K-major tile with the 128-byte swizzle: 8-row core-matrix groups are 1024 B apart (SBO); the
// leading offset is not used for swizzled K-major layouts and is set to 16 B (encoded 1) by convention.
// `tile` may point 32*j bytes into a 1024-aligned tile to select the j-th 16-wide K slice.
__device__ inline u64 descriptor_k_major_sw128(const void* tile) {
  const u64 addr = static_cast<u64>(__cvta_generic_to_shared(tile));
  return descriptor_field(addr) | (descriptor_field(16) << 16) | (descriptor_field(1024) << 32) | (1ull << 62);
}
// The first byte of the 128-byte rows a K-major SW128 descriptor reads (its start, less the K slice).
__device__ inline unsigned descriptor_tile_start(u64 desc) {
  return static_cast<unsigned>((desc & 0x3FFF) << 4) & ~127u;
}

// wgmma.fence: order register accesses before the wgmma that follow (required before the first wgmma of
// a batch, and whenever registers it reads were written by other instructions).
__device__ inline void fence(FB_HZ_LINE_PARAM) {
  FB_HZ_RECORD_WARPGROUP(fb::hazard::kWgmmaFence, 0, 0, 0, 0);
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
// wgmma.commit_group: close the batch of wgmma issued so far into one group.
__device__ inline void commit_group(FB_HZ_LINE_PARAM) {
  FB_HZ_RECORD_WARPGROUP(fb::hazard::kWgmmaCommit, 0, 0, 0, 0);
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// wgmma.wait_group N: wait until at most N groups are still running. Only then have the wgmma of the
// older groups finished reading their shared-memory operands (and writing their accumulators).
template <int N> __device__ inline void wait_group(FB_HZ_LINE_PARAM) {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
  FB_HZ_RECORD(fb::hazard::kWgmmaWait, 0, N, 0, 0);
}
// Keep the compiler from moving accesses to accumulator registers across the asm statements above.
template <int R> __device__ inline void fence_operand(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D(64x128, fp32) (+)= A(64x16, bf16, from desc_a) * B(16x128, bf16, from desc_b, stored N x K).
// accumulate = 0 overwrites D (the first K step), 1 adds to it. (wgmma.mma_async .m64n128k16 .f32.bf16.bf16)
__device__ inline void mma_m64n128k16_bf16(float (&d)[64], u64 desc_a, u64 desc_b, int accumulate = 1 FB_HZ_LINE) {
  FB_HZ_RECORD_WARPGROUP(fb::hazard::kWgmmaRead, descriptor_tile_start(desc_a), 64 * 128, 0, 0);
  FB_HZ_RECORD_WARPGROUP(fb::hazard::kWgmmaRead, descriptor_tile_start(desc_b), 128 * 128, 0, 0);
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// D(64x256, fp32) (+)= A(64x16, bf16, from desc_a) * B(16x256, bf16, from desc_b, stored N x K).
// accumulate = 0 overwrites D (the first K step), 1 adds to it. (wgmma.mma_async .m64n256k16 .f32.bf16.bf16)
__device__ inline void mma_m64n256k16_bf16(float (&d)[128], u64 desc_a, u64 desc_b, int accumulate FB_HZ_LINE) {
  FB_HZ_RECORD_WARPGROUP(fb::hazard::kWgmmaRead, descriptor_tile_start(desc_a), 64 * 128, 0, 0);
  FB_HZ_RECORD_WARPGROUP(fb::hazard::kWgmmaRead, descriptor_tile_start(desc_b), 256 * 128, 0, 0);
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// Which element of the 64xN fp32 result register d[i] of thread t (0..127 in the warpgroup) holds
// (PTX ISA, "Register Fragments and Shared Memory Matrix Layouts", wgmma .m64nNk16 D fragment):
// warp w = t/32 owns rows 16w..16w+15; in each 8-column block j = i/4, a thread holds two pairs of
// neighbouring columns, the second pair 8 rows below the first. constexpr: tests evaluate it at compile time.
__host__ __device__ constexpr void accumulator_row_col(int t, int i, int& row, int& col) {
  // BEGIN FRAGMENT MAP
  row = 16 * (t / 32) + (t % 32) / 4 + 8 * ((i % 4) / 2);
  col = 8 * (i / 4) + 2 * (t % 4) + (i % 2);
  // END FRAGMENT MAP
}
}  // namespace wgmma
}  // namespace fb
