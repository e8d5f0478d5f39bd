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

An event is refused when it comes from the learner's code: the nearest frame on the stack that is not the
grader's or an installed library's (the learner's cells, each compiled under its own name by
notebook.Notebook.run, and code made at run time, whose file is no file: `<string>`) is reached from the event
without passing through a library trusted to act for it:
- the import system, which reads, compiles and runs a module the learner's code imports (a module the notebook
  may import: notebook.IMPORTABLE);
- Numba and llvmlite, which compile the learner's kernels (Numba's simulator names a `cuda.shared.array` by the
  file and line of the learner's call: a frame and a traceback it keeps to itself); not for a file written, a
  pickle loaded or a program started (`numba.core.serialize` unpickles whatever bytes it is handed);
- the standard library's class makers (collections' namedtuple, typing, dataclasses, enum, abc), which read the
  caller's frame for a module name, a function's signature, and set a new class's attributes; not functools,
  whose update_wrapper gets and sets any attribute named to it;
- the toolkit's library (not feedbeast.course), for the ctypes calls that pack a launch's arguments and read a
  debug build's report, its compile cache's files, and the frames, attributes and classes it and the libraries
  it calls (cuda.core) read and set for their own use; no toolkit function hands a frame back or sets an
  attribute the caller names.
- the hazard checker's parallel replay of a long trace (feedbeast.hazards.check._replay_parallel, that function
  alone, with only the standard library between it and the event): the processes it forks, the threads of its pool
  and the stopping of its workers. Such a child never returns to the frames it was forked from (multiprocessing ends
  it with os._exit), so its walk stops there; what it runs is checked as in the parent. A fork from anywhere else,
  a toolkit function handed `os.fork` included, stays refused, and its child keeps the whole walk.
The code that raised an event is also asked for: the nearest frame that is not the standard library's or another
installed library's (they act for whoever called them). Where that is a frame of the grader's own cells, or, for a
file written, moved or removed, a pickle loaded or a program started, a frame of the toolkit or the course not
trusted with it, no learner frame need be on the stack: the learner's code handed back a callable (a map or a
chain over builtins) that the check's own unpacking runs. That is refused too.
Setting an attribute of a function or class (`object.__setattr__`: a `__code__` swapped), opening a file for
writing (the compile cache a later check reads), and renaming, linking, removing, truncating or changing the
mode of a file or folder (a solution notebook another grade reads) are refused too.
Code made at run time is allowed (dataclasses, namedtuple and Numba make some), as learner code: `compile` and
`exec` are refused only when the code would carry the name of an installed file or of the grader's own cells.
Audit hooks cannot be removed once added, so nothing the notebook runs later turns the guard off. Not every way
around is an audit event (CPython 3.11 raises none when a thread starts): the static rules of
notebook.refusals() turn away the modules that lead there (threading, ctypes, gc, inspect, sys).
"""
from __future__ import annotations

import os
import re
import sys
import sysconfig
import threading

# Refused from the learner's code. (Events from the table of "Audit events" in the Python docs; a thread's start
# is `_thread.start_new_thread` in 3.12 and `_thread.start_joinable_thread` from 3.13.)
REFUSED = frozenset({
    "sys._getframe", "sys._current_frames", "sys._current_exceptions", "object.__getattr__", "object.__setattr__",
    "object.__delattr__",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents",
    "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.PyObj_FromPtr", "ctypes.string_at",
    "ctypes.wstring_at", "ctypes.cdata", "ctypes.cdata/buffer", "ctypes.addressof", "ctypes.call_function",
    "code.__new__", "function.__new__", "marshal.loads", "marshal.load", "pickle.find_class",
    "sys.addaudithook", "sys.settrace", "sys.setprofile", "sys._settraceallthreads", "sys._setprofileallthreads",
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill",
    "os.killpg", "signal.pthread_kill", "_thread.start_new_thread", "_thread.start_joinable_thread",
    "os.startfile", "pty.spawn",
    # the file system: a solution, a cache or a results file renamed, linked, removed or truncated is what a later
    # check or another learner's grade reads (the toolkit's own compile cache may: _LIBRARY_EVENTS)
    "os.rename", "os.remove", "os.rmdir", "os.symlink", "os.link", "os.truncate", "os.chmod", "os.chown",
    "os.chflags", "os.lchflags", "os.mkdir", "os.utime", "os.setxattr", "os.removexattr", "os.chdir",
    "shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.copytree", "shutil.chown", "shutil.move",
    "shutil.rmtree", "shutil.make_archive", "shutil.unpack_archive",
})
MADE = frozenset({"compile", "exec"})   # refused when the code would be named as an installed file or a grader cell


class Refused(RuntimeError):
    """What the learner's code did that the check process does not allow."""


_refused: list[str] = []     # every refusal, kept for the grade even when the notebook's code catches the error


def refused() -> list[str]:
    """What was refused so far (the messages of the Refused errors raised)."""
    return list(_refused)


