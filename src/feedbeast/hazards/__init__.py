"""The hazard checker: a trace of a kernel's asynchronous operations, replayed against the PTX memory model.

Chapter 04 explains it: what each rule rests on (the formal memory model or the prose of the ISA), and what it
does not cover.

    mod = fb.compile(src, "sm_90a", hazards=True)        # or %%cuda --hazards; or any Module: see below
    report = mod.hazard_check("ring", grid, block, x, y, n, shared=SMEM)   # runs the kernel once, traced
    print(report)                                         # each violation: rule, block, thread, lines
    report.raise_if_any()                                 # fb.HazardFound naming the rule

With FEEDBEAST_HAZARDS=1 every launch of a kernel compiled from source also runs its hazard build at the same
arguments and raises HazardFound (the grader and `make sanitize` set it).

What the trace holds (include/fb/hazard.cuh): every fb:: wrapper of the hazard build appends one event per
executing thread, in program order, with the source line of its call: cp.async / bulk / TMA copies (shared-memory
range, bytes, barrier), commit and wait groups, mbarrier init / arrive / expect_tx / wait, wgmma fence / commit /
wait and the shared-memory tiles its descriptors read, fence.proxy.async, __syncthreads / __syncwarp / named
barriers / cluster barriers, and ordinary reads and writes where the kernel marks them
(fb::hazard::generic_read / generic_write). Events of operations that release or issue are recorded before the
operation, those of operations that acquire or complete after it, each slot claimed with one atomicAdd: the
order of the slots is an order in which the operations could have happened, so the checker replays them in it.

The replay keeps, per thread, a vector clock of happens-before (PTX ISA, "Memory Consistency Model": release
and acquire patterns through mbarrier arrive/wait, bar.sync, barrier.cluster) and a second clock of what is
ordered *through a proxy fence* ("Proxies": fence.proxy.async orders generic-proxy accesses before async-proxy
ones; release/acquire alone does not). Asynchronous accesses complete where the ISA says they do: a bulk or
TMA load when its mbarrier phase completes (complete_tx, "mbarrier"), the operand reads of a wgmma at the
wgmma.wait_group that retires its group ("wgmma.wait_group"), the source reads of a bulk/TMA store at
cp.async.bulk.wait_group.read ("cp.async.bulk.wait_group"), a cp.async at its cp.async.wait_group. The rules:

  async-read-in-flight  a write to shared memory (a refill, a staging write) while an async read of it (wgmma
                        operand, tcgen05.mma operand, TMA store source) has not completed before it
  async-read-at-exit    the block ends while a TMA store it issued may still read its shared memory
  missing-proxy-fence   a generic access, then an async-proxy access of the same bytes, ordered, but with no
                        fence.proxy.async executed by the accessing thread on the ordering path (e.g. the fence
                        after the release arrive, or a fence in another thread than the one that wrote)
  unordered-access      two accesses of the same bytes, one a write, that nothing orders (a read before the
                        copy that fills it landed, a refill before the readers released the stage)
  expect-tx-mismatch    the bytes announced with expect_tx in a phase differ from the bytes that complete on it
  arrival-count         a thread arrives on a phase after the previous one completed without it: the count is
                        lower than the threads that arrive per round (an incomplete phase at exit is allowed)
  wait-parity           a wait that returned for a phase its thread had already seen (parity aliasing: the
                        waiter is two phases ahead of the barrier), or for a parity no phase had completed
  mbarrier-scope        a .cta wait acquired a phase released by a thread of another CTA (not morally strong)
  missing-wgmma-fence   a warpgroup's first wgmma.mma_async with no wgmma.fence before it
  bulk-store-in-flight  a TMA load of a box a TMA store wrote, before cp.async.bulk.wait_group (not .read)

Not checkable (Report.unchecked, never a pass): a barrier used but never initialised through fb::mbar::init, a
tensor map that is no argument of the launch, and a kernel whose own source uses synchronisation the trace cannot
see (cuda::barrier, cuda::pipeline, cooperative groups, bar.arrive, bar.red, cuda::ptx or raw-PTX barriers and
copies: see unmodeled()). A wait that times out in a hazard build gives up without trapping: the trace up to the
hang is checked.

A thread that waits on a phase on which copies landed and then, before its next arrive or barrier, issues no
async operation and marks no access, is taken to read what landed with ordinary loads (the consumer of a
ring); fb::hazard::generic_read makes that explicit. Blocks interact only within a cluster: two clusters (or
blocks) record at the start of the grid, at the end of its first row and at its end (traced_ranges).
"""
from __future__ import annotations

import dataclasses
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .. import hooks as verdicts  # check outcomes go out through the hooks
from ..errors import FeedbeastError

try:   # the error class lives with the others so that fb.isolated can raise it by name
    from ..errors import HazardFound
except ImportError:   # pragma: no cover
    class HazardFound(FeedbeastError):
        """The hazard checker found an ordering violation of the async proxy."""

KINDS = (None, "cp.async", "cp.async.commit_group", "cp.async.wait_group", "cp.async.bulk", "tma.load",
         "tma.store", "cp.async.bulk.commit_group", "cp.async.bulk.wait_group.read", "cp.async.bulk.wait_group",
         "mbarrier.init", "mbarrier.arrive", "mbarrier.expect_tx", "mbarrier.wait", "wgmma.fence", "wgmma.read",
         "wgmma.commit_group", "wgmma.wait_group", "fence.proxy.async", "bar.sync", "__syncwarp",
         "barrier.cluster", "generic.read", "generic.write", "tcgen05.commit", "tcgen05.mma", "tma.map", "tma.coords",
         "shared.read", "shared.write", "cp.async.mbarrier.arrive")
(CP_ASYNC, CP_COMMIT, CP_WAIT, BULK_LOAD, TMA_LOAD, TMA_STORE, BULK_COMMIT, BULK_WAIT_READ, BULK_WAIT,
 MBAR_INIT, MBAR_ARRIVE, MBAR_EXPECT_TX, MBAR_WAIT, WGMMA_FENCE, WGMMA_READ, WGMMA_COMMIT, WGMMA_WAIT,
 FENCE_PROXY_ASYNC, BAR_SYNC, SYNCWARP, CLUSTER_SYNC, GENERIC_READ, GENERIC_WRITE, TC_COMMIT, TC_MMA, TMA_MAP, TMA_COORDS,
 SMEM_READ, SMEM_WRITE, CP_MBAR_ARRIVE) = range(1, 31)

RULES = {
    "async-read-in-flight": "shared memory was written while an asynchronous read of it had not completed "
                            "(PTX ISA: wgmma.wait_group; cp.async.bulk.wait_group.read)",
    "missing-proxy-fence": "a generic-proxy access and a later async-proxy access of the same shared memory "
                           "with no fence.proxy.async on the path that orders them (PTX ISA: Memory "
                           "Consistency Model, Proxies; membar/fence: fence.proxy.async)",
    "unordered-access": "two accesses of the same shared memory, at least one a write, that no barrier, wait "
                        "or completion orders (PTX ISA: Memory Consistency Model, data races)",
    "expect-tx-mismatch": "the transaction bytes announced in a phase differ from the bytes that completed on "
                          "it (PTX ISA: mbarrier, Tracking asynchronous transactions)",
    "arrival-count": "a thread arrived on a phase whose predecessor completed without it knowing: a count lower "
                     "than the arrivals completes phases early, or the thread runs ahead of the barrier (PTX ISA: "
                     "mbarrier, Phase completion: the phase completes when the pending arrival count reaches zero)",
    "async-read-at-exit": "the block ended while a bulk/TMA store still read its shared memory: no "
                          "cp.async.bulk.wait_group.read (or wait_group) by the issuing thread retired it (PTX ISA: "
                          "cp.async.bulk.wait_group; the source must stay valid until the read is complete)",
    "missing-wgmma-fence": "a warpgroup's first wgmma.mma_async, or a wgmma whose registers another instruction "
                           "wrote, with no wgmma.fence before it (PTX ISA: wgmma.fence)",
    "bulk-store-in-flight": "a TMA load read global memory that a TMA store had not finished writing: only "
                            "cp.async.bulk.wait_group without .read completes the writes (PTX ISA: "
                            "cp.async.bulk.wait_group)",
    "mbarrier-scope": "a wait at .cta scope acquired a phase that a thread of another CTA released: the release and "
                      "the acquire are not morally strong, so nothing is ordered (PTX ISA: Memory Consistency Model, "
                      "Scope and Morally strong operations; mbarrier.try_wait .cluster)",
    "wait-parity": "a wait returned for a phase other than the next one its thread uses (PTX ISA: "
                   "mbarrier.test_wait/try_wait, parity)",
    "wgmma-register-in-flight": "a wgmma's accumulator or A-fragment registers were accessed between its "
                                "wgmma.mma_async and the wgmma.wait_group that retires it: undefined (PTX ISA: "
                                "wgmma.mma_async, wgmma.wait_group); ptxas's log of the normal build says where",
}

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


def decode(words: np.ndarray) -> list[Event]:
    """Events from the raw (n, 8) uint32 trace; a slot not completed (its last word != index + 1) is dropped."""
    w = np.asarray(words, dtype=np.uint32).reshape(-1, WORDS)
    ok = w[:, 7] == np.arange(1, len(w) + 1, dtype=np.uint32)
    idx = np.nonzero(ok)[0]
    w = w[idx].astype(np.int64)
    cols = (idx, w[:, 0] & 0xFF, w[:, 0] >> 8, w[:, 1], w[:, 2] & 0xFFFF, w[:, 2] >> 16, w[:, 3], w[:, 4], w[:, 5],
            w[:, 6])
    make = tuple.__new__     # Python ints, field by field in numpy: a trace can hold millions of events
    return [make(Event, r) for r in zip(*(c.tolist() for c in cols))]


