// setmaxnreg (sm_90a): give registers back or take them, per warpgroup (PTX ISA, "setmaxnreg").
// ptxas honours it only when the kernel's register limit is known at compile time (the course writes
// __launch_bounds__(threads, 1); -maxrregcount also does) and with one role per branch of an if/else.
#pragma once


namespace fb {

// The CTA's register pool is what the block was launched with: the kernel's register count times its threads.
// For a kernel that uses setmaxnreg, ptxas sets that count to the largest setmaxnreg count in it, capped by
// __launch_bounds__(threads, 1) at 65536 / threads rounded down to a multiple of 8 (168 at 384 threads) and by the
// 255 a thread can address (allocated as 256). Measured with this toolchain: 384 threads and .inc 240 give 168,
// 256 threads and .inc 240 give 240, .inc 256 gives 255. setmaxnreg only moves registers within that pool, and an
// .inc "blocks the execution until enough registers are available in the CTA's register pool" (PTX ISA,
// setmaxnreg): with counts that add up to more than the pool, forever. Below the cap the pool always holds the
// split (each warpgroup's count is at most the largest), so the check below is the cap's.
__host__ __device__ constexpr int launch_registers(int threads) {
  return 65536 / threads / 8 * 8 < 256 ? 65536 / threads / 8 * 8 : 256;
}
// The check, for a block of warpgroup 0 at PRODUCER registers per thread and CONSUMERS warpgroups at CONSUMER.
#define FB_SETMAXNREG_SPLIT(PRODUCER, CONSUMER, CONSUMERS)                                                \
  static_assert((PRODUCER) + (CONSUMERS) * (CONSUMER) <=                                                  \
                    (1 + (CONSUMERS)) * fb::launch_registers(128 * (1 + (CONSUMERS))),                    \
                "setmaxnreg: the warpgroups ask for more registers than the block has: .inc would wait forever")

// setmaxnreg.dec.sync.aligned.u32 N: this warpgroup keeps at most N registers per thread.
template <int N> __device__ inline void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
// setmaxnreg.inc.sync.aligned.u32 N: this warpgroup takes N registers per thread (waits until they are free).
template <int N> __device__ inline void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

}  // namespace fb
