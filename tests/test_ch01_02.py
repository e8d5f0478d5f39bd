"""Chapters 01-02 (Numba): the chapters' own kernels, loaded from the notebooks, checked against float64.

Without a GPU they run in Numba's CUDA simulator at small ragged sizes; tests named test_gpu_* run at
full size on a GPU and skip by name elsewhere. Nothing here asserts a speed.
"""
import math
from pathlib import Path

import numpy as np
import pytest

import feedbeast.numba_support as fbn
from feedbeast.errors import FeedbeastError

SIM = fbn.setup()   # before numba.cuda: this module is collected before any other that imports numba
from numba import cuda, float32  # noqa: E402

import feedbeast as fb  # noqa: E402
from feedbeast import examples as ex  # noqa: E402
from feedbeast import stress  # noqa: E402
from feedbeast.course.notebook import load  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ("chapters/01-synchronous-loads.ipynb", "chapters/02-software-pipelining.ipynb",
             "solutions/01-tiled-transpose.ipynb", "solutions/02-double-buffered-transpose.ipynb")
NUMBA = {"cuda": cuda, "float32": float32, "math": math, "np": np}   # this process's numba.cuda, set up above
_ch01 = load(ROOT / NOTEBOOKS[0]).definitions("chase", "TILE", "matmul_tiled", "sgemm_vec", SIM=SIM, **NUMBA)
chase, TILE, matmul_tiled, sgemm_vec = (_ch01[k] for k in ("chase", "TILE", "matmul_tiled", "sgemm_vec"))
_ch02 = load(ROOT / NOTEBOOKS[1]).definitions("TW", "sgemm_sync", "sgemm_db", "sgemm_grid", "make_rowsum_tiled",
                                               "make_rowsum_db", "rowsum_tiled", "rowsum_db", SIM=SIM, **NUMBA)
TW = _ch02["TW"]
sgemm_sync, sgemm_db, sgemm_grid = _ch02["sgemm_sync"], _ch02["sgemm_db"], _ch02["sgemm_grid"]
MATMULS, MATMUL_IDS = [matmul_tiled, sgemm_vec, sgemm_sync, sgemm_db], ["tiled", "ch01-sgemm", "sync", "double-buffered"]
make_rowsum_tiled, make_rowsum_db = _ch02["make_rowsum_tiled"], _ch02["make_rowsum_db"]
rowsum_tiled, rowsum_db = _ch02["rowsum_tiled"], _ch02["rowsum_db"]     # the chapter's band of 8 rows


def launch_rowsum(kern, x, band=8):
    y = fbn.device_or_host((x.shape[0],), np.float32)
    kern[math.ceil(x.shape[0] / band), (32, band)](fbn.device_or_host(x), y)
    return y        # the output itself: on a GPU fb.check reads the guard after its end


def run_rowsum(kern, rows, cols, band=8, seed=0):
    x = ex.rowsum_inputs(rows, cols, seed=seed)
    return fb.check(launch_rowsum(kern, x, band), ex.rowsum_reference(x), name=f"rowsum {rows}x{cols}")


def launch_matmul(kern, a, b):
    (m, k), n = a.shape, b.shape[1]
    c = fbn.device_or_host((m, n), np.float32)
    grid = ((math.ceil(n / TILE), math.ceil(m / TILE)), (TILE, TILE)) if kern is matmul_tiled else sgemm_grid(m, n)
    kern[grid](fbn.device_or_host(a), fbn.device_or_host(b), c)
    return c


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


def test_launcher_checks_its_geometry_and_arguments_on_every_machine():
    """A missing argument, a grid of 0 or a block of 2048 threads: said when the launcher is made, here too, not
    first on a GPU (in the simulator the launcher only skips)."""
    @cuda.jit
    def addone(x, n):
        i = cuda.grid(1)
        if i < n:
            x[i] += 1
    x = fbn.device_or_host(np.zeros(8, np.float32), poison=False)
    with pytest.raises(FeedbeastError, match=r"addone\(x, n\) cannot take 1 argument"):
        fbn.launcher(addone, 1, 8, x)
    with pytest.raises(fb.LaunchError, match="grid 0: give 1 to 3 positive integer sizes"):
        fbn.launcher(addone, 0, 8, x, 8)
    with pytest.raises(fb.LaunchError, match=r"block \(32, 64, 1\) has 2048 threads: at most 1024"):
        fbn.launcher(addone, 1, (32, 64), x, 8)
    with pytest.raises(FeedbeastError, match="is not a Numba kernel"):
        fbn.launcher(lambda x, n: None, 1, 8, x, 8)
    assert callable(fbn.launcher(addone, 1, 8, x, 8))


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
    assert fb.check(out, np.array([j]))


