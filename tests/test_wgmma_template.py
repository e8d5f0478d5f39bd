"""fb/wgmma.cuh's one template over N (chapter 05 teaches the instruction, chapters 06-10 use it).

CPU only, by compiling for sm_90a: for several N of every form, the PTX the template writes names N/2
accumulator registers and binds the i-th one to d[i] (PTX ISA, "wgmma.mma_async": an f32 accumulator of
shape m64nNk16 / m64nNk32 is N/2 registers per thread), the operands after them are the descriptors, the
A fragment, the scale-d predicate and the transpose immediates; the SASS holds the HGMMA / QGMMA of that
shape; an N the instruction does not have is a compile error that says which N are allowed.
"""
import re

import pytest

import feedbeast as fb
from feedbeast.compile import include_path
from feedbeast.errors import CompileError

# One kernel per form: d[i] is loaded from p[i] (volatile: one scalar load each, so that the PTX register of
# d[i] can be told by its load's offset), one wgmma, d stored back.
KERNEL = r'''
#include <fb/wgmma.cuh>
extern "C" __global__ void k(float* p, unsigned long long da, unsigned long long db, int acc) {
  constexpr int R = NN / 2;
  float d[R];
  const volatile float* vp = p;
#pragma unroll
  for (int i = 0; i < R; ++i) d[i] = vp[i];
  unsigned a[4] = {unsigned(acc) * 3u, unsigned(acc) * 5u, unsigned(acc) * 7u, unsigned(acc) * 11u};
  fb::wgmma::fence();
  CALL;
  fb::wgmma::commit_group();
  fb::wgmma::wait_group<0>();
  fb::wgmma::fence_operand(d);
#pragma unroll
  for (int i = 0; i < R; ++i) p[R + i] = d[i];
}
'''
FORMS = {   # name: (call, PTX type and K, the operands after the accumulators, SASS opcode prefix)
    "mma": ("fb::wgmma::mma<NN>(d, da, db, acc)", "k16.f32.bf16.bf16", r"%rd\d+, %rd\d+, p, 1, 1, 0, 0", "HGMMA.64x{n}x16.F32.BF16"),
    "mma_ss tnsp": ("fb::wgmma::mma_ss<NN, 1, 1>(d, da, db, acc)", "k16.f32.bf16.bf16", r"%rd\d+, %rd\d+, p, 1, 1, 1, 1",
                    "HGMMA.64x{n}x16.F32.BF16"),
    "mma_rs": ("fb::wgmma::mma_rs<NN, 1>(d, a, db, acc)", "k16.f32.bf16.bf16",
               r"\{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+, p, 1, 1, 1", "HGMMA.64x{n}x16.F32.BF16"),
    "mma_e4m3": ("fb::wgmma::mma_e4m3<NN>(d, da, db, acc)", "k32.f32.e4m3.e4m3", r"%rd\d+, %rd\d+, p, 1, 1",
                 "QGMMA.64x{n}x32.F32.E4M3.E4M3"),
    "mma_rs_e4m3": ("fb::wgmma::mma_rs_e4m3<NN>(d, a, db)", "k32.f32.e4m3.e4m3",
                    r"\{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+, 1, 1, 1", "QGMMA.64x{n}x32.F32.E4M3.E4M3"),
}


def source(form, n):
    return KERNEL.replace("CALL", FORMS[form][0]).replace("NN", str(n))


def ptx(src):
    """The PTX NVRTC writes for sm_90a (cuda.bindings directly: cuda.core asks for a driver to give PTX)."""
    from cuda.bindings import nvrtc
    from cuda.core import ProgramOptions
    flags = ProgramOptions(arch="sm_90a", std="c++17", include_path=include_path()).as_bytes("nvrtc")
    _, prog = nvrtc.nvrtcCreateProgram(src.encode(), b"wgmma_template.cu", 0, [], [])
    try:
        err, = nvrtc.nvrtcCompileProgram(prog, len(flags), flags)
        assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        buf = b" " * size
        nvrtc.nvrtcGetPTX(prog, buf)
        return buf.decode().rstrip("\x00")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def accumulator_slots(text, n, ptx_type):
    """The registers of the wgmma's accumulator list, each as the offset (in floats) of the load that filled it."""
    loaded = {m.group(1): int(m.group(2) or 0) // 4
              for m in re.finditer(r"ld\.volatile\.global\.f32\s+(%f\d+), \[%rd\d+(?:\+(\d+))?\];", text)}
    moved = dict(re.findall(r"mov\.f32\s+(%f\d+), (%f\d+);", text))
    m = re.search(rf"wgmma\.mma_async\.sync\.aligned\.m64n{n}{re.escape(ptx_type)}\s*\{{([^}}]*)\}},\s*([^;]*);", text)
    assert m, f"no m64n{n}{ptx_type} wgmma in the PTX"
    regs = [r.strip() for r in m.group(1).split(",")]
    return [loaded.get(moved.get(r, r)) for r in regs], m.group(2).strip()


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("n", [8, 24, 64, 128, 200, 256])
def test_register_list_binds_d_in_order(form, n):
    _, ptx_type, after, _ = FORMS[form]
    slots, rest = accumulator_slots(ptx(source(form, n)), n, ptx_type)
    assert len(slots) == n // 2                      # N/2 f32 registers per thread
    assert slots == list(range(n // 2)), f"the i-th register is not d[i]: {slots}"
    assert re.fullmatch(after, rest), f"operands after the accumulators: {rest!r}, expected {after!r}"


@pytest.mark.parametrize("form, n", [("mma", 8), ("mma", 256), ("mma_ss tnsp", 32), ("mma_rs", 64),
                                     ("mma_e4m3", 128), ("mma_rs_e4m3", 136)])
def test_sass_has_the_shape(form, n):
    mod = fb.compile(source(form, n), "sm_90a", name="wgmma_template.cu")
    hist = mod.expect_sass(FORMS[form][3].format(n=n), kernel="k")
    assert sum(v for k, v in hist.items() if "GMMA" in k) == 1
    if form == "mma_ss tnsp":
        assert any(".tnspA.tnspB" in line for line in mod.sass("k").splitlines() if "HGMMA" in line)


def test_hazard_build_compiles_every_form():
    for form in FORMS:
        fb.compile(source(form, 64), "sm_90a", hazards=True, name="wgmma_template.cu")


@pytest.mark.parametrize("n", [12, 264])
def test_an_n_the_instruction_lacks_is_a_compile_error(n):
    with pytest.raises(CompileError, match="N must be a multiple of 8 from 8 to 256"):
        fb.compile(source("mma", n), "sm_90a", name="wgmma_template.cu")
