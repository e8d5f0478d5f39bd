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

// The accumulator operands of a wgmma asm statement, written once for every shape: the PTX register list of
// D in blocks of 32 (%0-%31, %32-%63, ...) and the matching "+f" constraints on d[b], ..., d[b + 31].
// An m64nNk16 instruction with N/2 accumulator registers joins N/64 of each, separated by ", ".
#define FB_WGMMA_REGS_0_31                                                                          \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                          \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FB_WGMMA_REGS_32_63                                                                         \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define FB_WGMMA_REGS_64_95                                                                         \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define FB_WGMMA_REGS_96_127                                                                        \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "    \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define FB_WGMMA_D8(d, b)                                                                           \
  "+f"(d[(b) + 0]), "+f"(d[(b) + 1]), "+f"(d[(b) + 2]), "+f"(d[(b) + 3]), "+f"(d[(b) + 4]),         \
      "+f"(d[(b) + 5]), "+f"(d[(b) + 6]), "+f"(d[(b) + 7])
#define FB_WGMMA_D32(d, b) FB_WGMMA_D8(d, (b) + 0), FB_WGMMA_D8(d, (b) + 8), FB_WGMMA_D8(d, (b) + 16), \
                           FB_WGMMA_D8(d, (b) + 24)

// D(64x128, fp32) (+)= A(64x16, bf16, from desc_a) * B(16x128, bf16, from desc_b, stored N x K).
// accumulate = 0 overwrites D (the first K step), 1 adds to it. (wgmma.mma_async .m64n128k16 .f32.bf16.bf16)
__device__ inline void mma_m64n128k16_bf16(float (&d)[64], u64 desc_a, u64 desc_b, int accumulate = 1 FB_HZ_LINE) {
  FB_HZ_RECORD_WARPGROUP(fb::hazard::kWgmmaRead, descriptor_tile_start(desc_a), 64 * 128, 0, 0);
  FB_HZ_RECORD_WARPGROUP(fb::hazard::kWgmmaRead, descriptor_tile_start(desc_b), 128 * 128, 0, 0);
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" FB_WGMMA_REGS_0_31 ", " FB_WGMMA_REGS_32_63
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : FB_WGMMA_D32(d, 0), FB_WGMMA_D32(d, 32)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// D(64x256, fp32) (+)= A(64x16, bf16, from desc_a) * B(16x256, bf16, from desc_b, stored N x K).
// accumulate = 0 overwrites D (the first K step), 1 adds to it. (wgmma.mma_async .m64n256k16 .f32.bf16.bf16)
__device__ inline void mma_m64n256k16_bf16(float (&d)[128], u64 desc_a, u64 desc_b, int accumulate FB_HZ_LINE) {
  FB_HZ_RECORD_WARPGROUP(fb::hazard::kWgmmaRead, descriptor_tile_start(desc_a), 64 * 128, 0, 0);
  FB_HZ_RECORD_WARPGROUP(fb::hazard::kWgmmaRead, descriptor_tile_start(desc_b), 256 * 128, 0, 0);
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" FB_WGMMA_REGS_0_31 ", " FB_WGMMA_REGS_32_63
      ", " FB_WGMMA_REGS_64_95 ", " FB_WGMMA_REGS_96_127 "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : FB_WGMMA_D32(d, 0), FB_WGMMA_D32(d, 32), FB_WGMMA_D32(d, 64), FB_WGMMA_D32(d, 96)
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
