"""Where the library ends and the course begins: the timer's read flush (fb.bench(flush="read")), the sweep drawn from
GPU runs' records (feedbeast.course.results.plot_recorded, no name of the library's), one way to add what a GPU run
recorded to a skip, and the run modes read from feedbeast.hooks.mode. All run on a CPU."""
import importlib
import json
import os
import subprocess

import numpy as np
import pytest

import feedbeast as fb
from feedbeast import hooks, skip
from feedbeast.course import results
from test_measure import _FakeEvents as _Events      # events that log where they are recorded

fbb = importlib.import_module("feedbeast.bench")   # fb.bench is the function


@pytest.mark.parametrize("bad", ["write", "memset", None, "READ"])
def test_bench_refuses_a_flush_it_does_not_know_on_every_machine(bad):
    with pytest.raises(ValueError, match=r"flush is True .*\"read\".* or False, not"):
        fb.bench(lambda: None, name="x", flush=bad)


def test_bench_takes_the_read_flush(monkeypatch):
    monkeypatch.setattr(skip, "gpu", lambda: None)          # what needs_gpu() asks, here as on a GPU
    assert isinstance(fb.bench(lambda: None, name="ch07/decode", flush="read", record=False), fb.Skipped)


@pytest.mark.parametrize("flush, before_each", [("read", "read flush"), (True, "memset"), (False, None)])
def test_each_run_is_preceded_by_the_flush_asked_for(monkeypatch, flush, before_each):
    """flush="read": the read flush (and never the memset) before the warm-up runs and each timed run."""
    log = []
    monkeypatch.setattr(fbb, "_hold", lambda ns: log.append(("hold",)))
    monkeypatch.setattr(fbb, "_hold_for", lambda host_s: 10 ** 15)   # a hold no busy host outruns: one attempt
    monkeypatch.setattr(fbb, "flush_l2", lambda: log.append(("memset",)))
    monkeypatch.setattr(fbb, "read_flush_l2", lambda: log.append(("read flush",)))
    monkeypatch.setattr(_Events, "log", log)
    monkeypatch.setattr(fbb, "_Events", _Events)
    monkeypatch.setattr(importlib.import_module("feedbeast.memory"), "sync", lambda: None)
    times, _, _ = fbb._time(lambda i: log.append(("call", i)), warmup=3, reps=2, flush=flush)
    assert times == [1.0, 1.0]
    f = [(before_each,)] if before_each else []
    assert log == (f + f + [("call", 1)] + f + [("call", 2), ("hold",)]
                   + f + [("event", 0), ("call", 3), ("event", 1)] + f + [("event", 2), ("call", 4), ("event", 3)])


def _record(folder, **rec):
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "bench.jsonl").open("a") as f:
        f.write(json.dumps(rec) + "\n")


