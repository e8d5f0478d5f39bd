"""Labs are generated from solutions: solution regions are stripped, outputs cleared.

In a solution notebook, the learner's part of a code cell sits between marker lines:
    # BEGIN SOLUTION        (or // BEGIN SOLUTION in a %%cuda cell)
    ...
    # END SOLUTION
and becomes one TODO line with the same indentation. `# BEGIN SOLUTION: what to write` puts that text in the
TODO line (`# TODO: your code here: what to write`), which the checks quote while it is there. A line
`# LAB: code` inside the region is given to the learner as `code` (a starting value that lets the lab run as
given: `// LAB: const int use = 0;`); in the solution it is a comment. A cell tagged `solution-only` is dropped.

    python -m feedbeast.course.labs build solutions labs    # write labs/
    python -m feedbeast.course.labs check solutions labs    # exit 1 if labs/ is stale
    python -m feedbeast.course.labs reset solutions labs    # restore labs/, backing up edited ones
    python -m feedbeast.course.labs reset solutions labs 04 # only lab 04 (a number, a name or a lab's path; several)
    python -m feedbeast.course.labs find solutions labs 04  # the lab files that 04 names (make grade LAB=04)
"""
from __future__ import annotations

import copy
import datetime
import re
import shutil
import sys
from pathlib import Path

import nbformat

BEGIN = re.compile(r"^(?P<indent>\s*)(?P<c>#|//) BEGIN SOLUTION(?::\s*(?P<what>\S.*?))?\s*$")
END = re.compile(r"^\s*(#|//) END SOLUTION\s*$")
LAB_LINE = re.compile(r"^(?P<indent>\s*)(#|//) LAB: (?P<code>.*)$")
TODO = "TODO: your code here"   # what marks the learner's part in a lab (feedbeast.errors.unwritten finds it)


def strip_source(src: str) -> str:
    out, inside = [], False
    for line in src.splitlines():
        m = BEGIN.match(line)
        if m and not inside:
            inside = True
            what = f": {m['what']}" if m["what"] else " (see the hints below)"
            out.append(f"{m['indent']}{m['c']} {TODO}{what}")
            continue
        if END.match(line):
            if not inside:
                raise ValueError("END SOLUTION without BEGIN SOLUTION")
            inside = False
            continue
        if inside and (given := LAB_LINE.match(line)):
            out.append(f"{given['indent']}{given['code']}")
        elif not inside:
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


def select(solutions, labs, which) -> list[tuple[Path, Path]]:
    """The (solution, lab) pairs that `which` names: lab numbers ("4", "04"), names with or without their number and
    .ipynb ("04-mbarrier-ring", "mbarrier-ring"), or paths of labs; all
    when `which` is empty. A name that matches no lab is a ValueError listing the labs there are."""
    every = list(pairs(solutions, labs))
    if not which:
        return every
    chosen = []
    for w in which:
        name = Path(w).name
        bare = name.removesuffix(".ipynb")
        hits = [(s, l) for s, l in every        # 04-mbarrier-ring(.ipynb), mbarrier-ring, 4 or 04
                if bare == l.stem or bare == l.stem.split("-", 1)[-1] or l.name.split("-", 1)[0] == name.zfill(2)]
        if not hits:
            raise ValueError(f"no lab {w!r}: the labs are {', '.join(l.name for _, l in every)}")
        chosen += [h for h in hits if h not in chosen]
    return chosen


def reset(solutions, labs, which=()):
    """Restore each lab (or those `which` names, see select); a lab that differs from the generated one is copied
    to labs/backup/ first."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    for sol, lab in select(solutions, labs, which):
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
    if len(argv) < 3 or argv[0] not in ("build", "check", "reset", "find") or (len(argv) > 3 and argv[0] not in
                                                                                ("reset", "find")):
        print(__doc__)
        return 2
    cmd, solutions, labs, which = argv[0], argv[1], argv[2], argv[3:]
    for folder in (solutions, labs):
        if not Path(folder).is_dir():
            print(f"{folder} is not a folder: give the solutions and labs folders first "
                  f"(python -m feedbeast.course.labs {cmd} solutions labs{' 04' if cmd == 'reset' else ''})")
            return 2
    if cmd == "build":
        build(solutions, labs)
    elif cmd == "find":
        try:
            print(*(str(lab) for _, lab in select(solutions, labs, which)), sep="\n")
        except ValueError as e:
            print(e, file=sys.stderr)
            return 2
    elif cmd == "reset":
        try:
            reset(solutions, labs, which)
        except ValueError as e:
            print(e)
            return 2
    else:
        s = stale(solutions, labs)
        if s:
            print("stale labs (run `make labs`):", *s, sep="\n  ")
            return 1
        print("labs are in sync with solutions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
