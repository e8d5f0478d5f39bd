"""Is the kernel right? Compare against a float64 reference, element by element.

Chapter 00 explains the check against a float64 reference and the poisoned output it reads.

    check(out, ref)              # out: DeviceArray or numpy; ref: float64 numpy
    check(out, ref, tol="tf32")

Passes when the relative error ||out - ref|| / ||ref|| is under the dtype's threshold AND no element
is NaN or still holds the poison the output was filled with. Fails with the worst elements named.

    tally(name, passed, line)    a check a notebook counts over many cases itself (an element-wise bound per case,
                                 planted errors that must fail): one verdict, logged and recorded like check()'s
"""
from __future__ import annotations

import dataclasses

import numpy as np

from . import hooks
from .errors import CheckFailed
from .skip import Skipped, with_recorded

# Relative-error thresholds by the output's storage type (or by name for tensor-core math modes).
TOLERANCE = {"float64": 1e-12, "float32": 1e-5, "tf32": 3e-4, "float16": 2e-3, "bfloat16": 1e-2,
             "bf16": 1e-2, "int": 0.0,
             # a float32 result (an fp32 accumulator, its bias and ReLU) rounded once to bf16, on random data: round
             # to nearest measures 1.5-1.8e-3 norm-wise on the labs' GEMM checks (each element within 2^-8 of
             # itself, about half that on average), rounding toward zero (a truncation) 2.9-3.5e-3. A measured
             # margin between the two, not a bound: an input of values just above powers of two would need more
             "bf16-rounded": 2.2e-3}


def tolerance_for(dtype, tol=None) -> float:
    if isinstance(tol, (int, float, np.floating, np.integer)) and not isinstance(tol, bool):
        if not tol >= 0:           # a negative (or NaN) limit fails every output: a typo, not a check
            raise ValueError(f"tol={tol!r}: a tolerance is a relative error >= 0 (0 asks for exact equality)")
        return float(tol)
    if isinstance(tol, str):
        if tol not in TOLERANCE:
            raise ValueError(f"unknown tolerance name {tol!r}: use one of {', '.join(TOLERANCE)} or a number")
        return TOLERANCE[tol]
    if tol is not None:            # a list or a tuple was taken for the default before: the check ran at another limit
        raise ValueError(f"tol={tol!r}: give one number (the relative error allowed, e.g. tol=1e-3) or a name "
                         f"({', '.join(TOLERANCE)})")
    dt = np.dtype(dtype)
    if dt.kind in "iub":
        return 0.0
    return TOLERANCE.get(dt.name, 1e-2)


@dataclasses.dataclass
class CheckResult:
    name: str
    passed: bool
    rel_error: float
    tolerance: float
    n_bad: int
    detail: str = ""

    def __bool__(self):
        return self.passed

    def __repr__(self):
        verdict = "passed" if self.passed else "FAILED"
        return (f"{self.name}: {verdict}: relative error {self.rel_error:.2e} "
                f"(limit {self.tolerance:.0e}){self.detail and chr(10) + self.detail}")


def _poisoned(out: np.ndarray) -> np.ndarray:
    """Elements whose bytes are all 0xFF: never written since the array was poisoned."""
    size = out.dtype.itemsize
    if size in (2, 4, 8) and out.flags.c_contiguous:
        return out.view(f"u{size}") == np.iinfo(f"u{size}").max
    b = out.view(np.uint8).reshape(out.shape + (size,))
    return np.all(b == 0xFF, axis=-1)


def _compatible(shape, dtype, ref: np.ndarray, name: str):
    """Raise CheckFailed when an output of this shape and dtype cannot be compared with `ref`."""
    dtype = np.dtype(dtype)
    if tuple(shape) != ref.shape:
        raise CheckFailed(f"{name}: output has shape {tuple(shape)} but the reference has {ref.shape}")
    if ref.dtype.kind == "c":
        raise CheckFailed(f"{name}: the reference is complex ({ref.dtype}); compare its real and imaginary parts apart")
    if ref.dtype.kind == "f" and ref.dtype != np.float64:
        raise CheckFailed(f"{name}: the reference is {ref.dtype}; compute it in float64 "
                          "(e.g. a.astype(np.float64) @ b.astype(np.float64)) so that it is the exact one")
    if dtype.kind not in "fiubV" and dtype.name != "bfloat16":
        raise CheckFailed(f"{name}: cannot compare an output of dtype {dtype}")


CHUNK = 1 << 22     # elements compared at a time: temporaries of tens of MB, whatever the output's size


@dataclasses.dataclass
class _Compared:
    rel: float             # ||out - ref|| / ||ref|| over the written, finite elements; inf when any is not
    n_bad: int             # unwritten, NaN, or off by far more than the threshold allows
    n_unwritten: int
    n_nan: int
    first_unwritten: list  # flat indices, the first `show`
    first_nan: list
    worst: list            # (flat index, got, expected, off by) of the largest errors, largest first


