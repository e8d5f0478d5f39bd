"""Whether the learners can run the course's Python: a workshop hub runs their servers, kernels and grading as
each learner, so every folder on the way to the interpreter (a venv's python is a link to the Python it was made
from), to its standard library and to the checkout must let other users through (the execute bit for others).

    python -m feedbeast.course.reach PATH...     exit 1 and say which folder stops them, else exit 0 silently

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
    """The first folder on the way to `path` (the path itself, when it is a file, needs the execute bit for a
    program) that does not let other users through, with its mode; None when all do."""
    real = Path(os.path.realpath(path))
    for p in [*reversed(real.parents), real]:
        mode = os.stat(p).st_mode
        if (stat.S_ISDIR(mode) or p == real) and not mode & stat.S_IXOTH:
            return p, stat.S_IMODE(mode)
    return None


def problem(paths) -> str:
    """What stops another user from reaching one of `paths` (each as given and as its links resolve), '' if
    nothing does."""
    for path in paths:
        for shown in dict.fromkeys([str(path), os.path.realpath(path)]):
            if hit := blocked(shown):
                folder, mode = hit
                return (f"{folder} (mode {mode:o}) lets no other user through, so learners cannot reach {path}: "
                        "their servers would not start and the roster would grade every learner `error`. Keep the "
                        "checkout under /opt or /srv (chmod -R a+rX) and make .venv from a Python every user can "
                        "run (make workshop PYTHON3=/usr/bin/python3); if the learners reach it through a group or "
                        "an ACL instead, this check cannot see it")
    return ""


def main(argv=None) -> int:
    paths = list(sys.argv[1:] if argv is None else argv) or [sys.executable, sysconfig.get_paths()["stdlib"]]
    if why := problem(paths):
        print(why, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
