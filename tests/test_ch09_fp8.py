"""Chapter 09's fp8 (e4m3) attention forward (cells c09-fp8-*, fb/attention_fp8.cuh).

CPU: the kernel compiles for sm_90a with fp8 wgmma (QGMMA) for both GEMMs and no bf16 HGMMA, P converted to e4m3
in registers (F2FP ... E4M3, no shuffle beyond the softmax's), the V transpose's ldmatrix .trans, PRMT and stmatrix
(LDSM / STSM, and no 4-byte shared loads or stores left), no spills, no ptxas performance loss (C7508,
serialised wgmma); with Q_REGS=1 the GEMMs of S take Q's fragments from registers; the softmax between the loop's two waits; the key order that P and V^T share is the one the PTX ISA's
fragments imply (read from the header); a model of the transpose's lanes (ldmatrix .trans, prmt, stmatrix, the
128-byte swizzle) writes every byte of V^T where key_at puts it, with no bank conflict; the fp8 element-wise bound holds for a numpy model of the kernel's
arithmetic and rejects a causal mask one key too wide.
The persistent kernel (attn_fp8_persist_d128): the counter's atomic, Q's fragments released before the first GEMM,
O's TMA stores only where the host gives them room, the same GEMMs and softmax.
GPU (Hopper; skipped by name elsewhere), both kernels (the persistent one on 5 blocks, many tiles each): the debug
build on ragged shapes and the timed build at s = 4096, normal and outlier inputs, causal and not, within the bound
against float64; the planted one-key-too-many mask outside it; the timed builds at a ragged shape, and with `make
stress` (FEEDBEAST_STRESS=N) at N random ragged ones.
"""
from __future__ import annotations

import math
import re
import types
from pathlib import Path

import numpy as np
import pytest

import feedbeast as fb
from feedbeast import stress
from feedbeast.course.notebook import load

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = load(ROOT / "chapters/09-attention.ipynb")
HEADER = (ROOT / "src/feedbeast/include/fb/attention_fp8.cuh").read_text()
KERNEL = "attn_fp8_d128"
PERSIST = "attn_fp8_persist_d128"
_MODULES = {}


def module(**defines):
    key = tuple(sorted(defines.items()))
    if key not in _MODULES:
        _MODULES[key] = CHAPTER.compile("fp8", "sm_90a", **defines)
    return _MODULES[key]


# ---- CPU: machine code ----------------------------------------------------------------------------------------

def test_fp8_sass_and_resources():
    mod = module()
    mod.expect_sass("QGMMA.64x128x32.F32.E4M3.E4M3", "F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C", "PRMT", "UTMALDG.2D",
                    "LDSM.16.MT88.4", "STSM.16.M88.4", "USETMAXREG.TRY_ALLOC.CTAPOOL", "USETMAXREG.DEALLOC.CTAPOOL",
                    "BAR.SYNC", "BAR.ARV", kernel=KERNEL, forbid=("HGMMA",))
    hist = mod.histogram(KERNEL)
    # The transpose moves 16 bytes per lane and instruction: no 32-bit shared loads or stores remain.
    assert not any(op.startswith(("LDS", "STS")) and not op.startswith(("LDSM", "STSM")) for op in hist), hist
    res = mod.resources[KERNEL]
    assert res.spills == 0 and res.stack == 0, mod.report()
    assert not mod.performance_losses, mod.performance_losses
    # Q K^T: 4 k32 steps per key tile, P V: 4; in the first tile, the loop and the last P V: 16 in all.
    assert mod.histogram(KERNEL)["QGMMA.64x128x32.F32.E4M3.E4M3"] == 16


def test_fp8_register_split_fits_the_block():
    # Transposing producer 56 + 2 consumers x 224 = 504 per lane = 3 x the entry count 168 (fb::launch_registers),
    # the block's whole pool; 8 more for the producer (the SM's 65536) would leave the consumers' .inc waiting forever,
    # and the kernel's static_assert refuses it.
    assert module().resources[KERNEL].registers == 168
    with pytest.raises(fb.CompileError, match="setmaxnreg: the warpgroups ask for more registers than the block has"):
        CHAPTER.compile("fp8", "sm_90a", PRODUCER_REGS="64")


