"""Where other code plugs into the library: every call the library makes into code it does not own.

Chapter 00 introduces the toolkit these hooks belong to; chapter 04 runs a notebook under compute-sanitizer.

The library computes and returns; it records nothing and reads no mode of its own. What a caller adds (a grader
that collects verdicts, a results log, `make sanitize`'s changes) comes in through the hooks below, which are
empty until someone installs them. Nothing here is needed to run a chapter.

Installed by the package itself (feedbeast/__init__.py), because a later stage of the library plugs into an
earlier one that must not import it:
    before_launch   [f(kernel, grid, block, args, shared, cluster)]  run by Kernel.launch and Kernel.bind before a
                    launch (feedbeast.hazards: the hazard build first, when asked for)
    hazard_run      f(kernel, grid, block, *args, shared=, cluster=, **kw) -> a Report (.violations, .ok) or a
                    Skipped, behind Module.hazard_check
    ceiling         f(which, size=None) -> BenchResult or Skipped: what bench(ceiling="copy") is compared with
                    (feedbeast.ceilings.ceiling, looked up when called)

Installed by the course machinery (feedbeast.course.install), never by the library itself:
    on_verdict      [f(status, name, message)] each check's outcome, "passed", "failed" or "skipped" (fb.check,
                    fb.tally, the SASS checks, check_ring, the hazard checker, every Skipped): the grader's record
    on_bench        [f(BenchResult)] each result fb.bench returns: the results log
    on_check        [f(CheckResult | Tally)] each comparison fb.check makes and each count fb.tally is given: the
                    results log (it keeps those made where a GPU is, outside make sanitize)
    on_profile      [f(Profile)] each table fb.profile reads: the results log
    on_trace        [f(Spans)] each named timeline measured here (feedbeast.trace.named): the results log
    on_hazard       [f(record)] each hazard check Module.hazard_check ran, each named fb.racecheck and each named
                    fb.isolated run, as a dict (name, tool, violations, ok, text, source: the digest of the code that
                    ran, feedbeast.skip.source_digest): the results log (it keeps those run where a GPU is, outside
                    make sanitize; the grader's check process keeps none)
    recorded        f(kind, name[, source=digest]): what a GPU run recorded for a step skipped here, shown beside the
                    skip (with `source`, the digest of the code that step would have run: a record of other code says
                    so): one line
                    (str) for a bench ("bench") or a check or tally ("check"), a line and the report after it (str)
                    for a hazard check, racecheck or named fb.isolated run ("hazard"), the record (dict) of a profile
                    ("profile")
                    or of a timeline ("trace"),
                    each GPU's latest record (list of dicts) of a bench ("bench-records"); None when nothing was
                    recorded
    mode            what the process runs under; `mode.sanitizer` is true inside `make sanitize`'s notebook runs:
                    debug builds wait 100x longer (compile), deliberate failures are not run (isolated, hazards),
                    fb.pick takes its sanitize size; `mode.untimed` (a reason) turns timing off: bench runs its
                    function once, and bench and ceiling return a Skipped that gives it; `mode.unprofiled` does the
                    same for profile; `mode.quick` (a reason: make test) makes fb.pick take its quick size;
                    `mode.hazards` hazard-checks every launch of a kernel compiled from source
                    before the launch (feedbeast.hazards.check_on_launch): "" off, "check" raise HazardFound,
                    "report" print the report and go on (surveys), "isolated" check in a separate process;
                    `mode.hazard_dump` (a folder) keeps each hazard build's trace there, to replay elsewhere
                    (python -m feedbeast.hazards replay). Set them here (`fb.hooks.mode.hazards = "check"`); the
                    course's runs (the grader, `make sanitize`) set them from the course's own variables
                    (feedbeast.course); a child process of the toolkit (fb.isolated, fb.profile) runs in the mode
                    its parent gives it

A process that imports feedbeast gets the course's hooks when FEEDBEAST_HOOKS names a module (the course's runners
and `make lab` set it to feedbeast.course, and so does every course notebook's setup cell where it is unset): load()
imports it, and it installs what it needs here. That is the
only variable the library reads to decide what it calls; every mode it runs in is `mode`, set by the caller.
"""
from __future__ import annotations

import dataclasses
import importlib
import os

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"

before_launch: list = []
hazard_run = None
ceiling = None

on_verdict: list = []
on_bench: list = []
on_check: list = []
on_profile: list = []
on_trace: list = []
on_hazard: list = []
recorded = None


@dataclasses.dataclass
class Mode:
    sanitizer: bool = False     # inside make sanitize's notebook runs
    untimed: str = ""           # when set, bench and ceiling return a Skipped with this reason
    unprofiled: str = ""        # when set, profile returns a Skipped with this reason
    quick: str = ""             # when set (a reason: make test), fb.pick takes its `quick` size
    hazards: str = ""           # one of HAZARD_MODES: how each launch is hazard-checked first ("" not at all)
    hazard_dump: str = ""       # a folder: each hazard build's trace is saved there (replay with feedbeast.hazards)


HAZARD_MODES = ("", "check", "report", "isolated")


mode = Mode()


def verdict(status: str, name: str, message: str = "") -> None:
    """A check's outcome, for whoever listens (the grader): what grading reads instead of printed text."""
    if status not in (PASSED, FAILED, SKIPPED):
        raise ValueError(f"status must be passed, failed or skipped, not {status!r}")
    for f in list(on_verdict):
        f(status, str(name), str(message))


def passed(name: str, message: str = "") -> None:
    verdict(PASSED, name, message)


def failed(name: str, message: str = "") -> None:
    verdict(FAILED, name, message)


def skipped(name: str, reason: str = "") -> None:
    verdict(SKIPPED, name, reason)


def recorded_line(kind: str, name: str, source: str = ""):
    """What a GPU run recorded for `name`, when a reader of recorded results is installed; else None. `source`: the
    digest of the code the skipped step would have run (a hazard check's), so the reader can say when the record is
    of other code."""
    if recorded is None:
        return None
    return recorded(kind, name, source=source) if source else recorded(kind, name)


def emit(sinks: list, result) -> None:
    for f in list(sinks):
        f(result)


HOOKS_VARIABLE = "FEEDBEAST_HOOKS"


def load() -> None:
    """Import the modules FEEDBEAST_HOOKS names (comma-separated); each installs its hooks when imported."""
    for name in filter(None, (n.strip() for n in os.environ.get(HOOKS_VARIABLE, "").split(","))):
        importlib.import_module(name)