def test_a_sweep_not_timed_here_is_drawn_by_the_course_from_what_gpus_recorded(monkeypatch, tmp_path, capsys):
    """plot_recorded is the course's (it reads the results log, with or without the course's hooks installed): one
    line per GPU, labelled with the GPU and the date of its run; without any record, one line of text."""
    import matplotlib
    matplotlib.use("Agg")
    assert not hasattr(fb, "plot_recorded") and not hasattr(fbb, "plot_recorded")
    monkeypatch.setattr(results, "course_results", lambda: None)
    monkeypatch.setenv("FEEDBEAST_RESULTS", str(tmp_path))
    monkeypatch.setattr(hooks, "recorded", None)
    for gpu, day, values in (("NVIDIA H100 80GB HBM3", "23", (2400.0, 2900.0)), ("NVIDIA H200", "29", (3500.0, 4000.0))):
        for s, v in zip((1, 4), values):
            _record(tmp_path / gpu.lower().replace(" ", "-"), name=f"ch04/ring/stages={s}", value=v, unit="GB/s",
                    pct=v / 43, ceiling="ceiling/copy", median_ms=1.0, gpu=gpu, time=f"2026-11-{day}T01:00:00+00:00")
    fig, ax = results.plot_recorded({1: "ch04/ring/stages=1", 4: "ch04/ring/stages=4", 8: "ch04/ring/stages=8"},
                                    field="value", ylabel="GB/s")
    got = {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.get_lines()}
    assert got == {"NVIDIA H100 80GB HBM3 (2026-11-23)": ([1, 4], [2400.0, 2900.0]),
                   "NVIDIA H200 (2026-11-29)": ([1, 4], [3500.0, 4000.0])}, got
    assert results.plot_recorded({1: "ch04/other/stages=1"}) is None
    assert "no GPU run recorded these benchmarks" in capsys.readouterr().out
    fig, ax = results.plot_recorded({"one stage": {"a": "ch04/ring/stages=1"}, "four": {"a": "ch04/ring/stages=4"}})
    got = {ln.get_label(): list(ln.get_ydata()) for ln in ax.get_lines()}
    assert got == {"one stage, NVIDIA H100 80GB HBM3 (2026-11-23)": [2400.0 / 43],
                   "one stage, NVIDIA H200 (2026-11-29)": [3500.0 / 43],
                   "four, NVIDIA H100 80GB HBM3 (2026-11-23)": [2900.0 / 43],
                   "four, NVIDIA H200 (2026-11-29)": [4000.0 / 43]}, got


def test_a_skip_gets_what_a_gpu_run_recorded_once_from_one_function(monkeypatch):
    """bench, ceilings (through bench) and check add the recorded line with the same function, each of its kind."""
    monkeypatch.setattr(hooks, "recorded", lambda kind, name: f"recorded {kind} {name}")
    monkeypatch.setattr(skip, "gpu", lambda: None)          # what needs_gpu() asks, here as on a GPU
    assert fbb.with_recorded is skip.with_recorded
    assert fb.bench(lambda: None, name="b").reason.endswith("; recorded bench b")
    s = fb.Skipped("needs a GPU", "c")
    assert fb.check(s, None, name="c") is s and s.reason == "needs a GPU; recorded check c"
    assert fb.tally("c", s).reason == "needs a GPU; recorded check c"        # handed on again: named once
    monkeypatch.setattr(hooks, "recorded", None)
    assert skip.with_recorded(fb.Skipped("why", "d"), "d").reason == "why"


def test_one_name_for_the_sanitizer_mode_and_for_a_verdict():
    assert not hasattr(hooks, "under_sanitizer") and not hasattr(hooks, "record")


def test_dir_of_fb_lists_the_learners_library_not_its_plumbing():
    """dir(fb) and tab completion show the functions, classes and modules the chapters name; the plumbing modules
    stay importable (feedbeast.memory, fb.device._check in a test) but are neither listed nor offered as near misses."""
    listed = dir(fb)
    for name in ("compile", "tensor_map", "bench", "check", "racecheck", "Skipped", "sass", "hooks", "examples"):
        assert name in listed, name
    for plumbing in ("device", "memory", "launch", "view", "skip", "cache", "magic", "peaks", "timeline", "tensormap",
                     "_hazards", "_view"):
        assert plumbing not in listed, plumbing
    assert all(hasattr(fb, n) for n in fb.__all__)
    assert importlib.import_module("feedbeast.memory").to_device is fb.to_device
    with pytest.raises(AttributeError, match=r"did you mean fb\.empty\?"):
        fb.emtpy
    with pytest.raises(AttributeError) as e:
        fb.tensormaps
    assert "fb.tensormap?" not in str(e.value) and "fb.tensor_map" in str(e.value)


