// mbarrier (sm_80+; its tx-count forms, expect_tx and the complete_tx copies, and try_wait are sm_90+): the PTX
// of chapter 04, one device function per instruction, and the one bounded wait.
//
//   __shared__ __align__(8) cuda::std::uint64_t full[STAGES];
//   fb::mbar::init(&full[s], 1);  fb::mbar::fence_init();  __syncthreads();
//   fb::mbar::arrive_expect_tx(&full[s], bytes);                  // producer: one arrival + bytes
//   fb::bulk_copy_g2s(dst_smem, src_gmem, bytes, &full[s]);       // lands with complete_tx(bytes)
//   fb::mbar::wait(&full[s], parity, "full", s);                  // consumer: phase of that parity done
//
// PTX ISA: "Parallel Synchronization and Communication Instructions: mbarrier" (init, arrive,
// expect_tx, test_wait/try_wait) and "membar/fence" (fence.mbarrier_init). Each function is named after
// its instruction without the "mbarrier." prefix. The cluster forms (chapter 07) address a barrier in
// another CTA of the cluster (mapa, fb/cluster.cuh) or wait with cluster-scope acquire.
// With FB_DEBUG (compile(..., debug=True)) every wait gives up after FB_WAIT_TIMEOUT_NS and the host
// raises fb.BarrierTimeout naming the barrier, stage and parity; without it, it just spins.
#pragma once
#include <cuda/std/cstdint>
#include <fb/cluster.cuh>
#include <fb/debug.cuh>
#include <fb/fence.cuh>
#include <fb/hazard.cuh>
#include <fb/smem.cuh>

namespace fb {
namespace mbar {
using u32 = cuda::std::uint32_t;
using u64 = cuda::std::uint64_t;

// mbarrier.init: phase 0, pending = expected = count (1 <= count < 2^20), tx-count 0.
__device__ inline void init(u64* bar, u32 count FB_HZ_LINE) {
  FB_HZ_RECORD(fb::hazard::kMbarInit, smem_addr(bar), count, 0, 0);
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(bar)), "r"(count) : "memory");
}

// fence.mbarrier_init.release.cluster: a release, at cluster scope, of the mbarrier.inits above and of nothing
// else (PTX ISA, "membar/fence"). With the acquire that follows (the __syncthreads(), or barrier.cluster.wait in a
// cluster) the other threads of the block and of the cluster see the barriers initialised before they arrive on
// them, wait on them, or issue copies that complete on them.
__device__ inline void fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// mbarrier.arrive (release semantics at CTA scope): pending -= 1.
__device__ inline void arrive(u64* bar FB_HZ_LINE) {
  FB_HZ_RECORD(fb::hazard::kMbarArrive, smem_addr(bar), 0, 0, 0);
#if defined(FB_HAZARDS)
  // A hazard build arrives one lane at a time. The lanes of a warp that arrive together count as one operation
  // of several arrivals; when there are more of them than the phase has pending (an arrival count set too low,
  // exactly what the checker's arrival-count rule is there to name) that is undefined (PTX ISA: mbarrier), and
  // on an H100 the launch failed with the trace lost. The recorder calls around it split warps unpredictably.
  u32 lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  for (u32 rest = __activemask(); rest != 0u; rest &= rest - 1u)
    if (lane == static_cast<u32>(__ffs(rest) - 1))
      asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem_addr(bar)) : "memory");
#else
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem_addr(bar)) : "memory");
#endif
}

// mbarrier.expect_tx: tx-count += bytes, without an arrival.
__device__ inline void expect_tx(u64* bar, u32 bytes FB_HZ_LINE) {
  if (FB_HZ_STOPPED()) return;            // a hazard build after a wait gave up (fb/hazard.cuh)
  FB_HZ_RECORD(fb::hazard::kMbarExpectTx, smem_addr(bar), bytes, 0, 0);
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;"
               :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// mbarrier.arrive.expect_tx: tx-count += bytes, then one arrival, as one operation.
__device__ inline void arrive_expect_tx(u64* bar, u32 bytes FB_HZ_LINE) {
  if (FB_HZ_STOPPED()) return;            // a hazard build after a wait gave up (fb/hazard.cuh)
  FB_HZ_RECORD(fb::hazard::kMbarArrive, smem_addr(bar), bytes, 0, 0);
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// Arrive on the barrier at the same shared-memory offset in CTA `rank` of this cluster (mapa, then
// mbarrier.arrive .shared::cluster). PTX ISA, "mbarrier.arrive": the default is .release at .cta scope.
// .release.cluster orders this thread's earlier memory accesses before the arrival at cluster scope; on
// sm_90 it compiles to MEMBAR.ALL.CTA + MEMBAR.ALL.GPU + ERRBAR + CGAERRBAR before the SYNCS arrive.
// .relaxed orders nothing and compiles to the arrive alone (as the default .release.cta does): enough in
// practice when the arrival only says "my reads of this stage are finished" and those reads were waited
// for (wgmma.wait_group) before it.
__device__ inline void arrive_remote_release(u64* bar, u32 rank FB_HZ_LINE) {
  FB_HZ_RECORD(fb::hazard::kMbarArrive, smem_addr(bar), 0, 1 + rank, 0);
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];"
               :: "r"(fb::mapa_shared_cluster(smem_addr(bar), rank)) : "memory");
}
__device__ inline void arrive_remote_relaxed(u64* bar, u32 rank FB_HZ_LINE) {
  FB_HZ_RECORD(fb::hazard::kMbarArrive, smem_addr(bar), 0, 1 + rank, 1);
  asm volatile("mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [%0];"
               :: "r"(fb::mapa_shared_cluster(smem_addr(bar), rank)) : "memory");
}

