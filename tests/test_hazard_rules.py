"""The hazard checker's newest rules, each on synthetic traces: a correct program (the subtle ones included) gives no
report, a planted bug gives exactly its rule. The rules are the PTX ISA's; each test names the section it follows.

A trace is what a hazard build records (include/fb/hazard.cuh): events in slot order, each (kind, line, block,
thread, rank, a, b, c, d). Blocks here are the CTAs of one cluster, block id = rank.
"""
from __future__ import annotations

import pytest

from feedbeast import hazards as hz
from feedbeast.hazards.registers import register_hazards

BAR, TILE, MAP = 0x100, 0x400, 0x9000_0100      # an mbarrier, a shared tile, a tensor map in global memory
DST = 0x7000_0000                               # global memory: 8 rows of 256 B (a reduce's destination)
GEOMETRY = {8: (DST, 256, 4, 2, 64)}            # map 8: 2 x 64 floats of that array (512 B)


class Cluster:
    """A trace of `ctas` CTAs of one cluster (one block when 1), `threads` threads each."""

    def __init__(self, ctas=1, threads=64):
        self.ctas, self.threads, self.events = ctas, threads, []

    def e(self, kind, t, a=0, b=0, c=0, d=0, rank=0):
        self.events.append((kind, len(self.events) + 1, rank, t, rank, a, b, c, d))
        return self

    # ordinary accesses of the instrumented PTX (flags c & 1: a .shared::cluster address, the CTA in bits 24+)
    def st(self, t, at, n=16, rank=0, peer=None):
        return self.e(hz.SMEM_WRITE, t, at if peer is None else peer << 24 | at, n, int(peer is not None), 0, rank)

    def ld(self, t, at, n=16, rank=0, peer=None):
        return self.e(hz.SMEM_READ, t, at if peer is None else peer << 24 | at, n, int(peer is not None), 0, rank)

    def sync(self, *threads, rank=0):           # __syncthreads by these threads
        for t in threads:
            self.e(hz.BAR_SYNC, t, rank=rank)
        return self

    def cluster_sync(self, *threads):           # barrier.cluster.arrive.release + wait.acquire, every CTA
        for r in range(self.ctas):
            for t in threads:
                self.e(hz.CLUSTER_SYNC, t, rank=r)
        return self

    def arrive(self, t, rank=0, relaxed=False):     # fb::cluster_arrive (recorded before it)
        return self.e(hz.CLUSTER_ARRIVE, t, 0, int(relaxed), rank=rank)

    def wait(self, t, rank=0):                      # fb::cluster_wait (recorded after it)
        return self.e(hz.CLUSTER_WAIT, t, rank=rank)

    def check(self, maps=None, geometry=None, instrumented=True):
        n = self.ctas
        return hz.check(hz.decode(hz.encode(self.events)), threads_per_block=self.threads, grid=(n, 1, 1),
                        cluster=(n, 1, 1), maps=maps or {}, geometry=geometry, instrumented=instrumented)


def rules(report):
    return sorted({v.rule for v in report.violations})


def clean(report):
    assert report.ok and not report.unchecked, str(report)
    return report


# ---- TMA reduce: cp.reduce.async.bulk ... .bulk_group (PTX ISA: cp.reduce.async.bulk; cp.async.bulk.wait_group) --

