"""No line of a notebook can switch a check off: forgeries wrapped around a real bug are all graded FAILED.

Each forgery is planted into lab 05's solution together with a bug, and the notebook is graded as a learner's:

- without a GPU the bug is one the SASS shows (the proxy fence moved after the release arrive: the order rule of
  fb.sass.expect_proxy_fence rejects it on any machine);
- on an sm_90a GPU it is a race that only the hazard check sees (the staging tile rewritten before the TMA
  store issued from it has read it: rule async-read-in-flight; the numbers usually come out right).

The forgeries: environment variables (FEEDBEAST_HAZARDS off, or =report, which would print a race and go on),
monkeypatching fb.check / fb.sass / feedbeast.hazards (at the top level
and from inside a function the checks call), redefining a check function, swallowing exceptions, printing pass
lines, writing verdict lines to files and to every open file descriptor, editing and deleting the check cells,
a %%cuda cell that differs from the kernel launched, and a kernel that tests the toolkit's build switches.
`expect` says what the failure must name: the bug itself (the forgery changed nothing the checks use) or the
grader's refusal to run the forging code (then the checks did not run at all).

The in-process layers are tested alone too: the integrity check (a replaced toolkit function is named even
when no static rule saw it) and the signed channel (an unsigned line is counted, never read).
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_grade_labs import BUGS as LAB_BUGS, FENCE_PLACE  # noqa: E402

from feedbeast.course import grade as g  # noqa: E402
from feedbeast.course import notebook as nbm  # noqa: E402
from feedbeast.errors import STARTER_MARK  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions/05-tma-ring.ipynb"
CPU_BUG = LAB_BUGS["05"]["fence-after-release"].replacements            # SASS-visible
GPU_BUG = LAB_BUGS["05"]["staging-rewritten-before-store-read"].replacements   # a race only hazards see
GPU_RULE = "async-read-in-flight"
REFUSED = (r"not run by the grader|not compiled: it |raised Python's audit event|the grader sets \.\w+ only on|"
           r"no kernel named 'transpose_ring'|was changed in place|was replaced|the Python builtin \w+ was rebound")
MAKE_MAPS = "def make_maps(x_dev, y_dev):\n"


def _before_check(cells):
    """An edit that inserts learner cells right before the `## Check` heading."""
    def edit(nb):
        i = next(k for k, c in enumerate(nb.cells) if g._is_check(g._heading(c)))
        nb.cells[i:i] = [nbm.code(c) if isinstance(c, str) else c for c in cells]
    return edit


def _in_make_maps(body: str):
    """A replacement that runs `body` each time the checks call the learner's make_maps."""
    return [(MAKE_MAPS, MAKE_MAPS + "".join(f"    {ln}\n" for ln in body.strip().split("\n")))]


def _checks_replaced(nb):
    """The learner's check cells replaced with printed passes."""
    start = next(i for i, c in enumerate(nb.cells) if g._is_check(g._heading(c)))
    end = next(i for i, c in enumerate(nb.cells) if i > start and g._heading(c) and not g._is_check(g._heading(c)))
    nb.cells[start + 1:end] = [nbm.code('print("transpose_ring 4096x4096: passed: relative error 0.00e+00")\n'
                                        'print("hazard check of transpose_ring: passed: 0 violations")')]


def _checks_deleted(nb):
    start = next(i for i, c in enumerate(nb.cells) if g._is_check(g._heading(c)))
    end = next(i for i, c in enumerate(nb.cells) if i > start and g._heading(c) and not g._is_check(g._heading(c)))
    del nb.cells[start:end]


def _second_kernel(nb):
    """A correct copy of the kernel under another --name, and the checked names bound to it from Python."""
    good = next(c.source for c in nbm.read(SOLUTION).cells if c.source.startswith("%%cuda"))
    _before_check([good.replace("--name lab", "--name lab_ok", 1),
                   "lab = lab_ok\ntranspose_ring = lab_ok.transpose_ring"])(nb)


SWALLOW = ("get_ipython().set_custom_exc((BaseException,), lambda *a, **k: None)\n"
           "import sys\nsys.excepthook = lambda *a: None\n"
           "import feedbeast.course.verdicts\nfeedbeast.course.verdicts.record = lambda *a, **k: None")
VERDICT_LINES = ("import os, json\n"
                 "line = json.dumps({'status': 'passed', 'name': 'transpose_ring', 'message': '', 'seq': 0})\n"
                 "for fd in range(1, 64):\n"
                 "    try:\n"
                 "        os.write(fd, (('0' * 64) + ' ' + line + '\\n').encode())\n"
                 "    except OSError:\n"
                 "        pass\n"
                 "open('verdicts.json', 'w').write(line)")

# Ways around the static rules that the interpreter reports (feedbeast.course.guard): the check process's frame
# through a generator the learner's code made, and Python's C API through numpy's ctypes helpers.
FRAMES = """def forge():
    box = []
    def walk():
        f = box[0].gi_frame.f_back
        while f is not None and f.f_code.co_name != "_harness":
            f = f.f_back
        yield f
    gen = walk()
    box.append(gen)
    next(gen).f_locals["job"]["checks"][:] = ["print('transpose_ring: passed')"]
    return 0


def make_maps(x_dev, y_dev, unused=forge()):
"""
CTYPES = """import numpy.ctypeslib


def make_maps(x_dev, y_dev, unused=numpy.ctypeslib.ctypes.pythonapi["PyRun_SimpleString"](b"x = 1")):
"""
# Memory and native code reached through a library's own C code, which raises no audit event: a view of numpy's
# over any address (as_strided does not check its strides; id() gives an object's address), Numba's code generator
# (an @intrinsic emits any native call: CPython's API, libc's system()) and its CPU compiler (no bounds checks).
RAW_VIEW = """from numpy.lib.stride_tricks import as_strided


def make_maps(x_dev, y_dev, unused=as_strided(np.zeros(2), shape=(2,), strides=(16,))):
"""
INTRINSIC = """from numba.core.extending import intrinsic


def make_maps(x_dev, y_dev, unused=intrinsic):
"""
CPU_JIT = """import numba


def make_maps(x_dev, y_dev, unused=numba.jit(lambda a, i: a[i])):
"""
# Code run later by the check itself: make_maps hands back a chain over builtins that the check's own unpacking
# (`x_map, y_map = make_maps(...)`) drives, so that no line of the learner's is on the stack when it writes a file
# (a solution another grade reads) or loads a pickle (which can call any function by name).
RETURN = "    return x_map, y_map"
HANDED_BACK_WRITE = [(RETURN, "    import itertools\n    return itertools.chain(filter(None, map(np.ndarray.tofile, "
                              "[np.zeros(4)], ['handed-back.bin'])), (x_map, y_map))")]
HANDED_BACK_PICKLE = [(RETURN, "    import itertools\n    return itertools.chain(filter(None, map(np.load, "
                               "['handed-back.pkl'], [None], [True])), (x_map, y_map))")]
# A program started through Numba's serializer, which unpickles the bytes it is handed (Numba is trusted to act
# for the learner's code, but not with pickles, files or programs).
NUMBA_PICKLE = [(RETURN, "    import numba.core.serialize\n    try:\n        numba.core.serialize.runtime_build_excinfo_"
                         "struct(b\"cos\\nsystem\\n(S'touch started-by-a-pickle'\\ntR.\", ())\n    except TypeError:\n"
                         "        pass\n    return x_map, y_map")]
PASTE = "#define PASTE(a, b) a##b\n#if PASTE(F, B_HAZARDS)\n#endif\n"
# Attributes got and set through functools.update_wrapper, which names them as strings: frames, a toolkit function's
# code, the grader's kernel module changed in place; code run from a string annotation; a file written (the compile
# cache a later check reads).
WRAPPED_FRAMES = """import functools
import operator


class Box:
    pass


def get(o, name):
    b = Box()
    functools.update_wrapper(b, o, assigned=(name,), updated=())
    return operator.attrgetter(name)(b)


def forge():
    def walk():
        yield 1
    gen = walk()
    return get(get(gen, "gi_frame"), "f_back")


def make_maps(x_dev, y_dev, unused=forge()):
"""
CODE_SWAP = """import functools


def make_maps(x_dev, y_dev, unused=functools.update_wrapper(fb.sass.expect_proxy_fence, lambda *a, **k: 1,
                                                             assigned=("__code__",), updated=())):
"""
MODULE_IN_PLACE = """import collections
import functools

Src = collections.namedtuple("Src", "source")


def make_maps(x_dev, y_dev, unused=functools.update_wrapper(lab, Src(lab.source + "// mine\\n"), assigned=("source",),
                                                             updated=())):
"""
ANNOTATION = """import typing


def hint(x: "print('run') or int"):
    return x


def make_maps(x_dev, y_dev, unused=typing.get_type_hints(hint)):
"""
FILE_WRITE = """def make_maps(x_dev, y_dev, unused=np.zeros(1).tofile("cubin.bin")):
"""
# What the checks compare and accept, changed without replacing a function: the toolkit's tolerance table updated in
# place, a builtin rebound in the namespace the checks run in, a value whose comparisons say what it likes.
TOLERANCE = """from feedbeast.check import TOLERANCE


def make_maps(x_dev, y_dev, unused=TOLERANCE.update(bfloat16=1e30)):
"""
BUILTIN = """def make_maps(x_dev, y_dev, unused=(enumerate := lambda shapes: iter(()))):
"""
LIAR = """class Swizzle(int):
    def __ne__(self, other):
        return False


def make_maps(x_dev, y_dev, unused=Swizzle(0)):
"""

# Module attributes set through objects no static rule sees: a parameter named self bound to a module, and
# functools.update_wrapper naming the attribute: the signed channel's json.dumps (which would rewrite every verdict
# it sends) and the toolkit's cached disassembler (an lru_cache wrapper, not a function). Files renamed, linked or
# removed: a solution another grade reads (here names that do not exist: the refusal comes before the call).
SELF_SETS = """from feedbeast.numba_compile import json


def put(self, f):
    self.dumps = f


def fake_dumps(obj, *a, orig=json.dumps, **k):
    if isinstance(obj, dict) and obj.get("t") == "rec":
        obj = {**obj, "status": "passed"}
    return orig(obj, *a, **k)


def make_maps(x_dev, y_dev, unused=put(json, fake_dumps)):
"""
WRAPPER_SETS = """import functools
from feedbeast.numba_compile import json


class Holder:
    dumps = staticmethod(lambda obj, *a, **k: "{}")


def make_maps(x_dev, y_dev, unused=functools.update_wrapper(json, Holder, assigned=("dumps",), updated=())):
"""
CACHED_SASS = """import functools
from feedbeast import sass


class Holder:
    _disassemble = staticmethod(lambda cubin: {})


def make_maps(x_dev, y_dev, unused=functools.update_wrapper(sass, Holder, assigned=("_disassemble",), updated=())):
"""
SELF_SETS_AT_CHECK = SELF_SETS.replace("def make_maps(x_dev, y_dev, unused=put(json, fake_dumps)):\n",
                                      "def make_maps(x_dev, y_dev):\n    put(json, fake_dumps)\n")
