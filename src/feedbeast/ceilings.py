"""The ceilings every kernel is measured against, measured on this GPU in this process.

- "copy": device-to-device copy bandwidth (cuMemcpyDtoD), counting bytes read plus bytes written.
- "bf16", "fp16", "tf32", "fp32": cuBLAS matrix-product rate (cublasGemmEx) on n x n x n.

cuBLAS is called through ctypes from the library the CUDA toolkit or the nvidia-cublas wheel provides
(`pip install feedbeast[cublas]`); with neither, the matrix ceilings are skipped by name.
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools

import numpy as np

from .device import _check
from .skip import Skipped, needs_gpu

COPY_BYTES = 1 << 30   # 1 GiB each way: far beyond any L2


@functools.lru_cache(maxsize=None)
def copy_bandwidth(nbytes: int = COPY_BYTES):
    from cuda.bindings import driver
    from .bench import bench
    from .memory import empty
    skip = needs_gpu("copy ceiling")
    if skip is not None:
        return skip
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


def gemm(a, b, c, *, mode: str = "bf16"):
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
    from .bench import bench
    from .memory import bfloat16, empty, to_device, random
    skip = needs_gpu(f"{mode} cuBLAS ceiling")
    if skip is not None:
        return skip
    if not cublas_available():
        return Skipped("needs cuBLAS (a CUDA toolkit or `pip install feedbeast[cublas]`), none found",
                       f"{mode} cuBLAS ceiling")
    dt = {"bf16": bfloat16, "fp16": np.float16, "fp32": np.float32, "tf32": np.float32}[mode]
    a, b = to_device(random((n, n), dt, seed=1)), to_device(random((n, n), dt, seed=2))
    c = empty((n, n), np.float32 if mode in ("fp32", "tf32") else dt, poison=False)
    return bench(lambda: gemm(a, b, c, mode=mode), name=f"ceiling/cublas-{mode}/n={n}", flops=2.0 * n ** 3,
                 reps=10, sizes={"n": n})


def ceiling(which: str, size: int | None = None):
    """'copy' -> copy bandwidth (GB/s, size in bytes); 'bf16' | 'fp16' | 'tf32' | 'fp32' -> cuBLAS
    TFLOP/s on size x size x size."""
    if which == "copy":
        return copy_bandwidth(*([size] if size else []))
    if which in ("bf16", "fp16", "tf32", "fp32"):
        return matmul_rate(which, *([size] if size else []))
    raise ValueError(f"unknown ceiling {which!r}: use 'copy', 'bf16', 'fp16', 'tf32' or 'fp32'")


# ---------------------------------------------------------------------------------------------------------
# Physical peaks: what the hardware cannot exceed, from this GPU's clocks and SM count.
#
# A same-run ceiling (above) says how close a kernel is to the best *software* here; a physical peak says
# what no software can beat. A result above its peak is a bug of the experiment (loads the compiler removed,
# bytes counted twice, data served by a cache the bench did not name), so bench() raises PhysicalLimitError.
# The clock is the driver's CU_DEVICE_ATTRIBUTE_CLOCK_RATE (the maximum boost clock), so each peak is an
# upper bound for any clock the GPU actually runs at.
from .errors import FeedbeastError  # noqa: E402


class PhysicalLimitError(FeedbeastError):
    """A benchmark reported more than its resource can physically deliver: the experiment is wrong."""


# FP32 results per clock per SM (fused multiply-add counts 2 flops): CUDA C++ Programming Guide,
# "Arithmetic Instructions", throughput table ("32-bit floating-point add, multiply, multiply-add"):
# 64 for compute capability 8.0, 128 for 8.6, 8.7, 8.9, 9.0, 10.x and 12.x.
FP32_FMA_PER_CLOCK_PER_SM = {(8, 0): 64, (8, 6): 128, (8, 7): 128, (8, 9): 128, (9, 0): 128, (10, 0): 128,
                             (10, 3): 128, (12, 0): 128}

# Dense bf16/fp16 tensor-core flops per clock per SM (fp32 accumulation, no sparsity), from the datasheet
# rate divided by SMs x the clock the datasheet used:
#   A100: 312 TFLOP/s / (108 SMs x 1.41 GHz) = 2048 (NVIDIA A100 Tensor Core GPU Architecture whitepaper, 2020);
#   H100 SXM5: 989.4 TFLOP/s / (132 SMs x 1.83 GHz) = 4096 (NVIDIA H100 Tensor Core GPU Architecture
#   whitepaper, 2022, table "NVIDIA Data Center GPUs compared");
#   B200: 2.25 PFLOP/s dense / (148 SMs x ~1.86 GHz) ~ 8192 (NVIDIA HGX B200 datasheet, 2024).
# tf32 is half of these on all three (same sources). Other architectures: not known here, so not checked.
TENSOR_BF16_FLOPS_PER_CLOCK_PER_SM = {(8, 0): 2048, (9, 0): 4096, (10, 0): 8192}

# Shared memory: 32 banks, each 32 bits wide per clock (CUDA C++ Programming Guide, "Shared Memory" under
# compute capability 5.x and later, the same for 6.x-12.x): 128 bytes per clock per SM.
SMEM_BYTES_PER_CLOCK_PER_SM = 128

RESOURCES = ("dram", "l2", "smem", "fp32", "tensor", "tf32")


@dataclasses.dataclass(frozen=True)
class PhysicalPeak:
    resource: str
    value: float | None      # GB/s for memories, TFLOP/s for pipes; None where no figure is known
    unit: str
    how: str                 # the arithmetic, with this GPU's numbers

    def __repr__(self):
        if self.value is None:
            return f"{self.resource} peak: unknown ({self.how})"
        return f"{self.resource} peak: {self.value:,.1f} {self.unit} = {self.how}"


def physical_peak(resource: str, g=None) -> PhysicalPeak:
    """The physical peak of `resource` on GPU `g` (default: this one):
    "dram" (GB/s), "l2" (GB/s, an upper bound), "smem" (GB/s), "fp32", "tensor" (bf16/fp16), "tf32" (TFLOP/s)."""
    from .device import gpu
    g = g or gpu()
    if resource not in RESOURCES:
        raise ValueError(f"unknown resource {resource!r}: one of {', '.join(RESOURCES)}")
    if g is None:
        return PhysicalPeak(resource, None, "", "no GPU here")
    ghz, sms, cc = g.sm_clock_mhz / 1e3, g.sm_count, tuple(g.cc)
    if resource == "dram":
        # Two transfers per memory clock on the whole bus: CUDA C++ Best Practices Guide, "Theoretical
        # Bandwidth Calculation" (memory clock and bus width are the driver's device attributes).
        v = 2 * g.mem_clock_mhz * 1e6 * g.bus_width_bits / 8 / 1e9
        return PhysicalPeak("dram", v, "GB/s", f"2 x {g.mem_clock_mhz} MHz x {g.bus_width_bits} bit / 8")
    if resource in ("smem", "l2"):
        v = sms * SMEM_BYTES_PER_CLOCK_PER_SM * ghz
        how = f"{sms} SMs x {SMEM_BYTES_PER_CLOCK_PER_SM} B/clock x {ghz:.3f} GHz"
        if resource == "l2":
            # NVIDIA publishes no L2 bandwidth for Hopper; every byte from L2 enters an SM through its L1,
            # which moves at most 128 B per clock: a bound, not the L2's own rate.
            how += " (bound: what the SMs' L1s can take in; no published L2 figure)"
        return PhysicalPeak(resource, v, "GB/s", how)
    if resource == "fp32":
        per = FP32_FMA_PER_CLOCK_PER_SM.get(cc)
        if per is None:
            return PhysicalPeak("fp32", None, "TFLOP/s", f"no FP32 rate on record for compute capability {cc}")
        return PhysicalPeak("fp32", sms * per * 2 * ghz / 1e3, "TFLOP/s",
                            f"{sms} SMs x {per} FMA/clock x 2 x {ghz:.3f} GHz")
    per = TENSOR_BF16_FLOPS_PER_CLOCK_PER_SM.get(cc)
    if per is None:
        return PhysicalPeak(resource, None, "TFLOP/s", f"no tensor-core rate on record for compute capability {cc}")
    if resource == "tf32":
        per //= 2
    return PhysicalPeak(resource, sms * per * ghz / 1e3, "TFLOP/s", f"{sms} SMs x {per} flop/clock x {ghz:.3f} GHz")


def bound_of(ceiling_name: str | None) -> str | None:
    """The resource a same-run ceiling is bound by: copy -> dram, cuBLAS bf16/fp16 -> tensor, fp32 -> fp32."""
    if not ceiling_name:
        return None
    n = ceiling_name.lower()
    if "copy" in n:
        return "dram"
    if "tf32" in n:
        return "tf32"
    if "fp32" in n:
        return "fp32"
    if "bf16" in n or "fp16" in n:
        return "tensor"
    return None
