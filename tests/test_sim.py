"""Tests of the mbarrier model, the ring protocol checker, the bug gallery and the timing model."""
import time

import pytest

from feedbeast.sim import (MBarrier, MBarrierMisuse, RingModel, StepFunctionError, bug_variants,
                           check_ring, reference_ring, ring_cases, simulate_pipeline)
from feedbeast.sim import checker as ck
from feedbeast.sim.mbarrier import MAX_TX
from feedbeast.sim.rings import consumer, producer


# --------------------------------------------------------------------------- mbarrier
def test_phase_flips_after_expected_arrivals():
    bar = MBarrier("b", count=2)
    assert (bar.parity, bar.phase, bar.pending_count, bar.tx_count) == (0, 0, 2, 0)
    assert bar.arrive() == 0
    assert (bar.parity, bar.pending_count) == (0, 1)
    assert bar.arrive() == 0
    assert (bar.parity, bar.phase, bar.pending_count) == (1, 1, 2)
    bar.arrive(2)
    assert (bar.parity, bar.phase, bar.pending_count) == (0, 2, 2)


def test_parity_waits():
    bar = MBarrier("b", count=1)
    # fresh barrier: phase 0 open; "the phase with parity 1" counts as completed
    assert bar.test_wait(1) and bar.try_wait(1)
    assert not bar.test_wait(0) and not bar.try_wait(0)
    tok = bar.arrive()
    assert bar.test_wait(0) and not bar.test_wait(1)
    assert bar.phase_done(tok)
    bar.arrive()
    assert bar.test_wait(1) and not bar.test_wait(0)


def test_transaction_bytes_hold_the_phase_open():
    bar = MBarrier("full", count=1)
    bar.arrive_expect_tx(1000)
    assert (bar.pending_count, bar.tx_count, bar.parity) == (0, 1000, 0)
    bar.complete_tx(400)
    assert (bar.tx_count, bar.parity) == (600, 0)
    assert not bar.test_wait(0)
    bar.complete_tx(600)
    assert (bar.parity, bar.tx_count, bar.pending_count) == (1, 0, 1)
    assert bar.test_wait(0)
    # expect_tx alone, then a plain arrive
    bar.expect_tx(64)
    bar.arrive()
    assert bar.parity == 1 and bar.tx_count == 64
    bar.complete_tx(64)
    assert bar.parity == 0


def test_bytes_may_land_before_they_are_announced():
    bar = MBarrier("full", count=1)
    bar.complete_tx(256)              # allowed: the arrival is still pending
    assert bar.tx_count == -256 and bar.parity == 0
    bar.arrive_expect_tx(256)
    assert bar.parity == 1 and bar.tx_count == 0


@pytest.mark.parametrize("what", [
    "use_before_init", "reinit", "too_many_arrivals", "arrive_while_waiting_bytes",
    "complete_more_than_announced", "last_arrival_with_negative_tx", "tx_overflow",
    "tx_underflow", "bad_count", "use_after_inval", "bad_parity"])
def test_misuse_raises(what):
    bar = MBarrier("b")
    if what == "use_before_init":
        with pytest.raises(MBarrierMisuse, match="before init"):
            bar.arrive()
        with pytest.raises(MBarrierMisuse, match="before init"):
            bar.test_wait(0)
        return
    if what == "bad_count":
        for c in (0, -1, 1 << 20, 1.5):
            with pytest.raises(MBarrierMisuse, match="arrival count"):
                MBarrier("b").init(c)
        return
    bar.init(2)
    if what == "reinit":
        with pytest.raises(MBarrierMisuse, match="in use"):
            bar.init(2)
        bar.inval()
        bar.init(3)                   # fine after inval
        assert bar.pending_count == 3
    elif what == "too_many_arrivals":
        bar.arrive()
        with pytest.raises(MBarrierMisuse, match="only 1 of 2"):
            bar.arrive(2)
        assert bar.pending_count == 1   # the failed operation changed nothing
    elif what == "arrive_while_waiting_bytes":
        bar.arrive_expect_tx(128)
        bar.arrive()
        assert bar.pending_count == 0 and bar.parity == 0
        with pytest.raises(MBarrierMisuse, match="already in"):
            bar.arrive()
    elif what == "complete_more_than_announced":
        bar.arrive_expect_tx(100)
        bar.arrive()
        with pytest.raises(MBarrierMisuse, match="nobody\\s+announced|that nobody"):
            bar.complete_tx(150)
    elif what == "last_arrival_with_negative_tx":
        bar.complete_tx(100)
        bar.arrive_expect_tx(50)
        with pytest.raises(MBarrierMisuse, match="more bytes landed"):
            bar.arrive()
    elif what == "tx_overflow":
        bar.expect_tx(MAX_TX)
        with pytest.raises(MBarrierMisuse, match="limit"):
            bar.expect_tx(1)
    elif what == "tx_underflow":
        bar.complete_tx(MAX_TX)
        with pytest.raises(MBarrierMisuse, match="limit"):
            bar.complete_tx(1)
    elif what == "use_after_inval":
        bar.inval()
        with pytest.raises(MBarrierMisuse, match="before init"):
            bar.arrive()
    elif what == "bad_parity":
        with pytest.raises(MBarrierMisuse, match="parity"):
            bar.test_wait(2)


