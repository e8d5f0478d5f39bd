// setmaxnreg (sm_90a): give registers back or take them, per warpgroup (PTX ISA, "setmaxnreg").
// ptxas honours it only with __launch_bounds__(threads, 1) and one role per branch of an if/else.
#pragma once


namespace fb {

// setmaxnreg.dec.sync.aligned.u32 N: this warpgroup keeps at most N registers per thread.
template <int N> __device__ inline void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
// setmaxnreg.inc.sync.aligned.u32 N: this warpgroup takes N registers per thread (waits until they are free).
template <int N> __device__ inline void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

}  // namespace fb
