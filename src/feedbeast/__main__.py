"""`python -m feedbeast COMMAND`: the course's command line (feedbeast.course.__main__), under its short name."""
import sys

from .course.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