def encode(events) -> np.ndarray:
    """The inverse of decode (tests build synthetic traces with it): tuples or Events, in replay order."""
    rows = []
    for i, e in enumerate(events):
        kind, line, block, thread, rank, a, b, c, d = (e.kind, e.line, e.block, e.thread, e.rank, e.a, e.b, e.c,
                                                       e.d) if isinstance(e, Event) else e
        rows.append([kind | (line << 8), block, thread | (rank << 16), a & ALL, b & ALL, c & ALL, d & ALL, i + 1])
    return np.array(rows, dtype=np.uint32).reshape(-1, WORDS)


@dataclasses.dataclass
class Violation:
    rule: str
    message: str
    second: Event               # the access or operation that breaks the rule
    first: Event | None = None  # the earlier one it conflicts with
    barrier: str = ""
    phase: int | None = None

    def describe(self, source: str | None = None, name: str = "kernel.cu") -> str:
        lines = (source or "").split("\n")

        def where(e):
            if e is None:
                return ""
            text = lines[e.line - 1].strip() if source and 0 < e.line <= len(lines) else ""
            return (f"block {e.block} thread {e.thread} (warp {e.thread // 32}): {e.name} at {name}:{e.line}"
                    + (f"   {text}" if text else ""))
        parts = [f"[{self.rule}] {self.message}"]
        if self.second.index < 0:       # found by ptxas in the normal build (registers.py), not in the trace
            return parts[0]
        if self.barrier:
            parts[0] += f" (barrier {self.barrier}" + (f", phase {self.phase})" if self.phase is not None else ")")
        if self.first is not None:
            parts.append("  first:  " + where(self.first))
        parts.append("  then:   " + where(self.second))
        return "\n".join(parts)


@dataclasses.dataclass
class Report:
    kernel: str
    violations: list
    events: int
    dropped: int = 0                 # events past the buffer's capacity
    source: str | None = None
    module_name: str = "kernel.cu"
    blocks_traced: int = 0
    unchecked: str = ""              # why the trace could not be checked (then there are no violations)
    gave_up: str = ""                # the barrier wait of the hazard build that timed out (the trace stops there)
    seconds: dict = dataclasses.field(default_factory=dict)   # where a run's time went: build, run, check

    @property
    def ok(self) -> bool:
        return not self.violations and not self.dropped

    def by_rule(self) -> dict:
        out = defaultdict(list)
        for v in self.violations:
            out[v.rule].append(v)
        return dict(out)

    def __str__(self):
        head = (f"hazard check of {self.kernel}: {self.events} events from {self.blocks_traced} block(s), "
                f"{len(self.violations)} violation(s)")
        if self.dropped:
            head += f"; {self.dropped} events did not fit the trace buffer (use a smaller size)"
        if self.unchecked:
            head += f"; not checked: {self.unchecked}"
        elif self.gave_up:
            head += f"; the trace stops where a wait on {self.gave_up} gave up (the kernel hangs)"
        if not self.violations:
            return head
        rows = [head]
        for rule, vs in self.by_rule().items():
            rows.append(f"{rule}: {len(vs)} ({RULES[rule]})")
            for v in vs[:3]:
                rows.append(v.describe(self.source, self.module_name))
            if len(vs) > 3:
                rows.append(f"  ... and {len(vs) - 3} more of this rule")
        return "\n".join(rows)

    __repr__ = __str__

    def raise_if_any(self):
        if self.dropped:
            raise HazardFound(str(self))
        if self.violations:
            first = self.violations[0]
            raise HazardFound(f"{first.rule}: {RULES[first.rule]}\n{self}")
        return self


# ---- the replay ---------------------------------------------------------------------------------------

def _name4(c, d) -> str:
    raw = int(c).to_bytes(4, "little") + int(d).to_bytes(4, "little")
    return raw.split(b"\0")[0].decode(errors="replace")


@dataclasses.dataclass
class _Access:
    ev: Event
    t: int               # thread (cluster-local index) that issued it
    time: int            # that thread's clock at the access
    start: int
    size: int
    write: bool
    generic: bool        # the proxy: generic (ld/st, cp.async) or async (bulk, TMA, wgmma)
    done: object = None  # completion: ("at", thread, time) | ("phase", barrier, phase) | ("any", {thread: time})
    what: str = ""
    plain: bool = False  # an ordinary load or store (marked or assumed): two of them are racecheck's business
    dead: bool = False   # replaced by a later write of its bytes
    lanes: tuple = ()    # a warp's access: ((thread, start), ...) per lane, `size` bytes each; () for one thread

    @property
    def lo(self):
        return min(s for _, s in self.lanes) if self.lanes else self.start

    @property
    def hi(self):
        return (max(s for _, s in self.lanes) if self.lanes else self.start) + self.size

    def meet(self, start, end) -> set:
        """The threads whose bytes of this access meet [start, end)."""
        if not self.lanes:
            return {self.t} if self.start < end and start < self.start + self.size else set()
        return {u for u, s in self.lanes if s < end and start < s + self.size}


class _Barrier:
    def __init__(self, index, count, ev, width):
        self.index, self.count, self.init = index, count, ev
        self.phase = 0                   # the current (incomplete) phase
        self.arrivals = 0
        self.expected = 0                # tx bytes announced in the current phase
        self.landed = 0                  # tx bytes of copies issued in the current phase
        self.clock = np.zeros(width, np.int64)
        self.fenced = np.zeros(width, np.int64)
        self.retired = np.zeros(width, np.int64)
        self.done = {}                   # phase -> (clock, fenced, retired)
        self.latest = {}                 # parity -> the latest completed phase of that parity
        self.writes = []                 # async writes completing on the current phase
        self.phase_writes = {}           # phase -> ranges those writes covered
        self.name = ""
        self.last_arrive = None
        self.last_copy = None
        self.rank = 0                    # the CTA whose shared memory holds it
        self.arrived_in = {}             # thread -> the phase of its last arrival
        self.remote = []                 # release arrivals of the current phase from other CTAs
        self.phase_remote = {}           # phase -> those arrivals


def _pad(v, n):
    return np.concatenate([v, np.zeros(n - len(v), np.int64)]) if len(v) < n else v


