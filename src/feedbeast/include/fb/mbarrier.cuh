// mbarrier and 1-D bulk copies (sm_90+): the PTX of chapter 04, one device function per instruction.
//
//   __shared__ __align__(8) cuda::std::uint64_t full[STAGES];
//   fb::mbar::init(&full[s], 1);  fb::mbar::fence_init();  __syncthreads();
//   fb::mbar::arrive_expect_tx(&full[s], bytes);                  // producer: one arrival + bytes
//   fb::bulk_copy_g2s(dst_smem, src_gmem, bytes, &full[s]);       // lands with complete_tx(bytes)
//   fb::mbar::wait(&full[s], parity, "full", s);                  // consumer: phase of that parity done
//
// PTX ISA: "Parallel Synchronization and Communication Instructions: mbarrier" (init, arrive,
// expect_tx, test_wait/try_wait) and "Data Movement and Conversion Instructions: cp.async.bulk".
// With FB_DEBUG (compile(..., debug=True)) fb::mbar::wait gives up after FB_WAIT_TIMEOUT_NS and the
// host raises fb.BarrierTimeout naming the barrier, stage and parity; without it, it just spins.
#pragma once
#include <cuda/std/cstdint>
#include <fb/debug.cuh>

namespace fb {
namespace mbar {

// A shared-memory address as the 32-bit offset the .shared::cta state space uses.
__device__ inline unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Phase 0, pending = expected = count (1 <= count < 2^20), tx-count 0.
__device__ inline void init(cuda::std::uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(mbar::smem_addr(bar)), "r"(count) : "memory");
}

// Make the inits above visible to the async proxy (bulk copies complete_tx on them) and, with
// the __syncthreads() that follows, to every thread of the block (and of the cluster).
__device__ inline void fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One arrival (release semantics at CTA scope): pending -= 1.
__device__ inline void arrive(cuda::std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(mbar::smem_addr(bar)) : "memory");
}

// tx-count += bytes, without an arrival.
__device__ inline void expect_tx(cuda::std::uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;"
               :: "r"(mbar::smem_addr(bar)), "r"(bytes) : "memory");
}

// tx-count += bytes, then one arrival, as one operation.
__device__ inline void arrive_expect_tx(cuda::std::uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"(mbar::smem_addr(bar)), "r"(bytes) : "memory");
}

// Has the phase with this parity completed? Never blocks.
__device__ inline bool test_wait_parity(cuda::std::uint64_t* bar, unsigned parity) {
  unsigned done;
  asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(done) : "r"(mbar::smem_addr(bar)), "r"(parity) : "memory");
  return done != 0;
}

// Same question, but the thread may be suspended for a while (hardware-chosen) before the answer.
// A true answer acquires (CTA scope): what was written before the phase completed is visible.
__device__ inline bool try_wait_parity(cuda::std::uint64_t* bar, unsigned parity) {
  unsigned done;
  asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(done) : "r"(mbar::smem_addr(bar)), "r"(parity) : "memory");
  return done != 0;
}

// Block until the phase with `parity` of `bar` has completed. `name` and `stage` only matter in a
// debug build: a wait that outlives FB_WAIT_TIMEOUT_NS reports them and stops the kernel.
__device__ inline void wait(cuda::std::uint64_t* bar, unsigned parity, const char* name, int stage) {
#ifdef FB_DEBUG
  const unsigned long long t0 = fb::globaltimer_ns();
  while (!try_wait_parity(bar, parity)) {
    const unsigned long long waited = fb::globaltimer_ns() - t0;
    if (waited > FB_WAIT_TIMEOUT_NS) fb::report_timeout(name, stage, static_cast<int>(parity), waited);
  }
#else
  (void)name; (void)stage;
  while (!try_wait_parity(bar, parity)) {
  }
#endif
}

// Order this thread's earlier ordinary (generic-proxy) accesses to shared memory before later async-proxy
// ones, such as a bulk copy's write. A consumer that read a stage with ordinary loads runs it before it
// releases the stage to a producer that refills it with cp.async.bulk: the release/acquire pair through
// the mbarrier orders the generic proxy only (PTX ISA, Memory Consistency Model: Proxies).
__device__ inline void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

}  // namespace mbar

// 1-D bulk copy global -> shared through the async proxy; when its bytes have landed it performs
// complete_tx(bytes) on `bar`. dst, src and bytes must be multiples of 16 (bytes > 0).
__device__ inline void bulk_copy_g2s(void* dst, const void* src, unsigned bytes, cuda::std::uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"(mbar::smem_addr(dst)), "l"(src), "r"(bytes), "r"(mbar::smem_addr(bar)) : "memory");
}

}  // namespace fb
