// Shared-memory addresses: the one helper every PTX wrapper of the course uses.
//
// PTX instructions that name shared memory (cp.async, mbarrier, cp.async.bulk, ldmatrix, tcgen05, wgmma
// descriptors) take the 32-bit offset of the .shared::cta window, not a generic pointer.
// PTX ISA, "Generic Addressing" and "cvta".
#pragma once
#include <cuda/std/cstdint>

namespace fb {

// The 32-bit .shared::cta address of a generic pointer into shared memory (cvta.to.shared).
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// A shared-memory pointer rounded up to `Align` bytes. Dynamic shared memory is only 16 B aligned;
// a 128 B swizzle needs its buffer on a 1024 B boundary.
template <int Align>
__device__ __forceinline__ unsigned char* align_up(unsigned char* p) {
  static_assert(Align > 0 && (Align & (Align - 1)) == 0, "align_up needs a power of two");
  return p + ((Align - (smem_addr(p) % Align)) % Align);
}

}  // namespace fb
