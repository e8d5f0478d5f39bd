"""The installed feedbeast against the course checkout's source (feedbeast.course.freshness): a difference is said
once, naming the files and what to do whichever side is newer; the source itself, an equal copy or no checkout in
sight says nothing."""
from __future__ import annotations

import shutil
from pathlib import Path

import feedbeast
from feedbeast.course import freshness

ROOT = Path(__file__).resolve().parents[1]


def _checkout(tmp_path: Path) -> Path:
    course = tmp_path / "course"
    for d in ("chapters", "solutions", "src/feedbeast/include/fb"):
        (course / d).mkdir(parents=True)
    (course / "src/feedbeast/__init__.py").write_text("VERSION = 2\n")
    (course / "src/feedbeast/include/fb/tma.cuh").write_text("// new header\n")
    return course


def test_a_copy_that_differs_is_named_with_its_files_and_the_way_to_install_again(tmp_path):
    course = _checkout(tmp_path)
    installed = tmp_path / "site-packages/feedbeast"
    shutil.copytree(course / "src/feedbeast", installed)
    (installed / "__pycache__").mkdir()
    (installed / "__pycache__/x.pyc").write_bytes(b"\0")          # caches are not the package's files
    assert freshness.differing_files(installed, course / "src/feedbeast") == []
    assert freshness.warning(installed, near=course / "chapters/00.ipynb") is None     # an equal copy

    (installed / "include/fb/tma.cuh").write_text("// old header\n")
    (course / "src/feedbeast/include/fb/new.cuh").write_text("// only in the checkout\n")
    assert freshness.differing_files(installed, course / "src/feedbeast") == ["include/fb/new.cuh",
                                                                              "include/fb/tma.cuh"]
    text = freshness.warning(installed, near=course / "chapters")
    assert text and "differ in 2 file(s) (include/fb/new.cuh, include/fb/tma.cuh)" in text, text
    assert str(installed) in text and str(course / "src/feedbeast") in text
    assert "make install ENV=current WHEELS=wheelhouse" in text and f"--force-reinstall {course}" in text
    assert "ask for a fresh copy of the course" in text     # a workshop copy older than the course installed


def test_the_source_itself_or_no_checkout_says_nothing(tmp_path, monkeypatch):
    course = _checkout(tmp_path)
    # this repository's tests run its source (make test installs it editable)
    assert freshness.warning(Path(feedbeast.__file__).resolve().parent, near=ROOT) is None
    monkeypatch.chdir(tmp_path)                     # the working directory is where a checkout is looked for last
    assert freshness.warning(course / "src/feedbeast", near=course) is None          # an editable install
    assert freshness.warning(tmp_path / "elsewhere", near=tmp_path) is None          # no checkout in sight
    (tmp_path / "bare" / "chapters").mkdir(parents=True)
    (tmp_path / "bare" / "solutions").mkdir()
    assert freshness.warning(tmp_path / "elsewhere", near=tmp_path / "bare") is None   # a checkout without src/


def test_the_running_package_is_compared_and_a_difference_printed(tmp_path, monkeypatch, capsys):
    course = _checkout(tmp_path)
    installed = tmp_path / "site-packages/feedbeast"
    shutil.copytree(course / "src/feedbeast", installed)
    (installed / "__init__.py").write_text("VERSION = 1\n")
    monkeypatch.setattr(feedbeast, "__file__", str(installed / "__init__.py"))
    monkeypatch.chdir(course / "chapters")
    text = freshness.warn_if_stale()
    err = capsys.readouterr().err
    assert text and err == f"feedbeast: {text}\n" and "differ in 1 file(s) (__init__.py)" in err, err
    (installed / "__init__.py").write_text("VERSION = 2\n")
    assert freshness.warn_if_stale() is None and capsys.readouterr().err == ""
