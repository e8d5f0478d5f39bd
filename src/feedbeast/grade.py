"""Grade a lab: execute the learner's notebook and report every check it ran.

    python -m feedbeast grade labs/00-*.ipynb        # or: make grade LAB=00

The notebook runs top to bottom in a fresh `python3` kernel (nbclient), each cell bounded by a
timeout. Then its outputs are read. A check reports itself in one of these ways, all of which the
toolkit already prints:

    copy_x2 n=3: passed: relative error 0.00e+00 (limit 1e-05)      fb.check -> passed
    copy_x2 n=3: FAILED: relative error inf (limit 1e-05)           fb.check(..., raise_on_fail=False)
    model: ok, 94608 states explored                                 "ok" reads as "passed"
    SASS: {'LDG.E.128': 2, 'STG.E.128': 2}                           expect_sass's counts printed
    skipped: launch copy_x2: needs sm_90a, this machine has none    a Skipped, printed by name
    CheckFailed / SassMismatch / CompileError / any other error     the cell raised: failed

A skip is never a pass. The exit status is 1 when any check failed or any cell raised, and also
when the notebook reported no check at all (an empty check cell proves nothing).
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import re
import sys
import time
from pathlib import Path

import nbformat

PASSED = re.compile(r"^(?P<name>[^\n:][^\n]*?): (?:passed|ok)\b[:,]?\s*(?P<msg>.*)$")
FAILED = re.compile(r"^(?P<name>[^\n:][^\n]*?): FAILED(?::\s*(?P<msg>.*))?$")
SASS = re.compile(r"^(?P<name>SASS(?: of [^:]+)?): (?P<msg>\{.*\}|Counter\(\{.*\}\))$")
SKIPPED = re.compile(r"^skipped: (?P<rest>.+)$")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

# Errors that are a check saying no (as opposed to a notebook that broke in some other way).
CHECK_ERRORS = {"CheckFailed", "SassMismatch", "CompileError", "AssertionError", "BarrierTimeout",
                "LaunchError", "TensorMapError"}


@dataclasses.dataclass
class Outcome:
    status: str          # "passed" | "failed" | "skipped"
    name: str
    message: str = ""
    cell: int = -1       # index of the code cell (0-based among code cells)
    count: int = 1

    def line(self) -> str:
        times = f" (x{self.count})" if self.count > 1 else ""
        if self.status == "skipped":
            return f"  skipped  {self.name}{times}: {self.message}"
        if self.status == "failed":
            msg = self.message.replace("\n", "\n           ")
            return f"  FAILED   {self.name}{times}\n           {msg}"
        return f"  passed   {self.name}{times}" + (f": {self.message}" if self.message else "")


@dataclasses.dataclass
class Report:
    path: str
    outcomes: list
    seconds: float = 0.0
    error: str = ""      # the first cell that raised, when it did

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
    def ok(self) -> bool:
        return not self.failed and not self.error and bool(self.outcomes)

    def summary(self) -> str:
        verdict = "ok" if self.ok else "FAILED"
        if not self.outcomes and not self.error:
            verdict += " (the notebook reported no check)"
        return (f"{self.path}: {verdict}: {len(self.passed)} passed, {len(self.failed)} failed, "
                f"{len(self.skipped)} skipped ({self.seconds:.0f} s)")

    def __str__(self):
        return "\n".join([o.line() for o in self.outcomes] + [self.summary()])


def _split_skip(rest: str) -> tuple[str, str]:
    """'launch k: needs sm_90a, ...' -> ('launch k', 'needs sm_90a, ...'); a reason alone has no name."""
    if ": " in rest:
        what, reason = rest.split(": ", 1)
        if not what.startswith("needs "):
            return what, reason
    return "(unnamed step)", rest


def parse_text(text: str, cell: int = -1) -> list[Outcome]:
    """The check lines in one block of printed text."""
    found = []
    for raw in ANSI.sub("", text).splitlines():
        line = raw.strip()
        if m := SKIPPED.match(line):
            what, reason = _split_skip(m["rest"])
            found.append(Outcome("skipped", what, reason, cell))
        elif m := SASS.match(line):
            found.append(Outcome("passed", m["name"], m["msg"], cell))
        elif m := FAILED.match(line):
            found.append(Outcome("failed", m["name"], m["msg"] or "", cell))
        elif m := PASSED.match(line):
            found.append(Outcome("passed", m["name"], m["msg"] or "", cell))
    return found


def _cell_label(cell) -> str:
    first = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
    return first[:60]


def parse_notebook(nb) -> tuple[list[Outcome], str]:
    """Outcomes from an executed notebook's outputs, and the description of the first error."""
    outcomes, error = [], ""
    code = [c for c in nb.cells if c.cell_type == "code"]
    for i, cell in enumerate(code):
        for out in cell.get("outputs", []):
            kind = out.get("output_type")
            if kind == "stream" and out.get("name") == "stdout":
                outcomes += parse_text(out.get("text", ""), i)
            elif kind in ("execute_result", "display_data"):
                outcomes += parse_text(out.get("data", {}).get("text/plain", ""), i)
            elif kind == "error":
                ename, evalue = out.get("ename", "Error"), ANSI.sub("", out.get("evalue", ""))
                name = f"code cell {i + 1} ({_cell_label(cell)})"
                label = ename if ename in CHECK_ERRORS else f"{ename} (the notebook broke here)"
                outcomes.append(Outcome("failed", name, f"{label}: {evalue}".strip(), i))
                error = error or f"{name}: {ename}"
    return _merge(outcomes), error