def reduce_tile(fence_by=(0, 1), rewrite=None, waits=("read",), load_back=None, second_store=False):
    """Threads 0 and 1 each write half a tile (st.shared), fence.proxy.async (by `fence_by`), __syncthreads; thread 0
    adds the tile into global memory with cp.reduce.async.bulk, commits (and, second_store, a TMA store of the next
    tile in a second group), waits (`waits`), __syncthreads; then thread `rewrite` (thread, where: "before" or
    "after" the waits) rewrites the tile, and thread `load_back` loads the destination back by TMA."""
    tr = Cluster()
    for t in (0, 1):
        tr.st(t, TILE + 256 * t, 256)
        if t in fence_by:
            tr.e(hz.FENCE_PROXY_ASYNC, t)
    tr.sync(0, 1)
    tr.e(hz.BULK_REDUCE, 0, TILE, 512, DST, 0).e(hz.BULK_COMMIT, 0)
    if second_store:
        tr.e(hz.TMA_STORE, 0, TILE + 1024, 7).e(hz.BULK_COMMIT, 0)
    if rewrite and rewrite[1] == "before":
        tr.sync(0, 1).st(rewrite[0], TILE, 64)
    for w in waits:
        tr.e(hz.BULK_WAIT_READ if w == "read" else hz.BULK_WAIT, 0, 0, 1 if second_store else 0)
    tr.sync(0, 1)
    if rewrite and rewrite[1] == "after":
        tr.st(rewrite[0], TILE if rewrite[0] < 2 else TILE + 1024, 64)
    if second_store:
        tr.e(hz.BULK_WAIT_READ, 0, 0, 0)       # the store's group, before the block exits
    if load_back is not None:
        tr.e(hz.MBAR_INIT, load_back, BAR, 1).e(hz.MBAR_ARRIVE, load_back, BAR, 512)
        tr.e(hz.TMA_COORDS, load_back, 0, 0).e(hz.TMA_LOAD, load_back, TILE + 2048, 8, BAR, 0)
        tr.e(hz.MBAR_WAIT, load_back, BAR, 0 | 1 << 8)
    return tr.check(maps={7: 64, 8: 512}, geometry=GEOMETRY)


def test_a_tma_reduce_whose_source_is_rewritten_by_another_thread_after_a_barrier_past_the_read_wait_is_clean():
    clean(reduce_tile(rewrite=(1, "after")))


def test_a_tma_reduce_source_rewritten_before_the_issuers_read_wait_is_async_read_in_flight():
    r = reduce_tile(rewrite=(1, "before"))
    assert rules(r) == ["async-read-in-flight"] and "TMA reduce's read" in str(r), str(r)


def test_wait_group_read_1_frees_the_older_groups_source_only():
    """cp.async.bulk.wait_group.read 1: all but the newest bulk async-group have read their sources."""
    clean(reduce_tile(second_store=True, rewrite=(1, "after")))     # the reduce's tile: its group is retired
    r = reduce_tile(second_store=True, rewrite=(2, "after"))         # the store's tile: still being read
    assert rules(r) == ["async-read-in-flight"] and "TMA store's read" in str(r), str(r)


def test_a_tma_load_by_another_thread_after_the_full_wait_group_and_a_barrier_is_clean():
    clean(reduce_tile(waits=("all",), load_back=1))


def test_a_tma_load_of_the_reduced_memory_after_only_the_read_wait_is_bulk_store_in_flight():
    """The reduce's writes of global memory complete at cp.async.bulk.wait_group without .read."""
    r = reduce_tile(waits=("read",), load_back=1)
    assert rules(r) == ["bulk-store-in-flight"] and "TMA reduce wrote" in str(r), str(r)
    assert "PTX ISA: cp.async.bulk.wait_group" in r.violations[0].message


def test_a_block_that_exits_while_its_tma_reduce_reads_is_async_read_at_exit():
    r = reduce_tile(waits=())
    assert rules(r) == ["async-read-at-exit"] and r.violations[0].second.name == "cp.reduce.async.bulk", str(r)


def test_the_reduces_source_needs_the_proxy_fence_of_the_thread_that_wrote_it():
    """fence.proxy.async orders the executing thread's own generic accesses (PTX ISA: membar/fence): thread 0's
    fence does not cover thread 1's stores, even with __syncthreads between them and the reduce."""
    r = reduce_tile(fence_by=(0,))
    assert rules(r) == ["missing-proxy-fence"], str(r)


# ---- distributed shared memory: peer-access-at-exit and cluster-scope ordering ------------------------------

