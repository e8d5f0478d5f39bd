"""The roster's CSV and command line: a score that orders labs as their status does, learners it could not
grade, lab numbers as learners type them, and what its help and notes say.

Scores are computed from lab records made by the grader's own Report (what `grade --json` prints). The
command-line tests run the roster for real with a stand-in for the course's Python: a script that answers as
`python -m feedbeast grade --json` would, each lab it is given `ok` (tests/test_grade.py grades real labs
through the roster).
"""
from __future__ import annotations

import csv
import json
import os
import stat
import sys
from pathlib import Path

import pytest

from feedbeast.course import roster
from feedbeast.course.grade import HAZARD_LABS, Outcome, Report
from feedbeast.course.gpu_devices import Slots


def _lab(name: str, passed: int = 0, failed: int = 0, skipped: int = 0, error: str = "") -> dict:
    outcomes = ([Outcome("passed", "check", count=passed)] if passed else []) + \
               ([Outcome("failed", "check_ring", "does not hold", count=failed)] if failed else []) + \
               ([Outcome("skipped", "launch", "needs a GPU, this machine has none", count=skipped)] if skipped else [])
    return Report(path=f"{name}.ipynb", outcomes=outcomes, error=error).to_dict()


def _csv(docs, tmp_path, labs=None) -> dict:
    roster.write_csv(docs, tmp_path / "g.csv", labs)
    return {r["username"]: r for r in csv.DictReader((tmp_path / "g.csv").open())}


def test_a_solved_lab_without_a_gpu_scores_above_a_failed_one(tmp_path):
    """alice solved lab 04 on a machine with no GPU (5 launches skipped); carol's has a failing check."""
    alice = _lab("04-mbarrier-ring", passed=3, skipped=5)
    carol = _lab("04-mbarrier-ring", passed=2, failed=1)
    assert (alice["status"], carol["status"]) == ("partial", "failed")
    rows = _csv([{"learner": "alice", "labs": [alice]}, {"learner": "carol", "labs": [carol]}], tmp_path)
    assert (rows["alice"]["lab 04"], rows["alice"]["lab 04 status"]) == ("100.0", "partial"), rows
    assert (rows["carol"]["lab 04"], rows["carol"]["lab 04 status"]) == ("66.7", "failed"), rows


def test_every_failed_lab_scores_below_every_lab_that_did_not_fail():
    labs = {
        "ok": _lab("04-x", passed=4),
        "partial, some skipped": _lab("04-x", passed=1, skipped=30),
        "partial, every check skipped": _lab("04-x", skipped=3),
        "failed, one of many": _lab("04-x", passed=99999, failed=1),        # 99.999 % would round to 100.0
        "failed, half": _lab("04-x", passed=1, failed=1),
        "failed, a cell timed out after passes": _lab("04-x", passed=2, error="a cell ran past 600 s"),
        "failed, no check reported": _lab("04-x"),
    }
    scores = {k: roster.score(v) for k, v in labs.items()}
    assert scores.pop("partial, every check skipped") is None, scores   # nothing ran: no number at all
    failed = {k: s for k, s in scores.items() if labs[k]["status"] == "failed"}
    fine = {k: s for k, s in scores.items() if labs[k]["status"] != "failed"}
    assert len(failed) == 4 and len(fine) == 2
    assert max(failed.values()) < min(fine.values()), scores
    assert scores["failed, half"] == 50.0 and scores["failed, a cell timed out after passes"] == 66.7, scores
    assert scores["failed, no check reported"] == 0.0 and scores["failed, one of many"] == 99.9, scores


def test_a_lab_whose_every_check_was_skipped_has_no_score_to_import(tmp_path):
    """Lab 08 in a room of H200s: every check needs sm_100a, none ran. An empty cell, not full marks."""
    rows = _csv([{"learner": "dan", "labs": [_lab("08-tmem-mma", skipped=4)]}], tmp_path)
    assert (rows["dan"]["lab 08"], rows["dan"]["lab 08 status"]) == ("", "partial"), rows


# ---- the command line, with a stand-in for the course's Python ----------------------------------------------

