"""The grader rejects wrong kernels: bugs planted into the lab 00 solution must fail grading.

Without a GPU the grader can only catch what compiles or shows in SASS (a compile error, the wrong
vector width); a bug that only a launch reveals (an off-by-one bound, a missing tail loop) must then
be reported as skipped, never as passed. With a GPU it must fail.
"""
import shutil
from pathlib import Path

import nbformat
import pytest

from feedbeast import grade as g

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions/00-copy-kernel.ipynb"
LAB = ROOT / "labs/00-copy-kernel.ipynb"
TAIL = "  for (long long i = 4 * n4 + tid; i < n; i += stride) dst[i] = src[i];\n"

# name -> list of (old, new) replacements in the %%cuda cell of the solution.
BUGS = {
    "off-by-one": [("i < n; i += stride) dst[i]", "i < n - 1; i += stride) dst[i]")],
    "missing-tail": [(TAIL, "")],
    "vector-width": [("float4", "float2"), ("n / 4", "n / 2"), ("4 * n4", "2 * n4")],
    "compile-error": [("d4[i] = a;", "d4[i] = a_typo;")],
}
CPU_VISIBLE = ["vector-width", "compile-error"]
GPU_ONLY = ["off-by-one", "missing-tail"]


def planted(tmp: Path, bug: str | None) -> Path:
    nb = nbformat.read(SOLUTION, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("%%cuda"))
    for old, new in BUGS.get(bug, []):
        assert old in cell.source, f"the solution changed: {old!r} not found; update BUGS"
        cell.source = cell.source.replace(old, new)
    path = tmp / f"00-{bug or 'solution'}.ipynb"
    nbformat.write(nb, path)
    return path


_cache: dict = {}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade each variant once, on first use (so `-k` selections grade only what they need)."""
    tmp = tmp_path_factory.mktemp("grade")

    def get(bug):
        if bug not in _cache:
            path = LAB if bug == "lab" else planted(tmp, bug)
            _cache[bug] = g.grade(path, timeout=300)
        return _cache[bug]
    return get


def test_untouched_solution_passes_grading(graded):
    rep = graded(None)
    assert rep.ok, str(rep)
    assert any(o.name == "SASS" for o in rep.passed), str(rep)
    from feedbeast import gpu
    if gpu() is None:
        assert any(o.name == "launch copy_x2" for o in rep.skipped), str(rep)


@pytest.mark.parametrize("bug", CPU_VISIBLE)
def test_grading_fails_on_a_bug_visible_without_a_gpu(graded, bug):
    rep = graded(bug)
    assert not rep.ok and rep.failed, str(rep)


def test_vector_width_bug_names_the_missing_instruction(graded):
    msg = "\n".join(o.message for o in graded("vector-width").failed)
    assert "SassMismatch" in msg and "LDG.E.128" in msg


def test_compile_error_is_reported_as_a_failure(graded):
    rep = graded("compile-error")
    assert any("CompileError" in o.message and "a_typo" in o.message for o in rep.failed), str(rep)


@pytest.mark.parametrize("bug", GPU_ONLY)
def test_grading_fails_on_a_launch_bug_on_gpu(graded, bug, anygpu):
    rep = graded(bug)
    assert not rep.ok, str(rep)
    assert any("copy_x2 n=" in o.name or "CheckFailed" in o.message for o in rep.failed), str(rep)


@pytest.mark.parametrize("bug", GPU_ONLY)
def test_launch_bug_without_a_gpu_is_skipped_not_passed(graded, bug):
    from feedbeast import gpu
    if gpu() is not None:
        pytest.skip("a GPU is here: test_grading_fails_on_a_launch_bug_on_gpu covers this bug")
    rep = graded(bug)
    assert not rep.failed, str(rep)
    assert not any(o.name.startswith("copy_x2") for o in rep.passed), "a correctness check cannot pass with no launch"
    assert any(o.name == "launch copy_x2" for o in rep.skipped), str(rep)


def test_the_unfilled_lab_fails_grading(graded):
    rep = graded("lab")
    assert not rep.ok and rep.failed, str(rep)


# ---- the parser alone (no kernel) ------------------------------------------------------------------

def test_parse_text_reads_every_kind_of_check_line():
    text = ("compiled for sm_90a: k (10 regs)\n"
            "copy n=3: passed: relative error 0.00e+00 (limit 1e-05)\n"
            "copy n=5: FAILED: relative error inf (limit 1e-05)\n"
            "SASS: {'LDG.E.128': 2}\n"
            "model: ok, 94608 states explored\n"
            "SASS: ok {'UBLKCP': 1}\n"
            "skipped: launch k: needs sm_90a, this machine has none\n"
            "skipped: needs a GPU, this machine has none\n")
    got = [(o.status, o.name) for o in g.parse_text(text)]
    assert got == [("passed", "copy n=3"), ("failed", "copy n=5"), ("passed", "SASS"),
                   ("passed", "model"), ("passed", "SASS"), ("skipped", "launch k"), ("skipped", "(unnamed step)")]


def test_a_notebook_with_no_check_is_not_ok():
    assert not g.Report("x.ipynb", []).ok


def test_cli_expands_quoted_globs(tmp_path):
    shutil.copy(SOLUTION, tmp_path / "00-a.ipynb")
    assert g.expand([str(tmp_path / "00-*.ipynb")]) == [tmp_path / "00-a.ipynb"]
    with pytest.raises(SystemExit):
        g.expand([str(tmp_path / "99-*.ipynb")])
