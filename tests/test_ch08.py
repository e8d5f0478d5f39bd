"""Chapter 08 (Blackwell): the tcgen05 GEMM, the CLC row sum and the porting table.

The kernels are read from the notebooks (their %%cuda cells, by --name), so there is one source.
On any machine: compile for sm_100a, SASS, resources. On a Blackwell GPU (sm_100a): validate; elsewhere
those tests skip by name.
"""
from pathlib import Path

import numpy as np
import pytest

import feedbeast as fb
from feedbeast.course.notebook import load

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = load(ROOT / "chapters/08-blackwell.ipynb")
SOLUTION = load(ROOT / "solutions/08-tmem-mma.ipynb")
TCGEN05_SASS = ("UTCHMMA", "UTCBAR", "LDTM", "UTCATOMSWS", "UVIRTCOUNT", "UTMALDG", "SYNCS")
BM, BN, BK, STAGES = 128, 128, 64, 4
SMEM = STAGES * (BM + BN) * BK * 2 + 1024


def reps():
    return CHAPTER.definitions("REPS")["REPS"]


@pytest.fixture(scope="module")
def gemm():
    return CHAPTER.compile("tcgemm")


@pytest.fixture(scope="module")
def lab():
    return SOLUTION.compile("lab")


def test_descriptor_constants_at_compile_time():
    src = ('#include <fb/tcgen05.cuh>\n'
           'static_assert(fb::tc::instr_desc_bf16_f32(128, 128) == 0x08200490u, "idesc M=128 N=128");\n'
           'static_assert(fb::tc::instr_desc_bf16_f32(64, 256) == 0x04400490u, "idesc M=64 N=256");\n'
           'extern "C" __global__ void k(unsigned long long* o) {\n'
           '  __shared__ alignas(1024) char t[1024]; o[0] = fb::tc::smem_desc_k_major_sw128(t); }\n')
    fb.compile(src, "sm_100a")


@pytest.mark.parametrize("m, n", [(128, 60), (128, 8), (64, 4), (64, 264), (96, 64)])
def test_an_mma_shape_the_isa_does_not_allow_fails_to_compile_naming_the_rule(m, n):
    """tcgen05.mma with cta_group::1: M = 64 takes N = 8..256 by 8, M = 128 N = 16..256 by 16 (PTX ISA, "Matrix
    shape"). N = 60 used to be encoded as 56 without a word."""
    src = ('#include <fb/tcgen05.cuh>\n'
           f'extern "C" __global__ void k(unsigned* o) {{ constexpr fb::tc::u32 d = fb::tc::instr_desc_bf16_f32({m}, {n}); '
           'o[0] = d; }\n')
    with pytest.raises(fb.CompileError, match="tcgen05_mma_shape_needs_M64_N8_to_256_by_8_or_M128_N16_to_256_by_16"):
        fb.compile(src, "sm_100a")


def test_gemm_sass_and_resources(gemm):
    counts = gemm.expect_sass(*TCGEN05_SASS, kernel="tc_gemm", forbid=("HGMMA", "WARPGROUP"))
    assert counts["UTCHMMA"] == BK // 16      # the K-slice loop, unrolled: one MMA per 16-wide slice
    assert counts["UTCBAR"] == 2              # commit -> empty[s], commit -> acc_full
    r = gemm.resources["tc_gemm"]
    assert r.spills == 0 and r.stack == 0, r


def test_tcgen05_header_refuses_hopper(gemm):
    with pytest.raises(fb.CompileError, match="needs a Blackwell target with tcgen05"):
        fb.compile(gemm.source, "sm_90a")


def test_clc_rowsum_compiles():
    mod = CHAPTER.compile("clc")
    mod.expect_sass("UGETNEXTWORKID", "SYNCS", kernel="clc_rowsum")
    assert mod.resources["clc_rowsum"].spills == 0


def test_lab_solution_compiles_to_tcgen05(lab):
    lab.expect_sass(*TCGEN05_SASS, kernel="gemm_bias_relu")
    assert lab.resources["gemm_bias_relu"].spills == 0


def test_porting_table():
    table = reps()
    for name, src in table.items():
        fb.compile(src, "sm_90a")                 # every representative builds for Hopper
    for name in ("cp.async ring", "mbarrier + bulk copy", "TMA tensor load", "wgmma, guarded", "setmaxnreg"):
        fb.compile(table[name], "sm_100a")        # ...and these unchanged for Blackwell
    with pytest.raises(fb.CompileError, match="wgmma"):
        fb.compile(table["wgmma"], "sm_100a")
    fb.compile(table["wgmma, guarded"], "sm_90a").expect_sass("HGMMA")
    fb.compile(table["setmaxnreg"], "sm_100a").expect_sass("USETMAXREG")


def _run_gemm(kernel, m, n, k, seed):
    a, b = fb.examples.matmul_inputs(m, n, k, dtype=fb.bfloat16, seed=seed)
    a_dev, bt_dev = fb.to_device(a), fb.to_device(np.ascontiguousarray(b.T))
    c = fb.empty((m, n), np.float32)
    ta = fb.tensor_map(a_dev, box=(BM, BK), swizzle=128)
    tb = fb.tensor_map(bt_dev, box=(BN, BK), swizzle=128)
    kernel.launch(((n + BN - 1) // BN, (m + BM - 1) // BM), 192, ta, tb, c, m, n, k, shared=SMEM)
    return fb.check(c, fb.examples.matmul_reference(a, b), tol="bf16", name=f"{kernel.name} {m}x{n}x{k}")


@pytest.mark.parametrize("mnk", [fb.examples.MATMUL_RAGGED, (200, 136, 72)])
def test_gemm_on_blackwell(gpu100, gemm, mnk):
    assert _run_gemm(gemm.tc_gemm, *mnk, seed=8)


def test_clc_rowsum_on_blackwell(gpu100):
    mod = CHAPTER.compile("clc")
    rows, cols = 20_011, 1_000
    x = fb.examples.rowsum_inputs(rows, cols, seed=3)
    y = fb.empty(rows, np.float32)
    mod.clc_rowsum.launch(rows, 256, fb.to_device(x), y, cols)
    assert fb.check(y, fb.examples.rowsum_reference(x), name="clc_rowsum")
