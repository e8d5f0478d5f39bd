"""The grader runs the lab's own checks against the learner's kernels and reads structured verdicts.

- Printed text is never a verdict: a notebook whose check cells print a pass is graded on the solution's
  check cells, so an unfilled kernel still fails (exit 1) and a solved one gets what it earns.
- Exit status 0 ok / 1 failed / 2 partial: without a GPU an untouched solution is partial, never ok.
- A failure's whole reason reaches the report (multi-line SASS messages, a %%cuda flag error).
- One missing notebook in a batch is reported and the others are graded.

Bugs planted into the lab 00 solution: without a GPU the grader can only catch what compiles or shows in
SASS; a bug that only a launch reveals must then be reported as skipped, never as passed. With a GPU it
must fail. Each variant is graded once per session (each grading is a kernel start, a few seconds).
"""
import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import on_first_use

from feedbeast.course import grade as g
from feedbeast.course.notebook import code, markdown, new, read
from feedbeast.course.notebook import planted as plant

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions/00-copy-kernel.ipynb"
LAB = ROOT / "labs/00-copy-kernel.ipynb"
LAB03 = ROOT / "labs/03-cp-async-rowsum.ipynb"
TAIL = "  for (long long i = 4 * n4 + tid; i < n; i += stride) dst[i] = src[i];\n"
FAKE = 'print("ring3_rowsum rows=37: passed: relative error 0.00e+00 (limit 1e-05)")\nprint("SASS: ok {}")'

# name -> list of (old, new) replacements in the %%cuda cell of the solution.
BUGS = {
    "off-by-one": [("i < n; i += stride) dst[i]", "i < n - 1; i += stride) dst[i]")],
    "missing-tail": [(TAIL, "")],
    "vector-width": [("float4", "float2"), ("n / 4", "n / 2"), ("4 * n4", "2 * n4")],
    "compile-error": [("d4[i] = a;", "d4[i] = a_typo;")],
    "flag-error": [("%%cuda --name lab", "%%cuda --name lab --archh sm_90a")],
    # one float4 too many: its in-bounds part is what the tail writes anyway, its last bytes land past the end of
    # dst (caught by the poisoned guard fb.empty puts after the array)
    "loop-bound-inclusive": [("for (long long i = tid; i < n4; i += 2 * stride)",
                              "for (long long i = tid; i <= n4; i += 2 * stride)")],
}
CPU_VISIBLE = ["vector-width", "compile-error", "flag-error"]
GPU_ONLY = ["off-by-one", "missing-tail", "loop-bound-inclusive"]


def _has_gpu():
    return g._has_gpu()


def planted(tmp: Path, bug: str | None, kernelspec: str | None = None) -> Path:
    return plant(SOLUTION, BUGS.get(bug, []), once=False, cuda_only=True, kernelspec=kernelspec,
                 to=tmp / f"00-{bug or 'solution'}.ipynb")


def fake_checks(src: Path, dst: Path) -> Path:
    """The notebook with its check cells replaced by one that prints passes."""
    def fake(nb):
        start = next(i for i, c in enumerate(nb.cells) if g._is_check(g._heading(c)))
        end = next(i for i, c in enumerate(nb.cells) if i > start and g._heading(c) and not g._is_check(g._heading(c)))
        nb.cells = nb.cells[:start + 1] + [code(FAKE)] + nb.cells[end:]
    return plant(src, edit=fake, to=dst)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade each variant once, on first use (so `-k` selections grade only what they need)."""
    tmp = tmp_path_factory.mktemp("grade")

    def grade(bug):
        if bug == "lab":
            path = LAB
        elif bug == "untouched":
            path = planted(tmp, None, kernelspec="feedbeast")   # a kernelspec this machine may lack
        elif bug == "print-lab03":
            path = fake_checks(LAB03, tmp / "03-printed.ipynb")
        elif bug == "print-solution":
            path = fake_checks(SOLUTION, tmp / "00-printed.ipynb")
        else:
            path = planted(tmp, bug)
        return g.grade(path, timeout=300)
    return on_first_use(grade)


# ---- exit status ------------------------------------------------------------------------------------------

def test_untouched_solution_is_partial_without_a_gpu_and_ok_with_one(graded):
    rep = graded("untouched")
    assert not rep.failed, str(rep)
    assert any(o.name.startswith("SASS of kernel copy_x2") for o in rep.passed), str(rep)
    if _has_gpu():
        assert rep.status == "ok" and rep.exit_code == 0, str(rep)
        assert any(o.name.startswith("copy_x2 n=") for o in rep.passed), str(rep)
    else:
        # compiled and SASS-checked, correctness not run: never ok
        assert rep.status == "partial" and rep.exit_code == 2 and not rep.ok, str(rep)
        assert any(o.name == "launch copy_x2" for o in rep.skipped), str(rep)
        assert not any(o.name.startswith("copy_x2") for o in rep.passed), str(rep)


def test_printed_passes_are_not_verdicts(graded):
    """The issue's notebook: lab 03 as given, its check cells replaced by a printed pass -> exit 1."""
    rep = graded("print-lab03")
    assert rep.status == "failed" and rep.exit_code == 1, str(rep)
    assert not any("rows=37" in o.name for o in rep.outcomes), str(rep)
    assert any("LDGSTS" in o.message for o in rep.failed), str(rep)   # the lab's own SASS check ran


def test_a_solved_kernel_with_printed_checks_gets_only_what_the_real_checks_give(graded):
    rep, real = graded("print-solution"), graded("untouched")
    assert rep.status == real.status and rep.exit_code == real.exit_code, f"{rep}\n---\n{real}"
    assert sorted((o.status, o.name) for o in rep.outcomes) == sorted((o.status, o.name) for o in real.outcomes)
    assert not any(o.name in ("ring3_rowsum rows=37", "SASS") for o in rep.passed), str(rep)


def test_the_unfilled_lab_fails_grading(graded):
    rep = graded("lab")
    assert rep.status == "failed" and rep.failed, str(rep)


# ---- planted bugs -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bug", CPU_VISIBLE)
def test_grading_fails_on_a_bug_visible_without_a_gpu(graded, bug):
    rep = graded(bug)
    assert rep.status == "failed" and rep.exit_code == 1 and rep.failed, str(rep)


def test_vector_width_bug_names_the_missing_instruction_in_full(graded):
    msg = "\n".join(o.message for o in graded("vector-width").failed)
    assert "LDG.E.128" in msg and "most frequent instructions" in msg, msg   # all lines of the reason


def test_compile_error_is_reported_as_a_failure(graded):
    rep = graded("compile-error")
    assert any("CompileError" in o.message and "a_typo" in o.message for o in rep.failed), str(rep)
    # once: the kernels the cell declares are not then reported again as definitions the notebook lacks
    assert [o.name for o in rep.failed] == ["your %%cuda --name lab cell"], str(rep)


def test_the_kernels_a_cell_declares_are_read_from_its_text():
    src = ('extern "C" __global__ void copy_x2(const float* a) {}\n'
           'extern "C" __global__ void __launch_bounds__(128, 2) ring(int n) {}\n'
           'extern "C" __global__ __launch_bounds__(256) void tail (int n) {}\n__device__ void helper() {}\n')
    assert g.KERNEL_DECL.findall(src) == ["copy_x2", "ring", "tail"]


def test_a_cuda_flag_error_names_the_flag(graded):
    rep = graded("flag-error")
    text = str(rep)
    assert "--archh" in text and "unrecognized arguments" in text, text


@pytest.mark.parametrize("bug", GPU_ONLY)
def test_grading_fails_on_a_launch_bug_on_gpu(graded, bug, anygpu):
    rep = graded(bug)
    assert rep.status == "failed", str(rep)
    assert any(o.name.startswith("copy_x2 n=") or "CheckFailed" in o.message for o in rep.failed), str(rep)


@pytest.mark.parametrize("bug", GPU_ONLY)
def test_launch_bug_without_a_gpu_is_skipped_not_passed(graded, bug):
    if _has_gpu():
        pytest.skip("a GPU is here: test_grading_fails_on_a_launch_bug_on_gpu covers this bug")
    rep = graded(bug)
    assert not rep.failed and rep.status == "partial", str(rep)
    assert not any(o.name.startswith("copy_x2") for o in rep.passed), "a correctness check cannot pass with no launch"
    assert any(o.name == "launch copy_x2" for o in rep.skipped), str(rep)


# ---- batches, JSON, hazards (a tiny lab with its own solutions folder: no compile) -----------------------

def _tiny(tmp: Path, check_cells: list[str], learner: str = "x = 41") -> tuple[Path, Path]:
    sols, labs = tmp / "solutions", tmp / "labs"
    sols.mkdir(exist_ok=True)
    labs.mkdir(exist_ok=True)
    md = markdown
    new([md("# Lab 05 · tiny"), "import os", "# BEGIN SOLUTION\nx = 42\n# END SOLUTION", md("## Check"), *check_cells,
         md("## Measure"),
         "raise RuntimeError('Measure is not graded')"], to=sols / "05-tiny.ipynb")
    new([md("# Lab 05 · tiny"), learner, md("## Check"), 'print("x: passed")'],
        to=labs / "05-renamed.ipynb")     # matched by its 05- prefix
    return sols, labs / "05-renamed.ipynb"


TINY_CHECKS = [
    "import os\nfrom feedbeast.course import verdicts\n"
    "verdicts.passed('hazard build', os.environ.get('FEEDBEAST_HAZARDS', 'off'))\n"
    "assert x == 42, f'x is {x}, expected 42\\n(second line of the reason)'",
    "class HazardFound(Exception):\n    pass\n"
    "if os.environ.get('FEEDBEAST_HAZARDS') == '1':\n"
    "    raise HazardFound('release-before-wgmma-retired: block 0 thread 128 stage 1 phase 0')",
]


def test_an_assert_in_a_check_cell_holds_under_pythonoptimize(tmp_path, monkeypatch):
    """PYTHONOPTIMIZE (or -O) in the grader's environment would compile a check cell's assert away: x = 41 passed."""
    sols, lab = _tiny(tmp_path, TINY_CHECKS[:1], learner="x = 41")
    monkeypatch.setenv("PYTHONOPTIMIZE", "1")
    rep = g.grade(lab, solutions=sols, hazards=False, timeout=60)
    assert rep.status == "failed" and "x is 41, expected 42" in str(rep), str(rep)


def test_batch_json_reports_a_missing_notebook_and_grades_the_others(tmp_path, capsys):
    sols, lab = _tiny(tmp_path, TINY_CHECKS[:1], learner="x = 42")
    code = g.main(["--json", "--learner", "ada", "--solutions", str(sols), "--hazards", "off",
                   str(tmp_path / "labs/04-missing.ipynb"), str(lab)])
    doc = json.loads(capsys.readouterr().out)
    assert code == 3 and doc["exit"] == 3 and doc["learner"] == "ada"     # a notebook named that is not there
    missing, tiny = doc["labs"]
    assert missing["status"] == "failed" and missing["exit"] == 3 and "cannot read" in missing["checks"][0]["message"]
    assert tiny["status"] == "ok" and tiny["exit"] == 0, tiny
    assert [(c["status"], c["name"], c["message"]) for c in tiny["checks"]] == [("passed", "hazard build", "off")]


