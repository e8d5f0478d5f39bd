"""The roster's live view regrades only what changed, fast enough for a room of 30, and names who is stuck.

The grading itself is replaced by a recorder here (test_grade.py grades real learners through the roster):
what is tested is which notebooks a round regrades (a touched file whose content is the same is not
regraded), that a round over 30 learners with a few changes ends well within a minute, and what the view
and the CSV say about each learner.
"""
import csv
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from feedbeast.course import gpu_devices, roster
from feedbeast.course import grade as grade_module
from feedbeast.course.notebook import code, markdown, new

ROOT = Path(__file__).resolve().parents[1]


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
    new([markdown("## Check")], to=found["learner01"] / "Untitled.ipynb")      # File > New: no lab, not graded
    assert roster.watch_round(found, state, rec) == ["learner01 05"]
    assert [lab["lab"] for lab in state["learner01"]["doc"]["labs"]] == ["03", "04", "05"]


def test_a_note_about_a_lab_not_regraded_stands_after_a_round_that_regrades_another(tmp_path):
    """carol's second notebook of lab 04 is named in round 1; round 2 regrades only her lab 03: the note stays
    (it had vanished from the CSV); a note about lab 03 itself comes from the new grade only."""
    found = _homes(tmp_path, 1)
    state, rounds = {}, []

    def grade(name, labs, wanted):   # round 1 finds a second notebook of each lab; round 2 none of lab 03's
        notes = {"03": ["03-lab-Copy1.ipynb: another notebook of lab 03: not graded"],
                 "04": ["lab 04: 2 notebooks (04-a.ipynb, 04-b.ipynb) and none named as the course names it"]}
        return {"learner": name, "labs": [{"lab": lab, "status": "ok", "checks": []} for lab in wanted],
                "refused": ["Untitled.ipynb: not a lab"] + [n for lab in wanted for n in notes[lab]
                                                            if len(rounds) == 1 or lab == "04"]}
    rounds.append(1)
    roster.watch_round(found, state, grade)
    assert "03-lab-Copy1.ipynb: another notebook of lab 03: not graded" in state["learner00"]["doc"]["refused"]
    rounds.append(2)
    new([markdown("## Check"), code("x = 'edited'")], to=found["learner00"] / "03-lab.ipynb")
    assert roster.watch_round(found, state, grade) == ["learner00 03"]
    assert state["learner00"]["doc"]["refused"] == [
        "lab 04: 2 notebooks (04-a.ipynb, 04-b.ipynb) and none named as the course names it",
        "Untitled.ipynb: not a lab"]
    new([markdown("## Check"), code("x = 2")], to=found["learner00"] / "04-lab-Copy1.ipynb")
    assert roster.watch_round(found, state, grade) == ["learner00 04"]
    (found["learner00"] / "04-lab-Copy1.ipynb").unlink()       # a second notebook removed: its lab is graded again
    assert roster.watch_round(found, state, grade) == ["learner00 04"]
    (found["learner00"] / "04-lab.ipynb").unlink()             # the lab's only notebook removed: no grade stands
    assert roster.watch_round(found, state, grade) == []
    assert [lab["lab"] for lab in state["learner00"]["doc"]["labs"]] == ["03"]


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
    # a notebook with no NN- prefix is no lab of the course: not graded, named as not a lab
    assert [c.name for c in copies] == ["01-tiled-transpose.ipynb", "02-mine.ipynb"]
    assert any("01-tiled-transpose.bak.ipynb" in r and "lab's notebook is 01-tiled-transpose.ipynb" in r for r in refused), \
        refused
    assert any(r.startswith("lab 03: 2 notebooks (03-a.ipynb, 03-b.ipynb)") for r in refused), refused
    assert [r.split(":")[0] for r in refused if "not a lab" in r] == ["Untitled.ipynb", "Untitled1.ipynb"], refused
    assert len(refused) == 4


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


# ---- the command line: what it refuses before grading, and grades it keeps ------------------------------------

