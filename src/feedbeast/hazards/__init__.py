"""The hazard checker: a trace of a kernel's asynchronous operations and shared-memory accesses, replayed against the
PTX memory model.

Chapter 04 explains it: what each rule rests on (the formal memory model or the prose of the ISA), and what it
does not cover.

    mod = fb.compile(src, "sm_90a", hazards=True)        # or %%cuda --hazards; or any Module: see below
    report = mod.hazard_check("ring", grid, block, x, y, n, shared=SMEM)   # runs the kernel once, traced
    print(report)                                         # each violation: rule, block, thread, lines
    report.raise_if_any()                                 # fb.HazardFound naming the rule

With feedbeast.hooks.mode.hazards = "check" every launch of a kernel compiled from source also runs its hazard
build at the same arguments and raises HazardFound ("report": prints the report and goes on; "isolated": the check
runs in a separate process). In every mode the launch of a kernel whose hazard build hangs (a wait gave up after
the debug time-out) is not run: BarrierTimeout names the wait, unless "check" or "isolated" raised HazardFound
first for a rule broken before the hang. With feedbeast.hooks.mode.hazard_dump = a folder, each hazard build's trace
is also saved there, to check elsewhere with `python -m feedbeast.hazards replay` (no GPU needed). Both are the
library's switches, set in a notebook like any attribute; the course's runs (the grader, `make sanitize`) set them
from the course's own variables (feedbeast.course).

The package: trace.py (event kinds, decoding), instrument.py (every ordinary shared-memory access of the hazard
build recorded from its PTX), replay.py with accesses.py and barriers.py (the replay of one cluster), check.py (the
check of a trace), maps.py (tensor maps), source.py (what cannot be modeled), registers.py (wgmma registers, from
ptxas), gpu.py (running a hazard build), report.py (rules, violations, reports).

What the trace holds (include/fb/hazard.cuh): every fb:: wrapper of the hazard build appends one event per
executing thread, in program order, with the source line of its call: cp.async / bulk / TMA copies (shared-memory
range, bytes, barrier), commit and wait groups, mbarrier init / arrive / expect_tx / wait, wgmma fence / commit /
wait and the shared-memory tiles its descriptors read, fence.proxy.async, __syncthreads / __syncwarp / named
barriers / cluster barriers. The build's PTX is then rewritten (instrument.py) so that every ld / st / atom / red /
ldmatrix / stmatrix of shared memory, and every generic one whose address is shared at run time, records its bytes
and source line too, as does a cp.async.mbarrier.arrive. Events of operations that release or issue are recorded
before the operation, those of operations that acquire or complete after it, each slot claimed with one atomicAdd:
the order of the slots is an order in which the operations could have happened, so the checker replays them in it.

The replay keeps, per thread, a vector clock of happens-before (PTX ISA, "Memory Consistency Model": release
and acquire patterns through mbarrier arrive/wait, bar.sync, barrier.cluster) and a second clock of what is
ordered *through a proxy fence* ("Proxies": fence.proxy.async orders generic-proxy accesses before async-proxy
ones; release/acquire alone does not). Asynchronous accesses complete where the ISA says they do: a bulk or
TMA load when its mbarrier phase completes (complete_tx, "mbarrier"; the phases follow feedbeast.sim.mbarrier),
the operand reads of a wgmma at the wgmma.wait_group that retires its group ("wgmma.wait_group"), the source reads
of a bulk/TMA store at cp.async.bulk.wait_group.read ("cp.async.bulk.wait_group"), a cp.async at its
cp.async.wait_group or in the phase a cp.async.mbarrier.arrive tracks it on ("cp.async.mbarrier.arrive"). The rules:

  async-read-in-flight  a write to shared memory (a refill, a staging write) while an async read of it (wgmma
                        operand, tcgen05.mma operand, TMA store source) has not completed before it
  async-read-at-exit    the block ends while a TMA store it issued may still read its shared memory
  missing-proxy-fence   a generic access, then an async-proxy access of the same bytes, ordered, but with no
                        fence.proxy.async executed by the accessing thread on the ordering path (e.g. the fence
                        after the release arrive, or a fence in another thread than the one that wrote)
  unordered-access      two accesses of the same bytes, one a write, that nothing orders (a read before the
                        copy that fills it landed or before its cp.async.wait_group, a refill before the readers
                        released the stage, a release arrive before the reads of the stage)
  expect-tx-mismatch    the bytes announced with expect_tx in a phase differ from the bytes that complete on it
  arrival-count         a thread arrives on a phase after the previous one completed without it: the count is
                        lower than the threads that arrive per round (an incomplete phase at exit is allowed)
  wait-parity           a wait that returned for a phase its thread had already seen (parity aliasing: the
                        waiter is two phases ahead of the barrier), or for a parity no phase had completed
  mbarrier-scope        a .cta wait acquired a phase released by a thread of another CTA (not morally strong)
  mbarrier-use-before-init  an arrive, expect_tx or wait on a barrier before its fb::mbar::init, in the trace's
                        order: nothing (a __syncthreads() after the init) ordered the init before the use
  missing-wgmma-fence   a warpgroup's first wgmma.mma_async with no wgmma.fence before it, or registers of a
                        wgmma written with no wgmma.fence before it (from ptxas's log, registers.py)
  wgmma-register-in-flight  a wgmma's accumulator or A-fragment registers accessed before the wgmma.wait_group
                        that retires it (from ptxas's log of the normal build, registers.py)
  bulk-store-in-flight  a TMA load of a box a TMA store or TMA reduce (cp.reduce.async.bulk) wrote, before
                        cp.async.bulk.wait_group (not .read); the reduce's source reads are a store's (above)
  peer-access-at-exit   an ld/st/atom/red.shared::cluster or mbarrier.arrive of a peer CTA's shared memory not
                        ordered before that CTA exits (barrier.cluster after it in both, or, for an arrive, the
                        owner's wait on its phase); unordered peer accesses are unordered-access
  missing-tensormap-fence  a TMA copy through a tensor map written in memory during the launch (tensormap.replace
                        on global memory, tensormap.cp_fenceproxy) without fence.proxy.tensormap::generic .release
                        by the writer after the write and .acquire of that map by the user or a thread of its
                        block synchronised with it, on the ordering path (CUDA guide: a modified tensor map)

griddepcontrol (programmatic dependent launch) orders two launches; a trace holds one, so the report of a launch that
uses it says "not checked" for that order (Report.partly) while the rest is checked. So does a tensor map whose bytes
change between two TMA copies with no traced write (ordinary stores to global memory): its fences are not checked.

Not checkable (Report.unchecked, never a pass): a barrier used but never initialised through fb::mbar::init, a
tensor map that is no argument of the launch (nor one rewritten from an argument by tensormap.replace of its
address), and a kernel whose own source uses synchronisation the trace cannot see (cuda::barrier, cuda::pipeline,
cooperative groups, bar.arrive, bar.red, cuda::ptx or raw-PTX barriers and copies other than
cp.async.mbarrier.arrive: see unmodeled()). A wait that times out in a hazard build gives up
without trapping: the trace up to the hang is checked.

Only a trace without instrumentation (run(..., instrument=False)) assumes reads: a thread that waits on a phase on
which copies landed and then, before its next arrive or barrier, issues no async operation and marks no access,
is taken to read what landed (fb::hazard::generic_read marks reads explicitly). Blocks interact only within a
cluster: two clusters (or blocks) record at the start of the grid, at the end of its first row and at its end
(traced_ranges).
"""
from __future__ import annotations

