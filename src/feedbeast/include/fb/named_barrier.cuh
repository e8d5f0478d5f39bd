// Named barriers: bar.sync among a subset of the block's threads (PTX ISA, "bar.sync / barrier.sync").
#pragma once
#include <fb/hazard.cuh>

namespace fb {

// bar.sync id, threads: barrier `id` (0..15; the course leaves 0 to __syncthreads) among `threads` threads (a
// multiple of 32).
__device__ inline void bar_sync(int id, int threads FB_HZ_LINE) {
  FB_HZ_RECORD(fb::hazard::kBarSync, id, threads, 0, 0);
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace fb