def _room(tmp: Path, monkeypatch) -> tuple[Path, Path, list]:
    """Learners alice, bob, erin with lab 04, zed's folder without a course copy, a course with labs 00 and 04;
    grading replaced by a stand-in that records whom it grades."""
    homes, sols = tmp / "homes", tmp / "course" / "solutions"
    for name in ("alice", "bob", "erin"):
        (homes / name / "feedbeast" / "labs").mkdir(parents=True)
        (homes / name / "feedbeast" / "labs" / "04-mbarrier-ring.ipynb").write_text("{}")
    (homes / "zed").mkdir()
    sols.mkdir(parents=True)
    for lab in ("00-copy-kernel", "04-mbarrier-ring"):
        (sols / f"{lab}.ipynb").write_text("{}")
    graded = []

    def grade(name, labs, wanted=None, *a, **k):
        graded.append(name)
        return {"learner": name, "exit": 0, "seconds": 0.0, "labs": [
            {"lab": "04", "status": "ok", "checks": [{"status": "passed", "name": "x", "count": 1}]}]}
    monkeypatch.setattr(roster, "grade_learner", grade)
    return homes, sols, graded


def _main(homes, sols, *args) -> int:
    return roster.main(["--homes", str(homes), "--solutions", str(sols), "--as-me", *args])


def test_an_output_folder_that_is_not_there_is_said_before_anyone_is_graded(tmp_path, monkeypatch, capsys):
    homes, sols, graded = _room(tmp_path, monkeypatch)
    out = tmp_path / "grades"
    assert _main(homes, sols, "--csv", str(out / "g.csv")) == 2
    err = capsys.readouterr().err
    assert f"the folder {out} does not exist: create it first (install -d -m 700 {out}:" in err, err
    assert graded == [] and "Traceback" not in err
    out.mkdir()
    assert _main(homes, sols, "--csv", str(out / "g.csv"), "--json", str(tmp_path / "no" / "g.json")) == 2
    assert f"--json {tmp_path / 'no' / 'g.json'}: the folder" in capsys.readouterr().err and graded == []
    # not root, and the folder above not this user's: root makes it and hands it over, or the next run cannot write
    monkeypatch.setattr(roster.os, "geteuid", lambda: 12345)
    monkeypatch.setattr(roster.os, "access", lambda path, mode: False)
    monkeypatch.setattr(roster.pwd, "getpwuid", lambda uid: type("pw", (), {"pw_name": "teacher"}))
    assert "create it first (sudo install -d -m 700 -o teacher " in roster.output_problem(
        "--csv", str(tmp_path / "none" / "g.csv"))


def test_a_second_run_keeps_the_first_runs_grades(tmp_path, monkeypatch, capsys):
    homes, sols, _ = _room(tmp_path, monkeypatch)
    csv_, json_ = tmp_path / "grades.csv", tmp_path / "grades.json"
    assert _main(homes, sols, "--csv", str(csv_), "--json", str(json_)) == 0
    first = csv_.read_text(), json_.read_text()
    csv_.write_text(first[0] + "a grade the LMS already has\n")
    for _ in range(2):
        assert _main(homes, sols, "--csv", str(csv_), "--json", str(json_)) == 0
    kept = sorted(tmp_path.glob("grades.*.csv"))
    assert len(kept) == 2 and len(list(tmp_path.glob("grades.*.json"))) == 2, kept
    assert "a grade the LMS already has" in kept[0].read_text() + kept[1].read_text()
    assert csv_.read_text() == first[0] and json_.read_text() == first[1]
    out = capsys.readouterr().out
    assert all(f"kept the previous {p.name.split('.')[0]}.{p.suffix[1:]} as {p}" in out for p in kept), out


def test_what_the_command_line_names_wrong_is_said_with_what_to_do(tmp_path, monkeypatch, capsys):
    homes, sols, graded = _room(tmp_path, monkeypatch)
    g = str(tmp_path / "g.csv")
    assert _main(tmp_path / "nowhere", sols, "--csv", g) == 2
    assert "--homes" in (err := capsys.readouterr().err) and "is not a folder" in err and "Traceback" not in err
    assert _main(homes, sols, "--csv", g, "--only", "alcie") == 2
    assert f"no learner alcie under {homes}: did you mean alice?" in (err := capsys.readouterr().err), err
    assert "no learner folder with" not in err
    assert _main(homes, sols, "--csv", g, "--only", "erin", "alcie") == 2          # not graded without alcie
    assert "no learner alcie" in capsys.readouterr().err and graded == []
    assert _main(homes, sols, "--csv", g, "--only", "xavier") == 2
    assert "the learners there are alice, bob, erin" in capsys.readouterr().err
    assert _main(homes, sols, "--csv", g, "--only", "zed") == 2
    assert f"zed has no feedbeast/labs in {homes / 'zed'}" in capsys.readouterr().err
    assert _main(homes, sols, "--csv", g, "--labs", "99") == 2
    assert "no lab 99 in the course" in (err := capsys.readouterr().err) and \
        "the labs are 00-copy-kernel.ipynb, 04-mbarrier-ring.ipynb" in err, err
    assert graded == [] and not Path(g).exists()
    assert _main(homes, sols, "--csv", g, "--labs", "4") == 0
    assert "no row for zed: no feedbeast/labs in their folder" in capsys.readouterr().err
    assert graded == ["alice", "bob", "erin"]


