"""The hazard checker (feedbeast.hazards): each rule on a synthetic trace that breaks it and on one that does not;
hazard builds compile for sm_90a; the normal build's SASS is unchanged by the hazard hooks.

A synthetic trace is what a hazard build writes: events in slot order, each (kind, line, block, thread, rank,
a, b, c, d) as include/fb/hazard.cuh records them. The helpers below write the few operations a ring uses.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import feedbeast as fb
from feedbeast import hazards as hz

ROOT = Path(__file__).resolve().parents[1]
FULL, EMPTY, STAGE, BYTES = 0x100, 0x108, 0x400, 4096
WG = 128          # a consumer warpgroup's first thread: it records the warpgroup's wgmma


class Trace:
    """Build a trace of one block: each method appends the event its fb:: wrapper would record."""

    def __init__(self):
        self.events = []
        self.line = 0

    def _e(self, kind, t, a=0, b=0, c=0, d=0, line=None):
        self.line += 1
        self.events.append((kind, line or self.line, 0, t, 0, a, b, c, d))
        return self

    def init(self, t, bar, count):
        return self._e(hz.MBAR_INIT, t, bar, count)

    def arrive(self, t, bar, tx=0):
        return self._e(hz.MBAR_ARRIVE, t, bar, tx)

    def expect_tx(self, t, bar, tx):
        return self._e(hz.MBAR_EXPECT_TX, t, bar, tx)

    def wait(self, t, bar, parity, name="full", stage=0):
        raw = name.encode()[:8].ljust(8, b"\0")
        return self._e(hz.MBAR_WAIT, t, bar, parity | (stage + 1) << 8, int.from_bytes(raw[:4], "little"),
                       int.from_bytes(raw[4:], "little"))

    def bulk(self, t, dst, nbytes, bar):
        return self._e(hz.BULK_LOAD, t, dst, nbytes, bar)

    def fence(self, t):
        return self._e(hz.FENCE_PROXY_ASYNC, t)

    def sync(self, t):
        return self._e(hz.BAR_SYNC, t)

    def read(self, t, at, n):
        return self._e(hz.GENERIC_READ, t, at, n)

    def write(self, t, at, n):
        return self._e(hz.GENERIC_WRITE, t, at, n)

    def wgmma(self, t, at, n, fence=True):
        if fence and t not in self.__dict__.setdefault("fenced", set()):     # wgmma.fence before the first wgmma
            self.fenced.add(t)
            self._e(hz.WGMMA_FENCE, t)
        return self._e(hz.WGMMA_READ, t, at, n)

    def wgmma_commit(self, t):
        return self._e(hz.WGMMA_COMMIT, t)

    def wgmma_wait(self, t, n):
        return self._e(hz.WGMMA_WAIT, t, 0, n)

    def store(self, t, src, map_id):
        return self._e(hz.TMA_STORE, t, src, map_id)

    def bulk_commit(self, t):
        return self._e(hz.BULK_COMMIT, t)

    def bulk_wait_read(self, t, n):
        return self._e(hz.BULK_WAIT_READ, t, 0, n)

    def smem(self, t, at, n, write=False, mask=0, stride=0):
        """An ld/st of the instrumented PTX: thread t's own, or (mask) the warp's lanes at at + rank * stride."""
        return self._e(hz.SMEM_WRITE if write else hz.SMEM_READ, t, at, n, (stride & 0xFFFFFFF) << 4, mask)

    def cp_async(self, t, at, n=16):
        return self._e(hz.CP_ASYNC, t, at, n)

    def cp_commit(self, t):
        return self._e(hz.CP_COMMIT, t)

    def cp_wait(self, t, pending):
        return self._e(hz.CP_WAIT, t, 0, pending)

    def cp_mbar_arrive(self, t, bar, noinc):
        return self._e(hz.CP_MBAR_ARRIVE, t, bar, int(noinc))

    def check(self, threads=256, maps=None, instrumented=False):
        return hz.check(hz.decode(hz.encode(self.events)), threads_per_block=threads, maps=maps or {},
                        instrumented=instrumented)


def rules(report):
    return sorted({v.rule for v in report.violations})


def setup(tr, consumers=(1,)):
    """Thread 0 initialises full (1 arrival) and empty (one per consumer), then everyone syncs."""
    tr.init(0, FULL, 1).init(0, EMPTY, len(consumers))
    for t in (0, *consumers):
        tr.sync(t)
    return tr


def produce(tr, lap, t=0, nbytes=BYTES, tx=BYTES):
    tr.wait(t, EMPTY, (lap & 1) ^ 1, "empty")
    tr.arrive(t, FULL, tx)
    return tr.bulk(t, STAGE, nbytes, FULL)


# ---- rule: missing-proxy-fence --------------------------------------------------------------------------

def ring(laps=2, consumer=lambda tr, t, lap: (tr.wait(t, FULL, lap & 1), tr.fence(t), tr.arrive(t, EMPTY))):
    tr = setup(Trace())
    for lap in range(laps):
        produce(tr, lap)
        consumer(tr, 1, lap)
    return tr


def test_a_ring_whose_consumer_fences_before_it_releases_is_clean():
    r = ring().check()
    assert r.ok, str(r)
    assert r.events > 10


def test_a_missing_proxy_fence_is_found():
    r = ring(consumer=lambda tr, t, lap: (tr.wait(t, FULL, lap & 1), tr.arrive(t, EMPTY))).check()
    assert rules(r) == ["missing-proxy-fence"], str(r)
    v = r.violations[0]
    assert v.second.name == "cp.async.bulk" and v.first.name == "mbarrier.wait"   # the refill, after the reads


def test_a_proxy_fence_after_the_release_does_not_count():
    r = ring(consumer=lambda tr, t, lap: (tr.wait(t, FULL, lap & 1), tr.arrive(t, EMPTY), tr.fence(t))).check()
    assert rules(r) == ["missing-proxy-fence"], str(r)


def test_marked_reads_replace_the_assumed_ones():
    def marked(tr, t, lap):
        tr.wait(t, FULL, lap & 1).read(t, STAGE, 64).arrive(t, EMPTY).fence(t)
    r = ring(consumer=marked).check()
    assert rules(r) == ["missing-proxy-fence"] and r.violations[0].first.name == "generic.read", str(r)


def test_the_proxy_fence_counts_only_in_the_thread_that_wrote():
    """fence.proxy.async orders the accesses of the thread that executes it (PTX ISA, membar/fence): threads write
    a staging buffer, sync, and thread 0 alone fences before the TMA store: thread 1's write is not fenced. With
    each writer fencing its own write before the barrier the store is clean."""
    def staged(fencers, after_sync):
        tr = Trace()
        for t in (0, 1):
            tr.write(t, STAGE + 64 * t, 64)
            if t in fencers and not after_sync:
                tr.fence(t)
        tr.sync(0).sync(1)
        if after_sync:
            tr.fence(0)
        tr.store(0, STAGE, 7).bulk_commit(0).bulk_wait_read(0, 0)
        return tr.check(maps={7: 128})
    assert staged((0, 1), after_sync=False).ok
    r = staged((0,), after_sync=True)
    assert rules(r) == ["missing-proxy-fence"] and r.violations[0].first.thread == 1, str(r)
    r = staged((0,), after_sync=False)           # thread 1 never fenced
    assert rules(r) == ["missing-proxy-fence"] and r.violations[0].first.thread == 1, str(r)
    r = staged((), after_sync=False)
    assert rules(r) == ["missing-proxy-fence"], str(r)


# ---- rule: async-read-in-flight -------------------------------------------------------------------------

def wgmma_ring(release_first: bool, laps=2):
    tr = setup(Trace(), consumers=(WG,))
    for lap in range(laps):
        produce(tr, lap)
        tr.wait(WG, FULL, lap & 1).wgmma(WG, STAGE, BYTES).wgmma_commit(WG)
        if release_first:          # the bug: the stage goes back before the wgmma reading it retired
            tr.arrive(WG, EMPTY).wgmma_wait(WG, 0)
        else:
            tr.wgmma_wait(WG, 0).arrive(WG, EMPTY)
    return tr


def test_a_stage_released_after_wgmma_wait_group_is_clean():
    r = wgmma_ring(False).check()
    assert r.ok, str(r)


def test_a_stage_released_before_wgmma_wait_group_is_found():
    r = wgmma_ring(True).check()
    assert rules(r) == ["async-read-in-flight"], str(r)
    v = r.violations[0]
    assert v.first.name == "wgmma.read" and v.second.name == "cp.async.bulk"
    assert "not ordered before it" in v.message


def test_a_wgmma_never_waited_for_is_found():
    tr = setup(Trace(), consumers=(WG,))
    for lap in range(2):
        produce(tr, lap)
        tr.wait(WG, FULL, lap & 1).wgmma(WG, STAGE, BYTES).wgmma_commit(WG).arrive(WG, EMPTY)
    r = tr.check()
    assert rules(r) == ["async-read-in-flight"] and "no wait retired it" in r.violations[0].message, str(r)


def test_wait_group_one_leaves_the_newest_group_in_flight():
    tr = setup(Trace(), consumers=(WG,))
    for lap in range(2):
        produce(tr, lap)
        tr.wait(WG, FULL, lap & 1).wgmma(WG, STAGE, BYTES).wgmma_commit(WG).wgmma_wait(WG, 1).arrive(WG, EMPTY)
    assert rules(tr.check()) == ["async-read-in-flight"]


def staging(wait_read: bool):
    tr = Trace()
    for tile in range(2):          # thread 0 writes the staging buffer, fences, stores it; twice
        if tile and wait_read:
            tr.bulk_wait_read(0, 0)
        tr.write(0, STAGE, 256).fence(0).store(0, STAGE, 9).bulk_commit(0)
    tr.bulk_wait_read(0, 0)
    return tr.check(maps={9: 256})


def test_a_staging_buffer_rewritten_after_the_store_read_it_is_clean():
    assert staging(True).ok


def test_a_staging_buffer_rewritten_before_the_store_read_it_is_found():
    r = staging(False)
    assert rules(r) == ["async-read-in-flight"] and r.violations[0].first.name == "tma.store", str(r)


# ---- rule: unordered-access ---------------------------------------------------------------------------

def test_a_read_before_the_copy_landed_is_found():
    """The consumer waits on full with the flipped parity: a fresh barrier passes it at once."""
    tr = setup(Trace())
    produce(tr, 0)
    tr.wait(1, FULL, 1).read(1, STAGE, 64).fence(1).arrive(1, EMPTY)
    r = tr.check()
    assert "unordered-access" in rules(r) and "had not landed" in str(r), str(r)


def test_a_refill_without_waiting_for_empty_is_found():
    tr = setup(Trace())
    for lap in range(2):
        tr.arrive(0, FULL, BYTES).bulk(0, STAGE, BYTES, FULL)     # no wait on empty
        tr.wait(1, FULL, lap & 1).fence(1).arrive(1, EMPTY)
    assert "unordered-access" in rules(tr.check())


# ---- rule: expect-tx-mismatch ------------------------------------------------------------------------

def test_expect_tx_in_elements_instead_of_bytes_is_found():
    tr = setup(Trace())
    produce(tr, 0, tx=BYTES // 4)
    tr.wait(1, FULL, 0).fence(1).arrive(1, EMPTY)
    r = tr.check()
    assert rules(r) == ["expect-tx-mismatch"] and f"brought {BYTES} bytes" in str(r), str(r)


def test_expect_tx_larger_than_the_copies_is_found_at_the_end():
    tr = setup(Trace())
    produce(tr, 0, tx=2 * BYTES)
    r = tr.check()
    assert rules(r) == ["expect-tx-mismatch"] and "never completed" in str(r), str(r)


def test_bytes_that_land_before_the_announcement_are_fine():
    tr = setup(Trace())
    tr.wait(0, EMPTY, 1, "empty").bulk(0, STAGE, BYTES, FULL).arrive(0, FULL, BYTES)
    tr.wait(1, FULL, 0).fence(1).arrive(1, EMPTY)
    assert tr.check().ok


# ---- rule: arrival-count -----------------------------------------------------------------------------

def test_a_phase_left_incomplete_at_exit_is_allowed():
    """PTX ISA (mbarrier) does not require a phase to complete: a kernel may end with arrivals pending."""
    tr = setup(Trace(), consumers=(1, 2))       # empty expects 2 arrivals
    produce(tr, 0)
    tr.wait(1, FULL, 0).fence(1).arrive(1, EMPTY)
    tr.wait(2, FULL, 0).fence(2)                  # consumer 2 does not arrive: nobody waits for it either
    r = tr.check()
    assert r.ok, str(r)


def _two_consumer_ring(empty_count: int, laps: int) -> Trace:
    """A producer (thread 0) and two consumers (1, 2) that each arrive on empty once per lap."""
    tr = Trace().init(0, FULL, 1).init(0, EMPTY, empty_count)
    for t in (0, 1, 2):
        tr.sync(t)
    for lap in range(laps):
        produce(tr, lap)
        for t in (1, 2):
            tr.wait(t, FULL, lap & 1).fence(t).arrive(t, EMPTY)
    return tr


def test_a_count_lower_than_the_arrivals_is_found_where_the_phase_completes_early():
    """empty counts 1 but two consumers arrive per lap: the first arrival completes the phase, the second lands
    in the next one, which it knew nothing of. Named at the arrive, as arrival-count."""
    r = _two_consumer_ring(1, laps=3).check()
    assert "arrival-count" in rules(r) and "completes early" in str(r), str(r)
    r = _two_consumer_ring(1, laps=1).check()                # the first lap already shows it
    assert rules(r) == ["arrival-count"] and r.violations[0].second.thread == 2, str(r)
    good = _two_consumer_ring(2, laps=3).check()             # the same ring with the right count
    assert good.ok, str(good)


# ---- rule: wait-parity -------------------------------------------------------------------------------

def test_more_arrivals_per_lap_than_the_count_is_found_by_the_race_it_opens():
    tr = Trace().init(0, FULL, 1).init(0, EMPTY, 1)   # empty counts 1, but two consumers arrive
    for t in (0, 1, 2):
        tr.sync(t)
    for lap in range(3):
        produce(tr, lap)
        for t in (1, 2):
            tr.wait(t, FULL, lap & 1).fence(t).arrive(t, EMPTY)
    r = tr.check()      # the first arrival completes the phase: the refill races with the second reader
    assert "unordered-access" in rules(r), str(r)


def test_a_waiter_that_sees_the_same_phase_twice_is_found():
    tr = setup(Trace())
    produce(tr, 0)
    tr.wait(1, FULL, 0).fence(1).arrive(1, EMPTY)
    produce(tr, 1)
    tr.wait(1, FULL, 0)                       # lap 1 needs parity 1: this returns on phase 0 again
    r = tr.check()
    assert "wait-parity" in rules(r) and "already waited for" in str(r), str(r)


# ---- rule: barrier-uninitialized ---------------------------------------------------------------------

def test_a_barrier_the_trace_did_not_see_initialised_makes_the_trace_uncheckable():
    tr = Trace().arrive(0, FULL, 0)
    tr.wgmma(WG, STAGE, BYTES).bulk(0, STAGE, BYTES, FULL)          # would be a race, were FULL traced
    r = tr.check()
    assert r.violations == [] and "not initialised through fb::mbar::init" in r.unchecked and "not checked" in str(r)


def test_a_barrier_used_before_its_init_with_no_sync_between_is_a_violation():
    """Lab 04 without the __syncthreads() after the init: a consumer waits on the barrier before thread 0's init
    takes its slot in the trace. On a GPU this had made the trace uncheckable (the grade PARTIAL); it is the rule
    now. With the sync (setup()), the same kernel is clean."""
    tr = Trace().wait(1, FULL, 0).init(0, FULL, 1).init(0, EMPTY, 1)
    produce(tr, 0)
    r = tr.check()
    assert rules(r) == ["mbarrier-use-before-init"] and not r.unchecked, str(r)    # not also a wait-parity
    v = r.violations[0]
    assert (v.second.thread, v.first.thread) == (1, 0) and "came before its init" in v.message, str(r)
    clean = setup(Trace())
    produce(clean, 0)
    clean.wait(1, FULL, 0)
    assert clean.check().violations == [] and not clean.check().unchecked
    # a barrier made outside the fb:: wrappers, used, and later initialised again through them by a thread that saw
    # that use: an earlier barrier there, not a race; the trace stays unchecked, as a barrier it cannot follow makes it
    # a kernel built with __cluster_dims__ launched without cluster=: its events carry a rank the replay does not use
    odd = hz.check([hz.Event(0, hz.MBAR_WAIT, 1, 1, 100, 1, FULL, 1, 0, 0)], threads_per_block=128, grid=(2, 1, 1))
    assert odd.violations == [] and "not initialised through fb::mbar::init" in odd.unchecked, str(odd)
    reused = Trace().arrive(1, FULL, 0).sync(1).sync(0).init(0, FULL, 1)
    r = reused.check()
    assert r.violations == [] and "not initialised through fb::mbar::init" in r.unchecked, str(r)


# ---- reports ---------------------------------------------------------------------------------------

def test_the_report_names_rule_lines_and_source():
    src = "\n".join(f"line {i}" for i in range(1, 200))
    r = hz.check(hz.decode(hz.encode(wgmma_ring(True).events)), threads_per_block=256, source=src,
                 module_name="ring.cu", kernel="ring")
    text = str(r)
    assert "async-read-in-flight" in text and "ring.cu:" in text and "line " in text
    with pytest.raises(fb.HazardFound, match="async-read-in-flight"):
        r.raise_if_any()


def test_decode_drops_a_slot_that_was_not_completed():
    words = hz.encode(ring().events)
    words[3, 7] = 0
    assert len(hz.decode(words)) == len(words) - 1


def test_encode_decode_roundtrip():
    ev = hz.decode(hz.encode([(hz.TMA_LOAD, 77, 5, 130, 1, 0x400, 0xdeadbeef, 0x100, 3)]))[0]
    assert (ev.kind, ev.line, ev.block, ev.thread, ev.rank, ev.a, ev.b, ev.c, ev.d) == \
        (hz.TMA_LOAD, 77, 5, 130, 1, 0x400, 0xdeadbeef, 0x100, 3)


def test_every_kind_of_the_header_is_named_in_the_same_order():
    text = (ROOT / "src/feedbeast/include/fb/hazard.cuh").read_text()
    enum = text[text.index("enum Kind"):text.index("};", text.index("enum Kind"))]
    names = re.findall(r"^\s+(k\w+)", enum, re.M)
    assert len(names) == len(hz.KINDS) - 1


# ---- builds ----------------------------------------------------------------------------------------

RING = r"""
#include <fb/bulk_copy.cuh>
#include <fb/mbarrier.cuh>
#include <fb/tma.cuh>
#include <fb/wgmma.cuh>
extern "C" __global__ void ring(const float* x, float* y, int n) {
  __shared__ alignas(1024) unsigned char stage[16384];
  __shared__ cuda::std::uint64_t full, empty;
  if (threadIdx.x == 0) { fb::mbar::init(&full, 1); fb::mbar::init(&empty, 128); fb::mbar::fence_init(); }
  __syncthreads();
  for (int i = 0; i < n; ++i) {
    if (threadIdx.x == 128) {
      fb::mbar::wait(&empty, (i & 1) ^ 1, "empty", 0);
      fb::mbar::arrive_expect_tx(&full, 4096);
      fb::bulk_copy_g2s(stage, x + 1024 * i, 4096, &full);
    } else if (threadIdx.x < 128) {
      fb::mbar::wait(&full, i & 1, "full", 0);
      fb::hazard::generic_read(stage, 4096);
      y[threadIdx.x] += reinterpret_cast<float*>(stage)[threadIdx.x];
      fb::fence_proxy_async();
      fb::mbar::arrive(&empty);
    }
  }
}
"""


def test_a_hazard_build_compiles_for_sm90a_and_records():
    mod = fb.compile(RING, "sm_90a", hazards=True)
    assert mod.defines.get("FB_HAZARDS") == 1
    assert "fb_hz_events" in mod.sass() or mod.cubin.find(b"fb_hz_events") >= 0
    normal = fb.compile(RING, "sm_90a")
    assert normal.cubin.find(b"fb_hz_events") < 0             # the normal build has no trace at all
    calls = lambda m: sum(n for op, n in m.histogram("ring").items() if op.startswith("CALL"))  # noqa: E731
    assert calls(mod) >= 6 and calls(normal) == 0   # one call of the recorder per traced operation


def _instructions(mod, kernel):
    return [ln.split("*/", 1)[1].split(";")[0].strip() for ln in mod.sass(kernel).splitlines()
            if re.match(r"\s*/\*[0-9a-f]{4}\*/", ln)]


def _headers_without_hooks(tmp_path) -> Path:
    """A copy of include/fb/ with every hazard hook taken out: the headers as they were without the checker."""
    out = tmp_path / "include"
    shutil.copytree(ROOT / "src/feedbeast/include", out)
    for p in (out / "fb").glob("*.cuh"):
        if p.name == "hazard.cuh":    # it defines the hooks (empty in a normal build) and the markers
            continue
        s = p.read_text()
        s = re.sub(r"^\s*FB_HZ_RECORD(_WARPGROUP)?\([^;]*\);\n", "", s, flags=re.M)
        s = s.replace(" FB_HZ_LINE_PARAM", "").replace("FB_HZ_LINE_PARAM", "").replace(" FB_HZ_LINE", "")
        p.write_text(s)
    return out


KERNELS = [("chapters/04-mbarrier.ipynb", "rowsum_mod"), ("chapters/05-tma.ipynb", "ring"),
           ("chapters/05-tma.ipynb", "gemm"), ("chapters/07-capstone-gemm.ipynb", "capstone"),
           ("chapters/03-cp-async.ipynb", "ring")]


@pytest.mark.parametrize("notebook, cell", KERNELS)
def test_the_normal_build_is_unchanged_by_the_hooks(notebook, cell, tmp_path, monkeypatch):
    """Same SASS instruction list with the headers as they are and with every hazard hook taken out."""
    import importlib
    from feedbeast.course.notebook import load
    fbc = importlib.import_module("feedbeast.compile")
    c = load(ROOT / notebook).cuda(cell)
    with_hooks = c.compile("sm_90a")
    monkeypatch.setattr(fbc, "INCLUDE_DIR", _headers_without_hooks(tmp_path))
    without = fb.compile(c.source, "sm_90a", defines=c.defines, use_cache=False, name=f"{cell}.cu")
    assert with_hooks.kernel_names == without.kernel_names
    for k in with_hooks.kernel_names:
        a, b = _instructions(with_hooks, k), _instructions(without, k)
        assert a == b, f"{notebook}:{cell}:{k}: {len(a)} vs {len(b)} instructions"


@pytest.mark.parametrize("notebook, cell", KERNELS)
def test_hazard_builds_of_chapter_kernels_compile(notebook, cell):
    from feedbeast.course.notebook import load
    c = load(ROOT / notebook).cuda(cell)
    mod = fb.compile(c.source, "sm_90a", defines={**c.defines, "FB_HAZARDS": 1, "FB_DEBUG": 1}, name=f"{cell}.cu")
    assert mod.kernel_names and mod.cubin.find(b"fb_hz_events") >= 0


def test_a_launch_without_a_gpu_is_skipped_by_name():
    if fb.gpu() is not None:
        pytest.skip("this machine has a GPU: tests/test_hazards_gpu.py runs the check there")
    r = fb.compile(RING, "sm_90a").hazard_check("ring", 1, 160, None, None, 1)
    assert isinstance(r, fb.Skipped) and "hazard check of ring" in str(r)
    # the README's chained form runs on: the skip comes back (falsy), nothing is raised and nothing passes
    assert r.raise_if_any() is r and not r


def test_a_relaxed_remote_arrive_after_wgmma_wait_group_releases_the_stage():
    """Chapter 07's argument: the arrival says only "my wgmma reads are done", and wait_group waited for them."""
    def ring_with(relaxed: bool, wait_first: bool):
        tr = setup(Trace(), consumers=(WG,))
        for lap in range(2):
            produce(tr, lap)
            tr.wait(WG, FULL, lap & 1).wgmma(WG, STAGE, BYTES).wgmma_commit(WG)
            if wait_first:
                tr.wgmma_wait(WG, 0)
            tr._e(hz.MBAR_ARRIVE, WG, EMPTY, 0, 1, int(relaxed))      # remote form, rank 0
            if not wait_first:
                tr.wgmma_wait(WG, 0)
        return tr.check()
    assert ring_with(True, True).ok
    assert rules(ring_with(True, False)) == ["async-read-in-flight"]


