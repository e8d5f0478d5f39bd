"""How this process runs: facts the runners set and the rest of the toolkit reads.

`make sanitize` runs each notebook with FEEDBEAST_UNDER_SANITIZER=1 (sanitize.run sets it). The course reads it
here and sets the library's mode (feedbeast.hooks.mode): debug builds wait longer (compile), deliberate failures
are not run (isolated), sizes shrink (pick), and timing is off (bench, ceiling, profile).

`make test` runs with FEEDBEAST_QUICK=1 (tests/conftest.py sets it, so the notebooks nbval executes inherit it): on a
GPU each notebook checks and times its kernels at the few sizes fb.pick's `quick` names; the sweeps are make bench's.
"""
from __future__ import annotations

import os

UNDER_SANITIZER = "FEEDBEAST_UNDER_SANITIZER"
QUICK = "FEEDBEAST_QUICK"
TIMED_OFF = "timing is off under compute-sanitizer"
UNPROFILED = ("counters are not read under make sanitize (the profiler would run the launches in a process of its "
              "own, unchecked)")


def under_sanitizer() -> bool:
    """True inside `make sanitize`'s notebook runs."""
    return os.environ.get(UNDER_SANITIZER) == "1"


def quick() -> str:
    """Why sizes are cut (make test), or "" when they are not."""
    return "make test: a few sizes per kernel; make bench runs every size" if os.environ.get(QUICK) == "1" else ""