FILES = """from feedbeast.numba_support import os


def make_maps(x_dev, y_dev, unused=os.rename("no-such-solution.ipynb", "elsewhere.ipynb")):
"""
FILES_REMOVED = """from feedbeast.numba_support import os


def make_maps(x_dev, y_dev, unused=os.remove("no-such-solution.ipynb")):
"""

# name -> (replacements added to the bug's, an edit of the notebook, what the failure names: "bug" | "refused")
FORGERIES = {
    "env-hazards-off": ([], _before_check(['import os\nos.environ["FEEDBEAST_HAZARDS"] = "0"']), "bug"),
    "env-hazards-report": ([], _before_check(['import os\nos.environ["FEEDBEAST_HAZARDS"] = "report"']), "bug"),
    "env-feedbeast-vars-removed-no-gpu": ([], _before_check([
        'import os\nfor k in [k for k in os.environ if k.startswith("FEEDBEAST_")]:\n    del os.environ[k]\n'
        'os.environ["CUDA_VISIBLE_DEVICES"] = ""']), "bug"),
    "patch-hazards": ([], _before_check(["import feedbeast.hazards\nfeedbeast.hazards.enabled = lambda: False\n"
                                         "feedbeast.hazards.check_on_launch = lambda *a, **k: None"]), "bug"),
    "patch-hooks": ([], _before_check(["import feedbeast.hooks\nfeedbeast.hooks.before_launch.clear()\n"
                                       "feedbeast.hooks.on_verdict.clear()\nfeedbeast.hooks.hazard_run = None"]), "bug"),
    "hooks-sanitizer-mode": ([], _before_check(["import feedbeast.hooks\nfeedbeast.hooks.mode.sanitizer = True\n"
                                                "feedbeast.hooks.mode.untimed = 'off'"]), "bug"),
    "hooks-from-a-called-function": (_in_make_maps(
        "import feedbeast.hooks\nfeedbeast.hooks.before_launch.clear()\nfeedbeast.hooks.mode.sanitizer = True"),
        None, "refused"),
    "patch-fb-check-and-sass": ([], _before_check([
        "fb.check = lambda *a, **k: 'passed'\nfb.sass.expect_proxy_fence = lambda *a, **k: 1\n"
        "fb.Module.expect_sass = lambda self, *a, **k: {}"]), "bug"),
    "patch-from-a-called-function": (_in_make_maps(
        "import feedbeast.hazards, feedbeast.sass\nfeedbeast.hazards.enabled = lambda: False\n"
        "feedbeast.sass.expect_proxy_fence = lambda *a, **k: 1"), None, "refused"),
    "patch-an-argument-the-checks-read-back": (_in_make_maps(
        "y_dev.to_host = lambda *a, **k: x_dev.to_host().T"), None, "refused"),
    "redefine-check-functions": ([], _before_check([
        "import feedbeast\nclass _Fb:\n    def __getattr__(self, name):\n        return getattr(feedbeast, name)\n"
        "    def check(self, *a, **k):\n        return 'passed'\nfb = _Fb()\n"
        "def expect_proxy_fence(*a, **k):\n    return 1"]), "bug"),
    "swallow-exceptions": ([], _before_check([SWALLOW]), "bug"),
    "swallow-exceptions-at-check-time": (_in_make_maps(SWALLOW.split("\n", 1)[1]), None, "refused"),
    "print-pass-lines": ([], _before_check(['print("transpose_ring 4096x4096: passed")\nprint("SASS: ok")']), "bug"),
    "write-verdict-lines-and-files": (_in_make_maps(VERDICT_LINES), None, "refused"),
    "edit-check-cells": ([], _checks_replaced, "bug"),
    "delete-check-cells": ([], _checks_deleted, "bug"),
    "cuda-cell-differs-from-launched": ([], _second_kernel, "bug"),
    "kernel-tests-build-switches": ([("#include <fb/tma.cuh>\n", "#undef FB_HAZARDS\n#include <fb/tma.cuh>\n")],
                                    None, "refused"),
    "kernel-pastes-a-build-switch": ([("#include <fb/tma.cuh>\n", "#include <fb/tma.cuh>\n" + PASTE)], None, "refused"),
    "kernel-pastes-with-digraphs": ([("#include <fb/tma.cuh>\n", "#include <fb/tma.cuh>\n" + PASTE.replace("#", "%:"))],
                                    None, "refused"),
    "kernel-tests-a-hazard-build-macro": ([("#include <fb/tma.cuh>\n",
                                            "#include <fb/tma.cuh>\n#ifdef __syncthreads\n#endif\n")], None, "refused"),
    "kernel-stringizes-a-hazard-build-macro": ([("#include <fb/tma.cuh>\n", "#include <fb/tma.cuh>\n#define STR_(x) #x\n"
                                                 "#define XSTR(x) STR_(x)\n"
                                                 "constexpr bool kTraced = XSTR(__syncthreads())[0] == ':';\n")],
                                               None, "refused"),
    "kernel-includes-a-header-of-its-own": ([("#include <fb/tma.cuh>\n", '#include <fb/tma.cuh>\n#include "switch.h"\n')],
                                            None, "refused"),
    "kernel-renamed-and-a-python-stand-in": ([("\ntranspose_ring(const", "\ntranspose_ring_mine(const")],
                                             _before_check(["transpose_ring = lab.transpose_ring_mine"]), "refused"),
    "frames-through-a-generator": ([(MAKE_MAPS, FRAMES)], None, "refused"),
    "frames-through-update-wrapper": ([(MAKE_MAPS, WRAPPED_FRAMES)], None, "refused"),
    "code-swapped-in-a-toolkit-function": ([(MAKE_MAPS, CODE_SWAP)], None, "refused"),
    "kernel-module-changed-in-place": ([(MAKE_MAPS, MODULE_IN_PLACE)], None, "refused"),
    "a-string-annotation-run-by-typing": ([(MAKE_MAPS, ANNOTATION)], None, "refused"),
    "a-file-written-for-a-later-check": ([(MAKE_MAPS, FILE_WRITE)], None, "refused"),
    "c-api-through-numpy-ctypes": ([(MAKE_MAPS, CTYPES)], None, "refused"),
    "tolerance-table-updated": ([(MAKE_MAPS, TOLERANCE)], None, "refused"),
    "builtin-rebound": ([(MAKE_MAPS, BUILTIN)], None, "refused"),
    "comparison-that-lies": ([(MAKE_MAPS, LIAR)], None, "refused"),
    "channel-rewritten-through-a-self-parameter": ([(MAKE_MAPS, SELF_SETS)], None, "refused"),
    "channel-rewritten-while-the-checks-run": ([(MAKE_MAPS, SELF_SETS_AT_CHECK)], None, "refused"),
    "channel-rewritten-through-update-wrapper": ([(MAKE_MAPS, WRAPPER_SETS)], None, "refused"),
    "cached-disassembler-replaced": ([(MAKE_MAPS, CACHED_SASS)], None, "refused"),
    "a-file-renamed": ([(MAKE_MAPS, FILES)], None, "refused"),
    "a-file-removed": ([(MAKE_MAPS, FILES_REMOVED)], None, "refused"),
    "a-file-written-by-a-chain-the-check-drives": (HANDED_BACK_WRITE, None, "refused"),
    "a-pickle-loaded-by-a-chain-the-check-drives": (HANDED_BACK_PICKLE, None, "refused"),
    "a-program-started-by-numbas-unpickler": (NUMBA_PICKLE, None, "refused"),
    "memory-through-a-raw-view": ([(MAKE_MAPS, RAW_VIEW)], None, "refused"),
    "native-code-through-numbas-intrinsic": ([(MAKE_MAPS, INTRINSIC)], None, "refused"),
    "numbas-cpu-compiler": ([(MAKE_MAPS, CPU_JIT)], None, "refused"),
}


def forged(tmp: Path, name: str, bug) -> Path:
    extra, edit, _ = FORGERIES[name]
    if extra is HANDED_BACK_PICKLE:      # beside the notebook, where its checks run: a pickle of a harmless object
        import collections
        import pickle
        (tmp / "handed-back.pkl").write_bytes(pickle.dumps(collections.OrderedDict()))
    return nbm.planted(SOLUTION, list(bug) + list(extra), edit=edit, to=tmp / f"05-{name}.ipynb")


