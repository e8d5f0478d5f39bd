"""`make stress` (`python -m feedbeast stress`): the course's GPU tests with random ragged sizes and repeated runs.
The sizes and the repeats are the library's (feedbeast.stress); which tests run them is the course's."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .coursedir import CourseNotFound, working


def main(argv=None) -> int:
    """`make stress`: the GPU tests with FEEDBEAST_STRESS random cases each."""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m feedbeast stress",
                                 description="Run the GPU tests with random ragged sizes and repeats.")
    ap.add_argument("--n", type=int, default=100, help="random cases per stressed test (default 100)")
    ap.add_argument("--seed", type=int, default=None, help="FEEDBEAST_STRESS_SEED (default 0)")
    ap.add_argument("--course", metavar="DIR", default=None,
                    help="the checkout whose tests run (default: the one at or above the working directory)")
    args, pytest_args = ap.parse_known_args(argv)     # anything else goes to pytest (-x, -k ..., a path)
    env = dict(os.environ, FEEDBEAST_STRESS=str(args.n))
    if args.seed is not None:
        env["FEEDBEAST_STRESS_SEED"] = str(args.seed)
    try:
        course = working(args.course)   # the checkout whose tests run: pytest runs there, from wherever this ran
    except CourseNotFound as e:
        print(f"stress runs the course's GPU tests (tests/ of a checkout), and {e}", file=sys.stderr)
        return 2
    pytest_args = [str(Path(a).resolve()) if not a.startswith("-") and Path(a).exists() else a for a in pytest_args]
    cmd = [sys.executable, "-m", "pytest", "-q", "tests", "-m", "gpu", "-p", "no:cacheprovider",
           *pytest_args]
    print(f"FEEDBEAST_STRESS={args.n} {' '.join(cmd[1:])} (in {course})", flush=True)
    rc = subprocess.call(cmd, env=env, cwd=course)
    if rc == 5:     # pytest: no test selected
        print("stress: no GPU test was selected")
        return 0
    return rc

