"""The course machinery: grading, the roster, labs from solutions, sanitizer sweeps, benchmark runs, the LLM
shape suite, the results log, the notebook loader and run modes.

It imports the library (feedbeast); the library never imports it. Importing it installs its hooks into the
library (feedbeast.hooks, which documents each): check outcomes become verdicts the grader reads, bench and
check results go to the results log, a skipped step shows what a GPU run recorded, and inside `make sanitize`'s
notebook runs the library runs in the sanitizer's mode. It also says when the feedbeast this Python runs differs
from the source of the checkout whose notebook runs (freshness). The course's runners and `make lab` set
FEEDBEAST_HOOKS to feedbeast.course, so that a notebook process they start installs them too.

The hazard mode is the course's variables': FEEDBEAST_HAZARDS (1 = check every launch, report, isolated; anything
else off) and FEEDBEAST_HAZARDS_DUMP (a folder for the traces) set feedbeast.hooks.mode.hazards and hazard_dump
when this installs, and again before a launch whenever they changed since, so `%env FEEDBEAST_HAZARDS=1` in a
notebook that already imported feedbeast checks its next launch. A mode set directly on feedbeast.hooks.mode stays
until a variable changes. The grader's check process sets the mode itself (pin_hazards: no variable moves it).

    python -m feedbeast grade | roster | sanitize | stress | labs ...   the command line (course/__main__.py)
"""
from __future__ import annotations

import sys

import os

from .. import hooks
from . import freshness, results, runmode, verdicts

HAZARDS, HAZARDS_DUMP = "FEEDBEAST_HAZARDS", "FEEDBEAST_HAZARDS_DUMP"
HAZARD_MODES = {"1": "check", "report": "report", "isolated": "isolated"}   # FEEDBEAST_HAZARDS -> mode.hazards
_applied: list = []      # the variables' values the mode was last set from


def hazards_from_environment(*launch) -> None:
    """Set the library's hazard mode from FEEDBEAST_HAZARDS and FEEDBEAST_HAZARDS_DUMP if they changed since it was
    last set from them: at install, and as the first hooks.before_launch (so `%env` after the import works)."""
    now = (os.environ.get(HAZARDS, ""), os.environ.get(HAZARDS_DUMP, ""))
    if _applied == [now]:
        return
    _applied[:] = [now]
    hooks.mode.hazards = HAZARD_MODES.get(now[0].strip(), "")
    hooks.mode.hazard_dump = now[1]


def pin_hazards(on: bool) -> None:
    """The grader's check process: hazard-check every launch (on) or none, whatever the environment says later."""
    while hazards_from_environment in hooks.before_launch:
        hooks.before_launch.remove(hazards_from_environment)
    hooks.mode.hazards, hooks.mode.hazard_dump = ("check" if on else ""), ""


def _recorded(kind: str, name: str, source: str = "") -> str | dict | list | None:
    if kind == "bench":
        return results.recorded_bench(name)
    if kind == "check":
        return results.recorded_check(name) if name != "check" else None
    if kind == "hazard":
        return results.recorded_hazard(name, source)
    if kind == "profile":
        return results.recorded_profile(name)
    if kind == "trace":
        return results.recorded_trace(name)
    if kind == "bench-records":     # each GPU's latest record of exactly this name (a chapter's recorded table)
        return results.recorded("bench", name)
    if kind == "peak":              # a resource's physical peak, as each GPU's latest benchmark bound by it gave it
        return results.recorded_peak(name)
    raise ValueError(f"no recorded results of kind {kind!r}: bench, bench-records, check, hazard, peak, profile or "
                     "trace")


def install() -> None:
    """Install the course's hooks into the library (again: nothing is installed twice)."""
    verdicts.install()
    for sinks, f in ((hooks.on_bench, results.append), (hooks.on_check, results.append_check),
                     (hooks.on_profile, results.append_profile), (hooks.on_trace, results.append_trace),
                     (hooks.on_hazard, results.append_hazard)):
        if f not in sinks:
            sinks.append(f)
    hooks.recorded = _recorded
    hooks.mode.quick = runmode.quick()
    hazards_from_environment()
    if hazards_from_environment not in hooks.before_launch:
        hooks.before_launch.insert(0, hazards_from_environment)     # before the hazard check it switches
    if runmode.under_sanitizer():
        hooks.mode.sanitizer = True
        hooks.mode.untimed = runmode.TIMED_OFF
        hooks.mode.unprofiled = runmode.UNPROFILED
    if not _said_stale:
        _said_stale.append(None)
        ip = _kernel_before_its_first_cell()
        if ip is None:
            _said_stale[0] = freshness.warn_if_stale()
        else:   # a kernel that imports this at start-up (the course's kernelspec): said under the first cell run
            def first_cell(*_):
                ip.events.unregister("pre_run_cell", first_cell)
                _said_stale[0] = freshness.warn_if_stale()
            ip.events.register("pre_run_cell", first_cell)


def _kernel_before_its_first_cell():
    """The IPython shell, when this runs while it starts (no cell run yet), else None: what is printed then goes to
    the kernel's log, not to any notebook."""
    shell = sys.modules.get("IPython")
    ip = shell.get_ipython() if shell is not None and hasattr(shell, "get_ipython") else None
    # ipykernel's shell holds the request it answers; none yet while the kernel starts (a terminal IPython has none)
    if ip is None or not hasattr(ip, "events") or getattr(ip, "parent_header", None) != {}:
        return None
    return ip


_said_stale: list = []   # the running package is compared with the checkout's source once per process
install()