GRADER = """#!{python}
import json, os, sys
files = [a for a in sys.argv if a.endswith(".ipynb")]
print(json.dumps({{"learner": sys.argv[sys.argv.index("--learner") + 1], "exit": 0, "labs": [
    {{"notebook": f, "lab": os.path.basename(f)[:2], "status": "ok",
      "checks": [{{"status": "passed", "name": "uid " + str(os.getuid()), "message": "", "count": 1}}]}}
    for f in files]}}))
"""


# the fake grader's test of lab 03 by the file's name: the roster's temporary folders have random names
IS_03 = 'os.path.basename(f).startswith("03")'


def _grader(folder: Path, executable: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "python"
    path.write_text(GRADER.format(python=sys.executable))
    path.chmod(0o755 if executable else 0o644)
    return path


def _homes(tmp: Path, learners: dict) -> Path:
    """{name: [lab file names]} as learner folders under tmp/homes."""
    homes = tmp / "homes"
    for name, files in learners.items():
        labs = homes / name / "feedbeast" / "labs"
        labs.mkdir(parents=True)
        for f in files:
            (labs / f).write_text("{}")
    return homes


def _solutions(tmp: Path) -> Path:
    """The course's solutions/ as the roster reads them: a notebook per lab of the course, named as the course's
    (the stand-in grader reads none of them)."""
    sols = tmp / "sols"
    if not sols.is_dir():
        sols.mkdir()
        for sol in (Path(__file__).resolve().parents[1] / "solutions").glob("*.ipynb"):
            (sols / sol.name).write_text("{}")
    return sols


def _roster(tmp: Path, homes: Path, *extra) -> tuple[int, dict]:
    code = roster.main(["--homes", str(homes), "--solutions", str(_solutions(tmp)), "--csv", str(tmp / "g.csv"),
                        *extra])
    return code, {r["username"]: r for r in csv.DictReader((tmp / "g.csv").open())}


def test_a_learner_the_grader_could_not_start_for_is_an_error_not_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "executable", str(_grader(tmp_path / "course", executable=False)))
    homes = _homes(tmp_path, {"ada": ["04-mbarrier-ring.ipynb"], "bob": []})
    code, rows = _roster(tmp_path, homes)
    assert code == 1
    assert (rows["ada"]["lab 04"], rows["ada"]["lab 04 status"]) == ("", "error"), rows
    assert rows["ada"]["first failing check"].startswith("could not start the grader") and \
        "Permission denied" in rows["ada"]["first failing check"], rows["ada"]
    assert (rows["bob"]["lab 04"], rows["bob"]["lab 04 status"]) == ("0.0", "missing"), rows   # nothing handed in


@pytest.mark.skipif(os.geteuid() != 0, reason="grading as each learner needs root")
def test_a_course_python_the_learners_cannot_reach_is_named_with_what_to_do(tmp_path, capsys):
    """As root the roster grades as the owner of each home; the course's Python in a private (0700) folder is out
    of that learner's reach: the row says error, the hint names the Python and the ways out; --as-me grades."""
    private = tmp_path / "instructor"
    python = _grader(private / ".venv" / "bin")
    private.chmod(0o700)
    homes = _homes(tmp_path, {"ada": ["04-mbarrier-ring.ipynb"]})
    for p in (homes / "ada", homes / "ada" / "feedbeast", homes / "ada" / "feedbeast" / "labs"):
        os.chown(p, 65534, 65534)               # nobody's home
    saved = sys.executable
    try:
        sys.executable = str(python)
        code, rows = _roster(tmp_path, homes)
        err = capsys.readouterr().err
        assert code == 1 and rows["ada"]["lab 04 status"] == "error", rows
        assert "as uid 65534" in rows["ada"]["first failing check"], rows
        assert f"course's Python ({python})" in err and "--as-me" in err and "700 or 750" in err, err
        code, rows = _roster(tmp_path, homes, "--as-me")
        assert code == 0 and rows["ada"]["lab 04 status"] == "ok", rows
        assert "--as-me: grading runs as root" in capsys.readouterr().err
    finally:
        sys.executable = saved


