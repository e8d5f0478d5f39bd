"""Tests of feedbeast.timeline: spans, Gantt drawing, GPU timestamp records."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from feedbeast.sim import simulate_pipeline  # noqa: E402
from feedbeast.timeline import (Span, compare_timelines, draw_timeline,  # noqa: E402
                                spans_from_records, spans_to_records)

SPANS = [
    Span("producer", 0, 10, "issue", "t0"),
    Span("stage 0", 10, 60, "load", "t0"),
    Span("stage 1", 20, 70, "load", "t1"),
    Span("consumer", 0, 60, "bubble"),
    Span("consumer", 60, 90, "compute", "t0"),
    Span("consumer", 90, 120, "compute", "t1"),
]


def test_span_basics():
    s = Span("a", 1.5, 4.0, "load")
    assert s.duration == 2.5 and s.label == ""


def test_draw_timeline_one_row_per_lane():
    ax = draw_timeline(SPANS, title="demo")
    try:
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert labels == ["producer", "stage 0", "stage 1", "consumer"]
        assert list(ax.get_yticks()) == [0, 1, 2, 3]
        assert ax.get_title() == "demo"
        assert ax.get_xlabel() == "time (ns)"
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert legend == ["issue", "load", "bubble", "compute"]
        # one bar collection per (lane, kind) pair that occurs
        pairs = {(s.lane, s.kind) for s in SPANS}
        assert len(ax.collections) == len(pairs)
        # the compute bars sit on the consumer row
        lo, hi = ax.get_xlim()
        assert lo <= 0 and hi >= 120
    finally:
        plt.close(ax.figure)


def test_draw_timeline_units_and_explicit_lanes():
    fig, ax = plt.subplots()
    out = draw_timeline(SPANS, ax=ax, unit="us", lanes=["consumer", "stage 1", "stage 0"])
    try:
        assert out is ax
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert labels == ["consumer", "stage 1", "stage 0", "producer"]
        assert ax.get_xlim()[1] == pytest.approx(0.12 * 1.01)
        assert ax.get_xlabel() == "time (us)"
    finally:
        plt.close(fig)


def test_compare_timelines_side_by_side():
    model = simulate_pipeline(stages=2, tiles=6)
    axes = compare_timelines([("model", model.spans), ("measured", SPANS)])
    try:
        assert len(axes) == 2
        assert [a.get_title() for a in axes] == ["model", "measured"]
        (x0, _), (x1, _) = [a.get_position().p0 for a in axes]
        assert x1 > x0                       # next to each other
        assert len(axes[1].get_yticklabels()) == 4
    finally:
        plt.close(axes[0].figure)
    axes = compare_timelines([("a", SPANS), ("b", SPANS)], layout="rows")
    try:
        (_, y0), (_, y1) = [a.get_position().p0 for a in axes]
        assert y0 > y1                       # stacked
    finally:
        plt.close(axes[0].figure)
    with pytest.raises(ValueError):
        compare_timelines([])


def test_timing_result_draws():
    r = simulate_pipeline(stages=3, tiles=8)
    ax = r.draw()
    try:
        assert len(ax.get_yticklabels()) == len(r.lanes())
    finally:
        plt.close(ax.figure)


def test_spans_from_records_round_trip():
    lanes = ["producer", "stage 0", "stage 1", "consumer"]
    kinds = ["issue", "load", "bubble", "compute"]
    t0 = 1_700_000_000_123_456_789            # a %globaltimer value: needs 64-bit integers
    rec = spans_to_records(SPANS, lanes, kinds, t0=t0)
    assert rec.dtype == np.int64 and rec.shape == (len(SPANS), 4)
    back = spans_from_records(rec.astype(np.uint64), lanes, kinds)
    key = lambda s: (s.start, lanes.index(s.lane))  # noqa: E731 (ties: by lane id)
    want = sorted((Span(s.lane, float(s.start), float(s.end), s.kind) for s in SPANS), key=key)
    assert back == want
    assert min(s.start for s in back) == 0.0
    # the order is by start time, and shuffling the rows changes nothing
    perm = np.random.default_rng(1).permutation(len(rec))
    assert spans_from_records(rec[perm], lanes, kinds) == back


def test_spans_from_records_normalises_and_names():
    rec = np.array([[0, 1, 5000, 5100],
                    [2, 0, 5050, 5070],
                    [9, 7, 5200, 5300]], dtype=np.int64)
    spans = spans_from_records(rec, lanes={0: "warp 0", 2: "warp 2"}, kinds=["load", "mma"])
    assert [(s.lane, s.kind, s.start, s.end) for s in spans] == [
        ("warp 0", "mma", 0.0, 100.0), ("warp 2", "load", 50.0, 70.0),
        ("lane 9", "kind 7", 200.0, 300.0)]
    assert spans_from_records(rec, t0=4000)[0].start == 1000.0


def test_spans_from_records_invalid_rows():
    rec = np.array([[0, 0, 100, 200],
                    [1, 0, 0, 0],            # never written
                    [1, 0, 300, 250]])       # runs backwards
    spans = spans_from_records(rec)
    assert len(spans) == 1 and spans[0].start == 0.0 and spans[0].end == 100.0
    with pytest.raises(ValueError, match="record 1"):
        spans_from_records(rec, drop_invalid=False)
    with pytest.raises(ValueError, match="shape"):
        spans_from_records(np.zeros((3, 3)))
    assert spans_from_records(np.zeros((0, 4))) == []


def test_compare_timelines_shared_axis_covers_every_timeline():
    short = [Span("a", 0, 10, "x")]
    long = [Span("a", 0, 10, "x"), Span("a", 10, 40, "y")]
    for order in ((long, short), (short, long)):
        axes = compare_timelines([("one", order[0]), ("two", order[1])], layout="rows", sharex=True)
        for ax in axes:
            assert ax.get_xlim()[1] >= 40, ax.get_xlim()
        plt.close("all")
