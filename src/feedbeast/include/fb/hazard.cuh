// The hazard build: a trace of every asynchronous operation and synchronisation, for the host's checker.
//
// With FB_HAZARDS defined (fb.compile(..., hazards=True), %%cuda --hazards), each fb:: wrapper appends one
// event per executing thread to a device buffer, in program order: what it did, the shared-memory range
// or barrier it touched, and the source line of the call. feedbeast.hazards replays the events against
// the ordering rules of the PTX memory model for the async proxy. Without FB_HAZARDS this header defines
// empty macros and the markers below compile to nothing: the normal build is unchanged.
//
//   fb::hazard::generic_read(stage, bytes);    // mark ordinary loads of a stage (optional, see below)
//   fb::hazard::generic_write(buf, bytes);     // mark ordinary stores into a buffer an async op reads
//
// Events are recorded before an operation that releases or issues (arrive, copy, bar.sync) and after one
// that acquires or completes (a successful wait): the order of the buffer's slots (one atomicAdd each)
// is then an order in which the operations could have happened.
#pragma once

namespace fb {
namespace hazard {
// Event kinds; feedbeast.hazards.KINDS names them in the same order.
enum Kind : unsigned {
  kCpAsync = 1,         // a = dst smem, b = bytes                                    (cp.async)
  kCpAsyncCommit,       //                                                            (cp.async.commit_group)
  kCpAsyncWait,         // b = groups allowed pending (0xffffffff: wait_all)          (cp.async.wait_group)
  kBulkLoad,            // a = dst smem, b = bytes, c = mbarrier                      (cp.async.bulk g->s)
  kTmaLoad,             // a = dst smem, b = tensor map, c = mbarrier, d = multicast mask (cp.async.bulk.tensor g->s)
  kTmaStore,            // a = src smem, b = tensor map                               (cp.async.bulk.tensor s->g)
  kBulkCommit,          //                                                            (cp.async.bulk.commit_group)
  kBulkWaitRead,        // b = groups allowed pending                                 (cp.async.bulk.wait_group.read)
  kBulkWait,            // b = groups allowed pending                                 (cp.async.bulk.wait_group)
  kMbarInit,            // a = mbarrier, b = count                                    (mbarrier.init)
  kMbarArrive,          // a = mbarrier, b = tx bytes, c = 1 + cta rank (0: local), d = 1 if .relaxed
  kMbarExpectTx,        // a = mbarrier, b = tx bytes                                 (mbarrier.expect_tx)
  kMbarWait,            // a = mbarrier, b = parity | cluster << 1 | (stage + 1) << 8, c/d = its name  (after try_wait)
  kWgmmaFence,          //                                                            (wgmma.fence)
  kWgmmaRead,           // a = smem start, b = bytes (one operand of one wgmma.mma_async; warpgroup leader)
  kWgmmaCommit,         //                                                            (wgmma.commit_group)
  kWgmmaWait,           // b = groups allowed pending                                 (wgmma.wait_group)
  kFenceProxyAsync,     //                                                            (fence.proxy.async)
  kBarSync,             // a = barrier id, b = thread count (0: all of the block)     (bar.sync, __syncthreads)
  kSyncWarp,            // b = member mask                                            (__syncwarp)
  kClusterSync,         //                                                            (barrier.cluster arrive+wait)
  kGenericRead,         // a = smem start, b = bytes                                  (marker)
  kGenericWrite,        // a = smem start, b = bytes                                  (marker)
  kTcgen05Commit,       // a = mbarrier                                               (tcgen05.commit: one arrive)
  kTcgen05Mma,          // a = smem start, b = bytes (one operand of one tcgen05.mma; its issuing thread)
  kTmaMap,              // a = the map's address (low 32 bits), b = a hash of its 128 bytes (before each TMA op)
  kTmaCoords,           // a = c0, b = c1: the box's coordinates (before each 2-D TMA load or store)
  kSmemRead,            // a = smem start, b = bytes, c = flags  (every ld/ldmatrix of shared memory: see below)
  kSmemWrite,           // a = smem start, b = bytes, c = flags  (every st/stmatrix/atom/red of shared memory)
  kCpAsyncMbarArrive,   // a = mbarrier, b = 1 if .noinc                              (cp.async.mbarrier.arrive)
  kBulkReduce,          // a = src smem, b = bytes, c/d = global dst (low, high 32 bits)  (cp.reduce.async.bulk)
  kTensormapReplace,    // a = map address (low 32 bits), b/c = hash of its bytes before/after, d = 1 if in global
                        //   (tensormap.replace .global_address)
  kTensormapPublish,    // a = global map address (low 32 bits), b = hash of the bytes  (tensormap.cp_fenceproxy:
                        //   a write of the map and a fence.proxy.tensormap::generic.release after it; warp: lane 0)
  kFenceTensormapRelease,  //                                             (fence.proxy.tensormap::generic.release)
  kFenceTensormapAcquire,  // a = map address (low 32 bits)              (fence.proxy.tensormap::generic.acquire)
  kGridDepWait,         //                                                            (griddepcontrol.wait)
  kGridDepLaunch,       //                                                            (griddepcontrol.launch_dependents)
  kClusterArrive,       // b = 1 if .relaxed                                          (barrier.cluster.arrive)
  kClusterWait,         //                                                            (barrier.cluster.wait)
};
}  // namespace hazard
}  // namespace fb

