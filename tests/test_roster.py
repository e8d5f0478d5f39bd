"""The roster's live view regrades only what changed, fast enough for a room of 30, and names who is stuck.

The grading itself is replaced by a recorder here (test_grade.py grades real learners through the roster):
what is tested is which notebooks a round regrades (a touched file whose content is the same is not
regraded), that a round over 30 learners with a few changes ends well within a minute, and what the view
and the CSV say about each learner.
"""
import csv
import os
import time
from pathlib import Path

from feedbeast.course import roster
from feedbeast.course.notebook import code, markdown, new


def _homes(tmp: Path, n: int) -> dict:
    found = {}
    for i in range(n):
        labs = tmp / f"learner{i:02d}" / "feedbeast" / "labs"
        labs.mkdir(parents=True)
        for lab in ("03", "04"):
            new([markdown("## Check"), code(f"x = {i}")], to=labs / f"{lab}-lab.ipynb")
        found[f"learner{i:02d}"] = labs
    return found


class Recorder:
    """Stands in for grade_learner: lab 04 fails for odd learners, the rest passes."""

    def __init__(self):
        self.calls = []

    def __call__(self, name, labs, wanted):
        self.calls.append((name, tuple(wanted)))
        odd = int(name[-2:]) % 2
        return {"learner": name, "exit": 1 if odd else 0, "labs": [
            {"lab": lab, "status": "failed" if (lab == "04" and odd) else "ok",
             "checks": [{"status": "failed", "name": "model (check_ring)", "message": "does not hold:\ntrace"}]
             if (lab == "04" and odd) else [{"status": "passed", "name": "x", "message": ""}]}
            for lab in wanted]}


def test_a_round_regrades_only_changed_notebooks_and_names_who_is_stuck(tmp_path):
    found = _homes(tmp_path, 30)
    state, rec = {}, Recorder()
    assert len(roster.watch_round(found, state, rec, jobs=4)) == 60
    rec.calls.clear()
    assert roster.watch_round(found, state, rec, jobs=4) == [] and rec.calls == []
    same = found["learner00"] / "03-lab.ipynb"              # saved again, same content: not regraded
    os.utime(same, ns=(time.time_ns(), time.time_ns() + 10**9))
    for who in ("learner07", "learner12"):                   # edited: regraded, that lab only
        new([markdown("## Check"), code("x = 'edited'")], to=found[who] / "04-lab.ipynb")
    t0 = time.time()
    graded = roster.watch_round(found, state, rec, jobs=4)
    assert sorted(graded) == ["learner07 04", "learner12 04"] and sorted(rec.calls) == [
        ("learner07", ("04",)), ("learner12", ("04",))], (graded, rec.calls)
    assert time.time() - t0 < 60
    lines = {ln.split()[0]: ln for ln in roster.watch_lines(state)}
    assert len(lines) == 30
    assert "03:ok 04:failed" in lines["learner07"] and "lab 04: model (check_ring): does not hold" in lines["learner07"]
    assert "lab 04" not in lines["learner12"] and "04:ok" in lines["learner12"]
    roster.write_csv([state[n]["doc"] for n in sorted(state)], tmp_path / "g.csv")
    rows = {r["username"]: r for r in csv.DictReader((tmp_path / "g.csv").open())}
    assert rows["learner07"]["first failing check"] == "lab 04: model (check_ring): does not hold: trace"
    assert rows["learner12"]["first failing check"] == "" and rows["learner12"]["labs ok"] == "2"


def test_a_learner_who_adds_a_lab_is_graded_for_that_lab_only(tmp_path):
    found = _homes(tmp_path, 2)
    state, rec = {}, Recorder()
    roster.watch_round(found, state, rec)
    rec.calls.clear()
    new([markdown("## Check"), code("x = 5")], to=found["learner01"] / "05-lab.ipynb")
    assert roster.watch_round(found, state, rec) == ["learner01 05"]
    assert [lab["lab"] for lab in state["learner01"]["doc"]["labs"]] == ["03", "04", "05"]


