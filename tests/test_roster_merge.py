"""A room on several servers: `roster merge` makes one CSV from each server's roster --json file.

Learners here are the roster's own JSON documents (grade.Report.to_dict for each lab), written to files as
`roster --json` writes them; what is tested is which grade the merge keeps for a learner found on two servers,
that nothing is lost for a learner found on one, and that bad input is refused with what to do, writing nothing.
"""
import csv
import json
from pathlib import Path

from feedbeast.course import roster, roster_merge
from feedbeast.course.__main__ import main as cli
from feedbeast.course.grade import Outcome, Report, gist


def _lab(name: str, passed: int = 0, failed: int = 0, skipped: int = 0) -> dict:
    outcomes = ([Outcome("passed", "check", count=passed)] if passed else []) + \
               ([Outcome("failed", "check_ring", "does not hold", count=failed)] if failed else []) + \
               ([Outcome("skipped", "launch", "needs a GPU, this machine has none", count=skipped)] if skipped else [])
    return Report(path=f"{name}.ipynb", outcomes=outcomes).to_dict()


def _write(path: Path, docs: list) -> Path:
    path.write_text(json.dumps(docs, indent=1) + "\n")
    return path


def _rows(path: Path) -> dict:
    return {r["username"]: r for r in csv.DictReader(path.open())}


def _room(tmp_path: Path) -> tuple[Path, Path]:
    """alice moved from server a to server b: lab 03 failed on a and passed on b, lab 04 only on a; bob is on a
    only; carol's grader could not start on a (her lab 05 handed in, not graded) and graded her lab 05 on b."""
    a = _write(tmp_path / "a.json", [
        {"learner": "alice", "labs": [_lab("03-cp-async-rowsum", passed=2, failed=1),
                                      _lab("04-mbarrier-ring", passed=3)]},
        {"learner": "bob", "labs": [_lab("03-cp-async-rowsum", passed=3, skipped=2)]},
        {"learner": "carol", "labs": [], "ungraded": ["05"], "error": "could not start the grader as uid 1003"},
    ])
    b = _write(tmp_path / "b.json", [
        {"learner": "alice", "labs": [_lab("03-cp-async-rowsum", passed=3)]},
        {"learner": "carol", "labs": [_lab("05-tma-ring", passed=1, failed=1)]},
    ])
    return a, b


def test_the_best_grade_of_each_lab_is_kept_and_names_its_server(tmp_path, capsys):
    a, b = _room(tmp_path)
    out, js = tmp_path / "room.csv", tmp_path / "room.json"
    assert cli(["roster", "merge", "--csv", str(out), "--json", str(js), str(a), str(b)]) == 0
    rows = _rows(out)
    assert list(rows) == ["alice", "bob", "carol"]
    assert (rows["alice"]["lab 03"], rows["alice"]["lab 03 status"]) == ("100.0", "ok")      # b's, not a's 66.7
    assert (rows["alice"]["lab 04"], rows["alice"]["lab 04 status"]) == ("100.0", "ok")      # only on a
    assert rows["alice"]["labs ok"] == "2" and rows["alice"]["first failing check"] == ""
    assert (rows["bob"]["lab 03 status"], rows["bob"]["lab 04 status"]) == ("partial", "missing")
    assert (rows["carol"]["lab 05"], rows["carol"]["lab 05 status"]) == ("50.0", "failed")   # graded on b wins
    assert rows["carol"]["first failing check"].startswith("lab 05: check_ring")
    merged = {d["learner"]: d for d in json.loads(js.read_text())}
    assert {lab["lab"]: lab["server"] for lab in merged["alice"]["labs"]} == {"03": str(b), "04": str(a)}
    assert merged["carol"]["ungraded"] == [] and "error" not in merged["carol"]           # lab 05 graded on b
    assert merged["carol"]["errors"] == [f"{a}: could not start the grader as uid 1003"]     # a's reason, recorded
    said = capsys.readouterr().out
    assert f"alice: in {a}, {b}; kept lab 03 from {b}, lab 04 from {a}" in said
    assert "bob:" not in said and f"wrote {out} and {js}: 3 learners from 2 files" in said


