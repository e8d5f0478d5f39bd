"""The check of a decoded trace: each cluster (or block) replayed on its own, in parallel for long traces, and the
violations gathered in the order one interleaved replay would find them (Chapter 04)."""
from __future__ import annotations

import os

import numpy as np

from .replay import _Cluster
from .report import Report
from .trace import TMA_LOAD, Decoded, decode


def _replay(items, order, threads_per_block, blocks, maps, truncated=False, geometry=None, instrumented=False,
            boxes=None):
    """Replay one cluster's events [(position, event, rank)]. Returns ([(order key, violation)], untraced): the key
    puts the violations of all clusters back in the order one interleaved replay would have found them."""
    found, seen, now = [], set(), [None]

    def violate(v):     # the cap of check's own filter, applied per cluster: it keeps all that one would keep
        key = (v.rule, v.second.line, v.first.line if v.first else None)
        if key in seen and len(found) > 200:
            return
        seen.add(key)
        found.append((now[0] + (len(found),), v))
    cl = _Cluster(threads_per_block, blocks, maps, violate, geometry, instrumented, boxes)
    for pos, ev, rank in items:
        now[0] = (0, pos)
        cl.step(ev, rank)
    now[0] = (1, order)
    cl.finish(truncated)
    return found, (cl.untraced, cl.unknown_maps, cl.griddep, cl.tmap_untraced)


_JOBS = None            # the clusters of the replay under way, for the forked workers (not pickled to them)
PARALLEL_EVENTS = 200_000   # traces this long replay their clusters in parallel (one process each, forked)


_NUMPY_SCALARS = frozenset(np.dtype(c).type for c in "?bhilqBHILQefdg")


def _plain(x) -> bool:
    """None, numbers (numpy's scalars too), strings, bytes, and tuples, lists and dicts of them (by exact type)."""
    if x is None or type(x) in (int, float, bool, str, bytes) or type(x) in _NUMPY_SCALARS:
        return True
    if type(x) in (tuple, list):
        return all(_plain(v) for v in x)
    if type(x) is dict:
        return all(_plain(k) and _plain(v) for k, v in x.items())
    return False


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
                out = pool.map(_replay_job, range(len(jobs)), chunksize=1)
                pool.close()    # the workers leave on their own (the pool's exit would stop the live ones by signal)
                pool.join()
                return out
    except Exception:   # noqa: BLE001 (no processes to be had: replay here)
        return None
    finally:
        _JOBS = None


