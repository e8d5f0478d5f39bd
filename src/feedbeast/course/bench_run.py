"""`make bench`: execute every chapter and solution notebook on this GPU, recording each bench().

Chapters are saved with their outputs (their plots then come from this GPU); solutions are run but
left clean. Results go to results/<gpu>/: bench.jsonl, results.md and results.png, and runs.jsonl, one line per
notebook that ran to the end: when it started and the names it recorded, so that the summary can tell a name
the notebook still times from one its latest run did not.
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from ..device import describe, gpu
from .results import NOTEBOOK_VARIABLE, results_root, summarize


def run(paths, timeout=1800):
    g = gpu()
    if g is None:
        print("make bench needs a GPU; this machine has none (nothing was timed)")
        return 1
    print(describe())
    os.environ.setdefault("FEEDBEAST_RESULTS", str(Path("results").resolve()))
    os.environ.setdefault("FEEDBEAST_HOOKS", "feedbeast.course")   # the notebooks' bench() results go to the log
    notebooks = []
    for p in paths:
        p = Path(p)
        notebooks += sorted(p.glob("*.ipynb")) if p.is_dir() else [p]
    failed = []
    folder = results_root() / g.slug
    for nb_path in notebooks:
        t = time.time()
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        before = _lines(folder / "bench.jsonl")
        nb = nbformat.read(nb_path, as_version=4)
        os.environ[NOTEBOOK_VARIABLE] = Path(nb_path).as_posix()   # the kernel's records name their notebook
        try:
            NotebookClient(nb, timeout=timeout, kernel_name="python3",
                           resources={"metadata": {"path": str(nb_path.parent)}}).execute()
            status = "ok"
        except Exception as e:   # keep going: one broken notebook must not hide the others' numbers
            status = f"FAILED: {str(e).splitlines()[0][:200] if str(e) else type(e).__name__}"
            failed.append(nb_path)
        if nb_path.parent.name == "chapters" and status == "ok":
            nbformat.write(nb, nb_path)
        if status == "ok":
            note_run(folder, nb_path, started, _lines(folder / "bench.jsonl")[len(before):])
        print(f"{nb_path}: {status} ({time.time() - t:.0f} s)")
    os.environ.pop(NOTEBOOK_VARIABLE, None)
    if (folder / "bench.jsonl").exists():
        print(summarize(folder).read_text())
    return 1 if failed else 0


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def note_run(folder: Path, nb_path: Path, started: str, new_lines: list[str]) -> None:
    """One line of runs.jsonl for a notebook that ran to the end: the names it recorded (the same-run ceilings,
    which any notebook may measure, left out)."""
    recorded = {json.loads(ln)["name"] for ln in new_lines if ln.strip()}
    names = sorted(n for n in recorded if not n.startswith("ceiling/"))
    if names:
        with (folder / "runs.jsonl").open("a") as f:
            f.write(json.dumps({"notebook": Path(nb_path).as_posix(), "started": started, "names": names}) + "\n")


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:] or ["chapters", "solutions"]))
