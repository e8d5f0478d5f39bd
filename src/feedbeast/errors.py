"""Errors the toolkit raises. Each message says what was wrong and what to do."""


class FeedbeastError(Exception):
    """Base class for every error the toolkit raises on purpose."""


class CompileError(FeedbeastError):
    """NVRTC rejected the source. The message shows the failing lines."""

    def __init__(self, message, log="", diagnostics=()):
        super().__init__(message)
        self.log = log
        self.diagnostics = list(diagnostics)


class LaunchError(FeedbeastError):
    """A launch was refused before reaching the GPU (bad shape, too much shared memory...)."""


class TensorMapError(FeedbeastError):
    """A tensor map breaks one of the rules of cuTensorMapEncodeTiled."""


class SassMismatch(AssertionError, FeedbeastError):
    """The SASS lacks an instruction the kernel is supposed to use (or has a forbidden one)."""


class CheckFailed(AssertionError, FeedbeastError):
    """A kernel's output does not match the reference."""


class BarrierTimeout(FeedbeastError):
    """A kernel gave up waiting on a barrier (a debug build's bounded wait fired)."""


class HazardFound(FeedbeastError):
    """The hazard checker (feedbeast.hazards) found an ordering violation of the async proxy; the message
    names the rule, the block, the thread and the two source lines."""


class KernelFault(FeedbeastError):
    """A kernel failed on the GPU (illegal address, trap...). The context was reset to recover."""
