"""Tensor maps in a trace: each TMA event names its map by address, paired with a hash of the map's 128 bytes;
the launch's tensor-map arguments give each its box (Chapter 05 explains tensor maps, chapter 04 the checker)."""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from .check import check
from .report import Report
from .trace import ALL


def map_id(raw: bytes) -> int:
    """A tensor map's id in the trace: FNV-1a over the 32 words of its 128 bytes, as fb::hazard::map_id computes it
    on the device from the map the kernel was given. Two maps with the same bytes have the same box."""
    h = 2166136261
    for w in np.frombuffer(bytes(raw)[:128], "<u4").tolist():
        h = ((h ^ w) * 16777619) & ALL
    return h


def _sizes_by_hash(args, derived=()) -> dict:
    """{hash of a map's bytes: its possible box bytes}: the launch's tensor-map arguments, and the maps made from them
    on the device by tensormap.replace of the global address (`derived`: (hash before, hash after)), which keeps the
    box, through any chain of rewrites."""
    from ..tensormap import TensorMap
    by_id = defaultdict(set)
    for a in args:
        if isinstance(a, TensorMap) and a.raw:
            by_id[map_id(a.raw)].add(a.box_bytes)
    grew = bool(derived)
    while grew:         # until nothing new is learnt
        grew = False
        for before, after in derived:
            if by_id.get(before) and not by_id[before] <= by_id[after]:
                by_id[after] |= by_id[before]
                grew = True
    return by_id


def map_boxes(args, derived=()) -> dict:
    """{hash: box bytes} of the maps whose bytes name one box: a TMA op's box from the hash recorded before it."""
    return {h: next(iter(s)) for h, s in _sizes_by_hash(args, derived).items() if len(s) == 1}


def _map_readings(args, params=None, recorded=(), hashes=None, derived=()) -> list:
    """{map id: box bytes} for the launch's tensor-map arguments: one reading, or one per way of resolving ids that
    several maps with different boxes share (then every reading is checked and each one's violations reported:
    the reading that would hide an expect_tx bug is never chosen over the one that shows it).

    `recorded`: the map ids (addresses) of the trace's TMA events; `hashes`: {address: hash of the bytes there}, from
    its tma.map events (or {address: set of hashes}, a map rewritten in place); `derived`: (hash before, hash after)
    of each tensormap.replace of a map's global address, which keeps its box. A recorded address whose bytes match no
    argument is matched by parameter offsets (`params`: the kernel's [(offset, size)]): every consistent match is a
    reading of its own."""
    from ..tensormap import TensorMap
    by_id = _sizes_by_hash(args, derived)
    readings = [{}]
    hashes = hashes or {}

    def sizes_at(addr):
        h = hashes.get(addr)
        return set().union(*(by_id.get(x, set()) for x in h)) if isinstance(h, (set, frozenset)) else by_id.get(h)
    if recorded:        # a trace: its ids are addresses, named by the hash of the bytes found there
        for addr in sorted(recorded):
            sizes = sizes_at(addr)
            if sizes:
                readings = [{**r, addr: n} for r in readings for n in sorted(sizes)]
        unknown = sorted(a for a in recorded if not sizes_at(a))
    else:
        for mid, sizes in by_id.items():
            readings = [{**r, mid: n} for r in readings for n in sorted(sizes)]
        unknown = []
    if unknown and params:
        offs = {params[i][0]: a.box_bytes for i, a in enumerate(args) if isinstance(a, TensorMap) and i < len(params)}
        fits = set()
        for off in offs:
            base = (unknown[0] - off) & ALL
            if all(((r - base) & ALL) in offs for r in unknown):
                fits.add(tuple((r, offs[(r - base) & ALL]) for r in unknown))
        if fits:
            readings = [{**r, **dict(f)} for r in readings for f in sorted(fits)]
    return readings


def _map_geometry(args, hashes) -> dict:
    """{map address: (array pointer, row stride B, element B, box rows, box cols)} of the 2-D maps the trace names by
    the bytes found at their addresses: where a TMA box lies in global memory."""
    from ..tensormap import TensorMap
    by_hash = {}
    for a in args:
        if isinstance(a, TensorMap) and a.raw and len(a.box) == 2 and getattr(a.array, "ptr", None) is not None:
            by_hash[map_id(a.raw)] = (int(a.array.ptr), int(a.strides_bytes[0]), int(a.dtype.itemsize),
                                      int(a.box[0]), int(a.box[1]))
    return {addr: by_hash[h] for addr, h in (hashes or {}).items() if h in by_hash}


def _check_readings(events, readings, **meta) -> Report:
    """The check under each reading of the maps, the violations of all of them together."""
    reports = [check(events, maps=m, **meta) for m in readings or [{}]]
    first = reports[0]
    for r in reports[1:]:
        seen = {(v.rule, v.second.index) for v in first.violations}
        first.violations += [v for v in r.violations if (v.rule, v.second.index) not in seen]
        first.unchecked = first.unchecked or r.unchecked
        first.partly = first.partly or r.partly
    return first


# Synchronisation and asynchronous operations the trace cannot see when a kernel's own source uses them (not through