def _merge(outcomes: list[Outcome]) -> list[Outcome]:
    """Identical lines (the same skip printed for two sizes) count once, with a multiplicity."""
    merged: dict = {}
    for o in outcomes:
        key = (o.status, o.name, o.message)
        if key in merged:
            merged[key].count += 1
        else:
            merged[key] = o
    return list(merged.values())


def grade(path, timeout: int = 600, kernel: str = "python3") -> Report:
    """Execute the notebook at `path` (a copy in memory: the file is not changed) and grade it."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    t = time.time()
    crash = ""
    try:
        NotebookClient(nb, timeout=timeout, kernel_name=kernel, allow_errors=False,
                       resources={"metadata": {"path": str(path.parent.resolve())}}).execute()
    except CellExecutionError:
        pass                                  # the error is in the cell's outputs; parsed below
    except CellTimeoutError as e:
        crash = f"a cell ran past {timeout} s (a hung kernel?): {str(e).splitlines()[0][:200]}"
    except DeadKernelError as e:
        crash = f"the Python kernel died (a crash in a launch?): {e}"
    outcomes, error = parse_notebook(nb)
    if crash:
        outcomes.append(Outcome("failed", "notebook", crash))
        error = error or crash
    return Report(str(path), outcomes, time.time() - t, error)


def expand(patterns) -> list[Path]:
    """Paths as given; a pattern the shell did not expand (or quoted) is globbed here."""
    paths = []
    for p in patterns:
        hits = sorted(glob.glob(p)) if any(ch in p for ch in "*?[") else [p]
        if not hits:
            raise SystemExit(f"grade: no notebook matches {p}")
        paths += [Path(h) for h in hits]
    return paths


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m feedbeast grade",
                                 description="Execute lab notebooks and report each check.")
    ap.add_argument("notebooks", nargs="+", help="lab notebooks or glob patterns (labs/00-*.ipynb)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    args = ap.parse_args(argv)
    status = 0
    for path in expand(args.notebooks):
        print(f"grading {path} ...", flush=True)
        rep = grade(path, timeout=args.timeout)
        print(rep, flush=True)
        status |= 0 if rep.ok else 1
    return status


if __name__ == "__main__":
    sys.exit(main())
