"""Lab 10 (fp8 GEMV) graded as a learner's notebook is: the solution passes, each planted mistake fails.

CPU: every planted replacement matches the solution exactly once; every mistake fails grading with no GPU: the
quantization's check needs none, and the fragments are read back by probe kernels whose PTX runs on the host; the
solution fails nothing, its launches skipped by name (`partial`).
GPU (Hopper; skipped by name elsewhere): the solution grades `ok` with the kernel's checks run; the fragment
mistakes, whose SASS looks right, fail on the numbers too (float64 of the dequantized weights).
"""
from __future__ import annotations

import concurrent.futures
import os
import re
from pathlib import Path

import pytest

from feedbeast.course import notebook
from feedbeast.errors import STARTER_MARK

ROOT = Path(__file__).resolve().parents[1]
SOLUTION_PATH = ROOT / "solutions/10-fp8-gemv.ipynb"
LAB_PATH = ROOT / "labs/10-fp8-gemv.ipynb"

BUGS = {
    # The A fragment's second k-pair of row g built from the first one: k = 4t, 4t+1 twice.
    "a-fragment-k-pair-repeated": [("a[2] = fb::decode::e4m3x2_to_f16x2(r[2 * h] >> 16);",
                                    "a[2] = fb::decode::e4m3x2_to_f16x2(r[2 * h] & 0xffff);")],
    # The B fragment always read from the first 64-column box: k = 64..127 of each stage multiply the wrong tokens.
    "b-fragment-first-box-only": [("return x + (c / 4) * P * 128 + fb::decode::swz128(tok, col / 8)",
                                   "return x + fb::decode::swz128(tok, col / 8)")],
    # The B fragment addressed as if the activations were not swizzled (the tensor map writes them swizzled).
    "b-fragment-unswizzled": [("return x + (c / 4) * P * 128 + fb::decode::swz128(tok, col / 8)",
                               "return x + (c / 4) * P * 128 + (tok * 128 + (col / 8) * 16)")],
    # One scale for the whole matrix instead of one per output channel.
    "one-scale-for-every-row": [("amax = np.abs(w).max(axis=1)\n",
                                 "amax = np.full(w.shape[0], np.abs(w).max())\n")],
    # The lab's starter lines kept beside the learner's (right) code: the zeros stored after the fragment is built,
    # the scales of ones set after the right ones. Each still runs, and its failure names the line to delete.
    "starter-line-kept-in-the-a-fragment": [("  // LAB: a[0] = a[1] = a[2] = a[3] = 0;",
                                             f"  a[0] = a[1] = a[2] = a[3] = 0;  // {STARTER_MARK}")],
    "starter-line-kept-in-quantize": [("    # LAB: scale = np.ones(w.shape[0], np.float32)",
                                       f"    scale = np.ones(w.shape[0], np.float32)  # {STARTER_MARK}")],
}
# What each mistake's failure says on every machine: the quantization's check, or the probe of the fragment
SAYS = {"one-scale-for-every-row": r"quantize: the scale of row \d+",
        "a-fragment-k-pair-repeated": r"a_fragment \(rows: h",
        "b-fragment-first-box-only": r"b_address, P = 8 tokens",
        "b-fragment-unswizzled": r"b_address, P = 8 tokens",
        "starter-line-kept-in-the-a-fragment": r"a_fragment \(rows: h.*starter line is still there beside your code "
                                               r"\(lab\.cu line \d+: a\[0\] = a\[1\] = a\[2\] = a\[3\] = 0;\)",
        "starter-line-kept-in-quantize": r"starter line is still there beside your code \(quantize line \d+: "
                                         r"scale = np\.ones\(w\.shape\[0\], np\.float32\)\).*quantize: the scale"}


def _says(rep, bug) -> bool:
    return any(re.search(SAYS[bug], f"{o.name}: {o.message}", re.S) for o in rep.failed)


def planted(tmp: Path, bug: str | None) -> Path:
    return notebook.planted(SOLUTION_PATH, BUGS[bug] if bug else (), to=tmp / f"10-{bug or 'solution'}.ipynb")


def _numbers_failed(rep) -> bool:
    return any(o.name.startswith(("gemv_fp8", "quantize")) or "CheckFailed" in f"{o.message}" for o in rep.failed)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """{bug or None: Report}: the solution and the planted variants, graded once, side by side (each grading runs its
    checks in child processes)."""
    import feedbeast as fb
    from feedbeast.course import grade
    tmp = tmp_path_factory.mktemp("lab10")
    wanted = [None, *BUGS]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(5, os.cpu_count() or 1))) as pool:
        futures = {bug: pool.submit(grade.grade, planted(tmp, bug), timeout=600) for bug in wanted}
        return {bug: f.result() for bug, f in futures.items()}


@pytest.mark.parametrize("bug", list(BUGS))
def test_lab_bug_replacements_match_the_solution_once(tmp_path, bug):
    planted(tmp_path, bug)


