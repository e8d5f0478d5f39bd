"""The installed feedbeast against the source of the checkout whose notebook runs (feedbeast.course.freshness): a
difference in the files the wheel ships is said once per process, naming them and what to do (install again; use
this checkout's environment when this Python runs another checkout's source; a workshop's copy asks for a fresh
one); the source itself, an equal copy, no checkout in sight or a folder that cannot be read says nothing."""
from __future__ import annotations

import sys
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
    (installed / ".ipynb_checkpoints").mkdir()                       # hidden files the wheel leaves out
    (installed / ".ipynb_checkpoints/x-checkpoint.py").write_text("# an editor's\n")
    text = freshness.warning(installed, near=course / "chapters")
    assert text and "differ in 3 file(s) (include/fb/gone.cuh, include/fb/new.cuh, include/fb/tma.cuh). " \
                    "The kernels compile with the installed headers." in text, text
    assert str(installed) in text and str(course) in text
    assert "make install ENV=current WHEELS=<a bundle built from it>" in text
    assert f"-m pip install --no-deps --force-reinstall {course}" in text and "fresh copy" not in text

    # a folder named src/feedbeast that is no checkout's is a copy like any other
    loose = tmp_path / "loose/src/feedbeast"
    shutil.copytree(installed, loose)
    assert "force-reinstall" in freshness.warning(loose, near=course)


def test_another_checkouts_source_is_never_to_be_replaced(tmp_path):
    # This Python runs checkout A's source (installed editable); the notebook is checkout B's (a workshop learner's
    # copy, or a second clone): the advice is B's own environment, never a reinstall over A's editable install.
    a, b = _checkout(tmp_path / "a"), _checkout(tmp_path / "b")
    (a / "src/feedbeast/include/fb/tma.cuh").write_text("// updated in A\n")
    text = freshness.warning(a / "src/feedbeast", near=b / "labs" / "04.ipynb")
    assert text and "differ in 1 file(s) (include/fb/tma.cuh)" in text, text
    assert f"the source of another checkout ({a})" in text and f"the environment of {b}" in text
    assert "force-reinstall" not in text


def test_a_workshop_copy_is_told_to_ask_for_a_fresh_copy_whatever_is_installed(tmp_path, monkeypatch):
    # The hub points FEEDBEAST_COURSE at the shared course; a learner's copy (made once) differs after an update of
    # the course: never a reinstall (the learner cannot write there, and a user install would hide the course).
    shared, mine = _checkout(tmp_path / "opt/course"), _checkout(tmp_path / "home/ann/feedbeast")
    (shared / "src/feedbeast/__init__.py").write_text("VERSION = 3\n")
    wheel_copy = tmp_path / "site-packages/feedbeast"
    shutil.copytree(shared / "src/feedbeast", wheel_copy)
    monkeypatch.setenv("FEEDBEAST_COURSE", str(shared))
    for installed in (shared / "src/feedbeast", wheel_copy):              # the hub's .venv, or a wheel install
        text = freshness.warning(installed, near=mine / "chapters")
        assert text and text.endswith("This copy of the course is not the one installed for everyone: ask for a "
                                      "fresh copy.") and "install it again" not in text, text
        assert "differ in 1 file(s) (__init__.py)." in text and "headers" not in text   # no header differs


def test_the_source_itself_or_no_checkout_says_nothing(tmp_path, monkeypatch):
    course = _checkout(tmp_path / "course")
    # this repository's tests run its source (make test installs it editable)
    assert freshness.warning(Path(feedbeast.__file__).resolve().parent, near=ROOT) is None
    monkeypatch.chdir(tmp_path)
    assert freshness.warning(course / "src/feedbeast", near=course) is None          # an editable install
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path / "empty")
    assert freshness.warning(tmp_path / "elsewhere") is None                          # no checkout in sight
    (tmp_path / "bare" / "chapters").mkdir(parents=True)
    (tmp_path / "bare" / "solutions").mkdir()
    assert freshness.warning(course / "src/feedbeast", near=tmp_path / "bare") is None   # a checkout without src/