def _compare(out: np.ndarray, ref: np.ndarray, limit: float, show: int) -> _Compared:
    """`out` against `ref` in chunks of CHUNK elements: whole-array float64 temporaries of a 16384 x 8192 output
    took 4.5 GB and a sort of every error 30 s, enough for a machine grading several notebooks to kill the
    process. Keeps the sums, the counts and the `show` worst elements."""
    n = out.size
    o_flat, r_flat = _flat(out), _flat(ref)
    scale, ref_sq = 0.0, 0.0
    for s in range(0, n, CHUNK):
        r = r_flat(s, s + CHUNK).astype(np.float64, copy=False)
        scale = float(np.maximum(scale, np.abs(r).max(initial=0.0)))   # a NaN stays, as over the whole array
        ref_sq += float(np.dot(r, r))
    # An element is "bad" when its own error is far beyond what the global threshold allows.
    far = max(limit, 1e-12) * max(scale, 1e-30) * 10
    diff_sq, n_bad, n_unwritten, n_nan = 0.0, 0, 0, 0
    first_unwritten, first_nan, worst = [], [], []
    for s in range(0, n, CHUNK):
        o, r = o_flat(s, s + CHUNK), r_flat(s, s + CHUNK).astype(np.float64, copy=False)
        unwritten = _poisoned(o) if o.dtype.itemsize > 1 else np.zeros(o.shape, bool)
        if o.dtype.kind in "iu":
            unwritten &= (r != -1)   # all-ones is a legitimate signed value when the reference says so
        got = o.astype(np.float64)
        nan = np.isnan(got) & ~unwritten
        diff = np.where(unwritten | nan, 0.0, np.abs(got - r))
        diff_sq += float(np.dot(diff, diff))
        n_unwritten += int(unwritten.sum())
        n_nan += int(nan.sum())
        n_bad += int((unwritten | nan | (diff > far)).sum())
        first_unwritten += [s + int(i) for i in np.flatnonzero(unwritten)[:show - len(first_unwritten)]]
        first_nan += [s + int(i) for i in np.flatnonzero(nan)[:show - len(first_nan)]]
        k = min(show, diff.size)
        if k > 0:
            t = diff[np.argpartition(diff, diff.size - k)[diff.size - k]]     # the k-th largest (NaN largest)
            nan_d = np.isnan(diff)                                           # a NaN or inf reference
            top = np.flatnonzero((diff > t) | nan_d) if t == t else np.flatnonzero(nan_d)[:k]
            top = np.concatenate([top, np.flatnonzero(diff == t)[:k - top.size]])
            worst = sorted(worst + [(s + int(i), float(got[i]), float(r[i]), float(diff[i]))
                                    for i in top if not diff[i] <= 0],
                           key=lambda w: (w[3] == w[3], -w[3] if w[3] == w[3] else 0, w[0]))[:show]
    rel = diff_sq ** 0.5 / (ref_sq ** 0.5 if ref_sq else 1.0)
    if n_unwritten or n_nan:
        rel = float("inf")
    return _Compared(rel, n_bad, n_unwritten, n_nan, first_unwritten, first_nan, worst)


def _flat(a: np.ndarray):
    """(start, stop) -> those elements of `a` in C order, 1-D (a view where `a` is contiguous)."""
    if a.flags.c_contiguous:
        v = a.reshape(-1)
        return lambda s, e: v[s:e]
    return lambda s, e: np.asarray(a.flat[s:e])


def _host_copy(a, name: str) -> np.ndarray:
    """A numpy copy of a device array of another library."""
    from .memory import _is_torch, torch_to_numpy
    if _is_torch(a):                              # bf16 and fp8 too, which numpy() refuses
        return torch_to_numpy(a)
    for how in ("copy_to_host", "get"):          # Numba, CuPy
        if callable(getattr(a, how, None)):
            return np.asarray(getattr(a, how)())
    raise TypeError(f"{name}: out is a {type(a).__name__} on the GPU with no way known here to copy it to the host: "
                    "pass a numpy copy of it")


