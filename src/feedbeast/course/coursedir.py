"""Where the course checkout is: found from what is being worked on, never from where feedbeast is installed.

A wheel install puts the package in site-packages, far from chapters/ and solutions/; an editable one leaves
it in src/. Neither says where the course is. The course is, in this order:

1. an explicit folder (a `--course DIR` option), else
2. `FEEDBEAST_COURSE`, else
3. the first folder holding both `chapters/` and `solutions/` at or above the file being worked on (the
   notebook being graded or benchmarked), else at or above the working directory, else
4. for a learner's own commands only (`find(below=True)`: a lab named by its number, the grade of one notebook,
   the recorded results a notebook shows), the one checkout one level below the working directory: a hosted
   notebook's kernel and shell run in a fixed folder (Colab's /content) with the clone inside it, where the
   notebooks' setup cell finds it too. Never for a roster: there a learner's folder below could pose as the course.

That is where the checks and solutions come from. A lab named by its number (`grade 04`, `reset 04`) is looked for
in another place, `working()`: the labs/ of the checkout the learner works in. On a workshop hub FEEDBEAST_COURSE
names the shared course, while each learner works in a copy of it in their home.
"""
from __future__ import annotations

import os
from pathlib import Path

MARKERS = ("chapters", "solutions")


class CourseNotFound(FileNotFoundError):
    pass


def is_course(folder: Path) -> bool:
    return all((folder / m).is_dir() for m in MARKERS)


def _above(start: Path):
    start = start.resolve()
    if start.is_file() or not start.exists():
        start = start.parent
    yield start
    yield from start.parents


def around(start) -> Path | None:
    """The first checkout of the course at or above `start` (a file or folder), or None."""
    return next((folder for folder in _above(Path(start)) if is_course(folder)), None)


def find(near=None, explicit=None, below: bool = False) -> Path:
    """The course checkout (see the module's docstring). `near`: a file or folder being worked on; `below`: step 4."""
    for given, how in ((explicit, "--course"), (os.environ.get("FEEDBEAST_COURSE"), "FEEDBEAST_COURSE")):
        if given:
            folder = Path(given).expanduser().resolve()
            if not is_course(folder):
                raise CourseNotFound(f"{how}={given} is not a checkout of the course (no {' and no '.join(m + '/' for m in MARKERS if not (folder / m).is_dir())} there)")
            return folder
    starts = [Path(near)] if near is not None else []
    starts.append(Path.cwd())
    for start in starts:
        folder = around(start)
        if folder is not None:
            return folder
    found = _below(Path.cwd()) if below else []
    if len(found) == 1:
        return found[0].resolve()
    looked = " or ".join(str(Path(s).resolve()) for s in starts)
    also = (f" ({len(found)} checkouts below it: {', '.join(d.name for d in found)}; say which with --course DIR)"
            if found else " (nor one folder below the working directory)" if below else "")
    raise CourseNotFound(f"no checkout of the course (a folder with chapters/ and solutions/) at or above {looked}"
                         f"{also}: run from the checkout, or pass --course DIR (or set FEEDBEAST_COURSE)")


def around_or_below(folder) -> Path | None:
    """The checkout at or above `folder`, else the one checkout one level below it (a hosted notebook's working
    folder, Colab's /content, with the clone in it); None when there is none, or several below."""
    found = around(folder)
    if found is None:
        below = _below(Path(folder))
        found = below[0] if len(below) == 1 else None
    return found


def _below(folder: Path) -> list[Path]:
    """The checkouts one level below `folder` (a folder that cannot be read is passed over)."""
    out = []
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return out
    for d in entries:
        try:
            if d.is_dir() and is_course(d):
                out.append(d)
        except OSError:
            pass
    return out


def working(explicit=None) -> Path:
    """The checkout whose labs/ a lab named by its number means: `explicit` (--course) when given, else the checkout
    at or above the working directory (a learner's copy), else find()'s (FEEDBEAST_COURSE, or the one below)."""
    if explicit:
        return find(explicit=explicit)
    return around(Path.cwd()) or find(below=True)