def test_labs_are_taken_as_learners_type_them(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "executable", str(_grader(tmp_path / "course")))
    homes = _homes(tmp_path, {"ada": ["00-copy-kernel.ipynb", "04-mbarrier-ring.ipynb"]})
    code, rows = _roster(tmp_path, homes, "--labs", "4")
    assert code == 0 and rows["ada"]["lab 04 status"] == "ok" and "lab 00" not in rows["ada"], rows
    assert "lab 4" not in rows["ada"]
    code, rows = _roster(tmp_path, homes, "--labs", "4", "04", "0")
    assert [k for k in rows["ada"] if k.endswith("status")] == ["lab 00 status", "lab 04 status"], rows
    with pytest.raises(SystemExit):
        roster.main(["--homes", str(homes), "--csv", str(tmp_path / "x.csv"), "--labs", "mbarrier"])
    assert "'mbarrier' is not a lab number" in capsys.readouterr().err


def test_the_roster_says_what_it_lacks_and_prints_each_learner_as_graded(tmp_path, monkeypatch, capsys):
    """A lab one learner has not: their row names that lab (not "no lab notebook", when they have others); no
    GPU in reach: said before grading, since a wrong kernel with the right SASS then scores 100; one learner is
    one, not "1 learners"."""
    monkeypatch.setattr(sys, "executable", str(_grader(tmp_path / "course")))
    from feedbeast.course import grade
    monkeypatch.setattr(grade, "_has_gpu", lambda: False)
    homes = _homes(tmp_path, {"ada": ["00-copy-kernel.ipynb", "04-mbarrier-ring.ipynb"], "bob": ["00-copy-kernel.ipynb"]})
    code, rows = _roster(tmp_path, homes, "--labs", "4")
    out, err = capsys.readouterr()
    assert code == 1 and rows["ada"]["lab 04 status"] == "ok", rows
    assert f"bob: no notebook of lab 04 in {homes}/bob/feedbeast/labs" in out, out
    assert "roster: no GPU in reach here" in err and "scores 100" in err, err
    monkeypatch.setattr(grade, "_has_gpu", lambda: True)
    code, rows = _roster(tmp_path, homes, "--only", "ada")
    out, err = capsys.readouterr()
    assert code == 0 and "no GPU" not in err and ": 1 learner x labs 00, 04" in out, (out, err)
    cyd = _homes(tmp_path / "more", {"cyd": ["04-a.ipynb", "04-b.ipynb"]})     # two copies, neither the lab's name
    code, rows = _roster(tmp_path, cyd, "--labs", "4")
    assert code == 1 and "no lab notebook graded in" in capsys.readouterr().out, rows
    assert "lab 04: 2 notebooks (04-a.ipynb, 04-b.ipynb)" in rows["cyd"]["first failing check"], rows


def test_a_notebook_that_is_no_lab_makes_no_column_and_is_named_in_its_learner_s_row(tmp_path, monkeypatch, capsys):
    """File > New > Notebook writes Untitled.ipynb in labs/: it once made a column `lab Untitled`, 0 and missing for
    everyone else. It is no lab of the course: not graded, no column, named in its learner's row as not a lab."""
    monkeypatch.setattr(sys, "executable", str(_grader(tmp_path / "course")))
    homes = _homes(tmp_path, {"ada": ["00-copy-kernel.ipynb", "Untitled.ipynb"], "bob": ["00-copy-kernel.ipynb"]})
    code, rows = _roster(tmp_path, homes, "--as-me")
    assert code == 0 and [k for k in rows["bob"] if k.startswith("lab ")] == ["lab 00", "lab 00 status"], rows
    assert rows["ada"]["labs ok"] == rows["bob"]["labs ok"] == "1", rows
    assert rows["ada"]["first failing check"] == "Untitled.ipynb: not a lab (no NN- number in its name): not graded"
    assert rows["bob"]["first failing check"] == "", rows["bob"]
    out = capsys.readouterr().out
    assert "ada: 00 ok (" in out and "refused Untitled.ipynb: not a lab" in out and "x labs 00\n" in out, out
    old = {"learner": "cy", "labs": [_lab("00-copy-kernel", passed=1), _lab("Untitled", passed=1)]}   # an older JSON
    assert list(_csv([old], tmp_path)["cy"]) == ["username", "lab 00", "lab 00 status", "labs ok", "first failing check"]


def test_the_help_names_the_hazard_labs_the_grader_uses(capsys):
    with pytest.raises(SystemExit):
        roster.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    first, last = min(HAZARD_LABS), max(HAZARD_LABS)
    assert f"for labs {first}-{last} and later labs whose kernels include an fb/ header" in text, text


