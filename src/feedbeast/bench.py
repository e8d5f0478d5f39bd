"""How fast is it? CUDA-event timing with warm-up, many runs, an L2 flush, and a same-run ceiling.

Chapter 00 explains the timing and the same-run ceiling it is compared with.

    r = bench(lambda: k.launch(grid, block, out, a, n), name="ch03/ring", nbytes=2 * a.nbytes,
              ceiling="copy")
    r.gbps, r.pct    # achieved GB/s and % of the copy bandwidth measured in this process
    r.pct_peak       # and % of the DRAM's physical peak (the bound "dram" follows from the copy ceiling)

Every result names the resource it is bound by (`bound=`: "dram", "l2", "smem", "fp32", "tensor", "tf32", "fp8";
by default the one its ceiling is bound by) and is compared with that resource's physical peak on this GPU
(feedbeast.peaks.physical_peak): a result above it raises PhysicalLimitError, because the experiment,
not the hardware, is wrong. Each result carries the identity of the kernels it timed (name, arch, defines,
registers, a hash of its source): the ones its first run launched, or `kernel=`. bench times and returns; the
course keeps a results log of them (feedbeast.hooks.on_bench). Timings are reported, never asserted.
result_of does the same for times measured another way (interleaved rounds with the host hidden).

The host's time is kept out of every timed run. The runs (an L2 flush, then the call between two events) are
all queued behind one kernel that holds the GPU for twice `reps` times the host time of the slowest warm-up run
(its flush and call), so when the first start event fires every run is already queued, and the GPU runs them
back to back as it would for a host that is never late. Without it, a call slower on the host than flush and
kernel on the GPU (a Python launch that builds a tensor map, say) lets the queue run dry, and then host time
enters the intervals, more in one process than in the next. A hold before each run instead would leave the GPU
idle before each one; that made cuBLAS's 173 us bf16 GEMM at 4096^3 2-3.5 % slower (timing.md in the H200's
results). If the host took longer than the hold to queue the runs, they are timed once more behind a hold of
twice the time they took to queue; a result whose runs may still hold host time says so (`host_hidden`).
Chapters 09 and 10 time their interleaved rounds the same way, and NVBench blocks the stream in the same
spirit, with a kernel that waits until the host releases it.
"""
from __future__ import annotations

import ctypes
import dataclasses
import inspect
import numbers
import time

import numpy as np

from . import hooks
from .device import _check, gpu
from .errors import FeedbeastError, whole
from .peaks import RESOURCES, PhysicalLimitError, bound_of, physical_peak
from .skip import Skipped, needs_gpu, with_recorded


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
    host_us: float | None = None         # median host time of one timed call
    host_hidden: bool = True             # False: the host took longer to queue the runs than the hold lasted

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
        if not self.host_hidden:
            per_call = f" ({self.host_us:.0f} us per call)" if self.host_us is not None else ""
            s += f"; host time not hidden{per_call}: bind the launch (Kernel.bind)"
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


FLUSHES = (True, "read", False)   # bench(flush=): a memset of twice the L2, a read of it, none

_read_flush = None
_READ_FLUSH_SOURCE = r"""
// Evict the L2 by *reading* twice its size: unlike a memset, this leaves no dirty lines that the timed
// kernel's own traffic would have to write back to DRAM first.
extern "C" __global__ void read_flush(const int4* p, long long n, int* sink) {
  int acc = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const int4 v = __ldcg(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x5EED5EED) sink[0] = acc;   // never true for the zero-filled buffer; keeps the loads alive
}
"""


