"""Chapters 01-02 (Numba): the kernels of the chapters, re-stated here, checked against float64.

Without a GPU they run in Numba's CUDA simulator at small ragged sizes; tests named test_gpu_* run at
full size on a GPU and skip by name elsewhere. Nothing here asserts a speed.
"""
import math

import numpy as np
import pytest

import feedbeast.numba_support as fbn
from feedbeast.errors import FeedbeastError

SIM = fbn.setup()   # before numba.cuda: this module is collected before any other that imports numba
from numba import cuda, float32  # noqa: E402

import feedbeast as fb  # noqa: E402
from feedbeast import examples as ex  # noqa: E402
from feedbeast import stress  # noqa: E402

TILE, TW = 16, 128


@cuda.jit
def chase(nxt, steps, out):
    j = nxt[0]
    for _ in range(steps - 1):
        j = nxt[j]
    out[0] = j


@cuda.jit
def matmul_tiled(a, b, c):
    sa = cuda.shared.array((TILE, TILE), float32)
    sb = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row, col = cuda.blockIdx.y * TILE + ty, cuda.blockIdx.x * TILE + tx
    m, k = a.shape
    n = b.shape[1]
    acc = float32(0)
    for k0 in range(0, k, TILE):
        sa[ty, tx] = a[row, k0 + tx] if row < m and k0 + tx < k else float32(0)
        sb[ty, tx] = b[k0 + ty, col] if k0 + ty < k and col < n else float32(0)
        cuda.syncthreads()
        for q in range(TILE):
            acc += sa[ty, q] * sb[q, tx]
        cuda.syncthreads()
    if row < m and col < n:
        c[row, col] = acc