def peer_read(final="sync", owner_rewrites=False):
    """CTA 1's thread 1 writes its partial; barrier.cluster; CTA 0's thread 0 reads it through .shared::cluster;
    then the exit ordering `final`: "sync" (barrier.cluster), "halves" (the reader arrives .release after its read,
    the owner waits before exiting), "relaxed" (the same with a .relaxed arrive: nothing ordered), None."""
    tr = Cluster(ctas=2, threads=32)
    tr.st(1, TILE, 16, rank=1)
    tr.cluster_sync(0, 1)
    tr.ld(0, TILE, 16, rank=0, peer=1)
    if owner_rewrites:
        tr.st(1, TILE, 16, rank=1)
    if final == "sync":
        tr.cluster_sync(0, 1)
    elif final in ("halves", "relaxed"):
        tr.arrive(0, rank=0, relaxed=final == "relaxed").arrive(1, rank=0)
        for t in (0, 1):
            tr.arrive(t, rank=1).wait(t, rank=1)        # the owner CTA waits: every arrive is in
        tr.wait(0, rank=0).wait(1, rank=0)
    return tr.check()


def test_a_peer_read_ordered_before_the_owners_exit_by_barrier_cluster_is_clean():
    clean(peer_read("sync"))
    clean(peer_read("halves"))          # the owner's wait follows the reader's release arrive: enough


def test_a_peer_read_not_ordered_before_the_owners_exit_is_peer_access_at_exit():
    for final in (None, "relaxed"):     # .relaxed: no ordering of the accesses before it (PTX ISA: barrier.cluster)
        r = peer_read(final)
        assert rules(r) == ["peer-access-at-exit"] and "rank 1" in str(r), (final, str(r))
        assert "Distributed Shared Memory" in r.violations[0].message


def test_an_owner_that_rewrites_what_a_peer_may_still_read_is_unordered_access():
    r = peer_read("sync", owner_rewrites=True)
    assert rules(r) == ["unordered-access"] and "shared::cluster" in str(r) and "write after read" in str(r), str(r)


def test_a_peer_read_ordered_before_the_owners_exit_by_a_cluster_scope_mbarrier_is_clean():
    """No barrier.cluster at the end: the reader releases the owner's barrier (a remote arrive, .release at
    cluster scope) after its read and the owner waits on it at .cluster scope before it exits."""
    tr = Cluster(ctas=2, threads=32)
    tr.e(hz.MBAR_INIT, 0, BAR, 1, rank=1)
    tr.st(1, TILE, 16, rank=1)
    tr.cluster_sync(0, 1)
    tr.ld(0, TILE, 16, rank=0, peer=1)
    tr.e(hz.MBAR_ARRIVE, 0, BAR, 0, 1 + 1, 0, rank=0)         # c = 1 + rank of the barrier's CTA
    tr.e(hz.MBAR_WAIT, 0, BAR, 0 | 2 | 1 << 8, rank=1)         # parity 0, .cluster scope
    clean(tr.check())


def test_a_peer_write_before_barrier_cluster_is_read_by_the_owner_after_it():
    def owner_reads(after_sync):
        tr = Cluster(ctas=2, threads=32)
        tr.st(0, TILE, 16, rank=0, peer=1)          # CTA 0 writes into CTA 1's memory
        if not after_sync:
            tr.ld(0, TILE, 16, rank=1)
        tr.cluster_sync(0)
        if after_sync:
            tr.ld(0, TILE, 16, rank=1)
        return tr.check()
    clean(owner_reads(True))
    r = owner_reads(False)
    assert rules(r) == ["unordered-access"] and "read after write" in str(r), str(r)


# ---- barrier.cluster in halves: arrive (.release / .relaxed), wait (.acquire) (PTX ISA: barrier.cluster) -------

