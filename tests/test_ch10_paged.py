"""Chapter 10, part 2: flash-decoding over a paged KV cache.

CPU: each way of reaching the pages (cp.async gathers with cp.async.mbarrier.arrive, TMA from the pool's tensor map,
TMA from a tensor map per page rewritten on the device) compiles for sm_90a at every row configuration with the
instructions it is about and none of the others' loads, with either consumer (mma.sync warps: HMMA; wgmma warpgroups:
HGMMA and no HMMA), in registers that fit one block per SM and with no spills (and ptxas gives a block of 9 warps the
registers of 12, as the pitfall says); the planner keeps its promises (rows and tokens split evenly,
one block per SM at most, the partials bounded); bad input (a page table past the pool, a page size a path cannot
express, a head count GQA cannot group, too many queries, a short table) is refused with a message; the float64
reference is itself checked against a direct computation and ignores the NaN rows past L; the traced build
(-D FB_TRACE=1) reads %globaltimer and the timed build never does; with combine_paged decode_paged lets it launch
(PREEXIT) and counts nothing, and combine_paged loads nothing before its griddepcontrol.wait (ACQBULK).
GPU (Hopper; skipped by name elsewhere): every path at ragged sizes (L not a multiple of the page, the last page
partial and NaN past L, 1 and 64 queries, one slice and many) against float64 with poisoned outputs, twice with the
same bits; the hazard checker on the TMA producers with both consumer kinds and on the gathers read by wgmma; the traced
build gives the same result and every block's phases back to back; both combines (the last block, combine_paged)
right and bit-identical run to run; every producer at a ragged shape, and with `make stress` (FEEDBEAST_STRESS=N) at
N random ragged ones each, the page size turning.
Kernels and helpers are read from the chapter, so what is tested is what ships.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import feedbeast as fb
from feedbeast import stress
from feedbeast.course.notebook import load

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = load(ROOT / "chapters/10-decode.ipynb")
NAMES = ("PAGE_MODES", "HEAD_DIM", "TOKENS_PER_STAGE", "PAGED_STAGES", "CONSUMERS", "WGMMA_ROWS", "_paged",
         "paged_module", "paged_plan",
         "paged_smem", "prepare_paged", "paged_cache", "paged_reference", "run_paged_check")


@pytest.fixture(scope="module")
def ch():
    return CHAPTER.definitions(*NAMES, np=np, fb=fb, math=math, g=fb.gpu(), paged=CHAPTER.cuda("paged"))


SASS = {  # mode: (must show, must not show)
    0: (("LDGSTS.E.BYPASS.128", "ARRIVES.LDGSTSBAR.64.ARVCNT", "HMMA.16816.F32.BF16", "LDSM.16.MT88.4"), ("UTMALDG",)),
    1: (("UTMALDG.2D", "SYNCS.ARRIVE.TRANS64", "HMMA.16816.F32.BF16", "LDSM.16.MT88.4"), ("LDGSTS", "UTMACCTL.IV")),
    2: (("UTMALDG.2D", "ATOMG.E.EXCH.STRONG.GPU", "UTMACCTL.IV", "HMMA.16816.F32.BF16"), ("LDGSTS",)),
}


# The wgmma consumers: S = Q K^T as m64nTNk16 from shared memory (TN = 32 tokens per warpgroup with 64 rows, 64 with
# 128), O += P V as m64n128k16 with P from registers and V transposed (tnspB); no mma.sync, no ldmatrix.
WGMMA_SASS = {4: ("HGMMA.64x32x16.F32.BF16", "HGMMA.64x128x16.F32.BF16", "WARPGROUP.ARRIVE", "FENCE.VIEW.ASYNC.S"),
              8: ("HGMMA.64x64x16.F32.BF16", "HGMMA.64x128x16.F32.BF16", "WARPGROUP.ARRIVE", "FENCE.VIEW.ASYNC.S")}


@pytest.mark.parametrize("rg, cw, kind", [(1, 4, 0), (2, 4, 0), (4, 4, 0), (4, 8, 1), (8, 8, 1)])
@pytest.mark.parametrize("mode, producers", [(0, 1), (0, 2), (1, 1), (2, 1)])
def test_sass_and_resources(ch, mode, producers, rg, cw, kind):
    mod = ch["paged_module"](rg, cw, mode, producers, kind=kind)
    want, forbid = SASS[mode]
    if kind == 1:
        want = tuple(w for w in want if not w.startswith(("HMMA", "LDSM"))) + WGMMA_SASS[rg]
        if mode == 0:   # for wgmma each gathering lane waits for its own copies, fences, then arrives (no ARRIVES)
            want = tuple(w for w in want if w != "ARRIVES.LDGSTSBAR.64.ARVCNT") + ("LDGDEPBAR",)
            forbid = forbid + ("ARRIVES.LDGSTSBAR",)
        forbid = forbid + ("HMMA", "LDSM")
        sass = mod.sass("decode_paged")
        if mode == 0:
            assert "DEPBAR.LE SB0, " in sass                          # cp.async.wait_group
        assert ".tnspB" in sass                               # V read MN-major, transposed by the instruction
        # S_j and P_{j-1} V_{j-1} in flight together: the first wait leaves one group running, and no wgmma is
        # serialised (ptxas adds a WARPGROUP.DEPBAR after each HGMMA when it is)
        assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in sass and "HGMMA.64x8x16.F16" not in sass
    mod.expect_sass(*want, forbid=forbid, kernel="decode_paged")
    res = mod.resources["decode_paged"]
    threads = 32 * (cw + producers)
    assert res.registers * threads <= 65536, f"one block per SM needs <= {65536 // threads} registers: {res}"
    # one block per SM: the ring, Q and the barriers in the H100's 227 KB per block
    assert ch["paged_smem"](rg) + res.shared_static <= 227 * 1024
    assert res.spills == 0 and res.stack == 0, res


def test_a_block_of_9_warps_gets_the_registers_of_12():
    # The pitfall "9 warps can cost 12 warps of registers": with __launch_bounds__(288, 1) ptxas caps a kernel that
    # wants more at 168 registers, as for 384 threads (65 536 / 384, a multiple of 8), while 256 threads allow more.
    src = r"""extern "C" __global__ void __launch_bounds__(%d, 1) k(float* x) {
  float a[200];
#pragma unroll
  for (int i = 0; i < 200; ++i) a[i] = x[threadIdx.x + i * 1024];
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int i = 0; i < 200; ++i) s += a[i] * a[(i * 7 + j) %% 200];
  x[threadIdx.x] = s;
}"""
    regs = {t: fb.compile(src % t, "sm_90a").resources["k"].registers for t in (256, 288, 384)}
    assert regs[288] == regs[384] == 168 and regs[256] > 168, regs


@pytest.mark.parametrize("nq", [1, 2, 3, 4, 5, 8, 16, 17, 32, 33, 64])
@pytest.mark.parametrize("L", [1, 63, 1000, 4097, 131072])
def test_plan(ch, nq, L):
    rg, cw, rb, S, kind = ch["paged_plan"](nq, 32, 8, L)
    rp = 16 * rg
    assert rp * rb >= 4 * nq and rp * (rb - 1) < 4 * nq                                  # every row, no empty block
    assert kind == (4 * nq > ch["WGMMA_ROWS"])                 # nq = 1 and 4 keep the mma.sync warps
    if kind == 0:
        wr = min(rg, cw)
        assert rg in (1, 2, 4) and cw == 4 and cw % wr == 0 and (64 // (cw // wr)) % 16 == 0  # warps split evenly
    else:                               # two warpgroups: one m64 tile each, or one tile over half the tokens each
        assert (rg, cw) in ((4, 8), (8, 8))
    tiles = -(-L // 64)
    sms = ch["g"].sm_count if ch["g"] else 132
    assert 1 <= S <= tiles and S * rb * 8 <= sms                                        # one wave of blocks
    assert S == min(tiles, sms // (8 * rb))                  # and as many blocks as that allows: every SM streams


@pytest.mark.parametrize("rg, cw, kind", [(1, 4, 0), (4, 8, 1), (8, 8, 1)])
def test_combines_in_the_sass(ch, rg, cw, kind):
    """COMBINE=1: decode_paged lets the next kernel launch (griddepcontrol.launch_dependents: PREEXIT) and counts
    nothing (no atomic); combine_paged waits for it (griddepcontrol.wait: ACQBULK) before its loads. COMBINE=0: the
    last block's count (an atomic add) and no PREEXIT."""
    pdl = ch["paged_module"](rg, cw, 1, kind=kind, combine=1)
    pdl.expect_sass("PREEXIT", kernel="decode_paged", forbid=("ATOMG", "RED.E.ADD"))
    wait = pdl.sass("combine_paged").splitlines()
    acq = next(i for i, line in enumerate(wait) if "ACQBULK" in line)
    assert not any("LDG" in line for line in wait[:acq]), "combine_paged loads before griddepcontrol.wait"
    assert any("LDG" in line for line in wait[acq:])
    last = ch["paged_module"](rg, cw, 1, kind=kind, combine=0).sass("decode_paged")
    assert "PREEXIT" not in last and ("ATOMG" in last or "RED" in last)


