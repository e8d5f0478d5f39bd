"""The trace of a hazard build: event kinds, one event's fields, and the raw buffer's encoding (Chapter 04).

include/fb/hazard.cuh writes the events; the names and numbers here follow its enum Kind in the same order.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

KINDS = (None, "cp.async", "cp.async.commit_group", "cp.async.wait_group", "cp.async.bulk", "tma.load",
         "tma.store", "cp.async.bulk.commit_group", "cp.async.bulk.wait_group.read", "cp.async.bulk.wait_group",
         "mbarrier.init", "mbarrier.arrive", "mbarrier.expect_tx", "mbarrier.wait", "wgmma.fence", "wgmma.read",
         "wgmma.commit_group", "wgmma.wait_group", "fence.proxy.async", "bar.sync", "__syncwarp",
         "barrier.cluster", "generic.read", "generic.write", "tcgen05.commit", "tcgen05.mma", "tma.map", "tma.coords",
         "shared.read", "shared.write", "cp.async.mbarrier.arrive", "cp.reduce.async.bulk", "tensormap.replace",
         "tensormap.cp_fenceproxy", "fence.proxy.tensormap.release", "fence.proxy.tensormap.acquire",
         "griddepcontrol.wait", "griddepcontrol.launch_dependents", "barrier.cluster.arrive", "barrier.cluster.wait")
(CP_ASYNC, CP_COMMIT, CP_WAIT, BULK_LOAD, TMA_LOAD, TMA_STORE, BULK_COMMIT, BULK_WAIT_READ, BULK_WAIT,
 MBAR_INIT, MBAR_ARRIVE, MBAR_EXPECT_TX, MBAR_WAIT, WGMMA_FENCE, WGMMA_READ, WGMMA_COMMIT, WGMMA_WAIT,
 FENCE_PROXY_ASYNC, BAR_SYNC, SYNCWARP, CLUSTER_SYNC, GENERIC_READ, GENERIC_WRITE, TC_COMMIT, TC_MMA, TMA_MAP, TMA_COORDS,
 SMEM_READ, SMEM_WRITE, CP_MBAR_ARRIVE, BULK_REDUCE, TENSORMAP_REPLACE, TENSORMAP_PUBLISH, FENCE_TENSORMAP_RELEASE,
 FENCE_TENSORMAP_ACQUIRE, GRIDDEP_WAIT, GRIDDEP_LAUNCH, CLUSTER_ARRIVE, CLUSTER_WAIT) = range(1, 40)

WORDS = 8            # 32-bit words per event
SMEM_WINDOW = 1 << 24   # shared-memory offsets lie below; a cluster CTA's addresses add rank << 24
ALL = 0xFFFFFFFF


class Event(NamedTuple):   # a tuple: a trace has up to millions of them, made and read in tight loops
    index: int          # slot in the trace: the replay order
    kind: int
    line: int
    block: int
    thread: int
    rank: int           # %cluster_ctarank of the block
    a: int
    b: int
    c: int
    d: int

    @property
    def name(self) -> str:
        return KINDS[self.kind] if 0 < self.kind < len(KINDS) else f"kind {self.kind}"


class Decoded(list):
    """The events decode() made: Python ints in every field, nothing else (check() replays only these in forked
    processes, whose results come back pickled)."""


def decode(words: np.ndarray) -> list[Event]:
    """Events from the raw (n, 8) uint32 trace; a slot not completed (its last word != index + 1) is dropped."""
    w = np.asarray(words, dtype=np.uint32).reshape(-1, WORDS)
    ok = w[:, 7] == np.arange(1, len(w) + 1, dtype=np.uint32)
    idx = np.nonzero(ok)[0]
    w = w[idx].astype(np.int64)
    cols = (idx, w[:, 0] & 0xFF, w[:, 0] >> 8, w[:, 1], w[:, 2] & 0xFFFF, w[:, 2] >> 16, w[:, 3], w[:, 4], w[:, 5],
            w[:, 6])
    make = tuple.__new__     # Python ints, field by field in numpy: a trace can hold millions of events
    return Decoded(make(Event, r) for r in zip(*(c.tolist() for c in cols)))


def encode(events) -> np.ndarray:
    """The inverse of decode (tests build synthetic traces with it): tuples or Events, in replay order."""
    rows = []
    for i, e in enumerate(events):
        kind, line, block, thread, rank, a, b, c, d = (e.kind, e.line, e.block, e.thread, e.rank, e.a, e.b, e.c,
                                                       e.d) if isinstance(e, Event) else e
        rows.append([kind | (line << 8), block, thread | (rank << 16), a & ALL, b & ALL, c & ALL, d & ALL, i + 1])
    return np.array(rows, dtype=np.uint32).reshape(-1, WORDS)




def _name4(c, d) -> str:
    raw = int(c).to_bytes(4, "little") + int(d).to_bytes(4, "little")
    return raw.split(b"\0")[0].decode(errors="replace")