def halves(write_after_arrive=False, relaxed_writer=False, reader_arrives_first=True):
    """Each CTA's thread 1 writes its partial then arrives; each CTA's thread 0 arrives, waits and reads the peer's
    partial through .shared::cluster; a barrier.cluster at the end keeps both CTAs alive."""
    tr = Cluster(ctas=2, threads=32)
    if reader_arrives_first:            # in slot order before the peers' writes: the wait still follows them all
        for r in (0, 1):
            tr.arrive(0, rank=r)
    for r in (0, 1):
        if not write_after_arrive:
            tr.st(1, TILE, 16, rank=r)
        tr.arrive(1, rank=r, relaxed=relaxed_writer)
        if write_after_arrive:          # between the arrive and the wait: not ordered by this barrier
            tr.st(1, TILE, 16, rank=r)
    for r in (0, 1):
        if not reader_arrives_first:
            tr.arrive(0, rank=r)
        tr.wait(0, rank=r).ld(0, TILE, 16, rank=r, peer=1 - r)
    for r in (0, 1):
        tr.wait(1, rank=r)
    return tr.cluster_sync(0, 1).check()


def test_a_wait_after_every_peers_arrive_orders_their_writes_before_the_remote_read():
    clean(halves())
    clean(halves(reader_arrives_first=False))


@pytest.mark.parametrize("plant", ["write between arrive and wait", "writer arrives .relaxed"])
def test_a_write_the_arrive_does_not_release_is_unordered_access(plant):
    r = halves(write_after_arrive=plant.startswith("write"), relaxed_writer=plant.endswith(".relaxed"))
    assert rules(r) == ["unordered-access"] and "shared::cluster" in str(r), str(r)


def two_rounds(read_after_round):
    """Round 0: every thread arrives .relaxed (nothing to release) and waits; then CTA 1's thread 1 writes; round 1:
    arrive .release, wait. CTA 0's thread 0 reads the write after round `read_after_round`'s wait: the k-th wait
    acquires the k-th arrivals."""
    tr = Cluster(ctas=2, threads=32)
    for k in (0, 1):
        if k == 1:
            tr.st(1, TILE, 16, rank=1)
        for r in (0, 1):
            for t in (0, 1):
                tr.arrive(t, rank=r, relaxed=k == 0)
        for r in (0, 1):
            for t in (0, 1):
                tr.wait(t, rank=r)
                if k == read_after_round and (r, t) == (0, 0):
                    tr.ld(0, TILE, 16, rank=0, peer=1)
    return tr.cluster_sync(0, 1).check()


def test_each_wait_acquires_the_arrivals_of_its_own_round():
    clean(two_rounds(1))
    r = two_rounds(0)       # the write is released by round 1's arrive: round 0's wait does not order it
    assert rules(r) == ["unordered-access"], str(r)


def test_combined_and_split_barrier_cluster_count_as_one_barrier():
    tr = Cluster(ctas=2, threads=32)
    tr.st(1, TILE, 16, rank=1).e(hz.CLUSTER_SYNC, 1, rank=1)        # CTA 1: the combined form
    tr.e(hz.CLUSTER_SYNC, 0, rank=1)
    tr.arrive(0, rank=0).arrive(1, rank=0).wait(0, rank=0).wait(1, rank=0)     # CTA 0: in halves
    tr.ld(0, TILE, 16, rank=0, peer=1)
    clean(tr.cluster_sync(0, 1).check())


# ---- the tensormap proxy (PTX ISA: membar/fence: fence.proxy.tensormap::generic; tensormap.replace;
#      tensormap.cp_fenceproxy; CUDA C++ Programming Guide: Usage of a Modified Tensor Map) -------------------

