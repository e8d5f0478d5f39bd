"""What a GPU-only step returns on a machine that cannot run it.

Chapter 00 explains what a run without the needed GPU prints; chapter 01 uses fb.needs.

A `Skipped` prints `skipped: <what>: needs sm_90a, this machine has none`, is falsy, and is never a pass:
`check` on a skipped result stays skipped, and the test suite reports it by name.
"""
from __future__ import annotations

import hashlib
import html

from . import hooks
from .device import gpu, parse_arch, runs_on
from .errors import whole


class Skipped:
    def __init__(self, reason: str, what: str = ""):
        self.reason = reason
        self.what = what
        hooks.skipped(what or "(unnamed step)", reason)   # a skip is reported, never a pass

    def __bool__(self):
        return False

    def __repr__(self):
        return f"skipped: {self.what + ': ' if self.what else ''}{self.reason}"

    __str__ = __repr__

    def _repr_html_(self):     # a recorded report after the reason keeps its lines and its source's < and &
        text = html.escape(f"{self.what + ': ' if self.what else ''}{self.reason}")
        return f'<div style="white-space: pre-wrap"><b>skipped</b>: {text}</div>'

    def raise_if_any(self):
        # A hazard check that could not run (hazard_check returns a Skipped then) has nothing to raise: the chained
        # form `mod.hazard_check(...).raise_if_any()` runs on without a GPU, and returns the skip, never a pass.
        return self


def with_recorded(skip: Skipped, name: str, kind: str = "bench", source: str = "") -> Skipped:
    """The skip of step `name`, with what a GPU run recorded for it when a reader of recorded results is installed
    (feedbeast.hooks.recorded): `kind` "bench" for a benchmark or a ceiling, "check" for a check or a tally,
    "hazard" for a hazard check, a named racecheck or a named fb.isolated run (`source`: source_digest of the code it
    would have run)."""
    line = hooks.recorded_line(kind, name, source)
    if line and line not in skip.reason:     # once, however often the same skip is handed on
        skip.reason += f"; {line}"
    return skip


def source_digest(*texts: str) -> str:
    """16 hex digits of the code a recorded step ran (a kernel's source; a child's code and its values as text):
    a skip of edited code is told that the record is of other code. Blank lines at the ends and spaces at the ends
    of lines do not count (a %%cuda cell's source ends in a newline, the same text read from the notebook file not)."""
    norm = ("\n".join(ln.rstrip() for ln in t.strip("\n").splitlines()) for t in texts)
    return hashlib.sha256("\0".join(norm).encode()).hexdigest()[:16]


def needs(arch: str | None, what: str = "", *, shared: int = 0) -> Skipped | None:
    """None when this machine can run `arch` code (None: code built for whichever GPU runs it) with `shared` bytes
    of shared memory per block, else the Skipped that says why not (a GEMM tiled for an A100's or a Hopper's
    shared memory on a GPU that gives a block 99 KB)."""
    if arch is not None:
        parse_arch(arch)             # a typo (sm90a) is said on every machine, not first on the GPU it names
    if not whole(shared):
        raise ValueError(f"needs(shared={shared!r}): the bytes of shared memory per block, a whole number >= 0")
    g = gpu()
    if arch is None or runs_on(arch, g.cc if g else None):
        if arch is None and g is None:
            return needs_gpu(what)
        if shared > g.smem_per_block_optin:
            return Skipped(f"needs {shared} B ({shared / 1024:.1f} KB) of shared memory per block, this {g.arch} GPU "
                           f"gives {g.smem_per_block_optin} B ({g.smem_per_block_optin / 1024:.1f} KB)", what)
        return None
    if g is None and not arch.endswith("a"):   # code for any GPU from `arch` on: the GPU is what is missing
        return Skipped(f"needs a GPU ({arch} or newer), this machine has none", what)
    return Skipped(f"needs {arch}, this machine has {g.arch if g else 'none'}", what)


def needs_gpu(what: str = "") -> Skipped | None:
    return None if gpu() else Skipped("needs a GPU, this machine has none", what)
