"""The GPU in this machine, or a clear statement that there is none.

Chapter 00 opens with describe(): the GPU here, or none.

`gpu()` returns a `Gpu` (or None); `describe()` prints one paragraph a learner can read.
Arch strings follow NVRTC: "sm_90a" is the arch-specific Hopper target (wgmma, setmaxnreg),
"sm_90" the portable one.
"""
from __future__ import annotations

import dataclasses
import functools
import re

from .errors import FeedbeastError

lost = None   # why this process can no longer use the GPU (a sticky error), once that happened

# Every target the pinned NVRTC of both CUDA variants (12.9 and 13.x) compiles for, from Turing on: sm_87 is
# Jetson Orin, sm_103 the B300, sm_121 the DGX Spark.
KNOWN_ARCHS = ("sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_103",
               "sm_103a", "sm_120", "sm_120a", "sm_121", "sm_121a")


def parse_arch(arch: str) -> tuple[int, int, bool]:
    """'sm_90a' -> (9, 0, True). Raises a FeedbeastError naming the accepted forms."""
    m = re.fullmatch(r"sm_(\d+)(\d)(a?)", str(arch))
    if not m or str(arch) not in KNOWN_ARCHS:
        raise FeedbeastError(
            f"unknown arch {arch!r}: use one of {', '.join(KNOWN_ARCHS)} "
            "(the 'a' suffix selects the arch-specific target needed by wgmma, setmaxnreg and tcgen05)")
    return int(m.group(1)), int(m.group(2)), bool(m.group(3))


def runs_on(arch: str, cc: tuple[int, int] | None) -> bool:
    """Can a cubin built for `arch` run on a GPU of compute capability `cc`?

    Cubins run on the same major version with an equal or higher minor; arch-specific ('a')
    cubins only on exactly that compute capability.
    """
    if cc is None:
        return False
    major, minor, specific = parse_arch(arch)
    if specific:
        return cc == (major, minor)
    return cc[0] == major and cc[1] >= minor


@dataclasses.dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    cc: tuple[int, int]
    sm_count: int
    smem_per_block_optin: int     # bytes a block may use after opting in
    smem_per_block_default: int   # bytes without opting in (48 KB)
    smem_per_sm: int
    l2_bytes: int
    sm_clock_mhz: int
    mem_clock_mhz: int
    bus_width_bits: int
    driver_version: int           # e.g. 13000 for CUDA 13.0
    nvrtc_version: tuple[int, int]
    total_memory: int

    @property
    def arch(self) -> str:
        """The best NVRTC target for this GPU: arch-specific from Hopper on."""
        base = f"sm_{self.cc[0]}{self.cc[1]}"
        return base + "a" if self.cc[0] >= 9 else base

    @property
    def slug(self) -> str:
        """A folder name for results: 'nvidia-h100-80gb-hbm3'."""
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")

    def describe(self) -> str:
        d = self.driver_version
        return (f"{self.name}: {self.arch} (compute capability {self.cc[0]}.{self.cc[1]}), "
                f"{self.sm_count} SMs at up to {self.sm_clock_mhz} MHz, "
                f"{self.total_memory / 2**30:.0f} GiB, L2 {self.l2_bytes / 2**20:.0f} MiB, "
                f"shared memory {self.smem_per_block_optin // 1024} KB per block (opt-in) / "
                f"{self.smem_per_sm // 1024} KB per SM; driver CUDA {d // 1000}.{d % 1000 // 10}, "
                f"NVRTC {self.nvrtc_version[0]}.{self.nvrtc_version[1]}")


def cuda_wheels(what: str = "compiles with NVRTC") -> None:
    """Raise, saying what to install, when CUDA's Python wheels (cuda-bindings, cuda-core) are missing: a plain
    `pip install feedbeast` has none (they are its cu13 and cu12 extras). Other packages' `cuda` folders make `cuda`
    a namespace package, so their absence is an ImportError ("cannot import name 'bindings'"), not always a
    ModuleNotFoundError."""
    try:
        import cuda.bindings  # noqa: F401
        import cuda.core  # noqa: F401
    except ImportError as e:
        from .errors import MISSING_CUDA_WHEELS, install_command
        raise ModuleNotFoundError(f"{e}: feedbeast {what} through CUDA's Python wheels, {MISSING_CUDA_WHEELS}: "
                                  f"{install_command('cu13')}", name="cuda.bindings") from None


def nvrtc_version() -> tuple[int, int]:
    cuda_wheels()
    from cuda.bindings import nvrtc
    err, major, minor = nvrtc.nvrtcVersion()
    return (major, minor)


def _check(result):
    """Unwrap a cuda.bindings driver result tuple, raising on error."""
    from cuda.bindings import driver
    err, *rest = result
    if err != driver.CUresult.CUDA_SUCCESS:
        _, msg = driver.cuGetErrorString(err)
        raise FeedbeastError(f"CUDA driver error {err.name}: {msg.decode() if msg else ''}")
    return rest[0] if len(rest) == 1 else tuple(rest)


@functools.lru_cache(maxsize=None)
def gpu(index: int = 0) -> Gpu | None:
    """The GPU at `index` with its context made current, or None when this machine has none."""
    try:
        from cuda.bindings import driver
        from cuda.core import Device
        err, = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return None
        if _check(driver.cuDeviceGetCount()) <= index:
            return None
        dev = Device(index)
        dev.set_current()
    except Exception:   # no driver library, no device: this is the "no GPU" answer, not an error
        return None
    A = driver.CUdevice_attribute
    h = _check(driver.cuDeviceGet(index))

    def attr(a):
        return _check(driver.cuDeviceGetAttribute(a, h))
    return Gpu(
        index=index,
        name=_check(driver.cuDeviceGetName(256, h)).split(b"\0")[0].decode(),
        cc=(attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)),
        sm_count=attr(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        smem_per_block_optin=attr(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        smem_per_block_default=attr(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
        smem_per_sm=attr(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
        l2_bytes=attr(A.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
        sm_clock_mhz=attr(A.CU_DEVICE_ATTRIBUTE_CLOCK_RATE) // 1000,
        mem_clock_mhz=attr(A.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE) // 1000,
        bus_width_bits=attr(A.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
        driver_version=_check(driver.cuDriverGetVersion()),
        nvrtc_version=nvrtc_version(),
        total_memory=_check(driver.cuDeviceTotalMem(h)),
    )


def current_arch() -> str | None:
    g = gpu()
    return g.arch if g else None


def describe() -> str:
    """One line about the GPU here, or about its absence (what still works without one)."""
    g = gpu()
    if g is None:
        v = nvrtc_version()
        return (f"no GPU: CUDA C++ kernels still compile (NVRTC {v[0]}.{v[1]}) and their SASS and resources are "
                "checked, Numba kernels run in Numba's simulator; launches, checks and timings print 'skipped'.")
    return g.describe()