def read_flush_l2():
    """Read a zero-filled buffer twice the L2's size (4 blocks of 512 threads per SM, 16 B loads that bypass L1)
    so the next run starts with a cold cache and no dirty lines: after flush_l2's memset, a kernel that streams
    tens of megabytes first writes the memset's lines back to DRAM (on an H100, cuBLAS at M = 8 and N = K = 4096
    reached 49 % of the copy ceiling after a memset and 62 % after this; chapter 07). Launched directly, like the
    hold: the timer's kernel, not a launch of the notebook's."""
    global _read_flush
    if _read_flush is None:
        from .compile import compile
        from .memory import empty
        g = gpu()
        n16 = 2 * g.l2_bytes // 16
        buf, sink = empty(n16 * 16, np.uint8, poison=False).fill_bytes(0), empty(1, np.int32)
        kern = compile(_READ_FLUSH_SOURCE, name="read_flush.cu").kernel("read_flush")
        kern._load()
        args = (ctypes.c_uint64(buf.ptr), ctypes.c_longlong(n16), ctypes.c_uint64(sink.ptr))
        ptrs = (ctypes.c_void_p * 3)(*(ctypes.addressof(a) for a in args))
        _read_flush = (kern, (4 * g.sm_count, 1, 1), ptrs, args, buf, sink)   # the arguments kept alive
    kern, grid, ptrs = _read_flush[:3]
    kern._raw_launch(grid, (512, 1, 1), 0, None, 0, ptrs)


def _flush(how) -> None:
    """The L2 flush before a run, as bench(flush=) asks for it (FLUSHES)."""
    if how == "read":
        read_flush_l2()
    elif how:
        flush_l2()