SQUARES = ["from feedbeast.course import verdicts\n"
           "for k in range(4):\n"
           "    v = f(k)\n"
           "    (verdicts.passed if v == k * k else verdicts.failed)(f'f({k})', repr(v))",
           "from feedbeast.course import verdicts\n"
           "(verdicts.passed if g() == 1 else verdicts.failed)('g', 'g() is 1')"]


@pytest.mark.parametrize("crash, cut_score", [
    ("def f(k):\n    raise RuntimeError('no checks here')", 50.0),
    ("def f(k):\n    if k:\n        raise RuntimeError('after one pass')\n    return 0", 50.0),
    ("def f(k):\n    while True:\n        pass", 0.0)], ids=["raises", "raises-after-a-pass", "hangs"])
def test_a_check_cell_cut_short_never_scores_above_the_honest_wrong_answer(tmp_path, crash, cut_score):
    """The roster's score of a failed lab: a notebook that stops a check cell early (an exception, or a hang the
    grader ends, after which no cell runs) has that cell score 0, so it cannot rank above the same notebook
    answering honestly and wrongly, which the score over all checks that ran (a cell's unrun checks counted
    nowhere) allowed: there the notebook that raised at once scored 50 and the honest one 40."""
    from feedbeast.course import roster
    honest = "def f(k):\n    return 0\n\ndef g():\n    return 1"    # f right at k = 0 only
    graded = {}
    for who, learner in (("honest", honest), ("cut", crash + "\n\ndef g():\n    return 1")):
        (tmp_path / who).mkdir()
        sols, lab = _tiny(tmp_path / who, SQUARES, learner=learner)
        rep = g.grade(lab, solutions=sols, hazards=False, timeout=20)
        graded[who] = rep.to_dict()
        assert rep.status == "failed" and len(rep.cells) == 2, str(rep)
    h, c = graded["honest"], graded["cut"]
    assert [x["cut"] for x in h["cells"]] == [False, False] and h["cells"][0]["failed"] == 3, h["cells"]
    assert c["cells"][0]["cut"], c["cells"]
    assert roster.score(h) == 62.5 and roster.score(c) == cut_score < roster.score(h), (roster.score(c), c["cells"])
    without_cells = {who: {k: v for k, v in d.items() if k != "cells"} for who, d in graded.items()}
    if crash.endswith("'no checks here')"):     # an older report, without cells, scores as the older roster did
        assert (roster.score(without_cells["honest"]), roster.score(without_cells["cut"])) == (40.0, 50.0)
    assert roster.score({**h, "untrusted": True}) == 0.0    # the integrity check or the channel caught the notebook
    # tiny's learner notebook has a check cell of its own: the grade says it ran the lab's instead
    assert h["notes"][0] == c["notes"][0] and h["notes"][0].startswith("this notebook's check cells are not the lab's")


def test_a_skip_the_notebook_makes_is_a_failed_check_and_a_check_s_own_failure_keeps_its_cell_s_share(tmp_path):
    """fb.check hands on a Skipped it is given (a launch that could not run here): a learner's function that
    returned fb.Skipped(...) for the cases it got wrong turned those checks into skips, and a failed lab into a
    partial one scoring 100. Only the toolkit says a check cannot run. A check cell's own assert that fails ends
    the cell as designed: its share stands (no line of the notebook in the traceback)."""
    from feedbeast.course import roster
    check = ["import numpy as np\nimport feedbeast as fb\nfor k in range(3):\n"
             "    fb.check(f(k), np.full(3, float(k * k)), name=f'f({k})', raise_on_fail=False)",
             "assert g() == 1, 'g() is not 1'"]
    made = {"skips": "class Mine(fb.Skipped):\n    pass\n\ndef f(k):\n    return np.full(3, 0.0) if k == 0 else "
                     "(fb.Skipped('not on this machine') if k == 1 else Mine('nor here'))",
            "honest": "def f(k):\n    return np.full(3, 0.0)"}
    reps = {}
    for who, src in made.items():
        (tmp_path / who).mkdir()
        sols, lab = _tiny(tmp_path / who, check, learner=f"import numpy as np\nimport feedbeast as fb\n{src}\n\n"
                                                           "def g():\n    return 2")
        reps[who] = g.grade(lab, solutions=sols, hazards=False, timeout=60)
    r = reps["skips"]
    assert r.status == "failed" and not r.skipped and len(r.failed) == 3, str(r)
    assert sum("a Skipped made by the notebook's own code (not on this machine)" in o.message for o in r.failed) == 1
    assert sum("a Skipped made by the notebook's own code (nor here)" in o.message for o in r.failed) == 1
    h = reps["honest"].to_dict()
    assert [c["cut"] for c in h["cells"]] == [False, False] and h["cells"][1]["failed"] == 1, h["cells"]
    assert roster.score(h) == round(100 * (1 / 3) / 2, 1) == roster.score(r.to_dict()), h["cells"]


def test_a_notebook_whose_code_is_the_solution_s_is_said_to_be_and_a_failed_grade_names_the_file_s_save(tmp_path):
    """The solutions sit beside the labs: a notebook whose own code is the solution's (comments and the solution's
    markers aside) keeps its grade, with a note that the roster's CSV carries; the solution graded itself has no
    such note. A failed grade says when the file it read was saved (a fix made in the browser may not be)."""
    import csv
    from feedbeast.course import roster
    sols, lab = _tiny(tmp_path, TINY_CHECKS[:1], learner="x = 41")
    copy = new([markdown("# Lab 05 · tiny"), "import os", "# my answer\nx = 42", markdown("## Check"), "pass"],
               to=tmp_path / "labs/05-copy.ipynb")
    reps = {p.stem: g.grade(p, solutions=sols, hazards=False, timeout=60) for p in (copy, lab, sols / "05-tiny.ipynb")}
    said = "this notebook's own code is"
    assert reps["05-copy"].copied and reps["05-copy"].status == "ok", str(reps["05-copy"])
    assert any(n.startswith(said) and n.endswith("05-tiny.ipynb's, line for line") for n in reps["05-copy"].notes)
    assert not reps["05-tiny"].copied and not any(said in n for n in reps["05-tiny"].notes), str(reps["05-tiny"])
    wrong = reps["05-renamed"]
    assert wrong.status == "failed" and not wrong.copied, str(wrong)
    assert any(re.fullmatch(r"graded 05-renamed\.ipynb as saved at \d\d:\d\d:\d\d: changed since\? save it "
                            r"\(File > Save\), then grade again", n) for n in wrong.notes), wrong.notes
    assert not any("as saved at" in n for n in reps["05-copy"].notes)       # only where the grade failed
    out = tmp_path / "r.csv"
    roster.write_csv([{"learner": "bob", "labs": [reps["05-copy"].to_dict()]},
                      {"learner": "ann", "labs": [wrong.to_dict()]}], out)
    rows = {r["username"]: r for r in csv.DictReader(out.open())}
    assert rows["bob"]["first failing check"] == "lab 05: the solution's code, line for line", rows
    assert "solution's code" not in rows["ann"]["first failing check"], rows


def test_a_near_copy_of_the_solution_is_said_to_be_with_the_lines_it_differs_in():
    """A copy with a line added or respaced is still named (the lines apart, at most a tenth of the part the lab
    asks for); the lab as given is not a copy; a part of few lines (lab 10's) is said to be copied only whole, since
    two people may write it alike."""
    import copy
    from feedbeast.course import roster
    for lab, big in (("03-cp-async-rowsum", True), ("07-persistent-gemm", True), ("10-fp8-gemv", False)):
        sol = g.learner_part(read(ROOT / f"solutions/{lab}.ipynb"))
        assert g._lines_apart(sol, sol) == 0, lab
        assert g._lines_apart(g.learner_part(read(ROOT / f"labs/{lab}.ipynb")), sol) is None, lab
        near = copy.deepcopy(sol)
        cell = next(c for c in near if c.cell_type == "code" and "BEGIN SOLUTION" in c.source)
        lines = cell.source.splitlines()
        at = next(i for i, x in enumerate(lines) if "BEGIN SOLUTION" in x) + 1
        lines.insert(at, "  int unused_ = 0;" if cell.source.startswith("%%cuda") else "    unused_ = 0")
        lines[at + 1] = "  ".join(lines[at + 1].split(" "))        # spaces inside a line are not a change
        cell.source = "\n".join(lines)
        assert g._lines_apart(near, sol) == (1 if big else None), lab
    assert g.copied_words(1) == "but for 1 line" and g.copied_words(0) == "line for line"
    assert "lab 03: the solution's code, but for 2 lines" in roster_note(roster, 2)


def roster_note(roster, apart):
    import io
    import contextlib
    import csv
    import tempfile
    with tempfile.TemporaryDirectory() as d, contextlib.redirect_stdout(io.StringIO()):
        out = Path(d) / "r.csv"
        roster.write_csv([{"learner": "bob", "labs": [{"lab": "03", "status": "ok", "copied": True,
                                                        "copied_apart": apart, "checks": [], "cells": []}]}], out)
        return next(csv.DictReader(out.open()))["first failing check"]


