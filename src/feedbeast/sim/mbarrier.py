"""A reference model of the PTX ``mbarrier`` object.

Chapter 04 explains the mbarrier with it: phases, parity, arrival counts, transaction bytes.

An mbarrier is a 64-bit object in shared memory.  The PTX ISA (section
"Parallel Synchronization and Communication Instructions: mbarrier") describes
its contents as four quantities, and this model keeps exactly those:

* the **current phase** (the model counts phases; the hardware keeps only the
  parity, ``phase & 1``),
* the **pending arrival count** of the current phase,
* the **expected arrival count**, set by ``init`` and reloaded into the pending
  count every time a phase completes,
* the **tx-count**: transaction bytes the current phase still waits for.

A phase completes at the moment its pending arrival count *and* its tx-count
are both zero.  Completion flips the parity, reloads the pending count with
the expected count and starts the new phase with a tx-count of zero.

Operations (each is atomic, as on the hardware):

=====================  =====================================================
``init(count)``        phase 0, pending = expected = count, tx-count 0
``arrive(count=1)``    pending -= count
``expect_tx(b)``       tx-count += b
``arrive_expect_tx(b)`` expect_tx(b) then arrive(1), as one operation
``complete_tx(b)``     tx-count -= b (what an async copy does when b bytes land)
``test_wait(p)``       True when the phase with parity p has completed, i.e.
                       when the current parity is not p; never blocks
``try_wait(p)``        same answer; on the GPU it may suspend for a while first
=====================  =====================================================

Rules the model enforces
------------------------
Whatever the PTX ISA leaves undefined raises :class:`MBarrierMisuse` with a
message that names the barrier, its phase and the offending numbers:

1. *Use before init*: any operation on a barrier that was never initialised
   (or was invalidated with :meth:`MBarrier.inval`).
2. *Re-init while in use*: ``init`` on a barrier that is initialised and not
   invalidated.  Call ``inval()`` first, as PTX requires.
3. *Counts out of range*: the arrival count must be in ``[1, 2**20 - 1]`` and
   the tx-count must stay in ``[-(2**20 - 1), 2**20 - 1]`` (the PTX limits).
4. *Too many arrivals*: ``arrive(count)`` with ``count`` larger than the
   number of arrivals still pending in the current phase.  (When the last
   expected arrival comes in and no bytes are outstanding, the phase completes
   at once, so the extra arrival lands in the *next* phase; this rule only
   fires when the phase is still open, i.e. it is waiting for bytes.)
5. *More bytes than announced*.  PTX allows the tx-count to be negative: the
   bytes of a copy may land before the thread that announced them has
   performed its ``arrive_expect_tx``.  The model allows exactly that case and
   no other: **the tx-count may be negative only while the phase still has
   pending arrivals.**  Once all arrivals are in, the phase is only waiting
   for bytes, so

   * a ``complete_tx(b)`` with ``b`` larger than the outstanding tx-count, and
   * the last arrival coming in while the tx-count is negative

   both mean that more bytes landed than were announced for this phase, and
   raise.  (This is the usual symptom of an ``expect_tx`` with too small a
   byte count.)

The pure functions ``bar_*`` below implement these rules on a plain tuple
``(expected, parity, pending, tx)`` so that the protocol checker in
:mod:`feedbeast.sim.checker` can hash barrier states; :class:`MBarrier` wraps
them in an object for interactive use.
"""
from __future__ import annotations

__all__ = [
    "MBarrier",
    "MBarrierMisuse",
    "MAX_ARRIVALS",
    "MAX_TX",
]

#: largest expected arrival count an mbarrier can hold (PTX: 2**20 - 1)
MAX_ARRIVALS = (1 << 20) - 1
#: largest magnitude of the tx-count (PTX: the range is +-(2**20 - 1))
MAX_TX = (1 << 20) - 1


class MBarrierMisuse(Exception):
    """An operation whose outcome the PTX ISA leaves undefined."""


# --------------------------------------------------------------------------
# pure state functions: state = (expected, parity, pending, tx) or None
# Each returns (new_state, completed) where completed says a phase finished.
# --------------------------------------------------------------------------

