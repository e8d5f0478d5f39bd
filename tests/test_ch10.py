"""Chapter 10 (decode GEMV) and lab 10 (fp8 weights with per-channel scales).

CPU: every variant of the chapter's GEMV, with 128 and with 64 weight rows per block, compiles for sm_90a with the
instructions it is about (TMA loads with and without an L2 policy, the cluster barrier of the DSMEM reduction,
UBLKRED for the TMA reduce, PREEXIT and ACQBULK for programmatic dependent launch), with no spills; 64 rows issue
half the mma of 128 per stage; the wgmma consumers issue one HGMMA per k16 step and m64 tile and no ldmatrix; a
stage of B boxes issues B weight and B token loads and 4 B k16 steps, and the host's shared-memory size is the
kernel's (a compile-time check); prefetch builds issue UTMAPF (before the dependency wait with PDL); two token
blocks per tile multicast the weight tile (one multicast per box, with four boxes too) and arrive on each other's
barriers; the planner and the host checks refuse what the hardware cannot do, with a message; the tuner's
candidates are both consumers, both block heights and two token blocks with every portable K split, each a launch
the host side binds; a tile with no K split and one token block launches without a cluster; the launch
configuration carries the PDL attribute; the lab's quantization matches its definition and its kernel shows the
fp8 conversion.
GPU (Hopper; skipped by name elsewhere): each variant on ragged shapes against float64 with poisoned outputs (two
token blocks per tile too), the cluster reduction giving the same bits twice, a PDL chain giving the same result as
the plain one; one and four boxes per stage against float64 (four with two token blocks too); each ring against
the driver's occupancy calculator; every K split S = 1, 2, 4, 8 against float64 (S = 1 with one token block has
no cluster; two token blocks up to S = 4); the lab's fp8 kernel against float64 of the dequantized weights; the
tuner's kinds of build at a ragged shape, and with `make stress` (FEEDBEAST_STRESS=N) at N random ragged ones each.
Kernels and helpers are read from the notebooks, so what is tested is what ships.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import feedbeast as fb
from feedbeast import stress
from feedbeast.course.notebook import load

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = load(ROOT / "chapters/10-decode.ipynb")
SOLUTION = load(ROOT / "solutions/10-fp8-gemv.ipynb")


@pytest.fixture(scope="module")
def ch():
    ns = CHAPTER.definitions("gemv_module", "smem_bytes", "plan", "prepare_gemv", "run_gemv_check", "ring_stages",
                             "BOXES", "TUNE", np=np, fb=fb, g=fb.gpu(), gemv=CHAPTER.cuda("gemv"))
    return ns


@pytest.fixture(scope="module")
def lab():
    return SOLUTION.definitions("fp8_module", "quantize", "dequantize", "prepare_fp8", "check_fp8", np=np, fb=fb,
                                g=fb.gpu(), lab=SOLUTION.cuda("lab"))


VARIANTS = [  # (defines, must show, must not show)
    (dict(red=0, hint=1, pdl=0), ("UTMALDG.2D", "HMMA.16816.F32.BF16", "LDSM.16.M88.4", "UCGABAR_ARV", "UCGABAR_WAIT"),
     ("UBLKRED", "PREEXIT", "ACQBULK")),
    (dict(red=1, hint=1, pdl=0), ("UTMALDG.2D", "UBLKRED.G.S.ADD.BF16.RN", "FENCE.VIEW.ASYNC.S"), ("UCGABAR_ARV",)),
    (dict(red=0, hint=0, pdl=1), ("PREEXIT", "ACQBULK", "UTMALDG.2D"), ("UBLKRED",)),
    (dict(red=1, hint=1, pdl=1), ("PREEXIT", "ACQBULK", "UBLKRED.G.S.ADD.BF16.RN"), ()),
]


@pytest.mark.parametrize("rows", [128, 64])
@pytest.mark.parametrize("mp", [8, 16, 32, 64])
@pytest.mark.parametrize("defines, want, forbid", VARIANTS)
def test_variant_sass_and_resources(ch, mp, defines, want, forbid, rows):
    stages = ch["plan"](mp, 4096, 4096, rows=rows)[1]
    mod = ch["gemv_module"](mp, stages, rows=rows, **defines)
    mod.expect_sass(*want, forbid=forbid + ("LDL", "STL"), kernel="gemv_bf16")
    res = mod.resources["gemv_bf16"]
    assert res.spills == 0 and res.stack == 0, mod.report()
    assert res.registers <= 204, f"two blocks of 160 threads per SM need <= 204 registers: {res}"
    # two blocks per SM fit in the H100's 228 KB of shared memory (1 KB reserved per block)
    assert 2 * (ch["smem_bytes"](mp, stages, rows=rows) + 1024) <= 228 * 1024


@pytest.mark.parametrize("mp", [8, 64])
def test_64_rows_issue_half_the_mma(ch, mp):
    # Each consumer warp multiplies one m16 tile of weights instead of two: half the HMMA of the stage (unrolled
    # once in the consumer loop), the same ldmatrix of the tokens, half the ldmatrix of the weights. A stage is
    # BOXES boxes of 64 k: 4 k16 steps each.
    count = lambda rows, op: sum(v for o, v in ch["gemv_module"](mp, ch["plan"](mp, 64, 64, rows=rows)[1], rows=rows)
                                 .histogram("gemv_bf16").items() if o.startswith(op))
    steps = 4 * ch["BOXES"]
    assert count(128, "HMMA.16816.F32.BF16") == 2 * count(64, "HMMA.16816.F32.BF16") == mp * steps // 4
    assert count(128, "LDSM.16.M88.4") - count(64, "LDSM.16.M88.4") == steps    # k16 steps x 1 weight tile


def test_cache_hint_rides_on_the_tma_load(ch):
    # .L2::cache_hint adds the policy operand (desc[UR..]) to every UTMALDG; without it none has one.
    def loads(hint):
        sass = ch["gemv_module"](8, ch["ring_stages"](8), hint=hint).sass("gemv_bf16")
        return [ln for ln in sass.splitlines() if "UTMALDG" in ln]
    hinted, plain = loads(1), loads(0)
    assert hinted and all("desc[" in ln for ln in hinted), hinted
    assert plain and not any("desc[" in ln for ln in plain), plain


def test_weights_are_requested_before_the_dependency_wait(ch):
    # With PDL the producer issues its first weight loads before griddepcontrol.wait (ACQBULK) and the rest after
    # it. That no activation load comes before the wait is the source's order (decode.cuh): the SASS does not say
    # which tensor map a UTMALDG reads, so it is not checked here.
    sass = ch["gemv_module"](8, ch["ring_stages"](8), pdl=1).sass("gemv_bf16").splitlines()
    wait = next(i for i, ln in enumerate(sass) if "ACQBULK" in ln)
    assert any("UTMALDG" in ln for ln in sass[:wait]), "no weight load before the wait"
    assert any("UTMALDG" in ln for ln in sass[wait:]), "no load after the wait"


@pytest.mark.parametrize("m, n, k, split, rows", [(1, 4096, 4096, 4, 128), (64, 8192, 8192, 2, 128),
                                                  (8, 14336, 4096, 1, 128), (1, 4096, 14336, 4, 128), (5, 8, 8, 1, 128),
                                                  (1, 4096, 4096, 2, 64), (64, 8192, 8192, 1, 64), (5, 8, 8, 1, 64)])
def test_plan(ch, m, n, k, split, rows):
    mp, stages, s = ch["plan"](m, n, k, rows=rows)
    assert mp == next(p for p in (8, 16, 32, 64) if m <= p)
    # the deepest ring that leaves two blocks per SM: 228 KB of shared memory per SM, 1 KB reserved per block
    two_blocks = lambda st: 2 * (ch["smem_bytes"](mp, st, rows) + 1024)
    assert two_blocks(stages) <= 228 * 1024 < two_blocks(stages + 1)
    if fb.gpu() is None or fb.gpu().sm_count == 132:
        assert s == split
    assert 1 <= s <= 8


def test_tuner_tries_both_heights_and_consumers_with_every_portable_split(ch):
    # The measurement cell's tuner times TUNE: mma.sync and wgmma consumers, 128 and 64 weight rows per block, each
    # with S = 1, 2, 4 and 8 (the portable cluster size), and wgmma with two token blocks per weight tile at S = 1, 2
    # and 4 (a cluster of S x 2). Every candidate is a launch that prepare_gemv binds (its cluster, its ring in
    # shared memory) and that keeps the S it was given.
    tune = ch["TUNE"]
    assert len(set(tune)) == len(tune) == 22
    for rows in (128, 64):
        for mma in (0, 1):
            assert sorted(S for r, S, q, T in tune if (r, q, T) == (rows, mma, 1)) == [1, 2, 4, 8]
        assert sorted(S for r, S, q, T in tune if (r, q, T) == (rows, 1, 2)) == [1, 2, 4]
    bf = fb.bfloat16
    for m, n, k in [(1, 1000, 136), (64, 264, 4104)]:
        x, w, c = fb.empty((m, k), bf), fb.empty((n, k), bf), fb.empty((m, n), bf)
        for rows, S, mma, T in tune:
            if T == 2 and m <= 8:
                continue          # the cell leaves these out: the second block would have no token
            assert ch["plan"](m, n, k, split=S, rows=rows, token_blocks=T)[2] == S
            assert callable(ch["prepare_gemv"](x, w, c, split=S, rows=rows, mma=mma, token_blocks=T))


@pytest.mark.parametrize("rows", [128, 64])
@pytest.mark.parametrize("mp", [8, 16, 32, 64])
def test_wgmma_consumers_read_the_tokens_once(ch, mp, rows):
    # mma=1: one wgmma m64nMPk16 per k16 step and m64 tile (4 k16 steps x rows / 64 tiles), both operands through
    # descriptors: no ldmatrix and no HMMA, where the mma.sync build loads the tokens with ldmatrix in every warp.
    stages = ch["plan"](mp, 4096, 4096, rows=rows)[1]
    wg, sync = (ch["gemv_module"](mp, stages, rows=rows, mma=q) for q in (1, 0))
    hist = wg.histogram("gemv_bf16")
    steps = 4 * ch["BOXES"]                                   # k16 steps per stage
    assert sum(v for o, v in hist.items() if o.startswith(f"HGMMA.64x{mp}x16.F32.BF16")) == steps * rows // 64, hist
    assert not any(o.startswith(("LDSM", "HMMA")) for o in hist), hist
    assert any(o.startswith("LDSM") for o in sync.histogram("gemv_bf16"))
    wg.expect_sass("UTMALDG.2D", "UCGABAR_ARV", "WARPGROUP.ARRIVE", forbid=("LDL", "STL"), kernel="gemv_bf16")
    res = wg.resources["gemv_bf16"]
    assert res.spills == 0 and res.registers <= 204, wg.report()


@pytest.mark.parametrize("mma", [0, 1])
@pytest.mark.parametrize("boxes", [1, 2, 4])
def test_a_stage_is_boxes_side_by_side_along_k(ch, boxes, mma):
    # boxes=B: the producer issues B weight boxes and B token boxes per stage (B + B UTMALDG in its unrolled loop),
    # the consumers 4 B k16 steps per stage (HGMMA per m64 tile, or HMMA per m16 tile and n8 tile), and the ring
    # holds B times fewer stages of the same bytes; the prefetch asks for every box of a stage.
    rows, mp = 64, 16
    stages = ch["ring_stages"](mp, rows, boxes)
    mod = ch["gemv_module"](mp, stages, rows=rows, mma=mma, boxes=boxes)
    hist = mod.histogram("gemv_bf16")
    assert sum(v for o, v in hist.items() if o.startswith("UTMALDG")) == 2 * boxes, hist
    mmas = sum(v for o, v in hist.items() if o.startswith(("HGMMA", "HMMA")))
    assert mmas == 4 * boxes * (1 if mma else mp // 8), hist
    one = ch["ring_stages"](mp, rows, 1)
    assert one // boxes - 1 <= stages <= one // boxes + 1
    res = mod.resources["gemv_bf16"]
    assert res.spills == 0 and res.registers <= 204, mod.report()
    # the host's smem_bytes is checked against the kernel's Shape::SMEM at compile time (SMEM_BYTES): one byte off
    # is refused
    wrong = dict(MP=mp, STAGES=stages, ROWS=rows, MMA=mma, BOXES=boxes,
                 SMEM_BYTES=ch["smem_bytes"](mp, stages, rows, boxes) + 1)
    with pytest.raises(fb.CompileError, match="smem_bytes"):
        fb.compile(CHAPTER.cuda("gemv").source, "sm_90a", name="gemv.cu", defines=wrong)
    pf = ch["gemv_module"](mp, stages, rows=rows, mma=mma, boxes=boxes, prefetch=8).histogram("gemv_bf16")
    assert pf.get("UTMAPF.L2.2D", 0) % boxes == 0 and pf.get("UTMAPF.L2.2D", 0) >= boxes, pf


def test_boxes_are_refused_with_a_reason(ch):
    bf = fb.bfloat16
    with pytest.raises(ValueError, match="boxes = 3"):
        ch["ring_stages"](8, 128, 3)
    with pytest.raises(ValueError, match="boxes = 0"):
        ch["prepare_gemv"](fb.empty((3, 64), bf), fb.empty((100, 64), bf), fb.empty((3, 100), bf), boxes=0)
    # four boxes of 128 rows and 64 tokens are 96 KB: one stage, nothing loading while the consumers read
    with pytest.raises(ValueError, match="room for 1 stage.*fewer boxes per stage or 64 rows or token_blocks=2"):
        ch["prepare_gemv"](fb.empty((64, 4096), bf), fb.empty((1000, 4096), bf), fb.empty((64, 1000), bf), boxes=4)
    with pytest.raises(ValueError, match="use fewer boxes per stage or token_blocks=2 \\(32 tokens per block\\)$"):
        ch["plan"](64, 4096, 4096, rows=64, boxes=4)        # 64 rows already: not offered again
    assert ch["plan"](32, 4096, 4096, rows=64, boxes=4)[1] == 2      # 2 x 48 KB: the deepest that is allowed


def test_wgmma_and_prefetch_are_refused_with_a_reason_for_other_values(ch):
    bf = fb.bfloat16
    args = lambda: (fb.empty((3, 64), bf), fb.empty((100, 64), bf), fb.empty((3, 100), bf))
    with pytest.raises(ValueError, match="mma = 2"):
        ch["prepare_gemv"](*args(), mma=2)
    with pytest.raises(ValueError, match="prefetch = 65"):
        ch["prepare_gemv"](*args(), prefetch=65)


@pytest.mark.parametrize("boxes, rows", [(None, None), (4, 64)])
@pytest.mark.parametrize("red", [0, 1])
@pytest.mark.parametrize("mma", [0, 1])
def test_token_blocks_share_each_weight_tile_by_multicast(ch, mma, red, boxes, rows):
    # token_blocks=2: the producer loads half of the tile's rows with UTMALDG.2D.MULTICAST (to both blocks), each
    # consumer warp arrives on its own and on the peer's empty barrier (SYNCS.ARRIVE...RED: the remote arrive), and
    # the pair meets at a cluster barrier before the first load; with one block per tile none of that is there.
    # (The chapter's boxes per stage and 128 rows, and four boxes of 64 rows.)
    boxes, rows = boxes or ch["BOXES"], rows or ch["BN"]
    stages = ch["plan"](64, 4096, 4096, token_blocks=2, rows=rows, boxes=boxes)[1]
    two = ch["gemv_module"](32, stages, red=red, mma=mma, token_blocks=2, rows=rows, boxes=boxes).sass(
        "gemv_bf16").splitlines()
    one = ch["gemv_module"](32, stages, red=red, mma=mma, rows=rows, boxes=boxes).sass("gemv_bf16").splitlines()
    assert sum("UTMALDG.2D.MULTICAST" in ln for ln in two) == boxes    # one per weight box of a stage
    assert any("SYNCS.ARRIVE.TRANS64.RED" in ln for ln in two)
    first_load = next(i for i, ln in enumerate(two) if "UTMALDG" in ln)
    assert any("UCGABAR_WAIT" in ln for ln in two[:first_load])
    assert not any("MULTICAST" in ln or "SYNCS.ARRIVE.TRANS64.RED" in ln for ln in one)
    # The remote arrival: relaxed after wgmma's wait (the arrive alone), a cluster-scope release after ldmatrix
    # (MEMBAR.ALL.GPU in front of it), which made the two-block build 2.1-3.5 times slower on an H200.
    remote = next(i for i, ln in enumerate(two) if "SYNCS.ARRIVE.TRANS64.RED" in ln)
    assert any("MEMBAR.ALL.GPU" in ln for ln in two[remote - 4:remote]) == (mma == 0)


def test_token_blocks_plan_and_refusals(ch):
    plan, prepare = ch["plan"], ch["prepare_gemv"]
    assert plan(64, 4096, 4096, token_blocks=2)[0] == 32 and plan(9, 4096, 4096, token_blocks=2)[0] == 8
    assert plan(64, 4096, 4096, token_blocks=2)[2] <= 4          # S x 2 blocks in a portable cluster of 8
    with pytest.raises(ValueError, match="token_blocks = 3"):
        plan(64, 4096, 4096, token_blocks=3)
    with pytest.raises(ValueError, match="from M = 9 on"):
        plan(8, 4096, 4096, token_blocks=2)
    bf = fb.bfloat16
    with pytest.raises(fb.LaunchError, match="at most 8"):
        prepare(fb.empty((33, 64), bf), fb.empty((100, 64), bf), fb.empty((33, 100), bf), split=8, token_blocks=2)


@pytest.mark.parametrize("pdl", [0, 1])
def test_prefetch_requests_weight_tiles_into_the_l2(ch, pdl):
    # prefetch=N: UTMAPF.L2.2D (cp.async.bulk.prefetch.tensor), none without it; with PDL the first prefetches are
    # issued before griddepcontrol.wait (ACQBULK), as the first weight loads are.
    sass = lambda pf: ch["gemv_module"](8, ch["ring_stages"](8), pdl=pdl, prefetch=pf).sass("gemv_bf16").splitlines()
    assert not any("UTMAPF" in ln for ln in sass(0))
    lines = sass(8)
    pf = [i for i, ln in enumerate(lines) if "UTMAPF.L2.2D" in ln]
    assert pf, "no prefetch in the build"
    if pdl:
        assert pf[0] < next(i for i, ln in enumerate(lines) if "ACQBULK" in ln)


def test_bad_input_is_refused_with_a_reason(ch):
    plan, prepare = ch["plan"], ch["prepare_gemv"]
    bf = fb.bfloat16
    with pytest.raises(ValueError, match="M = 65"):
        plan(65, 4096, 4096)
    with pytest.raises(ValueError, match="128 or 64 weight rows"):
        plan(1, 4096, 4096, rows=96)
    with pytest.raises(ValueError, match="multiple of 8"):
        prepare(fb.empty((3, 4100), bf), fb.empty((100, 4100), bf), fb.empty((3, 100), bf))
    with pytest.raises(ValueError, match="TMA reduce"):
        prepare(fb.empty((3, 64), bf), fb.empty((1001, 64), bf), fb.empty((3, 1001), bf), red=1)
    with pytest.raises(ValueError, match="do not multiply"):
        prepare(fb.empty((3, 64), bf), fb.empty((100, 72), bf), fb.empty((3, 100), bf))
    with pytest.raises(fb.LaunchError, match="at most 8"):
        prepare(fb.empty((3, 64), bf), fb.empty((100, 64), bf), fb.empty((3, 100), bf), split=16)


def test_a_tile_with_no_split_launches_without_a_cluster(ch):
    # Red 0 with S = 1: the block's partial is its tile's sum, so the launch has no cluster and the kernel (a branch
    # on S) passes no cluster barrier; S > 1 keeps its cluster of S, two token blocks their pair, and the TMA reduce
    # (red=1) needs one only for the pair.
    bf = fb.bfloat16
    x, w, c = fb.empty((17, 1032), bf), fb.empty((4104, 1032), bf), fb.empty((17, 4104), bf)

    def cluster(**variant):
        f = ch["prepare_gemv"](x, w, c, **variant)
        f = getattr(f, "launch", f)          # red=1 wraps its launch in the zeroing of C
        return None if f.cluster is None else tuple(f.cluster)
    assert cluster(split=1) is None
    assert cluster(split=2) == (1, 2, 1) and cluster(split=8, rows=64) == (1, 8, 1)
    assert cluster(split=1, token_blocks=2) == (1, 1, 2) and cluster(split=4, token_blocks=2) == (1, 4, 2)
    assert cluster(red=1, split=4) is None and cluster(red=1, split=2, token_blocks=2) == (1, 1, 2)


def test_pdl_launch_attribute():
    from cuda.bindings import driver
    from feedbeast.launch import Kernel
    ids = lambda cfg: [a.id for a in cfg.attrs]
    pdl = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    on = Kernel._config(None, (2, 1, 1), (32, 1, 1), 0, (1, 1, 1), 0, True)
    off = Kernel._config(None, (2, 1, 1), (32, 1, 1), 0, None, 0)
    assert pdl in ids(on) and on.numAttrs == 2 and on.attrs[-1].value.programmaticStreamSerializationAllowed == 1
    assert pdl not in ids(off) and off.numAttrs == 0


# ---- lab 10 (CPU) ------------------------------------------------------------------------------------------

def test_lab_quantize_matches_the_definition(lab):
    import ml_dtypes
    rng = np.random.default_rng(3)
    w = rng.standard_normal((9, 40)) * rng.uniform(0.01, 100, (9, 1))
    w[2] = 0
    w8, s = lab["quantize"](w)
    amax = np.abs(w).max(1)
    assert np.allclose(s, np.where(amax > 0, amax / 448, 1), rtol=1e-6)
    deq = lab["dequantize"](w8, s)
    assert np.abs(deq).max(1)[amax > 0] == pytest.approx(amax[amax > 0], rel=1e-6)   # the row max maps to 448
    assert np.all(np.abs(deq - w) <= np.abs(w) * 2 ** -4 + s[:, None] * 2 ** -9)   # e4m3: 3 mantissa bits
    assert w8.dtype == np.uint8 and np.isfinite(w8.view(ml_dtypes.float8_e4m3fn).astype(np.float32)).all()


@pytest.mark.parametrize("mp", [8, 64])
def test_lab_solution_sass(lab, mp):
    mod = lab["fp8_module"](mp)
    mod.expect_sass("F2FP.F16.E4M3.UNPACK_B", "HMMA.16816.F32", "LDSM.16.M88.4", "LDS.64", "UTMALDG.2D",
                    forbid=("HMMA.16816.F32.BF16", "LDL", "STL"), kernel="gemv_fp8")


def test_lab_as_given_compiles_and_has_no_fp8_conversion():
    # The lab (solution regions replaced by their LAB lines) still compiles: a learner can run it from the start.
    from feedbeast.course.labs import strip_source
    src = strip_source(SOLUTION.cuda("lab").source)
    assert "TODO" in src
    mod = fb.compile(src, "sm_90a", name="lab.cu", defines={"MP": 8, "STAGES": 6})
    assert "F2FP.F16.E4M3.UNPACK_B" not in mod.histogram("gemv_fp8")


# ---- GPU (Hopper) -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", [dict(red=0, hint=1), dict(red=1, hint=1), dict(red=0, hint=0),
                                     dict(red=0, hint=1, pdl=True), dict(red=1, hint=0, pdl=True),
                                     dict(red=0, hint=1, rows=64), dict(red=1, hint=1, rows=64),
                                     dict(red=0, hint=1, pdl=True, rows=64), dict(red=0, hint=1, mma=1),
                                     dict(red=1, hint=1, mma=1), dict(red=0, hint=1, rows=64, mma=1),
                                     dict(red=0, hint=1, pdl=True, rows=64, mma=1),
                                     dict(red=0, hint=1, mma=1, prefetch=8), dict(red=0, hint=1, pdl=True, prefetch=8),
                                     dict(red=0, hint=1, boxes=1), dict(red=1, hint=1, mma=1, boxes=1)])
@pytest.mark.parametrize("m, n, k", [(1, 4096, 4096), (3, 1000, 136), (7, 264, 4104), (33, 136, 64),
                                     (64, 4104, 1032), (64, 8, 8), (17, 14336, 4096), (2, 4096, 14336)])
def test_gpu_gemv_ragged_against_float64(gpu90, ch, variant, m, n, k):
    r = ch["run_gemv_check"](m, n, k, seed=m * n + k, **variant)
    assert r, r


@pytest.mark.parametrize("variant", [dict(red=0, hint=1), dict(red=1, hint=1, mma=1), dict(red=0, hint=1, mma=1),
                                     dict(red=0, hint=1, pdl=True, prefetch=8, mma=1)])
@pytest.mark.parametrize("m, n, k", [(1, 4096, 4096), (3, 1000, 136), (7, 264, 4104), (32, 136, 64), (17, 14336, 4096),
                                     (2, 4096, 14336), (32, 8, 8)])
def test_gpu_gemv_four_boxes_against_float64(gpu90, ch, variant, m, n, k):
    # Four boxes per stage (256 k): 64 rows, up to 32 tokens (more would leave one stage). K not a multiple of 256.
    r = ch["run_gemv_check"](m, n, k, seed=m * n + k, rows=64, boxes=4, **variant)
    assert r, r


@pytest.mark.parametrize("variant", [dict(red=0, hint=1, mma=1), dict(red=0, hint=1, mma=0, rows=64),
                                     dict(red=1, hint=1, mma=1), dict(red=0, hint=0, pdl=True, mma=1, rows=64),
                                     dict(red=0, hint=1, mma=1, split=1), dict(red=0, hint=1, mma=0, prefetch=4),
                                     dict(red=0, hint=1, mma=1, boxes=1), dict(red=0, hint=1, mma=1, rows=64, boxes=4),
                                     dict(red=1, hint=1, mma=0, rows=64, boxes=4)])
@pytest.mark.parametrize("m, n, k", [(9, 1000, 136), (17, 264, 4104), (33, 4104, 1032), (64, 136, 64),
                                     (64, 8200, 520), (40, 4096, 4096)])
def test_gpu_gemv_token_blocks_against_float64(gpu90, ch, variant, m, n, k):
    # Two blocks per weight tile, each half of the tokens, the tile multicast to both: every output row once (with
    # four boxes per stage too: four multicast weight boxes, K not a multiple of 256).
    r = ch["run_gemv_check"](m, n, k, seed=m * n + k, token_blocks=2, **variant)
    assert r, r


EVERY_SPLIT = [(S, v, shape) for S in (1, 2, 4, 8)
               for v in (dict(mma=0), dict(mma=1), dict(mma=1, rows=64), dict(mma=1, token_blocks=2))
               for shape in ((1, 1000, 4104), (33, 264, 1032), (64, 136, 520))
               if v.get("token_blocks", 1) == 1 or (S <= 4 and shape[0] > 8)]


@pytest.mark.parametrize("split, variant, shape", EVERY_SPLIT)
def test_gpu_gemv_every_split_against_float64(gpu90, ch, split, variant, shape):
    # S = 1 with one token block sums its tile alone, with no cluster and no cluster barrier; S = 2, 4 and 8 through
    # distributed shared memory (two token blocks: S x 2 in the cluster). Ragged shapes, both consumers, both heights.
    m, n, k = shape
    r = ch["run_gemv_check"](m, n, k, seed=m * n + k + split, split=split, **variant)
    assert r, r


# The tuner's kinds of build (both consumers, both heights, two token blocks, four boxes) and the TMA reduce. With
# FEEDBEAST_STRESS=N (make stress) each takes N random ragged shapes after the base one (feedbeast.stress.sizes: a
# quarter of them tiny), else the base shape alone. Two token blocks need M >= 9, four boxes M <= 32 (the ring),
# the TMA reduce N a multiple of 8, and every build K a multiple of 8 (a tensor map's 16-byte row stride).
STRESSED_GEMV = [dict(mma=0), dict(mma=1), dict(mma=1, rows=64), dict(mma=0, rows=64, split=2),
                 dict(mma=1, token_blocks=2), dict(mma=1, rows=64, boxes=4), dict(mma=1, red=1)]


@pytest.mark.parametrize("variant", STRESSED_GEMV, ids=lambda v: "-".join(f"{k}{x}" for k, x in v.items()))
def test_gpu_gemv_random_ragged_sizes(gpu90, ch, variant):
    lo_m = 9 if variant.get("token_blocks") == 2 else 1
    hi_m = 32 if variant.get("boxes") == 4 else 64
    n_align = 8 if variant.get("red") == 1 else 1
    for m, n, k in stress.sizes((hi_m, 4104, 2056), multiple_of=(8, 128, 128), align=(1, n_align, 8),
                                at_least=(lo_m, 8, 8)):
        r = ch["run_gemv_check"](m, n, k, seed=m * n + k, **variant)
        assert r, r


@pytest.mark.parametrize("boxes", [1, 2, 4])
@pytest.mark.parametrize("rows", [128, 64])
def test_gpu_ring_is_the_deepest_that_keeps_two_blocks_per_sm(gpu90, ch, rows, boxes):
    # ring_stages' budget (228 KB per SM, 1 KB reserved per block) against the driver's occupancy calculator: the
    # chosen ring leaves two blocks of 160 threads on every SM, one more stage would not.
    from cuda.bindings import driver
    dev = driver.cuDeviceGet(0)[1]
    reserved = driver.cuDeviceGetAttribute(
        driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, dev)[1]
    assert (fb.gpu().smem_per_sm, reserved) == (228 * 1024, 1024)
    for mp in (8, 16, 32, 64):
        try:
            stages = ch["ring_stages"](mp, rows, boxes)
        except ValueError:
            assert ch["smem_bytes"](mp, 2, rows, boxes) + reserved > fb.gpu().smem_per_sm // 2
            continue
        for st, want in ((stages, 2), (stages + 1, 1)):
            kernel = ch["gemv_module"](mp, st, rows=rows, mma=1, boxes=boxes).gemv_bf16
            blocks = kernel.max_active_clusters((1, 1, 1), 160, ch["smem_bytes"](mp, st, rows, boxes))
            assert blocks == want * fb.gpu().sm_count, (mp, st, blocks)


@pytest.mark.parametrize("m, n, k, red", [(1, 4096, 4096, 0), (3, 1000, 144, 0), (7, 264, 4112, 1),
                                          (64, 4104, 1040, 0), (64, 4104, 1040, 1), (17, 4096, 14336, 0),
                                          (64, 8, 16, 0), (33, 130, 64, 0)])   # tiny N; N not a multiple of 8
def test_gpu_lab_fp8_against_float64(gpu90, lab, m, n, k, red):
    r = lab["check_fp8"](m, n, k, red=red, seed=m + n)
    assert r, r


def test_without_a_gpu_both_parts_show_what_make_bench_recorded(h200_results, capsys):
    """recorded_decode and recorded_paged read the records the chapter's timers write (their names, their % of copy)
    and print them as recorded, with cuBLAS's and the fastest library's time over the fastest of ours."""
    copy = 4000.0
    for name, ms in (("ch10/gemv-wgmma 1x8192x8192", 0.040), ("ch10/gemv-mma.sync 1x8192x8192", 0.042),
                     ("ch10/cublas 1x8192x8192", 0.050), ("ch10/gemv-wgmma-r64-S2 1x8192x8192", 0.030)):
        fb.result_of(name, [ms], nbytes=134.2e6, ceiling=copy, bound="dram")
    for name, ms in (("ch10/paged-TMA pool L=1024 P=16 nq=1", 0.010), ("ch10/paged-cp.async L=1024 P=16 nq=1", 0.012),
                     ("ch10/paged-sdpa-flash L=1024 nq=1", 0.015), ("ch10/paged-copy-floor L=1024", 0.005)):
        fb.result_of(name, [ms], nbytes=4.2e6, ceiling=copy, bound="dram")
    ns = CHAPTER.definitions("recorded_decode", "recorded_paged", np=np, fb=fb)
    ns["recorded_decode"]()
    out = capsys.readouterr().out
    assert out.startswith("No GPU timing here: recorded on NVIDIA H200 (results/nvidia-h200/, 20")
    row = next(line for line in out.splitlines() if line.startswith("  1   8192   8192"))
    assert row.split("|")[1].split() == ["79.9", "83.9"] and row.split("|")[-1].strip() == "1.25"
    ns["recorded_paged"]()
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("   1024  16  1"))
    assert "TMA pool" in row and "sdpa-flash" in row and row.split("|")[-1].strip() == "1.50"


def test_without_a_gpu_the_pdl_chain_is_read_back_from_the_results_log(h200_results, monkeypatch, capsys):
    """The PDL chain's cell where nothing is timed: its per-layer start and end and its totals come back from the
    timeline a GPU run recorded, against that run's copy ceiling, and say where they were recorded."""
    from feedbeast import hooks, trace
    from feedbeast.course import results
    from feedbeast.timeline import Span
    monkeypatch.setattr(hooks, "on_trace", [results.append_trace])
    for pdl, total_ms in ((False, 0.4066), (True, 0.3640)):
        trace.named([Span("layers", 12_000.0 * i, 12_000.0 * i + 11_000, "compute") for i in range(32)],
                    f"ch10/pdl chain pdl={int(pdl)}", about="32 layers", data={"total_ms": total_ms, "copy_gbps": 4250.0})
    cell = next(c for c in CHAPTER.cells if c.get("id") == "154e7044")
    ns = {"fb": fb, "np": np, "decode_rows": [], "copy": fb.Skipped("needs a GPU, this machine has none", "copy")}
    exec(cell.source, ns)
    out = capsys.readouterr().out
    assert out.startswith("needs a GPU, this machine has none; recorded on NVIDIA H200 on 20")
    assert "PDL off:   406.6 us for 32 layers, 12.71 us per layer =  62.1 % of the copy ceiling" in out
    assert "PDL saves 10.5 % of the chain's time" in out
    assert ns["chain"][True][1].shape == (32, 2) and ns["chain"][False][1][1].tolist() == [12_000.0, 23_000.0]


