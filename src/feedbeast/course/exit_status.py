"""The course command line's exit statuses: grade's 0 ok, 1 failed, 2 partial, and NOTHING_RAN.

Nothing ran (an unknown command, a package missing, a notebook named that is not there): not grade's 2, PARTIAL,
which make grade and CI read as "some checks could not run here" and let pass.
"""
NOTHING_RAN = 3
