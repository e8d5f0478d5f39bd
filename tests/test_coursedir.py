"""The course is found from what is being worked on, never from where feedbeast is installed."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from feedbeast.course.coursedir import CourseNotFound, find

ROOT = Path(__file__).resolve().parents[1]


def make_course(folder: Path) -> Path:
    (folder / "chapters").mkdir(parents=True)
    (folder / "solutions").mkdir()
    return folder


def test_found_above_the_notebook_not_from_the_package(tmp_path, monkeypatch):
    course = make_course(tmp_path / "course")
    (course / "labs").mkdir()
    nb = course / "labs" / "00-copy-kernel.ipynb"
    nb.write_text("{}")
    monkeypatch.delenv("FEEDBEAST_COURSE", raising=False)
    monkeypatch.chdir(tmp_path)          # the working directory is not in a course
    assert find(near=nb) == course.resolve()


def test_found_from_the_working_directory(tmp_path, monkeypatch):
    course = make_course(tmp_path / "c")
    (course / "labs").mkdir()
    monkeypatch.delenv("FEEDBEAST_COURSE", raising=False)
    monkeypatch.chdir(course / "labs")
    assert find(near=tmp_path / "elsewhere.ipynb") == course.resolve()


def test_explicit_folder_wins_and_a_wrong_one_says_what_is_missing(tmp_path, monkeypatch):
    course = make_course(tmp_path / "mine")
    monkeypatch.setenv("FEEDBEAST_COURSE", str(course))
    assert find(near=ROOT / "labs") == course.resolve()
    (tmp_path / "bare").mkdir()
    with pytest.raises(CourseNotFound, match=r"--course=.*bare.*no chapters/ and no solutions/"):
        find(explicit=tmp_path / "bare")


def test_nothing_found_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.delenv("FEEDBEAST_COURSE", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CourseNotFound, match="pass --course DIR"):
        find(near=tmp_path / "x.ipynb")


def test_the_package_finds_no_course_by_its_own_location():
    files = sorted((ROOT / "src" / "feedbeast").rglob("*.py"))
    assert {"grade.py", "llm_suite.py", "profiling.py", "roster.py", "bench_run.py"} <= {f.name for f in files}
    for f in files:
        text = f.read_text()
        assert not re.search(r"parents\[[23]\]", text), f"{f.name} finds the course from its own file"


def test_reset_from_the_folder_above_a_clone_restores_the_clone_s_lab(tmp_path, monkeypatch, capsys):
    """A hosted notebook's working folder (Colab's /content) holds the clone one level below: `grade 00` finds it
    there, and so must `reset 00`, restoring the clone's labs/00 from its solution (the learner's kept in backup)."""
    import shutil
    from feedbeast.course.__main__ import main
    clone = tmp_path / "content" / "feedbeast"
    (clone / "labs").mkdir(parents=True)
    (clone / "chapters").mkdir()
    shutil.copytree(ROOT / "solutions", clone / "solutions")
    mine = clone / "labs" / "00-copy-kernel.ipynb"
    mine.write_text((ROOT / "labs" / "00-copy-kernel.ipynb").read_text().replace("TODO: your code here", "my work"))
    monkeypatch.delenv("FEEDBEAST_COURSE", raising=False)
    monkeypatch.chdir(tmp_path / "content")
    assert main(["reset", "00"]) == 0, capsys.readouterr()
    assert mine.read_text() == (ROOT / "labs" / "00-copy-kernel.ipynb").read_text()
    assert "my work" in next((clone / "labs" / "backup").glob("00-copy-kernel.*.ipynb")).read_text()
