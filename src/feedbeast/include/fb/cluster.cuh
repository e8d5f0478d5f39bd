// Thread-block clusters (sm_90+): this CTA's rank, the cluster-wide barrier, and addresses in a peer CTA.
//
// PTX ISA: "Special Registers: %cluster_ctarank", "barrier.cluster", "mapa".
#pragma once
#include <cuda/std/cstdint>
#include <fb/hazard.cuh>

namespace fb {

// %cluster_ctarank: this CTA's rank in its cluster (0 .. cluster size - 1).
__device__ inline unsigned cluster_ctarank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// barrier.cluster.arrive.release + barrier.cluster.wait.acquire: every thread of every CTA of the cluster.
__device__ inline void cluster_sync(FB_HZ_LINE_PARAM) {
  FB_HZ_RECORD(fb::hazard::kClusterSync, 0, 0, 0, 0);
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The same barrier in two halves, for work between them: arrive (.release: this thread's earlier accesses are
// visible to every thread of the cluster after its wait; .relaxed: nothing is ordered, only the count), then wait
// (.acquire). PTX ISA: "barrier.cluster".
__device__ inline void cluster_arrive(FB_HZ_LINE_PARAM) {
  FB_HZ_RECORD(fb::hazard::kClusterArrive, 0, 0, 0, 0);
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ inline void cluster_arrive_relaxed(FB_HZ_LINE_PARAM) {
  FB_HZ_RECORD(fb::hazard::kClusterArrive, 0, 1, 0, 0);
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ inline void cluster_wait(FB_HZ_LINE_PARAM) {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
  FB_HZ_RECORD(fb::hazard::kClusterWait, 0, 0, 0, 0);
}

// mapa.shared::cluster: the .shared::cluster address of the same offset `smem` in CTA `rank`.
__device__ inline unsigned mapa_shared_cluster(unsigned smem, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem), "r"(rank));
  return remote;
}

}  // namespace fb
