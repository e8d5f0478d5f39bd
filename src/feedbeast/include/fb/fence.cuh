// The proxy fence between ordinary (generic-proxy) and asynchronous (async-proxy) shared-memory accesses.
//
// PTX ISA, "Memory Consistency Model: Proxies" and "membar/fence": the generic proxy (ld, st, atom) and
// the async proxy (cp.async.bulk, cp.async.bulk.tensor, wgmma operand reads) are different paths to
// memory. Release/acquire (an mbarrier arrive and wait, __syncthreads) orders the generic proxy only;
// fence.proxy.async orders this thread's earlier generic accesses to shared memory before its later
// async-proxy ones. It goes
//   - after ordinary reads of a stage, before the arrive that lets a bulk copy refill it;
//   - after ordinary writes to shared memory, before a bulk/TMA store or a wgmma reads them.
#pragma once
#include <fb/hazard.cuh>

namespace fb {

// fence.proxy.async.shared::cta
__device__ __forceinline__ void fence_proxy_async(FB_HZ_LINE_PARAM) {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  FB_HZ_RECORD(fb::hazard::kFenceProxyAsync, 0, 0, 0, 0);
}

// fence.proxy.tensormap::generic.release.gpu: this thread's earlier generic writes of a tensor map (st, or
// tensormap.replace on global memory) are released to the tensormap proxy, the TMA unit's reads of maps; the thread
// that then uses the map acquires it with fence.proxy.tensormap::generic.acquire (PTX ISA: membar/fence).
__device__ __forceinline__ void fence_proxy_tensormap_release(FB_HZ_LINE_PARAM) {
  FB_HZ_RECORD(fb::hazard::kFenceTensormapRelease, 0, 0, 0, 0);
  asm volatile("fence.proxy.tensormap::generic.release.gpu;" ::: "memory");
}

}  // namespace fb
