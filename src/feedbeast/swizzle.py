"""Shared-memory swizzles, bank maps and wgmma descriptors as plain Python (no GPU needed).

Chapter 05 explains the swizzles, the bank maps and the wgmma descriptors.

TMA writes a box into shared memory either row after row (no swizzle) or with a 32, 64 or 128-byte
swizzle: inside each 128-byte line, the 16-byte chunks are permuted by XOR with the line's index
(PTX ISA, "Tensor Copy" / "Tensor-map swizzling modes"; CUDA Driver API, `CUtensorMapSwizzle`):

    swizzled = offset ^ (((offset >> 7) % R) << 4)      R = 2, 4, 8 for the 32, 64, 128 B modes

With rows of 128 bytes (64 bf16, 32 float) and the 128 B mode this reads: chunk c of row r is stored at
chunk c ^ (r % 8). The hardware applies the XOR to address bits, so a swizzled buffer must start on a
multiple of the pattern's period (256, 512, 1024 B): `period(mode)`.

    swizzle(offset, 128)                 the byte where TMA puts logical byte `offset`
    bank_map(rows, row_bytes, mode)      the 16-byte bank group of each logical chunk
    wavefronts(addresses, width)         shared-memory passes one warp-wide access needs (a model)
    plot_bank_maps(...)                  the picture of chapter 05
    wgmma_descriptor(...) / decode(...)  the 64-bit shared-memory matrix descriptor of wgmma
"""
from __future__ import annotations

import numpy as np

from .errors import whole

MODES = (0, 32, 64, 128)
BANKS = 32
BANK_BYTES = 4
CHUNK = 16   # the swizzle permutes 16-byte chunks: 4 banks each


def _rows_of_pattern(mode: int) -> int:
    if not whole(mode) or mode not in MODES:     # 128.0 and False compare equal to a mode
        raise ValueError(f"swizzle mode {mode!r}: use 0 (none), 32, 64 or 128")
    return mode // CHUNK if mode else 1   # 2, 4, 8 lines of 128 B before the pattern repeats


def period(mode: int) -> int:
    """Bytes after which the pattern repeats: the alignment a swizzled buffer needs (128 for none)."""
    return 128 * _rows_of_pattern(mode)


def swizzle(offset, mode: int):
    """Byte offset (from a `period(mode)`-aligned base) where the swizzle stores logical byte `offset`.

    Works on ints and numpy arrays. The XOR flips bits 4-6 (the 16-byte chunk inside a 128-byte line)
    with bits 7-9 (the line index), masked to the mode's number of lines.
    """
    r = _rows_of_pattern(mode)
    offset = _offsets(offset)
    return offset ^ (((offset >> 7) % r) << 4)


def _offsets(offset):
    """`offset` as swizzle computes on it (an int as is, anything else as a numpy array), or a ValueError: the shift
    and XOR turn a negative offset into another negative number, and numpy refuses a float in words of its own."""
    if isinstance(offset, int) and not isinstance(offset, bool):
        if offset >= 0:
            return offset
        what = f"offset={offset!r}"
    else:
        try:
            a = np.asarray(offset)
        except ValueError:                   # a ragged list
            a = np.asarray(None)
        if a.dtype.kind == "u" or (a.dtype.kind == "i" and not (a < 0).any()):
            return a
        if a.ndim == 0:
            what = f"offset={offset!r}"
        elif a.dtype.kind == "i":
            what = f"offset holds {a[a < 0].flat[0]}"
        else:
            what = f"offset is an array of {a.dtype}"
    raise ValueError(f"swizzle: {what}: byte offsets are whole numbers >= 0, an int or an integer array "
                     "(use // for an offset computed by division)")


def chunk_index(row: int, chunk: int, row_bytes: int, mode: int) -> int:
    """Where chunk `chunk` of row `row` lands, counted in 16-byte chunks from the buffer's start."""
    _rows_of_pattern(mode)
    for name, v in (("row", row), ("chunk", chunk)):
        if not whole(v):
            raise ValueError(f"chunk_index: {name}={v!r}: a whole number >= 0")
    if not whole(row_bytes, CHUNK) or row_bytes % CHUNK:
        raise ValueError(f"chunk_index: row_bytes={row_bytes!r}: the bytes of a row, a multiple of 16 (whole "
                         "16-byte chunks), at least 16")
    row, chunk, row_bytes = int(row), int(chunk), int(row_bytes)   # numpy's small integers would wrap below
    if chunk * CHUNK >= row_bytes:       # would be read as a chunk of a later row
        raise ValueError(f"chunk_index: chunk={chunk!r}: a row of {row_bytes} bytes holds chunks 0 to "
                         f"{row_bytes // CHUNK - 1}")
    return int(swizzle(row * row_bytes + chunk * CHUNK, mode)) // CHUNK


