"""`make sanitize`: every chapter and solution notebook under compute-sanitizer and the hazard checker, one tool
at a time.

    python -m feedbeast sanitize [--tools memcheck,racecheck,synccheck,hazards] [--strict] [--jobs N] [chapters solutions]
    python -m feedbeast.course.sanitize run chapters/00-feeding-the-beast.ipynb   # the inner runner

For each notebook and tool this runs

    compute-sanitizer --tool T --error-exitcode 1 python -m feedbeast.course.sanitize run NOTEBOOK

and prints a table of the reports found; zero everywhere is the bar. Logs go to build/sanitize/.

The fourth tool, `hazards`, is ours (feedbeast.hazards): the same runner without compute-sanitizer and with
FEEDBEAST_HAZARDS=1 (the course's hooks make it the library's mode, feedbeast.hooks.mode.hazards = "check"), so
that every launch first runs the kernel's hazard build at the same arguments and a violation of the async-proxy
ordering rules raises HazardFound. compute-sanitizer does not model the async proxy (TMA, bulk copies, wgmma);
this tool checks exactly that. It needs a GPU, not compute-sanitizer.
Inside it each build and launch configuration (the same source and defines, block, cluster, shared memory) is
traced once, at its first launch (a notebook's correctness check comes before its timed sizes); a launch of it at
another size prints a `hazard check (repeat):` line instead, and the table counts those apart.

How a notebook runs under the sanitizer: `run` executes the notebook's code cells in order inside
this one Python process, with an IPython shell (so `%load_ext feedbeast` and `%%cuda` cells behave
as in Jupyter). A Jupyter kernel would be a second process behind ZeroMQ that the sanitizer only
follows with `--target-processes all`, with the client's own process attached for nothing, and a
script exported by nbconvert would need nbconvert; one process with the shell needs neither. Inside
the sanitized run, fb.bench and fb.ceiling call the timed function once and return a Skipped:
timing under instrumentation means nothing, and one run of each kernel is what the tools check.

Without a GPU, or without compute-sanitizer, every pair it cannot run is reported as skipped, the last line says
that nothing (or only the hazard checker) ran, and the exit status is 2, as grade's PARTIAL: a skip is no pass.
With --strict (or FEEDBEAST_SANITIZE_STRICT=1), which the GPU CI uses, a skip fails (1). Exit 1 for any report.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .exit_status import NOTHING_RAN, Parser

PARTIAL = 2     # as grade's: nothing failed, but some checks could not run here
SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck")
TOOLS = SANITIZER_TOOLS + ("hazards",)
SLOW_CELL_S = float(os.environ.get("FEEDBEAST_SANITIZE_SLOW_CELL_S", 30))   # a cell slower than this is named
#                                                     in the log: where a sanitized run spends its time


from ..isolated import count_reports, find_sanitizer, racecheck  # noqa: E402,F401  (run code under a sanitizer)
from .runmode import TIMED_OFF, UNDER_SANITIZER  # noqa: E402,F401
from .runmode import under_sanitizer as running  # noqa: E402,F401  (True inside the notebook runs)


def notebooks(paths) -> list[Path]:
    out = []
    for p in paths:
        p = Path(p)
        out += sorted(p.glob("*.ipynb")) if p.is_dir() else [p]
    return out


def sanitize_one(sanitizer: str, nb: Path, tool: str, logdir: Path, timeout: int) -> tuple[str, int]:
    """Run one notebook under one tool. Returns (cell text for the table, 1 when it is a failure)."""
    # --report-api-errors no: the toolkit probes on purpose with calls that may fail (a kernel's parameter
    # count, an optional debug symbol) and raises on every other failing call itself; the sanitizer's job
    # here is what kernels do to memory and barriers.
    # --target-processes application-only: the notebook's own process. Its children launch no kernel of
    # the course (Triton's compiler) or are skipped by name (fb.isolated).
    cmd = [sanitizer, "--tool", tool, "--error-exitcode", "1", "--print-limit", "100", "--report-api-errors", "no",
           "--target-processes", "application-only", sys.executable, "-m", "feedbeast.course.sanitize", "run", str(nb)]
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONUNBUFFERED="1")
    if tool == "hazards":       # ours: no compute-sanitizer; every launch is hazard-checked first
        cmd = cmd[cmd.index(sys.executable):]
        env["FEEDBEAST_HAZARDS"] = "1"
    logdir.mkdir(parents=True, exist_ok=True)
    log_path = logdir / f"{nb.parent.name}-{nb.stem}.{tool}.log"
    t = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        log, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        log = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        log_path.write_text(log + f"\n(timed out after {timeout} s)\n")
        return f"timed out ({timeout} s)", 1
    log_path.write_text(" ".join(cmd) + "\n" + log)
    secs = f"{time.time() - t:.0f} s"
    if tool == "hazards":
        found = re.findall(r"HazardFound: ([\w-]+)", log)
        if found:
            return f"HazardFound: {found[0]} ({secs})", 1
        lines = [ln for ln in log.splitlines() if ln.startswith("hazard check: ")]
        repeats = sum(ln.startswith("hazard check (repeat): ") for ln in log.splitlines())
        n, unchecked = None, sum("; not checked:" in ln for ln in lines)
        if rc == 0:
            return (f"0 ({len(lines)} launches" + (f", {unchecked} not checkable" if unchecked else "")
                    + (f"; {repeats} more at other sizes" if repeats else "") + f", {secs})"), 0
    else:
        n = count_reports(log, tool)
    if n:
        return f"{n} reports ({secs})", 1
    # a check that printed FAILED (fb.check(..., raise_on_fail=False)) without raising: "<name>: FAILED: ..."
    failed = re.findall(r"^(.+?): FAILED\b", log, re.M)
    if rc == 0 and failed:
        return f"check failed: {failed[0]}"[:90], 1
    if rc != 0:
        failed = [ln for ln in log.splitlines() if ln.startswith("sanitize run: ")]
        why = failed[-1][len("sanitize run: "):] if failed else f"exit status {rc}"
        return f"notebook failed: {why[:80]}", 1
    return f"0 ({secs})", 0


def table(rows: dict, tools) -> str:
    head = "| notebook | " + " | ".join(tools) + " |"
    sep = "|---|" + "---|" * len(tools)
    body = [f"| {nb} | " + " | ".join(cells[t] for t in tools) + " |" for nb, cells in rows.items()]
    return "\n".join([head, sep, *body])


def sweep(paths, tools=TOOLS, strict=False, timeout=3600, logdir=Path("build/sanitize"), jobs=1) -> int:
    """jobs: notebook runs at a time. They share the GPU; each is mostly the sanitizer's own CPU work."""
    from concurrent.futures import ThreadPoolExecutor
    from ..device import gpu
    nbs = notebooks(paths)
    g = gpu()
    sanitizer = find_sanitizer()
    skip, short = None, None
    if g is None:
        skip = short = "skipped: no GPU"
    elif sanitizer is None and set(tools) & set(SANITIZER_TOOLS):
        short = "skipped: no compute-sanitizer"
        skip = short + " (put a CUDA toolkit's bin/ on PATH or set CUDA_HOME)"
    print(f"compute-sanitizer: {sanitizer or 'not found'}; GPU: {g.name if g else 'none'}", flush=True)
    rows = {f"{nb.parent.name}/{nb.name}": {} for nb in nbs}
    pairs = [(nb, f"{nb.parent.name}/{nb.name}", tool) for nb in nbs for tool in tools]
    failures = 0
    if skip:
        for _, name, tool in pairs:
            if g is not None and tool == "hazards":
                continue
            print(f"{skip}: {tool} {name}")
            rows[name][tool] = short
        pairs = [p for p in pairs if g is not None and p[2] == "hazards"]
    if pairs:
        def one(pair):
            nb, name, tool = pair
            print(f"{tool} {name} ...", flush=True)
            cell, bad = sanitize_one(sanitizer, nb, tool, Path(logdir), timeout)
            print(f"  {tool} {name}: {cell}", flush=True)
            return name, tool, cell, bad
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            for name, tool, cell, bad in pool.map(one, pairs):
                rows[name][tool] = cell
                failures += bad
    text = table(rows, tools)
    print(text)
    if g is not None and not skip:
        from .results import results_root
        out = results_root() / g.slug
        out.mkdir(parents=True, exist_ok=True)
        (out / "sanitize.md").write_text(f"# compute-sanitizer and the hazard checker on {g.name}\n\n{text}\n\n"
                                         f"A cell is the number of reports (hazards: of launches checked, those "
                                         f"with a violation); logs in {logdir}/.\n")
        print(f"wrote {out / 'sanitize.md'}")
    if failures:
        print(f"sanitize: {failures} notebook runs with reports or failures (logs in {logdir}/)")
        return 1
    if skip:
        ran = "only the hazard checker ran" if g is not None and "hazards" in tools else "nothing ran under the tools"
        print(f"sanitize: NOT CHECKED: {ran} here ({skip}); the table's skips are no pass"
              + (": --strict makes that a failure" if strict else ""))
        return 1 if strict else PARTIAL
    return 0