def test_a_lab_as_given_scores_0_though_a_check_passes_on_it(tmp_path):
    """Lab 06 as given passed two of its check cell's three checks (the register split and the resources an empty
    kernel meets) and scored 66.7 in the roster. A notebook whose code is the lab's as given scores 0; one line of
    the learner's own makes it theirs, scored by its cells again."""
    from feedbeast.course import roster
    given = g.grade(ROOT / "labs/06-warp-specialized-gemm.ipynb", timeout=300)
    doc = given.to_dict()
    assert given.status == "failed" and given.untouched and doc["untouched"], str(given)
    assert given.passed and roster.score(doc) == 0.0, (str(given), doc["cells"])
    assert "note     nothing of yours is written yet: the checks that passed pass on the lab as given" in str(given)
    assert roster.score({**doc, "untouched": False}) > 0      # what the cells alone gave it
    def write_one_line(nb):      # a line of code under the first TODO line: that part is the learner's now
        c = next(c for c in nb.cells if c.cell_type == "code" and "TODO" in c.source)
        lines = c.source.splitlines()
        at = next(i for i, x in enumerate(lines) if "TODO" in x)
        c.source = "\n".join(lines[:at + 1] + ["int mine = 1;" if c.source.startswith("%%cuda") else "mine = 1"]
                             + lines[at + 1:])
    mine = plant(ROOT / "labs/06-warp-specialized-gemm.ipynb", edit=write_one_line,
                 to=tmp_path / "06-warp-specialized-gemm.ipynb")
    one_line = g.grade(mine, timeout=300, solutions=ROOT / "solutions").to_dict()
    assert not one_line["untouched"] and roster.score(one_line) > 0, one_line["cells"]   # its cells alone
    # the roster grades the lab as given once and counts only the passes beyond it: the one line earns nothing
    baseline = roster.given_baseline(["06"], ROOT / "solutions", 300, "auto")   # as g.grade: hazards where a GPU is
    passed_as_given = [sorted({c["name"] for c in doc["checks"] if c["cell"] == i and c["status"] == "passed"})
                       for i in range(len(doc["cells"]))]
    assert baseline == {"06": passed_as_given} and any(baseline["06"]), (baseline, passed_as_given)
    docs = [{"learner": "ann", "labs": [one_line]}]
    assert roster.with_baseline(docs, lambda labs: baseline if labs == ["06"] else {}) == []
    assert one_line["given_passed"] == baseline["06"] and roster.score(one_line) == 0.0, one_line
    # nothing written: a cell added, a line added to a cell the grade takes from the lab, or a TODO line deleted
    sol = g.learner_part(read(ROOT / "solutions/06-warp-specialized-gemm.ipynb"))
    lab = g.learner_part(read(ROOT / "labs/06-warp-specialized-gemm.ipynb"))
    given = next(i for i, c in enumerate(lab) if c.cell_type == "code" and "TODO" not in c.source)
    todo = next(i for i, c in enumerate(lab) if c.cell_type == "code" and "TODO" in c.source)
    edits = [lab + [code("")], [code(c.source + "\nprint('mine')") if i == given else c for i, c in enumerate(lab)],
             [code("\n".join(x for x in c.source.splitlines() if "TODO" not in x)) if i == todo else c
              for i, c in enumerate(lab)]]
    assert all(g._as_given(cells, sol) for cells in edits)
    assert not g._as_given(sol, sol)


def test_hazards_env_and_hazardfound_is_a_failed_check_naming_the_rule(tmp_path):
    sols, lab = _tiny(tmp_path, TINY_CHECKS, learner="x = 7")
    rep = g.grade(lab, solutions=sols, hazards=True, timeout=60)
    assert rep.status == "failed", str(rep)
    assert ("passed", "hazard build", "1") in [(o.status, o.name, o.message) for o in rep.outcomes], str(rep)
    text = str(rep)
    assert "HazardFound: release-before-wgmma-retired" in text and "notebook broke" not in text.split("HazardFound")[1]
    assert "x is 7, expected 42" in text and "(second line of the reason)" in text, text
    assert "Measure is not graded" not in text and "x: passed" not in text


# ---- the contract alone (no kernel) -------------------------------------------------------------------------

def test_sections_follow_the_headings():
    md = markdown
    nb = new([md("# Lab"), code("a"), md("## Your kernel"), code("b"), md("## Check: correctness"), code("c"),
              md("### detail"), code("d"), md("## Check: the machine code"), code("e"), md("## Measure"), code("f")])
    assert [c.source for c in g.learner_part(nb) if c.cell_type == "code"] == ["a", "b"]
    assert [c.source for c in g.check_part(nb)] == ["c", "d", "e"]
    nb.cells = [c for c in nb.cells if not c.source.startswith("## Check")]
    assert [c.source for c in g.learner_part(nb) if c.cell_type == "code"] == ["a", "b", "c", "d", "e"]


def test_every_shipped_solution_has_check_cells_and_matches_its_lab():
    for sol in sorted((ROOT / "solutions").glob("*.ipynb")):
        assert g.check_part(read(sol)), f"{sol.name}: no code cell under '## Check'"
        assert g.find_solution(ROOT / "labs" / sol.name) == ROOT / "solutions" / sol.name
        # the name Colab's "Save a copy in Drive" gives a lab opened from GitHub
        assert g.find_solution(Path("/content/drive/MyDrive") / f"Copy of {sol.name}") == ROOT / "solutions" / sol.name


def test_a_notebook_with_no_check_is_not_ok():
    assert g.Report("x.ipynb", []).status == "failed"
    assert g.Report("x.ipynb", [g.Outcome("skipped", "launch k", "needs sm_90a")]).exit_code == 2
    assert g.worst([0, 2, 0]) == 2 and g.worst([2, 1]) == 1 and g.worst([0]) == 0


def test_a_wrong_command_line_exits_3_never_partial_s_2(capsys):
    """argparse exits 2 on a wrong option, grade's PARTIAL, which make grade and a CI job let pass: a mistyped
    command or option grades nothing and exits 3."""
    from feedbeast.course.__main__ import main as cli
    for argv in (["grade", "--bogus", "04"], ["grade"], ["grde", "04"], []):
        try:
            code = cli(argv)
        except SystemExit as e:
            code = e.code
        assert code == 3, (argv, code)
    said = capsys.readouterr()
    assert "unrecognized arguments: --bogus" in said.err and "unknown command 'grde'" in said.out
    assert said.out.count("no command given: name one of those below (nothing ran)") == 1, said.out


def test_cli_expands_quoted_globs(tmp_path):
    shutil.copy(SOLUTION, tmp_path / "00-a.ipynb")
    assert g.expand([str(tmp_path / "00-*.ipynb")]) == [tmp_path / "00-a.ipynb"]
    assert g.expand([str(tmp_path / "99-*.ipynb")]) == [tmp_path / "99-*.ipynb"]   # graded as missing
    # a lab named as make grade LAB= names it, from the course's labs/
    root = Path(__file__).resolve().parents[1]
    lab03 = root / "labs/03-cp-async-rowsum.ipynb"
    assert g.expand(["03"], root) == g.expand(["3"], root) == g.expand(["cp-async-rowsum"], root) == [lab03]
    assert g.expand(["04-mbarrier-ring.ipynb"], root) == [root / "labs/04-mbarrier-ring.ipynb"]
    assert g.expand(["99"], root) == [Path("99")]                                   # graded as missing
    assert "no lab '99': the labs are 00-copy-kernel.ipynb" in g.grade(Path("99")).error


def test_on_a_workshop_hub_a_lab_named_by_its_number_is_the_learners_copy(tmp_path, monkeypatch):
    """The hub sets FEEDBEAST_COURSE to the shared course (whose solutions grade), and each learner works in a copy
    in their home: `grade 04` and `reset 04`, run anywhere in that copy, mean the copy's lab, never the shared one."""
    from feedbeast.course.__main__ import main as course_main
    shared, copy = tmp_path / "opt/course", tmp_path / "home/ada/feedbeast"
    for c in (shared, copy):
        for d in ("chapters", "solutions", "labs"):
            (c / d).mkdir(parents=True)
        shutil.copy(SOLUTION, c / "solutions" / SOLUTION.name)
        (c / "labs" / SOLUTION.name).write_text("{}")
    monkeypatch.setenv("FEEDBEAST_COURSE", str(shared))
    for here in (copy, copy / "labs"):
        monkeypatch.chdir(here)
        assert g.expand([SOLUTION.name[:2]]) == [(copy / "labs" / SOLUTION.name).resolve()]
        assert course_main(["reset", SOLUTION.name[:2]]) == 0
        assert (copy / "labs" / SOLUTION.name).read_text() != "{}"            # the copy's lab restored
        assert (shared / "labs" / SOLUTION.name).read_text() == "{}"          # the shared course untouched
        (copy / "labs" / SOLUTION.name).write_text("{}")
    monkeypatch.chdir(tmp_path)                                                 # outside any copy: the course's
    assert g.expand([SOLUTION.name[:2]]) == [(shared / "labs" / SOLUTION.name).resolve()]
    shutil.rmtree(copy / "labs")                     # a copy whose labs/ is gone: reset writes the lab there again
    monkeypatch.chdir(copy / "chapters")
    assert course_main(["reset", SOLUTION.name[:2]]) == 0 and (copy / "labs" / SOLUTION.name).is_file()


