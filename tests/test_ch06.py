"""Chapter 06 (warp specialization, setmaxnreg): SASS, resources and ptxas diagnostics of every kernel (CPU),
and the cooperative and ping-pong GEMMs, the warp-specialized rowsum and the lab solution on ragged sizes
(Hopper only). The kernels are read from the chapter and the lab solution, so that what is tested ships.
"""
import functools
from pathlib import Path

import numpy as np
import pytest

import feedbeast as fb
from feedbeast import stress
from feedbeast.examples import MATMUL_RAGGED, matmul_inputs, matmul_reference, rowsum_inputs, rowsum_reference
from feedbeast.course.notebook import load

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = load(ROOT / "chapters/06-warp-specialization.ipynb")
SOLUTION = load(ROOT / "solutions/06-warp-specialized-gemm.ipynb")
SETMAXNREG = ("USETMAXREG.TRY_ALLOC.CTAPOOL", "USETMAXREG.DEALLOC.CTAPOOL")


@functools.cache
def module(name, nb=CHAPTER, **defines):
    return nb.compile(name, "sm_90a", **defines)


# ---- CPU: SASS, resources, ptxas diagnostics ----------------------------------------------------

@pytest.mark.parametrize("name, kernel, opcodes, defines", [
    ("coop", "gemm_coop", SETMAXNREG + ("HGMMA.64x256x16.F32.BF16", "UTMALDG"), {}),
    ("coop", "gemm_coop", SETMAXNREG + ("HGMMA.64x256x16.F32.BF16", "UTMALDG"),
     {"PRODUCER_REGS": "24", "CONSUMER_REGS": "240"}),
    ("coop", "gemm_coop", SETMAXNREG + ("HGMMA.64x256x16.F32.BF16", "UTMALDG"), {"FB_TRACE": "1"}),
    ("pingpong", "gemm_pingpong", SETMAXNREG + ("HGMMA.64x128x16.F32.BF16", "UTMALDG"), {}),
    ("pingpong", "gemm_pingpong", SETMAXNREG + ("HGMMA.64x128x16.F32.BF16", "UTMALDG"),
     {"FB_TRACE": "1", "FB_TRACE_PER_LANE": "1024"}),
    ("rowsum", "rowsum_ws", ("UTMALDG", "SYNCS.PHASECHK.TRANS64.TRYWAIT"), {}),
    ("rowsum", "rowsum_single", ("UTMALDG", "SYNCS.PHASECHK.TRANS64.TRYWAIT"), {}),
])
def test_kernel_sass_and_no_spills(name, kernel, opcodes, defines):
    mod = module(name, **defines)
    mod.expect_sass(*opcodes, kernel=kernel)
    assert mod.resources[kernel].spills == 0, mod.report()
    assert not mod.performance_losses, mod.performance_losses


def test_rowsum_reads_global_memory_only_through_tma():
    for k in ("rowsum_ws", "rowsum_single"):
        module("rowsum").expect_sass("UTMALDG", kernel=k, forbid=("LDG",))


