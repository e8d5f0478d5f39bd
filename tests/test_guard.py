"""The check process's audit hook (feedbeast.course.guard), alone: in a child process, since a hook stays for good.

What the learner's code raises itself is refused, and counted even when their code catches the error; what a trusted
library raises for them passes (the toolkit packing a launch's arguments with ctypes, an import, a dataclass's
generated code, the hazard checker's forked replay); code made at run time counts as the learner's; the process's memory file is refused by any path.
"""
from __future__ import annotations

import json
import subprocess
import sys

CASES = [
    ("import ctypes\nctypes.addressof(ctypes.create_string_buffer(8))", "refused 'ctypes.addressof'"),
    ("Kernel._pack(types.SimpleNamespace(params=[(0, 4)], declared=None, _what=lambda i: 'n'), (3,))", "ran"),
    ("import sys\nsys._getframe()", "refused 'sys._getframe'"),
    ("def g():\n    yield 1\nx = g()\nx.gi_frame", "refused 'object.__getattr__'"),
    ("import numpy.ctypeslib\nnumpy.ctypeslib.ctypes.pythonapi['PyRun_SimpleString']", "refused 'ctypes.dlsym'"),
    ("import gc\ntry:\n    gc.get_objects()\nexcept Exception:\n    pass", "ran"),      # caught, still counted
    ("exec('import sys\\nsys._getframe()')", "refused 'sys._getframe'"),           # run-time code is theirs
    ("import json\ncompile('x = 1', json.__file__, 'exec')", "refused 'compile'"),    # unless named as a file
    ("import dataclasses\n@dataclasses.dataclass\nclass P:\n    x: int = 0\nP(1)", "ran"),
    ("import json\njson.dumps([1])", "ran"),
    ("open(b'/proc/self/../self/mem', 'rb')", "refused 'open'"),
    # the map of the process's addresses, which a view over a raw address needs (read through numpy too)
    ("open('/proc/self/maps')", "refused 'open'"),
    ("import numpy\nnumpy.loadtxt('/proc/self/maps', dtype=str, usecols=0)", "refused 'open'"),
    ("import os\nos.fork()", "refused 'os.fork'"),
    # fb.isolated's and fb.racecheck's child Python runs the code it is handed without this hook: no check starts
    # one, so the toolkit starts none for anyone (functools.partial(fb.racecheck, code) handed back to a check)
    ("importlib.import_module('feedbeast.isolated').run_child('pass', {}, timeout=60)", "refused 'open'"),
    # the hazard checker replays a long trace in forked processes (a pool: forks, threads, its workers stopped)
    ("assert importlib.import_module('feedbeast.hazards.check')._replay_parallel([(1,), (2, 3)]) == [1, 2]", "ran"),
    ("import os\nos.kill(os.getpid(), 0)", "refused 'os.kill'"),
    # a toolkit function handed os.fork or os.kill acts for no one: only the hazard replay's pool may fork and signal
    ("import os\nfrom feedbeast.stress import repeat_identical\nrepeat_identical(os.fork, n=1)", "refused 'os.fork'"),
    ("import functools, os\nfrom feedbeast.stress import repeat_identical\n"
     "repeat_identical(functools.partial(os.kill, os.getpid(), 0), n=1)", "refused 'os.kill'"),
]

SCRIPT = """
import json, sys, types
from feedbeast.course import guard
from feedbeast.launch import Kernel
import importlib
importlib.import_module("feedbeast.hazards.check")._replay = lambda *job: len(job)   # a replay's stand-in
guard.install(lambda name: name == "<learner>")
for src in json.loads(sys.argv[1]):
    try:
        exec(compile(src, "<learner>", "exec"), {"Kernel": Kernel, "types": types, "importlib": importlib})
        print("ran")
    except guard.Refused as e:
        print("refused '" + str(e).split("audit event '")[1].split("'")[0] + "'")
print(len(guard.refused()))
"""


def test_the_guard_refuses_the_learner_s_own_events_and_lets_trusted_libraries_act_for_them():
    out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps([c for c, _ in CASES])], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    want = [w for _, w in CASES]
    assert out.stdout.split("\n")[:len(CASES) + 1] == want + [str(sum(w != "ran" for w in want) + 1)], out.stdout


def test_only_the_hazard_replay_may_fork_signal_and_start_threads_for_the_learner():
    # the pool's exit stops a worker still alive by signal (os.kill): on an H200 it did, under lab 10's prepare_fp8;
    # the library as a whole is trusted for none of these (a toolkit function can be handed os.fork)
    from feedbeast.course import guard
    lib = guard._LIBRARY + "hazards" + __import__("os").sep + "check.py"
    assert guard._REPLAY_EVENTS == {"os.fork", "os.kill", "_thread.start_new_thread", "_thread.start_joinable_thread"}
    assert not any(guard._on_behalf(lib, e) for e in guard._REPLAY_EVENTS)
    assert not guard._on_behalf(lib, "subprocess.Popen")



HANDED_BACK = """
import os, sys, types
import numpy as np
import feedbeast.device
from feedbeast.course import guard, results
feedbeast.device.gpu = lambda index=0: types.SimpleNamespace(slug="a-gpu")   # a GPU, for the results log's folder
guard.install(lambda name: name == "<learner>", lambda name: name == "<check cell>")
ns = {"np": np, "sys": sys, "results": results, "types": types}
exec(compile("def make():\\n    return map(np.ndarray.tofile, [np.zeros(2)], [sys.argv[1] + '/x.bin'])\\n"
             "def direct():\\n    results.append_trace(types.SimpleNamespace(as_record=lambda: {'x': 1}))\\n",
             "<learner>", "exec"), ns)
for src in ("list(make())", "results._append_line('checks.jsonl', {'name': 'c'})", "direct()"):
    try:
        exec(compile(src, "<check cell>", "exec"), ns)
        print("ran")
    except guard.Refused as e:
        print("refused " + str(e).split("audit event ")[1].split(" ")[0].rstrip(":"))
print(sorted(os.listdir(sys.argv[1])))
"""


def test_a_check_cell_may_log_its_results_but_not_run_what_the_learner_handed_back(tmp_path):
    """A map over builtins that the learner's function returned writes a file when a check cell drives it, with no
    learner frame on the stack: refused, as the event comes from the check cell's own frame. The course's results
    log, which the toolkit's hooks call after each check on a GPU, writes its record (a grade on an H200 had
    refused it); a learner's function that calls the log itself stays refused."""
    import os
    out = subprocess.run([sys.executable, "-c", HANDED_BACK, str(tmp_path)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "FEEDBEAST_RESULTS": str(tmp_path / "r")})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:4] == ["refused 'open'", "ran", "refused 'os.mkdir'", "['r']"], out.stdout
    assert (tmp_path / "r" / "a-gpu" / "checks.jsonl").read_text().count("\n") == 1
