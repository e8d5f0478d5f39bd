"""Chapter 03 and lab 03: cp.async rings and the multistage mma.sync GEMM.

CPU: every kernel compiles for sm_80 and sm_90a, shows the chapter's instructions in SASS and spills
nothing; numpy models check the index math the kernels use (ldmatrix / mma.sync fragments after the PTX
ISA tables, the GEMM's whole block tile with zero-fill, the ring's ragged-row chunks, bank groups).
GPU: the ring, the CCCL pipeline, the lab and the GEMM against float64 references on ragged shapes.
"""
import re
from pathlib import Path

import numpy as np
import pytest

import feedbeast as fb
from feedbeast import stress
from feedbeast.course.notebook import load

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = load(ROOT / "chapters/03-cp-async.ipynb")
SOLUTION = load(ROOT / "solutions/03-cp-async-rowsum.ipynb")
ARCHS = ("sm_80", "sm_90a")


KERNELS = {   # module name -> (notebook, kernel, stages, SASS that must be there)
    "ring": (CHAPTER, "ring_rowsum", 4, ("LDGSTS.E.BYPASS.128", "LDGDEPBAR", "DEPBAR.LE", "BAR.SYNC")),
    "piped": (CHAPTER, "pipeline_rowsum", 4, ("LDGSTS.E.BYPASS.128", "LDGDEPBAR", "DEPBAR.LE")),
    "gemm": (CHAPTER, "gemm_bf16", 3, ("LDGSTS", "LDGDEPBAR", "DEPBAR", "LDSM.16.M88.4", "LDSM.16.MT88.4",
                                       "HMMA.16816.F32.BF16")),
    "lab": (SOLUTION, "ring_logsumexp", 3, ("LDGSTS", "LDGDEPBAR", "DEPBAR")),
}


def build(name, arch, stages=None):
    nb, kernel, default, _ = KERNELS[name]
    return nb.compile(name, arch, STAGES=stages or default)


# ---------------------------------------------------------------- compile, SASS, resources (CPU)

@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", list(KERNELS))
def test_compiles_with_the_chapter_instructions_and_no_spills(name, arch):
    mod = build(name, arch)
    _, kernel, _, sass = KERNELS[name]
    mod.expect_sass(*sass, kernel=kernel, forbid=("STL", "LDL"))
    res = mod.resources[kernel]
    assert res.spills == 0 and res.stack == 0, f"{kernel} on {arch}: {res}"
    assert res.registers <= 255


@pytest.mark.parametrize("stages", [1, 2, 6])
def test_ring_waits_for_the_oldest_of_its_groups(stages):
    sass = build("ring", "sm_90a", stages).sass("ring_rowsum")
    assert f"DEPBAR.LE SB0, 0x{stages - 1:x}" in sass


def test_gemm_wait_count_and_zero_fill():
    for s in (3, 4):
        sass = build("gemm", "sm_80", s).sass("gemm_bf16")
        assert f"DEPBAR.LE SB0, 0x{s - 2:x}" in sass
        # the zero-fill is predicated: a last operand P (ignore-src) or the .ZFILL form (src-size)
        assert re.search(r"LDGSTS\.E\.BYPASS(\.LTC128B)?\.128(\.ZFILL)? \[[^]]+\], [^;]*\], !?P\d", sass)
        assert sass.count("BAR.SYNC") == 2   # one before the loop, one per slice inside it


def test_cccl_pipeline_compiles_to_the_same_copies():
    raw, cccl = build("ring", "sm_90a"), build("piped", "sm_90a")
    base = lambda m, k: {op.split(".ZFILL")[0] for op in fb.sass.opcode_histogram(m.sass(k))
                         if op.split(".")[0] in ("LDGSTS", "LDGDEPBAR", "DEPBAR")}
    # The same 16-byte copies, commit and wait; the raw ring adds 4-byte copies for a row's partial last chunk.
    assert base(raw, "ring_rowsum") == base(cccl, "pipeline_rowsum") | {"LDGSTS.E"}
    cccl.expect_sass("LDGSTS", forbid=("SYNCS",))   # thread scope: cp.async groups, not mbarriers


