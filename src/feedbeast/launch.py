"""Launching compiled kernels: grid, block, dynamic shared memory, tensor maps and clusters.

Chapter 00 makes the first launch; chapter 05 passes tensor maps by value, chapter 07 launches clusters (and runs
a probe of integer code on the host, `Kernel.run_on_host`: feedbeast.host_ptx) and chapter 10 dependent launches
(PDL).

    mod.my_kernel.launch(grid, block, out, a, n, shared=64 * 1024, cluster=(2, 1, 1))

Arguments are packed by the kernel's own parameter layout (read from the driver), so an int goes
into an `int` as 4 bytes and into a `size_t` as 8; device arrays (ours, Numba's, CuPy's, PyTorch's)
become pointers; a TensorMap goes in by value. A kernel built for an arch this GPU cannot run, or a
machine with no GPU, gives a `Skipped` instead of a launch.

Every argument is checked first, on any machine, against the kernel's parameter list (read from the
cubin, so no driver is needed) and against the limits of the hardware; only then can a launch be
skipped. Each limit below names its source: the CUDA C++ Programming Guide ("Compute Capabilities",
"Thread Block Clusters") or the CUDA Driver API (cuLaunchKernelEx, cuFuncSetAttribute).
"""
from __future__ import annotations

import ctypes
import re
import struct

import numpy as np

from . import hooks
from .device import _check, gpu
from .errors import LaunchError
# The GPU's state after a failure and the debug report channel live in memory.py (launch needs memory,
# memory never needs launch); the names stay importable from here.
from .memory import (LOST_HINT, DeviceArray, bfloat16, debug_channel, ensure_usable, interface,  # noqa: F401
                     raise_pending_debug_report)
from .skip import Skipped, needs

# Checks a later stage runs before every launch are feedbeast.hooks.before_launch (the package's __init__ installs
# the hazard checker's there): the checker compiles and launches, so launching does not import it.
last_launched = None   # the Kernel of the latest launch asked for: a failed check names its lab TODOs (check.py)
_watching: list = []   # lists that collect each launch made while they are open (watching(): fb.bench, fb.profile)


class watching:
    """`with watching() as seen:` collects in `seen` a Launch for every launch made inside, by Kernel.launch() or
    by calling a Launch, in order: what was launched, with which configuration and arguments."""

    def __enter__(self) -> list:
        self.seen = []
        _watching.append(self.seen)
        return self.seen

    def __exit__(self, *exc):
        _watching.remove(self.seen)


def _seen(launch) -> None:
    for seen in _watching:
        seen.append(launch)


def _dim3(v, what):
    t = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    if not 1 <= len(t) <= 3 or any(not isinstance(x, (int, np.integer)) or int(x) < 1 for x in t):
        raise LaunchError(f"{what} {v!r}: give 1 to 3 positive integer sizes, e.g. (blocks_x, blocks_y)")
    return tuple(int(x) for x in t) + (1,) * (3 - len(t))


# CUDA C++ Programming Guide, "Compute Capabilities", table "Technical Specifications per Compute
# Capability" (the same for every arch from sm_50 to sm_120):
MAX_BLOCK = (1024, 1024, 64)          # maximum x-, y-, z-dimension of a block
MAX_THREADS_PER_BLOCK = 1024          # maximum number of threads per block
MAX_GRID = (2**31 - 1, 65535, 65535)  # maximum x-, y-, z-dimension of a grid of thread blocks
# Same table, "Maximum amount of shared memory per thread block" (static + dynamic, after opting in
# with cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)), in bytes:
SMEM_PER_BLOCK = {(8, 0): 163 * 1024, (8, 6): 99 * 1024, (8, 7): 163 * 1024, (8, 9): 99 * 1024,
                  (9, 0): 227 * 1024, (10, 0): 227 * 1024, (12, 0): 99 * 1024}
# CUDA C++ Programming Guide, "Thread Block Clusters": clusters need compute capability 9.0; a cluster
# of at most 8 blocks is portable; more needs CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
# which this toolkit never sets, so the driver refuses more than 8 (CUDA_ERROR_INVALID_CLUSTER_SIZE).
MAX_PORTABLE_CLUSTER = 8