def tensormap(writer=1, releaser=None, acquirer=0, user=0, sync_after_acquire=True, publish=False, store=False,
              rewrite_after_acquire=False, acquirer_rank=0, threads=64):
    """`writer` rewrites the map in global memory (tensormap.replace .global, or tensormap.cp_fenceproxy: a copy
    with a release fence), `releaser` executes fence.proxy.tensormap::generic.release (None: nobody), __syncthreads;
    `acquirer` acquires the map; (sync_after_acquire) __syncthreads; `user` loads (or stores) a box through it.
    acquirer_rank 1: the acquire is by CTA 1 of a 2-CTA cluster, barrier.cluster between (not enough)."""
    ctas = 2 if acquirer_rank else 1
    tr = Cluster(ctas=ctas, threads=threads)
    tr.e(hz.MBAR_INIT, user, BAR, 1)
    if publish:
        tr.e(hz.TENSORMAP_PUBLISH, writer, MAP, 0x1234)
    else:
        tr.e(hz.TENSORMAP_REPLACE, writer, MAP, 0x1111, 0x1234, 1)
    if releaser is not None:
        tr.e(hz.FENCE_TENSORMAP_RELEASE, releaser)
    everyone = sorted({writer, acquirer, user, releaser or 0})
    tr.sync(*everyone)
    if acquirer_rank:
        tr.cluster_sync(*everyone)
    tr.e(hz.FENCE_TENSORMAP_ACQUIRE, acquirer, MAP, rank=acquirer_rank)
    if rewrite_after_acquire:
        tr.e(hz.TENSORMAP_REPLACE, writer, MAP, 0x1234, 0x5678, 1).e(hz.FENCE_TENSORMAP_RELEASE, writer)
    if sync_after_acquire:
        tr.sync(*everyone)
        if acquirer_rank:
            tr.cluster_sync(*everyone)
    if store:
        tr.st(user, TILE, 1024).e(hz.FENCE_PROXY_ASYNC, user).e(hz.TMA_STORE, user, TILE, MAP)
        tr.e(hz.BULK_COMMIT, user).e(hz.BULK_WAIT_READ, user, 0, 0)
    else:
        tr.e(hz.MBAR_ARRIVE, user, BAR, 1024).e(hz.TMA_LOAD, user, TILE, MAP, BAR, 0)
        tr.e(hz.MBAR_WAIT, user, BAR, 0 | 1 << 8)
    return tr.check(maps={MAP: 1024})


def test_a_map_released_by_its_writer_and_acquired_by_its_user_is_clean():
    clean(tensormap(releaser=1))
    clean(tensormap(publish=True))                  # cp_fenceproxy: the copy and the release fence in one
    clean(tensormap(writer=0, releaser=0))          # one thread does it all
    clean(tensormap(releaser=1, store=True))        # a TMA store reads the map too


def test_a_map_acquired_by_one_thread_and_used_by_another_after_syncthreads_is_clean():
    """CUDA C++ Programming Guide, Usage of a Modified Tensor Map: once one thread acquired the map, other threads of
    its block may use it after sufficient synchronisation, e.g. __syncthreads."""
    clean(tensormap(releaser=1, acquirer=0, user=32))
    clean(tensormap(publish=True, acquirer=1, user=32))


@pytest.mark.parametrize("plant", ["no release", "release by another thread than the writer", "no acquire",
                                   "acquire not ordered before the use", "acquire by another block",
                                   "rewritten after the acquire", "store through it, no release"])
def test_a_map_without_the_tensormap_proxy_release_and_acquire_is_missing_tensormap_fence(plant):
    kw = {"no release": dict(),
          "release by another thread than the writer": dict(releaser=2),
          "no acquire": dict(releaser=1, acquirer=2, sync_after_acquire=False),
          "acquire not ordered before the use": dict(releaser=1, acquirer=0, user=32, sync_after_acquire=False),
          "acquire by another block": dict(releaser=1, acquirer=0, acquirer_rank=1, user=0),
          "rewritten after the acquire": dict(releaser=1, rewrite_after_acquire=True),
          "store through it, no release": dict(store=True)}[plant]
    r = tensormap(**kw)
    assert rules(r) == ["missing-tensormap-fence"], (plant, str(r))
    assert all("PTX ISA: membar/fence" in v.message for v in r.violations)


