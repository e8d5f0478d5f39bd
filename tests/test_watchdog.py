"""The GPU-test watchdog of conftest.py: a GPU test that hangs ends its worker after the limit, with every thread's
stack on stderr, and the rest of the run goes on (pytest-xdist replaces the worker). Run in a child pytest on a
test that sleeps in place of a kernel that never returns; no GPU needed."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = f'''
import importlib.util, pytest
spec = importlib.util.spec_from_file_location("course_conftest", {str(ROOT / "tests" / "conftest.py")!r})
course = importlib.util.module_from_spec(spec)
spec.loader.exec_module(course)
_watchdog = pytest.fixture(autouse=True)(course.gpu_test_watchdog)

def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: a GPU test")
'''

TESTS = '''
import time, pytest

@pytest.mark.gpu
def test_a_kernel_that_never_returns():
    time.sleep(120)

def test_the_next_test_still_runs():
    assert True

@pytest.mark.gpu
def test_a_gpu_test_that_ends_in_time():
    time.sleep(0.2)
'''


def _run(tmp_path, *args, tests=TESTS, **env):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_hang.py").write_text(tests)
    e = {k: v for k, v in os.environ.items() if not k.startswith("FEEDBEAST_")} | env
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", *args,
                           str(tmp_path / "test_hang.py")], cwd=tmp_path, env=e, capture_output=True, text=True,
                          timeout=100)


def test_a_hung_gpu_test_ends_its_worker_and_the_run_goes_on(tmp_path):
    pytest.importorskip("xdist")
    r = _run(tmp_path, "-n", "1", FEEDBEAST_GPU_TEST_LIMIT_S="2")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "crashed while running" in out and "test_a_kernel_that_never_returns" in out, out
    assert "Timeout (0:00:02)!" in out and " in test_a_kernel_that_never_returns" in out, out   # the dumped stack
    assert "2 passed" in out and "1 failed" in out, out


def test_without_xdist_a_hung_gpu_test_ends_the_run(tmp_path):
    r = _run(tmp_path, "-p", "no:xdist", FEEDBEAST_GPU_TEST_LIMIT_S="2")
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "Timeout (0:00:02)!" in out and "test_a_kernel_that_never_returns" in out, out


def test_a_limit_of_zero_turns_it_off(tmp_path):
    """The same sleep that a 2 s limit ends (above) runs to the end with the limit at 0."""
    r = _run(tmp_path, "-p", "no:xdist", tests=TESTS.replace("time.sleep(120)", "time.sleep(3)"),
             FEEDBEAST_GPU_TEST_LIMIT_S="0")
    assert r.returncode == 0 and "3 passed" in r.stdout, r.stdout + r.stderr


def test_the_limit_is_900_s_and_off_under_make_stress_unless_set():
    from conftest import gpu_test_limit
    assert gpu_test_limit({}) == 900
    assert gpu_test_limit({"FEEDBEAST_STRESS": "100"}) == 0
    assert gpu_test_limit({"FEEDBEAST_GPU_TEST_LIMIT_S": "5"}) == 5
    assert gpu_test_limit({"FEEDBEAST_STRESS": "100", "FEEDBEAST_GPU_TEST_LIMIT_S": "1800"}) == 1800