def _where(name, st):
    if st is None:
        return name
    return f"{name} (phase parity {st[1]}, {st[2]} of {st[0]} arrivals pending, tx-count {st[3]})"


def _need(st, name, what):
    if st is None:
        raise MBarrierMisuse(f"{what} on {name} before init: the barrier was never "
                             "initialised (or was invalidated)")


def _settle(st, name):
    """Complete the phase if nothing is outstanding; check rule 5."""
    expected, parity, pending, tx = st
    if pending == 0:
        if tx == 0:
            return (expected, parity ^ 1, expected, 0), True
        if tx < 0:
            raise MBarrierMisuse(
                f"{name}: all {expected} arrivals of the phase with parity {parity} are in, "
                f"but the tx-count is {tx}: {-tx} more bytes landed than were announced "
                "with expect_tx for this phase")
    return st, False


def bar_init(count, name="mbarrier"):
    if not isinstance(count, int) or not 1 <= count <= MAX_ARRIVALS:
        raise MBarrierMisuse(f"init of {name} with arrival count {count!r}: it must be an "
                             f"integer in [1, {MAX_ARRIVALS}]")
    return (count, 0, count, 0)


def bar_arrive(st, count=1, name="mbarrier"):
    _need(st, name, "arrive")
    if not isinstance(count, int) or not 1 <= count <= MAX_ARRIVALS:
        raise MBarrierMisuse(f"arrive on {name} with count {count!r}: it must be in [1, {MAX_ARRIVALS}]")
    expected, parity, pending, tx = st
    if count > pending:
        if pending == 0:
            why = (f"all {expected} arrivals of this phase are already in and it only waits "
                   f"for {tx} transaction bytes")
        else:
            why = f"only {pending} of {expected} arrivals are still pending"
        raise MBarrierMisuse(f"arrive (count {count}) on {_where(name, st)}: {why}; "
                             "an arrival beyond the expected count is undefined")
    return _settle((expected, parity, pending - count, tx), name)


def bar_expect_tx(st, nbytes, name="mbarrier"):
    _need(st, name, "expect_tx")
    if not isinstance(nbytes, int) or not 0 <= nbytes <= MAX_TX:
        raise MBarrierMisuse(f"expect_tx on {name} with {nbytes!r} bytes: it must be in [0, {MAX_TX}]")
    expected, parity, pending, tx = st
    tx += nbytes
    if tx > MAX_TX:
        raise MBarrierMisuse(f"expect_tx({nbytes}) on {_where(name, st)} takes the tx-count "
                             f"to {tx}, above the limit {MAX_TX}")
    return _settle((expected, parity, pending, tx), name)


def bar_arrive_expect_tx(st, nbytes, count=1, name="mbarrier"):
    _need(st, name, "arrive_expect_tx")
    # expect first, then arrive: the arrival cannot close the phase before the
    # bytes it announces are counted.  (expect_tx alone never completes a phase
    # here: with arrivals pending it cannot, and with none pending tx-count > 0.)
    st2, _ = bar_expect_tx(st, nbytes, name)
    return bar_arrive(st2, count, name)


def bar_complete_tx(st, nbytes, name="mbarrier"):
    _need(st, name, "complete_tx")
    if not isinstance(nbytes, int) or not 0 <= nbytes <= MAX_TX:
        raise MBarrierMisuse(f"complete_tx on {name} with {nbytes!r} bytes: it must be in [0, {MAX_TX}]")
    expected, parity, pending, tx = st
    if pending == 0 and nbytes > tx:
        raise MBarrierMisuse(
            f"complete_tx({nbytes}) on {_where(name, st)}: all arrivals are in and the phase "
            f"waits for only {tx} more bytes, so {nbytes - tx} bytes landed that nobody "
            "announced with expect_tx (is the byte count in arrive_expect_tx too small?)")
    tx -= nbytes
    if tx < -MAX_TX:
        raise MBarrierMisuse(f"complete_tx({nbytes}) on {_where(name, st)} takes the tx-count "
                             f"to {tx}, below the limit -{MAX_TX}")
    return _settle((expected, parity, pending, tx), name)


