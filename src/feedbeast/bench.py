"""How fast is it? CUDA-event timing with warm-up, many runs, an L2 flush, and a same-run ceiling.

    r = bench(lambda: k.launch(grid, block, out, a, n), name="ch03/ring", nbytes=2 * a.nbytes,
              ceiling="copy")
    r.gbps, r.pct    # achieved GB/s and % of the copy bandwidth measured in this process

Each result is appended to results/<gpu>/bench.jsonl with the GPU, versions and sizes. Timings are
reported, never asserted.
"""
from __future__ import annotations

import dataclasses
import inspect

import numpy as np

from .device import _check, gpu
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

    def __bool__(self):
        return True

    def __repr__(self):
        lo, hi = self.spread_ms
        s = f"{self.name}: {self.median_ms * 1e3:.1f} us (p10-p90 {lo * 1e3:.1f}-{hi * 1e3:.1f})"
        if self.value:
            s += f", {self.value:.1f} {self.unit}"
        if self.pct is not None:
            s += f" = {self.pct:.1f}% of {self.ceiling_name} ({self.ceiling_value:.1f} {self.unit})"
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


def bench(fn, *, name: str, nbytes: float | None = None, flops: float | None = None, ceiling=None,
          warmup: int = 3, reps: int = 30, flush: bool = True, sizes: dict | None = None,
          record: bool = True):
    """Time `fn` (no arguments, or the run index to rotate inputs) with CUDA events.

    ceiling: a BenchResult measured in this process, a number in the result's unit, or a ceiling of
    feedbeast.ceilings by name ("copy", "bf16", "fp32") or with its size (("bf16", 4096)), measured
    once per process.
    Returns a BenchResult, or a Skipped when there is no GPU or fn skipped.
    """
    skip = needs_gpu(f"bench {name}")
    if skip is not None:
        return skip
    from .memory import sync
    takes_index = len(inspect.signature(fn).parameters) >= 1
    call = (lambda i: fn(i)) if takes_index else (lambda i: fn())
    first = call(0)
    if isinstance(first, Skipped):
        return Skipped(first.reason, f"bench {name}")
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
            from .ceilings import ceiling as get
            c = get(*ceiling) if isinstance(ceiling, tuple) else get(ceiling)
            if not isinstance(c, Skipped):
                res.ceiling_name, res.ceiling_value = c.name, c.value
        elif isinstance(ceiling, BenchResult):
            res.ceiling_name, res.ceiling_value = ceiling.name, ceiling.value
        else:
            res.ceiling_name, res.ceiling_value = "given", float(ceiling)
    if record:
        from .results import append
        append(res)
    return res