@pytest.mark.parametrize("kern", [rowsum_tiled, rowsum_db], ids=["tiled", "double-buffered"])
@pytest.mark.parametrize("shape", [(19, 300), (5, 100)], ids=["ragged", "one-tile"])
def test_rowsum(kern, shape):
    assert run_rowsum(kern, *shape)


@pytest.mark.parametrize("shape", [(300, 7), (45, 70), (5, 3)], ids=["two-strips", "wide", "one-tile"])
def test_lab02s_comparison_kernel_transposes(shape):
    """Lab 02 times its double buffer against lab_refs.transpose_strip: that kernel must be a correct transpose."""
    from feedbeast.course import lab_refs
    k = lab_refs.transpose_strip(32, 8, 8)
    rows, cols = shape
    x = fb.random(shape, np.float32, seed=5)
    y = fbn.device_or_host((cols, rows), np.float32)
    k[(math.ceil(cols / 32), math.ceil(math.ceil(rows / 32) / 8)), (32, 8)](fbn.device_or_host(x), y)
    assert fb.check(y, x.T.astype(np.float64), name=f"transpose_strip {rows}x{cols}")


def test_gpu_a_store_past_a_numba_output_fails_its_check(anygpu):
    """fbn.device_or_host's output is a Numba view of a guarded fb.empty: fb.check given the view itself sees a store
    one element past the end (fbn.to_host's copy stops at the last element and would not)."""
    @cuda.jit
    def fill(y, n, over):
        i = cuda.grid(1)
        if i < n + over:
            y[i] = 1.0 + i      # Numba checks no bounds on a GPU: y[n] lands in the guard

    for n in (3, 1000):
        ref = 1.0 + np.arange(n, dtype=np.float64)
        ok, over = fbn.device_or_host((n,), np.float32), fbn.device_or_host((n,), np.float32)
        fill[math.ceil((n + 1) / 128), 128](ok, n, 0)
        fill[math.ceil((n + 1) / 128), 128](over, n, 1)
        assert fb.check(ok, ref, name="fill")
        r = fb.check(over, ref, name="fill past the end", raise_on_fail=False)
        assert not r.passed and "4 bytes after the last element were written (the first at +0)" in repr(r), repr(r)
        assert fb.check(fbn.to_host(over), ref, name="the host copy sees nothing").passed


def test_rowsum_other_band():
    assert run_rowsum(make_rowsum_db(2), 7, 200, band=2)


@pytest.mark.parametrize("kern", MATMULS, ids=MATMUL_IDS)
def test_matmul_ragged(kern):
    assert run_matmul(kern, 21, 19, 37)


def test_gpu_rowsum_full_size(anygpu):
    for kern in (rowsum_tiled, rowsum_db):
        assert run_rowsum(kern, *ex.ROWSUM_GPU_SHAPE)


def test_gpu_matmul_ragged_full_size(anygpu):
    for kern in MATMULS:
        assert run_matmul(kern, *ex.MATMUL_RAGGED)


@pytest.mark.parametrize("kern", [rowsum_tiled, rowsum_db], ids=["tiled", "double-buffered"])
def test_gpu_rowsum_stress(anygpu, kern):
    """make stress: random ragged shapes, then repeated runs bit for bit (one run per shape otherwise)."""
    for rows, cols in stress.sizes((3001, 4099), multiple_of=(8, TW)):
        assert run_rowsum(kern, rows, cols, seed=rows + cols)
    x = ex.rowsum_inputs(1001, 1000, seed=3)
    stress.repeat_identical(lambda: fbn.to_host(launch_rowsum(kern, x)))


