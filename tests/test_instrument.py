"""The instrumented hazard build (feedbeast/hazards/instrument.py): its PTX is of the same build as the cubin it
stands for, and the recorder calls it adds cost the kernel no registers, stack or spills.

CPU only. The ptxas comparison needs a ptxas at least as new as NVRTC (the toolkit wheels, PATH or a CUDA toolkit):
without one it is skipped by name.
"""
from __future__ import annotations

import importlib
import re
import subprocess
from pathlib import Path

import pytest

import feedbeast as fb
from feedbeast import hooks
from feedbeast.hazards.gpu import hazard_module
from feedbeast.hazards.instrument import define_flags, instrument, ptx_of

ROOT = Path(__file__).resolve().parents[1]
fbc = importlib.import_module("feedbeast.compile")     # the module (fb.compile is its function)

# An mbarrier wait: in a hazard build it needs fb/debug.cuh's clock and time-out (FB_DEBUG).
WAITS = r"""
#include <fb/mbarrier.cuh>
extern "C" __global__ void k(float* y) {
  __shared__ alignas(8) cuda::std::uint64_t bar;
  __shared__ float s[32];
  if (threadIdx.x == 0) { fb::mbar::init(&bar, 32); fb::mbar::fence_init(); }
  __syncthreads();
  s[threadIdx.x] = 1.f;
  fb::mbar::arrive(&bar);
  fb::mbar::wait(&bar, 0, "bar");
  y[threadIdx.x] = s[threadIdx.x ^ 1];
}
"""


def _cubin_defines(monkeypatch, **kw) -> tuple:
    """A fresh compile of WAITS with these compile() arguments: (the Module, the -D flags NVRTC was given)."""
    seen = []
    real = fbc._nvrtc

    def spy(source, name, flags):
        seen.append(flags)
        return real(source, name, flags)
    monkeypatch.setattr(fbc, "_nvrtc", spy)
    mod = fb.compile(WAITS, "sm_90a", name="waits.cu", use_cache=False, **kw)
    prefix = b"--define-macro="
    return mod, sorted(f[len(prefix):].decode() for f in seen[-1] if f.startswith(prefix))


BUILDS = {"hazards=True": dict(hazards=True), "debug=True": dict(debug=True),
          "hazard_module": dict(defines={"FB_HAZARDS": 1, "FB_DEBUG": 1})}


@pytest.mark.parametrize("sanitizer", [False, True], ids=["plain", "make-sanitize"])
@pytest.mark.parametrize("build", list(BUILDS))
def test_the_ptx_is_compiled_with_the_defines_of_the_cubin(monkeypatch, build, sanitizer):
    # compile() keeps only the defines it was given; FB_DEBUG (debug, hazards) and the sanitizer's longer wait
    # time-out are added on the way to NVRTC. The PTX of the instrumented build must get the same ones.
    monkeypatch.setattr(hooks.mode, "sanitizer", sanitizer)
    mod, cubin_flags = _cubin_defines(monkeypatch, **BUILDS[build])
    assert sorted(define_flags(mod)) == cubin_flags
    if build != "debug=True":
        timeout = re.findall(r"setp\.\w+\.u64\s+%p\d+, %rd\d+, (\d+);", ptx_of(mod))
        assert timeout == [str((200_000_000_000 if sanitizer and build != "hazard_module" else 2_000_000_000) + 1)]


def test_a_hazards_true_module_with_a_wait_gives_its_instrumented_ptx():
    # Before the PTX took FB_DEBUG from Module.debug, NVRTC refused this source (the hazard build's wait uses
    # fb::globaltimer_ns and FB_WAIT_TIMEOUT_NS, which only FB_DEBUG defines).
    mod = fb.compile(WAITS, "sm_90a", hazards=True, name="waits.cu")
    res = instrument(ptx_of(mod), "waits.cu")
    assert "fb_debug_report" in res and res.sites == 2 and res.skipped == []


def _ptxas():
    from feedbeast.errors import FeedbeastError
    from feedbeast.sass import tool
    try:
        path = tool("ptxas")
    except FeedbeastError:
        return None
    m = re.search(r"release (\d+)\.(\d+)", subprocess.run([path, "--version"], capture_output=True,
                                                           text=True).stdout)
    from feedbeast.device import nvrtc_version
    return path if m and (int(m[1]), int(m[2])) >= tuple(nvrtc_version())[:2] else None


def _resources(ptxas, ptx: str, kernel: str, tmp: Path) -> tuple:
    """(registers, stack frame, spill stores, spill loads) ptxas gives `kernel` of this PTX for sm_90a."""
    src = tmp / "k.ptx"
    src.write_text(ptx)
    r = subprocess.run([ptxas, "-arch=sm_90a", "-v", "-o", str(tmp / "k.cubin"), str(src)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    block = r.stderr.split(f"Function properties for {kernel}\n", 1)[1]
    frame, stores, loads = map(int, re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes "
                                              r"spill loads", block).groups())
    return int(re.search(r"Used (\d+) registers", block)[1]), frame, stores, loads


@pytest.mark.parametrize("dq", ["tma-reduce", "atomics"])
def test_the_instrumented_attention_backward_keeps_every_site_and_its_register_split(tmp_path, dq):
    # Chapter 09's backward at d = 128 (a producer warpgroup and two consumers at up to 240 registers by setmaxnreg):
    # its instrumented build adds 38 recorder calls (dS^T stored to shared memory by 4 stmatrix, the dQ tile by 16
    # stores; L and D read by the consumers, 16, and written by the producer, 2), 22 without the staged tile, and
    # skips none. ptxas must still take it at the launch bound's 168 registers (65536 / 384). Around calls made while
    # the consumers hold most of their 240 registers it spills (3 KB here, 11 KB in rung 6's instrumented build):
    # that changes the trace's timing, not the order of the events the checker replays.
    ptxas = _ptxas()
    if ptxas is None:
        pytest.skip("needs a ptxas at least as new as NVRTC (a CUDA toolkit's bin/ on PATH)")
    from feedbeast.course.notebook import load
    mod = load(ROOT / "chapters/09-attention.ipynb").compile("bwd", "sm_90a", **({"DQ_TMA": 0} if dq == "atomics"
                                                                                   else {}))
    hz = hazard_module(mod)
    plain = ptx_of(hz)
    res = instrument(plain, hz.name)
    body = res.split(".entry attn_bwd_d128")[1].split(".entry ")[0]
    assert body.count("call fb_hz_shared") == (38 if dq == "tma-reduce" else 22) and res.skipped == []
    assert _resources(ptxas, plain, "attn_bwd_d128", tmp_path)[0] == 168
    assert _resources(ptxas, res, "attn_bwd_d128", tmp_path)[0] == 168
