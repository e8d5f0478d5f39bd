"""Grade a lab: the learner's cells, then the lab's own checks as shipped, read from the kernel.

    python -m feedbeast grade labs/00-*.ipynb           # or: make grade LAB=00
    python -m feedbeast grade --json labs/*.ipynb       # per lab, per check: passed / failed / skipped

How a notebook is graded (the contract solutions/ follow, see docs/instructors.md):

1. The matching solution is `solutions/<same name>` of the course checkout the notebook lies in (found from
   `--course DIR` or `FEEDBEAST_COURSE` when given, else from the notebook, else the working directory:
   feedbeast.coursedir),
   or of `--solutions DIR`; else the one solution there with the same `NN-` prefix.
2. A new notebook is run in a fresh kernel of this Python (whatever kernelspec the notebook names): the
   learner's cells before its first `## Check` heading, then the code cells of the solution's check section
   (from its first `## Check...` heading to the next level-2 heading that is not a check, `## Measure`).
   The learner's own check cells and everything from `## Measure` on are not run.
3. Verdicts come from the kernel, not from printed text: fb.check, expect_sass, expect_proxy_fence,
   check_ring and every Skipped record themselves in `feedbeast.verdicts`; a last cell added by the grader
   prints that registry as JSON tagged with a random nonce. A check cell that raises is a failed check,
   with its whole message. A printed `name: FAILED` line in a check cell also fails (a print can only
   fail a lab, never pass one).
4. Exit status: 0 every check ran and passed; 1 a check failed (or a cell raised, or nothing was checked);
   2 partial: nothing failed, but some checks could not run here (no GPU: compiled and SASS-checked,
   correctness not run). A batch exits with the worst of its notebooks (1 over 2 over 0); a notebook that
   cannot be read is reported as failed and the others are still graded.

Labs 03-08 graded on a machine with a GPU run with FEEDBEAST_HAZARDS=1: each launch also runs the hazard
build, and a violation (fb.HazardFound, naming the rule) is a failed check.
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path

import nbformat

FAILED_LINE = re.compile(r"^(?P<name>[^\n:][^\n]*?): FAILED(?::\s*(?P<msg>.*))?$")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
HEADING = re.compile(r"^##\s+(?P<title>\S.*)$")

# Errors that are a check saying no (as opposed to a notebook that broke in some other way).
CHECK_ERRORS = {"CheckFailed", "SassMismatch", "CompileError", "AssertionError", "BarrierTimeout",
                "LaunchError", "TensorMapError", "KernelFault", "HazardFound"}
HAZARD_LABS = {"03", "04", "05", "06", "07", "08"}
EXIT = {"ok": 0, "failed": 1, "partial": 2}


@dataclasses.dataclass
class Outcome:
    status: str          # "passed" | "failed" | "skipped"
    name: str
    message: str = ""
    cell: int = -1       # index of the executed code cell it came from (-1: the registry)
    count: int = 1

    def line(self) -> str:
        times = f" (x{self.count})" if self.count > 1 else ""
        if self.status == "skipped":
            return f"  skipped  {self.name}{times}: {self.message}"
        if self.status == "failed":
            msg = self.message.replace("\n", "\n           ")
            return f"  FAILED   {self.name}{times}\n           {msg}"
        return f"  passed   {self.name}{times}" + (f": {self.message}" if self.message else "")

    def to_dict(self) -> dict:
        return {"status": self.status, "name": self.name, "message": self.message, "count": self.count}


@dataclasses.dataclass
class Report:
    path: str
    outcomes: list
    seconds: float = 0.0
    error: str = ""      # why the notebook could not be graded fully (unreadable, a cell raised, a hang)
    solution: str = ""   # the solution notebook whose check cells ran
    hazards: bool = False   # the kernel ran with FEEDBEAST_HAZARDS=1 (each launch also hazard-checked)

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
        m = re.match(r"(\d\d)-", Path(self.path).name)
        return m.group(1) if m else Path(self.path).stem

    def summary(self) -> str:
        verdict = {"ok": "ok", "failed": "FAILED", "partial": "PARTIAL"}[self.status]
        if self.status == "partial":
            verdict += " (some checks could not run on this machine; nothing failed)"
        elif not self.outcomes and not self.error:
            verdict += " (the notebook reported no check)"
        return (f"{self.path}: {verdict}: {len(self.passed)} passed, {len(self.failed)} failed, "
                f"{len(self.skipped)} skipped ({self.seconds:.0f} s{', hazard builds on' if self.hazards else ''})")

    def __str__(self):
        return "\n".join([o.line() for o in self.outcomes] + [self.summary()])

    def to_dict(self) -> dict:
        return {"notebook": self.path, "lab": self.lab, "solution": self.solution, "status": self.status,
                "exit": self.exit_code, "seconds": round(self.seconds, 1), "error": self.error,
                "hazards": self.hazards,
                "passed": len(self.passed), "failed": len(self.failed), "skipped": len(self.skipped),
                "checks": [o.to_dict() for o in self.outcomes]}


# ---- which cells run -----------------------------------------------------------------------------------

def _heading(cell) -> str | None:
    """The title of a level-2 markdown heading cell ('Check: correctness'), else None."""
    if cell.cell_type != "markdown" or not cell.source.strip():
        return None
    m = HEADING.match(cell.source.strip().splitlines()[0].strip())
    return m["title"].strip() if m else None


def _is_check(title: str | None) -> bool:
    return title is not None and title.lower().startswith("check")


def learner_part(nb) -> list:
    """The learner's cells: those before the first `## Check` heading (else before `## Measure`, else all)."""
    titles = [_heading(c) for c in nb.cells]
    for pred in (_is_check, lambda t: t is not None and t.lower().startswith("measure")):
        for i, t in enumerate(titles):
            if pred(t):
                return nb.cells[:i]
    return list(nb.cells)


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
    `solutions`, else the solutions/ of the course checkout found from the notebook (feedbeast.coursedir)."""
    from .coursedir import find
    folder = Path(solutions) if solutions else find(near=path, explicit=course) / "solutions"
    if not folder.is_dir():
        raise FileNotFoundError(f"no solutions folder at {folder}: pass --solutions DIR")
    same = folder / path.name
    if same.exists():
        return same
    m = re.match(r"(\d\d)-", path.name)
    hits = sorted(folder.glob(f"{m.group(1)}-*.ipynb")) if m else []
    if len(hits) == 1:
        return hits[0]
    raise FileNotFoundError(f"no solution for {path.name} in {folder}"
                            + (f" ({len(hits)} start with {m.group(1)}-)" if hits else ""))


# ---- the kernel: this interpreter, whatever the notebook names ---------------------------------------------

def _kernel_manager_class():
    from ipykernel.kernelspec import get_kernel_dict
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import KernelManager
    from traitlets import default

    class HereSpecs(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            return KernelSpec(resource_dir="", **get_kernel_dict())

    class HereKernelManager(KernelManager):
        @default("kernel_spec_manager")
        def _ksm(self):
            return HereSpecs()
    return HereKernelManager


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


# ---- reading what ran ---------------------------------------------------------------------------------------

def _label(cell) -> str:
    first = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
    return first[:60]


def _text(out) -> str:
    if out.get("output_type") == "stream":
        return ANSI.sub("", out.get("text", ""))
    return ANSI.sub("", out.get("data", {}).get("text/plain", ""))


def _error_of(cell, name: str) -> Outcome | None:
    """The error a cell raised, as a failed Outcome with the whole message."""
    for out in cell.get("outputs", []):
        if out.get("output_type") != "error":
            continue
        ename, evalue = out.get("ename", "Error"), ANSI.sub("", out.get("evalue", "")).strip()
        if ename == "SystemExit" or not evalue or len(evalue) < 4:
            # argparse and friends print their reason on stderr and raise SystemExit(2): keep the reason
            err = "".join(_text(o) for o in cell.get("outputs", [])
                          if o.get("output_type") == "stream" and o.get("name") == "stderr").strip()
            evalue = f"{evalue}\n{err}".strip() if err else evalue
        label = ename if ename in CHECK_ERRORS else f"{ename} (the notebook broke here)"
        return Outcome("failed", name, f"{label}: {evalue}".strip())
    return None


def _printed_failures(cell, i: int) -> list[Outcome]:
    found = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream" and out.get("name") == "stdout" or \
                out.get("output_type") in ("execute_result", "display_data"):
            lines = _text(out).splitlines()
            for j, raw in enumerate(lines):
                if m := FAILED_LINE.match(raw.strip()):
                    more = [ln for ln in lines[j + 1:j + 12] if ln.startswith("  ")]
                    found.append(Outcome("failed", m["name"], "\n".join([m["msg"] or "", *more]).strip(), i))
    return found


def _registry(cell, nonce: str) -> list[dict] | None:
    for out in cell.get("outputs", []):
        for line in _text(out).splitlines():
            if line.startswith(nonce):
                data = json.loads(line[len(nonce):])
                if data.get("nonce") == nonce:
                    return data["records"]
    return None


def _strip_name(name: str, message: str) -> str:
    """fb.check's message repeats its name and verdict: 'x: passed: relative error ...' -> 'relative error ...'."""
    for verdict in ("passed", "FAILED"):
        prefix = f"{name}: {verdict}"
        if message.startswith(prefix):
            return message[len(prefix):].lstrip(":").strip()
    return message