@pytest.mark.parametrize("kern", MATMULS, ids=MATMUL_IDS)
def test_gpu_matmul_stress(anygpu, kern):
    for m, n, k in stress.sizes((300, 310, 290), multiple_of=TILE):
        assert run_matmul(kern, m, n, k)
    a, b = ex.matmul_inputs(300, 310, 290)
    stress.repeat_identical(lambda: fbn.to_host(launch_matmul(kern, a, b)))


def test_gpu_prefetch_stays_in_registers(anygpu):
    run_rowsum(rowsum_tiled, 19, 300), run_rowsum(rowsum_db, 19, 300)
    for kern in MATMULS:
        run_matmul(kern, 21, 19, 37)
    for kern in (rowsum_tiled, rowsum_db, *MATMULS):
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
import math, os, sys
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
import numpy as np
from numba import cuda, float32
from feedbeast.course.notebook import load
SIGS = {"chase": "void(uint32[::1], int64, uint32[::1])", "stream": "void(float32[::1], float32[::1])",
        "matmul_tiled": "void(float32[:, ::1], float32[:, ::1], float32[:, ::1])",
        "sgemm": "void(float32[:, ::1], float32[:, ::1], float32[:, ::1])",
        "stream_numba": "void(float32[::1], float32[::1])",
        **{k: "void(float32[:, ::1], float32[:, ::1])" for k in ("transpose_naive", "transpose_tiled", "transpose_db")}}
for path in sys.argv[1:]:
    nb = load(path)
    makers = [f for f in nb.functions() if f.startswith("make_") and f != "make_ld4"]
    kernels = [f for f in nb.functions("cuda.jit") if not f.startswith("make_")]
    ns = nb.definitions(*kernels, *makers, cuda=cuda, float32=float32, math=math, np=np, SIM=False)
    for name in kernels + makers:
        k = ns[name](8) if name in makers else ns[name]
        sig = SIGS.get(k.py_func.__name__, "void(float32[:, ::1], float32[::1])")
        ptx, _ = cuda.compile_ptx(k.py_func, sig, cc=(9, 0))
        local = ".local" in ptx
        print(f"{os.path.basename(path)} {name} ok{' LOCAL' if local else ''}")
from feedbeast.course import lab_refs   # lab 02's comparison kernel, made outside the notebook
ptx, _ = cuda.compile_ptx(lab_refs.transpose_strip(32, 8, 8).py_func, "void(float32[:, ::1], float32[:, ::1])",
                          cc=(9, 0))
print(f"lab_refs transpose_strip ok{' LOCAL' if '.local' in ptx else ''}")
'''


def test_notebook_kernels_compile_with_the_real_numba_compiler(tmp_path):
    import subprocess
    import sys
    try:
        from cuda.bindings import nvvm
        nvvm.version()
    except Exception as e:   # a skip, by name: NVVM is what turns Numba kernels into PTX
        pytest.skip(f"needs NVVM (cuda-toolkit[nvvm] or a CUDA toolkit), none found: {e}")
    notebooks = [ROOT / p for p in NOTEBOOKS]
    script = tmp_path / "compile_kernels.py"
    script.write_text(_COMPILE_NOTEBOOK_KERNELS)
    r = subprocess.run([sys.executable, str(script), *map(str, notebooks)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.split("\n")
    for name in ("chase", "stream_numba", "matmul_tiled", "make_sgemm", "rowsum_naive", "make_rowsum_tiled",
                 "make_rowsum_db", "transpose_naive", "transpose_tiled", "transpose_db", "transpose_strip"):
        assert any(f" {name} ok" in ln for ln in lines), f"{name} was not compiled:\n{r.stdout}"
    assert "LOCAL" not in r.stdout, f"a kernel keeps an array in local memory:\n{r.stdout}"


# What the simulator runs and a GPU's compiler would not: fbn.expect_compiles hands a kernel to Numba's real compiler
# in a process of its own (feedbeast.numba_compile), so a lab's check fails on a machine without a GPU too.
COMPILE_CASES = '''
import functools
import math
from math import sqrt
import numpy as np
from numba import cuda, float32
TILE, SCALE = 32, 0.5

