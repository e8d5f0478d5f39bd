"""Numba CUDA kernels in the course (chapters 01-02): one switch, arrays, launches, resources.

Chapters 01 and 02 explain the Numba kernels and the simulator they run in without a GPU.

    import feedbeast.numba_support as fbn
    SIM = fbn.setup()          # FIRST, before `from numba import cuda`
    from numba import cuda

`setup()` turns on Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1) when this machine has no GPU. Numba
reads that variable once, when `numba.cuda` is first imported, so `setup()` must run before that import;
if `numba.cuda` was already imported in the other mode it raises, saying to restart the kernel.

In the simulator a kernel really runs (every thread is a Python thread, very slowly) on numpy arrays, so
chapters check their Numba kernels at small sizes with no GPU. Timings need a GPU: `launcher()` returns a
function that `fb.bench` times on a GPU and that reports `skipped` in the simulator.

    x = fbn.device_or_host(host_array)          # a DeviceArray seen by Numba, or a numpy copy
    y = fbn.device_or_host((rows,), np.float32)  # an output, poisoned (NaN bytes) either way
    kernel[grid, block](x, y); fb.check(y, ref)   # y itself: on a GPU check() reads the guard after its end too
    fb.bench(fbn.launcher(kernel, grid, block, x, y), name=..., nbytes=..., ceiling="copy")
"""
from __future__ import annotations

import os
import sys

import numpy as np

from .device import gpu
from .errors import FeedbeastError
from .memory import POISON_BYTE, DeviceArray, empty, to_device
from .skip import Skipped

_ENV = "NUMBA_ENABLE_CUDASIM"


def _numba_cuda_mode() -> bool | None:
    """True/False: numba.cuda is imported with/without the simulator; None: not imported yet."""
    if "numba.cuda" not in sys.modules:
        return None
    from numba.cuda.core import config
    return bool(config.ENABLE_CUDASIM)


def setup(simulator: bool | None = None) -> bool:
    """Choose how Numba runs CUDA kernels here; call it before importing numba.cuda. Returns True
    when the simulator is on.

    simulator: None (default) turns it on exactly when this machine has no GPU (whatever
    NUMBA_ENABLE_CUDASIM said before); True/False force it. The notebooks size their checks with
    fb.pick, by the GPU's presence: forcing the simulator on a GPU machine runs them at full size, slowly.
    Raises FeedbeastError when numba.cuda was already imported in the other mode.
    """
    if simulator is None:
        simulator = gpu() is None
    mode = _numba_cuda_mode()
    if mode is not None and mode != simulator:
        want = "the CUDA simulator (no GPU here)" if simulator else "the real GPU"
        raise FeedbeastError(
            f"numba.cuda was imported before feedbeast.numba_support.setup(), in the wrong mode: it needs "
            f"{want}. Restart the kernel and call setup() before `from numba import cuda`.")
    if not simulator:
        _require_nvvm()
    os.environ[_ENV] = "1" if simulator else "0"
    # The course launches one-block grids on purpose (latency); Numba would warn about occupancy.
    os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
    return simulator


def _require_nvvm():
    """Numba turns Python into PTX with NVVM (libnvvm); without it no kernel compiles for a GPU."""
    try:
        from cuda.bindings import nvvm
        nvvm.version()
    except Exception as e:
        raise FeedbeastError(
            f"Numba needs NVVM to compile kernels for this GPU, and none was found ({type(e).__name__}: "
            f"{str(e).splitlines()[0][:160] if str(e) else ''}). Install the NVVM of your CUDA version, e.g. "
            "`pip install \"cuda-toolkit[nvvm]==13.0.2\"` (CUDA 13) or a CUDA toolkit, then restart the "
            "kernel.") from None


def kernel_types() -> tuple:
    """The exact types of a Numba kernel: the simulator's and the GPU's dispatcher, where each can be imported."""
    found = []
    for module, name in (("numba.cuda.simulator.kernel", "FakeCUDAKernel"),
                         ("numba.cuda.dispatcher", "CUDADispatcher")):
        try:
            found.append(getattr(__import__(module, fromlist=[name]), name))
        except Exception:      # noqa: BLE001  (no numba-cuda, or not this mode's module)
            pass
    return tuple(found)