def test_a_map_whose_write_is_not_ordered_before_its_use_is_unordered_access():
    tr = Cluster()
    tr.e(hz.MBAR_INIT, 0, BAR, 1).e(hz.TENSORMAP_REPLACE, 1, MAP, 0x1111, 0x1234, 1).e(hz.FENCE_TENSORMAP_RELEASE, 1)
    tr.e(hz.FENCE_TENSORMAP_ACQUIRE, 0, MAP).e(hz.MBAR_ARRIVE, 0, BAR, 1024).e(hz.TMA_LOAD, 0, TILE, MAP, BAR, 0)
    r = tr.e(hz.MBAR_WAIT, 0, BAR, 0 | 1 << 8).check(maps={MAP: 1024})
    assert rules(r) == ["unordered-access"] and "tensor map" in str(r), str(r)


def test_a_map_in_shared_memory_is_not_checked_until_it_is_published():
    """tensormap.replace on .shared::cta (d = 0) writes a copy no TMA op reads: only its publish is a write of the
    map in memory."""
    tr = Cluster()
    tr.e(hz.MBAR_INIT, 0, BAR, 1).e(hz.TENSORMAP_REPLACE, 0, 0x800, 0x1111, 0x1234, 0)
    tr.e(hz.MBAR_ARRIVE, 0, BAR, 1024).e(hz.TMA_LOAD, 0, TILE, MAP, BAR, 0).e(hz.MBAR_WAIT, 0, BAR, 0 | 1 << 8)
    clean(tr.check(maps={MAP: 1024}))


# ---- griddepcontrol: named as not checked, never a silent pass (PTX ISA: griddepcontrol) ----------------------

@pytest.mark.parametrize("kinds", [(hz.GRIDDEP_WAIT,), (hz.GRIDDEP_LAUNCH,), (hz.GRIDDEP_LAUNCH, hz.GRIDDEP_WAIT)])
def test_griddepcontrol_is_reported_as_not_checked_while_the_rest_is_checked(kinds):
    tr = Cluster()
    for k in kinds:
        tr.e(k, 0)
    tr.st(0, TILE, 64).e(hz.FENCE_PROXY_ASYNC, 0).e(hz.TMA_STORE, 0, TILE, 7).e(hz.BULK_COMMIT, 0)
    r = tr.e(hz.BULK_WAIT_READ, 0, 0, 0).check(maps={7: 64})
    assert r.ok and not r.unchecked and "programmatic dependent launch" in r.partly, str(r)
    assert all(hz.KINDS[k] in r.partly for k in kinds) and "not checked" in str(r)
    tr.events.pop()             # the store's read wait gone: the bug beside griddepcontrol is still reported
    r = tr.check(maps={7: 64})
    assert rules(r) == ["async-read-at-exit"] and "griddepcontrol" in r.partly, str(r)


def test_a_launch_without_griddepcontrol_says_nothing_is_left_unchecked():
    tr = Cluster().st(0, TILE, 64).e(hz.FENCE_PROXY_ASYNC, 0).e(hz.TMA_STORE, 0, TILE, 7).e(hz.BULK_COMMIT, 0)
    r = tr.e(hz.BULK_WAIT_READ, 0, 0, 0).check(maps={7: 64})
    assert r.ok and r.partly == "" and "not checked" not in str(r), str(r)


# ---- wgmma-register-in-flight and missing-wgmma-fence: from ptxas's log (PTX ISA: wgmma.wait_group; wgmma.fence) --