def test_a_relaxed_arrive_does_not_order_ordinary_reads():
    def relaxed_consumer(tr, t, lap):
        tr.wait(t, FULL, lap & 1).read(t, STAGE, 64).fence(t)
        tr._e(hz.MBAR_ARRIVE, t, EMPTY, 0, 1, 1)
    assert rules(ring(consumer=relaxed_consumer).check()) == ["unordered-access"]


def test_two_ordinary_accesses_are_left_to_racecheck():
    """Threads of a warpgroup each mark the whole staging tile they write parts of: not a hazard of the async
    proxy (compute-sanitizer racecheck tracks ordinary accesses)."""
    tr = Trace()
    for t in range(4):
        tr.write(t, STAGE, 256)
    for t in range(4):
        tr.fence(t).sync(t)
    tr.store(0, STAGE, 9).bulk_commit(0).bulk_wait_read(0, 0)
    assert tr.check(maps={9: 256}).ok


def test_ping_pong_consumers_that_take_turns_skip_phases_legally():
    tr = Trace().init(0, FULL, 1).init(0, EMPTY, 1)
    for t in (0, 1, 2):
        tr.sync(t)
    for lap in range(4):
        produce(tr, lap)
        c = 1 + lap % 2                            # consumer 1 takes even laps, consumer 2 odd ones
        tr.wait(c, FULL, lap & 1).fence(c).arrive(c, EMPTY)
    assert tr.check().ok


def test_threads_of_a_wgmma_warpgroup_are_not_taken_for_ordinary_readers():
    """Only the warpgroup's first thread records the wgmma; the others record their wait_group."""
    tr = setup(Trace(), consumers=(WG, WG + 1))
    for lap in range(2):
        produce(tr, lap)
        tr.wait(WG, FULL, lap & 1).wait(WG + 1, FULL, lap & 1)
        tr.wgmma(WG, STAGE, BYTES).wgmma_commit(WG).wgmma_wait(WG, 0).wgmma_wait(WG + 1, 0)
        tr.arrive(WG, EMPTY).arrive(WG + 1, EMPTY)
    assert tr.check().ok


def test_a_turn_taken_between_the_wait_and_the_wgmma_is_not_an_ordinary_read():
    """Ping-pong: a consumer waits for its stage, then for its turn (a named barrier), then issues the wgmma.
    The turn is not an access, so the stage stays a wgmma read and needs no proxy fence before its release."""
    tr = setup(Trace(), consumers=(WG, WG + 1))
    for lap in range(2):
        produce(tr, lap)
        tr.wait(WG, FULL, lap & 1).wait(WG + 1, FULL, lap & 1)
        tr._e(hz.BAR_SYNC, WG, 1, 256)                              # the warpgroup's turn
        tr._e(hz.BAR_SYNC, WG + 1, 1, 256)
        tr.wgmma(WG, STAGE, BYTES).wgmma_commit(WG).wgmma_wait(WG, 0).wgmma_wait(WG + 1, 0)
        tr.arrive(WG, EMPTY).arrive(WG + 1, EMPTY)
    assert tr.check().ok