def test_the_note_says_whose_rights_learners_code_runs_with(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "executable", str(_grader(tmp_path / "course")))
    homes = _homes(tmp_path, {"ada": ["04-mbarrier-ring.ipynb"]})
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    _roster(tmp_path, homes, "--as-me")
    err = capsys.readouterr().err
    assert "--as-me: grading runs as root" in err and "run as root to grade" not in err, err
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    _roster(tmp_path, homes)
    assert "run as root to grade each learner as themselves" in capsys.readouterr().err


def test_a_lab_whose_own_cells_broke_in_the_grader_is_left_ungraded_not_scored_zero(tmp_path):
    """The lab's given cells run before any of the learner's: an error there (NVRTC not found in the learners'
    grader, a GPU out of reach) says nothing of the notebook. The grade runs no learner code after it; the roster
    writes an empty score with status error, says why in the last column, prints one hint and exits 1."""
    from feedbeast.course import grade as g
    from feedbeast.course import notebook as nbm
    ROOT = Path(__file__).resolve().parents[1]
    sols = tmp_path / "solutions"
    sols.mkdir()
    sol = ROOT / "solutions/00-copy-kernel.ipynb"      # its given cell imports the toolkit, then breaks
    nbm.planted(sol, [("import feedbeast as fb\n",
                       "import feedbeast as fb\nraise OSError('Failure finding \"libnvrtc.so.13\"')\n")],
                to=sols / sol.name)
    mine = tmp_path / "labs" / sol.name
    mine.parent.mkdir()
    mine.write_bytes((ROOT / "labs" / sol.name).read_bytes())
    rep = g.grade(mine, solutions=sols, timeout=300)
    assert "libnvrtc.so.13" in rep.setup and "report it to the instructor" in rep.setup, str(rep)
    assert rep.status == "failed" and not [o for o in rep.outcomes if o.name.startswith("check cell")], str(rep)
    broken = {"learner": "bob", "labs": [rep.to_dict()]}
    fine = {"learner": "ann", "labs": [_lab("00-copy-kernel", passed=3)]}
    rows = _csv([broken, fine], tmp_path)
    assert (rows["bob"]["lab 00"], rows["bob"]["lab 00 status"]) == ("", "error"), rows["bob"]
    assert rows["bob"]["first failing check"].startswith("lab 00: not graded: OSError"), rows["bob"]
    assert rows["ann"]["lab 00 status"] == "ok"
    said = roster.hints([broken, fine])
    assert len(said) == 1 and "1 learner(s) (bob)" in said[0] and "libnvrtc.so.13" in said[0], said


@pytest.mark.parametrize("breaks, told", [
    ("import sys\nsys.modules['cuda.bindings'] = None\nfb.device.nvrtc_version()\n", "cu13"),   # the toolkit says
    ("import feedbeast_missing_part\n", "cu13,course")])                                           # the grader says
def test_a_python_without_the_course_s_wheels_is_told_the_command_once(tmp_path, breaks, told):
    """A grader whose Python lacks a package (the CUDA wheels of a library-only install): the setup error gives
    the command that installs it into that Python, once (the toolkit's own message is not wrapped in another)."""
    from feedbeast.course import grade as g
    from feedbeast.course import notebook as nbm
    from feedbeast.errors import install_command
    ROOT = Path(__file__).resolve().parents[1]
    sols = tmp_path / "solutions"
    sols.mkdir()
    sol = ROOT / "solutions/00-copy-kernel.ipynb"
    nbm.planted(sol, [("import feedbeast as fb\n", "import feedbeast as fb\n" + breaks)], to=sols / sol.name)
    mine = tmp_path / "labs" / sol.name
    mine.parent.mkdir()
    mine.write_bytes((ROOT / "labs" / sol.name).read_bytes())
    rep = g.grade(mine, solutions=sols, timeout=300)
    assert rep.setup.count(install_command(told)) == 1 and rep.setup.count(" -m pip install ") == 1, rep.setup
    assert rep.setup.endswith("then grade again"), rep.setup


