// tcgen05 (Blackwell, sm_100a): the 5th-generation tensor core instructions, tensor memory (TMEM),
// and the mbarrier / TMA / cluster-launch-control helpers a warp-specialized Blackwell GEMM needs.
// Chapter 08 explains every function; each names the PTX ISA section it follows.
//
// Only what the course's GEMM uses: bf16 x bf16 -> fp32, one CTA per MMA (cta_group::1), both operands
// K-major in shared memory, laid out by a TMA load with the 128-byte swizzle (rows of 64 bf16 = 128 B,
// 8-row atoms of 1024 B), the accumulator in TMEM.
//
// tcgen05 is written here as raw PTX (one asm statement per instruction, so the chapter can show it);
// clusterlaunchcontrol uses CCCL's cuda::ptx wrappers; mbarrier and TMA are fb/mbarrier.cuh and fb/tma.cuh.
#pragma once
#include <cuda/ptx>
#include <cuda/std/cstdint>
#include <fb/debug.cuh>
#include <fb/mbarrier.cuh>
#include <fb/smem.cuh>
#include <fb/tma.cuh>

// tcgen05 is in the arch-specific targets sm_100a, sm_103a, sm_110a and their families (sm_100f, sm_103f, sm_110f),
// not in sm_120a or the portable sm_100 (PTX ISA, "tcgen05" target notes). The course builds sm_100a.
#if defined(__CUDA_ARCH__) && !(defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM103_ALL) ||     \
                                defined(__CUDA_ARCH_FEAT_SM110_ALL) ||                                              \
                                (defined(__CUDA_ARCH_FAMILY_SPECIFIC__) &&                                         \
                                 (__CUDA_ARCH_FAMILY_SPECIFIC__ == 1000 || __CUDA_ARCH_FAMILY_SPECIFIC__ == 1030 || \
                                  __CUDA_ARCH_FAMILY_SPECIFIC__ == 1100)))
#error "fb/tcgen05.cuh needs a Blackwell target with tcgen05: compile with --arch sm_100a (the course's Blackwell target)"
#endif

namespace fb {

namespace tc {
using u32 = cuda::std::uint32_t;
using u64 = cuda::std::uint64_t;

// The tensor map and TMA loads (fb::TensorMap, fb::tma::load_2d) and the barriers (fb::mbar::init, wait,
// arrive_expect_tx) are chapters 04 and 05's; they work unchanged on sm_100a.

// ---- Tensor memory (PTX ISA: "Tensor Memory", "tcgen05.alloc / tcgen05.dealloc /
//      tcgen05.relinquish_alloc_permit") -----------------------------------------------------------
// TMEM is 128 lanes x 512 columns of 32-bit cells per CTA. An address is (lane << 16) | column.
// Allocation is by columns (all 128 lanes): nCols a power of 2 from 32 to 512. The whole warp executes
// alloc (.sync.aligned); the base address is written to shared memory at `dst`.
__device__ inline void tmem_alloc(u32* dst, u32 ncols) {
  asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;" ::"r"(smem_addr(dst)),
               "r"(ncols)
               : "memory");
}
// After this, the CTA may not allocate again (PTX ISA); CUTLASS calls it before its deallocations so that the
// next CTA can be launched on the SM.
__device__ inline void tmem_relinquish_alloc_permit() {
  asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
}
// Whole warp; everything allocated must be freed before the CTA exits.
__device__ inline void tmem_dealloc(u32 taddr, u32 ncols) {
  asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" ::"r"(taddr), "r"(ncols) : "memory");
}
__device__ inline u32 tmem_at(u32 base, u32 lane, u32 column) { return base + (lane << 16) + column; }

// ---- Descriptors (PTX ISA: "Instruction descriptor", "Shared memory descriptor") -----------------
// Instruction descriptor for .kind::f16, dense, bf16 A and B, fp32 D, both operands K-major:
//   bits  4-5  D type (1 = f32)        bits  7-9  A type (1 = bf16)     bits 10-12  B type (1 = bf16)
//   bit  13/14 negate A/B (0)          bit  15/16 A/B MN-major (0 = K-major)
//   bits 17-22 N >> 3                  bits 24-28 M >> 4                (other bits 0)
// cta_group::1 with M = 128 needs N a multiple of 16 from 16 to 256; M = 64 a multiple of 8 from 8 to 256 (PTX ISA,
// tcgen05.mma, "Matrix shape"). Another shape is not encoded: evaluated as a constant (`constexpr u32 idesc = ...`)
// it fails to compile on the call below, whose name says the rule; at run time the kernel traps.
__host__ __device__ inline u32 tcgen05_mma_shape_needs_M64_N8_to_256_by_8_or_M128_N16_to_256_by_16(int, int) {
#ifdef __CUDA_ARCH__
  __trap();
#endif
  return 0;
}
__host__ __device__ constexpr bool mma_shape_ok(int m, int n) {
  return n <= 256 && ((m == 64 && n >= 8 && n % 8 == 0) || (m == 128 && n >= 16 && n % 16 == 0));
}
__host__ __device__ constexpr u32 instr_desc_bf16_f32(int m, int n) {
  return mma_shape_ok(m, n) ? (1u << 4) | (1u << 7) | (1u << 10) | (u32(n >> 3) << 17) | (u32(m >> 4) << 24)
                            : tcgen05_mma_shape_needs_M64_N8_to_256_by_8_or_M128_N16_to_256_by_16(m, n);
}

// Shared memory descriptor (64 bits):
//   bits  0-13 start address >> 4      bits 16-29 leading byte offset >> 4 (LBO)
//   bits 32-45 stride byte offset >> 4 (SBO)      bits 46-48 fixed 0b001 (new on tcgen05)
//   bits 49-51 base offset (0: our tiles start on 1024 B boundaries)   bit 52 LBO mode (0)
//   bits 61-63 swizzle: 0 none, 1 128 B with 32 B atoms, 2 128 B, 4 64 B, 6 32 B
__device__ inline u64 desc_field(u64 bytes) { return (bytes & 0x3FFFF) >> 4; }

// A K-major tile written by TMA with the 128-byte swizzle: 8-row groups are 1024 B apart (SBO); LBO is
// not used for swizzled K-major layouts and is set to 16 B (encoded 1). `tile` may point 32*j bytes
// into a 1024-aligned tile to select the j-th 16-element K slice (the swizzle is applied to addresses).
__device__ inline u64 smem_desc_k_major_sw128(const void* tile) {
  return desc_field(smem_addr(tile)) | (desc_field(16) << 16) | (desc_field(1024) << 32) | (1ull << 46) |
         (2ull << 61);
}

// ---- MMA (PTX ISA: "tcgen05.mma", "tcgen05.commit") ----------------------------------------------
// D[tmem] (+)= A[smem] * B[smem]^T, one instruction for the whole 128 x N x 16 step, issued by ONE thread.
// accumulate = false overwrites D (first K step). Asynchronous: nothing waits for it here.
__device__ inline void mma_bf16(u32 d_tmem, u64 a_desc, u64 b_desc, u32 idesc, bool accumulate FB_HZ_LINE) {
  // hazard build: the operand tiles it reads (rows of 128 B from the descriptor's start; M, N from idesc)
  FB_HZ_RECORD(fb::hazard::kTcgen05Mma, u32((a_desc & 0x3FFF) << 4) & ~127u, ((idesc >> 24) & 0x1F) * 16 * 128, 0, 0);
  FB_HZ_RECORD(fb::hazard::kTcgen05Mma, u32((b_desc & 0x3FFF) << 4) & ~127u, ((idesc >> 17) & 0x3F) * 8 * 128, 0, 0);
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
      "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n}\n" ::"r"(d_tmem),
      "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(u32(accumulate))
      : "memory");
}
// One arrival on `bar` once every tcgen05.mma (and tcgen05.cp) this thread issued before has completed:
// the smem operands may then be overwritten, and the accumulator is ready to read.
__device__ inline void commit(u64* bar FB_HZ_LINE) {
  FB_HZ_RECORD(fb::hazard::kTcgen05Commit, smem_addr(bar), 0, 0, 0);
  asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
               ::"r"(smem_addr(bar)) : "memory");
}