def test_traced_build_reads_the_timer_and_the_timed_build_does_not(ch):
    """-D FB_TRACE=1 (a TraceBuffer's defines) records each block's phases with %globaltimer (CS2R SR_GLOBALTIMERLO);
    without it the kernel never reads the timer, so the timed builds are the untraced ones."""
    from feedbeast.trace import TraceBuffer
    tb = TraceBuffer(["block"], per_lane=8)
    for rg, cw, mode, kind in ((1, 4, 1, 0), (4, 8, 0, 1)):
        timed = ch["paged_module"](rg, cw, mode, kind=kind).sass("decode_paged")
        traced = ch["paged_module"](rg, cw, mode, kind=kind, trace=tb).sass("decode_paged")
        assert "SR_GLOBALTIMER" not in timed
        assert "SR_GLOBALTIMER" in traced
    res = ch["paged_module"](4, 8, 1, kind=1, trace=tb).resources["decode_paged"]
    assert res.spills == 0 and res.registers <= 255, res


def test_bad_input_is_refused_with_a_reason(ch):
    prep, bf = ch["prepare_paged"], fb.bfloat16
    q, o = fb.empty((1, 32, 128), bf), fb.empty((1, 32, 128), bf)
    pool = lambda P, pages=8: fb.empty((pages, 8, P, 128), bf)
    with pytest.raises(ValueError, match="entry 2 is 8, outside the pool of 8 pages"):
        prep(q, pool(16), pool(16), np.array([0, 3, 8]), 40, o)
    with pytest.raises(ValueError, match="entry 0 is -1"):
        prep(q, pool(16), pool(16), np.array([-1, 3]), 20, o)
    with pytest.raises(ValueError, match="power of two"):
        prep(q, pool(48), pool(48), np.arange(2), 90, o)
    for mode in (1, 2):
        with pytest.raises(ValueError, match="at least 8 tokens"):
            prep(q, pool(4), pool(4), np.arange(8), 30, o, mode=mode)
    with pytest.raises(ValueError, match="multiple of the KV heads"):
        prep(fb.empty((1, 30, 128), bf), pool(16), pool(16), np.arange(2), 20, fb.empty((1, 30, 128), bf))
    with pytest.raises(ValueError, match="260 rows"):
        prep(fb.empty((65, 32, 128), bf), pool(16), pool(16), np.arange(2), 20, fb.empty((65, 32, 128), bf))
    with pytest.raises(ValueError, match="need 3 pages of 16, the page table has 2"):
        prep(q, pool(16), pool(16), np.arange(2), 40, o)
    with pytest.raises(ValueError, match="one thread issues the TMA copies"):
        prep(q, pool(16), pool(16), np.arange(2), 20, o, mode=1, producers=2)
    with pytest.raises(ValueError, match="shapes"):
        prep(q, pool(16), fb.empty((8, 8, 32, 128), bf), np.arange(2), 20, o)