def test_a_lab_named_outside_any_checkout_says_where_labs_are_looked_up(tmp_path, monkeypatch, capsys):
    """Outside any checkout (a notebook copied out, the course installed from its wheel) `grade 04` names the
    missing checkout and what to do, not only the missing file. A hosted notebook's shell starts in the folder
    that holds the clone (Colab's /content): the one checkout one folder below is the course, as the notebooks'
    setup cell finds it; two there are named, to choose from."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FEEDBEAST_COURSE", raising=False)
    assert g.expand(["04"]) == [Path("04")]
    error = g.grade(Path("04")).error
    assert "no checkout of the course" in error and "--course DIR" in error and "or give the lab's path" in error
    # a notebook run there (copied out of the checkout) says once why it shows no GPU run's records
    from feedbeast.course import results
    monkeypatch.setattr(results, "_unfound_said", False)
    capsys.readouterr()
    assert results.course_results() is None and results.course_results() is None
    said = capsys.readouterr().out
    assert said.count("so the GPU runs it records in results/ are not read here") == 1, said
    assert "--course" not in said and "set os.environ['FEEDBEAST_COURSE'] to the clone's folder" in said, said
    monkeypatch.delenv("FEEDBEAST_RESULTS", raising=False)
    assert results.plot_recorded({1: "ch04/ring/stages=1"}) is None     # no record in reach: not "none recorded"
    assert "no recorded GPU runs were found (no course checkout in reach" in capsys.readouterr().out
    from feedbeast.course.coursedir import CourseNotFound, find
    clone = tmp_path / "feedbeast"
    for d in ("chapters", "solutions", "labs"):
        (clone / d).mkdir(parents=True)
    shutil.copy(SOLUTION, clone / "solutions")
    shutil.copy(SOLUTION, clone / "labs")
    assert g.expand([SOLUTION.name[:2]]) == [(clone / "labs" / SOLUTION.name).resolve()]
    assert results.course_results() == (clone / "results").resolve()
    with pytest.raises(CourseNotFound):   # a roster's search (no `below`): a folder below never poses as the course
        find()
    shutil.copytree(clone, tmp_path / "feedbeast-2")
    with pytest.raises(CourseNotFound, match="2 checkouts below it: feedbeast, feedbeast-2; say which with --course"):
        find(below=True)


# ---- SASS-visible rules: the proxy fence's place, not only its count -----------------------------------------

def test_a_proxy_fence_after_the_release_arrive_is_rejected_by_its_place():
    """Lab 04's consumers fence their reads before arriving on empty[s]; moved after the arrive the fence is
    still counted once, and the order rule rejects it. The solution as shipped passes the same rule."""
    import feedbeast as fb
    from feedbeast.course import notebook
    cell = notebook.load(ROOT / "solutions/04-mbarrier-ring.ipynb").cuda("lab")
    assert fb.sass.expect_proxy_fence(cell.compile("sm_90a"), "gemv_ring", "test") >= 1
    lines = cell.source.split("\n")
    i = next(k for k, ln in enumerate(lines) if "fence_proxy_async();" in ln)
    j = next(k for k in range(i + 1, len(lines)) if "arrive(" in lines[k])
    moved = "\n".join(lines[:i] + lines[i + 1:j + 1] + [lines[i]] + lines[j + 1:])
    mod = fb.compile(moved, "sm_90a", defines=cell.defines)
    assert fb.sass.proxy_fences(fb.sass.instructions(mod, "gemv_ring")["gemv_ring"]) >= 1   # the count alone passes
    with pytest.raises(fb.SassMismatch, match="in the wrong place: LDS.* then SYNCS.ARRIVE.TRANS64.A1T0"):
        fb.sass.expect_proxy_fence(mod, "gemv_ring", "test")


def test_a_cp_async_wait_that_leaves_too_many_groups_in_flight_is_rejected():
    """Lab 03 waits with cp.async.wait_group<STAGES - 2> (DEPBAR.LE SB0, 0x1 for 3 stages); <STAGES - 1> lets
    the tile being summed still be in flight: the count is in the SASS."""
    import feedbeast as fb
    from feedbeast.course import notebook
    cell = notebook.load(ROOT / "solutions/03-cp-async-rowsum.ipynb").cuda("lab")
    stages = int(cell.defines["STAGES"])
    kernel = next(k for k in cell.compile("sm_80").kernel_names if k.startswith("ring"))
    assert fb.sass.expect_cp_async_wait(cell.compile("sm_80"), kernel, stages - 2, "test") == [stages - 2]
    assert "cp_async_wait<STAGES - 2>" in cell.source, "the solution changed: update this test"
    late = fb.compile(cell.source.replace("cp_async_wait<STAGES - 2>", "cp_async_wait<STAGES - 1>"), "sm_80",
                      defines=cell.defines)
    with pytest.raises(fb.SassMismatch, match=r"waits \[2\].*expected N <= 1"):
        fb.sass.expect_cp_async_wait(late, kernel, stages - 2, "test")
    # wait<0>: correct, but only one tile in flight while one is summed; the lab asks for the ring's depth
    shallow = fb.compile(cell.source.replace("cp_async_wait<STAGES - 2>", "cp_async_wait<0>"), "sm_80",
                         defines=cell.defines)
    assert fb.sass.expect_cp_async_wait(shallow, kernel, stages - 2, "test") == [0]
    with pytest.raises(fb.SassMismatch, match=r"waits \[0\].*expected the largest N = 1"):
        fb.sass.expect_cp_async_wait(shallow, kernel, stages - 2, "test", deepest=True)
    assert fb.sass.expect_cp_async_wait(cell.compile("sm_80"), kernel, stages - 2, "test", deepest=True) == [1]


def test_a_cp_async_wait_in_the_wrong_place_is_rejected_whatever_its_count():
    """The right count in the wrong place: after the fold (tile 0 read before it lands), or once before the loop.
    Both archs of lab 03's check; the solution passes on both."""
    import feedbeast as fb
    from feedbeast.course import notebook
    cell = notebook.load(ROOT / "solutions/03-cp-async-rowsum.ipynb").cuda("lab")
    wait = "      fb::cp_async_wait<STAGES - 2>();                      // my copy of tile j has landed\n"
    fold = "reinterpret_cast<const float4*>(slots + (j % STAGES) * TILE_F)[threadIdx.x]);\n"
    loop = "    for (int j = 0; j < ntiles; ++j) {\n"
    assert wait in cell.source and fold in cell.source and loop in cell.source, "the solution changed: update this test"
    after = cell.source.replace(wait, "").replace(fold, fold + wait)
    before = cell.source.replace(wait, "").replace(loop, "    fb::cp_async_wait<STAGES - 2>();\n" + loop)
    for arch in ("sm_80", "sm_90a"):
        ok = cell.compile(arch)
        kernel = next(k for k in ok.kernel_names if k.startswith("ring"))
        assert fb.sass.expect_cp_async_wait(ok, kernel, 1, "test") == [1]
        assert fb.sass.cp_async_reads_before_wait(fb.sass.instructions(ok, kernel)[kernel]) == []
        # other depths, and a prologue loop kept rolled: ptxas's `LDS RZ, [RZ]` before LDGSTS blocks reads nothing
        for stages in (2, 4, 8):
            mod = fb.compile(cell.source, arch, defines={**cell.defines, "STAGES": str(stages)})
            assert fb.sass.expect_cp_async_wait(mod, kernel, stages - 2, "test") == [stages - 2], (arch, stages)
        unroll1 = cell.source.replace("    for (int j = 0; j < STAGES - 1; ++j) {",
                                      "    #pragma unroll 1\n    for (int j = 0; j < STAGES - 1; ++j) {")
        assert unroll1 != cell.source
        assert fb.sass.expect_cp_async_wait(fb.compile(unroll1, arch, defines=cell.defines), kernel, 1, "test") == [1]
        with pytest.raises(fb.SassMismatch, match=r"the wait is in the wrong place: LDS\S* at 0x[0-9a-f]+ reads shared "
                                                  r"memory after the first commit .* the first tile is read before it lands"):
            fb.sass.expect_cp_async_wait(fb.compile(after, arch, defines=cell.defines), kernel, 1, "test")
        with pytest.raises(fb.SassMismatch, match=r"the loop at .* never waits"):
            fb.sass.expect_cp_async_wait(fb.compile(before, arch, defines=cell.defines), kernel, 1, "test")
        # a wait on some passes only (a branch jumps over it) is rejected; one of two waits on every path is not
        only_first = cell.source.replace(wait, "      if (j == 0) fb::cp_async_wait<STAGES - 2>();\n")
        with pytest.raises(fb.SassMismatch, match=r"a pass of the loop at .* can skip its wait"):
            fb.sass.expect_cp_async_wait(fb.compile(only_first, arch, defines=cell.defines), kernel, 1, "test")
        either = cell.source.replace(wait, "      if (j + STAGES - 1 >= ntiles) fb::cp_async_wait<0>(); "
                                           "else fb::cp_async_wait<STAGES - 2>();\n")
        assert fb.sass.expect_cp_async_wait(fb.compile(either, arch, defines=cell.defines), kernel, 1, "test") == [0, 1]
        # a wait inside a loop of its own that can run no pass (here: every tile but the first) is no wait; inside a
        # loop that runs at least once it is; a loop over rows around the ring (the solution's) is judged through it
        rolled = '_Pragma("unroll 1") '
        zero_passes = cell.source.replace(wait, f"      {rolled}for (int q = 0; q < (j == 0 ? rows : 0); ++q) "
                                                "fb::cp_async_wait<STAGES - 2>();\n")
        with pytest.raises(fb.SassMismatch, match=r"a pass of the loop at .* can skip its wait .* a loop around the "
                                                  r"wait can run no pass"):
            fb.sass.expect_cp_async_wait(fb.compile(zero_passes, arch, defines=cell.defines), kernel, 1, "test")
        one_pass = cell.source.replace(wait, f"      {{ int q = 0; {rolled}do {{ fb::cp_async_wait<STAGES - 2>(); "
                                             "q += cols; } while (q < rows - 1000); }\n")
        assert fb.sass.expect_cp_async_wait(fb.compile(one_pass, arch, defines=cell.defines), kernel, 1, "test") == [1]
        # the ring unrolled by its slot, each step's `break` past the last tile jumping over its wait and its read:
        # a pass that reads nothing early (a pass that skips the wait and still reads is the only_first case above)
        static = cell.source.replace(fold, fold + "    }\n", 1).replace(
            loop, "    for (int j0 = 0; j0 < ntiles; j0 += STAGES) {\n#pragma unroll\n"
                                           "    for (int s = 0; s < STAGES; ++s) { const int j = j0 + s;\n"
                                           "      if (j >= ntiles) break;\n").replace(
            "(j % STAGES) * TILE_F", "s * TILE_F").replace("(ahead % STAGES)", "((s + STAGES - 1) % STAGES)")
        assert static.count("s * TILE_F") == 1 and "((s + STAGES - 1) % STAGES)" in static, "the solution changed"
        assert fb.sass.expect_cp_async_wait(fb.compile(static, arch, defines=cell.defines), kernel, 1, "test") == [1] * 3


def test_a_model_counterexample_is_recorded_whole():
    """check_ring records its verdict with the whole shortest trace (what grading reports for lab 04's model)."""
    from feedbeast.course import verdicts
    from feedbeast.sim import check_ring

    def producer(ring, it):           # never waits for the slot to be free: overwrites a stage still being read
        s = ring.stage(it)
        yield ring.full[s].arrive_expect_tx(ring.tile_bytes)
        yield ring.copy(s, tile=it)

    def consumer(ring, it):
        s, ph = ring.stage(it), ring.phase(it)
        yield ring.full[s].wait(ph)
        yield ring.read(s, tile=it)
        yield ring.empty[s].arrive()

    verdicts.begin()
    result = check_ring(producer, [consumer], stages=2, tiles=4)
    rec = verdicts.records()
    assert not result and rec[-1]["status"] == "failed" and rec[-1]["name"] == "model (check_ring)", rec
    assert rec[-1]["message"] == str(result) and "shortest trace" in rec[-1]["message"], rec[-1]["message"]
    assert len(rec[-1]["message"].splitlines()) > 3


# ---- the roster (no hub: folders as a server has them) ------------------------------------------------------

def test_roster_grades_each_learner_in_its_own_process_and_refuses_links(tmp_path):
    import csv
    import os
    from feedbeast.course import roster
    sols, _ = _tiny(tmp_path, TINY_CHECKS[:1])
    homes = tmp_path / "homes"
    for name, x in (("ada", 42), ("bob", 7)):
        labs = homes / name / "feedbeast" / "labs"
        labs.mkdir(parents=True)
        plant(sols / "05-tiny.ipynb", [("x = 42", f"x = {x}")], to=labs / "05-tiny.ipynb")
    cyd = homes / "cyd" / "feedbeast" / "labs"
    cyd.mkdir(parents=True)
    os.symlink(homes / "ada" / "feedbeast" / "labs" / "05-tiny.ipynb", cyd / "05-tiny.ipynb")   # ada's work
    code = roster.main(["--homes", str(homes), "--solutions", str(sols), "--jobs", "2",
                        "--csv", str(tmp_path / "g.csv"), "--json", str(tmp_path / "g.json")])
    rows = {r["username"]: r for r in csv.DictReader((tmp_path / "g.csv").open())}
    assert {n: (r["lab 05"], r["lab 05 status"]) for n, r in rows.items()} == \
        {"ada": ("100.0", "ok"), "bob": ("50.0", "failed"), "cyd": ("", "error")}, rows
    assert rows["bob"]["first failing check"].startswith("lab 05: check cell 1") and \
        "x is 7, expected 42" in rows["bob"]["first failing check"], rows
    assert rows["ada"]["first failing check"] == "lab 05: the solution's code, line for line", rows   # its copy
    docs = {d["learner"]: d for d in json.loads((tmp_path / "g.json").read_text())}
    assert "x is 7, expected 42" in json.dumps(docs["bob"]) and docs["cyd"]["refused"], docs["cyd"]
    # the lab as given, graded once for bob's failed lab: what it passes is no one's (here nothing: it defines no x)
    assert docs["bob"]["labs"][0]["given_passed"] == [[]] * len(docs["bob"]["labs"][0]["cells"]), docs["bob"]
    assert code == 1     # cyd could not be graded
    # the live view: one round grades both, with the same verdicts
    assert roster.main(["--homes", str(homes), "--solutions", str(sols), "--only", "ada", "bob", "--jobs", "2",
                        "--csv", str(tmp_path / "w.csv"), "--json", str(tmp_path / "w.json"),
                        "--watch", "1", "--rounds", "1"]) == 0
    watched = {r["username"]: r for r in csv.DictReader((tmp_path / "w.csv").open())}
    assert {n: r["lab 05 status"] for n, r in watched.items()} == {"ada": "ok", "bob": "failed"}, watched
    # the live view writes its --json each round too: what a merge of the room's servers reads
    live = {d["learner"]: d for d in json.loads((tmp_path / "w.json").read_text())}
    assert {n: [lab["status"] for lab in d["labs"]] for n, d in live.items()} == {"ada": ["ok"], "bob": ["failed"]}