// mbarrier.test_wait.parity: has the phase with this parity completed? Never blocks.
__device__ inline bool test_wait_parity(u64* bar, u32 parity) {
  u32 done;
  asm volatile("{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  return done != 0;
}

// mbarrier.try_wait.parity: the same question, but the thread may be suspended for a while
// (hardware-chosen) before the answer. A true answer acquires (CTA scope): what was written before the
// phase completed is visible.
__device__ inline bool try_wait_parity(u64* bar, u32 parity) {
  u32 done;
  asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
               : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  return done != 0;
}

// mbarrier.try_wait.parity.acquire.cluster: for a phase that threads of other CTAs of the cluster arrived
// on (SASS: the try-wait, then CCTL.IVALL: the SM's L1 is invalidated once the phase is seen).
__device__ inline bool try_wait_parity_cluster(u64* bar, u32 parity) {
  u32 done;
  asm volatile(
      "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; "
      "selp.u32 %0, 1, 0, p; }"
      : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  return done != 0;
}

// The bounded wait: spin on `try_wait()` until it is true. In a debug build, give up after
// FB_WAIT_TIMEOUT_NS and report `what`, `stage` and the parity (the kernel traps, the host raises). In a hazard
// build it gives up without trapping (returns false): recording stops and every later wait returns, so the kernel
// ends and the host checks the trace up to the hang (feedbeast.hazards).
template <class TryWait>
__device__ inline bool spin_wait(TryWait try_wait, u32 parity, const char* what, int stage) {
#if defined(FB_HAZARDS)
  const unsigned long long t0 = fb::globaltimer_ns();
  while (!try_wait()) {
    if (*static_cast<volatile unsigned*>(fb_hz_gave_up) != 0u) return false;
    if (fb::globaltimer_ns() - t0 > FB_WAIT_TIMEOUT_NS) {
      if (atomicCAS(&fb_hz_gave_up[0], 0u, 1u) == 0u) {
        fb_hz_gave_up[1] = fb::hazard::chars(what, 0);
        fb_hz_gave_up[2] = fb::hazard::chars(what, 4);
        fb_hz_gave_up[3] = static_cast<unsigned>(stage);
        fb_hz_gave_up[4] = parity;
        __threadfence();
      }
      return false;
    }
  }
  return true;
#elif defined(FB_DEBUG)
  const unsigned long long t0 = fb::globaltimer_ns();
  while (!try_wait()) {
    const unsigned long long waited = fb::globaltimer_ns() - t0;
    if (waited > FB_WAIT_TIMEOUT_NS) fb::report_timeout(what, stage, static_cast<int>(parity), waited);
  }
  return true;
#else
  (void)parity; (void)what; (void)stage;
  while (!try_wait()) {
  }
  return true;
#endif
}

// Block until the phase with `parity` of `bar` has completed. `what` and `stage` name it in a debug report.
__device__ inline void wait(u64* bar, u32 parity, const char* what = "barrier", int stage = -1 FB_HZ_LINE) {
  if (spin_wait([&] { return try_wait_parity(bar, parity); }, parity, what, stage)) {
    FB_HZ_RECORD(fb::hazard::kMbarWait, smem_addr(bar), parity | (stage + 1) << 8, fb::hazard::chars(what, 0),
                 fb::hazard::chars(what, 4));
  }
}
// The same with cluster-scope acquire (try_wait_parity_cluster).
__device__ inline void wait_cluster(u64* bar, u32 parity, const char* what = "barrier", int stage = -1 FB_HZ_LINE) {
  if (spin_wait([&] { return try_wait_parity_cluster(bar, parity); }, parity, what, stage)) {
    FB_HZ_RECORD(fb::hazard::kMbarWait, smem_addr(bar), parity | 2u | (stage + 1) << 8, fb::hazard::chars(what, 0),
                 fb::hazard::chars(what, 4));
  }
}

}  // namespace mbar
}  // namespace fb