def test_a_notebook_the_roster_did_not_grade_is_named_in_the_learners_row(tmp_path):
    """A second notebook of a lab (Jupyter's Duplicate) is refused by name on the screen and in the JSON, and in the
    CSV's last column too, where an instructor who reads only the CSV sees which file was not graded."""
    doc = {"learner": "cy", "labs": [_lab("00-copy-kernel", passed=3)],
           "refused": ["00-copy-kernel-Copy1.ipynb: another notebook of lab 00: not graded (the lab's notebook is "
                       "00-copy-kernel.ipynb)",
                       "lab 03: 2 notebooks (03-a.ipynb, 03-b.ipynb) and none named as the course names it: not graded; "
                       "keep one, named as in the course's labs/"]}
    row = _csv([doc], tmp_path)["cy"]
    assert row["first failing check"] == ("00-copy-kernel-Copy1.ipynb: another notebook of lab 00: not graded; lab 03: "
                                          "2 notebooks (03-a.ipynb, 03-b.ipynb) and none named as the course names it: "
                                          "not graded"), row


def _graded(cells, given=None):
    """A failed lab's report: `cells` is, per check cell, [(status, name), ...]; `given` what the lab as given passes."""
    lab = {"lab": "06", "status": "failed", "checks": [{"status": st, "name": n, "cell": i, "count": 1}
                                                      for i, cell in enumerate(cells) for st, n in cell],
           "cells": [{"passed": sum(st == "passed" for st, _ in cell), "failed": sum(st == "failed" for st, _ in cell),
                      "skipped": 0, "cut": False} for cell in cells]}
    if given is not None:
        lab["given_passed"] = given
    return lab


def test_what_the_lab_as_given_passes_earns_nothing_and_breaking_a_check_never_raises_a_score():
    """Lab 06 as given passes its register split and resource checks (an empty kernel meets them). Those passes earn
    a failed lab nothing; a failure of them counts as any failure; a learner's own passes count."""
    given = [["register split", "resources"], []]
    one_line = [[("failed", "sass"), ("passed", "register split"), ("passed", "resources")], [("failed", "numbers")]]
    assert roster.score(_graded(one_line)) == 33.3 and roster.score(_graded(one_line, given)) == 0.0
    # their own SASS right and the split broken: the SASS earns its share, the split's failure counts
    split = [[("passed", "sass"), ("failed", "register split"), ("passed", "resources")], [("failed", "numbers")]]
    assert roster.score(_graded(split, given)) == 25.0       # cell 1: 1 of 2 (resources off both), cell 2: 0
    # a check's failure that ends its cell early runs fewer checks: never above the honest wrong answer
    early = [[("failed", "sass")], [("passed", "numbers")]]
    honest = [[("failed", "sass"), ("passed", "register split"), ("passed", "resources")], [("passed", "numbers")]]
    assert roster.score(_graded(early, given)) == roster.score(_graded(honest, given)) == 50.0
    only_given = [[("passed", "register split"), ("passed", "resources")], [("failed", "numbers")]]
    assert roster.score(_graded(only_given, given)) == 0.0    # a cell with nothing of theirs is left out
    # no baseline (graded alone, an older JSON) or one of another version of the lab: scored without it
    assert roster.score(_graded(one_line, [["resources"]])) == roster.score(_graded(one_line)) == 33.3


def test_the_baseline_is_graded_once_a_cut_one_again_and_a_broken_one_loses_no_grade(monkeypatch, capsys):
    import argparse
    calls = []

    def fake(labs, solutions, timeout, hazards, device):
        assert device is None                 # no GPU named: the grading's environment stays as it is
        calls.append(list(labs))
        return {n: [["resources"], []] for n in labs if n != "04" or len(calls) > 1}   # 04 cut short the first time
    monkeypatch.setattr(roster, "given_baseline", fake)
    base = roster.baseline_of(argparse.Namespace(solutions="sols", timeout=60, hazards="off"), Slots([], 1))
    docs = [{"learner": "ann", "labs": [{**_graded([[("passed", "resources")], [("failed", "x")]]), "lab": n}
                                         for n in ("04", "06")]}]
    assert roster.with_baseline(docs, base) == ["04"] and calls == [["04", "06"]]
    assert "given_passed" not in docs[0]["labs"][0] and docs[0]["labs"][1]["given_passed"] == [["resources"], []]
    assert roster.with_baseline(docs, base) == [] and calls == [["04", "06"], ["04"]]     # 04 again, 06 kept
    assert roster.with_baseline(docs, base) == [] and len(calls) == 2
    assert "grading lab 04, 06 as given: the checks it passes earn a failed lab nothing" in capsys.readouterr().err

    def broken(labs):
        raise OSError("disk full")
    fresh = [{"learner": "bo", "labs": [_graded([[("passed", "resources")], [("failed", "x")]])]}]
    assert roster.with_baseline(fresh, broken) == ["06"] and "given_passed" not in fresh[0]["labs"][0]
    assert "grading the labs as given failed (OSError: disk full)" in capsys.readouterr().err
    assert roster.score(fresh[0]["labs"][0]) == 50.0