def test_grading_starts_no_network_kernel_and_prints_the_record(tmp_path):
    """The checks run in a child process that reports on a pipe: no Jupyter kernel, no TCP port, no
    'Kernel is running over TCP without encryption' line; the record names the notebook's sha256."""
    import hashlib
    import subprocess
    import sys
    sols, lab = _tiny(tmp_path, TINY_CHECKS[:1], learner="x = 42")
    r = subprocess.run([sys.executable, "-m", "feedbeast", "grade", "--solutions", str(sols), "--hazards", "off",
                        str(lab)], capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "TCP" not in out and "IPKernelApp" not in out, out
    assert f"sha256 {hashlib.sha256(lab.read_bytes()).hexdigest()} of 05-renamed.ipynb, feedbeast " in out, out


def test_a_cell_without_text_or_type_is_a_clear_failure_and_the_batch_goes_on(tmp_path, capsys):
    """A notebook edited by hand outside Jupyter: the grade says which cell and what to do, no traceback."""
    for n, (key, value) in enumerate([("source", None), ("source", 5), ("cell_type", None)]):
        nb = json.loads(LAB.read_text())
        cell = next(c for c in nb["cells"] if c["cell_type"] == "code")
        if value is None:
            del cell[key]
        else:
            cell[key] = value
        bad = tmp_path / f"bad{n}" / LAB.name
        bad.parent.mkdir()
        bad.write_text(json.dumps(nb))
        rep = g.grade(bad, timeout=120)
        assert rep.status == "failed" and "cannot read the notebook: cell 2 has no " in str(rep), str(rep)
        assert f"make reset-labs LAB={LAB.name[:2]})" in str(rep) and "sha256 ?" not in str(rep)   # that lab alone
    assert g.main([str(bad), str(SOLUTION)]) == 3       # not read: nothing of it graded
    out = capsys.readouterr().out
    status = "ok" if _has_gpu() else "PARTIAL"
    assert "Traceback" not in out and f"solutions/00-copy-kernel.ipynb: {status}" in out.replace(str(ROOT) + "/", "")
    assert "check cells are not the lab's" not in out, out       # the solution's are the lab's
    summary = out[out.index("\n2 notebooks graded:\n"):]            # many labs: a line each at the end
    assert f"  {bad}: not graded\n" in summary and f"  solutions/00-copy-kernel.ipynb: {status}\n" in summary, summary


def test_a_file_that_is_no_notebook_or_a_chapter_is_named_with_what_to_do(tmp_path, monkeypatch):
    """What a learner hands the grader by mistake: a lab file emptied or cut short (the hint names Jupyter's last
    checkpoint when there is one, and the reset that keeps the file), a lab number that does not exist (the labs
    there are, and no record of a file that was never read), a chapter's notebook (the lab that goes with it)."""
    labs = tmp_path / "labs"
    (labs / ".ipynb_checkpoints").mkdir(parents=True)
    cut = labs / "04-mbarrier-ring.ipynb"
    cut.write_bytes((ROOT / "labs/04-mbarrier-ring.ipynb").read_bytes()[:300])
    (labs / "03-cp-async-rowsum.ipynb").write_text("")
    rep = str(g.grade(cut, timeout=60))
    assert "not a whole notebook (JSON cut short or edited by hand? it breaks at line " in rep, rep
    assert "make reset-labs LAB=04" in rep and "NotJSONError" not in rep and "\\n" not in rep, rep  # (no quoted JSON)
    rep = str(g.grade(cut, timeout=60, owner="ann"))        # the roster's copy: said for the instructor
    assert "ann's 04-mbarrier-ring.ipynb is not a whole notebook" in rep and "ann gets it back with File > Revert " \
        "Notebook to Checkpoint, or starts again with make reset-labs LAB=04 in their course folder" in rep, rep
    assert "checkpoint" not in rep, rep          # none saved yet: not named
    (labs / ".ipynb_checkpoints/04-mbarrier-ring-checkpoint.ipynb").write_bytes(
        (ROOT / "labs/04-mbarrier-ring.ipynb").read_bytes())
    rep = str(g.grade(cut, timeout=60))
    assert ".ipynb_checkpoints/04-mbarrier-ring-checkpoint.ipynb (File > Revert Notebook to Checkpoint)" in rep, rep
    rep = str(g.grade(labs / "03-cp-async-rowsum.ipynb", timeout=60))
    assert "the file is empty: make reset-labs LAB=03" in rep, rep
    assert "outside labs/" in rep and "keeping this file" not in rep, rep      # tmp_path has no solutions/ beside
    (tmp_path / "solutions").mkdir()                                            # labs/: now the course's labs/
    rep = str(g.grade(labs / "03-cp-async-rowsum.ipynb", timeout=60))
    assert "make reset-labs LAB=03 writes the lab as given again, keeping this file in labs/backup/" in rep, rep

    monkeypatch.chdir(ROOT)
    [eleven] = g.expand(["11"])
    rep = g.grade(eleven, timeout=60)
    assert rep.status == "failed" and rep.exit_code == 1, rep
    assert str(rep).splitlines()[1].strip().startswith("no lab '11': the labs are 00-copy-kernel.ipynb"), str(rep)
    assert "FileNotFoundError" not in str(rep) and "graded   sha256" not in str(rep), str(rep)

    rep = g.grade(ROOT / "chapters/04-mbarrier.ipynb", timeout=60)
    assert rep.status == "failed" and len(rep.outcomes) == 1, rep
    assert rep.refused and "graded   sha256" not in str(rep) and "python -m feedbeast grade 04)" in str(rep), str(rep)
    died = g.Report("04-x.ipynb", [g.Outcome("failed", "notebook", "the check process ended before the checks did")],
                    sha256="ab12")        # graded, and cut short: the grade most disputed keeps its record line
    assert "  graded   sha256 ab12 of 04-x.ipynb" in str(died), str(died)
    assert "this is chapter 04's notebook, not a lab" in str(rep) and "04-mbarrier-ring.ipynb in labs/" in str(rep)
    assert "make grade LAB=04" in str(rep), str(rep)


def test_what_a_kernel_says_in_comments_and_strings_and_a_spare_cuda_cell_fail_nothing(tmp_path):
    """The build-switch, token-pasting and include rules read what the preprocessor reads: a comment or a string
    that spells FB_ or ## is not a switch or a paste; a %%cuda cell the checks do not read may have a line that
    does not parse."""
    def edit(nb):
        i = next(k for k, c in enumerate(nb.cells) if g._is_check(g._heading(c)))
        nb.cells[i:i] = [code('%%cuda --name scratch --arch\n__global__ void k() {}\n'),
                         code('%%cuda --name "scratch2\n__global__ void k2() {}\n')]
    nb = plant(SOLUTION, [(TAIL, TAIL + '  // no FB_DEBUG needed here; "quotes" and ## in a comment\n'
                                  '  if (n < 0) printf("## negative, FB_HAZARDS off: %d\\n", (int)n);\n')],
               once=False, cuda_only=True, edit=edit, to=tmp_path / SOLUTION.name)
    rep = g.grade(nb, timeout=300)
    assert rep.status == ("ok" if _has_gpu() else "partial"), str(rep)
    assert g.cuda_refusals('#define P(a, b) a##b\n#if FB_DEBUG\n#endif\n#include "mine.h"\n', tmp_path) == [
        "it sets or tests FB_DEBUG, the toolkit's own build switches (the hazard and debug builds set them)",
        "it pastes tokens with ## (#define P), which can make a switch's name out of pieces: write the names whole",
        'it includes "mine.h", which is not one of the toolkit\'s or CUDA\'s headers']
    # `#cond` spells the argument as written, the same in every build (an assert macro); handed on from another
    # macro's parameter, the argument's macros expand first (the hazard build's __syncthreads)
    assert g.cuda_refusals('#define REQUIRE(c) do { if (!(c)) { printf("%s\\n", #c); __trap(); } } while (0)\n'
                           "REQUIRE(n % 4 == 0);\n", tmp_path) == []
    assert g.cuda_refusals("#define S(...) #__VA_ARGS__\n#define X(...) S(__VA_ARGS__)\n", tmp_path) == [
        "it reaches S, which turns its argument into a string with #, other than by a call of S(...) with the "
        "argument written there (#define X(...) S(__VA_ARGS__)): its argument's macros expand first, and the hazard "
        "build's differ. Call S directly, or write the string out"]
    # whitespace a directive may hold besides spaces and tabs (form feed, vertical tab)
    for spelled in ("#define S(x) #\fx\n#define XS(x) S(x)\n", "\f#define S(x) #x\n#define XS(x) S(x)\n",
                    "#\fdefine S(x) #x\n#define XS(x) S(x)\n", "#define S(x) #x\n#define XS(x)\v S(x)\n"):
        assert "it reaches S" in " ".join(g.cuda_refusals(spelled, tmp_path)), repr(spelled)
    assert "in a preprocessor line" in " ".join(g.cuda_refusals("\f#ifdef __syncthreads\n#endif\n", tmp_path))
    # the argument written in another macro's body, and an include guard, spell the same in every build
    assert g.cuda_refusals("#ifndef REQUIRE\n#define REQUIRE(c) do { if (!(c)) __trap(); printf(#c); } while (0)\n"
                           "#endif\n#define REQUIRE_BLOCK() REQUIRE(blockDim.x == 256)\n", tmp_path) == []
    for reached in ("#define CALL S\n#define X(a) CALL(a)\n", "#define X(a) S a\nint v = X((__syncthreads()));\n",
                    "#define ID(m) m\n#define X(a) ID(S)(a)\n", "#define APPLY(f, a) f(a)\nAPPLY(S, __syncthreads());\n"):
        assert "it reaches S, which turns its argument into a string" in " ".join(
            g.cuda_refusals("#define S(x) #x\n" + reached, tmp_path)), reached
    assert "it reaches S" in " ".join(g.cuda_refusals("#define S(u, x) #x\n#define X(a) S((0), a)\n", tmp_path))
    assert g.cuda_refusals('#define S(x) #x\nconst char* w = S(__syncthreads());\n', tmp_path) == []
    # told apart without a macro: what only the debug build declares, a toolkit function's type (the hazard build
    # adds a source-line parameter), a fallback declared in the toolkit's namespace
    probe = ("namespace fb { struct release_build {}; template <class... A> __device__ release_build "
             "globaltimer_ns(A...); }\nconstexpr bool kChecked = !same<decltype(fb::globaltimer_ns()), "
             "fb::release_build>::value;\n")
    said = " ".join(g.cuda_refusals(probe, tmp_path))
    assert "inside namespace fb" in said and "decltype(...) of an expression that names the toolkit" in said, said
    for tell, what in (("constexpr int k = sizeof(fb::mbar::arrive(b));\n", "sizeof(...)"),
                       ("auto p = & ::fb::mbar::arrive;\n", "the address of a toolkit function"),
                       ("constexpr bool k = noexcept(fb::mbar::wait(b, 0));\n", "noexcept(...)")):
        assert what in " ".join(g.cuda_refusals(tell, tmp_path)), tell
    assert g.cuda_refusals("struct Slot { float v[4]; };\nconstexpr int k = sizeof(Slot) + alignof(float);\n"
                           "fb::mbar::arrive(&b.full[s]);\n", tmp_path) == []
    # a namespace alias of the toolkit's names it as fb does; a using-declaration, a using-directive and a
    # function named without a call (overloads chosen by its type) too; an enumerator named wait is no function
    for tell, what in (("namespace q = fb::mbar;\nint k = sizeof(q::arrive(b));\n", "sizeof(...)"),
                       ("namespace q = ::fb::mbar;\nint k = tell(q::arrive);\n", "without calling it"),
                       ("using fb::mbar::arrive;\n", "into its own scope (using fb::...)"),
                       ("namespace fa = fb::attention;\nusing namespace fa;\n", "using namespace fb"),
                       ("int k = tell(fb::mbar::arrive);\n", "without calling it"),
                       # an alias of an alias, brought in inside a namespace of the learner's
                       ("namespace a0 = fb; namespace a1 = a0;\nnamespace mix { using namespace a1; }\n",
                        "using namespace fb"),
                       # a function only the hazard build declares, reached by argument-dependent lookup through an
                       # argument of a toolkit type, against a fallback of the learner's
                       ("constexpr fb::hazard::Kind K = fb::hazard::kBarSync;\n__device__ int record(...);\n"
                        "constexpr bool h = same<decltype(record(K, 0, 0u, 0u, 0u, 0u)), void>::value;\n",
                        "calls or declares record unqualified")):
        assert what in " ".join(g.cuda_refusals(tell, tmp_path)), tell
    assert g.cuda_refusals("namespace ab = fb::attention_bwd;\nstatic_assert(ab::Plan<64, 2>::BYTES == 1 && "
                           "ab::Plan<128, 2>::BYTES == 2);\ntr.span(fb::TraceKind::wait, t0, t1);\n"
                           "using fb::decode::u;\nu32 a = fb::hazard::addr(p);\nring.record(1);\n", tmp_path) == []
    # a name that ends in R before a string is no raw string (the switch after it is read); defined written in a
    # macro's body tests, where it expands in an #if, whether __syncthreads is a macro: the hazard build's
    assert "FB_HAZARDS" in " ".join(g.cuda_refusals('#define xR\nstatic_assert(true, xR"(");\n#ifdef FB_HAZARDS\n'
                                                    '#endif\n// )");\n', tmp_path))
    assert "defined other than as" in " ".join(g.cuda_refusals("#define TRACED defined(__syncthreads)\n#if TRACED\n"
                                                                "#endif\n", tmp_path))
    inc = "#include <fb/tma.cuh>\n"
    # a macro that spells fb, a namespace opened right after a semicolon, a fallback called inside an expression,
    # a template's name without a call, a toolkit function as a template argument, defined handed to a macro
    for tell, what in (("#define NS fb\nnamespace NS { int x; }\n", "inside namespace fb"),
                       ("__device__ int u;namespace fb { int y; }\n", "inside namespace fb"),
                       (inc + "__device__ int record(...);\nint k = x * record(K, 1);\n", "record unqualified"),
                       (inc + "__device__ int bulk_copy_g2s(...);\nint k = bulk_copy_g2s(map, 1);\n",
                        "bulk_copy_g2s unqualified"),
                       ("auto p = fb::attention::qk_gemm_rs<64, 64>;\n", "without calling it"),
                       ("int k = tell<&fb::mbar::arrive>();\n", "address of a toolkit function"),
                       ("#define M(x) x(__syncthreads)\n#if M(defined)\n#endif\n", "defined other than as"),
                       # a name fb of the learner's, which the hazard build's macros would find
                       ("namespace mine { struct fb { struct hazard {}; }; }\n", "a name fb of its own"),
                       ("using fb = int;\n", "a name fb of its own")):
        assert what in " ".join(g.cuda_refusals(tell, tmp_path)), tell
    # what a learner writes beside those rules: a lambda or a zero-argument helper of that name, any helper of that
    # name where no toolkit header is included, the size of a toolkit type, a directive spaced after its #
    for fine in (inc + "struct S { __device__ static void arrive_expect_tx(u64& b, u32 n) { fb::mbar::arrive(&b); } "
                       "};\n", "#if defined(FOO) || defined BAR\n#endif\nint defined_rows = 3;\n",
                 inc + "fb::tma::load<T>(a, b);\nbool both = a && fb::mbar::ready;\n",
                 "using fb::decode::u;\ntypedef fb::tc::u64 w;\n",inc + "auto addr = [&](int row, int ch) { return box + row; };\nint v = addr(1, 2);\n",
                 inc + "__device__ bool warp_leader() { return threadIdx.x % 32 == 0; }\nbool w = warp_leader();\n",
                 "__device__ const float* addr(const float* p, int i) { return p + i; }\nauto q = addr(p, 3);\n",
                 "namespace tc = fb::tc;\nstatic_assert(sizeof(tc::u64) == 8);\n", "# define SYNC() __syncthreads()\n"):
        assert g.cuda_refusals(fine, tmp_path) == [], fine
    assert g.cuda_refusals('const char* s = R"(FB_HAZARDS)";\nconst char* t = u8R"x(FB_DEBUG)x";\n'
                           "#if defined(FOO) && defined(BAR)\n#endif\n", tmp_path) == []


def test_a_graded_cuda_cell_whose_line_does_not_parse_is_named():
    nb = json.loads(SOLUTION.read_text())
    cell = next(c for c in nb["cells"] if "".join(c["source"]).startswith("%%cuda"))
    src = "".join(cell["source"])
    cell["source"] = src.replace("%%cuda --name lab", '%%cuda --name "lab', 1)
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / SOLUTION.name
        p.write_text(json.dumps(nb))
        rep = g.grade(p, timeout=300)
    assert rep.status == "failed" and "does not parse" in str(rep) and "No closing quotation" in str(rep), str(rep)


def test_report_lines_carry_no_terminal_control():
    o = g.Outcome("passed", "\x1b[2K\r<lab>: ok: 4 passed\x1b[8m\u202e", "a\nb\tc\x07\x9b\u2066")
    assert (o.name, o.message) == ("<lab>: ok: 4 passed", "a\nb\tc")
    assert "\x1b" not in o.line() and "\r" not in o.line()


def test_a_lab_saved_under_another_lab_s_name_a_folder_and_an_empty_pattern_are_named(tmp_path, capsys):
    wrong = tmp_path / "01-tiled-transpose.ipynb"
    shutil.copy(ROOT / "labs/04-mbarrier-ring.ipynb", wrong)
    rep = g.grade(wrong, timeout=120)
    assert rep.status == "failed" and "title says lab 04, but its file name makes it lab 01" in str(rep), str(rep)
    folder = tmp_path / "room"
    folder.mkdir()
    shutil.copy(SOLUTION, folder / SOLUTION.name)
    assert g.expand([str(folder)]) == [folder / SOLUTION.name]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert g.main([str(empty) + "/", str(tmp_path / "none" / "*.ipynb")]) == 3      # nothing graded: not FAILED
    out = capsys.readouterr().out
    assert "a folder with no lab notebook" in out and "no notebook matches this pattern" in out, out
    assert "FAILED" not in out and out.count("  not graded: ") == 2, out
    assert g.main([str(wrong)]) == 3 and "  not graded: this notebook's title says lab 04" in capsys.readouterr().out
    lab01 = tmp_path / "labs" / "01-tiled-transpose.ipynb"
    lab01.parent.mkdir()
    shutil.copy(ROOT / "labs/01-tiled-transpose.ipynb", lab01)      # as given: its checks fail
    assert g.main([str(tmp_path / "labs/99-nope.ipynb"), str(lab01)]) == 1        # a failed grade outranks it
    out = capsys.readouterr().out
    assert f"not graded: no such file: {tmp_path}/labs/99-nope.ipynb (a lab is named by its path" in out, out
    assert g.main([str(tmp_path / "labs/99-nope.ipynb")]) == 3 and g.worst([0, 3, 2]) == 3


def test_a_cell_timed_with_percent_percent_time_is_still_the_learner_s_definitions(tmp_path):
    """IPython's %%time and %%capture run the rest of the cell as Python in the notebook: its definitions count."""
    sol = ROOT / "solutions/01-tiled-transpose.ipynb"

    def edit(nb):
        cell = next(c for c in nb.cells if c.cell_type == "code" and "def transpose_tiled" in c.source)
        cell.source = "%%time\n" + cell.source
    rep = g.grade(plant(sol, edit=edit, to=tmp_path / sol.name), timeout=300)
    assert rep.status == ("ok" if _has_gpu() else "partial"), str(rep)


def test_a_model_written_in_the_styles_of_ordinary_python_grades_as_the_solution(tmp_path):
    """Lab 04's model written with an object of one's own whose attributes are set outside its class, a
    classmethod counting on cls, string annotations, an enum, a tracing decorator reading fn.__name__, and a
    consumer that makes its operations first and yields them after: the grade is the solution's."""
    sol = ROOT / "solutions/04-mbarrier-ring.ipynb"
    model = (
        "import enum\nimport functools\n\n\nclass Role(enum.Enum):\n    PRODUCER = 0\n    CONSUMER = 1\n\n\n"
        "class Where:\n    made = 0\n\n    @classmethod\n    def count(cls):\n        cls.made += 1\n\n\n"
        "def where(ring: 'Ring', it: 'int') -> 'Where':\n    w = Where()\n    w.s, w.ph = ring.stage(it), ring.phase(it)\n"
        "    Where.count()\n    return w\n\n\n"
        "def traced(fn):\n    @functools.wraps(fn)\n    def step(ring, it):\n        step.role = fn.__name__\n"
        "        yield from fn(ring, it)\n    return step\n\n\n"
        "@traced\ndef producer(ring, it):\n    w = where(ring, it)\n    yield ring.empty[w.s].wait(w.ph ^ 1)\n"
        "    yield ring.full[w.s].arrive_expect_tx(ring.tile_bytes)\n    yield ring.copy(w.s, tile=it)\n\n\n"
        "@traced\ndef consumer(ring, it):\n    w = where(ring, it)\n"
        "    ops = [ring.full[w.s].wait(w.ph), ring.read(w.s, tile=it), ring.empty[w.s].arrive()]\n"
        "    for op in ops:\n        yield op\n")

    def edit(nb):
        cell = next(c for c in nb.cells if c.cell_type == "code" and "def producer" in c.source)
        cell.source = "# your model\n" + model
    ref = g.grade(sol, timeout=300)
    rep = g.grade(plant(sol, edit=edit, to=tmp_path / sol.name), timeout=300)
    assert "model" in str(ref) and rep.status == ref.status, (str(rep), str(ref))
    assert [(o.status, o.name) for o in rep.outcomes] == [(o.status, o.name) for o in ref.outcomes], str(rep)
    print(rep)


def test_the_learner_sheet_lists_the_modules_a_graded_cell_may_import():
    from feedbeast.course import notebook as nbm
    sheet = (ROOT / "docs/learner-sheet.md").read_text()
    listed = re.search(r"Import only (.+?), the toolkit;", sheet.replace("\n", " "))[1]
    assert set(listed.split(", ")) == nbm.IMPORTABLE - {"feedbeast"}


def test_what_correct_learners_write_is_read_as_they_mean_it(tmp_path):
    """A line that starts with `!=` or `% 4` inside brackets is Python, not a shell escape or a magic; a heading
    "Checking my reasoning" is the learner's, not the lab's checks; `global n` with `n += 1` reads n; a #define
    whose body calls __syncwarp() expands alike in every build; Numba's cache=True has no file to cache beside in
    the grader, so it is left out there."""
    import ast

    from feedbeast.course import notebook as nbm
    assert nbm.python_of("x = (a\n     != 0)\n%time y\n!ls\ny = (5\n    % 4)") == "x = (a\n     != 0)\n\n\ny = (5\n    % 4)"
    assert not g._is_check("Checking my parity reasoning") and g._is_check("Check: correctness")
    assert "CALLS" in nbm._reads(ast.parse("def f():\n    global CALLS\n    CALLS += 1").body[0])[1]
    assert g.cuda_refusals("#define WARP_SYNC() __syncwarp()\n", tmp_path) == []
    assert g.cuda_refusals("#ifdef __syncwarp\n#endif\n", tmp_path) != []
    node = nbm.guarded(ast.parse("@numba.njit(cache=True, fastmath=True)\ndef f(x):\n    return x").body[0])
    assert [k.arg for k in node.decorator_list[0].keywords] == ["fastmath"]


# ---- TODO lines a learner leaves ----------------------------------------------------------------------------

def _kept_todo(solution: Path, to: Path, *, original_above: bool = False) -> Path:
    """The solution as a learner who keeps each TODO line and writes the part under it; with original_above, the
    lab's %%cuda cell as given left in place and the finished copy in a new cell below it."""
    from feedbeast.course import labs

    def keep(src):
        out = []
        for line in src.splitlines():
            m = labs.BEGIN.match(line)
            out += [labs._todo_line(m)] if m else [] if labs.END.match(line) else [line]
        return "\n".join(out)

    def edit(nb):
        cells = []
        for c in nb.cells:
            if c.cell_type == "code" and original_above and c.source.startswith("%%cuda"):
                cells.append(code(labs.strip_source(c.source)))
            if c.cell_type == "code" and "BEGIN SOLUTION" in c.source:
                c.source = keep(c.source)
            cells.append(c)
        nb.cells = cells
    return plant(solution, edit=edit, to=to)


@pytest.mark.parametrize("original_above", [False, True], ids=["todo-line-kept", "lab-cell-left-above"])
def test_a_part_written_under_its_todo_line_is_graded_as_written(tmp_path, original_above):
    """Lab 03 solved by a learner who kept the TODO lines above the code they wrote (or left the lab's cell as given
    above a finished copy, which is the cell graded): graded as the solution, not "your part is not written"."""
    learner = _kept_todo(ROOT / "solutions/03-cp-async-rowsum.ipynb", tmp_path / "03-cp-async-rowsum.ipynb",
                         original_above=original_above)
    assert "TODO: your code here" in learner.read_text()
    rep, sol = g.grade(learner, timeout=300), g.grade(ROOT / "solutions/03-cp-async-rowsum.ipynb", timeout=300)
    assert not any("not written" in o.message for o in rep.outcomes), str(rep)
    assert (rep.status, sorted((o.status, o.name) for o in rep.outcomes)) == \
        (sol.status, sorted((o.status, o.name) for o in sol.outcomes)), f"{rep}\n---\n{sol}"


def test_a_todo_line_with_only_what_the_lab_gave_under_it_is_not_written():
    """A TODO line is a part not written while only what the lab gave stands under it (the LAB lines of lab 09:
    `return {0, 0};`), or when the lab never wrote it; code of the learner's under it is written."""
    from feedbeast.course import labs
    sol = read(ROOT / "solutions/09-sliding-window-attention.ipynb")
    lab = read(ROOT / "labs/09-sliding-window-attention.ipynb")
    cells = [c for c in lab.cells if c.cell_type == "code"]
    given = g._todo(cells, sol.cells)
    assert given.count("lab.cu line") == sum(len(labs.given_parts(c.source)) for c in sol.cells
                                             if c.cell_type == "code") == 4, given
    written = g._todo([code(c.source.replace("return {0, 0};", "return {lo, hi};")) for c in cells], sol.cells)
    assert "smallest range of key tiles" in given and "smallest range of key tiles" not in written, written
    assert written.count("lab.cu line") == 3, written
    noted = g._todo([code(c.source.replace("return {0, 0};", "// I'll come back to this\n    return {0, 0};"))
                     for c in cells], sol.cells)
    assert noted.count("lab.cu line") == 4, noted                     # a comment under the line writes nothing
    stray = [code("x = 1  # TODO: your code here: mine")]
    assert "not written" in g._todo(stray, sol.cells)


def test_a_todo_line_in_a_function_a_later_cell_defines_again_is_not_counted():
    """Lab 04's model: a learner who leaves the given cell and writes producer() again in a new cell below has
    written it (the later definition is the one that runs); consumer(), not written again, still counts."""
    sol = read(ROOT / "solutions/04-mbarrier-ring.ipynb")
    cells = [c for c in read(ROOT / "labs/04-mbarrier-ring.ipynb").cells if c.cell_type == "code"]
    assert g._todo(cells, sol.cells).count("producer line") == 1
    mine = cells + [code("def producer(ring, it):\n    s, ph = ring.stage(it), ring.phase(it)\n"
                         "    yield ring.empty[s].wait(ph ^ 1)\n")]
    left = g._todo(mine, sol.cells)
    assert "producer line" not in left and left.count("consumer line") == 2, left


def test_what_stands_under_a_todo_line_is_read_as_its_cell_s_language():
    """In CUDA a # line is a directive (code the learner wrote), in Python a comment; a cell the grader does not run
    as Python (%%script false) defines nothing again."""
    t = "// TODO: your code here: the stages"
    handed = {t: {((), "}")}}
    assert g._written_under(t, ["#define STAGES 4", "}"], handed, cuda=True)
    assert not g._written_under(t, ["// later", "}"], handed, cuda=True)
    assert not g._written_under("# TODO: your code here: x", ["# later", "pass"], {"# TODO: your code here: x": {((), "")}},
                                cuda=False)
    from feedbeast.course.labs import given_parts
    given = given_parts("def f():\n    # BEGIN SOLUTION: x\n    return 1\n    # LAB: pass\n    # END SOLUTION\n")
    x = {"# TODO: your code here: x": {(lines, after) for _, lines, after in given}}
    assert not g._written_under("# TODO: your code here: x", ["pass"], x, cuda=False)   # the given pass: unwritten
    assert g._written_under("# TODO: your code here: x", ["return 2"], x, cuda=False)
    sol = read(ROOT / "solutions/04-mbarrier-ring.ipynb")
    cells = [c for c in read(ROOT / "labs/04-mbarrier-ring.ipynb").cells if c.cell_type == "code"]
    skipped = cells + [code("%%script false\ndef producer(ring, it):\n    yield ring.empty[0].wait(0)\n")]
    assert g._todo(skipped, sol.cells).count("producer line") == 1


def test_a_compile_writes_only_the_cache_s_files():
    """NVRTC writes the file its --time and --fdevice-time-trace options name (and reads or writes a precompiled
    header's): fb.compile refuses them with the option named; the cache's folder maker makes its own folders only."""
    import sys as _sys

    import feedbeast.compile  # noqa: F401  (the module, not the function the package binds to the name)
    from feedbeast.cache import cache_dir
    from feedbeast.errors import CompileError
    options = _sys.modules["feedbeast.compile"]._options
    for bad in ("--time=/tmp/by-a-grade.pth", "-fdevice-time-trace=t", "--create-pch=x.pch", "--pch-dir=/tmp"):
        with pytest.raises(CompileError, match="writes or reads a file of NVRTC's own"):
            options([bad])
    assert options(["--maxrregcount=64", "-DTILE=64"]) == ("--maxrregcount=64", "-DTILE=64")
    with pytest.raises(ValueError, match="the cache keeps cubin and sass only"):
        cache_dir("../../elsewhere")


@pytest.mark.parametrize("end,says", [
    ("os.kill(os.getpid(), signal.SIGKILL)", "killed by SIGKILL from outside it: on Linux the usual sender is the "
                                             "out-of-memory killer"),
    ("sys.exit(3)", "exit status 3: a crash in a launch, or the notebook's code ended it")])
def test_a_check_process_that_ends_early_is_told_apart_by_how(monkeypatch, tmp_path, end, says):
    # A process killed from outside (the out-of-memory killer, when several gradings share a machine) is not a
    # crash of the learner's kernel: the report says which it was.
    popen = g.subprocess.Popen

    def ends(args, **kw):
        return popen([args[0], "-c", f"import os, signal, sys; sys.stdin.read(); {end}"], **kw)
    monkeypatch.setattr(g.subprocess, "Popen", ends)
    msgs, error, status = g._run_checks({}, dict(__import__("os").environ), tmp_path, 30)
    assert msgs == [] and error.startswith("the check process ended before the checks did (" + says), error


def test_a_repeated_outcome_says_how_many_times_apart_from_its_name():
    # "launch copy_x2 (x2)" read as part of the kernel's name: the count is said in words
    assert g.Outcome("skipped", "launch copy_x2", "needs a GPU", count=2).line() == \
        "  skipped  launch copy_x2 (2 times): needs a GPU"
    assert g.Outcome("passed", "launch copy_x2").line() == "  passed   launch copy_x2"


def test_code_no_check_reads_is_not_run_and_the_report_names_what_it_would_have_changed(tmp_path):
    """Top-level statements that no check reads are never run; those that would change what the checks use (the
    toolkit, the environment) are named in the report's notes for the instructor, with their lines. The grade is
    the same as without them. No note for an import, for scratch code that uses a name the checks bind (n), or for
    the lab's own setup cell as an older course wrote it (matched by its cell id)."""
    def edit(nb):
        i = next(k for k, c in enumerate(nb.cells) if g._is_check(g._heading(c)))
        nb.cells[i:i] = [code("fb.check = lambda *a, **k: 'passed'\nimport os\nos.environ['FEEDBEAST_X'] = '1'\n"
                              "import matplotlib.pyplot as plt\nn = 1 << 10\nprint('copy: passed')")]
        setup = next(c for c in nb.cells if c.get("id") == "course-setup")
        setup.source = "import os, pathlib  # an older setup cell\nhere = pathlib.Path.cwd(); os.environ.setdefault('X', '1')"
    forged = g.grade(plant(SOLUTION, edit=edit, to=tmp_path / SOLUTION.name), timeout=300)
    plain = g.grade(SOLUTION, timeout=300)
    said = [n for n in forged.notes if n.startswith("not run by the grader, since no check reads it")]
    assert len(said) == 2, forged.notes
    assert "line 1: it changes fb in place: fb.check = lambda" in said[0], said
    assert "line 3: " in said[1] and "os.environ['FEEDBEAST_X'] = '1'" in said[1], said
    assert forged.status == plain.status and [o.line() for o in forged.outcomes] == \
        [o.line() for o in plain.outcomes], (str(forged), str(plain))
    assert not any("not run by the grader" in n for n in plain.notes), plain.notes


def test_the_course_s_untouched_lab_points_a_hosted_learner_to_their_copy(tmp_path):
    """`grade 00` grades the checkout's labs/00: where that is untouched, a learner working in a copy elsewhere
    (Colab's copy in Drive) graded the wrong file, and the grade says how to grade theirs; a copy elsewhere, as
    given, is told only to save."""
    course_lab = ROOT / "labs" / "00-copy-kernel.ipynb"
    here = g.grade(course_lab, timeout=300)
    copy = tmp_path / "Copy of 00-copy-kernel.ipynb"
    shutil.copy(course_lab, copy)
    there = g.grade(copy, timeout=300, course=ROOT)
    part = [o.message for o in here.failed if o.name == "your part"]
    assert part and "a copy kept elsewhere (a hosted notebook's in Drive)? grade that file by its path" in part[0], \
        str(here)
    assert not any("copy kept elsewhere" in o.message for o in there.failed), str(there)
    assert any(o.name == "your part" for o in there.failed), str(there)


def test_a_kernel_that_never_ends_is_said_running_then_named_at_the_learner_s_line(tmp_path, monkeypatch):
    """A Numba kernel whose loop never ends (its counter stepped only inside an `if`) spins in the simulator: the
    grade says each PROGRESS_S that the check cell still runs, and at its time limit fails it as hung, naming the
    line of the learner's kernel where the simulator's threads were (their Python stacks), not only the check cell."""
    labs = tmp_path / "labs"
    labs.mkdir()
    spin = ("    j = 0\n    while j < TILE // BAND:\n        i = w + j * BAND\n        if r0 + i < rows and c0 + lane < cols:\n"
            "            tile[i, lane] = x[r0 + i, c0 + lane]\n            j += 1\n")
    loop = ("    for j in range(TILE // BAND):\n        i = w + j * BAND\n        if r0 + i < rows and c0 + lane < cols:\n"
            "            tile[i, lane] = x[r0 + i, c0 + lane]\n")
    path = plant(ROOT / "solutions/01-tiled-transpose.ipynb", [(loop, spin)], to=labs / "01-tiled-transpose.ipynb")
    monkeypatch.setattr(g, "PROGRESS_S", 4)
    # the simulator on every machine: on a GPU the kernel would spin on the GPU (the host waits in the driver, so no
    # line of the learner's shows), slowing every other test on that GPU until the check process is killed
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    said = []
    rep = g.grade(path, timeout=12, progress=said.append)
    assert rep.status == "failed" and "ran past 12 s (a hung kernel?)" in rep.error, str(rep)
    named = rep.error.split("; your code was running at ", 1)[-1]      # one of the spinning loop's lines
    assert named.startswith("transpose_tiled line ") and any(f"{line.strip()!r}" in named for line in spin.split(
        "\n")[1:5]), rep.error
    assert said and all("still running after" in s and "TIMEOUT=N" in s for s in said), said


def test_a_hang_s_hint_quoting_the_learner_s_words_keeps_its_failure():
    """The hang's hint quotes a heading and a line of the learner's: whatever they say (`did not run`), the report
    keeps the notebook's failure with its reason; a stop by the learner's own cells stays their outcome alone."""
    job = {"checks": ["x = 1"], "cuda": [], "kernels": {}}
    hello = {"t": "hello", "gpu": None, "hazards": False, "pid": 1}
    err = g.HUNG.format(where="check cell 1 (x = 1)", timeout=5) + (
        "; your code was running at the code cell under \"## did not run\" line 2 ('while True: pass  # did not run')")
    outcomes, error = g._outcomes([hello], job, err, False, -9)
    assert [(o.status, o.name, o.message) for o in outcomes] == [("failed", "notebook", err)], outcomes
    stop = {"t": "learner", "name": "your cell", "message": "SyntaxError", "stop": True}
    outcomes, error = g._outcomes([hello, stop], job, "", False, 0)
    assert [o.name for o in outcomes] == ["your cell"] and error == "your cell: the checks did not run", outcomes


def test_a_time_limit_is_whole_seconds_from_one(capsys):
    """--timeout 0 (or make grade TIMEOUT=0) would call every cell hung at once: refused, nothing graded (exit 3)."""
    for bad in ("0", "-5", "30m", "²", "9" * 5000):
        with pytest.raises(SystemExit) as e:
            g.main(["--timeout", bad, str(SOLUTION)])
        assert e.value.code == 3 and "is no time limit: give whole seconds from 1" in capsys.readouterr().err


def test_a_renamed_or_deleted_cuda_cell_is_one_failure_that_names_the_cell(tmp_path):
    """The lab's `%%cuda --name lab` cell renamed or deleted: one failure, naming the renamed cell where there is one;
    not also a failure per kernel the checks launch, as if a cell of that --name existed without them."""
    def rename(nb):
        cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("%%cuda")
                    and "--name lab" in c.source.partition("\n")[0])
        cell.source = cell.source.replace("--name lab", "--name mylab", 1)

    def delete(nb):
        nb.cells = [c for c in nb.cells if not (c.cell_type == "code" and c.source.startswith("%%cuda")
                                                and "--name lab" in c.source.partition("\n")[0])]
    for edit, named in ((rename, True), (delete, False)):
        path = plant(SOLUTION, edit=edit, to=tmp_path / f"00-{edit.__name__}.ipynb")
        rep = g.grade(path, hazards=False, timeout=120)
        failed = rep.failed
        assert len(failed) == 1 and failed[0].name == "%%cuda --name lab", [(c.name, c.message) for c in failed]
        assert "has no `%%cuda ... --name lab` cell" in failed[0].message
        assert ("is `%%cuda ... --name mylab`: if it is the lab's cell, give it `--name lab` again"
                in failed[0].message) == named, failed[0].message