# --------------------------------------------------------------------------- checker
def test_reference_ring_exhaustive_4_stages_2_consumers_fast():
    t0 = time.perf_counter()
    res = check_ring(producer, [consumer, consumer], stages=4, tiles=8)
    elapsed = time.perf_counter() - t0
    print(res, f"(wall {elapsed:.3f} s)")
    assert res.ok, str(res)
    assert res.kind == "ok" and str(res).startswith("ok:")
    assert elapsed < 10.0
    # Every thread's program has 24 steps; the consumers can drift up to a full
    # ring apart from each other and the producer can run a ring ahead, so
    # thousands of distinct states exist.  A checker that followed only a few
    # schedules would see ~75 states per schedule.
    assert res.states > 2000
    # the deepest state is the end of one complete run: 72 thread steps + 8 landings
    assert res.depth == 3 * 24 + 8


def _brute_force_states(model):
    """All reachable states by plain DFS (an independent search, no BFS, no parents)."""
    seen = set()
    stack = [model.initial_state()]
    while stack:
        st = stack.pop()
        if st in seen:
            continue
        seen.add(st)
        for ev in model.events(st):
            try:
                stack.append(model.apply(st, ev))
            except ck._Bug as bug:  # pragma: no cover - the reference ring has none
                raise AssertionError(bug.message)
    return seen


def test_state_count_matches_independent_search():
    model = RingModel(producer, [consumer, consumer], stages=2, tiles=4)
    res = model.explore()
    assert res.ok
    assert res.states == len(_brute_force_states(model))


def test_more_tiles_more_states_and_still_ok():
    small = check_ring(producer, [consumer, consumer], stages=4, tiles=4)
    big = check_ring(producer, [consumer, consumer, consumer], stages=4, tiles=10)
    assert small.ok and big.ok
    assert big.states > small.states


def test_whole_program_step_functions():
    def prod(ring):
        for it in range(ring.tiles):
            s, ph = ring.stage(it), ring.phase(it)
            yield ring.empty[s].wait(ph ^ 1)
            yield ring.full[s].arrive_expect_tx(ring.tile_bytes)
            yield ring.copy(s, tile=it)

    def cons(ring):
        for it in range(ring.tiles):
            s, ph = ring.stage(it), ring.phase(it)
            yield ring.full[s].wait(ph)
            yield ring.read(s, tile=it)
            yield ring.empty[s].arrive()

    res = check_ring(prod, [cons, cons], stages=4, tiles=8)
    ref = check_ring(producer, [consumer, consumer], stages=4, tiles=8)
    assert res.ok and res.states == ref.states


def _no_bug_within(model, limit):
    """Depth-limited DFS: True if no bug and no stuck state is reachable in < limit steps."""
    best = {}

    def dfs(st, d):
        if best.get(st, 1 << 30) <= d:
            return True
        best[st] = d
        evs = model.events(st)
        if not evs and not model.is_final(st) and d < limit:
            return False
        if d + 1 >= limit:          # a bug on the next step would have length d + 1 >= limit
            return True
        for ev in evs:
            try:
                ns = model.apply(st, ev)
            except ck._Bug:
                return False
            if not dfs(ns, d + 1):
                return False
        return True

    return dfs(model.initial_state(), 0)