def simulator() -> bool:
    """Is Numba running kernels in its simulator? (setup() must have been called.)"""
    return os.environ.get(_ENV, "0") == "1"


def as_numba(a: DeviceArray):
    """A Numba device array viewing a feedbeast DeviceArray (no copy), through __cuda_array_interface__."""
    from numba import cuda
    if not isinstance(a, DeviceArray):
        raise FeedbeastError(f"as_numba expects a feedbeast DeviceArray, got {type(a).__name__}")
    return cuda.as_cuda_array(a)   # the Numba array holds a reference to `a`: it lives as long


def device_or_host(data, dtype=None, *, poison: bool | None = None):
    """An array a Numba kernel can take: on a GPU a DeviceArray viewed by Numba, in the simulator numpy.

    data: a numpy array (copied in) or a shape (an output: uninitialised, poisoned with 0xFF bytes,
    which is NaN for every float type, so `fb.check` catches elements the kernel never wrote).
    poison: force poisoning on or off (default: outputs yes, copies of data no).
    """
    is_shape = np.isscalar(data) or (isinstance(data, tuple) and all(np.isscalar(s) for s in data))
    if is_shape:
        shape = (int(data),) if np.isscalar(data) else tuple(int(s) for s in data)
        dtype = np.dtype(dtype or np.float32)
        poison = True if poison is None else poison
        if simulator():
            host = np.empty(shape, dtype)
            if poison:
                host.view(np.uint8)[...] = POISON_BYTE
            return host
        return as_numba(empty(shape, dtype, poison=poison))
    host = np.ascontiguousarray(data, dtype=dtype)
    if simulator():
        host = host.copy()
        if poison:
            host.view(np.uint8)[...] = POISON_BYTE
        return host
    dev = to_device(host)
    if poison:
        dev.poison()
    return as_numba(dev)


def to_host(a) -> np.ndarray:
    """A numpy copy of what a kernel wrote (Numba device array, DeviceArray or numpy). To check an output, give
    fb.check the output itself: this copy stops at the last element, so a store past the end is not in it."""
    if isinstance(a, DeviceArray):
        return a.to_host()
    if hasattr(a, "copy_to_host"):
        return a.copy_to_host()
    return np.asarray(a)


def launcher(kernel, grid, block, *args):
    """A zero-argument function that launches `kernel[grid, block](*args)`: what fb.bench times.

    In the simulator it launches nothing and returns a Skipped (there is nothing to time there). The geometry and
    the number of arguments are checked first, on every machine (a mistake was said first on a GPU, or never).
    """
    import inspect
    from .launch import check_config
    py = getattr(kernel, "py_func", None) or getattr(kernel, "fn", None)     # a GPU dispatcher, or the simulator's
    if not callable(py):
        raise FeedbeastError(f"launcher: {kernel!r} is not a Numba kernel: give the @cuda.jit function itself")
    name = py.__name__
    try:
        inspect.signature(py).bind(*args)
    except TypeError as e:
        params = ", ".join(inspect.signature(py).parameters)
        raise FeedbeastError(f"launcher: {name}({params}) cannot take {len(args)} argument{'s' * (len(args) != 1)} "
                             f"({e})") from None
    check_config(grid, block, 0, None, arch="sm_75", name=name)   # the limits every arch shares (CUDA C++ Guide)
    if simulator():
        return lambda: Skipped("Numba runs in its CUDA simulator here, which has no timing", name)
    configured = kernel[grid, block]
    return lambda: configured(*args)


def _compiled(kernel):
    """The one compiled overload of a Numba kernel (it must have been launched once)."""
    overloads = list(getattr(kernel, "overloads", {}).values())
    if not overloads:
        raise FeedbeastError("this kernel has not been compiled yet: launch it once first")
    return overloads[-1]


def regs(kernel):
    """Registers per thread of a launched Numba kernel (needs a GPU), else a Skipped."""
    if simulator():
        return Skipped("register counts come from the GPU compiler; Numba runs in its simulator here",
                       "registers")
    return int(_compiled(kernel).regs_per_thread)


