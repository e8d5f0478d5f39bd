"""feedbeast.hooks: the library calls the course only through it, and only what was installed there (CPU only)."""
from __future__ import annotations

import importlib
import json
import subprocess
import sys

import numpy as np
import pytest

import feedbeast as fb
from feedbeast import hooks


def _in_a_fresh_process(hooks_variable: str, **variables) -> dict:
    code = ("import json, sys, feedbeast as fb\n"
            "print(json.dumps({'course': sorted(m for m in sys.modules if m.startswith('feedbeast.course')),\n"
            "                  'verdict': [f.__module__ for f in fb.hooks.on_verdict],\n"
            "                  'bench': [f.__module__ for f in fb.hooks.on_bench],\n"
            "                  'recorded': fb.hooks.recorded is not None,\n"
            "                  'hazards': [fb.hooks.mode.hazards, fb.hooks.mode.hazard_dump]}))")
    from feedbeast.isolated import child_env
    env = {k: v for k, v in child_env().items() if not k.startswith("FEEDBEAST_HAZARDS")}
    env["FEEDBEAST_HOOKS"] = hooks_variable
    env.update(variables)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_plain_import_installs_nothing_of_the_course():
    got = _in_a_fresh_process("")
    assert got == {"course": [], "verdict": [], "bench": [], "recorded": False, "hazards": ["", ""]}


def test_the_hazard_mode_comes_from_the_course_never_from_a_variable_the_library_reads():
    """FEEDBEAST_HAZARDS and FEEDBEAST_HAZARDS_DUMP are the course's: with its hooks they set hooks.mode at the
    import (1 is "check"), without them a plain import runs in no hazard mode whatever they say."""
    dump = {"FEEDBEAST_HAZARDS_DUMP": "/tmp/traces"}
    assert _in_a_fresh_process("", FEEDBEAST_HAZARDS="1", **dump)["hazards"] == ["", ""]
    for value, mode in (("1", "check"), ("report", "report"), ("isolated", "isolated"), ("0", ""), ("yes", "")):
        got = _in_a_fresh_process("feedbeast.course", FEEDBEAST_HAZARDS=value, **dump)["hazards"]
        assert got == [mode, "/tmp/traces"], (value, got)


def test_the_course_installs_itself_where_feedbeast_hooks_names_it():
    got = _in_a_fresh_process("feedbeast.course")
    assert "feedbeast.course" in got["course"] and "feedbeast.course.grade" not in got["course"]   # only what it needs
    assert got["verdict"] == ["feedbeast.course.verdicts"] and got["bench"] == ["feedbeast.course.results"]
    assert got["recorded"]


def test_installing_twice_installs_once():
    course = importlib.import_module("feedbeast.course")
    before = [list(hooks.on_verdict), list(hooks.on_bench), list(hooks.on_check), list(hooks.on_profile),
              list(hooks.on_trace), list(hooks.on_hazard)]
    launch = list(hooks.before_launch)
    course.install()
    course.install()
    assert [hooks.on_verdict, hooks.on_bench, hooks.on_check, hooks.on_profile, hooks.on_trace, hooks.on_hazard] \
        == before
    assert hooks.before_launch == launch and hooks.before_launch.count(course.hazards_from_environment) == 1


def test_checks_report_their_outcome_and_a_bad_status_is_refused(monkeypatch):
    heard = []
    monkeypatch.setattr(hooks, "on_verdict", [lambda *v: heard.append(v)])
    fb.check(np.ones(4, np.float32), np.ones(4), name="four ones")
    fb.Skipped("needs a GPU, this machine has none", "launch k")
    assert [(s, n) for s, n, _ in heard] == [("passed", "four ones"), ("skipped", "launch k")]
    with pytest.raises(ValueError, match="passed, failed or skipped"):
        hooks.verdict("maybe", "x")


def test_the_sanitizer_mode_turns_timing_and_counters_off(monkeypatch):
    bench_mod = importlib.import_module("feedbeast.bench")
    monkeypatch.setattr(bench_mod, "needs_gpu", lambda what="": None)      # as on a GPU
    monkeypatch.setattr(hooks, "mode", hooks.Mode(sanitizer=True, untimed="timing is off", unprofiled="no counters"))
    ran = []
    s = fb.bench(lambda: ran.append(1), name="t/x")
    assert ran == [1] and isinstance(s, fb.Skipped) and str(s) == "skipped: bench t/x: timing is off"
    assert str(fb.ceiling("copy")) == "skipped: copy ceiling: timing is off"
    assert str(fb.profile(lambda: None, name="t/p")) == "skipped: profile t/p: no counters"
    monkeypatch.setattr(fb, "gpu", lambda: "a GPU")
    assert fb.pick(4096, 33, sanitize=512) == 512


def test_a_results_log_hears_each_bench_result_only_when_asked(monkeypatch):
    bench_mod = importlib.import_module("feedbeast.bench")
    heard = []
    monkeypatch.setattr(hooks, "on_bench", [heard.append])
    monkeypatch.setattr(bench_mod, "needs_gpu", lambda what="": None)
    monkeypatch.setattr(bench_mod, "_time", lambda call, warmup, reps, flush: ([1.0, 1.0, 1.0], 5.0, True))
    monkeypatch.setattr(bench_mod, "_against_peak", lambda res, bound: None)
    r = fb.bench(lambda: None, name="t/heard", nbytes=1e6)
    fb.bench(lambda: None, name="t/not", nbytes=1e6, record=False)
    assert [x.name for x in heard] == ["t/heard"] and heard[0] is r and r.kernels == []
