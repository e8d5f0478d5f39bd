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


def fp8_a_fragment(r, h: int) -> np.ndarray:
    """Lab 10's A fragment as 16-bit pairs of fp8 codes: mma.m16n8k16's f16 A registers hold (row g, first k pair),
    (row g + 8, first pair), (row g, second pair), (row g + 8, second pair) (PTX ISA, "Matrix Fragments for
    mma.m16n8k16 with floating point type"); ldmatrix left row g's 4 bytes in r[2h] and row g + 8's in r[2h + 1],
    the first pair in the low 16 bits."""
    r = [int(v) for v in r]
    lo, hi = (lambda v: v & 0xFFFF), (lambda v: v >> 16)
    return np.array([lo(r[2 * h]), lo(r[2 * h + 1]), hi(r[2 * h]), hi(r[2 * h + 1])], np.uint32)


def fp8_a_fragment_wrong(got, regs) -> list[str]:
    """Lab 10's A probe in words: for each register of the fragment that differs from fp8_a_fragment, which 16 bits of
    which ldmatrix register it holds (not which it should: that is the exercise; hint 1 leads there)."""
    regs = [int(v) for v in regs]
    halves = {}
    for i, v in enumerate(regs):
        halves.setdefault(v & 0xFFFF, f"r[{i}]'s low 16 bits")
        halves.setdefault(v >> 16, f"r[{i}]'s high 16 bits")
    lines = []
    for h in (0, 1):
        want = fp8_a_fragment(regs, h)
        lines += [f"with h = {h}, a[{q}] holds " + halves.get(int(got[h][q]), f"{int(got[h][q]):#x}, no 16 bits of r")
                  for q in range(4) if int(got[h][q]) != int(want[q])]
    return lines + ["not the k pair and row the mma wants there (hint 1)"] if lines else []


def fp8_b_addresses(P: int) -> np.ndarray:
    """Lab 10's B fragment addresses, [chunk c, token, t] -> the byte offset in a stage of token tok's bf16 k = 16c + 4t:
    box c // 4 of P rows x 128 B (1024-aligned for P >= 8), column k % 64 of the row, placed by the 128-byte swizzle."""
    from ..swizzle import swizzle
    c, tok, t = np.meshgrid(np.arange(8), np.arange(P), np.arange(4), indexing="ij")
    k = 16 * c + 4 * t
    return swizzle((k // 64) * P * 128 + tok * 128 + 2 * (k % 64), 128).astype(np.uint32)
