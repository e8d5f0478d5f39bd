"""Pipeline simulators: an mbarrier model, a ring protocol checker, a timing model.

Chapter 03 explains the timing model; chapter 04 the mbarrier model and the ring checker.
"""
from .mbarrier import MBarrier, MBarrierMisuse
from .checker import RingReport, RingModel, StepFunctionError, check_ring
from .rings import RingCase, bug_variants, reference_ring, ring_cases
from .timing import TimingResult, simulate_pipeline

__all__ = [
    "MBarrier", "MBarrierMisuse",
    "check_ring", "RingReport", "RingModel", "StepFunctionError",
    "RingCase", "ring_cases", "reference_ring", "bug_variants",
    "simulate_pipeline", "TimingResult",
]