def _jobs(events, threads_per_block, grid, cluster, maps, truncated, geometry, instrumented, boxes) -> list:
    """One replay job per cluster (or block): its events [(position, event, rank)] and the global ids of its
    blocks by rank, in the order its first event appears."""
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
    geometry = {int(k): tuple(v) for k, v in (geometry or {}).items()}
    boxes = {int(k): v for k, v in (boxes or {}).items()}
    jobs = []
    for order, (cid, items) in enumerate(parts.items()):
        blocks = []
        for r in range(csize):
            rx, ry, rz = r % cx, (r // cx) % cy, r // (cx * cy)
            blocks.append((cid[0] * cx + rx) + gx * ((cid[1] * cy + ry) + gy * (cid[2] * cz + rz)))
        jobs.append((items, order, threads_per_block, blocks, maps or {}, truncated, geometry, instrumented, boxes))
    return jobs


def _in_replay_order(results) -> list:
    """The clusters' violations in the order of one interleaved replay, through its filter: past 200, one per
    (rule, lines)."""
    violations, per_kind_seen = [], set()
    for _, v in sorted((kv for found, _ in results for kv in found), key=lambda kv: kv[0]):
        key = (v.rule, v.second.line, v.first.line if v.first else None)
        if key in per_kind_seen and len(violations) > 200:
            continue
        per_kind_seen.add(key)
        violations.append(v)
    return violations


def _not_checked(results) -> tuple[str, str]:
    """(why the trace cannot be checked at all, what in a checked trace lies outside the check): '' when nothing."""
    untraced, unknown, griddep, rewritten = (set().union(*(u[i] for _, u in results)) if results else set()
                                             for i in range(4))
    if unknown:
        # a box size the checker does not know would be a guess at every expect_tx and store it touches
        return (f"{len(unknown)} tensor map(s) used that are not arguments of this launch (ids "
                f"{', '.join(hex(m) for m in sorted(unknown))}): their box sizes are unknown"), ""
    if untraced:
        # the ordering those barriers give is invisible: any verdict on the accesses they order would be a guess
        return (f"{len(untraced)} mbarrier(s) used but not initialised through fb::mbar::init "
                f"(shared addresses {', '.join(hex(a) for a in sorted(untraced))}): a cuda::barrier or raw PTX "
                "the trace does not see, or a missing init"), ""
    parts = []
    if griddep:
        # PTX ISA: griddepcontrol: the order it sets is between this grid and the one before or after it in the
        # stream; a trace holds one launch, so a read of the previous grid's output, or a write it still reads, is
        # beyond it
        parts.append(f"the order across launches that {' and '.join(sorted(griddep))} set (programmatic dependent "
                     "launch): one launch's trace cannot see the other grid's accesses")
    if rewritten:
        # PTX ISA: membar/fence (fence.proxy.tensormap::generic): the release must follow the write, which the
        # trace does not hold (ordinary stores of the map's bytes, or a write by another cluster)
        parts.append(f"{len(rewritten)} tensor map(s) (at {', '.join(hex(a) for a in sorted(rewritten))}) changed "
                     "during the launch by writes the trace does not record (ordinary stores, or another cluster): "
                     "their tensormap-proxy fences")
    return "", "; ".join(parts)


def check(events, *, threads_per_block: int, grid=(1, 1, 1), cluster=(1, 1, 1), maps: dict | None = None,
          kernel: str = "kernel", source: str | None = None, module_name: str = "kernel.cu",
          dropped: int = 0, parallel: bool | None = None, truncated: bool = False, geometry: dict | None = None,
          instrumented: bool = False, boxes: dict | None = None) -> Report:
    """Replay decoded events (in slot order) and return the Report. maps: tensor-map id -> box bytes.

    Clusters (or blocks) share no barrier and no shared memory, so each is replayed on its own; parallel: in
    separate processes (None: when the trace has PARALLEL_EVENTS or more and several clusters). instrumented: the
    trace holds every shared-memory access (the PTX of the build was instrumented), so no read is assumed. boxes:
    {hash of a map's bytes: box bytes}: a TMA op whose thread recorded that hash just before it (tma.map) has that
    box, whatever its address held at other times."""
    if isinstance(events, np.ndarray):
        events = decode(events)
    jobs = _jobs(events, threads_per_block, grid, cluster, maps, truncated, geometry, instrumented, boxes)
    if parallel is None:
        parallel = len(jobs) > 1 and len(events) >= PARALLEL_EVENTS
    # Forked workers send their results back pickled: only a trace decode() made (ints) and maps of plain data go
    # there, so that nothing of a caller's own classes is rebuilt by the pool's result thread.
    parallel = parallel and isinstance(events, Decoded) and all(_plain(x) for x in (maps, geometry, boxes))
    results = _replay_parallel(jobs) if parallel else None
    if results is None:
        results = [_replay(*job) for job in jobs]
    unchecked, partly = _not_checked(results)
    violations = [] if unchecked else _in_replay_order(results)
    # one report per distinct (rule, lines): the same bug repeats in every lap and every thread
    uniq, seen = [], set()
    for v in violations:
        key = (v.rule, v.second.line, v.first.line if v.first else None, v.message.split(":")[0])
        if key not in seen:
            seen.add(key)
            uniq.append(v)
    blocks = {ev.block for ev in events}
    loads: dict = {}
    for ev in events:
        if ev.kind == TMA_LOAD:
            loads[ev.block] = loads.get(ev.block, 0) + 1
    return Report(kernel, uniq, len(events), dropped, source, module_name, len(blocks), unchecked, partly=partly,
                  tma_loads=loads)