def test_setmaxnreg_entry_count_is_the_block_budget():
    # 384 threads at one block per SM: 65536 / 384 = 170 -> 168 at entry, what fb::launch_registers computes; the
    # per-CTA pool setmaxnreg moves registers in (PTX ISA, setmaxnreg) is then 384 x 168 = 64512, which 40 / 232
    # and 24 / 240 fill exactly (48 / 232, 65536, hung on an H200: results/nvidia-h200/setmaxnreg.md)
    assert module("coop").resources["gemm_coop"].registers == 168 == (65536 // 384) // 8 * 8
    assert 128 * (40 + 2 * 232) <= 384 * 168 and 128 * (24 + 2 * 240) <= 384 * 168 < 128 * (48 + 2 * 232)


@pytest.mark.parametrize("threads, inc, registers", [(384, 240, 168), (256, 240, 240), (256, 256, 255),
                                                     (128, 256, 255)])
def test_the_entry_count_is_the_largest_setmaxnreg_count_capped_by_the_launch(threads, inc, registers):
    # what fb/setmaxnreg.cuh says ptxas does, and fb::launch_registers is the cap (255 registers are allocated as 256)
    src = (f"#include <fb/setmaxnreg.cuh>\n"
           f"static_assert(fb::launch_registers({threads}) == {min(65536 // threads // 8 * 8, 256)});\n"
           f'extern "C" __global__ void __launch_bounds__({threads}, 1) k(float* x) {{\n'
           f"  if (threadIdx.x < 128) {{ fb::setmaxnreg_dec<24>(); x[threadIdx.x] = 1; }}\n"
           f"  else {{ fb::setmaxnreg_inc<{inc}>(); x[threadIdx.x] = 2; }}\n}}\n")
    mod = fb.compile(src, "sm_90a", name="entry.cu")
    assert mod.resources["k"].registers == registers, mod.report()
    assert "USETMAXREG.TRY_ALLOC.CTAPOOL" in mod.histogram("k")


@pytest.mark.parametrize("producer, consumer", [("48", "232"), ("32", "240")])
def test_a_split_beyond_the_block_pool_is_refused_at_compile_time(producer, consumer):
    # 128 x (producer + 2 x consumer) = 65536 > 64512: the kernel's static_assert names setmaxnreg instead of a
    # launch whose consumers wait in .inc forever
    with pytest.raises(fb.CompileError, match="setmaxnreg: the warpgroups ask for more registers than the block has"):
        module("coop", PRODUCER_REGS=producer, CONSUMER_REGS=consumer)


def test_without_launch_bounds_ptxas_ignores_setmaxnreg_with_C7508():
    mod = module("coop", LAUNCH_BOUNDS="0")
    lines = [ln for ln in mod.log.splitlines() if "C7508" in ln]
    assert lines and "setmaxnreg" in lines[0] and "ignored" in lines[0], mod.log
    assert not any(op.startswith("USETMAXREG") for op in mod.histogram("gemm_coop"))


def test_launch_bounds_without_min_blocks_still_honours_setmaxnreg():
    mod = module("coop", LAUNCH_BOUNDS="1")
    mod.expect_sass(*SETMAXNREG, kernel="gemm_coop")
    assert not any("C7508" in ln for ln in mod.log.splitlines())


def test_setmaxnreg_compiled_out_leaves_no_usetmaxreg_and_no_spills():
    mod = module("coop", USE_SETMAXNREG="0")
    assert not any(op.startswith("USETMAXREG") for op in mod.histogram("gemm_coop"))
    assert mod.resources["gemm_coop"].spills == 0


def test_lab_solution_sass_and_resources():
    mod = module("lab", SOLUTION)
    mod.expect_sass(*SETMAXNREG, "HGMMA.64x128x16.F32.BF16", "UTMALDG", kernel="gemm_bias_relu_ws")
    assert mod.resources["gemm_bias_relu_ws"].spills == 0
    assert not any("C7508" in ln for ln in mod.log.splitlines())


def test_the_split_check_passes_nothing_where_no_registers_move():
    """Lab 06 as given has no setmaxnreg: the split check compared the launch's registers with themselves (1 x 4 + 2 x
    4 = 12) and passed. Where the SASS has no setmaxnreg it says it did not check and records no verdict; the
    solution's counts are compared and pass; counts larger than the pool are refused."""
    from feedbeast import hooks
    seen = []
    hooks.on_verdict.append(lambda *v: seen.append(v))
    try:
        none = module("coop", USE_SETMAXNREG="0")
        said = fb.sass.expect_setmaxnreg_split(none, "gemm_coop", threads=384)
        assert "not checked (no setmaxnreg in the SASS" in said and not seen, (said, seen)
        assert fb.sass.setmaxnreg_split(none, "gemm_coop", threads=384)[0] is None
        lab = module("lab", SOLUTION)
        assert fb.sass.expect_setmaxnreg_split(lab, "gemm_bias_relu_ws", threads=384) == \
            "1 x 40 + 2 x 232 = 504 <= 504 registers per lane"
        assert [v[0] for v in seen] == ["passed"], seen
        big = fb.compile(lab.source.replace("fb::setmaxnreg_inc<232>", "fb::setmaxnreg_inc<240>"), "sm_90a",
                         defines=lab.defines, name="lab.cu")
        fits, why = fb.sass.setmaxnreg_split(big, "gemm_bias_relu_ws", threads=384)
        assert fits is False and "setmaxnreg asks for 1 x 40 + 2 x 240 = 520" in why and len(seen) == 1, (why, seen)
        with pytest.raises(fb.SassMismatch, match="the block has 3 x 168 = 504"):
            fb.sass.expect_setmaxnreg_split(big, "gemm_bias_relu_ws", threads=384)
        assert [v[0] for v in seen] == ["passed", "failed"], seen
    finally:
        hooks.on_verdict.pop()


def test_ragged_gemm_sizes_satisfy_the_tma_rules():
    for m, n, k in (MATMUL_RAGGED, (1000, 1032, 1000), (257, 264, 72), (300, 136, 64)):
        assert k % 8 == 0 and n % 8 == 0            # 16-byte row strides of A (M x K) and Bt (N x K)
        assert m >= 128 and n >= 128 and k >= 64     # boxes no larger than the tensor


# ---- GPU (Hopper): the kernels on ragged sizes ---------------------------------------------------

def _gemm(kind, m, n, k, seed, out=None):
    a, b = matmul_inputs(m, n, k, fb.bfloat16, seed=seed)
    a_d, bt_d = fb.to_device(a), fb.to_device(np.ascontiguousarray(b.T))
    bn = 256 if kind == "coop" else 128
    maps = (fb.tensor_map(a_d, box=(128, 64), swizzle=128), fb.tensor_map(bt_d, box=(bn, 64), swizzle=128))
    c = fb.empty((m, n), fb.bfloat16)
    if kind == "coop":
        r = module("coop").gemm_coop.launch((-(-n // 256), -(-m // 128)), 384, *maps, c, m, n, k, 0,
                                            shared=4 * (128 + 256) * 64 * 2 + 1024)
    else:
        tiles = -(-m // 128) * -(-n // 128)
        r = module("pingpong").gemm_pingpong.launch(min(fb.gpu().sm_count, -(-tiles // 2)), 384, *maps, c, m, n,
                                                    k, 0, shared=6 * 2 * 128 * 64 * 2 + 1024)
    assert r is None, r
    return a, b, c


@pytest.mark.parametrize("kind", ["coop", "pingpong"])   # (lab 06 checks its own kernel)
@pytest.mark.parametrize("m, n, k", [MATMUL_RAGGED, (1000, 1032, 1000), (257, 264, 72)])
def test_gpu_gemm_ragged(gpu90, kind, m, n, k):
    a, b, c = _gemm(kind, m, n, k, seed=m + n)
    assert fb.check(c, matmul_reference(a, b), name=f"{kind} {m}x{n}x{k}")


def test_gpu_pingpong_more_tiles_than_blocks_and_odd_tile_counts(gpu90):
    for m, n, k in ((300, 136, 64), (1160, 1288, 200)):   # 6 tiles on 3 blocks; 10 x 11 = 110 tiles
        a, b, c = _gemm("pingpong", m, n, k, seed=k)
        assert fb.check(c, matmul_reference(a, b), name=f"pingpong {m}x{n}x{k}")


@pytest.mark.parametrize("kind", ["coop", "pingpong"])
def test_gpu_gemm_is_bit_for_bit_repeatable(gpu90, kind):
    m, n, k = 1000, 1032, 1000
    a, b = matmul_inputs(m, n, k, fb.bfloat16, seed=9)
    outs = []
    for _ in range(5):
        _, _, c = _gemm(kind, m, n, k, seed=9)
        outs.append(c.to_host().view(np.uint16).copy())
    assert all(np.array_equal(outs[0], o) for o in outs[1:])


def _rowsum(kernel, x, stages):
    rows, cols = x.shape
    y = fb.empty(rows, np.float32)
    k = module("rowsum", STAGES=str(stages))[kernel]
    r = k.launch(-(-rows // 16), 160 if kernel == "rowsum_ws" else 128,
                 fb.tensor_map(fb.to_device(x), box=(16, 256)), y, rows, cols, shared=stages * 16 * 256 * 4 + 128)
    assert r is None, r
    return y


@pytest.mark.parametrize("kernel", ["rowsum_ws", "rowsum_single"])
@pytest.mark.parametrize("rows, cols, stages", [(16381, 8188, 4), (37, 1000, 2), (16, 260, 8), (1001, 4100, 4)])
def test_gpu_rowsum_ragged(gpu90, kernel, rows, cols, stages):
    x = rowsum_inputs(rows, cols, seed=rows)
    assert fb.check(_rowsum(kernel, x, stages), rowsum_reference(x), name=f"{kernel} {rows}x{cols} stages={stages}")


# make stress: random ragged shapes within the TMA rules (16-byte row strides), repeated runs bit for bit

@pytest.mark.parametrize("kernel", ["rowsum_ws", "rowsum_single"])
def test_gpu_stress_rowsum(gpu90, kernel):
    for i, (rows, cols) in enumerate(stress.sizes((3001, 4100), multiple_of=(16, 256), align=(1, 4),
                                                  at_least=(16, 256))):     # the TMA box
        x = rowsum_inputs(rows, cols, seed=i)
        y = stress.repeat_identical(lambda: _rowsum(kernel, x, 4)) if i == 0 else _rowsum(kernel, x, 4)
        assert fb.check(y, rowsum_reference(x), name=f"{kernel} {rows}x{cols}")


@pytest.mark.parametrize("kind", ["coop", "pingpong"])
def test_gpu_stress_gemm(gpu90, kind):
    bn = 256 if kind == "coop" else 128
    for i, (m, n, k) in enumerate(stress.sizes((1000, 1032, 1000), multiple_of=(128, bn, 64), align=(1, 8, 8),
                                               at_least=(128, bn, 64))):    # the TMA boxes
        if i == 0:
            a, b = matmul_inputs(m, n, k, fb.bfloat16, seed=i)
            c = stress.repeat_identical(lambda: _gemm(kind, m, n, k, seed=i)[2])
        else:
            a, b, c = _gemm(kind, m, n, k, seed=i)
        assert fb.check(c, matmul_reference(a, b), name=f"{kind} {m}x{n}x{k}")
