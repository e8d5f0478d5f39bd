"""The replay of one cluster's trace: per-thread vector clocks of happens-before and of what a proxy fence orders,
advanced event by event in the trace's slot order (Chapter 04; PTX ISA, Memory Consistency Model). The accesses
are checked in accesses.py, the barriers followed in barriers.py; this module dispatches each event."""
from __future__ import annotations

import bisect
from collections import defaultdict

import numpy as np

from .accesses import _Accesses
from .barriers import _Barriers
from .report import Violation
from .trace import (ALL, BAR_SYNC, BULK_COMMIT, BULK_LOAD, BULK_REDUCE, BULK_WAIT, BULK_WAIT_READ, CLUSTER_ARRIVE,
                    CLUSTER_SYNC, CLUSTER_WAIT, CP_ASYNC, CP_COMMIT, CP_MBAR_ARRIVE, CP_WAIT, FENCE_PROXY_ASYNC,
                    FENCE_TENSORMAP_ACQUIRE, FENCE_TENSORMAP_RELEASE, GENERIC_READ, GENERIC_WRITE, GRIDDEP_LAUNCH,
                    GRIDDEP_WAIT, MBAR_ARRIVE, MBAR_EXPECT_TX, MBAR_INIT, MBAR_WAIT, SMEM_READ, SMEM_WINDOW,
                    SMEM_WRITE, SYNCWARP, TC_COMMIT, TC_MMA, TENSORMAP_PUBLISH, TENSORMAP_REPLACE, TMA_COORDS,
                    TMA_LOAD, TMA_MAP, TMA_STORE, WGMMA_COMMIT, WGMMA_FENCE, WGMMA_READ, WGMMA_WAIT, Event)


def _pad(v, n):
    return np.concatenate([v, np.zeros(n - len(v), np.int64)]) if len(v) < n else v


