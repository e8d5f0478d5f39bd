"""feedbeast: the toolkit of the course "Feeding the Beast".

Chapter 00 introduces the toolkit; each module's docstring names the chapter that explains it.

One way to do each thing:
    describe() / gpu()                 the GPU here (or its absence)
    compile(src, arch) -> Module       NVRTC to cubin; .resources, .sass(), .expect_sass(...)
    %load_ext feedbeast; %%cuda        compile a cell, kernels become callable by name
    to_device / empty / random         device arrays, poisoned outputs, random inputs
    kernel.launch(grid, block, *args, shared=, cluster=)
    tensor_map(array, box, swizzle=)   TMA descriptors, checked before the driver sees them
    check(out, ref)                    against a float64 reference
    tally(name, passed, line)          a check counted over many cases by the notebook (a bound per case)
    bench(fn, name=, nbytes=|flops=, ceiling=)   CUDA-event timing vs a same-run ceiling and the physical peak
    result_of(name, times_ms, ...)     the same for times measured another way (interleaved, host hidden)
    profile(launch)                    Nsight Compute counters of the launch bench times (a small table)
    hooks                              where the course plugs in (verdicts, a results log, make sanitize)
On a machine that cannot run a kernel, launch/check/bench return a Skipped that says why.
The modules by layer and stage (the library: build, run, verify, measure, simulate; the course machinery,
feedbeast.course: grading, runs): README, "Layout".
"""
from .bench import BenchResult, bench, result_of
from .ceilings import PhysicalLimitError, ceiling, cublas_gemm, physical_peak
from .check import CheckResult, Tally, check, tally
from .compile import Module, compile
from .device import describe, gpu, runs_on
from .errors import (BarrierTimeout, CheckFailed, CompileError, FeedbeastError, HazardFound, KernelFault,
                     KernelNotFound, LaunchError, SassMismatch, TensorMapError)
from .isolated import isolated
from .launch import Kernel
from .memory import DeviceArray, bfloat16, empty, empty_like, random, sync, to_device
from .skip import Skipped, needs, needs_gpu
from .profiling import profile
from .tensormap import TensorMap, tensor_map
from .magic import load_ipython_extension
from .isolated import racecheck
from . import ceilings, cubin, examples, hooks, profiling, sass  # noqa: E402  (fb.sass, fb.hooks...)
from . import hazards as _hazards  # noqa: E402

# Later stages plug into earlier ones through feedbeast.hooks, so that no earlier module imports a later one:
# the hazard checker (it compiles and launches) into launching, and the same-run ceilings (timed with bench)
# into bench's lookup of a ceiling by name (late-bound: ceilings.ceiling as it is when called).
if _hazards.check_on_launch not in hooks.before_launch:
    hooks.before_launch.append(_hazards.check_on_launch)
hooks.hazard_run = _hazards.run
hooks.ceiling = lambda which, size=None: ceilings.ceiling(which, size)

# In a notebook, a run of identical skip lines shows as one line with its count (feedbeast.view).
from . import view as _view  # noqa: E402
_view.install()

__version__ = "0.1.0"


def pick(gpu_value, cpu_value, *, sanitize=None, quick=None):
    """A size for this machine: the full one with a GPU, a small one without (simulator, compile-only).

    `sanitize`, if given, is the size inside `make sanitize`: there each kernel runs once under
    instrumentation (racecheck checks every shared-memory access), and a size that takes a second
    unchecked can take an hour. `quick`, if given, is the size under `make test` on a GPU
    (`hooks.mode.quick`): the test checks each kernel at a few sizes and leaves the sweeps to
    `make bench`. Without them the GPU size is kept.
    """
    if not gpu():
        return cpu_value
    if sanitize is not None and hooks.mode.sanitizer:
        return sanitize
    return quick if quick is not None and hooks.mode.quick else gpu_value


# What a learner reaches as fb.<name>: the functions and classes above and the modules the chapters name. The other
# modules (device, memory, launch, ...) are the library's plumbing: importable, but not listed by dir(fb) or tab
# completion, nor offered as a near miss.
__all__ = sorted([
    "BarrierTimeout", "BenchResult", "CheckFailed", "CheckResult", "CompileError", "DeviceArray", "FeedbeastError",
    "HazardFound", "Kernel", "KernelFault", "KernelNotFound", "LaunchError", "Module", "PhysicalLimitError",
    "SassMismatch", "Skipped", "Tally", "TensorMap", "TensorMapError",
    "bench", "bfloat16", "check", "compile", "cublas_gemm", "describe", "empty", "empty_like", "gpu", "isolated",
    "load_ipython_extension", "needs", "needs_gpu", "physical_peak", "pick", "profile", "racecheck", "random",
    "result_of", "runs_on", "sync", "tally", "tensor_map", "to_device", "ceiling",
    "ceilings", "cubin", "errors", "examples", "hazards", "hooks", "profiling", "sass",
])


def __dir__():
    return __all__ + ["__version__"]


def __getattr__(name: str):
    """A name the toolkit does not have: the names it has that are closest to it (`fb.emtpy`: empty)."""
    import difflib
    near = difflib.get_close_matches(name, __all__, n=3, cutoff=0.7)
    raise AttributeError(f"module 'feedbeast' (fb) has no attribute {name!r}"
                         + (f"; did you mean {' or '.join(f'fb.{n}' for n in near)}?" if near else ""))


hooks.load()   # the course's hooks, when FEEDBEAST_HOOKS names it (feedbeast.hooks)
