"""Chapter 09's backward pass (cells c09-bwd-*, fb/attention_bwd.cuh).

CPU: the three builds (dQ by tensor TMA reduces, by one bulk TMA reduce, by atomics) compile for sm_90a with the
wgmma shapes, TMA loads and dQ addition they are about, the register split between producer and consumers, no
spills, no serialised wgmma; the element-wise bound of the chapter
passes a float32 model of the kernel's rounding and rejects a gradient with one key dropped or one key too many.
GPU (Hopper with PyTorch; skipped by name elsewhere): every build on ragged shapes, causal and not, against float64
autograd with poisoned outputs, within the bound; the chapter's planted one-key errors outside it.
Kernels and helpers are read from the notebook, so what is tested is what ships.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

import feedbeast as fb
from feedbeast.course.notebook import load

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = load(ROOT / "chapters/09-attention.ipynb")
_MODULES = {}


def module(name, **defines):
    key = (name, tuple(sorted(defines.items())))
    if key not in _MODULES:
        _MODULES[key] = CHAPTER.compile(name, "sm_90a", **defines)
    return _MODULES[key]


# ---- CPU: machine code and resources ----------------------------------------------------------------------

BUILDS = {"tensor-reduce": ({}, "UTMAREDG.2D.ADD", "UBLKRED"),
          "tma-reduce": ({"DQ_TMA": 1}, "UBLKRED.G.S.ADD.F32", "UTMAREDG"),
          "atomics": ({"DQ_TMA": 0}, "REDG.E.ADD.F32x2", "UBLKRED"),
          "dK-first": ({"DQ_FIRST": 0}, "UTMAREDG.2D.ADD", "UBLKRED")}
SHAPES = {128: ("HGMMA.64x64x16.F32.BF16", "HGMMA.64x128x16.F32.BF16"),
          64: ("HGMMA.64x64x16.F32.BF16", "HGMMA.64x128x16.F32.BF16")}
QUERY_ROWS = {128: 64, 64: 128}          # the query tile (fb::attention_bwd::query_rows)


@pytest.mark.parametrize("build", list(BUILDS))
@pytest.mark.parametrize("d", [64, 128])
def test_backward_sass_and_resources(build, d):
    defines, dq_op, other = BUILDS[build]
    mod = module("bwd", **defines)
    kernel = f"attn_bwd_d{d}"
    counts = mod.expect_sass(*SHAPES[d], "UTMALDG.2D", dq_op, "MUFU.EX2", kernel=kernel,
                             forbid=(other,))
    # Per query tile and warpgroup: S^T and dP^T (d / 16 steps each, N = the tile's queries), dV and dK (tile / 16
    # steps each, N = d), dQ (8 steps of 16 keys, N = its columns). d = 128, 64 queries: 64x64x16 for S^T, dP^T
    # (8 + 8) and dQ (8 of 64 columns, half of them), 64x128x16 for dV, dK (4 + 4); d = 64, 128 queries: 64x128x16
    # for S^T, dP^T (4 + 4), 64x64x16 for dV, dK (8 + 8) and dQ (8 of all 64 columns of its 64 queries).
    assert counts[SHAPES[d][0]] == 24 and counts[SHAPES[d][1]] == 8, counts
    # one exponential per element of the 64 keys x tile a thread holds (tile / 2), in the masked and the unmasked copy
    assert counts["MUFU.EX2"] == QUERY_ROWS[d], counts
    res = mod.resources[kernel]
    # 384 threads: the consumers take 240 registers each by setmaxnreg, the producer warpgroup gives back to 24; the
    # kernel is compiled for 168 (65536 / 384) and nothing spills.
    assert res.registers == 168 and res.spills == 0 and res.stack == 0, mod.report()
    sass = mod.sass(kernel)
    assert "USETMAXREG.TRY_ALLOC.CTAPOOL" in sass and "USETMAXREG.DEALLOC.CTAPOOL" in sass, kernel
    assert not mod.performance_losses, mod.performance_losses


@pytest.mark.parametrize("build", list(BUILDS))
@pytest.mark.parametrize("d", [64, 128])
def test_backward_reads_L_before_the_gemms_D_under_dV_and_P_after_its_wait(build, d):
    # In the loop's order of shared loads (L), HGMMA runs (H) and wgmma waits (W): the tile / 8 LDS.64 of L come
    # before the S^T and dP^T GEMMs are issued; those of D after dP^T's wait, while dV's GEMM runs (held in registers
    # across it, they made ptxas spill at 128 queries; measured, reading them there was also faster). Then a wait
    # for everything in flight (gsb0, 0x0), dV's GEMM included, before P^T's registers, its A operand, are read
    # (PTX ISA: a wgmma's register operands may be accessed only after a wait that covers it).
    mod = module("bwd", **BUILDS[build][0])
    sass = mod.sass(f"attn_bwd_d{d}")
    order = "".join("L" if op.startswith("LDS") else "W" if op.startswith("WARPGROUP.DEPBAR") else
                    "H" if op.startswith("HGMMA") else "" for op in fb.sass.opcodes(sass))
    n = QUERY_ROWS[d] // 8
    assert re.sub("H+", "H", order).startswith("L" * n + "HWHW" + "L" * n + "WH"), order
    # S^T's wait and dP^T's leave one group in flight; the third waits for all
    assert re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, (0x[0-9a-f]+)", sass)[:3] == ["0x1", "0x1", "0x0"], sass


@pytest.mark.parametrize("build", list(BUILDS))
@pytest.mark.parametrize("d", [64, 128])
def test_backward_stores_dS_by_stmatrix_and_keeps_descriptors_uniform(build, d):
    # dS^T goes to shared memory by one stmatrix .x4 per 16 queries (tile / 16), not four four-byte stores; and the
    # warpgroup index is broadcast from lane 0, so the wgmma descriptors stay in uniform registers: fewer R2UR
    # (vector to uniform register moves) in the kernel than HGMMA, where a descriptor built per thread takes two.
    mod = module("bwd", **BUILDS[build][0])
    kernel = f"attn_bwd_d{d}"
    assert mod.expect_sass("STSM.16.M88.4", kernel=kernel)["STSM.16.M88.4"] == QUERY_ROWS[d] // 16
    ops = fb.sass.opcodes(mod.sass(kernel))
    r2ur, hgmma = sum(op.startswith("R2UR") for op in ops), sum(op.startswith("HGMMA") for op in ops)
    assert r2ur < hgmma, (r2ur, hgmma)


def test_backward_shared_memory_size_is_the_kernels_plan():
    # The kernel cell's static_assert pins fb::attention_bwd::Plan's sizes (the module compiles in the tests above);
    # the launch's dynamic shared memory, bwd_shared(d) on the host, must be the same bytes.
    bwd_shared = CHAPTER.definitions("bwd_shared")["bwd_shared"]
    assert (bwd_shared(64), bwd_shared(128)) == (199680, 198656)
    assert "Plan<64, NST>::BYTES == 199680 && ab::Plan<128, NST>::BYTES == 198656" in module("bwd").source


def test_backward_preprocess_and_conversion_use_no_shared_memory_or_barriers():
    mod = module("bwd")
    for kernel in ("attn_bwd_prep", "attn_bwd_dq"):
        assert mod.resources[kernel].shared_static == 0 and mod.resources[kernel].spills == 0, mod.report()
        mod.expect_sass(kernel=kernel, forbid=("BAR.SYNC", "HGMMA"))


# ---- CPU: the bound rejects a one-key error and passes the kernel's rounding --------------------------------

def _bf16(x):
    return x.astype(fb.bfloat16).astype(np.float32)


def _grads(q, k, v, do, causal, keep=None, model=False):
    """dQ, dK, dV of one head (numpy). keep: the mask (default: all keys, or causal); model: the kernel's rounding
    (fp32 math, O stored as bf16 before D, P rounded to bf16 before dV's GEMM and dS = P (dP - D) formed from that
    P, dS rounded to bf16 before its GEMMs)."""
    s, d = q.shape
    f = np.float32 if model else np.float64
    q, k, v, do = (x.astype(f) for x in (q, k, v, do))
    scale = 1 / math.sqrt(d)
    if keep is None:
        keep = np.tril(np.ones((s, s), bool)) if causal else np.ones((s, s), bool)
    x = np.where(keep, q @ k.T * scale, -np.inf)
    p = np.exp(x - x.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    o = p @ v
    dp = do @ v.T
    dd = (do * (_bf16(o) if model else o)).sum(1, keepdims=True)
    pr = _bf16(p) if model else p
    ds = pr * (dp - dd)
    dsr = _bf16(ds) if model else ds
    out = {"dq": scale * dsr @ k, "dk": scale * dsr.T @ q, "dv": pr.T @ do}
    if not model:
        mag = p * (np.abs(do) @ np.abs(v).T + np.abs(do * o).sum(1, keepdims=True))
        out.update(rq=scale * np.sqrt((mag * mag) @ (k * k)), rk=scale * np.sqrt((mag * mag).T @ (q * q)),
                   rv=np.sqrt((p * p).T @ (do * do)))
    return out


def _worst(g, ref):
    # The chapter's bound (its GRAD_ROUNDING, read from the notebook): a looser one there must fail here.
    rounding = CHAPTER.definitions("GRAD_ROUNDING")["GRAD_ROUNDING"]
    return max(float(np.max(np.abs(g[n] - ref[n]) / (rounding * (np.abs(ref[n]) + ref[r]))))
               for n, r in (("dq", "rq"), ("dk", "rk"), ("dv", "rv")))


@pytest.mark.parametrize("s, d, causal", [(300, 64, False), (300, 64, True), (257, 128, True)])
def test_bound_passes_the_rounding_and_rejects_one_key(s, d, causal):
    rng = np.random.default_rng(s + d)
    q, k, v, do = (_bf16(rng.standard_normal((s, d), dtype=np.float32)) for _ in range(4))
    ref = _grads(q, k, v, do, causal)
    assert _worst(_grads(q, k, v, do, causal, model=True), ref) < 1
    keep = np.tril(np.ones((s, s), bool)) if causal else np.ones((s, s), bool)
    wrong = keep.copy()
    if causal:
        wrong |= np.eye(s, k=1, dtype=bool)          # each row sees one key past the diagonal
    else:
        wrong[:, -1] = False                          # the last key dropped
    assert _worst(_grads(q, k, v, do, causal, keep=wrong, model=True), ref) > 1


# ---- GPU (Hopper, PyTorch): every build on ragged shapes; planted one-key errors rejected -------------------

RAGGED = [(1, 1, 1, 64), (2, 3, 200, 64), (1, 2, 129, 128), (2, 2, 1000, 128), (3, 2, 257, 64), (1, 1, 383, 128),
          (1, 2, 64, 64), (1, 1, 65, 128), (1, 2, 129, 64)]


_NS = {}


@pytest.fixture
def bwd_ns(gpu90):
    """The chapter's backward helpers (read from the notebook), once a Hopper GPU is known to be there."""
    torch = pytest.importorskip("torch")
    if not _NS:
        _NS.update(_definitions(torch))
    return _NS


