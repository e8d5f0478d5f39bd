"""Whether the learners can run the course's Python: a workshop hub runs their servers, kernels and grading as
each learner, so every folder on the way to the interpreter (a venv's python is a link to the Python it was made
from), to its standard library and to the checkout must let other users through (the execute bit for others).

    python -m feedbeast.course.reach [PATH...]   this Python (as invoked and as its links resolve), its standard
                                                 library, its site-packages, the course's package and each PATH:
                                                 exit 1 and say which folder stops the learners, else exit 0 silently

Read from the mode bits only (`ls -l`): a folder opened to the learners by its group or an ACL is reported too,
and the message says so.
"""
from __future__ import annotations

import os
import stat
import sys
import sysconfig
from pathlib import Path


def blocked(path) -> tuple[Path, int] | None:
    """The first folder on the way to `path` as written (a link is not followed: the folders it stands in count)
    that does not let other users through, or `path` itself when it is a file without the execute bit for them,
    with its mode; None when all let them through."""
    path = Path(os.path.abspath(path))
    for p in [*reversed(path.parents), path]:
        mode = os.lstat(p).st_mode
        if (stat.S_ISDIR(mode) or (p == path and stat.S_ISREG(mode))) and not mode & stat.S_IXOTH:
            return p, stat.S_IMODE(mode)
    return None


def problem(paths) -> str:
    """What stops another user from reaching one of `paths` (each as written and as its links resolve), '' if
    nothing does."""
    for path in paths:
        for shown in dict.fromkeys([os.path.abspath(path), os.path.realpath(path)]):
            try:
                hit = blocked(shown)
            except OSError as e:
                return f"{shown} cannot be read ({e.strerror}), so whether learners can reach it is not known"
            if hit:
                folder, mode = hit
                return (f"{folder} (mode {mode:o}) lets no other user through, so learners cannot reach {path}: "
                        "their servers would not start and the roster would grade every learner `error`. Keep the "
                        "checkout under /opt or /srv (chmod -R a+rX) and make .venv from a Python every user can "
                        "run (make workshop PYTHON3=/usr/bin/python3, with WHEELS=wheelhouse where there is no "
                        "internet); if the learners reach it through a group or an ACL instead, this check cannot "
                        "see it")
    return ""


def main(argv=None) -> int:
    import feedbeast
    mine = [sys.executable, sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
            os.path.dirname(feedbeast.__file__)]
    paths = mine + list(sys.argv[1:] if argv is None else argv)
    if why := problem(paths):
        print(why, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
