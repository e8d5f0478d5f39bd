// wgmma (sm_90a): warpgroup matrix multiply-accumulate reading its operands from shared memory through
// 64-bit matrix descriptors, accumulating in registers. Chapter 05 explains every field.
//
// The course's GEMMs use bf16 x bf16 -> fp32 with both operands K-major in shared memory, laid out by a TMA
// load with the 128-byte swizzle (rows of 64 bf16 = 128 B, 8-row atoms of 1024 B); attention (chapter 09) adds
// A in registers, MN-major operands and e4m3. One template, Shape<N>, serves every N.
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
__device__ inline u64 descriptor_k_major_sw128_at(unsigned smem_addr) {   // from a shared-memory byte address
  return descriptor_field(smem_addr) | (descriptor_field(16) << 16) | (descriptor_field(1024) << 32) | (1ull << 62);
}
__device__ inline u64 descriptor_k_major_sw128(const void* tile) {
  return descriptor_k_major_sw128_at(static_cast<unsigned>(__cvta_generic_to_shared(tile)));
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

// ---- one wgmma template over N ------------------------------------------------------------------------
// PTX ISA, "wgmma.mma_async": an m64nNk16 (bf16) or m64nNk32 (e4m3) wgmma with f32 accumulators has N/2 D
// registers per thread, for N = 8, 16, ..., 256. An asm statement names each one (%0 .. %(N/2 - 1)) and binds
// each to d[i]; the operands after them are %(N/2), %(N/2 + 1), ... An asm string must be a literal, so the
// preprocessor writes both lists: the operand numbers are written once below, in blocks of four (N/2 is a
// multiple of 4), and FB_WGMMA_SHAPES lists N with its number of blocks k = N/8 and the block after them.
#define FB_WGMMA_B0 0, 1, 2, 3
#define FB_WGMMA_B1 4, 5, 6, 7
#define FB_WGMMA_B2 8, 9, 10, 11
#define FB_WGMMA_B3 12, 13, 14, 15
#define FB_WGMMA_B4 16, 17, 18, 19
#define FB_WGMMA_B5 20, 21, 22, 23
#define FB_WGMMA_B6 24, 25, 26, 27
#define FB_WGMMA_B7 28, 29, 30, 31
#define FB_WGMMA_B8 32, 33, 34, 35
#define FB_WGMMA_B9 36, 37, 38, 39
#define FB_WGMMA_B10 40, 41, 42, 43
#define FB_WGMMA_B11 44, 45, 46, 47
#define FB_WGMMA_B12 48, 49, 50, 51
#define FB_WGMMA_B13 52, 53, 54, 55
#define FB_WGMMA_B14 56, 57, 58, 59
#define FB_WGMMA_B15 60, 61, 62, 63
#define FB_WGMMA_B16 64, 65, 66, 67
#define FB_WGMMA_B17 68, 69, 70, 71
#define FB_WGMMA_B18 72, 73, 74, 75
#define FB_WGMMA_B19 76, 77, 78, 79
#define FB_WGMMA_B20 80, 81, 82, 83
#define FB_WGMMA_B21 84, 85, 86, 87
#define FB_WGMMA_B22 88, 89, 90, 91
#define FB_WGMMA_B23 92, 93, 94, 95
#define FB_WGMMA_B24 96, 97, 98, 99
#define FB_WGMMA_B25 100, 101, 102, 103
#define FB_WGMMA_B26 104, 105, 106, 107
#define FB_WGMMA_B27 108, 109, 110, 111
#define FB_WGMMA_B28 112, 113, 114, 115
#define FB_WGMMA_B29 116, 117, 118, 119
#define FB_WGMMA_B30 120, 121, 122, 123
#define FB_WGMMA_B31 124, 125, 126, 127
#define FB_WGMMA_B32 128, 129, 130, 131
#define FB_WGMMA_B33 132, 133, 134, 135
#define FB_WGMMA_CALL(X, ...) X(__VA_ARGS__)
// The first k blocks: F applied to block 0, X to each later one (F and X differ only by a leading comma).
#define FB_WGMMA_BLOCKS1(F, X) FB_WGMMA_CALL(F, FB_WGMMA_B0)
#define FB_WGMMA_BLOCKS2(F, X) FB_WGMMA_BLOCKS1(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B1)
#define FB_WGMMA_BLOCKS3(F, X) FB_WGMMA_BLOCKS2(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B2)
#define FB_WGMMA_BLOCKS4(F, X) FB_WGMMA_BLOCKS3(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B3)
#define FB_WGMMA_BLOCKS5(F, X) FB_WGMMA_BLOCKS4(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B4)
#define FB_WGMMA_BLOCKS6(F, X) FB_WGMMA_BLOCKS5(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B5)
#define FB_WGMMA_BLOCKS7(F, X) FB_WGMMA_BLOCKS6(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B6)
#define FB_WGMMA_BLOCKS8(F, X) FB_WGMMA_BLOCKS7(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B7)
#define FB_WGMMA_BLOCKS9(F, X) FB_WGMMA_BLOCKS8(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B8)
#define FB_WGMMA_BLOCKS10(F, X) FB_WGMMA_BLOCKS9(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B9)
#define FB_WGMMA_BLOCKS11(F, X) FB_WGMMA_BLOCKS10(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B10)
#define FB_WGMMA_BLOCKS12(F, X) FB_WGMMA_BLOCKS11(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B11)
#define FB_WGMMA_BLOCKS13(F, X) FB_WGMMA_BLOCKS12(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B12)
#define FB_WGMMA_BLOCKS14(F, X) FB_WGMMA_BLOCKS13(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B13)
#define FB_WGMMA_BLOCKS15(F, X) FB_WGMMA_BLOCKS14(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B14)
#define FB_WGMMA_BLOCKS16(F, X) FB_WGMMA_BLOCKS15(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B15)
#define FB_WGMMA_BLOCKS17(F, X) FB_WGMMA_BLOCKS16(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B16)
#define FB_WGMMA_BLOCKS18(F, X) FB_WGMMA_BLOCKS17(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B17)
#define FB_WGMMA_BLOCKS19(F, X) FB_WGMMA_BLOCKS18(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B18)
#define FB_WGMMA_BLOCKS20(F, X) FB_WGMMA_BLOCKS19(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B19)
#define FB_WGMMA_BLOCKS21(F, X) FB_WGMMA_BLOCKS20(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B20)
#define FB_WGMMA_BLOCKS22(F, X) FB_WGMMA_BLOCKS21(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B21)
#define FB_WGMMA_BLOCKS23(F, X) FB_WGMMA_BLOCKS22(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B22)
#define FB_WGMMA_BLOCKS24(F, X) FB_WGMMA_BLOCKS23(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B23)
#define FB_WGMMA_BLOCKS25(F, X) FB_WGMMA_BLOCKS24(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B24)
#define FB_WGMMA_BLOCKS26(F, X) FB_WGMMA_BLOCKS25(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B25)
#define FB_WGMMA_BLOCKS27(F, X) FB_WGMMA_BLOCKS26(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B26)
#define FB_WGMMA_BLOCKS28(F, X) FB_WGMMA_BLOCKS27(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B27)
#define FB_WGMMA_BLOCKS29(F, X) FB_WGMMA_BLOCKS28(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B28)
#define FB_WGMMA_BLOCKS30(F, X) FB_WGMMA_BLOCKS29(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B29)
#define FB_WGMMA_BLOCKS31(F, X) FB_WGMMA_BLOCKS30(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B30)
#define FB_WGMMA_BLOCKS32(F, X) FB_WGMMA_BLOCKS31(F, X) FB_WGMMA_CALL(X, FB_WGMMA_B31)
#define FB_WGMMA_SHAPES(ROW) \
  ROW(8, 1, 2) ROW(16, 2, 3) ROW(24, 3, 4) ROW(32, 4, 5) \
  ROW(40, 5, 6) ROW(48, 6, 7) ROW(56, 7, 8) ROW(64, 8, 9) \
  ROW(72, 9, 10) ROW(80, 10, 11) ROW(88, 11, 12) ROW(96, 12, 13) \
  ROW(104, 13, 14) ROW(112, 14, 15) ROW(120, 15, 16) ROW(128, 16, 17) \
  ROW(136, 17, 18) ROW(144, 18, 19) ROW(152, 19, 20) ROW(160, 20, 21) \
  ROW(168, 21, 22) ROW(176, 22, 23) ROW(184, 23, 24) ROW(192, 24, 25) \
  ROW(200, 25, 26) ROW(208, 26, 27) ROW(216, 27, 28) ROW(224, 28, 29) \
  ROW(232, 29, 30) ROW(240, 30, 31) ROW(248, 31, 32) ROW(256, 32, 33)
// A block as text ("%0, %1, %2, %3") and as constraints ("+f"(d[0]), ...: the accumulator array is named d).
#define FB_WGMMA_STR_FIRST(a, b, c, e) "%" #a ", %" #b ", %" #c ", %" #e
#define FB_WGMMA_STR_NEXT(a, b, c, e) ", " FB_WGMMA_STR_FIRST(a, b, c, e)
#define FB_WGMMA_OUT_FIRST(a, b, c, e) "+f"(d[a]), "+f"(d[b]), "+f"(d[c]), "+f"(d[e])
#define FB_WGMMA_OUT_NEXT(a, b, c, e) , FB_WGMMA_OUT_FIRST(a, b, c, e)
#define FB_WGMMA_REGS(K) FB_WGMMA_BLOCKS##K(FB_WGMMA_STR_FIRST, FB_WGMMA_STR_NEXT)
#define FB_WGMMA_OUTS(K) FB_WGMMA_BLOCKS##K(FB_WGMMA_OUT_FIRST, FB_WGMMA_OUT_NEXT)
// The instruction text of each form; a .. g are the numbers of the operands after the accumulators.
#define FB_WGMMA_PRED(n) "{\n.reg .pred p;\nsetp.ne.b32 p, %" #n ", 0;\n"
#define FB_WGMMA_SS_BF16(N, REGS, a, b, c, e, f, ...)                                                    \
  FB_WGMMA_PRED(c) "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 {" REGS "}, %" #a ", %" #b \
                   ", p, 1, 1, %" #e ", %" #f ";\n}\n"
#define FB_WGMMA_RS_BF16(N, REGS, a, b, c, e, f, g, h, ...)                                                     \
  FB_WGMMA_PRED(g) "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 {" REGS "}, {%" #a ", %" #b ", %" #c \
                   ", %" #e "}, %" #f ", p, 1, 1, %" #h ";\n}\n"
#define FB_WGMMA_SS_E4M3(N, REGS, a, b, c, ...)                                                          \
  FB_WGMMA_PRED(c) "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 {" REGS "}, %" #a ", %" #b \
                   ", p, 1, 1;\n}\n"
#define FB_WGMMA_RS_E4M3(N, REGS, a, b, c, e, f, ...)                                                           \
  "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 {" REGS "}, {%" #a ", %" #b ", %" #c ", %" #e "}, %" #f \
  ", 1, 1, 1;\n"
#define FB_WGMMA_RS_E4M3_P(N, REGS, a, b, c, e, f, g, ...)                                                        \
  FB_WGMMA_PRED(g) "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 {" REGS "}, {%" #a ", %" #b ", %" #c \
                   ", %" #e "}, %" #f ", p, 1, 1;\n}\n"
#define FB_WGMMA_TEXT(FORM, N, K, NEXT) FB_WGMMA_CALL(FORM, N, FB_WGMMA_REGS(K), FB_WGMMA_B##K, FB_WGMMA_B##NEXT)

// Shape<N>: the forms the course uses, with no hazard recording (the wrappers below and the attention
// headers record what each layout reads). d[N/2] accumulates; accumulate = 0 overwrites it instead.
template <int N> struct Shape;
#define FB_WGMMA_SHAPE(N, K, NEXT)                                                                                   \
  template <> struct Shape<N> {                                                                                      \
    template <int TA, int TB>                                                                                      \
    __device__ static void ss_bf16(float (&d)[N / 2], u64 da, u64 db, int accumulate) {                            \
      asm volatile(FB_WGMMA_TEXT(FB_WGMMA_SS_BF16, N, K, NEXT)                                                      \
                   : FB_WGMMA_OUTS(K) : "l"(da), "l"(db), "r"(accumulate), "n"(TA), "n"(TB));                       \
    }                                                                                                                \
    template <int TB>                                                                                                \
    __device__ static void rs_bf16(float (&d)[N / 2], const unsigned (&a)[4], u64 db, int accumulate) {             \
      asm volatile(FB_WGMMA_TEXT(FB_WGMMA_RS_BF16, N, K, NEXT)                                                      \
                   : FB_WGMMA_OUTS(K)                                                                               \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate), "n"(TB));                \
    }                                                                                                                \
    __device__ static void ss_e4m3(float (&d)[N / 2], u64 da, u64 db, int accumulate) {                             \
      asm volatile(FB_WGMMA_TEXT(FB_WGMMA_SS_E4M3, N, K, NEXT)                                                      \
                   : FB_WGMMA_OUTS(K) : "l"(da), "l"(db), "r"(accumulate));                                         \
    }                                                                                                                \
    __device__ static void rs_e4m3(float (&d)[N / 2], const unsigned (&a)[4], u64 db) {                             \
      asm volatile(FB_WGMMA_TEXT(FB_WGMMA_RS_E4M3, N, K, NEXT)                                                      \
                   : FB_WGMMA_OUTS(K) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));                       \
    }                                                                                                                \
    __device__ static void rs_e4m3(float (&d)[N / 2], const unsigned (&a)[4], u64 db, int accumulate) {             \
      asm volatile(FB_WGMMA_TEXT(FB_WGMMA_RS_E4M3_P, N, K, NEXT)                                                    \
                   : FB_WGMMA_OUTS(K) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));      \
    }                                                                                                                \
  };
