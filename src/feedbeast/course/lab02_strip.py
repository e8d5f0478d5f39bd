"""Lab 02's comparison kernel, kept out of the notebook (it holds lab 01's answer): a block of (32, band) threads
transposes a strip of `strip` tiles of tile x tile down 32 columns of x, one shared buffer, two barriers per tile.

Imported only through lab_refs.transpose_strip, after feedbeast.numba_support.setup(): it imports numba.cuda. The
kernel reaches `cuda` as a global of this module, which Numba's simulator swaps for its own at a launch (it does
not look into closures).
"""
from __future__ import annotations

from numba import cuda, float32


def make(tile: int, band: int, strip: int):
    per, row = tile // band, tile + 1          # a shared array's shape must be constants: no expression in it

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
