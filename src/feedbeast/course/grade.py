"""Grade a lab: the lab's own checks as shipped, on the learner's kernels and definitions, in a process the
grader controls.

    python -m feedbeast grade labs/00-*.ipynb           # or: make grade LAB=00
    python -m feedbeast grade --json labs/*.ipynb       # per lab, per check: passed / failed / skipped

How a notebook is graded (the contract solutions/ follow, see docs/instructors.md, "Grading: what the grade
trusts"):

1. The matching solution is `solutions/<same name>` of the course checkout the notebook lies in (found from
   `--course DIR` or `FEEDBEAST_COURSE` when given, else the checkout around the working directory, else the one
   around the notebook: a copy of the course handed in with the notebook does not grade it), or of `--solutions DIR`; else the one solution there with the same `NN-` prefix.
2. The learner's part is the cells before the notebook's first `## Check` heading. The checks are the code
   cells of the solution's check section (its first `## Check...` heading to the next level-2 heading that is
   not a check, `## Measure`). The learner's own check cells, their outputs and everything from `## Measure`
   on are never run or read.
3. The grader starts a fresh Python process with its own environment (FEEDBEAST_HAZARDS=1 for the hazard labs
   on a GPU) and its hazard mode pinned (feedbeast.course.pin_hazards: nothing the notebook sets changes it).
   There, in this order: the lab's given cells (the solution's cells of the learner's part without a
   `BEGIN SOLUTION` region: `fb`, `np`, `check_ring`, the lab's constants);
   the learner's %%cuda cells of the solution's --names, compiled from their text (the kernels the checks
   launch are these, bound after everything else the learner wrote); the learner's definitions the checks
   read (feedbeast.course.notebook.plan: the top-level statements binding those names, and what they read), each
   checked by feedbeast.course.notebook.refusals first (no rebinding what the lab gives or a builtin, no imports beyond numpy,
   math, numba and the toolkit's public part, no reaching the toolkit's or the process's state); then each
   check cell.
4. Before each check cell the environment is set back to the grader's; before and after, the toolkit's
   functions and classes (and numpy's, os's and the builtins') must be the objects they were before any
   learner code ran, and the names the lab gives must still be bound to them: any difference is a failed
   check naming what changed. Verdicts (fb.check, expect_sass, expect_proxy_fence, check_ring, the hazard
   check of each launch, every Skipped) leave the process as they are recorded, each line signed with a key
   only the grader and that process hold, on a pipe the grader opened. A check cell that raises is a failed
   check, with its whole message; a printed `name: FAILED` line also fails (a print can only fail a lab).
5. Every expected verdict must be there: each launch under hazard builds has its hazard verdict, a machine
   the grader sees a GPU on does not skip for want of one, every check cell ran to its end or raised, and the
   process said it was done. A missing verdict is a failure, not a pass.
6. Exit status: 0 every check ran and passed; 1 a check failed (or a cell raised, or nothing was checked);
   2 partial: nothing failed, but some checks could not run here (no GPU: compiled and SASS-checked,
   correctness not run); 3: nothing was graded (a wrong command line; a notebook that is not there, cannot be
   read or is no lab), never 2. A batch exits with the worst of its notebooks (1 over 3 over 2 over 0); the
   others are still graded.

The record names the notebook's sha256 and the toolkit's version. It is not a sandbox: see the guide.
"""
from __future__ import annotations

import ast
import builtins
import collections
import dataclasses
import functools
import glob
import hashlib
import hmac
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from ..errors import MISSING_CUDA_WHEELS, install_command   # what a Python without the CUDA wheels is told
from ..isolated import environment   # a copy of os.environ that a thread's change does not break
from ..magic import KERNEL_NAMES as KERNEL_DECL   # the kernels a %%cuda cell declares
from .exit_status import NOTHING_RAN, Parser   # a notebook graded as nothing, as a wrong command line
# places in a learner's notebook, as it names them
from .notebook import at, binds_of, code_lines, cuda_name, is_python, place, python_of

FAILED_LINE = re.compile(r"^(?P<name>[^\n:][^\n]*?): FAILED(?::\s*(?P<msg>.*))?$")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# C0 and C1 controls but tab and newline, and the bidirectional marks, overrides and isolates (text shown reversed)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
HEADING = re.compile(r"^##\s+(?P<title>\S.*)$")

# Errors that are a check saying no (as opposed to a notebook that broke in some other way).
CHECK_ERRORS = {"CheckFailed", "SassMismatch", "CompileError", "AssertionError", "BarrierTimeout",
                "StepFunctionError", "LaunchError", "TensorMapError", "KernelFault", "HazardFound"}
HAZARD_LABS = {"03", "04", "05", "06", "07", "08", "09"}   # labs whose kernels use the fb:: async wrappers
EXIT = {"ok": 0, "failed": 1, "partial": 2}
HAZARD_VERDICT = "hazard check of "
TODO_SENTENCE = re.compile(r"your part is not written yet \(.*?\): write it in place of each '[^']*' line\.\n?", re.S)
STARTUP_S = 300          # the check process: imports, the given cells, compiling the learner's kernels
PROGRESS_S = 60          # a cell running this long is said to be running, again each time as long


@dataclasses.dataclass
class Outcome:
    status: str          # "passed" | "failed" | "skipped"
    name: str
    message: str = ""
    cell: int = -1       # index of the check cell it came from (-1: the registry, or the grader)
    count: int = 1

    def __post_init__(self):
        # names and messages come from the notebook's code too (a check's name, an error's text): no terminal
        # control (an escape that moves the cursor or hides text, a carriage return) reaches the report
        self.name, self.message = (_CONTROL.sub("", ANSI.sub("", str(t))) for t in (self.name, self.message))

    def line(self) -> str:
        times = f" ({self.count} times)" if self.count > 1 else ""      # not "(x2)": read as part of a name
        if self.status == "skipped":
            return f"  skipped  {self.name}{times}: {self.message}"
        if self.status == "failed":
            msg = self.message.replace("\n", "\n           ")
            return f"  FAILED   {self.name}{times}\n           {msg}"
        return f"  passed   {self.name}{times}" + (f": {self.message}" if self.message else "")

    def to_dict(self) -> dict:
        return {"status": self.status, "name": self.name, "message": self.message, "count": self.count,
                "cell": self.cell}


def lab_of(path) -> str:
    """A lab notebook's number as the grader and the roster name it: its NN- prefix (after Colab's "Copy of "),
    else its stem."""
    m = re.match(r"(?:Copy of )?(\d\d)-", Path(path).name)
    return m.group(1) if m else Path(path).stem


def _shown(path: str) -> str:
    """A path as the record line shows it: from the working directory when it is under it, else whole."""
    p = Path(path).resolve()
    return str(p.relative_to(Path.cwd().resolve())) if p.is_relative_to(Path.cwd().resolve()) else str(p)


@dataclasses.dataclass
class Report:
    path: str
    outcomes: list
    seconds: float = 0.0
    error: str = ""      # why the notebook could not be graded fully (unreadable, a cell raised, a hang)
    solution: str = ""   # the solution notebook whose check cells ran
    hazards: bool = False   # hazard verdicts were recorded (launches were hazard-checked)
    sha256: str = ""     # of the notebook file graded
    toolkit: str = ""    # feedbeast's version
    # the lab's own cells broke in this Python (a CUDA library or package missing, a GPU out of reach): nothing was
    # learnt about the notebook, so a roster leaves the lab ungraded ("error") rather than scoring it 0
    setup: str = ""
    # each check cell of the solution, in order: its own checks' tally and whether it ran to its end (the roster's
    # score); empty where no check cell ran (a notebook that could not be read)
    cells: list = dataclasses.field(default_factory=list)
    untrusted: bool = False     # the notebook's code changed what the checks use, or wrote on their channel
    notes: list = dataclasses.field(default_factory=list)     # what the reader should know; no verdict
    copied: bool = False        # the notebook's own code is the solution's, or nearly (_lines_apart; a note only)
    copied_apart: int = 0       # how many lines it is from the solution's: 0 is line for line
    untouched: bool = False     # the notebook's own code is the lab's as given: nothing of the learner's (scores 0)
    refused: bool = False       # not read, or refused whole before any check (a chapter, another lab's title)

    def _with(self, status):
        return [o for o in self.outcomes if o.status == status]

    @property
    def passed(self):
        return self._with("passed")

    @property
    def failed(self):
        return self._with("failed")

    @property
    def skipped(self):
        return self._with("skipped")

    @property
    def status(self) -> str:
        """"ok" | "failed" | "partial" (see the module's docstring)."""
        if self.failed or self.error or not self.outcomes:
            return "failed"
        return "partial" if self.skipped else "ok"

    @property
    def exit_code(self) -> int:
        return EXIT[self.status]

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def lab(self) -> str:
        return lab_of(self.path)

    @property
    def first_failure(self) -> str:
        """The first failed check, 'name: the gist of why' ('' when none failed)."""
        for o in self.failed:
            return f"{o.name}: {gist(o.message) or 'FAILED'}"
        return ""

    def summary(self) -> str:
        verdict = {"ok": "ok", "failed": "FAILED", "partial": "PARTIAL"}[self.status]
        if self.status == "partial":
            verdict += (" (nothing that ran failed; the checks that could not run on this machine, listed as skipped,"
                        " are not known to pass)")
        elif not self.outcomes and not self.error:
            verdict += " (the notebook reported no check)"
        return (f"{self.path}: {verdict}: {len(self.passed)} passed, {len(self.failed)} failed, "
                f"{len(self.skipped)} skipped ({self.seconds:.0f} s{', hazard builds on' if self.hazards else ''})")

    def record_line(self) -> str:
        return (f"  graded   sha256 {self.sha256 or '?'} of {Path(self.path).name}, feedbeast {self.toolkit or '?'}"
                + (f", checks of {_shown(self.solution)}" if self.solution else ""))

    def __str__(self):      # no record line where nothing of the file was graded: unread, or refused as a whole
        graded = bool(self.sha256) and not self.refused
        return "\n".join([o.line() for o in self.outcomes] + [f"  note     {n}" for n in self.notes]
                         + [self.record_line()] * graded + [self.summary()])

    def to_dict(self) -> dict:
        return {"notebook": self.path, "lab": self.lab, "solution": self.solution, "status": self.status,
                "exit": self.exit_code, "seconds": round(self.seconds, 1), "error": self.error,
                "hazards": self.hazards, "sha256": self.sha256, "feedbeast": self.toolkit, "setup": self.setup,
                "first_failure": self.first_failure,
                "passed": len(self.passed), "failed": len(self.failed), "skipped": len(self.skipped),
                "checks": [o.to_dict() for o in self.outcomes], "cells": self.cells, "untrusted": self.untrusted,
                "notes": self.notes, "copied": self.copied,
                "copied_apart": self.copied_apart, "untouched": self.untouched, "refused": self.refused}


# ---- which cells run -----------------------------------------------------------------------------------

def _heading(cell) -> str | None:
    """The title of a level-2 markdown heading cell ('Check: correctness'), else None."""
    if cell.cell_type != "markdown" or not cell.source.strip():
        return None
    m = HEADING.match(cell.source.strip().splitlines()[0].strip())
    return m["title"].strip() if m else None


def _is_check(title: str | None) -> bool:
    return title is not None and re.match(r"check\b", title.lower()) is not None    # not "Checking my ..."


def learner_part(nb) -> list:
    """The learner's cells: those before the first `## Check` heading (else before `## Measure`, else all)."""
    titles = [_heading(c) for c in nb.cells]
    for pred in (_is_check, lambda t: t is not None and t.lower().startswith("measure")):
        for i, t in enumerate(titles):
            if pred(t):
                return nb.cells[:i]
    return list(nb.cells)


def _code_lines(cells) -> list[list[str]]:
    """The code of each code cell, without blank lines and comments (labs.is_note): a solution's BEGIN/END SOLUTION
    and `LAB:` lines are comments too, so a learner who copied its code has the same lines."""
    from .labs import is_note
    return [[x.strip() for x in c.source.splitlines() if not is_note(x, c.source.startswith("%%cuda"))]
            for c in cells if c.cell_type == "code"]


def _lines_apart(cells, solution_cells) -> int | None:
    """How many lines the learner's code is from the solution's: 0 when it is the solution's line for line, spaces
    inside a line aside (_code_lines' lines, every cell's together); N for a near copy, at most a tenth of the lines
    the lab asks the learner to write (the solution's lines the lab as given lacks), lines added, removed or changed;
    None otherwise (a part of few lines is said to be copied only when it is whole: written twice, it is the same)."""
    from collections import Counter
    from difflib import SequenceMatcher
    from types import SimpleNamespace
    from .labs import strip_source

    def flat(cs):
        return ["".join(x.split()) for c in _code_lines(cs) for x in c]

    mine, sol = flat(cells), flat(solution_cells)
    if mine == sol:
        return 0
    given = flat([SimpleNamespace(cell_type=c.cell_type, source=strip_source(c.source)) for c in solution_cells
                  if "solution-only" not in c.get("metadata", {}).get("tags", [])])
    written = sum((Counter(sol) - Counter(given)).values())
    same = sum(b.size for b in SequenceMatcher(None, mine, sol, autojunk=False).get_matching_blocks())
    apart = max(len(mine), len(sol)) - same
    return apart if 10 * apart <= written else None