import numpy as np

from .. import hooks as verdicts  # check outcomes go out through the hooks
from .check import PARALLEL_EVENTS, _replay, check  # noqa: F401
from .gpu import (DEFAULT_CAPACITY, build_key, hazard_module, register_violations, replay, run,  # noqa: F401
                  save, traced_ranges)
from .maps import _check_readings, _map_geometry, _map_readings, map_boxes, map_id  # noqa: F401
from .replay import _Cluster  # noqa: F401
from .report import RULES, HazardFound, Report, Violation  # noqa: F401
from .source import unmodeled  # noqa: F401
from .trace import *  # noqa: F401,F403  (the event kinds: hz.MBAR_WAIT, ...)
from .trace import ALL, KINDS, SMEM_WINDOW, WORDS, Event, decode, encode  # noqa: F401
from ..errors import BarrierTimeout, FeedbeastError


def mode() -> str:
    """How each launch of a source-compiled kernel is hazard-checked first (feedbeast.hooks.mode.hazards): "" not
    at all, "check" (HazardFound), "report" (the report is printed and nothing is raised, for surveys), "isolated"
    (the check runs in a separate process). Any other value is refused rather than read as off."""
    from ..hooks import HAZARD_MODES, mode as run_mode
    if run_mode.hazards not in HAZARD_MODES:
        raise ValueError(f"feedbeast.hooks.mode.hazards is {run_mode.hazards!r}: give one of "
                         + ", ".join(map(repr, HAZARD_MODES)))
    return run_mode.hazards


