"""The course machinery: grading, the roster, labs from solutions, sanitizer sweeps, benchmark runs, the LLM
shape suite, the results log, the notebook loader and run modes.

It imports the library (feedbeast); the library never imports it. Importing it installs its hooks into the
library (feedbeast.hooks, which documents each): check outcomes become verdicts the grader reads, bench and
check results go to the results log, a skipped step shows what a GPU run recorded, and inside `make sanitize`'s
notebook runs the library runs in the sanitizer's mode. The course's runners and `make lab` set FEEDBEAST_HOOKS
to feedbeast.course, so that a notebook process they start installs them too.

    python -m feedbeast grade | roster | sanitize | stress | labs ...   the command line (course/__main__.py)
"""
from __future__ import annotations

from .. import hooks
from . import results, runmode, verdicts


def _recorded(kind: str, name: str) -> str | None:
    if kind == "bench":
        return results.recorded_bench(name)
    if kind == "check":
        return results.recorded_check(name) if name != "check" else None
    if kind == "profile":
        return results.recorded_profile(name)
    raise ValueError(f"no recorded results of kind {kind!r}: bench, check or profile")


def install() -> None:
    """Install the course's hooks into the library (again: nothing is installed twice)."""
    verdicts.install()
    for sinks, f in ((hooks.on_bench, results.append), (hooks.on_check, results.append_check),
                     (hooks.on_profile, results.append_profile)):
        if f not in sinks:
            sinks.append(f)
    hooks.recorded = _recorded
    if runmode.under_sanitizer():
        hooks.mode.sanitizer = True
        hooks.mode.untimed = runmode.TIMED_OFF
        hooks.mode.unprofiled = runmode.UNPROFILED


install()