def test_a_turn_taken_before_ordinary_reads_still_needs_the_fence():
    """The same wait and turn, then unmarked ordinary reads and a release with no fence: still found."""
    tr = setup(Trace())
    for lap in range(2):
        produce(tr, lap)
        tr.wait(1, FULL, lap & 1)
        tr._e(hz.BAR_SYNC, 1, 1, 32)
        tr.arrive(1, EMPTY)
    assert rules(tr.check()) == ["missing-proxy-fence"]


def _tm(rows, raw):
    from feedbeast.tensormap import TensorMap
    return TensorMap((rows, 64), np.dtype("uint16"), (rows, 64), (128, 2), 0, "zero", 0, (1, 1), raw=raw)


def test_tensor_maps_are_named_by_their_bytes_so_the_match_is_never_ambiguous():
    """A kernel that takes three maps and loads through two: each map's id is a hash of its 128 bytes (the same on
    the device, fb::hazard::map_id), so each recorded id names one argument and its box."""
    raws = [bytes(range(i, i + 128)) for i in (0, 1, 2)]
    maps = [_tm(rows, raw) for rows, raw in zip((128, 256, 64), raws)]
    (reading,) = hz._map_readings(maps)
    assert reading == {hz.map_id(raws[0]): 16384, hz.map_id(raws[1]): 32768, hz.map_id(raws[2]): 8192}
    assert len(set(reading)) == 3
    # FNV-1a over 32 little-endian words, as the device computes it
    h = 2166136261
    for w in np.frombuffer(raws[0], "<u4"):
        h = ((h ^ int(w)) * 16777619) % 2 ** 32
    assert hz.map_id(raws[0]) == h


def test_an_id_shared_by_maps_of_different_boxes_reports_what_any_reading_shows():
    """Two maps with one id (a collision) and different boxes: every reading is checked and its violations kept,
    so the reading under which expect_tx agrees cannot hide the one under which it does not."""
    raw = bytes(128)
    maps = [_tm(128, raw), _tm(256, raw)]
    readings = hz._map_readings(maps)
    assert sorted(r[hz.map_id(raw)] for r in readings) == [16384, 32768]
    mid = hz.map_id(raw)
    tr = setup(Trace())
    tr.wait(0, EMPTY, 1, "empty").arrive(0, FULL, 16384)._e(hz.TMA_LOAD, 0, STAGE, mid, FULL, 0)
    tr.wait(1, FULL, 0).fence(1).arrive(1, EMPTY)
    r = hz._check_readings(hz.decode(hz.encode(tr.events)), readings, threads_per_block=256)
    assert "expect-tx-mismatch" in rules(r), str(r)


def test_a_tensor_map_that_is_no_argument_makes_the_trace_uncheckable():
    tr = setup(Trace())
    tr.wait(0, EMPTY, 1, "empty").arrive(0, FULL, 16384)._e(hz.TMA_LOAD, 0, STAGE, 0x1234, FULL, 0)
    r = tr.check(maps={0x99: 16384})
    assert r.ok and "not arguments of this launch" in r.unchecked and "0x1234" in r.unchecked, str(r)


def test_a_saved_trace_replays_to_the_same_report(tmp_path):
    words = hz.encode(wgmma_ring(True).events)
    meta = dict(threads_per_block=256, grid=(1, 1, 1), cluster=(1, 1, 1), maps={}, kernel="ring", source=None,
                module_name="ring.cu", dropped=0)
    hz.save(tmp_path, words, meta)
    (path,) = tmp_path.glob("*.npz")
    r = hz.replay(path)
    assert rules(r) == ["async-read-in-flight"] and r.kernel == "ring"
    # the same from the library's command line: exit 1 for a hazard; --help and a missing file say what it takes
    import subprocess
    import sys
    run = lambda *a: subprocess.run([sys.executable, "-m", "feedbeast.hazards", *a], capture_output=True, text=True)
    out = run("replay", str(path))
    assert out.returncode == 1 and "async-read-in-flight" in out.stdout, out.stdout + out.stderr
    for args in (["--help"], ["replay", "--help"]):
        out = run(*args)
        assert out.returncode == 0 and out.stdout.startswith("usage: python -m feedbeast.hazards replay"), out
    out = run("replay", str(tmp_path / "none.npz"))
    assert out.returncode == 2 and "no trace file" in out.stderr and "Traceback" not in out.stderr, out.stderr
    # a file that is no trace (not an archive; an archive without the trace's arrays): exit 2, never 1 (a hazard)
    (tmp_path / "garbage.npz").write_text("garbage")
    import numpy as np
    np.savez(tmp_path / "other.npz", x=np.arange(3))
    for bad in ("garbage.npz", "other.npz"):
        out = run("replay", str(tmp_path / bad))
        assert out.returncode == 2 and "is no hazard trace" in out.stderr and "Traceback" not in out.stderr, out


def _cluster_ring(relaxed: bool, release_early: bool = False, laps=3, window=False):
    """Two CTAs of a cluster: each producer loads its A and multicasts its half of B into both CTAs' stage;
    each CTA's consumer warpgroup reads the stage with wgmma, then arrives on empty[s] of both CTAs."""
    ev = []

    def e(kind, rank, t, a=0, b=0, c=0, d=0):
        if window:      # as measured on an H100: rank r's own shared addresses read r << 24 | offset
            a = a + (rank << 24) if kind not in (hz.CLUSTER_SYNC, hz.WGMMA_COMMIT, hz.WGMMA_WAIT) else a
            c = c + (rank << 24) if kind == hz.TMA_LOAD else c
        ev.append((kind, len(ev) + 1, rank, t, rank, a, b, c, d))
    A, HALF_B = 0x400, 0x400 + 16384
    for r in (0, 1):
        e(hz.MBAR_INIT, r, 0, FULL, 1)
        e(hz.MBAR_INIT, r, 0, EMPTY, 2)
    for r in (0, 1):
        for t in (0, WG):
            e(hz.CLUSTER_SYNC, r, t)
    for lap in range(laps):
        for r in (0, 1):
            e(hz.MBAR_WAIT, r, 0, EMPTY, ((lap & 1) ^ 1) | 1 << 8)
            e(hz.MBAR_ARRIVE, r, 0, FULL, 16384 + 2 * 8192)
            e(hz.TMA_LOAD, r, 0, A, 1, FULL, 0)                        # map 1: A box, 16 KB
            e(hz.TMA_LOAD, r, 0, HALF_B + 8192 * r, 2, FULL, 0b11)     # map 2: half of B, to both CTAs
        for r in (0, 1):
            e(hz.MBAR_WAIT, r, WG, FULL, (lap & 1) | 1 << 8)
            e(hz.WGMMA_FENCE, r, WG)
            e(hz.WGMMA_READ, r, WG, A, 16384)
            e(hz.WGMMA_READ, r, WG, HALF_B, 16384)
            e(hz.WGMMA_COMMIT, r, WG)
            if not release_early:
                e(hz.WGMMA_WAIT, r, WG, 0, 0)
            for peer in (0, 1):
                e(hz.MBAR_ARRIVE, r, WG, EMPTY, 0, 1 + peer, int(relaxed))
            if release_early:
                e(hz.WGMMA_WAIT, r, WG, 0, 0)
    for r in (0, 1):        # no CTA exits while its peer may still arrive on its barriers
        for t in (0, WG):
            e(hz.CLUSTER_SYNC, r, t)
    return hz.check(hz.decode(hz.encode(ev)), threads_per_block=384, grid=(2, 1, 1), cluster=(2, 1, 1),
                    maps={1: 16384, 2: 8192})


def test_a_multicast_cluster_ring_is_clean_with_release_or_relaxed_remote_arrives():
    for relaxed in (False, True):
        for window in (False, True):
            r = _cluster_ring(relaxed, window=window)
            assert r.ok and not r.unchecked and r.events > 50, str(r)


def test_a_multicast_cluster_ring_that_releases_before_wait_group_is_found():
    assert rules(_cluster_ring(True, release_early=True)) == ["async-read-in-flight"]
    assert rules(_cluster_ring(True, release_early=True, window=True)) == ["async-read-in-flight"]


def _launch_hook_calls(monkeypatch, sanitize: bool):
    """check_on_launch with the GPU part replaced: which launches would be traced, and what it printed."""
    import types
    import feedbeast.memory
    calls = []

    def fake_run(kernel, grid, block, *args, **kw):
        calls.append((kernel.name, grid, block))
        return hz.Report(kernel.name, [], 10, seconds={"build": 0.0, "run": 0.0, "check": 0.0})
    monkeypatch.setattr(hz, "run", fake_run)
    monkeypatch.setattr(hz, "_arrays", lambda args: {})
    monkeypatch.setattr(feedbeast.memory, "sync", lambda: None)
    monkeypatch.setattr(hz, "_checked", set())
    monkeypatch.setattr(hz, "_configs", {})
    from feedbeast import hooks
    monkeypatch.setattr(hooks.mode, "hazards", "report")      # what FEEDBEAST_HAZARDS=report sets, through the course
    monkeypatch.setattr(hooks.mode, "sanitizer", sanitize)    # what the course sets under make sanitize

    def module(src="#include <fb/tma.cuh>\n// ring", **defines):   # a fresh object, as a compile would give
        return types.SimpleNamespace(source=src, arch="sm_90a", defines=defines, options=())

    def launch(mod, grid, block=128, *args):
        hz.check_on_launch(types.SimpleNamespace(module=mod, name="ring"), grid, block, args, 0, None)
    return calls, module, launch


def test_the_launch_hook_checks_a_build_once_per_launch_not_per_module_object(monkeypatch, capsys):
    calls, module, launch = _launch_hook_calls(monkeypatch, sanitize=False)
    launch(module(STAGES=4), 8, 128, 1000)
    launch(module(STAGES=4), 8, 128, 1000)      # compiled again: the same build, the same launch
    launch(module(STAGES=2), 8, 128, 1000)      # another build
    launch(module(STAGES=4), 16, 128, 2000)     # another size: checked (grading checks every size)
    assert [c[1] for c in calls] == [8, 8, 16], calls
    assert "repeat" not in capsys.readouterr().out


def test_make_sanitize_traces_each_build_and_launch_configuration_once(monkeypatch, capsys):
    calls, module, launch = _launch_hook_calls(monkeypatch, sanitize=True)
    launch(module(STAGES=4), 8, 128, 1000)
    launch(module(STAGES=4), 16, 128, 2000)     # a larger size of the same build and configuration
    launch(module(STAGES=4), 16, 256, 2000)     # another block size: another configuration
    launch(module(STAGES=8), 16, 128, 2000)     # another build
    assert [(c[1], c[2]) for c in calls] == [(8, 128), (16, 256), (16, 128)], calls
    out = capsys.readouterr().out
    assert out.count("hazard check: ") == 3 and out.count("hazard check (repeat): ring grid 16 block 128") == 1, out


def test_clusters_replayed_in_parallel_give_the_report_of_one_replay():
    clean, racy = ring(laps=3), ring(laps=3, consumer=lambda tr, t, lap: (tr.wait(t, FULL, lap & 1), tr.arrive(t, EMPTY)))
    events = []     # blocks 0 (racy), 1 (clean) and 2 (racy), their events interleaved as the slots would be
    for i in range(max(len(clean.events), len(racy.events))):
        for block, tr in ((0, racy), (1, clean), (2, racy)):
            if i < len(tr.events):
                e = tr.events[i]
                events.append((e[0], e[1], block, *e[3:]))
    decoded = hz.decode(hz.encode(events))
    one = hz.check(decoded, threads_per_block=256, grid=(3, 1, 1), parallel=False)
    many = hz.check(decoded, threads_per_block=256, grid=(3, 1, 1), parallel=True)
    assert rules(one) == ["missing-proxy-fence"] and one.blocks_traced == 3, str(one)
    assert str(many) == str(one)
    assert [tuple(v.second) for v in many.violations] == [tuple(v.second) for v in one.violations]


# ---- rule: async-read-at-exit ----------------------------------------------------------------------------

def test_a_block_that_ends_while_its_store_still_reads_shared_memory_is_found():
    """cp.async.bulk.wait_group.read (PTX ISA) is what says the store's source was read; without it before the
    block ends, the block's shared memory may be released under the store. wait_group (not .read) also does."""
    def epilogue(wait):
        tr = Trace()
        tr.write(0, STAGE, 128).fence(0).store(0, STAGE, 7).bulk_commit(0)
        if wait == "read":
            tr.bulk_wait_read(0, 0)
        elif wait == "all":
            tr._e(hz.BULK_WAIT, 0, 0, 0)
        elif wait == "one pending":
            tr.bulk_wait_read(0, 1)
        return tr.check(maps={7: 128})
    assert epilogue("read").ok and epilogue("all").ok
    for wait in (None, "one pending"):
        r = epilogue(wait)
        assert rules(r) == ["async-read-at-exit"] and r.violations[0].second.name == "tma.store", str(r)


# ---- rule: mbarrier-scope --------------------------------------------------------------------------------