def test_reference_gathers_pages_and_ignores_the_rows_past_L(ch):
    k, v, table = ch["paged_cache"](100, 16, 8, seed=3)
    assert np.isnan(k[table[-1], :, 100 % 16:].astype(np.float32)).all()      # the unused rows are poisoned
    q = np.random.default_rng(0).standard_normal((2, 32, 128)).astype(fb.bfloat16)
    ref = ch["paged_reference"](q, k, v, table, 100)
    assert np.isfinite(ref).all()
    for n, head in ((0, 0), (1, 5), (1, 31)):
        kv = head // 4
        kk = np.concatenate([k[p, kv] for p in table])[:100].astype(np.float64)
        vv = np.concatenate([v[p, kv] for p in table])[:100].astype(np.float64)
        s = q[n, head].astype(np.float64) @ kk.T / math.sqrt(128)
        p = np.exp(s - s.max())
        assert np.allclose(p / p.sum() @ vv, ref[n, head], rtol=1e-12, atol=1e-12)


def test_cache_scatters_pages(ch):
    _, _, table = ch["paged_cache"](1000, 16, 8, seed=1)
    assert len(table) == 63 and len(set(table.tolist())) == 63 and not np.array_equal(table, np.arange(63))


# ---- GPU (Hopper) -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("nq, L, P", [(1, 1000, 16), (1, 1, 16), (1, 64, 64), (3, 4097, 32), (16, 300, 128),
                                      (33, 2049, 64), (64, 1000, 16), (64, 5000, 256), (2, 12345, 256)])