def test_fp8_q_in_registers():
    # Q_REGS=1: each consumer thread reads its Q fragments once (4 ldmatrix .x4, one per k32 step), and the 8
    # QGMMA of S take A from registers like P V's; the default build reads Q from shared memory in each of them.
    def forms(mod):
        mma = [ln for ln in mod.sass(KERNEL).splitlines() if "QGMMA.64x128x32.F32.E4M3.E4M3" in ln]
        return len(mma), sum(re.search(r"QGMMA\S* R\d+, gdesc\[", ln) is not None for ln in mma)
    assert forms(module()) == (16, 8)
    q = module(Q_REGS=1)
    assert forms(q) == (16, 0)
    assert q.histogram(KERNEL)["LDSM.16.M88.4"] == 4 and "LDSM.16.M88.4" not in module().histogram(KERNEL)
    res = q.resources[KERNEL]
    assert res.spills == 0 and res.stack == 0, q.report()


def test_fp8_p_is_converted_in_registers_without_shuffles():
    # 64 scores per thread and key tile -> 32 cvt.rn.satfinite.e4m3x2 (F2FP) per conversion of P, two conversion
    # sites (the first tile and the loop). The only shuffles are the softmax's quad maximum and the final quad sum
    # (4 + 4 + 4): none moves P between threads, which is what the key order of V^T is for.
    hist = module().histogram(KERNEL)
    assert hist["F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C"] == 64
    assert hist.get("SHFL.BFLY", 0) <= 12, hist.get("SHFL.BFLY")


def _exps_between_the_waits(mod, kernel=KERNEL):
    sass = mod.sass(kernel).splitlines()
    i = next(k for k, ln in enumerate(sass) if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in ln)
    j = next(k for k in range(i + 1, len(sass)) if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in sass[k])
    return sum("MUFU.EX2" in ln for ln in sass[i:j])


def test_fp8_softmax_runs_between_its_two_waits():
    assert _exps_between_the_waits(module()) >= 64


@pytest.mark.parametrize("kernel_name", [KERNEL, PERSIST])
def test_fp8_shared_memory_fits(kernel_name):
    # The dynamic shared memory the chapter's attend_fp8 asks for covers fb::attention_fp8::Plan (Q, then STAGES x
    # (K, V, V^T) of BN x D bytes, + 1 KB alignment), for the persistent kernel with O's two 64-row bf16 tiles after
    # it where they fit (three stages; not four), and with the kernel's static barriers stays within the 227 KB a
    # block may opt in to on compute capability 9.0 (CUDA C++ Programming Guide, "Technical Specifications per
    # Compute Capability"), at 3 and 4 stages.
    attend = CHAPTER.definitions("attend_fp8", np=np, fb=fb, math=math, g=None)["attend_fp8"]
    bm, bn, d = map(int, re.search(r"constexpr int BM = (\d+), BN = (\d+), D = (\d+);", HEADER).groups())
    for stages, o_stage in ((3, 1), (4, 1), (3, 0)):
        mod = module(STAGES=stages, O_STAGE=o_stage)
        asked = {}
        kernel = types.SimpleNamespace(name=kernel_name, module=mod,
                                       bind=lambda *args, **kw: asked.update(kw, args=args))
        ins = types.SimpleNamespace(shape=(1, 1, 300, d), scales=(1.0, 1.0, 1.0), maps=(None, None, None),
                                    o_map=lambda o: ("O's map", o))
        attend(kernel, ins, "O", None, False, bind=True)
        plan = bm * d + 3 * stages * bn * d + 1024
        o_tiles = 2 * 64 * d * 2 if kernel_name == PERSIST and stages == 3 and o_stage else 0
        assert asked["shared"] == plan + o_tiles, f"STAGES={stages}: attend_fp8 asks for {asked['shared']} B"
        total = asked["shared"] + mod.resources[kernel_name].shared_static
        assert total <= 232448, f"STAGES={stages}: {total} B of shared memory per block, above 227 KB"
        mod.expect_sass("QGMMA.64x128x32.F32.E4M3.E4M3", kernel=kernel_name)
        # the persistent kernel stores O by TMA exactly when the host gave it the tiles
        assert mod.histogram(kernel_name).get("UTMASTG.2D", 0) == (2 if o_tiles else 0)
        if kernel_name == PERSIST:
            assert asked["args"][0] == 3 and asked["args"][-1] == ("O's map", "O")   # min(SMs, 3 tiles) blocks


