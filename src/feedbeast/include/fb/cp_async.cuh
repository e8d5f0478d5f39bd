// cp.async: global -> shared copies that do not pass through registers (sm_80 and later).
//
// PTX ISA, "Data Movement and Conversion Instructions: cp.async", "cp.async.commit_group",
// "cp.async.wait_group". Chapter 03 teaches these one by one; later chapters include this header.
//
//   fb::cp_async_cg16(dst_smem, src_gmem, src_bytes);   // 16 B, cached in L2 only; bytes past
//                                                       // src_bytes are written as zeros
//   fb::cp_async_ca<4|8|16>(dst_smem, src_gmem, src_bytes);   // cached in L1 and L2
//   fb::cp_async_commit();          // close the group of copies issued since the last commit
//   fb::cp_async_wait<N>();         // wait until at most N of my groups are still pending
//
// A wait covers only the copies of the calling thread. Copies of other threads become visible after
// a barrier that every copying thread reaches after its own wait (e.g. __syncthreads()).
#pragma once
#include <fb/hazard.cuh>
#include <fb/smem.cuh>

namespace fb {

// 16 bytes, .cg (bypass L1). src_bytes in [0, 16]: only that many bytes are read from global
// memory, the rest of the 16 destination bytes are zero-filled. With src_bytes == 0 nothing is read.
__device__ __forceinline__ void cp_async_cg16(void* dst_smem, const void* src_gmem, int src_bytes = 16 FB_HZ_LINE) {
  FB_HZ_RECORD(fb::hazard::kCpAsync, smem_addr(dst_smem), 16, 0, 0);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :: "r"(smem_addr(dst_smem)), "l"(src_gmem), "r"(src_bytes) : "memory");
}

// 4, 8 or 16 bytes, .ca (allocate in L1 too); the same zero-fill rule. (.cg allows only 16.)
template <int Bytes>
__device__ __forceinline__ void cp_async_ca(void* dst_smem, const void* src_gmem, int src_bytes = Bytes FB_HZ_LINE) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
  FB_HZ_RECORD(fb::hazard::kCpAsync, smem_addr(dst_smem), Bytes, 0, 0);
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n"
               :: "r"(smem_addr(dst_smem)), "l"(src_gmem), "n"(Bytes), "r"(src_bytes) : "memory");
}

// Everything this thread issued since the previous commit becomes one group.
__device__ __forceinline__ void cp_async_commit(FB_HZ_LINE_PARAM) {
  FB_HZ_RECORD(fb::hazard::kCpAsyncCommit, 0, 0, 0, 0);
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Block this thread until at most `Pending` of its committed groups are incomplete (groups complete
// in commit order). Pending must be a compile-time constant.
template <int Pending>
__device__ __forceinline__ void cp_async_wait(FB_HZ_LINE_PARAM) {
  static_assert(Pending >= 0, "cp.async.wait_group takes a count >= 0");
  asm volatile("cp.async.wait_group %0;\n" :: "n"(Pending) : "memory");
  FB_HZ_RECORD(fb::hazard::kCpAsyncWait, 0, Pending, 0, 0);
}

// Wait for every copy this thread has issued (committed or not).
__device__ __forceinline__ void cp_async_wait_all(FB_HZ_LINE_PARAM) {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  FB_HZ_RECORD(fb::hazard::kCpAsyncWait, 0, 0xffffffffu, 0, 0);
}

}  // namespace fb
