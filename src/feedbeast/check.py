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
    if isinstance(tol, (int, float)) and not isinstance(tol, bool):
        return float(tol)
    if isinstance(tol, str):
        if tol not in TOLERANCE:
            raise ValueError(f"unknown tolerance name {tol!r}: use one of {', '.join(TOLERANCE)} or a number")
        return TOLERANCE[tol]
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
    b = out.view(np.uint8).reshape(out.shape + (out.dtype.itemsize,))
    return np.all(b == 0xFF, axis=-1)


def _compatible(shape, dtype, ref: np.ndarray, name: str):
    """Raise CheckFailed when an output of this shape and dtype cannot be compared with `ref`."""
    dtype = np.dtype(dtype)
    if tuple(shape) != ref.shape:
        raise CheckFailed(f"{name}: output has shape {tuple(shape)} but the reference has {ref.shape}")
    if ref.dtype.kind == "f" and ref.dtype != np.float64:
        raise CheckFailed(f"{name}: the reference is {ref.dtype}; compute it in float64 "
                          "(e.g. a.astype(np.float64) @ b.astype(np.float64)) so that it is the exact one")
    if dtype.kind not in "fiubV" and dtype.name != "bfloat16":
        raise CheckFailed(f"{name}: cannot compare an output of dtype {dtype}")


def check(out, ref, *, tol=None, name: str = "check", raise_on_fail: bool = True, show: int = 5, after=None):
    """Compare `out` with the float64 reference `ref`. Returns a CheckResult (or a Skipped, which carries what a
    GPU run recorded for this check when the course's results/ has it). `after`: what the launch that wrote `out`
    returned; a Skipped there (the launch could not run here) is the answer, with this check's record added,
    and `out`, never written, is not compared."""
    from .memory import DeviceArray
    if isinstance(out, Skipped):
        return with_recorded(out, name, "check")
    ref = np.asarray(ref)
    # The shapes and dtypes are known without a GPU: a mistake in them is said on every machine, before any skip.
    _compatible(tuple(out.shape) if isinstance(out, DeviceArray) else np.shape(out),
                out.dtype if isinstance(out, DeviceArray) else np.asarray(out).dtype, ref, name)
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
    unwritten = _poisoned(out) if out.dtype.itemsize > 1 else np.zeros(out.shape, bool)
    if out.dtype.kind in "iu":
        unwritten &= (ref != -1)   # all-ones is a legitimate signed value when the reference says so
    got = out.astype(np.float64)
    nan = np.isnan(got) & ~unwritten
    diff = np.abs(got - ref)
    denom = np.linalg.norm(ref.ravel())
    finite = ~(unwritten | nan)
    rel = float(np.linalg.norm(np.where(finite, diff, 0).ravel()) / (denom if denom else 1.0))
    if unwritten.any() or nan.any():
        rel = float("inf")
    # An element is "bad" when its own error is far beyond what the global threshold allows.
    scale = max(float(np.abs(ref).max(initial=0.0)), 1e-30)
    elem_bad = finite & (diff > max(limit, 1e-12) * scale * 10)
    bad = unwritten | nan | elem_bad
    passed = (rel <= limit and not bad.any() if limit > 0 else not bad.any() and rel == 0.0) and not overrun[0]
    lines = []
    if overrun[0]:
        lines.append(f"  {overrun[0]} bytes after the last element were written (the first at +{overrun[1]}) since "
                     "fb.empty, .poison() or the last check of this output: a store past its end, such as a loop bound "
                     "or a row guard one too far")
    if unwritten.any():
        lines.append(f"  {int(unwritten.sum())} of {out.size} elements were never written (still poison), "
                     f"first at {_idx(np.argwhere(unwritten)[:show])}")
    if nan.any():
        lines.append(f"  {int(nan.sum())} elements are NaN, first at {_idx(np.argwhere(nan)[:show])}")
    if not passed and finite.any():
        worst = np.argsort(np.where(finite, diff, -1).ravel())[::-1][:show]
        for flat in worst:
            i = np.unravel_index(flat, out.shape)
            if diff[i] == 0:
                break
            lines.append(f"  at {tuple(int(x) for x in i)}: got {got[i]:.6g}, expected {ref[i]:.6g} "
                         f"(off by {diff[i]:.3g})")
    if not passed:   # a lab's kernel whose part is not written yet: say that first
        from . import launch
        todo = getattr(getattr(launch.last_launched, "module", None), "todo", "")
        lines = [todo.rstrip("\n")] + lines if todo else lines
    result = CheckResult(name, bool(passed), rel, limit, int(bad.sum()), "\n".join(lines))
    hooks.verdict("passed" if result.passed else "failed", name, repr(result))   # what grading reads
    hooks.emit(hooks.on_check, result)      # the results log keeps it where a GPU is (make bench: results/<gpu>/)
    if not passed and raise_on_fail:
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
    result = Tally(name, bool(passed), line or "every case")
    hooks.verdict("passed" if result.passed else "failed", name, repr(result))
    hooks.emit(hooks.on_check, result)
    if not result.passed and raise_on_fail:
        raise CheckFailed(repr(result))
    return result


def _idx(rows):
    return ", ".join(str(tuple(int(x) for x in r)) for r in rows)
