"""The replay's synchronisation: mbarrier phases (the one model of feedbeast.sim.mbarrier), bar.sync, __syncwarp
and barrier.cluster, as release and acquire of vector clocks (Chapter 04; PTX ISA: mbarrier, Phase completion;
Memory Consistency Model: release and acquire patterns)."""
from __future__ import annotations

import numpy as np

from ..sim.mbarrier import MAX_ARRIVALS, MBarrierMisuse, bar_arrive, bar_complete_tx, bar_expect_tx, bar_init
from .report import Violation
from .trace import _name4


class _Barrier:
    """One mbarrier of the trace: its state in the model of sim/mbarrier.py (expected count, parity, pending
    arrivals, tx-count), the phase it is in, and what each completed phase released."""

    def __init__(self, index, count, ev, width):
        self.index, self.init = index, ev
        self.state = bar_init(min(max(1, count), MAX_ARRIVALS))
        self.phase = 0                   # the current (incomplete) phase
        self.announced = 0               # tx bytes announced in the current phase (for the report)
        self.landed = 0                  # tx bytes of copies issued in the current phase (for the report)
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

    @property
    def count(self) -> int:
        return self.state[0]

    @property
    def waiting_for_bytes(self) -> bool:
        """All arrivals of the phase are in and its tx-count is not zero."""
        return self.state[2] == 0 and self.state[3] != 0

    def apply(self, op, *args) -> tuple[bool, str]:
        """One operation of the model: (the phase completed, '' or what the PTX ISA leaves undefined)."""
        try:
            self.state, completed = op(self.state, *args, name=self.name)
            return completed, ""
        except MBarrierMisuse as e:
            return False, str(e)


class _Barriers:
    """The part of the replay (_Cluster) that follows barriers: phases, waits, and bar.sync-like instances."""

    def barrier(self, rank, addr, ev):
        b = self.barriers.get((rank, addr))
        if b is None:       # initialised outside the fb:: wrappers (cuda::barrier, raw PTX), or never, or later
            self.untraced.add(addr)
            t = self.now_t      # the thread of the use, and its own clock then (the init compares them)
            self.early_use.setdefault((rank, addr), (ev, t, int(self.clock(t)[t])))
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
        for w in b.writes:      # (a cp.async its own thread already waited for stays known that way too)
            w.done = ("phase", b.index, p) if w.done is None else ("either", (w.done, ("phase", b.index, p)))
        b.phase_writes[p] = sorted({(w.start, w.size) for w in b.writes if w.size})
        b.writes = []
        if b.remote:
            b.phase_remote[p] = b.remote
            b.remote = []
        b.phase += 1
        b.announced = b.landed = 0
        b.clock = np.zeros(self.width, np.int64)    # the next phase carries only its own arrivals
        b.fenced = np.zeros(self.width, np.int64)
        b.retired = np.zeros(self.width, np.int64)

    def _apply(self, b, ev, op, *args):
        """An operation on b through the model; what the model calls undefined is reported, and the replay goes on
        as the hardware most likely would: bytes beyond the announced ones end the phase, an arrival beyond the
        count is not counted."""
        completed, misuse = b.apply(op, *args)
        if misuse and "arrival beyond the expected count" in misuse:
            self.violate(Violation("arrival-count", f"an arrival beyond the phase's count: {misuse}", ev, b.init,
                                   b.name, b.phase))
        elif misuse:
            text = (misuse if "limit" in misuse or "must be" in misuse else
                    f"copies brought {b.landed} bytes to a phase that announced {b.announced} with expect_tx")
            self.violate(Violation("expect-tx-mismatch", text, b.last_copy or ev, b.last_arrive, b.name, b.phase))
            b.state, completed = (b.count, b.state[1] ^ 1, b.count, 0), True
        if completed:
            self._complete_phase(b)

    def expect_tx(self, b, nbytes, ev):
        b.announced += nbytes
        self._apply(b, ev, bar_expect_tx, nbytes)

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
        b.last_arrive = ev
        if release:
            self.release_into(t, b.clock, b.fenced, b.retired)
        else:       # .relaxed: only what the thread knows of completed async operations
            np.maximum(b.retired, self.cc[t], out=b.retired)
            np.maximum(b.retired[self.T:], self.vc[t][self.T:], out=b.retired[self.T:])
        if bytes_:      # arrive.expect_tx: the bytes are counted before the arrival (PTX ISA: mbarrier.arrive)
            b.announced += bytes_
            self._apply(b, ev, bar_expect_tx, bytes_)
        self._apply(b, ev, bar_arrive, 1)
        if b.phase > p:         # its own arrival completed the phase: the thread knows it did
            self.cc[t][idx] = max(self.cc[t][idx], p + 1)

    def land(self, b, bytes_, acc, ev, t=None):
        if t is not None:   # what the issuer knew of completed phases reaches the waiters of this one (not a release)
            np.maximum(b.retired[self.T:], self.vc[t][self.T:], out=b.retired[self.T:])
            np.maximum(b.retired[self.T:], self.cc[t][self.T:], out=b.retired[self.T:])
        b.landed += bytes_
        b.last_copy = ev
        b.writes.append(acc)
        self._apply(b, ev, bar_complete_tx, bytes_)

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

    def _seen_phase(self, b, parity, ev):
        """The phase a wait for `parity` returned on: the latest completed one of that parity (-1: the phase before
        phase 0 of a fresh barrier); None, reported, when none had completed."""
        if parity in b.latest:
            return b.latest[parity]
        if parity == 1:
            return -1
        self.violate(Violation("wait-parity", f"the wait for parity {parity} returned, but no phase of that "
                               "parity had completed in the trace (an arrive or copy outside the fb:: "
                               "wrappers?)", ev, b.last_arrive, b.name, b.phase))
        return None

    def wait(self, t, rank, ev):
        b = self.barrier(rank, ev.a, ev)
        if (rank, ev.a) in self.early_use:     # no traced init yet: no phase of it is known (its rule is the init's)
            return
        parity, stage = ev.b & 1, (ev.b >> 8) - 1
        name = _name4(ev.c, ev.d)
        if name:
            b.name = f"{name}[{stage}]" if stage >= 0 else name
        seen = self._seen_phase(b, parity, ev)
        if seen is None:
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

    def unfinished_phases(self):
        """Bytes announced and never brought: a phase left incomplete at exit is allowed (PTX ISA: mbarrier), an
        accounting error is not."""
        for b in self.barriers.values():
            if b.waiting_for_bytes:
                self.violate(Violation("expect-tx-mismatch", f"expect_tx announced {b.announced} bytes, copies "
                                       f"brought {b.landed}: the phase never completed", b.last_arrive or b.init,
                                       b.last_copy, b.name, b.phase))

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
