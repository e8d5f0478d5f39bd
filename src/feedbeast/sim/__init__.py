"""Pipeline simulators: an mbarrier model, a ring protocol checker, a timing model."""
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
