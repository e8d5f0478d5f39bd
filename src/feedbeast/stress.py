"""Stress mode: random ragged sizes and repeated runs compared bit for bit.

Chapter 07 runs its kernels repeatedly with it and compares the outputs bit for bit.

    FEEDBEAST_STRESS=100 pytest tests -m gpu        # what `make stress` runs (feedbeast.course.stress_run)

A GPU test opts in with two helpers:

    for n in stress.sizes(10_000_019, multiple_of=8):       # the base size, then N random ragged ones
        ...
    for m, n, k in stress.sizes((1000, 1032, 1000), multiple_of=(128, 256, 64), align=(1, 8, 8)):
        ...
    out = stress.repeat_identical(lambda: run_and_copy_back(), n=3)   # bitwise-equal every time

With FEEDBEAST_STRESS unset (or 0), `sizes` yields only the base shape and `repeat_identical` runs
twice, so the normal suite stays fast. FEEDBEAST_STRESS_SEED fixes the random sizes (default 0), so
a failing size comes back on the next run.
"""
from __future__ import annotations

import os

import numpy as np


def level() -> int:
    """FEEDBEAST_STRESS as a number of extra random cases (0 when unset)."""
    raw = os.environ.get("FEEDBEAST_STRESS", "").strip()
    if not raw:
        return 0
    try:
        return max(0, int(raw))
    except ValueError:
        raise ValueError(f"FEEDBEAST_STRESS={raw!r}: give a number of random cases, e.g. 100") from None


def _ragged(rng, lo: int, hi: int, m: int, a: int) -> int:
    """A multiple of a in lo..hi (rounded up to a) that is not a multiple of m (when m > a and one exists)."""
    first = -(-lo // a)
    v = a * int(rng.integers(first, max(first, hi // a) + 1))
    if m > a and v % m == 0:
        v = v - a if v - a >= lo else v + a
    return v


def sizes(base_shape, multiple_of=1, align=1, at_least=1, n: int | None = None, seed: int | None = None):
    """The base shape, then `n` random shapes (default: FEEDBEAST_STRESS) no larger than it.

    base_shape: an int or a tuple. multiple_of: the tile size (an int, or one per dimension); each
    random dimension is ragged, i.e. not a multiple of it. align: what the kernel requires of a
    dimension (an int, or one per dimension; e.g. 8 for a bf16 row that TMA or cp.async reads in
    16-byte pieces); each random dimension is a multiple of it. at_least: the smallest size the kernel
    takes (an int, or one per dimension). A TMA box does not need it: a box larger than the tensor is
    legal, and the TMA unit fills the elements outside the tensor.
    About one case in four draws every dimension from the tiny end (below 2 tiles above at_least),
    where tail handling breaks first.
    """
    scalar = np.isscalar(base_shape)
    base = (int(base_shape),) if scalar else tuple(int(d) for d in base_shape)

    def per_dim(v, what):
        t = (int(v),) * len(base) if np.isscalar(v) else tuple(int(x) for x in v)
        if len(t) != len(base):
            raise ValueError(f"{what} has {len(t)} entries for a shape of {len(base)} dimensions")
        if any(x < 1 for x in t):
            raise ValueError(f"{what}={v}: every entry must be 1 or more")
        return t
    mult, align, low = per_dim(multiple_of, "multiple_of"), per_dim(align, "align"), per_dim(at_least, "at_least")
    if any(lo > d for lo, d in zip(low, base)):
        raise ValueError(f"at_least={at_least} is larger than the base shape {base_shape}")
    if any(d < 1 for d in base):
        raise ValueError(f"base shape {base_shape} has a dimension below 1")
    n = level() if n is None else n
    if seed is None:
        seed = int(os.environ.get("FEEDBEAST_STRESS_SEED", "0"))
    rng = np.random.default_rng(seed)
    yield base_shape if scalar else base
    for _ in range(n):
        tiny = rng.random() < 0.25
        shape = tuple(_ragged(rng, lo, min(d, lo + 2 * m) if tiny else d, m, a)
                      for d, m, a, lo in zip(base, mult, align, low))
        yield shape[0] if scalar else shape


def _host(x):
    from .memory import DeviceArray
    if isinstance(x, DeviceArray):
        return x.to_host()
    if isinstance(x, (list, tuple)):
        return type(x)(_host(v) for v in x)
    if isinstance(x, dict):
        return {k: _host(v) for k, v in x.items()}
    return np.asarray(x)


def _leaves(x, path=""):
    if isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            yield from _leaves(v, f"{path}[{i}]")
    elif isinstance(x, dict):
        for k, v in x.items():
            yield from _leaves(v, f"{path}[{k!r}]")
    else:
        yield path or "output", x


def _first_difference(a: np.ndarray, b: np.ndarray) -> str:
    ab, bb = np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8)
    flat_bytes = np.flatnonzero(ab.ravel() != bb.ravel())
    n_el = len(np.unique(flat_bytes // max(a.dtype.itemsize, 1)))
    i = np.unravel_index(int(flat_bytes[0]) // max(a.dtype.itemsize, 1), a.shape) if a.ndim else ()
    at = tuple(int(k) for k in i)
    return f"{n_el} elements differ, first at {at}: {a[at]!r} then {b[at]!r}"


def repeat_identical(fn, n: int | None = None):
    """Run fn() n times (default 2, or FEEDBEAST_STRESS when set) and assert bitwise-identical outputs.

    fn returns a numpy array, a DeviceArray (copied back), or a list/tuple/dict of them; a Skipped
    is returned as is (nothing ran, so nothing is compared). Returns the first run's output (on the
    host). Raises CheckFailed naming the run, the output and the first element that differs.
    """
    from .errors import CheckFailed
    from .skip import Skipped
    n = n if n is not None else max(2, level())
    if n < 1:
        raise ValueError("repeat_identical needs n >= 1")
    first = fn()
    if isinstance(first, Skipped):
        return first
    first = _host(first)
    ref = list(_leaves(first))
    for run in range(1, n):
        got = list(_leaves(_host(fn())))
        if len(got) != len(ref):
            raise CheckFailed(f"run {run + 1} of {n} returned {len(got)} outputs, run 1 returned {len(ref)}")
        for (where, a), (_, b) in zip(ref, got):
            if a.shape != b.shape or a.dtype != b.dtype:
                raise CheckFailed(f"run {run + 1} of {n}: {where} is {b.dtype}{list(b.shape)}, "
                                  f"run 1 gave {a.dtype}{list(a.shape)}")
            if a.tobytes() != b.tobytes():
                raise CheckFailed(f"run {run + 1} of {n}: {where} is not bitwise identical to run 1: "
                                  f"{_first_difference(a, b)}")
    return first
