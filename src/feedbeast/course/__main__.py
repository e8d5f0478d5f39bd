"""python -m feedbeast COMMAND ... (also python -m feedbeast.course COMMAND): the course's command line.

    grade labs/00-*.ipynb            grade lab notebooks with the labs' own checks (exit 0 ok, 1 failed,
                                     2 partial: some checks cannot run here; 3: nothing graded: a wrong command
                                     line); --json for machines
    roster --homes /home --csv grades.csv   grade every learner's labs on a workshop server, one CSV
    roster merge --csv room.csv a.json b.json   one CSV from the roster --json files of several servers
                                     (--latest: a regrade, the file given last wins)
    sanitize [chapters solutions]    notebooks under compute-sanitizer memcheck, racecheck, synccheck and the
                                     hazard checker (exit 2: a tool could not run here, NOT CHECKED)
    stress [--n 100]                 the GPU tests with random ragged sizes and repeated runs
    build | check | reset [solutions labs]   generate, verify or restore labs/ (feedbeast.course.labs)
    reset 04 [05 ...]                restore only these labs (a number, a name or a lab's path) of the course
                                     checkout here, or one folder below (or --course DIR)
"""
from __future__ import annotations

import sys
from pathlib import Path

from .exit_status import NOTHING_RAN


# The course machinery's own packages (pyproject's extra `course`); the library runs without them.
COURSE_PACKAGES = ("nbformat", "nbclient")


def main(argv=None) -> int:
    try:
        return _run(sys.argv[1:] if argv is None else list(argv))
    except ModuleNotFoundError as e:
        if e.name not in COURSE_PACKAGES:
            raise
        from ..errors import install_command
        from .coursedir import around
        print(f"the course's command line needs {e.name}, which this Python ({sys.executable}) lacks: the library "
              f"alone (pip install feedbeast) does not bring it. Install the course's extras: "
              f"{install_command('cu13,course', around(Path.cwd()))}, then run the command again.", file=sys.stderr)
        return NOTHING_RAN


def _run(argv: list) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__ if argv else f"no command given: name one of those below (nothing ran)\n{__doc__}")
        return 0 if argv else NOTHING_RAN
    cmd, rest = argv[0], argv[1:]
    if cmd == "grade":
        from .grade import main as run
        return run(rest)
    if cmd == "roster" and rest[:1] == ["merge"]:   # several servers' roster --json files into one CSV
        from .roster_merge import main as run
        return run(rest[1:])
    if cmd == "roster":
        from .roster import main as run
        return run(rest)
    if cmd == "sanitize":
        from .sanitize import main as run
        return run(rest)
    if cmd == "stress":
        from .stress_run import main as run
        return run(rest)
    if cmd in ("build", "check", "reset"):
        from .labs import main as run
        if len(rest) < 2 or not all(Path(r).is_dir() for r in rest[:2]):
            # `reset 04`: the folders of the course checkout this is run in (or under, e.g. from labs/)
            from .coursedir import CourseNotFound, find, working
            if any(r in ("-h", "--help") for r in rest):
                print(__doc__)
                return 0
            explicit = None
            if "--course" in rest and rest.index("--course") + 1 < len(rest):
                i = rest.index("--course")
                explicit, rest = rest[i + 1], rest[:i] + rest[i + 2:]
            if explicit is None and Path("solutions").is_dir() and Path("labs").is_dir():
                course = mine = Path(".")     # the folders here, course checkout or not
            else:
                try:   # the labs of the checkout worked in (a learner's copy on a hub), the course's solutions
                    # reset is a learner's own command: the checkout one level below counts, as for grade
                    course, mine = find(explicit=explicit, below=cmd == "reset"), working(explicit)
                except CourseNotFound as e:
                    print(e)
                    return 2         # a refusal before anything ran, as build and check say theirs
            if cmd == "reset":       # a checkout whose labs/ was deleted gets its labs again
                (mine / "labs").mkdir(exist_ok=True)
            rest = [str(course / "solutions"), str(mine / "labs"), *rest]
        return run([cmd, *rest])
    print(f"unknown command {cmd!r}\n{__doc__}")
    return NOTHING_RAN


if __name__ == "__main__":
    sys.exit(main())
