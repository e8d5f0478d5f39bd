"""Is the feedbeast this Python runs the one of the course checkout whose notebook is running?

A wheel install (`make install ENV=current` on a GPU image, a hosted notebook's setup cell, pip) copies the package
into site-packages. Pulling a newer course changes the checkout's src/feedbeast, not that copy, and the notebooks
then compile the new kernels against the old headers: they fail with errors that name neither. The other way round,
a workshop learner's copy of the course is made once, and the course installed for everyone (often the source of
the instructor's checkout, installed editable) may be updated after. When the course's hooks are installed, the
running package is compared with the source of the checkout at or above the working directory (a notebook runs in
its own folder; FEEDBEAST_COURSE, which a workshop points at the shared course, is not asked), and a difference is
said once on stderr, with the files and what to do. This checkout's own editable install (`make lab`, `make test`)
is that source: nothing to compare.
"""
from __future__ import annotations

import sys
from pathlib import Path

from . import coursedir


def shipped(package: Path) -> dict[str, Path]:
    """The files of a feedbeast package folder that its wheel holds (pyproject: the modules and include/), by their
    path relative to it."""
    return {p.relative_to(package).as_posix(): p for p in package.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
            and (p.suffix == ".py" or p.relative_to(package).parts[0] == "include")}


def differing_files(installed: Path, source: Path) -> list[str]:
    """The files one of the two package folders holds and the other lacks or holds with other contents."""
    a, b = shipped(installed), shipped(source)
    return sorted(n for n in a.keys() | b.keys() if n not in a or n not in b or a[n].read_bytes() != b[n].read_bytes())


def warning(installed: Path, near=None) -> str | None:
    """What to say when `installed` (the running package's folder) differs from the source of the course checkout
    at or above `near` (default: the working directory); None when it is that source, equals it, or no checkout
    with a src/feedbeast is there."""
    course = coursedir.around(near if near is not None else Path.cwd())
    if course is None or not (course / "src" / "feedbeast").is_dir():
        return None
    source, installed = (course / "src" / "feedbeast").resolve(), installed.resolve()
    if installed == source:
        return None
    files = differing_files(installed, source)
    if not files:
        return None
    shown = ", ".join(files[:4]) + (f" and {len(files) - 4} more" if len(files) > 4 else "")
    said = (f"the notebooks of {course} and the course this Python runs ({installed}) differ in {len(files)} "
            f"file(s) of the toolkit ({shown}); the kernels compile with the headers of the one this Python runs.")
    other = installed.parent.parent
    if installed.parent.name == "src" and coursedir.is_course(other):      # another checkout's editable source
        return (f"{said} That is the source of another checkout ({other}): run these notebooks with this "
                f"checkout's own environment (`make lab` in {course}); in a workshop, ask for a fresh copy of the "
                f"course.")
    py = "%d.%d" % sys.version_info[:2]
    return (f"{said} If this checkout is the newer one (an update pulled), install it again: on a GPU image "
            f"`make wheelhouse PY={py} SET=notebook` and `make install ENV=current WHEELS=wheelhouse` in {course}, "
            f"elsewhere `python -m pip install --no-deps --force-reinstall {course}`; then restart the kernel. If "
            f"the installed course is the newer one (a workshop server updated after this copy was made), ask for "
            f"a fresh copy of the course.")


def warn_if_stale(near=None) -> str | None:
    """warning() for the running feedbeast, printed to stderr as one paragraph (a warnings.warn would print the
    toolkit's line that issued it too, which tells a learner nothing); returns its text. A folder or file that
    cannot be read (a working directory since removed, a file moved by a pull under way) says nothing: the
    comparison must never stop the import it runs in."""
    import feedbeast
    try:
        text = warning(Path(feedbeast.__file__).resolve().parent, near)
    except OSError:
        return None
    if text:
        print(f"feedbeast: {text}", file=sys.stderr)
    return text