def test_fp8_persistent_kernel():
    # attn_fp8_persist_d128: rung 6's scheduler on the fp8 loop. One counter draw (ATOMG) per tile; Q's fragments
    # read by ldmatrix (4, one per k32 step) and released before the tile's first GEMM (proxy fence, then an
    # mbarrier arrive); S and P V from registers (no QGMMA reads A from shared memory); O's two TMA stores; the
    # same 16 QGMMA, 64 e4m3 packs of P and softmax between the loop's waits as attn_fp8_d128; no spills, 168
    # registers.
    mod = module()
    hist = mod.histogram(PERSIST)
    assert hist["ATOMG.E.ADD.STRONG.GPU"] == 1 and hist["LDSM.16.M88.4"] == 4 and hist["UTMASTG.2D"] == 2, hist
    assert hist["QGMMA.64x128x32.F32.E4M3.E4M3"] == 16 and hist["F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C"] == 64
    mma = [ln for ln in mod.sass(PERSIST).splitlines() if "QGMMA.64x128x32.F32.E4M3.E4M3" in ln]
    assert not any(re.search(r"QGMMA\S* R\d+, gdesc\[", ln) for ln in mma), mma
    assert _exps_between_the_waits(mod, PERSIST) >= 64
    sass = [ln for ln in mod.sass(PERSIST).splitlines() if "/*" in ln]
    first = next(i for i, ln in enumerate(sass) if "LDSM.16.M88.4" in ln)
    gemm = next(i for i in range(first, len(sass)) if "QGMMA" in sass[i])
    between = "\n".join(sass[first:gemm])
    assert "FENCE.VIEW.ASYNC.S" in between and "SYNCS.ARRIVE" in between, between
    # O's staging tile is rewritten only after the previous tile's TMA store has read it, and the block leaves only
    # after its stores completed: cp.async.bulk.wait_group.read 0 and wait_group 0, one DEPBAR each.
    assert hist["DEPBAR.LE"] == 2, hist.get("DEPBAR.LE")
    # The turns run on across tiles: none is passed at a tile's start (consumer 1 passes once per block and after
    # its last P V; consumer 0 takes that last turn when the tiles are over).
    src = mod.source
    assert "if (!kPersistent && c == 1) pass_turn(c);" in src and "if (kPersistent || c == 0) pass_turn(c);" in src
    tail = src[src.index("if (tiles == 0) {", src.index("void consume_persist")):]
    assert tail.index("if (c == 0) wait_my_turn(c);") < tail.index("return;")
    res = mod.resources[PERSIST]
    assert (res.registers, res.spills, res.stack) == (168, 0, 0), mod.report()
    # four stages leave no room for O's tiles, and O_STAGE=0 asks for none: O from registers, and the kernel
    # still compiles
    for other in (module(STAGES=4), module(O_STAGE=0)):
        assert "UTMASTG.2D" not in other.histogram(PERSIST) and other.resources[PERSIST].spills == 0


def test_fp8_refuses_a_ring_over_227_kb():
    # Five stages: 16 KB of Q + 5 x 48 KB of K, V and V^T is over the 227 KB a block may have on sm_90; the cell's
    # static_assert says so and what to do.
    with pytest.raises(fb.CompileError, match="exceed 227 KB: fewer STAGES"):
        CHAPTER.compile("fp8", "sm_90a", STAGES="5")


def test_fp8_persistent_tile_order_groups_heads_by_fp8_bytes():
    # With the causal mask rung 6's tile order takes heads in groups whose K and V fit in GROUP_BYTES (8 MB): a
    # head's K and V in e4m3 are 2 x 1 x d x s bytes (1 MB at s = 4096), twice as many heads as in bf16. Without the
    # mask, head-major (group 1).
    attend = CHAPTER.definitions("attend_fp8", np=np, fb=fb, math=math, g=None)["attend_fp8"]
    for causal, group in ((True, 8), (False, 1)):
        asked = {}
        kernel = types.SimpleNamespace(name=PERSIST, module=module(),
                                       bind=lambda *args, **kw: asked.update(kw, args=args))
        ins = types.SimpleNamespace(shape=(2, 8, 4096, 128), scales=(1.0, 1.0, 1.0), maps=(None, None, None),
                                    o_map=lambda o: None)
        attend(kernel, ins, "O", None, causal, bind=True)
        assert asked["args"][-4:-2] == (16, group), asked["args"]


