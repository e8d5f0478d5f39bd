"""How this process runs: facts the runners set and the rest of the toolkit reads.

`make sanitize` runs each notebook with FEEDBEAST_UNDER_SANITIZER=1 (sanitize.run sets it). Inside it,
debug builds wait longer (compile), deliberate failures are not run (isolated), sizes shrink (pick), and
timing is off (sanitize). This module imports nothing of the toolkit, so anything may read it.
"""
from __future__ import annotations

import os

UNDER_SANITIZER = "FEEDBEAST_UNDER_SANITIZER"


def under_sanitizer() -> bool:
    """True inside `make sanitize`'s notebook runs."""
    return os.environ.get(UNDER_SANITIZER) == "1"