def _merge(outcomes: list[Outcome]) -> list[Outcome]:
    """Identical outcomes (the same skip for two sizes) count once, with a multiplicity."""
    merged: dict = {}
    for o in outcomes:
        key = (o.status, o.name, o.message)
        if key in merged:
            merged[key].count += 1
        else:
            merged[key] = o
    return list(merged.values())


# ---- grading ---------------------------------------------------------------------------------------------

def grade(path, timeout: int = 600, solutions=None, hazards: bool | None = None, kernel: str | None = None,
          course=None) -> Report:
    """Grade the learner notebook at `path` (not changed) with the check cells of its solution.

    `hazards`: run with FEEDBEAST_HAZARDS=1 (default: labs 03-08 on a machine with a GPU).
    `kernel` is accepted for compatibility and ignored: the kernel is always this interpreter's.
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    path = Path(path)
    t0 = time.time()
    try:
        learner = nbformat.read(path, as_version=4)
    except Exception as e:   # missing, unreadable, not a notebook
        why = f"cannot read the notebook: {type(e).__name__}: {e}"
        return Report(str(path), [Outcome("failed", "notebook", why)], time.time() - t0, why)
    try:
        sol_path = find_solution(path, solutions, course)
        checks = check_part(nbformat.read(sol_path, as_version=4))
    except Exception as e:
        why = f"cannot find the lab's checks: {type(e).__name__}: {e}"
        return Report(str(path), [Outcome("failed", "notebook", why)], time.time() - t0, why)
    if not checks:
        why = f"{sol_path.name} has no code cell under a '## Check' heading"
        return Report(str(path), [Outcome("failed", "notebook", why)], time.time() - t0, why, str(sol_path))

    nonce = "fb-verdicts-" + secrets.token_hex(16) + ":"
    mine = [c for c in learner_part(learner) if c.cell_type == "code"]
    begin = nbformat.v4.new_code_cell("import feedbeast.verdicts as _fb_verdicts\n_fb_verdicts.begin()")
    fetch = nbformat.v4.new_code_cell(
        f"import feedbeast.verdicts as _fb_verdicts\nprint({nonce!r} + _fb_verdicts.dumps({nonce!r}))")
    run = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                            "language": "python"}})
    run.cells = [nbformat.v4.new_code_cell(c.source) for c in mine] + [begin] + \
                [nbformat.v4.new_code_cell(c.source) for c in checks] + [fetch]
    n_mine, first_check = len(mine), len(mine) + 1

    lab = re.match(r"(\d\d)-", path.name)
    if hazards is None:
        hazards = bool(lab and lab.group(1) in HAZARD_LABS and _has_gpu())
    env = dict(os.environ)
    env.pop("FEEDBEAST_HAZARDS", None)
    if hazards:
        env["FEEDBEAST_HAZARDS"] = "1"

    outcomes: list[Outcome] = []
    error = ""
    records = None
    client = NotebookClient(run, timeout=timeout, allow_errors=True, kernel_name="python3",
                            kernel_manager_class=_kernel_manager_class(),
                            resources={"metadata": {"path": str(path.parent.resolve())}})
    try:
        # The kernel's own stdout is not ours: what learner code writes to file descriptor 1 must not land
        # in the grader's output (--json is read from it).
        with client.setup_kernel(env=env, stdout=subprocess.DEVNULL):
            for i, cell in enumerate(run.cells):
                is_fetch = i == len(run.cells) - 1
                if is_fetch:
                    client.timeout = 60
                client.execute_cell(cell, i)
                if i < n_mine:
                    name = f"your code cell {i + 1} ({_label(cell)})"
                else:
                    name = f"check cell {i - first_check + 1} ({_label(cell)})"
                err = _error_of(cell, name)
                if err and i < n_mine:
                    outcomes.append(err)
                    error = f"{name} raised {err.message.split(':')[0]}: the checks did not run"
                    break
                if err and i >= first_check and not is_fetch:
                    outcomes.append(err)
                if first_check <= i and not is_fetch:
                    outcomes += _printed_failures(cell, i)
                if is_fetch:
                    records = _registry(cell, nonce)
    except CellTimeoutError as e:
        error = f"a cell ran past {client.timeout} s (a hung kernel?): {str(e).splitlines()[0][:200]}"
        outcomes.append(Outcome("failed", "notebook", error))
    except DeadKernelError as e:
        error = f"the Python kernel died (a crash in a launch?): {e}"
        outcomes.append(Outcome("failed", "notebook", error))
    except Exception as e:   # the kernel could not start, a protocol error: say so, grade the next one
        error = f"grading stopped: {type(e).__name__}: {e}"
        outcomes.append(Outcome("failed", "notebook", error))

    if records is None and not error:
        error = "the checks' verdicts could not be read back from the kernel"
        outcomes.append(Outcome("failed", "notebook", error))
    from_registry = [Outcome(r["status"], r["name"], _strip_name(r["name"], r["message"]))
                     for r in (records or [])]
    # A cell that raised the error a check recorded (CheckFailed, SassMismatch, or an AssertionError that
    # wraps one with a hint) is one failure: the check's name with the cell's whole message.
    errors, named = [o for o in outcomes if o.cell == -1], set()
    for r in [o for o in from_registry if o.status == "failed" and o.message]:
        for e in errors:
            if id(e) not in named and r.message in e.message:
                e.name = r.name
                named.add(id(e))
                from_registry.remove(r)
                break
    recorded_names = {o.name for o in from_registry + errors if o.status == "failed"}
    extra = [o for o in outcomes if o.cell == -1 or o.name not in recorded_names]   # printed FAILED lines
    return Report(str(path), _merge(from_registry + extra), time.time() - t0, error, str(sol_path), hazards)


def expand(patterns) -> list[Path]:
    """Paths as given; a pattern the shell did not expand (or quoted) is globbed here. A pattern that
    matches nothing stays as a path, and grading reports it as missing."""
    paths = []
    for p in patterns:
        hits = sorted(glob.glob(p)) if any(ch in p for ch in "*?[") else [p]
        paths += [Path(h) for h in hits] if hits else [Path(p)]
    return paths


def worst(codes) -> int:
    codes = list(codes)
    return 1 if 1 in codes else 2 if 2 in codes else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m feedbeast grade",
                                 description="Grade lab notebooks with the labs' own checks; exit 0 ok, "
                                             "1 a check failed, 2 partial (some checks cannot run here).")
    ap.add_argument("notebooks", nargs="+", help="lab notebooks or glob patterns (labs/00-*.ipynb)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    ap.add_argument("--solutions", default=None, help="folder of solution notebooks (default: the course's)")
    ap.add_argument("--course", default=None, help="the course checkout (default: found from the notebook, "
                                                   "else the working directory, else FEEDBEAST_COURSE)")
    ap.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    ap.add_argument("--learner", default=None, help="name to put in the JSON (the roster sets it)")
    ap.add_argument("--hazards", choices=("auto", "on", "off"), default="auto",
                    help="FEEDBEAST_HAZARDS=1 for labs 03-08: auto = when a GPU is here")
    args = ap.parse_args(argv)
    hazards = {"auto": None, "on": True, "off": False}[args.hazards]
    reports = []
    for path in expand(args.notebooks):
        if not args.json:
            print(f"grading {path} ...", flush=True)
        rep = grade(path, timeout=args.timeout, solutions=args.solutions, hazards=hazards, course=args.course)
        reports.append(rep)
        if not args.json:
            print(rep, flush=True)
    status = worst(r.exit_code for r in reports)
    if args.json:
        print(json.dumps({"learner": args.learner, "exit": status, "labs": [r.to_dict() for r in reports]},
                         indent=1))
    return status


if __name__ == "__main__":
    sys.exit(main())
