"""A lab's probe: what a small device function answers, read back through a probe kernel of one block.

Where this machine can launch the probe, it runs on the GPU; elsewhere its PTX runs on the host
(`Kernel.run_on_host`, feedbeast.host_ptx), so a learner without an H100 still learns whether lab 07's `raster` or
lab 09's `kv_tiles` and `visible` are right. A probe whose PTX uses what the host run does not model is skipped
there, with the reason, never passed.
"""
from __future__ import annotations

import numpy as np

from .. import memory, skip
from ..device import gpu, runs_on
from ..host_ptx import HostRunUnsupported


def read_back(kernel, shape, *args, threads: int = 256, dtype=np.int32, host_only: bool = False):
    """(out, how) for `kernel(out, *args)` run as one block of `threads`: out poisoned first (all bytes 0xff), then
    written by a launch (how: None) or by a run on the host (how: the HostRun); how is a Skipped where neither can
    run it. Hand both to fb.check (`after=how`). host_only: run on the host on every machine, for a probe whose build
    stands in for something a launch would really do (lab 10's conversions kept as bits); its pointer arguments
    are numpy arrays then."""
    g, arch = gpu(), kernel.module.needs_arch
    if not host_only and g is not None and (arch is None or runs_on(arch, g.cc)):
        out = memory.empty(shape, dtype)
        return out, kernel.launch(1, threads, out, *args)
    out = np.empty(shape, dtype)
    out.view(np.uint8)[...] = memory.POISON_BYTE      # -1 in every integer type, signed or not
    try:
        return out, kernel.run_on_host(1, threads, out, *args)
    except HostRunUnsupported as e:
        if host_only:
            return out, skip.Skipped(f"this probe runs on the host, which cannot run it: {e}", kernel.name)
        return out, skip.Skipped(f"needs {arch or 'a GPU'} to run: {e}", kernel.name)
