"""Running a hazard build on the GPU: its trace buffer, the blocks that record, the launch, and the check of what
it wrote (Chapter 04). Also saving a trace to check it elsewhere (replay)."""
from __future__ import annotations

import struct
import time
from pathlib import Path

import numpy as np

from ..errors import FeedbeastError
from .check import check
from .maps import _check_readings, _map_geometry, _map_readings, map_boxes
from .report import Report, Violation
from .source import across_launches, unmodeled
from .trace import (TENSORMAP_REPLACE, TMA_LOAD, TMA_MAP, TMA_STORE, WGMMA_READ, WORDS, Event, _name4,
                    decode)

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



def _not_checkable(kernel) -> Report | None:
    """A Report saying why this kernel's launch cannot be checked, or None."""
    m = kernel.module
    why = unmodeled(getattr(m, "source", "") or "", getattr(m, "defines", None))
    if why:
        return Report(kernel.name, [], 0, source=m.source, module_name=m.name,
                      unchecked=f"the kernel's source uses synchronisation the checker cannot model ({why})")
    return None


def _buffer(capacity):
    """The device trace buffer of this capacity, cleared of what the last run wrote (a stale slot would pass
    decode's check of its index): [buffer, slots written]."""
    from cuda.bindings import driver
    from ..device import _check
    from ..memory import empty
    slot = _trace_buffers.get(capacity)
    if slot is None:
        buf = empty((capacity, WORDS), np.uint32, poison=False)
        buf.fill_bytes(0)
        slot = _trace_buffers[capacity] = [buf, 0]
    if slot[1]:
        _check(driver.cuMemsetD8(slot[0].ptr, 0, min(slot[1], capacity) * WORDS * 4))
        slot[1] = 0
    return slot


def _set_up(mod, slot, capacity, ranges):
    """Point the module's fb_hz_* globals at the buffer: (pointer of fb_hz_count, pointer of fb_hz_gave_up)."""
    from cuda.bindings import driver
    from ..device import _check

    def put(name, data):
        err, ptr, size = driver.cuModuleGetGlobal(mod._cu_module, name)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise FeedbeastError(f"{mod.name}: the hazard build has no {name.decode()} "
                                 "(does it include an fb/ header?)")
        _check(driver.cuMemcpyHtoD(ptr, data, len(data)))
        return ptr
    put(b"fb_hz_events", struct.pack("<Q", slot[0].ptr))
    put(b"fb_hz_capacity", struct.pack("<I", capacity))
    flat = [x for r in ranges for x in r] + [0, 0] * (3 - len(ranges))
    put(b"fb_hz_block_ranges", struct.pack("<6I", *flat))
    return put(b"fb_hz_count", struct.pack("<I", 0)), put(b"fb_hz_gave_up", struct.pack("<5I", 0, 0, 0, 0, 0))


def _read_back(slot, capacity, count_ptr, gave_up_ptr):
    """(events recorded, the raw words that fit, the five words of fb_hz_gave_up) after the launch."""
    from cuda.bindings import driver
    from ..device import _check
    raw = bytearray(4)
    _check(driver.cuMemcpyDtoH(raw, count_ptr, 4))
    count = struct.unpack("<I", bytes(raw))[0]
    raw = bytearray(20)
    _check(driver.cuMemcpyDtoH(raw, gave_up_ptr, 20))
    n = min(count, capacity)
    slot[1] = n
    words = np.empty((n, WORDS), np.uint32)
    if n:
        _check(driver.cuMemcpyDtoH(words.ctypes.data, slot[0].ptr, words.nbytes))
    return count, words, struct.unpack("<5I", bytes(raw))


def _gave_up(report, gave_up):
    """Name the wait at which a hazard build gave up (the kernel hangs there); with no violation before it, the
    launch is not checkable rather than clean."""
    flag, c, d, stage, parity = gave_up
    if not flag:
        return
    stage = stage - (1 << 32) if stage >= 1 << 31 else stage
    what = f"{_name4(c, d) or 'barrier'}" + (f"[{stage}]" if stage >= 0 else "") + f" parity {parity}"
    report.gave_up = what
    if not report.violations:
        report.unchecked = (f"a wait on {what} in the hazard build gave up after the debug time-out (the kernel "
                            "hangs); the trace up to it breaks no rule")