def resources(kernel) -> dict | Skipped:
    """Registers, static shared memory and local (stack/spill) memory per thread, from the driver."""
    if simulator():
        return Skipped("the GPU compiler reports them, and Numba runs in its simulator here",
                       "resources")
    k = _compiled(kernel)
    return {"registers": int(k.regs_per_thread), "shared_bytes": int(k.shared_mem_per_block),
            "local_bytes": int(k.local_mem_per_thread)}


def sass(kernel) -> str | Skipped:
    """SASS of a launched Numba kernel, read from its cubin with cuobjdump (needs a GPU)."""
    if simulator():
        return Skipped("Numba builds machine code only for a GPU it can see", "SASS")
    from .sass import sass_text
    lib = _compiled(kernel)._codelibrary
    return sass_text(lib.get_cubin())


def expect_sass(kernel, *opcodes: str):
    """Like Module.expect_sass, for a launched Numba kernel: the count of each required opcode prefix.
    Raises SassMismatch naming what is missing; a Skipped in the simulator."""
    from .sass import expect_opcodes, opcode_histogram
    text = sass(kernel)
    if isinstance(text, Skipped):
        return text
    return expect_opcodes(opcode_histogram(text), *opcodes, where=f"kernel {getattr(kernel, '__name__', 'kernel')}")


def kernel_name(kernel) -> str:
    """The name the kernel's `def` gives it (functools.wraps can make __name__ another function's)."""
    code = getattr(getattr(kernel, "py_func", kernel), "__code__", None)
    return code.co_name if code is not None else getattr(kernel, "__name__", "kernel")


def expect_compiles(kernel, *args) -> str | Skipped:
    """Does Numba's real GPU compiler take this kernel, for these arguments (those of a launch)? Raises CheckFailed
    with the compiler's complaint when it does not. On a GPU the launch compiled it already; in the simulator, which
    runs kernels as Python and so takes code the compiler rejects (a list, a string), it compiles the kernel to PTX
    for sm_75, the oldest GPU the course runs on, in a process of its own (feedbeast.numba_compile; NVVM, no GPU)."""
    from . import hooks
    from .errors import CheckFailed, todo_of
    name = kernel_name(kernel)
    check = f"compile of {name}"
    if not simulator():
        _compiled(kernel)
        hooks.passed(check, "compiled by Numba for this GPU")
        return f"{name}: compiled by Numba for this GPU"
    from .numba_compile import compile_in_child
    r = compile_in_child(kernel, args)
    if "skip" in r:
        return Skipped(r["skip"], check)
    if "lambda" in r:
        message = (todo_of(kernel) + f"kernel {name} calls a device function written as a lambda ({r['lambda']}): "
                   "the check hands each function's source to Numba's GPU compiler, and a lambda's source is only "
                   "the line it stands on: write it as a def")
        hooks.failed(check, message)
        raise CheckFailed(message)
    if "refused" in r:
        message = (todo_of(kernel) + f"kernel {name} uses {r['refused']}: a GPU kernel takes its globals and "
                   "captured values as constants (numba-cuda user guide, 'Global Variables and Captured Values'): "
                   "numbers, tuples of them, numpy scalars, arrays and dtypes, math functions and device functions, "
                   "not Python objects or other modules. The simulator runs kernels as Python, so it took this.")
        hooks.failed(check, message)
        raise CheckFailed(message)
    if "error" in r:
        at = f" at `{r['code']}`" if r.get("code") else ""
        at += f" (in {r['function']})" if r.get("code") and r["function"] != name else ""
        message = (todo_of(kernel) + f"kernel {name}: Numba's GPU compiler rejects it{at}: {r['error']} "
                   f"({r['kind']}). The simulator runs kernels as Python, so it took this; a GPU would not. A kernel "
                   "may use numbers, arrays, cuda.local and cuda.shared arrays, and math, but no Python lists, dicts, "
                   "strings or objects.")
        hooks.failed(check, message)
        raise CheckFailed(message)
    said = f"Numba's GPU compiler takes it (PTX for sm_75, {r['ok']} bytes; no GPU here to run it)"
    hooks.passed(check, said)
    return f"{name}: {said}"


