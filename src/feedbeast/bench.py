"""How fast is it? CUDA-event timing with warm-up, many runs, an L2 flush, and a same-run ceiling.

Chapter 00 explains the timing and the same-run ceiling it is compared with.

    r = bench(lambda: k.launch(grid, block, out, a, n), name="ch03/ring", nbytes=2 * a.nbytes,
              ceiling="copy")
    r.gbps, r.pct    # achieved GB/s and % of the copy bandwidth measured in this process
    r.pct_peak       # and % of the DRAM's physical peak (the bound "dram" follows from the copy ceiling)

Every result names the resource it is bound by (`bound=`: "dram", "l2", "smem", "fp32", "tensor", "tf32";
by default the one its ceiling is bound by) and is compared with that resource's physical peak on this GPU
(feedbeast.peaks.physical_peak): a result above it raises PhysicalLimitError, because the experiment,
not the hardware, is wrong. Each result is appended to results/<gpu>/bench.jsonl with the GPU, versions,
sizes and the identity of the kernel it timed (name, arch, defines, registers, a hash of its source).
Timings are reported, never asserted.
"""
from __future__ import annotations

import dataclasses
import inspect

import numpy as np

from .device import _check, gpu
from .errors import FeedbeastError
from .peaks import PhysicalLimitError, bound_of, physical_peak
from .skip import Skipped, needs_gpu


@dataclasses.dataclass
class BenchResult:
    name: str
    times_ms: list
    nbytes: float | None = None
    flops: float | None = None
    ceiling_name: str | None = None
    ceiling_value: float | None = None   # in the unit of the result (GB/s or TFLOP/s)
    sizes: dict | None = None
    bound: str | None = None             # the resource it is bound by
    peak_value: float | None = None      # that resource's physical peak, in the unit of the result
    peak_how: str | None = None          # the arithmetic behind the peak
    kernels: list | None = None          # identity of the kernel(s) timed: see kernel_identity()

    @property
    def median_ms(self):
        return float(np.median(self.times_ms))

    @property
    def spread_ms(self):
        """(10th, 90th) percentile of the per-run times."""
        return float(np.percentile(self.times_ms, 10)), float(np.percentile(self.times_ms, 90))

    @property
    def gbps(self):
        return self.nbytes / self.median_ms / 1e6 if self.nbytes else None

    @property
    def tflops(self):
        return self.flops / self.median_ms / 1e9 if self.flops else None

    @property
    def value(self):
        """The headline rate: TFLOP/s when flops were given, else GB/s."""
        return self.tflops if self.flops else self.gbps

    @property
    def unit(self):
        return "TFLOP/s" if self.flops else "GB/s"

    @property
    def pct(self):
        if self.ceiling_value and self.value:
            return 100.0 * self.value / self.ceiling_value
        return None

    @property
    def pct_peak(self):
        if self.peak_value and self.value:
            return 100.0 * self.value / self.peak_value
        return None

    def __bool__(self):
        return True

    def __repr__(self):
        lo, hi = self.spread_ms
        s = f"{self.name}: {self.median_ms * 1e3:.1f} us (p10-p90 {lo * 1e3:.1f}-{hi * 1e3:.1f})"
        if self.value:
            s += f", {self.value:.1f} {self.unit}"
        if self.pct is not None:
            s += f" = {self.pct:.1f}% of {self.ceiling_name} ({self.ceiling_value:.1f} {self.unit})"
        if self.pct_peak is not None:
            s += f", {self.pct_peak:.1f}% of the {self.bound} peak ({self.peak_value:,.0f})"
        return s


class _Events:
    def __init__(self, n):
        from cuda.bindings import driver
        self.d = driver
        self.ev = [_check(driver.cuEventCreate(0)) for _ in range(n)]

    def record(self, i):
        _check(self.d.cuEventRecord(self.ev[i], self.d.CUstream(0)))

    def elapsed(self, i, j):
        return _check(self.d.cuEventElapsedTime(self.ev[i], self.ev[j]))

    def __del__(self):
        for e in getattr(self, "ev", []):
            self.d.cuEventDestroy(e)


