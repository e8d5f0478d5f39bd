"""Device arrays: numpy in, numpy out, with poison fill so unwritten outputs are caught.

Chapter 00 explains poisoned outputs and random inputs; chapter 03 the bf16 arrays.

    a = to_device(x)              # copy a numpy array to the GPU
    out = empty_like(ref, poison=True)
    out.to_host()

bf16 arrays use `ml_dtypes.bfloat16` on the host (numpy has no bf16 of its own).
On a machine with no GPU, arrays are placeholders that keep their shape and dtype: launches that
receive them are skipped, so a notebook still runs to the end.
`__cuda_array_interface__` lets Numba, CuPy and PyTorch use these arrays without a copy.
"""
from __future__ import annotations

import ctypes
import struct
import weakref

import numpy as np

from . import device as _device
from . import hooks
from .device import _check, gpu
from .errors import BarrierTimeout, FeedbeastError, KernelFault, whole

try:
    import ml_dtypes
    bfloat16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:   # pragma: no cover - ml_dtypes is a pinned dependency
    bfloat16 = None

POISON_BYTE = 0xFF   # all-ones: NaN for every float type, -1 for signed integers
# Poisoned bytes allocated after each poisoned output (empty()): check() reads them back, so a store past the last
# element (an inclusive loop bound, a tail row guarded with > instead of >=) fails the check instead of landing in
# the allocator's padding unseen. 256: a whole row of 128 bf16, the widest store a tile writes past a row's end.
GUARD_BYTES = 256
# Guarded outputs by address: a Numba, CuPy or PyTorch view of one (fbn.device_or_host's outputs are Numba views)
# handed to check() finds its guard here. Weak: an entry goes with its array.
_GUARDED: "weakref.WeakValueDictionary[int, DeviceArray]" = weakref.WeakValueDictionary()


def _typestr(dtype: np.dtype) -> str:
    if bfloat16 is not None and dtype == bfloat16:
        return "<V2"   # the interface has no bf16 code; consumers that know bf16 take the descr
    return dtype.str


