"""What an instructor meets walking docs/instructors.md: make labs and make reset-labs never lose a learner's lab,
and the guide quotes what the code does.

The hub's settings and spawn hook are tested in test_hub_config.py, the roster's command line in test_roster.py.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from feedbeast.course import labs

ROOT = Path(__file__).resolve().parents[1]
GUIDE = (ROOT / "docs" / "instructors.md").read_text()


def _course(tmp: Path) -> tuple[Path, Path]:
    """Labs 04 and 05 with their solutions; lab 04 worked on by the learner."""
    sols, lab_dir = tmp / "solutions", tmp / "labs"
    sols.mkdir()
    lab_dir.mkdir()
    for n in ("04", "05"):
        sol = next((ROOT / "solutions").glob(f"{n}-*.ipynb"))
        shutil.copy(sol, sols / sol.name)
        (lab_dir / sol.name).write_text(labs.lab_text(sol))
    mine = next(lab_dir.glob("04-*.ipynb"))
    mine.write_text(mine.read_text().replace("TODO: your code here", "my attempt"))
    return sols, lab_dir


def test_make_labs_keeps_an_edited_lab_and_check_points_at_no_command_that_loses_it(tmp_path, capsys):
    sols, lab_dir = _course(tmp_path)
    mine = next(lab_dir.glob("04-*.ipynb"))
    work = mine.read_text()
    assert labs.main(["build", str(sols), str(lab_dir)]) == 0                    # make labs
    (kept,) = (lab_dir / "backup").glob("04-*.ipynb")
    assert kept.read_text() == work and "my attempt" not in mine.read_text()
    assert f"kept your version of {mine.name} as {kept}" in capsys.readouterr().out
    assert not list((lab_dir / "backup").glob("05-*.ipynb"))                     # as generated: nothing to keep
    mine.write_text(work)
    assert labs.main(["check", str(sols), str(lab_dir)]) == 1                    # python -m feedbeast check
    out = capsys.readouterr().out
    assert "04-" in out and "a lab you worked on does too" in out and "keeps each edited lab in labs/backup/" in out


def test_a_backup_folder_left_to_root_is_named_and_the_lab_kept(tmp_path, monkeypatch, capsys):
    """A reset run with sudo leaves labs/backup/ to root; the learner's own reset then cannot keep their lab."""
    sols, lab_dir = _course(tmp_path)
    mine = next(lab_dir.glob("04-*.ipynb"))
    work = mine.read_text()
    (lab_dir / "backup").mkdir(mode=0o555)
    if os.geteuid() == 0:         # root writes anywhere: refuse as the folder would refuse a learner
        def denied(src, dst, **kw):
            raise PermissionError(13, "Permission denied", str(dst))
        monkeypatch.setattr(labs.shutil, "copy2", denied)
    try:
        assert labs.main(["reset", str(sols), str(lab_dir), "04"]) == 1
    finally:
        (lab_dir / "backup").chmod(0o755)
    out = capsys.readouterr().out
    owner = labs._name((lab_dir / "backup").stat().st_uid)
    assert f"{lab_dir / 'backup'} is not writable by" in out and f"(it belongs to {owner};" in out, out
    assert f"{mine.name} was not restored and is as you left it" in out and "sudo chown -R" in out, out
    assert f"mv {lab_dir / 'backup'} {lab_dir / 'backup'}.old" in out and "Traceback" not in out
    assert mine.read_text() == work


def test_the_guide_quotes_lab_10s_todo_as_the_grader_names_it():
    """As given, lab 10's first failure names quantize's TODO line: the guide quotes the grader's line number."""
    pytest.importorskip("ml_dtypes")
    from nbformat import read
    from feedbeast.course import grade
    said = grade._todo(grade.learner_part(read(ROOT / "labs" / "10-fp8-gemv.ipynb", as_version=4)))
    line = re.search(r"quantize line (\d+)", said)[1]
    quoted = re.findall(r"quantize line (\d+)", GUIDE)
    assert quoted == [line], (quoted, said)