@cuda.jit
def matmul_db(a, b, c):
    sa = cuda.shared.array((2, TILE, TILE), float32)
    sb = cuda.shared.array((2, TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row, col = cuda.blockIdx.y * TILE + ty, cuda.blockIdx.x * TILE + tx
    m, k = a.shape
    n = b.shape[1]
    sa[0, ty, tx] = a[row, tx] if row < m and tx < k else float32(0)
    sb[0, ty, tx] = b[ty, col] if ty < k and col < n else float32(0)
    cuda.syncthreads()
    acc = float32(0)
    for t in range((k + TILE - 1) // TILE):
        cur, k1 = t % 2, (t + 1) * TILE
        ra = a[row, k1 + tx] if row < m and k1 + tx < k else float32(0)
        rb = b[k1 + ty, col] if k1 + ty < k and col < n else float32(0)
        for q in range(TILE):
            acc += sa[cur, ty, q] * sb[cur, q, tx]
        sa[1 - cur, ty, tx] = ra
        sb[1 - cur, ty, tx] = rb
        cuda.syncthreads()
    if row < m and col < n:
        c[row, col] = acc


@cuda.jit(device=True)
def reduce_rows(red, acc, w, lane, r0, rows, y):
    """Each warp w holds one row's 32 partial sums: add them by halving, write y[r0 + w]."""
    red[w, lane] = acc
    cuda.syncthreads()
    s = 16
    while s > 0:
        if lane < s:
            red[w, lane] += red[w, lane + s]
        cuda.syncthreads()
        s //= 2
    if lane == 0 and r0 + w < rows:
        y[r0 + w] = red[w, 0]


def make_rowsum_tiled(band):
    loads = TW // 32

    @cuda.jit
    def rowsum_tiled(x, y):
        tile = cuda.shared.array((band, TW), float32)
        red = cuda.shared.array((band, 32), float32)
        lane, w = cuda.threadIdx.x, cuda.threadIdx.y
        tid = w * 32 + lane
        rows, cols = x.shape
        r0 = cuda.blockIdx.x * band
        acc = float32(0)
        for c0 in range(0, cols, TW):
            for j in range(loads):
                f = tid + j * 32 * band
                rr, cc = f // TW, f % TW
                tile[rr, cc] = x[r0 + rr, c0 + cc] if r0 + rr < rows and c0 + cc < cols else float32(0)
            cuda.syncthreads()
            for j in range(TW // 32):
                acc += tile[w, lane + 32 * j]
            cuda.syncthreads()
        reduce_rows(red, acc, w, lane, r0, rows, y)
    return rowsum_tiled


def make_rowsum_db(band):
    loads = TW // 32

    @cuda.jit
    def rowsum_db(x, y):
        tile = cuda.shared.array((2, band, TW), float32)
        red = cuda.shared.array((band, 32), float32)
        regs = cuda.local.array(loads, float32)
        lane, w = cuda.threadIdx.x, cuda.threadIdx.y
        tid = w * 32 + lane
        rows, cols = x.shape
        r0 = cuda.blockIdx.x * band
        for j in range(loads):
            f = tid + j * 32 * band
            rr, cc = f // TW, f % TW
            tile[0, rr, cc] = x[r0 + rr, cc] if r0 + rr < rows and cc < cols else float32(0)
        cuda.syncthreads()
        acc = float32(0)
        for t in range((cols + TW - 1) // TW):
            cur, c1 = t % 2, (t + 1) * TW
            for j in range(loads):
                f = tid + j * 32 * band
                rr, cc = f // TW, f % TW
                regs[j] = x[r0 + rr, c1 + cc] if r0 + rr < rows and c1 + cc < cols else float32(0)
            for j in range(TW // 32):
                acc += tile[cur, w, lane + 32 * j]
            for j in range(loads):
                f = tid + j * 32 * band
                tile[1 - cur, f // TW, f % TW] = regs[j]
            cuda.syncthreads()
        reduce_rows(red, acc, w, lane, r0, rows, y)
    return rowsum_db


rowsum_tiled, rowsum_db = make_rowsum_tiled(8), make_rowsum_db(8)


def launch_rowsum(kern, x, band=8):
    y = fbn.device_or_host((x.shape[0],), np.float32)
    kern[math.ceil(x.shape[0] / band), (32, band)](fbn.device_or_host(x), y)
    return fbn.to_host(y)


def run_rowsum(kern, rows, cols, band=8, seed=0):
    x = ex.rowsum_inputs(rows, cols, seed=seed)
    return fb.check(launch_rowsum(kern, x, band), ex.rowsum_reference(x), name=f"rowsum {rows}x{cols}")


def launch_matmul(kern, a, b):
    (m, k), n = a.shape, b.shape[1]
    c = fbn.device_or_host((m, n), np.float32)
    kern[(math.ceil(n / TILE), math.ceil(m / TILE)), (TILE, TILE)](fbn.device_or_host(a), fbn.device_or_host(b), c)
    return fbn.to_host(c)


def run_matmul(kern, m, n, k):
    a, b = ex.matmul_inputs(m, n, k)
    return fb.check(launch_matmul(kern, a, b), ex.matmul_reference(a, b), name=f"matmul {m}x{n}x{k}")


def test_setup_matches_this_machine():
    assert SIM == (fb.gpu() is None) or SIM == fbn.simulator()
    from numba.cuda.core import config
    assert bool(config.ENABLE_CUDASIM) == SIM


def test_setup_refuses_the_other_mode_once_numba_cuda_is_imported():
    with pytest.raises(FeedbeastError, match="Restart the kernel"):
        fbn.setup(simulator=not SIM)
    assert fbn.simulator() == SIM


def test_outputs_are_poisoned_and_unwritten_elements_fail_the_check():
    y = fbn.to_host(fbn.device_or_host((7,), np.float32))
    assert np.isnan(y).all()
    r = fb.check(y, np.ones(7), raise_on_fail=False)
    assert not r and "never written" in r.detail
    x = np.arange(5, dtype=np.float32)
    assert np.array_equal(fbn.to_host(fbn.device_or_host(x)), x)


def test_launcher_is_a_skip_in_the_simulator():
    if not SIM:
        pytest.skip("this machine has a GPU: launcher() launches for real (see test_gpu_*)")
    r = fb.bench(fbn.launcher(rowsum_tiled, 1, (32, 8), None, None), name="test/launcher")
    assert isinstance(r, fb.Skipped)
    assert isinstance(fbn.regs(rowsum_tiled), fb.Skipped)


def test_pointer_chase_follows_one_cycle():
    n = 300
    order = np.random.default_rng(0).permutation(n).astype(np.uint32)
    nxt = np.empty(n, np.uint32)
    nxt[order] = np.roll(order, -1)
    j, seen = 0, set()
    for _ in range(n):                     # one cycle through every slot
        seen.add(j)
        j = int(nxt[j])
    assert j == 0 and len(seen) == n
    steps = 450
    out = fbn.device_or_host((1,), np.uint32)
    chase[1, 1](fbn.device_or_host(nxt), steps, out)
    j = 0
    for _ in range(steps):
        j = int(nxt[j])
    assert fb.check(fbn.to_host(out), np.array([j]))


@pytest.mark.parametrize("kern", [rowsum_tiled, rowsum_db], ids=["tiled", "double-buffered"])
@pytest.mark.parametrize("shape", [(19, 300), (5, 100)], ids=["ragged", "one-tile"])
def test_rowsum(kern, shape):
    assert run_rowsum(kern, *shape)


def test_rowsum_other_band():
    assert run_rowsum(make_rowsum_db(2), 7, 200, band=2)


@pytest.mark.parametrize("kern", [matmul_tiled, matmul_db], ids=["tiled", "double-buffered"])
def test_matmul_ragged(kern):
    assert run_matmul(kern, 21, 19, 37)


def test_gpu_rowsum_full_size(anygpu):
    for kern in (rowsum_tiled, rowsum_db):
        assert run_rowsum(kern, *ex.ROWSUM_GPU_SHAPE)


def test_gpu_matmul_ragged_full_size(anygpu):
    for kern in (matmul_tiled, matmul_db):
        assert run_matmul(kern, *ex.MATMUL_RAGGED)


@pytest.mark.parametrize("kern", [rowsum_tiled, rowsum_db], ids=["tiled", "double-buffered"])
def test_gpu_rowsum_stress(anygpu, kern):
    """make stress: random ragged shapes, then repeated runs bit for bit (one run per shape otherwise)."""
    for rows, cols in stress.sizes((3001, 4099), multiple_of=(8, TW)):
        assert run_rowsum(kern, rows, cols, seed=rows + cols)
    x = ex.rowsum_inputs(1001, 1000, seed=3)
    stress.repeat_identical(lambda: launch_rowsum(kern, x))


@pytest.mark.parametrize("kern", [matmul_tiled, matmul_db], ids=["tiled", "double-buffered"])
def test_gpu_matmul_stress(anygpu, kern):
    for m, n, k in stress.sizes((300, 310, 290), multiple_of=TILE):
        assert run_matmul(kern, m, n, k)
    a, b = ex.matmul_inputs(300, 310, 290)
    stress.repeat_identical(lambda: launch_matmul(kern, a, b))


def test_gpu_prefetch_stays_in_registers(anygpu):
    run_rowsum(rowsum_tiled, 19, 300), run_rowsum(rowsum_db, 19, 300)
    run_matmul(matmul_tiled, 21, 19, 37), run_matmul(matmul_db, 21, 19, 37)
    for kern in (rowsum_tiled, rowsum_db, matmul_tiled, matmul_db):
        res = fbn.resources(kern)
        print(kern.__name__, res)
        assert res["local_bytes"] == 0, f"{kern.__name__} uses local memory: {res}"


def test_gpu_sass_shows_the_synchronous_pattern(anygpu):
    run_rowsum(rowsum_tiled, 19, 300)
    hist = fbn.expect_sass(rowsum_tiled, "LDG", "STS", "LDS", "BAR")
    assert all(hist.values())


# The simulator runs kernels as Python, so it accepts code Numba's real compiler rejects. This compiles
# every kernel of the chapter and lab notebooks to PTX with the real compiler (NVVM, no GPU needed), in a
# separate process because numba.cuda can only be in one mode per process.
_COMPILE_NOTEBOOK_KERNELS = r'''
import ast, inspect, math, os, sys
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
import nbformat, numpy as np
from numba import cuda, float32
SIGS = {"chase": "void(uint32[::1], int64, uint32[::1])", "stream": "void(float32[::1], float32[::1])",
        "matmul_tiled": "void(float32[:, ::1], float32[:, ::1], float32[:, ::1])",
        "matmul_db": "void(float32[:, ::1], float32[:, ::1], float32[:, ::1])"}
for path in sys.argv[1:]:
    ns = {"cuda": cuda, "float32": float32, "math": math, "np": np}
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code" or "cuda.jit" not in cell.source and "TW = " not in cell.source:
            continue
        body = [n for n in ast.parse(cell.source).body if isinstance(n, ast.FunctionDef) or
                isinstance(n, ast.Assign) and not any(w in ast.unparse(n) for w in ("fb", "ex.", "SIM"))]
        try:
            exec(compile(ast.Module(body=body, type_ignores=[]), path, "exec"), ns)
        except NameError:
            pass
    kernels = {k: v for k, v in ns.items() if hasattr(v, "py_func")}
    for name, make in [(k, v) for k, v in ns.items() if k.startswith("make_") and callable(v)]:
        kernels[name] = make(8)
    for name, k in kernels.items():
        sig = SIGS.get(k.py_func.__name__, "void(float32[:, ::1], float32[::1])")
        ptx, _ = cuda.compile_ptx(k.py_func, sig, cc=(9, 0))
        local = ".local" in ptx
        print(f"{os.path.basename(path)} {name} ok{' LOCAL' if local else ''}")
'''


def test_notebook_kernels_compile_with_the_real_numba_compiler(tmp_path):
    import subprocess
    import sys
    from pathlib import Path
    try:
        from cuda.bindings import nvvm
        nvvm.version()
    except Exception as e:   # a skip, by name: NVVM is what turns Numba kernels into PTX
        pytest.skip(f"needs NVVM (cuda-toolkit[nvvm] or a CUDA toolkit), none found: {e}")
    root = Path(__file__).resolve().parents[1]
    notebooks = [root / p for p in ("chapters/01-synchronous-loads.ipynb", "chapters/02-software-pipelining.ipynb",
                                    "solutions/01-tiled-rowsum.ipynb", "solutions/02-double-buffered-rowsum.ipynb")]
    script = tmp_path / "compile_kernels.py"
    script.write_text(_COMPILE_NOTEBOOK_KERNELS)
    r = subprocess.run([sys.executable, str(script), *map(str, notebooks)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.split("\n")
    for name in ("chase", "make_stream", "matmul_tiled", "matmul_db", "rowsum_naive", "make_rowsum_tiled",
                 "make_rowsum_db", "rowsum_tiled", "rowsum_db"):
        assert any(f" {name} ok" in ln for ln in lines), f"{name} was not compiled:\n{r.stdout}"
    assert "LOCAL" not in r.stdout, f"a kernel keeps an array in local memory:\n{r.stdout}"