def enabled() -> bool:
    """Every launch of a source-compiled kernel is also hazard-checked (mode() is not "")."""
    return mode() != ""


_checked = set()
_configs = {}       # (build, kernel, block, shared, cluster) -> the grid it was first checked at


def _arrays(args):
    """(pointer, bytes) of every device buffer a launch can write: array arguments and tensor maps' arrays."""
    from ..memory import DeviceArray, interface
    from ..tensormap import TensorMap
    out = {}
    for a in args:
        a = a.array if isinstance(a, TensorMap) else a
        if isinstance(a, DeviceArray) and a.on_gpu:
            out[a.ptr] = max(out.get(a.ptr, 0), a.nbytes)
        elif not isinstance(a, DeviceArray) and (cai := interface(a)) is not None:
            n = int(np.prod(cai["shape"])) * cai["dtype"].itemsize
            out[cai["ptr"]] = max(out.get(cai["ptr"], 0), n)
    return out


_CHILD = r"""
import json
from feedbeast import hazards as hz
from feedbeast.compile import compile as _compile
mod = _compile(source, arch, defines=defines, options=tuple(options), name=name)
arrays = [fb.to_device(h) for h in host]
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
                             else [], "ok": bool(getattr(r, "ok", True)), "events": getattr(r, "events", 0),
                             "unchecked": getattr(r, "unchecked", "") if isinstance(r, hz.Report) else str(r),
                             "partly": getattr(r, "partly", ""), "gave_up": getattr(r, "gave_up", "")}))
"""


def _host_arguments(args):
    """The launch's arguments as the child can rebuild them: (host copies of the device buffers, each argument as
    ("array", index, None), ("map", index of its array, its description) or ("value", value, None)): one copy per
    address (memory.host_buffer; a tensor map's own shape travels in its description)."""
    from ..memory import DeviceArray, host_buffer, interface
    from ..tensormap import TensorMap
    index, host, spec = {}, [], []
    for a in args:
        if isinstance(a, TensorMap):
            spec.append(("map", host_buffer(a.array, host, index), dict(box=a.box, swizzle=a.swizzle, oob_fill=a.oob_fill,
                                                     l2_promotion=a.l2_promotion, shape=a.shape,
                                                     strides_bytes=a.strides_bytes,
                                                     element_strides=a.element_strides)))
        elif isinstance(a, DeviceArray) or interface(a) is not None:
            spec.append(("array", host_buffer(a, host, index), None))
        else:
            spec.append(("value", a.item() if isinstance(a, np.generic) else a, None))
    return host, spec


def run_isolated(kernel, grid, block, *args, shared=0, cluster=None):
    """The hazard check in a separate process (fb.isolated's runner, feedbeast.isolated.run_child): the arguments'
    device buffers go over as host copies, tensor maps are encoded again over them, so a hazard build that faults
    or hangs leaves this process's GPU context usable. Returns (report text, rules found, events, {"unchecked":
    why not checkable, "partly": what was not checked, "gave_up": the wait at which the hazard build hung})."""
    import dataclasses
    import json
    from .. import hooks
    from ..isolated import run_child
    from ..memory import sync
    from ..skip import Skipped
    sync()                  # the inputs as the launch would see them
    host, spec = _host_arguments(args)
    m = kernel.module
    out = run_child(_CHILD, dict(source=m.source, arch=m.arch, defines=dict(m.defines or {}), options=list(m.options),
                                 name=m.name, host=host, spec=spec, kname=kernel.name, grid=grid, block=block,
                                 shared=shared, cluster=cluster),
                    mode=dataclasses.replace(hooks.mode, hazards=""),   # the child runs the check itself, once
                    what=f"hazard check of {kernel.name}")
    if isinstance(out, Skipped):
        return str(out), [], 0, {"unchecked": str(out), "partly": ""}
    line = next((ln for ln in str(out).splitlines() if ln.startswith("__HZ__")), None)
    if line is None:
        raise FeedbeastError(f"the isolated hazard check of {kernel.name} printed no result:\n{str(out)[-2000:]}")
    info = json.loads(line[len("__HZ__"):])
    return info["text"], info["rules"], info["events"], {k: info.get(k, "") for k in ("unchecked", "partly", "gave_up")}


def _run_saving_buffers(kernel, grid, block, args, shared, cluster):
    """run(), with the arguments' device buffers copied before and put back after, so that the real launch sees
    them as they were."""
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
    return report