def test_a_cta_scope_wait_on_a_peer_ctas_release_is_found():
    """Consumers of CTA 1 read a stage of CTA 0 with ordinary loads, fence, and release CTA 0's empty barrier
    with a remote arrive; CTA 0's producer waits on it at .cta scope: the acquire and the release are not morally
    strong (PTX ISA, Memory Consistency Model: scope). With .cluster scope the same ring is clean."""
    def two_ctas(cluster_wait: bool):
        ev = []

        def e(kind, rank, t, a=0, b=0, c=0, d=0):
            ev.append((kind, len(ev) + 1, rank, t, rank, a, b, c, d))
        e(hz.MBAR_INIT, 0, 0, FULL, 1)
        e(hz.MBAR_INIT, 0, 0, EMPTY, 2)                 # CTA 0's consumer and CTA 1's thread release it
        e(hz.MBAR_INIT, 1, 0, FULL, 1)
        for r in (0, 1):
            for t in (0, 1):
                e(hz.CLUSTER_SYNC, r, t)
        scope = 2 if cluster_wait else 0
        e(hz.MBAR_WAIT, 0, 0, EMPTY, 1 | scope | 1 << 8)
        e(hz.MBAR_ARRIVE, 0, 0, FULL, BYTES)
        e(hz.BULK_LOAD, 0, 0, STAGE, BYTES, FULL)
        e(hz.MBAR_WAIT, 0, 1, FULL, 0 | 1 << 8)
        e(hz.FENCE_PROXY_ASYNC, 0, 1)
        e(hz.MBAR_ARRIVE, 0, 1, EMPTY)
        e(hz.MBAR_ARRIVE, 1, 0, FULL, 64)               # CTA 1 has its own stage, filled by its own copy,
        e(hz.BULK_LOAD, 1, 0, 0x800, 64, FULL)
        e(hz.MBAR_WAIT, 1, 1, FULL, 0 | 1 << 8)         # which CTA 1's thread reads (ordinary loads)
        e(hz.GENERIC_READ, 1, 1, 0x800, 64)
        e(hz.FENCE_PROXY_ASYNC, 1, 1)
        e(hz.MBAR_ARRIVE, 1, 1, EMPTY, 0, 1, 0)         # a release, remote: CTA 0's empty
        e(hz.MBAR_WAIT, 0, 0, EMPTY, 0 | scope | 1 << 8)
        return hz.check(hz.decode(hz.encode(ev)), threads_per_block=64, grid=(2, 1, 1), cluster=(2, 1, 1))
    assert two_ctas(True).ok, str(two_ctas(True))
    r = two_ctas(False)
    assert "mbarrier-scope" in rules(r) and "wait_cluster" in str(r), str(r)


# ---- tcgen05 (Blackwell) -----------------------------------------------------------------------------

def blackwell_ring(commit_first=False, laps=3):
    """Chapter 08's ring: the producer waits empty and loads; the MMA thread waits full, issues tcgen05.mma (its
    operand reads recorded) and tcgen05.commit to empty: the commit is the release, once the MMAs completed."""
    tr = setup(Trace(), consumers=(32,))
    tr.events = [e for e in tr.events if not (e[0] == hz.MBAR_INIT and e[5] == EMPTY)]
    tr.init(0, EMPTY, 1)
    for lap in range(laps):
        produce(tr, lap)
        tr.wait(32, FULL, lap & 1)
        if commit_first:       # a plain arrive releases the stage while the MMA still reads it
            tr.arrive(32, EMPTY)
        tr._e(hz.TC_MMA, 32, STAGE, 2048)._e(hz.TC_MMA, 32, STAGE + 2048, 2048)
        if not commit_first:
            tr._e(hz.TC_COMMIT, 32, EMPTY)
    return tr.check()


def test_a_blackwell_ring_released_by_tcgen05_commit_is_clean():
    r = blackwell_ring()
    assert r.ok and not r.unchecked, str(r)


def test_a_stage_released_before_its_tcgen05_mma_completed_is_found():
    r = blackwell_ring(commit_first=True)
    assert "async-read-in-flight" in rules(r) and "tcgen05.mma operand read" in str(r), str(r)


# ---- what the checker cannot model --------------------------------------------------------------------

@pytest.mark.parametrize("src,what", [
    ("__shared__ cuda::barrier<cuda::thread_scope_block> bar;", "cuda::barrier"),
    ("namespace cg = cooperative_groups; cg::this_grid().sync();", "cooperative groups"),
    ('asm volatile("bar.arrive 1, 256;");', "raw PTX"),
    ('asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(a));', "raw PTX"),
    ("if (__syncthreads_or(flag)) return;", "bar.red"),
    ("cuda::ptx::mbarrier_arrive(&bar);", "cuda::ptx"),
])
def test_synchronisation_the_checker_cannot_model_is_named(src, what):
    assert what in hz.unmodeled("__global__ void k() {\n" + src + "\n}")


def test_code_the_preprocessor_drops_or_comments_do_not_count():
    src = ("#ifndef CUDA_BARRIER\n#define CUDA_BARRIER 0\n#endif\n#if CUDA_BARRIER\ncuda::barrier<x> b;\n#else\n"
           "int b;\n#endif\n// a cuda::barrier in a comment, bar.arrive too\n"
           'static_assert(true, "the cuda::barrier ring");\n')
    assert hz.unmodeled(src) == ""
    assert "cuda::barrier" in hz.unmodeled(src, {"CUDA_BARRIER": 1})
    assert "cuda::barrier" in hz.unmodeled("#if __CUDA_ARCH__ >= 900\ncuda::barrier<x> b;\n#endif\n")


def test_the_traced_blocks_include_the_ragged_ends_of_the_grid():
    assert hz.traced_ranges((100, 1, 1)) == [(0, 2), (98, 100)]
    assert hz.traced_ranges((10, 7, 1)) == [(0, 2), (8, 10), (68, 70)]      # first row's end; the last blocks
    assert hz.traced_ranges((3, 1, 1)) == [(0, 3)]
    assert hz.traced_ranges((8, 3, 1), (2, 1, 1)) == [(0, 8), (20, 24)]     # whole clusters
    assert hz.traced_ranges((4, 4, 1), (1, 2, 1)) == [(0, 16)]              # clusters over y: every block


def test_trace_ids_are_addresses_named_by_the_hash_of_the_bytes_found_there():
    """The device records each TMA op with its map's address and, before it, a tma.map event pairing that address
    with the hash of the map's bytes: each address gets the box of the argument whose bytes match. An address whose
    bytes match no argument falls back to parameter offsets (here: 3 maps taken, 1 used: three readings)."""
    raws = [bytes(range(i, i + 128)) for i in (0, 1, 2)]
    maps = [_tm(rows, raw) for rows, raw in zip((128, 256, 64), raws)]
    params = [(0, 128), (128, 128), (256, 128)]
    got = hz._map_readings(maps, params, {0x2080}, {0x2080: hz.map_id(raws[1])})
    assert got == [{0x2080: 32768}]
    got = hz._map_readings(maps, params, {0x2080}, {0x2080: 0xDEAD})          # bytes match no argument
    assert sorted(r[0x2080] for r in got) == [8192, 16384, 32768]
    assert hz._map_readings(maps, params, {0x2000, 0x2080}, {}) == [{0x2000: 16384, 0x2080: 32768},
                                                                    {0x2000: 32768, 0x2080: 8192}]


def test_a_trace_cut_where_a_wait_gave_up_is_checked_up_to_there():
    """A hazard build whose wait times out stops recording (fb::mbar::spin_wait): what the trace holds is still
    checked, and nothing pending at the cut is taken for pending at the block's end."""
    tr = Trace()
    tr.write(0, STAGE, 128).fence(0).store(0, STAGE, 7).bulk_commit(0)      # its wait_group never recorded
    events = hz.decode(hz.encode(tr.events))
    assert rules(hz.check(events, threads_per_block=32, maps={7: 128})) == ["async-read-at-exit"]
    assert hz.check(events, threads_per_block=32, maps={7: 128}, truncated=True).ok
    racy = ring(consumer=lambda tr, t, lap: (tr.wait(t, FULL, lap & 1), tr.arrive(t, EMPTY)))
    r = hz.check(hz.decode(hz.encode(racy.events)), threads_per_block=256, truncated=True)
    assert rules(r) == ["missing-proxy-fence"], str(r)


# ---- rule: missing-wgmma-fence -------------------------------------------------------------------------

def test_a_warpgroups_first_wgmma_without_wgmma_fence_is_found():
    """PTX ISA, wgmma.fence: required before the first wgmma.mma_async of a warpgroup."""
    def one(fence):
        tr = Trace()
        tr.wgmma(WG, STAGE, BYTES, fence=fence).wgmma_commit(WG).wgmma_wait(WG, 0)
        return tr.check()
    assert one(True).ok
    r = one(False)
    assert rules(r) == ["missing-wgmma-fence"] and r.violations[0].second.name == "wgmma.read", str(r)


# ---- rule: bulk-store-in-flight ------------------------------------------------------------------------

def test_a_tma_load_of_what_a_tma_store_has_not_finished_writing_is_found():
    """A block stores a tile with TMA and loads it back (two maps over one array): between them the store's
    thread must wait with cp.async.bulk.wait_group, not only .read (PTX ISA, cp.async.bulk.wait_group)."""
    geometry = {7: (0x7000_0000, 256, 4, 8, 16), 8: (0x7000_0000, 256, 4, 8, 16)}   # 8 x 16 floats, rows of 256 B

    def round_trip(wait, col=0):
        tr = Trace().init(0, FULL, 1)
        tr.write(0, STAGE, 512).fence(0)
        tr._e(hz.TMA_COORDS, 0, 0, 0).store(0, STAGE, 7).bulk_commit(0)
        if wait == "read":
            tr.bulk_wait_read(0, 0)
        elif wait == "all":
            tr._e(hz.BULK_WAIT, 0, 0, 0)
        tr.arrive(0, FULL, 512)._e(hz.TMA_COORDS, 0, col, 0)._e(hz.TMA_LOAD, 0, STAGE + 1024, 8, FULL, 0)
        tr.wait(0, FULL, 0)
        return hz.check(hz.decode(hz.encode(tr.events)), threads_per_block=32, maps={7: 512, 8: 512},
                        geometry=geometry)
    assert round_trip("all").ok, str(round_trip("all"))
    assert round_trip("read", col=16).ok            # another box of the array: nothing to wait for
    for wait in ("read", None):
        r = round_trip(wait)
        assert "bulk-store-in-flight" in rules(r), str(r)


# ---- every shared-memory access recorded (the instrumented PTX of a hazard build) -------------------------

def test_an_instrumented_trace_assumes_no_read_at_a_wait():
    """Without instrumentation a consumer that marks nothing is taken to read the stage after its wait; with it,
    only the recorded loads count: none, nothing to fence; one after the wait and no fence, the rule fires."""
    unfenced = lambda tr, t, lap: (tr.wait(t, FULL, lap & 1), tr.arrive(t, EMPTY))  # noqa: E731
    assert rules(ring(consumer=unfenced).check()) == ["missing-proxy-fence"]
    assert ring(consumer=unfenced).check(instrumented=True).ok
    reads = lambda tr, t, lap: (tr.wait(t, FULL, lap & 1), tr.smem(t, STAGE, 16), tr.arrive(t, EMPTY))  # noqa: E731
    assert rules(ring(consumer=reads).check(instrumented=True)) == ["missing-proxy-fence"]
    fenced = lambda tr, t, lap: (tr.wait(t, FULL, lap & 1), tr.smem(t, STAGE, 16), tr.fence(t),  # noqa: E731
                                 tr.arrive(t, EMPTY))
    assert ring(consumer=fenced).check(instrumented=True).ok


def test_a_release_before_the_reads_of_the_stage_is_found():
    """The consumer arrives on empty[s] and then reads the stage: the producer's refill overwrites it unordered."""
    early = lambda tr, t, lap: (tr.wait(t, FULL, lap & 1), tr.fence(t), tr.arrive(t, EMPTY),  # noqa: E731
                                tr.smem(t, STAGE + 64, 16))
    r = ring(laps=3, consumer=early).check(instrumented=True)
    assert "unordered-access" in rules(r), str(r)
    assert any(v.first is not None and v.first.kind == hz.SMEM_READ for v in r.violations)


def test_a_warp_event_names_each_lanes_bytes():
    ev = hz.Event(0, hz.SMEM_READ, 1, 0, 35, 0, 0x1000, 16, (-32 & 0xFFFFFFF) << 4, 0b1110)
    assert hz._Cluster.lanes(35, ev) == ((35, 0x1000), (36, 0x1000 - 32), (37, 0x1000 - 64))   # lanes 1-3
    assert hz._Cluster.lanes(35, ev._replace(d=0)) == ()


def cp_ring(wait=True, barrier=True, reader=1, pending=0):
    """Threads 0 and 1 each copy 16 bytes with cp.async, wait for their group, sync; `reader` reads both."""
    tr = Trace()
    for t in (0, 1):
        tr.cp_async(t, STAGE + 16 * t).cp_commit(t)
    for t in (0, 1):
        if wait:
            tr.cp_wait(t, pending)
        if barrier:
            tr.sync(t)
    return tr.smem(reader, STAGE, 32)


def test_a_cp_async_ring_that_waits_and_syncs_is_clean():
    r = cp_ring().check(instrumented=True)
    assert r.ok, str(r)


@pytest.mark.parametrize("bug", ["no wait_group", "no barrier", "wait_group 1"])
def test_a_read_of_a_cp_async_destination_before_its_wait_is_found(bug):
    tr = cp_ring(wait=bug != "no wait_group", barrier=bug != "no barrier", pending=1 if bug == "wait_group 1" else 0)
    r = tr.check(instrumented=True)
    assert rules(r) == ["unordered-access"], str(r)
    assert "cp.async" in r.violations[0].message


def test_a_thread_that_reads_its_own_cp_async_chunk_needs_its_own_wait():
    """Each lane reads back only its own 16 bytes (one warp event): its own wait orders it, no barrier needed;
    without the wait the read comes before the copy landed, in the same thread."""
    def own(wait):
        tr = Trace()
        for t in range(4):
            tr.cp_async(t, STAGE + 16 * t).cp_commit(t)
            if wait:
                tr.cp_wait(t, 0)
        return tr.smem(0, STAGE, 16, mask=0b1111, stride=16)
    assert own(True).check(instrumented=True).ok
    r = own(False).check(instrumented=True)
    assert rules(r) == ["unordered-access"], str(r)
    neighbour = own(True).smem(0, STAGE + 16, 16)     # lane 0 reads lane 1's chunk: lane 1's wait is not its own
    assert rules(neighbour.check(instrumented=True)) == ["unordered-access"]


def test_lanes_whose_bytes_do_not_meet_are_not_a_race():
    """A column read (stride 128) next to a copy into the gap between its lanes' bytes."""
    tr = Trace().cp_async(1, STAGE + 16).cp_commit(1)
    tr.smem(32, STAGE, 4, mask=0xFFFFFFFF, stride=128)
    assert tr.check(instrumented=True).ok


