"""The verdicts of the checks that ran in this process: what the grader reads, instead of printed text.

fb.check, expect_sass, expect_proxy_fence and check_ring record their outcome here; every Skipped made
while checks run records itself as a skipped step. A check cell may add its own:

    from feedbeast import verdicts
    verdicts.passed("resources of gemm_lab", "no spills")
    verdicts.failed("resources of gemm_lab", "spills 64 B")

`python -m feedbeast grade` calls begin() before the lab's check cells and reads records() after them.
Outside grading the records are kept (a bounded list) and nobody reads them.
"""
from __future__ import annotations

import json

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
_LIMIT = 10_000
_records: list[dict] = []


def record(status: str, name: str, message: str = "") -> None:
    if status not in (PASSED, FAILED, SKIPPED):
        raise ValueError(f"status must be passed, failed or skipped, not {status!r}")
    if len(_records) < _LIMIT:
        _records.append({"status": status, "name": str(name), "message": str(message)})


def passed(name: str, message: str = "") -> None:
    record(PASSED, name, message)


def failed(name: str, message: str = "") -> None:
    record(FAILED, name, message)


def skipped(name: str, reason: str = "") -> None:
    record(SKIPPED, name, reason)


def begin() -> None:
    """Forget what was recorded so far (the grader calls it right before the check cells)."""
    _records.clear()


def records() -> list[dict]:
    return [dict(r) for r in _records]


def dumps(nonce: str) -> str:
    """The records as one JSON line tagged with the grader's nonce."""
    return json.dumps({"nonce": nonce, "records": _records})
