"""What the roster refuses, and how it says so: a lab handed in and refused is an error (not missing), a notebook
of a number the course has no lab for makes no column, a learner's folder this account cannot read is an error row,
and a command line that names no learner (an empty --homes, a mistyped --subdir) or a learner's copy as the course
grades no one (exit 2).

Grading is replaced by a stand-in: the fake course Python of test_roster_grades.py (real copies, a fake grade), or
the recorder of test_roster.py (no grade at all).
"""
from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

from test_roster import _main, _room
from test_roster_grades import _csv, _grader, _homes, _lab, _roster

from feedbeast.course import roster


# ---- a lab handed in and refused; a lab the course has not ----------------------------------------------------

def test_a_lab_handed_in_and_refused_is_an_error_not_missing_and_the_exit_is_1(tmp_path, monkeypatch, capsys):
    """ann has two notebooks of lab 01, neither named as the course names it; cy's lab 01 is a link to ann's; dee
    handed in lab 01 twice and nothing else. Each lab 01 was handed in: `error` with no score, the row saying why,
    the exit 1 naming whose lab; bob handed in no lab 01: `missing`."""
    monkeypatch.setattr(sys, "executable", str(_grader(tmp_path / "course")))
    homes = _homes(tmp_path, {"ann": ["00-copy-kernel.ipynb", "01-mine.ipynb", "01-tiled-transpose-Copy1.ipynb"],
                              "bob": ["00-copy-kernel.ipynb"], "cy": ["00-copy-kernel.ipynb"],
                              "dee": ["01-a.ipynb", "01-b.ipynb"]})
    (homes / "cy" / "feedbeast" / "labs" / "01-tiled-transpose.ipynb").symlink_to(
        homes / "ann" / "feedbeast" / "labs" / "01-mine.ipynb")
    code, rows = _roster(tmp_path, homes, "--as-me")
    out, err = capsys.readouterr()
    assert code == 1, (out, err)
    for who in ("ann", "cy", "dee"):
        assert (rows[who]["lab 01"], rows[who]["lab 01 status"]) == ("", "error"), rows[who]
    assert (rows["bob"]["lab 01"], rows["bob"]["lab 01 status"]) == ("0.0", "missing"), rows["bob"]
    assert rows["ann"]["lab 00 status"] == "ok" and rows["ann"]["first failing check"] == (
        "lab 01: 2 notebooks (01-mine.ipynb, 01-tiled-transpose-Copy1.ipynb) and none named as the course names it: "
        "not graded"), rows["ann"]
    assert rows["cy"]["first failing check"] == "01-tiled-transpose.ipynb: not a regular file (a link?): not graded"
    assert "ann: 00 ok, 01 error (" in out and "  refused lab 01: 2 notebooks" in out, out
    assert "not every lab handed in was graded (3 learners: ann (lab 01), cy (lab 01), dee (lab 01)): their rows" \
        in err, err


def test_a_notebook_of_a_number_the_course_has_no_lab_for_makes_no_column(tmp_path, monkeypatch, capsys):
    """12-my-notes.ipynb once made a column `lab 12` for the whole room (everyone else 0, missing) and an error. The
    course has no lab 12 (its solutions/): refused as Untitled.ipynb is, a note in the row, no column; --labs 12 is
    refused before grading; an older JSON's lab 12 makes no column; the live view does not grade it."""
    monkeypatch.setattr(sys, "executable", str(_grader(tmp_path / "course")))
    homes = _homes(tmp_path, {"ada": ["00-copy-kernel.ipynb", "12-my-notes.ipynb"], "bob": ["00-copy-kernel.ipynb"]})
    code, rows = _roster(tmp_path, homes, "--as-me")
    assert code == 0 and [k for k in rows["bob"] if k.startswith("lab ")] == ["lab 00", "lab 00 status"], rows
    assert rows["ada"]["first failing check"] == "12-my-notes.ipynb: no lab 12 in the course: not graded", rows
    assert "refused 12-my-notes.ipynb: no lab 12 in the course: not graded; the course's labs are 00-10" in \
        capsys.readouterr().out
    code = roster.main(["--homes", str(homes), "--solutions", str(tmp_path / "sols"), "--labs", "12",
                        "--csv", str(tmp_path / "x.csv")])
    assert code == 2 and "no lab 12 in the course" in capsys.readouterr().err and not (tmp_path / "x.csv").exists()
    old = {"learner": "cy", "labs": [_lab("00-copy-kernel", passed=1), _lab("12-my-notes", passed=1)]}
    roster.write_csv([old], tmp_path / "o.csv", course={"00", "01"})
    assert next(csv.reader((tmp_path / "o.csv").open()))[1:3] == ["lab 00", "lab 00 status"]
    state, asked = {}, []
    roster.watch_round({"ada": homes / "ada" / "feedbeast" / "labs"}, state,
                       lambda name, labs, wanted: asked.append(wanted) or {"learner": name, "labs": []},
                       course={"00", "01"})
    assert asked == [["00"]], asked