def test_the_guide_says_what_the_roster_does():
    """Whom the roster grades as, what a lab 08 without its GPU scores, that grade files are kept, that the status
    column stays in an import, and commands typed as the README types them."""
    from feedbeast.course import roster
    flat = " ".join(GUIDE.split())
    assert "st = os.stat(folder)" in __import__("inspect").getsource(roster._as_owner)   # the labs folder's owner
    assert "the owner of their home" not in flat and "the owner of their labs folder" in flat
    assert "lab 08 in a room without an sm_100a GPU) nothing was measured" not in flat
    assert "a solved lab 08 scores 100 with status `partial` there" in flat
    assert "drop the status columns" not in flat and "keep the status columns" in flat
    assert "shows 100 for a `partial` lab" in flat
    assert "is never overwritten: it is renamed beside itself" in flat
    assert "sudo install -d -m 700 /root/grades`, then `sudo .venv/bin/python -m feedbeast roster" in flat
    assert not re.search(r"^(sudo )?python -m feedbeast", GUIDE, re.M)            # in a command block: .venv/bin/python


def test_make_workshop_names_the_folder_that_would_stop_the_learners():
    """The learners' servers and gradings run the course's Python as each learner: a pyenv Python under a 700
    /root, reached through the venv's link, once let make workshop say the hub was ready and every learner then
    graded `error`. The check reads the mode bits on the way, the link's target too."""
    import subprocess
    import sys
    import tempfile
    from feedbeast.course import reach
    top = Path(tempfile.mkdtemp(dir="/tmp"))      # /tmp lets everyone through; pytest's own tmp folder does not
    try:
        top.chmod(0o755)
        closed, venv = top / "root" / "pyenv", top / "srv" / "venv" / "bin"
        closed.mkdir(parents=True)
        venv.mkdir(parents=True)
        real = closed / "python3"
        real.write_text("#!/bin/sh\n")
        real.chmod(0o755)
        (venv / "python").symlink_to(real)
        (top / "srv" / "open").write_text("#!/bin/sh\n")
        (top / "srv" / "open").chmod(0o755)
        assert reach.problem([top / "srv" / "open", top / "srv"]) == ""
        (top / "root").chmod(0o755)
        assert reach.problem([venv / "python"]) == ""
        (top / "root").chmod(0o700)
        why = reach.problem([venv / "python"])
        assert why.startswith(f"{top / 'root'} (mode 700) lets no other user through, so learners cannot reach "
                              f"{venv / 'python'}") and "make workshop PYTHON3=/usr/bin/python3" in why, why
        (top / "srv" / "open").chmod(0o744)       # a program others may read but not run
        assert reach.problem([top / "srv" / "open"]).startswith(f"{top / 'srv' / 'open'} (mode 744)")
        (top / "root").chmod(0o755)
        (top / "srv" / "venv").chmod(0o700)        # the venv itself closed (umask 077): the link's own folder counts
        assert reach.problem([venv / "python"]).startswith(f"{top / 'srv' / 'venv'} (mode 700)")
        assert "cannot be read" in reach.problem([top / "gone"])
        r = subprocess.run([sys.executable, "-m", "feedbeast.course.reach", str(venv / "python")], capture_output=True,
                           text=True)
        assert r.returncode == 1 and r.stdout == "" and "lets no other user through" in r.stderr, r
    finally:
        for p in (top / "root", top / "srv" / "venv"):
            p.chmod(0o755)
        shutil.rmtree(top)
    dry = subprocess.run(["make", "-n", "--no-print-directory", "workshop", "ENV=current", f"PYTHON3={sys.executable}"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert f"-m feedbeast.course.reach {ROOT} " in dry and "REACH_CHECK=off skips" in dry, dry
    assert dry.index("feedbeast.course.reach") < dry.index("the hub is ready"), dry
