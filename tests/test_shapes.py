"""Any shape: chapter 07's capstone at tiny and ragged M (OOB fill does the work), and its decode kernel
(M <= 64: the weights streamed through a TMA ring, stream-K over every SM, a fixed-order fixup).

CPU: the decode kernels compile to what the chapter says (UTMALDG, HGMMA.64xMPx16, no local memory) and
the stream-K plan covers every iteration once. GPU (sm_90a): every capstone variant and the decode kernel
against float64 on M in {1, 7, 8, 64, 127} and ragged N, K down to 1 (rows padded to 16 bytes, the padding
NaN so that reading it would show); repeated decode runs agree bit for bit.
The kernels and host helpers are read from the chapter's cells, so what is tested is what ships.
"""
from pathlib import Path

import pytest

from feedbeast.course.notebook import load

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "chapters/07-capstone-gemm.ipynb"


@pytest.fixture(scope="module")
def ch():
    """Every capstone variant compiled (the chapter's MODS): only GPU tests ask for it (after gpu90, so a CPU
    run skips first)."""
    return load(CHAPTER).definitions("VARIANTS", "run_check")


@pytest.fixture(scope="module")
def dec():
    """The decode kernels and helpers, no capstone variant compiled (keeps the CPU run short)."""
    return load(CHAPTER).definitions("DEC_MPS", "DEC_BK", "DECODE", "decode_plan", "run_decode_check")


def test_decode_kernels_stream_through_tma_into_wgmma(dec):
    for mp, mod in dec["DECODE"].items():
        mod.expect_sass("UTMALDG", f"HGMMA.64x{mp}x16.F32.BF16", "SYNCS", forbid=("LDL", "STL"),
                        kernel="gemm_decode")
        assert mod.resources["gemm_decode"].spills == 0


@pytest.mark.parametrize("m, n, k", [(1, 4096, 4096), (8, 14336, 4096), (64, 8192, 8192), (7, 1000, 136),
                                     (1, 8, 8), (33, 264, 4104)])
def test_stream_k_covers_every_iteration_once(dec, m, n, k):
    mp, grid, ntiles, maxseg = dec["decode_plan"](m, n, k, 132)
    ktiles = -(-k // dec["DEC_BK"])
    iters = ntiles * ktiles
    lo = [b * iters // grid for b in range(grid + 1)]
    assert mp >= m and mp in dec["DEC_MPS"] and grid <= 132 and lo[0] == 0 and lo[-1] == iters
    assert all(lo[b + 1] > lo[b] for b in range(grid))              # every block streams something
    block_of = lambda t: ((t + 1) * grid - 1) // iters
    assert all(lo[block_of(t)] <= t < lo[block_of(t) + 1] for t in range(iters))
    for j in range(ntiles):
        segs = block_of((j + 1) * ktiles - 1) - block_of(j * ktiles) + 1
        assert 1 <= segs <= maxseg


def test_decode_refuses_m_above_64(dec):
    with pytest.raises(ValueError, match="1 <= M <= 64"):
        dec["decode_plan"](65, 4096, 4096, 132)


ANY_M = [1, 7, 8, 64, 127]


@pytest.mark.parametrize("m", ANY_M)
def test_every_capstone_variant_at_any_m(gpu90, ch, m):
    failed = []
    for n, k in [(1000, 1032), (4104, 136), (8, 8), (100, 30), (1, 1)]:   # odd n, k: padded rows, NaN padding
        for r in ch["run_check"](ch["VARIANTS"], m, n, k, seed=m * 7 + n):
            print(r)
            if not r:
                failed.append(str(r))
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("m", [1, 7, 8, 9, 16, 17, 31, 32, 33, 64])
def test_decode_any_m_ragged_and_repeatable(gpu90, dec, m):
    for n, k in [(1000, 1032), (4104, 136), (264, 4096), (8, 8), (14336, 512), (100, 30), (1, 1), (13, 4099)]:
        r = dec["run_decode_check"](m, n, k, seed=m + n + k)
        print(r)
        assert r, str(r)


@pytest.mark.parametrize("config", [dict(stages=4, per_sm=2), dict(cw=1, per_sm=2), dict(cw=4, stages=4)])
def test_decode_settings_the_suite_explores(gpu90, dec, config):
    for m, n, k in [(1, 1000, 1032), (16, 4104, 136), (64, 264, 4096), (33, 14336, 512), (5, 99, 1001)]:
        r = dec["run_decode_check"](m, n, k, seed=m + n, **config)
        print(r)
        assert r, str(r)