def test_gpu_paged_ragged_against_float64(gpu90, ch, mode, nq, L, P):
    r = ch["run_paged_check"](nq, L, P, mode, seed=nq * 7 + L + P)
    assert r, r


# Every producer, the plan's consumer and split. With FEEDBEAST_STRESS=N (make stress) each takes N random ragged
# (nq, L) after the base one (feedbeast.stress.sizes: a quarter of them tiny), the page size turning through those
# the producer takes (TMA boxes cover whole 8-row swizzle atoms: P >= 8), else the base shape alone.
STRESS_PAGES = (16, 64, 4, 256, 8, 128, 32)


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_gpu_paged_random_ragged_sizes(gpu90, ch, mode):
    pages = [p for p in STRESS_PAGES if mode == 0 or p >= 8]
    for i, (nq, L) in enumerate(stress.sizes((64, 5000), multiple_of=(16, 64))):
        P = pages[i % len(pages)]
        r = ch["run_paged_check"](nq, L, P, mode, seed=nq * 7 + L + P + mode)
        assert r, r


@pytest.mark.parametrize("nq, L, P, mode, split, warps", [(5, 777, 4, 0, None, 1), (64, 3000, 64, 0, 1, 1),
                                                          (64, 3000, 64, 1, 1, 1), (1, 9000, 16, 2, 3, 1),
                                                          (4, 70000, 128, 1, None, 1), (3, 4097, 32, 0, None, 2),
                                                          (64, 5000, 16, 0, None, 2), (1, 1, 16, 0, None, 2),
                                                          # more slices than the combine's batch of 16 loads
                                                          (4, 20000, 64, 1, 40, 1), (16, 20000, 64, 1, 33, 1),
                                                          (64, 20000, 64, 1, 33, 1)])
def test_gpu_paged_pages_of_four_fixed_splits_two_gather_warps(gpu90, ch, nq, L, P, mode, split, warps):
    r = ch["run_paged_check"](nq, L, P, mode, seed=nq + L, split=split, producers=warps)
    assert r, r


@pytest.mark.parametrize("kind", [0, 1])
@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("nq, L, P", [(1, 100, 16), (9, 1000, 16), (16, 4097, 64), (17, 777, 32), (32, 2049, 256),
                                      (33, 65, 8), (64, 1, 16), (64, 12345, 128)])
def test_gpu_paged_both_consumers_against_float64(gpu90, ch, kind, mode, nq, L, P):
    """Either consumer kind at any row count (wgmma pads to m64 tiles; mma.sync to 16, 32 or 64 rows a block)."""
    r = ch["run_paged_check"](nq, L, P, mode, seed=3 * nq + L + P + kind, kind=kind)
    assert r, r


@pytest.mark.parametrize("nq, L, P, mode, kind, warps", [(64, 1000, 16, 1, 1, 1), (33, 2049, 8, 1, 1, 1),
                                                          (8, 1000, 16, 1, 0, 1), (5, 777, 16, 2, 0, 1),
                                                          (64, 5000, 256, 2, 1, 1), (16, 300, 16, 2, 1, 1),
                                                          (16, 300, 16, 0, 1, 1), (64, 1000, 64, 0, 1, 2)])
def test_gpu_paged_hazard_checked(gpu90, ch, monkeypatch, nq, L, P, mode, kind, warps):
    """The hazard checker (chapter 04), the last tile partial: the TMA producers with both consumer kinds, among them
    consumers that share a token slice and zero its rows past L together (two wgmma warpgroups at 128 rows, two
    mma.sync warps at 32 rows), and the gathers read by wgmma, which fence in the lanes that copied. No rule broken,
    and the result right. The first two found `unordered-access` while every consumer zeroed all of its slice's
    rows past L."""
    monkeypatch.setattr(fb.hooks.mode, "hazards", "check")
    r = ch["run_paged_check"](nq, L, P, mode, seed=nq + L, kind=kind, producers=warps)
    assert r, r