# ---------------------------------------------------------------- fragments after the PTX ISA tables
# Lane l, g = l // 4, t = l % 4. Each function returns, per lane, the (row, col) of every bf16 element of
# each 32-bit register, low half first -- exactly the tables of "Matrix Fragments for mma.m16n8k16".

def frag_a(l):   # 16 x 16
    g, t = l // 4, l % 4
    return [[(g, 2 * t), (g, 2 * t + 1)], [(g + 8, 2 * t), (g + 8, 2 * t + 1)],
            [(g, 2 * t + 8), (g, 2 * t + 9)], [(g + 8, 2 * t + 8), (g + 8, 2 * t + 9)]]


def frag_b(l):   # 16 x 8 (K x N)
    g, t = l // 4, l % 4
    return [[(2 * t, g), (2 * t + 1, g)], [(2 * t + 8, g), (2 * t + 9, g)]]


def frag_c(l):   # 16 x 8 fp32, one element per register
    g, t = l // 4, l % 4
    return [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]


def ldmatrix_x4(smem, addr, trans=False):
    """PTX ldmatrix.m8n8.x4.b16: addr[l] = (row, col) of the 16-byte row lane l points at.
    Returns regs[l][j] = the two b16 values register j of lane l receives."""
    regs = [[None] * 4 for _ in range(32)]
    for j in range(4):
        rows = [smem[r, c:c + 8] for r, c in addr[8 * j:8 * j + 8]]    # matrix j: 8 rows of 8 values
        m = np.stack(rows)
        for l in range(32):
            if not trans:
                regs[l][j] = (m[l // 4, 2 * (l % 4)], m[l // 4, 2 * (l % 4) + 1])
            else:
                regs[l][j] = (m[2 * (l % 4), l // 4], m[2 * (l % 4) + 1, l // 4])
    return regs


def mma_16816(d, a, b0, b1):
    """mma.sync m16n8k16 row.col: rebuild A, B from the lanes' registers, D += A @ B, scatter back."""
    A, B = np.full((16, 16), np.nan), np.full((16, 8), np.nan)
    for l in range(32):
        for r, pairs in enumerate(frag_a(l)):
            for h, (i, k) in enumerate(pairs):
                A[i, k] = a[l][r][h]
        for r, pairs in enumerate(frag_b(l)):
            for h, (k, j) in enumerate(pairs):
                B[k, j] = (b0 if r == 0 else b1)[l][h]
    assert not np.isnan(A).any() and not np.isnan(B).any(), "fragments do not cover the operands"
    D = A @ B
    for l in range(32):
        for e, (i, j) in enumerate(frag_c(l)):
            d[l][e] += D[i, j]


def test_fragment_tables_cover_each_element_once():
    for frag, shape, per in ((frag_a, (16, 16), 8), (frag_b, (16, 8), 4), (frag_c, (16, 8), 4)):
        seen = np.zeros(shape, int)
        for l in range(32):
            cells = frag(l)
            flat = [x for p in cells for x in (p if isinstance(p, list) else [p])]
            assert len(flat) == per
            for i, j in flat:
                seen[i, j] += 1
        assert (seen == 1).all()


# The kernel's index math, transcribed from <fb/mma.cuh> and the gemm cell.
ldsm_row = lambda lane: (lane & 7) + 8 * ((lane >> 3) & 1)
ldsm_col = lambda lane: 8 * (lane >> 4)
BM, BN, BK, WM, WN, THREADS = 128, 256, 64, 64, 64, 256
KSTEPS, WARPS_N = BK // 16, BN // WN
A_LD, B_LD = BK + 8, BN + 8


def test_ldmatrix_addresses_give_the_mma_fragments():
    rng = np.random.default_rng(0)
    tile = rng.standard_normal((16, 16))
    regs = ldmatrix_x4(tile, [(ldsm_row(l), ldsm_col(l)) for l in range(32)])
    for l in range(32):   # A: register j of lane l holds the elements the A table names
        for j in range(4):
            assert regs[l][j] == tuple(tile[i, k] for i, k in frag_a(l)[j])
    regs = ldmatrix_x4(tile, [(ldsm_row(l), ldsm_col(l)) for l in range(32)], trans=True)
    for l in range(32):   # B (K x N row-major) with .trans: r0, r1 -> n8 tile 0; r2, r3 -> n8 tile 1
        for half in range(2):
            for r in range(2):
                want = tuple(tile[k, 8 * half + n] for k, n in frag_b(l)[r])
                assert regs[l][2 * half + r] == want


def load_stage_model(A, B, M, N, K, m0, n0, k0):
    """load_stage of the gemm cell: which global element lands where, zero-filled outside."""
    sA, sB = np.full((BM, A_LD), np.nan), np.full((BK, B_LD), np.nan)
    for tid in range(THREADS):
        ar, ac, br, bc = tid // 8, 8 * (tid % 8), tid // 32, 8 * (tid % 32)
        for c in range(BM * BK // 8 // THREADS):          # A rows ar + 32c
            gm, gk = m0 + ar + 32 * c, k0 + ac
            sA[ar + 32 * c, ac:ac + 8] = A[gm, gk:gk + 8] if (gk < K and gm < M) else 0
        for c in range(BK * BN // 8 // THREADS):          # B rows br + 8c
            gk, gn = k0 + br + 8 * c, n0 + bc
            sB[br + 8 * c, bc:bc + 8] = B[gk, gn:gn + 8] if (gn < N and gk < K) else 0
    return sA, sB


def test_load_stage_covers_the_slices_once():
    # every 16-byte chunk of the A and B slices is copied by exactly one (thread, c)
    seen_a, seen_b = np.zeros((BM, BK // 8), int), np.zeros((BK, BN // 8), int)
    for tid in range(THREADS):
        for c in range(BM * BK // 8 // THREADS):
            seen_a[tid // 8 + 32 * c, tid % 8] += 1
        for c in range(BK * BN // 8 // THREADS):
            seen_b[tid // 32 + 8 * c, tid % 32] += 1
    assert (seen_a == 1).all() and (seen_b == 1).all()


def block_tile_model(A, B, M, N, K, m0, n0):
    """One block of gemm_bf16: every warp's ldmatrix / mma / store index math, emulated."""
    C = np.full((M, N), np.nan)
    warps = THREADS // 32
    acc = {w: [[[[0.0] * 4 for _ in range(32)] for _ in range(8)] for _ in range(4)] for w in range(warps)}
    for k0 in range(0, K, BK):
        sA, sB = load_stage_model(A, B, M, N, K, m0, n0, k0)
        assert not np.isnan(sA[:, :BK]).any() and not np.isnan(sB[:, :BN]).any()
        for w in range(warps):
            wm, wn = w // WARPS_N, w % WARPS_N
            for kk in range(0, BK, 16):
                a = [ldmatrix_x4(sA, [(wm * WM + mi * 16 + ldsm_row(l), kk + ldsm_col(l)) for l in range(32)])
                     for mi in range(4)]
                b = [None] * 8
                for nj in range(4):
                    r = ldmatrix_x4(sB, [(kk + ldsm_row(l), wn * WN + nj * 16 + ldsm_col(l)) for l in range(32)],
                                    trans=True)
                    b[2 * nj] = ([r[l][0] for l in range(32)], [r[l][1] for l in range(32)])
                    b[2 * nj + 1] = ([r[l][2] for l in range(32)], [r[l][3] for l in range(32)])
                for mi in range(4):
                    for ni in range(8):
                        d = [acc[w][mi][ni][l] for l in range(32)]
                        mma_16816(d, a[mi], *b[ni])
    for w in range(warps):   # store_c
        wm, wn = w // WARPS_N, w % WARPS_N
        for l in range(32):
            g, t = l // 4, l % 4
            for mi in range(4):
                for ni in range(8):
                    for h in range(2):
                        r, c = m0 + wm * WM + mi * 16 + g + 8 * h, n0 + wn * WN + ni * 8 + 2 * t
                        for e in range(2):
                            if r < M and c + e < N:
                                C[r, c + e] = acc[w][mi][ni][l][2 * h + e]
    return C


def test_gemm_block_tile_model_matches_numpy_on_a_ragged_edge():
    # M, N, K not multiples of the tile; the block at (m0, n0) hangs over the bottom-right corner, and the
    # second K slice is partly zero-filled.
    M, N, K = 150, 280, 88
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    m0, n0 = 128, 256
    C = block_tile_model(A, B, M, N, K, m0, n0)
    got, want = C[m0:, n0:], (A @ B)[m0:, n0:]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert np.isnan(C[:m0, :]).all() and np.isnan(C[:, :n0]).all()   # the block writes only its tile


# ---------------------------------------------------------------- the GEMM's pipeline schedule (CPU model)

def gemm_schedule(slices, stages):
    """The gemm cell's main loop as a list of block-wide events, in program order (every warp runs the same).
    ("copy", stage, slice), ("commit",), ("wait", n), ("bar",), ("read", stage, slice, step)."""
    ev = []
    for s in range(stages - 1):                                   # prologue
        if s < slices:
            ev.append(("copy", s, s))
        ev.append(("commit",))
    ev += [("wait", stages - 2), ("bar",), ("read", 0, 0, 0)]
    for kt in range(slices):
        cur, nxt = kt % stages, (kt + 1) % stages
        for ks in range(KSTEPS):
            if ks == KSTEPS - 1:
                ev += [("wait", stages - 2), ("bar",), ("read", nxt, kt + 1, 0)]
            else:
                ev.append(("read", cur, kt, ks + 1))
            if ks == 0:
                nk = kt + stages - 1
                if nk < slices:
                    ev.append(("copy", nk % stages, nk))
                ev.append(("commit",))
            # the mma of step ks uses registers only
    return ev


def check_schedule(ev, slices):
    """cp.async groups and barrier semantics: a read needs its slice copied, waited for and published by a
    barrier, with no copy into that stage still in flight; a copy must not land in a stage any warp may still
    read, i.e. one read since the last barrier (warps between two barriers run in any order)."""
    groups, open_group = [], []                   # committed, not yet waited for; copies since the last commit
    landed, published, read_now, reads = [], {}, set(), []
    for e in ev:
        if e[0] == "copy":
            _, st, sl = e
            assert st not in read_now, f"slice {sl} copied into stage {st} while a warp may still read it"
            open_group.append((st, sl))
            published.pop(st, None)
        elif e[0] == "commit":
            groups.append(open_group)
            open_group = []
        elif e[0] == "wait":
            done = len(groups) - e[1]
            for g in groups[:max(done, 0)]:
                landed += g
            groups = groups[max(done, 0):]
        elif e[0] == "bar":
            for st, sl in landed:
                published[st] = sl
            landed, read_now = [], set()
        elif e[0] == "read":
            _, st, sl, step = e
            if sl >= slices:
                continue                              # past the end: loaded, never multiplied
            in_flight = [c for g in groups + [open_group] for c in g] + landed
            assert published.get(st) == sl and all(c[0] != st for c in in_flight), \
                f"step {step} of slice {sl} read from stage {st} before its copy was published"
            read_now.add(st)
            reads.append((sl, step))
    assert reads == [(sl, k) for sl in range(slices) for k in range(KSTEPS)]


@pytest.mark.parametrize("stages", [3, 4])
def test_gemm_schedule_reads_only_published_stages(stages):
    for slices in range(1, 9):
        check_schedule(gemm_schedule(slices, stages), slices)


def test_gemm_schedule_model_catches_a_missing_wait():
    ev = gemm_schedule(6, 3)
    i = [k for k, e in enumerate(ev) if e == ("wait", 1)][2]
    bad = [e if k != i else ("wait", 2) for k, e in enumerate(ev)]   # wait_group S-1: one slice too early
    with pytest.raises(AssertionError, match="before its copy was published"):
        check_schedule(bad, 6)
    j = [k for k, e in enumerate(ev) if e[0] == "copy"][3]            # refill before the barrier: a race
    early = ev[:j] + ev[j + 1:]
    b = max(k for k in range(j) if early[k] == ("bar",))
    early.insert(b, ev[j])
    with pytest.raises(AssertionError, match="while a warp may still read it"):
        check_schedule(early, 6)


def bank_groups(addresses_bytes):
    return [(a // 16) % 8 for a in addresses_bytes]


def test_ldmatrix_rows_are_bank_conflict_free():
    for lane0 in range(0, 32, 8):   # one 8x8 matrix = 8 lanes' 16-byte rows, read in one pass
        for mi, kk in [(0, 0), (3, 48)]:
            rows = [(mi * 16 + ldsm_row(l)) * A_LD * 2 + (kk + ldsm_col(l)) * 2 for l in range(lane0, lane0 + 8)]
            assert sorted(bank_groups(rows)) == list(range(8))
            rows = [(kk + ldsm_row(l)) * B_LD * 2 + (mi * 16 + ldsm_col(l)) * 2 for l in range(lane0, lane0 + 8)]
            assert sorted(bank_groups(rows)) == list(range(8))
    assert len(set(bank_groups([r * BK * 2 for r in range(8)]))) < 8   # unpadded A would conflict


# ---------------------------------------------------------------- the ring's ragged rows (CPU model)

def ring_rowsum_model(x, stages=4, blocks=5, threads=256, chunks_per_thread=2):
    """ring_rowsum's tile walk, load_tile's zero-fill and sum_tile's mask, on a flat float array."""
    rows, cols = x.shape
    flat = np.concatenate([x.ravel(), np.zeros(4)])
    tile = threads * chunks_per_thread
    chunks = (cols + 3 + (3 if cols % 4 else 0)) // 4
    per_row = (chunks + tile - 1) // tile
    y = np.full(rows, np.nan)
    for b in range(blocks):
        my_rows = (rows - 1 - b) // blocks + 1 if rows > b else 0
        acc = 0.0
        for t in range(my_rows * per_row):
            row, tl = b + (t // per_row) * blocks, t % per_row
            end, base = (row + 1) * cols, ((row * cols) & ~3) + 4 * tl * tile
            lead = (row * cols) & 3
            for i in range(tile):
                left = end - (base + 4 * i)
                nbytes = 16 if left >= 4 else 4 * left if left > 0 else 0
                v = np.zeros(4)
                v[:nbytes // 4] = flat[base + 4 * i: base + 4 * i + nbytes // 4]
                if tl == 0 and i == 0:
                    v[:lead] = 0
                acc += v.sum()
            if tl == per_row - 1:
                y[row], acc = acc, 0.0
    return y


@pytest.mark.parametrize("rows,cols", [(7, 1003), (6, 1000), (5, 2050), (3, 513)])
def test_ring_rowsum_model_sums_every_row_once(rows, cols):
    x = np.random.default_rng(cols).standard_normal((rows, cols))
    np.testing.assert_allclose(ring_rowsum_model(x), x.sum(axis=1), rtol=1e-12)


# ---------------------------------------------------------------- on the GPU

def sm80_or_skip(gpu):
    if gpu.cc[0] < 8:
        pytest.skip(f"cp.async needs sm_80 or newer, this GPU is {gpu.arch}")



def check_rowsum(kernel, rows, cols, blocks, shared, seed, repeat=False):
    """Launch a 256-thread rowsum kernel on random rows x cols and check every row sum.
    repeat: also rerun it (2 times, FEEDBEAST_STRESS times under make stress), bit for bit."""
    xh = fb.examples.rowsum_inputs(rows, cols, seed=seed)
    xd, y = fb.to_device(xh), fb.empty(rows, np.float32)

    def once():
        y.poison()
        kernel.launch(blocks, 256, xd, y, rows, cols, shared=shared)
        return y
    out = stress.repeat_identical(once) if repeat else once()
    fb.check(out, fb.examples.rowsum_reference(xh), name=f"{kernel.name} {rows}x{cols} shared={shared}")

@pytest.mark.parametrize("rows,cols", [(3001, 4099), (37, 1000), (1000, 8188), (2, 5)])
def test_ring_rowsum_on_gpu(anygpu, rows, cols):
    sm80_or_skip(anygpu)
    for stages in (1, 3, 4, 6):
        check_rowsum(build("ring", anygpu.arch, stages).ring_rowsum, rows, cols, min(rows, 3 * anygpu.sm_count),
                     stages * 8192, seed=stages)


@pytest.mark.parametrize("rows,cols", [(3001, 4100), (37, 1000)])
def test_pipeline_rowsum_on_gpu(anygpu, rows, cols):
    sm80_or_skip(anygpu)
    check_rowsum(build("piped", anygpu.arch).pipeline_rowsum, rows, cols, min(rows, 3 * anygpu.sm_count),
                 4 * 8192, seed=1)


def check_gemm(gpu, m, n, k, stages, repeat=False):
    shared = stages * (BM * A_LD + BK * B_LD) * 2
    if shared > gpu.smem_per_block_optin:
        pytest.skip(f"{stages} stages need {shared} B of shared memory, {gpu.name} allows {gpu.smem_per_block_optin}")
    kern = build("gemm", gpu.arch, stages).gemm_bf16
    ah, bh = fb.examples.matmul_inputs(m, n, k, dtype=fb.bfloat16, seed=m + stages)
    ad, bd, c = fb.to_device(ah), fb.to_device(bh), fb.empty((m, n), np.float32)

    def once():
        c.poison()
        kern.launch(((n + BN - 1) // BN, (m + BM - 1) // BM), THREADS, ad, bd, c, m, n, k, shared=shared)
        return c
    out = stress.repeat_identical(once) if repeat else once()
    fb.check(out, fb.examples.matmul_reference(ah, bh), name=f"gemm_bf16 {m}x{n}x{k} stages={stages}")


@pytest.mark.parametrize("shape", [(200, 136, 88), (1000, 1032, 1000), fb.examples.MATMUL_RAGGED, (1, 8, 8)])
@pytest.mark.parametrize("stages", [3, 4])
def test_gemm_bf16_on_gpu(anygpu, shape, stages):
    sm80_or_skip(anygpu)
    check_gemm(anygpu, *shape, stages)


# make stress: random ragged shapes within each kernel's alignment rule, repeated runs bit for bit

def test_gpu_stress_ring_rowsums(anygpu):
    sm80_or_skip(anygpu)
    n = anygpu.sm_count
    for i, (rows, cols) in enumerate(stress.sizes((3001, 4099), multiple_of=(256, 1024))):
        check_rowsum(build("ring", anygpu.arch, 4).ring_rowsum, rows, cols, min(rows, 3 * n), 4 * 8192, i, i == 0)
    for i, (rows, cols) in enumerate(stress.sizes((3001, 4100), multiple_of=(256, 1024), align=(1, 4))):
        check_rowsum(build("piped", anygpu.arch).pipeline_rowsum, rows, cols, min(rows, 3 * n), 4 * 8192, i, i == 0)


def test_gpu_stress_gemm_bf16(anygpu):
    sm80_or_skip(anygpu)
    for i, (m, n, k) in enumerate(stress.sizes((1000, 1032, 1000), multiple_of=(BM, BN, BK), align=(1, 8, 8))):
        check_gemm(anygpu, m, n, k, 3, repeat=i == 0)
