"""The ceilings every kernel is measured against, measured on this GPU in this process.

Chapter 00 measures both ceilings and explains why they are measured in the same run.

- "copy": device-to-device copy bandwidth (cuMemcpyDtoD), counting bytes read plus bytes written.
- "bf16", "fp16", "tf32", "fp32": cuBLAS matrix-product rate (cublasGemmEx) on n x n x n.

cuBLAS is called through ctypes from the library the CUDA toolkit or the nvidia-cublas wheel provides
(`pip install feedbeast[cublas]`); with neither, the matrix ceilings are skipped by name.
What no software can beat, the hardware's physical peaks, is feedbeast.peaks.
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools

import numpy as np

from . import hooks
from .bench import bench, with_recorded
from .device import _check
from .errors import whole
# The physical peaks live in feedbeast.peaks (bench compares every result with them): importable from here too.
from .peaks import (FP32_FMA_PER_CLOCK_PER_SM, RESOURCES, SMEM_BYTES_PER_CLOCK_PER_SM,  # noqa: F401
                    TENSOR_BF16_FLOPS_PER_CLOCK_PER_SM, PhysicalLimitError, PhysicalPeak, bound_of, physical_peak)
from .skip import Skipped, needs_gpu

COPY_BYTES = 1 << 30   # 1 GiB each way: far beyond any L2


@functools.lru_cache(maxsize=None)
def copy_bandwidth(nbytes: int = COPY_BYTES):
    skip = needs_gpu("copy ceiling")     # no GPU (no CUDA wheels either): a skip, as every GPU step
    if skip is not None:
        return with_recorded(skip, "ceiling/copy")
    from cuda.bindings import driver
    from .memory import empty
    src = empty(nbytes, np.uint8, poison=False).fill_bytes(0x5A)
    dst = empty(nbytes, np.uint8, poison=False)
    return bench(lambda: _check(driver.cuMemcpyDtoDAsync(dst.ptr, src.ptr, nbytes, driver.CUstream(0))),
                 name="ceiling/copy", nbytes=2 * nbytes, reps=20, sizes={"bytes": nbytes})


# cuBLAS constants (cublas_api.h, library_types.h)
_CUDA_R = {"fp32": 0, "fp16": 2, "bf16": 14}
_COMPUTE_32F, _COMPUTE_32F_FAST_TF32 = 68, 77


@functools.lru_cache(maxsize=None)
def _cublas():
    import cuda.pathfinder as pf
    lib = ctypes.CDLL(pf.load_nvidia_dynamic_lib("cublas").abs_path)
    handle = ctypes.c_void_p()
    if lib.cublasCreate_v2(ctypes.byref(handle)):
        raise RuntimeError("cublasCreate failed")
    return lib, handle


def cublas_available() -> bool:
    try:
        _cublas()
        return True
    except Exception:
        return False


def cublas_gemm(a, b, c, *, mode: str = "bf16"):
    """c = a @ b on row-major device arrays through cuBLAS (fp32 accumulation).

    mode: "bf16"/"fp16" (inputs of that type), "fp32" (strict fp32), "tf32" (fp32 inputs, tf32 math).
    """
    lib, handle = _cublas()
    m, k = a.shape
    k2, n = b.shape
    if k != k2 or c.shape != (m, n):
        raise ValueError(f"gemm shapes {a.shape} @ {b.shape} -> {c.shape} do not match")
    in_t = _CUDA_R["fp32" if mode == "tf32" else mode]
    out_t = _CUDA_R["fp32"] if c.dtype == np.float32 else in_t
    compute = _COMPUTE_32F_FAST_TF32 if mode == "tf32" else _COMPUTE_32F
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
    # Row-major C = A B is column-major C^T = B^T A^T: swap the operands, no transposes.
    st = lib.cublasGemmEx(handle, 0, 0, n, m, k, ctypes.byref(one), ctypes.c_void_p(b.ptr), in_t, n,
                          ctypes.c_void_p(a.ptr), in_t, k, ctypes.byref(zero), ctypes.c_void_p(c.ptr),
                          out_t, n, compute, -1)
    if st:
        raise RuntimeError(f"cublasGemmEx failed with status {st}")


@functools.lru_cache(maxsize=None)
def matmul_rate(mode: str = "bf16", n: int = 8192):
    from .memory import bfloat16, empty, to_device, random
    skip = needs_gpu(f"{mode} cuBLAS ceiling at n = {n}")   # two sizes in one cell: told apart
    if skip is not None:
        return with_recorded(skip, f"ceiling/cublas-{mode}/n={n}")
    try:
        _cublas()
    except Exception as e:   # not found, or found and refused to start (cuBLAS 13 on a CUDA 12 driver)
        return Skipped(f"needs cuBLAS, which did not load ({type(e).__name__}: {e}): a CUDA toolkit's, or "
                       "`pip install \"feedbeast[cublas]\"` with a CUDA 13 driver (`pip install nvidia-cublas-cu12` "
                       "with a CUDA 12 one)", f"{mode} cuBLAS ceiling at n = {n}")
    dt = {"bf16": bfloat16, "fp16": np.float16, "fp32": np.float32, "tf32": np.float32}[mode]
    a, b = to_device(random((n, n), dt, seed=1)), to_device(random((n, n), dt, seed=2))
    c = empty((n, n), np.float32 if mode in ("fp32", "tf32") else dt, poison=False)
    return bench(lambda: cublas_gemm(a, b, c, mode=mode), name=f"ceiling/cublas-{mode}/n={n}", flops=2.0 * n ** 3,
                 reps=10, sizes={"n": n})


def ceiling(which: str, size: int | None = None):
    """'copy' -> copy bandwidth (GB/s, size in bytes); 'bf16' | 'fp16' | 'tf32' | 'fp32' -> cuBLAS
    TFLOP/s on size x size x size."""
    if which not in ("copy", "bf16", "fp16", "tf32", "fp32"):    # said before any skip, on every machine
        raise ValueError(f"unknown ceiling {which!r}: use 'copy', 'bf16', 'fp16', 'tf32' or 'fp32'")
    if size is not None and not whole(size, 1):
        raise ValueError(f"ceiling {which!r}: size={size!r}: " + ("the bytes copied" if which == "copy" else
                         "n of the n x n x n GEMM") + ", a whole number >= 1 (or None for the default)")
    if hooks.mode.untimed:     # make sanitize: nothing is timed there
        return Skipped(hooks.mode.untimed, f"{which} ceiling")
    if which == "copy":
        return copy_bandwidth(*([size] if size else []))
    return matmul_rate(which, *([size] if size else []))