def check(out, ref, *, tol=None, name: str = "check", raise_on_fail: bool = True, show: int = 5, after=None):
    """Compare `out` with the float64 reference `ref`. Returns a CheckResult (or a Skipped, which carries what a
    GPU run recorded for this check when the course's results/ has it). `after`: what the launch that wrote `out`
    returned; a Skipped there (the launch could not run here) is the answer, with this check's record added,
    and `out`, never written, is not compared."""
    from .memory import DeviceArray, _is_torch, guarded_view, interface
    if isinstance(out, Skipped):
        return with_recorded(out, name, "check")
    if not isinstance(out, (DeviceArray, np.ndarray)) and interface(out) is not None:
        # a Numba (fbn.device_or_host), CuPy or PyTorch array: the guarded output it views, so that a store past the
        # end is seen, or else a host copy
        view = guarded_view(out)
        out = view if view is not None else _host_copy(out, name)
    elif _is_torch(out):                          # a PyTorch tensor in host memory (a bf16 one numpy cannot read)
        out = _host_copy(out, name)
    for what, a in (("out", out), ("ref", ref)):
        if a is None or isinstance(a, (str, bytes)):   # np.shape(None) is (): the message would be about shapes
            raise TypeError(f"{name}: {what} is {a!r}, not an array: "
                            + ("pass the array the kernel wrote (a launch returns None, or a Skipped)" if what == "out"
                               else "pass the expected values, a numpy array (float64 for a reference)"))
    tolerance_for(np.float64, tol)          # a tol that is no tolerance is said on every machine, before any skip
    ref = np.asarray(ref)
    # The shapes and dtypes are known without a GPU: a mistake in them is said on every machine, before any skip.
    shape = tuple(out.shape) if isinstance(out, DeviceArray) else np.shape(out)
    dtype = out.dtype if isinstance(out, DeviceArray) else np.asarray(out).dtype
    if shape != ref.shape and not raise_on_fail:     # an output of the wrong shape: a verdict to collect, as any
        return _verdict(CheckResult(name, False, float("inf"), tolerance_for(dtype, tol), int(ref.size),
                                    f"  output has shape {shape} but the reference has {ref.shape}"), False)
    _compatible(shape, dtype, ref, name)
    if isinstance(after, Skipped):
        return with_recorded(after, name, "check")
    overrun = (0, 0)
    if isinstance(out, DeviceArray):
        if not out.on_gpu:
            return with_recorded(Skipped("needs a GPU, this machine has none", name), name, "check")
        overrun = out.overrun()          # the poisoned guard after the last element (fb.empty)
        out = out.to_host()
    out = np.asarray(out)
    limit = tolerance_for(out.dtype, tol)
    c = _compare(out, ref, limit, show)
    passed = (c.rel <= limit and not c.n_bad if limit > 0 else not c.n_bad and c.rel == 0.0) and not overrun[0]
    lines = []
    if overrun[0]:
        lines.append(f"  {overrun[0]} bytes after the last element were written (the first at +{overrun[1]}) since "
                     "fb.empty, .poison() or the last check of this output: a store past its end, such as a loop bound "
                     "or a row guard one too far")
    if c.n_unwritten:
        lines.append(f"  {c.n_unwritten} of {out.size} elements were never written (still poison), "
                     f"first at {_idx(c.first_unwritten, out.shape)}")
    if c.n_nan:
        lines.append(f"  {c.n_nan} elements are NaN, first at {_idx(c.first_nan, out.shape)}")
    if not passed:
        for flat, got, want, off in c.worst:
            d = next((d for d in (6, 9, 12) if f"{got:.{d}g}" != f"{want:.{d}g}"), 17)   # digits that differ
            lines.append(f"  at {_idx([flat], out.shape)}: got {got:.{d}g}, expected {want:.{d}g} (off by {off:.3g})")
    if not passed:   # a lab's kernel whose part is not written yet: say that first
        from . import launch
        todo = getattr(getattr(launch.last_launched, "module", None), "todo", "")
        lines = [todo.rstrip("\n")] + lines if todo else lines
    return _verdict(CheckResult(name, bool(passed), c.rel, limit, c.n_bad, "\n".join(lines)), raise_on_fail)


def _verdict(result: CheckResult, raise_on_fail: bool) -> CheckResult:
    """Record a check's verdict, and raise it when it failed and raise_on_fail."""
    hooks.verdict("passed" if result.passed else "failed", result.name, repr(result))   # what grading reads
    hooks.emit(hooks.on_check, result)      # the results log keeps it where a GPU is (make bench: results/<gpu>/)
    if not result.passed and raise_on_fail:
        raise CheckFailed(repr(result))
    return result


@dataclasses.dataclass
class Tally:
    """A check a notebook counts over many cases itself (an element-wise bound per case, planted errors that must
    fail): its verdict and the line that says what was counted."""
    name: str
    passed: bool
    line: str

    def __bool__(self):
        return self.passed

    def __repr__(self):
        return f"{self.name}: {'passed' if self.passed else 'FAILED'}: {self.line}"


def tally(name: str, passed, line: str = "", *, raise_on_fail: bool = True):
    """The verdict `passed` of a check counted over many cases, with `line` saying what was counted; logged like a
    check() (the results log keeps it where a GPU is) and, like it, raising CheckFailed when it failed. Given a
    Skipped instead (nothing could be counted here), the skip, with what a GPU run recorded under `name`."""
    if isinstance(passed, Skipped):
        return with_recorded(passed, name, "check")
    if isinstance(passed, (str, bytes)) or isinstance(passed, np.ndarray) and passed.size != 1:
        # the string 'False' counted as passed; an array raised numpy's "truth value ... is ambiguous"
        raise TypeError(f"tally {name}: passed={passed!r}: give True or False (for an array of per-case verdicts, "
                        "its .all())")
    result = Tally(name, bool(passed), line or "every case")
    hooks.verdict("passed" if result.passed else "failed", name, repr(result))
    hooks.emit(hooks.on_check, result)
    if not result.passed and raise_on_fail:
        raise CheckFailed(repr(result))
    return result


def _idx(flat, shape) -> str:
    """Flat indices as index tuples of `shape`."""
    return ", ".join(str(tuple(int(x) for x in np.unravel_index(f, shape))) for f in flat)
