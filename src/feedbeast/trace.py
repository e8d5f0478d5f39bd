"""Timelines measured on the GPU: a trace buffer that kernels fill with %globaltimer spans.

Chapter 04 measures its ring's per-role timeline with it; chapters 06 and 09 do the same for theirs.

    tb = TraceBuffer(["producer", "consumer 0", "consumer 1"], per_lane=512)
    mod = fb.compile(src, defines=tb.defines)          # FB_TRACE=1, FB_TRACE_PER_LANE=512
    mod.my_kernel.launch(grid, block, ..., tb.array)   # the kernel's `long long* trace` argument
    spans = tb.spans()                                 # feedbeast.timeline.Span list (ns from the first)

A kernel records with `fb::Tracer` from <fb/trace.cuh>: rows of four int64s (lane id, kind id,
start_ns, end_ns); lane l owns rows [l * per_lane, (l + 1) * per_lane). Rows never written stay zero
and are dropped when read. On a machine with no GPU the buffer is a placeholder and spans() returns
a Skipped.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .memory import empty
from .skip import Skipped
from .timeline import spans_from_records

#: kind ids of fb::TraceKind in <fb/trace.cuh>, in order
KINDS = ("wait", "issue", "load", "full", "consume", "compute", "bubble")


class TraceBuffer:
    """A zero-filled (lanes * per_lane, 4) int64 device buffer and the names of its lanes."""

    def __init__(self, lanes: Sequence[str], per_lane: int = 256):
        if per_lane < 1 or not lanes:
            raise ValueError("a trace buffer needs at least one lane and per_lane >= 1")
        self.lanes = list(lanes)
        self.per_lane = int(per_lane)
        self.array = empty((len(self.lanes) * self.per_lane, 4), np.int64, poison=False)
        self.reset()

    @property
    def defines(self) -> dict:
        """The -D flags a kernel needs to record into this buffer."""
        return {"FB_TRACE": 1, "FB_TRACE_PER_LANE": self.per_lane}

    def reset(self) -> "TraceBuffer":
        """Zero every row (before each traced launch)."""
        self.array.fill_bytes(0)
        return self

    def records(self):
        """The raw (n, 4) int64 rows, or a Skipped with no GPU."""
        if not self.array.on_gpu:
            return Skipped("needs a GPU, this machine has none", "read trace")
        return self.array.to_host()

    def spans(self, t0: int | None = None):
        """The recorded spans, named by lane and kind, times in ns from the earliest start."""
        rec = self.records()
        if isinstance(rec, Skipped):
            return rec
        return spans_from_records(rec, lanes=self.lanes, kinds=KINDS, t0=t0)



def spans_of(records, lanes: Sequence[str]) -> list:
    """Spans from a host copy of a trace buffer (e.g. one saved with np.save)."""
    return spans_from_records(np.asarray(records), lanes=list(lanes), kinds=KINDS)