def check_config(grid, block, shared, cluster, *, arch, static_shared=0, max_threads=None, name="kernel"):
    """The launch configuration against the hardware's limits; raises LaunchError. No GPU needed.

    Returns (grid, block, cluster) as 3-tuples (cluster None when not given).
    """
    from .device import parse_arch
    grid, block = _dim3(grid, "grid"), _dim3(block, "block")
    for i, (b, lim) in enumerate(zip(block, MAX_BLOCK)):
        if b > lim:
            raise LaunchError(f"block {block}: dimension {'xyz'[i]} is {b}, the hardware allows at most {lim}")
    threads = block[0] * block[1] * block[2]
    if threads > MAX_THREADS_PER_BLOCK:
        raise LaunchError(f"block {block} has {threads} threads: at most {MAX_THREADS_PER_BLOCK} per block")
    if max_threads is not None and threads > max_threads:
        raise LaunchError(f"block {block} has {threads} threads but {name} was compiled for at most "
                          f"{max_threads} (its __launch_bounds__): the driver refuses the launch")
    for i, (n, lim) in enumerate(zip(grid, MAX_GRID)):
        if n > lim:
            raise LaunchError(f"grid {grid}: dimension {'xyz'[i]} is {n}, the hardware allows at most {lim}")
    if not isinstance(shared, (int, np.integer)) or shared < 0:
        raise LaunchError(f"shared={shared!r}: give the dynamic shared memory in bytes (an int >= 0)")
    major, minor, _ = parse_arch(arch)
    limit = SMEM_PER_BLOCK.get((major, minor))
    if limit is not None and static_shared + int(shared) > limit:
        raise LaunchError(
            f"{name} needs {static_shared} B static + {shared} B dynamic = {static_shared + shared} B of shared "
            f"memory per block, but {arch} allows {limit} B per block: use fewer stages or smaller tiles")
    c = None
    if cluster is not None:
        c = _dim3(cluster, "cluster")
        if major < 9:
            raise LaunchError(f"cluster {cluster}: thread block clusters need sm_90 or newer, {name} is built "
                              f"for {arch}")
        if c[0] * c[1] * c[2] > MAX_PORTABLE_CLUSTER:
            raise LaunchError(f"cluster {c} has {c[0] * c[1] * c[2]} blocks: at most {MAX_PORTABLE_CLUSTER} "
                              "(the portable cluster size)")
        if any(gd % cd for gd, cd in zip(grid, c)):
            raise LaunchError(f"grid {grid} is not a multiple of cluster {c} in every dimension")
    return grid, block, c