class DeviceArray:
    """A C-contiguous array in GPU memory (or, with no GPU, a placeholder with the same shape)."""

    def __init__(self, shape, dtype, ptr: int | None, owner: bool = True, guard: int = 0):
        self.shape = tuple(int(s) for s in np.atleast_1d(shape)) if np.ndim(shape) else (int(shape),)
        self.dtype = np.dtype(dtype)
        self.ptr = ptr
        self._owner = owner
        self.guard = guard          # poisoned bytes allocated after the last element (GUARD_BYTES), 0 for none

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def on_gpu(self) -> bool:
        return self.ptr is not None

    @property
    def strides_bytes(self) -> tuple[int, ...]:
        s, out = self.dtype.itemsize, []
        for n in reversed(self.shape):
            out.append(s)
            s *= n
        return tuple(reversed(out))

    @property
    def __cuda_array_interface__(self):
        if not self.on_gpu:
            raise FeedbeastError("this array has no GPU memory behind it (no GPU on this machine)")
        return {"shape": self.shape, "typestr": _typestr(self.dtype), "data": (self.ptr, False),
                "version": 3, "strides": None}

    def __int__(self):
        return self.ptr or 0

    def __array__(self, dtype=None, copy=None):
        """np.asarray(a): a host copy (numpy would otherwise wrap the object in a 0-d object array, silently); on a
        machine without a GPU, to_host()'s error."""
        if copy is False:
            raise ValueError("a DeviceArray's values reach numpy only as a copy (np.asarray, a.to_host())")
        host = self.to_host()
        return host if dtype is None else host.astype(dtype, copy=False)

    def copy_from(self, host: np.ndarray) -> "DeviceArray":
        host = np.ascontiguousarray(host)
        if host.shape != self.shape or host.dtype != self.dtype:
            raise FeedbeastError(f"copy_from: array is {host.shape} {host.dtype}, device array is "
                                 f"{self.shape} {self.dtype}")
        if self.on_gpu and self.nbytes:
            from cuda.bindings import driver
            _check(driver.cuMemcpyHtoD(self.ptr, host.ctypes.data, self.nbytes))
        return self

    def to_host(self) -> np.ndarray:
        if not self.on_gpu:
            raise FeedbeastError("no GPU on this machine: this array was never on a device "
                                 "(check() and bench() return 'skipped' for such arrays)")
        from cuda.bindings import driver
        sync()
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            _check(driver.cuMemcpyDtoH(out.ctypes.data, self.ptr, self.nbytes))
        return out

    def fill_bytes(self, byte: int) -> "DeviceArray":
        if self.on_gpu and self.nbytes:
            from cuda.bindings import driver
            _check(driver.cuMemsetD8(self.ptr, byte, self.nbytes))
        return self

    def poison(self) -> "DeviceArray":
        """Fill with all-ones bytes (NaN for floats) so that check() can see unwritten elements, and the guard
        after the last element with them too."""
        self._poison_guard()
        return self.fill_bytes(POISON_BYTE)

    def _poison_guard(self):
        if self.on_gpu and self.guard:
            from cuda.bindings import driver
            _check(driver.cuMemsetD8(self.ptr + self.nbytes, POISON_BYTE, self.guard))

    def overrun(self) -> tuple[int, int]:
        """(how many of the guard's bytes after the last element changed, the offset of the first past the end):
        (0, 0) when none did or there is no guard. The guard is poisoned again: each report is of the launches
        since the last one (a fixed kernel re-run into the same output is not blamed for the old bytes)."""
        if not (self.on_gpu and self.guard):
            return 0, 0
        from cuda.bindings import driver
        sync()
        tail = np.empty(self.guard, np.uint8)
        _check(driver.cuMemcpyDtoH(tail.ctypes.data, self.ptr + self.nbytes, self.guard))
        changed = np.flatnonzero(tail != POISON_BYTE)
        if changed.size:
            self._poison_guard()
            return int(changed.size), int(changed[0])
        return 0, 0

    def free(self):
        if self.on_gpu and self._owner:
            from cuda.bindings import driver
            driver.cuMemFree(self.ptr)
        self.ptr = None

    def __del__(self):
        try:
            if self._owner and self.ptr is not None and not _device.lost:
                from cuda.bindings import driver
                driver.cuMemFree(self.ptr)
        except Exception:
            pass

    def __repr__(self):
        where = f"0x{self.ptr:x}" if self.on_gpu else "no GPU"
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, {where})"


def _shape(shape, who: str) -> tuple[int, ...]:
    """A shape as a tuple of ints, or a ValueError naming `who` and the size that is not one (numpy's own words, from
    deep inside it, do not say which call or what to do)."""
    if shape is None or isinstance(shape, (str, bytes)):
        raise ValueError(f"{who}: shape {shape!r}: give an int or a tuple of ints, e.g. (rows, cols)")
    shape = (shape,) if np.isscalar(shape) else tuple(shape)
    bad = [n for n in shape if not whole(n)]
    if bad:
        raise ValueError(f"{who}: shape {shape}: each size must be a whole number >= 0, not {bad[0]!r} "
                         "(use // for a size computed by division)")
    return tuple(int(n) for n in shape)


def empty(shape, dtype=np.float32, *, poison: bool = True) -> DeviceArray:
    """Uninitialised device memory, poisoned unless told otherwise."""
    dtype = np.dtype(dtype)
    shape = _shape(shape, "empty")
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if gpu() is None:
        return DeviceArray(shape, dtype, None)
    from cuda.bindings import driver
    ensure_usable()
    # under compute-sanitizer, memcheck sees a store past the end itself, of every array: no guard there
    guard = GUARD_BYTES if poison and not hooks.mode.sanitizer else 0
    ptr = int(_check(driver.cuMemAlloc(max(nbytes + guard, 1))))
    arr = DeviceArray(shape, dtype, ptr, guard=guard)
    if guard:
        _GUARDED[ptr] = arr
    return arr.poison() if poison else arr


