"""A correct full/empty ring and a gallery of broken ones.

Chapter 04 runs the broken rings through the checker, one bug at a time.

Every ring here is written the way a learner writes one for
:func:`feedbeast.sim.checker.check_ring`: a producer step function, one step
function per consumer, and an optional ``init(ring)`` that sets the barrier
arrival counts.  :func:`ring_cases` lists them with the failure the checker
is expected to report, so a notebook can loop over them::

    for case in ring_cases():
        print(case.name, "->", case.check().kind)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .checker import (DEADLOCK, MBARRIER_MISUSE, OK, READ_BEFORE_ARRIVAL, STAGE_OVERWRITTEN,
                      WRONG_DATA, RingReport, check_ring, default_init)

__all__ = ["RingCase", "ring_cases", "reference_ring", "bug_variants",
           "producer", "consumer", "default_init"]


# ----------------------------------------------------------------- correct
def producer(ring, it):
    """Fill stage ``it % stages`` with tile ``it``."""
    s, ph = ring.stage(it), ring.phase(it)
    # A fresh barrier is in phase 0; "phase with parity 1 has completed" is
    # taken to be true of it, so the first lap passes straight through.
    yield ring.empty[s].wait(ph ^ 1)
    yield ring.full[s].arrive_expect_tx(ring.tile_bytes)   # announce the bytes first
    yield ring.copy(s, tile=it)                            # then start the copy


def consumer(ring, it):
    """Use tile ``it`` from stage ``it % stages``, then hand the stage back."""
    s, ph = ring.stage(it), ring.phase(it)
    yield ring.full[s].wait(ph)
    yield ring.read(s, tile=it)
    yield ring.empty[s].arrive()


# ----------------------------------------------------------------- broken
def consumer_wrong_parity(ring, it):
    s, ph = ring.stage(it), ring.phase(it)
    yield ring.full[s].wait(ph ^ 1)        # BUG: a fresh barrier already "passed" parity 1
    yield ring.read(s, tile=it)
    yield ring.empty[s].arrive()


def producer_wrong_parity(ring, it):
    s, ph = ring.stage(it), ring.phase(it)
    yield ring.empty[s].wait(ph)           # BUG: waits for a phase nobody will complete first
    yield ring.full[s].arrive_expect_tx(ring.tile_bytes)
    yield ring.copy(s, tile=it)


def producer_no_expect_tx(ring, it):
    s, ph = ring.stage(it), ring.phase(it)
    yield ring.empty[s].wait(ph ^ 1)
    yield ring.full[s].arrive()            # BUG: no bytes announced; the phase ends right here
    yield ring.copy(s, tile=it)


def producer_short_expect_tx(ring, it):
    s, ph = ring.stage(it), ring.phase(it)
    yield ring.empty[s].wait(ph ^ 1)
    yield ring.full[s].arrive_expect_tx(ring.tile_bytes // 2)   # BUG: half the bytes
    yield ring.copy(s, tile=it)


def consumer_no_release(ring, it):
    s, ph = ring.stage(it), ring.phase(it)
    yield ring.full[s].wait(ph)
    yield ring.read(s, tile=it)
    # BUG: forgot `yield ring.empty[s].arrive()`


def consumer_wrong_stage(ring, it):
    s, ph = ring.stage(it), ring.phase(it)
    yield ring.full[s].wait(ph)
    yield ring.read(ring.stage(it + 1), tile=it)   # BUG: reads the neighbouring stage's buffer
    yield ring.empty[s].arrive()


def init_one_consumer(ring):
    for s in range(ring.stages):
        ring.full[s].init(1)
        ring.empty[s].init(1)              # BUG: there are ring.consumers consumers


@dataclass
class RingCase:
    """One ring: its threads, how its barriers are set up, what it should yield."""

    name: str
    description: str
    producer: Callable
    consumers: list
    expected: str                          # a checker kind: "ok" or a bug kind
    init: Callable = field(default=default_init)

    def check(self, stages: int = 4, tiles: int = 8, **kw) -> RingReport:
        return check_ring(self.producer, self.consumers, stages=stages, tiles=tiles,
                          init=self.init, **kw)


def reference_ring(consumers: int = 2) -> RingCase:
    return RingCase("reference", "correct full/empty ring: parity waits, expect_tx, releases",
                    producer, [consumer] * consumers, OK)


def bug_variants(consumers: int = 2) -> list:
    C = consumers
    return [
        RingCase("wrong_initial_parity",
                 "consumers start waiting on full[] with parity 1, which a fresh barrier "
                 "reports as already completed", producer, [consumer_wrong_parity] * C,
                 READ_BEFORE_ARRIVAL),
        RingCase("producer_wrong_parity",
                 "producer starts waiting on empty[] with parity 0: the ring never starts",
                 producer_wrong_parity, [consumer] * C, DEADLOCK),
        RingCase("missing_expect_tx",
                 "producer arrives on full[] without announcing the bytes, so the phase "
                 "completes before the copy lands", producer_no_expect_tx, [consumer] * C,
                 READ_BEFORE_ARRIVAL),
        RingCase("short_expect_tx",
                 "producer announces half the bytes the copy brings", producer_short_expect_tx,
                 [consumer] * C, MBARRIER_MISUSE),
        RingCase("missing_empty_arrive",
                 "consumers never arrive on empty[], so the producer waits forever once the "
                 "ring wraps", producer, [consumer_no_release] * C, DEADLOCK),
        RingCase("arrival_count_mismatch",
                 "empty[] barriers expect one arrival although there are several consumers",
                 producer, [consumer] * C, STAGE_OVERWRITTEN, init=init_one_consumer),
        RingCase("wrong_stage_read",
                 "consumers wait on the right barrier but read the buffer of the next stage",
                 producer, [consumer_wrong_stage] * C, WRONG_DATA),
    ]


def ring_cases(consumers: int = 2) -> list:
    """The reference ring followed by every bug variant."""
    return [reference_ring(consumers)] + bug_variants(consumers)
