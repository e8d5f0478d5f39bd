"""A wheel install (not editable) grades exactly as the editable checkout does.

The wheel puts feedbeast in site-packages, far from chapters/ and solutions/: the course must be found from the
notebook being graded or the working directory, never from the package's own location. Built and installed here
with no index: the wheel from this checkout (the pinned setuptools, no build isolation), into a fresh venv whose
other packages are this environment's (linked, without the editable install's hook).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAB = "00-copy-kernel.ipynb"


@pytest.fixture(scope="module")
def wheel_python(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    # The version from its metadata: importing setuptools here would fight distutils already imported by others.
    import importlib.metadata as md
    try:
        version = md.version("setuptools")
    except md.PackageNotFoundError:
        pytest.skip("setuptools is not installed (requirements/build.txt)")
    if int(version.split(".")[0]) < 77:
        pytest.skip(f"setuptools {version} cannot build this pyproject (needs 77+: requirements/build.txt)")
    # Built from a copy of what the wheel is made of: setuptools writes build/ and *.egg-info into the tree it
    # builds, and two pytest workers building this checkout at once (`--dist load`) would share them.
    src = tmp / "src"
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index", "--no-build-isolation",
                            "-w", str(tmp / "dist"), str(src)], capture_output=True, text=True, cwd=tmp)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel, = (tmp / "dist").glob("feedbeast-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")], check=True)
    py = tmp / "venv" / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    here = Path(sysconfig.get_paths()["purelib"])
    # This environment's packages, linked into the new site-packages (the CUDA libraries are looked for there),
    # with their start-up hooks, except the editable install of feedbeast.
    for entry in here.iterdir():
        if not entry.name.startswith(("__editable__", "feedbeast", "__pycache__")):
            (site / entry.name).symlink_to(entry)
    inst = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                           str(site), str(wheel)], capture_output=True, text=True)
    assert inst.returncode == 0, inst.stderr[-2000:]
    where = subprocess.run([str(py), "-c", "import feedbeast; print(feedbeast.__file__)"], capture_output=True,
                           text=True, cwd=tmp).stdout.strip()
    assert Path(where).is_relative_to(site), f"feedbeast came from {where}, not from the wheel in {site}"
    return py


def _grade(python, notebook, cwd):
    env = {k: v for k, v in os.environ.items() if k != "FEEDBEAST_COURSE"}
    r = subprocess.run([str(python), "-m", "feedbeast", "grade", "--json", str(notebook)], capture_output=True,
                       text=True, cwd=cwd, env=env, timeout=600)
    doc = json.loads(r.stdout)
    lab, = doc["labs"]
    return r.returncode, lab["status"], sorted((c["status"], c["name"]) for c in lab["checks"])


def test_a_wheel_install_grades_as_the_editable_one(wheel_python, tmp_path):
    learner = tmp_path / "course"                          # a learner's copy of the course, outside this checkout
    for sub in ("chapters", "solutions", "labs"):
        (learner / sub).mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / LAB, learner / "solutions" / LAB)
    shutil.copy(ROOT / "solutions" / LAB, learner / "labs" / LAB)        # a solved lab
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    wheel = _grade(wheel_python, learner / "labs" / LAB, cwd=elsewhere)   # found from the notebook
    editable = _grade(sys.executable, learner / "labs" / LAB, cwd=elsewhere)
    assert "cannot find" not in json.dumps(wheel), wheel
    assert wheel == editable
    # at least one check passed (the SASS check needs no GPU): a grading that skipped everything compares nothing
    assert wheel[1] in ("ok", "partial") and any(status == "passed" for status, _ in wheel[2]), wheel


def test_a_wheel_install_names_what_to_do_without_a_course(wheel_python, tmp_path):
    lone = tmp_path / LAB
    shutil.copy(ROOT / "labs" / LAB, lone)
    env = {k: v for k, v in os.environ.items() if k != "FEEDBEAST_COURSE"}
    r = subprocess.run([str(wheel_python), "-m", "feedbeast", "grade", str(lone)], capture_output=True, text=True,
                       cwd=tmp_path, env=env, timeout=120)
    assert r.returncode == 3 and "not graded: " in r.stdout and "FAILED" not in r.stdout, r.stdout   # nothing graded
    assert "no checkout of the course" in r.stdout and "--course DIR" in r.stdout, r.stdout
