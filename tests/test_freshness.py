"""The installed feedbeast against the source of the checkout whose notebook runs (feedbeast.course.freshness): a
difference in the files the wheel ships is said once, naming them and what to do (install again, or, when this
Python runs another checkout's source, use this checkout's environment); the source itself, an equal copy, no
checkout in sight or a folder that cannot be read says nothing, and FEEDBEAST_COURSE is not asked."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import feedbeast
from feedbeast.course import freshness

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_course_variable(monkeypatch):
    monkeypatch.delenv("FEEDBEAST_COURSE", raising=False)     # a workshop learner's terminal has it set


def _checkout(where: Path) -> Path:
    for d in ("chapters", "solutions", "src/feedbeast/include/fb"):
        (where / d).mkdir(parents=True)
    (where / "src/feedbeast/__init__.py").write_text("VERSION = 2\n")
    (where / "src/feedbeast/include/fb/tma.cuh").write_text("// new header\n")
    return where


def test_a_copy_that_differs_is_named_with_its_files_and_the_way_to_install_again(tmp_path):
    course = _checkout(tmp_path / "course")
    installed = tmp_path / "site-packages/feedbeast"
    shutil.copytree(course / "src/feedbeast", installed)
    (installed / "__pycache__").mkdir()
    (installed / "__pycache__/x.pyc").write_bytes(b"\0")          # caches are not the package's files
    (course / "src/feedbeast/notes.txt~").write_text("an editor's backup\n")   # nor what the wheel does not ship
    assert freshness.differing_files(installed, course / "src/feedbeast") == []
    assert freshness.warning(installed, near=course / "chapters/00.ipynb") is None     # an equal copy

    (installed / "include/fb/tma.cuh").write_text("// old header\n")
    (installed / "include/fb/gone.cuh").write_text("// removed from the course since\n")
    (course / "src/feedbeast/include/fb/new.cuh").write_text("// only in the checkout\n")
    assert freshness.differing_files(installed, course / "src/feedbeast") == [
        "include/fb/gone.cuh", "include/fb/new.cuh", "include/fb/tma.cuh"]
    text = freshness.warning(installed, near=course / "chapters")
    assert text and "differ in 3 file(s) of the toolkit (include/fb/gone.cuh, include/fb/new.cuh, " \
                    "include/fb/tma.cuh)" in text, text
    assert str(installed) in text and str(course) in text
    assert "make install ENV=current WHEELS=wheelhouse" in text and f"--force-reinstall {course}" in text
    assert "ask for a fresh copy of the course" in text     # a workshop copy older than the course installed


def test_another_checkouts_source_is_never_to_be_replaced(tmp_path):
    # This Python runs checkout A's source (installed editable); the notebook is checkout B's (a workshop learner's
    # copy, or a second clone): the advice is B's own environment, never a reinstall over A's editable install.
    a, b = _checkout(tmp_path / "a"), _checkout(tmp_path / "b")
    (a / "src/feedbeast/include/fb/tma.cuh").write_text("// updated in A\n")
    text = freshness.warning(a / "src/feedbeast", near=b / "labs" / "04.ipynb")
    assert text and "differ in 1 file(s) of the toolkit (include/fb/tma.cuh)" in text, text
    assert f"the source of another checkout ({a})" in text and f"`make lab` in {b}" in text
    assert "force-reinstall" not in text


def test_the_source_itself_or_no_checkout_says_nothing(tmp_path, monkeypatch):
    course = _checkout(tmp_path / "course")
    # this repository's tests run its source (make test installs it editable)
    assert freshness.warning(Path(feedbeast.__file__).resolve().parent, near=ROOT) is None
    monkeypatch.chdir(tmp_path)
    assert freshness.warning(course / "src/feedbeast", near=course) is None          # an editable install
    assert freshness.warning(tmp_path / "elsewhere") is None                          # no checkout in sight
    (tmp_path / "bare" / "chapters").mkdir(parents=True)
    (tmp_path / "bare" / "solutions").mkdir()
    assert freshness.warning(tmp_path / "elsewhere", near=tmp_path / "bare") is None   # a checkout without src/


def test_the_running_package_is_compared_and_a_difference_printed(tmp_path, monkeypatch, capsys):
    course = _checkout(tmp_path / "course")
    installed = tmp_path / "site-packages/feedbeast"
    shutil.copytree(course / "src/feedbeast", installed)
    (installed / "__init__.py").write_text("VERSION = 1\n")
    monkeypatch.setattr(feedbeast, "__file__", str(installed / "__init__.py"))
    shared = _checkout(tmp_path / "shared")                   # equal to the installed copy: were it asked, all
    (shared / "src/feedbeast/__init__.py").write_text("VERSION = 1\n")   # would look level
    monkeypatch.setenv("FEEDBEAST_COURSE", str(shared))       # not asked: the notebook's checkout is
    monkeypatch.chdir(course / "chapters")
    text = freshness.warn_if_stale()
    err = capsys.readouterr().err
    assert text and err == f"feedbeast: {text}\n" and "differ in 1 file(s) of the toolkit (__init__.py)" in err, err
    (installed / "__init__.py").write_text("VERSION = 2\n")
    assert freshness.warn_if_stale() is None and capsys.readouterr().err == ""

    # a working directory removed under the process (Path.cwd() raises): the import it runs in goes on, silent
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    os.rmdir(gone)
    (installed / "__init__.py").write_text("VERSION = 1\n")
    assert freshness.warn_if_stale() is None and capsys.readouterr().err == ""