# ---- CPU: the key order shared by P and V^T -------------------------------------------------------------------

def _key_at():
    expr = re.search(r"constexpr int key_at\(int p\) \{\s*return (.*?);", HEADER, re.S).group(1)
    return lambda p: eval(expr.replace("/", "//"), {"p": p})


def _pack_indices():
    # p_fragments' four pack_e4m3x4 calls: which accumulator registers (of the 16 of a k32 step) go into a0..a3.
    body = re.search(r"void p_fragments\(.*?\n\}", HEADER, re.S).group(0)
    return [tuple(int(x) for x in m) for m in
            re.findall(r"pack_e4m3x4\(s\[(\d+)\], s\[(\d+)\], s\[(\d+)\], s\[(\d+)\]\)", body)]


def test_key_order_matches_the_fragments():
    # For every thread and k32 step: byte e of a[kk][r] is the accumulator element the header packs there (row and
    # column from the D-fragment map, PTX ISA), and the 8-bit k32 A fragment puts it at row g (+8 for r = 1, 3),
    # position 4t + e (+16 for r = 2, 3). The key V^T holds at that position (key_at) must be that column.
    key_at = _key_at()
    packs = _pack_indices()
    assert len(packs) == 4 and sorted(i for p in packs for i in p) == list(range(16)), packs
    assert sorted(key_at(p) for p in range(32)) == list(range(32))
    for thread in range(128):
        g, t = 16 * (thread // 32) + (thread % 32) // 4, thread % 4
        for kk in range(4):
            for r, regs in enumerate(packs):
                for e, i in enumerate(regs):
                    reg = 16 * kk + i
                    row = 16 * (thread // 32) + (thread % 32) // 4 + 8 * ((reg % 4) // 2)   # accumulator_row_col
                    col = 8 * (reg // 4) + 2 * t + (reg % 2)
                    a_row, a_pos = g + 8 * (r % 2), 16 * (r // 2) + 4 * t + e
                    assert row == a_row, (thread, kk, r, e)
                    assert col == 32 * kk + key_at(a_pos), (thread, kk, r, e, col, key_at(a_pos))


def test_key_order_check_can_fail():
    # The natural order (position p holds key p) is what a plain transpose would write: it disagrees with the packing.
    packs = _pack_indices()
    t, kk, r, e = 1, 0, 0, 0
    reg = packs[r][e]
    col = 8 * (reg // 4) + 2 * t + (reg % 2)
    assert col != 4 * t + e


def _transpose_model(v):
    """transpose_v's lanes in numpy: V (128 keys x 128 bytes, SW128 as TMA writes it) -> V^T (SW128), following
    the header's row addresses, byte selectors and the PTX ISA's ldmatrix .trans / stmatrix fragments. Also
    returns the 16-byte chunks (mod 8) that each 8-row phase of every ldmatrix / stmatrix touches."""
    sw = lambda row, chunk: row * 128 + ((chunk ^ row) % 8) * 16      # byte offset of a 16-byte chunk, SW128
    smem_v = np.zeros(128 * 128, np.uint8)
    for key in range(128):
        for ch in range(8):
            smem_v[sw(key, ch):sw(key, ch) + 16] = v[key, 16 * ch:16 * ch + 16]
    vt = np.full(128 * 128, -1, np.int64)
    phases = []
    prmt = lambda a, b, sel: [(a + b)[(sel >> (4 * n)) & 7] for n in range(4)]
    for u in range(32):
        kc, dc = u % 8, u // 8
        # row addresses: ldmatrix lane l names row l % 8 of matrix l / 8 (keys 8 (m % 2) + i, d chunk 2 dc + m / 2)
        ld_addr = [sw(16 * kc + 8 * ((l // 8) % 2) + l % 8, 2 * dc + (l // 8) // 2) for l in range(32)]
        rowsel = [2 * (l % 8) + (((l // 8) % 2) ^ (1 if l % 8 >= 4 else 0)) for l in range(32)]
        st_addr = [sw(32 * dc + 16 * ((l // 8) // 2) + rowsel[l], kc) for l in range(32)]
        phases += [sorted((a % 128) // 16 for a in addrs[8 * j:8 * j + 8]) for addrs in (ld_addr, st_addr) for j in range(4)]
        for lane in range(32):
            c, t = lane // 4, lane % 4
            # ldmatrix .trans, register j: b16 column c of matrix j, rows 2t and 2t + 1 -> 4 bytes
            r = []
            for j in range(4):
                base = ld_addr[8 * j:8 * j + 8]
                r.append([smem_v[base[2 * t] + 2 * c], smem_v[base[2 * t] + 2 * c + 1],
                          smem_v[base[2 * t + 1] + 2 * c], smem_v[base[2 * t + 1] + 2 * c + 1]])
            sel_a = 0x7531 if c >= 4 else 0x6420
            sel_b = sel_a ^ 0x1111
            out = [prmt(r[0], r[1], sel_a), prmt(r[0], r[1], sel_b), prmt(r[2], r[3], sel_a), prmt(r[2], r[3], sel_b)]
            # stmatrix, register j: row c of matrix j at the address lane 8 j + c names, bytes 4t .. 4t + 3
            for j in range(4):
                a = st_addr[8 * j + c] + 4 * t
                vt[a:a + 4] = out[j]
    # read V^T back through the swizzle: row n (a column of d), byte position p of key chunk kc
    back = np.zeros((128, 128), np.int64)
    for n in range(128):
        for ch in range(8):
            back[n, 16 * ch:16 * ch + 16] = vt[sw(n, ch):sw(n, ch) + 16]
    return back, phases


def test_transpose_model_writes_key_order_without_bank_conflicts():
    key_at = _key_at()
    v = np.random.default_rng(0).integers(0, 256, (128, 128)).astype(np.uint8)
    vt, phases = _transpose_model(v)
    want = np.array([[v[32 * (p // 32) + key_at(p % 32), n] for p in range(128)] for n in range(128)])
    assert (vt == want).all(), np.argwhere(vt != want)[:5]
    assert all(ph == list(range(8)) for ph in phases), "a phase of 8 rows hits the same 16-byte chunk twice"


def test_transpose_model_check_can_fail():
    # With both stmatrix matrices taking the even rows first (rows 0, 2, .. 14), each store phase would hit only
    # four chunks: the check above is what keeps the row choice honest.
    rows = [2 * i for i in range(8)]
    assert sorted(((0 ^ r) % 8) for r in rows) != list(range(8))


# ---- CPU: the fp8 bound on a numpy model ----------------------------------------------------------------------

def test_fp8_bound_holds_for_the_model_and_rejects_one_key_too_many():
    # The kernel's arithmetic in numpy on e4m3 inputs (one head, s = 2048): fp32 scores, P = 2^8 p rounded to e4m3,
    # l from the unrounded p, O rounded to bf16; against float64 of the same e4m3 inputs. Within the bound with
    # the right causal mask; with one key past the diagonal, outside it.
    ml_dtypes = pytest.importorskip("ml_dtypes")
    ns = CHAPTER.definitions("quantize_e4m3", "P8_ROUNDING", "O_ROUNDING", "LSE_TOL", np=np, fb=fb)
    e4m3 = np.dtype(ml_dtypes.float8_e4m3fn)
    s_len, d = 2048, 128
    rng = np.random.default_rng(3)
    q, k, v = (ns["quantize_e4m3"](rng.standard_normal((s_len, d)).astype(np.float32)) for _ in range(3))
    q, k, v = (x.view(e4m3).astype(np.float64) * sc for x, sc in (q, k, v))
    x = q @ k.T / math.sqrt(d)
    causal = np.tri(s_len, s_len, 0, bool)
    xm = np.where(causal, x, -np.inf)
    p = np.exp(xm - xm.max(1, keepdims=True))
    ref_lse = np.log(p.sum(1)) + xm.max(1)
    p /= p.sum(1, keepdims=True)
    ref_o, r = p @ v, np.sqrt((p * p) @ (v * v))

    def kernel_like(keep):
        xs = np.where(keep, x.astype(np.float32), -np.inf)
        pk = np.exp2((xs - xs.max(1, keepdims=True)) * np.float32(1 / math.log(2)) + 8).astype(np.float32)
        o = pk.astype(e4m3).astype(np.float32) @ v.astype(np.float32) / pk.sum(1, keepdims=True)
        return o.astype(fb.bfloat16).astype(np.float64), np.log(pk.sum(1) / 256) + xs.max(1)

    def worst(o, lse):
        return (np.max(np.abs(o - ref_o) / (ns["P8_ROUNDING"] * r + ns["O_ROUNDING"] * np.abs(ref_o))),
                np.max(np.abs(lse - ref_lse) / (ns["LSE_TOL"] * (1 + np.abs(ref_lse)))))

    good = worst(*kernel_like(causal))
    assert max(good) < 1, good
    bad = worst(*kernel_like(np.tri(s_len, s_len, 1, bool)))
    assert bad[0] > 1, bad


# ---- GPU (Hopper) -------------------------------------------------------------------------------------------------

def fp8_ns():
    """The chapter's fp8 host helpers (inputs, launch, float64 reference and bound); the reference needs PyTorch."""
    torch = pytest.importorskip("torch")
    return CHAPTER.definitions("Inputs8", "attend_fp8", "check_bound_fp8", "float_inputs", "reference_bound_fp8",
                               np=np, fb=fb, torch=torch, math=math)


@pytest.mark.parametrize("kernel", [KERNEL, PERSIST])
def test_gpu_fp8_random_ragged_shapes_within_the_bound(gpu90, kernel):
    # The timed builds, causal and not, normal inputs, within the fp8 bound at a ragged shape; with FEEDBEAST_STRESS=N
    # (make stress) at N random ragged (b, h, s) after it, a quarter of them tiny. The persistent kernel on 5 blocks.
    ns = fp8_ns()
    blocks = 5 if kernel == PERSIST else None
    for b, h, s in stress.sizes((2, 3, 1000), multiple_of=(1, 1, 128)):
        shape = (b, h, s, 128)
        ins = ns["Inputs8"](*ns["float_inputs"]("normal", *shape, seed=sum(shape)))
        for causal in (False, True):
            o, lse = fb.empty(shape, fb.bfloat16), fb.empty(shape[:3], np.float32)
            ns["attend_fp8"](module()[kernel], ins, o, lse, causal, blocks=blocks)
            res = ns["check_bound_fp8"](o, lse, ns["reference_bound_fp8"](*ins.host, causal), f"{shape} causal={causal}")
            assert res, res


@pytest.mark.parametrize("kernel", [KERNEL, PERSIST])
def test_gpu_fp8_within_the_bound(gpu90, kernel):
    # The persistent kernel runs 5 blocks, so that each block runs many tiles, ragged ones among them, and the
    # ring, the turns and Q's buffer go on from one tile to the next.
    ns = fp8_ns()
    blocks = 5 if kernel == PERSIST else None
    src = CHAPTER.cuda("fp8").source
    assert src.count("sm.step(sc, alpha, row0,") == 2
    plant = fb.compile(src.replace("sm.step(sc, alpha, row0,", "sm.step(sc, alpha, row0 + 1,"), "sm_90a",
                       defines=module().defines)
    cases = [(module().debug_build(), shape, "normal", False)
             for shape in [(1, 1, 1, 128), (2, 3, 200, 128), (1, 2, 129, 128), (2, 2, 1000, 128), (1, 1, 383, 128)]]
    cases += [(module(), (1, 8, 4096, 128), kind, False) for kind in ("normal", "outliers")]
    cases += [(plant, (1, 8, 4096, 128), "normal", True)]
    for mod, shape, kind, planted in cases:
        ins = ns["Inputs8"](*ns["float_inputs"](kind, *shape, seed=sum(shape)))
        for causal in ((False, True) if not planted else (True,)):
            o, lse = fb.empty(shape, fb.bfloat16), fb.empty(shape[:3], np.float32)
            ns["attend_fp8"](mod[kernel], ins, o, lse, causal, blocks=blocks)
            ref = ns["reference_bound_fp8"](*ins.host, causal)
            res = ns["check_bound_fp8"](o, lse, ref, f"{shape} {kind} causal={causal} planted={planted}")
            assert bool(res) != planted, res
            # the planted mask is rejected on its numbers: an output never written (poison, NaN) reads as inf
            assert not planted or math.isfinite(res.o_ratio), res