def test_a_learners_folder_for_homes_a_count_of_jobs_below_one_and_a_gpu_named_twice_are_refused(
        tmp_path, monkeypatch, capsys):
    """What grades nobody, or grades wrong, is refused before anyone is graded, with what to give instead."""
    homes, sols, graded = _room(tmp_path, monkeypatch)
    g = str(tmp_path / "g.csv")
    assert _main(homes / "alice", sols, "--csv", g) == 2
    err = capsys.readouterr().err
    assert f"--homes {homes / 'alice'} is one learner's folder (it holds feedbeast/labs): give the folder that holds " \
        f"one folder per learner, {homes} here (and --only alice for that learner alone)" in err, err
    for jobs in ("0", "-3", "two"):
        with pytest.raises(SystemExit) as e:
            _main(homes, sols, "--csv", g, "--jobs", jobs)
        assert e.value.code == 2 and "a whole number from 1" in capsys.readouterr().err
    monkeypatch.setattr(gpu_devices, "_listing", lambda: "")        # nvidia-smi lists nothing: still said
    assert _main(homes, sols, "--csv", g, "--gpus", "0,0") == 2
    assert "--gpus: 0 and 0 are the same device: name each device once; nothing was graded" in capsys.readouterr().err
    assert graded == [] and not Path(g).exists()
    # a device that cannot be checked, and no GPU in reach: not then said to be graded "on GPU 7"
    assert _main(homes, sols, "--csv", g, "--gpus", "7") == 0
    err = capsys.readouterr().err
    assert "--gpus: 7 not checked" in err and "no GPU in reach here" in err and "on GPU 7" not in err, err


def test_a_notebook_that_is_no_notebook_is_an_error_row_that_says_what_to_do_and_why_the_exit_is_1(tmp_path, capsys):
    """The real grader on a learner's lab cut short: the row says error, and what the learner does to get their lab
    back, on one line without the file's text; the run ends saying why it exits 1."""
    homes = tmp_path / "homes"
    labs = homes / "ann" / "feedbeast" / "labs"
    labs.mkdir(parents=True)
    (labs / "01-tiled-transpose.ipynb").write_text('{"cells": [\n')
    assert roster.main(["--homes", str(homes), "--solutions", str(ROOT / "solutions"), "--as-me", "--labs", "1",
                        "--csv", str(tmp_path / "g.csv")]) == 1
    out, err = capsys.readouterr()
    row = next(csv.DictReader((tmp_path / "g.csv").open()))
    why = row["first failing check"]
    assert row["lab 01 status"] == "error" and "\\n" not in why and "NotJSONError" not in why, row
    assert why.startswith("lab 01: not graded: cannot read the notebook: ann's 01-tiled-transpose.ipynb is not a "
                          "whole notebook (JSON cut short or edited by hand? it breaks at line 2"), why
    assert why.endswith("or starts again with make reset-labs LAB=01 in their course folder (which keeps this file "
                        "in labs/backup/)") and why in out, (why, out)
    assert "roster: exit 1: not every lab handed in was graded (1 learner: ann (lab 01)): their rows in" in err, err


def test_the_summary_says_error_where_the_csv_does(tmp_path, monkeypatch, capsys):
    """A lab whose own cells broke in the grader (setup) is left ungraded: the CSV says error, and so must the
    lines the roster prints (and the live view's), not the grader's failed, which reads as the learner's fault."""
    homes, sols, _ = _room(tmp_path, monkeypatch)
    broken = {"lab": "04", "status": "failed", "setup": "OSError: libnvrtc.so.13 not found", "checks": []}
    monkeypatch.setattr(roster, "grade_learner", lambda name, *a, **k: {
        "learner": name, "exit": 1, "seconds": 0.0, "labs": [broken]})
    assert _main(homes, sols, "--csv", str(tmp_path / "g.csv")) == 1
    out = capsys.readouterr().out
    assert "alice: 04 error (0 s)" in out and "failed" not in out, out
    rows = {r["username"]: r for r in csv.DictReader((tmp_path / "g.csv").open())}
    assert rows["alice"]["lab 04 status"] == "error", rows
    view = roster.watch_lines({"alice": {"doc": {"learner": "alice", "labs": [broken]}}})
    assert "04:error" in view[0] and "failed" not in view[0], view


