// Building blocks of chapter 07's persistent, clustered GEMM (sm_90a): the tile order of a persistent
// kernel, and the cluster-scope barrier operations whose memory-ordering strength costs or saves time.
// The 64x256 wgmma, setmaxnreg, named barriers, the multicast load and the epilogues are in fb/hgemm.cuh.
#pragma once
#include <cuda/std/cstdint>
#include <fb/debug.cuh>

namespace fb {
namespace capstone {
using u32 = cuda::std::uint32_t;
using u64 = cuda::std::uint64_t;

// ---- the tile scheduler ---------------------------------------------------------------------------
// A unit of work is one output tile (or, with clusters, one column of cluster-many tiles sharing an
// n-tile). A persistent block takes units first, first + step, first + 2 step, ... in the order below.
struct Unit { int m, n; };

// Row-major over units would sweep all n-tiles of one m-row before the next: every B tile is read once
// per m-row, long after it left L2. Grouped order walks `group` m-units down one n column, then the next
// column: the blocks running at the same time share a few B tiles and a few A tiles (L2 reuse).
__device__ inline Unit grouped_unit(int unit, int m_units, int n_units, int group) {
  group = group > 0 ? group : 1;
  const int per_group = group * n_units;            // units in one band of `group` m-units
  const int first = (unit / per_group) * group;     // the band's first m-unit
  const int rows = min(group, m_units - first);     // the last band may be shorter
  const int in = unit % per_group;
  return {first + in % rows, in / rows};
}

// Any precomputed order (e.g. a Hilbert curve built on the host): entry u holds (m-unit, n-unit).
__device__ inline Unit table_unit(int unit, const int* order) { return {order[2 * unit], order[2 * unit + 1]}; }

// ---- remote arrivals on an empty barrier: what ordering they ask for -------------------------------
// PTX ISA, "mbarrier.arrive": .release (the default) orders this thread's earlier memory accesses
// before the arrival, at the given scope; .relaxed orders nothing. On sm_90 a .release.cluster arrive
// compiles to MEMBAR.ALL.GPU + ERRBAR + CGAERRBAR before the SYNCS arrive (a fence that waits for the
// thread's outstanding memory operations); .relaxed.cluster (and .release.cta) compile to the arrive alone.
__device__ inline u32 remote_address(const u64* bar, u32 rank) {
  u32 local = static_cast<u32>(__cvta_generic_to_shared(bar)), remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
__device__ inline void arrive_remote_release(u64* bar, u32 rank) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote_address(bar, rank))
               : "memory");
}
// Enough when what the arrival announces is "my reads of this stage are finished" and those reads were
// waited for (wgmma.wait_group) before the arrive: there is nothing of this thread's to make visible.
__device__ inline void arrive_remote_relaxed(u64* bar, u32 rank) {
  asm volatile("mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote_address(bar, rank))
               : "memory");
}

// Wait for a phase that threads of other CTAs of the cluster arrived on, acquiring at cluster scope
// (SASS: the try-wait, then CCTL.IVALL: the SM's L1 is invalidated once the phase is seen).
__device__ inline bool try_wait_parity_cluster(u64* bar, u32 parity) {
  u32 done;
  asm volatile(
      "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
      : "=r"(done) : "r"(static_cast<u32>(__cvta_generic_to_shared(bar))), "r"(parity) : "memory");
  return done != 0;
}
__device__ inline void wait_cluster(u64* bar, u32 parity, const char* what = "barrier", int stage = -1) {
#ifdef FB_DEBUG
  const unsigned long long t0 = fb::globaltimer_ns();
  while (!try_wait_parity_cluster(bar, parity)) {
    const unsigned long long waited = fb::globaltimer_ns() - t0;
    if (waited > FB_WAIT_TIMEOUT_NS) fb::report_timeout(what, stage, int(parity), waited);
  }
#else
  (void)what; (void)stage;
  while (!try_wait_parity_cluster(bar, parity)) {
  }
#endif
}
}  // namespace capstone
}  // namespace fb
