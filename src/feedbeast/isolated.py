"""Run GPU code in a separate Python process, so that a kernel that hangs or faults on purpose
(a demonstration, a planted bug in a test) cannot take the notebook's own GPU context with it.

Chapter 04 runs a kernel that hangs on purpose through it.

    out = fb.isolated('''
        mod = fb.compile(src, "sm_90a", debug=True)
        ...
        fb.sync()
    ''', src=broken_source)

The code runs with `fb` (feedbeast) and `np` imported and the keyword values bound as variables
(they are pickled: strings, numbers, numpy arrays). It returns what the code printed. A feedbeast error
raised there (BarrierTimeout, KernelFault, CheckFailed, ...) is raised here with the same type and message.

`fb.isolated(code, name="ch04/hung ring", arch="sm_90a", ...)` also records the outcome where a GPU runs it
(hooks.on_hazard, as a hazard check's), and where none can (or not that arch), returns a Skipped followed by that
record instead of running the code.

Under `make sanitize` nothing runs and a Skipped is returned: compute-sanitizer follows child processes,
so the deliberate hang or fault would be counted as a report against the notebook.

The one child-process runner of the toolkit is `runner_command(values, code=None, mode=None)`: a context manager
giving the command line of a Python process that imports `fb` and `np`, runs in `mode` (a feedbeast.hooks.Mode;
default this process's), binds `values` (pickled, with the mode, through a file), runs `code` (through a file when
given, else stdin) and reports a feedbeast error as `__FB_ERROR__` and exit status 3. fb.isolated and the hazard
check of a launch in a separate process (feedbeast.hazards, mode "isolated") run it as it is (run_child), racecheck
under compute-sanitizer, fb.profile under Nsight Compute; a tool that must run code in another process puts its own
program in front of that command line. Its environment is child_env(), this one's: what differs in the child is
its mode, never a variable.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from . import errors

_RUNNER = r"""
import json, pickle, sys, traceback
import numpy as np
import feedbeast as fb
with open(sys.argv[1], "rb") as _f:      # the values come through a file: a command line holds 128 KiB at most
    values, _mode = pickle.load(_f)
fb.hooks.mode = fb.hooks.Mode(**_mode)   # the parent's word, over what hooks installed at import set
globals().update(values)
_code = open(sys.argv[2]).read() if len(sys.argv) > 2 else sys.stdin.read()
try:
    exec(compile(_code, "<isolated>", "exec"), globals())
except fb.FeedbeastError as e:
    print("\n__FB_ERROR__" + json.dumps({"type": type(e).__name__, "message": str(e)}))
    sys.exit(3)
"""


@contextlib.contextmanager
def runner_command(values: dict, code: str | None = None, mode=None):
    """[python, -c, the runner, a file holding `values` and the mode(, a file holding `code`)]: the one way the
    toolkit runs code in a child process (fb.isolated, the isolated hazard check, fb.racecheck, fb.profile). The
    child runs in `mode` (a feedbeast.hooks.Mode; None: this process's). The values go through a file, never the
    command line (Linux limits one argument to 128 KiB: a few numpy arrays pass that); the code through a file
    when given (a tool in between, such as ncu, keeps its own stdin), else through stdin."""
    from . import hooks
    with tempfile.TemporaryDirectory(prefix="fb-isolated-") as tmp:
        path = os.path.join(tmp, "values.pickle")
        with open(path, "wb") as f:
            pickle.dump((values, dataclasses.asdict(mode if mode is not None else hooks.mode)), f)
        cmd = [sys.executable, "-c", _RUNNER, path]
        if code is not None:
            cmd.append(os.path.join(tmp, "code.py"))
            with open(cmd[-1], "w") as f:
                f.write(textwrap.dedent(code))
        yield cmd


def environment() -> dict:
    """A copy of this process's environment, read whole even while another thread sets or unsets a variable (a
    grader started from a thread pool, as the roster and the test suite start several, while pytest marks each
    test in PYTEST_CURRENT_TEST): copying os.environ as it changes raises KeyError or RuntimeError."""
    for _ in range(100):
        try:
            return dict(os.environ)
        except (KeyError, RuntimeError):
            continue
    return dict(os.environ)


def child_env() -> dict:
    """This environment, with the folder feedbeast is imported from first on PYTHONPATH: every child of the
    toolkit's runner gets it, unchanged otherwise (how the child runs travels as its mode, runner_command)."""
    env = environment()
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.dirname(os.path.dirname(__file__)),
                                                    env.get("PYTHONPATH", "")] if p)
    return env