def test_a_server_s_notes_on_notebooks_it_did_not_grade_stay_in_the_merged_row(tmp_path):
    """dave's lab 04, saved as 4-mbarrier-ring.ipynb, was not graded on a: the merged row says so, named by its
    server, as a's own row did (it had read `0, missing` with no word of the notebook handed in)."""
    why = "4-mbarrier-ring.ipynb: not a lab (no NN- number in its name): not graded"
    a = _write(tmp_path / "a.json", [{"learner": "dave", "labs": [_lab("03-cp-async-rowsum", passed=3)],
                                      "refused": [why]}])
    b = _write(tmp_path / "b.json", [{"learner": "dave", "labs": [_lab("03-cp-async-rowsum", passed=3)]}])
    out, js = tmp_path / "room.csv", tmp_path / "room.json"
    assert cli(["roster", "merge", "--csv", str(out), "--json", str(js), str(a), str(b)]) == 0
    assert f"{a}: {why}" in _rows(out)["dave"]["first failing check"]
    assert json.loads(js.read_text())[0]["refused"] == [f"{a}: {why}"]
    # merged again: the note keeps its server's name, once; a note about a lab another server graded is dropped
    c = _write(tmp_path / "c.json", [{"learner": "dave", "labs": [_lab("04-mbarrier-ring", passed=3)]}])
    a2 = _write(tmp_path / "a2.json", [{"learner": "dave", "labs": [], "refused": [
        "lab 04: 2 notebooks (04-a.ipynb, 04-b.ipynb) and none named as the course names it: not graded"]}])
    again = tmp_path / "again.json"
    assert cli(["roster", "merge", "--csv", str(tmp_path / "again.csv"), "--json", str(again), str(js), str(c),
                 str(a2)]) == 0
    assert json.loads(again.read_text())[0]["refused"] == [f"{a}: {why}"]


def test_a_second_notebook_of_a_graded_lab_stays_named_and_a_note_two_servers_made_is_said_once(tmp_path):
    """frank worked in 00-copy-kernel-Copy1.ipynb; the lab's own notebook was graded. The note that his copy was not
    graded is where an instructor finds his work: the merge once dropped it, since lab 00 was graded. erin's note,
    made alike by two servers that both saw her folder, is one note naming both."""
    copy = "00-copy-kernel-Copy1.ipynb: another notebook of lab 00: not graded (the lab's notebook is 00-copy-kernel.ipynb)"
    other = "copy-kernel-final.ipynb: not a lab (no NN- number in its name): not graded"
    a = _write(tmp_path / "a.json", [{"learner": "frank", "labs": [_lab("00-copy-kernel", failed=1)], "refused": [copy]},
                                     {"learner": "erin", "labs": [], "refused": [other]}])
    b = _write(tmp_path / "b.json", [{"learner": "erin", "labs": [], "refused": [other]}])
    out, js = tmp_path / "room.csv", tmp_path / "room.json"
    cli(["roster", "merge", "--csv", str(out), "--json", str(js), str(a), str(b)])
    merged = {d["learner"]: d for d in json.loads(js.read_text())}
    assert merged["frank"]["refused"] == [f"{a}: {copy}"], merged["frank"]
    assert merged["erin"]["refused"] == [f"{a}, {b}: {other}"], merged["erin"]
    assert f"{a}: {copy.split(' (')[0]}" in _rows(out)["frank"]["first failing check"], _rows(out)["frank"]
    again = tmp_path / "again.json"         # merged again with one of its servers: each note once, each server once
    cli(["roster", "merge", "--csv", str(tmp_path / "again.csv"), "--json", str(again), str(js), str(b)])
    merged = {d["learner"]: d for d in json.loads(again.read_text())}
    assert merged["erin"]["refused"] == [f"{a}, {b}: {other}"] and merged["frank"]["refused"] == [f"{a}: {copy}"], merged


def test_a_lab_ungraded_everywhere_stays_an_error_not_a_zero(tmp_path):
    a = _write(tmp_path / "a.json", [{"learner": "dan", "labs": [], "ungraded": ["06"], "error": "ran past 3600 s"}])
    b = _write(tmp_path / "b.json", [{"learner": "dan", "labs": [_lab("04-mbarrier-ring", passed=1)]}])
    assert cli(["roster", "merge", "--csv", str(tmp_path / "g.csv"), str(a), str(b)]) == 0
    row = _rows(tmp_path / "g.csv")["dan"]
    assert (row["lab 06"], row["lab 06 status"]) == ("", "error")
    assert row["lab 04 status"] == "ok"


