"""Run GPU code in a separate Python process, so that a kernel that hangs or faults on purpose
(a demonstration, a planted bug in a test) cannot take the notebook's own GPU context with it.

    out = fb.isolated('''
        mod = fb.compile(src, "sm_90a", debug=True)
        ...
        fb.sync()
    ''', src=broken_source)

The code runs with `fb` (feedbeast) and `np` imported and the keyword values bound as variables
(they are pickled: strings, numbers, numpy arrays). It returns what the code printed. A feedbeast error
raised there (BarrierTimeout, KernelFault, CheckFailed, ...) is raised here with the same type and message.

Under `make sanitize` nothing runs and a Skipped is returned: compute-sanitizer follows child processes,
so the deliberate hang or fault would be counted as a report against the notebook.
"""
from __future__ import annotations

import base64
import json
import os
import pickle
import subprocess
import sys
import textwrap

from . import errors

_RUNNER = r"""
import base64, json, pickle, sys, traceback
import numpy as np
import feedbeast as fb
values = pickle.loads(base64.b64decode(sys.argv[1]))
globals().update(values)
try:
    exec(compile(sys.stdin.read(), "<isolated>", "exec"), globals())
except fb.FeedbeastError as e:
    print("\n__FB_ERROR__" + json.dumps({"type": type(e).__name__, "message": str(e)}))
    sys.exit(3)
"""


def isolated(code: str, *, timeout: float = 300, **values):
    from .runmode import under_sanitizer
    if under_sanitizer():
        from .skip import Skipped
        return Skipped("not run under compute-sanitizer (it would count the deliberate failure as a report)",
                       "fb.isolated")
    blob = base64.b64encode(pickle.dumps(values)).decode()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.dirname(os.path.dirname(__file__)),
                                                    env.get("PYTHONPATH", "")] if p)
    r = subprocess.run([sys.executable, "-c", _RUNNER, blob], input=textwrap.dedent(code), text=True,
                       capture_output=True, timeout=timeout, env=env)
    out, marker = r.stdout, "\n__FB_ERROR__"
    if marker in out:
        out, payload = out.split(marker, 1)
        info = json.loads(payload.strip().splitlines()[0])
        from .launch import LOST_HINT
        message = info["message"].replace(LOST_HINT, "It happened in a separate process (fb.isolated): "
                                          "this one can go on using the GPU.")
        raise getattr(errors, info["type"], errors.FeedbeastError)(message)
    if r.returncode:
        raise errors.FeedbeastError(f"the isolated process failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    return out
