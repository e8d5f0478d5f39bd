// TMA (the Tensor Memory Accelerator) from a kernel: tensor maps, bulk tensor loads that complete on an
// mbarrier, bulk tensor stores, and the few mbarrier operations a TMA ring needs.
//
// Chapter 05 shows each instruction once as raw PTX; this header then uses CCCL's cuda::ptx wrappers
// (one inline function per PTX instruction, maintained with the PTX ISA). Coordinates are innermost
// first (column, row), as in PTX; fb.tensor_map takes shapes outermost first, as numpy does.
#pragma once
#include <cuda/ptx>
#include <cuda/std/cstdint>
#include <fb/debug.cuh>

namespace fb {

// The 128-byte CUtensorMap, passed by value: `const __grid_constant__ fb::TensorMap tmap`.
struct alignas(64) TensorMap { unsigned long long v[16]; };

namespace tma {
using u32 = cuda::std::uint32_t;
using u64 = cuda::std::uint64_t;

// Fetch the tensor map into the TMA unit's descriptor cache before the first copy uses it.
__device__ inline void prefetch_tensormap(const TensorMap& map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(&map) : "memory");
}

// ---- mbarrier: the minimum a TMA ring needs --------------------------------------------------
__device__ inline void barrier_init(u64* bar, u32 arrivals) { cuda::ptx::mbarrier_init(bar, arrivals); }

// Make initialised barriers visible to the async proxy (the TMA unit) and the other threads.
__device__ inline void fence_barrier_init() {
  cuda::ptx::fence_mbarrier_init(cuda::ptx::sem_release, cuda::ptx::scope_cluster);
}

// One arrival that also announces `bytes` of transactions the phase must wait for.
__device__ inline void arrive_expect_tx(u64* bar, u32 bytes) {
  cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta, cuda::ptx::space_shared,
                                       bar, bytes);
}

__device__ inline void arrive(u64* bar) { (void)cuda::ptx::mbarrier_arrive(bar); }

// Wait until the phase with this parity has completed. With FB_DEBUG, give up after
// FB_WAIT_TIMEOUT_NS and report `what`, `stage` and the parity instead of hanging.
__device__ inline void wait(u64* bar, u32 parity, const char* what = "barrier", int stage = -1) {
#ifdef FB_DEBUG
  const unsigned long long t0 = fb::globaltimer_ns();
  while (!cuda::ptx::mbarrier_try_wait_parity(bar, parity)) {
    const unsigned long long waited = fb::globaltimer_ns() - t0;
    if (waited > FB_WAIT_TIMEOUT_NS) fb::report_timeout(what, stage, int(parity), waited);
  }
#else
  (void)what; (void)stage;
  while (!cuda::ptx::mbarrier_try_wait_parity(bar, parity)) {
  }
#endif
}

// ---- bulk tensor copies ------------------------------------------------------------------------
// Global -> shared: the box at (c0 innermost, c1) of `map` lands at `dst`; its bytes complete_tx on `bar`.
// Elements of the box outside the tensor are filled (zero or NaN, as the map says) and still counted.
__device__ inline void load_2d(void* dst, const TensorMap& map, int c0, int c1, u64* bar) {
  const cuda::std::int32_t coords[2] = {c0, c1};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, dst, &map, coords, bar);
}

// Shared -> global: the box at `src` is written to (c0, c1); elements outside the tensor are dropped.
// Before it, fence_shared_to_async() so the TMA unit sees the threads' shared-memory writes.
__device__ inline void store_2d(const TensorMap& map, int c0, int c1, const void* src) {
  const cuda::std::int32_t coords[2] = {c0, c1};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_global, cuda::ptx::space_shared, &map, coords, src);
}

// Order this thread's generic-proxy shared-memory accesses before later async-proxy (TMA) ones.
__device__ inline void fence_shared_to_async() { cuda::ptx::fence_proxy_async(cuda::ptx::space_shared); }

// Close a group of bulk stores; wait until at most N groups still *read* shared memory (the buffer
// can be reused) or, with store_wait, until at most N groups are still writing global memory.
__device__ inline void store_commit() { cuda::ptx::cp_async_bulk_commit_group(); }
template <int N> __device__ inline void store_wait_read() { cuda::ptx::cp_async_bulk_wait_group_read(cuda::ptx::n32_t<N>{}); }
template <int N> __device__ inline void store_wait() { cuda::ptx::cp_async_bulk_wait_group(cuda::ptx::n32_t<N>{}); }

// A shared-memory pointer rounded up to `align` bytes (dynamic shared memory is only 16 B aligned;
// a 128 B swizzle needs its buffer on a 1024 B boundary).
template <int align> __device__ inline unsigned char* align_up(unsigned char* p) {
  const u32 a = static_cast<u32>(__cvta_generic_to_shared(p));
  return p + ((align - (a % align)) % align);
}
}  // namespace tma
}  // namespace fb
