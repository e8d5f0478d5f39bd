// Debug reports from a kernel to the host that survive the kernel's death.
//
// With FB_DEBUG defined (compile(..., debug=True)), a bounded wait that gives up writes a report into
// host-mapped memory and traps; the toolkit reads it after the failed launch and raises BarrierTimeout
// naming the barrier, stage and phase. Without FB_DEBUG this header adds nothing.
#pragma once
#include <cuda/std/cstdint>

namespace fb {
struct DebugReport {
  unsigned magic;          // 0xFEEDBEA5 once written
  int block[3];
  int thread;
  int stage;
  int parity;
  unsigned long long waited_ns;
  char what[48];
};
}  // namespace fb

#ifdef FB_DEBUG
#ifndef FB_WAIT_TIMEOUT_NS
#define FB_WAIT_TIMEOUT_NS 2000000000ull   // 2 s: far beyond any legitimate wait in the course
#endif
extern "C" __device__ fb::DebugReport* fb_debug_report = nullptr;   // set by the host before launch
extern "C" __device__ unsigned fb_debug_claimed = 0;               // first reporter wins (device atomics)

namespace fb {
__device__ inline cuda::std::uint64_t globaltimer_ns() {
  cuda::std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Record who gave up waiting on what, make it visible to the host, and stop the kernel.
__device__ __noinline__ void report_timeout(const char* what, int stage, int parity,
                                            unsigned long long waited_ns) {
  volatile DebugReport* r = fb_debug_report;
  if (r != nullptr && atomicCAS(&fb_debug_claimed, 0u, 1u) == 0u) {
    r->block[0] = blockIdx.x; r->block[1] = blockIdx.y; r->block[2] = blockIdx.z;
    r->thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    r->stage = stage; r->parity = parity; r->waited_ns = waited_ns;
    int i = 0;
    for (; what[i] != 0 && i < 47; ++i) r->what[i] = what[i];
    r->what[i] = 0;
    __threadfence_system();   // the fields first, then the flag the host looks for
    r->magic = 0xFEEDBEA5u;
    __threadfence_system();
    __trap();
  }
  // Another thread is writing its report: trapping now could end the kernel before it is complete.
  while (true) __nanosleep(1 << 20);
}
}  // namespace fb
#endif