class Kernel:
    """One kernel of a compiled Module; loaded on first launch."""

    def __init__(self, module, name):
        self.module = module
        self.name = name
        self._fn = None
        self._params = None
        self._declared = False      # the parameters' declarations, read from the source on first use
        self._whats = None          # each argument's name in messages, built once: a launch stays cheap
        self._limits = None
        self._dyn_limit = 0

    @property
    def resources(self):
        return self.module.resources.get(self.name)

    def sass(self):
        return self.module.sass(self.name)

    def expect_sass(self, *opcodes, forbid=()):
        return self.module.expect_sass(*opcodes, kernel=self.name, forbid=forbid)

    @property
    def params(self) -> list[tuple[int, int]]:
        """(offset, size) in bytes of each parameter, in order, read from the cubin (no GPU needed)."""
        if self._params is None:
            from .cubin import kernel_params
            self._params = kernel_params(self.module.cubin, self.name)
        return self._params

    def _load(self):
        from cuda.bindings import driver
        if self._fn is not None:
            return
        mod = self.module
        if getattr(mod, "_cu_module", None) is None:
            mod._cu_module = _check(driver.cuModuleLoadData(mod.cubin))
            err, dptr, size = driver.cuModuleGetGlobal(mod._cu_module, b"fb_debug_report")
            if err == driver.CUresult.CUDA_SUCCESS:
                chan = debug_channel()
                _check(driver.cuMemcpyHtoD(dptr, struct.pack("<Q", chan.device), 8))
        self._fn = _check(driver.cuModuleGetFunction(mod._cu_module, self.name.encode()))
        self._dyn_limit = 0

    def _attr(self, a):
        from cuda.bindings import driver
        return _check(driver.cuFuncGetAttribute(getattr(driver.CUfunction_attribute, a), self._fn))

    @property
    def declared(self) -> list[str] | None:
        """Each parameter's declaration as the source writes it ('int n', 'const float* x'), or None where the
        source does not show them plainly (no source, a macro or template in the way)."""
        if self._declared is False:
            decls = declared_params(getattr(self.module, "source", "") or "", self.name)
            self._declared = decls if decls is not None and len(decls) == len(self.params) else None
        return self._declared

    def _what(self, i) -> str:
        if self._whats is None:
            decls = self.declared
            self._whats = [f"{self.name} argument {j}" + (f" ({decls[j]})" if decls else "")
                           for j in range(len(self.params))]
        return self._whats[i]

    def check_args(self, args):
        """Count and kind of every argument against the kernel's parameters; raises LaunchError."""
        params = self.params
        if len(args) != len(params):
            raise LaunchError(f"{self.name} takes {len(params)} arguments, got {len(args)}")
        decls = self.declared
        for i, (arg, (_offset, size)) in enumerate(zip(args, params)):
            _arg_bytes(_as_declared(arg, decls[i] if decls else None, self._what(i)), size, self._what(i),
                       check_only=True)

    def _pack(self, args):
        # cuLaunchKernelEx takes one pointer per parameter and copies `size` bytes from each: every value
        # gets its own 64 B aligned slot (a tensor map's alignment), whatever its offset in the kernel.
        params = self.params
        slots = [(size + 63) // 64 * 64 for _, size in params]
        buf = ctypes.create_string_buffer(sum(slots) + 64)
        at = (ctypes.addressof(buf) + 63) // 64 * 64
        ptrs = (ctypes.c_void_p * max(len(args), 1))()
        decls = self.declared
        for i, (arg, (_offset, size), slot) in enumerate(zip(args, params, slots)):
            data = _arg_bytes(_as_declared(arg, decls[i] if decls else None, self._what(i)), size, self._what(i))
            ctypes.memmove(at, data, size)
            ptrs[i] = at
            at += slot
        return buf, ptrs

    def _ready(self, grid, block, args, shared, cluster):
        """Every check, then (on a machine that can run it) the module loaded and the shared memory
        opted in. Returns (grid, block, cluster) as 3-tuples, or the Skipped that says why not."""
        if self._limits is None:   # read once: a launch must stay cheap (decode kernels run for microseconds)
            from .cubin import kernel_max_threads
            res = self.resources
            self._limits = (res.shared_static if res is not None else 0,
                            kernel_max_threads(self.module.cubin, self.name))
        static, max_threads = self._limits
        grid, block, cluster = check_config(grid, block, shared, cluster, arch=self.module.arch,
                                            static_shared=static, name=self.name, max_threads=max_threads)
        self.check_args(args)
        global last_launched
        last_launched = self
        skip = needs(self.module.needs_arch, f"launch {self.name}")
        if skip is not None:
            return skip
        if any(isinstance(a, DeviceArray) and not a.on_gpu for a in args):
            return Skipped("an argument has no GPU memory", f"launch {self.name}")
        if any(_is_tensor_map(a) and a.raw is None for a in args):
            return Skipped("a tensor map was made with no GPU", f"launch {self.name}")
        ensure_usable()
        self._load()
        g = gpu()
        static = self._attr("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES")
        if static + shared > g.smem_per_block_optin:   # the device's own figure (cuDeviceGetAttribute)
            raise LaunchError(
                f"{self.name} needs {static} B static + {shared} B dynamic = {static + shared} B of shared memory "
                f"per block, but {g.name} allows {g.smem_per_block_optin} B: use fewer stages or smaller tiles")
        self._opt_in(shared)
        return grid, block, cluster

    def _opt_in(self, shared):
        """Allow `shared` bytes of dynamic shared memory (above 48 KB a kernel must opt in: cuFuncSetAttribute
        with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), once per size that grows the limit."""
        if shared > self._dyn_limit:
            from cuda.bindings import driver
            _check(driver.cuFuncSetAttribute(
                self._fn, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared))
            self._dyn_limit = shared

    def launch(self, grid, block, *args, shared: int = 0, cluster=None, stream=0, pdl: bool = False):
        """Launch asynchronously; returns None, or a Skipped when this machine cannot run it.

        Everything is checked before anything can be skipped, so a wrong launch fails on any machine.
        pdl: programmatic dependent launch (sm_90+): the kernel may start before the previous kernel of the
        stream has finished, once every block of that one has run griddepcontrol.launch_dependents (or exited);
        the kernel's griddepcontrol.wait then waits for it (CUDA Programming Guide, "Programmatic Dependent
        Launch and Synchronization"; CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION).
        """
        ready = self._ready(grid, block, args, shared, cluster)
        if isinstance(ready, Skipped):
            return ready
        for check in hooks.before_launch:   # under hooks.mode.hazards: the hazard build first, same arguments
            check(self, grid, block, args, shared, cluster)
        _buf, ptrs = self._pack(args)
        if _watching:
            _seen(Launch(self, ready[0], ready[1], args, shared, ready[2], pdl=pdl))
        self._raw_launch(*ready[:2], shared, ready[2], stream, ptrs, pdl)
        return None

    def run_on_host(self, grid, block, *args):
        """Run this kernel on the host from its PTX, one thread after another, on any machine: numpy arrays for
        its pointers (written in place), ints for its integers. For probes of integer device code (a lab's
        `raster`, `kv_tiles`): feedbeast.host_ptx says what it models; anything else raises HostRunUnsupported
        (only a GPU can run it). Returns a HostRun (threads run, instructions executed)."""
        from .host_ptx import run
        global last_launched
        last_launched = self         # a failed check of what it wrote names the lab's TODOs, as after a launch
        return run(self.module.ptx, self.name, _dim3(grid, "grid"), _dim3(block, "block"), args)

    def bind(self, grid, block, *args, shared: int = 0, cluster=None, stream=0, pdl: bool = False):
        """Check and pack a launch once; returns a Launch, a function that makes that launch, again and again.

        For kernels that run for microseconds, where the checks and packing of launch() would be a
        visible part of a timed run. Calling it returns None, or the Skipped that says why this
        machine cannot run the kernel. It keeps the arguments alive, and says what it launches
        (.kernel, .grid, .block, .args, .shared, .cluster): fb.bench records it, fb.profile repeats it.
        """
        ready = self._ready(grid, block, args, shared, cluster)
        if isinstance(ready, Skipped):
            return Launch(self, grid, block, args, shared, cluster, skipped=ready)
        for check in hooks.before_launch:   # under hooks.mode.hazards: the hazard build first, same arguments
            check(self, grid, block, args, shared, cluster)
        buf, ptrs = self._pack(args)
        cfg = self._config(*ready[:2], shared, ready[2], stream, pdl)
        return Launch(self, ready[0], ready[1], args, shared, ready[2], pdl=pdl, packed=(buf, ptrs, cfg))

    def max_active_clusters(self, cluster, block, shared: int = 0) -> int:
        """How many clusters of this shape can run at once on this GPU (cuOccupancyMaxActiveClusters).

        A persistent kernel's grid must not exceed this times the cluster size, or the surplus
        clusters wait for a second wave. It can be less than SMs / cluster size: a cluster must fit
        inside one GPC, and GPCs do not all have the same number of SMs.
        """
        from cuda.bindings import driver
        if needs(self.module.needs_arch) is not None:
            return 0
        self._load()
        self._opt_in(shared)
        c = _dim3(cluster, "cluster")   # the occupancy query takes the cluster shape as its grid
        return int(_check(driver.cuOccupancyMaxActiveClusters(self._fn, self._config(c, _dim3(block, "block"),
                                                                                      shared, c, 0))))

    def _config(self, grid, block, shared, cluster, stream, pdl=False):
        """The driver's launch configuration: dimensions, dynamic shared memory, stream, and as launch attributes
        the cluster shape (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) when there is one and, with pdl, programmatic
        stream serialization (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)."""
        from cuda.bindings import driver
        cfg = driver.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
        cfg.sharedMemBytes = shared
        cfg.hStream = driver.CUstream(int(stream))
        attrs = []
        if cluster is not None:
            c = _dim3(cluster, "cluster")
            a = driver.CUlaunchAttribute()
            a.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z = c
            attrs.append(a)
        if pdl:
            a = driver.CUlaunchAttribute()
            a.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            a.value.programmaticStreamSerializationAllowed = 1
            attrs.append(a)
        cfg.attrs = attrs
        cfg.numAttrs = len(attrs)
        return cfg

    def _raw_launch(self, grid, block, shared, cluster, stream, ptrs, pdl=False):
        from cuda.bindings import driver
        cfg = self._config(grid, block, shared, cluster, stream, pdl)
        err, = driver.cuLaunchKernelEx(cfg, self._fn, ctypes.addressof(ptrs), 0)
        if err != driver.CUresult.CUDA_SUCCESS:
            _, msg = driver.cuGetErrorString(err)
            raise LaunchError(f"launch of {self.name} grid {grid} block {block} shared {shared} B "
                              f"cluster {cluster} failed: {err.name} ({msg.decode() if msg else ''})")

    def __repr__(self):
        return f"<Kernel {self.name} ({self.module.arch})>"


class Launch:
    """One kernel launch, checked and packed once (Kernel.bind): call it to launch. It carries what it launches:
    .kernel (the Kernel), .grid, .block, .args, .shared, .cluster and .pdl, and keeps the arguments alive."""

    def __init__(self, kernel, grid, block, args, shared, cluster, *, pdl=False, packed=None, skipped=None):
        self.kernel, self.grid, self.block, self.args = kernel, grid, block, tuple(args)
        self.shared, self.cluster, self.pdl = shared, cluster, pdl
        self._packed, self.skipped = packed, skipped

    def __call__(self):
        if self.skipped is not None:
            return self.skipped
        from cuda.bindings import driver
        _buf, ptrs, cfg = self._packed
        if _watching:
            _seen(self)
        err, = driver.cuLaunchKernelEx(cfg, self.kernel._fn, ctypes.addressof(ptrs), 0)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise LaunchError(f"launch of {self.kernel.name} failed: {err.name}")
        return None

    def __repr__(self):
        return (f"<launch of {self.kernel.name}: grid {self.grid}, block {self.block}, shared {self.shared} B"
                f"{f', cluster {self.cluster}' if self.cluster else ''}>")


_INTEGER_TYPE = re.compile(r"\b(int|unsigned|signed|long|short|char|size_t|ptrdiff_t|u?int(8|16|32|64)_t|[iu](8|16|32|64))\b")
_FLOAT_TYPE = re.compile(r"\b(float|double)\b")


def declared_params(source: str, name: str) -> list[str] | None:
    """The declarations of kernel `name`'s parameters in `source` (`extern "C" __global__ void name(...)`, with
    whatever stands between: `__launch_bounds__(...)`, preprocessor lines), split at the top-level commas, comments
    dropped; None when no such declaration is found."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)
    for m in re.finditer(r"\b" + re.escape(name) + r"\s*\(", text):
        head = text[:m.start()]
        head = head[max(head.rfind(";"), head.rfind("}"), head.rfind("{")) + 1:]   # this declaration's own start
        if "__global__" not in head or not re.search(r"\bvoid\b", head):
            continue
        depth, out, cur = 1, [], ""
        for ch in text[m.end():]:
            if ch in "([<":
                depth += 1
            elif ch in ")]>":
                depth -= 1
                if depth == 0:
                    break
            if ch == "," and depth == 1:
                out.append(cur)
                cur = ""
            else:
                cur += ch
        else:
            return None
        out.append(cur)
        decls = [" ".join(d.split()) for d in out]
        return [] if decls in ([""], ["void"]) else decls
    return None


def _declared_type(decl: str) -> str:
    """The type part of a parameter declaration: 'const int n' -> 'const int' (the name may be any word)."""
    words = decl.replace("*", " * ").replace("&", " & ").split()
    return " ".join(words[:-1]) if len(words) > 1 and re.fullmatch(r"[A-Za-z_]\w*", words[-1]) else decl


def _as_declared(arg, decl: str | None, what: str):
    """A number made to fit its declared parameter: an int for a float or double is that value in floating point,
    a float for an integer parameter is refused (its bits would be read as a huge integer)."""
    if decl is None or isinstance(arg, (bool, np.bool_)):
        return arg
    kind = _declared_type(decl)
    if "*" in kind or "&" in kind:
        _check_pointee(arg, kind, what)
        return arg
    if isinstance(arg, (float, np.floating)) and _INTEGER_TYPE.search(kind) and not _FLOAT_TYPE.search(kind):
        raise LaunchError(f"{what}: {arg!r} is a float and the parameter an integer: pass an int "
                          f"(n // 4, not n / 4; int(x) where a float is meant)")
    if isinstance(arg, (int, np.integer)) and _FLOAT_TYPE.search(kind) and not _INTEGER_TYPE.search(kind):
        try:
            return float(arg)
        except OverflowError:
            raise LaunchError(f"{what}: {arg} is too large for a floating-point parameter") from None
    return arg


# Scalar types a pointer parameter may point to: their size in bytes and the array type to pass (vector types, void
# and structs are not checked: a float32 array for a float4* is the usual way to load 16 B at a time).
_POINTEE = {}
for _names, _size, _dtype in (
        ("char signed_char unsigned_char int8_t uint8_t i8 u8 bool __nv_fp8_e4m3 __nv_fp8_e5m2", 1, "uint8 (or int8)"),
        ("short unsigned_short int16_t uint16_t i16 u16", 2, "int16 (or uint16)"),
        ("__nv_bfloat16 nv_bfloat16 __nv_bfloat16_raw", 2, "fb.bfloat16"), ("__half half", 2, "float16"),
        ("int unsigned unsigned_int signed_int int32_t uint32_t i32 u32", 4, "int32 (or uint32)"), ("float", 4, "float32"),
        ("long long_long unsigned_long unsigned_long_long int64_t uint64_t size_t i64 u64", 8, "int64 (or uint64)"),
        ("double", 8, "float64")):
    _POINTEE.update({n.replace("_", " ") if n.startswith(("signed_", "unsigned_", "long_")) else n: (_size, _dtype)
                     for n in _names.split()})


def _a(dtype) -> str:
    return f"{'an' if str(dtype).startswith('i') else 'a'} {dtype}"     # an int32, a uint8, a float64


_FLOAT_POINTEE = {"float", "double", "__half", "half", "__nv_bfloat16", "nv_bfloat16", "__nv_bfloat16_raw"}


def _check_pointee(arg, kind: str, what: str) -> None:
    """A device array for a pointer to a scalar type must hold elements of that type's size: a float64 array for a
    float* would be read as pairs of halves of its numbers."""
    base = " ".join(w for w in kind.replace("*", " ").replace("&", " ").split()
                    if w not in ("const", "volatile", "__restrict__", "restrict", "__restrict"))
    want = _POINTEE.get(base)
    if want is None or kind.count("*") != 1:
        return
    cai = None if isinstance(arg, DeviceArray) else interface(arg)
    if isinstance(arg, DeviceArray) or cai is not None:
        dtype = np.dtype(arg.dtype) if cai is None else cai["dtype"]
    else:
        return
    if dtype.itemsize != want[0]:
        raise LaunchError(f"{what}: {_a(dtype)} array ({dtype.itemsize} B elements) for a pointer to {base} "
                          f"({want[0]} B): pass an array of {want[1]} (x.astype(...) on the host, then fb.to_device)")
    # The same size and the other kind of number: the kernel reads an integer's bits as a float or the other way
    # round. One-byte types are not told apart: uint8 arrays carry fp8 codes and chars alike.
    held = ("integers" if dtype.kind in "iu" else
            "floating-point numbers" if dtype.kind == "f" or (bfloat16 is not None and dtype == bfloat16) else None)
    floating = base in _FLOAT_POINTEE
    if want[0] > 1 and held is not None and (held == "integers") == floating:    # other kinds: not told apart
        raise LaunchError(f"{what}: {_a(dtype)} array holds {held} and the parameter points to {base}: the kernel "
                          f"would read their bits as {'floats' if floating else 'integers'}: pass an array of "
                          f"{want[1]} (an input: x.astype(...) on the host, then fb.to_device; an output: "
                          "fb.empty(shape, that type))")


def _is_tensor_map(arg):
    """fb.TensorMap itself (no import: launch stays cheap, and none exists before feedbeast.tensormap is loaded).
    A class of another's named TensorMap is refused: its `raw` could run code while the launch packs it."""
    import sys
    tm = sys.modules.get("feedbeast.tensormap")
    if tm is not None and type(arg) is tm.TensorMap:
        return True
    if type(arg).__name__ == "TensorMap":
        raise LaunchError(f"an argument of type {type(arg).__module__}.{type(arg).__qualname__}: pass the tensor map "
                          "fb.tensor_map made (fb.TensorMap itself, not a class of your own)")
    return False


def _arg_bytes(arg, size, what, check_only=False) -> bytes | None:
    """The bytes of one argument for a parameter of `size` bytes; with check_only, only the checks
    (a device array with no GPU memory and a tensor map with no encoding pass them)."""
    if _is_tensor_map(arg):
        if size != 128:
            raise LaunchError(f"{what}: a tensor map is 128 B but the parameter is {size} B: declare it "
                              "`const __grid_constant__ fb::TensorMap`")
        if check_only:
            return None
        if arg.raw is None:
            raise LaunchError(f"{what}: tensor map was never encoded (made with no GPU)")
        return arg.raw
    cai = None if isinstance(arg, DeviceArray) else interface(arg)
    if isinstance(arg, DeviceArray) or cai is not None:
        if size != 8:
            raise LaunchError(f"{what}: a device array is a pointer (8 B) but the parameter is {size} B")
        if check_only:
            return None
        ptr = arg.ptr if cai is None else cai["ptr"]
        return struct.pack("<Q", ptr)
    if isinstance(arg, np.ndarray):
        raise LaunchError(f"{what}: a numpy array lives in host memory; copy it to the GPU first "
                          "(fb.to_device(x)) and pass the device array")
    if isinstance(arg, np.generic):
        b = arg.tobytes()
        if len(b) != size:
            raise LaunchError(f"{what}: {arg.dtype} is {len(b)} B but the parameter is {size} B")
        return b
    if isinstance(arg, bool):
        return int(arg).to_bytes(size, "little")
    if isinstance(arg, int):
        fmt = {1: "b", 2: "h", 4: "i", 8: "q"}.get(size)
        if fmt is None:
            raise LaunchError(f"{what}: an int for a {size}-byte parameter (a struct?): pass bytes of that size")
        for f in (fmt, fmt.upper()):
            try:
                return struct.pack("<" + f, arg)
            except struct.error:
                pass
        raise LaunchError(f"{what}: {arg} does not fit a {size}-byte integer parameter")
    if isinstance(arg, float):
        if size == 4:
            return struct.pack("<f", arg)
        if size == 8:
            return struct.pack("<d", arg)
        raise LaunchError(f"{what}: a float for a {size}-byte parameter")
    if isinstance(arg, (bytes, bytearray)) and len(arg) == size:
        return bytes(arg)
    raise LaunchError(f"{what}: cannot pass a {type(arg).__name__} (size {size} B parameter); pass a device "
                      "array, a Python int/float, a numpy scalar or a TensorMap")