class _Cluster(_Accesses, _Barriers):
    """The replay of one cluster (or one block when there are no clusters)."""

    def __init__(self, threads_per_block, blocks, maps, report_violation, geometry=None, instrumented=False,
                 boxes=None):
        self.tpb, self.blocks = threads_per_block, list(blocks)      # global block ids, by rank
        self.geometry = geometry or {}   # map id -> (array pointer, row stride B, element B, box rows, box cols)
        self.coords = {}                 # thread -> the coordinates of its next TMA op
        self.global_writes = []          # TMA stores' writes of global memory: (event, thread, geometry, rect, done)
        self.T = self.tpb * len(self.blocks)
        self.maps = maps
        self.boxes = boxes or {}    # hash of a map's bytes -> box bytes
        self.map_seen = {}          # thread -> the hash of the map its next TMA op uses (tma.map, just before it)
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
        self.reads = defaultdict(list)               # (rank, 256 B page) -> read accesses
        self.writes = defaultdict(list)              # (rank, 256 B page) -> write accesses
        self.last_seen = {}         # (thread, barrier) -> phase last observed
        self.implicit = {}          # thread -> [(wait event, rank, ranges, time)]: reads assumed after waits
        self.instrumented = instrumented    # every shared-memory access is in the trace: nothing is assumed
        self.epoch = defaultdict(int)       # thread -> releases so far (release_into)
        self.merged = {}            # (thread, rank, page) -> its latest ordinary read there, while no release passed
        self.untraced = set()       # barriers used but not initialised through fb::mbar::init
        self.early_use = {}         # (rank, barrier) -> its first use, while no fb::mbar::init of it came before
        self.now_t = 0              # the thread of the event being replayed
        self.unknown_maps = set()   # tensor-map ids that match no tensor-map argument of the launch
        self.touched = set()        # threads that made ordinary accesses of memory that copies write (stages)
        self.async_pages = set()    # (rank, 256 B page) that bulk/TMA copies write
        self.wg_fenced = set()      # warpgroups (rank, index) that executed a wgmma.fence
        self.peer_accesses = []     # (access, target rank, phase it counts in): ld/st/atom/red.shared::cluster
                                    # and mbarrier.arrive of another CTA's memory
        self.tmap_writes = {}       # map address (low 32 bits) -> (event, thread, time) of its last write in memory
        self.tmap_released = defaultdict(list)   # thread -> its times at fence.proxy.tensormap::generic.release
        self.tmap_acquired = {}     # map address -> [(thread, time, clock)] of its acquires since its last write
        self.griddep = set()        # griddepcontrol instructions seen: their order is between launches
        self.tmap_hash = {}         # map address -> the hash of its bytes as last written or seen (tma.map)
        self.tmap_untraced = set()  # map addresses whose bytes changed with no traced write: ordinary stores
        # barrier.cluster: the k-th arrival of each thread belongs to instance k, its k-th wait acquires instance k
        self.cl_arrives, self.cl_waits = defaultdict(int), defaultdict(int)
        self.cl_inst = {}           # k -> [clock, fenced, retired]: what the release arrivals of instance k carry
        self.cl_pending = set()     # threads past a combined arrive + wait whose wait is taken at their next event

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
        for inst in self.cl_inst.values():
            inst[:] = [_pad(x, new) for x in inst]
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


    # ---- one event
    def step(self, ev: Event, rank: int):
        # In a cluster launch a CTA's own .shared::cta addresses carry its rank above bit 24 (the window of
        # .shared::cluster it sits in: 0x1000400 in rank 1 for offset 0x400). Offsets are what CTAs share.
        # An ld/st.shared::cluster names its CTA in those bits.
        target = ev.a // SMEM_WINDOW if ev.kind in (SMEM_READ, SMEM_WRITE) and ev.c & 1 else rank
        if ev.kind in _GLOBAL_A:
            pass        # a is a tensor map's global address, not a shared one
        elif ev.a >= SMEM_WINDOW or ev.kind in (BULK_LOAD, TMA_LOAD) and ev.c >= SMEM_WINDOW:
            ev = ev._replace(a=ev.a % SMEM_WINDOW, c=ev.c % SMEM_WINDOW if ev.kind in (BULK_LOAD, TMA_LOAD) else ev.c)
        t = rank * self.tpb + ev.thread
        self.now_t = t
        self.past_barriers(t)
        self.clock(t)[t] += 1
        if t in self.implicit:
            self._assumed_reads(t, ev.kind)
        handler = _HANDLERS.get(ev.kind)
        if handler is not None:
            handler(self, t, rank, ev, target)

    def past_barriers(self, t):
        """Thread t makes its next event (or its part of a warp's event): it is past the barriers it arrived at."""
        if t in self.pending_sync:          # the thread is past its barrier: the barrier completed
            self.sync_complete(self.pending_sync[t])
        if t in self.cl_pending:            # past barrier.cluster: every arrival of the cluster is in the trace
            self.cl_pending.discard(t)
            self._cl_wait(t)

    def _assumed_reads(self, t, k):
        """Reads assumed after a wait (traces without instrumentation) end at the thread's next access."""
        if k in (WGMMA_READ, WGMMA_FENCE, WGMMA_COMMIT, WGMMA_WAIT, GENERIC_READ, TMA_STORE, TC_MMA, TC_COMMIT):
            self.implicit.pop(t)        # the thread reads the stage another way, or marks its reads itself
        elif k in (MBAR_WAIT, BAR_SYNC, SYNCWARP):
            pass                        # not an access: a wait for the next stage or a turn (ping-pong)
        elif k not in (FENCE_PROXY_ASYNC, GENERIC_WRITE, CP_WAIT, BULK_WAIT, BULK_WAIT_READ):
            self.commit_implicit(t)

    # cp.async: a generic-proxy write completed by the issuing thread's wait_group (or a cp.async.mbarrier.arrive)
    def _cp_async(self, t, rank, ev, _):
        self.groups[("cp", t)][-1].append(self.access(t, ev, rank, ev.a, ev.b, True, True))

    def _cp_commit(self, t, rank, ev, _):
        self.groups[("cp", t)].append([])

    def _cp_wait(self, t, rank, ev, _):
        self._retire(self.groups[("cp", t)], None if ev.b == ALL else ev.b, ev.b == ALL, t)

    def _cp_mbar_arrive(self, t, rank, ev, _):
        self.cp_async_arrive(t, rank, ev)

    # bulk and TMA copies: async-proxy writes completing on a barrier's phase, stores reading shared memory
    def _load(self, t, rank, ev, _):
        if ev.kind == TMA_LOAD and self.tmap_writes:
            self.check_tensormap(t, ev)
        if ev.kind == TMA_LOAD and self.global_writes:
            self.check_global_read(t, ev)
        size = ev.b if ev.kind == BULK_LOAD else self.map_bytes(ev, t)
        targets = [rank] if ev.kind == BULK_LOAD or not ev.d else [r for r in range(16) if ev.d >> r & 1]
        for r in targets:
            if r < len(self.blocks):
                b = self.barrier(r, ev.c, ev)
                self.land(b, size, self.access(t, ev, r, ev.a, size, True, False), ev, t)

    def _coords(self, t, rank, ev, _):
        self.coords[t] = (ev.a - (1 << 32) if ev.a >= 1 << 31 else ev.a, ev.b - (1 << 32) if ev.b >= 1 << 31 else ev.b)

    def _store(self, t, rank, ev, _):
        if self.tmap_writes:
            self.check_tensormap(t, ev)
        box = self.box_rect(t, ev)
        if box is not None:
            w = [ev, t, box[0], box[1], None]
            self.global_writes.append(w)
            self.groups[("bulk-global", t)][-1].append(w)
        size = self.map_bytes(ev, t)
        self.groups[("bulk", t)][-1].append(self.access(t, ev, rank, ev.a, size, False, False,
                                                        what="TMA store's read"))

    def _reduce(self, t, rank, ev, _):
        # cp.reduce.async.bulk: like a bulk store, its source is read by the async proxy until the issuer's
        # cp.async.bulk.wait_group.read, and its global writes complete at cp.async.bulk.wait_group (PTX ISA:
        # cp.reduce.async.bulk, cp.async.bulk.wait_group)
        lo = ev.c | ev.d << 32
        w = [ev, t, ("linear",), (lo, lo + ev.b), None]
        self.global_writes.append(w)
        self.groups[("bulk-global", t)][-1].append(w)
        self.groups[("bulk", t)][-1].append(self.access(t, ev, rank, ev.a, ev.b, False, False,
                                                        what="TMA reduce's read"))

    # the tensormap proxy: a map written in memory and used by a TMA copy (PTX ISA: tensormap.replace,
    # tensormap.cp_fenceproxy, membar/fence: fence.proxy.tensormap::generic)
    def _tmap_write(self, t, ev, addr, digest):
        self.tmap_writes[addr] = (ev, t, int(self.vc[t][t]))
        self.tmap_hash[addr] = digest
        self.tmap_acquired.pop(addr, None)      # earlier acquires cannot know this write: they never count again

    def _tmap_replace(self, t, rank, ev, _):
        if ev.d & 1:        # a map in global memory rewritten in place; one in shared memory is published later
            self._tmap_write(t, ev, ev.a, ev.c)

    def _tmap_publish(self, t, rank, ev, _):
        self._tmap_write(t, ev, ev.a, ev.b)
        self.tmap_released[t].append(int(self.vc[t][t]))   # the copy ends with a release fence of the tensormap proxy

    def _tmap_release(self, t, rank, ev, _):
        self.tmap_released[t].append(int(self.vc[t][t]))

    def _tmap_acquire(self, t, rank, ev, _):
        self.tmap_acquired.setdefault(ev.a, []).append((t, int(self.vc[t][t]), self.vc[t].copy()))

    def check_tensormap(self, t, ev):
        """A TMA copy through a map written in memory during the launch: the write ordered before it, released by
        its writer to the tensormap proxy after the write (PTX ISA: membar/fence, a .release proxy fence, or
        tensormap.cp_fenceproxy), and acquired with fence.proxy.tensormap::generic.acquire of that map by a thread
        of this thread's block after it learned of the write, the acquire ordered before this copy (CUDA C++
        Programming Guide, Encoding a Tensor Map on Device: Usage of a Modified Tensor Map: once one thread acquired
        it, others of its block may use it after __syncthreads; a thread of another block must acquire it itself)."""
        w = self.tmap_writes.get(ev.b)
        if w is None:
            return      # a kernel parameter, or a map written before the launch
        wev, u, tau = w
        if self.vc[t][u] < tau:
            self.violate(Violation("unordered-access", "this TMA copy uses a tensor map whose write in memory is not "
                                   "ordered before it: no release/acquire from the writing thread (PTX ISA: Memory "
                                   "Consistency Model, data races)", ev, wev))
            return
        block = t // self.tpb
        knew = [acq for v, when, acq in self.tmap_acquired.get(ev.b, ())
                if v // self.tpb == block and self.vc[t][v] >= when and acq[u] >= tau]
        if not knew:
            self.violate(Violation("missing-tensormap-fence", "this TMA copy uses a tensor map written in memory "
                                   "with no fence.proxy.tensormap::generic.acquire of that map, by this thread or one "
                                   "of its block ordered before it, after the write was ordered before the acquire "
                                   "(PTX ISA: membar/fence)", ev, wev))
            return
        released = self.tmap_released[u]
        i = bisect.bisect_left(released, tau)       # the writer's first release fence at or after the write
        if i == len(released) or not any(released[i] <= acq[u] for acq in knew):
            self.violate(Violation("missing-tensormap-fence", "the thread that wrote this tensor map executed no "
                                   "fence.proxy.tensormap::generic.release between the write and the release the "
                                   "acquire learned of it through (PTX ISA: membar/fence; tensormap.cp_fenceproxy)",
                                   ev, wev))

    def _tmap_seen(self, t, rank, ev, _):
        # the bytes a TMA op's map has (tma.map, before the op): changed since the last traced write or use, they
        # were written by something the trace does not record (st to global memory, another cluster)
        if self.tmap_hash.get(ev.a, ev.b) != ev.b:
            self.tmap_untraced.add(ev.a)
        self.tmap_hash[ev.a] = ev.b
        self.map_seen[t] = ev.b

    def _griddep(self, t, rank, ev, _):
        self.griddep.add(ev.name)

    def _bulk_commit(self, t, rank, ev, _):
        self.groups[("bulk", t)].append([])
        self.groups[("bulk-global", t)].append([])

    def _bulk_wait(self, t, rank, ev, _):
        self._retire(self.groups[("bulk", t)], ev.b, False, t)
        if ev.kind == BULK_WAIT:      # the writes too (.read waits only for the reads of the source)
            groups = self.groups[("bulk-global", t)]
            n = max(0, len(groups) - 1 - ev.b)
            for grp in groups[:n]:
                for w in grp:
                    w[4] = int(self.vc[t][t])
            groups[:] = groups[n:]

    # mbarriers
    def _mbar_init(self, t, rank, ev, _):
        used = self.early_use.get((rank, ev.a))
        if used is not None and self.clock(t)[used[1]] < used[2]:
            # a thread used the barrier before its init, in the trace's order (each event takes its slot when it
            # happens), and the init's thread had not seen that use: nothing ordered the init before it, which a
            # __syncthreads() after the init (a fence.mbarrier_init and a cluster barrier for other CTAs) would
            # have. (A use the init's thread had seen is of an earlier barrier there, made outside the fb::
            # wrappers: that trace stays unchecked.)
            del self.early_use[(rank, ev.a)]
            self.violate(Violation("mbarrier-use-before-init", f"{used[0].name} of the barrier at {ev.a:#x} came "
                                   "before its init, with nothing ordering the init first", used[0], ev,
                                   f"at {ev.a:#x}"))
            if not any(a == ev.a for _, a in self.early_use):
                self.untraced.discard(ev.a)
        self.init_barrier(rank, ev.a, max(1, ev.b), ev)

    def _mbar_arrive(self, t, rank, ev, _):
        b = self.barrier(rank if ev.c == 0 else ev.c - 1, ev.a, ev)
        if b.rank != rank:
            self.remote_arrive(t, ev, b)
        self.arrive(t, b, ev.b, ev, release=not ev.d, rank=rank)

    def _mbar_expect_tx(self, t, rank, ev, _):
        self.expect_tx(self.barrier(rank, ev.a, ev), ev.b, ev)

    def _mbar_wait(self, t, rank, ev, _):
        self.wait(t, rank, ev)

    def _tc_commit(self, t, rank, ev, _):
        # One arrival once this thread's earlier tcgen05.mma have completed (PTX ISA: tcgen05.commit): their
        # operand reads are complete in the phase it arrives on, and the arrival is the release.
        b = self.barrier(rank, ev.a, ev)
        for grp in self.groups.pop(("tc", t), [[]]):
            for a in grp:
                a.done = ("phase", b.index, b.phase)
        self.arrive(t, b, 0, ev, rank=rank)

    def _tc_mma(self, t, rank, ev, _):   # a = smem start of one operand, b = bytes: read until a commit
        self.groups[("tc", t)][-1].append(self.access(t, ev, rank, ev.a, ev.b, False, False,
                                                      what="tcgen05.mma operand read"))

    # wgmma: warpgroup-wide; its first thread records the operand reads and commits, every thread its waits
    def _wgmma_fence(self, t, rank, ev, _):
        self.wg_fenced.add((rank, ev.thread // 128))

    def _wgmma_read(self, t, rank, ev, _):
        wg = (rank, ev.thread // 128)
        if ev.thread % 128:
            return
        if wg not in self.wg_fenced:
            self.wg_fenced.add(wg)      # said once per warpgroup
            self.violate(Violation("missing-wgmma-fence", "this warpgroup's first wgmma.mma_async has no "
                                   "wgmma.fence before it (fb::wgmma::fence())", ev, None))
        a = self.access(t, ev, rank, ev.a, ev.b, False, False, ("any", {}), "wgmma operand read")
        self.groups[("wgmma", wg)][-1].append(a)

    def _wgmma_commit(self, t, rank, ev, _):
        if ev.thread % 128 == 0:
            self.groups[("wgmma", (rank, ev.thread // 128))].append([])

    def _wgmma_wait(self, t, rank, ev, _):
        self._retire_warpgroup(self.groups[("wgmma", (rank, ev.thread // 128))], ev.b, t)

    # fences and execution barriers
    def _fence(self, t, rank, ev, _):
        # It orders the memory accesses of the thread that executes it (PTX ISA, membar/fence: "memory
        # accesses requested by this thread"), not those it acquired from others.
        self.fv[t][t] = self.vc[t][t]

    def _bar_sync(self, t, rank, ev, _):
        self.sync_arrive(t, ("bar", rank, ev.a), ev.b)

    def _syncwarp(self, t, rank, ev, _):
        self.sync_arrive(t, ("warp", rank, ev.thread // 32, ev.b), bin(ev.b).count("1"))

    # barrier.cluster (PTX ISA): an arrive (.release, or .relaxed which orders nothing) and a wait (.acquire) that
    # returns once every non-exited thread of the cluster arrived; an arrive is recorded before it, a wait after it.
    # Each thread arrives once per completion, so its k-th arrive and its k-th wait belong to the same one; the wait
    # orders what every thread did before its arrive, not what it did between its arrive and wait (ibid.)
    def _cluster_sync(self, t, rank, ev, _):
        self._cl_arrive(t, True)
        self.cl_pending.add(t)

    def _cluster_arrive(self, t, rank, ev, _):
        self._cl_arrive(t, not ev.b & 1)

    def _cluster_wait(self, t, rank, ev, _):
        self._cl_wait(t)

    def _cl_arrive(self, t, release):
        k = self.cl_arrives[t]
        self.cl_arrives[t] += 1
        inst = self.cl_inst.get(k)
        if inst is None:
            inst = self.cl_inst[k] = [np.zeros(self.width, np.int64) for _ in range(3)]
        if release:
            self.release_into(t, *inst)

    def _cl_wait(self, t):
        k = self.cl_waits[t]
        self.cl_waits[t] += 1
        if k in self.cl_inst:
            self.acquire_from(t, *self.cl_inst[k])

    # ordinary loads and stores: marked (fb::hazard::generic_read/write) or from the instrumented PTX
    def _marked(self, t, rank, ev, _):
        write = ev.kind == GENERIC_WRITE
        self.access(t, ev, rank, ev.a, ev.b, write, True, ("at", t, int(self.vc[t][t])),
                    "ordinary " + ("write" if write else "read"), plain=True)

    def _smem(self, t, rank, ev, target):
        write = ev.kind == SMEM_WRITE
        peer = target != rank
        a = self.access(t, ev, target, ev.a, ev.b, write, True, ("at", t, int(self.vc[t][t])),
                        ("ld/st " if ev.c & 1 == 0 else "ld/st.shared::cluster ") + ("write" if write else "read"),
                        plain=True, lanes=self.lanes(t, ev), peer=peer)
        if peer:
            self.peer_accesses.append((a, target, None))

    def finish(self, truncated=False):
        for t in list(self.implicit):
            self.commit_implicit(t)
        if truncated:       # the trace stops where a wait gave up: what is pending then is not pending at exit
            return
        for key in list(dict.fromkeys(self.pending_sync.values())):
            self.sync_complete(key)     # the kernel's last barrier: every thread is past it at exit
        for t in sorted(self.cl_pending):
            self._cl_wait(t)
        self.peer_at_exit()
        # A store still reading shared memory when the block ends is a race with the block's shared memory being
        # released.
        for (kind, t), groups in self.groups.items():
            if kind != "bulk":
                continue
            for a in (a for grp in groups for a in grp if a.done is None and not a.write):
                self.violate(Violation("async-read-at-exit", f"the {a.what} of [{a.start:#x}, +{a.size}) was never "
                                       "retired by this thread's cp.async.bulk.wait_group.read (or wait_group) before "
                                       "the block ended", a.ev, None))
        self.unfinished_phases()


_GLOBAL_A = frozenset((TENSORMAP_REPLACE, TENSORMAP_PUBLISH, FENCE_TENSORMAP_ACQUIRE, TMA_MAP))

_HANDLERS = {
    CP_ASYNC: _Cluster._cp_async, CP_COMMIT: _Cluster._cp_commit, CP_WAIT: _Cluster._cp_wait,
    CP_MBAR_ARRIVE: _Cluster._cp_mbar_arrive, BULK_LOAD: _Cluster._load, TMA_LOAD: _Cluster._load,
    TMA_COORDS: _Cluster._coords, TMA_STORE: _Cluster._store, BULK_COMMIT: _Cluster._bulk_commit,
    BULK_WAIT_READ: _Cluster._bulk_wait, BULK_WAIT: _Cluster._bulk_wait, MBAR_INIT: _Cluster._mbar_init,
    MBAR_ARRIVE: _Cluster._mbar_arrive, MBAR_EXPECT_TX: _Cluster._mbar_expect_tx, MBAR_WAIT: _Cluster._mbar_wait,
    TC_COMMIT: _Cluster._tc_commit, TC_MMA: _Cluster._tc_mma, WGMMA_FENCE: _Cluster._wgmma_fence,
    WGMMA_READ: _Cluster._wgmma_read, WGMMA_COMMIT: _Cluster._wgmma_commit, WGMMA_WAIT: _Cluster._wgmma_wait,
    FENCE_PROXY_ASYNC: _Cluster._fence, BAR_SYNC: _Cluster._bar_sync, SYNCWARP: _Cluster._syncwarp,
    CLUSTER_SYNC: _Cluster._cluster_sync, GENERIC_READ: _Cluster._marked, GENERIC_WRITE: _Cluster._marked,
    SMEM_READ: _Cluster._smem, SMEM_WRITE: _Cluster._smem, BULK_REDUCE: _Cluster._reduce,
    TENSORMAP_REPLACE: _Cluster._tmap_replace, TENSORMAP_PUBLISH: _Cluster._tmap_publish,
    FENCE_TENSORMAP_RELEASE: _Cluster._tmap_release, FENCE_TENSORMAP_ACQUIRE: _Cluster._tmap_acquire,
    TMA_MAP: _Cluster._tmap_seen, GRIDDEP_WAIT: _Cluster._griddep, GRIDDEP_LAUNCH: _Cluster._griddep,
    CLUSTER_ARRIVE: _Cluster._cluster_arrive, CLUSTER_WAIT: _Cluster._cluster_wait,
}
