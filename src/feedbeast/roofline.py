"""Datasheet figures and the roofline: how many flops a byte must pay for.

Chapter 00 explains the roofline and the ridge point.

Figures are dense (no sparsity) tensor-core bf16 rates and HBM bandwidths from NVIDIA's datasheets:
- A100 SXM4 80GB: 312 TFLOP/s bf16, 2.039 TB/s (NVIDIA A100 Tensor Core GPU datasheet, 2021).
- H100 SXM5 80GB: 989 TFLOP/s bf16, 3.35 TB/s (NVIDIA H100 Tensor Core GPU datasheet, 2023).
- H200 SXM 141GB: 989 TFLOP/s bf16, 4.8 TB/s (NVIDIA H200 Tensor Core GPU datasheet, 2024).
- B200 (HGX B200, per GPU): 2.25 PFLOP/s bf16 dense, 8 TB/s (NVIDIA HGX B200 datasheet, 2024;
  the sheet lists 4.5 PFLOP/s with 2:4 sparsity).
"""
from __future__ import annotations

DATASHEET = {
    #  name              bf16 TFLOP/s  DRAM TB/s
    "A100 SXM4 80GB": (312.0, 2.039),
    "H100 SXM5 80GB": (989.0, 3.35),
    "H200 SXM 141GB": (989.0, 4.8),
    "B200 (HGX)": (2250.0, 8.0),
}


def ridge_point(tflops: float, tbps: float) -> float:
    """Arithmetic intensity (flop/byte) at which a kernel stops being memory-bound."""
    return tflops / tbps


def gemm_intensity(m: int, n: int, k: int, bytes_per_elem: int = 2) -> float:
    """flops per DRAM byte of C = A B if A and B are read once and C written once."""
    return 2.0 * m * n * k / (bytes_per_elem * (m * k + k * n + m * n))


def plot_roofline(ceilings: dict, points: dict | None = None, ax=None):
    """ceilings: {label: (TFLOP/s, TB/s)}; points: {label: (flop/byte, TFLOP/s)}. Returns the Axes."""
    import matplotlib.pyplot as plt
    import numpy as np
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    x = np.logspace(-1, 4, 200)
    for i, (label, (tf, tb)) in enumerate(ceilings.items()):
        line, = ax.loglog(x, np.minimum(tf, x * tb), lw=2, label=f"{label}: ridge at {tf / tb:.0f} flop/B")
        ax.axvline(tf / tb, color=line.get_color(), lw=0.6, ls=":")
    for label, (ai, tf) in (points or {}).items():
        ax.plot([ai], [tf], "o", color="k")
        ax.annotate(label, (ai, tf), textcoords="offset points", xytext=(5, -12), fontsize=8)
    ax.set_xlabel("arithmetic intensity (flop per DRAM byte)")
    ax.set_ylabel("attainable TFLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return ax