# PyTorch's element types that numpy lacks, as ml_dtypes names them; PyTorch's __cuda_array_interface__ describes
# no tensor of these (older versions raise KeyError), so interface() reads such a tensor itself.
_TORCH_ONLY = ("bfloat16", "float8_e4m3fn", "float8_e5m2")


def _is_torch(a) -> bool:
    return type(a).__module__.split(".")[0] == "torch"


def _torch_dtype(t) -> np.dtype:
    name = str(t.dtype).removeprefix("torch.")
    try:
        return np.dtype(getattr(ml_dtypes, name)) if name in _TORCH_ONLY else np.dtype(name)
    except TypeError:
        raise TypeError(f"a PyTorch tensor of {t.dtype}: numpy has no such type; convert it (t.float())") from None


def interface(a) -> dict | None:
    """What a GPU array of another library (Numba, CuPy, PyTorch: `__cuda_array_interface__`) says it is:
    {"ptr", "shape", "strides" (None: C order), "dtype"}; None for anything that is not one (host memory, a number).
    A bf16 element reads as ml_dtypes' bfloat16 (the interface's `<V2`); a PyTorch bf16 or fp8 tensor, which gives
    no interface, is read from the tensor itself."""
    try:
        cai = a.__cuda_array_interface__
    except AttributeError:
        return None
    except (KeyError, TypeError, RuntimeError):
        if not _is_torch(a):
            raise
        if a.requires_grad:    # PyTorch's own rule for handing its memory to another library
            raise TypeError("a PyTorch tensor that requires grad: pass t.detach() (the same memory)") from None
        strides = None if a.is_contiguous() else tuple(n * a.element_size() for n in a.stride())
        return {"ptr": int(a.data_ptr()), "shape": tuple(a.shape), "strides": strides, "dtype": _torch_dtype(a)}
    dtype = np.dtype(cai["typestr"])
    if dtype == np.dtype("V2") and bfloat16 is not None:
        dtype = bfloat16
    strides = cai.get("strides")
    return {"ptr": int(cai["data"][0]), "shape": tuple(int(n) for n in cai["shape"]),
            "strides": tuple(strides) if strides is not None else None, "dtype": dtype}


def torch_to_numpy(t) -> np.ndarray:
    """A numpy copy of a PyTorch tensor on any device; bf16 and fp8 as ml_dtypes' types over the same bits."""
    import torch
    t = t.detach().cpu().contiguous()
    dtype = _torch_dtype(t)
    if str(t.dtype).removeprefix("torch.") in _TORCH_ONLY:
        return t.view({1: torch.uint8, 2: torch.int16}[dtype.itemsize]).numpy().view(dtype)
    return t.numpy()


def guarded_view(a) -> "DeviceArray | None":
    """The guarded output (empty(poison=True)) that `a`, an array of another library (interface()), views whole
    and as it is: same address, shape and element type, C order. None for anything else (a slice, a reshaped or
    retyped view, a copy, an array of its own): check() then compares a host copy of `a`."""
    try:
        cai = interface(a)
    except Exception:        # one this process cannot read
        return None
    arr = _GUARDED.get(cai["ptr"]) if cai else None
    if arr is None or arr.ptr != cai["ptr"] or cai["shape"] != arr.shape or cai["dtype"] != arr.dtype:
        return None
    strides = cai["strides"]
    return arr if strides is None or arr.size <= 1 or strides == arr.strides_bytes else None


def host_buffer(a, buffers: list, index: dict) -> int:
    """The index in `buffers` of the host copy of device array `a` (a DeviceArray or a contiguous array of another
    library), for a child process that rebuilds a launch: one copy per address, so that two arguments over the same
    memory (an array and a tensor map over it) stay one buffer there, as large as the largest of them (a tensor map
    over one page of a pool may come before the pool). `index` maps addresses to indices; both grow here."""
    if not isinstance(a, DeviceArray):
        cai = interface(a)
        a = DeviceArray(cai["shape"], cai["dtype"], cai["ptr"], owner=False)
    if a.ptr not in index:
        index[a.ptr] = len(buffers)
        buffers.append(a.to_host())
    elif buffers[index[a.ptr]].nbytes < a.nbytes:
        buffers[index[a.ptr]] = a.to_host()
    return index[a.ptr]


