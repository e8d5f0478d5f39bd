"""python -m feedbeast.hazards replay TRACE.npz ...: check traces saved under feedbeast.hooks.mode.hazard_dump
(Chapter 04). The library's own command line; `python -m feedbeast` is the course's."""
import sys

from . import replay

if sys.argv[1:2] != ["replay"] or len(sys.argv) < 3:
    print("usage: python -m feedbeast.hazards replay TRACE.npz ...")
    sys.exit(2)
bad = 0
for p in sys.argv[2:]:
    r = replay(p)
    print(f"{p}: {r}")
    bad += not r.ok
sys.exit(1 if bad else 0)
