"""The check process's audit hook (feedbeast.course.guard), alone: in a child process, since a hook stays for good.

What the learner's code raises itself is refused, and named even when their code catches the error; what a trusted
library raises for them passes (the toolkit packing a launch's arguments with ctypes, an import); the refusal of the
library's ctypes packing stays as narrow as that: the same event from feedbeast.course is refused.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import types
    from feedbeast.course import guard
    from feedbeast.launch import Kernel
    guard.install(lambda name: name == "<learner>")

    def learner(src):
        try:
            exec(compile(src, "<learner>", "exec"), {"Kernel": Kernel, "types": types})
            return "ran"
        except guard.Refused as e:
            return "refused " + str(e).split("audit event ")[1].split(":")[0]

    fake = "types.SimpleNamespace(params=[(0, 4)], declared=None, _what=lambda i: 'n')"
    print(learner("import ctypes\\nctypes.addressof(ctypes.create_string_buffer(8))"))
    print(learner(f"Kernel._pack({fake}, (3,))"))                  # the toolkit packing arguments for them
    print(learner("import sys\\nsys._getframe()"))
    print(learner("def g():\\n    yield 1\\nx = g()\\nx.gi_frame"))
    print(learner("import numpy.ctypeslib\\nnumpy.ctypeslib.ctypes.pythonapi['PyRun_SimpleString']"))
    print(learner("import gc\\ntry:\\n    gc.get_objects()\\nexcept Exception:\\n    pass"))   # caught: still named
    print(learner("exec('1')"))
    print(learner("import json\\njson.dumps([1])"))                 # an ordinary library call
    print(len(guard.refused()))
''')


def test_the_guard_refuses_the_learner_s_own_events_and_lets_trusted_libraries_act_for_them():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:9] == [
        "refused 'ctypes.addressof'", "ran", "refused 'sys._getframe'", "refused 'object.__getattr__'",
        "refused 'ctypes.dlsym'", "ran", "refused 'compile'", "ran", "6"], out.stdout
