"""The verdicts of the checks that ran in this process: what the grader reads, instead of printed text.

fb.check, expect_sass, expect_proxy_fence and check_ring record their outcome here; every Skipped made
while checks run records itself as a skipped step. A check cell may add its own:

    from feedbeast import verdicts
    verdicts.passed("resources of gemm_lab", "no spills")
    verdicts.failed("resources of gemm_lab", "spills 64 B")

Outside grading the records are kept (a bounded list) and nobody reads them. Under `python -m feedbeast grade`
the grader's own process adds a sink: each record leaves the process the moment it is made, signed, on a
channel the grader opened (feedbeast.grade), so nothing run later can take it back.
"""
from __future__ import annotations

import json

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
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


def passed(name: str, message: str = "") -> None:
    record(PASSED, name, message)


def failed(name: str, message: str = "") -> None:
    record(FAILED, name, message)


def skipped(name: str, reason: str = "") -> None:
    record(SKIPPED, name, reason)


def begin() -> None:
    """Forget what was recorded so far."""
    _records.clear()


def records() -> list[dict]:
    return [dict(r) for r in _records]