@pytest.mark.parametrize("case", bug_variants(), ids=lambda c: c.name)
def test_each_bug_is_found_with_shortest_trace(case):
    res = case.check(stages=4, tiles=8)
    print(res)
    assert not res.ok
    assert res.kind == case.expected, str(res)
    text = str(res)
    assert text.startswith(f"BUG {case.expected}")
    if case.name == "producer_wrong_parity":
        # stuck in the very first state: the report says where everyone waits
        assert res.events == [] and len(res.blocked) == 3
        assert "wait empty[0] parity 0" in text
        return
    assert len(res.events) > 0 and len(res.trace) == len(res.events) + (res.kind != "deadlock")
    assert len(res.events) == res.depth
    # the trace really leads to the bug ...
    model = RingModel(case.producer, case.consumers, stages=4, tiles=8, init=case.init)
    lines, state, bug = model.replay(res.events)
    if res.kind == "deadlock":
        assert bug is None and model.events(state) == [] and not model.is_final(state)
    else:
        assert bug is not None and bug.kind == res.kind
        # ... and only at its last step
        lines2, _, bug2 = model.replay(res.events[:-1])
        assert bug2 is None
    # ... and nothing shorter does
    assert _no_bug_within(model, res.depth)


def test_trace_reads_like_the_protocol():
    res = [c for c in bug_variants() if c.name == "missing_expect_tx"][0].check()
    text = str(res)
    assert "P: wait empty[0] parity 1" in text
    assert "P: arrive full[0]" in text
    assert "C0: read stage 0 tile 0" in text or "C1: read stage 0 tile 0" in text
    res = reference_ring().check()
    model = RingModel(producer, [consumer, consumer], stages=4, tiles=8)
    # a landing line, as printed
    st = model.initial_state()
    for ev in [("t", 0), ("t", 0), ("t", 0)]:
        st = model.apply(st, ev)
    (land,) = [e for e in model.events(st) if e[0] == "l"]
    assert model.describe(st, land) == "copy tile 0 -> stage 0 lands (complete_tx 16384 on full[0])"


def test_release_before_read_is_an_overwrite():
    def early_release(ring, it):
        s, ph = ring.stage(it), ring.phase(it)
        yield ring.full[s].wait(ph)
        yield ring.empty[s].arrive()      # hands the stage back too early
        yield ring.read(s, tile=it)

    res = check_ring(producer, [early_release, consumer], stages=2, tiles=4)
    assert res.kind == "stage_overwritten", str(res)
    assert "C0 has not read" in res.message


def test_too_many_consumers_counted_is_a_deadlock():
    def init(ring):
        for s in range(ring.stages):
            ring.full[s].init(1)
            ring.empty[s].init(3)

    res = check_ring(producer, [consumer, consumer], stages=2, tiles=4, init=init)
    assert res.kind == "deadlock"


def test_misuse_inside_the_protocol_and_init():
    def init(ring):
        ring.full[0].init(1)          # the rest never initialised

    res = check_ring(producer, [consumer], stages=2, tiles=2, init=init)
    assert res.kind == "mbarrier_misuse" and "before init" in res.message

    def init_twice(ring):
        ck.default_init(ring)
        ring.full[0].init(1)

    res = check_ring(producer, [consumer], stages=2, tiles=2, init=init_twice)
    assert res.kind == "mbarrier_misuse" and "in use" in res.message

    def double_arrive(ring, it):
        s, ph = ring.stage(it), ring.phase(it)
        yield ring.empty[s].wait(ph ^ 1)
        yield ring.full[s].arrive_expect_tx(ring.tile_bytes)
        yield ring.full[s].arrive()       # one arrival too many while bytes are pending
        yield ring.copy(s, tile=it)

    res = check_ring(double_arrive, [consumer], stages=2, tiles=2)
    assert res.kind == "mbarrier_misuse" and "already in" in res.message
    assert len(res.events) == 3


def test_operations_made_first_and_yielded_later_are_the_protocol():
    """A consumer may build its operations first and yield them after: each is yielded, so none was dropped."""
    def listed(ring, it):
        s, ph = ring.stage(it), ring.phase(it)
        ops = [ring.full[s].wait(ph), ring.read(s, tile=it), ring.empty[s].arrive()]
        for op in ops:
            yield op

    res = check_ring(producer, [listed, consumer], stages=2, tiles=4)
    ref = check_ring(producer, [consumer, consumer], stages=2, tiles=4)
    assert res.ok and res.states == ref.states