def isolated(code: str, *, timeout: float = 300, name: str = "", arch: str | None = None, **values):
    """fb.isolated (run_child). `arch`: the arch the code's kernels need (fb.needs); where this machine cannot run
    them, nothing runs and a Skipped says why. With a `name`, the outcome (what the code printed, or the error it
    raised) is handed to hooks.on_hazard under it, and where the code does not run (no GPU, not the `arch`, make
    sanitize) the Skipped shows what a GPU run recorded under that name (a deliberate hang's BarrierTimeout, say).
    `name`, `arch` and `timeout` cannot be handed to the code."""
    from . import hooks
    from .skip import Skipped, needs, needs_gpu, with_recorded
    what = f"fb.isolated {name}" if name else "fb.isolated"
    digest = _code_digest(code, values) if name else ""

    def recorded(skip):
        return with_recorded(skip, name, "hazard", digest) if name else skip
    cannot = needs(arch, what) if arch else needs_gpu(what) if name else None
    if cannot is not None:
        return recorded(cannot)
    try:
        out = run_child(code, values, timeout=timeout, what=what)
        if isinstance(out, Skipped):     # make sanitize: nothing ran
            return recorded(out)
    except errors.FeedbeastError as e:
        if name:
            hooks.emit(hooks.on_hazard, {"name": name, "tool": "fb.isolated", "violations": None, "ok": False,
                                         "text": f"{type(e).__name__}: {e}", "source": digest})
        raise
    if name:
        hooks.emit(hooks.on_hazard, {"name": name, "tool": "fb.isolated", "violations": None, "ok": True,
                                     "text": out.rstrip("\n") or "(printed nothing)", "source": digest})
    return out


def _code_digest(code: str, values: dict) -> str:
    """The digest of a child's code and the values it is handed (a kernel's source, sizes, arrays by shape, dtype
    and bytes): what a record of it names."""
    import hashlib
    from .skip import source_digest

    def text(v):
        if isinstance(v, str):
            return v
        if isinstance(v, (bool, int, float, type(None))):
            return repr(v)
        try:                           # a numpy array (or what converts to one): its shape, dtype and bytes
            import numpy as np
            a = np.ascontiguousarray(v)
            return f"{a.shape} {a.dtype} {hashlib.sha256(a.tobytes()).hexdigest()}"
        except Exception:
            return type(v).__name__
    return source_digest(textwrap.dedent(code), *(f"{k}={text(v)}" for k, v in sorted(values.items())))


def run_child(code: str, values: dict, *, timeout: float = 300, mode=None, what: str = "fb.isolated"):
    """fb.isolated: `code` on the runner with `values` bound, in `mode` (runner_command). Returns what it printed;
    a feedbeast error raised there is raised here. Under `make sanitize`, a Skipped naming `what`."""
    from . import hooks
    if hooks.mode.sanitizer:
        from .skip import Skipped
        return Skipped("not run under compute-sanitizer (it would count the deliberate failure as a report)", what)
    with runner_command(values, mode=mode) as cmd:
        r = subprocess.run(cmd, input=textwrap.dedent(code), text=True, capture_output=True, timeout=timeout,
                           env=child_env())
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


# ---- the same runner under compute-sanitizer (chapter 04 runs a planted race under racecheck)