# A warp's lanes in different laps. In solution 04's gemv_ring at 10007 x 8188 (its last segment holds 255 float4, so
# lane 31 leaves the row loop one iteration early) an H200 executed a load for lanes 1-30 in stage s and lane 31,
# already in the next lap, in stage s + 1, together: one event, recorded by lane 1. Each lane's part is its own.
FULLS, EMPTIES, STAGES2 = (0x100, 0x110), (0x108, 0x118), (STAGE, STAGE + BYTES)


def lanes_a_lap_apart(recorder_ahead=False):
    """Producer thread 64 fills both stages of a two-stage ring; consumer threads 1 and 31 read them. The lane ahead
    reads its bytes of stage 0, releases it and waits for stage 1; then one event (recorded by lane 1) holds the
    behind lane's read of stage 0 and the ahead lane's read of stage 1. The behind lane releases stage 0 and the
    producer refills it."""
    tr = Trace()
    for s in (0, 1):
        tr.init(64, FULLS[s], 1).init(64, EMPTIES[s], 2)
    for t in (1, 31, 64):
        tr.sync(t)
    for s in (0, 1):
        tr.wait(64, EMPTIES[s], 1, "empty", s).arrive(64, FULLS[s], BYTES).bulk(64, STAGES2[s], BYTES, FULLS[s])
    behind, ahead = (31, 1) if recorder_ahead else (1, 31)
    for t in (1, 31):
        tr.wait(t, FULLS[0], 0, "full", 0)
    tr.smem(ahead, STAGES2[0] + 16 * ahead, 16).fence(ahead).arrive(ahead, EMPTIES[0])
    tr.wait(ahead, FULLS[1], 0, "full", 1)
    at = {behind: STAGES2[0] + 16 * behind, ahead: STAGES2[1] + 16 * ahead}
    tr.smem(1, at[1], 16, mask=1 << 1 | 1 << 31, stride=at[31] - at[1])      # stride: from one set lane to the next
    tr.fence(behind).arrive(behind, EMPTIES[0])
    tr.wait(64, EMPTIES[0], 0, "empty", 0).arrive(64, FULLS[0], BYTES)
    return tr.bulk(64, STAGES2[0], BYTES, FULLS[0])


@pytest.mark.parametrize("recorder_ahead", [False, True], ids=["the lane ahead reads", "the recording lane is ahead"])
def test_lanes_of_one_warp_event_a_lap_apart_are_each_checked_at_their_own_point(recorder_ahead):
    """Checked with the recording lane's clock, the first case was a read of stage 1 before its copy landed and the
    second a refill of stage 0 before its last read: both false."""
    tr = lanes_a_lap_apart(recorder_ahead)
    assert hz._Cluster.lanes(1, hz.decode(hz.encode(tr.events))[-6]) == (
        (1, STAGES2[1] + 16 if recorder_ahead else STAGES2[0] + 16), (31, STAGES2[0] + 496 if recorder_ahead
                                                                      else STAGES2[1] + 496))
    r = tr.check(threads=96, instrumented=True)
    assert r.ok, str(r)


def filled_for_two_lanes(arrivals=2, waiters=(1, 31)):
    """Producer thread 64 fills the stage (EMPTY counts `arrivals`); the `waiters` among lanes 1 and 31 wait for it."""
    tr = Trace().init(64, FULL, 1).init(64, EMPTY, arrivals)
    for t in (1, 31, 64):
        tr.sync(t)
    tr.wait(64, EMPTY, 1, "empty").arrive(64, FULL, BYTES).bulk(64, STAGE, BYTES, FULL)
    for t in waiters:
        tr.wait(t, FULL, 0)
    return tr


def test_a_lane_that_did_not_wait_is_found_though_the_lane_that_recorded_the_event_did():
    tr = filled_for_two_lanes(waiters=(1,))     # lane 31 does not wait
    tr.smem(1, STAGE + 16, 16, mask=1 << 1 | 1 << 31, stride=16 * 30)
    r = tr.check(threads=96, instrumented=True)
    assert rules(r) == ["unordered-access"], str(r)
    v = r.violations[0]
    assert (v.second.thread, v.first.name) == (31, "cp.async.bulk"), str(r)
    assert f"[{STAGE + 16 * 31:#x}, +16)" in v.message, v.message    # lane 31's bytes, not the event's first


def two_lanes_read_a_stage(fence=(1, 31), arrive=(1, 31)):
    """Lanes 1 and 31 wait for the stage and read their bytes of it (one event); the threads in `fence` fence their
    reads, those in `arrive` release the stage (EMPTY counts them); the producer refills it."""
    tr = filled_for_two_lanes(arrivals=len(arrive))
    tr.smem(1, STAGE + 16, 16, mask=1 << 1 | 1 << 31, stride=16 * 30)
    for t in fence:
        tr.fence(t)
    for t in arrive:
        tr.arrive(t, EMPTY)
    tr.wait(64, EMPTY, 0, "empty").arrive(64, FULL, BYTES)
    return tr.bulk(64, STAGE, BYTES, FULL).check(threads=96, instrumented=True)


def test_each_lane_of_a_warp_read_must_fence_and_release_its_own_part():
    """The recording lane's fence and arrive do not order the other lane's read (the checker before 0c7a0cb missed
    both); the report names the other lane and its bytes."""
    assert two_lanes_read_a_stage().ok
    r = two_lanes_read_a_stage(fence=(1,))
    assert rules(r) == ["missing-proxy-fence"] and r.violations[0].first.thread == 31, str(r)
    assert f"[{STAGE + 16 * 31:#x}, +16)" in r.violations[0].message, str(r)
    r = two_lanes_read_a_stage(arrive=(1,))
    assert rules(r) == ["unordered-access"] and r.violations[0].first.thread == 31, str(r)


def test_a_write_retires_only_the_lanes_of_a_warp_read_it_meets():
    """Lanes 1 and 31 read 16 bytes each of one page in one event; only lane 1 releases the stage. The producer's
    write of lane 1's bytes is ordered; its cp.async into lane 31's bytes is not, and is found: the first write
    replaces lane 1's part only (the replay used to drop the whole event)."""
    tr = filled_for_two_lanes(arrivals=1)
    tr.smem(1, STAGE + 16, 16, mask=1 << 1 | 1 << 31, stride=16)
    tr.fence(1).arrive(1, EMPTY).wait(64, EMPTY, 0, "empty").cp_async(64, STAGE + 16)
    assert tr.check(threads=96, instrumented=True).ok
    r = tr.cp_async(64, STAGE + 32).check(threads=96, instrumented=True)
    assert rules(r) == ["unordered-access"] and r.violations[0].first.thread == 31, str(r)


def cp_mbar_ring(noinc: bool, arrive=True, laps=2):
    """Producer thread 0 copies a stage with cp.async and lets FULL track them (cp.async.mbarrier.arrive); thread
    1 waits on FULL, reads, fences nothing (cp.async is generic proxy), releases EMPTY."""
    tr = Trace().init(0, FULL, 1 if noinc else 1).init(0, EMPTY, 1)
    tr.sync(0).sync(1)
    for lap in range(laps):
        tr.wait(0, EMPTY, (lap & 1) ^ 1, "empty")
        tr.cp_async(0, STAGE).cp_async(0, STAGE + 16)
        if arrive:
            tr.cp_mbar_arrive(0, FULL, noinc)
        if not noinc or not arrive:
            tr.arrive(0, FULL)
        tr.wait(1, FULL, lap & 1).smem(1, STAGE, 32).arrive(1, EMPTY)
    return tr


@pytest.mark.parametrize("noinc", [True, False])
def test_cp_async_mbarrier_arrive_completes_the_copies_on_the_phase(noinc):
    r = cp_mbar_ring(noinc).check(instrumented=True)
    assert r.ok, str(r)


def test_the_producers_final_wait_all_does_not_hide_the_phase_that_tracked_its_copies():
    """Measured on an H100: the producer's cp.async.wait_all at its end came before the consumers' last reads in the
    trace; their copies stay complete for the waiters of the phase that tracked them."""
    tr = Trace().init(0, FULL, 1).init(0, EMPTY, 1).sync(0).sync(1)
    tr.cp_async(0, STAGE).cp_async(0, STAGE + 16).cp_mbar_arrive(0, FULL, True).cp_wait(0, hz.ALL)
    tr.wait(1, FULL, 0).smem(1, STAGE, 32)
    r = tr.check(instrumented=True)
    assert r.ok, str(r)
    untracked = Trace().init(0, FULL, 1).sync(0).sync(1)
    untracked.cp_async(0, STAGE).arrive(0, FULL).cp_wait(0, hz.ALL).wait(1, FULL, 0).smem(1, STAGE, 16)
    assert rules(untracked.check(instrumented=True)) == ["unordered-access"]


def _gather_for_wgmma(lane_fences: bool, laps=2):
    """Chapter 10's gathers read by wgmma: lane 0 copies a stage with cp.async; the consumer warpgroup (thread WG)
    waits on FULL and reads the stage with wgmma (async proxy), then releases EMPTY. lane_fences=False: the stage's
    barrier tracks the copies (cp.async.mbarrier.arrive.noinc) and the consumer fences after its wait, as
    fb/flash_decode.cuh does; True: the lane waits for its own copies (cp.async.wait_group), fences, then
    arrives."""
    tr = Trace().init(0, FULL, 1).init(0, EMPTY, 1).sync(0).sync(WG)
    for lap in range(laps):
        tr.wait(0, EMPTY, (lap & 1) ^ 1, "empty")
        tr.cp_async(0, STAGE).cp_async(0, STAGE + 16)
        if lane_fences:
            tr.cp_commit(0).cp_wait(0, 0).fence(0).arrive(0, FULL)
        else:
            tr.cp_mbar_arrive(0, FULL, True)
        tr.wait(WG, FULL, lap & 1)
        if not lane_fences:
            tr.fence(WG)
        tr.wgmma(WG, STAGE, 32).wgmma_commit(WG).wgmma_wait(WG, 0).arrive(WG, EMPTY)
    return tr


def test_a_gathered_stage_read_by_wgmma_needs_the_fence_in_the_lane_that_copied():
    """PTX ISA, membar/fence: a fence orders the memory accesses of the thread that executes it. The cp.async
    writes are the lane's; a fence the consumer executes after acquiring the stage orders only the consumer's own
    accesses, so the checker names missing-proxy-fence. The lane's own fence after its cp.async.wait_group, before
    the arrive that hands the stage over, is on the path."""
    r = _gather_for_wgmma(lane_fences=False).check(instrumented=True)
    assert rules(r) == ["missing-proxy-fence"], str(r)
    r = _gather_for_wgmma(lane_fences=True).check(instrumented=True)
    assert r.ok, str(r)


def test_a_phase_that_does_not_track_the_cp_async_is_found():
    r = cp_mbar_ring(False, arrive=False).check(instrumented=True)
    assert rules(r) == ["unordered-access"], str(r)


def test_classify_names_the_shared_memory_accesses_of_ptx():
    from feedbeast.hazards.instrument import classify
    cases = {"ld.shared.v4.f32": ("shared", 16, False, 0), "st.shared::cluster.u32": ("cluster", 4, True, 0),
             "ld.volatile.shared.u16": ("shared", 2, False, 0), "atom.shared.add.f32": ("shared", 4, True, 0),
             "red.shared.add.u64": ("shared", 8, True, 0), "st.b128": ("generic", 16, True, 0),
             "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16": ("shared", 16, False, 4),
             "stmatrix.sync.aligned.m8n8.x2.shared.b16": ("shared", 16, True, 2),
             "ld.shared.v2.bf16x2": ("shared", 8, False, 0)}
    for op, want in cases.items():
        a = classify(op)
        assert (a.space, a.nbytes, a.write, a.matrices) == want, op
    for op in ("ld.global.f32", "ld.param.u64", "st.async.shared::cluster.mbarrier::complete_tx::bytes.u32",
               "cp.async.cg.shared.global", "ld.global.nc.v4.u32", "st.local.u32", "mov.u32"):
        assert classify(op) is None, op


INSTRUMENT = r"""
#include <fb/cp_async.cuh>
extern "C" __global__ void k(const float* x, float* y) {
  __shared__ __align__(16) float s[256];
  s[threadIdx.x] = x[threadIdx.x];
  fb::cp_async_cg16(&s[4 * (threadIdx.x % 64)], x);
  fb::cp_async_wait_all();
  __syncthreads();
  float v = s[(threadIdx.x + 1) % 256];
  float* p = (threadIdx.x & 1) ? s : y;
  p[threadIdx.x] = v;
  atomicAdd(&s[0], 1.0f);
  y[threadIdx.x] = v + s[3];
}
"""


def test_the_instrumented_ptx_records_every_shared_access_with_its_line():
    from feedbeast.hazards.instrument import instrument, ptx_of
    mod = fb.compile(INSTRUMENT, "sm_90a", hazards=True, name="k.cu")
    ptx = ptx_of(mod)
    res = instrument(ptx, "k.cu")
    assert res.skipped == []
    # the source lines of st s[...] (5), ld s[...] (9), the generic store through p (11), atomicAdd (12), ld s[3] (13)
    lines = [int(m) for m in re.findall(r"st\.param\.b32 \[fbz_p2\], (\d+);", res)]
    assert sorted(lines) == [5, 9, 11, 12, 13], lines
    assert res.count("call fb_hz_generic") == 1 and res.count("call fb_hz_shared") == 4
    body = res.split("\n")
    for i, text in enumerate(body):      # each call sits right before the access it records
        if text.strip().startswith("call fb_hz_"):
            nxt = next(t for t in body[i + 1:] if t.strip() and t.strip() != "}")
            assert re.search(r"\b(ld|st|atom|red)\.", nxt), nxt
    with pytest.raises(ValueError, match="no fb_hz_"):
        instrument(ptx.replace("fb_hz_", "xx_hz_"), "k.cu")