def test_step_function_mistakes_are_explained():
    def forgot_yield(ring, it):
        s = ring.stage(it)
        ring.empty[s].wait(ring.phase(it) ^ 1)      # no yield
        yield ring.copy(s, tile=it)

    with pytest.raises(StepFunctionError, match="never yielded"):
        check_ring(forgot_yield, [consumer], stages=2, tiles=2)

    def forgot_the_last_yield(ring, it):
        s, ph = ring.stage(it), ring.phase(it)
        yield ring.full[s].wait(ph)
        yield ring.read(s, tile=it)
        ring.empty[s].arrive()                      # no yield, and nothing after it

    with pytest.raises(StepFunctionError, match=r"tile 0\): `arrive empty\[0\]` was created but never yielded"):
        check_ring(producer, [forgot_the_last_yield], stages=2, tiles=2)

    def forgot_call(ring, it):
        yield ring.empty[0].arrive

    with pytest.raises(StepFunctionError, match="forget the"):
        check_ring(forgot_call, [consumer], stages=2, tiles=2)

    def not_a_generator(ring, it):
        return None

    with pytest.raises(StepFunctionError, match="generator"):
        check_ring(not_a_generator, [consumer], stages=2, tiles=2)

    def bad_stage(ring, it):
        yield ring.full[7].arrive()

    with pytest.raises(StepFunctionError, match="stages 0..1"):
        check_ring(bad_stage, [consumer], stages=2, tiles=2)


def test_ring_cases_listing():
    cases = ring_cases()
    names = [c.name for c in cases]
    assert names[0] == "reference" and cases[0].expected == "ok"
    for needed in ("wrong_initial_parity", "missing_expect_tx", "missing_empty_arrive",
                   "arrival_count_mismatch"):
        assert needed in names
    kinds = {c.expected for c in cases}
    assert {"ok", "deadlock", "stage_overwritten", "read_before_arrival", "wrong_data",
            "mbarrier_misuse"} <= kinds
    for c in cases:
        assert c.description and callable(c.producer) and len(c.consumers) == 2


# --------------------------------------------------------------------------- timing
def test_compute_bound_more_stages_do_not_help():
    runs = {S: simulate_pipeline(latency_ns=500, stage_bytes=16384, bandwidth=32,
                                 compute_ns=10_000, stages=S, tiles=64) for S in (2, 3, 4, 8)}
    t2 = runs[2].total_ns
    for S, r in runs.items():
        assert abs(r.total_ns - t2) / t2 < 0.01, (S, r.summary())
        assert r.idle_fraction < 0.01
    # and the total is the compute time plus one exposed load
    assert runs[8].total_ns == pytest.approx(64 * 10_000 + 500 + 16384 / 32)


def test_latency_bound_throughput_grows_until_littles_law_limit():
    lat, nbytes, bw = 2000.0, 4096, 32.0
    compute = 20.0
    # Little's law: a stage is held latency + transfer + compute, so ~16.8 stages fill the pipe
    bound_stages = bw * (lat + nbytes / bw + compute) / nbytes
    res = {S: simulate_pipeline(latency_ns=lat, stage_bytes=nbytes, bandwidth=bw, compute_ns=compute,
                                stages=S, tiles=2000) for S in range(1, 25)}
    thr = [res[S].bytes_per_ns for S in range(1, 25)]
    idle = [res[S].idle_fraction for S in range(1, 25)]
    below = [S for S in range(1, 25) if S < bound_stages]
    for S in below[1:]:
        assert res[S].bytes_per_ns > res[S - 1].bytes_per_ns * 1.02
        assert res[S].idle_fraction < res[S - 1].idle_fraction
        # and it tracks the Little's-law bound S * bytes / (latency + transfer + compute)
        assert res[S].littles_bound == pytest.approx(S * nbytes / (lat + nbytes / bw + compute))
        assert res[S].bytes_per_ns == pytest.approx(res[S].littles_bound, rel=0.02)
    for S in range(int(bound_stages) + 1, 25):
        assert res[S].bytes_per_ns <= bw * 1.0001
        assert res[S].bytes_per_ns == pytest.approx(bw, rel=0.02)
    assert all(a >= b - 1e-12 for a, b in zip(idle, idle[1:]))
    assert max(thr) <= bw * 1.0001


