"""What the learner's code may not do inside the check process: CPython's audit events (PEP 578) that reach the
grader's own state from Python.

The check process runs the learner's definitions next to the lab's checks (a Numba kernel, a host function that
builds tensor maps, a model of a ring), so a learner's function runs while a check runs. notebook.refusals()
turns away the plain forgeries before anything runs; this guard stops, while the code runs, the ways around it that
the interpreter itself reports (the audit events table of the Python docs, "sys.addaudithook"):

- frames, tracebacks, generators and code objects read from Python (`sys._getframe`, `gi_frame`, `tb_frame`,
  `f_code`, ...): the check's locals, its job and its signing key are one frame away;
- the garbage collector's lists of objects (`gc.get_objects`, `get_referrers`, `get_referents`);
- native calls and memory through ctypes (`dlopen`, `dlsym`, `PyObj_FromPtr`, `string_at`, ...) and the
  process's memory file (`/proc/.../mem`);
- code made at run time (`compile`, `exec`, a new code or function object, `marshal`, `pickle` classes), which
  would run outside the learner's cells and so outside this guard's view;
- other processes, threads, signals and audit hooks of its own.

An event is refused when it comes from the learner's cells (each is compiled under its own file name:
notebook.Notebook.run): the nearest frame of theirs on the stack is reached from the event without passing through
a library trusted to do it on their behalf:
- the import system, which reads, compiles and runs a module the learner's code imports (a module the notebook
  may import: notebook.IMPORTABLE);
- Numba's CUDA package, whose simulator names a `cuda.shared.array` by the file and line of the learner's call (a
  frame and a traceback it keeps to itself) and which compiles the learner's kernels;
- the toolkit's library (not feedbeast.course), for the ctypes buffers a launch packs its arguments in
  (`ctypes.addressof`, `ctypes.cdata`) and nothing else.
Audit hooks cannot be removed once added, so nothing the notebook runs later turns the guard off.
"""
from __future__ import annotations

import os
import sys

# Refused while learner code is on the stack. (Events from the table of "Audit events" in the Python docs.)
REFUSED = frozenset({
    "sys._getframe", "sys._current_frames", "sys._current_exceptions", "object.__getattr__",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents",
    "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.PyObj_FromPtr", "ctypes.string_at",
    "ctypes.wstring_at", "ctypes.cdata", "ctypes.cdata/buffer", "ctypes.addressof",
    "compile", "exec", "code.__new__", "function.__new__", "marshal.loads", "marshal.load", "pickle.find_class",
    "sys.addaudithook", "sys.settrace", "sys.setprofile", "sys._settraceallthreads", "sys._setprofileallthreads",
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill",
    "os.killpg", "signal.pthread_kill", "_thread.start_new_thread", "os.startfile", "pty.spawn",
})


class Refused(RuntimeError):
    """What the learner's code did that the check process does not allow."""


_refused: list[str] = []     # every refusal, kept for the grade even when the notebook's code catches the error


def refused() -> list[str]:
    """What was refused so far (the messages of the Refused errors raised)."""
    return list(_refused)


def _proc_mem(args) -> bool:
    path = str(args[0]) if args else ""
    return path.startswith("/proc/") and path.rstrip("/").rsplit("/", 1)[-1] in ("mem", "pagemap", "environ")


_PACKING = frozenset({"ctypes.addressof", "ctypes.cdata", "ctypes.cdata/buffer"})
_LIBRARY = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep       # feedbeast/
_COURSE = os.path.dirname(os.path.abspath(__file__)) + os.sep                           # feedbeast/course/


def _on_behalf(name: str, event: str) -> bool:
    """Is a frame of file `name` a library trusted to raise `event` for the learner's code (see the docstring)?"""
    if name.startswith("<frozen importlib._bootstrap"):
        return True
    cuda = os.path.dirname(getattr(sys.modules.get("numba.cuda"), "__file__", None) or "")
    if cuda and name.startswith(cuda + os.sep):
        return True
    return event in _PACKING and name.startswith(_LIBRARY) and not name.startswith(_COURSE)


def install(is_learner_file, place=lambda name, line: f"{name} line {line}") -> None:
    """From now on, refuse REFUSED events (and opening /proc/*/mem) that come from a frame whose file name satisfies
    `is_learner_file` (see the docstring). `place(file name, line)` names the line as the learner knows it."""
    busy = [False]
    getframe = sys._getframe

    def hook(event, args):
        if busy[0] or not (event in REFUSED or (event == "open" and _proc_mem(args))):
            return
        busy[0] = True
        try:
            f, on_behalf = getframe(1), False
            while f is not None:
                name = f.f_code.co_filename
                if is_learner_file(name):
                    if on_behalf:
                        return
                    why = (f"{place(name, f.f_lineno)} raised Python's audit event {event!r}: the grader does not "
                           "run code that reads frames or the garbage collector's objects, calls native code, or "
                           "makes code at run time (any of these reaches the checks' own state)")
                    _refused.append(why)
                    raise Refused(why)
                on_behalf = on_behalf or _on_behalf(name, event)
                f = f.f_back
        finally:
            busy[0] = False

    sys.addaudithook(hook)