def resident_blocks(kernel, threads_per_block: int, dynamic_shared: int = 0):
    """Blocks of a launched Numba kernel that fit on one SM at once (the driver's occupancy calculator,
    cuOccupancyMaxActiveBlocksPerMultiprocessor: registers, shared memory, thread and block limits)."""
    if simulator():
        return Skipped("occupancy comes from the GPU driver; Numba runs in its simulator here", "occupancy")
    from numba import cuda
    fn = _compiled(kernel)._codelibrary.get_cufunc()
    return int(cuda.current_context().get_active_blocks_per_multiprocessor(fn, int(threads_per_block),
                                                                           int(dynamic_shared)))


def expect_uniform_barriers(kernel, *, required: bool = False, per_loop: int | None = None) -> str:
    """Raises CheckFailed when a `cuda.syncthreads()` of a Numba kernel sits where not every thread of the block
    reaches it (feedbeast.barriers: a branch or loop that depends on the thread); Numba's simulator runs such a
    kernel as if it were right. required: the kernel must have a barrier (its threads read what others stored).
    per_loop: no loop may hold more barriers than this (what a pipeline's design fixes: one per tile with two
    buffers). Returns what was found, a line to print; a Skipped when the source cannot be read."""
    from . import hooks
    from .barriers import (barrier_lines_in, barriers_by_loop, device_functions, divergent_barriers,
                           most_per_iteration, unread_device_functions)
    from .errors import CheckFailed, todo_of
    name = kernel_name(kernel)
    check = f"barriers of {name}"

    def fail(message):
        hooks.failed(check, message)
        return CheckFailed(message)

    found, sites = divergent_barriers(kernel), barriers_by_loop(kernel)
    if found is None or sites is None:
        return Skipped("its Python source cannot be read here", check)
    if found:
        raise fail(
            f"kernel {name}: a barrier that not every thread of the block reaches: {'; '.join(found)}. Every thread "
            "that has not returned must reach each cuda.syncthreads() (CUDA C++ Programming Guide, 'Synchronization "
            "Functions'): move the barrier out of the branch. Numba's simulator lets it pass; a GPU may hang or "
            "give wrong results.")
    lambdas = [n for n, f in device_functions(kernel).items() if getattr(getattr(f, "__code__", None), "co_name", "")
               == "<lambda>"]
    if required and not sites and lambdas:
        raise fail(todo_of(kernel) + f"kernel {name} calls {', '.join(lambdas)}, a device function written as a "
                   "lambda, and has no cuda.syncthreads() of its own: a lambda's barriers cannot be read and counted "
                   "(its source is only the line it stands on): write it as a def")
    if required and not sites and unread_device_functions(kernel):
        return Skipped(f"none in the kernel itself, and the source of the device functions it calls "
                       f"({', '.join(unread_device_functions(kernel))}) cannot be read here", check)
    if required and not sites:
        raise fail(todo_of(kernel) +
            f"kernel {name} has no cuda.syncthreads(): the kernel this check is for has its threads read "
            "shared-memory elements that other threads store, so a barrier must stand between the stores and those "
            "reads (without it a thread may read before the store lands: elements never written, or stale ones).")
    if per_loop is not None:
        over = {loop: n for loop, n in (most_per_iteration(kernel) or {}).items() if n > per_loop}
        if over:
            loop, n = min(over.items())
            lines = barrier_lines_in(kernel, loop)
            raise fail(todo_of(kernel) +
                f"kernel {name}: one pass of the loop at line {loop} can reach {n} barriers (lines "
                f"{', '.join(map(str, lines))}); this kernel's design allows {per_loop} per iteration. With two "
                "buffers, the stores into one and the reads of the other touch different memory, so one barrier per "
                "tile separates both uses of each buffer (chapter 02).")
    count = sum(len(v) for v in sites.values())
    said = (f"{count}, every one reached by the whole block" if count else "none") \
        + (f", at most {per_loop} per loop iteration" if count and per_loop is not None else "")
    hooks.passed(check, said)
    return f"{check}: {said}"
