"""Physical peaks: what the hardware cannot exceed, from this GPU's clocks and SM count.

Chapter 00 explains physical peaks; chapter 05 checks a shared-memory figure against one.

A same-run ceiling (feedbeast.ceilings) says how close a kernel is to the best *software* here; a physical
peak says what no software can beat. A result above its peak is a bug of the experiment (loads the compiler
removed, bytes counted twice, data served by a cache the bench did not name), so bench() raises
PhysicalLimitError. The clock is the driver's CU_DEVICE_ATTRIBUTE_CLOCK_RATE (the maximum boost clock), so
each peak is an upper bound for any clock the GPU actually runs at.

    physical_peak("dram")     # PhysicalPeak: GB/s and the arithmetic with this GPU's numbers
    bound_of("ceiling/copy")  # "dram": the resource a same-run ceiling is bound by
"""
from __future__ import annotations

import dataclasses

from .errors import FeedbeastError


class PhysicalLimitError(FeedbeastError):
    """A benchmark reported more than its resource can physically deliver: the experiment is wrong."""


# FP32 results per clock per SM (fused multiply-add counts 2 flops): CUDA C++ Programming Guide,
# "Arithmetic Instructions", throughput table ("32-bit floating-point add, multiply, multiply-add"):
# 64 for compute capability 7.5 and 8.0, 128 for 8.6, 8.7, 8.9, 9.0, 10.x and 12.x.
FP32_FMA_PER_CLOCK_PER_SM = {(7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 7): 128, (8, 9): 128, (9, 0): 128, (10, 0): 128,
                             (10, 3): 128, (12, 0): 128}

# Dense bf16/fp16 tensor-core flops per clock per SM (fp32 accumulation, no sparsity), from the datasheet
# rate divided by SMs x the clock the datasheet used:
#   A100: 312 TFLOP/s / (108 SMs x 1.41 GHz) = 2048 (NVIDIA A100 Tensor Core GPU Architecture whitepaper, 2020);
#   H100 SXM5: 989.4 TFLOP/s / (132 SMs x 1.83 GHz) = 4096 (NVIDIA H100 Tensor Core GPU Architecture
#   whitepaper, 2022, table "NVIDIA Data Center GPUs compared");
#   B200: 2.25 PFLOP/s dense / (148 SMs x ~1.86 GHz) ~ 8192 (NVIDIA HGX B200 datasheet, 2024).
# The GPUs of one compute capability differ in their per-SM rate; the peak is the highest of them (a data-center
# part's), a bound for every GPU of the capability:
#   T4 (7.5): 65 TFLOP/s fp16 / (40 SMs x 1.59 GHz) ~ 1024 (NVIDIA T4 datasheet, 2019; Turing has no bf16 and
#   no tf32);
#   A10 (8.6): 125 TFLOP/s fp16 and bf16 / (72 SMs x 1.695 GHz) = 1024 (NVIDIA A10 datasheet, 2021);
#   L40S (8.9): 362 TFLOP/s fp16 and bf16 / (142 SMs x 2.52 GHz) ~ 1024, fp8 733 ~ 2048 (NVIDIA L40S
#   datasheet, 2023: 362.05 and 733, 1,466 with sparsity); the L4 gives the same per SM (121 / (58 x 2.04 GHz)),
#   the L40 half of it.
# GeForce cards of 8.6 and 8.9 (RTX 30 and 40) run fp16 and bf16 with fp32 accumulation, what the course's
# kernels use, at half that rate, and tf32 at a quarter (NVIDIA Ampere GA102 and Ada GPU architecture
# whitepapers, "with FP32 Accumulate"): there the bounds are twice what the tensor cores can give.
# tf32 is half of bf16 on the data-center parts (same sources). Other architectures: not known here, so not checked.
TENSOR_BF16_FLOPS_PER_CLOCK_PER_SM = {(7, 5): 1024, (8, 0): 2048, (8, 6): 1024, (8, 9): 1024, (9, 0): 4096,
                                      (10, 0): 8192}
NO_TF32 = {(7, 5)}
# Dense fp8 (e4m3/e5m2) is twice bf16 where the tensor cores have it: H100 SXM5 1979 TFLOP/s (the same
# whitepaper table), B200 4.5 PFLOP/s dense (the same datasheet), L40S above. The A100 has no fp8 tensor cores.
TENSOR_FP8_FLOPS_PER_CLOCK_PER_SM = {(8, 9): 2048, (9, 0): 8192, (10, 0): 16384}

# Shared memory: 32 banks, each 32 bits wide per clock (CUDA C++ Programming Guide, "Shared Memory" under
# compute capability 5.x and later, the same for 6.x-12.x): 128 bytes per clock per SM.
SMEM_BYTES_PER_CLOCK_PER_SM = 128

RESOURCES = ("dram", "l2", "smem", "fp32", "tensor", "tf32", "fp8")


@dataclasses.dataclass(frozen=True)
class PhysicalPeak:
    resource: str
    value: float | None      # GB/s for memories, TFLOP/s for pipes; None where no figure is known
    unit: str
    how: str                 # the arithmetic, with this GPU's numbers (with no GPU: why, and what a GPU recorded)
    skipped: bool = False    # no GPU here: nothing to compute it from

    def __repr__(self):
        if self.skipped:
            return f"skipped: {self.resource} peak: {self.how}"
        if self.value is None:
            return f"{self.resource} peak: unknown ({self.how})"
        return f"{self.resource} peak: {self.value:,.1f} {self.unit} = {self.how}"


def physical_peak(resource: str, g=None) -> PhysicalPeak:
    """The physical peak of `resource` on GPU `g` (default: this one):
    "dram" (GB/s), "l2" (GB/s, an upper bound), "smem" (GB/s), "fp32", "tensor" (bf16/fp16), "tf32", "fp8"
    (TFLOP/s)."""
    from .device import gpu
    g = g or gpu()
    if resource not in RESOURCES:
        raise ValueError(f"unknown resource {resource!r}: one of {', '.join(RESOURCES)}")
    if g is None:
        from . import hooks      # the course's results log, when installed: the peak a GPU run was held to
        line = hooks.recorded_line("peak", resource)
        return PhysicalPeak(resource, None, "", "needs a GPU, this machine has none" + (f"; {line}" if line else ""),
                            skipped=True)
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
    table = TENSOR_FP8_FLOPS_PER_CLOCK_PER_SM if resource == "fp8" else TENSOR_BF16_FLOPS_PER_CLOCK_PER_SM
    per = table.get(cc)
    if per is None:
        return PhysicalPeak(resource, None, "TFLOP/s", f"no tensor-core rate on record for compute capability {cc}")
    if resource == "tf32":
        if cc in NO_TF32:
            return PhysicalPeak(resource, None, "TFLOP/s", f"compute capability {cc} has no tf32 tensor cores")
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
