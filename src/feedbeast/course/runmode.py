"""How this process runs: facts the runners set and the rest of the toolkit reads.

`make sanitize` runs each notebook with FEEDBEAST_UNDER_SANITIZER=1 (sanitize.run sets it). The course reads it
here and sets the library's mode (feedbeast.hooks.mode): debug builds wait longer (compile), deliberate failures
are not run (isolated), sizes shrink (pick), and timing is off (bench, ceiling, profile).
"""
from __future__ import annotations

import os

UNDER_SANITIZER = "FEEDBEAST_UNDER_SANITIZER"
TIMED_OFF = "timing is off under compute-sanitizer"
UNPROFILED = ("counters are not read under make sanitize (the profiler would run the launches in a process of its "
              "own, unchecked)")


def under_sanitizer() -> bool:
    """True inside `make sanitize`'s notebook runs."""
    return os.environ.get(UNDER_SANITIZER) == "1"