def test_solution_fails_nothing(graded):
    # ok on a Hopper GPU; elsewhere partial, the launches skipped by name and nothing failed.
    rep = graded[None]
    assert not rep.failed and rep.status in ("ok", "partial"), str(rep)
    assert any(o.name.startswith("quantize") for o in rep.passed), str(rep)


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_bug_fails_without_a_gpu(graded, bug):
    import feedbeast as fb
    if fb.needs("sm_90a") is None:
        pytest.skip("this machine launches lab 10's kernel: test_gpu_lab_bug_fails_grading grades the bug here")
    rep = graded[bug]
    assert rep.status == "failed" and rep.failed, str(rep)
    assert _says(rep, bug), str(rep)
    # each check cell stands alone: a wrong quantize or fragment hides no SASS verdict (the zeros of a starter line
    # kept in a_fragment leave no fp8 conversion in the SASS: that verdict fails too)
    assert any(o.name.startswith("SASS of kernel gemv_fp8") for o in [*rep.passed, *rep.failed]), str(rep)


def test_gpu_solution_runs_the_kernel_checks(gpu90, graded):
    rep = graded[None]
    assert rep.status == "ok" and any(o.name.startswith("gemv_fp8") for o in rep.passed), str(rep)


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_gpu_lab_bug_fails_grading(gpu90, graded, bug):
    rep = graded[bug]
    assert rep.failed and _numbers_failed(rep), f"{bug}: not rejected on the numbers:\n{rep}"
    assert _says(rep, bug), str(rep)     # the probes run on the GPU too (the A probe on the host): the same words


def test_the_kernel_checks_use_their_own_quantization():
    # The lab's quantize starts as zeros; kernel checks fed by it would compare a zero product with a zero reference
    # and pass any kernel. They quantize for themselves, bit for bit as the solution's quantize does.
    import ast
    import json

    import numpy as np

    from feedbeast.course import lab_refs

    cells = {c.get("id"): "".join(c["source"]) for c in json.loads(SOLUTION_PATH.read_text())["cells"]}
    check = ast.parse(cells["1f1cd9ec"])
    fns = {f.name: f for f in check.body if isinstance(f, ast.FunctionDef)}
    called = {ast.unparse(n.func) for n in ast.walk(fns["check_fp8"]) if isinstance(n, ast.Call)}
    assert "lab_refs.quantize_e4m3_rows" in called and "quantize" not in called, called
    # the reference is not printed in the lab: no cell of it writes the quantization out
    assert not any("np.where(amax > 0" in src or "astype(ml_dtypes.float8_e4m3fn).view(np.uint8)" in src
                   for src in ("".join(c["source"]) for c in json.loads(LAB_PATH.read_text())["cells"]
                               if c["cell_type"] == "code"))
    helpers = ast.parse(cells["d9aa756f"])
    ns = {"np": np, "E4M3_MAX": 448.0}
    exec(compile(ast.Module([fn for fn in helpers.body if getattr(fn, "name", "") == "quantize"], []), "quantize",
                 "exec"), ns)
    ns["__builtins__"] = __builtins__
    rng = np.random.default_rng(3)
    for n, k in ((1000, 144), (37, 300), (8, 16)):
        w = rng.standard_normal((n, k)) * rng.uniform(0.1, 4, (n, 1))
        w[0] = 0
        (a8, a_s), (b8, b_s) = ns["quantize"](w), lab_refs.quantize_e4m3_rows(w)
        assert np.array_equal(a8, b8) and np.array_equal(a_s, b_s) and a8.any()


def test_a_conversion_of_ones_own_skips_the_a_probe_by_name(tmp_path):
    """The A probe builds fb::decode::e4m3x2_to_f16x2 as its bits and runs on the host. A learner who writes the cvt
    in asm of their own is right, and the host cannot run it: the probe is skipped, named, never failed (on a GPU
    the kernel's checks grade that fragment)."""
    from feedbeast.course import grade
    own = [("a[0] = fb::decode::e4m3x2_to_f16x2(r[2 * h] & 0xffff);",
            'asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(a[0]) : "h"((unsigned short)(r[2 * h] & 0xffff)));')]
    rep = grade.grade(notebook.planted(SOLUTION_PATH, own, to=tmp_path / "10-own-cvt.ipynb"), timeout=600)
    assert not rep.failed and rep.status in ("ok", "partial"), str(rep)
    assert any(o.name == "a_fragment_probe" and "cvt.rn.f16x2.e4m3x2" in o.message for o in rep.skipped), str(rep)
    assert any(o.name.startswith("b_address, P = 64") for o in rep.passed), str(rep)


def test_a_kernel_cell_that_tests_the_probes_switch_is_not_compiled(tmp_path):
    """The A probe's build sets FB_E4M3_AS_BITS; a cell that tests it could hand the probe the right bits and the
    kernel others. Like every FB_ switch of the toolkit, the grader refuses it, naming it."""
    from feedbeast.course import grade
    cheat = [("  a[0] = fb::decode::e4m3x2_to_f16x2(r[2 * h] & 0xffff);",
              "#ifndef FB_E4M3_AS_BITS\n  a[0] = 0;\n#endif\n  a[0] = fb::decode::e4m3x2_to_f16x2(r[2 * h] & 0xffff);")]
    rep = grade.grade(notebook.planted(SOLUTION_PATH, cheat, to=tmp_path / "10-switch.ipynb"), timeout=600)
    assert rep.status == "failed", str(rep)
    assert any("FB_E4M3_AS_BITS" in o.message and "build switches" in o.message for o in rep.failed), str(rep)
