"""Is the feedbeast this Python runs the one of the course checkout whose notebook is running?

A wheel install (`make install ENV=current` on a GPU image, a hosted notebook's setup cell, pip) copies the package
into site-packages. Pulling a newer course changes the checkout's src/feedbeast, not that copy, and the notebooks
then compile the new kernels against the old headers: they fail with errors that name neither. The other way round,
a workshop learner's copy of the course is made once, and the course installed for everyone (often the source of
the instructor's checkout, installed editable) may be updated after. When the course's hooks are installed, the
running package is compared with the source of the checkout at or above the working directory, or the one checkout
one folder below it (a notebook runs in its own folder; a hosted one in the folder that holds the clone; FEEDBEAST_COURSE, which a workshop points at the shared course, only tells a learner's copy from
the course), and a difference is said once on stderr, with the files and what to do. This checkout's own editable
install (`make lab`, `make test`) is that source: nothing to compare.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from . import coursedir


def shipped(package: Path) -> dict[str, Path]:
    """The files of a feedbeast package folder that its wheel holds (pyproject: the modules and include/; no
    caches and no hidden files such as .ipynb_checkpoints), by their path relative to it."""
    out = {}
    for p in package.rglob("*"):
        rel = p.relative_to(package)
        if p.is_file() and not any(part.startswith(".") or part == "__pycache__" for part in rel.parts) \
                and (p.suffix == ".py" or rel.parts[0] == "include"):
            out[rel.as_posix()] = p
    return out


def differing_files(installed: Path, source: Path) -> list[str]:
    """The files one of the two package folders holds and the other lacks or holds with other contents."""
    a, b = shipped(installed), shipped(source)
    return sorted(n for n in a.keys() | b.keys() if n not in a or n not in b or a[n].read_bytes() != b[n].read_bytes())


def warning(installed: Path, near=None) -> str | None:
    """What to say when `installed` (the running package's folder) differs from the source of the course checkout
    at or above `near` (default: the working directory), or the one below it; None when it is that source, equals
    it, or no checkout with a src/feedbeast is there."""
    course = coursedir.around_or_below(near if near is not None else Path.cwd())
    if course is None or not (course / "src" / "feedbeast").is_dir():
        return None
    source, installed = (course / "src" / "feedbeast").resolve(), installed.resolve()
    if installed == source:
        return None
    files = differing_files(installed, source)
    if not files:
        return None
    shown = ", ".join(files[:4]) + (f" and {len(files) - 4} more" if len(files) > 4 else "")
    said = (f"the notebooks of {course} and the feedbeast this Python runs ({installed}) differ in {len(files)} "
            f"file(s) ({shown})." + (" The kernels compile with the installed headers." if any(
                f.startswith("include/") for f in files) else ""))
    shared = os.environ.get("FEEDBEAST_COURSE")          # a workshop's course, of which this checkout is a copy
    if shared and Path(shared).expanduser().resolve() != course.resolve():
        return f"{said} This copy of the course is not the one installed for everyone: ask for a fresh copy."
    other = installed.parent.parent
    if installed.parent.name == "src" and coursedir.is_course(other):      # another checkout's editable source
        return (f"{said} That is the source of another checkout ({other}): run these notebooks with the "
                f"environment of {course} (`make lab` there).")
    return (f"{said} After an update of this checkout, install it again (`make install ENV=current "
            f"WHEELS=<a bundle built from it>`, or `{sys.executable} -m pip install --no-deps --force-reinstall "
            f"{course}`) and restart the kernel.")


def toolchain_warning(near=None, version=None) -> str | None:
    """What to say when the NVRTC this Python compiles with is not one the checkout at or above `near` pins
    (requirements/cu13.txt, cu12.txt: the compiler the chapters' SASS, registers and counts were read with); None
    when it is, or when there is no checkout or no NVRTC to ask. `version`: (major, minor), else this NVRTC's."""
    import re
    course = coursedir.around_or_below(near if near is not None else Path.cwd())
    if course is None:
        return None
    pins = {}
    for name in ("cu13.txt", "cu12.txt"):
        path = course / "requirements" / name
        m = re.search(r"^cuda-toolkit\[[^\]]*\]==(\d+)\.(\d+)", path.read_text(), re.M) if path.is_file() else None
        if m:
            pins[(int(m[1]), int(m[2]))] = name
    if not pins:
        return None
    if version is None:
        try:
            from ..device import nvrtc_version
            version = nvrtc_version()
        except Exception:       # no CUDA wheels here: the first compile says so
            return None
    if tuple(version) in pins:
        return None
    pinned = " or ".join(f"{a}.{b} (requirements/{n})" for (a, b), n in sorted(pins.items()))
    return (f"this Python compiles with NVRTC {version[0]}.{version[1]}; the course pins {pinned}, the compiler its "
            "chapters' SASS, register counts and timings were read with, so what you see may differ from the text. "
            f"To match it: {sys.executable} -m pip install -r {course / 'requirements' / 'cu13.txt'} (or cu12.txt "
            "for a CUDA 12 driver).")


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
    try:
        tool = toolchain_warning(near)
    except (OSError, ValueError):    # an unreadable requirements file: nothing to compare, and the import goes on
        tool = None
    text = " ".join(t for t in (text, tool) if t) or None
    if text:
        print(f"feedbeast: {text}", file=sys.stderr)
    return text