def test_the_running_package_is_compared_and_a_difference_printed(tmp_path, monkeypatch, capsys):
    course = _checkout(tmp_path / "course")
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

    # a working directory removed under the process (Path.cwd() raises): the import it runs in goes on, silent
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    os.rmdir(gone)
    (installed / "__init__.py").write_text("VERSION = 1\n")
    assert freshness.warn_if_stale() is None and capsys.readouterr().err == ""

    def unreadable(*_):
        raise PermissionError(13, "Permission denied")
    monkeypatch.chdir(course / "chapters")
    monkeypatch.setattr(freshness, "differing_files", unreadable)      # a file this user cannot read
    assert freshness.warn_if_stale() is None and capsys.readouterr().err == ""


def test_the_hooks_compare_once_per_process(monkeypatch):
    import feedbeast.course as course
    calls = []
    monkeypatch.setattr(course.freshness, "warn_if_stale", lambda: calls.append(1))
    monkeypatch.setattr(course, "_said_stale", [])
    course.install()
    course.install()
    assert calls == [1]


def test_a_kernel_starting_with_the_course_says_it_under_its_first_cell(monkeypatch):
    """The course's kernelspec imports the hooks while the kernel starts, when stderr is the kernel's log: the
    comparison waits for the first cell, once."""
    import types
    import feedbeast.course as course
    calls, handlers = [], []
    events = types.SimpleNamespace(register=lambda name, f: handlers.append((name, f)),
                                   unregister=lambda name, f: handlers.remove((name, f)))
    shell = types.SimpleNamespace(events=events, parent_header={})
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    monkeypatch.setattr(course.freshness, "warn_if_stale", lambda: calls.append(1) or "differs")
    monkeypatch.setattr(course, "_said_stale", [])
    course.install()
    assert calls == [] and [n for n, _ in handlers] == ["pre_run_cell"]
    handlers[0][1](None)                       # the first cell
    assert calls == [1] and handlers == [] and course._said_stale == ["differs"]
    shell.parent_header = {"msg_id": "1"}      # inside a cell: said at once
    monkeypatch.setattr(course, "_said_stale", [])
    course.install()
    assert calls == [1, 1]


def test_an_nvrtc_the_course_does_not_pin_is_said(tmp_path):
    """The chapters' SASS, registers and counts were read with the pinned NVRTC: another one is said, with the pip
    command that installs the pins; the pinned one says nothing."""
    from feedbeast.course import freshness
    root = Path(__file__).resolve().parents[1]
    text = freshness.toolchain_warning(root, version=(13, 5))
    assert "NVRTC 13.5" in text and "requirements/cu13.txt" in text and "pip install -r" in text, text
    assert freshness.toolchain_warning(root, version=(13, 0)) is None
    assert freshness.toolchain_warning(root, version=(12, 9)) is None
    assert freshness.toolchain_warning(tmp_path, version=(13, 5)) is None      # no checkout: nothing to compare


def test_an_unreadable_pin_file_does_not_stop_the_import(tmp_path, monkeypatch):
    """The comparison must never stop the import it runs in: a requirements file that is not UTF-8 says nothing."""
    from feedbeast.course import freshness
    for d in ("chapters", "solutions", "requirements"):
        (tmp_path / d).mkdir()
    (tmp_path / "requirements" / "cu13.txt").write_bytes(b"cuda-toolkit[nvrtc]==13.0.2\n# caf\xe9\n")
    monkeypatch.chdir(tmp_path)
    assert freshness.warn_if_stale() is None


def test_a_hosted_notebook_s_folder_compares_with_the_clone_below_it(tmp_path, monkeypatch):
    """Colab runs a notebook in /content with the clone in /content/feedbeast: after a pull there, the installed
    copy (the setup cell's wheel install) differs from the clone's source, and that is said, as it is from inside
    the clone; with two checkouts below, neither is taken."""
    content = tmp_path / "content"
    clone = _checkout(content / "feedbeast")
    installed = tmp_path / "site-packages/feedbeast"
    shutil.copytree(clone / "src/feedbeast", installed)
    (clone / "src/feedbeast/__init__.py").write_text("VERSION = 3\n")        # the pull
    monkeypatch.chdir(content)
    said = freshness.warning(installed)
    assert said and "__init__.py" in said and "install it again" in said, said
    _checkout(content / "another")
    assert freshness.warning(installed) is None