# the process's memory, and the map of its addresses (which a view over a raw address needs)
_MEMORY = re.compile(r"/proc/(?:self|thread-self|\d+)(?:/task/\d+)?/(?:mem|pagemap|environ|maps|smaps|smaps_rollup|"
                     r"numa_maps|syscall|stat)")


def _proc_mem(args) -> bool:
    """Is this `open` of the process's memory (a bytes path and a relative one included)?"""
    try:
        path = os.path.realpath(os.fsdecode(args[0])) if args and isinstance(args[0], (str, bytes, os.PathLike)) else ""
    except (TypeError, ValueError):
        return False
    return bool(_MEMORY.fullmatch(path))


def _writes(args) -> bool:
    """Is this `open` for writing (a file the grader or a later grading reads: the compile cache, a results log)?"""
    mode = args[1] if len(args) > 1 else None
    flags = args[2] if len(args) > 2 else 0
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC))


_FILE_EVENTS = frozenset(e for e in REFUSED if e.startswith(("os.", "shutil.")) and e not in {
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill", "os.killpg",
    "os.startfile", "os.chdir"})
_LIBRARY_EVENTS = frozenset({"ctypes.addressof", "ctypes.cdata", "ctypes.cdata/buffer", "ctypes.call_function",
                             "ctypes.string_at", "open"}) | _FILE_EVENTS
# the hazard replay's pool: its forks, its threads, its workers stopped (trusted from that one function only)
_REPLAY_EVENTS = frozenset({"os.fork", "os.kill", "_thread.start_new_thread", "_thread.start_joinable_thread"})
# programs started (the toolkit's writers run the disassembler and the compilers: _WRITERS)
_PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.forkpty",
                             "pty.spawn", "os.startfile"})
# raised in the check process only from the toolkit's writers, the course's results log and the import system:
# from any other frame of the toolkit, the course or the grader's cells they come from code the learner's code
# handed back
_HANDED_BACK = frozenset({"open", "pickle.find_class"}) | _FILE_EVENTS | _PROCESS_EVENTS
_LIBRARY = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep       # feedbeast/
_COURSE = os.path.dirname(os.path.abspath(__file__)) + os.sep                           # feedbeast/course/
_COMPILERS = ("numba", "numba_cuda", "llvmlite")
# the course's results log: on a GPU each check appends its record (results/<gpu>/checks.jsonl under
# FEEDBEAST_RESULTS) from here, called by the toolkit's hooks. It raises these events itself; it is no writer for the
# learner's code (a call of it from a learner frame stays refused: it is not in _WRITERS)
_RESULTS_LOG = os.path.join(_COURSE, "results.py")


def _folders(names) -> tuple[str, ...]:
    out = []
    for n in names:
        m = sys.modules.get(n)
        f = getattr(m, "__file__", None)
        if f:
            out.append(os.path.dirname(os.path.abspath(f)) + os.sep)
    return tuple(out)


_OBJECT_EVENTS = frozenset({"sys._getframe", "object.__getattr__", "object.__setattr__", "object.__delattr__"})
_STDLIB = os.path.join(sysconfig.get_paths()["stdlib"], "")
# the standard library's class makers, which read the caller's frame for a module name and set a new class's
# attributes; not functools, whose update_wrapper gets and sets any attribute named to it
_CLASS_MAKERS = tuple(os.path.join(_STDLIB, m) for m in ("collections" + os.sep, "typing.py", "dataclasses.py",
                                                          "enum.py", "abc.py"))


# The toolkit's files that write files (the compile cache, the disassembler's cache and temporary files, the hazard
# build's): trusted for file events, and none of them calls a function it is handed. Any other toolkit function
# may call one (feedbeast.stress.repeat_identical(Path(x).unlink)): it grants no file event.
_WRITERS = tuple(os.path.join(_LIBRARY, *f.split("/")) for f in (
    "cache.py", "compile.py", "sass.py", "numba_compile.py", "hazards/gpu.py", "hazards/instrument.py"))
# (not isolated.py: its child Python runs whatever code it is handed, without this hook; a check pins the hazard
# mode to "check", so no check starts one, and a callable the learner's code hands back, functools.partial(
# fb.racecheck, code), would)


def _on_behalf(name: str, event: str) -> bool:
    """Is a frame of file `name` a library trusted to raise `event` for the learner's code (see the docstring)?"""
    if name.startswith("<frozen importlib._bootstrap"):
        return True
    if name.startswith(_folders(_COMPILERS)):     # not for files, pickles or programs: Numba's serializer unpickles
        return event not in MADE and event not in _HANDED_BACK    # the bytes it is handed, a program start among them
    if event in _OBJECT_EVENTS and name.startswith(_CLASS_MAKERS):
        return True
    if event in _FILE_EVENTS or event == "open":
        return name in _WRITERS
    return (event in _LIBRARY_EVENTS or event in _OBJECT_EVENTS) and name.startswith(_LIBRARY) \
        and not name.startswith(_COURSE)


