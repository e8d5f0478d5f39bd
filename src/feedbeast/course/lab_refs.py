"""References that the labs' checks compare a learner's Python with, kept out of the notebooks: a lab prints its
check cells, and a reference written there would print the answer to the exercise."""
from __future__ import annotations

import numpy as np

E4M3_MAX = 448.0      # the largest finite e4m3 value (OCP 8-bit floating point specification, table 1)


def quantize_e4m3_rows(w) -> tuple[np.ndarray, np.ndarray]:
    """Lab 10's quantization: per row the scale max|w| / 448 (1 for a row of zeros) and the e4m3 codes of
    w / scale, rounded to nearest: (codes as uint8, N x K; scales float32, N)."""
    import ml_dtypes
    w = np.asarray(w, np.float32)
    amax = np.abs(w).max(axis=1)
    scale = np.where(amax > 0, amax / E4M3_MAX, 1.0).astype(np.float32)
    return (w / scale[:, None]).astype(ml_dtypes.float8_e4m3fn).view(np.uint8), scale


def transpose_strip(tile: int, band: int, strip: int):
    """Lab 02's comparison kernel: a block of (32, band) threads transposes a strip of `strip` tiles of tile x tile
    down 32 columns of x, one shared buffer, two barriers per tile (lab 01's kernel, walked down the strip). Made
    on demand: Numba must already be set up (feedbeast.numba_support.setup) in the mode the notebook runs in."""
    from numba import cuda, float32
    per, row = tile // band, tile + 1          # (a shared array's shape must be constants: no expression in it)

    @cuda.jit
    def transpose_strip(x, y):
        buf = cuda.shared.array((tile, row), float32)
        lane, w = cuda.threadIdx.x, cuda.threadIdx.y
        rows, cols = x.shape
        c0, t0 = cuda.blockIdx.x * tile, cuda.blockIdx.y * strip
        for t in range(t0, min(t0 + strip, (rows + tile - 1) // tile)):
            r0 = t * tile
            for j in range(per):
                i = w + j * band
                if r0 + i < rows and c0 + lane < cols:
                    buf[i, lane] = x[r0 + i, c0 + lane]
            cuda.syncthreads()
            for j in range(per):
                i = w + j * band
                if c0 + i < cols and r0 + lane < rows:
                    y[c0 + i, r0 + lane] = buf[lane, i]
            cuda.syncthreads()

    return transpose_strip
