"""Exhaustive protocol checker for an N-stage full/empty ring.

Chapter 04 explains the ring protocol and checks a learner's ring with it.

The learner writes the producer and the consumers as small Python generator
functions.  Every ``yield`` hands one barrier operation (or one copy, or one
read) to the checker, and each yield is a point where the other threads -- and
the asynchronous copies in flight -- may run first.  The checker then explores
*every* interleaving and either reports ``ok`` with the number of states it
visited, or the first bug it meets together with the **shortest** trace that
leads to it.

Writing step functions
----------------------
A step function is usually the *body* of the ring loop for one iteration
``it``; the checker runs it for ``it = 0, 1, ..., tiles - 1``::

    def producer(ring, it):
        s, ph = ring.stage(it), ring.phase(it)
        yield ring.empty[s].wait(ph ^ 1)                  # slot free?
        yield ring.full[s].arrive_expect_tx(ring.tile_bytes)
        yield ring.copy(s, tile=it)                       # async: lands later

    def consumer(ring, it):
        s, ph = ring.stage(it), ring.phase(it)
        yield ring.full[s].wait(ph)                       # data there?
        yield ring.read(s, tile=it)
        yield ring.empty[s].arrive()                      # slot free again

    print(check_ring(producer, [consumer, consumer], stages=4, tiles=8))

A function with a single parameter ``f(ring)`` is taken to be the whole
thread program instead (write the loop yourself).  ``ring`` offers:

* ``ring.full[s]``, ``ring.empty[s]``: barrier handles with ``wait(parity)``,
  ``arrive(count=1)``, ``expect_tx(nbytes)``, ``arrive_expect_tx(nbytes)``
  (each returns an operation to ``yield``);
* ``ring.copy(stage, tile)``: issue an asynchronous copy of ``tile`` into
  ``stage``; when it lands it performs ``complete_tx(ring.tile_bytes)`` on
  ``full[stage]`` (other ``nbytes=``/``bar=`` may be given);
* ``ring.read(stage, tile)``: the consumer uses the data of ``stage``, which
  it expects to be ``tile``;
* ``ring.cp_async(stage, tile)``: a copy of ``tile`` into ``stage`` that
  completes on no barrier, as ``cp.async`` (chapter 03): only its own thread
  learns that it landed, through ``ring.cp_async_wait(n)``, which blocks until
  every ``cp_async`` copy of this thread but the ``n`` most recent has landed
  (each copy its own commit group: ``cp.async.wait_group n``);
* ``ring.stage(i)`` = ``i % stages``, ``ring.phase(i)`` = ``(i // stages) & 1``;
* ``ring.stages``, ``ring.tiles``, ``ring.tile_bytes``, ``ring.consumers``,
  ``ring.me`` (this thread's index among its role), ``ring.name``.

``wait(parity)`` *blocks*: it stands for the ``try_wait`` spin loop and lets
the thread go on only when the phase with that parity has completed.

How the search is made fast and exhaustive
------------------------------------------
Generators cannot be copied or hashed, so the checker does not keep them
during the search.  Each step function is run **once**, up front, and the
operations it yields are recorded as a small instruction list.  This is exact
because a thread's operations never depend on the interleaving: waits block
rather than return a value, and the stage, parity and tile a thread uses are
computed from its own loop counter -- which is also how a correct GPU
producer or consumer is written.  (The rule for learners: a step function may
not branch on what a barrier holds; ``yield`` returns nothing.)

A thread's local state is then just its program counter, and a complete
system state is a small tuple of tuples:

* one program counter per thread,
* per barrier ``(expected, parity, pending, tx)`` (the
  :mod:`~feedbeast.sim.mbarrier` model; only the parity of the phase is kept,
  as on the hardware),
* per stage the tile that has landed there and which threads have read it,
* the sorted tuple of copies in flight.

A breadth-first search over these states with a hash set of visited states
covers all interleavings once each, and because it goes level by level the
first bug it reaches has the shortest possible trace.  Copy completions are
events of their own, so a copy may land at any point after it is issued and
copies may land in any order.  Every event moves a program counter forward or
retires a copy, so the state graph is finite and acyclic.

What counts as a bug
--------------------
``deadlock``             a state where nobody can move and not all threads are
                         done (all remaining threads sit in waits)
``stage_overwritten``    a copy is issued into a stage whose current tile some
                         thread still has to read (its program reads that tile
                         and it has not done so yet), or whose previous copy
                         has not landed
``read_before_arrival``  an early read: the copy of that tile into that stage
                         is still in flight or not even issued yet
``wrong_data``           any other read of a stage that does not hold the tile
                         the reader expects: the tile was there and has been
                         replaced, or it is never copied into that stage
``mbarrier_misuse``      any :class:`~feedbeast.sim.mbarrier.MBarrierMisuse`
``tile_not_moved``       a tile of the ring that no program copies or none reads
                         (with ``every_consumer_reads``: that some consumer does
                         not read): programs that move nothing complete in every
                         interleaving, and that is no ring
"""
from __future__ import annotations