#ifdef FB_HAZARDS
#ifndef FB_HAZARD_CAPACITY_DEFAULT
#define FB_HAZARD_CAPACITY_DEFAULT 0
#endif
// One event: 8 words. Set up by the host (feedbeast.hazards) through the module's globals before launch.
extern "C" __device__ unsigned* fb_hz_events = nullptr;      // capacity * 8 words
extern "C" __device__ unsigned fb_hz_capacity = 0;           // events the buffer holds
extern "C" __device__ unsigned fb_hz_count = 0;              // events recorded (may exceed the capacity)
// Three [start, end) ranges of linear block ids that record (the first blocks, the end of the first row, the last
// blocks: the ragged tiles); the others record nothing. Until the host sets them, every block records.
extern "C" __device__ unsigned fb_hz_block_ranges[6] = {0u, 0xffffffffu, 0u, 0u, 0u, 0u};
// Set when a barrier wait of the hazard build gave up (fb::mbar::spin_wait): nothing is recorded after it and every
// wait returns at once, so the kernel ends and the trace up to the hang can still be checked. Then [1..4]: the
// barrier's name (8 characters), its stage, its parity.
extern "C" __device__ unsigned fb_hz_gave_up[5] = {0u, 0u, 0u, 0u, 0u};

namespace fb {
namespace hazard {
__device__ __noinline__ void record(unsigned kind, int line, unsigned a, unsigned b, unsigned c, unsigned d) {
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (!((block >= fb_hz_block_ranges[0] && block < fb_hz_block_ranges[1]) ||
        (block >= fb_hz_block_ranges[2] && block < fb_hz_block_ranges[3]) ||
        (block >= fb_hz_block_ranges[4] && block < fb_hz_block_ranges[5]))) return;
  if (*static_cast<volatile unsigned*>(fb_hz_gave_up) != 0u) return;
  const unsigned i = atomicAdd(&fb_hz_count, 1u);
  if (fb_hz_events == nullptr || i >= fb_hz_capacity) return;
  unsigned cluster_rank = 0;
#if __CUDA_ARCH__ >= 900
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(cluster_rank));
#endif
  const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  unsigned* e = fb_hz_events + 8ull * i;
  e[0] = kind | (static_cast<unsigned>(line) << 8);
  e[1] = block;
  e[2] = thread | (cluster_rank << 16);
  e[3] = a; e[4] = b; e[5] = c; e[6] = d;
  __threadfence();
  e[7] = i + 1;       // written last: a slot whose e[7] != i + 1 was not completed
}
// wgmma is warpgroup-wide: its operand reads and commits are recorded once, by the warpgroup's first thread;
// its waits by every thread (each thread's wait retires the warpgroup's groups for that thread).
__device__ __forceinline__ bool warpgroup_leader() {
  return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 128 == 0;
}
// A warp-collective instruction (.sync.aligned) is recorded once, by the warp's first active lane.
__device__ __forceinline__ bool warp_leader() {
  unsigned lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  return lane == static_cast<unsigned>(__ffs(__activemask()) - 1);
}
__device__ __forceinline__ unsigned addr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
// Four characters of a barrier's name from position `from` (stopping at its end), for the report.
__device__ __forceinline__ unsigned chars(const char* s, int from) {
  for (int i = 0; i < from; ++i) {
    if (s[i] == 0) return 0;
  }
  unsigned v = 0;
  for (int i = 0; i < 4 && s[from + i] != 0; ++i) {
    v |= static_cast<unsigned>(static_cast<unsigned char>(s[from + i])) << (8 * i);
  }
  return v;
}
// A tensor map's identity in the trace: the low bits of its address. Before it, one kTmaMap event pairs that
// address with FNV-1a over the map's 128 bytes (feedbeast.hazards.map_id computes the same on the host from each
// tensor-map argument): the host takes the box bytes from the argument whose bytes match, and only for a map
// whose bytes match none falls back to parameter offsets.
__device__ __forceinline__ unsigned map_hash(const void* map) {
  const unsigned* w = static_cast<const unsigned*>(map);
  unsigned h = 2166136261u;
  for (int i = 0; i < 32; ++i) h = (h ^ w[i]) * 16777619u;
  return h;
}
__device__ __forceinline__ unsigned map_id(const void* map) {
  const unsigned h = map_hash(map);
  const unsigned address = static_cast<unsigned>(reinterpret_cast<unsigned long long>(map));
  record(kTmaMap, 0, address, h, 0, 0);
  return address;
}
}  // namespace hazard
}  // namespace fb

