// 1-D bulk copy, global -> shared, completing on an mbarrier (sm_90+): chapter 04's cp.async.bulk.
//
// PTX ISA, "Data Movement and Conversion Instructions: cp.async.bulk". The copy runs in the async proxy;
// when its bytes have landed it performs complete_tx(bytes) on the barrier (fb/mbarrier.cuh).
#pragma once
#include <cuda/std/cstdint>
#include <fb/hazard.cuh>
#include <fb/smem.cuh>

namespace fb {

// cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes: `bytes` from `src` to `dst`;
// dst, src and bytes must be multiples of 16 (bytes > 0).
__device__ inline void bulk_copy_g2s(void* dst, const void* src, unsigned bytes, cuda::std::uint64_t* bar FB_HZ_LINE) {
  if (FB_HZ_STOPPED()) return;            // a hazard build after a wait gave up (fb/hazard.cuh)
  FB_HZ_RECORD(fb::hazard::kBulkLoad, smem_addr(dst), bytes, smem_addr(bar), 0);
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}

}  // namespace fb