def test_timing_spans_are_consistent():
    r = simulate_pipeline(latency_ns=300, stage_bytes=2048, bandwidth=8, compute_ns=200,
                          stages=3, tiles=12)
    lanes = {s.lane for s in r.spans}
    assert lanes <= set(r.lanes())
    assert {"stage 0", "stage 1", "stage 2", "memory", "consumer"} <= lanes
    assert all(s.end >= s.start for s in r.spans)
    comp = sorted((s for s in r.spans if s.kind == "compute"), key=lambda s: s.start)
    assert len(comp) == 12
    assert all(a.end <= b.start + 1e-9 for a, b in zip(comp, comp[1:]))
    xfer = sorted((s for s in r.spans if s.kind == "transfer"), key=lambda s: s.start)
    assert all(a.end <= b.start + 1e-9 for a, b in zip(xfer, xfer[1:]))   # serialized
    bubbles = sum(s.duration for s in r.spans if s.kind == "bubble")
    assert bubbles / r.total_ns == pytest.approx(r.idle_fraction)
    assert r.total_ns == pytest.approx(comp[-1].end)
    # each tile is computed only after its load arrived
    loads = {s.label: s for s in r.spans if s.kind == "load"}
    for c in comp:
        assert c.start >= loads[c.label].end - 1e-9


# ---- cp.async copies: landing seen only by the issuing thread's wait_group ----------------------------------------
def _gather_producer(lag):
    """Chapter 10's gathering lane with the proxy fence in the lane: each stage's cp.async copies form one group,
    the lane waits until the group of `lag` iterations ago has landed (cp.async.wait_group), fences, and only then
    arrives on that stage's full barrier. The kernel commits a group every iteration, empty ones after the last
    stage, so at the tail the wait leaves only the real groups after the one it waits for in flight."""
    def producer(ring):
        S, T = ring.stages, ring.tiles
        for it in range(T + lag):
            if it < T:
                s = ring.stage(it)
                if it >= S:
                    yield ring.empty[s].wait(ring.phase(it) ^ 1)
                yield ring.cp_async(s, tile=it)
            if it >= lag:
                yield ring.cp_async_wait(min(it, T - 1) - (it - lag))
                yield ring.full[ring.stage(it - lag)].arrive()
    return producer


def _consumer_releasing_one_late(ring):
    """Chapter 10's wgmma consumer: P V of stage j runs under S of stage j + 1, so stage j is released only after
    the wait for stage j + 1."""
    for it in range(ring.tiles):
        s = ring.stage(it)
        yield ring.full[s].wait(ring.phase(it))
        yield ring.read(s, tile=it)
        if it >= 1:
            yield ring.empty[ring.stage(it - 1)].arrive()
    yield ring.empty[ring.stage(ring.tiles - 1)].arrive()


@pytest.mark.parametrize("stages", [3, 4])
def test_arrivals_held_back_past_the_consumers_lookahead_deadlock(stages):
    """A producer that arrives on full[s] `lag` stages after issuing the copies, against consumers that release a
    stage only once the next one is full: at its first wait for empty[0] it still holds full[1] back, which the
    consumers need before they release stage 0. lag = stages - 1 deadlocks there (an H100 hung the same way, at the
    wait for empty[0] parity 0); lag <= stages - 2 completes, and so does any lag with consumers that release at
    once."""
    late = [_consumer_releasing_one_late, _consumer_releasing_one_late]
    r = check_ring(_gather_producer(stages - 1), late, stages=stages, tiles=2 * stages + 1)
    assert r.kind == "deadlock", r
    assert any(b.startswith("P is stuck at `wait empty[0] parity 0`") for b in r.blocked), r
    # the line of the step function that waits, as the cell (here this file) numbers it: the learner's line to fix
    import inspect
    lines, first = inspect.getsourcelines(_gather_producer(stages - 1))
    wait = first + next(i for i, ln in enumerate(lines) if "empty[" in ln and ".wait(" in ln)
    assert f"(producer line {wait}): empty[0]" in str(r), (wait, str(r))
    for lag in range(stages - 1):
        assert check_ring(_gather_producer(lag), late, stages=stages, tiles=2 * stages + 1).ok, lag
    assert check_ring(_gather_producer(stages - 1), [consumer, consumer], stages=stages, tiles=2 * stages + 1).ok