def test_a_server_s_error_shows_only_while_a_lab_of_the_learner_is_still_ungraded(tmp_path):
    """eve's labs were all graded on server a and all left ungraded (error) on server b: her row shows a's grades and
    no error from b. fay's lab 06 was graded nowhere: b's reason stays in her row; gus was graded nowhere at all."""
    why = "could not start the grader as uid 1004: [Errno 13] Permission denied"
    a = _write(tmp_path / "server-a.json", [
        {"learner": "eve", "labs": [_lab("03-cp-async-rowsum", passed=3), _lab("04-mbarrier-ring", passed=3)]},
        {"learner": "fay", "labs": [_lab("04-mbarrier-ring", passed=3)]}])
    b = _write(tmp_path / "server-b.json", [
        {"learner": "eve", "labs": [], "ungraded": ["03", "04"], "error": why},
        {"learner": "fay", "labs": [], "ungraded": ["04", "06"], "error": why},
        {"learner": "gus", "labs": [], "ungraded": [], "error": "no lab notebook in /home/gus/feedbeast/labs"}])
    assert cli(["roster", "merge", "--csv", str(tmp_path / "g.csv"), str(a), str(b)]) == 0
    rows = _rows(tmp_path / "g.csv")
    assert rows["eve"]["labs ok"] == "2" and rows["eve"]["first failing check"] == "", rows["eve"]
    assert rows["fay"]["lab 06 status"] == "error" and rows["fay"]["first failing check"] == gist(f"{b}: {why}")
    assert rows["gus"]["first failing check"] == f"{b}: no lab notebook in /home/gus/feedbeast/labs", rows["gus"]


def test_a_file_that_is_not_a_roster_json_is_refused_and_nothing_is_written(tmp_path, capsys):
    a, _ = _room(tmp_path)
    grades_csv = tmp_path / "grades.csv"
    roster.write_csv(json.loads(a.read_text()), grades_csv)                    # the CSV, not the --json file
    out = tmp_path / "room.csv"
    for bad, why in ((grades_csv, "is not a roster --json file"), (tmp_path / "none.json", "no such file"),
                     (_write(tmp_path / "d.json", {"alice": 1}), "a list with one entry per learner")):
        assert cli(["roster", "merge", "--csv", str(out), str(a), str(bad)]) == 2
        said = capsys.readouterr()
        assert why in said.err and "--json grades.json" in said.err and said.out == "", said
        assert not out.exists()


def test_an_output_that_is_an_input_is_refused(tmp_path, capsys):
    a, b = _room(tmp_path)
    before = a.read_text()
    assert cli(["roster", "merge", "--csv", str(tmp_path / "room.csv"), "--json", str(a), str(a), str(b)]) == 2
    assert "is one of the inputs" in capsys.readouterr().err
    assert a.read_text() == before and not (tmp_path / "room.csv").exists()


def test_an_output_folder_that_is_not_there_is_refused_and_an_earlier_merge_is_kept(tmp_path, capsys):
    """As the roster does: where it cannot write is said before anything is read (no traceback, exit 2, on
    stderr), and a room.csv or room.json written before is kept under the time it was written, not overwritten."""
    a, b = _room(tmp_path)
    nowhere = tmp_path / "no" / "room.csv"
    assert cli(["roster", "merge", "--csv", str(nowhere), str(a), str(b)]) == 2
    said = capsys.readouterr()
    assert f"--csv {nowhere}: the folder {nowhere.parent} does not exist: create it first" in said.err, said
    assert "Traceback" not in said.err and said.out == "" and not nowhere.parent.exists()
    out, js = tmp_path / "room.csv", tmp_path / "room.json"
    assert cli(["roster", "merge", "--csv", str(out), "--json", str(js), str(a)]) == 0
    first = out.read_text(), js.read_text()
    assert cli(["roster", "merge", "--csv", str(out), "--json", str(js), str(a), str(b)]) == 0
    kept = sorted(tmp_path.glob("room.*.csv")) + sorted(tmp_path.glob("room.*.json"))
    assert [p.read_text() for p in kept] == list(first), kept
    said = capsys.readouterr().out
    assert all(f"kept the previous room.{p.suffix[1:]} as {p}" in said for p in kept), said
    assert out.read_text() != first[0] and "carol" in out.read_text()


def test_labs_restrict_the_columns_as_learners_type_them(tmp_path):
    a, b = _room(tmp_path)
    want = ["username", "lab 03", "lab 03 status", "lab 04", "lab 04 status", "labs ok", "first failing check"]
    for argv in (["--csv", str(tmp_path / "g.csv"), str(a), str(b), "--labs", "4", "3"],
                 ["--csv", str(tmp_path / "g.csv"), "--labs", "4", "3", str(a), str(b)]):   # the files after --labs
        assert roster_merge.main(argv) == 0
        assert next(csv.reader((tmp_path / "g.csv").open())) == want