@cuda.jit(device=True)
def half(v):
    return v * SCALE

@cuda.jit
def takes(x, y):
    s = cuda.shared.array(TILE, float32)
    t = cuda.threadIdx.x
    if t < x.shape[0]:
        s[t] = x[t]
    cuda.syncthreads()
    if t < y.shape[0]:
        y[t] = half(math.sqrt(s[t]))

@cuda.jit
def lists(x, y):
    t = cuda.threadIdx.x
    vals = []
    vals.append(x[t])
    y[t] = vals[0]

@cuda.jit
def strings(x, y):
    t = cuda.threadIdx.x
    y[t] = len("abc") + x[t] + OBJ.v

SHAPE, FOUR = (TILE, 2), np.int64(4)

def make_scaled(band):                 # a kernel made by a factory: band is a closure variable
    @cuda.jit
    def scaled(x, y):
        s = cuda.shared.array(SHAPE, float32)
        t = cuda.threadIdx.x
        s[t % TILE, 0] = x[t] * band * FOUR
        cuda.syncthreads()
        y[t] = sqrt(s[t % TILE, 0])
    return scaled

@cuda.jit(device=True)
def untyped(v):
    q = []
    return v + len(q)

@cuda.jit
def calls_untyped(x, y):
    t = cuda.threadIdx.x
    y[t] = untyped(x[t])

@cuda.jit
def returns(x, y):
    t = cuda.threadIdx.x
    return x[t]

def helper(v):                          # a helper without @cuda.jit(device=True)
    return v * 2.0

@cuda.jit
def calls_a_python_function(x, y):
    t = cuda.threadIdx.x
    y[t] = helper(x[t])

@cuda.jit
def annotated_list(x: object, y=None) -> None:      # annotations and defaults are not run, and not a way around
    t = cuda.threadIdx.x
    vals = []
    vals.append(x[t])
    y[t] = vals[0]

WEIGHTS = np.arange(8, dtype=np.float32)
BIG, C64, DT = np.ones(70000, np.float32), np.arange(4, dtype=np.complex64), np.dtype(np.float32)

@cuda.jit
def big_constants(x, y):
    s = cuda.shared.array(32, dtype=DT)
    t = cuda.threadIdx.x
    s[t % 32] = BIG[t] + C64[t % 4].real
    y[t] = s[t % 32] + x[t]

@cuda.jit
def continued(x: object, y=None) -> \
        None:
    t = cuda.threadIdx.x
    y[t] = x[t]

def decoy(x, y):
    y[0] = x[0]

@cuda.jit
@functools.wraps(decoy)
def wrapped_list(x, y):
    vals = []
    vals.append(x[cuda.threadIdx.x])
    y[cuda.threadIdx.x] = vals[0]

@cuda.jit
def constant_array(x, y):
    t = cuda.threadIdx.x
    y[t] = x[t] * WEIGHTS[t % 8]

@cuda.jit
def list_literal(x, y):
    t = cuda.threadIdx.x
    a = [1.0, 2.0]
    y[t] = x[t] + a[0]
