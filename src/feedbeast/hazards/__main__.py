"""python -m feedbeast.hazards replay TRACE.npz ...: check traces saved under feedbeast.hooks.mode.hazard_dump
(Chapter 04). The library's own command line; `python -m feedbeast` is the course's."""
import sys
from pathlib import Path

from . import replay

USAGE = ("usage: python -m feedbeast.hazards replay TRACE.npz ...\n"
         "  check each hazard trace that a run saved (feedbeast.hooks.mode.hazard_dump = folder); exit 0 when none\n"
         "  has a hazard, 1 when one has, 2 for a wrong command or a trace that is not there or is no trace")


def main(argv) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(USAGE)
        return 0
    if argv[:1] != ["replay"] or len(argv) < 2:
        print(USAGE, file=sys.stderr)
        return 2
    gone = [p for p in argv[1:] if not Path(p).is_file()]
    if gone:
        print(f"no trace file {', '.join(gone)}\n{USAGE}", file=sys.stderr)
        return 2
    from ..errors import FeedbeastError
    bad, unread = 0, 0
    for p in argv[1:]:
        try:
            r = replay(p)
        except FeedbeastError as e:     # not a trace: no verdict, so not exit 1 (a hazard)
            print(e, file=sys.stderr)
            unread += 1
            continue
        print(f"{p}: {r}")
        bad += not r.ok
    return 1 if bad else 2 if unread else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
