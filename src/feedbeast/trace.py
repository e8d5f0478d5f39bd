"""Timelines measured on the GPU: a trace buffer that kernels fill with %globaltimer spans.

Chapter 04 measures its ring's per-role timeline with it; chapters 06 and 09 do the same for theirs.

    tb = TraceBuffer(["producer", "consumer 0", "consumer 1"], per_lane=512)
    mod = fb.compile(src, defines=tb.defines)          # FB_TRACE=1, FB_TRACE_PER_LANE=512
    mod.my_kernel.launch(grid, block, ..., tb.array)   # the kernel's `long long* trace` argument
    spans = tb.spans()                                 # feedbeast.timeline.Span list (ns from the first)
    spans = tb.spans(name="ch09/rung 4 trace", about="rung 4, block 0")   # the same, handed to hooks.on_trace
    spans = recorded_spans("ch09/rung 4 trace", skipped)  # no GPU: what a GPU run recorded under the name

A kernel records with `fb::Tracer` from <fb/trace.cuh>: rows of four int64s (lane id, kind id,
start_ns, end_ns); lane l owns rows [l * per_lane, (l + 1) * per_lane). Rows never written stay zero
and are dropped when read. On a machine with no GPU the buffer is a placeholder and spans() returns
a Skipped. Named spans go to feedbeast.hooks.on_trace (make bench records them in the results log), so that a
reader without a GPU still sees the timeline a GPU measured (recorded_spans), labelled with its GPU and date.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from . import hooks
from .memory import empty
from .skip import Skipped
from .timeline import spans_from_records, spans_to_records

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

    def spans(self, t0: int | None = None, *, name: str | None = None, about: str = "", data: dict | None = None):
        """The recorded spans, named by lane and kind, times in ns from the earliest start. With `name`: named()'s
        Spans (what ran, `about`, this GPU's name, and `data`: figures of the same run that go with the timeline)."""
        rec = self.records()
        if isinstance(rec, Skipped):
            return rec
        out = spans_from_records(rec, lanes=self.lanes, kinds=KINDS, t0=t0)
        return out if name is None else named(out, name, about=about, data=data)


def named(spans, name: str, *, about: str = "", data: dict | None = None) -> "Spans":
    """Spans measured on this GPU (from a TraceBuffer or any other clock the kernels read), as a Spans named `name`
    and handed to hooks.on_trace, except where timing is off (under the sanitizer the kernel runs instrumented, so
    its times are not the kernel's)."""
    from .device import gpu
    g = gpu()
    out = Spans(spans, name=name, about=about, gpu=g.name if g else "", data=data)
    if not hooks.mode.untimed:
        hooks.emit(hooks.on_trace, out)
    return out


class Spans(list):
    """The spans of one traced run, with what ran (`about`), on which GPU, figures of the same run (`data`), and
    `recorded`: the date of the GPU run they were read back from ("" when they were measured in this process)."""

    def __init__(self, spans=(), *, name: str = "", about: str = "", gpu: str = "", recorded: str = "",
                 data: dict | None = None):
        super().__init__(spans)
        self.name, self.about, self.gpu, self.recorded, self.data = name, about, gpu, recorded, dict(data or {})

    @property
    def origin(self) -> str:
        """Where the spans come from: this GPU's name, or the GPU and date of the run that recorded them."""
        return f"recorded on {self.gpu} on {self.recorded}, not timed here" if self.recorded else self.gpu

    @property
    def title(self) -> str:
        """What ran and where: for a timeline's title."""
        return ", ".join(x for x in (self.about, self.origin) if x)

    def as_record(self) -> dict:
        """A line of the results log: the lanes and kinds named once, each span as four integers (ns)."""
        lanes, kinds = list(dict.fromkeys(s.lane for s in self)), list(dict.fromkeys(s.kind for s in self))
        return {"name": self.name, "about": self.about, "gpu": self.gpu, "data": self.data, "lanes": lanes,
                "kinds": kinds, "rows": spans_to_records(self, lanes, kinds).tolist()}


def recorded_spans(name: str, why):
    """Where a traced run was skipped (`why`, the launch's Skipped): the spans a GPU run recorded under `name`
    (feedbeast.hooks.recorded, kind "trace"), as a Spans that names that GPU and the run's date; else `why`."""
    rec = hooks.recorded_line("trace", name)
    if rec is None:
        return why
    spans = spans_from_records(np.array(rec["rows"], np.int64).reshape(-1, 4), lanes=rec["lanes"],
                               kinds=rec["kinds"], t0=0)
    return Spans(spans, name=name, about=rec.get("about", ""), gpu=rec.get("gpu", ""),
                 recorded=rec.get("time", "")[:10] or "undated", data=rec.get("data"))



def spans_of(records, lanes: Sequence[str]) -> list:
    """Spans from a host copy of a trace buffer (e.g. one saved with np.save)."""
    return spans_from_records(np.asarray(records), lanes=list(lanes), kinds=KINDS)
