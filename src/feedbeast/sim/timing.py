"""A timing model of a software-pipelined load/compute loop.

Chapter 03 explains software pipelining with it; chapter 04 compares ring depths.

One block runs a ring of ``stages`` shared-memory buffers.  A producer loads
tile ``i`` into stage ``i % stages`` as soon as that stage is free; a consumer
computes on tile ``i`` as soon as its data has arrived and it has finished
tile ``i - 1``; when it finishes, the stage is free again.

A load is modelled as a request that takes ``latency_ns`` to be answered,
followed by ``stage_bytes`` streaming in at ``bandwidth`` bytes/ns -- the
share of the memory system this block can count on.  Transfers share that
bandwidth one after the other, so a load whose answer comes back while
another transfer is still streaming waits for it::

    arrival(i) = max(issue(i) + latency, end of previous transfer) + bytes / bandwidth

The events (issue, transfer start, arrival, compute start and end) are
processed in time order.  With one producer and one consumer that both walk
the tiles in order, that event order is the tile order, which is what the
loop below exploits; the result is the same as a general event queue's.

What the model shows (the point of chapter 01-04):

* at most ``stages * stage_bytes`` bytes are in the ring, and each stage is
  held from the moment its load is issued until the consumer has finished
  with it (``latency + transfer + compute``); by Little's law the throughput
  cannot exceed ``stages * stage_bytes / (latency + transfer + compute)`` --
  more stages help until that reaches ``bandwidth``;
* it cannot exceed ``stage_bytes / compute_ns`` either: when compute
  dominates, more stages change nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..timeline import Span, draw_timeline

__all__ = ["simulate_pipeline", "TimingResult"]


@dataclass
class TimingResult:
    spans: list
    total_ns: float
    bytes_per_ns: float          # achieved: tiles * stage_bytes / total_ns
    idle_fraction: float         # share of total_ns the consumer was not computing
    bound_bytes_per_ns: float    # min(bandwidth, Little's-law bound, compute bound)
    littles_bound: float         # stages * stage_bytes / (latency + transfer + compute)
    compute_bound: float         # stage_bytes / compute_ns
    params: dict = field(default_factory=dict)

    @property
    def efficiency(self) -> float:
        """Achieved throughput as a fraction of the tightest bound."""
        return self.bytes_per_ns / self.bound_bytes_per_ns if self.bound_bytes_per_ns else 0.0

    def summary(self) -> str:
        p = self.params
        return (f"{p['stages']} stages, {p['tiles']} tiles: {self.total_ns:,.0f} ns, "
                f"{self.bytes_per_ns:.2f} B/ns ({100 * self.efficiency:.0f}% of the "
                f"{self.bound_bytes_per_ns:.2f} B/ns bound), consumer idle "
                f"{100 * self.idle_fraction:.1f}%")

    def __str__(self):
        return self.summary()

    def draw(self, ax=None, title=None, unit="ns", max_tiles=None):
        """Gantt chart of the run (optionally only the first ``max_tiles`` tiles)."""
        spans = self.spans
        if max_tiles is not None:
            spans = [s for s in spans if int(s.label.lstrip("t") or 0) < max_tiles]
        return draw_timeline(spans, ax=ax, title=title or self.summary(), unit=unit,
                             lanes=self.lanes())

    def lanes(self):
        S = self.params["stages"]
        return ["producer"] + [f"stage {s}" for s in range(S)] + ["memory", "consumer"]


def simulate_pipeline(latency_ns: float = 800.0, stage_bytes: int = 16384,
                      bandwidth: float = 20.0, compute_ns: float = 500.0, stages: int = 2,
                      tiles: int = 64, issue_ns: float = 0.0) -> TimingResult:
    """Simulate the pipelined loop and return spans plus a summary.

    ``latency_ns``: time from issuing a load until its data starts to stream
    back.  ``stage_bytes``: bytes per stage (one tile).  ``bandwidth``: bytes/ns
    available to this block.  ``compute_ns``: consumer time per tile.
    ``issue_ns``: producer time to issue one load (0: free).

    Lanes of the returned spans: ``producer`` (``issue`` and ``wait`` while it
    is blocked on a busy stage), ``stage k`` (``load`` in flight, ``full``
    data waiting, ``consume`` in use), ``memory`` (``transfer``) and
    ``consumer`` (``compute`` and ``bubble``).
    """
    if stages < 1 or tiles < 1:
        raise ValueError("need stages >= 1 and tiles >= 1")
    if bandwidth <= 0 or stage_bytes <= 0 or latency_ns < 0 or compute_ns < 0 or issue_ns < 0:
        raise ValueError("latency, compute and issue times must be >= 0; bytes and bandwidth > 0")
    xfer = stage_bytes / bandwidth
    stage_free = [0.0] * stages
    producer_t = 0.0
    pipe_free = 0.0
    consumer_t = 0.0
    spans = []
    busy = 0.0
    for i in range(tiles):
        s = i % stages
        lab = f"t{i}"
        # producer: wait for the stage to be released, then issue
        issue = max(producer_t, stage_free[s])
        if issue > producer_t:
            spans.append(Span("producer", producer_t, issue, "wait", lab))
        if issue_ns > 0:
            spans.append(Span("producer", issue, issue + issue_ns, "issue", lab))
        producer_t = issue + issue_ns
        sent = issue + issue_ns
        # memory: latency, then the bytes stream on the shared bandwidth
        t_start = max(sent + latency_ns, pipe_free)
        arrival = t_start + xfer
        pipe_free = arrival
        spans.append(Span("memory", t_start, arrival, "transfer", lab))
        spans.append(Span(f"stage {s}", sent, arrival, "load", lab))
        # consumer: needs the data and to be done with the previous tile
        start = max(arrival, consumer_t)
        if start > consumer_t:
            spans.append(Span("consumer", consumer_t, start, "bubble"))
        if start > arrival:
            spans.append(Span(f"stage {s}", arrival, start, "full", lab))
        end = start + compute_ns
        if compute_ns > 0:
            spans.append(Span("consumer", start, end, "compute", lab))
            spans.append(Span(f"stage {s}", start, end, "consume", lab))
        busy += compute_ns
        consumer_t = end
        stage_free[s] = end
    total = consumer_t
    order = {lane: k for k, lane in enumerate(
        ["producer"] + [f"stage {k}" for k in range(stages)] + ["memory", "consumer"])}
    spans.sort(key=lambda sp: (order[sp.lane], sp.start))   # rows come out in this order
    littles = stages * stage_bytes / (latency_ns + issue_ns + xfer + compute_ns)
    comp = stage_bytes / compute_ns if compute_ns > 0 else float("inf")
    return TimingResult(
        spans=spans, total_ns=total,
        bytes_per_ns=tiles * stage_bytes / total if total > 0 else float("inf"),
        idle_fraction=(total - busy) / total if total > 0 else 0.0,
        bound_bytes_per_ns=min(bandwidth, littles, comp), littles_bound=littles,
        compute_bound=comp,
        params=dict(latency_ns=latency_ns, stage_bytes=stage_bytes, bandwidth=bandwidth,
                    compute_ns=compute_ns, stages=stages, tiles=tiles, issue_ns=issue_ns))