def test_without_a_gpu_both_plots_draw_what_make_bench_recorded(h200_results, monkeypatch):
    """The part-1 and part-2 plot cells where nothing is timed: one figure per GPU from the records, "ours" the
    fastest build at each shape against cuBLAS, each paged column and library at its lengths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for name, ms in (("ch10/gemv-wgmma 1x8192x8192", 0.040), ("ch10/gemv-mma.sync 1x8192x8192", 0.042),
                     ("ch10/cublas 1x8192x8192", 0.050), ("ch10/gemv-wgmma 16x8192x8192", 0.044),
                     ("ch10/cublas 16x8192x8192", 0.043)):
        fb.result_of(name, [ms], nbytes=134.2e6, ceiling=4000.0, bound="dram")
    for name, ms in (("ch10/paged-TMA pool L=1024 P=64 nq=1", 0.010), ("ch10/paged-TMA pool L=8192 P=64 nq=1", 0.030),
                     ("ch10/paged-sdpa-flash L=1024 nq=1", 0.015), ("ch10/paged-sdpa-cudnn L=1024 nq=1", 0.012),
                     ("ch10/paged-copy-floor L=1024", 0.005)):
        fb.result_of(name, [ms], nbytes=4.2e6, ceiling=4000.0, bound="dram")
    shown = []
    monkeypatch.setattr(plt, "show", lambda: shown.append(plt.gcf()))
    ns = CHAPTER.definitions("decode_records", "fastest_of_ours", "paged_records", "DECODE_BUILDS", "PAGED_COLUMNS",
                             "PAGED_LIBS", np=np, fb=fb)
    skipped = fb.Skipped("needs a GPU, this machine has none", "copy")
    ns.update(plt=plt, decode_rows=[], paged_rows=[], copy=skipped, pcopy=skipped)
    for cid in ("92686321", "c10-paged-plot"):
        exec(next(c for c in CHAPTER.cells if c.get("id") == cid).source, ns)
    part1, part2 = shown
    left, right = part1.axes
    curves = {ln.get_label(): ln.get_ydata().tolist() for ln in left.lines if not ln.get_label().startswith("_")}
    assert curves == {"ours 8192x8192": [pytest.approx(134.2e6 / 0.040e-3 / 1e9 / 40), pytest.approx(134.2e6 / 0.044e-3 / 1e9 / 40)],
                      "cuBLAS 8192x8192": [pytest.approx(134.2e6 / 0.050e-3 / 1e9 / 40), pytest.approx(134.2e6 / 0.043e-3 / 1e9 / 40)]}
    assert [ln.get_ydata().tolist() for ln in right.lines if ln.get_label() == "8192x8192"] == [
        [pytest.approx(1.25), pytest.approx(0.043 / 0.044)]]
    assert "recorded on NVIDIA H200 (results/nvidia-h200/, 20" in part1._suptitle.get_text()
    (ax,) = part2.axes
    got = {ln.get_label(): ln.get_ydata().tolist() for ln in ax.lines if not ln.get_label().startswith("_")}
    assert got["TMA pool, P = 64"] == [pytest.approx(4.2e6 / 0.010e-3 / 1e9 / 40), pytest.approx(4.2e6 / 0.030e-3 / 1e9 / 40)]
    assert got["SDPA, best backend (contiguous)"] == [pytest.approx(4.2e6 / 0.012e-3 / 1e9 / 40)]      # cuDNN, the faster
    assert got["a copy of the same bytes"] == [pytest.approx(4.2e6 / 0.005e-3 / 1e9 / 40)]
    plt.close("all")