def _refuse_a_hang(kernel, grid, block, gave_up: str, violations: bool):
    """The hazard build gave up at a wait (its bounded waits, include/fb/hazard.cuh): the launch of the normal build,
    whose waits are not bounded, would never return and would freeze the notebook. Raise BarrierTimeout instead of
    launching it; the hazard build did not trap, so this process can go on using the GPU."""
    if not gave_up:
        return
    raise BarrierTimeout(
        f"{kernel.name} grid {grid} block {block} was not launched: its hazard build, run first with the same "
        f"arguments, waited on {gave_up} past the debug time-out, so the phase never completes and this launch "
        "would never return. " + ("The report above names the violations before it. " if violations else
                                  "The trace up to that wait breaks no ordering rule. ")
        + "Look for the arrive that phase needs: which threads arrive on that barrier, and what each of them waits "
        "for first. A debug build (%%cuda --debug) names the block and thread that wait. This process can go on "
        "using the GPU.")


def _verdict(kernel, grid, block, report):
    """Print the check's line; raise HazardFound, or record the pass (or the launch not checkable) for grading."""
    secs = "".join(f", {k} {v:.2f} s" for k, v in report.seconds.items())
    print(f"hazard check: {kernel.name} grid {grid} block {block}: {len(report.violations)} violation(s) in "
          f"{report.events} events" + (f"; not checked: {report.unchecked or report.partly}"
                                       if report.unchecked or report.partly else "")
          + (f" ({secs[2:]})" if secs else ""), flush=True)
    if mode() == "report":
        if not report.ok:
            print(report, flush=True)
        _refuse_a_hang(kernel, grid, block, report.gave_up, bool(report.violations))
        return
    report.raise_if_any()
    _refuse_a_hang(kernel, grid, block, report.gave_up, False)
    what, where = f"hazard check of {kernel.name}", f"grid {grid} block {block}"
    if report.unchecked:     # what grading reads: a part the checker could not follow is not a pass
        verdicts.skipped(what, f"{where}: not checked: {report.unchecked}")
    else:
        verdicts.passed(what, f"{where}: 0 violations in {report.events} events"
                        + (f"; not checked: {report.partly}" if report.partly else ""))


def check_on_launch(kernel, grid, block, args, shared=0, cluster=None):
    """The hook of Kernel.launch under a hazard mode (mode()), before the launch itself: run the hazard build at the
    same arguments (once per kernel, shape and configuration) and raise HazardFound if it breaks a rule. The
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
    from ..hooks import mode as run_mode
    if run_mode.sanitizer and config in _configs:
        # make sanitize: each build and launch configuration (block, cluster, shared memory) is traced once, at
        # its first launch (a notebook's correctness check, before its timed sizes): another size of the same
        # build replays the same program with other trip counts. Said on its own line, counted apart.
        print(f"hazard check (repeat): {kernel.name} grid {grid} block {block}: same build and launch "
              f"configuration as the check at grid {_configs[config]}; not traced again", flush=True)
        return
    _configs.setdefault(config, str(grid))
    if mode() == "isolated":     # in a child process: a fault cannot cost this one
        _check_isolated(kernel, grid, block, args, shared, cluster)
        return
    report = _run_saving_buffers(kernel, grid, block, args, shared, cluster)
    if isinstance(report, Report):
        _verdict(kernel, grid, block, report)


def _check_isolated(kernel, grid, block, args, shared, cluster):
    """check_on_launch's check in a separate process (run_isolated): its line, HazardFound, or the verdict."""
    text, found, events, notes = run_isolated(kernel, grid, block, *args, shared=shared, cluster=cluster)
    print(f"hazard check: {kernel.name} grid {grid} block {block}: {len(found)} violation(s) in {events} events "
          "(separate process)" + "".join(f"; not checked: {notes[k]}" for k in ("unchecked", "partly")
                                         if notes[k]), flush=True)
    if found:
        raise HazardFound(f"{found[0]}: {RULES[found[0]]}\n{text}")
    _refuse_a_hang(kernel, grid, block, notes.get("gave_up", ""), False)
    what, where = f"hazard check of {kernel.name}", f"grid {grid} block {block}"
    if notes["unchecked"]:      # as _verdict: a launch the checker could not follow is not a pass
        verdicts.skipped(what, f"{where}: not checked: {notes['unchecked']}")
    else:
        verdicts.passed(what, f"{where}: 0 violations in {events} events"
                        + (f"; not checked: {notes['partly']}" if notes["partly"] else ""))
