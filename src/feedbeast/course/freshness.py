"""Is the feedbeast this Python runs the one of the course checkout being worked in?

A wheel install (`make install ENV=current` on a GPU image, a hosted notebook's setup cell, pip) copies the package
into site-packages. Pulling a newer course changes the checkout's src/feedbeast, not that copy, and the notebooks
then compile the new kernels against the old headers: they fail with errors that name neither. The other way round,
a workshop learner's copy of the course is made once, and the course installed for everyone may be updated after.
When the course's hooks are installed the running package is compared with the checkout's source, and a difference
is said once, with the files and what to do either way (which side is newer, the files do not say). An editable
install of this checkout (`make lab`, `make test`) is the source itself: nothing to compare.
"""
from __future__ import annotations

import sys
from pathlib import Path

from . import coursedir


def differing_files(installed: Path, source: Path) -> list[str]:
    """The files of `source` (paths relative to it) that `installed` lacks or holds with other contents."""
    out = []
    for path in sorted(source.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        rel = path.relative_to(source)
        copy = installed / rel
        if not copy.is_file() or copy.read_bytes() != path.read_bytes():
            out.append(rel.as_posix())
    return out


def warning(installed: Path, near=None) -> str | None:
    """What to say when `installed` (the running package's folder) differs from the source of the course checkout
    found near `near` or else the working directory; None when it is that source, equals it, or no checkout with a
    src/feedbeast is in sight."""
    try:
        course = coursedir.find(near)
    except coursedir.CourseNotFound:
        return None
    source = course / "src" / "feedbeast"
    if not source.is_dir() or installed.resolve() == source.resolve():
        return None
    files = differing_files(installed, source)
    if not files:
        return None
    py = "%d.%d" % sys.version_info[:2]
    shown = ", ".join(files[:4]) + (f" and {len(files) - 4} more" if len(files) > 4 else "")
    return (f"the course installed in this Python ({installed}) and this checkout's source ({source}) differ in "
            f"{len(files)} file(s) ({shown}); the notebooks here compile their kernels with the installed headers. "
            f"If this checkout is the newer one (an update pulled), install it again: on a GPU image "
            f"`make wheelhouse PY={py} SET=notebook` and `make install ENV=current WHEELS=wheelhouse` in {course}, "
            f"elsewhere `python -m pip install --no-deps --force-reinstall {course}`; then restart the kernel. If the "
            f"installed course is the newer one (a workshop server updated after this copy was made), ask for a "
            f"fresh copy of the course.")


def warn_if_stale(near=None) -> str | None:
    """warning() for the running feedbeast, printed to stderr as one paragraph (a warnings.warn would print the
    toolkit's line that issued it too, which tells a learner nothing); returns its text."""
    import feedbeast
    text = warning(Path(feedbeast.__file__).resolve().parent, near)
    if text:
        print(f"feedbeast: {text}", file=sys.stderr)
    return text