def test_a_verdict_the_notebook_s_own_code_records_counts_as_failed(tmp_path):
    """A function the checks call that itself calls fb.check on data of its choosing would add passes the lab never
    checked (and raise the roster's score): each such verdict counts as failed, naming the notebook's line."""
    sols, labs = tmp_path / "solutions", tmp_path / "labs"
    sols.mkdir()
    labs.mkdir()
    md = markdown
    new([md("# Lab 05 · tiny"), "import numpy as np\nimport feedbeast as fb",
         "# BEGIN SOLUTION\ndef f():\n    return 42\n# END SOLUTION", md("## Check"),
         "fb.check(np.array([float(f())]), np.array([42.0]), name='f is 42')"], to=sols / "05-tiny.ipynb")
    lab = new([md("# Lab 05 · tiny"), "import numpy as np\nimport feedbeast as fb",
               "def f():\n    for i in range(3):\n        fb.check(np.zeros(1), np.zeros(1), name=f'mine {i}')\n"
               "    return 41", md("## Check"), "pass"], to=labs / "05-tiny.ipynb")
    rep = g.grade(lab, solutions=sols, hazards=False, timeout=60)
    assert rep.status == "failed" and not [o for o in rep.passed if o.name.startswith("mine")], str(rep)
    mine = [o for o in rep.failed if o.name.startswith("mine")]
    assert len(mine) == 3 and all("from inside the notebook's own code" in o.message for o in mine), str(rep)


