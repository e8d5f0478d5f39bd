"""Labs are generated from solutions: solution regions are stripped, outputs cleared.

In a solution notebook, the learner's part of a code cell sits between marker lines:
    # BEGIN SOLUTION        (or // BEGIN SOLUTION in a %%cuda cell)
    ...
    # END SOLUTION
and becomes one TODO line with the same indentation. A cell tagged `solution-only` is dropped.

    python -m feedbeast.labs build solutions labs    # write labs/
    python -m feedbeast.labs check solutions labs    # exit 1 if labs/ is stale
    python -m feedbeast.labs reset solutions labs    # restore labs/, backing up edited ones
"""
from __future__ import annotations

import copy
import datetime
import re
import shutil
import sys
from pathlib import Path

import nbformat

BEGIN = re.compile(r"^(?P<indent>\s*)(?P<c>#|//) BEGIN SOLUTION\s*$")
END = re.compile(r"^\s*(#|//) END SOLUTION\s*$")


def strip_source(src: str) -> str:
    out, inside = [], False
    for line in src.splitlines():
        m = BEGIN.match(line)
        if m and not inside:
            inside = True
            out.append(f"{m['indent']}{m['c']} TODO: your code here (see the hints below)")
            continue
        if END.match(line):
            if not inside:
                raise ValueError("END SOLUTION without BEGIN SOLUTION")
            inside = False
            continue
        if not inside:
            out.append(line)
    if inside:
        raise ValueError("BEGIN SOLUTION without END SOLUTION")
    return "\n".join(out)


def make_lab(solution: nbformat.NotebookNode) -> nbformat.NotebookNode:
    lab = copy.deepcopy(solution)
    cells = []
    for cell in lab.cells:
        if "solution-only" in cell.get("metadata", {}).get("tags", []):
            continue
        if cell.cell_type == "code":
            cell.source = strip_source(cell.source)
            cell.outputs = []
            cell.execution_count = None
        cells.append(cell)
    lab.cells = cells
    return lab


def _render(nb) -> str:
    return nbformat.writes(nb) + "\n"


def lab_text(solution_path: Path) -> str:
    return _render(make_lab(nbformat.read(solution_path, as_version=4)))


def pairs(solutions: Path, labs: Path):
    for sol in sorted(Path(solutions).glob("*.ipynb")):
        yield sol, Path(labs) / sol.name


def build(solutions, labs):
    Path(labs).mkdir(exist_ok=True)
    for sol, lab in pairs(solutions, labs):
        lab.write_text(lab_text(sol))
        print(f"wrote {lab}")


def stale(solutions, labs) -> list[str]:
    return [str(lab) for sol, lab in pairs(solutions, labs)
            if not lab.exists() or lab.read_text() != lab_text(sol)]


def reset(solutions, labs):
    """Restore each lab; a lab that differs from the generated one is copied to labs/backup/ first."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    for sol, lab in pairs(solutions, labs):
        fresh = lab_text(sol)
        if lab.exists() and lab.read_text() != fresh:
            backup = lab.parent / "backup" / f"{lab.stem}.{stamp}.ipynb"
            backup.parent.mkdir(exist_ok=True)
            shutil.copy2(lab, backup)
            print(f"kept your version of {lab.name} as {backup}")
        lab.write_text(fresh)
        print(f"restored {lab}")


def main(argv=None):
    argv = argv or sys.argv[1:]
    if len(argv) != 3 or argv[0] not in ("build", "check", "reset"):
        print(__doc__)
        return 2
    cmd, solutions, labs = argv
    if cmd == "build":
        build(solutions, labs)
    elif cmd == "reset":
        reset(solutions, labs)
    else:
        s = stale(solutions, labs)
        if s:
            print("stale labs (run `make labs`):", *s, sep="\n  ")
            return 1
        print("labs are in sync with solutions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
