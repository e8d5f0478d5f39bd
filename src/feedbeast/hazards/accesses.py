"""The replay's shared-memory accesses: who touched which bytes, when, through which proxy, and whether two
accesses of the same bytes are ordered (Chapter 04: the rules unordered-access, async-read-in-flight and
missing-proxy-fence; PTX ISA, Memory Consistency Model: data races, Proxies)."""
from __future__ import annotations

import dataclasses

import numpy as np

from .report import Violation
from .trace import BULK_REDUCE, CP_ASYNC, SMEM_WINDOW, Event

PAGE_BITS = 8       # accesses are filed by 256-byte page: a 16-byte copy is checked against its page's entries only


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
                         # | ("lanes", {thread: time}): a warp's ordinary access, each lane's part at that lane's time
    what: str = ""
    plain: bool = False  # an ordinary load or store (marked or assumed): two of them are racecheck's business
    dead: bool = False   # replaced by a later write of its bytes
    lanes: tuple = ()    # a warp's access: ((thread, start), ...) per lane, `size` bytes each; () for one thread
    peer: bool = False   # through .shared::cluster into another CTA's shared memory (DSMEM)

    lo: int = 0          # the hull of its bytes, [lo, hi)
    hi: int = 0
    parts: tuple = ()    # the lanes as recorded; `lanes` loses those a later write replaces

    def __post_init__(self):
        starts = [s for _, s in self.lanes] or [self.start]
        self.lo, self.hi = min(starts), max(starts) + self.size
        self.parts = self.lanes

    def meet(self, start, end) -> set:
        """The threads whose bytes of this access meet [start, end)."""
        if not self.lanes:
            return {self.t} if self.start < end and start < self.start + self.size else set()
        return {u for u, s in self.lanes if s < end and start < s + self.size}