def test_a_raw_cp_async_mbarrier_arrive_is_modeled_but_a_raw_cp_async_is_not():
    arrive = 'asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" :: "r"(bar));'
    copy = 'asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "r"(d), "l"(s));'
    assert hz.unmodeled(arrive) == ""
    assert "raw PTX" in hz.unmodeled(arrive + "\n" + copy)


# ---- wgmma registers: what ptxas says of the normal build ---------------------------------------------------

WAIT_05 = "  fb::wgmma::wait_group<0>();\n  fb::wgmma::fence_operand(acc[0]);"
MMA_05 = "    mma_stage(a_tile, a_tile + TILE_BYTES, acc, k > 0);\n"
REGISTER_PLANTS = {
    "the final wait_group<0> removed: the epilogue reads accumulators in flight": (
        (WAIT_05, "  fb::wgmma::fence_operand(acc[0]);"), "wgmma-register-in-flight"),
    "an accumulator scaled between the wgmma and its wait": (
        (MMA_05, MMA_05 + "    acc[0][0] *= 0.5f;\n"), "wgmma-register-in-flight"),
    "an accumulator tested between the wgmma and its wait": (
        (MMA_05, MMA_05 + "    if (acc[1][3] > 1e30f) C[0] = 1.f;\n"), "wgmma-register-in-flight"),
}


@pytest.mark.parametrize("name", list(REGISTER_PLANTS))
def test_a_wgmma_register_touched_in_flight_is_found(name):
    from feedbeast.course.notebook import load
    (old, new), rule = REGISTER_PLANTS[name]
    c = load(ROOT / "chapters/05-tma.ipynb").cuda("gemm")
    assert c.source.count(old) == 1
    mod = fb.compile(c.source.replace(old, new), "sm_90a", defines=c.defines, name="gemm.cu")
    found = hz.register_violations(mod, "gemm_tma_wgmma")
    assert rule in {v.rule for v in found}, mod.log
    assert "ptxas:" in str(found[0].describe())
    assert hz.register_violations(mod, "another_kernel") == []     # ptxas names the function it speaks of


def test_register_hazards_reads_each_ptxas_wording():
    from feedbeast.hazards.registers import register_hazards
    log = ("ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non "
           "wgmma instructions reading accumulator registers of  a wgmma between start and end of the pipeline stage "
           "in the function 'k'\n"
           "ptxas info    : (C7519) warpgroup.arrive is injected in around line 96 by compiler to allow use of "
           "registers in GMMA in function 'k'\n"
           "ptxas info    : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized due to the "
           "presence of Extern calls in the function 'k'\n")
    assert [r for r, _, _ in register_hazards(log, "k")] == ["wgmma-register-in-flight", "missing-wgmma-fence"]
    assert register_hazards(log, "j") == []


WGMMA_KERNELS = [("chapters/05-tma.ipynb", "gemm"), ("chapters/06-warp-specialization.ipynb", None),
                 ("chapters/07-capstone-gemm.ipynb", None), ("chapters/09-attention.ipynb", None),
                 ("solutions/06-warp-specialized-gemm.ipynb", None), ("solutions/07-persistent-gemm.ipynb", None),
                 ("solutions/09-sliding-window-attention.ipynb", None)]


@pytest.mark.parametrize("notebook, cell", WGMMA_KERNELS)
def test_the_wgmma_kernels_as_shipped_touch_no_register_in_flight(notebook, cell):
    import json
    from feedbeast.course.notebook import load
    nb = load(ROOT / notebook)
    sources = ["".join(c["source"]) for c in json.loads((ROOT / notebook).read_text())["cells"]]
    cells = [cell] if cell else [re.search(r"--name\s+(\S+)", s.split("\n", 1)[0]).group(1) for s in sources
                                 if s.startswith("%%cuda") and "wgmma" in s]
    assert cells
    for cid in cells:
        c = nb.cuda(cid)
        mod = fb.compile(c.source, "sm_90a", defines=c.defines, name=f"{cid}.cu")
        assert [v.rule for k in mod.kernel_names for v in hz.register_violations(mod, k)] == [], (cid, mod.log)


# ---- one mbarrier phase model: the replay's barriers are feedbeast.sim.mbarrier's --------------------------

def test_the_replay_follows_the_phase_model_of_sim_mbarrier():
    from feedbeast.sim import MBarrier
    tr = Trace().init(0, FULL, 2).sync(0).sync(1)
    tr.arrive(0, FULL, 4096).bulk(0, STAGE, 1024, FULL)       # one of two arrivals; 1 KB of 4 KB landed
    cl = hz._Cluster(256, [0], {}, lambda v: None)
    for ev in hz.decode(hz.encode(tr.events)):
        cl.step(ev, 0)
    model = MBarrier("full", 2)
    model.arrive_expect_tx(4096)
    model.complete_tx(1024)
    b = cl.barriers[(0, FULL)]
    assert b.state == model.state() and b.phase == model.phase == 0
    cl.step(hz.Event(99, hz.BULK_LOAD, 9, 0, 0, 0, STAGE + 1024, 3072, FULL, 0), 0)
    cl.step(hz.Event(100, hz.MBAR_ARRIVE, 9, 0, 1, 0, FULL, 0, 0, 0), 0)
    model.complete_tx(3072)
    model.arrive()
    assert b.state == model.state() and b.phase == model.phase == 1


def test_an_arrival_beyond_the_count_while_bytes_are_due_is_found():
    """All arrivals are in and the phase waits for its bytes: one more arrival is undefined (PTX ISA: mbarrier)."""
    tr = Trace().init(0, FULL, 1).sync(0).sync(1)
    tr.arrive(0, FULL, 4096).arrive(1, FULL)
    r = tr.check()
    assert "arrival-count" in rules(r), str(r)


# ---- chapter 10: the TMA reduce, distributed shared memory, the tensormap proxy, griddepcontrol ------------

C_PTR = 0x7000_0000         # a global array: 8 rows x 16 floats, rows of 256 B (the reduce's destination)


def reduce_epilogue(wait=("read",), rewrite_at=None, fence=True, load_back=False):
    """Two threads write a partial tile (ordinary stores), each fences, __syncthreads; thread 0 adds it into
    global memory with cp.reduce.async.bulk (a = the staging tile, c/d = the destination), commits, waits; then
    (rewrite_at: after which wait) rewrites the staging tile, and (load_back) loads the destination back by TMA."""
    tr = Trace().init(0, FULL, 1)
    for t in (0, 1):
        tr.write(t, STAGE + 256 * t, 256)
        if fence:
            tr.fence(t)
        tr.sync(t)
    tr._e(hz.BULK_REDUCE, 0, STAGE, 512, C_PTR, 0).bulk_commit(0)
    if rewrite_at == "before":
        tr.write(0, STAGE, 64)
    for w in wait:
        if w == "read":
            tr.bulk_wait_read(0, 0)
        elif w == "all":
            tr._e(hz.BULK_WAIT, 0, 0, 0)
    if rewrite_at == "after":
        tr.write(0, STAGE, 64)
    if load_back:
        tr.arrive(0, FULL, 512)._e(hz.TMA_COORDS, 0, 0, 0)._e(hz.TMA_LOAD, 0, STAGE + 1024, 8, FULL, 0)
        tr.wait(0, FULL, 0)
    return hz.check(hz.decode(hz.encode(tr.events)), threads_per_block=32, maps={8: 512},
                    geometry={8: (C_PTR, 256, 4, 2, 64)})


def test_a_tma_reduce_waited_for_is_clean():
    assert reduce_epilogue().ok, str(reduce_epilogue())
    assert reduce_epilogue(rewrite_at="after").ok
    r = reduce_epilogue(wait=("all",), load_back=True)
    assert r.ok, str(r)


def test_a_tma_reduce_source_rewritten_before_its_read_wait_is_found():
    """cp.reduce.async.bulk reads its shared-memory source in the async proxy until cp.async.bulk.wait_group.read
    (PTX ISA: cp.reduce.async.bulk, cp.async.bulk.wait_group): rewriting the tile before that is a race."""
    r = reduce_epilogue(rewrite_at="before")
    assert rules(r) == ["async-read-in-flight"] and "TMA reduce" in str(r), str(r)


def test_a_block_that_ends_while_its_tma_reduce_still_reads_is_found():
    r = reduce_epilogue(wait=())
    assert rules(r) == ["async-read-at-exit"] and r.violations[0].second.name == "cp.reduce.async.bulk", str(r)


def test_a_tma_load_of_what_a_tma_reduce_has_not_finished_writing_is_found():
    """The reduce's global writes complete at cp.async.bulk.wait_group without .read; .read only frees the source."""
    r = reduce_epilogue(wait=("read",), load_back=True)
    assert rules(r) == ["bulk-store-in-flight"] and "TMA reduce wrote" in str(r), str(r)


def test_a_tma_reduce_of_stores_without_the_writers_proxy_fence_is_found():
    r = reduce_epilogue(fence=False)
    assert rules(r) == ["missing-proxy-fence"], str(r)


def dsmem(first_sync=True, last_sync=True, owner_rewrites=False, warps=False, leave_early=()):
    """Chapter 10's cluster reduction in two CTAs of 32 threads: each CTA's thread 1 writes its partial (st.shared),
    barrier.cluster; thread 0 of each reads the peer's partial through .shared::cluster (the address carries the
    peer's rank above bit 24), barrier.cluster again before the CTAs exit. `warps`: lanes 0-3 write and read 16 bytes
    each, one event per warp (recorded by lane 0); each lane passes the barrier on its own. `leave_early`: lanes
    that skip the last barrier."""
    ev = []
    lanes = (0, 1, 2, 3) if warps else (0, 1)
    mask, stride = (0b1111, 16 << 4) if warps else (0, 0)

    def e(kind, rank, t, a=0, b=0, c=0, d=0):
        ev.append((kind, len(ev) + 1, rank, t, rank, a, b, c, d))
    for r in (0, 1):
        e(hz.SMEM_WRITE, r, 0 if warps else 1, STAGE, 16, stride, mask)
    if first_sync:
        for r in (0, 1):
            for t in lanes:
                e(hz.CLUSTER_SYNC, r, t)
    for r in (0, 1):
        e(hz.SMEM_READ, r, 0, (1 - r) << 24 | STAGE, 16, 1 | stride, mask)
    if owner_rewrites:
        e(hz.SMEM_WRITE, 1, 1, STAGE, 16)
    if last_sync:
        for r in (0, 1):
            for t in lanes:
                if t not in leave_early:
                    e(hz.CLUSTER_SYNC, r, t)
    return hz.check(hz.decode(hz.encode(ev)), threads_per_block=32, grid=(2, 1, 1), cluster=(2, 1, 1),
                    instrumented=True)


def test_a_cluster_reduction_ordered_by_barrier_cluster_is_clean():
    assert dsmem().ok, str(dsmem())


def test_each_lane_of_a_warp_event_is_past_the_barriers_it_passed():
    """A lane's barrier.cluster wait is taken at its next event, which may be a warp event another lane records: its
    part of that event comes after the barrier (lab 10's cluster sum on an H200). Also after a bar.sync: every lane
    reads lane 1's cp.async chunk once lane 1 waited for it and all four synced."""
    assert dsmem(warps=True).ok, str(dsmem(warps=True))
    r = dsmem(warps=True, first_sync=False)
    assert rules(r) == ["unordered-access"] and r.violations[0].second.thread == 0, str(r)
    tr = Trace()
    tr.cp_async(1, STAGE + 16).cp_commit(1).cp_wait(1, 0)
    for t in range(4):
        tr.sync(t)
    tr.smem(0, STAGE + 16, 16, mask=0b1111, stride=0)
    assert tr.check(threads=32, instrumented=True).ok


def test_a_lane_whose_peer_access_is_not_ordered_before_the_exit_is_named():
    """Lanes 2 and 3 leave without the last barrier.cluster: their remote reads may outlive the peer CTA."""
    r = dsmem(warps=True, leave_early=(2, 3))
    assert rules(r) == ["peer-access-at-exit"], str(r)
    assert r.violations[0].second.thread == 2 and f"[{STAGE + 32:#x}, +16)" in r.violations[0].message, str(r)


def test_a_peer_read_before_the_owners_write_is_ordered_is_found():
    """Ordinary accesses of one CTA are racecheck's business, but a .shared::cluster access of a peer CTA is the
    checker's: without barrier.cluster arrive.release / wait.acquire the peer's write is not ordered before it."""
    r = dsmem(first_sync=False)
    assert rules(r) == ["unordered-access"] and "shared::cluster" in str(r), str(r)
    r = dsmem(owner_rewrites=True)          # the owner overwrites its partial while the peer may still read it
    assert rules(r) == ["unordered-access"] and "write after read" in str(r), str(r)


def test_a_peer_read_not_ordered_before_the_owner_exits_is_found():
    r = dsmem(last_sync=False)
    assert rules(r) == ["peer-access-at-exit"] and "rank 1" in str(r), str(r)


def dsmem_mbarrier(cluster_wait=True, relaxed=False):
    """CTA 1's thread writes into CTA 0's shared memory (st.shared::cluster) and arrives on CTA 0's barrier (a
    remote arrive); CTA 0's thread waits on it and reads what was written."""
    ev = []

    def e(kind, rank, t, a=0, b=0, c=0, d=0):
        ev.append((kind, len(ev) + 1, rank, t, rank, a, b, c, d))
    e(hz.MBAR_INIT, 0, 0, FULL, 1)
    for r in (0, 1):
        e(hz.CLUSTER_SYNC, r, 0)
    e(hz.SMEM_WRITE, 1, 0, STAGE, 16, 1)                 # rank 0's window: the address's high bits are 0
    e(hz.MBAR_ARRIVE, 1, 0, FULL, 0, 1, int(relaxed))   # c = 1 + rank 0: remote
    e(hz.MBAR_WAIT, 0, 0, FULL, 0 | (2 if cluster_wait else 0) | 1 << 8)
    e(hz.SMEM_READ, 0, 0, STAGE, 16)
    return hz.check(hz.decode(hz.encode(ev)), threads_per_block=32, grid=(2, 1, 1), cluster=(2, 1, 1),
                    instrumented=True)