import inspect
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import whole
from .mbarrier import (MBarrierMisuse, bar_arrive, bar_arrive_expect_tx, bar_complete_tx,
                       bar_expect_tx, bar_init)

__all__ = [
    "check_ring", "RingReport", "RingModel", "StepFunctionError",
    "OK", "DEADLOCK", "STAGE_OVERWRITTEN", "READ_BEFORE_ARRIVAL", "WRONG_DATA",
    "MBARRIER_MISUSE", "TILE_NOT_MOVED", "BUG_KINDS",
]

OK = "ok"
DEADLOCK = "deadlock"
STAGE_OVERWRITTEN = "stage_overwritten"
READ_BEFORE_ARRIVAL = "read_before_arrival"
WRONG_DATA = "wrong_data"
MBARRIER_MISUSE = "mbarrier_misuse"
TILE_NOT_MOVED = "tile_not_moved"     # a ring of `tiles` tiles whose programs never copy or never read one of them
BUG_KINDS = (DEADLOCK, STAGE_OVERWRITTEN, READ_BEFORE_ARRIVAL, WRONG_DATA, MBARRIER_MISUSE, TILE_NOT_MOVED)

# instruction codes
_WAIT, _ARRIVE, _EXPECT, _ARRIVE_TX, _COPY, _READ, _CP_ASYNC, _CP_WAIT = range(8)


class StepFunctionError(Exception):
    """A step function that cannot be turned into a program (not a bug in the protocol)."""


class _Bug(Exception):
    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind
        self.message = message


# --------------------------------------------------------------------------
# what step functions see
# --------------------------------------------------------------------------
class Op:
    """One operation a step function yields.  Build it with the ``ring`` methods."""

    __slots__ = ("code", "args", "text", "where")

    def __init__(self, code, args, text):
        self.code, self.args, self.text = code, args, text
        self.where = ""      # set when yielded: the step function's line that yielded it ('producer line 5')

    def __repr__(self):
        return f"<op {self.text}>"


class BarrierRef:
    """Handle on ``ring.full[s]`` or ``ring.empty[s]``."""

    def __init__(self, ring, index, name):
        self._ring, self.index, self.name = ring, index, name

    def _op(self, code, args, text):
        return self._ring._make(code, args, text)

    def wait(self, parity):
        if parity not in (0, 1):
            raise StepFunctionError(f"{self.name}.wait({parity!r}): a parity is 0 or 1")
        return self._op(_WAIT, (self.index, parity), f"wait {self.name} parity {parity}")

    def arrive(self, count=1):
        return self._op(_ARRIVE, (self.index, count),
                        f"arrive {self.name}" + (f" (count {count})" if count != 1 else ""))

    def expect_tx(self, nbytes):
        return self._op(_EXPECT, (self.index, nbytes), f"expect_tx {self.name} {nbytes} B")

    def arrive_expect_tx(self, nbytes, count=1):
        return self._op(_ARRIVE_TX, (self.index, nbytes, count),
                        f"arrive_expect_tx {self.name} {nbytes} B"
                        + (f" (count {count})" if count != 1 else ""))

    def init(self, count):
        self._ring._init_barrier(self.index, count)

    def __repr__(self):
        return f"<barrier {self.name}>"


class _Barriers:
    def __init__(self, refs, what):
        self._refs, self._what = refs, what

    def __getitem__(self, s):
        if not isinstance(s, int) or not 0 <= s < len(self._refs):
            raise StepFunctionError(f"{self._what}[{s!r}]: the ring has stages 0..{len(self._refs) - 1}")
        return self._refs[s]

    def __len__(self):
        return len(self._refs)

    def __iter__(self):
        return iter(self._refs)