def bank_map(rows: int, row_bytes: int, mode: int) -> np.ndarray:
    """[row, logical chunk] -> bank group (0-7) of shared memory holding it (banks 4g .. 4g+3)."""
    _rows_of_pattern(mode)               # said for an empty map too
    if not whole(rows):
        raise ValueError(f"bank_map: rows={rows!r}: the number of rows, a whole number >= 0")
    if not whole(row_bytes) or row_bytes % CHUNK:
        raise ValueError(f"bank_map: row_bytes={row_bytes!r}: the bytes of a row, a whole multiple of 16 "
                         "(rows are whole 16-byte chunks)")
    rows, row_bytes = int(rows), int(row_bytes)
    out = np.empty((rows, row_bytes // CHUNK), int)
    for r in range(rows):
        for c in range(row_bytes // CHUNK):
            out[r, c] = chunk_index(r, c, row_bytes, mode) % (BANKS * BANK_BYTES // CHUNK)
    return out


def wavefronts(addresses, width: int = 4) -> int:
    """Passes through the 32 banks that one warp-wide shared-memory access needs (a model).

    addresses: the byte address each of the 32 lanes reads (None for an inactive lane); width: bytes per
    lane (4, 8 or 16). Wider accesses are served a half warp (8 B) or a quarter warp (16 B) at a time;
    within each group, a bank serves one 4-byte word per pass, and lanes reading the same word share it.
    A conflict-free warp access takes 1, 2 or 4 passes for 4, 8 or 16 bytes per lane.
    """
    if width not in (4, 8, 16):
        raise ValueError("width is 4, 8 or 16 bytes")
    group = 32 * 4 // width   # lanes served together: 32, 16, 8
    total = 0
    for g0 in range(0, 32, group):
        words_per_bank: dict[int, set] = {}
        for a in addresses[g0:g0 + group]:
            if a is None:
                continue
            for w in range(a // BANK_BYTES, (a + width) // BANK_BYTES):
                words_per_bank.setdefault(w % BANKS, set()).add(w)
        total += max((len(s) for s in words_per_bank.values()), default=0)
    return total


def column_read_addresses(chunk: int, mode: int, row_bytes: int = 128, row0: int = 0) -> list:
    """Lane l reads 16-byte chunk `chunk` of row row0 + l of a swizzled tile (chapter 05's kernel)."""
    return [int(swizzle((row0 + lane) * row_bytes + chunk * CHUNK, mode)) for lane in range(32)]


def plot_bank_maps(modes=(0, 32, 64, 128), rows: int = 8, row_bytes: int = 128, axes=None):
    """One panel per mode: each cell is a logical 16-byte chunk, coloured and labelled by its bank group.

    A column of the tile (one chunk index read by every row) is conflict-free when its colours differ.
    """
    import matplotlib.pyplot as plt
    if axes is None:
        _, axes = plt.subplots(1, len(modes), figsize=(3.1 * len(modes), 0.42 * rows + 1.2))
    axes = np.atleast_1d(axes)
    for ax, mode in zip(axes, modes):
        m = bank_map(rows, row_bytes, mode)
        ax.imshow(m, cmap="tab10", vmin=0, vmax=9, aspect="auto")
        for r in range(m.shape[0]):
            for c in range(m.shape[1]):
                ax.text(c, r, str(m[r, c]), ha="center", va="center", fontsize=8, color="white")
        ax.set_title(f"{'no swizzle' if mode == 0 else f'{mode} B swizzle'}", fontsize=10)
        ax.set_xlabel("16-byte chunk of the row")
        ax.set_xticks(range(m.shape[1]))
        ax.set_yticks(range(m.shape[0]))
    axes[0].set_ylabel(f"row ({row_bytes} B each)")
    return axes


# ---- wgmma shared-memory matrix descriptors (PTX ISA, "Matrix Descriptor Format") --------------------
DESC_SWIZZLE = {0: 0, 128: 1, 64: 2, 32: 3}   # bits 62-63


def _field(nbytes: int, name: str = "offset") -> int:
    """A 14-bit field of bytes >> 4 (PTX ISA, "Matrix Descriptor Format"): a byte count that is not a multiple of
    16 or not below 256 KiB would be encoded as another address, silently: refused."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or not 0 <= nbytes < 1 << 18 \
            or nbytes % 16:
        raise ValueError(f"wgmma_descriptor: {name}={nbytes!r}: the descriptor holds it as bytes >> 4 in 14 bits: a "
                         "whole number of bytes, a multiple of 16, below 256 KiB (0x40000)")
    return (int(nbytes) & 0x3FFFF) >> 4


def wgmma_descriptor(start: int, lbo: int, sbo: int, mode: int, base_offset: int = 0) -> int:
    """The 64-bit descriptor: start address, leading and stride byte offsets (all >> 4), swizzle mode."""
    if mode not in DESC_SWIZZLE:
        raise ValueError(f"wgmma_descriptor: mode={mode!r}: the swizzle is one of {', '.join(map(str, DESC_SWIZZLE))} "
                         "(bytes; 0: none)")
    if not isinstance(base_offset, (int, np.integer)) or not 0 <= base_offset < 8:
        raise ValueError(f"wgmma_descriptor: base_offset={base_offset!r}: a 3-bit field, 0 to 7")
    return (_field(start, "start") | (_field(lbo, "lbo") << 16) | (_field(sbo, "sbo") << 32)
            | (int(base_offset) << 49) | (DESC_SWIZZLE[mode] << 62))


def decode(desc: int) -> dict:
    inv = {v: k for k, v in DESC_SWIZZLE.items()}
    return {"start": (desc & 0x3FFF) << 4, "lbo": ((desc >> 16) & 0x3FFF) << 4,
            "sbo": ((desc >> 32) & 0x3FFF) << 4, "base_offset": (desc >> 49) & 7,
            "swizzle": inv[(desc >> 62) & 3]}


def k_major_sw128_address(desc: int, m: int, k_byte: int) -> int:
    """Shared-memory byte the wgmma reads for row m, byte k_byte (0-31) of a K-major, 128 B swizzled
    operand described by `desc` (a model of the canonical layout: rows of 128 B in 8-row groups SBO apart,
    the swizzle XOR applied to the final address)."""
    d = decode(desc)
    if d["swizzle"] != 128 or not 0 <= k_byte < 32:     # the model covers this one layout only
        raise ValueError(f"k_major_sw128_address models the 128 B swizzle and bytes 0-31 of a k step, got a "
                         f"descriptor of swizzle {d['swizzle']} and k_byte {k_byte}")
    linear = d["start"] + (m // 8) * d["sbo"] + (m % 8) * 128 + k_byte
    return int(swizzle(linear, 128))