def test_the_live_view_keeps_a_refused_lab_an_error_until_it_is_graded(tmp_path):
    """Round 1 grades lab 04; round 2 finds it refused (two notebooks): the earlier grade stands no more; round 3
    regrades lab 03 only: lab 04 is still an error, in the view and in the CSV, not missing."""
    labs = tmp_path / "ann" / "feedbeast" / "labs"
    labs.mkdir(parents=True)
    for name in ("03-a.ipynb", "04-b.ipynb"):
        (labs / name).write_text("{}")
    note = "lab 04: 2 notebooks (04-b.ipynb, 04-c.ipynb) and none named as the course names it: not graded"

    def grade(name, folder, wanted):
        refused = (folder / "04-c.ipynb").exists() and "04" in wanted
        return {"learner": name, "labs": [{"lab": n, "status": "ok", "checks": []} for n in wanted
                                          if not (refused and n == "04")],
                **({"ungraded": ["04"], "refused": [note]} if refused else {})}
    state = {}
    roster.watch_round({"ann": labs}, state, grade)
    assert "04:ok" in roster.watch_lines(state)[0]
    (labs / "04-c.ipynb").write_text("{}")
    assert roster.watch_round({"ann": labs}, state, grade) == ["ann 04"]
    assert "04:error" in roster.watch_lines(state)[0], roster.watch_lines(state)
    (labs / "03-a.ipynb").write_text('{"x": 1}')
    assert roster.watch_round({"ann": labs}, state, grade) == ["ann 03"]
    assert "03:ok 04:error" in roster.watch_lines(state)[0], roster.watch_lines(state)
    row = _csv([state["ann"]["doc"]], tmp_path)["ann"]
    assert (row["lab 04"], row["lab 04 status"]) == ("", "error") and note in row["first failing check"], row


def test_the_first_failing_check_cuts_a_long_reason_at_a_word_on_one_line():
    why = ("could not start the grader as uid 1001: [Errno 13] Permission denied:\n'/home/teacher/feedbeast/.venv/"
           "bin/python', a link to /root/.pyenv/versions/3.12.4/bin/python3.12 (the course's Python) " * 2)
    cut = roster.first_failing({"labs": [], "error": why})
    flat = " ".join(why.split())
    assert len(cut) <= 160 and cut.endswith("...") and flat.startswith(cut[:-3]) and "\n" not in cut, cut
    assert flat[len(cut) - 3] == " ", cut          # at a word, and marked


# ---- folders this account cannot read ---------------------------------------------------------------------

def _unreadable(monkeypatch, closed: Path, unlisted: Path) -> None:
    """As a hub leaves them to an account that is not root: nothing under `closed` (bob's feedbeast/, 0700) can be
    looked at, and `unlisted` (erin's labs/) cannot be listed."""
    stat, scandir = os.stat, os.scandir

    def no_stat(path, *a, **k):
        if isinstance(path, (str, os.PathLike)) and Path(path).is_relative_to(closed) and Path(path) != closed:
            raise PermissionError(13, "Permission denied", str(path))
        return stat(path, *a, **k)

    def no_list(path=".", *a):
        if isinstance(path, (str, os.PathLike)) and Path(path) == unlisted:
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path, *a)
    monkeypatch.setattr(os, "stat", no_stat)
    monkeypatch.setattr(os, "scandir", no_list)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)