# ---- the inner runner: one notebook, in this process --------------------------------------------

def run(path) -> int:
    """Execute the code cells of one notebook in this process, as Jupyter would. 0 when all ran."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ[UNDER_SANITIZER] = "1"   # for this process's hooks (below) and the processes it starts
    import nbformat
    from IPython.core.interactiveshell import InteractiveShell
    path = Path(path).resolve()
    nb = nbformat.read(path, as_version=4)
    os.chdir(path.parent)
    shell = InteractiveShell.instance()
    from . import install
    install()   # the sanitizer's mode (feedbeast.hooks.mode): longer waits, no timing, no deliberate failures
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        t = time.time()
        res = shell.run_cell(cell.source, store_history=False)
        if time.time() - t > SLOW_CELL_S:    # see fb.pick's sanitize= for making such a cell smaller
            print(f"sanitize run: code cell {i + 1} of {path.name} took {time.time() - t:.0f} s", flush=True)
        if not res.success:
            err = res.error_in_exec or res.error_before_exec
            print(f"sanitize run: code cell {i + 1} of {path.name} raised {type(err).__name__}: "
                  f"{str(err).splitlines()[0] if str(err) else ''}", flush=True)
            return 1
    print(f"sanitize run: {path.name}: every cell ran", flush=True)
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["run"]:
        if len(argv) != 2:
            print("usage: python -m feedbeast.course.sanitize run NOTEBOOK")
            return NOTHING_RAN
        return run(argv[1])
    # a wrong command line exits NOTHING_RAN, not argparse's 2, which make sanitize reads as PARTIAL and lets pass
    ap = Parser(prog="python -m feedbeast sanitize", description="Run notebooks under compute-sanitizer tools.")
    ap.add_argument("paths", nargs="*", default=["chapters", "solutions"])
    ap.add_argument("--tools", default=",".join(TOOLS), help="comma-separated (default: all four)")
    ap.add_argument("--strict", action="store_true", default=os.environ.get("FEEDBEAST_SANITIZE_STRICT") == "1",
                    help="a skip (no GPU, no compute-sanitizer) fails")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per notebook and tool")
    ap.add_argument("--logs", default="build/sanitize")
    ap.add_argument("--jobs", type=int, default=1, help="notebook runs at a time on the one GPU (default 1)")
    args = ap.parse_args(argv)
    tools = [t for t in args.tools.split(",") if t]
    bad = [t for t in tools if t not in TOOLS + ("initcheck",)]
    if bad:
        ap.error(f"unknown tool {bad[0]}: use {', '.join(TOOLS)}")
    gone = [p for p in args.paths if not Path(p).exists()]
    if gone:
        ap.error(f"no {' and no '.join(gone)} here ({Path.cwd()}): run from the course's checkout, or name the "
                 "notebooks or their folders")
    return sweep(args.paths, tools, args.strict, args.timeout, Path(args.logs), args.jobs)


if __name__ == "__main__":
    sys.exit(main())
