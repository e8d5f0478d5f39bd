"""`python -m feedbeast COMMAND`: the course's command line (feedbeast.course.__main__, the same as
`python -m feedbeast.course`), under the package's short name.

This module is the one place the library's package names the course machinery: README's Layout lists it with the
course, and nothing in the library imports it. The library's own command line is
`python -m feedbeast.hazards replay TRACE.npz ...` (check hazard traces saved under fb.hooks.mode.hazard_dump).
"""
import sys

from .course.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