def copied_words(apart: int) -> str:
    """How near a copy of the solution's code a lab is, in words (_lines_apart's count)."""
    return f"but for {apart} line{'s' * (apart != 1)}" if apart else "line for line"


def _as_given(cells, solution_cells) -> bool:
    """Whether nothing of the learner's is in `cells`: every part the lab asks for is still unwritten (_todo's
    parts; cells added or given cells edited write none), or the code, every cell's lines together, is the lab's as
    `make labs` writes it (labs.strip_source), comments aside (a TODO line deleted writes nothing either)."""
    from collections import Counter
    from types import SimpleNamespace
    from .labs import strip_source
    given = [SimpleNamespace(cell_type=c.cell_type, source=strip_source(c.source)) for c in solution_cells
             if "solution-only" not in c.get("metadata", {}).get("tags", [])]
    parts = _unwritten_parts(given, solution_cells)
    if parts and sorted(t.strip() for _, t, _ in _unwritten_parts(cells, solution_cells)) == \
            sorted(t.strip() for _, t, _ in parts):
        return True
    return Counter(x for c in _code_lines(cells) for x in c) == Counter(x for c in _code_lines(given) for x in c)


def check_part(nb) -> list:
    """The code cells of the check section: from the first `## Check...` heading to the next level-2
    heading that is not a check."""
    out, inside = [], False
    for c in nb.cells:
        t = _heading(c)
        if t is not None:
            if _is_check(t):
                inside = True
            elif inside:
                break
        elif inside and c.cell_type == "code":
            out.append(c)
    return out


def find_solution(path: Path, solutions: Path | None = None, course=None) -> Path:
    """solutions/<same name>, else the one solution with the same two-digit prefix. The folder is
    `solutions`, else the solutions/ of the course (feedbeast.course.coursedir): --course, FEEDBEAST_COURSE, the
    checkout around the working directory (the grader's), and only then the one around the notebook, so that a
    notebook handed in inside a copy of the course is graded by the grader's checks, not by the copy's."""
    from .coursedir import around, find
    folder = Path(solutions) if solutions else find(near=around(Path.cwd()) or path, explicit=course,
                                                    below=True) / "solutions"
    if not folder.is_dir():
        raise FileNotFoundError(f"no solutions folder at {folder}: pass --solutions DIR")
    same = folder / path.name
    if same.exists():
        return same
    m = re.match(r"(?:Copy of )?(\d\d)-", path.name)     # Colab's "Save a copy in Drive" writes "Copy of 04-..."
    hits = sorted(folder.glob(f"{m.group(1)}-*.ipynb")) if m else []
    if len(hits) == 1:
        return hits[0]
    raise FileNotFoundError(f"no solution for {path.name} in {folder}"
                            + (f" ({len(hits)} start with {m.group(1)}-)" if hits else
                               f": no lab {m.group(1)} in this course" if m else
                               ": a lab notebook's name starts with its lab's number, as in labs/ (00-copy-kernel"
                               ".ipynb, or Colab's 'Copy of 00-copy-kernel.ipynb'): save or copy it under such a name "
                               "and grade that"))


def is_given(cell) -> bool:
    """A cell of a solution's learner part that the lab gives as it is (no BEGIN SOLUTION region, no kernel)."""
    return cell.cell_type == "code" and "BEGIN SOLUTION" not in cell.source and not cell.source.startswith("%%")


def reads_of(cells) -> list[str]:
    """The names the cells read before (or without) binding them: what they need from the cells above."""
    from .notebook import _reads, _targets
    bound, free = set(), []
    for c in cells:
        for node in ast.parse(python_of(c.source)).body:
            now, later = _reads(node)
            free += [n for n in sorted(now | later) if n not in bound and n not in free and not hasattr(builtins, n)]
            bound |= _targets(node)[0]
    return free


def _has_gpu() -> bool:
    """Is there a CUDA device? (cuInit and a count: no context is made in the grader's process.)"""
    try:
        from cuda.bindings import driver
        err, = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return False
        err, n = driver.cuDeviceGetCount()
        return err == driver.CUresult.CUDA_SUCCESS and n > 0
    except Exception:
        return False


def _toolkit_version() -> str:
    try:
        from importlib.metadata import version
        return version("feedbeast")
    except Exception:
        from .. import __version__
        return __version__


# ---- the check process (the child) ------------------------------------------------------------------------

def _compared(name: str) -> bool:
    """A module whose attributes the integrity check compares: the toolkit, numpy and the standard library (what
    the checks and the signed channel run). Not the compilers and drivers (Numba, cuda-python), which set their own
    attributes as they load what a launch needs; the static rules keep the notebook's code off them."""
    root = name.partition(".")[0]
    return name != "__main__" and (root in ("feedbeast", "numpy") or root in sys.stdlib_module_names)


def _tracked(v) -> bool:
    """A module attribute whose identity the checks rely on: a function, class, builtin, module or any other
    callable (a numpy ufunc, an lru_cache wrapper, a partial), in a compared module. Set through an object the static
    rules cannot see (a parameter named self bound to a module, functools.update_wrapper), it would change what a
    check or the signed channel runs while the toolkit's own functions stay the same objects."""
    import types
    return isinstance(v, (types.ModuleType, type)) or callable(v)


def _integrity_baseline(ns: dict, protected) -> dict:
    """What must not change while learner code runs: the identity of every callable and class attribute of the
    modules loaded so far that _compared() names (and of the toolkit's modules held as attributes of its own), the
    methods of the toolkit's classes, the names every class of those modules holds, its other module-level values (_toolkit_data), the modules
    themselves, the library's hooks (feedbeast.hooks: launch checks, verdict listeners, the run mode), the verdict
    sinks, and the names the lab gives."""
    import dataclasses
    import types
    from .. import hooks
    from . import verdicts
    kinds = (types.FunctionType, types.BuiltinFunctionType, type, classmethod, staticmethod, property)
    mods = {n: m for n, m in list(sys.modules.items()) if isinstance(m, types.ModuleType) and _compared(n)}
    attrs = {}
    for n, m in mods.items():
        try:
            items = list(vars(m).items())
        except TypeError:
            continue
        for k, v in items:
            if k.startswith("__") and k.endswith("__"):
                continue
            if _tracked(v) and not (isinstance(v, types.ModuleType) and not n.startswith("feedbeast")):
                attrs[(n, k)] = v
            if isinstance(v, type) and n.startswith("feedbeast") and getattr(v, "__module__", "") == n:
                for ck, cv in list(vars(v).items()):
                    if isinstance(cv, kinds) or callable(cv):
                        attrs[(f"{n}.{k}", ck)] = cv
    codes = {key: _code_of(v) for key, v in attrs.items() if isinstance(v, types.FunctionType)}
    # the names each class of these modules holds: one added (dataclasses.dataclass(Op) adds __eq__ to a toolkit
    # class; dataclass(frozen=True) on contextlib.redirect_stdout gives the grader's own a new __init__) or taken
    # away changes what its objects do while every function stays the same object
    classes = {(n, k): (v, frozenset(vars(v)) - _LAZY) for n, m in mods.items()
               for k, v in list(vars(m).items()) if isinstance(v, type) and getattr(v, "__module__", "") == n}
    return {"modules": mods, "attrs": attrs, "codes": codes, "classes": classes, "state": {},
            "data": _toolkit_data(mods),
            "given": {k: ns[k] for k in protected if k in ns},
            # the lab's upper-case tables of plain data (STAGES, a dict of stage counts): changed in place, they
            # change what the checks build; the lab's other containers (a cache its checks fill) learner code may
            # not name (notebook.refusals: a given name that starts with _, a mutating call on a given name)
            "given_data": {k: text for k in protected if k in ns and k.isupper() and type(ns[k]) in (dict, list, set)
                           and "<object of" not in (text := _plain(ns[k]))},
            "hooks": _hook_state(hooks), "mode": (hooks.mode, dataclasses.asdict(hooks.mode)),
            "sinks": list(verdicts._sinks), "records": verdicts._records}


_DATA = (int, float, complex, str, bytes, bool, type(None), tuple, frozenset, list, dict, set)
_LAZY = frozenset({"__slotnames__"})     # what copyreg adds to a class the first time one of its objects is pickled


def _plain(v, depth: int = 0) -> str:
    """repr() of data made of exactly the builtin types of _DATA; any other object, however it prints itself (a
    float subclass whose __repr__ says 1e-05), shows as its type: a toolkit table compared by this text cannot
    hold a learner's object unseen."""
    t = type(v)
    if depth > 20:
        return "<nested too deep>"
    if t is dict:
        return "{" + ", ".join(f"{_plain(k, depth + 1)}: {_plain(x, depth + 1)}" for k, x in v.items()) + "}"
    if t in (list, tuple, set, frozenset):
        return f"{t.__name__}(" + ", ".join(_plain(x, depth + 1) for x in v) + ")"
    if t in _DATA:
        return repr(v)
    return f"<object of {t.__module__}.{t.__qualname__}>"
_MISSING = object()


def _toolkit_data(mods: dict) -> dict:
    """The toolkit's module-level constants (upper-case names: tolerances, peaks, rule tables), as text: changed in
    place (`TOLERANCE.update(...)`), they would change what the checks accept while every function stays the same
    object. Lower-case names are state the toolkit keeps (the last launch); the hooks' lists are checked on their
    own. Every other module-level value of the toolkit (private tables too) must stay the same object: key
    ("is", module, name)."""
    out = {}
    for n, m in mods.items():
        if not (n == "feedbeast" or n.startswith("feedbeast.")) or n == "feedbeast.hooks":
            continue
        rebound = _rebound(m)
        for k, v in list(vars(m).items()):
            if not k.startswith("_") and k.isupper() and type(v) in _DATA:
                out[n, k] = _plain(v)
                if k not in rebound:      # and the same object: one of another type can print the same text
                    out["is", n, k] = v
            elif not (k.startswith("__") and k.endswith("__")) and k not in rebound and not _tracked(v):
                out["is", n, k] = v
    return out


_REBOUND: dict = {}


def _rebound(module) -> frozenset:
    """The names a module's own functions declare `global` (state it keeps: the last launch, a cached buffer)."""
    f = getattr(module, "__file__", None)
    if f not in _REBOUND:
        try:
            tree = ast.parse(Path(f).read_text())
            _REBOUND[f] = frozenset(x for g in ast.walk(tree) if isinstance(g, ast.Global) for x in g.names)
        except (OSError, TypeError, ValueError, SyntaxError):
            _REBOUND[f] = frozenset()
    return _REBOUND[f]


def _code_of(f) -> tuple:
    """What a function runs: swapping any of these changes it while it stays the same object."""
    return (f.__code__, f.__defaults__, f.__kwdefaults__, f.__closure__)


def kernel_state(mod) -> tuple | None:
    """What the checks read of a kernel module the grader compiled (feedbeast.compile.Module): the learner's code may
    read it, never change it in place (its source is what the debug and hazard builds compile)."""
    if not hasattr(mod, "cubin") or not hasattr(mod, "source"):
        return None
    return (mod.source, hashlib.sha256(bytes(mod.cubin)).hexdigest(), mod.log, mod.arch, mod.name,
            tuple(sorted((str(k), str(v)) for k, v in dict(mod.defines).items())), tuple(mod.options), mod.debug)


_HOOK_LISTS = ("before_launch", "on_verdict", "on_bench", "on_check", "on_profile", "on_trace", "on_hazard")


def _hook_state(hooks) -> dict:
    """Each list of feedbeast.hooks: the list itself and what it holds."""
    return {k: (getattr(hooks, k), list(getattr(hooks, k))) for k in _HOOK_LISTS}


def _all_classes() -> list:
    """Every class in this process, found through each class's subclasses from object down."""
    found, seen, stack = [], set(), [object]
    while stack:
        for c in type.__subclasses__(stack.pop()):
            if id(c) not in seen:
                seen.add(id(c))
                found.append(c)
                stack.append(c)
    return found


def _function_in(v):
    """The function a class attribute runs: a classmethod's, a staticmethod's, a property's getter, or v itself."""
    return v.__func__ if type(v) in (classmethod, staticmethod) else v.fget if type(v) is property else v


def _made_by_a_class_maker(c, k: str, v) -> bool:
    """What the standard library's class makers put under a special name (a dataclass's __eq__ and __hash__, a
    named tuple's __getnewargs__, the fields a class pattern reads, a Protocol's hook, a class's own __dict__)."""
    import types
    name = type.__dict__["__qualname__"].__get__(c)
    if v is None or k == "__match_args__" and type(v) is tuple and all(type(x) is str for x in v):
        return True
    if k == "__dict__":
        return type(v) is types.GetSetDescriptorType and v.__objclass__ is c
    f = _function_in(v)
    if type(f) is not types.FunctionType:
        return False
    code, qual = types.FunctionType.__code__.__get__(f), types.FunctionType.__dict__["__qualname__"].__get__(f)
    here = qual == f"{name}.{k}"
    return (here and (code.co_filename == "<string>" or code.co_filename.endswith(f"collections{os.sep}__init__.py"))
            or qual in ("_dataclass_getstate", "_dataclass_setstate") and code.co_filename.endswith("dataclasses.py")
            or qual.endswith("_proto_hook") and code.co_filename.endswith("typing.py"))


