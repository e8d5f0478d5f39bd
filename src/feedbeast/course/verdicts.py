"""The verdicts of the checks that ran in this process: what the grader reads, instead of printed text.

fb.check, expect_sass, expect_proxy_fence and check_ring report their outcome through feedbeast.hooks.on_verdict,
and every Skipped reports itself as a skipped step; feedbeast.course installs `record` there. A lab's check
cell may add its own:

    from feedbeast.course import verdicts
    verdicts.passed("resources of gemm_lab", "no spills")
    verdicts.failed("resources of gemm_lab", "spills 64 B")

Outside grading the records are kept (a bounded list) and nobody reads them. Under `python -m feedbeast grade`
the grader's own process adds a sink: each record leaves the process the moment it is made, signed, on a
channel the grader opened (feedbeast.course.grade), so nothing run later can take it back.
"""
from __future__ import annotations

from .. import hooks
from ..hooks import FAILED, PASSED, SKIPPED  # noqa: F401  (the statuses, as hooks spells them)
# A check cell's own verdicts go the way the toolkit's do: through hooks.on_verdict, where install() puts record.
from ..hooks import failed, passed, skipped  # noqa: F401

_LIMIT = 10_000
_records: list[dict] = []
_sinks: list = []        # f(record dict), called for each record (the grader's channel)


def record(status: str, name: str, message: str = "") -> None:
    if status not in (PASSED, FAILED, SKIPPED):
        raise ValueError(f"status must be passed, failed or skipped, not {status!r}")
    rec = {"status": status, "name": str(name), "message": str(message)}
    if len(_records) < _LIMIT:
        _records.append(rec)
    for sink in _sinks:
        sink(dict(rec))


def begin() -> None:
    """Forget what was recorded so far."""
    _records.clear()


def records() -> list[dict]:
    return [dict(r) for r in _records]


def install() -> None:
    """Make every check's outcome a record here (once per process)."""
    if record not in hooks.on_verdict:
        hooks.on_verdict.append(record)