def test_a_peer_write_ordered_by_a_cluster_scope_mbarrier_is_clean():
    assert dsmem_mbarrier().ok, str(dsmem_mbarrier())


def test_a_peer_write_acquired_at_cta_scope_or_released_relaxed_is_found():
    assert "mbarrier-scope" in rules(dsmem_mbarrier(cluster_wait=False)), str(dsmem_mbarrier(cluster_wait=False))
    r = dsmem_mbarrier(relaxed=True)        # nothing orders the peer's write: not the read, not CTA 0's exit
    assert rules(r) == ["peer-access-at-exit", "unordered-access"] and "shared::cluster" in str(r), str(r)


MAP = 0x9000_0100          # a tensor map in global memory (its address's low 32 bits: the id the trace uses)


def tensormap(writer=1, publish=False, release=True, release_late=False, sync=True, acquire=True,
              acquire_early=False):
    """Writer rewrites the map in global memory (tensormap.replace .global, or tensormap.cp_fenceproxy: a copy and
    a release fence), bar.sync, then thread 0 acquires the map and loads a box through it."""
    tr = Trace().init(0, FULL, 1)
    if acquire_early:
        tr._e(hz.FENCE_TENSORMAP_ACQUIRE, 0, MAP)
    if publish:
        tr._e(hz.TENSORMAP_PUBLISH, writer, MAP, 0x1234)
    else:
        tr._e(hz.TENSORMAP_REPLACE, writer, MAP, 0x1111, 0x1234, 1)
        if release and not release_late:
            tr._e(hz.FENCE_TENSORMAP_RELEASE, writer)
    if sync:
        tr.sync(0).sync(writer) if writer != 0 else tr
    if release_late:
        tr._e(hz.FENCE_TENSORMAP_RELEASE, writer)
    if acquire and not acquire_early:
        tr._e(hz.FENCE_TENSORMAP_ACQUIRE, 0, MAP)
    tr.arrive(0, FULL, 1024)._e(hz.TMA_LOAD, 0, STAGE, MAP, FULL, 0).wait(0, FULL, 0)
    return tr.check(threads=64, maps={MAP: 1024})


def test_a_tensor_map_released_and_acquired_on_the_ordering_path_is_clean():
    for kw in (dict(), dict(publish=True), dict(writer=0), dict(writer=0, publish=True), dict(writer=0, sync=False)):
        r = tensormap(**kw)
        assert r.ok, (kw, str(r))


@pytest.mark.parametrize("bug", ["no release", "release after the barrier", "no acquire", "acquire before the write",
                                 "publish, no acquire", "same thread, no release"])
def test_a_tensor_map_used_without_the_tensormap_proxy_fences_is_found(bug):
    """PTX ISA, membar/fence (fence.proxy.tensormap::generic) and tensormap.replace: a map written through the
    generic proxy is seen by the TMA unit's reads of maps only through a release fence by the writer after the write
    and an acquire fence of that map by the user, on the path that orders them."""
    kw = {"no release": dict(release=False), "release after the barrier": dict(release_late=True),
          "no acquire": dict(acquire=False), "acquire before the write": dict(acquire_early=True),
          "publish, no acquire": dict(publish=True, acquire=False),
          "same thread, no release": dict(writer=0, release=False)}[bug]
    r = tensormap(**kw)
    assert rules(r) == ["missing-tensormap-fence"], str(r)


def test_a_tensor_map_whose_write_is_not_ordered_before_its_use_is_found():
    r = tensormap(sync=False)
    assert rules(r) == ["unordered-access"] and "tensor map" in str(r), str(r)


def test_a_map_rewritten_in_place_on_the_device_keeps_its_arguments_box():
    """tensormap.replace of the global address keeps the box: the map found at an address after the rewrite (its
    bytes hash to `after`) has the box of the argument it was copied from, through any chain of rewrites."""
    raw = bytes(range(5, 133))
    arg = _tm(128, raw)
    h0 = hz.map_id(raw)
    got = hz._map_readings([arg], None, {0x5000}, {0x5000: {0xBEEF, 0xCAFE}}, {(h0, 0xBEEF), (0xBEEF, 0xCAFE)})
    assert got == [{0x5000: 16384}]
    assert hz._map_readings([arg], None, {0x5000}, {0x5000: {0xBEEF}}, ()) == [{}]      # without it: unknown


def test_griddepcontrol_is_named_as_not_checked_never_a_silent_pass():
    """griddepcontrol orders this grid against the one before or after it in the stream (PTX ISA: griddepcontrol);
    one launch's trace cannot see the other, so the report says so while the rest of the launch is checked."""
    r = reduce_epilogue()
    assert r.ok and not r.partly
    tr = Trace().init(0, FULL, 1)._e(hz.GRIDDEP_LAUNCH, 0)._e(hz.GRIDDEP_WAIT, 0)
    tr.write(0, STAGE, 64)
    r = tr.check(threads=32)
    assert r.ok and "griddepcontrol.wait" in r.partly and "not checked" in str(r), str(r)
    tr.store(0, STAGE, 7).bulk_commit(0)       # a bug beside it is still reported
    r = tr.check(threads=32, maps={7: 64})
    assert "missing-proxy-fence" in rules(r) and "griddepcontrol" in str(r), str(r)


CH10 = [("gemv", {"RED": 1, "PDL": 1}, ("cp.reduce.async.bulk", "cp.async.bulk.commit_group",
                                        "cp.async.bulk.wait_group.read", "griddepcontrol.launch_dependents",
                                        "griddepcontrol.wait", "fence.proxy.async", "tma.load", "tma.map")),
        ("gemv", {"RED": 0}, ("barrier.cluster", "tma.load", "mbarrier.wait")),
        ("paged", {"MODE": 2}, ("tensormap.replace", "tensormap.cp_fenceproxy", "fence.proxy.tensormap.acquire",
                                "tma.load", "tma.map", "fence.proxy.async")),
        ("paged", {"MODE": 0}, ("cp.async", "mbarrier.wait"))]


def _ch10_build(cell, defines, hazards):
    from feedbeast.course.notebook import load
    c = load(ROOT / "chapters/10-decode.ipynb").cuda(cell)
    extra = {"FB_HAZARDS": 1, "FB_DEBUG": 1} if hazards else {}
    return c, fb.compile(c.source, "sm_90a", defines={**c.defines, **defines, **extra}, name=f"{cell}.cu")


@pytest.mark.parametrize("cell, defines, kinds", CH10)
def test_chapter_10s_hazard_builds_record_every_event_the_rules_need(cell, defines, kinds):
    """The hazard builds of chapter 10's kernels (compiled here, instrumented as a GPU run would be) record the TMA
    reduce, griddepcontrol, barrier.cluster, the tensor-map rewrite, publish and acquire; the DSMEM reads and the
    cp.async.mbarrier.arrive of the gathers are recorded by the instrumented PTX, each right before its instruction."""
    from feedbeast.hazards.instrument import instrument, ptx_of
    _, mod = _ch10_build(cell, defines, True)
    ptx = ptx_of(mod)
    recorded = {hz.KINDS[int(k)] for k in re.findall(r"\[param0\+0\], (\d+);\s*\n(?:.*\n){0,14}?\s*call\.uni\s*\n\s*"
                                                     r"_ZN2fb6hazard6recordE", ptx) if int(k) < len(hz.KINDS)}
    assert set(kinds) <= recorded, sorted(set(kinds) - recorded)
    res = instrument(ptx, f"{cell}.cu")
    assert res.skipped == [] and res.sites > 0
    body = [t.strip() for t in res.split("\n")]
    calls = [i for i, t in enumerate(body) if t.startswith("call fb_hz_")]
    after = {next(t for t in body[i + 1:] if t and t != "}").split()[0]: body[i - 5:i] for i in calls}
    if cell == "gemv" and defines.get("RED") == 0:       # ld.shared::cluster: info flags a .shared::cluster address
        (ld, info), = [(op, ctx) for op, ctx in after.items() if op.startswith("ld.shared::cluster")]
        assert any(f"[fbz_p1], {16 | 1 << 17};" in t for t in info), info
    if cell == "paged" and defines.get("MODE") == 0:
        assert any(op.startswith("cp.async.mbarrier.arrive") for op in after), sorted(after)


@pytest.mark.parametrize("cell, defines", [("gemv", {"RED": 1, "PDL": 1}), ("paged", {"MODE": 2})])
def test_chapter_10s_normal_builds_are_unchanged_by_the_hooks(cell, defines, tmp_path, monkeypatch):
    """The hooks of the TMA reduce, griddepcontrol and the tensor-map rewrite leave the normal build's SASS as it
    was."""
    import importlib
    fbc = importlib.import_module("feedbeast.compile")
    c, with_hooks = _ch10_build(cell, defines, False)
    monkeypatch.setattr(fbc, "INCLUDE_DIR", _headers_without_hooks(tmp_path))
    without = fb.compile(c.source, "sm_90a", defines={**c.defines, **defines}, use_cache=False, name=f"{cell}.cu")
    for k in with_hooks.kernel_names:
        assert _instructions(with_hooks, k) == _instructions(without, k), k


def dsmem_split(arrive=hz.CLUSTER_ARRIVE, relaxed=False, read_before_wait=False):
    """The first barrier.cluster of dsmem() in halves (fb::cluster_arrive / cluster_wait): each CTA's writer arrives
    after its write, each reader waits before reading the peer's partial (or, planted, reads between its arrive and
    its wait, or the writers arrive .relaxed, which orders nothing)."""
    ev = []

    def e(kind, rank, t, a=0, b=0, c=0, d=0):
        ev.append((kind, len(ev) + 1, rank, t, rank, a, b, c, d))
    for r in (0, 1):
        e(hz.SMEM_WRITE, r, 1, STAGE, 16)
        e(arrive, r, 1, 0, int(relaxed))
    for r in (0, 1):
        e(hz.CLUSTER_ARRIVE, r, 0)
        if read_before_wait:
            e(hz.SMEM_READ, r, 0, (1 - r) << 24 | STAGE, 16, 1)
        e(hz.CLUSTER_WAIT, r, 0)
        if not read_before_wait:
            e(hz.SMEM_READ, r, 0, (1 - r) << 24 | STAGE, 16, 1)
    e(hz.CLUSTER_WAIT, 0, 1)
    e(hz.CLUSTER_WAIT, 1, 1)
    for r in (0, 1):                        # the exit barrier
        for t in (0, 1):
            e(hz.CLUSTER_SYNC, r, t)
    return hz.check(hz.decode(hz.encode(ev)), threads_per_block=32, grid=(2, 1, 1), cluster=(2, 1, 1),
                    instrumented=True)


def test_barrier_cluster_in_halves_orders_what_is_released_before_the_arrive():
    assert dsmem_split().ok, str(dsmem_split())
    for kw in (dict(relaxed=True), dict(read_before_wait=True)):
        r = dsmem_split(**kw)
        assert rules(r) == ["unordered-access"] and "shared::cluster" in str(r), (kw, str(r))


def test_a_tensor_map_changed_by_writes_the_trace_does_not_record_is_named_as_not_checked():
    """Ordinary stores to a map in global memory are not traced; the hash of the map's bytes before each TMA copy
    shows that it changed, and the report says its fences were not checked instead of passing in silence."""
    def two_uses(publish_between):
        tr = Trace().init(0, FULL, 1)
        for lap, h in enumerate((0x1111, 0x2222)):
            if publish_between and lap == 1:
                tr._e(hz.TENSORMAP_PUBLISH, 0, MAP, h)._e(hz.FENCE_TENSORMAP_ACQUIRE, 0, MAP)
            tr._e(hz.TMA_MAP, 0, MAP, h).arrive(0, FULL, 1024)._e(hz.TMA_LOAD, 0, STAGE, MAP, FULL, 0)
            tr.wait(0, FULL, lap & 1)
        return tr.check(threads=32, maps={MAP: 1024}, instrumented=True)
    r = two_uses(False)
    assert r.ok and "tensor map(s)" in r.partly and hex(MAP) in r.partly and "not checked" in str(r), str(r)
    r = two_uses(True)
    assert r.ok and not r.partly, str(r)


WRAPPERS = r"""
#include <fb/cluster.cuh>
#include <fb/fence.cuh>
extern "C" __global__ void __cluster_dims__(2, 1, 1) k(float* out) {
  __shared__ float s[32];
  s[threadIdx.x] = threadIdx.x;
  fb::cluster_arrive();
  fb::cluster_wait();
  const unsigned peer = fb::mapa_shared_cluster(static_cast<unsigned>(__cvta_generic_to_shared(s)),
                                                fb::cluster_ctarank() ^ 1u);
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(peer + 4 * threadIdx.x) : "memory");
  out[threadIdx.x] = v;
  fb::fence_proxy_tensormap_release();
  fb::cluster_arrive_relaxed();
  fb::cluster_wait();
}
"""


def test_the_cluster_halves_and_the_tensormap_release_fence_compile_and_record():
    from feedbeast.hazards.instrument import instrument, ptx_of
    normal = fb.compile(WRAPPERS, "sm_90a", name="w.cu")
    normal.expect_sass("UCGABAR_ARV", "UCGABAR_WAIT", kernel="k")
    mod = fb.compile(WRAPPERS, "sm_90a", hazards=True, name="w.cu")
    ptx = ptx_of(mod)
    recorded = {hz.KINDS[int(k)] for k in re.findall(r"\[param0\+0\], (\d+);", ptx) if int(k) < len(hz.KINDS)}
    assert {"barrier.cluster.arrive", "barrier.cluster.wait", "fence.proxy.tensormap.release"} <= recorded, recorded
    assert "fence.proxy.tensormap::generic.release.gpu" in ptx
    res = instrument(ptx, "w.cu")
    assert f"[fbz_p1], {4 | 1 << 17};" in res        # the ld.shared::cluster: 4 bytes, a .shared::cluster address


