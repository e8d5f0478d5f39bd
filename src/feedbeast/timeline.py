"""Timelines: spans of work on lanes, drawn as a Gantt chart.

Chapter 01 draws its first timeline; chapter 04 compares a model with a measured one.

A :class:`Span` is one interval of activity on one lane ("stage 2", "memory",
"consumer", "warp 4" ...).  The same type describes what the timing model
predicts (:mod:`feedbeast.sim.timing`) and what a GPU kernel measured with
``%globaltimer`` (:func:`spans_from_records`), so the two can be drawn next
to each other with :func:`compare_timelines`.

Nothing here calls ``plt.show()``; the functions return Axes and leave the
display to the notebook.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

__all__ = ["Span", "draw_timeline", "compare_timelines", "spans_from_records",
           "spans_to_records", "KIND_COLORS"]


@dataclass(frozen=True)
class Span:
    """Activity of one ``kind`` on ``lane`` from ``start`` to ``end`` (ns)."""

    lane: str
    start: float
    end: float
    kind: str
    label: str = ""

    @property
    def duration(self) -> float:
        return self.end - self.start


#: fixed colours for the kinds this course uses; other kinds get the next
#: free colour of the tab10 cycle
KIND_COLORS = {
    "load": "#4C78A8",      # a load in flight
    "transfer": "#72B7B2",  # bytes moving on the shared bandwidth
    "full": "#B9D7F0",      # data resident, waiting for the consumer
    "ready": "#B9D7F0",
    "compute": "#54A24B",
    "consume": "#A6D49A",
    "mma": "#54A24B",
    "bubble": "#E45756",    # consumer idle
    "idle": "#E45756",
    "wait": "#F2B5B5",      # producer blocked
    "issue": "#F58518",
    "store": "#B279A2",
    "epilogue": "#B279A2",
}

_UNITS = {"ns": 1.0, "us": 1e-3, "µs": 1e-3, "ms": 1e-6, "s": 1e-9}


def _colors_for(kinds, colors=None):
    import matplotlib as mpl
    table = dict(KIND_COLORS)
    if colors:
        table.update(colors)
    cycle = [c for c in mpl.colormaps["tab10"].colors]
    used = set()
    out = {}
    k = 0
    for kind in kinds:
        if kind in table:
            out[kind] = table[kind]
        else:
            while cycle[k % len(cycle)] in used and k < 2 * len(cycle):
                k += 1
            out[kind] = cycle[k % len(cycle)]
            k += 1
        used.add(out[kind])
    return out


def _ordered(values):
    seen = {}
    for v in values:
        seen.setdefault(v, None)
    return list(seen)


def draw_timeline(spans: Sequence[Span], ax=None, title: str | None = None, unit: str = "ns",
                  lanes: Sequence[str] | None = None, colors: Mapping[str, str] | None = None,
                  labels: bool = True):
    """Draw ``spans`` as a Gantt chart: one row per lane, one colour per kind.

    Times are taken to be in ns and shown in ``unit`` ("ns", "us", "ms", "s";
    any other string is used as the axis label without scaling).  Rows follow
    ``lanes`` if given, else the order in which lanes first appear, top to
    bottom.  Span labels are written inside bars wide enough to hold them.
    Returns the Axes.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    spans = list(spans)
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 0.45 * max(2, len(lanes or {s.lane for s in spans})) + 1.2))
    scale = _UNITS.get(unit, 1.0)
    lane_order = list(lanes) if lanes is not None else _ordered(s.lane for s in spans)
    missing = [s.lane for s in spans if s.lane not in lane_order]
    lane_order += _ordered(missing)
    row = {lane: i for i, lane in enumerate(lane_order)}
    kinds = _ordered(s.kind for s in spans)
    cmap = _colors_for(kinds, colors)

    lo = min((s.start for s in spans), default=0.0) * scale
    hi = max((s.end for s in spans), default=1.0) * scale
    width_all = (hi - lo) or 1.0
    h = 0.8
    for kind in kinds:
        for lane in lane_order:
            bars = [(s.start * scale, max(s.end - s.start, 0.0) * scale)
                    for s in spans if s.kind == kind and s.lane == lane]
            if bars:
                ax.broken_barh(bars, (row[lane] - h / 2, h), facecolors=cmap[kind],
                               edgecolor="white", linewidth=0.4)
    if labels:
        for s in spans:
            w = (s.end - s.start) * scale
            if s.label and w > 0.035 * width_all * max(1, len(s.label)) / 3:
                ax.text((s.start + s.end) / 2 * scale, row[s.lane], s.label, ha="center",
                        va="center", fontsize=7, clip_on=True)
    ax.set_yticks(range(len(lane_order)))
    ax.set_yticklabels(lane_order)
    ax.set_ylim(len(lane_order) - 0.5, -0.5)
    ax.set_xlim(lo, lo + width_all * 1.01)
    ax.set_xlabel(f"time ({unit})")
    if title:
        ax.set_title(title)
    if kinds:
        ax.legend(handles=[Patch(facecolor=cmap[k], label=k) for k in kinds],
                  loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    return ax


def compare_timelines(items, unit: str = "ns", layout: str = "columns", sharex: bool = False,
                      lanes: Sequence[str] | None = None, figsize=None):
    """Draw several timelines side by side, e.g. ``[("model", a), ("measured", b)]``.

    ``layout="columns"`` puts them next to each other, ``"rows"`` stacks them
    (better for long timelines).  Returns the list of Axes.
    """
    import matplotlib.pyplot as plt

    items = list(items)
    if not items:
        raise ValueError("nothing to compare")
    n = len(items)
    nlanes = max(len({s.lane for s in sp}) for _, sp in items) if lanes is None else len(lanes)
    if layout == "columns":
        fig, axes = plt.subplots(1, n, figsize=figsize or (6.5 * n, 0.45 * max(2, nlanes) + 1.4),
                                 sharex=sharex, squeeze=False)
    elif layout == "rows":
        fig, axes = plt.subplots(n, 1, figsize=figsize or (11, n * (0.45 * max(2, nlanes) + 1.2)),
                                 sharex=sharex, squeeze=False)
    else:
        raise ValueError(f"layout must be 'columns' or 'rows', not {layout!r}")
    axes = list(axes.ravel())
    for ax, (title, spans) in zip(axes, items):
        draw_timeline(spans, ax=ax, title=title, unit=unit, lanes=lanes)
    every = [s for _, spans in items for s in spans]
    if sharex and every:
        # each drawing set the shared axis to its own range, the last one winning: widen it to cover them all
        scale = _UNITS.get(unit, 1.0)
        lo, hi = min(s.start for s in every) * scale, max(s.end for s in every) * scale
        axes[0].set_xlim(lo, lo + ((hi - lo) or 1.0) * 1.01)
    fig.tight_layout()
    return axes


def _namer(names, what):
    if names is None:
        return lambda i: f"{what} {i}"
    if isinstance(names, Mapping):
        return lambda i: names.get(i, f"{what} {i}")
    names = list(names)
    return lambda i: names[i] if 0 <= i < len(names) else f"{what} {i}"


def spans_from_records(records, lanes=None, kinds=None, drop_invalid: bool = True,
                       t0: int | None = None) -> list:
    """Turn GPU timestamp records into Spans.

    ``records``: array of shape ``(n, 4)`` with columns lane id, kind id,
    start, end -- what a kernel writes with ``%globaltimer`` (ns).  Keep it an
    integer array (``uint64``/``int64``): raw timer values need all 64 bits.
    ``lanes`` and ``kinds`` name the ids (a sequence indexed by id, or a
    dict); unknown ids are named "lane 7" / "kind 3".  Times are shifted so
    the earliest start is 0 (or by ``t0`` if given).

    Rows that were never written (start and end both 0) or that run backwards
    (end < start) are dropped, or raise ``ValueError`` with
    ``drop_invalid=False``.  The spans come back sorted by start time.
    """
    rec = np.asarray(records)
    if rec.ndim != 2 or rec.shape[1] != 4:
        raise ValueError(f"records must have shape (n, 4), not {rec.shape}")
    if rec.shape[0] == 0:
        return []
    if rec.dtype.kind in "ui":
        rec = rec.astype(np.int64)
        ids = rec[:, :2]
        start, end = rec[:, 2], rec[:, 3]
    else:
        ids = rec[:, :2].astype(np.int64)
        start, end = rec[:, 2].astype(np.float64), rec[:, 3].astype(np.float64)
    bad = ((start == 0) & (end == 0)) | (end < start)
    if bad.any() and not drop_invalid:
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"record {i} is invalid: start {start[i]}, end {end[i]}")
    keep = ~bad
    if not keep.any():
        return []
    ids, start, end = ids[keep], start[keep], end[keep]
    base = start.min() if t0 is None else t0
    s_rel = (start - base).astype(np.float64)   # subtract in integers, then convert
    e_rel = (end - base).astype(np.float64)
    lane_name, kind_name = _namer(lanes, "lane"), _namer(kinds, "kind")
    order = np.lexsort((ids[:, 0], s_rel))
    return [Span(lane_name(int(ids[i, 0])), float(s_rel[i]), float(e_rel[i]),
                 kind_name(int(ids[i, 1]))) for i in order]


def spans_to_records(spans, lanes: Sequence[str], kinds: Sequence[str], t0: int = 0):
    """Inverse of :func:`spans_from_records`: an ``(n, 4)`` int64 array (labels are lost)."""
    lane_id = {name: i for i, name in enumerate(lanes)}
    kind_id = {name: i for i, name in enumerate(kinds)}
    out = np.empty((len(spans), 4), dtype=np.int64)
    for r, s in enumerate(spans):
        out[r] = (lane_id[s.lane], kind_id[s.kind], t0 + int(round(s.start)), t0 + int(round(s.end)))
    return out
