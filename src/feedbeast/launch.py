"""Launching compiled kernels: grid, block, dynamic shared memory, tensor maps and clusters.

    mod.my_kernel.launch(grid, block, out, a, n, shared=64 * 1024, cluster=(2, 1, 1))

Arguments are packed by the kernel's own parameter layout (read from the driver), so an int goes
into an `int` as 4 bytes and into a `size_t` as 8; device arrays (ours, Numba's, CuPy's, PyTorch's)
become pointers; a TensorMap goes in by value. A kernel built for an arch this GPU cannot run, or a
machine with no GPU, gives a `Skipped` instead of a launch.
"""
from __future__ import annotations

import ctypes
import struct

import numpy as np

from . import device as _device
from .device import _check, gpu, runs_on
from .errors import BarrierTimeout, KernelFault, LaunchError
from .skip import Skipped, needs


def _dim3(v, what):
    t = (v,) if isinstance(v, (int, np.integer)) else tuple(v)
    if not 1 <= len(t) <= 3 or any(int(x) < 1 for x in t):
        raise LaunchError(f"{what} {v!r}: give 1 to 3 positive sizes, e.g. (blocks_x, blocks_y)")
    return tuple(int(x) for x in t) + (1,) * (3 - len(t))


class _DebugChannel:
    """Host-mapped memory a debug kernel writes its time-out report into (see include/fb/debug.cuh)."""
    SIZE = 128
    MAGIC = 0xFEEDBEA5

    def __init__(self):
        from cuda.bindings import driver
        self.host = int(_check(driver.cuMemHostAlloc(self.SIZE, driver.CU_MEMHOSTALLOC_DEVICEMAP)))
        self.device = int(_check(driver.cuMemHostGetDevicePointer(self.host, 0)))
        ctypes.memset(self.host, 0, self.SIZE)

    def take(self):
        raw = ctypes.string_at(self.host, self.SIZE)
        magic, bx, by, bz, thread, stage, parity, _pad, waited = struct.unpack_from("<IiiiiiiIQ", raw)
        if magic != self.MAGIC:
            return None
        what = raw[40:88].split(b"\0")[0].decode(errors="replace")
        ctypes.memset(self.host, 0, self.SIZE)
        return (f"block ({bx},{by},{bz}) thread {thread} gave up waiting on barrier '{what}' "
                f"stage {stage} for phase parity {parity} after {waited / 1e6:.0f} ms: the phase never "
                "completed (a missing arrive or expect_tx, a wrong parity, or an arrival count that does "
                "not match the arriving threads)")


_debug = None


def debug_channel():
    global _debug
    if _debug is None:
        _debug = _DebugChannel()
    return _debug


def raise_pending_debug_report():
    """After a failed launch: raise BarrierTimeout if a debug kernel left a report."""
    if _debug is None:
        return
    msg = _debug.take()
    if msg:
        _device.lost = f"BarrierTimeout: {msg}"
        raise BarrierTimeout(msg + ". " + LOST_HINT)


# A trapped or faulting kernel leaves a sticky error: every later CUDA call in this process fails, and
# the driver offers no way back (resetting the primary context does not clear it). The process must end.
LOST_HINT = ("The GPU can no longer be used from this process: restart the notebook's kernel (your "
             "files are untouched). To demonstrate a failure without losing the session, run it with "
             "fb.isolated(...), which uses a separate process.")


def ensure_usable():
    if _device.lost:
        raise KernelFault(f"the GPU is unusable in this process since an earlier failure ({_device.lost[:200]}). "
                          + LOST_HINT)