def _definitions(torch):
    bwd = module("bwd")
    return CHAPTER.definitions("backward_cases", "Backward", "backward_reference", "check_grads", "GradBounded",
                               "bwd_shared", "to_torch", "attention_inputs", "Inputs", "attend", "GRAD_ROUNDING",
                               "LOG2E", np=np, fb=fb, torch=torch, math=math, pp=module("pp"), bwd=bwd)


@pytest.mark.parametrize("build", list(BUILDS))
def test_gpu_backward_ragged_shapes_within_the_bound(bwd_ns, build):
    mods = {build: module("bwd", **BUILDS[build][0])}
    results = []
    for shape in RAGGED:
        q, k, v = bwd_ns["attention_inputs"](*shape, seed=sum(shape))
        do = bwd_ns["attention_inputs"](*shape, seed=sum(shape) + 1)[0]
        for causal in (False, True):
            results += bwd_ns["backward_cases"](mods, q, k, v, do, causal, f"{shape} causal={causal}")
    assert results and all(results), [r for r in results if not r]


def test_gpu_backward_planted_one_key_errors_rejected(bwd_ns):
    header = (Path(fb.__file__).parent / "include/fb/attention_bwd.cuh").read_text()
    src = module("bwd").source.replace("#include <fb/attention_bwd.cuh>", header)
    plants = {False: [("min(q + reach, seq - 1)", "min(q + reach, seq - 2)"),
                      ("key0 + 15 >= seq", "key0 + 16 >= seq")],
              True: [("min(q + reach,", "min(q + 1 + reach,")]}
    mods = {}
    for causal, edits in plants.items():
        planted = src
        for old, new in edits:
            assert planted.count(old) == 1, old
            planted = planted.replace(old, new)
        mods[causal] = fb.compile(planted, "sm_90a", defines=module("bwd").defines, name="bwd_planted.cu")
    for shape in ((1, 2, 1000, 128), (1, 2, 1000, 64)):       # both query tiles (64 rows at d = 128, 128 at d = 64)
        q, k, v = bwd_ns["attention_inputs"](*shape, seed=5)
        do = bwd_ns["attention_inputs"](*shape, seed=6)[0]
        for causal, mod in mods.items():
            # The shipped kernel beside it on the same inputs passes (so the launches ran), and the planted one fails
            # on its numbers: an output never written (poison, NaN) reads as inf.
            ok, r = bwd_ns["backward_cases"]({"shipped": module("bwd"), "planted": mod}, q, k, v, do, causal,
                                             f"{shape} causal={causal}")
            assert ok, ok
            assert not r and math.isfinite(max(r.ratios)), r
