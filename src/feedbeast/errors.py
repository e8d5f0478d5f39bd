"""Errors the toolkit raises. Each message says what was wrong and what to do.

Chapter 04 explains BarrierTimeout; chapter 05 TensorMapError; chapter 08 the CompileError of a Hopper-only
instruction built for sm_100a.

In a notebook an error of the toolkit shows as its message and the learner's line that led to it (the cell and
line, or the `%%cuda` line), not the toolkit's own frames; an error of the learner's Python raised inside a
simulator shows the same way (magic._notebook_error). `%env FEEDBEAST_TRACEBACK=full` shows the whole traceback
again.
"""
from __future__ import annotations

import os
import re

def whole(v, least: int = 0) -> bool:
    """Whether `v` is a whole number (a Python or numpy integer, not a bool) of at least `least`: what the toolkit's
    sizes, counts and seeds must be, checked before any skip so that a mistake is said on every machine."""
    import numbers
    return not isinstance(v, bool) and isinstance(v, numbers.Integral) and v >= least


FULL_TRACEBACK = "FEEDBEAST_TRACEBACK"   # =full: IPython's own traceback for the toolkit's errors too


def install_command(extras: str = "cu13", checkout=None) -> str:
    """The command that adds the wheels of `extras` to this Python, where feedbeast is installed (pip keeps the
    installed course, which satisfies the name, and installs what the extras need), with the pins of `checkout`'s
    requirements when a checkout is known, and its CUDA 12 variant. `course` is the course machinery's extra (the
    grader, the roster)."""
    import shlex
    import sys
    from pathlib import Path
    cmd = f'{shlex.quote(sys.executable)} -m pip install "feedbeast[{extras}]"'
    if checkout is not None:
        return (f"{cmd} -r {shlex.quote(str(Path(checkout) / 'requirements' / 'cu13.txt'))} (for a CUDA 12 driver: "
                "cu12 and cu12.txt)")
    return (f"{cmd} (for a CUDA 12 driver: cu12; in a checkout of the course, add -r requirements/cu13.txt, its pins, "
            "or cu12.txt)")


MISSING_CUDA_WHEELS = "which this Python lacks: install feedbeast's CUDA wheels (its cu13 or cu12 extra)"


class FeedbeastError(Exception):
    """Base class for every error the toolkit raises on purpose."""

    @property
    def _render_traceback_(self):
        # IPython renders an exception with `_render_traceback_()` when it has one (hasattr): the toolkit's
        # errors have it unless the full traceback is asked for.
        if os.environ.get(FULL_TRACEBACK, "") == "full":
            raise AttributeError("_render_traceback_")
        return lambda: short_traceback(self)


_MAGIC_CALL = re.compile(r"run_(?P<kind>cell|line)_magic\(\s*'(?P<magic>[^']+)'\s*,\s*'(?P<line>[^']*)'")


def _learner_frames(tb) -> list[str]:
    """'Cell In[5], line 3: <source line>' for each frame of `tb` that runs a notebook cell's code (IPython's
    compiler knows those file names), outermost first; a `%%magic` cell shows as its magic line."""
    import linecache
    try:
        from IPython import get_ipython
        ip = get_ipython()
    except ImportError:
        ip = None
    if ip is None:
        return []
    out = []
    while tb is not None:
        code, lineno = tb.tb_frame.f_code, tb.tb_lineno
        label = ip.compile.format_code_name(code.co_filename) if hasattr(ip.compile, "format_code_name") else None
        if label:
            src = linecache.getline(code.co_filename, lineno).strip()
            m = _MAGIC_CALL.search(src)
            if m:
                src = f"{'%%' if m['kind'] == 'cell' else '%'}{m['magic']} {m['line']}".rstrip()
            where = f"{label[0]} {label[1]}, line {lineno}"
            if code.co_name != "<module>":
                where += f", in {code.co_name}"
            out.append(f"{where}: {src[:200]}")
        tb = tb.tb_next
    return out


def short_traceback(exc: BaseException) -> list[str]:
    """What a notebook shows of a toolkit error: the learner's line (the cell's, and the deepest of the learner's
    own functions when the error came through one), then the error's name and message."""
    frames = _learner_frames(exc.__traceback__)
    where = frames[:1] + frames[-1:] if len(frames) > 1 else frames
    return where + [f"\x1b[0;31m{type(exc).__name__}\x1b[0m: {exc}"]


