"""The course's two running examples, carried through every chapter, with their float64 references.

Chapter 01 introduces the two running examples; chapter 03 moves the matmul to bf16.

1. **rowsum** (memory-bound): y[r] = sum over c of x[r, c], for a float32 matrix streamed once.
   Each block takes rows, streams tiles of them through shared memory and adds them up: one add per
   4-byte element read, far below any ridge point, so its ceiling is memory bandwidth.
2. **matmul** (compute-bound): C = A @ B with fp32 accumulation; fp32 operands in chapters 01-02,
   bf16 operands from chapter 03 on. Its ceiling is cuBLAS at the same size and precision.

Sizes used on a GPU are large (rowsum: 512 MiB; matmul: 4096^3 and 8192^3); on a CPU small and ragged,
never tile multiples (the GPU matmul shape, MATMUL_RAGGED, has M a multiple of 16).
"""
from __future__ import annotations

import numpy as np

from .errors import whole
from .memory import random

ROWSUM_GPU_SHAPE = (16384, 8192)      # 512 MiB of float32: far past any L2
ROWSUM_CPU_SHAPE = (37, 1000)         # ragged: no tile multiple
MATMUL_GPU_SIZES = (4096, 8192)
MATMUL_RAGGED = (4000, 4104, 3992)    # none a multiple of 64, N and K not of 16 (but of 8: TMA's 16-byte strides)
MATMUL_RAGGED_SANITIZE = (500, 504, 488)   # the same under `make sanitize`: M % 16, N % 16, K % 16 != 0


def _sizes(who: str, seed=0, **sizes) -> None:
    """A ValueError naming `who` and the first size (or seed) that is not a whole number: random would name itself,
    and a byte or flop count would come out a float, a repeated string or numpy's TypeError."""
    for name, v in sizes.items():
        least = 1 if name == "itemsize" else 0
        if not whole(v, least):
            raise ValueError(f"{who}: {name}={v!r}: a whole number >= {least} (use // for a size computed by division)")
    if seed is not None and not whole(seed):
        raise ValueError(f"{who}: seed={seed!r}: a whole number >= 0 (or None for fresh randomness)")


def rowsum_inputs(rows: int, cols: int, seed: int = 0) -> np.ndarray:
    _sizes("rowsum_inputs", rows=rows, cols=cols, seed=seed)
    return random((rows, cols), np.float32, seed=seed)


def rowsum_reference(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64).sum(axis=1)


def rowsum_bytes(rows: int, cols: int, itemsize: int = 4) -> int:
    """DRAM bytes the kernel must move: the matrix read once, the sums written once."""
    _sizes("rowsum_bytes", rows=rows, cols=cols, itemsize=itemsize)
    return rows * cols * itemsize + rows * 4


def matmul_inputs(m: int, n: int, k: int, dtype=np.float32, seed: int = 0):
    """A (m x k) and B (k x n), random in [-1, 1), rounded to `dtype` (fb.bfloat16 from chapter 03)."""
    _sizes("matmul_inputs", m=m, n=n, k=k, seed=seed)
    return random((m, k), dtype, seed=seed), random((k, n), dtype, seed=None if seed is None else seed + 1)


def matmul_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:   # numpy's words: "core dimension 0 ... mismatch"
        raise ValueError(f"matmul_reference: a is {'x'.join(map(str, a.shape))} and b is {'x'.join(map(str, b.shape))}: "
                         "two matrices, a's columns equal to b's rows (M x K and K x N)")
    return a.astype(np.float64) @ b.astype(np.float64)


def matmul_flops(m: int, n: int, k: int) -> float:
    _sizes("matmul_flops", m=m, n=n, k=k)
    return 2.0 * m * n * k