def _computed_specials(is_learner_code, before=(), learner_module=None) -> list[str]:
    """Special methods (notebook.FINALIZERS: __eq__, __array_function__, ...) that the learner's code put in a class
    under a name no class statement of theirs writes (a class statement that writes one is refused before it runs):
    in any class, a function compiled from the learner's cells; in a class made since `before` by the learner's
    code (its module, or a base of theirs), anything but what a standard class maker puts there (a partial, a
    builtin, another object's method)."""
    import types
    from .notebook import FINALIZERS
    dict_of, name_of = type.__dict__["__dict__"].__get__, type.__dict__["__qualname__"].__get__
    code_of = types.FunctionType.__code__.__get__
    before = {id(c) for c in before}
    found = []
    for c in _all_classes():
        theirs = id(c) not in before and learner_module is not None and any(
            id(b) not in before and dict_of(b).get("__module__") == learner_module
            for b in type.__dict__["__mro__"].__get__(c))
        for k, v in list(dict_of(c).items()):
            if type(k) is not str or k not in FINALIZERS:
                continue
            if k == "__annotations__":   # Python's, from `x: int`; a special name among its keys sets it on objects
                bad = [a for a in (v if type(v) is dict else ()) if type(a) is not str or a in FINALIZERS]
                if bad and (theirs or learner_module is None):
                    found.append(f"{name_of(c)}.__annotations__[{bad[0]!r}]")
                continue
            f = _function_in(v)
            if type(f) is types.FunctionType and is_learner_code(code_of(f).co_filename) or \
                    theirs and not _made_by_a_class_maker(c, k, v):
                found.append(f"{name_of(c)}.{k}")
    return found


def _integrity_problems(base: dict, ns: dict) -> list[str]:
    import dataclasses
    from .. import hooks
    from . import guard, verdicts
    out = []
    for n, m in base["modules"].items():
        if sys.modules.get(n) is not m:
            out.append(f"the module {n} was replaced")
    for (owner, k), v in base["attrs"].items():
        m = base["modules"].get(owner)
        where = vars(m) if m is not None else None
        if where is None:
            mod, _, cls = owner.rpartition(".")
            where = vars(getattr(base["modules"][mod], cls, None) or object)
        if where.get(k, None) is not v:
            out.append(f"{owner}.{k} was replaced")
        elif (owner, k) in base["codes"] and any(a is not b for a, b in zip(_code_of(v), base["codes"][owner, k])):
            out.append(f"{owner}.{k} was changed in place (its code, defaults or closure)")
    for (owner, k), (cls, names) in base.get("classes", {}).items():
        now = frozenset(vars(cls)) - _LAZY
        if now != names:
            what = sorted(now - names) or sorted(names - now)
            out.append(f"the class {owner}.{k} was changed: it {'gained' if now - names else 'lost'} "
                       f"{', '.join(what[:6])}")
    for key, value in base["data"].items():
        if key[0] == "is":
            m = base["modules"].get(key[1])
            if m is not None and vars(m).get(key[2], _MISSING) is not value:
                out.append(f"{key[1]}.{key[2]} was replaced")
            continue
        owner, k = key
        m = base["modules"].get(owner)
        if m is not None and _plain(vars(m).get(k)) != value:
            out.append(f"{owner}.{k} was changed in place")
    for k, state in base["state"].items():
        if kernel_state(ns.get(k)) != state:
            out.append(f"{k}, the kernel module the grader compiled from your cell, was changed in place")
    for k, v in base["given"].items():
        if ns.get(k, None) is not v:
            out.append(f"{k} (which the lab gives or the grader binds) was rebound")
    for k, text in base.get("given_data", {}).items():
        if k in ns and _plain(ns[k]) != text:
            out.append(f"{k} (a table the lab gives) was changed in place")
    now = _hook_state(hooks)
    for k, (lst, items) in base["hooks"].items():
        if now[k][0] is not lst or [id(h) for h in now[k][1]] != [id(h) for h in items]:
            why = "the hazard check of each launch" if k == "before_launch" else "who hears the checks"
            out.append(f"feedbeast.hooks.{k} ({why}) was changed")
    if hooks.mode is not base["mode"][0] or dataclasses.asdict(hooks.mode) != base["mode"][1]:
        out.append("feedbeast.hooks.mode (how this process runs) was changed")
    if [id(s) for s in verdicts._sinks] != [id(s) for s in base["sinks"]] or verdicts._records is not base["records"]:
        out.append("feedbeast.course.verdicts (where checks record their verdicts) was changed")
    if base.get("learner_code") is not None:
        out += [f"{where} holds a special method made from the notebook's code under a name the cells do not write "
                "(a class made by calling a metaclass or type held as a value): the checks compare, count and "
                "convert values with such methods" for where in _computed_specials(
                    base["learner_code"], base.get("classes_before", ()), base.get("learner_module"))]
    out += guard.refused() + list(base.get("tampered", ()))
    return out[:20]


# the modules the signed channel runs (the grader's own module for its globals json, hmac, hashlib, os, builtins)
_CHANNEL = ("json", "json.encoder", "_json", "hmac", "hashlib", "_hashlib", "os", "posix", "builtins", __name__)


def _text_of(e: BaseException) -> str:
    """An exception's message; one whose __str__ raises (the learner's class) is named, not fatal."""
    try:
        return str(e)
    except BaseException:
        return f"(the message of this {type(e).__name__} could not be read: its __str__ raised)"


class _CheckChild:
    """The check process's state: the signed channel to the grader, the namespace the cells run in, and what a
    stop (a learner part that cannot be graded) has said."""

    def __init__(self, fd: int, key: bytes):
        import io
        self.fd, self.key, self.seq = fd, key, 0
        # What the channel runs, as it was before any notebook code: (name, module, its namespace, a copy of it),
        # put back before each message (a module attribute can be set through objects no static rule sees); what
        # was put back is a failure. The loop reads only these and sys.modules, never a builtin or a global.
        self.channel = [(n, sys.modules[n], vars(sys.modules[n]), dict(vars(sys.modules[n])))
                        for n in _CHANNEL if n in sys.modules]
        self.modules = sys.modules
        self.tampered: list[str] = []
        self.stopped: list[str] = []
        self.log = io.StringIO()     # what given and learner cells print: not a verdict, not shown
        self.ns = {"__name__": "__main__", "__builtins__": builtins}
        self.nb = None               # the learner's notebook (feedbeast.course.notebook.Notebook), once read
        self.unbuilt: set[str] = set()   # what a %%cuda cell that failed would have defined: not reported again
        self.uncelled: set[str] = set()  # the --names of the lab's %%cuda cells the notebook lacks: reported once

    def _channel_restored(self):
        found = []
        for n, m, now, saved in self.channel:
            if self.modules.get(n) is not m:
                self.modules[n] = m
                found.append(f"the module {n}, which signs and sends the verdicts, was replaced")
            for k in [*now]:                 # a name added since the start (json.encoder.isinstance) goes;
                if k not in saved and not k.startswith("__"):    # not a warning's __warningregistry__
                    del now[k]
                    found.append(f"{n}.{k}, which the signing reads, was added")
            for k, v in saved.items():
                if k not in now or now[k] is not v:
                    now[k] = v
                    found.append(f"{n}.{k}, which signs and sends the verdicts, was replaced")
        for f in found:
            if f not in self.tampered:
                self.tampered.append(f)

    def send(self, msg):
        self._channel_restored()
        body = json.dumps({**msg, "seq": self.seq}, default=str)
        self.seq += 1
        data = (hmac.new(self.key, body.encode(), hashlib.sha256).hexdigest() + " " + body + "\n").encode()
        while data:
            data = data[os.write(self.fd, data):]

    def fail(self, where, why, setup=False):
        self.stopped.append(where)
        self.send({"t": "learner", "name": where, "message": why, "stop": True, "setup": setup})

    def run(self, source, where):
        import linecache
        lines = code_lines(source)
        linecache.cache[where] = (len(source), None, lines, where)
        # optimize=0: an assert of a check cell stays a check under PYTHONOPTIMIZE or -O (compile's default follows them)
        exec(compile(python_of(source), where, "exec", optimize=0), self.ns)

    def given(self, cells, sol: Path) -> bool:
        """The lab's own cells before the checks (from the solution); False when they broke."""
        import contextlib
        try:
            with contextlib.redirect_stdout(self.log):
                for i, src in cells:
                    self.run(src, f"{sol.name}, given cell {i}")
        except ModuleNotFoundError as e:     # this Python, not the lab: a package the course needs is missing
            said = MISSING_CUDA_WHEELS in str(e)        # the toolkit's own message already says what to install
            self.fail("the lab's given cells",
                      f"{type(e).__name__}: {e}" + ("" if said else
                      f": this Python lacks a package the course needs: {install_command('cu13,course')}, or make "
                      "install in the checkout") + "; then grade again", setup=True)
            return False
        except BaseException as e:
            # the lab's own code, run before any of the learner's: what breaks there is this Python or machine (a
            # CUDA library not found, a GPU out of reach), not the notebook
            self.fail("the lab's given cells",
                      f"{type(e).__name__}: {e} (the lab's own code, before any of yours ran: this Python or machine "
                      "cannot run the lab; report it to the instructor)", setup=True)
            return False
        return True

    def kernels(self, nb, wanted, given: set) -> dict:
        """The learner's kernels, compiled from the text of their %%cuda cells with the lab's flags: these are what
        the checks launch."""
        import contextlib
        from .. import magic
        ns = self.ns
        cuda = [(i, c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.startswith("%%cuda")]
        cuda_ns: dict = {}
        for name, lab_line in wanted:
            cells = [(i, s) for i, s in cuda if cuda_name(s) == name]
            if not cells:
                bad = "".join(f"; the %%cuda line of {at(nb.cells, i, 1)} does not parse ({why})"
                              for i, why in nb.bad_magic)
                # a cell of a --name the lab does not give is most likely this one renamed
                other = [(i, n) for i, s in cuda
                         if (n := cuda_name(s)) is not None and n not in {w for w, _ in wanted}]
                bad += "".join(f"; {at(nb.cells, i, 1)} is `%%cuda ... --name {n}`: if it is the lab's cell, give it "
                               f"`--name {name}` again" for i, n in other)
                self.fail(f"%%cuda --name {name}", f"your notebook has no `%%cuda ... --name {name}` cell before its "
                          "checks: the checks compile and launch the kernels of that cell" + bad)
                self.uncelled.add(name)
                continue
            _, src = cells[-1]
            body = src.partition("\n")[2]
            would = {name, *KERNEL_DECL.findall(body)}
            line = lab_line      # the lab's flags: the build the checks read (lab.source) is the build launched
            # its first line is what the learner sees; its compile errors name it `<name>.cu`
            where = f"your {'last ' if len(cells) > 1 else ''}%%cuda --name {name} cell"
            bad = cuda_refusals(body, Path.cwd())
            if bad:
                self.fail(where, f"not compiled: {'; '.join(bad)}: a graded kernel is the same in every build")
                self.unbuilt |= would
                continue
            mod_ns = dict(ns)
            try:
                with contextlib.redirect_stdout(self.log):
                    magic.cuda_cell(line[len("%%cuda"):], body, mod_ns)
            except BaseException as e:
                self.fail(where, f"{type(e).__name__}: {_text_of(e)}")
                self.unbuilt |= would
                continue
            new = {k: v for k, v in mod_ns.items() if k not in ns or mod_ns[k] is not ns[k]}
            clash = sorted(set(new) & (given | set(cuda_ns)))
            if clash:
                self.fail(where, f"its kernels or --name {', '.join(clash)} clash with a name the lab gives")
                continue
            cuda_ns.update(new)
        return cuda_ns

    def definitions(self, nb, needs, protected: set, kernels: dict, theirs=(), given_cells=(), given_ids=()):
        """The learner's definitions that the checks read, refused when they could reach the checks' state.
        kernels: what the lab's %%cuda cells define ({name: --name}), which only those cells may define.
        given_cells, given_ids: the sources and cell ids of the lab's given cells (the grader runs the lab's own, not
        the learner's copies of them, which may be of another version of the course)."""
        import contextlib
        import types
        from .notebook import refusals
        ns = self.ns
        needed = [n for n in needs if n not in ns and n not in self.unbuilt
                  and not (n in kernels and kernels[n] in self.uncelled)]
        for n in [n for n in needed if n in kernels]:
            needed.remove(n)
            self.fail(f"%%cuda --name {kernels[n]}", f"the checks launch {n}, which the lab's `%%cuda --name "
                      f"{kernels[n]}` cell defines: your cell of that --name defines no {n} (a kernel keeps the "
                      "name the lab gives it)")
        protected = protected | set(kernels)
        theirs = set(theirs) - protected     # a name the lab gives keeps the given names' rules (read, never changed)
        try:
            stmts, _ = nb.plan(*needed, given=protected | set(theirs))   # a read of theirs: refused below
        except LookupError as e:
            missing = str(e).split(" defines no ", 1)[-1].split(" at top level")[0]
            missing = re.sub(r"(\w+) \(read in cell (\d+)\)",
                             lambda m: f"{m[1]} (read in {nb.read_at(m[1], int(m[2]))})", missing)
            bad = nb.unparsed()
            self.fail("your definitions", f"the checks read {missing}, which your cells before `## Check` do not "
                      "define" + (f"; not Python, so not read: {'; '.join(bad)}" if bad else
                                  " (the lab's cells say what to write)"))
            stmts = []
        modules = {k for k, v in ns.items() if isinstance(v, types.ModuleType)}
        for s in stmts:
            modules |= {a.asname or a.name.split(".")[0] for a in getattr(s.node, "names", [])} \
                if isinstance(s.node, ast.Import) else set()
        refused = False
        for s in stmts:
            lines: list[int] = []
            why = refusals(s.node, protected, modules, lines, theirs)
            if why:
                refused = True
                src = nb.cells[s.pos[0]].source.splitlines()     # the line named, as the learner wrote it
                quoted = (src[min(lines) - 1].strip() if 0 < min(lines) <= len(src) and src[min(lines) - 1].strip()
                          else ast.unparse(s.node).splitlines()[0])
                self.fail(at(nb.cells, s.pos[0], min(lines)),
                          f"not run by the grader: {'; '.join(why)}:\n    {quoted[:120]}")
        # what the checks do not read is never run; a statement of it that would change what the checks use (the
        # toolkit or a module in place, the process's state, files, a builtin, a name the lab gives) goes to the
        # report as a note: the instructor's to read, no failure. Left out: imports (a notebook's plots import
        # matplotlib, and `import os` binds what the setup cell binds), names the checks bind for themselves (scratch
        # code may use n or w), and the lab's own given cells
        chosen = {s.pos for s in stmts}
        lab_own = set()     # the lab's given statements: the learner's copies of them are the lab's, not theirs
        for src in given_cells:
            try:
                lab_own |= {ast.dump(n) for n in ast.parse(python_of(src)).body}
            except SyntaxError:
                pass
        shared = ("it changes ", "it reaches .", "it declares ", "it rebinds the Python builtin", "it uses ")
        given_ids = set(given_ids)
        for s in nb.statements():
            lines = []
            own = (s.pos not in chosen and ast.dump(s.node) not in lab_own
                   and nb.cells[s.pos[0]].get("id") not in given_ids)
            why = refusals(s.node, protected, modules, lines) if own else []
            plain = isinstance(s.node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.FunctionDef, ast.ClassDef))
            kept = [(w, n) for w, n in zip(why, lines)
                    if w.startswith(shared) or (plain and w.startswith("it rebinds "))]
            if kept:
                src = nb.cells[s.pos[0]].source.splitlines()
                first = min(n for _, n in kept)
                quoted = src[first - 1].strip() if 0 < first <= len(src) else ast.unparse(s.node).splitlines()[0]
                self.send({"t": "ignored", "name": at(nb.cells, s.pos[0], first),
                           "message": "; ".join(w for w, _ in kept), "line": quoted[:120]})
        if refused:
            return
        try:
            with contextlib.redirect_stdout(self.log):
                nb.run(stmts, ns, guard_methods=True)
        except BaseException as e:
            self.fail(nb.raised_at(e) or "your definitions", f"{type(e).__name__}: {_text_of(e)}")

    def checks(self, cells, env0: dict, base: dict, current: list, launched: list):
        """Each check cell of the solution, with the grader's environment set back before it and the toolkit
        checked unchanged after it."""
        import contextlib
        import io
        import traceback
        from . import verdicts
        for i, src in enumerate(cells):
            os.environ.clear()
            os.environ.update(env0)
            verdicts.begin()
            current[0] = i
            launched.clear()
            self.send({"t": "start", "i": i})
            out, err, t0 = io.StringIO(), None, time.time()
            try:
                with contextlib.redirect_stdout(out):
                    self.run(src, f"check cell {i + 1}")
            except BaseException as e:      # SystemExit and KeyboardInterrupt from learner code are failures too
                tb = traceback.format_exception(type(e), e, e.__traceback__)
                err = {"ename": type(e).__name__, "evalue": _text_of(e), "tb": "".join(tb)[-3000:],
                       "at": self.nb.raised_at(e) if self.nb is not None else None}
            changed = [k for k in set(env0) | set(os.environ) if k.startswith(("FEEDBEAST_", "CUDA_"))
                       and env0.get(k) != os.environ.get(k)]
            problems = _integrity_problems(base, self.ns) + [f"the environment variable {k} was changed"
                                                             for k in sorted(changed)]
            import gc
            gc.collect()         # what this cell dropped, looked at by the integrity check above
            self.send({"t": "cell", "i": i, "error": err, "stdout": out.getvalue()[-50000:],
                       "seconds": time.time() - t0, "launched": sorted(set(launched)), "integrity": problems})
            if problems:
                break