// Every ordinary shared-memory access of a hazard build, without markers: feedbeast.hazards rewrites the build's
// PTX so that each ld/st/atom/red/ldmatrix/stmatrix on .shared (and each generic one, tested with isspacep.shared
// at run time) first calls one of these with its address, its size and the source line of its .loc.
//   info: bytes per lane (bits 0-15) | write << 16 | shared::cluster address << 17 | ldmatrix/stmatrix count << 20
// The lanes of a warp at the same instruction whose addresses are base + k * stride (k: the lane's rank among
// them) record one event for all: a = base, b = bytes, c = flags | stride << 4, d = the lanes' mask. The rows of
// an ldmatrix/stmatrix in another pattern (padded or swizzled) record one event for their hull: the warp reads or
// writes them together. Other patterns record one event per lane (d = 0). The lanes of one evenly spaced event (d != 0)
// need not be in the same iteration of their loops (a lane that left a loop early can meet the others at this load
// a lap later): the checker takes each lane's part at that lane's own point of its program.
namespace fb {
namespace hazard {
__device__ __forceinline__ void access_warp(unsigned addr, unsigned info, unsigned line, unsigned site) {
  const unsigned bytes = info & 0xffffu, n = (info >> 20) & 0xfu;
  const unsigned kind = (info >> 16) & 1u ? kSmemWrite : kSmemRead;
  const unsigned flags = (info >> 17) & 1u;
  unsigned lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  // m8n8 ldmatrix/stmatrix: lanes 8 * count and up give no address; each row address names 16 bytes.
  const bool gives = n == 0u || lane < 8u * n;
  const unsigned group = __match_any_sync(__activemask(), site);
  const unsigned givers = __ballot_sync(group, gives);
  if (givers == 0u) return;
  const unsigned first = static_cast<unsigned>(__ffs(givers)) - 1u, rest = givers & (givers - 1u);
  const unsigned base = __shfl_sync(group, addr, first);
  const int stride = static_cast<int>(__shfl_sync(group, addr, rest ? __ffs(rest) - 1 : first) - base);
  const unsigned rank = __popc(givers & ((1u << lane) - 1u));
  const bool affine = __all_sync(group, !gives || addr == base + rank * static_cast<unsigned>(stride)) &&
                      stride < (1 << 26) && stride > -(1 << 26);
  if (affine) {
    if (lane == first) record(kind, static_cast<int>(line), base, bytes, flags | static_cast<unsigned>(stride) << 4,
                              givers);
    return;
  }
#if __CUDA_ARCH__ >= 800
  if (n != 0u) {    // ldmatrix/stmatrix: every lane's fragment comes from rows other lanes name: one event, their hull
    const unsigned lo = __reduce_min_sync(group, gives ? addr : 0xffffffffu);
    const unsigned hi = __reduce_max_sync(group, gives ? addr + bytes : 0u);
    if (lane == first) record(kind, static_cast<int>(line), lo, hi - lo, flags, 0u);
    return;
  }
#endif
  if (gives) record(kind, static_cast<int>(line), addr, bytes, flags, 0u);
}
}  // namespace hazard
}  // namespace fb
// Called from the rewritten PTX (plain names: the rewrite calls them by name).
extern "C" __device__ __noinline__ void fb_hz_shared(unsigned addr, unsigned info, unsigned line, unsigned site) {
  ::fb::hazard::access_warp(addr, info, line, site);
}
extern "C" __device__ __noinline__ void fb_hz_generic(unsigned long long p, unsigned info, unsigned line,
                                                       unsigned site) {
  const void* q = reinterpret_cast<const void*>(p);
  if (!__isShared(q)) return;
  ::fb::hazard::access_warp(static_cast<unsigned>(__cvta_generic_to_shared(q)), info, line, site);
}
// cp.async.mbarrier.arrive(.noinc) [bar]: the rewrite records it before the instruction (PTX ISA:
// cp.async.mbarrier.arrive: an arrive-on once the thread's earlier cp.async complete).
extern "C" __device__ __noinline__ void fb_hz_cp_mbar(unsigned bar, unsigned noinc, unsigned line) {
  ::fb::hazard::record(::fb::hazard::kCpAsyncMbarArrive, static_cast<int>(line), bar, noinc, 0, 0);
}
// Taking their addresses keeps them in the PTX of every hazard build, called or not.
__device__ void (*fb_hz_keep_shared)(unsigned, unsigned, unsigned, unsigned) = fb_hz_shared;
__device__ void (*fb_hz_keep_generic)(unsigned long long, unsigned, unsigned, unsigned) = fb_hz_generic;
__device__ void (*fb_hz_keep_cp_mbar)(unsigned, unsigned, unsigned) = fb_hz_cp_mbar;