TODO_MARK = "TODO: your code here"   # what a lab puts where the learner's part goes (feedbeast.labs)
# what ends a line the lab gives under a TODO line: a starting value that lets the lab run as given, and that, kept
# beside the learner's own code, still runs (a zero stored after their sum, a `return x;` before their return)
STARTER_MARK = "starter line: delete it once yours is written"


def unwritten(parts) -> str:
    """For [(where, source, first line number)], the lab's TODO lines still there, as one sentence that a failed
    check puts first ('' when there are none): the failure most likely follows from the part not yet written. And
    the starter lines (STARTER_MARK) kept once the learner's code is written: a failure may follow from one."""
    found, kept = [], []
    for where, source, first in parts:
        under_todo = False     # a starter line right under a TODO line (notes between) is part of an unwritten part
        for i, line in enumerate(str(source).splitlines()):
            if TODO_MARK in line:
                what = line.split(TODO_MARK, 1)[1].strip(" :")
                what = what[1:-1] if what.startswith("(") and what.endswith(")") else what
                found.append(f"{where} line {first + i}" + (f": {what}" if what else ""))
                under_todo = True
            elif STARTER_MARK in line:
                if not under_todo:
                    code = line.split(STARTER_MARK, 1)[0].rstrip().removesuffix("//").removesuffix("#").strip()
                    kept.append(f"{where} line {first + i}: {code}")
            elif line.strip() and not line.strip().startswith(("//", "#")):
                under_todo = False
    out = (f"your part is not written yet ({'; '.join(found)}): write it in place of each "
           f"'{TODO_MARK}' line.\n") if found else ""
    if kept:
        one = len(kept) == 1
        out += (f"the lab's starter line{' is' if one else 's are'} still there beside your code "
                f"({'; '.join(kept)}): {'it still runs' if one else 'they still run'}, and what "
                f"{'it sets or returns' if one else 'they set or return'} can replace what yours does: "
                f"delete {'it' if one else 'them'}.\n")
    return out



def todo_of(*kernels) -> str:
    """unwritten() for what a lab's check cell holds: a compiled Module (its CUDA source), a Numba kernel (on a
    GPU or in the simulator) or a Python function (its lines numbered as in its cell, as check_ring, the
    grader and IPython's tracebacks number them)."""
    import inspect
    parts = []
    for k in kernels:
        if isinstance(getattr(k, "source", None), str):
            parts.append((getattr(k, "name", "kernel"), k.source, 1))
            continue
        fn = getattr(k, "py_func", None) or getattr(k, "fn", None) or k   # numba dispatcher / simulator kernel
        try:
            lines, first = inspect.getsourcelines(fn)
        except (OSError, TypeError):
            continue
        parts.append((getattr(fn, "__name__", "kernel"), "".join(lines), first))
    return unwritten(parts)

class CompileError(FeedbeastError):
    """NVRTC rejected the source. The message shows the failing lines."""

    def __init__(self, message, log="", diagnostics=()):
        super().__init__(message)
        self.log = log
        self.diagnostics = list(diagnostics)


class KernelNotFound(FeedbeastError, AttributeError):
    """A module has no kernel of that name (`mod.k` reads it as an attribute, so it is an AttributeError too)."""


class LaunchError(FeedbeastError):
    """A launch was refused before reaching the GPU (bad shape, too much shared memory...)."""


class TensorMapError(FeedbeastError):
    """A tensor map breaks one of the rules of cuTensorMapEncodeTiled."""


class SassMismatch(AssertionError, FeedbeastError):
    """The SASS lacks an instruction the kernel is supposed to use (or has a forbidden one)."""


class CheckFailed(AssertionError, FeedbeastError):
    """A kernel's output does not match the reference."""


class BarrierTimeout(FeedbeastError):
    """A kernel gave up waiting on a barrier (a debug build's bounded wait fired), or a hazard-checked launch was not
    run because its hazard build, run first, gave up at a wait (feedbeast.hazards)."""


class HazardFound(FeedbeastError):
    """The hazard checker (feedbeast.hazards) found an ordering violation of the async proxy; the message
    names the rule, the block, the thread and the two source lines."""


class KernelFault(FeedbeastError):
    """A kernel failed on the GPU (illegal address, trap...). The context was reset to recover."""