_cache: dict = {}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """{forgery: Report} for the bug of this machine, graded on first use, two at a time (four on a machine of 16
    cores or more: each grading is a process that mostly compiles)."""
    tmp = tmp_path_factory.mktemp("forgery")

    def get(names, bug):
        todo = [n for n in names if (n, id(bug)) not in _cache]
        with concurrent.futures.ThreadPoolExecutor(max(2, min(4, (os.cpu_count() or 2) // 4))) as pool:
            paths = {n: (forged(tmp, n, bug) if n != "untouched" else SOLUTION) for n in todo}
            for n, rep in zip(todo, pool.map(lambda n: g.grade(paths[n], timeout=300), todo)):
                _cache[(n, id(bug))] = rep
                if os.environ.get("FEEDBEAST_GRADE_REPORTS"):    # the exact reports, for the guide
                    out = Path(os.environ["FEEDBEAST_GRADE_REPORTS"])
                    out.mkdir(parents=True, exist_ok=True)
                    (out / f"05-{n}-{'gpu' if bug is GPU_BUG else 'cpu'}.txt").write_text(str(rep) + "\n")
        return {n: _cache[(n, id(bug))] for n in names}
    return get


def _names_the_bug(rep, expect: str, bug_says: str) -> bool:
    text = "\n".join(f"{o.name}: {o.message}" for o in rep.failed)
    return bool(re.search(REFUSED if expect == "refused" else bug_says, text))


def test_every_forgery_plants_something_and_the_bug_applies(tmp_path):
    """Each forgery changes the notebook (a stale replacement raises in planted())."""
    for name in FORGERIES:
        for bug in (CPU_BUG, GPU_BUG):
            assert forged(tmp_path, name, bug).read_text() != SOLUTION.read_text()


def test_forgeries_around_a_sass_visible_bug_fail_without_a_gpu(graded):
    if g._has_gpu():
        pytest.skip("a GPU is here: test_forgeries_around_a_race_fail_on_sm90 covers this machine")
    reps = graded(list(FORGERIES) + ["untouched"], CPU_BUG)
    assert reps["untouched"].status == "partial", str(reps["untouched"])
    bad = {n: str(r) for n, r in reps.items() if n != "untouched" and
           not (r.status == "failed" and r.exit_code == 1 and _names_the_bug(r, FORGERIES[n][2], FENCE_PLACE))}
    assert not bad, "\n\n".join(f"--- {n}\n{t}" for n, t in bad.items())


def test_forgeries_around_a_race_fail_on_sm90(graded, gpu90):
    reps = graded(list(FORGERIES) + ["untouched"], GPU_BUG)
    assert reps["untouched"].status == "ok" and reps["untouched"].hazards, str(reps["untouched"])
    bad = {n: str(r) for n, r in reps.items() if n != "untouched" and
           not (r.status == "failed" and r.exit_code == 1 and _names_the_bug(r, FORGERIES[n][2], GPU_RULE))}
    assert not bad, "\n\n".join(f"--- {n}\n{t}" for n, t in bad.items())


def test_a_kernel_the_checks_launch_comes_from_the_lab_cuda_cell_only(tmp_path):
    """Lab 03's checks launch `ring_logsumexp` by that name. A learner whose %%cuda cell names its kernel otherwise
    (here a cell left as given under another name) and who binds `ring_logsumexp` in Python is told the kernel is
    missing; the Python name is never run in its place."""
    sol = ROOT / "solutions/03-cp-async-rowsum.ipynb"
    nb = nbm.planted(sol, [("\nring_logsumexp(const float*", "\nring_logsumexp_mine(const float*")],
                     edit=_before_check(["ring_logsumexp = print"]), to=tmp_path / "03-renamed.ipynb")
    rep = g.grade(nb, timeout=300)
    assert rep.status == "failed", str(rep)
    assert any("defines no ring_logsumexp (a kernel keeps the name the lab gives it)" in o.message
               for o in rep.failed), str(rep)


def test_a_notebook_inside_a_copy_of_the_course_is_graded_by_the_working_directory_s_checks(tmp_path, monkeypatch):
    """A learner's folder holding its own solutions/ (checks that only print passes) is graded from the course
    checkout by the checkout's solution, and the record line names the solution that ran."""
    copy = tmp_path / "alice" / "feedbeast"
    (copy / "chapters").mkdir(parents=True)
    (copy / "labs").mkdir()
    (copy / "solutions").mkdir()
    nbm.planted(SOLUTION, CPU_BUG, to=copy / "labs" / SOLUTION.name)
    nbm.planted(SOLUTION, [], edit=_checks_replaced, to=copy / "solutions" / SOLUTION.name)
    monkeypatch.delenv("FEEDBEAST_COURSE", raising=False)
    monkeypatch.chdir(ROOT)
    rep = g.grade(copy / "labs" / SOLUTION.name, timeout=300)
    assert Path(rep.solution).resolve() == SOLUTION.resolve(), rep.solution
    assert rep.status == "failed" and _names_the_bug(rep, "bug", FENCE_PLACE), str(rep)
    assert "checks of solutions/05-tma-ring.ipynb" in rep.record_line()


# ---- the layers alone ---------------------------------------------------------------------------------------

def test_integrity_names_a_replaced_toolkit_function_and_a_rebound_given_name():
    import feedbeast as fb
    from feedbeast import hazards, hooks
    ns = {"fb": fb, "STAGES": 4}
    base = g._integrity_baseline(ns, {"fb", "STAGES"})
    assert g._integrity_problems(base, ns) == []
    real_enabled, real_check = hazards.enabled, fb.check
    try:
        hazards.enabled = lambda: True
        fb.check = lambda *a, **k: None
        hooks.before_launch.append(print)
        hooks.on_verdict.append(print)
        hooks.on_hazard.append(print)
        hooks.mode.sanitizer = True
        ns["fb"] = object()
        problems = "\n".join(g._integrity_problems(base, ns))
    finally:
        hazards.enabled, fb.check = real_enabled, real_check
        hooks.before_launch.remove(print)
        hooks.on_verdict.remove(print)
        hooks.on_hazard.remove(print)
        hooks.mode.sanitizer = False
        ns["fb"] = fb
    for what in ("feedbeast.hazards.enabled was replaced", "feedbeast.check was replaced",
                 "feedbeast.hooks.before_launch", "feedbeast.hooks.on_verdict", "feedbeast.hooks.on_hazard",
                 "feedbeast.hooks.mode",
                 "fb (which the lab gives or the grader binds) was rebound"):
        assert what in problems, problems
    assert g._integrity_problems(base, ns) == []


def test_integrity_names_a_hazard_mode_switched_off(monkeypatch):
    """hooks.mode.hazards is part of the run mode the integrity check compares: switched off between two checks, it
    is named."""
    from feedbeast import hooks
    monkeypatch.setattr(hooks, "mode", hooks.Mode(hazards="check"))
    ns = {"fb": __import__("feedbeast")}
    base = g._integrity_baseline(ns, {"fb"})
    hooks.mode.hazards = ""
    assert "feedbeast.hooks.mode (how this process runs) was changed" in g._integrity_problems(base, ns)
    hooks.mode.hazards = "check"
    assert g._integrity_problems(base, ns) == []


def test_pinned_hazards_follow_no_variable(monkeypatch):
    """The check process pins the hazard mode (feedbeast.course.pin_hazards): the course's reading of
    FEEDBEAST_HAZARDS before each launch is taken out of hooks.before_launch, so no variable set later moves it."""
    import feedbeast.course as course
    from feedbeast import hazards, hooks
    monkeypatch.setattr(hooks, "before_launch", list(hooks.before_launch))
    monkeypatch.setattr(hooks, "mode", hooks.Mode())
    monkeypatch.setattr(course, "_applied", [])
    assert course.hazards_from_environment in hooks.before_launch
    course.pin_hazards(True)
    assert course.hazards_from_environment not in hooks.before_launch and hooks.mode.hazards == "check"
    for value in ("0", "report"):
        monkeypatch.setenv("FEEDBEAST_HAZARDS", value)
        for f in list(hooks.before_launch):     # what a launch runs first, but the hazard check (it needs a kernel)
            if f is not hazards.check_on_launch:
                f(None, 1, 32, (), 0, None)
        assert hooks.mode.hazards == "check"
    course.pin_hazards(False)
    assert hooks.mode.hazards == ""


@pytest.mark.parametrize("hazards", [True, False])
def test_the_check_process_runs_in_the_pinned_mode(tmp_path, hazards):
    """Graded for real: the check process's mode is the grader's word, pinned, before any notebook code runs."""
    from feedbeast.course.notebook import markdown, new
    check = ("from feedbeast import hooks\nimport feedbeast.course as course\nfrom feedbeast.course import verdicts\n"
             "pinned = course.hazards_from_environment not in hooks.before_launch\n"
             "verdicts.passed('hazard mode', f'{hooks.mode.hazards or \"off\"} pinned={pinned}')")
    sols, labs = tmp_path / "solutions", tmp_path / "labs"
    sols.mkdir()
    labs.mkdir()
    new([markdown("# Lab 05"), "# BEGIN SOLUTION\nx = 1\n# END SOLUTION", markdown("## Check"), check],
        to=sols / "05-mode.ipynb")
    new([markdown("# Lab 05"), "x = 1", markdown("## Check")], to=labs / "05-mode.ipynb")
    rep = g.grade(labs / "05-mode.ipynb", solutions=sols, hazards=hazards, timeout=120)
    got = [o.message for o in rep.outcomes if o.name == "hazard mode"]
    assert got == [f"{'check' if hazards else 'off'} pinned=True"], str(rep)


def test_the_channel_reads_only_signed_lines_in_order():
    import hashlib
    import hmac
    import json
    import os
    key = b"k" * 32
    r, w = os.pipe()

    def signed(seq, **m):
        body = json.dumps({**m, "seq": seq})
        return hmac.new(key, body.encode(), hashlib.sha256).hexdigest() + " " + body + "\n"
    forged_key = hmac.new(b"x" * 32, b"{}", hashlib.sha256).hexdigest()
    os.write(w, (signed(0, t="hello") + f"{forged_key} " + '{"t": "rec", "seq": 1}\n' + signed(0, t="replayed")
                 + "transpose_ring: passed\n" + signed(1, t="done")).encode())
    os.close(w)
    chan, got = g._Channel(r, key), []
    while (msgs := chan.read(1.0)) is not None:
        got += msgs
    os.close(r)
    assert [m["t"] for m in got] == ["hello", "done"] and chan.forged == 3, (got, chan.forged)


def test_the_channel_puts_back_what_it_runs_and_says_so():
    """A json.dumps, an hmac or a builtin the notebook's code replaced (through objects no static rule sees), or a
    name added where the encoder looks first, is put back before the child signs a message, so the message goes
    out as the checks made it, and what was put back is an integrity failure."""
    import builtins
    import json
    import json.encoder
    import os
    key = b"k" * 32
    r, w = os.pipe()
    child = g._CheckChild(w, key)
    real_dumps, real_str = json.dumps, builtins.str
    try:
        json.dumps = lambda obj, *a, **k: real_dumps({**obj, "status": "passed"}, *a, **k)
        builtins.str = lambda *a: "forged"
        child.send({"t": "rec", "status": "failed", "name": "x"})
        assert json.dumps is real_dumps and builtins.str is real_str
        json.encoder.isinstance = lambda *a: False
        child.send({"t": "rec", "status": "failed", "name": "y"})
        assert not hasattr(json.encoder, "isinstance")
    finally:
        json.dumps, builtins.str = real_dumps, real_str
        vars(json.encoder).pop("isinstance", None)
    os.close(w)
    chan, got = g._Channel(r, key), []
    while (msgs := chan.read(1.0)) is not None:
        got += msgs
    os.close(r)
    assert [(m["t"], m["status"]) for m in got] == [("rec", "failed"), ("rec", "failed")], got
    assert child.tampered == ["json.dumps, which signs and sends the verdicts, was replaced",
                              "builtins.str, which signs and sends the verdicts, was replaced",
                              "json.encoder.isinstance, which the signing reads, was added"], child.tampered
    assert child.tampered[0] in "\n".join(g._integrity_problems(g._integrity_baseline({}, set()) | {
        "tampered": child.tampered}, {}))


def test_a_method_of_the_learner_s_class_runs_only_on_an_object_of_it():
    """Read through its class (type(obj).put, a subclass, an alias, a class decorator's cls.put), a method takes any
    object as self; the grader's copy of each method refuses one that is not of its class before anything runs."""
    import ast
    import types
    src = ("class Fix:\n    def apply(self, target):\n        self.hidden = target\n        return 0\n\n\n"
           "class Acc:\n    def __init__(self):\n        self.n = 0\n\n    def add(self, k):\n        self.n += k\n"
           "        return self\n\n\nclass Sub(Fix):\n    pass\n")
    ns = {}
    nbm._own_objects(ns)          # what the grader's copies call: the learner's classes marked, attributes checked
    for node in ast.parse(src).body:
        exec(compile(ast.Module([nbm.guarded(node)], []), "cell", "exec"), ns)
    assert ns["Acc"]().add(3).add(4).n == 7 and ns["Fix"]().apply(1) == 0 and ns["Sub"]().apply(2) == 0
    m = types.ModuleType("m")
    for call in (lambda: ns["Fix"].apply(m, 1), lambda: type(ns["Sub"]()).apply(m, 1), lambda: ns["Acc"].add(m, 1)):
        with pytest.raises(TypeError, match="was called on an object that is not of a class your cells define"):
            call()
    assert not hasattr(m, "hidden") and not hasattr(m, "n")


def test_integrity_names_a_toolkit_class_given_methods_and_an_exception_whose_message_raises_is_named():
    """dataclasses.dataclass(Op) adds __eq__ and the orderings to a toolkit class (its objects then compare as the
    learner likes) while every function stays the same object; an exception whose __str__ raises ended the check
    process."""
    import dataclasses

    from feedbeast.sim import checker
    base = g._integrity_baseline({}, set())
    real = dict(vars(checker.Op))
    try:
        dataclasses.dataclass(order=True)(checker.Op)
        problems = "\n".join(g._integrity_problems(base, {}))
    finally:
        for k in set(vars(checker.Op)) - set(real):
            delattr(checker.Op, k)
        for k, v in real.items():
            if vars(checker.Op).get(k) is not v and k not in ("__dict__", "__weakref__"):
                setattr(checker.Op, k, v)
    assert "the class feedbeast.sim.checker.Op was changed: it gained" in problems and "__eq__" in problems, problems
    assert g._integrity_problems(base, {}) == []

    class Boom(Exception):
        def __str__(self):
            raise Boom()
    assert "could not be read" in g._text_of(Boom())


def test_integrity_names_a_replaced_cached_function_a_ufunc_and_a_standard_module_s_function():
    """Callables that are not plain functions (an lru_cache wrapper, a numpy ufunc) and the functions of every module
    loaded (json, the standard library) are compared too."""
    import json

    import numpy as np

    from feedbeast import sass
    base = g._integrity_baseline({}, set())
    real = sass._disassemble, np.isfinite, json.dumps
    try:
        sass._disassemble, np.isfinite, json.dumps = (lambda *a: {}), (lambda *a: True), (lambda *a, **k: "{}")
        problems = "\n".join(g._integrity_problems(base, {}))
    finally:
        sass._disassemble, np.isfinite, json.dumps = real
    for what in ("feedbeast.sass._disassemble was replaced", "numpy.isfinite was replaced", "json.dumps was replaced"):
        assert what in problems, problems
    assert g._integrity_problems(base, {}) == []


@pytest.mark.parametrize("src, ok", [
    ("def make_maps(x, y):\n    return fb.tensor_map(x, box=(64, 32), swizzle=128), None", True),
    ("BAND, TW = 8, 128", True),
    ("@cuda.jit\ndef k(x, y):\n    t = cuda.shared.array((8, 8), float32)\n    y[0] = x[0]", True),
    ("class Acc:\n    def __init__(self):\n        self.n = 0", True),
    ("import os\nos.environ['FEEDBEAST_HAZARDS'] = '0'", False),
    ("def f():\n    global fb\n    fb = None", False),
    ("def f():\n    return fb.__dict__", False),
    ("def f():\n    setattr(fb, 'check', None)", False),
    ("from feedbeast.course import verdicts", False),
    ("import feedbeast.hazards", False),
    ("fb = None", False),
    # the modules that reach memory, frames and threads, however reached (ctypes.memmove raises no audit event)
    ("import numpy.ctypeslib", False),
    ("def f(x):\n    return np.ctypeslib.ctypes.memmove(0, 0, 0)", False),
    ("def f(a):\n    return a.ctypes.data", False),
    ("def f():\n    return numba.core.utils.threading.Thread", False),
    ("def f():\n    return np.compat.sys", False),
    ("import dataclasses\n@dataclasses.dataclass\nclass P:\n    x: int = 0", True),
    # an object rebuilt from a pickle (the hazard replay's results) calls what its __reduce__ names, with no frame
    # of the learner's on the stack; and attributes named in strings pass the attribute rules above
    ("class C:\n    def __reduce__(self):\n        return (print, ())", False),
    ("class C:\n    __reduce_ex__ = None", False),
    ("import operator\nget = operator.attrgetter('hazards.check')", False),
    ("from operator import methodcaller", False),
    ("import operator\nadd = operator.add", True),
    # a builtin rebound where the checks read it; a value that answers comparisons and tests as it likes
    ("enumerate = lambda s: iter(())", False),
    ("TILE, BAND, enumerate = 32, 8, None", False),
    ("class S(int):\n    def __ne__(self, o):\n        return False", False),
    ("S = type('S', (int,), {'__eq__': lambda s, o: True})", False),
    ("S = type('S', (int,), dict(__ne__=lambda s, o: False))", False),
    # what a correct learner writes: a parameter named like a builtin the rules watch, @functools.cache, `-> None`
    ("def f(input, output):\n    return input[0] + output", True),
    ("import functools\n@functools.cache\ndef blocks(n):\n    return n", True),
    ("def load(x) -> None:\n    return None", True),
    ("def f(x, g=getattr):\n    return g(x, 'a')", False),
    # getattr with the name written at the call reads what obj.name would; a name held in a variable could be any
    ("def f(cfg):\n    return getattr(cfg, 'stages', 2) + getattr(cfg, 'depth')", True),
    ("def f(x, name):\n    return getattr(x, name)", False),
    ("def f(x):\n    return getattr(x, '__globals__')", False),
    ("def f(x):\n    return getattr(x, '_mods', None)", False),
    ("def f():\n    return getattr(fb, 'hooks')", False),
    ("def f(x):\n    return getattr(x, 'eval')('1')", False),
    ("def f(x):\n    return getattr(x, *('__globals__',))", False),
    ("def f(x):\n    return getattr(x, 'a', 'b', 'c')", False),
    # every rule of obj.name holds for getattr(obj, "name"): in-place changes of a given name, update_wrapper,
    # .format on a text that is not a literal at the call
    ("def f():\n    getattr(STAGES, 'update')({1: 2})", False),
    ("import functools\ndef f(g):\n    getattr(functools, 'update_wrapper')(np, g)", False),
    ("def f(g):\n    return getattr('{0.__globals__}', 'format')(g)", False),
    ("def f(x, g):\n    return getattr(getattr(x, 'a'), 'format')(g)", False),
    ("def f(input, output):\n    return [input[i] for i in range(3)]", True),
    # a name bound only in a nested scope does not shadow the builtin in the function
    ("def f(s):\n    [exec for exec in ()]\n    return exec(s)", False),
    ("def f(s):\n    def g():\n        eval = 1\n    return eval(s)", False),
    ("def f(p):\n    class C:\n        open = 1\n    return open(p, 'w')", False),
    ("import feedbeast as functools\nx = functools.cache.cache_dir", False),
    ("def f(functools):\n    return functools.cache", False),
    ("from functools import cache", True),
    ("x = fb.cache.cache_dir()", False),
    ("class P:\n    def __bool__(self):\n        return True", False),
    # `self` is the learner's own object only in a method of the learner's own class, called on an object of it
    ("class H:\n    def put(self, t):\n        self = t\n        self.x = 1", False),
    ("class H:\n    def put(self, t):\n        for self in [t]:\n            self.x = 1", False),
    ("import numba.cuda.types.scalars as s\nx = s.enum.bltns", False),
    ("def f(m):\n    return m.eval('1')", False),
    ("from feedbeast.compile import Path", False),
    ("S = type('S', (int,), {'_' + '_ne__': lambda s, o: False})", False),
    ("def kind(x):\n    return type(x) is int", True),
    ("class C:\n    def __init__(self):\n        self._n = 0\n    def n(self):\n        return self._n", True),
    ("class Box:\n    def area(self):\n        return 1\n\nbest = sorted([Box()], key=Box.area)", True),
    ("import functools as ft\ndef deco(f):\n    @ft.wraps(f)\n    def g(*a):\n        return f(*a)\n    return g", True),
    ("class Acc:\n    def __init__(self):\n        self.n = 0\n    def add(self, k):\n        self.n += k\n"
     "        return self\n\ntotal = Acc().add(3).n", True),
    ("class Ring:\n    STAGES = 3\n    def __init__(self):\n        self.slots = [None] * Ring.STAGES", True),
    # functools.update_wrapper and wraps set attributes named in strings: only @functools.wraps(f) on one's own
    ("import functools\ndef deco(f):\n    @functools.wraps(f)\n    def g(*a):\n        return f(*a)\n    return g", True),
    ("import functools\nx = functools.update_wrapper(np, object)", False),
    ("import functools\nx = functools.wraps(object, assigned=('dumps',))(np)", False),
    ("from functools import wraps\ndef deco(f):\n    @wraps(f)\n    def g(*a):\n        return f(*a)\n    return g", True),
    ("from functools import wraps\nx = wraps(object, assigned=('dumps',))(np)", False),
    ("import functools\nclass Timed:\n    def __init__(self, f):\n        functools.update_wrapper(self, f)\n"
     "        self.f = f", True),
    ("class Role:\n    def __init__(self, n):\n        self.n = n\n\n\nclass Consumer(Role):\n"
     "    def __init__(self):\n        super().__init__(4)\n        self.io = 0", True),
    ("def f():\n    return super().__init__", False),
    ("class C:\n    def f(self, o):\n        return super(C, o).__init__", False),
    ("CALLS = 0\ndef f():\n    global CALLS\n    CALLS += 1", True),
    ("def f():\n    global fb\n    fb = 1", False),
    ("def make():\n    n = 0\n    def inc():\n        nonlocal n\n        n += 1\n        return n\n    return inc", True),
    ("from feedbeast.numba_support import os", False),
    ("from feedbeast.numba_compile import json", False),
    # type names written as strings, enum, a tracing decorator's fn.__name__; what runs a string or names a helper
    ("import collections\nP = collections.namedtuple('P', 'a b')\nq = P(1, 2)._replace(a=3)._asdict()", True),
    ("def quantize(w):\n    _mods.update({1: None})\n    return w", False),
    ("def f(w):\n    return len(_mods)", False),
    ("def f(w):\n    STAGES.update({1: 2})", False),
    ("def f(w):\n    return np.sort(w), sorted(STAGES)", True),
    ("def f(w):\n    class Box:\n        _mods = _mods\n    return Box", False),      # a class body reads the global
    # a local variable or a parameter named like a given name is the learner's own
    ("def quantize(w):\n    STAGES = np.abs(w)\n    STAGES.sort(axis=1)\n    STAGES[0] = 1\n    return STAGES", True),
    ("def f(_mods, near):\n    _mods.update({})\n    for STAGES in near:\n        STAGES.fill(0)\n    return _mods", True),
    ("import typing\nx = typing.contextlib.redirect_stdout", False),
    ("import typing\ntyping.warnings.simplefilter('error')", False),
    ("def f(ring: 'Ring', it: 'int | None' = None) -> 'Iterator[list[int]]':\n    pass", True),
    ("import enum\nclass Role(enum.Enum):\n    PRODUCER = 0", True),
    ("def f(fn):\n    return fn.__name__ + fn.__qualname__", True),
    ("def f(x: \"__import__('os').system('true')\"):\n    pass", False),
    ("def f(x) -> 'fb.hooks.mode':\n    pass", False),
    ("import enum\nx = enum.global_enum", False),
    ("import typing\nx = typing.get_type_hints", False),
    ("from functools import singledispatch", False),
    ("def f(fn):\n    return fn.__globals__", False),
    ("x = __fb_own__", False),
    ("def f(__fb_class__):\n    pass", False),
    # raw memory and native code through a library's C code (no audit event): refused by name
    ("from numpy.lib.stride_tricks import as_strided", False),
    ("def f(a):\n    return np.lib.stride_tricks.as_strided(a, (2,), (8,))", False),
    ("def f(a):\n    return np.lib.array_utils.byte_bounds(a)", False),
    ("def f(x):\n    return id(x)", False),
    ("from numba.core.extending import intrinsic", False),
    ("import numba.core.codegen", False),
    ("def f(nb):\n    return nb.core.codegen.ll.load_library_permanently", False),
    ("from numba import njit", False),
    ("from numba import jit", False),
    ("import numba as nb\nf = nb.jit(lambda a, i: a[i])", False),
    ("def f(a):\n    return cuda.from_cuda_array_interface({}, owner=a)", False),
    ("def f(a):\n    return cuda.cudadrv.driver.device_to_host(a, 0, 8)", False),
    ("def f(torch):\n    return torch.from_file('x', shared=True, size=8)", False),
    ("def f(t):\n    return t.data_ptr()", False),
    ("import cupy", False),
    ("from numba import cuda, float32\n@cuda.jit\ndef k(x, n):\n    i = cuda.grid(1)\n    if i < n:\n"
     "        x[i] = float32(1)", True),
    ("def f(w):\n    return {id: 1 for id in range(3)}", True),
    # attribute names computed at run time: a class maker that takes them as text (its objects' __init__ sets them)
    ("import dataclasses\nRaw = dataclasses.make_dataclass('Raw', [('__array_' + 'interface__', dict)])", False),
    ("import enum\nE = enum.Enum('E', {'__array_' + 'interface__': {}})", False),
    ("from enum import IntEnum\nE = IntEnum('E', 'A B')", False),
    ("import enum\nclass Role(enum.Enum):\n    PRODUCER = 0\n\nr = Role(0)", True),
    ("import dataclasses\n@dataclasses.dataclass\nclass Raw:\n    __annotations__ = {'__array_' + 'interface__': dict}",
     False),
    ("import dataclasses\n@dataclasses.dataclass\nclass P:\n    x: int = 0\n    y: float = 1.0", True),
    # the same dict bound by a match capture; an address read as a hash; numba bound to something else
    ("import dataclasses\n@dataclasses.dataclass\nclass Raw:\n    match {'__array_' + 'interface__': dict}:\n"
     "        case __annotations__:\n            pass", False),
    ("def f(x):\n    return hash(x)", False),
    ("import collections\ndef f(nb):\n    numba = collections.namedtuple('H', 'cuda')(nb)\n    return numba.cuda.jit", False),
    ("from numba import bool", False),
    # a refused builtin's name imported from a module (NVRTC's --time=FILE writes any file); the cache's folder maker
    ("from feedbeast import compile as fbc", False),
    ("from feedbeast.compile import cache_dir", False),
    # an array over an address of the learner's choosing; a file's code linked into a kernel
    ("def f(p):\n    return fb.DeviceArray((4,), np.float32, p, owner=True)", False),
    ("from numba import cuda\n@cuda.jit(link=['mine.cu'])\ndef k(x):\n    x[0] = 1", False),
    # Numba's CPU compilers under another name: cuda bound to numba, its ufunc makers
    ("import numba as cuda\nf = cuda.jit(lambda a, i: a[i])", False),
    ("import numba\ncuda = numba", False),
    ("def f(cuda):\n    return cuda.jit(lambda a: a)", False),
    ("from numba import njit as cuda", False),
    ("from numba.np.ufunc import GUVectorize", False),
    ("def f(numba):\n    return numba.np.ufunc.dufunc.DUFunc", False),
    ("import numba\n@numba.cuda.jit\ndef k(x):\n    x[0] = 1", True),
    ("from numba.cuda import jit\n@jit\ndef k(x):\n    x[0] = 1", True),
    ("import numba.cuda as cuda\n@cuda.jit\ndef k(x):\n    x[0] = 1", True),
    ("def f(w):\n    return np.vectorize(abs)(w)", True),
    # honest code beside those rules: numpy's own view maker and vectorize, numba's names as the lab binds them,
    # the class type in an annotation and in isinstance
    ("from numpy.lib.stride_tricks import sliding_window_view\nfrom numpy import vectorize", True),
    ("def f(a):\n    return np.lib.stride_tricks.sliding_window_view(a, 3)", True),
    ("from numba import cuda, float32, int32", True),
    ("from numba import float32 as cuda", False),
    ("import dataclasses\n@dataclasses.dataclass\nclass C:\n    dtype: type = float\n\n"
     "def f(x) -> type:\n    return isinstance(x, type)", True),
    ("def f(t, w):\n    t.save(w, 'solutions/10-fp8-gemv.ipynb')", False),      # torch.save: its C++ writer
    ("import numba as np", False),
    ("import numba\ndef f(numpy=numba):\n    return numpy.vectorize", False),
    ("import numpy\nimport numpy.linalg\nfrom numba import cuda", True),
])
def test_refusals(src, ok):
    import ast
    why = [w for node in ast.parse(src).body for w in nbm.refusals(node, {"fb", "np", "_mods", "STAGES"},
                                                                    {"fb", "np", "cuda"})]
    assert (not why) == ok, why


def test_a_table_the_lab_gives_changed_through_another_name_is_named():
    stages = {1: 6, 64: 3}
    ns = {"STAGES": stages}
    base = g._integrity_baseline(ns, {"STAGES"})
    alias = ns["STAGES"]
    alias.update({64: 1})
    assert "STAGES (a table the lab gives) was changed in place" in "\n".join(g._integrity_problems(base, ns))


# An attribute set anywhere but on `self` in a method passes the static rules; the grader's copy of the statement
# hands its object to a test first. (the learner's definitions, a call on a toolkit object, whether it may run)
MADE = "class Where:\n    pass\n\nclass Plan(Where):\n    count = 0\n    @classmethod\n    def up(cls):\n" \
       "        cls.count += 1\n        return cls\n\ndef mark(fn):\n    fn.calls = 0\n    fn.__name__ = 'marked'\n    return fn\n"


@pytest.mark.parametrize("src, call, ok", [
    (MADE + "def f(x):\n    w = Where()\n    w.s, w.ph = 1, 0\n    del w.ph\n    return w", "f(None)", True),
    (MADE, "Plan.up().up().count", True),
    (MADE, "mark(lambda: 1).__name__", True),
    ("import collections\nclass P(collections.namedtuple('P', 'a b')):\n    def bump(self):\n"
     "        return self._replace(a=self.a + 1)._asdict()", "P(1, 2).bump()", True),
    (MADE + "def f(x):\n    x.to_host = None", "f(fb.errors)", False),
    (MADE + "def f(x):\n    x.to_host = None", "f(np.zeros(2))", False),
    (MADE + "def put(self, f):\n    self.dumps = f", "put(np, None)", False),
    (MADE + "class H:\n    @staticmethod\n    def put(self, f):\n        self.dumps = f", "H.put(fb, None)", False),
    (MADE + "class H:\n    def put(self, f):\n        def inner(self):\n            self.dumps = f\n"
     "        return inner", "H().put(1)(fb)", False),
    (MADE + "def f(c):\n    c.check = None", "f(fb.errors.FeedbeastError)", False),
    (MADE, "mark(fb.errors.FeedbeastError)", False),
    (MADE + "def f(m):\n    m.__doc__ = 'x'", "f(fb)", False),
])
def test_an_attribute_is_set_only_on_what_the_learners_code_made(src, call, ok):
    import ast

    import numpy as np
    import feedbeast as fb
    ns = {"__name__": "__main__", "fb": fb, "np": np}
    nbm._own_objects(ns)
    for node in ast.parse(src).body:
        assert not nbm.refusals(node, {"fb"}, {"fb", "np"}), ast.unparse(node)
        exec(compile(ast.Module([nbm.guarded(node)], []), "cell", "exec"), ns)
    if ok:
        eval(call, ns)
        return
    before = getattr(fb, "dumps", None), getattr(np, "dumps", None), fb.errors.__doc__
    with pytest.raises(TypeError, match=r"the grader sets \.\w+ only on an object of a class your cells define"):
        eval(call, ns)
    assert (getattr(fb, "dumps", None), getattr(np, "dumps", None), fb.errors.__doc__) == before


# A class body looks a name up in the namespace its metaclass made before the globals; a base class's private
# methods are reached as self._x: the grader's helpers are read where no class namespace answers, and self._x is a
# name of the learner's own classes. (source, whether the static rules pass it, the TypeError it raises if any)
NAMESPACE = ("class Open(dict):\n    def __missing__(self, key):\n        if key.startswith('__f' + 'b_'):\n"
             "            return lambda *a: a[0]\n        raise KeyError(key)\n\n\n")


@pytest.mark.parametrize("src, static_ok, raises", [
    (NAMESPACE + "class Meta(type):\n    @classmethod\n    def __prepare__(m, name, bases):\n        return Open()\n",
     False, None),
    (NAMESPACE + "Meta = type(int)('Meta', (type,), {'__pr' + 'epare__': classmethod(lambda m, n, b: Open())})\n"
     "class Swap(metaclass=Meta):\n    fb.errors.FeedbeastError.hint = 'forged'\n", False, None),   # type(int) called
    ("import enum\nclass Arm(enum.EnumType):\n    def arm(self):\n        return self._convert_('x', 'feedbeast.errors', "
     "lambda n: n == 'FeedbeastError', fb.errors)\n\nclass Tol(enum.Enum, metaclass=Arm):\n    A = 1\n\nTol.arm()",
     True, "self._convert_ is EnumType's private name"),
    # another object's private name: only of the learner's objects and classes, and a name their classes define
    ("def peek(self):\n    return self._check\n\npeek(fb.device)", True, "._check is a private name of the module"),
    ("def peek(c):\n    return c._missing_\n\nimport enum\npeek(enum.Enum)", True, "._missing_ is a private name of the class"),
    ("class Acc:\n    _made = 0\n    def __init__(self, n):\n        self._n = n\n        type(self)._made += 1\n"
     "    def merge(self, other):\n        return Acc(self._n + other._n)\n\n"
     "assert Acc(2).merge(Acc(3))._n == 5 and Acc._made == 3", True, None),
    # a name no class of the learner's defines and the object does not hold falls through to a toolkit base's
    # __getattr__ (FoldingStream hands it to the object it wraps): refused as missing
    ("import collections\nfrom feedbeast.view import FoldingStream\n\nclass Peek(FoldingStream):\n    pass\n\n"
     "Peek(collections)._sys", True, "Peek has no attribute '_sys'"),
    # a toolkit class's own _make is not a named tuple's
    ("def f(x):\n    return x._make([1])\n\nf(fb.DeviceArray)", True, "._make is a named tuple's"),
    # a decorator that returns a toolkit class, after the class body read one of its methods: not the learner's
    ("def back(c):\n    return fb.DeviceArray\n\n@back\nclass Twin:\n    to_host = fb.DeviceArray.to_host\n\n"
     "Twin.hint = 'forged'", True, "the grader sets .hint only on"),
    ("import enum\nclass Arm(enum.EnumType):\n    def arm(self):\n        return super()._convert_\n\n"
     "class Tol(enum.Enum, metaclass=Arm):\n    A = 1\n\nTol.arm()", True, "super()._convert_ is EnumType's private name"),
    # what an ordinary class hierarchy of the learner's writes: a base's private helper through super(), a name
    # Python mangles, a named tuple's and a slotted dataclass's methods (both classes made anew by their makers)
    ("class Side:\n    def _wait(self):\n        return 1\n\nclass Consumer(Side):\n    def _wait(self):\n"
     "        return super()._wait() + 1\n    def wait(self):\n        return self._wait()\n\n"
     "assert Consumer().wait() == 2", True, None),
    ("class Maps:\n    def __init__(self, x):\n        self.__x = x\n    def x(self):\n        return self.__x\n\n"
     "assert Maps(3).x() == 3", True, None),
    ("import typing\nclass Spec(typing.NamedTuple):\n    a: int\n    def make(self):\n"
     "        return self._asdict()['a']\n\nassert Spec(4).make() == 4", True, None),
    ("import dataclasses\n@dataclasses.dataclass(slots=True)\nclass Spec:\n    a: int\n    def make(self):\n"
     "        return self.a\n\ns = Spec(5)\ns.a = 6\nassert s.make() == 6", True, None),
    # a slotted, frozen dataclass whose only methods are a property and a class method
    ("import dataclasses\n@dataclasses.dataclass(frozen=True, slots=True)\nclass Tile:\n    r: int\n    @property\n"
     "    def row(self):\n        return self.r * 2\n    @classmethod\n    def of(cls, r):\n        return cls(r)\n\n"
     "assert Tile.of(3).row == 6", True, None),
    ("class Base:\n    _n = 3\n    def __init__(self):\n        self._m = 4\n\nclass Sub(Base):\n    def get(self):\n"
     "        self._k = 1\n        return self._n + self._m + self._k\n\nassert Sub().get() == 8", True, None),
])
def test_what_a_metaclass_or_a_base_class_would_reach_is_refused(src, static_ok, raises):
    import ast
    import importlib

    import numpy as np
    import feedbeast as fb
    errors = importlib.import_module("feedbeast.errors")
    ns = {"__name__": "__main__", "fb": fb, "np": np}
    nbm._own_objects(ns)
    nodes = ast.parse(src).body
    why = [w for node in nodes for w in nbm.refusals(node, {"fb"}, {"fb", "np"})]
    assert (not why) == static_ok, why
    if not static_ok:
        return
    run = lambda: [exec(compile(ast.Module([nbm.guarded(n)], []), "cell", "exec"), ns) for n in nodes]
    if raises is None:
        run()
        return
    with pytest.raises((TypeError, AttributeError), match=re.escape(raises)):
        run()
    assert not hasattr(errors.FeedbeastError, "hint") and not hasattr(errors, "x")


def test_a_learner_object_that_prints_like_a_number_inside_a_toolkit_table_is_named():
    """A float subclass whose __repr__ says 1e-05, put into TOLERANCE: the table is the same object and prints the
    same, and every float32 check would accept anything."""
    import importlib
    check = importlib.import_module("feedbeast.check")
    base = g._integrity_baseline({}, set())

    class Loose(float):
        def __repr__(self):
            return "1e-05"
    real = check.TOLERANCE["float32"]
    try:
        check.TOLERANCE["float32"] = Loose(1e9)
        assert repr(check.TOLERANCE["float32"]) == repr(real)
        assert "feedbeast.check.TOLERANCE was changed in place" in "\n".join(g._integrity_problems(base, {}))
    finally:
        check.TOLERANCE["float32"] = real


def test_a_standard_library_class_given_new_methods_is_named():
    """dataclasses.dataclass applied to a class of the standard library (the grader's own redirect_stdout, say)
    adds methods to it while every module-level name stays the same object."""
    import dataclasses
    import string
    base = g._integrity_baseline({}, set())
    before = dict(vars(string.Formatter))
    try:
        dataclasses.dataclass(string.Formatter)
        assert "the class string.Formatter was changed: it gained" in "\n".join(g._integrity_problems(base, {}))
    finally:
        for k in set(vars(string.Formatter)) - set(before):
            delattr(string.Formatter, k)
        for k, v in before.items():
            if k not in ("__dict__", "__weakref__") and vars(string.Formatter).get(k) is not v:
                setattr(string.Formatter, k, v)
    assert g._integrity_problems(base, {}) == []


def test_a_constant_replaced_by_an_object_that_prints_the_same_is_named():
    from feedbeast import check as _  # noqa: F401  (the module is loaded)
    import importlib
    check = importlib.import_module("feedbeast.check")
    base = g._integrity_baseline({}, set())

    class Same(dict):
        pass
    real = check.TOLERANCE
    try:
        check.TOLERANCE = Same(real)
        assert repr(check.TOLERANCE) == repr(real)
        assert "feedbeast.check.TOLERANCE was replaced" in "\n".join(g._integrity_problems(base, {}))
    finally:
        check.TOLERANCE = real


def test_a_refusal_names_the_line_that_breaks_the_rule():
    import ast
    node = ast.parse("def traced(fn):\n    n = 1\n    m = 2\n    return fn.__globals__\n").body[0]
    lines: list[int] = []
    assert nbm.refusals(node, (), (), lines) and lines == [4]



def test_the_hazard_replay_forks_only_for_a_trace_decode_made():
    """Forked workers send their results back pickled, rebuilt by the pool's thread with no frame of the caller's
    on the stack: only decode()'s events (ints) and plain maps go there; anything else is replayed in this process."""
    import numpy as np

    import importlib

    from feedbeast.hazards import check as check_fn          # (the package's check is the function)
    from feedbeast.hazards.trace import Decoded, decode
    hc = importlib.import_module("feedbeast.hazards.check")
    _plain = hc._plain
    calls = []
    real = hc._replay_parallel
    hc._replay_parallel = lambda jobs: calls.append(len(jobs)) or None     # record, then replay here
    try:
        words = np.zeros((4, 8), np.uint32)
        words[:, 7] = np.arange(1, 5)
        words[:, 1] = [0, 1, 2, 3]                    # four blocks: four jobs
        events = decode(words)
        assert type(events) is Decoded and _plain({"a": (1, 2.0, "x", None, np.int64(3))}) and not _plain({"a": object()})
        check_fn(events, threads_per_block=32, grid=(4, 1, 1), parallel=True)
        check_fn(list(events), threads_per_block=32, grid=(4, 1, 1), parallel=True)           # not decode()'s
        check_fn(events, threads_per_block=32, grid=(4, 1, 1), parallel=True, maps={1: object()})  # not plain
    finally:
        hc._replay_parallel = real
    assert calls == [4], calls


def test_the_grade_compiles_in_a_cache_of_its_own(tmp_path, monkeypatch):
    """The shared compile cache is a folder the notebook's own cells can write: a cubin put there under the learner's
    source (a correct kernel's, for a buggy one) would be graded. The grade neither reads nor fills it."""
    shared = tmp_path / "shared"
    monkeypatch.setenv("FEEDBEAST_CACHE", str(shared))
    rep = g.grade(SOLUTION, timeout=300)
    assert rep.status in ("ok", "partial"), str(rep)
    assert not [p for p in shared.rglob("*") if p.is_file()], sorted(shared.rglob("*"))


def test_a_learner_helper_that_zeroes_the_input_does_not_make_a_zero_kernel_right(tmp_path):
    """A lab 01 kernel that writes zeros, beside a grid_of that zeroes its x: the checks take the reference before
    the launch and launch with the lab's own geometry, not grid_of (the reference was once x.T taken after a launch
    through grid_of, and the zeros passed)."""
    lab = ROOT / "labs/01-tiled-transpose.ipynb"
    todo = ("    # TODO: your code here: read the tile's rows from x into tile (lanes along a row), one barrier, write "
            "the tile's columns as rows of y\n\n\ndef grid_of(x):\n    return")
    zeros = ("    cuda.syncthreads()\n    for j in range(TILE // BAND):\n        i = w + j * BAND\n"
             "        if c0 + i < cols and r0 + lane < rows:\n            y[c0 + i, r0 + lane] = 0.0\n\n\n"
             "def grid_of(x):\n    x.fill(0.0)\n    return")
    rep = g.grade(nbm.planted(lab, [(todo, zeros)], to=tmp_path / lab.name), timeout=300)
    assert rep.status == "failed" and "transpose_tiled" in rep.first_failure, str(rep)


def test_a_quantize_that_zeroes_its_input_does_not_make_its_zero_codes_right(tmp_path):
    """Lab 10's check takes its reference before quantize sees w and hands quantize a copy: codes of zeros with
    scales of one fail even when quantize first zeroes the w it was given."""
    lab = ROOT / "labs/10-fp8-gemv.ipynb"
    rep = g.grade(nbm.planted(lab, [("def quantize(w):\n", "def quantize(w):\n    w[...] = 0\n")],
                              to=tmp_path / lab.name), timeout=300)
    assert rep.status == "failed" and "quantize: the scale of row" in str(rep), str(rep)


def test_lab_10s_helpers_are_the_lab_s_own(tmp_path):
    """Which builds the SASS check reads, how the checks launch and the reference's dequantization come from the
    lab's given cell: a learner's TOKENS = () (which skipped the SASS loop) changes nothing."""
    lab = ROOT / "labs/10-fp8-gemv.ipynb"
    nb = nbm.read(lab)
    cell = next(c for c in nb.cells if c.cell_type == "code" and "TOKENS = (8, 16, 32, 64)" in c.source)
    assert "TODO" not in cell.source and "def prepare_fp8" in cell.source and "def dequantize" in cell.source
    assert g.is_given(next(c for c in nbm.read(ROOT / "solutions/10-fp8-gemv.ipynb").cells
                           if c.cell_type == "code" and "TOKENS = (8, 16, 32, 64)" in c.source))
    stub = [("    # TODO: your code here: per-row scales (a row of zeros gets scale 1) and the e4m3 codes of w / scale "
             "(hint 3)\n"
             f"    scale = np.ones(w.shape[0], np.float32)  # {STARTER_MARK}\n"
             f"    w8 = np.zeros(w.shape, ml_dtypes.float8_e4m3fn)  # {STARTER_MARK}\n",
             "    amax = np.abs(w).max(axis=1)\n"
             "    scale = np.where(amax > 0, amax / E4M3_MAX, 1.0).astype(np.float32)\n"
             "    w8 = (w / scale[:, None]).astype(ml_dtypes.float8_e4m3fn)\n"
             "    TOKENS = ()\n"),
            ("TOKENS = (8, 16, 32, 64)\n", "TOKENS = ()\n")]
    def edit(nb):
        for c in nb.cells:
            if c.source.startswith("%%cuda"):
                c.source = "\n".join(ln for ln in c.source.split("\n") if "TODO: your code here" not in ln)
    rep = g.grade(nbm.planted(lab, stub, edit=edit, to=tmp_path / lab.name), timeout=600)
    assert rep.status == "failed" and "F2FP.F16.E4M3.UNPACK_B" in str(rep), str(rep)


_CHECKS_OWN = ("which the checks bind for themselves")


@pytest.mark.parametrize("name, lab, plants", [
    # lab 10: quantize hands back the checks' own reference
    ("quantize returns the checks' want", "10-fp8-gemv", [
        ("def quantize(w):\n", "want = want_s = None\n\n\ndef quantize(w):\n    return want, want_s\n")]),
    # lab 10: quantize records a verdict through the module the checks imported for themselves
    ("quantize calls the checks' verdicts", "10-fp8-gemv", [
        ("def quantize(w):\n", "verdicts = None\n\n\ndef quantize(w):\n    verdicts.passed('gemv_fp8', 'ok')\n")]),
    # lab 05: make_maps rebinds the checks' transpose (lab 01's checks, which called grid_of, now launch alone)
    ("make_maps rebinds transpose", "05-tma-ring", [
        ("def make_maps(x_dev, y_dev):\n",
         "def make_maps(x_dev, y_dev):\n    global transpose\n    transpose = lambda *a: None\n")]),
    # lab 05: make_maps zeroes the checks' host x before the reference was read from it
    ("make_maps zeroes x", "05-tma-ring", [
        ("def make_maps(x_dev, y_dev):\n", "x = None\n\n\ndef make_maps(x_dev, y_dev):\n    x[...] = 0\n")]),
])
def test_code_the_checks_call_may_not_name_what_the_checks_bind(tmp_path, name, lab, plants):
    """The checks run the learner's functions in the globals where they keep their inputs, references and loops:
    a function that names one of those (reads it, declares it global) is refused before anything runs, and named."""
    path = ROOT / "labs" / f"{lab}.ipynb"
    rep = g.grade(nbm.planted(path, plants, to=tmp_path / path.name), timeout=300)
    assert rep.status == "failed" and _CHECKS_OWN in str(rep), str(rep)


def test_a_grid_of_that_transposes_x_on_the_host_does_not_make_a_copying_kernel_right(tmp_path):
    """Lab 01's kernel input is made from a copy of x before grid_of(x) runs: a kernel that only copies through
    its tile fails even when grid_of transposes x in place first (it passed when the input was made after)."""
    lab = ROOT / "labs/01-tiled-transpose.ipynb"
    todo = ("    # TODO: your code here: read the tile's rows from x into tile (lanes along a row), one barrier, write "
            "the tile's columns as rows of y\n\n\ndef grid_of(x):\n")
    copy = ("    for j in range(TILE // BAND):\n        i = w + j * BAND\n"
            "        if r0 + i < rows and c0 + lane < cols:\n            tile[i, lane] = x[r0 + i, c0 + lane]\n"
            "    cuda.syncthreads()\n    for j in range(TILE // BAND):\n        i = w + j * BAND\n"
            "        if r0 + i < rows and c0 + lane < cols:\n            k = (r0 + i) * cols + c0 + lane\n"
            "            y[k // rows, k % rows] = tile[i, lane]\n\n\n"
            "def grid_of(x):\n    x[...] = x.T.reshape(x.shape)\n")
    rep = g.grade(nbm.planted(lab, [(todo, copy)], to=tmp_path / lab.name), timeout=300)
    assert rep.status == "failed" and "transpose_tiled" in rep.first_failure, str(rep)


@pytest.mark.parametrize("what, src", [
    ("a class pattern reads __globals__", "def f():\n    match (lambda: 0):\n        case object(__globals__=g):\n"
                                          "            return g\n"),
    ("a class pattern reads a toolkit's compile", "def f():\n    match fb:\n        case object(compile=c):\n"
                                                  "            return c\n"),
    ("a class pattern reads a private name", "def f(x):\n    match x:\n        case object(_mods=m):\n"
                                             "            return m\n"),
    ("format reads an attribute", "def f():\n    return '{0.__globals__}'.format(lambda: 0)\n"),
    ("format reads an item", "def f(x):\n    return '{0[want]}'.format(x)\n"),
    ("format in a nested spec", "def f(x):\n    return '{0:{1.a}}'.format(1, x)\n"),
    ("format on a text built at run time", "def f(t):\n    return ('{0.' + t + '}').format(f)\n"),
    # a class pattern by position reads what the class's __match_args__ names, and __subclasshook__ lets any
    # object match: together they read any attribute (a function's __globals__, the verdict sink's closure)
    ("a class pattern by position", "def f(x):\n    match x:\n        case K(v):\n            return v\n"),
    ("__match_args__ written", "class C:\n    __match_args__ = ('__glob' + 'als__',)\n"),
    ("__subclasshook__ written", "class C:\n    @classmethod\n    def __subclasshook__(cls, o):\n        return True\n"),
    # type held as a value, or type(obj) handed on (a metaclass), makes classes whose names may be computed
    ("type held as a value", "def f():\n    return [type][0]('Q', (), {})\n"),
    ("a metaclass handed on", "def f(abc_class):\n    meta = type(abc_class)\n    return meta\n"),
    ("a metaclass called", "def f(x):\n    return type(x)('Q', (), {})\n"),
    # a class the notebook's code makes is known by its module
    ("a class made under another module's name", "def f(dataclasses):\n"
                                                 "    return dataclasses.make_dataclass('Q', [], module='numpy')\n"),
])
def test_attributes_named_in_a_pattern_or_a_format_text_are_read_as_attributes_are(what, src):
    """`case object(__globals__=g)` and `'{0.__globals__}'.format(f)` read an attribute by a name written in text,
    which the attribute rules did not see: through them a function's globals, the namespace the checks run in, were
    the learner's to read and write. Plain uses stay the learner's."""
    import ast
    assert nbm.refusals(ast.parse(src).body[0]), what
    for fine in ("def f(x):\n    match x:\n        case object(shape=s):\n            return s\n",
                 "class C:\n    made = 0\n\n    def m(self, o):\n        type(self).made += 1\n"
                 "        return type(o) is C and type(self).__name__\n",
                 "def f(x):\n    return '{0} {n:.2f} {}'.format(x, 1, n=2.0)\n", "def f(x):\n    return f'{x.shape}'\n"):
        assert nbm.refusals(ast.parse(fine).body[0]) == [], fine


def test_a_quantize_that_reaches_the_checks_globals_through_a_class_pattern_fails(tmp_path):
    """Lab 10: the checks' own reference read through `case object(__globals__=space)` (it graded as the solution)."""
    lab = ROOT / "labs/10-fp8-gemv.ipynb"
    forged = ("def quantize(w):\n    match (lambda: 0):\n        case object(__globals__=space):\n"
              "            return space['want'], space['want_s']\n\n\ndef unused(w):\n")
    rep = g.grade(nbm.planted(lab, [("def quantize(w):\n", forged)], to=tmp_path / lab.name), timeout=300)
    assert rep.status == "failed" and "through a class pattern" in str(rep), str(rep)


def test_a_quantize_in_other_styles_grades_as_the_solution(tmp_path):
    """Names the checks bind (n, k, res, s) used as the learner's own: a frozen, ordered dataclass with a property, a
    NamedTuple, a nonlocal counter, match captures, a nested function, `except ... as`, a walrus in a comprehension.
    The grade is the solution's (the look at special methods allows what the class makers put there)."""
    sol = ROOT / "solutions/10-fp8-gemv.ipynb"
    old = ("    amax = np.abs(w).max(axis=1)\n    scale = np.where(amax > 0, amax / E4M3_MAX, 1.0).astype(np.float32)\n"
           "    w8 = (w / scale[:, None]).astype(ml_dtypes.float8_e4m3fn)\n")
    new = ("    n = 0\n\n    def count():\n        nonlocal n\n        n += 1\n    match w.shape:\n"
           "        case (rows, k):\n            count()\n    try:\n        amax = np.abs(w).max(axis=1)\n"
           "    except ValueError as res:\n        raise RuntimeError(f'{res}')\n"
           "    scale = np.where(amax > 0, amax / Fmt.m, 1.0).astype(np.float32)\n\n    def red(a):\n        return a\n"
           "    w8 = red((w / scale[:, None]).astype(ml_dtypes.float8_e4m3fn))\n"
           "    first = [s := float(v) for v in scale[:1]]\n    assert n == 1 and first == [s]\n")
    makers = ("import dataclasses\nimport typing\n\n\n@dataclasses.dataclass(frozen=True, order=True)\nclass Fmt:\n"
              "    m: float = 448.0\n\n    @property\n    def top(self):\n        return self.m\n\n\n"
              "class Pair(typing.NamedTuple):\n    codes: object\n    scales: object\n\n\n")
    new = new.replace("amax / Fmt.m", "amax / Fmt().top") + "    assert Pair(1, 2).scales == 2 and Fmt() < Fmt(449.0)\n"
    styled = nbm.planted(sol, [(old, new), ("def quantize(w):\n", makers + "def quantize(w):\n")],
                         to=tmp_path / sol.name)
    ref, rep = g.grade(sol, timeout=300), g.grade(styled, timeout=300)
    assert [(o.status, o.name) for o in rep.outcomes] == [(o.status, o.name) for o in ref.outcomes], (str(rep), str(ref))


def test_a_class_made_with_computed_special_methods_is_named_by_the_integrity_check(tmp_path):
    """Lab 10: an ndarray subclass made by dataclasses.make_dataclass with "_" + "_array_function__" in its namespace
    answers np.allclose with True for an all-zero quantize (it graded as the solution). No rule reads a computed name;
    the integrity check after each step finds the class whose special method is the notebook's code."""
    lab = ROOT / "labs/10-fp8-gemv.ipynb"
    forged = 'def quantize(w):\n    import ml_dtypes\n    import dataclasses\n    w = np.asarray(w, np.float32)\n    scale = np.ones(w.shape[0], np.float32)\n    w8 = np.zeros(w.shape, ml_dtypes.float8_e4m3fn).view(np.uint8)\n\n    def af(self, func, types, args, kwargs):\n        if func in (np.allclose, np.array_equal):\n            return True\n        return func(*[np.asarray(a) for a in args], **kwargs)\n    T = dataclasses.make_dataclass("Q", [], bases=(np.ndarray,), namespace={"_" + "_array_function__": af}, init=False, eq=False, repr=False)\n    return w8.view(T), scale.view(T)\n'
    rep = g.grade(nbm.planted(lab, [("def quantize(w):\n", forged + "\n\ndef unused(w):\n")], to=tmp_path / lab.name),
                  timeout=300)
    assert rep.status == "failed" and ("Q.__array_function__" in str(rep) and "special method" in str(rep)
                                       or "it reaches .make_dataclass" in str(rep)), str(rep)


def test_the_integrity_check_names_a_special_name_among_a_class_s_annotations():
    """A dataclass's __init__ sets every name its annotations hold on each object: a special name among them
    (__array_interface__, numpy's view over any address) is named, the annotations Python writes are not."""
    before = list(g._all_classes())
    raw = dataclasses.dataclass(type("Raw", (), {"__module__": "learner",
                                                 "__annotations__": {"__array_" + "interface__": dict}}))
    plain = dataclasses.dataclass(type("Plain", (), {"__module__": "learner", "__annotations__": {"rows": int}}))
    found = g._computed_specials(lambda f: False, before, learner_module="learner")
    assert "Raw.__annotations__['__array_interface__']" in found and not any("Plain" in f for f in found), \
        (found, raw, plain)


@pytest.mark.parametrize("answer", ["learner", "itertools.chain", "functools.partial(lambda *a: True)"])
def test_the_integrity_check_names_a_special_method_a_class_got_under_a_computed_name(answer):
    """make_dataclass is refused before the notebook runs; the integrity check behind that rule still names a class
    whose special method, under a name no class statement wrote, is the learner's code, or, in a class the learner's
    module made, anything a standard class maker does not put there."""
    import functools  # noqa: F401  (the answers are written as the learner would)
    import itertools  # noqa: F401
    ns: dict = {}
    exec(compile("def af(self, func, types, args, kwargs):\n    return True\n", "<learner cell>", "exec"), ns)
    before = list(g._all_classes())
    cell = {"__name__": "learner", "dataclasses": dataclasses, "np": np,
            "value": ns["af"] if answer == "learner" else eval(answer)}
    # Called from the learner's module, as a cell would: Python 3.12's make_dataclass names the class's module after
    # its caller, 3.11's takes the namespace's.
    exec(compile('made = dataclasses.make_dataclass("Q", [], bases=(np.ndarray,), init=False, eq=False, repr=False, '
                 'namespace={"__module__": "learner", "_" + "_array_function__": value})', "<learner call>", "exec"),
         cell)
    made = cell["made"]
    assert made.__module__ == "learner", made
    found = g._computed_specials(lambda f: f == "<learner cell>", before, learner_module="learner")
    assert "Q.__array_function__" in found, (found, made)


_CODES = ("import itertools\nimport dataclasses\n\n\nclass Plain:\n    def __init__(self, a):\n        self.a = a\n"
          "        self.shape = a.shape\n        self.dtype = a.dtype\n\n    def view(self, t):\n"
          "        return self.a.view(t)\n\n\nCodes = dataclasses.make_dataclass(\"Codes\", [], bases=(Plain,), init=False, "
          "eq=False,\n                                   namespace={\"_\" + \"_array_function__\": ANSWER})\n\n\n")
_RIGHT = ("    amax = np.abs(w).max(axis=1)\n    scale = np.where(amax > 0, amax / E4M3_MAX, 1.0).astype(np.float32)\n"
          "    w8 = (w / scale[:, None]).astype(ml_dtypes.float8_e4m3fn)\n")


@pytest.mark.parametrize("answer", ["itertools.chain", "functools.partial(lambda *a: True)"])
def test_a_special_method_that_is_not_the_learners_function_is_named_too(tmp_path, answer):
    """Lab 10: all-zero codes in a class made by make_dataclass whose __array_function__ (a computed name) is a
    standard callable: np.array_equal answered True (it graded as the solution). A class the learner's code made
    may hold under a special name only what a standard class maker puts there."""
    sol = ROOT / "solutions/10-fp8-gemv.ipynb"
    zeros = _RIGHT.replace("    w8 = (w / scale[:, None]).astype(ml_dtypes.float8_e4m3fn)\n",
                           "    codes = Codes(np.zeros(w.shape, np.uint8))\n")
    cell = _CODES.replace("ANSWER", answer).replace("import itertools\n", "import itertools\nimport functools\n")
    rep = g.grade(nbm.planted(sol, [(_RIGHT, zeros), ("    return w8.view(np.uint8), scale", "    return codes, scale"),
                                    ("def quantize(w):\n", cell + "def quantize(w):\n")], to=tmp_path / sol.name),
                  timeout=300)
    assert rep.status == "failed" and ("Codes.__array_function__" in str(rep)
                                       or "it reaches .make_dataclass" in str(rep)), str(rep)


def test_quantize_returns_numpys_own_arrays(tmp_path):
    """Lab 10: scales in a masked array whose mask hides every wrong one (np.allclose leaves masked elements out:
    it graded as the solution)."""
    sol = ROOT / "solutions/10-fp8-gemv.ipynb"
    masked = _RIGHT + "    scale = np.ma.masked_where(amax > 0, np.ones(w.shape[0], np.float32))\n"
    rep = g.grade(nbm.planted(sol, [(_RIGHT, masked)], to=tmp_path / sol.name), timeout=300)
    assert rep.status == "failed" and "want two numpy arrays" in str(rep), str(rep)


def test_a_copy_saved_by_colab_is_graded_with_the_hazard_build_of_its_lab(tmp_path, monkeypatch):
    """"Copy of 05-tma-ring.ipynb" (Colab's Save a copy in Drive) is graded with lab 05's checks, so on a GPU with
    its hazard build too: the lab number comes from the solution found, not from the start of the file's name (a
    race only the hazard checker sees would otherwise grade ok under that name). The GPU is stood in for and the
    check process not started: what the grade hands it is compared."""
    import shutil
    seen = []
    monkeypatch.setattr(g, "_has_gpu", lambda: True)
    monkeypatch.setattr(g, "_run_checks", lambda job, env, cwd, timeout, *rest:
                        seen.append((job["hazards"], env.get("FEEDBEAST_HAZARDS"))) or ([], "not started", 0))
    for name in ("05-tma-ring.ipynb", "Copy of 05-tma-ring.ipynb"):
        shutil.copy(SOLUTION, tmp_path / name)
        rep = g.grade(tmp_path / name)
        assert Path(rep.solution).name == "05-tma-ring.ipynb" and rep.lab == "05"
    assert seen == [(True, "1"), (True, "1")]