def test_the_first_failing_check_keeps_what_its_first_line_introduces():
    # A SassMismatch's first line ends in ':' and names nothing missing; the CSV column must carry the next line.
    from feedbeast.course.grade import gist
    msg = "SassMismatch: SASS of kernel copy_x2 for sm_75:\n  missing LDG.E.128, STG.E.128\n  most frequent: IMAD×9"
    doc = {"labs": [{"lab": "00", "checks": [{"status": "failed", "name": "SASS of kernel copy_x2", "message": msg}]}]}
    assert roster.first_failing(doc) == ("lab 00: SASS of kernel copy_x2: SassMismatch: SASS of kernel copy_x2 for "
                                         "sm_75: missing LDG.E.128, STG.E.128")
    assert gist("CheckFailed: x: FAILED: relative error 7e-01\n  at (0, 1): got 1") == \
        "CheckFailed: x: FAILED: relative error 7e-01"
    assert gist("a:\n" + "b" * 300) == ("a: " + "b" * 300)[:157] + "..." and gist("") == ""
    long = "your part is not written yet (lab.cu line 36): write it in place of each line " * 3
    cut = gist(long)
    assert len(cut) <= 160 and cut.endswith("...") and long.startswith(cut[:-3]), cut
    assert long[len(cut) - 3] == " ", cut           # cut at a word, and marked


def test_one_notebook_per_lab_is_graded_and_a_stray_copy_is_named_not_graded(tmp_path):
    """A backup beside a lab (01-....bak.ipynb sorts after it) once replaced the lab's grade in the CSV; now the
    notebook with the course's name is graded, or a lab's only notebook, and every other one is refused by name."""
    from feedbeast.course.roster import _copy_labs
    labs, dest = tmp_path / "labs", tmp_path / "dest"
    labs.mkdir()
    dest.mkdir()
    for name in ("01-tiled-transpose.ipynb", "01-tiled-transpose.bak.ipynb", "02-mine.ipynb", "03-a.ipynb", "03-b.ipynb",
                 "Untitled.ipynb", "Untitled1.ipynb"):
        (labs / name).write_text("{}")
    copies, refused = _copy_labs(labs, dest, None, names={"01-tiled-transpose.ipynb", "03-cp-async-rowsum.ipynb"})
    # a notebook with no NN- prefix is no lab's copy: graded alone, as before
    assert [c.name for c in copies] == ["01-tiled-transpose.ipynb", "02-mine.ipynb", "Untitled.ipynb", "Untitled1.ipynb"]
    assert any("01-tiled-transpose.bak.ipynb" in r and "lab's notebook is 01-tiled-transpose.ipynb" in r for r in refused), \
        refused
    assert any(r.startswith("lab 03: 2 notebooks (03-a.ipynb, 03-b.ipynb)") for r in refused), refused
    assert len(refused) == 2


def test_a_merged_row_with_an_ungraded_lab_keeps_the_grader_s_reason():
    from feedbeast.course import roster
    doc = {"learner": "cyd", "error": "the grader could not start as uid 1001: permission denied",
           "labs": [{"lab": "04", "status": "partial", "checks": [{"name": "c", "status": "passed"}]}]}
    assert roster.first_failing(doc) == doc["error"]


def test_the_roster_outside_a_checkout_says_how_to_name_the_course(tmp_path, monkeypatch, capsys):
    from feedbeast.course import roster
    home = tmp_path / "homes" / "ann" / "feedbeast" / "labs"
    home.mkdir(parents=True)
    (home / "00-copy-kernel.ipynb").write_text("{}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FEEDBEAST_COURSE", raising=False)
    assert roster.main(["--homes", str(tmp_path / "homes"), "--csv", str(tmp_path / "x.csv"), "--as-me"]) == 2
    err = capsys.readouterr().err
    assert "--solutions <checkout>/solutions" in err and "--course" not in err, err
    assert not (tmp_path / "x.csv").exists()