def test_the_library_needs_no_notebook_stack_and_the_course_says_what_to_install(monkeypatch, capsys, tmp_path):
    """The grader's packages are the extra `course`, not the library's: without nbformat the library still imports
    and the course's command line names what to install instead of a traceback."""
    import sys
    tomllib = pytest.importorskip("tomllib")     # Python 3.11+
    from pathlib import Path
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    core = {d.split(">")[0].split("=")[0].split("<")[0].strip() for d in project["dependencies"]}
    assert not core & {"nbformat", "nbclient"}, core
    assert {"nbformat", "nbclient"} <= {d.split(">")[0] for d in project["optional-dependencies"]["course"]}
    from feedbeast.course.__main__ import COURSE_PACKAGES, main
    assert set(COURSE_PACKAGES) == {"nbformat", "nbclient"}
    for name in list(sys.modules):
        if name.split(".")[0] == "nbformat" or name in ("feedbeast.course.grade", "feedbeast.course.roster"):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "nbformat", None)     # what import finds where nbformat is not installed
    lab = tmp_path / "00-copy-kernel.ipynb"
    lab.write_text("{}")
    root = Path(__file__).resolve().parents[1]
    from feedbeast.errors import install_command
    for here, pins in ((root, f" -r {root / 'requirements/cu13.txt'} "), (tmp_path, " (")):  # in a checkout: its pins
        monkeypatch.chdir(here)
        for argv in (["grade", str(lab)], ["roster", "--homes", str(tmp_path)]):
            assert main(argv) == 3          # nothing ran: never grade's 2 (PARTIAL), which make grade lets pass
            err = capsys.readouterr().err
            assert "needs nbformat" in err and f"{sys.executable} -m pip install \"feedbeast[cu13,course]\"{pins}" in err, err
    assert lab.read_text() == "{}"
    alone = subprocess.run([sys.executable, "-c", "import sys; sys.modules['nbformat'] = sys.modules['nbclient'] = None\n"
                            "import feedbeast as fb; import feedbeast.course; print(fb.compile.__name__)"],
                           capture_output=True, text=True, env={**os.environ, "FEEDBEAST_HOOKS": "feedbeast.course"})
    assert alone.returncode == 0 and alone.stdout.strip() == "compile", alone.stderr[-2000:]


def test_a_check_after_a_skipped_launch_is_that_skip_with_the_checks_record(monkeypatch):
    """print(fb.check(y, ref, name=..., after=r)): where the launch r could not run, the launch's own reason and
    what a GPU run recorded for this check (the chapters' evidence on a CPU); y, never written, is not compared,
    but a shape mistake is still said on every machine; after a launch that ran (None), the check compares."""
    monkeypatch.setattr(hooks, "recorded", lambda kind, name: f"recorded {kind} {name}")
    r = fb.Skipped("needs sm_90a, this machine has none", "launch ring_rowsum")
    y = np.full((4,), np.nan, np.float32)
    got = fb.check(y, np.ones(4), name="ring_rowsum 4", after=r)
    assert got is r and r.reason == "needs sm_90a, this machine has none; recorded check ring_rowsum 4", r.reason
    with pytest.raises(fb.CheckFailed, match=r"output has shape \(4,\) but the reference has \(5,\)"):
        fb.check(y, np.ones(5), name="ring_rowsum 5", after=fb.Skipped("needs a GPU", "launch"))
    assert not fb.check(y, np.ones(4), name="unwritten", after=None, raise_on_fail=False)
    assert fb.check(np.ones(4, np.float32), np.ones(4), name="written", after=None)


def test_the_readme_s_example_of_the_toolkit_alone_runs_outside_the_course(tmp_path):
    """The README's script for the library in one's own project: run as it stands, in a folder with no checkout and
    without the course's hooks; the check passes on a GPU and is a skip without one."""
    import re
    import sys
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    script = re.search(r"\*\*The toolkit alone.*?```python\n(.*?)```", readme, re.S).group(1)
    env = {k: v for k, v in os.environ.items() if k not in ("FEEDBEAST_HOOKS", "FEEDBEAST_COURSE")}
    env["FEEDBEAST_CACHE"] = str(tmp_path / "cache")
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "FMUL" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("check: passed") if fb.device.gpu() else last.startswith("skipped: check: needs a GPU"), last
