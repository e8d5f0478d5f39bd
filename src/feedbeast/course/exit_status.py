"""The course command line's exit statuses: grade's 0 ok, 1 failed, 2 partial, and NOTHING_RAN.

Nothing ran (an unknown command, a package missing, a notebook named that is not there): not grade's 2, PARTIAL,
which make grade, make sanitize and CI read as "some checks could not run here" and let pass.
"""
import argparse
import sys

NOTHING_RAN = 3


class Parser(argparse.ArgumentParser):
    """argparse's own exit status for a wrong command line is 2, PARTIAL here: a mistyped option in a CI job would
    pass as "some checks could not run here". This parser exits NOTHING_RAN instead."""
    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(NOTHING_RAN, f"{self.prog}: error: {message}\n")