def test_a_learner_s_folder_this_account_cannot_read_is_an_error_row_and_none_readable_grades_no_one(
        tmp_path, monkeypatch, capsys):
    """Run without root on hub-made folders: bob's feedbeast/ and erin's labs/ cannot be read. alice is graded,
    bob and erin get error rows that say which folder and what to do (exit 1); with only those two, nothing can be
    graded: exit 2. No traceback."""
    homes, sols, graded = _room(tmp_path, monkeypatch)
    _unreadable(monkeypatch, homes / "bob" / "feedbeast", homes / "erin" / "feedbeast" / "labs")
    g = tmp_path / "g.csv"
    assert _main(homes, sols, "--csv", str(g)) == 1
    out, err = capsys.readouterr()
    assert graded == ["alice"] and "Traceback" not in out + err
    assert (f"this account cannot read the folders of 2 learners ({homes / 'bob' / 'feedbeast'}, "
            f"{homes / 'erin' / 'feedbeast' / 'labs'}): their rows say error; run the roster as root (sudo), or with "
            "--only for the learners this account can read") in err, err
    assert "no row for zed" in err and "bob" not in err.split("no row for")[1].split("\n")[0], err
    rows = {r["username"]: r for r in csv.DictReader(g.open())}
    assert (rows["alice"]["lab 04"], rows["alice"]["lab 04 status"]) == ("100.0", "ok"), rows
    for who, folder in (("bob", homes / "bob" / "feedbeast"), ("erin", homes / "erin" / "feedbeast" / "labs")):
        assert (rows[who]["lab 04"], rows[who]["lab 04 status"]) == ("", "error"), rows[who]
        assert rows[who]["first failing check"] == f"this account cannot read {folder}: run the roster as root " \
            "(sudo)", rows[who]
    assert "not every lab handed in was graded (2 learners: bob (lab 04), erin (lab 04))" in err, err
    assert _main(homes, sols, "--csv", str(g), "--only", "bob", "erin") == 2
    err = capsys.readouterr().err
    assert f"this account cannot read the learners' folders ({homes / 'bob' / 'feedbeast'}, " in err, err
    assert err.rstrip().endswith("; nothing was graded") and graded == ["alice"], err


# ---- a command line that grades no one -------------------------------------------------------------------

def test_a_subdir_no_learner_has_or_an_empty_homes_is_a_command_line_problem(tmp_path, monkeypatch, capsys):
    """--subdir feedbeast/lab (a typo) once printed `no row for alice, bob, ...` and exited 1: it is the command
    line that is wrong. Said on stderr with the --subdir the folders do hold, where one is evident; exit 2."""
    homes, sols, graded = _room(tmp_path, monkeypatch)
    g = tmp_path / "g.csv"
    assert _main(homes, sols, "--csv", str(g), "--subdir", "feedbeast/lab") == 2
    out, err = capsys.readouterr()
    assert out == "" and "no row for" not in err, (out, err)
    assert f"roster: no folder under {homes} holds feedbeast/lab (of 4 folders): they hold feedbeast/labs: give " \
        "--subdir feedbeast/labs; nothing was graded" in err, err
    submitted = tmp_path / "submitted"              # labs handed in by hand: a folder per learner and lab
    (submitted / "ann" / "lab04").mkdir(parents=True)
    assert _main(submitted, sols, "--csv", str(g), "--subdir", "lab4") == 2
    assert "they hold lab04: give --subdir lab04" in capsys.readouterr().err
    assert _main(submitted, sols, "--csv", str(g), "--subdir", "work/labs") == 2
    assert "the default --subdir feedbeast/labs is where the workshop puts each" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert _main(tmp_path / "empty", sols, "--csv", str(g)) == 2
    assert f"--homes {tmp_path / 'empty'} holds no folder: give the folder that holds one folder per learner" in \
        capsys.readouterr().err
    assert graded == [] and not g.exists()


def test_a_roster_run_from_inside_a_learner_s_copy_grades_no_one(tmp_path, monkeypatch, capsys):
    """cd ~frank/feedbeast, then the roster: the course found is frank's copy, which frank can edit. Refused before
    grading, naming the ways to point at the instructor's checkout; FEEDBEAST_COURSE then grades."""
    homes, sols, graded = _room(tmp_path, monkeypatch)
    copy = homes / "frank" / "feedbeast"
    for folder in ("chapters", "solutions", "labs"):
        (copy / folder).mkdir(parents=True)
    (copy / "solutions" / "04-mbarrier-ring.ipynb").write_text("{}")
    monkeypatch.chdir(copy)
    monkeypatch.delenv("FEEDBEAST_COURSE", raising=False)
    g = tmp_path / "g.csv"
    assert roster.main(["--homes", str(homes), "--csv", str(g), "--as-me"]) == 2
    err = capsys.readouterr().err
    assert f"the course found, {copy.resolve()}, lies under --homes {homes}: it is a learner's copy" in err, err
    assert "--solutions <checkout>/solutions (or set FEEDBEAST_COURSE=<checkout>); nothing was graded" in err, err
    assert graded == [] and not g.exists()
    assert roster.main(["--homes", str(homes), "--csv", str(g), "--as-me", "--solutions", str(copy / "solutions")]) == 2
    (sols.parent / "chapters").mkdir()
    monkeypatch.setenv("FEEDBEAST_COURSE", str(sols.parent))
    assert roster.main(["--homes", str(homes), "--csv", str(g), "--as-me"]) == 0
    assert "frank" in graded