class RingView:
    """The ``ring`` argument of a step function (one per thread)."""

    def __init__(self, cfg, role="init", me=0, name="init"):
        self._cfg = cfg
        self.stages = cfg["stages"]
        self.tiles = cfg["tiles"]
        self.tile_bytes = cfg["tile_bytes"]
        self.consumers = cfg["consumers"]
        self.producers = cfg["producers"]
        self.role, self.me, self.name = role, me, name
        S = self.stages
        self.full = _Barriers([BarrierRef(self, s, f"full[{s}]") for s in range(S)], "full")
        self.empty = _Barriers([BarrierRef(self, S + s, f"empty[{s}]") for s in range(S)], "empty")
        self._loose = {}

    def stage(self, i):
        return i % self.stages

    def phase(self, i):
        return (i // self.stages) & 1

    def _make(self, code, args, text):
        if self.role == "init":
            raise StepFunctionError(f"{text}: only init() may be called while initialising")
        op = Op(code, args, text)
        self._loose[id(op)] = op
        return op

    def copy(self, stage, tile, nbytes=None, bar=None):
        self._check_stage(stage)
        nbytes = self.tile_bytes if nbytes is None else nbytes
        b = self.full[stage] if bar is None else bar
        return self._make(_COPY, (stage, tile, b.index, nbytes),
                          f"copy tile {tile} -> stage {stage} ({nbytes} B, completes on {b.name})")

    def read(self, stage, tile):
        self._check_stage(stage)
        return self._make(_READ, (stage, tile), f"read stage {stage} tile {tile}")

    def cp_async(self, stage, tile):
        self._check_stage(stage)
        return self._make(_CP_ASYNC, (stage, tile), f"cp.async tile {tile} -> stage {stage} (one commit group)")

    def cp_async_wait(self, n):
        if not isinstance(n, int) or n < 0:
            raise StepFunctionError(f"cp_async_wait({n!r}): the number of groups left in flight is an int >= 0")
        return self._make(_CP_WAIT, (n,), f"cp.async.wait_group {n}")

    def _check_stage(self, stage):
        if not isinstance(stage, int) or not 0 <= stage < self.stages:
            raise StepFunctionError(f"stage {stage!r}: the ring has stages 0..{self.stages - 1}")

    def _init_barrier(self, index, count):
        if self.role != "init":
            raise StepFunctionError("barriers are initialised in init(ring), not in a step function")
        bars = self._cfg["bars"]
        name = self._cfg["bar_names"][index]
        if bars[index] is not None:
            raise MBarrierMisuse(f"init of {name} while it is in use (already initialised "
                                 f"with count {bars[index][0]})")
        bars[index] = bar_init(count, name)


def _n_params(fn):
    try:
        # a second parameter, with a default or not, is the tile: `(ring, it=0)` is called once per tile too
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        return len(params)
    except (TypeError, ValueError):
        return 2


def _yielded_at(gen) -> str:
    """'producer line 5': the function and line a suspended generator yielded from (the innermost of a `yield from`
    chain), numbered as its file or notebook cell numbers it, as tracebacks and fb.errors.todo_of do; '' for the
    course's own step functions (rings.bug_variants)."""
    while inspect.isgenerator(getattr(gen, "gi_yieldfrom", None)):
        gen = gen.gi_yieldfrom
    frame = gen.gi_frame
    if frame is None or gen.gi_code.co_filename.startswith(_PACKAGE):   # the course's own rings: no line to fix
        return ""
    return f"{gen.gi_code.co_name} line {frame.f_lineno}"


_PACKAGE = os.path.join(str(Path(__file__).resolve().parents[1]), "")    # (with its /: not a checkout feedbeast-x/)


def _record(fn, view, max_ops=100_000):
    """Run a step function once and return its operations as a list of Op."""
    fname = getattr(fn, "__name__", repr(fn))
    if _n_params(fn) >= 2:
        def whole():
            for it in range(view.tiles):
                g = fn(view, it)
                if not inspect.isgenerator(g):
                    raise StepFunctionError(
                        f"{fname}(ring, it) must be a generator: use `yield` before each barrier "
                        "operation, copy and read")
                yield from g
                if view._loose:          # each tile's own operations are yielded by the end of its call
                    lost = next(iter(view._loose.values()))
                    raise StepFunctionError(f"{view.name} ({fname}, tile {it}): `{lost.text}` was created but "
                                            "never yielded -- write `yield ...` in front of it")
        gen = whole()
    else:
        gen = fn(view)
        if not inspect.isgenerator(gen):
            raise StepFunctionError(f"{fname}(ring) must be a generator: use `yield` before each "
                                    "barrier operation, copy and read")
    ops = []
    for op in gen:
        if not isinstance(op, Op):
            hint = " (did you forget the () ?)" if callable(op) else ""
            raise StepFunctionError(f"{view.name} ({fname}) yielded {op!r}{hint}; yield only what "
                                    "ring.full[s]/ring.empty[s]/ring.copy/ring.read return")
        # an operation made before this one and still not yielded was dropped (`ring.full[s].wait(ph)` without
        # yield); one made before and yielded later is fine (`ops = [wait, read, arrive]; for op in ops: yield op`)
        made = list(view._loose)
        if id(op) not in view._loose:      # yielded before, or not made by this ring's methods (Op(...) by hand)
            raise StepFunctionError(f"{view.name} ({fname}) yielded `{op.text}`, which its ring did not just make: "
                                    "yield each operation once, as ring.full[s]/ring.empty[s]/ring.copy/ring.read "
                                    "return it (their arguments are checked there)")
        older = made[:made.index(id(op))]
        del view._loose[id(op)]
        if older:
            lost = view._loose[older[0]]
            raise StepFunctionError(f"{view.name} ({fname}): `{lost.text}` was created but never "
                                    "yielded -- write `yield ...` in front of it")
        op.where = _yielded_at(gen)
        ops.append(op)
        if len(ops) > max_ops:
            raise StepFunctionError(f"{view.name} ({fname}) yielded more than {max_ops} operations")
    if view._loose:
        lost = next(iter(view._loose.values()))
        raise StepFunctionError(f"{view.name} ({fname}): `{lost.text}` was created but never "
                                "yielded -- write `yield ...` in front of it")
    return ops


def default_init(ring):
    """full[s] expects one arrival (the producer's), empty[s] one per consumer."""
    for s in range(ring.stages):
        ring.full[s].init(1)
        ring.empty[s].init(ring.consumers)


# --------------------------------------------------------------------------
# the model: states, events, transitions
# --------------------------------------------------------------------------
class RingModel:
    """The recorded programs plus the transition function the search uses.

    A state is ``(pcs, bars, stages, inflight)``; an event is ``("t", tid)``
    (thread ``tid`` executes its next operation) or ``("l", copy)`` (an
    in-flight copy ``(stage, tile, bar, nbytes, owner, seq)`` lands; a ``cp_async`` copy has bar -1,
    its issuing thread as owner and its place among that thread's cp_async copies as seq; a
    barrier-tracked copy has owner and seq -1).
    """

    def __init__(self, producers, consumers, stages=4, tiles=8, tile_bytes=16384, init=None,
                 every_consumer_reads=False):
        if callable(producers):
            producers = [producers]
        if callable(consumers):
            consumers = [consumers]
        for what, fns in (("producer", producers), ("consumers", consumers)):
            if not isinstance(fns, (list, tuple)) or any(not callable(f) for f in fns):
                raise TypeError(f"check_ring: {what}={fns!r}: give the step function itself (or a list of them), "
                                "as check_ring(producer, [consumer] * 4): not its result, producer(ring, 0), which "
                                "runs it outside the checker")
        producers, consumers = list(producers), list(consumers)
        if not producers and not consumers:
            raise ValueError("no threads to check")
        if not consumers and init is None:   # default_init counts one arrival per consumer on empty[s]: with none,
            #                                   its count of 0 was reported as the learner's mbarrier misuse
            raise ValueError("check_ring: consumers=[]: give at least one consumer step function (or an init of "
                             "your own for a ring without consumers)")
        for what, v, least in (("stages", stages, 1), ("tiles", tiles, 0), ("tile_bytes", tile_bytes, 1)):
            if not whole(v, least):
                raise ValueError(f"check_ring: {what}={v!r}: a whole number >= {least}")
        S = stages
        self.stages, self.tiles, self.tile_bytes = stages, tiles, tile_bytes
        self.every_consumer_reads = every_consumer_reads
        self.bar_names = [f"full[{s}]" for s in range(S)] + [f"empty[{s}]" for s in range(S)]
        cfg = dict(stages=stages, tiles=tiles, tile_bytes=tile_bytes, consumers=len(consumers),
                   producers=len(producers), bars=[None] * (2 * S), bar_names=self.bar_names)
        self.init_error = None
        try:
            (init or default_init)(RingView(cfg))
        except MBarrierMisuse as e:
            self.init_error = str(e)
        self.bars0 = tuple(cfg["bars"])

        self.names, self.programs, self.texts, self.wheres = [], [], [], []
        roles = [("P" if len(producers) == 1 else f"P{i}", "producer", i, f)
                 for i, f in enumerate(producers)]
        roles += [(f"C{i}", "consumer", i, f) for i, f in enumerate(consumers)]
        for name, role, i, fn in roles:
            ops = _record(fn, RingView(cfg, role, i, name))
            self.names.append(name)
            self.programs.append(tuple((op.code,) + tuple(op.args) for op in ops))
            self.texts.append(tuple(op.text for op in ops))
            self.wheres.append(tuple(op.where for op in ops))
        self.lengths = tuple(len(p) for p in self.programs)
        # per thread and pc: how many cp_async copies it issued before (the groups a wait_group counts back from)
        self.cp_before = tuple(tuple(sum(op[0] == _CP_ASYNC for op in prog[:pc]) for pc in range(len(prog) + 1))
                               for prog in self.programs)

        # which threads must read each tile before its stage may be reused
        needed = {}
        for tid, prog in enumerate(self.programs):
            for op in prog:
                if op[0] == _READ:
                    needed[op[2]] = needed.get(op[2], 0) | (1 << tid)
        self.needed = needed
        # where each (stage, tile) copy sits in each program (to tell an early read
        # from a read of the wrong data)
        copy_at = {}
        for tid, prog in enumerate(self.programs):
            for pc, op in enumerate(prog):
                if op[0] in (_COPY, _CP_ASYNC):
                    copy_at.setdefault((op[1], op[2]), [[] for _ in self.programs])[tid].append(pc)
        self.copy_at = copy_at

    # ---- states ---------------------------------------------------------
    def initial_state(self):
        return ((0,) * len(self.programs), self.bars0, (None,) * self.stages, ())

    def is_final(self, state):
        pcs, _, _, inflight = state
        return not inflight and pcs == self.lengths

    def events(self, state):
        pcs, bars, _, inflight = state
        evs = []
        for tid, prog in enumerate(self.programs):
            pc = pcs[tid]
            if pc < len(prog):
                op = prog[pc]
                if op[0] == _WAIT:
                    st = bars[op[1]]
                    if st is not None and st[1] == op[2]:
                        continue          # blocked: that phase has not completed
                elif op[0] == _CP_WAIT and any(c[4] == tid and c[5] < self.cp_before[tid][pc] - op[1]
                                               for c in inflight):
                    continue              # blocked: a group older than the n most recent is in flight
                evs.append(("t", tid))
        last = None
        for c in inflight:
            if c != last:
                evs.append(("l", c))
                last = c
        return evs

    def _who(self, mask):
        return ", ".join(self.names[t] for t in range(len(self.names)) if mask >> t & 1)

    def apply(self, state, ev, notes=None):
        """Successor state of ``state`` after event ``ev``; raises ``_Bug``."""
        pcs, bars, stages, inflight = state
        if ev[0] == "l":
            s, tile, b, n = ev[1][:4]
            i = inflight.index(ev[1])
            inflight = inflight[:i] + inflight[i + 1:]
            stages = stages[:s] + ((tile, 0),) + stages[s + 1:]
            if b >= 0:
                bars = self._bar(bars, b, bar_complete_tx, n, notes)
            return (pcs, bars, stages, inflight)

        tid = ev[1]
        pc = pcs[tid]
        op = self.programs[tid][pc]
        code = op[0]
        pcs = pcs[:tid] + (pc + 1,) + pcs[tid + 1:]
        if code == _WAIT:
            st = bars[op[1]]
            if st is None:
                raise _Bug(MBARRIER_MISUSE, f"wait on {self.bar_names[op[1]]} before init")
            if notes is not None:
                # a parity wait passes when the phase of that parity has completed: the one before the current
                # phase (PTX ISA, mbarrier.test_wait/try_wait .parity); a fresh barrier is in phase 0, and a wait
                # for parity 1 on it passes at once
                notes.append(f"(passes: {self.bar_names[op[1]]} is in a phase of parity {st[1]}, and a wait for "
                             f"parity {1 - st[1]} passes from the start of that phase; on a fresh barrier, at once)")
        elif code == _ARRIVE:
            bars = self._bar(bars, op[1], bar_arrive, op[2], notes)
        elif code == _EXPECT:
            bars = self._bar(bars, op[1], bar_expect_tx, op[2], notes)
        elif code == _ARRIVE_TX:
            bars = self._bar(bars, op[1], bar_arrive_expect_tx, op[2], notes, op[3])
        elif code in (_COPY, _CP_ASYNC):
            s, tile = op[1], op[2]
            b, n, owner, seq = (op[3], op[4], -1, -1) if code == _COPY else (-1, 0, tid, self.cp_before[tid][pc])
            for c in inflight:
                if c[0] == s:
                    raise _Bug(STAGE_OVERWRITTEN,
                               f"copy of tile {tile} issued into stage {s} while the copy of "
                               f"tile {c[1]} into that stage is still in flight")
            held = stages[s]
            if held is not None:
                missing = self.needed.get(held[0], 0) & ~held[1]
                if missing:
                    raise _Bug(STAGE_OVERWRITTEN,
                               f"copy of tile {tile} issued into stage {s}, which still holds "
                               f"tile {held[0]} that {self._who(missing)} {'has' if bin(missing).count('1') == 1 else 'have'} "
                               "not read yet")
            inflight = tuple(sorted(inflight + ((s, tile, b, n, owner, seq),)))
        elif code == _CP_WAIT:
            pass                          # enabled only once enough of its copies have landed
        elif code == _READ:
            _, s, tile = op
            held = stages[s]
            if held is not None and held[0] == tile and not any(c[0] == s for c in inflight):
                stages = stages[:s] + ((tile, held[1] | (1 << tid)),) + stages[s + 1:]
            else:
                who = self.names[tid]
                for c in inflight:
                    if c[0] == s and c[1] == tile:
                        raise _Bug(READ_BEFORE_ARRIVAL,
                                   f"{who} reads stage {s} expecting tile {tile}, but the copy "
                                   f"of tile {tile} into stage {s} has not landed yet")
                if self._copy_ahead(pcs, s, tile):
                    raise _Bug(READ_BEFORE_ARRIVAL,
                               f"{who} reads stage {s} expecting tile {tile}, but the copy of "
                               f"tile {tile} into stage {s} has not even been issued yet")
                if held is None:
                    raise _Bug(WRONG_DATA, f"{who} reads stage {s} expecting tile {tile}, but "
                               "nothing has landed in that stage yet")
                if held[0] != tile:
                    raise _Bug(WRONG_DATA, f"{who} reads stage {s} expecting tile {tile}, but the "
                               f"stage holds tile {held[0]}")
                c = next(c for c in inflight if c[0] == s)
                raise _Bug(WRONG_DATA, f"{who} reads stage {s} (tile {tile}) while tile {c[1]} "
                           "is being copied over it")
        else:  # pragma: no cover
            raise AssertionError(op)
        return (pcs, bars, stages, inflight)

    def _copy_ahead(self, pcs, s, tile):
        """Is a copy of ``tile`` into stage ``s`` still to be issued by some thread?"""
        for tid, positions in enumerate(self.copy_at.get((s, tile), ())):
            if positions and positions[-1] >= pcs[tid]:
                return True
        return False

    def _bar(self, bars, b, fn, arg, notes, *more):
        name = self.bar_names[b]
        try:
            st, done = fn(bars[b], arg, *more, name=name) if more else fn(bars[b], arg, name=name)
        except MBarrierMisuse as e:
            raise _Bug(MBARRIER_MISUSE, str(e)) from None
        if notes is not None:
            if done:
                notes.append(f"-> {name}: phase of parity {bars[b][1]} completes "
                             f"(now parity {st[1]})")
            else:
                notes.append(f"({name}: {st[2]} of {st[0]} arrivals pending, tx-count {st[3]})")
        return bars[:b] + (st,) + bars[b + 1:]

    # ---- words ----------------------------------------------------------
    def describe(self, state, ev):
        if ev[0] == "l":
            s, tile, b, n, owner, _ = ev[1]
            if b < 0:
                return f"cp.async of tile {tile} -> stage {s} lands (only {self.names[owner]}'s wait_group sees it)"
            return f"copy tile {tile} -> stage {s} lands (complete_tx {n} on {self.bar_names[b]})"
        tid = ev[1]
        return f"{self.names[tid]}: {self.texts[tid][state[0][tid]]}"

    def blocked(self, state):
        pcs, bars, _, _ = state
        out = []
        for tid, prog in enumerate(self.programs):
            pc = pcs[tid]
            if pc >= len(prog):
                out.append(f"{self.names[tid]} has finished")
                continue
            op = prog[pc]
            if op[0] == _CP_WAIT:     # never stuck for good: its copies land; said for completeness
                out.append(f"{self.names[tid]} is at `{self.texts[tid][pc]}`")
                continue
            st = bars[op[1]]
            at = f" ({self.wheres[tid][pc]})" if self.wheres[tid][pc] else ""
            out.append(f"{self.names[tid]} is stuck at `{self.texts[tid][pc]}`{at}: "
                       f"{self.bar_names[op[1]]} is in its phase of parity {st[1]} with "
                       f"{st[2]} of {st[0]} arrivals pending and tx-count {st[3]}")
        return out

    def replay(self, events):
        """Apply ``events`` from the initial state; returns (lines, state, bug or None)."""
        state = self.initial_state()
        lines = []
        for k, ev in enumerate(events, 1):
            if ev not in self.events(state):
                raise ValueError(f"event {k} ({ev}) is not enabled")
            text = self.describe(state, ev)
            notes = []
            try:
                state = self.apply(state, ev, notes)
            except _Bug as bug:
                lines.append(f"{k:4d}. {text}")
                lines.append(f"      !! {bug.kind}: {bug.message}")
                return lines, state, bug
            lines.append(f"{k:4d}. {text}" + (f"   {' '.join(notes)}" if notes else ""))
        return lines, state, None

    # ---- search ---------------------------------------------------------
    def explore(self, max_states=5_000_000):
        t0 = time.perf_counter()
        start = self.initial_state()
        if self.init_error:
            return self._result(MBARRIER_MISUSE, f"in init: {self.init_error}", [], 1, 0, t0)
        # Every interleaving of programs that move nothing completes: a ring must copy and read each of its tiles.
        copied = {op[2] for p in self.programs for op in p if op[0] in (_COPY, _CP_ASYNC)}
        read = {op[2] for p in self.programs for op in p if op[0] == _READ}
        for t in range(self.tiles):
            if t not in copied or t not in read:
                what = "copied (ring.copy by a producer)" if t not in copied else "read (ring.read by a consumer)"
                return self._result(TILE_NOT_MOVED, f"tile {t} of {self.tiles} is never {what}: the programs must "
                                    "move every tile through the ring (a step function takes (ring, it) and is "
                                    "called once per tile; one that takes (ring) runs once, as the whole program)",
                                    [], 1, 0, t0)
        if self.every_consumer_reads:      # each consumer uses each tile (a GEMV's consumers: all of x, their rows)
            for name, prog in zip(self.names, self.programs):
                if not name.startswith("C"):
                    continue
                mine = {op[2] for op in prog if op[0] == _READ}
                t = next((t for t in range(self.tiles) if t not in mine), None)
                if t is not None:
                    return self._result(TILE_NOT_MOVED, f"consumer {name} never reads tile {t} of {self.tiles}: "
                                        "each consumer reads every tile here (ring.read(s, tile=it) in each)",
                                        [], 1, 0, t0)
        parent = {start: None}
        frontier = [start]
        depth = 0
        events, apply, is_final = self.events, self.apply, self.is_final
        while frontier:
            deadlock = None
            error = None
            nxt = []
            for st in frontier:
                evs = events(st)
                if not evs:
                    if not is_final(st) and deadlock is None:
                        deadlock = st
                    continue
                for ev in evs:
                    try:
                        ns = apply(st, ev)
                    except _Bug as bug:
                        if error is None:
                            error = (st, ev, bug)
                        continue
                    if ns not in parent:
                        parent[ns] = (st, ev)
                        nxt.append(ns)
                if len(parent) > max_states:
                    return self._result("incomplete", f"gave up after {len(parent)} states",
                                        [], len(parent), depth, t0)
            if deadlock is not None:      # a stuck state at this depth is shorter than an error
                path = self._path(parent, deadlock)
                return self._result(DEADLOCK, "no thread can move and not all of them are done",
                                    path, len(parent), depth, t0, blocked=self.blocked(deadlock))
            if error is not None:
                st, ev, bug = error
                path = self._path(parent, st) + [ev]
                return self._result(bug.kind, bug.message, path, len(parent), depth + 1, t0)
            frontier = nxt
            depth += 1
        return self._result(OK, "every interleaving completes", [], len(parent), depth - 1, t0)

    @staticmethod
    def _path(parent, st):
        path = []
        while parent[st] is not None:
            st, ev = parent[st]
            path.append(ev)
        return path[::-1]

    def _result(self, kind, message, path, states, depth, t0, blocked=()):
        lines = self.replay(path)[0] if path else []
        return RingReport(kind=kind, message=message, events=path, trace=lines,
                           blocked=list(blocked), states=states, depth=depth,
                           seconds=time.perf_counter() - t0,
                           config=dict(stages=self.stages, tiles=self.tiles,
                                       tile_bytes=self.tile_bytes, threads=list(self.names)))


@dataclass
class RingReport:
    """What :func:`check_ring` found.  ``str(result)`` is the report."""

    kind: str
    message: str
    events: list = field(default_factory=list)
    trace: list = field(default_factory=list)      # one readable line per event
    blocked: list = field(default_factory=list)    # for a deadlock: where each thread is
    states: int = 0
    depth: int = 0
    seconds: float = 0.0
    config: dict = field(default_factory=dict)
    todo: str = ""                                 # a lab's part not yet written (its TODO lines), said first

    @property
    def ok(self) -> bool:
        return self.kind == OK

    def __bool__(self):
        return self.ok

    def lines(self):
        return str(self).splitlines()

    def __str__(self):
        c = self.config
        where = (f"{c.get('stages')} stages, {c.get('tiles')} tiles, threads "
                 f"{' '.join(c.get('threads', []))}")
        if self.ok:
            return (f"ok: {self.states} states explored in {self.seconds:.2f} s ({where}); "
                    f"{self.message}")
        out = [f"{self.todo}BUG {self.kind}: {self.message}",
               f"  found after exploring {self.states} state{'s' if self.states != 1 else ''} ({where})"]
        if self.trace:
            out.append(f"  shortest trace ({len(self.events)} step{'s' * (len(self.events) != 1)}):")
            out += ["  " + line for line in self.trace]
        elif self.kind == DEADLOCK:
            out.append("  stuck in the initial state: no step can run at all")
        for b in self.blocked:
            out.append(f"  stuck: {b}")
        return "\n".join(out)

    def __repr__(self):
        return str(self)


def _unwritten(functions) -> str:
    """The lab's TODO lines still in these step functions' source (feedbeast.errors.unwritten), or ''."""
    import inspect
    from ..errors import unwritten
    parts = []
    for fn in dict.fromkeys(functions):
        try:
            lines, first = inspect.getsourcelines(fn)
        except (OSError, TypeError):
            continue
        parts.append((fn.__name__, "".join(lines), first))
    return unwritten(parts)


def check_ring(producer, consumers, stages=4, tiles=8, tile_bytes=16384, init=None,
               max_states=5_000_000, every_consumer_reads=False) -> RingReport:
    """Check a full/empty ring over every interleaving.

    ``producer``: a step function or a list of them; ``consumers``: a list of
    step functions (one per consumer thread).  ``init(ring)`` initialises the
    barriers (default: ``full[s]`` with 1 arrival, ``empty[s]`` with one per
    consumer).  ``every_consumer_reads``: each consumer must read each tile
    (a ring whose consumers share every tile; without it, each tile must be
    read by some consumer).  Returns a :class:`RingReport`.
    """
    model = RingModel(producer, consumers, stages=stages, tiles=tiles,
                      tile_bytes=tile_bytes, init=init, every_consumer_reads=every_consumer_reads)
    result = model.explore(max_states=max_states)
    if not result.ok:            # a lab's model whose part is not written yet: say that first
        result.todo = _unwritten([producer] + list(consumers) if callable(producer) else
                                 list(producer) + list(consumers))
    from .. import hooks as verdicts   # what grading reads (a printed "ok" is not a verdict)
    verdicts.verdict("passed" if result.ok else "failed", "model (check_ring)", str(result))
    return result