def run(kernel, grid, block, *args, shared: int = 0, cluster=None, blocks: int = 2,
        capacity: int = DEFAULT_CAPACITY, instrument: bool = True) -> Report:
    """Launch the hazard build of `kernel` (a Kernel of any Module) once with these arguments, and check it.

    blocks: how many clusters (or blocks) record events at each end of the grid (traced_ranges: the first ones, the
    last ones, where ragged tiles are, and the end of the first row); the others run untraced. instrument=False runs
    the hazard build's cubin as compiled: only the fb:: wrappers record, and ordinary reads are assumed at waits."""
    from ..launch import _dim3
    from ..memory import sync
    from ..skip import needs
    skip = needs(kernel.module.needs_arch, f"hazard check of {kernel.name}")
    if skip is not None:
        return skip
    t0 = time.perf_counter()
    unchecked = _not_checkable(kernel)
    if unchecked is not None:
        return unchecked
    mod = hazard_module(kernel.module)
    if b"fb_hz_events" not in mod.cubin:      # it includes no header with a traced wrapper: nothing to record
        return Report(kernel.name, [], 0, source=mod.source, module_name=mod.name,
                      unchecked="the kernel uses no traced fb:: wrapper")
    k = mod.kernel(kernel.name)
    if instrument:
        from .instrument import load
        load(mod)   # every ordinary shared-memory access recorded (instrument.py), before the kernel is loaded
    k._load()
    slot = _buffer(capacity)
    g3, b3 = _dim3(grid, "grid"), _dim3(block, "block")
    c3 = _dim3(cluster, "cluster") if cluster is not None else (1, 1, 1)
    count_ptr, gave_up_ptr = _set_up(mod, slot, capacity, traced_ranges(g3, c3, blocks))
    t1 = time.perf_counter()
    slot[1] = capacity          # until the count is known, the whole buffer counts as written
    r = k.launch(grid, block, *args, shared=shared, cluster=cluster)
    if r is not None:
        return r
    sync()
    count, words, gave_up = _read_back(slot, capacity, count_ptr, gave_up_ptr)
    t2 = time.perf_counter()
    events = decode(words)
    hashes = {e.a: e.b for e in events if e.kind == TMA_MAP}
    all_hashes = {}     # a map rewritten in place on the device has several contents over the launch
    for e in events:
        if e.kind == TMA_MAP:
            all_hashes.setdefault(e.a, set()).add(e.b)
    derived = {(e.b, e.c) for e in events if e.kind == TENSORMAP_REPLACE}
    boxes = map_boxes(args, derived)    # a TMA op's box from the hash recorded before it; readings: the fallback
    readings = _map_readings(args, getattr(k, "params", None), {e.b for e in events if e.kind in (TMA_LOAD, TMA_STORE)},
                             all_hashes, derived)
    meta = dict(threads_per_block=int(np.prod(b3)), grid=g3, cluster=c3, kernel=kernel.name,
                source=mod.source, module_name=mod.name, dropped=max(0, count - capacity),
                # a wait gave up, or the buffer filled: the trace is a prefix, and what is pending at its end is
                # not pending at exit (no end-of-kernel rules)
                truncated=bool(gave_up[0]) or count > capacity,
                instrumented=bool(getattr(mod, "_instrumented", None)),
                geometry={str(a): list(g) for a, g in _map_geometry(args, hashes).items()},
                boxes={str(h): n for h, n in boxes.items()})
    report = _check_readings(events, readings, **meta)
    meta["maps"] = readings[0]
    report.violations += register_violations(kernel.module, kernel.name)
    pdl = across_launches(mod.source or "", mod.defines)
    if pdl and not report.unchecked and pdl not in report.partly:
        report.partly = "; ".join(x for x in (report.partly, pdl) if x)
    report.seconds = {"build": t1 - t0, "run": t2 - t1, "check": time.perf_counter() - t2}
    _gave_up(report, gave_up)
    from ..hooks import mode
    if mode.hazard_dump:       # keep the trace, to replay it elsewhere (replay below)
        save(Path(mode.hazard_dump), words, meta, len(report.violations))
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
    """Check a trace saved under feedbeast.hooks.mode.hazard_dump (a folder; no GPU needed)."""
    import json
    import zipfile
    from ..errors import FeedbeastError
    try:
        z = np.load(path)
        meta = json.loads(bytes(z["meta"]).decode())
        meta["maps"] = {int(k): v for k, v in meta["maps"].items()}
        words = z["words"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, zipfile.BadZipFile) as e:
        raise FeedbeastError(f"{path} is no hazard trace ({type(e).__name__}: {e}): give a file that a run saved "
                             "under feedbeast.hooks.mode.hazard_dump") from None
    return check(decode(words), **meta)