def test_gpu_paged_page_maps_carried_to_another_process(gpu90, ch, monkeypatch):
    """The device-updated maps (mode 2) view one page at the pool's address, and the pools are arguments after them.
    A child process that launches again (the isolated hazard check, fb.profile's replay) gets one buffer at that
    address as large as the pool, not the page: the isolated check passes with the result right, and under Nsight
    Compute the replay is profiled."""
    from feedbeast import profiling
    nq, L, P = 5, 777, 16
    k, v, table = ch["paged_cache"](L, P, 8, seed=5)
    q = np.random.default_rng(6).standard_normal((nq, 32, 128)).astype(fb.bfloat16)
    out = fb.empty((nq, 32, 128), fb.bfloat16)
    kd, vd = fb.to_device(k), fb.to_device(v)
    launch = ch["prepare_paged"](fb.to_device(q), kd, vd, table, L, out, 2)
    spec = profiling.recorded_launches(launch)
    args = spec["launches"][0][-1]                  # decode_paged(kmap, vmap, slots, k_pool, v_pool, ...)
    assert args[0][0] == "map" and args[3][0] == "buffer" and args[0][1] == args[3][1], args[:5]
    assert spec["buffers"][args[3][1]].nbytes == kd.nbytes and spec["buffers"][args[4][1]].nbytes == vd.nbytes
    ref = ch["paged_reference"](q, k, v, table, L)
    monkeypatch.setattr(fb.hooks.mode, "hazards", "isolated")
    out.poison()
    assert launch() is None
    r = fb.check(out.to_host(), ref, name="paged, device-updated maps, isolated hazard check")
    assert r, r
    monkeypatch.setattr(fb.hooks.mode, "hazards", "")
    prof = fb.profile(launch, kernel="decode_paged", name="paged maps replayed", record=False)
    if isinstance(prof, fb.Skipped):                # no ncu here, or no permission to read counters
        pytest.skip(f"fb.profile's replay: {prof}")
    assert isinstance(prof, profiling.Profile) and prof.values.get("duration"), prof


@pytest.mark.parametrize("combine", [0, 1])
@pytest.mark.parametrize("nq, L, P, mode", [(1, 8192, 64, 1), (16, 8192, 64, 1), (16, 4097, 16, 0), (64, 3000, 64, 2),
                                            (4, 100, 16, 1)])
def test_gpu_paged_traced_phases(gpu90, ch, nq, L, P, mode, combine):
    """The traced build computes the same result, and every block records its phases back to back (first stage,
    stream, merge and partials; with a split and the last-block combine, fence and count), the last-block combine
    once per row block of each head (none with combine_paged, a kernel of its own)."""
    from feedbeast.trace import TraceBuffer
    rg, cw, rb, S, kind = ch["paged_plan"](nq, 32, 8, L)
    tb = TraceBuffer([f"block {i}" for i in range(S * rb * 8)], per_lane=8)
    k, v, table = ch["paged_cache"](L, P, 8, seed=L + nq)
    q = np.random.default_rng(nq).standard_normal((nq, 32, 128)).astype(fb.bfloat16)
    out = fb.empty((nq, 32, 128), fb.bfloat16)
    launch = ch["prepare_paged"](fb.to_device(q), fb.to_device(k), fb.to_device(v), table, L, out, mode, trace=tb,
                                 combine=combine)
    tb.reset()
    assert launch() is None
    r = fb.check(out.to_host(), ch["paged_reference"](q, k, v, table, L), name=f"traced nq={nq} L={L} P={P}")
    assert r, r
    lanes = {}
    for x in tb.spans():
        lanes.setdefault(x.lane, {})[x.kind] = x
    assert len(lanes) == S * rb * 8
    last_block = S > 1 and combine == 0
    chain = ["load", "consume", "compute"] + (["wait"] if last_block else [])
    combines = 0
    for lane, got in lanes.items():
        kinds = chain + (["bubble"] if "bubble" in got else [])
        assert sorted(got) == sorted(kinds), (lane, sorted(got))
        for a, b in zip(kinds, kinds[1:]):
            assert got[a].end == got[b].start and got[a].duration >= 0, (lane, a, b)
        combines += "bubble" in got
    assert combines == (8 * rb if last_block else 0)


@pytest.mark.parametrize("combine", [0, 1])
@pytest.mark.parametrize("nq, L, P, mode, split", [(1, 8192, 64, 1, None), (16, 20000, 64, 1, 33), (64, 5000, 16, 0, None),
                                                   (4, 20000, 64, 1, 40), (3, 4097, 32, 2, None), (64, 20000, 64, 1, 33)])
def test_gpu_paged_both_combines_against_float64(gpu90, ch, nq, L, P, mode, split, combine):
    """The slices' partials added up by the last block of each head (one launch) and by combine_paged (a second
    kernel, launched with PDL): both right, both bit-identical run to run, past the batch of 16 slices too."""
    r = ch["run_paged_check"](nq, L, P, mode, seed=nq + L + combine, split=split, combine=combine)
    assert r, r