FB_WGMMA_SHAPES(FB_WGMMA_SHAPE)
#undef FB_WGMMA_SHAPE

template <int N> __host__ __device__ constexpr bool valid_n() { return N % 8 == 0 && 8 <= N && N <= 256; }
#define FB_WGMMA_CHECK_N(N) \
  static_assert(valid_n<N>(), "wgmma.mma_async .m64nNk16/.m64nNk32: N must be a multiple of 8 from 8 to 256 (PTX ISA)")

// What a K-major SW128 A (64 rows) and B (N rows) tile of 128-byte rows read, for the hazard trace.
__device__ inline void record_k_major(u64 desc_a, u64 desc_b, int n FB_HZ_LINE) {
  FB_HZ_RECORD_WARPGROUP(fb::hazard::kWgmmaRead, descriptor_tile_start(desc_a), 64 * 128, 0, 0);
  FB_HZ_RECORD_WARPGROUP(fb::hazard::kWgmmaRead, descriptor_tile_start(desc_b), n * 128, 0, 0);
}

// D(64xN, fp32) (+)= A(64x16, bf16, from desc_a) * B(16xN, bf16, from desc_b, stored N x K), both K-major
// with the 128-byte swizzle. accumulate = 0 overwrites D (the first K step), 1 adds to it.
template <int N>
__device__ inline void mma(float (&d)[N / 2], u64 desc_a, u64 desc_b, int accumulate = 1 FB_HZ_LINE) {
  FB_WGMMA_CHECK_N(N);
  record_k_major(desc_a, desc_b, N FB_HZ_PASS);
  Shape<N>::template ss_bf16<0, 0>(d, desc_a, desc_b, accumulate);
}
// The same in e4m3 (K = 32 per instruction): D(64xN, fp32) (+)= A(64x32) * B(32xN), both K-major SW128.
template <int N>
__device__ inline void mma_e4m3(float (&d)[N / 2], u64 desc_a, u64 desc_b, int accumulate FB_HZ_LINE) {
  FB_WGMMA_CHECK_N(N);
  record_k_major(desc_a, desc_b, N FB_HZ_PASS);
  Shape<N>::ss_e4m3(d, desc_a, desc_b, accumulate);
}
// bf16 with both operands in shared memory and no trace record: TA / TB = 1 read A / B MN-major (the
// instruction's imm-trans-a / imm-trans-b, 16-bit types only). The caller records what its layout reads.
template <int N, int TA, int TB>
__device__ inline void mma_ss(float (&d)[N / 2], u64 desc_a, u64 desc_b, int accumulate) {
  FB_WGMMA_CHECK_N(N);
  Shape<N>::template ss_bf16<TA, TB>(d, desc_a, desc_b, accumulate);
}
// bf16 with A in registers (per warp, the m16n8k16 A fragment of its 16 rows), B in shared memory; no trace
// record.
template <int N, int TB>
__device__ inline void mma_rs(float (&d)[N / 2], const unsigned (&a)[4], u64 desc_b, int accumulate) {
  FB_WGMMA_CHECK_N(N);
  Shape<N>::template rs_bf16<TB>(d, a, desc_b, accumulate);
}
// e4m3 with A in registers, B K-major in shared memory: D += A B (always accumulates); no trace record.
template <int N> __device__ inline void mma_rs_e4m3(float (&d)[N / 2], const unsigned (&a)[4], u64 desc_b) {
  FB_WGMMA_CHECK_N(N);
  Shape<N>::rs_e4m3(d, a, desc_b);
}
// The same with accumulate = 0 overwriting D (the first K step of a product).
template <int N>
__device__ inline void mma_rs_e4m3(float (&d)[N / 2], const unsigned (&a)[4], u64 desc_b, int accumulate) {
  FB_WGMMA_CHECK_N(N);
  Shape<N>::rs_e4m3(d, a, desc_b, accumulate);
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