def _arguments(fn, name, nbytes, flops, bound, warmup, reps) -> None:
    """bench's arguments, checked before any skip: on a CPU each mistake used to come back as "skipped: needs a
    GPU", and was said first on the GPU (or, for bytes or flops, printed a figure of nothing)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"bench: name={name!r}: the name the result is recorded under, e.g. name='copy_x2 n=2^26'")
    if isinstance(fn, Skipped) or not callable(fn):
        raise TypeError(f"bench {name}: fn is {fn!r}, not a function: pass one that launches, e.g. "
                        "lambda: kernel.launch(...) or kernel.bind(...) (a launch's result is not one)")
    for what, v in (("nbytes", nbytes), ("flops", flops)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Real) or not v >= 0):
            raise ValueError(f"bench {name}: {what}={v!r}: the {'bytes moved' if what == 'nbytes' else 'operations'} "
                             "of one run, a number >= 0 (or None)")
    if bound is not None and bound not in RESOURCES:
        raise ValueError(f"bench {name}: bound={bound!r}: one of {', '.join(RESOURCES)} (or None: the ceiling's)")
    for what, v, least in (("warmup", warmup, 0), ("reps", reps, 1)):
        if not whole(v, least):
            raise ValueError(f"bench {name}: {what}={v!r}: a whole number >= {least}")


def bench(fn, *, name: str, nbytes: float | None = None, flops: float | None = None, ceiling=None,
          bound: str | None = None, kernel=None, warmup: int = 3, reps: int = 30, flush: bool | str = True,
          sizes: dict | None = None, record: bool = True):
    """Time `fn` (no arguments, or the run index to rotate inputs) with CUDA events.

    ceiling: a BenchResult measured in this process, a number in the result's unit, or a ceiling of
    feedbeast.ceilings by name ("copy", "bf16", "fp32") or with its size (("bf16", 4096)), measured
    once per process.
    bound: the resource the result is bound by ("dram", "l2", "smem", "fp32", "tensor", "tf32", "fp8"); by
    default the one of the ceiling (copy -> dram, cuBLAS bf16 -> tensor, fp32 -> fp32). A result above
    the resource's physical peak raises PhysicalLimitError.
    kernel: what was timed (a fb Kernel, Module or Launch, a Numba kernel, or a list), kept with the result; by
    default `fn.kernel` (a Launch from Kernel.bind) and the fb kernels that `fn`'s first run launched.
    flush: before each run, True empties the L2 with a memset of twice its size; "read" reads twice its size
    instead, which leaves no dirty lines for the run to write back (a memory-bound run of tens of MB: chapter 07);
    False keeps what the last run left in it.
    record: hand the result to feedbeast.hooks.on_bench (the course's results log, when installed).
    Returns a BenchResult, or a Skipped when there is no GPU or fn skipped.
    """
    if flush not in FLUSHES:     # said on every machine, before any skip
        raise ValueError(f"bench {name}: flush is True (a memset of twice the L2), \"read\" (a read of it) or False, "
                         f"not {flush!r}")
    _arguments(fn, name, nbytes, flops, bound, warmup, reps)
    skip = needs_gpu(f"bench {name}")
    if skip is not None:
        return with_recorded(skip, name)
    takes_index = len(inspect.signature(fn).parameters) >= 1
    call = (lambda i: fn(i)) if takes_index else (lambda i: fn())
    from .launch import watching
    with watching() as launched:
        first = call(0)
    if isinstance(first, Skipped):
        return with_recorded(Skipped(first.reason, f"bench {name}"), name)
    if hooks.mode.untimed:        # make sanitize: one run is what the tools check; a time would mean nothing
        return Skipped(hooks.mode.untimed, f"bench {name}")
    launched = [x.kernel for x in launched if "FB_HAZARDS" not in (x.kernel.module.defines or {})]   # not hazard builds
    times, host_us, hidden = _time(call, warmup, reps, flush)
    return result_of(name, times, nbytes=nbytes, flops=flops, ceiling=ceiling, bound=bound,
                     kernel=[kernel] if kernel is not None else [getattr(fn, "kernel", None), launched],
                     sizes=sizes, record=record, host_us=host_us, host_hidden=hidden)


def result_of(name: str, times_ms, *, nbytes: float | None = None, flops: float | None = None, ceiling=None,
              bound: str | None = None, kernel=None, sizes: dict | None = None, record: bool = True,
              host_us: float | None = None, host_hidden: bool = True) -> BenchResult:
    """The BenchResult of per-run times measured another way (interleaved rounds, launches queued behind a GPU
    spin so that the host is hidden), held to what bench() holds its own to: the same-run ceiling, the physical
    peak of `bound` (above it: PhysicalLimitError), the identity of `kernel`, and the results log when `record`.
    `ceiling`, `bound` and `kernel` as for bench()."""
    res = BenchResult(name, list(times_ms), nbytes, flops, sizes=sizes, host_us=host_us, host_hidden=host_hidden)
    _set_ceiling(res, ceiling)
    _against_peak(res, bound)
    res.kernels = kernel_identity(kernel)
    if record:
        hooks.emit(hooks.on_bench, res)
    return res


HOLD_MIN_NS = 20_000            # the shortest hold
HOLD_MAX_NS = 1_000_000_000     # the longest: one second to queue the runs


def _time(call, warmup: int, reps: int, flush) -> tuple[list, float, bool]:
    """Per-run times in ms: the warm-up runs (the first made by the caller), then `reps` runs, each an L2 flush (as
    bench's `flush` says) and the call between two events, all queued behind one hold (see the module's docstring).
    Returns (times, median host time of a timed call in us, whether the host had queued every run before the hold
    ended)."""
    from .memory import sync
    if flush:
        _flush(flush)   # allocates the flush buffer (and builds the read flush) now, outside the held window
    host = [_host_time(call, i, flush) for i in range(1, warmup)]     # each warm-up run as a timed one: flush, call
    sync()
    hold_ns = _hold_for(reps * max(host, default=0.0))
    for attempt in range(2):
        ev, host = _Events(2 * reps), []
        _hold(hold_ns)
        t0 = time.perf_counter()
        for r in range(reps):
            if flush:
                _flush(flush)
            ev.record(2 * r)
            host.append(_host_time(call, warmup + r))
            ev.record(2 * r + 1)
        queued_ns = (time.perf_counter() - t0) * 1e9
        sync()
        hidden = queued_ns < hold_ns
        if hidden or hold_ns >= HOLD_MAX_NS:
            break
        hold_ns = _hold_for(queued_ns / 1e9)
    return [ev.elapsed(2 * r, 2 * r + 1) for r in range(reps)], float(np.median(host)) * 1e6, hidden


def _host_time(call, i, flush=False) -> float:
    """Seconds the host spends issuing call(i), and the L2 flush before it when `flush`."""
    t = time.perf_counter()
    if flush:
        _flush(flush)
    call(i)
    return time.perf_counter() - t


def _hold_for(host_s: float) -> int:
    """A hold (ns) with room for twice the host time given."""
    return int(min(max(2 * host_s * 1e9, HOLD_MIN_NS), HOLD_MAX_NS))


_hold_kernel = None
_HOLD_SOURCE = r"""
extern "C" __global__ void fb_hold(long long ns) {   // one thread reads the clock until ns have passed
  long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}"""


def _hold(ns: int) -> None:
    """Queue a one-thread kernel that keeps the stream busy for `ns` nanoseconds (%globaltimer, PTX ISA "Special
    Registers"). Launched directly: it is the timer's, not a launch of the notebook's (no hooks, not recorded)."""
    global _hold_kernel
    if _hold_kernel is None:
        from .compile import compile
        _hold_kernel = compile(_HOLD_SOURCE, name="fb_hold.cu").kernel("fb_hold")
        _hold_kernel._load()
    arg = ctypes.c_longlong(ns)
    ptrs = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
    _hold_kernel._raw_launch((1, 1, 1), (1, 1, 1), 0, None, 0, ptrs)


def _set_ceiling(res: BenchResult, ceiling) -> None:
    """The ceiling res is compared with: measured by name through feedbeast.hooks.ceiling, given, or None."""
    if ceiling is None:
        return
    if isinstance(ceiling, (str, tuple)):
        if hooks.ceiling is None:
            raise FeedbeastError(f"bench {res.name}: no ceilings are installed to measure {ceiling!r} "
                                 "(import feedbeast: it installs feedbeast.ceilings)")
        c = hooks.ceiling(*ceiling) if isinstance(ceiling, tuple) else hooks.ceiling(ceiling)
        if not isinstance(c, Skipped):
            res.ceiling_name, res.ceiling_value = c.name, c.value
    elif isinstance(ceiling, BenchResult):
        res.ceiling_name, res.ceiling_value = ceiling.name, ceiling.value
    else:
        res.ceiling_name, res.ceiling_value = "given", float(ceiling)


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
    """Who was timed: for each feedbeast Kernel, Module or Launch, or Numba kernel in `obj` (one, or a list), its
    name, arch, -D defines, registers and the first 12 hex digits of the SHA-256 of its source, so that a result
    traces back to its code. Nothing is guessed: what is not one of those is left out."""
    found, seen = [], set()

    def add(o):
        if o is None or id(o) in seen:
            return
        seen.add(id(o))
        if isinstance(o, (list, tuple)):
            for x in o:
                add(x)
            return
        if hasattr(o, "kernel") and not callable(getattr(o, "kernel")):   # a Launch
            return add(o.kernel)
        if hasattr(o, "kernel_names"):                                   # a Module
            for k in o.kernel_names:
                add(o.kernel(k))
            return
        if hasattr(o, "dispatcher") and hasattr(o, "griddim"):            # a Numba launch configuration
            return add(o.dispatcher)
        rec = _fb_kernel(o) if hasattr(o, "module") and hasattr(o, "name") else _numba_kernel(o)
        if rec is not None:
            found.append(rec)

    add(obj)
    return found


def _sha(text: str) -> str:
    import hashlib
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _fb_kernel(k) -> dict:
    res = k.module.resources.get(k.name)
    return {"kernel": k.name, "arch": k.module.arch, "defines": dict(k.module.defines or {}),
            "registers": getattr(res, "registers", None), "source_sha256": _sha(k.module.source)}


def _numba_kernel(o) -> dict | None:
    if not (hasattr(o, "py_func") and hasattr(o, "overloads")):
        return None
    src = getattr(o, "source", None)
    if src is None:
        try:
            src = inspect.getsource(o.py_func)
        except (OSError, TypeError):
            src = o.py_func.__code__.co_code.hex()
    # A factory's kernels share their source; what tells them apart is the values they close over.
    cells = zip(o.py_func.__code__.co_freevars, o.py_func.__closure__ or ())
    consts = {k: c.cell_contents for k, c in cells if isinstance(getattr(c, "cell_contents", None),
                                                                (bool, int, float, str))}
    rec = {"kernel": o.py_func.__name__, "arch": None, "defines": consts, "registers": None,
           "source_sha256": _sha(src)}
    ov = list(getattr(o, "overloads", {}).values())
    if ov:
        try:
            rec["registers"] = int(ov[-1].regs_per_thread)
            g = gpu()
            rec["arch"] = f"sm_{g.cc[0]}{g.cc[1]}" if g else None
        except Exception:
            pass
    return rec