class Kernel:
    """One kernel of a compiled Module; loaded on first launch."""

    def __init__(self, module, name):
        self.module = module
        self.name = name
        self._fn = None
        self._params = None
        self._dyn_limit = 0

    @property
    def resources(self):
        return self.module.resources.get(self.name)

    def sass(self):
        return self.module.sass(self.name)

    def expect_sass(self, *opcodes, forbid=()):
        return self.module.expect_sass(*opcodes, kernel=self.name, forbid=forbid)

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
        self._params = []
        for i in range(4096):
            err, offset, size = driver.cuFuncGetParamInfo(self._fn, i)
            if err != driver.CUresult.CUDA_SUCCESS:
                break
            self._params.append((int(offset), int(size)))

    def _attr(self, a):
        from cuda.bindings import driver
        return _check(driver.cuFuncGetAttribute(getattr(driver.CUfunction_attribute, a), self._fn))

    def _pack(self, args):
        if len(args) != len(self._params):
            raise LaunchError(f"{self.name} takes {len(self._params)} arguments, got {len(args)}")
        total = max((o + s for o, s in self._params), default=0)
        buf = ctypes.create_string_buffer(total + 64)
        base = (ctypes.addressof(buf) + 63) // 64 * 64   # tensor maps need 64 B alignment
        ptrs = (ctypes.c_void_p * max(len(args), 1))()
        for i, (arg, (offset, size)) in enumerate(zip(args, self._params)):
            data = _arg_bytes(arg, size, f"{self.name} argument {i}")
            ctypes.memmove(base + offset, data, size)
            ptrs[i] = base + offset
        return buf, ptrs

    def launch(self, grid, block, *args, shared: int = 0, cluster=None, stream=0):
        """Launch asynchronously; returns None, or a Skipped when this machine cannot run it."""
        from .memory import DeviceArray
        skip = needs(self.module.arch, f"launch {self.name}")
        if skip is not None:
            return skip
        if any(isinstance(a, DeviceArray) and not a.on_gpu for a in args):
            return Skipped("an argument has no GPU memory", f"launch {self.name}")
        grid, block = _dim3(grid, "grid"), _dim3(block, "block")
        if np.prod(block) > 1024:
            raise LaunchError(f"block {block} has {np.prod(block)} threads: at most 1024 per block")
        ensure_usable()
        self._load()
        g = gpu()
        static = self._attr("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES")
        if static + shared > g.smem_per_block_optin:
            raise LaunchError(
                f"{self.name} needs {static} B static + {shared} B dynamic = {static + shared} B of shared memory "
                f"per block, but {g.name} allows {g.smem_per_block_optin} B: use fewer stages or smaller tiles")
        if shared > self._dyn_limit:
            from cuda.bindings import driver
            _check(driver.cuFuncSetAttribute(
                self._fn, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared))
            self._dyn_limit = shared
        _buf, ptrs = self._pack(args)
        self._raw_launch(grid, block, shared, cluster, stream, ptrs)
        return None

    def max_active_clusters(self, cluster, block, shared: int = 0) -> int:
        """How many clusters of this shape can run at once on this GPU (cuOccupancyMaxActiveClusters).

        A persistent kernel's grid must not exceed this times the cluster size, or the surplus
        clusters wait for a second wave. It can be less than SMs / cluster size: a cluster must fit
        inside one GPC, and GPCs do not all have the same number of SMs.
        """
        from cuda.bindings import driver
        if needs(self.module.arch) is not None:
            return 0
        self._load()
        if shared > self._dyn_limit:
            _check(driver.cuFuncSetAttribute(
                self._fn, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared))
            self._dyn_limit = shared
        c, b = _dim3(cluster, "cluster"), _dim3(block, "block")
        cfg = driver.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = c
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = b
        cfg.sharedMemBytes = shared
        a = driver.CUlaunchAttribute()
        a.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z = c
        cfg.attrs = [a]
        cfg.numAttrs = 1
        return int(_check(driver.cuOccupancyMaxActiveClusters(self._fn, cfg)))

    def _raw_launch(self, grid, block, shared, cluster, stream, ptrs):
        from cuda.bindings import driver
        cfg = driver.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
        cfg.sharedMemBytes = shared
        cfg.hStream = driver.CUstream(int(stream))
        attrs = []
        if cluster is not None:
            c = _dim3(cluster, "cluster")
            if any(gd % cd for gd, cd in zip(grid, c)):
                raise LaunchError(f"grid {grid} is not a multiple of cluster {c} in every dimension")
            a = driver.CUlaunchAttribute()
            a.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z = c
            attrs.append(a)
        cfg.attrs = attrs
        cfg.numAttrs = len(attrs)
        err, = driver.cuLaunchKernelEx(cfg, self._fn, ctypes.addressof(ptrs), 0)
        if err != driver.CUresult.CUDA_SUCCESS:
            _, msg = driver.cuGetErrorString(err)
            raise LaunchError(f"launch of {self.name} grid {grid} block {block} shared {shared} B "
                              f"cluster {cluster} failed: {err.name} ({msg.decode() if msg else ''})")

    def __repr__(self):
        return f"<Kernel {self.name} ({self.module.arch})>"


def _arg_bytes(arg, size, what) -> bytes:
    from .memory import DeviceArray
    from .tensormap import TensorMap
    if isinstance(arg, TensorMap):
        if arg.raw is None:
            raise LaunchError(f"{what}: tensor map was never encoded (made with no GPU)")
        if size != 128:
            raise LaunchError(f"{what}: a tensor map is 128 B but the parameter is {size} B: declare it "
                              "`const __grid_constant__ fb::TensorMap`")
        return arg.raw
    if isinstance(arg, DeviceArray) or hasattr(arg, "__cuda_array_interface__"):
        ptr = arg.ptr if isinstance(arg, DeviceArray) else arg.__cuda_array_interface__["data"][0]
        if size != 8:
            raise LaunchError(f"{what}: a device array is a pointer (8 B) but the parameter is {size} B")
        return struct.pack("<Q", ptr)
    if isinstance(arg, np.generic):
        b = arg.tobytes()
        if len(b) != size:
            raise LaunchError(f"{what}: {arg.dtype} is {len(b)} B but the parameter is {size} B")
        return b
    if isinstance(arg, bool):
        return int(arg).to_bytes(size, "little")
    if isinstance(arg, int):
        fmt = {1: "b", 2: "h", 4: "i", 8: "q"}.get(size)
        ufmt = fmt.upper() if fmt else None
        for f in (fmt, ufmt):
            try:
                return struct.pack("<" + f, arg)
            except (struct.error, TypeError):
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


def launch(kernel: Kernel, grid, block, *args, **kw):
    """Same as kernel.launch(...)."""
    return kernel.launch(grid, block, *args, **kw)