def test_each_tma_op_takes_the_box_of_the_bytes_recorded_before_it():
    """A map slot in global memory rewritten (published) with maps of two boxes: each TMA op's box is that of the
    hash its thread recorded just before it (tma.map), not a guess over every content the address had."""
    raws = [bytes(range(1, 129)), bytes(range(2, 130))]
    boxes = hz.map_boxes([_tm(8, raws[0]), _tm(16, raws[1])])
    ha, hb = hz.map_id(raws[0]), hz.map_id(raws[1])
    assert boxes == {ha: 1024, hb: 2048}

    def laps(tx):
        tr = Trace().init(0, FULL, 1)
        for lap, (h, n) in enumerate(zip((ha, hb), tx)):
            tr._e(hz.TENSORMAP_PUBLISH, 0, MAP, h)._e(hz.FENCE_TENSORMAP_ACQUIRE, 0, MAP)
            tr._e(hz.TMA_MAP, 0, MAP, h).arrive(0, FULL, n)._e(hz.TMA_LOAD, 0, STAGE, MAP, FULL, 0)
            tr.wait(0, FULL, lap & 1)
        return hz.check(hz.decode(hz.encode(tr.events)), threads_per_block=32, boxes=boxes, instrumented=True)
    assert laps((1024, 2048)).ok, str(laps((1024, 2048)))
    r = laps((1024, 1024))          # the second map's box is 2048 bytes
    assert rules(r) == ["expect-tx-mismatch"], str(r)


@pytest.mark.parametrize("src, named", [('asm volatile("griddepcontrol.wait;" ::: "memory");', True),
                                        ("cudaTriggerProgrammaticLaunchCompletion();", True),
                                        ("fb::decode::wait_dependencies();   // traced by the wrapper", False),
                                        ("// griddepcontrol.wait, in a comment\nint x;", False)])
def test_programmatic_dependent_launch_in_a_kernels_own_source_is_named_as_not_checked(src, named):
    """The fb:: wrappers record griddepcontrol (the replay names it); a kernel's own asm or CUDA intrinsics are not
    in the trace, so the source is read for them and the report says the order across launches was not checked."""
    from feedbeast.hazards.source import across_launches
    assert bool(across_launches(src)) == named


@pytest.mark.parametrize("notes, verdict", [({"unchecked": "a cuda::barrier", "partly": ""}, "skipped"),
                                            ({"unchecked": "", "partly": "griddepcontrol"}, "passed"),
                                            ({"unchecked": "", "partly": ""}, "passed")])
def test_an_isolated_check_records_a_launch_it_could_not_follow_as_not_checked(monkeypatch, capsys, notes, verdict):
    """hooks.mode.hazards = "isolated": the child's report says what it could not check; a launch it could not follow
    is recorded as skipped (never passed), and what was partly not checked is said with the pass."""
    _launch_hook_calls(monkeypatch, sanitize=False)
    import types
    got = []
    monkeypatch.setattr(hz, "run_isolated", lambda *a, **k: ("text", [], 10, notes))
    monkeypatch.setattr(hz.verdicts, "passed", lambda what, detail: got.append(("passed", detail)))
    monkeypatch.setattr(hz.verdicts, "skipped", lambda what, detail: got.append(("skipped", detail)))
    from feedbeast import hooks
    monkeypatch.setattr(hooks.mode, "hazards", "isolated")
    mod = types.SimpleNamespace(source="#include <fb/tma.cuh>\n// ring", arch="sm_90a", defines={}, options=())
    hz.check_on_launch(types.SimpleNamespace(module=mod, name="ring"), 8, 128, (), 0, None)
    ((kind, detail),) = got
    out = capsys.readouterr().out
    assert kind == verdict
    for note in filter(None, notes.values()):
        assert note in detail and f"not checked: {note}" in out, (detail, out)


@pytest.mark.parametrize("mode", ["check", "report", "isolated"])
@pytest.mark.parametrize("violations", [False, True])
def test_a_hazard_build_that_hangs_stops_the_launch_with_barrier_timeout(monkeypatch, capsys, mode, violations):
    """The hazard build's waits give up after the debug time-out and the kernel ends; the normal build's do not, so
    launching it would never return (seen on an H100: a ring whose producer held back its arrivals hung the process
    after its hazard check had named the wait). In every mode the hook raises BarrierTimeout naming the wait instead,
    and records no verdict; with violations before the hang, "check" and "isolated" raise HazardFound first."""
    import types
    from feedbeast import hooks
    _launch_hook_calls(monkeypatch, sanitize=False)
    hang = "empty[0] parity 0"
    found = [hz.Violation("unordered-access", "x", hz.Event(-1, hz.MBAR_WAIT, 0, 0, 0, 0, 0, 0, 0, 0))] \
        if violations else []
    monkeypatch.setattr(hz, "run", lambda kernel, *a, **k: hz.Report(kernel.name, list(found), 10, gave_up=hang))
    monkeypatch.setattr(hz, "run_isolated", lambda *a, **k: (
        "text", [v.rule for v in found], 10, {"unchecked": "" if found else "a wait gave up", "partly": "",
                                              "gave_up": hang}))
    got = []
    monkeypatch.setattr(hz.verdicts, "passed", lambda what, detail: got.append(("passed", detail)))
    monkeypatch.setattr(hz.verdicts, "skipped", lambda what, detail: got.append(("skipped", detail)))
    monkeypatch.setattr(hooks.mode, "hazards", mode)
    mod = types.SimpleNamespace(source="#include <fb/tma.cuh>\n// ring", arch="sm_90a", defines={}, options=())
    expected = hz.HazardFound if violations and mode != "report" else fb.BarrierTimeout
    with pytest.raises(expected) as e:
        hz.check_on_launch(types.SimpleNamespace(module=mod, name="ring"), 8, 128, (), 0, None)
    if expected is fb.BarrierTimeout:
        msg = str(e.value)
        assert "ring grid 8 block 128 was not launched" in msg and hang in msg and "can go on using the GPU" in msg
        assert ("names the violations" in msg) == violations, msg
    assert got == [], got
    if mode == "report" and violations:
        assert "unordered-access" in capsys.readouterr().out


def test_a_hazard_build_that_does_not_hang_lets_the_launch_go_on(monkeypatch):
    import types
    calls, module, launch = _launch_hook_calls(monkeypatch, sanitize=False)
    launch(module(STAGES=4), 8, 128, 1000)          # fake_run's report: no violation, gave_up ""
    assert len(calls) == 1


def test_the_isolated_check_carries_where_the_hazard_build_hung(monkeypatch, capsys):
    """The child's script (run here with its GPU part replaced) prints the wait that gave up, and run_isolated
    returns it with the notes, for _check_isolated to refuse the launch."""
    import importlib
    import types
    mods = {m: importlib.import_module(f"feedbeast.{m}") for m in ("compile", "isolated", "memory")}
    monkeypatch.setattr(mods["compile"], "compile",
                        lambda *a, **k: types.SimpleNamespace(kernel=lambda n: types.SimpleNamespace(name=n)))
    monkeypatch.setattr(hz, "run", lambda kernel, *a, **k: hz.Report(kernel.name, [], 7, gave_up="full[2] parity 1",
                                                                     unchecked="a wait gave up"))
    exec(hz._CHILD, dict(fb=fb, source="", arch="sm_90a", defines={}, options=[], name="k.cu", host=[], spec=[],
                         kname="k", grid=1, block=32, shared=0, cluster=None))
    printed = capsys.readouterr().out
    monkeypatch.setattr(mods["isolated"], "run_child", lambda *a, **k: printed)
    monkeypatch.setattr(hz, "_host_arguments", lambda args: ([], []))
    monkeypatch.setattr(mods["memory"], "sync", lambda: None)
    kernel = types.SimpleNamespace(name="k", module=types.SimpleNamespace(source="", arch="sm_90a", defines={},
                                                                          options=(), name="k.cu"))
    text, found, events, notes = hz.run_isolated(kernel, 1, 32)
    assert (found, events, notes["gave_up"], notes["unchecked"]) == ([], 7, "full[2] parity 1", "a wait gave up")


def test_feedbeast_hazards_set_after_the_import_checks_the_next_launch(monkeypatch, capsys, tmp_path):
    """`%env FEEDBEAST_HAZARDS=1` in a notebook that already imported feedbeast (with the course's hooks, as `make
    lab` and the course's runners give it): the course reads the variable again before each launch, as the first of
    hooks.before_launch, so the next launch is hazard-checked and =0 turns it off. A mode set directly stays until
    the variable changes; FEEDBEAST_HAZARDS_DUMP gives mode.hazard_dump."""
    import types
    import feedbeast.course as course
    from feedbeast import hooks
    calls, module, _ = _launch_hook_calls(monkeypatch, sanitize=False)
    for name in ("FEEDBEAST_HAZARDS", "FEEDBEAST_HAZARDS_DUMP"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(course, "_applied", [])
    course.hazards_from_environment()                   # as at the import: nothing set, no hazard mode
    assert hooks.mode.hazards == "" and not hz.enabled()
    order = hooks.before_launch
    assert order.index(course.hazards_from_environment) < order.index(hz.check_on_launch), order
    kernel = types.SimpleNamespace(module=module(), name="ring")

    def launch(grid):       # what Kernel.launch and Kernel.bind run before the launch itself
        for f in list(hooks.before_launch):
            f(kernel, grid, 128, (1000,), 0, None)
    launch(8)
    monkeypatch.setenv("FEEDBEAST_HAZARDS", "1")        # %env FEEDBEAST_HAZARDS=1, after the import
    launch(16)
    assert hooks.mode.hazards == "check" and [c[1] for c in calls] == [16], calls
    assert "hazard check: ring grid 16 block 128: 0 violation(s)" in capsys.readouterr().out
    monkeypatch.setenv("FEEDBEAST_HAZARDS", "0")
    launch(32)
    assert hooks.mode.hazards == "" and [c[1] for c in calls] == [16], calls
    hooks.mode.hazards = "report"                       # set directly: the unchanged variable leaves it
    monkeypatch.setenv("FEEDBEAST_HAZARDS_DUMP", str(tmp_path))
    launch(64)
    assert (hooks.mode.hazards, hooks.mode.hazard_dump) == ("", str(tmp_path)), hooks.mode   # a variable changed
    hooks.mode.hazards = "report"
    launch(128)
    assert hooks.mode.hazards == "report" and [c[1] for c in calls] == [16, 128], calls


def test_a_hazard_mode_the_checker_does_not_know_is_refused(monkeypatch):
    from feedbeast import hooks
    monkeypatch.setattr(hooks.mode, "hazards", "1")     # the variable's value, not a mode: never read as off
    with pytest.raises(ValueError, match="'check', 'report', 'isolated'"):
        hz.enabled()
    for m in hooks.HAZARD_MODES:
        monkeypatch.setattr(hooks.mode, "hazards", m)
        assert hz.enabled() == bool(m)


def test_the_isolated_check_runs_on_the_toolkits_one_runner(monkeypatch, tmp_path, runner_modes):
    """run_isolated's child is feedbeast.isolated's runner (runner_command), in this process's mode with the hazard
    mode off (the child runs the check itself, once) and the trace folder kept. Really run: without an sm_90a GPU
    the child's check is a Skipped, with one a kernel whose hazard build records nothing (no fb:: header, so no
    trace buffer) is not checkable; both come back as what was not checked. (A kernel that includes a traced header
    and touches no shared memory is checked, with 0 events: the instrumented build would have recorded any access.)"""
    import feedbeast as fb
    from feedbeast import hooks
    modes = runner_modes
    monkeypatch.setattr(hooks, "mode", hooks.Mode(hazards="isolated", hazard_dump=str(tmp_path)))
    src = 'extern "C" __global__ void k(int n) { }\n'
    text, found, events, notes = hz.run_isolated(fb.compile(src, "sm_90a").kernel("k"), 1, 32, 7)
    assert [(m.hazards, m.hazard_dump) for m in modes] == [("", str(tmp_path))], modes
    assert found == [] and events == 0 and notes["unchecked"], (text, notes)
    assert "sm_90a" in notes["unchecked"] or "no traced fb:: wrapper" in notes["unchecked"], notes


def test_the_report_counts_the_tma_loads_each_block_issued():
    """What a block really fetched, read from its trace (lab 09 compares it with the key tiles a block needs, not
    with a count the kernel writes itself): two loads a lap, three laps, in each CTA of the cluster."""
    assert _cluster_ring(relaxed=False).tma_loads == {0: 6, 1: 6}
    assert _cluster_ring(relaxed=False, laps=1).tma_loads == {0: 2, 1: 2}
    assert hz.check([], threads_per_block=32).tma_loads == {}


def test_a_child_gets_one_buffer_per_address_as_large_as_its_largest_argument(monkeypatch):
    """The isolated hazard check and fb.profile's replay carry device buffers to another process, one per address
    (an array and a tensor map over it stay one buffer there). A smaller argument first (a one-page view of a pool,
    then the pool: chapter 10's paged decode with tensor maps) gave the child a copy the size of the view, which
    the kernel then read past; now the copy is the largest argument's, and both point to it."""
    from feedbeast import profiling
    from feedbeast.memory import DeviceArray
    monkeypatch.setattr(DeviceArray, "to_host", lambda self: np.full(self.shape, self.size, self.dtype))
    page = DeviceArray((16, 128), fb.bfloat16, 0x9000, owner=False)
    pool = DeviceArray((64, 16, 128), fb.bfloat16, 0x9000, owner=False)
    other = DeviceArray((8,), np.int32, 0xA000, owner=False)
    host, spec = hz._host_arguments([page, other, pool, 7])
    assert [h.shape for h in host] == [(64, 16, 128), (8,)], [h.shape for h in host]
    assert spec == [("array", 0, None), ("array", 1, None), ("array", 0, None), ("value", 7, None)], spec
    bufs, out = {}, {"buffers": []}
    assert [profiling._buffer(a, out, bufs, "argument") for a in (page, other, pool, page)] == [0, 1, 0, 0]
    assert [b.shape for b in out["buffers"]] == [(64, 16, 128), (8,)]