_flush_buf = None


def flush_l2():
    """Overwrite a buffer twice the L2's size so the next run starts with a cold cache."""
    global _flush_buf
    from cuda.bindings import driver
    from .memory import empty
    g = gpu()
    if _flush_buf is None:
        _flush_buf = empty(2 * g.l2_bytes, np.uint8, poison=False)
    _check(driver.cuMemsetD8Async(_flush_buf.ptr, 0, _flush_buf.nbytes, driver.CUstream(0)))


# A ceiling given by name is measured by feedbeast.ceilings, which times it with bench(): the package's
# __init__ installs its lookup here, so that bench does not import it back.
_ceiling_by_name = None


def use_ceilings(lookup):
    """Install `lookup(which, size=None) -> BenchResult or Skipped`, what bench(ceiling=name) measures."""
    global _ceiling_by_name
    _ceiling_by_name = lookup


def bench(fn, *, name: str, nbytes: float | None = None, flops: float | None = None, ceiling=None,
          bound: str | None = None, kernel=None, warmup: int = 3, reps: int = 30, flush: bool = True,
          sizes: dict | None = None, record: bool = True):
    """Time `fn` (no arguments, or the run index to rotate inputs) with CUDA events.

    ceiling: a BenchResult measured in this process, a number in the result's unit, or a ceiling of
    feedbeast.ceilings by name ("copy", "bf16", "fp32") or with its size (("bf16", 4096)), measured
    once per process.
    bound: the resource the result is bound by ("dram", "l2", "smem", "fp32", "tensor", "tf32"); by
    default the one of the ceiling (copy -> dram, cuBLAS bf16 -> tensor, fp32 -> fp32). A result above
    the resource's physical peak raises PhysicalLimitError.
    kernel: what was timed (a fb Kernel or Module, a Numba kernel, or a list), recorded with the result;
    by default the kernels `fn` refers to.
    Returns a BenchResult, or a Skipped when there is no GPU or fn skipped.
    """
    skip = needs_gpu(f"bench {name}")
    if skip is not None:
        return with_recorded(skip, name)
    from .memory import sync
    takes_index = len(inspect.signature(fn).parameters) >= 1
    call = (lambda i: fn(i)) if takes_index else (lambda i: fn())
    first = call(0)
    if isinstance(first, Skipped):
        return with_recorded(Skipped(first.reason, f"bench {name}"), name)
    for i in range(1, warmup):
        call(i)
    sync()
    ev = _Events(2 * reps)
    for r in range(reps):
        if flush:
            flush_l2()
        ev.record(2 * r)
        call(warmup + r)
        ev.record(2 * r + 1)
    sync()
    times = [ev.elapsed(2 * r, 2 * r + 1) for r in range(reps)]
    res = BenchResult(name, times, nbytes, flops, sizes=sizes)
    if ceiling is not None:
        if isinstance(ceiling, (str, tuple)):
            if _ceiling_by_name is None:
                raise FeedbeastError(f"bench {name}: no ceilings are installed to measure {ceiling!r} "
                                     "(import feedbeast: it installs feedbeast.ceilings)")
            c = _ceiling_by_name(*ceiling) if isinstance(ceiling, tuple) else _ceiling_by_name(ceiling)
            if not isinstance(c, Skipped):
                res.ceiling_name, res.ceiling_value = c.name, c.value
        elif isinstance(ceiling, BenchResult):
            res.ceiling_name, res.ceiling_value = ceiling.name, ceiling.value
        else:
            res.ceiling_name, res.ceiling_value = "given", float(ceiling)
    _against_peak(res, bound)
    res.kernels = kernel_identity(kernel if kernel is not None else fn)
    if record:
        from .results import append
        append(res)
    return res


def with_recorded(skip: Skipped, name: str) -> Skipped:
    """The skip of benchmark `name`, with the figures a GPU run recorded for it (results/<gpu>/), if any."""
    from .results import recorded_bench
    line = recorded_bench(name)
    if line:
        skip.reason += f"; {line}"
    return skip