def _skip_made_in() -> str:
    """The file of the code that called Skipped's constructor for the skip being recorded ('' outside one)."""
    from ..skip import Skipped
    f = sys._getframe(1)
    while f is not None and f.f_code is not Skipped.__init__.__code__:
        f = f.f_back
    return f.f_back.f_code.co_filename if f is not None and f.f_back is not None else ""


def _numba_kernels(cells) -> list[str]:
    """The Numba kernels (@cuda.jit, not device functions) the lab's own Python cells define."""
    out = []
    for c in cells:
        if c.cell_type != "code" or c.source.startswith("%%"):
            continue
        try:
            tree = ast.parse(python_of(c.source))
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and any(
                    ast.unparse(d).startswith("cuda.jit") and "device=True" not in ast.unparse(d)
                    for d in node.decorator_list):
                out.append(node.name)
    return out


def _learner_frame(learner_code) -> str:
    """The learner's code on the stack now, as its file name and line ('' when none is): a verdict being recorded
    while it runs was asked for by the notebook, not by the lab's checks."""
    f = sys._getframe(2)
    while f is not None:
        if learner_code(f.f_code.co_filename):
            return f"{f.f_code.co_filename} line {f.f_lineno}"
        f = f.f_back
    return ""


def _import_what_checks_import(sources) -> None:
    """Import the modules the check cells import, so that the integrity baseline holds them as they were before
    the learner's code ran (a module first imported by a check would be compared with nothing)."""
    import importlib
    for src in sources:
        try:
            tree = ast.parse(python_of(src))
        except SyntaxError:
            continue
        for n in ast.walk(tree):
            names = [a.name for a in n.names] if isinstance(n, ast.Import) else \
                [n.module] + [f"{n.module}.{a.name}" for a in n.names] if isinstance(n, ast.ImportFrom) and n.module \
                and not n.level else []
            for name in names:
                try:
                    importlib.import_module(name)
                except Exception:          # a name imported from a module, not a module: the module is enough
                    pass


def _harness(fd: int) -> int:
    """The check process: reads its job on stdin, reports on file descriptor `fd`, every line signed."""
    job = json.loads(sys.stdin.read())
    import faulthandler
    import signal
    faulthandler.register(signal.SIGUSR1, all_threads=True)   # every thread's stack to the log: _hung_at asks
    child = _CheckChild(fd, bytes.fromhex(job.pop("key")))
    send = child.send

    import feedbeast as fb
    from .. import hazards, hooks
    from . import guard, pin_hazards, verdicts
    from .notebook import Notebook
    pin_hazards(job.pop("hazards"))     # the grader's word: nothing the notebook sets moves it
    # no hazard report is grading evidence, and none is written from here: Module.hazard_check runs in a file the
    # guard trusts with files (compile.py, for the compile cache), so a learner's call of it would write one
    hooks.on_hazard.clear()
    g0 = fb.gpu()
    send({"t": "hello", "gpu": g0.name if g0 else None, "hazards": hazards.enabled(), "pid": os.getpid()})
    current = [-1]
    learner_made = [lambda filename: False]     # the learner's cells, once they are known

    def sink(r):
        # A verdict is the lab's checks' to record: one recorded while the notebook's own code runs (a function the
        # checks call, itself calling fb.check on data of its choosing) would add passes the lab never checked.
        # A skip says a check cannot run on this machine: the toolkit's word. A Skipped the notebook's own code
        # makes (returned where a check expects an output) would turn a failing check into a skipped one.
        if r["status"] == "skipped" and learner_made[0](_skip_made_in()):
            r = {**r, "status": "failed", "message": f"a Skipped made by the notebook's own code ({r['message']}): "
                 "whether a check can run here is the toolkit's to say, so this check counts as failed"}
        elif inside := _learner_frame(learner_made[0]):
            r = {**r, "status": "failed", "message": f"a verdict recorded from inside the notebook's own code "
                 f"({inside}; {r['status']}: {r['message'][:200]}): the checks are the lab's to run, so this one "
                 "counts as failed"}
        send({"t": "rec", "cell": current[0], **r})
    verdicts._sinks.append(sink)
    launched: list[str] = []

    def watch(kernel, grid, block, args, shared=0, cluster=None):   # first: every launch is seen
        if getattr(kernel.module, "source", None):
            launched.append(kernel.name)
    hooks.before_launch.insert(0, watch)

    sol, learner = Path(job["solution"]), Path(job["learner"])
    if not child.given(job["given"], sol):
        send({"t": "done"})
        return 0
    ns = child.ns
    given = set(ns) - {"__name__", "__builtins__"}
    env0 = environment()             # the grader's, as the given cells left it (Numba's simulator switch)
    _import_what_checks_import(job["checks"])   # in the baseline before any learner code: lab 10's lab_refs
    base = _integrity_baseline(ns, given)
    base["tampered"] = child.tampered      # what the channel put back (a list the child adds to)

    nb = child.nb = Notebook(learner, upto=job["upto"])
    cells = re.compile(rf"{re.escape(learner.name)}, cell \d+")    # the names Notebook.run compiles them under
    grader = re.compile(rf"check cell \d+|{re.escape(sol.name)}, given cell \d+")   # child.checks(), child.given()
    # the classes the learner's code makes stay until the integrity check after each step has looked at them
    # (_computed_specials); each check cell's garbage is collected after that check
    base["learner_code"] = learner_made[0] = lambda filename: cells.fullmatch(filename) is not None
    base["classes_before"], base["learner_module"] = _all_classes(), ns.get("__name__")
    import gc
    gc.disable()
    guard.install(lambda name: cells.fullmatch(name) is not None, lambda name: grader.fullmatch(name) is not None,
                  lambda name, line: at(nb.cells, int(name.rsplit(" ", 1)[1]), line))
    cuda_ns = child.kernels(nb, job["cuda"], given)
    ns.update(cuda_ns)
    base["state"] = {k: st for k, v in cuda_ns.items() if (st := kernel_state(v)) is not None}
    child.definitions(nb, job["needs"], given | set(cuda_ns), job["kernels"], job.get("theirs", ()),
                      [src for _, src in job["given"]], job.get("given_ids", ()))
    from ..numba_support import kernel_types
    for n in job.get("numba_kernels", ()):
        if n in ns and type(ns[n]) not in kernel_types():     # an object that launches as it likes: not run
            child.fail("your definitions", f"{n} is a {type(ns[n]).__name__}, not a Numba kernel: the checks launch "
                       f"the lab's kernel {n} as a @cuda.jit function, so write it as one")
            del ns[n]
    from .notebook import BUILTIN_NAMES
    problems = _integrity_problems(base, ns) + [
        f"the Python builtin {k} was rebound" for k in sorted(BUILTIN_NAMES - given)
        if k in ns and ns[k] is not getattr(builtins, k)]
    if problems:
        child.fail("integrity", "the notebook's code changed or reached what the checks use: " + "; ".join(problems))
    send({"t": "learner-done"})
    if not child.stopped:
        child.checks(job["checks"], env0, base, current, launched)
    send({"t": "done"})
    return 0


# ---- the grader's side --------------------------------------------------------------------------------------

def _label(source: str) -> str:
    """A check cell as a learner recognises it: its first line (a comment without its #), cut at a word."""
    first = source.strip().splitlines()[0].lstrip("# ").strip() if source.strip() else ""
    return first if len(first) <= 60 else first[:60].rsplit(" ", 1)[0] + " …"


def _printed_failures(text: str, i: int) -> list[Outcome]:
    found = []
    lines = ANSI.sub("", text).splitlines()
    for j, raw in enumerate(lines):
        if m := FAILED_LINE.match(raw.strip()):
            more = [ln for ln in lines[j + 1:j + 12] if ln.startswith("  ")]
            found.append(Outcome("failed", m["name"], "\n".join([m["msg"] or "", *more]).strip(), i))
    return found