'''


@pytest.fixture(scope="module")
def compile_cases(tmp_path_factory):
    from conftest import module_from_source
    mod = module_from_source(tmp_path_factory.mktemp("compile"), "fb_compile_cases", COMPILE_CASES)
    mod.OBJ = type("O", (), {"v": 1.0})()
    return mod


def test_the_real_compiler_takes_a_good_kernel_and_names_the_line_it_rejects(compile_cases):
    if not SIM:
        pytest.skip("this machine has a GPU: a launch compiles the kernel for real (test_gpu_* launch them)")
    try:
        from cuda.bindings import nvvm
        nvvm.version()
    except Exception as e:
        pytest.skip(f"needs NVVM (cuda-toolkit[nvvm] or a CUDA toolkit), none found: {e}")
    x, y = np.ones(8, np.float32), fbn.device_or_host(8, np.float32)
    ok = fbn.expect_compiles(compile_cases.takes, x, y)      # globals, math, a device function of its own
    assert ok.startswith("takes: Numba's GPU compiler takes it (PTX for sm_75"), ok
    with pytest.raises(fb.CheckFailed, match=r"kernel lists: Numba's GPU compiler rejects it at `vals.append\(x\[t\]\)`: "
                                             r"Unknown attribute 'append'.*\(TypingError\)"):
        fbn.expect_compiles(compile_cases.lists, x, y)
    # a factory's kernel (its closure), a tuple and a numpy scalar global, a function imported from math
    assert "takes it" in fbn.expect_compiles(compile_cases.make_scaled(3.0), x, y)
    # an error inside a device function: its own words and its line, not the kernel's call
    with pytest.raises(fb.CheckFailed, match=r"rejects it at `q = \[\]` \(in untyped\)"):
        fbn.expect_compiles(compile_cases.calls_untyped, x, y)
    # a kernel that returns a value: the compiler's complaint, not a skip that blames this machine
    with pytest.raises(fb.CheckFailed, match=r"kernel returns: Numba's GPU compiler rejects it.*void return type"):
        fbn.expect_compiles(compile_cases.returns, x, y)
    # a plain Python helper: the simulator calls it, the GPU compiler cannot (a failure, not a skip)
    with pytest.raises(fb.CheckFailed, match=r"rejects it at `y\[t\] = helper\(x\[t\]\)`.*helper"):
        fbn.expect_compiles(compile_cases.calls_a_python_function, x, y)
    # a list literal: rejected where the compiler lowers it, with its line
    with pytest.raises(fb.CheckFailed, match=r"rejects it at `a = \[1.0, 2.0\]`"):
        fbn.expect_compiles(compile_cases.list_literal, x, y)
    # a global object: no kernel reads one (a failure that names it, not a skip)
    with pytest.raises(fb.CheckFailed, match=r"kernel strings uses the global 'OBJ' \(O\): a GPU kernel takes"):
        fbn.expect_compiles(compile_cases.strings, x, y)
    # annotations and default values are blanked, not run, and the kernel is still compiled (and rejected)
    with pytest.raises(fb.CheckFailed, match=r"kernel annotated_list: Numba's GPU compiler rejects it at `vals.append"):
        fbn.expect_compiles(compile_cases.annotated_list, x, y)
    # a global numpy array is a constant array in the kernel, whatever its size and kind; a dtype is a constant too
    assert "takes it" in fbn.expect_compiles(compile_cases.constant_array, x, y)
    assert "takes it" in fbn.expect_compiles(compile_cases.big_constants, x, y)
    # a return annotation continued with a backslash still compiles
    assert "takes it" in fbn.expect_compiles(compile_cases.continued, x, y)
    # functools.wraps hands inspect another function's source: the check reads the kernel's own code
    with pytest.raises(fb.CheckFailed, match=r"kernel wrapped_list: Numba's GPU compiler rejects it at `vals.append"):
        fbn.expect_compiles(compile_cases.wrapped_list, x, y)
    # the simulator itself ran the list kernel: what the check is for
    out = fbn.device_or_host(8, np.float32)
    compile_cases.lists[1, 8](x, out)
    assert np.array_equal(out, x)


def test_the_compiler_s_process_does_not_import_from_the_notebook_s_folder(compile_cases, tmp_path, monkeypatch):
    """The check runs in the learner's folder; `python -m` would put that folder first on the child's sys.path, where
    a json.py would run outside the grader's guard (and could answer for the compiler)."""
    if not SIM:
        pytest.skip("this machine has a GPU: a launch compiles the kernel for real (test_gpu_* launch them)")
    planted = tmp_path / "ran"
    (tmp_path / "json.py").write_text(f"open({str(planted)!r}, 'w').write('x')\nfrom _json import *\n")
    monkeypatch.chdir(tmp_path)
    x, y = np.ones(8, np.float32), fbn.device_or_host(8, np.float32)
    out = fbn.expect_compiles(compile_cases.takes, x, y)
    assert not planted.exists(), "the child imported json.py from the notebook's folder"
    assert isinstance(out, fb.Skipped) or "takes it" in out, out