def test_a_baseline_whose_grading_hung_or_died_is_not_known():
    from feedbeast.course.grade import ended_early
    assert ended_early("check cell 2 (x) ran past 60 s (a hung kernel?)")
    assert ended_early("the check process ended before the checks did (exit status -9)\ntail")
    assert not ended_early("NameError: name 'ring' is not defined") and not ended_early("")


def test_a_notebook_graded_as_nothing_or_broken_by_its_own_cells_is_an_error_and_never_in_the_baseline(tmp_path):
    import pytest
    """The grader graded nothing of a notebook it could not read (exit 3, `refused`): the row says error, with no
    score, never the learner's 0; a merge ranks any real grade above it; a lab whose own cells broke here (`setup`)
    or that cannot be known here (None) is not graded as given again and again."""
    from feedbeast.course import roster_merge
    refused = {**_graded([[("failed", "notebook")]]), "refused": True, "sha256": "ab", "cells": []}
    assert roster.lab_status(refused) == "error"
    rows = _csv([{"learner": "bob", "labs": [refused]}], tmp_path)
    assert (rows["bob"]["lab 06"], rows["bob"]["lab 06 status"]) == ("", "error"), rows
    refused["error"] = "cannot read the notebook: NotJSONError: not a whole notebook"
    assert roster.first_failing({"labs": [refused]}) == "lab 06: not graded: cannot read the notebook: NotJSONError: " \
        "not a whole notebook"
    homes = tmp_path / "homes"
    (homes / "bob" / "feedbeast" / "labs").mkdir(parents=True)
    (tmp_path / "sols").mkdir()
    mp0 = pytest.MonkeyPatch()
    mp0.setattr(roster, "grade_learner", lambda name, *a, **k: {"learner": name, "exit": 3, "seconds": 0.0,
                                                                "labs": [refused]})
    try:        # a learner whose lab was graded as nothing: the roster's exit says not everyone was graded
        assert roster.main(["--homes", str(homes), "--solutions", str(tmp_path / "sols"), "--as-me",
                            "--csv", str(tmp_path / "r.csv")]) == 1
    finally:
        mp0.undo()
    ok = {**_graded([[("passed", "x")]]), "status": "ok", "sha256": "ab"}
    assert roster_merge._better(ok, refused) and not roster_merge._better(refused, ok)
    calls = []

    def fake(labs, *a):
        calls.append(list(labs))
        return {n: None for n in labs}       # e.g. the lab's own cells break on this machine
    import argparse
    base = roster.baseline_of(argparse.Namespace(solutions="s", timeout=1, hazards="off"))
    import pytest
    mp = pytest.MonkeyPatch()
    mp.setattr(roster, "given_baseline", fake)
    try:
        setup = {**_graded([[("failed", "x")]]), "lab": "10", "setup": "a CUDA library not found"}
        docs = [{"learner": "a", "labs": [_graded([[("failed", "x")]]), setup]}]
        assert roster.with_baseline(docs, base) == ["06"] and roster.with_baseline(docs, base) == ["06"]
        assert calls == [["06"]]          # once, and never the setup lab
    finally:
        mp.undo()