class _Cluster:
    """The replay of one cluster (or one block when there are no clusters)."""

    def __init__(self, threads_per_block, blocks, maps, report_violation, geometry=None, instrumented=False):
        self.tpb, self.blocks = threads_per_block, list(blocks)      # global block ids, by rank
        self.geometry = geometry or {}   # map id -> (array pointer, row stride B, element B, box rows, box cols)
        self.coords = {}                 # thread -> the coordinates of its next TMA op
        self.global_writes = []          # TMA stores' writes of global memory: (event, thread, geometry, rect, done)
        self.T = self.tpb * len(self.blocks)
        self.maps = maps
        self.violate = report_violation
        self.barriers = {}          # (rank, addr) -> _Barrier
        self.nbar = 0
        self.width = self.T + 64    # thread components, then one per barrier (grown on demand)
        # per thread: the happens-before clock; what is ordered through a proxy fence; and what is known of
        # async reads retired (by wgmma.wait_group / cp.async.bulk.wait_group.read), which a .relaxed arrive
        # carries too: it orders none of the thread's own accesses, but the reads it waited for are done.
        self.vc, self.fv, self.cc = {}, {}, {}
        self.pending_sync = {}      # thread -> the barrier instance it arrived at
        self.instances = {}
        self.instance_no = defaultdict(int)
        self.groups = defaultdict(lambda: [[]])      # (kind, owner) -> groups, the open one last
        self.wg_retired = {}                         # (id of a warpgroup's groups, thread) -> groups it retired
        self.reads = defaultdict(list)               # (rank, 1 KB page) -> read accesses
        self.writes = defaultdict(list)              # (rank, 1 KB page) -> write accesses
        self.last_seen = {}         # (thread, barrier) -> phase last observed
        self.implicit = {}          # thread -> [(wait event, rank, ranges, time)]: reads assumed after waits
        self.instrumented = instrumented    # every shared-memory access is in the trace: nothing is assumed
        self.epoch = defaultdict(int)       # thread -> releases so far (release_into)
        self.merged = {}            # (thread, rank, page) -> its latest ordinary read there, while no release passed
        self.untraced = set()       # barriers used but not initialised through fb::mbar::init
        self.unknown_maps = set()   # tensor-map ids that match no tensor-map argument of the launch
        self.touched = set()        # threads that made ordinary accesses of memory that copies write (stages)
        self.async_pages = set()    # (rank, 1 KB page) that bulk/TMA copies write
        self.wg_fenced = set()      # warpgroups (rank, index) that executed a wgmma.fence

    # ---- clocks
    def _grow(self, need):
        if need <= self.width:
            return
        new = max(need, 2 * self.width)
        for d in (self.vc, self.fv, self.cc):
            for k in d:
                d[k] = _pad(d[k], new)
        for b in self.barriers.values():
            b.clock, b.fenced, b.retired = _pad(b.clock, new), _pad(b.fenced, new), _pad(b.retired, new)
            b.done = {p: tuple(_pad(x, new) for x in v) for p, v in b.done.items()}
        for inst in self.instances.values():
            inst[0], inst[1], inst[3] = _pad(inst[0], new), _pad(inst[1], new), _pad(inst[3], new)
        self.width = new

    def clock(self, t):
        if t not in self.vc:
            self.vc[t] = np.zeros(self.width, np.int64)
            self.fv[t] = np.zeros(self.width, np.int64)
            self.cc[t] = np.zeros(self.width, np.int64)
        return self.vc[t]

    def release_into(self, t, clock, fenced, retired):
        self.epoch[t] += 1      # others can now learn this thread's clock: its earlier accesses are a closed set
        np.maximum(clock, self.vc[t], out=clock)
        np.maximum(fenced, self.fv[t], out=fenced)
        np.maximum(retired, self.cc[t], out=retired)

    def acquire_from(self, t, clock, fenced, retired):
        np.maximum(self.vc[t], clock, out=self.vc[t])
        np.maximum(self.fv[t], fenced, out=self.fv[t])
        np.maximum(self.cc[t], retired, out=self.cc[t])

    # ---- mbarriers
    def barrier(self, rank, addr, ev):
        b = self.barriers.get((rank, addr))
        if b is None:       # initialised outside the fb:: wrappers (cuda::barrier, raw PTX), or never
            self.untraced.add(addr)
            b = self.init_barrier(rank, addr, 1, ev)
        b.rank = rank
        return b

    def init_barrier(self, rank, addr, count, ev):
        self._grow(self.T + self.nbar + 1)
        b = _Barrier(self.nbar, count, ev, self.width)
        b.name = f"at {addr:#x}"
        self.nbar += 1
        b.rank = rank
        self.barriers[(rank, addr)] = b
        return b

    def _complete_phase(self, b):
        p = b.phase
        b.clock[self.T + b.index] = p + 1
        b.fenced[self.T + b.index] = p + 1
        b.done[p] = (b.clock, b.fenced, b.retired)
        b.latest[p % 2] = p
        for w in b.writes:
            w.done = ("phase", b.index, p)
        b.phase_writes[p] = sorted({(w.start, w.size) for w in b.writes if w.size})
        b.writes = []
        if b.remote:
            b.phase_remote[p] = b.remote
            b.remote = []
        b.phase += 1
        b.arrivals = b.expected = b.landed = 0
        b.clock = np.zeros(self.width, np.int64)    # the next phase carries only its own arrivals
        b.fenced = np.zeros(self.width, np.int64)
        b.retired = np.zeros(self.width, np.int64)

    def _maybe_complete(self, b, ev):
        if b.arrivals < b.count:
            return
        if b.landed > b.expected:
            self.violate(Violation("expect-tx-mismatch", f"copies brought {b.landed} bytes to a phase that "
                                   f"announced {b.expected} with expect_tx", b.last_copy or ev, b.last_arrive,
                                   b.name, b.phase))
            self._complete_phase(b)
        elif b.landed == b.expected:
            self._complete_phase(b)

    def arrive(self, t, b, bytes_, ev, release=True, rank=None):
        # A thread that arrives on phase p > 0 (and not again on a phase it already arrived on) must know that
        # phase p - 1 has completed (through its waits, or its own arrival completing it): else that phase
        # completed without it, so the count is lower than the threads that arrive per round, or the thread runs
        # a round ahead of the barrier (PTX ISA: mbarrier, Phase completion).
        p, last = b.phase, b.arrived_in.get(t)
        idx = self.T + b.index
        if p > 0 and last != p and max(self.vc[t][idx], self.cc[t][idx]) < p:
            self.violate(Violation("arrival-count", f"this arrival lands in phase {p}, but phase {p - 1} completed "
                                   "without this thread knowing it: the barrier's count is lower than the threads "
                                   "that arrive on each phase (it completes early), or this thread skipped the wait "
                                   "that would have told it", ev, b.init, b.name, p - 1))
        b.arrived_in[t] = p
        if release and rank is not None and rank != b.rank and t in self.touched:
            b.remote.append(ev)     # a release by another CTA's thread whose ordinary accesses of stages it orders
        b.expected += bytes_
        b.arrivals += 1
        b.last_arrive = ev
        if release:
            self.release_into(t, b.clock, b.fenced, b.retired)
        else:       # .relaxed: only what the thread knows of completed async operations
            np.maximum(b.retired, self.cc[t], out=b.retired)
            np.maximum(b.retired[self.T:], self.vc[t][self.T:], out=b.retired[self.T:])
        self._maybe_complete(b, ev)
        if b.phase > p:         # its own arrival completed the phase: the thread knows it did
            self.cc[t][idx] = max(self.cc[t][idx], p + 1)

    def land(self, b, bytes_, acc, ev, t=None):
        if t is not None:   # what the issuer knew of completed phases reaches the waiters of this one (not a release)
            np.maximum(b.retired[self.T:], self.vc[t][self.T:], out=b.retired[self.T:])
            np.maximum(b.retired[self.T:], self.cc[t][self.T:], out=b.retired[self.T:])
        b.landed += bytes_
        b.last_copy = ev
        b.writes.append(acc)
        self._maybe_complete(b, ev)

    # ---- accesses of shared memory
    @staticmethod
    def _pages(rank, start, size):
        return [(rank, p) for p in range(start >> 10, ((start + max(size, 1) - 1) >> 10) + 1)]

    def _ordered(self, a: _Access, t, new: _Access) -> bool:
        """Has access a completed before thread t's current point (where it makes access `new`)? That an async
        operation completed may also be known through a .relaxed arrive, unless `new` reads what it wrote."""
        d, vc = a.done, self.vc[t]
        if d is None:
            return False
        known = vc if a.generic or a.write and not new.write else np.maximum(vc, self.cc[t])
        if d[0] == "phase":
            return known[self.T + d[1]] >= d[2] + 1
        if d[0] == "at":
            return known[d[1]] >= d[2]
        return any(known[v] >= r for v, r in d[1].items())

    @staticmethod
    def _pairs(old: _Access, new: _Access) -> set:
        """(old's thread, new's thread) for each pair of lanes whose bytes meet."""
        if not new.lanes:
            return {(u, new.t) for u in old.meet(new.start, new.start + new.size)}
        return {(u, v) for v, s in new.lanes for u in old.meet(s, s + new.size)}

    def access(self, t, ev, rank, start, size, write, generic, done=None, what="", plain=False, lanes=()):
        vc = self.clock(t)
        if lanes:       # one event for a warp's lanes: start and size are their hull; each lane has `size` bytes
            lo, hi = min(s for _, s in lanes), max(s for _, s in lanes) + size
            pages = self._pages(rank, lo, hi - lo)
        else:
            lo, hi = start, start + size
            pages = self._pages(rank, start, size)
        if not generic and write:
            self.async_pages.update(pages)
        elif generic and not self.async_pages.isdisjoint(pages):
            self.touched.add(t)
        a = _Access(ev, t, int(vc[t]), start, size, write, generic, done, what or ev.name, plain, lanes=lanes)
        mergeable = plain and not write and not lanes
        seen = set()
        for table in ((self.reads, self.writes) if write else (self.writes,)):
            for key in pages:
                for old in table.get(key, ()):
                    if id(old) in seen or old.hi <= lo or hi <= old.lo:
                        continue
                    seen.add(id(old))
                    if old.plain and plain:
                        continue        # two ordinary accesses: compute-sanitizer racecheck's business
                    pairs = self._pairs(old, a) if old.lanes or lanes else {(old.t, t)}
                    if not pairs:
                        continue
                    own = {u for u, v in pairs if u == v}
                    if len(own) == len(pairs):      # each lane meets only its own bytes: program order
                        if old.generic and generic and old.ev.kind != CP_ASYNC:
                            continue
                        u = own.pop()
                        self.clock(u)
                        self.check_pair(old, a, u)      # a cp.async: its own thread must have waited for it
                    else:
                        self.check_pair(old, a, t)
        if write:   # a write replaces what it was checked against
            for table in (self.reads, self.writes):
                for key in pages:
                    lst = table.get(key)
                    if lst:
                        keep = []
                        for o in lst:
                            if o.hi <= lo or hi <= o.lo or (o.lanes or lanes) and not self._pairs(o, a):
                                keep.append(o)
                            else:
                                o.dead = True
                        lst[:] = keep
        if mergeable and self._merge(t, rank, a, pages):
            return a
        for key in pages:
            (self.writes if write else self.reads)[key].append(a)
        return a

    def _merge(self, t, rank, a, pages) -> bool:
        """Fold an ordinary read into the same thread's last read of the same bytes' neighbourhood when no release
        of that thread came between them: another thread can order both or neither (its clock of this thread moves
        only at releases), so one entry with the later time and the two ranges' hull says the same. Without it a
        stage read by every warp in every lap would be checked entry by entry against each refill."""
        key = (t, rank, pages[0][1])
        m = self.merged.get(key)
        if (m is None or m[1] != self.epoch[t] or m[0].dead or m[0].start > a.start + a.size
                or a.start > m[0].start + m[0].size):
            self.merged[key] = (a, self.epoch[t])
            return False
        old = m[0]
        end = max(old.start + old.size, a.start + a.size)
        have = set(self._pages(rank, old.start, old.size))
        old.start = min(old.start, a.start)
        old.size = end - old.start
        old.time, old.done, old.ev = a.time, a.done, a.ev
        for page in pages:
            if page not in have:
                self.reads[page].append(old)
        return True

    def check_pair(self, old: _Access, new: _Access, t):
        if not self._ordered(old, t, new):
            if not old.generic and not old.write:
                self.violate(Violation(
                    "async-read-in-flight",
                    f"the {old.what} of [{old.start:#x}, +{old.size}) had not completed before this "
                    + ("write: no wait retired it" if old.done is None or old.done[0] == "any" and not old.done[1]
                       else "write: the wait that retired it is not ordered before it (it comes after the arrive "
                            "or barrier that let this write happen)"), new.ev, old.ev))
            else:
                what = {(True, True): "write after write", (True, False): "write after read",
                        (False, True): "read after write"}[(new.write, old.write)]
                hint = ""
                if old.write and not old.generic:
                    hint = (": the copy had not landed (no wait on its barrier's phase before this "
                            + ("read)" if not new.write else "write)"))
                elif old.write and old.ev.kind == CP_ASYNC:
                    hint = (": the cp.async that wrote it had not been waited for (cp.async.wait_group)"
                            if old.done is None else ": the cp.async that wrote it is complete only for the thread "
                            "that waited for it: a barrier after that wait must come before this access")
                elif not old.write and old.plain and new.write:
                    hint = ": the read is not ordered before this write (a release arrive or barrier before the read?)"
                self.violate(Violation("unordered-access", f"{what} of [{new.start:#x}, +{new.size}){hint}",
                                       new.ev, old.ev))
            return
        if old.generic and not new.generic and self.fv[t][old.t] < old.time:
            self.violate(Violation(
                "missing-proxy-fence",
                f"the generic-proxy {'write' if old.write else 'read'} of [{old.start:#x}, +{old.size}) is ordered "
                f"before this async-proxy {'write' if new.write else 'read'} only by release/acquire: no "
                "fence.proxy.async on that path (one after the release does not count)", new.ev, old.ev))

    def commit_implicit(self, t):
        for ev, rank, ranges, time in self.implicit.pop(t, []):
            self.touched.add(t)
            for start, size in ranges:
                a = _Access(ev, t, time, start, size, False, True, ("at", t, time),
                            "ordinary reads after the wait (assumed: no fb::hazard marker)", True)
                for key in self._pages(rank, start, size):
                    self.reads[key].append(a)

    # ---- bar.sync, __syncwarp, barrier.cluster
    def sync_arrive(self, t, key, members):
        inst_key = (key, self.instance_no[key])
        inst = self.instances.get(inst_key)
        if inst is None:
            inst = self.instances[inst_key] = [np.zeros(self.width, np.int64), np.zeros(self.width, np.int64),
                                               set(), np.zeros(self.width, np.int64)]
        self.release_into(t, inst[0], inst[1], inst[3])
        inst[2].add(t)
        self.pending_sync[t] = inst_key
        if members and len(inst[2]) >= members:
            self.sync_complete(inst_key)

    def sync_complete(self, inst_key):
        """Everyone who arrived acquires everyone's release. A barrier with no fixed count (__syncthreads with
        exited threads, barrier.cluster) completes when one of its threads does anything after it."""
        inst = self.instances.pop(inst_key, None)
        if inst is None:
            return
        self.instance_no[inst_key[0]] = max(self.instance_no[inst_key[0]], inst_key[1] + 1)
        for m in inst[2]:
            self.acquire_from(m, inst[0], inst[1], inst[3])
            if self.pending_sync.get(m) == inst_key:
                del self.pending_sync[m]

    def box_rect(self, t, ev):
        """(the global array the map views, [row0, row1) x [col0, col1) in elements) of a TMA op, or None."""
        geo, xy = self.geometry.get(ev.b), self.coords.pop(t, None)
        if geo is None or xy is None:
            return None
        ptr, stride, esize, rows, cols = geo
        return (ptr, stride, esize), (xy[1], xy[1] + rows, xy[0], xy[0] + cols)

    def check_global_read(self, t, ev):
        """A TMA load of global memory that a TMA store wrote: the store's writes must be complete (its issuer's
        cp.async.bulk.wait_group, without .read) and that completion ordered before this load."""
        box = self.box_rect(t, ev)
        if box is None:
            return
        (arr, (r0, r1, c0, c1)) = box
        for w in self.global_writes:
            wr0, wr1, wc0, wc1 = w[3]
            if w[2] != arr or r1 <= wr0 or wr1 <= r0 or c1 <= wc0 or wc1 <= c0:
                continue
            if w[4] is None or self.vc[t][w[1]] < w[4]:
                self.violate(Violation("bulk-store-in-flight", "this TMA load reads global memory that a TMA store "
                                       "wrote, and no cp.async.bulk.wait_group (without .read) of the store's thread, "
                                       "ordered before this load, completed it", ev, w[0]))

    def map_bytes(self, ev):
        """Box bytes of the tensor map an event names (its id: a hash of the map's 128 bytes)."""
        size = self.maps.get(ev.b)
        if size is None:
            self.unknown_maps.add(ev.b)
            return 0
        return size

    # ---- one event
    def step(self, ev: Event, rank: int):
        # In a cluster launch a CTA's own .shared::cta addresses carry its rank above bit 24 (the window of
        # .shared::cluster it sits in: 0x1000400 in rank 1 for offset 0x400). Offsets are what CTAs share.
        # An ld/st.shared::cluster names its CTA in those bits.
        target = ev.a // SMEM_WINDOW if ev.kind in (SMEM_READ, SMEM_WRITE) and ev.c & 1 else rank
        if ev.a >= SMEM_WINDOW or ev.kind in (BULK_LOAD, TMA_LOAD) and ev.c >= SMEM_WINDOW:
            ev = ev._replace(a=ev.a % SMEM_WINDOW,
                                     c=ev.c % SMEM_WINDOW if ev.kind in (BULK_LOAD, TMA_LOAD) else ev.c)
        t = rank * self.tpb + ev.thread
        if t in self.pending_sync:          # the thread is past its barrier: the barrier completed
            self.sync_complete(self.pending_sync[t])
        vc = self.clock(t)
        vc[t] += 1
        k = ev.kind
        if t in self.implicit:
            if k in (WGMMA_READ, WGMMA_FENCE, WGMMA_COMMIT, WGMMA_WAIT, GENERIC_READ, TMA_STORE, TC_MMA, TC_COMMIT):
                self.implicit.pop(t)        # the thread reads the stage another way, or marks its reads itself
            elif k in (MBAR_WAIT, BAR_SYNC, SYNCWARP):
                pass                        # not an access: a wait for the next stage or a turn (ping-pong)
            elif k not in (FENCE_PROXY_ASYNC, GENERIC_WRITE, CP_WAIT, BULK_WAIT, BULK_WAIT_READ):
                self.commit_implicit(t)
        wg = (rank, ev.thread // 128)
        if k == CP_ASYNC:
            self.groups[("cp", t)][-1].append(self.access(t, ev, rank, ev.a, ev.b, True, True))
        elif k == CP_COMMIT:
            self.groups[("cp", t)].append([])
        elif k == CP_WAIT:
            self._retire(self.groups[("cp", t)], None if ev.b == ALL else ev.b, ev.b == ALL, t)
        elif k in (BULK_LOAD, TMA_LOAD):
            if k == TMA_LOAD and self.global_writes:
                self.check_global_read(t, ev)
            size = ev.b if k == BULK_LOAD else self.map_bytes(ev)
            targets = [rank] if k == BULK_LOAD or not ev.d else [r for r in range(16) if ev.d >> r & 1]
            for r in targets:
                if r < len(self.blocks):
                    b = self.barrier(r, ev.c, ev)
                    self.land(b, size, self.access(t, ev, r, ev.a, size, True, False), ev, t)
        elif k == TMA_COORDS:
            self.coords[t] = (ev.a - (1 << 32) if ev.a >= 1 << 31 else ev.a, ev.b - (1 << 32) if ev.b >= 1 << 31 else ev.b)
        elif k == TMA_STORE:
            box = self.box_rect(t, ev)
            if box is not None:
                w = [ev, t, box[0], box[1], None]
                self.global_writes.append(w)
                self.groups[("bulk-global", t)][-1].append(w)
            size = self.map_bytes(ev)
            self.groups[("bulk", t)][-1].append(self.access(t, ev, rank, ev.a, size, False, False,
                                                            what="TMA store's read"))
        elif k == BULK_COMMIT:
            self.groups[("bulk", t)].append([])
            self.groups[("bulk-global", t)].append([])
        elif k in (BULK_WAIT_READ, BULK_WAIT):
            self._retire(self.groups[("bulk", t)], ev.b, False, t)
            if k == BULK_WAIT:      # the writes too (.read waits only for the reads of the source)
                groups = self.groups[("bulk-global", t)]
                n = max(0, len(groups) - 1 - ev.b)
                for grp in groups[:n]:
                    for w in grp:
                        w[4] = int(self.vc[t][t])
                groups[:] = groups[n:]
        elif k == MBAR_INIT:
            self.init_barrier(rank, ev.a, max(1, ev.b), ev)
        elif k == MBAR_ARRIVE:
            self.arrive(t, self.barrier(rank if ev.c == 0 else ev.c - 1, ev.a, ev), ev.b, ev, release=not ev.d,
                        rank=rank)
        elif k == TC_COMMIT:
            # One arrival once this thread's earlier tcgen05.mma have completed (PTX ISA: tcgen05.commit): their
            # operand reads are complete in the phase it arrives on, and the arrival is the release.
            b = self.barrier(rank, ev.a, ev)
            for grp in self.groups.pop(("tc", t), [[]]):
                for a in grp:
                    a.done = ("phase", b.index, b.phase)
            self.arrive(t, b, 0, ev, rank=rank)
        elif k == TC_MMA:   # a = smem start of one operand, b = bytes: read by the async proxy until a commit
            self.groups[("tc", t)][-1].append(self.access(t, ev, rank, ev.a, ev.b, False, False,
                                                          what="tcgen05.mma operand read"))
        elif k == MBAR_EXPECT_TX:
            b = self.barrier(rank, ev.a, ev)
            b.expected += ev.b
            self._maybe_complete(b, ev)
        elif k == MBAR_WAIT:
            self.wait(t, rank, ev)
        elif k == WGMMA_FENCE:
            self.wg_fenced.add(wg)
        elif k == WGMMA_READ and ev.thread % 128 == 0:     # warpgroup-wide: its first thread speaks for it
            if wg not in self.wg_fenced:
                self.wg_fenced.add(wg)      # said once per warpgroup
                self.violate(Violation("missing-wgmma-fence", "this warpgroup's first wgmma.mma_async has no "
                                       "wgmma.fence before it (fb::wgmma::fence())", ev, None))
            a = self.access(t, ev, rank, ev.a, ev.b, False, False, ("any", {}), "wgmma operand read")
            self.groups[("wgmma", wg)][-1].append(a)
        elif k == WGMMA_COMMIT and ev.thread % 128 == 0:
            self.groups[("wgmma", wg)].append([])
        elif k == WGMMA_WAIT:
            self._retire_warpgroup(self.groups[("wgmma", wg)], ev.b, t)
        elif k == FENCE_PROXY_ASYNC:
            # It orders the memory accesses of the thread that executes it (PTX ISA, membar/fence: "memory
            # accesses requested by this thread"), not those it acquired from others.
            self.fv[t][t] = vc[t]
        elif k == BAR_SYNC:
            self.sync_arrive(t, ("bar", rank, ev.a), ev.b)
        elif k == SYNCWARP:
            self.sync_arrive(t, ("warp", rank, ev.thread // 32, ev.b), bin(ev.b).count("1"))
        elif k == CLUSTER_SYNC:
            self.sync_arrive(t, ("cluster",), 0)
        elif k in (GENERIC_READ, GENERIC_WRITE):
            self.access(t, ev, rank, ev.a, ev.b, k == GENERIC_WRITE, True, ("at", t, int(vc[t])),
                        "ordinary " + ("write" if k == GENERIC_WRITE else "read"), plain=True)
        elif k in (SMEM_READ, SMEM_WRITE):     # from the instrumented PTX: ld/st/atom/ldmatrix/stmatrix
            self.access(t, ev, target, ev.a, ev.b, k == SMEM_WRITE, True, ("at", t, int(vc[t])),
                        ("ld/st " if ev.c & 1 == 0 else "ld/st.shared::cluster ")
                        + ("write" if k == SMEM_WRITE else "read"), plain=True, lanes=self.lanes(t, ev))
        elif k == CP_MBAR_ARRIVE:
            self.cp_async_arrive(t, rank, ev)

    @staticmethod
    def lanes(t, ev) -> tuple:
        """((thread, start), ...) of a warp's event (d: its lanes' mask, c >> 4: the stride between their
        addresses, include/fb/hazard.cuh); () for one thread's."""
        if not ev.d:
            return ()
        stride = ev.c >> 4
        stride -= (1 << 28) if stride >= 1 << 27 else 0
        first = (ev.d & -ev.d).bit_length() - 1
        lanes = [k for k in range(32) if ev.d >> k & 1]
        return tuple((t - first + k, (ev.a + r * stride) % SMEM_WINDOW) for r, k in enumerate(lanes))

    def cp_async_arrive(self, t, rank, ev):
        """cp.async.mbarrier.arrive(.noinc): the barrier's current phase completes only after every cp.async this
        thread issued so far (PTX ISA: cp.async.mbarrier.arrive); with .noinc the arrive-on is one of the phase's
        counted arrivals, without it the count is raised and lowered by one (no net arrival)."""
        b = self.barrier(rank, ev.a, ev)
        for grp in self.groups[("cp", t)]:
            for a in grp:
                if a.done is None:
                    a.done = ("phase", b.index, b.phase)
                    b.writes.append(a)
        if ev.b:
            self.arrive(t, b, 0, ev, release=False)

    def _retire(self, groups, pending, include_open, t):
        now = int(self.vc[t][t])
        self.cc[t][t] = now
        closed, open_ = groups[:-1], groups[-1]
        n = len(closed) if pending is None else max(0, len(closed) - pending)
        for grp in closed[:n] + ([open_] if include_open else []):
            for a in grp:
                a.done = ("at", t, now)
        groups[:] = closed[n:] + [[] if include_open else open_]

    def _retire_warpgroup(self, groups, pending, t):
        """wgmma.wait_group by thread t: the warpgroup's groups but the last `pending` are complete for t."""
        now = int(self.vc[t][t])
        self.cc[t][t] = now
        # The groups list only grows (commit appends): thread t's earlier waits retired a prefix of it, which
        # keeps its earlier time; only the groups past that prefix are new to t (linear, not quadratic, in laps).
        start = self.wg_retired.get((id(groups), t), 0)
        end = max(start, len(groups) - 1 - pending)
        for grp in groups[start:end]:
            for a in grp:
                a.done[1].setdefault(t, now)
        self.wg_retired[(id(groups), t)] = end

    def wait(self, t, rank, ev):
        b = self.barrier(rank, ev.a, ev)
        parity, stage = ev.b & 1, (ev.b >> 8) - 1
        name = _name4(ev.c, ev.d)
        if name:
            b.name = f"{name}[{stage}]" if stage >= 0 else name
        if parity in b.latest:
            seen = b.latest[parity]
        elif parity == 1:
            seen = -1      # a fresh barrier: the phase "before" phase 0 counts as complete
        else:
            self.violate(Violation("wait-parity", f"the wait for parity {parity} returned, but no phase of that "
                                   "parity had completed in the trace (an arrive or copy outside the fb:: "
                                   "wrappers?)", ev, b.last_arrive, b.name, b.phase))
            return
        if seen >= 0:
            remote = b.phase_remote.get(seen)
            if remote and not ev.b & 2:
                self.violate(Violation("mbarrier-scope", f"this .cta-scope wait acquired phase {seen}, which a thread "
                                       f"of CTA rank {remote[0].rank} released with a remote arrive: wait with "
                                       ".cluster scope (fb::mbar::wait_cluster)", ev, remote[0], b.name, seen))
            self.acquire_from(t, *b.done[seen])
        last = self.last_seen.get((t, b.index))
        if last is not None and seen == last:
            self.violate(Violation("wait-parity", f"the wait for parity {parity} returned on phase {seen}, which "
                                   "this thread had already waited for: it is two phases ahead of the barrier "
                                   "(parity cannot tell phase k from k + 2), or its parity is stale", ev, None,
                                   b.name, seen))
        self.last_seen[(t, b.index)] = seen
        ranges = b.phase_writes.get(seen)
        if ranges and not self.instrumented:
            self.implicit.setdefault(t, []).append((ev, rank, ranges, int(self.vc[t][t])))

    def finish(self, truncated=False):
        for t in list(self.implicit):
            self.commit_implicit(t)
        if truncated:       # the trace stops where a wait gave up: what is pending then is not pending at exit
            return
        # A phase left incomplete at exit is allowed (PTX ISA: mbarrier): only bytes announced and never brought are
        # an accounting error. A store still reading shared memory when the block ends is a race with the block's
        # shared memory being released.
        for (kind, t), groups in self.groups.items():
            if kind != "bulk":
                continue
            for a in (a for grp in groups for a in grp if a.done is None and not a.write):
                self.violate(Violation("async-read-at-exit", f"the {a.what} of [{a.start:#x}, +{a.size}) was never "
                                       "retired by this thread's cp.async.bulk.wait_group.read (or wait_group) before "
                                       "the block ended", a.ev, None))
        for b in self.barriers.values():
            if b.arrivals >= b.count and b.expected != b.landed:
                self.violate(Violation("expect-tx-mismatch", f"expect_tx announced {b.expected} bytes, copies "
                                       f"brought {b.landed}: the phase never completed", b.last_arrive or b.init,
                                       b.last_copy, b.name, b.phase))


def _replay(items, order, threads_per_block, blocks, maps, truncated=False, geometry=None, instrumented=False):
    """Replay one cluster's events [(position, event, rank)]. Returns ([(order key, violation)], untraced): the key
    puts the violations of all clusters back in the order one interleaved replay would have found them."""
    found, seen, now = [], set(), [None]

    def violate(v):     # the cap of check's own filter, applied per cluster: it keeps all that one would keep
        key = (v.rule, v.second.line, v.first.line if v.first else None)
        if key in seen and len(found) > 200:
            return
        seen.add(key)
        found.append((now[0] + (len(found),), v))
    cl = _Cluster(threads_per_block, blocks, maps, violate, geometry, instrumented)
    for pos, ev, rank in items:
        now[0] = (0, pos)
        cl.step(ev, rank)
    now[0] = (1, order)
    cl.finish(truncated)
    return found, (cl.untraced, cl.unknown_maps)


_JOBS = None            # the clusters of the replay under way, for the forked workers (not pickled to them)
PARALLEL_EVENTS = 200_000   # traces this long replay their clusters in parallel (one process each, forked)


def _replay_job(i):
    return _replay(*_JOBS[i])


def _replay_parallel(jobs):
    """The clusters' replays in forked processes (they share nothing): None where that is not possible here."""
    global _JOBS
    import multiprocessing
    import warnings
    workers = min(len(jobs), os.cpu_count() or 1)
    if workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return None
    _JOBS = jobs
    try:
        with warnings.catch_warnings():   # fork with other threads alive: the children run only this replay
            warnings.simplefilter("ignore", DeprecationWarning)
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                return pool.map(_replay_job, range(len(jobs)), chunksize=1)
    except Exception:   # noqa: BLE001 (no processes to be had: replay here)
        return None
    finally:
        _JOBS = None


def check(events, *, threads_per_block: int, grid=(1, 1, 1), cluster=(1, 1, 1), maps: dict | None = None,
          kernel: str = "kernel", source: str | None = None, module_name: str = "kernel.cu",
          dropped: int = 0, parallel: bool | None = None, truncated: bool = False, geometry: dict | None = None,
          instrumented: bool = False) -> Report:
    """Replay decoded events (in slot order) and return the Report. maps: tensor-map id -> box bytes.

    Clusters (or blocks) share no barrier and no shared memory, so each is replayed on its own; parallel: in
    separate processes (None: when the trace has PARALLEL_EVENTS or more and several clusters). instrumented: the
    trace holds every shared-memory access (the PTX of the build was instrumented), so no read is assumed."""
    if isinstance(events, np.ndarray):
        events = decode(events)
    cx, cy, cz = (tuple(cluster) + (1, 1, 1))[:3]
    gx, gy, gz = (tuple(grid) + (1, 1, 1))[:3]
    csize = cx * cy * cz
    parts = {}
    for pos, ev in enumerate(events):
        bx = ev.block % gx
        by = (ev.block // gx) % gy
        bz = ev.block // (gx * gy)
        cid = (bx // cx, by // cy, bz // cz)
        rank = (bx % cx) + cx * ((by % cy) + cy * (bz % cz)) if csize > 1 else 0
        part = parts.get(cid)
        if part is None:
            part = parts[cid] = []
        part.append((pos, ev, rank))
    jobs = []
    for order, (cid, items) in enumerate(parts.items()):
        blocks = []
        for r in range(csize):
            rx, ry, rz = r % cx, (r // cx) % cy, r // (cx * cy)
            blocks.append((cid[0] * cx + rx) + gx * ((cid[1] * cy + ry) + gy * (cid[2] * cz + rz)))
        jobs.append((items, order, threads_per_block, blocks, maps or {}, truncated,
                     {int(k): tuple(v) for k, v in (geometry or {}).items()}, instrumented))
    if parallel is None:
        parallel = len(jobs) > 1 and len(events) >= PARALLEL_EVENTS
    results = _replay_parallel(jobs) if parallel else None
    if results is None:
        results = [_replay(*job) for job in jobs]
    # the violations in the order of one interleaved replay, through its filter: past 200, one per (rule, lines)
    violations, per_kind_seen = [], set()
    for _, v in sorted((kv for found, _ in results for kv in found), key=lambda kv: kv[0]):
        key = (v.rule, v.second.line, v.first.line if v.first else None)
        if key in per_kind_seen and len(violations) > 200:
            continue
        per_kind_seen.add(key)
        violations.append(v)
    untraced = set().union(*(u[0] for _, u in results)) if results else set()
    unknown = set().union(*(u[1] for _, u in results)) if results else set()
    unchecked = ""
    if unknown:
        # a box size the checker does not know would be a guess at every expect_tx and store it touches
        unchecked = (f"{len(unknown)} tensor map(s) used that are not arguments of this launch (ids "
                     f"{', '.join(hex(m) for m in sorted(unknown))}): their box sizes are unknown")
        violations = []
    elif untraced:
        # the ordering those barriers give is invisible: any verdict on the accesses they order would be a guess
        unchecked = (f"{len(untraced)} mbarrier(s) used but not initialised through fb::mbar::init "
                     f"(shared addresses {', '.join(hex(a) for a in sorted(untraced))}): a cuda::barrier or raw PTX "
                     "the trace does not see, or a missing init")
        violations = []
    blocks = {ev.block for ev in events}
    # one report per distinct (rule, lines): the same bug repeats in every lap and every thread
    uniq, seen = [], set()
    for v in violations:
        key = (v.rule, v.second.line, v.first.line if v.first else None, v.message.split(":")[0])
        if key not in seen:
            seen.add(key)
            uniq.append(v)
    return Report(kernel, uniq, len(events), dropped, source, module_name, len(blocks), unchecked)


# ---- running a hazard build on the GPU ----------------------------------------------------------------

DEFAULT_CAPACITY = 1 << 22          # events (128 MiB of trace)


def build_key(module) -> tuple:
    """What makes two Modules the same build: source, arch, defines and options (not the Python object: a
    notebook that compiles the same source again gets a new Module with the same cubin)."""
    import hashlib
    return (module.arch, hashlib.sha256((module.source or "").encode()).hexdigest(),
            tuple(sorted((str(k), str(v)) for k, v in (module.defines or {}).items())), tuple(module.options or ()))


_hazard_modules = {}     # build_key -> the loaded hazard build: compiled and loaded once per process


def hazard_module(module):
    """The hazard build of a Module (itself when it is one)."""
    if getattr(module, "hazards", False) or "FB_HAZARDS" in (module.defines or {}):
        return module
    key = build_key(module)
    if key not in _hazard_modules:
        from ..compile import compile as _compile
        _hazard_modules[key] = _compile(module.source, module.arch,
                                        defines={**(module.defines or {}), "FB_HAZARDS": 1, "FB_DEBUG": 1},
                                        options=module.options, name=module.name)
    return _hazard_modules[key]


_trace_buffers = {}      # capacity -> [device buffer, slots the last run wrote]: allocated once, cleared as used


def map_id(raw: bytes) -> int:
    """A tensor map's id in the trace: FNV-1a over the 32 words of its 128 bytes, as fb::hazard::map_id computes it
    on the device from the map the kernel was given. Two maps with the same bytes have the same box."""
    h = 2166136261
    for w in np.frombuffer(bytes(raw)[:128], "<u4").tolist():
        h = ((h ^ w) * 16777619) & ALL
    return h


def _map_readings(args, params=None, recorded=(), hashes=None) -> list:
    """{map id: box bytes} for the launch's tensor-map arguments: one reading, or one per way of resolving ids that
    several maps with different boxes share (then every reading is checked and each one's violations reported:
    the reading that would hide an expect_tx bug is never chosen over the one that shows it).

    `recorded`: the map ids (addresses) of the trace's TMA events; `hashes`: {address: hash of the bytes there}, from
    its tma.map events. A recorded address whose bytes match no argument is matched by parameter offsets (`params`:
    the kernel's [(offset, size)]): every consistent match is a reading of its own."""
    from ..tensormap import TensorMap
    by_id = defaultdict(set)
    for a in args:
        if isinstance(a, TensorMap) and a.raw:
            by_id[map_id(a.raw)].add(a.box_bytes)
    readings = [{}]
    hashes = hashes or {}
    if recorded:        # a trace: its ids are addresses, named by the hash of the bytes found there
        for addr in sorted(recorded):
            sizes = by_id.get(hashes.get(addr))
            if sizes:
                readings = [{**r, addr: n} for r in readings for n in sorted(sizes)]
        unknown = sorted(a for a in recorded if not by_id.get(hashes.get(a)))
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
    return first


# Synchronisation and asynchronous operations the trace cannot see when a kernel's own source uses them (not through
# the fb:: wrappers): the ordering they give, or the accesses they make, would be missing from the replay, so a
# verdict would be a guess. The launch is then "not checkable" (a skipped verdict), never a pass.
_UNMODELED = (
    (r"\bcuda::barrier\b|\bcuda::pipeline\b|\bcuda::memcpy_async\b", "cuda::barrier / cuda::pipeline"),
    (r"\bcooperative_groups\b|\bthis_grid\s*\(|\bthis_cluster\s*\(", "cooperative groups"),
    (r"\b__syncthreads_(count|and|or)\b", "__syncthreads_count/and/or (bar.red)"),
    (r"\bcuda::ptx::(mbarrier|cp_async|barrier|fence|tcgen05|wgmma)\w*", "cuda::ptx synchronisation or copies"),
    (r"\"[^\"\n]*\b(bar\.arrive|bar\.red|barrier\.(?:arrive|red|cluster\.arrive)|(?<!async\.)mbarrier\.|"
     r"cp\.async(?!\.mbarrier\.arrive)|cp\.reduce\.async|fence\.proxy|wgmma\.|tcgen05\.(?:mma|commit|cp))",
     "raw PTX synchronisation or copies in asm"),
)


def _active_source(source: str, defines: dict | None) -> str:
    """The source without comments and without the #if blocks the preprocessor drops (only conditions it can
    evaluate from the source's own #defines and the build's defines; anything else is kept, to be safe)."""
    import re
    src = re.sub(r"/\*.*?\*/", " ", source or "", flags=re.S)
    src = re.sub(r"//[^\n]*", "", src)
    macros = {str(k): str(v) for k, v in (defines or {}).items()}
    out, stack = [], []          # stack of (this branch live, some branch taken, parent live)

    def value(expr):
        expr = re.sub(r"defined\s*\(?\s*(\w+)\s*\)?", lambda m: "1" if m.group(1) in macros else
                      ("None" if m.group(1).startswith("__") else "0"), expr)
        expr = re.sub(r"[A-Za-z_]\w*", lambda m: m.group(0) if m.group(0) == "None" else
                      (macros.get(m.group(0), "None" if m.group(0).startswith("__") else "0")), expr)
        expr = expr.replace("&&", " and ").replace("||", " or ")
        expr = re.sub(r"!(?!=)", " not ", expr)
        expr = re.sub(r"(\d+)[uUlL]+\b", r"\1", expr)
        try:
            v = eval(expr, {"__builtins__": {}}, {})        # noqa: S307 (digits, operators and None only)
        except Exception:   # noqa: BLE001
            return None
        return v
    for line in src.split("\n"):
        m = re.match(r"\s*#\s*(if|ifdef|ifndef|elif|else|endif|define)\b\s*(.*)", line)
        live = all(s[0] for s in stack)
        if not m:
            if live:
                out.append(line)
            continue
        d, rest = m.group(1), m.group(2).strip()
        if d == "define":
            if live:
                parts = rest.split(None, 1)
                if parts and "(" not in parts[0]:
                    macros[parts[0]] = parts[1] if len(parts) > 1 else "1"
            continue
        if d in ("if", "ifdef", "ifndef"):
            v = (value(rest) if d == "if" else (rest.split()[0] in macros) == (d == "ifdef"))
            on = True if v is None else bool(v)
            stack.append([on, on or v is None, v is None])
        elif d == "elif" and stack:
            top = stack[-1]
            v = value(rest)
            top[0] = top[2] or (not top[1] and (v is None or bool(v)))
            top[1] = top[1] or top[0]
        elif d == "else" and stack:
            top = stack[-1]
            top[0] = top[2] or not top[1]
            top[1] = True
        elif d == "endif" and stack:
            stack.pop()
    return "\n".join(out)


def unmodeled(source: str, defines: dict | None = None) -> str:
    """What in a kernel's own source the checker cannot model ("" when nothing)."""
    import re
    src = _active_source(source, defines)
    code = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', src)       # C++ names outside string literals; asm text inside them
    found = [what for pattern, what in _UNMODELED if re.search(pattern, src if pattern.startswith('\\"') else code)]
    return ", ".join(dict.fromkeys(found))


def traced_ranges(grid, cluster=(1, 1, 1), blocks: int = 2) -> list:
    """The [start, end) ranges of linear block ids (x fastest) whose threads record: `blocks` clusters at the start,
    at the end of the first row of blocks (ragged in x) and at the end of the grid (ragged in every dimension).
    Clusters spread over y or z are not cut apart: then every block records."""
    gx, gy, gz = (tuple(grid) + (1, 1, 1))[:3]
    cx, cy, cz = (tuple(cluster) + (1, 1, 1))[:3]
    total = gx * gy * gz
    if cy * cz != 1:
        return [(0, total)]
    n = blocks * cx                 # whole clusters: a grid's x extent is a multiple of the cluster's
    spans = [(0, min(n, total)), (max(0, gx - n), gx), (max(0, total - n), total)]
    out = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def run(kernel, grid, block, *args, shared: int = 0, cluster=None, blocks: int = 2,
        capacity: int = DEFAULT_CAPACITY, instrument: bool = True) -> Report:
    """Launch the hazard build of `kernel` (a Kernel of any Module) once with these arguments, and check it.

    blocks: how many clusters (or blocks) record events at each end of the grid (traced_ranges: the first ones, the
    last ones, where ragged tiles are, and the end of the first row); the others run untraced. instrument=False runs
    the hazard build's cubin as compiled: only the fb:: wrappers record, and ordinary reads are assumed at waits."""
    import struct
    import time
    from cuda.bindings import driver
    from ..device import _check
    from ..launch import _dim3
    from ..memory import empty, sync
    from ..skip import needs
    skip = needs(kernel.module.arch, f"hazard check of {kernel.name}")
    if skip is not None:
        return skip
    t0 = time.perf_counter()
    why = unmodeled(getattr(kernel.module, "source", "") or "", getattr(kernel.module, "defines", None))
    if why:
        return Report(kernel.name, [], 0, source=kernel.module.source, module_name=kernel.module.name,
                      unchecked=f"the kernel's source uses synchronisation the checker cannot model ({why})")
    mod = hazard_module(kernel.module)
    if b"fb_hz_events" not in mod.cubin:      # it includes no header with a traced wrapper: nothing to record
        return Report(kernel.name, [], 0, source=mod.source, module_name=mod.name,
                      unchecked="the kernel uses no traced fb:: wrapper")
    k = mod.kernel(kernel.name)
    if instrument:
        from .instrument import load
        load(mod)   # every ordinary shared-memory access recorded (instrument.py), before the kernel is loaded
    k._load()
    slot = _trace_buffers.get(capacity)
    if slot is None:
        buf = empty((capacity, WORDS), np.uint32, poison=False)
        buf.fill_bytes(0)
        slot = _trace_buffers[capacity] = [buf, 0]
    buf = slot[0]
    if slot[1]:         # clear what the last run wrote: a stale slot would pass decode's check of its index
        _check(driver.cuMemsetD8(buf.ptr, 0, min(slot[1], capacity) * WORDS * 4))
        slot[1] = 0
    g3, b3 = _dim3(grid, "grid"), _dim3(block, "block")
    c3 = _dim3(cluster, "cluster") if cluster is not None else (1, 1, 1)
    ranges = traced_ranges(g3, c3, blocks)

    def put(name, data):
        err, ptr, size = driver.cuModuleGetGlobal(mod._cu_module, name)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise FeedbeastError(f"{mod.name}: the hazard build has no {name.decode()} "
                                 "(does it include an fb/ header?)")
        _check(driver.cuMemcpyHtoD(ptr, data, len(data)))
        return ptr
    put(b"fb_hz_events", struct.pack("<Q", buf.ptr))
    put(b"fb_hz_capacity", struct.pack("<I", capacity))
    flat = [x for r in ranges for x in r] + [0, 0] * (3 - len(ranges))
    put(b"fb_hz_block_ranges", struct.pack("<6I", *flat))
    count_ptr = put(b"fb_hz_count", struct.pack("<I", 0))
    gave_up_ptr = put(b"fb_hz_gave_up", struct.pack("<5I", 0, 0, 0, 0, 0))
    t1 = time.perf_counter()
    slot[1] = capacity          # until the count is known, the whole buffer counts as written
    r = k.launch(grid, block, *args, shared=shared, cluster=cluster)
    if r is not None:
        return r
    sync()
    raw = bytearray(4)
    _check(driver.cuMemcpyDtoH(raw, count_ptr, 4))
    count = struct.unpack("<I", bytes(raw))[0]
    raw = bytearray(20)
    _check(driver.cuMemcpyDtoH(raw, gave_up_ptr, 20))
    gave_up, c, d, stage, parity = struct.unpack("<5I", bytes(raw))
    n = min(count, capacity)
    slot[1] = n
    words = np.empty((n, WORDS), np.uint32)
    if n:
        _check(driver.cuMemcpyDtoH(words.ctypes.data, buf.ptr, words.nbytes))
    t2 = time.perf_counter()
    events = decode(words)
    hashes = {e.a: e.b for e in events if e.kind == TMA_MAP}
    readings = _map_readings(args, getattr(k, "params", None), {e.b for e in events if e.kind in (TMA_LOAD, TMA_STORE)},
                             hashes)
    meta = dict(threads_per_block=int(np.prod(b3)), grid=g3, cluster=c3, kernel=kernel.name,
                source=mod.source, module_name=mod.name, dropped=max(0, count - capacity), truncated=bool(gave_up),
                instrumented=bool(getattr(mod, "_instrumented", None)),
                geometry={str(a): list(g) for a, g in _map_geometry(args, hashes).items()})
    report = _check_readings(events, readings, **meta)
    meta["maps"] = readings[0]
    report.violations += register_violations(kernel.module, kernel.name)
    report.seconds = {"build": t1 - t0, "run": t2 - t1, "check": time.perf_counter() - t2}
    if gave_up:
        stage = stage - (1 << 32) if stage >= 1 << 31 else stage
        what = f"{_name4(c, d) or 'barrier'}" + (f"[{stage}]" if stage >= 0 else "") + f" parity {parity}"
        report.gave_up = what
        if not report.violations:       # a hang, and nothing before it breaks a rule: not a verdict on ordering
            report.unchecked = (f"a wait on {what} in the hazard build gave up after the debug time-out (the kernel "
                                "hangs); the trace up to it breaks no rule")
    if os.environ.get("FEEDBEAST_HAZARDS_DUMP"):       # keep the trace, to replay it elsewhere (replay below)
        save(Path(os.environ["FEEDBEAST_HAZARDS_DUMP"]), words, meta, len(report.violations))
    return report


def register_violations(module, kernel_name: str) -> list:
    """The wgmma register rules (registers.py) from ptxas's log of the normal build of `module` (compiled here when
    `module` is a hazard build: its recorder calls make ptxas serialise wgmma for reasons of their own)."""
    from .registers import register_hazards
    if "FB_HAZARDS" in (module.defines or {}):
        from ..compile import compile as _compile
        defines = {k: v for k, v in module.defines.items() if k not in ("FB_HAZARDS", "FB_DEBUG")}
        module = _compile(module.source, module.arch, defines=defines, options=module.options, name=module.name)
    return [Violation(rule, f"{meaning}; ptxas: {line}", Event(-1, WGMMA_READ, 0, 0, 0, 0, 0, 0, 0, 0))
            for rule, meaning, line in register_hazards(module.log or "", kernel_name)]


def save(folder, words, meta, violations=0):
    """Write a trace and what its check needs as one .npz in `folder` (named with its violation count)."""
    import json
    folder.mkdir(parents=True, exist_ok=True)
    n = len(list(folder.glob("*.npz")))
    meta = {**meta, "maps": {str(k): v for k, v in meta["maps"].items()}}
    np.savez_compressed(folder / f"{n:03d}-{meta['kernel']}-v{violations}.npz", words=np.asarray(words, np.uint32),
                        meta=np.frombuffer(json.dumps(meta).encode(), np.uint8))


def replay(path) -> Report:
    """Check a trace saved with FEEDBEAST_HAZARDS_DUMP=folder (no GPU needed)."""
    import json
    z = np.load(path)
    meta = json.loads(bytes(z["meta"]).decode())
    meta["maps"] = {int(k): v for k, v in meta["maps"].items()}
    return check(decode(z["words"]), **meta)


def enabled() -> bool:
    """FEEDBEAST_HAZARDS=1: every launch of a source-compiled kernel is also hazard-checked (=report: the
    report is printed and nothing is raised, for surveys; =isolated: the check runs in a separate process)."""
    return os.environ.get("FEEDBEAST_HAZARDS") in ("1", "report", "isolated")


_checked = set()
_configs = {}       # (build, kernel, block, shared, cluster) -> the grid it was first checked at


def _arrays(args):
    """(pointer, bytes) of every device buffer a launch can write: array arguments and tensor maps' arrays."""
    from ..memory import DeviceArray
    from ..tensormap import TensorMap
    out = {}
    for a in args:
        a = a.array if isinstance(a, TensorMap) else a
        if isinstance(a, DeviceArray) and a.on_gpu:
            out[a.ptr] = max(out.get(a.ptr, 0), a.nbytes)
        elif hasattr(a, "__cuda_array_interface__"):
            cai = a.__cuda_array_interface__
            n = int(np.prod(cai["shape"])) * np.dtype(cai["typestr"]).itemsize
            out[cai["data"][0]] = max(out.get(cai["data"][0], 0), n)
    return out


_CHILD = r"""
import json
from feedbeast import hazards as hz
from feedbeast.compile import compile as _compile
import pickle
mod = _compile(source, arch, defines=defines, options=tuple(options), name=name)
with open(host_file, "rb") as f:          # the buffers go through a file: too large for a command line
    arrays = [fb.to_device(h) for h in pickle.load(f)]
args = []
for kind, x, extra in spec:
    if kind == "array":
        args.append(arrays[x])
    elif kind == "map":
        args.append(fb.tensor_map(arrays[x], extra.pop("box"), **extra))
    else:
        args.append(x)
r = hz.run(mod.kernel(kname), grid, block, *args, shared=shared, cluster=cluster)
print("__HZ__" + json.dumps({"text": str(r), "rules": [v.rule for v in r.violations] if isinstance(r, hz.Report)
                             else [], "ok": bool(getattr(r, "ok", True)), "events": getattr(r, "events", 0)}))
"""


def run_isolated(kernel, grid, block, *args, shared=0, cluster=None):
    """The hazard check in a separate process (fb.isolated): the arguments' device buffers go over as host copies,
    tensor maps are encoded again over them, so a hazard build that faults or hangs leaves this process's GPU
    context usable. Returns (report text, rules found, events)."""
    import json
    from cuda.bindings import driver
    from ..device import _check
    from ..isolated import isolated
    from ..memory import DeviceArray
    from ..memory import sync
    from ..tensormap import TensorMap
    sync()                  # the inputs as the launch would see them
    index, host, spec = {}, [], []

    def array(a):
        if isinstance(a, DeviceArray):
            ptr, shape, dtype = a.ptr, a.shape, a.dtype
        else:
            cai = a.__cuda_array_interface__
            ptr, shape, dtype = cai["data"][0], tuple(cai["shape"]), np.dtype(cai["typestr"])
        if ptr not in index:
            h = np.empty(shape, dtype)
            _check(driver.cuMemcpyDtoH(h.ctypes.data, ptr, h.nbytes))
            index[ptr] = len(host)
            host.append(h)
        return index[ptr]
    for a in args:
        if isinstance(a, TensorMap):
            spec.append(("map", array(a.array), dict(box=a.box, swizzle=a.swizzle, oob_fill=a.oob_fill,
                                                     l2_promotion=a.l2_promotion, shape=a.shape,
                                                     strides_bytes=a.strides_bytes,
                                                     element_strides=a.element_strides)))
        elif isinstance(a, DeviceArray) or hasattr(a, "__cuda_array_interface__"):
            spec.append(("array", array(a), None))
        else:
            spec.append(("value", a.item() if isinstance(a, np.generic) else a, None))
    import pickle
    import tempfile
    m = kernel.module
    with tempfile.TemporaryDirectory() as tmp:
        host_file = os.path.join(tmp, "buffers.pickle")
        with open(host_file, "wb") as f:
            pickle.dump(host, f)
        out = isolated(_CHILD, source=m.source, arch=m.arch, defines=dict(m.defines or {}), options=list(m.options),
                       name=m.name, host_file=host_file, spec=spec, kname=kernel.name, grid=grid, block=block,
                       shared=shared, cluster=cluster)
    from ..skip import Skipped
    if isinstance(out, Skipped):
        return str(out), [], 0
    line = next((ln for ln in str(out).splitlines() if ln.startswith("__HZ__")), None)
    if line is None:
        raise FeedbeastError(f"the isolated hazard check of {kernel.name} printed no result:\n{str(out)[-2000:]}")
    info = json.loads(line[len("__HZ__"):])
    return info["text"], info["rules"], info["events"]


def check_on_launch(kernel, grid, block, args, shared=0, cluster=None):
    """The FEEDBEAST_HAZARDS=1 hook of Kernel.launch, before the launch itself: run the hazard build at the same
    arguments (once per kernel, shape and configuration) and raise HazardFound if it breaks a rule. The
    arguments' buffers are saved before and restored after, so the real launch sees them as they were."""
    if not enabled():
        return
    mod = kernel.module
    if "FB_HAZARDS" in (mod.defines or {}) or "fb/" not in (getattr(mod, "source", "") or ""):
        return      # a hazard build itself, or a kernel that uses none of our headers (it would record nothing)
    # The same build (source, arch, defines, options: a notebook that compiles it again gets a new Module) at
    # the same launch and sizes is checked once.
    config = (build_key(mod), kernel.name, str(block), shared, str(cluster))
    key = config + (str(grid), tuple(getattr(a, "shape", None) or (a if isinstance(a, (int, float)) else
                                                                   type(a).__name__) for a in args))
    if key in _checked:
        return
    _checked.add(key)
    from ..hooks import under_sanitizer
    if under_sanitizer() and config in _configs:
        # make sanitize: each build and launch configuration (block, cluster, shared memory) is traced once, at
        # its first launch (a notebook's correctness check, before its timed sizes): another size of the same
        # build replays the same program with other trip counts. Said on its own line, counted apart.
        print(f"hazard check (repeat): {kernel.name} grid {grid} block {block}: same build and launch "
              f"configuration as the check at grid {_configs[config]}; not traced again", flush=True)
        return
    _configs.setdefault(config, str(grid))
    if os.environ.get("FEEDBEAST_HAZARDS") == "isolated":     # in a child process: a fault cannot cost this one
        text, found, events = run_isolated(kernel, grid, block, *args, shared=shared, cluster=cluster)
        print(f"hazard check: {kernel.name} grid {grid} block {block}: {len(found)} violation(s) in {events} events "
              "(separate process)", flush=True)
        if found:
            raise HazardFound(f"{found[0]}: {RULES[found[0]]}\n{text}")
        verdicts.passed(f"hazard check of {kernel.name}", f"grid {grid} block {block}: 0 violations in {events} events")
        return
    from cuda.bindings import driver
    from ..device import _check
    from ..memory import sync
    saved = {}
    try:
        for ptr, n in _arrays(args).items():
            copy = int(_check(driver.cuMemAlloc(n)))
            _check(driver.cuMemcpyDtoD(copy, ptr, n))
            saved[ptr] = (copy, n)
        report = run(kernel, grid, block, *args, shared=shared, cluster=cluster)
        sync()
        for ptr, (copy, n) in saved.items():
            _check(driver.cuMemcpyDtoD(ptr, copy, n))
        sync()
    finally:
        for copy, _ in saved.values():
            driver.cuMemFree(copy)
    if isinstance(report, Report):
        secs = "".join(f", {k} {v:.2f} s" for k, v in report.seconds.items())
        print(f"hazard check: {kernel.name} grid {grid} block {block}: {len(report.violations)} violation(s) in "
              f"{report.events} events" + (f"; not checked: {report.unchecked}" if report.unchecked else "")
              + (f" ({secs[2:]})" if secs else ""), flush=True)
        if os.environ.get("FEEDBEAST_HAZARDS") == "report":
            if not report.ok:
                print(report, flush=True)
        else:
            report.raise_if_any()
            what, where = f"hazard check of {kernel.name}", f"grid {grid} block {block}"
            if report.unchecked:     # what grading reads: a part the checker could not follow is not a pass
                verdicts.skipped(what, f"{where}: not checked: {report.unchecked}")
            else:
                verdicts.passed(what, f"{where}: 0 violations in {report.events} events")


if __name__ == "__main__":      # python -m feedbeast.hazards replay TRACE.npz ...
    if sys.argv[1:2] != ["replay"] or len(sys.argv) < 3:
        print("usage: python -m feedbeast.hazards replay TRACE.npz ...")
        sys.exit(2)
    bad = 0
    for p in sys.argv[2:]:
        r = replay(p)
        print(f"{p}: {r}")
        bad += not r.ok
    sys.exit(1 if bad else 0)