def empty_like(a, *, poison: bool = True) -> DeviceArray:
    return empty(a.shape, a.dtype, poison=poison)


def to_device(host: np.ndarray) -> DeviceArray:
    host = np.ascontiguousarray(host)
    return empty(host.shape, host.dtype, poison=False).copy_from(host)


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
LOST_HINT = ("The GPU can no longer be used from this process: restart it (in a notebook, its kernel; your "
             "files are untouched). To demonstrate a failure without losing the process, run it with "
             "fb.isolated(...), which uses a separate one.")


def ensure_usable():
    if _device.lost:
        raise KernelFault(f"the GPU is unusable in this process since an earlier failure ({_device.lost[:200]}). "
                          + LOST_HINT)


# Errors after which the context is unusable until it is destroyed (CUDA Driver API, cuCtxSynchronize).
STICKY = ("CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION",
          "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_INVALID_PC",
          "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_ASSERT", "CUDA_ERROR_LAUNCH_TIMEOUT")


def sync():
    """Wait for the GPU; raise the error of any kernel that failed since the last sync.

    A fault that poisons the context (an illegal address, a trap) raises KernelFault, or BarrierTimeout
    when a debug build reported a hung wait; either way the process can no longer use the GPU.
    """
    if gpu() is None:
        return
    from cuda.bindings import driver
    ensure_usable()
    err, = driver.cuCtxSynchronize()
    if err == driver.CUresult.CUDA_SUCCESS:
        return
    raise_pending_debug_report()
    if err.name in STICKY:
        _, msg = driver.cuGetErrorString(err)
        _device.lost = f"{err.name} ({msg.decode() if msg else ''})"
        raise KernelFault(f"a kernel failed: {_device.lost}. To find the faulting access, run it under "
                          f"compute-sanitizer (in the course, make sanitize) or check its indices on a small size. {LOST_HINT}")
    _check((err,))


def random(shape, dtype=np.float32, *, seed=None, low=None, high=None) -> np.ndarray:
    """Random host data, never zero: uniform in [low, high), rounded to `dtype`. By default floats lie in [-1, 1)
    and integers in [-100, 100) ([1, 100) unsigned); an integer range that holds 0 gives each nonzero value in it
    alike, and a float that rounds to zero (a tiny value in fp8) is drawn again, so a kernel that skips an element
    cannot pass by the zero it left behind."""
    dtype = np.dtype(dtype)
    shape = _shape(shape, "random")
    if seed is not None and not whole(seed):
        raise ValueError(f"random: seed={seed!r}: a whole number >= 0 (or None for fresh randomness)")
    rng = np.random.default_rng(seed)
    if dtype.kind == "b":
        raise ValueError("random: a bool array that is never False is all True; for random bools use "
                         "np.random.default_rng(seed).integers(0, 2, size).astype(bool)")
    if dtype.kind in "iu":
        lo = int(low) if low is not None else (1 if dtype.kind == "u" else -100)
        hi = int(high) if high is not None else 100
        if dtype.kind == "u" and lo < 0:
            raise ValueError(f"random: low={lo} for {dtype}, which has no negative values")
        zero_inside = lo <= 0 < hi
        if hi - lo - zero_inside < 1:
            raise ValueError(f"random: [{lo}, {hi}) holds no nonzero integer: pick a wider range")
        v = rng.integers(lo, hi - zero_inside, size=shape)
        return (v + (zero_inside & (v >= 0))).astype(dtype)          # 0 .. hi-2 become 1 .. hi-1
    lo, hi = (-1.0 if low is None else low), (1.0 if high is None else high)
    out = np.asarray(rng.uniform(lo, hi, size=shape)).astype(dtype)
    for _ in range(16):
        zero = out == 0
        if not zero.any():
            return out
        out[zero] = rng.uniform(lo, hi, size=int(zero.sum())).astype(dtype)
    raise ValueError(f"random: [{lo}, {hi}) rounds to zero in {dtype}: pick a range with nonzero {dtype} values")