// ---- Ordering around thread synchronization (PTX ISA: "tcgen05.fence") ----------------------------
// before_thread_sync: order this thread's earlier tcgen05 operations before a following barrier/arrive.
// after_thread_sync: order later tcgen05 operations after a preceding barrier/wait.
__device__ inline void fence_before_thread_sync() { asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory"); }
__device__ inline void fence_after_thread_sync() { asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory"); }

// ---- TMEM -> registers (PTX ISA: "tcgen05.ld", "tcgen05.wait") ------------------------------------
// Warp-wide. Shape 32x32b, x32: thread t gets 32 consecutive 32-bit columns of TMEM lane (lane0 + t).
// A warp may only touch the 32-lane quarter 32*(warp_id % 4) .. +31 of TMEM.
__device__ inline void ld_32x32b_x32(u32 taddr, u32 (&r)[32]) {
  asm volatile(
      "tcgen05.ld.sync.aligned.32x32b.x32.b32 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, [%32];"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7]),
        "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]), "=r"(r[14]), "=r"(r[15]),
        "=r"(r[16]), "=r"(r[17]), "=r"(r[18]), "=r"(r[19]), "=r"(r[20]), "=r"(r[21]), "=r"(r[22]), "=r"(r[23]),
        "=r"(r[24]), "=r"(r[25]), "=r"(r[26]), "=r"(r[27]), "=r"(r[28]), "=r"(r[29]), "=r"(r[30]), "=r"(r[31])
      : "r"(taddr)
      : "memory");
}
// The registers of earlier tcgen05.ld are valid only after this.
__device__ inline void wait_ld() { asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory"); }

// ---- Cluster launch control (PTX ISA: "clusterlaunchcontrol") -------------------------------------
// Ask to cancel a cluster of this grid that has not started yet; the 16-byte answer lands at `response`
// (16 B aligned, shared memory) and completes 16 bytes of transactions on `bar`.
__device__ inline void clc_try_cancel(void* response, u64* bar) {
  cuda::ptx::clusterlaunchcontrol_try_cancel(response, bar);
}
// Read the answer (after waiting on `bar`): true and the first CTA's x index of the canceled cluster,
// or false (no cluster left to take: stop asking, a later try_cancel would be undefined).
__device__ inline bool clc_query(const void* response, int* first_ctaid_x) {
  const longlong2 v = *reinterpret_cast<const longlong2*>(response);
  const bool ok = cuda::ptx::clusterlaunchcontrol_query_cancel_is_canceled(v);
  if (ok) *first_ctaid_x = int(cuda::ptx::clusterlaunchcontrol_query_cancel_get_first_ctaid_x<u32>(v));
  return ok;
}

}  // namespace tc
}  // namespace fb