def test_a_lab_left_ungraded_on_one_server_never_wins_over_a_grade_from_another():
    """A lab whose own cells broke on one server (setup: nothing graded) ranks below any real grade, even a failed
    one scoring 0, whichever file comes first."""
    from feedbeast.course.roster_merge import merge
    broken = {"lab": "00", "status": "failed", "setup": "OSError: libnvrtc.so.13 not found", "checks": []}
    real = {"lab": "00", "status": "failed", "setup": "",
            "checks": [{"status": "failed", "name": "copy_x2", "message": "relative error inf"}]}
    for order in ((("a", broken), ("b", real)), (("b", real), ("a", broken))):
        docs, _ = merge([(src, [{"learner": "bob", "labs": [lab]}]) for src, lab in order])
        kept, = docs[0]["labs"]
        assert kept["server"] == "b" and not kept["setup"], kept


def test_a_merged_file_merged_again_keeps_every_server_s_reason():
    """room.json holds each server's reason in "errors" (the row shows those that still stand, in "error"): merged
    again with another room's file, none is lost."""
    from feedbeast.course.roster_merge import merge
    a = [{"learner": "ann", "labs": [], "ungraded": ["04"], "error": "could not start the grader"}]
    b = [{"learner": "ann", "labs": [{"lab": "04", "status": "ok", "passed": 3, "failed": 0, "skipped": 0}],
          "ungraded": []}]
    once, _ = merge([("server-a.json", a), ("server-b.json", b)])
    assert "error" not in once[0] and once[0]["errors"] == ["server-a.json: could not start the grader"]
    again, _ = merge([("room.json", once), ("server-c.json", [{"learner": "ann", "labs": [], "ungraded": ["05"],
                                                               "error": "no lab notebook"}])])
    assert again[0]["errors"] == ["room.json: server-a.json: could not start the grader",
                                  "server-c.json: no lab notebook"], again[0]
    assert again[0]["error"] == "server-c.json: no lab notebook"         # lab 05 is still ungraded; 04 was graded
    a_c = [a[0], {"learner": "ann", "labs": [], "ungraded": ["05"], "error": "no lab notebook"}]
    room, _ = merge([("server-a.json", a_c[:1]), ("server-b.json", b), ("server-c.json", a_c[1:])])
    alone, _ = merge([("room.json", room)])            # merged again: a's reason is about lab 04, graded on b
    assert alone[0]["error"] == "room.json: server-c.json: no lab notebook", alone[0]


def test_one_notebook_that_failed_on_a_server_keeps_its_failure_over_a_partial_or_ok_elsewhere(tmp_path, capsys):
    """hank's lab 00 (one notebook, one sha256) ran on a GPU server and failed; a server without a GPU could only
    skip its launches (partial, which scores 100): the failure is kept, and said. A different notebook (a learner
    who fixed it and handed it in on another server) still keeps the better grade."""
    def lab(sha, **counts):
        return {**_lab("00-copy-kernel", **counts), "sha256": sha}
    gpu = _write(tmp_path / "gpu.json", [{"learner": "hank", "labs": [lab("aa", passed=3, failed=1)]},
                                         {"learner": "ivy", "labs": [lab("bb", passed=3, failed=1)]}])
    cpu = _write(tmp_path / "cpu.json", [{"learner": "hank", "labs": [lab("aa", passed=2, skipped=2)]},
                                         {"learner": "ivy", "labs": [lab("cc", passed=2, skipped=2)]}])
    for order in ((gpu, cpu), (cpu, gpu)):
        out = tmp_path / f"room-{order[0].stem}.csv"
        assert cli(["roster", "merge", "--csv", str(out), *map(str, order)]) == 0
        rows = _rows(out)
        assert (rows["hank"]["lab 00 status"], rows["hank"]["lab 00"]) == ("failed", "75.0"), order
        assert rows["ivy"]["lab 00 status"] == "partial", order              # another notebook: the better grade
        said = capsys.readouterr().out
        assert f"hank: lab 00, the same notebook, failed in {gpu} and was partial in {cpu}: kept the failure" in said
        assert "ivy: lab 00, the same" not in said


