"""Child-process runners carry data through files and pipes, never on the command line (128 KiB per argument)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import feedbeast as fb
from feedbeast.isolated import runner_command


def test_isolated_takes_values_far_past_the_argument_limit():
    big = np.random.default_rng(0).standard_normal(400_000)         # 3.2 MB pickled
    out = fb.isolated("print(repr(float(big.sum())), big.dtype, big.shape)", big=big)
    total, dtype, shape = out.split(maxsplit=2)
    assert float(total) == float(big.sum()) and dtype == "float64" and shape.strip() == "(400000,)"


def test_the_command_line_stays_short_whatever_the_values():
    with runner_command({"x": np.zeros(1_000_000)}) as cmd:
        assert max(len(a) for a in cmd) < 4096
        assert os.path.getsize(cmd[-1]) > 8_000_000                 # the values are in the file
    assert not os.path.exists(cmd[-1])                               # and the file is gone after


def test_code_through_a_file_when_a_tool_stands_between():
    """fb.profile's child runs under ncu, which keeps its own stdin: the code goes through a file too, and what
    it binds and raises comes back as from fb.isolated."""
    import subprocess
    from feedbeast.isolated import child_env
    with runner_command({"big": np.arange(300_000)}, "print(int(big.sum()))\nraise fb.CheckFailed('no')\n") as cmd:
        assert max(len(a) for a in cmd) < 4096 and open(cmd[-1]).read().startswith("print(")
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=child_env(), stdin=subprocess.DEVNULL)
    assert r.stdout.split("\n")[0] == str(sum(range(300_000))) and '"CheckFailed"' in r.stdout and r.returncode == 3


def test_a_child_runs_in_the_mode_its_parent_gives_not_the_one_its_environment_says(monkeypatch):
    """The runner carries the parent's feedbeast.hooks.mode to the child (with the values), over what the child's
    own hooks set at its import: FEEDBEAST_HAZARDS=1 in the environment (which child_env() passes on unchanged)
    gives the child's course "check", and the parent's mode wins. runner_command(mode=...) gives another."""
    import subprocess
    from feedbeast import hooks
    from feedbeast.isolated import child_env
    monkeypatch.setenv("FEEDBEAST_HOOKS", "feedbeast.course")
    monkeypatch.setenv("FEEDBEAST_HAZARDS", "1")
    assert child_env()["FEEDBEAST_HAZARDS"] == "1"
    monkeypatch.setattr(hooks, "mode", hooks.Mode(hazards="report", untimed="timing is off"))
    assert fb.isolated("print(fb.hooks.mode.hazards, '|', fb.hooks.mode.untimed)").strip() == "report | timing is off"
    with runner_command({}, "print(repr(fb.hooks.mode.hazards))\n", mode=hooks.Mode()) as cmd:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=child_env(), stdin=subprocess.DEVNULL)
    assert r.stdout.strip() == "''", r.stdout + r.stderr
    probe = "import feedbeast.course, feedbeast as fb; print(fb.hooks.mode.hazards)"   # the same child, no runner
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          env=child_env()).stdout.strip() == "check"


def test_profile_and_racecheck_children_run_with_no_hazard_mode(monkeypatch, runner_modes):
    """fb.profile's child (under ncu) and fb.racecheck's (under compute-sanitizer) must not run hazard builds: the
    kernel's hazard build has its name (ncu would read it) and racecheck would check its tracing. Both get the
    parent's mode with hazards off, and the environment as child_env() gives it."""
    import importlib
    import types
    from feedbeast import hooks, profiling
    iso = importlib.import_module("feedbeast.isolated")
    envs = []

    def fake_run(cmd, **kw):
        envs.append(kw["env"].get("FEEDBEAST_HAZARDS"))
        return types.SimpleNamespace(stdout="", stderr="", returncode=0)
    monkeypatch.setattr(iso.subprocess, "run", fake_run)            # the same module object as profiling's
    monkeypatch.setattr(hooks, "mode", hooks.Mode(hazards="check", hazard_dump="/tmp/traces"))
    monkeypatch.setenv("FEEDBEAST_HAZARDS", "1")
    monkeypatch.setattr(profiling, "ncu_path", lambda: "ncu")
    with pytest.raises(fb.FeedbeastError, match="ncu profiled no kernel"):
        profiling._measure({}, "pass", "k", "t/k", None, 0, 1, 60, False)
    import feedbeast.device
    monkeypatch.setattr(feedbeast.device, "gpu", lambda: "a GPU")
    monkeypatch.setattr(iso, "find_sanitizer", lambda: "compute-sanitizer")
    iso.racecheck("pass")
    assert [(m.hazards, m.hazard_dump) for m in runner_modes] == [("", "/tmp/traces")] * 2, runner_modes
    assert envs == ["1", "1"], envs


def test_the_environment_is_read_whole_while_another_thread_changes_it(monkeypatch):
    """A grader started from a thread pool (the roster's, the test suite's) copies os.environ while pytest's own
    thread sets and unsets PYTEST_CURRENT_TEST: a copy that meets the change (KeyError) is read again."""
    import collections.abc
    import os
    import sys
    isolated = sys.modules["feedbeast.isolated"]         # the module (fb.isolated is its function)

    class Changing(collections.abc.MutableMapping):     # pytest itself sets and unsets a variable around the test
        def __init__(self):
            self.data, self.reads = {"A": "1", "PYTEST_CURRENT_TEST": "t"}, 0

        def __iter__(self):
            self.reads += 1
            return iter(list(self.data))

        def __getitem__(self, k):
            if self.reads == 1 and k == "PYTEST_CURRENT_TEST":   # unset by the other thread during the first copy
                raise KeyError(k)
            return self.data[k]

        def __len__(self):
            return len(self.data)

        def __setitem__(self, k, v):
            self.data[k] = v

        def __delitem__(self, k):
            del self.data[k]
    env = Changing()
    monkeypatch.setattr(os, "environ", env)
    assert isolated.environment() == {"A": "1", "PYTEST_CURRENT_TEST": "t"} and env.reads == 2
    monkeypatch.undo()