def _strip_name(name: str, message: str) -> str:
    """fb.check's message repeats its name and verdict: 'x: passed: relative error ...' -> 'relative error ...'."""
    for verdict in ("passed", "FAILED"):
        prefix = f"{name}: {verdict}"
        if message.startswith(prefix):
            return message[len(prefix):].lstrip(":").strip()
    return message


def _merge(outcomes: list[Outcome]) -> list[Outcome]:
    """Identical outcomes of one cell (the same skip for two sizes) count once, with a multiplicity."""
    merged: dict = {}
    for o in outcomes:
        key = (o.status, o.name, o.message, o.cell)
        if key in merged:
            merged[key].count += 1
        else:
            merged[key] = o
    return list(merged.values())


class _Channel:
    """The check process's reports: lines signed with the grader's key, numbered from 0. A line that is not
    signed, or out of order, was written by something else in that process: it is counted, never read."""

    def __init__(self, fd: int, key: bytes):
        self.fd, self.key, self.buf, self.seq, self.forged = fd, key, b"", 0, 0

    def read(self, wait: float) -> list[dict] | None:
        """Messages that arrived within `wait` seconds ([] none yet; None: the process closed the pipe)."""
        import select
        ready, _, _ = select.select([self.fd], [], [], max(0.0, wait))
        if not ready:
            return []
        data = os.read(self.fd, 1 << 16)
        if not data:
            return None
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        out = []
        for raw in lines:
            mac, _, body = raw.decode("utf-8", "replace").partition(" ")
            good = hmac.compare_digest(mac, hmac.new(self.key, body.encode(), hashlib.sha256).hexdigest())
            msg = json.loads(body) if good else None
            if not good or msg.get("seq") != self.seq:
                self.forged += 1
                continue
            self.seq += 1
            out.append(msg)
        return out


def _todo(cells, solution_cells=()) -> str:
    """The TODO lines left in the learner's graded cells with nothing of theirs under them, each named by place()
    (_unwritten_parts)."""
    from ..errors import unwritten
    return unwritten(_unwritten_parts(cells, solution_cells))


def _unwritten_parts(cells, solution_cells=()) -> list[tuple]:
    """(place, the TODO line, its line) of each TODO line left in the learner's graded cells with nothing of theirs
    under them.
    A TODO line kept above the learner's own code is not a part left unwritten: the checks grade that code. One
    with just what the lab gave under it (labs.given_parts of the solution's cells) is; so is one the lab did not
    write. A %%cuda cell that a later cell of the same --name replaces is not graded, nor its TODO lines; nor a
    TODO line in a Python function or class that a later cell defines again."""
    from ..errors import TODO_MARK
    from .labs import given_parts
    handed: dict[str, set] = {}
    for c in solution_cells:
        if c.cell_type == "code":
            for todo, given, after in given_parts(c.source):
                handed.setdefault(todo, set()).add((given, after))
    names = [cuda_name(c.source) if c.cell_type == "code" else None for c in cells]
    defined = [_top_definitions(c.source) if c.cell_type == "code" and is_python(c.source) else {}
               for i, c in enumerate(cells)]          # (the cells the grader runs: not %%script, %%bash, ...)
    parts = []
    for i, c in enumerate(cells):
        if c.cell_type != "code" or (names[i] and names[i] in names[i + 1:]):
            continue
        later = set().union(*(d for d in defined[i + 1:]))
        lines = c.source.splitlines()
        for n, text in enumerate(lines, 1):
            replaced = any(name in later and lo <= n <= hi for name, (lo, hi) in defined[i].items())
            if TODO_MARK in text and not replaced and not _written_under(text.strip(), lines[n:], handed,
                                                                         c.source.startswith("%%cuda")):
                where, line = place(cells, i, n)
                parts.append((where, text, line))
    return parts