PEAK_TOLERANCE = 0.01   # timer granularity: a result 1 % over its peak is still an error, 0.5 % is not


def _against_peak(res: BenchResult, bound: str | None):
    if name_is_ceiling := res.name.startswith("ceiling/"):
        bound = bound or bound_of(res.name)
    res.bound = bound or bound_of(res.ceiling_name)
    if res.bound is None or not res.value:
        return
    pk = physical_peak(res.bound)
    res.peak_value, res.peak_how = pk.value, pk.how
    if pk.value and res.value > pk.value * (1 + PEAK_TOLERANCE):
        raise PhysicalLimitError(
            f"{res.name}: {res.value:,.1f} {res.unit} is {res.value / pk.value:.2f}x the physical {res.bound} peak "
            f"of this GPU ({pk.value:,.1f} {pk.unit} = {pk.how}). No kernel can do that: the experiment is wrong. "
            "Usual causes: the compiler removed repeated loads (read the SASS of what was timed), the bytes or "
            "flops were counted for work that was not done, or the data came from a faster level (L2, L1) "
            f"than the bound named{' (a ceiling)' if name_is_ceiling else ''}.")


def kernel_identity(obj) -> list[dict]:
    """Who was timed: for each feedbeast Kernel or Module, or Numba kernel, that `obj` is or refers to
    (a function's closure and globals are searched one level deep), its name, arch, -D defines, registers
    and the first 12 hex digits of the SHA-256 of its source, so that a result traces back to its code."""
    import hashlib
    found, seen = [], set()

    def add(o):
        if id(o) in seen:
            return
        seen.add(id(o))
        from .compile import Module
        from .launch import Kernel
        if isinstance(o, Kernel):
            res = o.module.resources.get(o.name)
            found.append({"kernel": o.name, "arch": o.module.arch, "defines": dict(o.module.defines or {}),
                          "registers": getattr(res, "registers", None),
                          "source_sha256": hashlib.sha256(o.module.source.encode()).hexdigest()[:12]})
        elif isinstance(o, Module):
            for k in o.kernel_names:
                add(o.kernel(k))
        elif hasattr(o, "dispatcher") and hasattr(o, "griddim"):        # a Numba launch configuration
            add(o.dispatcher)
        elif hasattr(o, "py_func") and hasattr(o, "overloads"):          # a Numba kernel
            src = getattr(o, "source", None)
            if src is None:
                try:
                    src = inspect.getsource(o.py_func)
                except (OSError, TypeError):
                    src = o.py_func.__code__.co_code.hex()
            # A factory's kernels share their source; what tells them apart is the values they close over.
            cells = zip(o.py_func.__code__.co_freevars, o.py_func.__closure__ or ())
            consts = {k: c.cell_contents for k, c in cells
                      if isinstance(getattr(c, "cell_contents", None), (bool, int, float, str))}
            rec = {"kernel": o.py_func.__name__, "arch": None, "defines": consts, "registers": None,
                   "source_sha256": hashlib.sha256(src.encode()).hexdigest()[:12]}
            ov = list(getattr(o, "overloads", {}).values())
            if ov:
                try:
                    rec["registers"] = int(ov[-1].regs_per_thread)
                    from .device import gpu
                    g = gpu()
                    rec["arch"] = f"sm_{g.cc[0]}{g.cc[1]}" if g else None
                except Exception:
                    pass
            found.append(rec)
        elif isinstance(o, (list, tuple)):
            for x in o:
                add(x)
        elif isinstance(o, dict):
            for x in o.values():
                add(x)
        elif callable(o) and hasattr(o, "__code__") and depth[0] < 2:
            depth[0] += 1
            try:
                cv = inspect.getclosurevars(o)
                for x in list(cv.nonlocals.values()) + list(cv.globals.values()):
                    if not inspect.ismodule(x):
                        add(x)
            except (TypeError, ValueError):
                pass
            depth[0] -= 1

    depth = [0]
    add(obj)
    return found