def test_a_numba_kernel_of_the_lab_must_be_a_cuda_jit_function(tmp_path):
    """Lab 01's transpose_tiled replaced by an object that "launches" by writing the answer on the host (with a
    py_func for the source checks to read): refused as no Numba kernel, and no check of it passes."""
    def fake(nb):
        cell = next(c for c in nb.cells if c.cell_type == "code" and "def transpose_tiled" in c.source)
        cell.source += ("\n\ndef _decoy(x, y):\n    cuda.syncthreads()\n\n\nclass _Launch:\n    py_func = _decoy\n\n"
                        "    def __getitem__(self, config):\n        return self.run\n\n"
                        "    def run(self, x, y):\n        y[:, :] = x.T\n\n\ntranspose_tiled = _Launch()\n")
    lab = plant(ROOT / "solutions/01-tiled-transpose.ipynb", edit=fake, to=tmp_path / "01-fake.ipynb")
    rep = g.grade(lab, hazards=False, timeout=300)
    assert rep.status == "failed", str(rep)
    assert any("transpose_tiled is a _Launch, not a Numba kernel" in o.message for o in rep.failed), str(rep)
    assert not any(o.name.startswith("transpose_tiled") for o in rep.passed), str(rep)


def test_a_form_feed_does_not_move_the_lines_the_source_checks_read(tmp_path):
    """Form feeds in a comment split str.splitlines' lines but not the compiler's: the source the barrier check reads
    through linecache would be a decoy def above the kernel. Lab 01 with a kernel that lacks its barrier, a decoy
    with one above it, and form feeds between: still failed on the missing barrier."""
    def decoy(nb):
        cell = next(c for c in nb.cells if c.cell_type == "code" and "def transpose_tiled" in c.source)
        body = cell.source.replace("    cuda.syncthreads()\n", "", 1)
        cell.source = ("@cuda.jit\ndef transpose_tiled(x, y):\n    cuda.syncthreads()\n# notes" + "\x0c" * 12 + "\n"
                       + body)
    lab = plant(ROOT / "solutions/01-tiled-transpose.ipynb", edit=decoy, to=tmp_path / "01-decoy.ipynb")
    rep = g.grade(lab, hazards=False, timeout=300)
    assert rep.status == "failed", str(rep)
    assert any("has no cuda.syncthreads()" in o.message for o in rep.failed), str(rep)
