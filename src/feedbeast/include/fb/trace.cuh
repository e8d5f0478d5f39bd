// Per-role timelines measured on the GPU with %globaltimer (ns).
//
// Compiled with -D FB_TRACE=1 (feedbeast.trace.TraceBuffer.defines gives the flags), a kernel that
// takes a `long long* trace` argument records spans into it: rows of four int64s
// (lane id, kind id, start_ns, end_ns). Lane `l` owns rows [l * FB_TRACE_PER_LANE, (l+1) * ...),
// so recording needs no atomics: each lane is one thread that keeps its own count. Without FB_TRACE
// every call below compiles to nothing and the kernel does not read the timer at all.
//
//   fb::Tracer tr(trace, /*lane=*/1 + warp, /*on=*/blockIdx.x == 0 && lane == 0);
//   const long long t0 = tr.now();  ...wait...  tr.span(fb::TraceKind::bubble, t0, tr.now());
#pragma once
#include <cuda/std/cstdint>

namespace fb {

// The kind ids; feedbeast.trace.KINDS names them in the same order.
struct TraceKind {
  enum : int { wait = 0, issue = 1, load = 2, full = 3, consume = 4, compute = 5, bubble = 6 };
};

#ifndef FB_TRACE_PER_LANE
#define FB_TRACE_PER_LANE 256
#endif

#if defined(FB_TRACE) && FB_TRACE
struct Tracer {
  long long* base;   // the whole buffer, or nullptr when this thread does not record
  long long* rows;   // this lane's first row
  int lane;
  int count = 0;
  __device__ Tracer(long long* trace, int lane_id, bool on)
      : base(on ? trace : nullptr), rows(on && trace != nullptr ? trace + 4LL * lane_id * FB_TRACE_PER_LANE : nullptr),
        lane(lane_id) {}
  __device__ static long long now() {
    cuda::std::uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return static_cast<long long>(t);
  }
  __device__ bool on() const { return rows != nullptr; }
  // Record one span; spans past FB_TRACE_PER_LANE for this lane are dropped.
  __device__ void span(int kind, long long start, long long end) {
    if (rows == nullptr || count >= FB_TRACE_PER_LANE) return;
    long long* r = rows + 4 * count++;
    r[0] = lane; r[1] = kind; r[2] = start; r[3] = end;
  }
  // Record into row `index` of another lane (a lane written by several threads in turn, such as
  // one per pipeline stage, where `index` counts the stage's uses). Out-of-range rows are dropped.
  __device__ void span_in(int other_lane, int index, int kind, long long start, long long end) {
    if (base == nullptr || index < 0 || index >= FB_TRACE_PER_LANE) return;
    long long* r = base + 4LL * (other_lane * FB_TRACE_PER_LANE + index);
    r[0] = other_lane; r[1] = kind; r[2] = start; r[3] = end;
  }
};
#else
struct Tracer {
  __device__ Tracer(long long*, int, bool) {}
  __device__ static long long now() { return 0; }
  __device__ bool on() const { return false; }
  __device__ void span(int, long long, long long) {}
  __device__ void span_in(int, int, int, long long, long long) {}
};
#endif

}  // namespace fb