def _top_definitions(source: str) -> dict[str, tuple[int, int]]:
    """The functions and classes a Python cell defines at its top level: {name: (first line, last line)}. A TODO line
    inside one that a later cell defines again is in code that does not run ({} for a cell that does not parse)."""
    import ast
    try:
        tree = ast.parse(python_of(source))
    except SyntaxError:
        return {}
    return {n.name: (n.lineno, n.end_lineno) for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _written_under(todo: str, below: list[str], handed: dict, cuda: bool) -> bool:
    """Whether the lines under a TODO line the lab handed out hold code of the learner's: up to the line that
    followed the lab's region (the end of the cell if none did), they are not just the LAB lines given there, nor
    comments and `pass` (labs.is_note: a # line is a comment in Python, a directive in CUDA)."""
    from .labs import is_note
    rest = [x.strip() for x in below if not is_note(x, cuda)]
    for given, after in handed.get(todo, ()):
        if after in rest or not after:
            if tuple(rest[:rest.index(after)] if after else rest) == given:
                return False
        # (the line after the region changed too: the learner's edit, which the checks grade)
    return todo in handed


def _first_heading(nb) -> str:
    """The first line of a notebook's first Markdown cell: its title."""
    first = next((c.source.strip() for c in nb.cells if c.cell_type == "markdown" and c.source.strip()), "")
    return first.splitlines()[0] if first else ""


def _lab_number(nb) -> str | None:
    """The NN of a lab's title (`# Lab 04 · ...`, its first Markdown cell), None without one."""
    m = re.match(r"#\s+Lab\s+(\d+)\b", _first_heading(nb))
    return m[1].zfill(2) if m else None


def _chapter_number(nb) -> str | None:
    """The NN of a chapter's title (`# 04 · mbarrier: ...`), None for any other notebook."""
    m = re.match(r"#\s+(\d\d)\s+·", _first_heading(nb))
    return m[1] if m else None


def _not_a_notebook(path: Path, raw: bytes, owner: str | None = None) -> str:
    """What to do with a lab file that is not a notebook's JSON (emptied, cut short by a full disk or a crash).
    `owner`: the learner whose copy the roster grades (in a folder of its own): said for the instructor."""
    saved = path.parent / ".ipynb_checkpoints" / f"{path.stem}-checkpoint.ipynb"
    lab = re.match(r"(\d\d)-", path.name)
    in_labs = path.parent.name == "labs" and (path.parent.parent / "solutions").is_dir()   # the course's labs/
    what = "is empty" if not raw.strip() else "is not a whole notebook (JSON cut short or edited by hand?"
    if raw.strip():
        try:
            json.loads(raw)
            what += ")"
        except ValueError as e:      # where the JSON breaks: a file cut short breaks at its end
            where = re.search(r"line \d+ column \d+", str(e))
            what += f" it breaks at {where[0]})" if where else ")"
    if owner:
        return (f"{owner}'s {path.name} {what}: {owner} gets it back with File > Revert Notebook to Checkpoint, "
                f"or starts again with make reset-labs LAB={lab[1] if lab else 'NN'} in their course folder "
                "(which keeps this file in labs/backup/)")
    return ("the file " + what + ": "
            + (f"Jupyter's last checkpoint of it is {saved} (File > Revert Notebook to Checkpoint); " if saved.is_file()
               else "")
            + ((f"make reset-labs LAB={lab[1]} writes the lab as given again, keeping this file in labs/backup/"
                if in_labs else f"make reset-labs LAB={lab[1]} writes the course's labs/{path.name[:3]}... as given "
                "again (a file outside labs/, as this one is, it neither touches nor keeps): copy it from there")
               if lab else "start again from the lab as given (make reset-labs LAB=NN)"))


class NotWellFormed(ValueError):
    """A cell the grader cannot read: edited by hand outside Jupyter."""


def _well_formed(nb, path: Path) -> None:
    """Every cell has a type the grader knows and text."""
    for i, c in enumerate(nb.get("cells", [])):
        kind = c.get("cell_type") if isinstance(c, dict) else None
        if kind not in ("code", "markdown", "raw"):
            why = "no type" if kind is None else f"the type {kind!r}, which is not code, markdown or raw"
        elif not isinstance(c.get("source"), str):
            why = "no text (its 'source')"
        else:
            continue
        lab = re.match(r"(\d\d)-", path.name)    # reset without LAB would reset every lab the learner edited
        raise NotWellFormed(f"cell {i + 1} has {why}: open the notebook in Jupyter and save it again, or start "
                            f"again from the lab as shipped (make reset-labs LAB={lab[1] if lab else 'NN'})")


def grade(path, timeout: int = 600, solutions=None, hazards: bool | None = None, kernel: str | None = None,
          course=None, progress=None, owner: str | None = None) -> Report:
    """Grade the learner notebook at `path` (not changed) with the check cells of its solution.

    `hazards`: run with FEEDBEAST_HAZARDS=1 (default on a machine with a GPU: labs 03-09, and later labs whose
    kernels include an fb/ header).
    `kernel` is accepted for compatibility and ignored: the checks run in this interpreter's Python.
    `progress`: called with a line when a cell has run a minute and more without ending (the command line prints it).
    `owner`: the learner whose copy this is (the roster's --learner): what to do with a file that is no notebook
    is then said for the instructor, in that learner's course folder.
    """
    path = Path(path)
    t0 = time.time()
    toolkit = _toolkit_version()
    raw = None
    try:
        raw = path.read_bytes()
        learner = nbformat.reads(raw.decode("utf-8"), as_version=4)
        _well_formed(learner, path)
    except Exception as e:   # missing, unreadable, not a notebook
        why = f"cannot read the notebook: {e if isinstance(e, NotWellFormed) else f'{type(e).__name__}: {e}'}"
        if str(path) in missing:      # named as a lab (`grade 99`): which labs there are; a folder: what it lacks
            why = f"{why}; {missing[str(path)]}" if path.exists() else missing[str(path)]
        elif isinstance(e, (nbformat.reader.NotJSONError, UnicodeDecodeError)):   # (nbformat's words quote the file)
            why = f"cannot read the notebook: {_not_a_notebook(path, raw, owner)}"
        elif raw is not None and not isinstance(e, NotWellFormed):
            why = f"{why}\n{_not_a_notebook(path, raw, owner)}"
        return Report(str(path), [Outcome("failed", "notebook", why)], time.time() - t0, why, toolkit=toolkit,
                      sha256=hashlib.sha256(raw).hexdigest() if raw is not None else "", refused=True)
    sha = hashlib.sha256(raw).hexdigest()

    def broken(why, sol=""):
        return Report(str(path), [Outcome("failed", "notebook", why)], time.time() - t0, why, str(sol), False,
                      sha, toolkit, refused=True)
    try:
        sol_path = find_solution(path, solutions, course)
        sol = nbformat.read(sol_path, as_version=4)
        checks = check_part(sol)
    except Exception as e:
        return broken(f"cannot find the lab's checks: {type(e).__name__}: {e}")
    if not checks:
        return broken(f"{sol_path.name} has no code cell under a '## Check' heading", sol_path)
    chapter = _chapter_number(learner)
    if chapter and not _lab_number(learner):
        return broken(f"this is chapter {chapter}'s notebook, not a lab (its title: "
                      f"{_first_heading(learner)[:60]!r}): the lab that goes with it is {sol_path.name} in labs/ "
                      f"(make grade LAB={chapter}, or python -m feedbeast grade {chapter})", sol_path)
    mine_no, lab_no = _lab_number(learner), _lab_number(sol)
    if mine_no and lab_no and mine_no != lab_no:
        return broken(f"this notebook's title says lab {mine_no}, but its file name makes it lab {lab_no} "
                      f"({sol_path.name}): save lab {mine_no} under its own name (NN- as in labs/) and grade that",
                      sol_path)
    sol_mine = learner_part(sol)
    mine = learner_part(learner)
    # a solution without BEGIN SOLUTION regions marks nothing as given: then all comes from the learner
    given = [c for c in sol_mine if is_given(c)] if any("BEGIN SOLUTION" in c.source for c in sol_mine) else []
    job = {"solution": str(sol_path.resolve()), "learner": str(path.resolve()), "upto": len(mine),
           "given": [(i, c.source) for i, c in enumerate(sol_mine) if any(c is x for x in given)],
           "given_ids": [c.get("id") for c in given if c.get("id")],
           # (--name, the solution's magic line): the learner's kernel text is compiled with the lab's flags
           "cuda": [(n, c.source.partition("\n")[0]) for c in sol_mine
                    if c.cell_type == "code" and c.source.startswith("%%cuda") for n in [cuda_name(c.source)] if n],
           # what the lab's %%cuda cells define ({name: its cell's --name}): taken from the learner's cells of that
           # --name, never from their Python
           "kernels": {k: n for c in sol_mine if c.cell_type == "code" and c.source.startswith("%%cuda")
                       for n in [cuda_name(c.source)] if n for k in [n, *KERNEL_DECL.findall(c.source)]},
           "needs": reads_of(checks), "checks": [c.source for c in checks]}
    # the lab's Numba kernels the checks launch: the learner's must be @cuda.jit functions too
    job["numba_kernels"] = sorted(set(_numba_kernels(sol_mine)) & set(job["needs"]))
    # what the check cells bind for themselves, which no code of the learner's may name (notebook.refusals)
    job["theirs"] = sorted(set().union(*(binds_of(c.source) for c in checks)) - set(job["needs"]))

    lab = re.match(r"(\d\d)-", sol_path.name)     # the lab whose checks run ("Copy of 05-..." is lab 05)
    if hazards is None:    # labs 03 on whose kernels use the fb:: wrappers the hazard build follows
        uses_fb = any("#include <fb/" in c.source for c in sol_mine if c.source.startswith("%%cuda"))
        hazards = bool(lab and (lab.group(1) in HAZARD_LABS or (lab.group(1) >= "03" and uses_fb)) and _has_gpu())
    env = {k: v for k, v in environment().items()
           if k not in ("FEEDBEAST_HAZARDS", "FEEDBEAST_HAZARDS_DUMP", "FEEDBEAST_TRACEBACK")}
    if hazards:     # the check process pins the mode from job["hazards"]; the variable is for the checks to read
        env["FEEDBEAST_HAZARDS"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    job["hazards"] = bool(hazards)
    # Compiled from scratch in a cache of the grade's own: the shared one (~/.cache/feedbeast) is a folder the
    # notebook's own cells can write, and a cubin found there under the learner's source would be graded instead.
    with tempfile.TemporaryDirectory(prefix="feedbeast-grade-") as cache:
        env["FEEDBEAST_CACHE"] = cache
        msgs, error, exit_status = _run_checks(job, env, path.parent.resolve(), timeout, progress, learner.cells)
    outcomes, error = _outcomes(msgs, job, error, hazards, exit_status)
    cells = _cell_tally(outcomes, msgs, len(job["checks"]))
    untrusted = any(o.status == "failed" and o.name in ("integrity", "verdicts") for o in outcomes)
    todo = _todo(mine, sol_mine)
    untouched = bool(job["given"]) and _as_given(mine, sol_mine)
    # the lab as given, or a TODO line left: that first, once. The checks' own copies of it are dropped, and so are
    # they when every TODO line left stands above the learner's own code (the checks read the line, not the code)
    for o in outcomes:
        o.message = TODO_SENTENCE.sub("", o.message).strip() or o.message
    if todo:    # what JupyterLab has not saved yet (it autosaves every 2 minutes) is not in the file read here
        saved = time.strftime("%H:%M:%S", time.localtime(path.stat().st_mtime))
        # the course's own copy of a lab, as given: a learner who works in a copy elsewhere (a hosted notebook's
        # Drive copy) graded this one by its number
        elsewhere = ("; or is yours a copy kept elsewhere (a hosted notebook's in Drive)? grade that file by its path"
                     if untouched and in_course_labs(path) else "")
        outcomes.insert(0, Outcome("failed", "your part", f"{todo.strip()}\n(read from {path.name} as saved at "
                                   f"{saved}: written since? save the notebook, File > Save, then grade again"
                                   f"{elsewhere})"))
    hz = any((o.name.startswith(HAZARD_VERDICT) and o.cell >= 0 and o.status == "passed")
             or "HazardFound" in o.message for o in outcomes)    # "hazard builds on": only from verdicts
    setup = next((m["message"] for m in msgs if m.get("t") == "learner" and m.get("setup")), "")
    # a learner who edits the checks to pass sees them pass in the notebook, and not in the grade: say why
    edited = [c.source.strip() for c in check_part(learner)] != [c.source.strip() for c in checks]
    notes = ["this notebook's check cells are not the lab's (changed, added or removed): the grade ran the lab's "
             "own, as it always does, so what they print in the notebook is not the grade"] if edited else []
    # the solutions sit beside the labs: a notebook whose code is the solution's is said to be (the grade stands)
    apart = (_lines_apart(mine, sol_mine) if job["given"] and path.resolve().parent.name != "solutions"
             else None)     # not a solution (a hub's copy too)
    copied = apart is not None
    if copied:
        notes.append(f"this notebook's own code is {_shown(sol_path)}'s, {copied_words(apart)}")
    # a check that passes on the lab as given (a register budget an empty kernel meets) earns nothing there
    if untouched and any(o.status == "passed" for o in outcomes):
        notes.append("nothing of yours is written yet: the checks that passed pass on the lab as given, and a "
                     "workshop's roster scores this notebook 0")
    ignored = [m for m in msgs if m.get("t") == "ignored"]
    for m in ignored[:5]:    # code no check reads, which the grader would have refused: never run, said
        notes.append(f"not run by the grader, since no check reads it, and refused if one did: {m['name']}: "
                     f"{m['message']}: {m['line']}")
    if len(ignored) > 5:
        notes.append(f"and {len(ignored) - 5} more such statements")
    if not todo and any(o.status == "failed" for o in outcomes):    # a fix made in the browser and not yet saved
        saved = time.strftime("%H:%M:%S", time.localtime(path.stat().st_mtime))
        notes.append(f"graded {path.name} as saved at {saved}: changed since? save it (File > Save), then grade again")
    return Report(str(path), _merge(outcomes), time.time() - t0, error, str(sol_path), hz, sha, toolkit, setup, cells,
                  untrusted, notes, copied, apart or 0, untouched)


def in_course_labs(path: Path) -> bool:
    """The notebook lies in the labs/ folder of a course checkout: the course's own copy of a lab."""
    from .coursedir import is_course
    return path.resolve().parent.name == "labs" and is_course(path.resolve().parent.parent)


def _cell_tally(outcomes: list[Outcome], msgs: list[dict], n: int) -> list[dict]:
    """Per check cell: how many of its checks passed, failed and were skipped, and whether the notebook cut it
    short: an error came out of the notebook's own code (a line of it in the traceback) or was no check's failure,
    the notebook's code broke the integrity check during it, or the cell never reported its end (a hang the grader
    ended). Such a cell ran only some of its checks, so its tally is not a share of them: the roster scores it 0,
    which an honest wrong answer in that cell never scores below. A check's own failure raised by the cell or the
    toolkit (fb.check, an assert of the cell) ends the cell as designed: its tally stands."""
    def cut_by_notebook(m) -> bool:
        e = m["error"]
        return bool(m["integrity"]) or bool(e) and (bool(e.get("at")) or e["ename"] not in CHECK_ERRORS)
    ended = {m["i"]: not cut_by_notebook(m) for m in msgs if m.get("t") == "cell"}
    cells = [{"passed": 0, "failed": 0, "skipped": 0, "cut": not ended.get(i, False)} for i in range(n)]
    for o in outcomes:
        if 0 <= o.cell < n:
            cells[o.cell][o.status] += o.count
    return cells


def _run_checks(job: dict, env: dict, cwd: Path, timeout: int, progress=None,
                cells=()) -> tuple[list[dict], str, int | None]:
    """Start the check process, send it its job, read its signed reports. (messages, why it stopped early).
    `cells`: the learner notebook's cells as graded, to name a line of theirs where a cell hung (_hung_at)."""
    said = [0.0]

    def still(where, since, limit):     # a cell past a minute: said each minute, so a hang is not a silent wait
        if progress is not None and (t := time.time() - since) >= said[0] + PROGRESS_S:
            said[0] = t // PROGRESS_S * PROGRESS_S
            progress(f"  {where}: still running after {t:.0f} s (stopped at {limit:.0f} s; --timeout N or make grade "
                     "TIMEOUT=N sets a check cell's limit)")
    key = secrets.token_bytes(32)
    r, w = os.pipe()
    # The process's own stdout and stderr are a log, never read for verdicts; its first path entry (the
    # working directory, the learner's folder) is dropped, so a file there cannot stand in for a module.
    with tempfile.TemporaryFile() as log:
        code = f"import sys; del sys.path[0]; from feedbeast.course.grade import _harness; sys.exit(_harness({w}))"
        proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=log,
                                stderr=subprocess.STDOUT, pass_fds=(w,), cwd=cwd, env=env)
        os.close(w)
        chan = _Channel(r, key)
        msgs, error, killed = [], "", False
        try:
            proc.stdin.write(json.dumps({**job, "key": key.hex()}).encode())
            proc.stdin.close()
            deadline, where = time.time() + STARTUP_S + timeout, "starting the checks"
            since = time.time()
            while True:
                got = chan.read(min(5.0, deadline - time.time()))
                if got is None:
                    break
                for m in got:
                    msgs.append(m)
                    if m["t"] == "start":
                        deadline, where = time.time() + timeout, f"check cell {m['i'] + 1} ({_label(job['checks'][m['i']])})"
                    elif m["t"] in ("cell", "learner-done"):
                        deadline = time.time() + timeout
                    if m["t"] in ("start", "cell", "learner-done"):
                        since, said[0] = time.time(), 0.0
                if msgs and msgs[-1]["t"] == "done":
                    break
                if time.time() > deadline:
                    error = HUNG.format(where=where, timeout=timeout) + _hung_at(proc, log, Path(job["learner"]), cells)
                    break
                still(where, since, deadline - since)
        finally:
            os.close(r)
            try:
                proc.wait(timeout=30 if not error else 1)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                killed = True
        if not error and (not msgs or msgs[-1]["t"] != "done"):
            log.seek(0)
            tail = log.read().decode("utf-8", "replace").strip().splitlines()[-8:]
            error = (DIED + " (" + _why_ended(proc.returncode, killed) + ")"
                     + ("\n" + "\n".join(tail) if tail else ""))
        if chan.forged:
            msgs.append({"t": "forged", "n": chan.forged})
    return msgs, error, proc.returncode


HUNG = "{where} ran past {timeout} s (a hung kernel?)"       # _run_checks's errors: the checks did not all run


def _hung_at(proc, log, learner: Path, cells) -> str:
    """Where the notebook's own code was when a cell ran past its time: the check process writes every thread's
    Python stack to its log on SIGUSR1 (faulthandler, registered by _harness), most recent call first; the innermost
    frame of each thread in a cell of the learner's (`cells`, the notebook as graded) is named as the notebook's
    messages name a line. A loop that never ends in a Numba kernel run by the simulator (a Python thread per CUDA
    thread) shows there; for a kernel hung on a GPU the host waits in the driver, so at most the learner's line that
    launched it or waits on it shows. A hint only: the log is the check process's, never read for a verdict."""
    import signal
    fd = log.fileno()
    try:
        start = os.fstat(fd).st_size
        proc.send_signal(signal.SIGUSR1)
        text = ""
        for _ in range(20):      # the dump lands at once (a C signal handler); a learner's prints may surround it
            time.sleep(0.1)
            # pread: the child writes through the same open file, so moving its offset would misplace its writes
            text = os.pread(fd, 4 << 20, start).decode("utf-8", "replace")
            if "most recent call first" in text:
                time.sleep(0.1)
                text = os.pread(fd, 4 << 20, start).decode("utf-8", "replace")
                break
    except (OSError, ProcessLookupError):
        return ""
    frame = re.compile(rf'File "{re.escape(learner.name)}, cell (\d+)", line (\d+)')
    places = collections.Counter()
    for stack in re.split(r"\n(?=(?:Current thread|Thread) 0x)", text):
        hit = frame.search(stack)           # the first learner frame of a stack is its innermost one
        if hit:
            places[(int(hit.group(1)), int(hit.group(2)))] += 1
    if not places:
        return ""
    (i, line), n = places.most_common(1)[0]
    try:
        where, code = at(cells, i, line), cells[i].source.split("\n")[line - 1].strip()
    except Exception:        # a hint: a line the notebook as graded does not have names nothing
        return ""
    return f"; your code was running at {where} ({code[:60]!r}" + (f", in {n} threads)" if n > 1 else ")")


DIED = "the check process ended before the checks did"


def ended_early(error: str) -> bool:
    """Whether a report's error says the check process hung or died before its last check cell (_run_checks)."""
    hung = re.escape(HUNG).replace(re.escape("{where}"), ".*").replace(re.escape("{timeout}"), r"\d+")
    return bool(re.search(hung, error or "") or (error or "").startswith(DIED))


def _why_ended(status: int, killed: bool) -> str:
    """What a check process's exit status says about its end (the grader's own kill named as such)."""
    import signal
    if killed:
        return "it stopped reporting and had not exited 30 s later, so the grader ended it"
    if status == -signal.SIGKILL:
        # SIGKILL cannot be caught, and neither Python nor a CUDA error sends it: something outside the process did
        return ("killed by SIGKILL from outside it: on Linux the usual sender is the out-of-memory killer (see "
                "`dmesg`), so grade fewer notebooks at a time or on a machine with more free memory")
    return f"exit status {status}: a crash in a launch, or the notebook's code ended it"


def _outcomes(msgs, job, error, hazards, exit_status) -> tuple[list[Outcome], str]:
    outcomes: list[Outcome] = []
    records: list[Outcome] = []
    errors: list[Outcome] = []       # a check cell raised
    printed: list[Outcome] = []      # a check cell printed `name: FAILED`
    cells_done, launched, hello = set(), {}, None
    stopped = ""           # the learner's cells stopped the checks: their outcome says why, no notebook outcome
    for m in msgs:
        t = m["t"]
        if t == "hello":
            hello = m
        elif t == "learner":
            outcomes.append(Outcome("failed", m["name"], m["message"]))
            if m.get("stop") and not error:
                error = stopped = f"{m['name']}: the checks did not run"
        elif t == "rec" and m["cell"] >= 0:
            records.append(Outcome(m["status"], m["name"], _strip_name(m["name"], m["message"]), m["cell"]))
        elif t == "cell":
            i, name = m["i"], f"check cell {m['i'] + 1} ({_label(job['checks'][m['i']])})"
            cells_done.add(i)
            if m["error"]:
                e = m["error"]
                label = e["ename"] + (f" at {e['at']}" if e.get("at") else "")    # the learner's line it came from
                label += "" if e["ename"] in CHECK_ERRORS else " (the notebook broke here)"
                errors.append(Outcome("failed", name, f"{label}: {ANSI.sub('', e['evalue']).strip()}".strip(), i))
            printed.extend(_printed_failures(m["stdout"], i))
            for k in m["launched"]:
                launched.setdefault(k, i)
            if m["integrity"]:
                outcomes.append(Outcome("failed", "integrity", "the notebook's code changed what the checks use, "
                                        f"during {name}: " + "; ".join(m["integrity"])))
        elif t == "forged":
            outcomes.append(Outcome("failed", "verdicts", f"{m['n']} line(s) on the grader's verdict channel were "
                                    "not signed by it: something in the check process wrote them (not read)"))
    if error and error is not stopped:  # by identity, not by its words: the hang's hint quotes the learner's text
        outcomes.append(Outcome("failed", "notebook", error))
    learner_stopped = any(m["t"] == "learner" for m in msgs)
    if not learner_stopped and not error:
        missing = [i for i in range(len(job["checks"])) if i not in cells_done]
        if missing:
            outcomes.append(Outcome("failed", "notebook", f"check cells {', '.join(str(i + 1) for i in missing)} "
                                    "did not run to their end: their verdicts are missing"))
    # Expected verdicts: a launch under hazard builds has its hazard verdict; a GPU the grader sees is used.
    if hello is not None:
        if hazards and not hello["hazards"]:
            outcomes.append(Outcome("failed", "hazard builds", "the check process did not run hazard builds"))
        if hazards:
            named = {o.name[len(HAZARD_VERDICT):] for o in records if o.name.startswith(HAZARD_VERDICT)}
            raised = any("HazardFound" in e.message for e in errors)
            for k, i in launched.items():
                if k not in named and not raised:
                    outcomes.append(Outcome("failed", f"{HAZARD_VERDICT}{k}", "launched with hazard builds on, but "
                                            "no hazard verdict was recorded (the hazard build follows the fb:: "
                                            "wrappers: a kernel that uses none of them cannot be checked)", i))
        if hello["gpu"]:
            for o in records:
                if o.status == "skipped" and "this machine has none" in o.message:
                    outcomes.append(Outcome("failed", o.name, f"skipped for want of a GPU, but the check process "
                                            f"has a {hello['gpu']}: {o.message}", o.cell))
    elif not error:
        outcomes.append(Outcome("failed", "notebook", "the check process never reported"))
    # A cell that raised the error a check recorded (CheckFailed, SassMismatch, or an AssertionError that wraps
    # one with a hint) is one failure: the check's name with the cell's whole message.
    named_errors = set()
    for r in [o for o in records if o.status == "failed" and o.message]:
        for e in errors:
            if id(e) not in named_errors and e.cell == r.cell and r.message in e.message:
                e.name = r.name
                named_errors.add(id(e))
                records.remove(r)
                break
    # A cell that recorded failed checks and then raised CheckFailed to stop (lab 01's "not yet correct: see the
    # elements named above") failed once per check, not once more: its words go with its first failed check
    for e in [e for e in errors if id(e) not in named_errors and e.message.startswith("CheckFailed")]:
        first = next((r for r in records if r.status == "failed" and r.cell == e.cell), None)
        if first is not None:
            first.message = f"{first.message}\n(the check cell then stopped: {e.message})".strip()
            errors.remove(e)
    recorded_names = {o.name for o in records + errors if o.status == "failed"}
    return outcomes + records + errors + [p for p in printed if p.name not in recorded_names], error


_LEXEMES = re.compile(
    r"(?<![\w.])\.?\d(?:[\w.]|'(?=\w)|[eEpP][+-])*"       # a pp-number, digit separators included: 1'000
    # a raw string is one token, R"( with no letter or digit before its prefix: in xR"(" the R ends a name
    r'|//[^\n]*|/\*.*?\*/|(?<!\w)(?:u8|[uUL])?R"([^()\\ ]{0,16})\((?:.|\n)*?\)\1"|"(?:\\.|[^"\\\n])*"'
    r'|\'(?:\\.|[^\'\\\n])*\'', re.S)


def _without_comments_and_literals(src: str) -> str:
    """C++ source with each comment a space and each string or character literal (raw strings too) an empty one,
    scanned left to right as the lexer does, so that `//` inside a string and a quote inside a comment are read
    right."""
    def one(m):
        t = m[0]
        if t[0].isdigit() or t[0] == ".":
            return t                   # a number, kept as it is
        if t.startswith("/"):
            return " "
        line = src[src.rfind("\n", 0, m.start()) + 1:m.start()]
        if re.fullmatch(r"[ \t]*(?:#|%:)[ \t]*include[ \t]*", line):
            return t                   # a header name, not a literal: the include rule reads it
        return '""' if t[-1] == '"' else "' '"
    return _LEXEMES.sub(one, src)


# a device function's declaration in the toolkit's headers: its name, before its parameter list
_DECLARED = re.compile(r"__device__[^;{()]*?\b(\w+)\s*\(")
_KEYWORDS = {"void", "if", "for", "while", "switch", "return", "sizeof"}


@functools.cache
def _headers() -> tuple[str, ...]:
    """The text of each of the toolkit's device headers (fb/*.cuh)."""
    from ..compile import include_path
    return tuple(h.read_text() for folder in include_path() for h in sorted(Path(folder).glob("fb/*.cuh")))


@functools.cache
def _toolkit_functions() -> frozenset[str]:
    """The names of the functions the toolkit's device headers declare, in any build (not a class's constructor)."""
    names = set()
    for text in _headers():
        names |= set(_DECLARED.findall(text)) - set(re.findall(r"\b(?:struct|class)\s+(\w+)", text))
    return frozenset(names - _KEYWORDS)


@functools.cache
def _build_only_functions() -> frozenset[str]:
    """The functions the toolkit's headers declare only under FB_HAZARDS or FB_DEBUG (in an #if of either, before
    its #else)."""
    names = set()
    for text in _headers():
        stack = []          # per open #if: [tests FB_HAZARDS or FB_DEBUG, past its #else]
        for line in text.split("\n"):
            directive = line.strip()
            if re.match(r"#\s*if", directive):
                stack.append([bool(re.search(r"\bFB_(?:HAZARDS|DEBUG)\b", directive))
                              and not re.match(r"#\s*ifndef", directive) and "!" not in directive, False])
            elif re.match(r"#\s*el", directive) and stack:
                stack[-1][1] = True
            elif re.match(r"#\s*endif", directive) and stack:
                stack.pop()
            elif any(special and not past_else for special, past_else in stack):
                names |= set(_DECLARED.findall(line))
    return frozenset(names - _KEYWORDS)


@functools.cache
def _build_dependent_functions() -> frozenset[str]:
    """The toolkit's functions whose declaration differs between the builds: only the hazard or debug build
    declares them, or the hazard build adds a source-line parameter (FB_HZ_LINE, FB_HZ_LINE_PARAM)."""
    names = set(_build_only_functions())
    for text in _headers():
        names |= set(re.findall(_DECLARED.pattern + r"[^;{)]*\bFB_HZ_LINE(?:_PARAM)?\b", text))
    return frozenset(names - _KEYWORDS)


def _build_tells(text: str) -> list[str]:
    """What in a %%cuda cell's text (comments and literals blanked) tells the hazard and debug builds from the
    release build without a build switch: see cuda_refusals."""
    out = []
    # The hazard and debug builds declare more in namespace fb and give its functions a source-line parameter
    # (fb/hazard.cuh, fb/debug.cuh): a declaration of the learner's own inside it, a toolkit function's address,
    # or what an operand naming the toolkit would be, tells the builds apart without a macro. A namespace alias
    # of the toolkit's (namespace fa = fb::attention) names it as fb does.
    named_fb = {"fb"}          # fb and its aliases, an alias of an alias too (namespace a = fb; namespace b = a;),
    while True:                # and a macro that spells one (#define NS fb, #define MB fb::mbar)
        pairs = re.findall(r"\bnamespace\s+(\w+)\s*=\s*(?:::\s*)?(\w+)", text) + re.findall(
            r"^[^\S\n]*#[^\S\n]*define[^\S\n]+(\w+)[^\S\n]+(?:::\s*)?(\w+)", text, re.M)
        more = {a for a, target in pairs if target in named_fb} - named_fb
        if not more:
            break
        named_fb |= more
    fbs = "|".join(sorted(map(re.escape, named_fb)))
    toolkit = r"(?:(?<!::)\b(?:" + fbs + r")\s*::|::\s*fb\s*::)"
    if any(not re.search(r"\busing\s*$", text[:m.start()]) for m in re.finditer(
            r"(?<![\w:])namespace\s+(?:::\s*)?(?:" + fbs + r")\b(?!\s*=)", text)):
        out.append("it declares names inside namespace fb, the toolkit's own (the hazard and debug builds declare "
                   "more there): declare yours outside it")
    # a name fb of the learner's (a struct, a type alias) answers the hazard build's macros, whose expansions
    # name fb (unqualified in an older header): in that build alone
    if re.search(r"\b(?:struct|class|union|enum|typedef[^;]*|using)\s+fb\b(?!\s*::)|\bfb\s*=(?!=)", text):
        out.append("it declares a name fb of its own (fb is the toolkit's namespace): name yours otherwise")
    if re.search(r"\busing\s+namespace\s+(?:::\s*)?(?:" + fbs + r")\b", text):
        out.append("it brings namespace fb into its own scope (using namespace fb), where the debug and hazard "
                   "builds' extra declarations would answer unqualified calls: write fb:: at each use")
    used = [m[1] for m in re.finditer(r"\busing\s+" + toolkit + r"\s*(?:\w+\s*::\s*)*(\w+)\s*;", text)
            if m[1] in _toolkit_functions()]
    if used:
        out.append(f"it brings the toolkit function {used[0]} into its own scope (using fb::...), where the debug "
                   "and hazard builds' overloads would answer: write fb:: at each call")
    if re.search(r"(?:^|[=(,{;:?!<]|\breturn)\s*&(?!&)\s*" + toolkit, text, re.M):     # unary &, not a && b
        out.append("it takes the address of a toolkit function (&fb::...), whose type the hazard and debug builds "
                   "change: call it")
    # a toolkit function named, its template arguments after it or not, with no call: a pointer to it (a name
    # inside a class or an enum, fb::TraceKind::wait, is not a function of a namespace)
    named = []
    for m in re.finditer(toolkit + r"\s*((?:\w+\s*::\s*)*)(\w+)\b", text):
        if m[2] not in _toolkit_functions() or re.search(r"\b[A-Z]", m[1]):
            continue
        i = m.end()
        while i < len(text) and text[i] in " \t\n":
            i += 1
        if i < len(text) and text[i] == "<":          # skip its template arguments
            depth = 0
            while i < len(text):
                depth += {"<": 1, ">": -1}.get(text[i], 0)
                i += 1
                if depth == 0:
                    break
            while i < len(text) and text[i] in " \t\n":
                i += 1
        if i >= len(text) or text[i] not in "(:":
            named.append(m[2])
    if named and not used:
        out.append(f"it names the toolkit function {named[0]} without calling it (a pointer to it, whose type the "
                   "hazard and debug builds change): call it")
    # An own function with the name of a toolkit function whose declaration differs between the builds (only those
    # builds declare it, or they add a source-line parameter), called unqualified with an argument: argument-
    # dependent lookup (an argument of a toolkit type) finds the toolkit's, and which one wins differs by build.
    # A lambda of that name turns the lookup off ([basic.lookup.argdep]), unless a function of it is declared too.
    lambdas = set(re.findall(r"\bauto\s+(\w+)\s*=\s*\[", text))
    functions = set(re.findall(r"\b\w[\w:<>,\s*&]*?\s(\w+)\s*\([^;{)]*\)\s*(?:const\s*)?[{;]", text))
    # (a function of its own with such a name, declared and called besides: the fallback a tell needs; or a call,
    # not a declaration, of such a name: what comes before it is an operator or a statement's keyword, not a type)
    uses = collections.Counter(m[1] for m in re.finditer(r"(?<![\w:.])(?<!->)(\w+)\s*\((?!\s*\))", text))
    called = {name for name, n in uses.items() if n > 1}        # declared, and called besides
    own_calls = sorted(functions & called & _build_dependent_functions()) or sorted({m[2] for m in re.finditer(
        r"(?:(?<![\w:.>])(?<!->)|(?<=[^\w\s:.-]>)|(?<=\d>))(\s*)(\w+)\s*\((?!\s*\))", text)
        if not re.search(r"(?<![\w])(?!(?:return|case|throw|else|do|co_return|co_yield)\b)\w+[\s*&]*$",
                         text[max(0, m.start() - 80):m.start()])}
        & _build_dependent_functions() - (lambdas - functions))
    if not re.search(r"#\s*include\s*<fb/|" + toolkit, text):
        own_calls = []
    if own_calls:
        out.append(f"it calls or declares {own_calls[0]} unqualified, the name of a toolkit function the hazard or "
                   "debug build declares otherwise (argument-dependent lookup would tell the builds apart): give "
                   "yours another name, and call the toolkit's with fb::")
    for m in re.finditer(r"\b(decltype|sizeof|alignof|noexcept|__builtin_\w+)\s*\(", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        operand = text[m.end():i - 1]
        if re.search(toolkit, operand) and not (m[1] in ("sizeof", "alignof") and not re.search(r"\w\s*\(", operand)):
            out.append(f"it asks {m[1]}(...) of an expression that names the toolkit ({text[m.start():i][:60]}), "
                       "whose answer the hazard and debug builds change: ask it of your own types and values")
            break
    return out


def cuda_refusals(body: str, cwd: Path) -> list[str]:
    """Why the grader does not compile this %%cuda cell of a learner ([] when it does): what could make the build it
    launches differ from the hazard and debug builds of the same text, which set the toolkit's FB_ switches."""
    from ..compile import include_path
    out = []
    # what the preprocessor reads: lines spliced at a backslash, comments gone (C++17 [lex.phases] 2 and 3), string
    # and character literals as tokens of their own (nothing in them names a macro), the digraphs %: and %:%: read
    # as # and ## ([lex.digraph])
    text = _without_comments_and_literals(body.replace("\\\n", "")).replace("%:", "#")
    switches = sorted(set(re.findall(r"\bFB_\w+", text)))
    if switches:
        out.append(f"it sets or tests {', '.join(switches)}, the toolkit's own build switches (the hazard and debug "
                   "builds set them)")
    own = sorted(set(re.findall(r"\bfb_(?:hz|debug)_\w+|\bhazard\s*::\s*record\b", text)))
    if own:
        out.append(f"it names {', '.join(own)}, the hazard and debug builds' own state")
    defines = re.findall(r"^[^\S\n]*#[^\S\n]*define[^\S\n]+(\w+)(?:\(([^)]*)\))?([^\n]*)$", text, re.M)
    pasting = [name for name, _, body in defines if "##" in body]
    if "##" in text:
        out.append("it pastes tokens with ##" + (f" (#define {pasting[0]})" if pasting else "") +
                   ", which can make a switch's name out of pieces: write the names whole")
    # `#x` spells the argument as written, the same in every build, when the macro is called with the argument
    # written at the call: `REQUIRE(n % 4 == 0)` in code or in another macro's body. Handed a macro's parameter,
    # or reached any other way (`#define XSTR(x) S(x)`, an alias `#define CALL S`, `APPLY(S, __syncthreads())`),
    # its argument is expanded first, and then it spells the hazard build's macros: a difference between the
    # builds that names no switch
    for name in (name for name, params, body in defines if re.search(r"(?<!#)#(?!#)[^\S\n]*\w", body)):
        for line in text.split("\n"):
            if not re.search(rf"\b{name}\b", line) or re.match(rf"[^\S\n]*#[^\S\n]*(define[^\S\n]+{name}\b|"
                                                            rf"(ifdef|ifndef|undef)[^\S\n]+{name}\b)", line):
                continue             # its own definition, or whether it is defined
            d = re.match(r"[^\S\n]*#[^\S\n]*define[^\S\n]+\w+(?:\(([^)]*)\))?(.*)", line)
            where = d.group(2) if d else line
            params = [p.strip().rstrip(".") or "__VA_ARGS__" for p in (d.group(1) or "").split(",")] if d else []
            params = [p if p != "..." else "__VA_ARGS__" for p in params if p]
            handed = any(re.search(rf"\b{re.escape(p)}\b", where) for p in params + ["__VA_ARGS__"] * bool(params))
            if (re.match(r"[^\S\n]*#", line) and not d) or re.search(rf"\b{name}\b(?!\s*\()", where) or handed:
                out.append(f"it reaches {name}, which turns its argument into a string with #, other than by a call "
                           f"of {name}(...) with the argument written there ({line.strip()[:60]}): its argument's "
                           f"macros expand first, and the hazard build's differ. Call {name} directly, or write the "
                           "string out")
                break
    # the hazard build defines __syncthreads and __syncwarp as macros (fb/hazard.cuh): a directive naming them
    # tells the builds apart
    # (a #define whose body calls them expands to the same call in every build: allowed)
    # `defined` outside an #if or #elif line: a macro whose body tests defined(__syncthreads), expanded in an #if
    if any(re.search(r"\bdefined\b", line) and not (
            re.match(r"[^\S\n]*#[^\S\n]*(?:el)?if\b", line)
            and not re.search(r"\bdefined\b(?!\s*\(\s*\w+\s*\)|\s+\w)", line)) for line in text.split("\n")):
        out.append("it writes defined other than as defined(NAME) in an #if or #elif line itself (a macro that "
                   "tests whether a name is a macro tells the hazard build, whose __syncthreads is one, from the "
                   "others)")
    if re.search(r"^[^\S\n]*#[^\S\n]*define\b[^\n]*\b__sync(?:threads|warp)\b(?!\s*\()", text, re.M):
        out.append("it names __syncthreads or __syncwarp in a #define other than as a call (the hazard build "
                   "defines them as macros)")
    if re.search(r"^[^\S\n]*#[^\S\n]*+(?!define[^\S\n]+(?!__sync)\w)\w*.*\b__sync(?:threads|warp)\b", text, re.M):
        out.append("it names __syncthreads or __syncwarp in a preprocessor line (the hazard build defines them as "
                   "macros)")
    out += _build_tells(text)
    folders = [Path(d) for d in include_path()]
    for inc in re.findall(r"^[^\S\n]*#[^\S\n]*include(.*)$", text, re.M):
        inc = inc.strip()
        m = re.fullmatch(r'([<"])(\w[\w./+-]*)[>"]', inc)
        local = bool(m) and m[1] == '"' and (cwd / m[2]).exists()
        if not m or ".." in m[2].split("/") or not any((d / m[2]).is_file() for d in folders) or local:
            out.append(f"it includes {inc or 'a header'}, which is not " + (
                "read from the toolkit's headers: NVRTC finds a quoted name in the notebook's folder first" if local
                else "one of the toolkit's or CUDA's headers"))
    return out




def gist(message: str, limit: int = 160) -> str:
    """A failure's message on one line: its first line, and while that ends in ':' the lines it introduces
    ('SASS of kernel k for sm_90a:' + 'missing LDG.E.128'), at most `limit` characters, cut at a word with '...'."""
    lines = [ln.strip() for ln in (message or "").strip().splitlines() if ln.strip()]
    out = lines[0] if lines else ""
    for ln in lines[1:]:
        if not out.endswith(":") or len(out) >= limit:
            break
        out += " " + ln
    if len(out) <= limit:
        return out
    cut = out[:limit - 3]
    word = cut.rfind(" ")
    return (cut[:word] if word >= limit - 40 else cut) + "..."      # at a word, unless the word is very long


missing: dict[str, str] = {}     # a name expand() took for a lab and found none of: why (the labs there are)


def expand(patterns, course=None) -> list[Path]:
    """Paths as given; a pattern the shell did not expand (or quoted) is globbed here; a lab named as `make grade
    LAB=` takes it (`03`, `3`, `cp-async-rowsum`: the course's labs/ from the working directory, or `course`). A
    pattern that matches nothing stays as a path, and grading reports it as missing."""
    from . import labs
    from .coursedir import CourseNotFound, find as find_course, working
    paths = []
    missing.clear()
    for p in patterns:
        hits = sorted(glob.glob(p)) if any(ch in p for ch in "*?[") else [p]
        if not hits:                      # a pattern that matches nothing: named as such when graded
            missing[str(Path(p))] = "no notebook matches this pattern"
        if hits == [p] and Path(p).is_dir():      # a folder: its notebooks (a learner's labs/), or named as empty
            hits = [str(n) for n in sorted(Path(p).glob("[0-9][0-9]-*.ipynb"))]
            if not hits:
                missing[str(Path(p))] = "a folder with no lab notebook (NN-name.ipynb) in it"
                hits = [p]
        elif hits == [p] and not Path(p).exists() and "/" not in p:
            try:
                # the lab's name from the course's solutions; the notebooks from the labs/ the learner works in
                # (on a workshop hub, their copy: FEEDBEAST_COURSE names the shared course)
                mine = working(course) / "labs"
                chosen = [lab for _, lab in labs.select(find_course(explicit=course, below=True) / "solutions",
                                                        mine, [p])]
                found = {lab: labs.on_disk(mine, lab) for lab in chosen}      # copies too
                hits = [str(n) for notebooks in found.values() for n in notebooks]
                for lab, notebooks in found.items():
                    if len(notebooks) > 1:
                        print(labs.roster_note(lab, notebooks), file=sys.stderr)
                if not hits:
                    hits = [str(lab) for lab in chosen]
                    for lab in chosen:
                        missing[str(lab)] = labs.none_left(mine, lab)
            except CourseNotFound as e:   # a lab named by its number needs the course's labs/ to look in
                missing[str(Path(p))] = (f"a lab named by its number or name is looked up in the course's labs/, "
                                         f"and {e}; or give the lab's path")
                hits = [p]
            except ValueError as e:       # no such lab: the labs there are, named, when it is graded as missing
                missing[str(Path(p))] = str(e)
                hits = [p]
        paths += [Path(h) for h in hits] if hits else [Path(p)]
    return paths


def worst(codes) -> int:
    """1 (a check failed) over 3 (a notebook named that is not there) over 2 (partial) over 0."""
    codes = list(codes)
    return next((c for c in (1, NOTHING_RAN, 2) if c in codes), 0)


def time_limit(text: str) -> int:
    """--timeout: a whole number of seconds from 1 (0 would call every cell hung before it starts)."""
    import argparse
    if not (text.strip().isdecimal() and len(text.strip()) < 10 and int(text) >= 1):   # what int() reads
        raise argparse.ArgumentTypeError(f"{text!r} is no time limit: give whole seconds from 1 (600 by default)")
    return int(text)


def main(argv=None) -> int:
    ap = Parser(prog="python -m feedbeast grade",
                description="Grade lab notebooks with the labs' own checks; exit 0 ok, 1 a check failed, 2 partial "
                            "(some checks cannot run here), 3 nothing graded (the command line was wrong).")
    ap.add_argument("notebooks", nargs="+", help="lab notebooks, glob patterns (labs/00-*.ipynb) or labs named as "
                                                 "make grade LAB= names them (03, 3, cp-async-rowsum)")
    ap.add_argument("--timeout", type=time_limit, default=600, help="seconds per cell (default 600)")
    ap.add_argument("--solutions", default=None, help="folder of solution notebooks (default: the course's)")
    ap.add_argument("--course", default=None, help="the course checkout (default: FEEDBEAST_COURSE, else the "
                                                   "checkout around the working directory, else the one around the "
                                                   "notebook)")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    ap.add_argument("--learner", default=None, help="name to put in the JSON (the roster sets it)")
    ap.add_argument("--hazards", choices=("auto", "on", "off"), default="auto",
                    help="FEEDBEAST_HAZARDS=1 for labs 03-09 and later labs using fb/ headers: auto = when a GPU is here")
    args = ap.parse_args(argv)
    hazards = {"auto": None, "on": True, "off": False}[args.hazards]
    reports, codes = [], []
    for path in expand(args.notebooks, args.course):
        if not args.json:
            print(f"grading {path} ...", flush=True)
        rep = grade(path, timeout=args.timeout, solutions=args.solutions, hazards=hazards, course=args.course,
                    progress=None if args.json else lambda line: print(line, flush=True), owner=args.learner)
        reports.append(rep)
        # nothing graded: no such file (the command line named no notebook), or one refused whole (a chapter, no
        # course or solution found, not a notebook): no FAILED grade
        codes.append(NOTHING_RAN if rep.refused else rep.exit_code)
        if not args.json and not rep.refused:
            print(rep, flush=True)
        elif not args.json:
            why = rep.error if path.exists() else missing.get(
                str(path), f"no such file: {path} (a lab is named by its path, or by its number: grade 04)")
            print("  not graded: " + why.replace("\n", "\n              "), flush=True)
    status = worst(codes)
    if not args.json and len(reports) > 1:      # many labs (make grade with no LAB): one line each at the end
        print(f"\n{len(reports)} notebooks graded:")
        word = {code: status.upper() if code else status for status, code in EXIT.items()} | {NOTHING_RAN: "not graded"}
        for rep, code in zip(reports, codes):
            shown = os.path.relpath(rep.path)
            print(f"  {rep.path if shown.startswith('..') else shown}: {word[code]}")
    if args.json:
        labs = [{**r.to_dict(), "exit": code} for r, code in zip(reports, codes)]
        print(json.dumps({"learner": args.learner, "exit": status, "labs": labs}, indent=1))
    return status


if __name__ == "__main__":
    sys.exit(main())
