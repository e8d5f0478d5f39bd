"""What the hazard checker reports: the rules, one violation, and the report of one launch (Chapter 04)."""
from __future__ import annotations

import dataclasses
from collections import defaultdict

from ..errors import FeedbeastError
from .trace import Event

try:   # the error class lives with the others so that fb.isolated can raise it by name
    from ..errors import HazardFound
except ImportError:   # pragma: no cover
    class HazardFound(FeedbeastError):
        """The hazard checker found an ordering violation of the async proxy."""

RULES = {
    "async-read-in-flight": "shared memory was written while an asynchronous read of it had not completed "
                            "(PTX ISA: wgmma.wait_group; cp.async.bulk.wait_group.read)",
    "missing-proxy-fence": "a generic-proxy access and a later async-proxy access of the same shared memory "
                           "with no fence.proxy.async on the path that orders them (PTX ISA: Memory "
                           "Consistency Model, Proxies; membar/fence: fence.proxy.async)",
    "unordered-access": "two accesses of the same shared memory, at least one a write, that no barrier, wait "
                        "or completion orders (PTX ISA: Memory Consistency Model, data races)",
    "expect-tx-mismatch": "the transaction bytes announced in a phase differ from the bytes that completed on "
                          "it (PTX ISA: mbarrier, Tracking asynchronous transactions)",
    "arrival-count": "a thread arrived on a phase whose predecessor completed without it knowing: a count lower "
                     "than the arrivals completes phases early, or the thread runs ahead of the barrier (PTX ISA: "
                     "mbarrier, Phase completion: the phase completes when the pending arrival count reaches zero)",
    "async-read-at-exit": "the block ended while a bulk/TMA store still read its shared memory: no "
                          "cp.async.bulk.wait_group.read (or wait_group) by the issuing thread retired it (PTX ISA: "
                          "cp.async.bulk.wait_group; the source must stay valid until the read is complete)",
    "missing-wgmma-fence": "a warpgroup's first wgmma.mma_async, or a wgmma whose registers another instruction "
                           "wrote, with no wgmma.fence before it (PTX ISA: wgmma.fence)",
    "bulk-store-in-flight": "a TMA load read global memory that a TMA store had not finished writing: only "
                            "cp.async.bulk.wait_group without .read completes the writes (PTX ISA: "
                            "cp.async.bulk.wait_group)",
    "missing-tensormap-fence": "a TMA copy used a tensor map written in memory during the launch (tensormap.replace, "
                               "tensormap.cp_fenceproxy) without fence.proxy.tensormap::generic.release by the writer "
                               "after the write and .acquire of that map, after the write, by the user or a thread "
                               "of its block synchronised with it, on the path that orders them (PTX ISA: "
                               "membar/fence, fence.proxy.tensormap; tensormap.replace; tensormap.cp_fenceproxy; CUDA "
                               "C++ Programming Guide: Usage of a Modified Tensor Map)",
    "peer-access-at-exit": "an access of a peer CTA's shared memory (.shared::cluster) was not ordered before that "
                           "CTA exited: its shared memory is released at exit (PTX ISA: State Spaces, Shared Memory "
                           "(.shared::cluster); barrier.cluster; CUDA C++ Programming Guide: Distributed Shared "
                           "Memory)",
    "mbarrier-scope": "a wait at .cta scope acquired a phase that a thread of another CTA released: the release and "
                      "the acquire are not morally strong, so nothing is ordered (PTX ISA: Memory Consistency Model, "
                      "Scope and Morally strong operations; mbarrier.try_wait .cluster)",
    "mbarrier-use-before-init": "a thread used an mbarrier (arrive, expect_tx, wait) before its mbarrier.init was "
                                "ordered before that use: the object is undefined until then (PTX ISA: "
                                "mbarrier.init; a __syncthreads() after the init, or fence.mbarrier_init.release."
                                "cluster and a cluster barrier for other CTAs, makes it visible)",
    "wait-parity": "a wait returned for a phase other than the next one its thread uses (PTX ISA: "
                   "mbarrier.test_wait/try_wait, parity)",
    "wgmma-register-in-flight": "a wgmma's accumulator or A-fragment registers were accessed between its "
                                "wgmma.mma_async and the wgmma.wait_group that retires it: undefined (PTX ISA: "
                                "wgmma.mma_async, wgmma.wait_group); ptxas's log of the normal build says where",
}


@dataclasses.dataclass
class Violation:
    rule: str
    message: str
    second: Event               # the access or operation that breaks the rule
    first: Event | None = None  # the earlier one it conflicts with
    barrier: str = ""
    phase: int | None = None

    def describe(self, source: str | None = None, name: str = "kernel.cu") -> str:
        lines = (source or "").split("\n")

        def where(e):
            if e is None:
                return ""
            text = lines[e.line - 1].strip() if source and 0 < e.line <= len(lines) else ""
            return (f"block {e.block} thread {e.thread} (warp {e.thread // 32}): {e.name} at {name}:{e.line}"
                    + (f"   {text}" if text else ""))
        parts = [f"[{self.rule}] {self.message}"]
        if self.second.index < 0:       # found by ptxas in the normal build (registers.py), not in the trace
            return parts[0]
        if self.barrier:
            parts[0] += f" (barrier {self.barrier}" + (f", phase {self.phase})" if self.phase is not None else ")")
        if self.first is not None:
            parts.append("  first:  " + where(self.first))
        parts.append("  then:   " + where(self.second))
        return "\n".join(parts)


@dataclasses.dataclass
class Report:
    kernel: str
    violations: list
    events: int
    dropped: int = 0                 # events past the buffer's capacity
    source: str | None = None
    module_name: str = "kernel.cu"
    blocks_traced: int = 0
    unchecked: str = ""              # why the trace could not be checked (then there are no violations)
    partly: str = ""                 # what in a checked trace lies outside the check (the rest was checked)
    gave_up: str = ""                # the barrier wait of the hazard build that timed out (the trace stops there)
    seconds: dict = dataclasses.field(default_factory=dict)   # where a run's time went: build, run, check
    # TMA loads (fb::tma) each traced block issued, by linear block id: what the kernel really fetched, which a
    # count the kernel writes itself cannot stand in for
    tma_loads: dict = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations and not self.dropped

    def by_rule(self) -> dict:
        out = defaultdict(list)
        for v in self.violations:
            out[v.rule].append(v)
        return dict(out)

    def __str__(self):
        head = (f"hazard check of {self.kernel}: {self.events} events from {self.blocks_traced} block(s), "
                f"{len(self.violations)} violation(s)")
        if self.dropped:
            head += f"; {self.dropped} events did not fit the trace buffer (use a smaller size)"
        if self.unchecked:
            head += f"; not checked: {self.unchecked}"
        elif self.partly:
            head += f"; not checked: {self.partly}"
        if self.gave_up and not self.unchecked:
            head += f"; the trace stops where a wait on {self.gave_up} gave up (the kernel hangs)"
        if not self.violations:
            return head
        rows = [head]
        for rule, vs in self.by_rule().items():
            rows.append(f"{rule}: {len(vs)} ({RULES[rule]})")
            for v in vs[:3]:
                rows.append(v.describe(self.source, self.module_name))
            if len(vs) > 3:
                rows.append(f"  ... and {len(vs) - 3} more of this rule")
        return "\n".join(rows)

    __repr__ = __str__

    def raise_if_any(self):
        if self.dropped:
            raise HazardFound(str(self))
        if self.violations:
            first = self.violations[0]
            raise HazardFound(f"{first.rule}: {RULES[first.rule]}\n{self}")
        return self