def find_sanitizer() -> str | None:
    """compute-sanitizer from the CUDA wheels, PATH, $CUDA_HOME/bin or /usr/local/cuda/bin."""
    try:
        import cuda.pathfinder as pf
        p = pf.find_nvidia_binary_utility("compute-sanitizer")
        if p:
            return p
    except Exception:
        pass
    p = shutil.which("compute-sanitizer")
    if p:
        return p
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            for cand in (Path(root) / "bin" / "compute-sanitizer",
                         Path(root) / "compute-sanitizer" / "compute-sanitizer"):
                if cand.is_file() and os.access(cand, os.X_OK):
                    return str(cand)
    return None


_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+) error")
_RACE = re.compile(r"RACECHECK SUMMARY:\s*(\d+) hazards? displayed\s*\((\d+) errors?,\s*(\d+) warnings?\)")


def count_reports(log: str, tool: str) -> int | None:
    """Reports in a sanitizer log: errors (and, for racecheck, hazards of any severity). None if no summary."""
    if tool == "racecheck":
        m = _RACE.findall(log)
        if m:
            return int(m[-1][0])
    m = _SUMMARY.findall(log)
    return int(m[-1]) if m else None


def racecheck(code: str, *, timeout: float = 300, name: str = "", arch: str | None = None, **values):
    """Run `code` (as fb.isolated runs it: `fb`, `np` and the keyword values bound) in a child Python process under
    compute-sanitizer racecheck. Returns (hazards reported, the sanitizer's summary lines), or a Skipped: with
    no GPU, no compute-sanitizer, or inside `make sanitize` (a sanitizer inside a sanitizer). With a `name`, the
    outcome is handed to hooks.on_hazard under it, and a skip shows what a GPU run recorded under it. `arch`: the
    arch the code's kernels need (fb.needs); where this machine cannot run them, a Skipped (a kernel that could not
    launch is no clean run). `name`, `arch` and `timeout` are this function's own: the code cannot be handed values
    of those names."""
    from .device import gpu
    from . import hooks
    from .skip import Skipped, needs, with_recorded
    what = f"racecheck of {name}" if name else "racecheck"
    digest = _code_digest(code, values) if name else ""

    def skip(reason):
        s = Skipped(reason, what)
        return with_recorded(s, name, "hazard", digest) if name else s
    if gpu() is None:
        return skip("needs a GPU, this machine has none")
    cannot = needs(arch, what) if arch else None
    if cannot is not None:
        return with_recorded(cannot, name, "hazard", digest) if name else cannot
    if hooks.mode.sanitizer:
        return skip("not run inside make sanitize (it runs its own racecheck)")
    san = find_sanitizer()
    if san is None:
        return skip("needs compute-sanitizer (a CUDA toolkit's bin/ on PATH, or CUDA_HOME)")
    # no hazard builds in the child: racecheck checks the kernel as written, not its traced build
    with runner_command(values, mode=dataclasses.replace(hooks.mode, hazards="")) as child:
        cmd = [san, "--tool", "racecheck", "--racecheck-report", "all", "--report-api-errors", "no",
               "--target-processes", "application-only", *child]
        r = subprocess.run(cmd, input=textwrap.dedent(code), text=True, capture_output=True, timeout=timeout,
                           env=child_env())
    log = r.stdout + r.stderr
    summary = [ln.strip() for ln in log.splitlines() if "SUMMARY" in ln]
    hazards = count_reports(log, "racecheck")
    if name:       # a child that failed checked less than its code: its count is no evidence of a clean run
        head = (f"racecheck: {hazards} hazards reported" if hazards is not None
                else "racecheck: no summary in its output")
        if r.returncode:
            head += f"; the code under it exited with status {r.returncode}"
        hooks.emit(hooks.on_hazard, {"name": name, "tool": "racecheck", "violations": hazards,
                                     "ok": hazards == 0 and r.returncode == 0, "text": "\n".join([head, *summary]),
                                     "source": digest})
    return hazards, summary