PTXAS = {
    "(C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non wgmma instructions "
    "reading accumulator registers of a wgmma between start and end of the pipeline stage in the function '{k}'":
        "wgmma-register-in-flight",
    "(C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non wgmma instructions "
    "defining accumulator registers of a wgmma between start and end of the pipeline stage in the function '{k}'":
        "wgmma-register-in-flight",
    "(C7516) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non wgmma instructions "
    "defining input registers of a wgmma between start and end of the pipeline stage in the function '{k}'":
        "wgmma-register-in-flight",
    "(C7520) warpgroup.wait is injected in around line 80 by compiler to allow use of registers defined by GMMA in "
    "function '{k}'": "wgmma-register-in-flight",
    "(C7519) warpgroup.arrive is injected in around line 96 by compiler to allow use of registers in GMMA in "
    "function '{k}'": "missing-wgmma-fence",
}


@pytest.mark.parametrize("line, rule", list(PTXAS.items()))
def test_each_ptxas_line_about_a_kernels_wgmma_registers_names_its_rule(line, rule):
    log = "ptxas info    : " + line.format(k="gemm") + "\n"
    assert [r for r, _, _ in register_hazards(log, "gemm")] == [rule]
    assert register_hazards(log, "other") == []          # ptxas names the function it speaks of
    assert [r for r, _, _ in register_hazards(log)] == [rule]


def test_serialisation_for_other_reasons_is_no_register_hazard():
    log = ("ptxas info    : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized due to the "
           "presence of Extern calls in the function 'gemm'\n"
           "ptxas info    : Used 168 registers, used 1 barriers, 8 bytes cumulative stack size\n")
    assert register_hazards(log, "gemm") == []


def test_a_warpgroups_first_wgmma_needs_a_wgmma_fence_and_its_registers_rule_cites_the_isa():
    tr = Cluster(threads=128)
    tr.st(0, TILE, 64).e(hz.FENCE_PROXY_ASYNC, 0).sync(0)
    r = tr.e(hz.WGMMA_READ, 0, TILE, 64).e(hz.WGMMA_COMMIT, 0).e(hz.WGMMA_WAIT, 0, 0, 0).check()
    assert rules(r) == ["missing-wgmma-fence"], str(r)
    for rule in ("wgmma-register-in-flight", "missing-wgmma-fence"):
        assert "PTX ISA: wgmma." in hz.RULES[rule]


def remote_arrive(owner_waits=False, owner_arrives_last=False, exit_barrier=False):
    """CTA 1's thread arrives on CTA 0's barrier (mbarrier.arrive.release.cluster.shared::cluster, count 2 with CTA
    0's own thread): a DSMEM access, which must happen before CTA 0 exits (CUDA C++ Programming Guide: Distributed
    Shared Memory)."""
    tr = Cluster(ctas=2, threads=32)
    tr.e(hz.MBAR_INIT, 0, BAR, 2, rank=0).cluster_sync(0)
    if not owner_arrives_last:
        tr.e(hz.MBAR_ARRIVE, 0, BAR, rank=0)
    tr.e(hz.MBAR_ARRIVE, 0, BAR, 0, 1 + 0, 0, rank=1)      # remote: c = 1 + rank 0
    if owner_arrives_last:                  # its own arrival completes the phase: the remote one was counted
        tr.e(hz.MBAR_ARRIVE, 0, BAR, rank=0)
    if owner_waits:
        tr.e(hz.MBAR_WAIT, 0, BAR, 0 | 2 | 1 << 8, rank=0)
    if exit_barrier:
        tr.cluster_sync(0)
    return tr.check()


def test_a_remote_arrive_the_owner_knows_of_before_it_exits_is_clean():
    clean(remote_arrive(owner_waits=True))
    clean(remote_arrive(owner_arrives_last=True))
    clean(remote_arrive(exit_barrier=True))


def test_a_remote_arrive_that_may_land_after_the_owner_exited_is_peer_access_at_exit():
    """The last lap of a cluster ring: a consumer releases a peer's empty barrier that no one waits on again."""
    r = remote_arrive()
    assert rules(r) == ["peer-access-at-exit"] and "remote mbarrier.arrive" in str(r), str(r)