def test_a_lab_still_as_given_reads_not_started_and_scores_nothing(tmp_path):
    """An untouched lab's checks fail as a wrong answer's do; the roster says `not started` instead of `failed`,
    scores it 0 even where the lab as given passes checks, and names it as the first thing to look at."""
    given = {**_graded([[("passed", "resources")], [("failed", "numbers")]]), "untouched": True}
    tried = _graded([[("passed", "resources")], [("failed", "numbers")]])
    assert (roster.lab_status(given), roster.lab_status(tried)) == ("not started", "failed")
    rows = _csv([{"learner": "ann", "labs": [given]}, {"learner": "bo", "labs": [tried]}], tmp_path)
    assert (rows["ann"]["lab 06"], rows["ann"]["lab 06 status"]) == ("0.0", "not started"), rows
    assert (rows["bo"]["lab 06"], rows["bo"]["lab 06 status"]) == ("50.0", "failed"), rows
    assert rows["ann"]["first failing check"] == "lab 06: not started (its code is the lab's as given)", rows
    assert rows["bo"]["first failing check"] == "lab 06: numbers", rows
    view = roster.watch_lines({"ann": {"doc": {"learner": "ann", "labs": [given]}}})
    assert "06:not started" in view[0], view
    # a lab that broke in the grader is an error first: not started says the learner's part, not the machine's
    assert roster.lab_status({**given, "setup": "a CUDA library not found"}) == "error"


def test_a_lab_not_started_does_not_hide_a_later_lab_s_failure(tmp_path):
    """A learner who skipped lab 00 and broke lab 03: the row names lab 03's failure, the instructor's lead; a lab
    not started is named only where nothing else failed (the live view's line too)."""
    skipped = {**_graded([[("failed", "numbers")]]), "lab": "00", "untouched": True}
    broken = {**_graded([[("passed", "resources")], [("failed", "your %%cuda cell: CompileError")]]), "lab": "03"}
    fine = {**_graded([[("passed", "numbers")]]), "lab": "04", "status": "ok"}
    rows = _csv([{"learner": "cy", "labs": [skipped, broken]}, {"learner": "di", "labs": [skipped, fine]}], tmp_path)
    assert rows["cy"]["first failing check"] == "lab 03: your %%cuda cell: CompileError", rows
    assert rows["di"]["first failing check"] == "lab 00: not started (its code is the lab's as given)", rows
    view = roster.watch_lines({"cy": {"doc": {"learner": "cy", "labs": [skipped, broken]}}})
    assert view[0].endswith("lab 03: your %%cuda cell: CompileError"), view


def test_the_screen_line_of_a_learner_with_a_failed_lab_says_why(tmp_path, monkeypatch, capsys):
    """The roster's line per learner as graded: a failed lab's first failing check on the next line, so that the
    instructor watching the terminal sees what broke, not only `03 failed`; a learner with nothing failed gets none."""
    grader = tmp_path / "course" / "python"
    grader.parent.mkdir(parents=True)
    grader.write_text(GRADER.replace('"status": "ok"', '"status": "failed" if ' + IS_03 + ' else "ok"').replace(
        '"status": "passed", "name": "uid " + str(os.getuid())',
        '"status": "failed" if ' + IS_03 + ' else "passed", "name": "check cell 2"').replace(
        '"message": ""', '"message": "CompileError: lab.cu:77: expected a ;" if ' + IS_03 + ' else ""').format(
        python=sys.executable))
    grader.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(grader))
    homes = _homes(tmp_path, {"ada": ["00-copy-kernel.ipynb", "03-cp-async-rowsum.ipynb"], "bob": ["00-copy-kernel.ipynb"]})
    code, rows = _roster(tmp_path, homes, "--as-me")
    out = capsys.readouterr().out
    assert rows["ada"]["first failing check"].startswith("lab 03: check cell 2: CompileError"), rows
    ada = out[out.index("ada: "):].splitlines()
    assert ada[0].startswith("ada: 00 ok, 03 failed (") and ada[1].startswith("  lab 03: check cell 2: CompileError"), out
    bob = out[out.index("bob: "):].splitlines()
    assert bob[0].startswith("bob: 00 ok (") and not any(line.startswith("  lab") for line in bob[1:2]), out


def test_a_grades_file_is_replaced_whole_and_stays_private(tmp_path, monkeypatch):
    """The live view rewrites its CSV and JSON each round: a reader meets the last whole file or the new one, never
    a half-written one; a write that fails leaves the last file as it was, and no part file behind."""
    path = tmp_path / "live.json"
    roster.write_private(path, "[1]\n")
    assert path.read_text() == "[1]\n" and path.stat().st_mode & 0o777 == 0o600

    def broken(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(roster.os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        roster.write_private(path, "[1, 2")
    assert path.read_text() == "[1]\n" and sorted(p.name for p in tmp_path.iterdir()) == ["live.json"]