def bar_test_wait(st, parity, name="mbarrier"):
    _need(st, name, "wait")
    if parity not in (0, 1):
        raise MBarrierMisuse(f"wait on {name} with parity {parity!r}: a parity is 0 or 1")
    return st[1] != parity


# --------------------------------------------------------------------------
class MBarrier:
    """An mbarrier you can poke at from Python.

    >>> bar = MBarrier("full[0]")
    >>> bar.init(1)
    >>> bar.arrive_expect_tx(1024)     # producer: one arrival, 1 KiB to come; returns the phase it arrived on
    0
    >>> bar.test_wait(0)               # phase 0 still open
    False
    >>> bar.complete_tx(1024)          # the copy lands
    >>> bar.test_wait(0), bar.parity, bar.phase
    (True, 1, 1)
    """

    def __init__(self, name: str = "mbarrier", count: int | None = None):
        self.name = name
        self._st = None
        self._phase = 0
        self.history: list[str] = []
        if count is not None:
            self.init(count)

    # ---- state ----------------------------------------------------------
    @property
    def initialized(self) -> bool:
        return self._st is not None

    def _state(self, what):
        _need(self._st, self.name, what)
        return self._st

    @property
    def expected_count(self) -> int:
        return self._state("reading the expected count")[0]

    @property
    def parity(self) -> int:
        """Parity of the current (not yet completed) phase."""
        return self._state("reading the phase")[1]

    @property
    def phase(self) -> int:
        """Number of phases completed since init (the current phase's index)."""
        self._state("reading the phase")
        return self._phase

    @property
    def pending_count(self) -> int:
        return self._state("reading the pending count")[2]

    @property
    def tx_count(self) -> int:
        return self._state("reading the tx-count")[3]

    def state(self) -> tuple:
        """``(expected, parity, pending, tx)``, or ``None`` before init."""
        return self._st

    def __repr__(self):
        if self._st is None:
            return f"MBarrier({self.name!r}, uninitialised)"
        e, p, n, tx = self._st
        return (f"MBarrier({self.name!r}, phase {self._phase} (parity {p}), "
                f"pending {n}/{e}, tx-count {tx})")

    # ---- operations -----------------------------------------------------
    def _apply(self, new, what):
        st, done = new
        self._st = st
        self.history.append(what + (f"  -> phase {self._phase} completes" if done else ""))
        if done:
            self._phase += 1
        return done

    def init(self, count: int) -> None:
        if self._st is not None:
            raise MBarrierMisuse(f"init of {self.name} while it is in use ({self!r}); "
                                 "invalidate it with inval() before initialising it again")
        self._st = bar_init(count, self.name)
        self._phase = 0
        self.history.append(f"init({count})")

    def inval(self) -> None:
        """``mbarrier.inval``: the object may be re-initialised afterwards."""
        self._state("inval")
        self._st = None
        self.history.append("inval")

    def arrive(self, count: int = 1) -> int:
        """Arrive; returns the index of the phase arrived on (a state token)."""
        ph = self._phase
        self._apply(bar_arrive(self._st, count, self.name), f"arrive({count})")
        return ph

    def expect_tx(self, nbytes: int) -> None:
        self._apply(bar_expect_tx(self._st, nbytes, self.name), f"expect_tx({nbytes})")

    def arrive_expect_tx(self, nbytes: int, count: int = 1) -> int:
        ph = self._phase
        self._apply(bar_arrive_expect_tx(self._st, nbytes, count, self.name),
                    f"arrive_expect_tx({nbytes})")
        return ph

    def complete_tx(self, nbytes: int) -> None:
        self._apply(bar_complete_tx(self._st, nbytes, self.name), f"complete_tx({nbytes})")

    def test_wait(self, parity: int) -> bool:
        return bar_test_wait(self._st, parity, self.name)

    def try_wait(self, parity: int) -> bool:
        # On the GPU try_wait may suspend the thread for a bounded time before
        # answering; in a sequential model there is nothing to wait for, so the
        # answer is the same as test_wait.
        return bar_test_wait(self._st, parity, self.name)

    def phase_done(self, token: int) -> bool:
        """True once the phase ``token`` (as returned by arrive) has completed."""
        self._state("wait")
        return self._phase > token