def test_a_file_given_twice_or_twice_the_same_grades_is_refused(tmp_path, capsys):
    a, b = _room(tmp_path)
    copy = tmp_path / "copy.json"
    copy.write_bytes(a.read_bytes())
    out = tmp_path / "room.csv"
    assert cli(["roster", "merge", "--csv", str(out), str(a), str(a)]) == 2
    assert f"{a} is given twice: give each server's --json file once; nothing was written" in capsys.readouterr().err
    assert cli(["roster", "merge", "--csv", str(out), str(a), str(b), str(copy)]) == 2
    assert f"{copy} is the same grades as {a}" in capsys.readouterr().err
    assert not out.exists()


def test_the_merge_runs_as_a_module_too(tmp_path):
    import subprocess
    import sys
    a, b = _room(tmp_path)
    r = subprocess.run([sys.executable, "-m", "feedbeast.course.roster_merge", "--csv", str(tmp_path / "r.csv"),
                        str(a), str(b)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "3 learners from 2 files" in r.stdout, r
    r = subprocess.run([sys.executable, "-m", "feedbeast.course.roster_merge", "--csv", str(tmp_path / "s.csv"),
                        str(tmp_path / "missing.json")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "no such file" in r.stderr, r


def test_latest_takes_a_regrade_worse_or_better_and_keeps_the_other_labs(tmp_path, capsys):
    """A room graded, then one learner regraded alone (`roster --only`): with --latest the later file's lab wins even
    where it graded worse (the learner broke a lab that passed), and every lab it does not hold stays as it was;
    without --latest the better grade stays."""
    room = _write(tmp_path / "room.json", [
        {"learner": "alice", "labs": [_lab("03-cp-async-rowsum", passed=3), _lab("04-mbarrier-ring", passed=3)]},
        {"learner": "bob", "labs": [_lab("03-cp-async-rowsum", passed=1, failed=1)]}])
    again = _write(tmp_path / "alice.json", [{"learner": "alice", "labs": [_lab("03-cp-async-rowsum", passed=1,
                                                                                failed=2)]}])
    latest, best = tmp_path / "latest.csv", tmp_path / "best.csv"
    assert cli(["roster", "merge", "--latest", "--csv", str(latest), str(room), str(again)]) == 0
    assert cli(["roster", "merge", "--csv", str(best), str(room), str(again)]) == 0
    rows = _rows(latest)
    assert (rows["alice"]["lab 03"], rows["alice"]["lab 03 status"]) == ("33.3", "failed"), rows   # the regrade
    assert rows["alice"]["lab 04 status"] == "ok" and rows["bob"]["lab 03 status"] == "failed", rows
    assert _rows(best)["alice"]["lab 03 status"] == "ok"                                           # the best
    assert f"alice: in {room}, {again}; kept lab 03 from {again}, lab 04 from {room}" in capsys.readouterr().out
    # a regrade that could not grade the lab (its grader broke there) keeps the earlier grade, and says so
    broken = _write(tmp_path / "broken.json", [{"learner": "alice", "labs": [
        {**_lab("04-mbarrier-ring", failed=1), "setup": "OSError: libnvrtc.so.13 not found"}]}])
    kept = tmp_path / "kept.csv"
    assert cli(["roster", "merge", "--latest", "--csv", str(kept), str(room), str(broken)]) == 0
    assert _rows(kept)["alice"]["lab 04 status"] == "ok"
    assert f"alice: lab 04 was not graded in {broken}: kept the grade of {room}" in capsys.readouterr().out


def test_a_lab_not_started_on_one_server_ranks_below_the_learners_own_work_on_another():
    """A lab left as given (`not started`, scored 0) never wins over a grade of the learner's own code, even a failed
    one, whichever file comes first (its status as given may be partial: the checks that need a GPU skipped)."""
    from feedbeast.course.roster_merge import merge
    given = {"lab": "03", "status": "partial", "untouched": True,
             "checks": [{"status": "skipped", "name": "launch", "message": "needs a GPU"}]}
    mine = {"lab": "03", "status": "failed", "untouched": False,
            "checks": [{"status": "failed", "name": "rowsum", "message": "relative error 1.0"}]}
    for order in ((("a", given), ("b", mine)), (("b", mine), ("a", given))):
        docs, _ = merge([(src, [{"learner": "bob", "labs": [lab]}]) for src, lab in order])
        kept, = docs[0]["labs"]
        assert kept["server"] == "b" and roster.lab_status(kept) == "failed", kept
