// Warp-level tensor-core operands: ldmatrix and mma.sync (sm_80 and later).
//
// PTX ISA, "Warp-level Matrix Load Instruction: ldmatrix" and "Matrix Fragments for mma.m16n8k16"
// (with .bf16). Fragment layouts, with g = lane / 4 and t = lane % 4:
//   A (16x16, row-major)  a[0] = A[g][2t..2t+1]   a[1] = A[g+8][2t..2t+1]
//                         a[2] = A[g][2t+8..+9]   a[3] = A[g+8][2t+8..+9]
//   B (16x8,  K x N)      b[0] = B[2t..2t+1][g]   b[1] = B[2t+8..2t+9][g]
//   C (16x8,  fp32)       c[0..1] = C[g][2t..2t+1]   c[2..3] = C[g+8][2t..2t+1]
// ldmatrix .x4: lanes 8j..8j+7 give the row addresses of 8x8 matrix j; register j of lane l receives
// row l/4, columns 2(l%4)..+1 of matrix j (.trans: column l/4, rows 2(l%4)..+1).
#pragma once
#include <fb/smem.cuh>

namespace fb {

// Four 8x8 b16 matrices; this lane's row address is `row` (16-byte aligned, in shared memory).
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(row)));
}

// The same, each matrix transposed on the way (B stored K x N row-major -> the "col" B fragment).
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(row)));
}

// The lane's row address inside a 16x16 block for ldmatrix .x4, as (row, col) offsets:
// matrix j = lane / 8 covers rows 8*(j % 2).., columns 8*(j / 2)..  For A this yields a[0..3] of the
// m16n8k16 A fragment; with .trans on a K x N block it yields b[0..1] of two adjacent n8 tiles.
__device__ __forceinline__ int ldsm_row(int lane) { return (lane & 7) + 8 * ((lane >> 3) & 1); }
__device__ __forceinline__ int ldsm_col(int lane) { return 8 * (lane >> 4); }

// d += a * b on one 16x8x16 tile: bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace fb
