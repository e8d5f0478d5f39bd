// TMA (the Tensor Memory Accelerator) from a kernel: tensor maps, bulk tensor loads that complete on an
// mbarrier (fb/mbarrier.cuh), bulk tensor stores and their completion groups.
//
// Chapter 05 shows each instruction once as raw PTX; this header then uses CCCL's cuda::ptx wrappers
// (one inline function per PTX instruction, maintained with the PTX ISA). Coordinates are innermost
// first (column, row), as in PTX; fb.tensor_map takes shapes outermost first, as numpy does.
// PTX ISA: "cp.async.bulk.tensor", "cp.async.bulk.commit_group", "cp.async.bulk.wait_group",
// "prefetch.tensormap".
#pragma once
#include <cuda/ptx>
#include <cuda/std/cstdint>
#include <fb/fence.cuh>
#include <fb/hazard.cuh>
#include <fb/mbarrier.cuh>
#include <fb/smem.cuh>

namespace fb {

// The 128-byte CUtensorMap, passed by value: `const __grid_constant__ fb::TensorMap tmap`.
struct alignas(64) TensorMap { unsigned long long v[16]; };

namespace tma {
using u32 = cuda::std::uint32_t;
using u64 = cuda::std::uint64_t;


// prefetch.tensormap: fetch the map into the TMA unit's descriptor cache before the first copy uses it.
__device__ inline void prefetch_tensormap(const TensorMap& map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(&map) : "memory");
}

// cp.async.bulk.tensor.2d.shared::cluster.global: the box at (c0 innermost, c1) of `map` lands at `dst`;
// its bytes complete_tx on `bar`. Elements of the box outside the tensor are filled (zero or NaN, as the
// map says) and still counted.
__device__ inline void load_2d(void* dst, const TensorMap& map, int c0, int c1, u64* bar FB_HZ_LINE) {
  if (FB_HZ_STOPPED()) return;            // a hazard build after a wait gave up (fb/hazard.cuh)
  FB_HZ_RECORD(fb::hazard::kTmaCoords, c0, c1, 0, 0);
  FB_HZ_RECORD(fb::hazard::kTmaLoad, smem_addr(dst), fb::hazard::map_id(&map), smem_addr(bar), 0);
  const cuda::std::int32_t coords[2] = {c0, c1};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_cluster, cuda::ptx::space_global, dst, &map, coords, bar);
}

// The same box written to the same offset of every CTA of the cluster in `mask` (.multicast::cluster);
// each destination CTA's barrier at the offset of `bar` gets the bytes.
__device__ inline void load_2d_multicast(void* dst, const TensorMap& map, int c0, int c1, u64* bar,
                                         cuda::std::uint16_t mask FB_HZ_LINE) {
  if (FB_HZ_STOPPED()) return;            // a hazard build after a wait gave up (fb/hazard.cuh)
  FB_HZ_RECORD(fb::hazard::kTmaCoords, c0, c1, 0, 0);
  FB_HZ_RECORD(fb::hazard::kTmaLoad, smem_addr(dst), fb::hazard::map_id(&map), smem_addr(bar), mask);
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;"
      ::"r"(smem_addr(dst)), "l"(&map), "r"(c0), "r"(c1), "r"(smem_addr(bar)), "h"(mask)
      : "memory");
}

// cp.async.bulk.tensor.2d.global.shared::cta: the box at `src` is written to (c0, c1); elements outside the
// tensor are dropped. Before it, fb::fence_proxy_async() so the TMA unit sees the threads' stores.
__device__ inline void store_2d(const TensorMap& map, int c0, int c1, const void* src FB_HZ_LINE) {
  if (FB_HZ_STOPPED()) return;            // a hazard build after a wait gave up (fb/hazard.cuh)
  FB_HZ_RECORD(fb::hazard::kTmaCoords, c0, c1, 0, 0);
  FB_HZ_RECORD(fb::hazard::kTmaStore, smem_addr(src), fb::hazard::map_id(&map), 0, 0);
  const cuda::std::int32_t coords[2] = {c0, c1};
  cuda::ptx::cp_async_bulk_tensor(cuda::ptx::space_global, cuda::ptx::space_shared, &map, coords, src);
}

// cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile: the box at `src` is added element by element to
// (c0, c1), each element's read-modify-write atomic; elements outside the tensor are dropped. It reads shared
// memory and completes as store_2d does (PTX ISA: "cp.reduce.async.bulk.tensor").
__device__ inline void reduce_add_2d(const TensorMap& map, int c0, int c1, const void* src FB_HZ_LINE) {
  if (FB_HZ_STOPPED()) return;            // a hazard build after a wait gave up (fb/hazard.cuh)
  FB_HZ_RECORD(fb::hazard::kTmaCoords, c0, c1, 0, 0);
  FB_HZ_RECORD(fb::hazard::kTmaStore, smem_addr(src), fb::hazard::map_id(&map), 0, 0);
  const cuda::std::int32_t coords[2] = {c0, c1};
  cuda::ptx::cp_reduce_async_bulk_tensor(cuda::ptx::space_global, cuda::ptx::space_shared, cuda::ptx::op_add, &map,
                                         coords, src);
}

// cp.async.bulk.commit_group: close a group of bulk stores.
__device__ inline void commit_group(FB_HZ_LINE_PARAM) {
  FB_HZ_RECORD(fb::hazard::kBulkCommit, 0, 0, 0, 0);
  cuda::ptx::cp_async_bulk_commit_group();
}
// cp.async.bulk.wait_group.read N: until at most N groups still *read* shared memory (the source buffer
// may be rewritten).
template <int N> __device__ inline void wait_group_read(FB_HZ_LINE_PARAM) {
  cuda::ptx::cp_async_bulk_wait_group_read(cuda::ptx::n32_t<N>{});
  FB_HZ_RECORD(fb::hazard::kBulkWaitRead, 0, N, 0, 0);
}
// cp.async.bulk.wait_group N: until at most N groups are still writing global memory.
template <int N> __device__ inline void wait_group(FB_HZ_LINE_PARAM) {
  cuda::ptx::cp_async_bulk_wait_group(cuda::ptx::n32_t<N>{});
  FB_HZ_RECORD(fb::hazard::kBulkWait, 0, N, 0, 0);
}
}  // namespace tma
}  // namespace fb