class _Accesses:
    """The part of the replay (_Cluster) that records accesses and checks each against the earlier ones."""

    @staticmethod
    def _pages(rank, start, size):
        return [(rank, p) for p in range(start >> PAGE_BITS, ((start + max(size, 1) - 1) >> PAGE_BITS) + 1)]

    def _ordered(self, a: _Access, t, new: _Access, lanes=None) -> bool:
        """Has access a completed before thread t's current point (where it makes access `new`)? That an async
        operation completed may also be known through a .relaxed arrive, unless `new` reads what it wrote. `lanes`:
        the threads of a warp access `a` whose bytes meet `new` (only their parts must have completed)."""
        if a.done is None:
            return False
        vc = self.vc[t]
        known = vc if a.generic or a.write and not new.write else np.maximum(vc, self.cc[t])
        return self._known(a.done, known, lanes)

    def _known(self, d, known, lanes=None) -> bool:
        """Does a clock know the completion d: ("at", thread, time) | ("phase", barrier, phase) | ("any", {thread:
        time}) | ("lanes", {thread: time}) (all of them, or of those in `lanes`) | ("either", (completion, ...)) (a
        cp.async tracked by a barrier's phase and waited for by its thread)?"""
        if d[0] == "phase":
            return known[self.T + d[1]] >= d[2] + 1
        if d[0] == "at":
            return known[d[1]] >= d[2]
        if d[0] == "either":
            return any(self._known(x, known) for x in d[1])
        if d[0] == "lanes":
            return all(known[v] >= r for v, r in d[1].items() if lanes is None or v in lanes)
        return any(known[v] >= r for v, r in d[1].items())

    def _unordered_lanes(self, a: _Access, t, new: _Access, lanes) -> list:
        """The lanes of warp access `a` (of those in `lanes`, else its live ones) whose parts thread t does not know
        complete, with the clock _ordered uses."""
        times = a.done[1] if a.done is not None and a.done[0] == "lanes" else {}
        mine = lanes or {u for u, _ in a.lanes}
        known = self.vc[t] if a.generic or a.write and not new.write else np.maximum(self.vc[t], self.cc[t])
        return [u for u in sorted(mine) if u in times and known[u] < times[u]] or sorted(mine or {a.t})

    @staticmethod
    def _lane_start(acc: _Access, v):
        """Where lane v's bytes of acc start."""
        return dict(acc.parts).get(v, acc.start) if acc.parts else acc.start

    @staticmethod
    def _lane_event(acc: _Access, v):
        """acc's event as lane v made it (a warp's event is recorded by its first lane)."""
        return acc.ev if v == acc.t else acc.ev._replace(thread=acc.ev.thread + v - acc.t)

    @staticmethod
    def _pairs(old: _Access, new: _Access) -> set:
        """(old's thread, new's thread) for each pair of lanes whose bytes meet."""
        if not new.lanes:
            return {(u, new.t) for u in old.meet(new.start, new.start + new.size)}
        return {(u, v) for v, s in new.lanes for u in old.meet(s, s + new.size)}

    def access(self, t, ev, rank, start, size, write, generic, done=None, what="", plain=False, lanes=(), peer=False):
        vc = self.clock(t)
        if lanes:       # one event for a warp's lanes: start and size are their hull; each lane has `size` bytes
            lo, hi = min(s for _, s in lanes), max(s for _, s in lanes) + size
            pages = self._pages(rank, lo, hi - lo)
            # The lanes of one event need not be at the same point of their own programs: a lane that left a loop
            # early runs ahead and can execute the same load together with the others a lap later, in another stage
            # (seen on an H200). So each lane's part is that lane's access, made past the barriers that lane passed:
            # its clock ticks, its part completes at its own time, and it is checked against that lane's clock.
            when = {}
            for v, _ in lanes:
                if v != t:
                    self.past_barriers(v)
                    self.clock(v)[v] += 1
                when[v] = int(self.clock(v)[v])
            if done is not None and done[0] == "at":
                done = ("lanes", when)
        else:
            lo, hi = start, start + size
            pages = self._pages(rank, start, size)
        if not generic and write:
            self.async_pages.update(pages)
        elif generic and (peer or not self.async_pages.isdisjoint(pages)):
            self.touched.update([v for v, _ in lanes] if lanes else [t])
        a = _Access(ev, t, int(vc[t]), start, size, write, generic, done, what or ev.name, plain, lanes=lanes,
                    peer=peer)
        mergeable = plain and not write and not lanes and not peer
        seen = set()
        for table in ((self.reads, self.writes) if write else (self.writes,)):
            for key in pages:
                for old in table.get(key, ()):
                    if id(old) in seen or old.hi <= lo or hi <= old.lo:
                        continue
                    seen.add(id(old))
                    if old.plain and plain and not (old.peer or peer):
                        continue        # two ordinary accesses of one CTA: compute-sanitizer racecheck's business
                    pairs = self._pairs(old, a) if old.lanes or lanes else {(old.t, t)}
                    if not pairs:
                        continue
                    meets = {}      # each thread of the new access -> the threads of the old one whose bytes it meets
                    for u, v in pairs:
                        meets.setdefault(v, set()).add(u)
                    for v, us in sorted(meets.items()):
                        # a lane that meets only its own bytes: program order, but a cp.async needs its own wait
                        if us == {v} and old.generic and generic and old.ev.kind != CP_ASYNC:
                            continue
                        if self.check_pair(old, a, v, us):
                            break       # one report per pair of accesses
        if write:   # a write replaces what it was checked against
            for table in (self.reads, self.writes):
                for key in pages:
                    lst = table.get(key)
                    if lst:
                        keep = []
                        for o in lst:
                            met = None if o.hi <= lo or hi <= o.lo else (
                                {u for u, _ in self._pairs(o, a)} if o.lanes or lanes else {o.t})
                            if met and o.lanes and len(met) < len(o.lanes):
                                # a warp access: only the lanes this write meets are replaced; the others (in another
                                # stage, a lap apart) are still checked against later writes
                                o.lanes = tuple((u, st) for u, st in o.lanes if u not in met)
                                starts = [st for _, st in o.lanes]
                                o.lo, o.hi = min(starts), max(starts) + o.size
                                keep.append(o)
                            elif met:
                                o.dead = True
                            else:
                                keep.append(o)
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
        old.lo, old.hi = old.start, end
        old.time, old.done, old.ev = a.time, a.done, a.ev
        for page in pages:
            if page not in have:
                self.reads[page].append(old)
        return True

    def check_pair(self, old: _Access, new: _Access, t, lanes=None) -> bool:
        """Check thread t's part of `new` against the part of `old` made by the threads in `lanes` (default: all of
        it); True when a violation was reported."""
        if not self._ordered(old, t, new, lanes):
            u = self._unordered_lanes(old, t, new, lanes)[0] if old.parts else old.t
            first, second = self._lane_event(old, u) if old.parts else old.ev, self._lane_event(new, t)
            start = self._lane_start(new, t)
            if not old.generic and not old.write:
                self.violate(Violation(
                    "async-read-in-flight",
                    f"the {old.what} of [{old.start:#x}, +{old.size}) had not completed before this "
                    + ("write: no wait retired it" if old.done is None or old.done[0] == "any" and not old.done[1]
                       else "write: the wait that retired it is not ordered before it (it comes after the arrive "
                            "or barrier that let this write happen)"), second, first))
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
                elif old.peer or new.peer:
                    hint = (": one of them reaches another CTA's shared memory (.shared::cluster), and no "
                            "barrier.cluster arrive.release / wait.acquire, or mbarrier release/acquire at cluster "
                            "scope, orders the two")
                elif not old.write and old.plain and new.write:
                    hint = ": the read is not ordered before this write (a release arrive or barrier before the read?)"
                self.violate(Violation("unordered-access", f"{what} of [{start:#x}, +{new.size}){hint}",
                                       second, first))
            return True
        if not old.generic or new.generic:
            return False
        times = old.done[1] if old.done is not None and old.done[0] == "lanes" else {old.t: old.time}
        late = [u for u, r in times.items() if (lanes is None or u in lanes) and self.fv[t][u] < r]
        if late:
            self.violate(Violation(
                "missing-proxy-fence",
                f"the generic-proxy {'write' if old.write else 'read'} of [{self._lane_start(old, min(late)):#x}, "
                f"+{old.size}) is ordered "
                f"before this async-proxy {'write' if new.write else 'read'} only by release/acquire: no "
                "fence.proxy.async on that path (one after the release does not count)", new.ev,
                self._lane_event(old, min(late)) if old.parts else old.ev))
            return True
        return False


    def commit_implicit(self, t):
        for ev, rank, ranges, time in self.implicit.pop(t, []):
            self.touched.add(t)
            for start, size in ranges:
                a = _Access(ev, t, time, start, size, False, True, ("at", t, time),
                            "ordinary reads after the wait (assumed: no fb::hazard marker)", True)
                for key in self._pages(rank, start, size):
                    self.reads[key].append(a)


    def box_rect(self, t, ev):
        """(the global array the map views, [row0, row1) x [col0, col1) in elements) of a TMA op, or None."""
        geo, xy = self.geometry.get(ev.b), self.coords.pop(t, None)
        if geo is None or xy is None:
            return None
        ptr, stride, esize, rows, cols = geo
        return (ptr, stride, esize), (xy[1], xy[1] + rows, xy[0], xy[0] + cols)

    def check_global_read(self, t, ev):
        """A TMA load of global memory that a TMA store or reduce wrote: the writes must be complete (its issuer's
        cp.async.bulk.wait_group, without .read) and that completion ordered before this load (PTX ISA:
        cp.async.bulk.wait_group: .read waits only for the reads of the source; cp.reduce.async.bulk)."""
        box = self.box_rect(t, ev)
        if box is None:
            return
        (arr, (r0, r1, c0, c1)) = box
        ptr, stride, esize = arr
        for w in self.global_writes:
            if w[2] == ("linear",):     # a TMA reduce: global bytes [lo, hi)
                lo, hi = w[3]
                if not any(ptr + r * stride + c0 * esize < hi and lo < ptr + r * stride + c1 * esize
                           for r in range(r0, r1)):
                    continue
            else:
                wr0, wr1, wc0, wc1 = w[3]
                if w[2] != arr or r1 <= wr0 or wr1 <= r0 or c1 <= wc0 or wc1 <= c0:
                    continue
            if w[4] is None or self.vc[t][w[1]] < w[4]:
                self.violate(Violation("bulk-store-in-flight", "this TMA load reads global memory that a TMA "
                                       f"{'reduce' if w[0].kind == BULK_REDUCE else 'store'} wrote, and no "
                                       "cp.async.bulk.wait_group (without .read) of its thread, ordered before this "
                                       "load, completed it (PTX ISA: cp.async.bulk.wait_group)", ev, w[0]))

    def peer_at_exit(self):
        """A CTA's shared memory is released when it exits: every access of it by a peer CTA must be ordered
        before the exit of at least one of its threads (then before the CTA's), e.g. by a barrier.cluster at the end
        (PTX ISA: State Spaces, Shared State Space: .shared::cluster; barrier.cluster: the wait orders the accesses
        before every thread's arrive. CUDA C++ Programming Guide, Distributed Shared Memory: all distributed
        shared memory operations must happen before the exit of the block whose memory they access)."""
        by_rank = {}
        for u in self.vc:
            by_rank.setdefault(u // self.tpb, []).append(u)
        for a, target, counted in self.peer_accesses:
            owners = by_rank.get(target, ())
            if not owners:
                continue
            # a warp's access: each lane's part must be ordered before the exit of some owner thread
            parts = ([(u, ("lanes", {u: r})) for u, r in a.done[1].items()]
                     if a.done is not None and a.done[0] == "lanes" else [(a.t, a.done)])
            # a remote arrive is also done once an owner thread knows its phase completed (its wait, or its own
            # arrival completing it): the arrive was counted before that
            late = [u for u, done in parts if not any(
                done is not None and self._known(done, self.vc[o]) or counted and self._known(
                    counted, np.maximum(self.vc[o], self.cc[o])) for o in owners)]
            if late:
                self.violate(Violation("peer-access-at-exit", f"the {a.what} of CTA rank {target}'s "
                                       f"[{self._lane_start(a, late[0]):#x}, +{a.size}) is not ordered before that "
                                       "CTA exits: no barrier.cluster arrive.release / wait.acquire after it in both "
                                       "CTAs (CUDA C++ Programming Guide: Distributed Shared Memory; PTX ISA: "
                                       "barrier.cluster)", self._lane_event(a, late[0]) if a.parts else a.ev, None))

    def remote_arrive(self, t, ev, b):
        """mbarrier.arrive on a peer CTA's barrier (.shared::cluster): an access of that CTA's shared memory, which
        must happen before it exits (CUDA C++ Programming Guide: Distributed Shared Memory; PTX ISA:
        mbarrier.arrive). Done for the owner once it knows the arrive (a release) or the phase it counted in."""
        now = int(self.vc[t][t])
        a = _Access(ev, t, now, ev.a, 8, True, True, ("at", t, now), "remote mbarrier.arrive (.shared::cluster)")
        self.peer_accesses.append((a, b.rank, ("phase", b.index, b.phase)))

    def map_bytes(self, ev, t=None):
        """Box bytes of the tensor map a TMA op uses: from the hash of its bytes its thread recorded just before it,
        else from the map's id (its address) through the launch's arguments."""
        h = self.map_seen.pop(t, None) if t is not None else None
        if h is not None and h in self.boxes:
            return self.boxes[h]
        size = self.maps.get(ev.b)
        if size is None:
            self.unknown_maps.add(ev.b)
            return 0
        return size

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


    def _retire(self, groups, pending, include_open, t):
        now = int(self.vc[t][t])
        self.cc[t][t] = now
        closed, open_ = groups[:-1], groups[-1]
        n = len(closed) if pending is None else max(0, len(closed) - pending)
        for grp in closed[:n] + ([open_] if include_open else []):
            for a in grp:       # a completion known another way (a barrier's phase) stays known that way too
                a.done = ("at", t, now) if a.done is None else ("either", (a.done, ("at", t, now)))
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