def test_the_copy_a_roster_grades_keeps_the_time_the_learner_saved_it(tmp_path):
    """A failed grade says when the file it read was saved; the roster grades a copy, which took the time of the
    copy: every learner was told they saved "just now"."""
    import os
    labs, dest = tmp_path / "labs", tmp_path / "dest"
    labs.mkdir()
    dest.mkdir()
    nb = labs / "04-mbarrier-ring.ipynb"
    nb.write_text("{}")
    os.utime(nb, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    copies, refused = roster._copy_labs(labs, dest, None, names=("04-mbarrier-ring.ipynb",))
    assert copies == [dest / nb.name] and not refused
    assert copies[0].stat().st_mtime_ns == 1_700_000_000_000_000_000


def test_the_csv_quotes_no_formula_a_learner_named(tmp_path):
    """The CSV's last column quotes the names of notebooks a learner made; a name that starts with = (or +, -, @)
    would be a formula in the spreadsheet the instructor opens it with. Such a cell gets a leading '; the lab's
    scores stay numbers."""
    doc = {"learner": "frank", "labs": [{"lab": "00", "status": "ok", "checks": [
        {"status": "passed", "name": "copy", "message": ""}]}],
        "refused": ['=HYPERLINK("http://x","y").ipynb: not a lab (no NN- number in its name): not graded']}
    roster.write_csv([doc], tmp_path / "g.csv")
    assert (tmp_path / "g.csv").stat().st_mode & 0o777 == 0o600      # the room's grades: the owner's alone
    rows = list(csv.DictReader((tmp_path / "g.csv").open()))
    assert rows[0]["first failing check"].startswith("'=HYPERLINK("), rows
    assert rows[0]["lab 00"] == "100.0" and rows[0]["username"] == "frank", rows
    assert [roster.spreadsheet_safe(x) for x in ("+1", "-x", "@a", "\tb", "lab 04: x", 3, -1.5)] == \
        ["'+1", "'-x", "'@a", "'\tb", "lab 04: x", 3, -1.5]


def test_the_gradings_are_spread_over_the_gpus_each_on_its_own(tmp_path, monkeypatch, capsys):
    """--jobs 4 on a server of two GPUs: each grading's process sees one GPU (CUDA_VISIBLE_DEVICES), two gradings
    on each at most at once, and the roster's lines say which GPU graded whom."""
    import threading
    homes, sols, _ = _room(tmp_path, monkeypatch)
    for name in ("dan", "fay", "gus"):
        (homes / name / "feedbeast" / "labs").mkdir(parents=True)
        (homes / name / "feedbeast" / "labs" / "04-mbarrier-ring.ipynb").write_text("{}")
    seen, running, lock, worst = [], {}, threading.Lock(), {}

    def grade(name, labs, wanted=None, *a, device=None, **k):
        with lock:
            running[device] = running.get(device, 0) + 1
            worst[device] = max(worst.get(device, 0), running[device])
            seen.append((name, device))
        time.sleep(0.05)
        with lock:
            running[device] -= 1
        return {"learner": name, "exit": 0, "seconds": 1.0, "device": device, "labs": [
            {"lab": "04", "status": "ok", "checks": [{"status": "passed", "name": "x", "count": 1}]}]}
    monkeypatch.setattr(roster, "grade_learner", grade)
    monkeypatch.setattr(gpu_devices, "_listing", lambda: "GPU 0: NVIDIA H200 (UUID: GPU-a)\nGPU 1: NVIDIA H200 (UUID: GPU-b)\n")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert _main(homes, sols, "--csv", str(tmp_path / "g.csv"), "--jobs", "4") == 0
    # both GPUs take gradings, never more than 2 at once each (which learner lands where depends on who ends first)
    assert {d for _, d in seen} == {"0", "1"} and len(seen) == 6, seen
    assert max(worst.values()) <= 2, worst
    out = capsys.readouterr()
    assert "4 gradings at once on GPU 0, 1 (from nvidia-smi -L) (2 at most on each)" in out.err, out.err
    assert any(line.startswith("alice: 04 ok (GPU ") for line in out.out.splitlines()), out.out
    # CUDA_VISIBLE_DEVICES set for the roster: only those; --gpus names its own; a GPU the server lacks is refused
    seen.clear()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert _main(homes, sols, "--csv", str(tmp_path / "g.csv"), "--jobs", "2") == 0
    assert {d for _, d in seen} == {"1"}, seen
    assert "2 gradings at once on GPU 1 (from CUDA_VISIBLE_DEVICES)" in capsys.readouterr().err
    seen.clear()
    monkeypatch.setattr(grade_module, "_has_gpu", lambda: False)     # this process sees none; the gradings see GPU 0
    assert _main(homes, sols, "--csv", str(tmp_path / "g.csv"), "--gpus", "0") == 0
    assert {d for _, d in seen} == {"0"}, seen
    assert "no GPU in reach" not in capsys.readouterr().err
    seen.clear()
    assert _main(homes, sols, "--csv", str(tmp_path / "g.csv"), "--gpus", "GPU-b") == 0     # a UUID, as CUDA takes it
    assert {d for _, d in seen} == {"GPU-b"}, seen
    capsys.readouterr()
    seen.clear()
    # each entry must name one device here: CUDA hides the one it cannot match and every device after it
    refused = {"0,7": "--gpus: 7 names no single device here; this server's are 0 (GPU-a), 1 (GPU-b) (nvidia-smi -L)",
               "GPU-": "--gpus: GPU- names no single device here; this server's are 0 (GPU-a), 1 (GPU-b)",
               "GPU-c": "--gpus: GPU-c names no single device here",
               "cuda:0": "--gpus: 'cuda:0' is not a GPU as CUDA_VISIBLE_DEVICES names one",
               "": "--gpus names no GPU", ",": "--gpus names no GPU",
               "1,GPU-b": "--gpus: 1 and GPU-b are the same device: name each device once",
               "0,0": "--gpus: 0 and 0 are the same device"}
    for value, why in refused.items():
        assert _main(homes, sols, "--csv", str(tmp_path / "g.csv"), "--gpus", value) == 2, value
        err = capsys.readouterr().err
        assert why in err and "nothing was graded" in err and seen == [], (value, err)
    for hidden in ("-1", "1,-1,0"):                          # CUDA's way to hide GPUs: those before -1 are kept
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert gpu_devices.in_reach() == ([] if hidden == "-1" else ["1"], "CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")      # the roster's own environment is checked as well
    assert _main(homes, sols, "--csv", str(tmp_path / "g.csv")) == 2
    assert "CUDA_VISIBLE_DEVICES: 3 names no single device here" in capsys.readouterr().err and seen == []
    # no nvidia-smi: a device named by --gpus cannot be compared with anything, and the roster says so once
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setattr(gpu_devices, "_listing", lambda: "")
    assert _main(homes, sols, "--csv", str(tmp_path / "g.csv"), "--gpus", "7") == 0
    err = capsys.readouterr().err
    assert "roster: note: --gpus: 7 not checked: nvidia-smi -L lists no device here" in err, err
    assert "no GPU in reach" in err and {d for _, d in seen} == {"7"}, (err, seen)   # what follows if there is none


def test_a_job_on_a_gpu_gets_that_gpu_alone(tmp_path, monkeypatch):
    """The grader's process is started with CUDA_VISIBLE_DEVICES set to the slot's GPU, and its report says it."""
    labs = tmp_path / "labs"
    labs.mkdir()
    (labs / "04-mbarrier-ring.ipynb").write_text("{}")
    sols = tmp_path / "solutions"
    sols.mkdir()
    (sols / "04-mbarrier-ring.ipynb").write_text("{}")
    envs = []

    orders = []

    def run(cmd, env=None, **k):
        envs.append(env.get("CUDA_VISIBLE_DEVICES"))
        orders.append(env.get("CUDA_DEVICE_ORDER"))
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps({"exit": 0, "labs": []}), stderr="")
    monkeypatch.setattr(roster.subprocess, "run", run)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    doc = roster.grade_learner("alice", labs, solutions=sols, as_owner=False, device="MIG-1111")
    assert envs == ["MIG-1111"] and doc["device"] == "MIG-1111", (envs, doc)
    assert orders == ["PCI_BUS_ID"]        # index 1 is nvidia-smi's GPU 1, not CUDA's second fastest
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert "device" not in roster.grade_learner("alice", labs, solutions=sols, as_owner=False) and envs[-1] == "3"