def _installed(name: str) -> bool:
    """A frame's file that is an installed file (stdlib, site-packages, the toolkit) or a frozen module."""
    return name.startswith("<frozen ") or (os.path.isabs(name) and os.path.isfile(name))


def install(is_learner_file, is_grader_file=lambda name: False, place=lambda name, line: f"{name} line {line}") -> None:
    """From now on, refuse REFUSED events (and opening /proc/*/mem, and code made with a trusted name) that come
    from the learner's code (see the docstring). `is_learner_file(name)`: a frame of the learner's cells;
    `is_grader_file(name)`: one of the grader's own cells (the lab's given cells, its checks), trusted like an
    installed file. `place(file name, line)` names a line of the learner's cells as the learner knows it."""
    busy: set[int] = set()               # the threads inside the hook (its own frame reads raise events too)
    getframe, ident = sys._getframe, threading.get_ident
    import importlib
    # taken now, before any of the learner's code runs (feedbeast.hazards.check: the package's `check` is a function)
    replay = importlib.import_module("feedbeast.hazards.check")._replay_parallel.__code__
    def frames(f) -> list:
        out = []
        while f is not None:
            out.append(f)
            f = f.f_back
        return out
    base = frames(getframe(1))           # the caller's frames (the check process's own): the walk stops there

    def trusted_name(name) -> bool:
        return _installed(name) or is_grader_file(name)

    def hook(event, args):
        if not (event in REFUSED or (event in MADE and args) or (event == "open" and (_proc_mem(args) or _writes(args)))):
            return
        me = ident()
        if me in busy:
            return
        busy.add(me)
        try:
            if event in MADE:
                code = args[0]
                named = args[1] if event == "compile" and len(args) > 1 else getattr(code, "co_filename", None)
                if not isinstance(named, str) or not trusted_name(named):
                    return        # run-time code keeps a name of its own: it counts as the learner's
            f, on_behalf, stdlib_only, decided = getframe(1), False, True, False
            while f is not None and not any(f is b for b in base):
                name = f.f_code.co_filename
                if not decided and event not in _REPLAY_EVENTS:
                    # The nearest frame that is not the standard library's or another installed library's (they
                    # act for their caller) raised the event. A frame of the grader's cells raises none itself (the
                    # imports aside), and the toolkit and the course write files, load pickles and start programs
                    # only from the files trusted with them: from anywhere else the event comes from a callable
                    # the learner's code handed back (a map or a chain over builtins, driven later by the check's
                    # own unpacking), with no learner frame on the stack.
                    if (_on_behalf(name, event) or is_learner_file(name) or not trusted_name(name)
                            or (event in _PROCESS_EVENTS and name in _WRITERS)
                            or ((event in _FILE_EVENTS or event == "open") and name == _RESULTS_LOG)):
                        decided = True
                    elif not (_installed(name) and not name.startswith(_LIBRARY)):
                        decided = True
                        if event in _HANDED_BACK or (is_grader_file(name) and (event in MADE or event in REFUSED)):
                            why = (f"{name} raised Python's "
                                   f"audit event {event!r} through a function, an iterator or an object that the "
                                   "notebook's code handed back (a map, a filter or a chain over builtins runs when "
                                   "a check reads it, with none of your lines on the stack): the grader does not run "
                                   "code that writes, moves or removes files, loads pickled objects, starts programs "
                                   "or reaches the checks' own state, whoever calls it")
                            _refused.append(why)
                            raise Refused(why)
                if event in _REPLAY_EVENTS and not on_behalf:
                    if f.f_code is replay and stdlib_only:
                        on_behalf = True
                        f = f.f_back
                        continue
                    stdlib_only = stdlib_only and (name.startswith(_STDLIB) or name.startswith("<frozen "))
                if is_learner_file(name) or not trusted_name(name):
                    if on_behalf:
                        return
                    where = place(name, f.f_lineno) if is_learner_file(name) else f"code made at run time ({name})"
                    why = (f"{where} raised Python's audit event {event!r}: the grader does not run code that reads "
                           "frames or the garbage collector's objects, sets a function's or a class's attributes, "
                           "writes, moves, links or removes files, calls native code, or makes code under a name that is not its own (any of "
                           "these reaches the checks' own state)")
                    _refused.append(why)
                    raise Refused(why)
                on_behalf = on_behalf or (event not in _REPLAY_EVENTS and _on_behalf(name, event))
                f = f.f_back
        finally:
            busy.discard(me)

    def forked():
        # A child of the hazard replay's pool never returns to the frames it was forked from (multiprocessing ends it
        # with os._exit): its walk stops there, as at the check process's own frames. Any other child keeps the whole
        # walk (no other fork from the learner's code gets this far).
        me = ident()
        busy.add(me)
        try:
            stack = frames(getframe(1))
            if any(fr.f_code is replay for fr in stack):
                base.extend(stack)
        finally:
            busy.discard(me)

    os.register_at_fork(after_in_child=forked)
    sys.addaudithook(hook)
