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


def grouped_n_order(m_tiles: int, n_tiles: int, group_n: int) -> np.ndarray:
    """Lab 07's raster: (m, n) of tile t = 0, 1, ... in N-grouped order. Bands of group_n tile columns (the last
    as wide as the columns left), each walked down all m_tiles rows, n fastest inside a band."""
    out = []
    for n_first in range(0, n_tiles, group_n):
        width = min(group_n, n_tiles - n_first)
        out += [(m, n_first + j) for m in range(m_tiles) for j in range(width)]
    return np.array(out, np.int64)


def transpose_strip(tile: int, band: int, strip: int):
    """Lab 02's comparison kernel (feedbeast.course.lab02_strip): lab 01's transpose walked down a strip of tiles,
    one buffer. Numba must already be set up (feedbeast.numba_support.setup) in the mode the notebook runs in."""
    from .lab02_strip import make
    return make(tile, band, strip)
