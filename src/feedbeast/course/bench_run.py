"""`make bench`: execute every chapter and solution notebook on this GPU, recording each bench().

Chapters are saved with their outputs (their plots then come from this GPU); solutions are run but
left clean. Results go to results/<gpu>/: bench.jsonl, results.md and results.png.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from ..device import describe, gpu
from .results import results_root, summarize


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
    for nb_path in notebooks:
        t = time.time()
        nb = nbformat.read(nb_path, as_version=4)
        try:
            NotebookClient(nb, timeout=timeout, kernel_name="python3",
                           resources={"metadata": {"path": str(nb_path.parent)}}).execute()
            status = "ok"
        except Exception as e:   # keep going: one broken notebook must not hide the others' numbers
            status = f"FAILED: {str(e).splitlines()[0][:200] if str(e) else type(e).__name__}"
            failed.append(nb_path)
        if nb_path.parent.name == "chapters" and status == "ok":
            nbformat.write(nb, nb_path)
        print(f"{nb_path}: {status} ({time.time() - t:.0f} s)")
    folder = results_root() / g.slug
    if (folder / "bench.jsonl").exists():
        print(summarize(folder).read_text())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:] or ["chapters", "solutions"]))