def test_a_cp_async_stage_published_before_its_wait_group_is_read_early():
    """Arriving on full[s] before cp.async.wait_group has seen the stage's copies land lets a consumer read it
    while the copy is in flight; and a read of a stage the thread itself copied needs the wait as well."""
    def publish_first(ring):
        for it in range(ring.tiles):
            s = ring.stage(it)
            if it >= ring.stages:
                yield ring.empty[s].wait(ring.phase(it) ^ 1)
            yield ring.cp_async(s, tile=it)
            yield ring.full[s].arrive()          # BUG: no cp_async_wait before it
    r = check_ring(publish_first, [consumer, consumer], stages=2, tiles=4)
    assert r.kind == "read_before_arrival" and "has not landed" in r.message, r

    def own_copy_without_wait(ring):
        yield ring.cp_async(0, tile=0)
        yield ring.read(0, tile=0)
    one = lambda ring: (ring.full[0].init(1), ring.empty[0].init(1))
    r = check_ring([own_copy_without_wait], [], stages=1, tiles=1, init=one)
    assert r.kind == "read_before_arrival", r

    def own_copy_with_wait(ring):
        yield ring.cp_async(0, tile=0)
        yield ring.cp_async_wait(0)
        yield ring.read(0, tile=0)
    assert check_ring([own_copy_with_wait], [], stages=1, tiles=1, init=one).ok


def test_a_ring_must_move_every_tile():
    """Programs that copy or read no tile complete in every interleaving: that is no ring. A step function's second
    parameter is the tile even with a default (`(ring, it=0)` run once as a whole program checked tile 0 alone)."""
    def p_default(ring, it=0):
        yield from producer(ring, it)

    def c_parity0(ring, it=0):            # waits on parity 0 each lap: wrong from the second lap on
        s = it % ring.stages
        yield ring.full[s].wait(0)
        yield ring.read(s, tile=it)
        yield ring.empty[s].arrive()
    res = check_ring(p_default, [c_parity0] * 2, stages=2, tiles=5)
    assert not res.ok and res.kind == "read_before_arrival", str(res)

    def c_no_read(ring, it):
        s, ph = it % ring.stages, (it // ring.stages) & 1
        yield ring.full[s].wait(ph)
        yield ring.empty[s].arrive()
    res = check_ring(producer, [c_no_read] * 2, stages=2, tiles=5)
    assert res.kind == "tile_not_moved" and "tile 0 of 5 is never read" in str(res), str(res)

    def nothing(ring):
        yield from ()
    res = check_ring(nothing, [nothing], stages=2, tiles=3)
    assert res.kind == "tile_not_moved" and "never copied" in str(res), str(res)
    assert check_ring(producer, [consumer] * 2, stages=2, tiles=5).ok


def test_every_consumer_reads_when_the_ring_says_so():
    """Lab 04's consumers each read every tile of x: one consumer reading for all (and releasing the stage with
    all the arrivals), or a producer that reads its own copies while the consumers do nothing, is no such ring."""
    def one_reader(ring, it):
        s, ph = it % ring.stages, (it // ring.stages) & 1
        yield ring.full[s].wait(ph)
        yield ring.read(s, tile=it)
        yield ring.empty[s].arrive(ring.consumers)

    def idle(ring, it):
        yield from ()
    res = check_ring(producer, [one_reader, idle, idle], stages=2, tiles=4, every_consumer_reads=True)
    assert res.kind == "tile_not_moved" and "consumer C1 never reads tile 0" in str(res), str(res)
    assert check_ring(producer, [consumer] * 3, stages=2, tiles=4, every_consumer_reads=True).ok
    assert check_ring(producer, [one_reader, idle, idle], stages=2, tiles=4).ok     # without it: some consumer reads


def test_only_the_operations_a_ring_makes_are_run_and_each_once():
    """An Op built by hand skips the checks the ring's methods make (a parity of 2 that never blocks, a stage past
    the ring); an operation yielded twice would be applied twice. Both are refused by name."""
    def forged(ring, it):
        s = ring.stage(it)
        yield ck.Op(0, (ring.stages + s, 2), "wait empty")
        yield ring.full[s].arrive_expect_tx(ring.tile_bytes)
        yield ring.copy(s, tile=it)

    def twice(ring, it):
        s, ph = ring.stage(it), ring.phase(it)
        wait = ring.full[s].wait(ph)
        yield wait
        yield wait
        yield ring.read(s, tile=it)
        yield ring.empty[s].arrive()
    with pytest.raises(StepFunctionError, match="yielded `wait empty`, which its ring did not just make"):
        check_ring(forged, [consumer, consumer], stages=2, tiles=2)
    with pytest.raises(StepFunctionError, match="which its ring did not just make"):
        check_ring(producer, [twice, twice], stages=2, tiles=2)
    assert check_ring(producer, [consumer, consumer], stages=2, tiles=2).ok


def test_the_mbarrier_model_s_docstring_example_runs_as_shown():
    import doctest

    import feedbeast.sim.mbarrier as m
    assert doctest.testmod(m).failed == 0