#define FB_HZ_LINE_PARAM int fb_hz_line = __builtin_LINE()
#define FB_HZ_LINE , int fb_hz_line = __builtin_LINE()
#define FB_HZ_PASS , fb_hz_line
#define FB_HZ_RECORD(kind, a, b, c, d) \
  ::fb::hazard::record((kind), fb_hz_line, (unsigned)(a), (unsigned)(b), (unsigned)(c), (unsigned)(d))
#define FB_HZ_RECORD_WARPGROUP(kind, a, b, c, d) \
  do { if (::fb::hazard::warpgroup_leader()) FB_HZ_RECORD(kind, a, b, c, d); } while (0)
// After a wait gave up, the asynchronous operations that move bytes or announce them are not issued: the ring is
// out of step by then, and an arrive.expect_tx or a copy on a barrier whose phase nobody waits for any more can take
// its pending counts out of range (undefined, PTX ISA: mbarrier; on an H100 the launch then fails and the trace up to
// the hang is lost). Waits return at once (fb::mbar::spin_wait), so the kernel ends.
#define FB_HZ_STOPPED() (*static_cast<volatile unsigned*>(fb_hz_gave_up) != 0u)

namespace fb {
namespace hazard {
// Mark ordinary (generic-proxy) loads of `bytes` bytes of shared memory at `p` (once per thread, for the
// range it reads). The checker then asks that a later async-proxy write of that memory come after them
// with a fence.proxy.async on the way, and that they come after the write that filled it completed.
__device__ __forceinline__ void generic_read(const void* p, unsigned bytes, FB_HZ_LINE_PARAM) {
  FB_HZ_RECORD(kGenericRead, addr(p), bytes, 0, 0);
}
// Mark ordinary stores into shared memory that an async-proxy operation (a TMA store, a wgmma) reads later.
__device__ __forceinline__ void generic_write(const void* p, unsigned bytes, FB_HZ_LINE_PARAM) {
  FB_HZ_RECORD(kGenericWrite, addr(p), bytes, 0, 0);
}
// __syncthreads() and __syncwarp() of the kernel's own code, recorded (see the macros below).
__device__ __forceinline__ void syncthreads_traced(int fb_hz_line) {
  FB_HZ_RECORD(kBarSync, 0, 0, 0, 0);
  __syncthreads();
}
__device__ __forceinline__ void syncwarp_traced(unsigned mask, int fb_hz_line) {
  FB_HZ_RECORD(kSyncWarp, 0, mask, 0, 0);
  __syncwarp(mask);
}
}  // namespace hazard
}  // namespace fb
// From here on, the kernel's own __syncthreads() and __syncwarp() are recorded too.
#define __syncthreads() ::fb::hazard::syncthreads_traced(__LINE__)
#define __syncwarp(...) ::fb::hazard::syncwarp_traced(::fb::hazard::full_mask(__VA_ARGS__), __LINE__)
namespace fb { namespace hazard {
__device__ __forceinline__ unsigned full_mask(unsigned m = 0xffffffffu) { return m; }
}}
#else
#define FB_HZ_LINE_PARAM
#define FB_HZ_LINE
#define FB_HZ_PASS
#define FB_HZ_RECORD(kind, a, b, c, d) ((void)0)
#define FB_HZ_RECORD_WARPGROUP(kind, a, b, c, d) ((void)0)
#define FB_HZ_STOPPED() false
namespace fb {
namespace hazard {
__device__ __forceinline__ void generic_read(const void*, unsigned) {}
__device__ __forceinline__ void generic_write(const void*, unsigned) {}
}  // namespace hazard
}  // namespace fb
#endif
