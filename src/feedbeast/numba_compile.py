"""A Numba kernel compiled by Numba's real GPU compiler in a process of its own. Chapter 01 explains the simulator
it stands beside; labs 01 and 02 check their kernels with it (feedbeast.numba_support.expect_compiles).

Without a GPU the notebooks run their Numba kernels in Numba's CUDA simulator, which runs them as Python: it takes
code the GPU compiler rejects (a Python list, a string, a call Numba cannot type). `numba.cuda` is in one mode per
process, so the real compiler runs in a child process: NVVM turns the kernel into PTX, which needs no GPU.

The child gets the kernel's source, the argument types of a launch, and the globals it names that are plain values
(numbers, strings), modules, Numba types and other Numba functions (compiled as device functions). It defines the
function without its decorators, default values and annotations, so nothing of it runs: Numba reads its bytecode.
"""
from __future__ import annotations

import ast
import dis
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
import types as pytypes

_MODULES = {"math", "cmath", "operator", "numpy", "numba", "numba.cuda"}


class Unsupported(Exception):
    """A kernel the child cannot rebuild (say why)."""


class NotADef(Unsupported):
    """A function of the kernel's written as a lambda: its source is the line it stands on, not a function the
    compiler's process can define again. A def in a cell is read like the kernel."""


class NotAKernelGlobal(Unsupported):
    """A global or captured value of the kernel's that a GPU kernel cannot use: Numba takes globals and captured
    values as constants, of the types its CUDA target supports (numba-cuda user guide, "Global Variables and
    Captured Values", and "Supported Python features in CUDA Python")."""


def _source(fn) -> tuple[str, int, str]:
    """(the function's source with its decorator lines blanked, its first line in its file, its file name). Line
    numbers stay those of the file, so the compiler's errors point at the learner's own lines."""
    try:     # from its code object: inspect follows a function's __wrapped__ (functools.wraps) to another's source
        lines, first = inspect.getsourcelines(fn.__code__)
    except (OSError, TypeError, AttributeError):
        raise Unsupported(f"the source of {fn.__name__} cannot be read here") from None
    src = textwrap.dedent("".join(lines))
    func = next((n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef)), None)
    if func is None:
        raise (NotADef if fn.__code__.co_name == "<lambda>" else Unsupported)(f"{fn.__name__} is not a plain function")
    text = _without_defaults_and_annotations(src, func).splitlines()
    for i in range(func.lineno - 1):          # the decorators: blank lines, so that nothing runs at definition
        text[i] = ""
    return "\n".join(text) + "\n", first, fn.__code__.co_filename


def _without_defaults_and_annotations(src: str, func: ast.FunctionDef) -> str:
    """`src` with the function's default values and annotations blanked (same lines and columns): they would run
    as code when the child defines the function, and a launch passes every argument anyway."""
    a = func.args
    spans = []     # ((line, col), (end line, end col)) to blank, columns in UTF-8 bytes as ast gives them
    params = [*a.posonlyargs, *a.args]
    defaults = dict(zip(params[len(params) - len(a.defaults):], a.defaults))
    defaults.update({p: d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
    for p in (*params, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x is not None)):
        end = defaults.get(p) or p.annotation
        if end is not None:     # from the end of the name to the end of the default (or of the annotation)
            spans.append(((p.lineno, p.col_offset + len(p.arg.encode())), (end.end_lineno, end.end_col_offset)))
    lines = [ln.encode() for ln in src.split("\n")]
    if func.returns is not None:    # `-> T`: from the arrow, found back from the annotation
        r = func.returns
        line, col = r.lineno, r.col_offset
        while lines[line - 1].rfind(b"->", 0, col) < 0:
            line, col = line - 1, len(lines[line - 2])
        spans.append(((line, lines[line - 1].rfind(b"->", 0, col)), (r.end_lineno, r.end_col_offset)))
    for (l0, c0), (l1, c1) in spans:
        for ln in range(l0, l1 + 1):
            b = lines[ln - 1]
            lo, hi = (c0 if ln == l0 else 0), (c1 if ln == l1 else len(b))
            if ln < l1 and b.rstrip().endswith(b"\\"):     # a line continued with a backslash stays continued
                hi = max(lo, min(hi, len(b.rstrip()) - 1))
            lines[ln - 1] = b[:lo] + b" " * max(0, hi - lo) + b[hi:]
    return b"\n".join(lines).decode()


def _names(code) -> set[str]:
    """The globals a function's code loads (co_names holds attribute names too: `threadIdx.x`)."""
    out = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for c in code.co_consts:
        if isinstance(c, pytypes.CodeType):
            out |= _names(c)
    return out


def _plain(value) -> bool:
    return isinstance(value, (bool, int, float, str)) or value is None or \
        (isinstance(value, tuple) and all(_plain(v) for v in value))


def _global(name, value, device: dict) -> dict:
    """How the child rebuilds one global (or closure variable) the kernel names."""
    import numpy as np
    if _plain(value):
        return {"value": value, "tuple": isinstance(value, tuple)}
    if isinstance(value, np.generic):                       # a numpy scalar keeps its type
        return {"scalar": value.item(), "dtype": str(value.dtype)}
    if isinstance(value, np.ndarray) and not value.dtype.hasobject:     # a constant array in the kernel
        import base64
        import io
        buf = io.BytesIO()
        np.save(buf, np.asarray(value), allow_pickle=False)
        return {"npy": base64.b64encode(buf.getvalue()).decode()}
    if isinstance(value, np.dtype) and not value.hasobject:     # cuda.shared.array(32, dtype=DT)
        return {"dtype_value": value.str}
    if isinstance(value, pytypes.ModuleType):
        mod = value.__name__
        if mod.startswith("numba.cuda"):     # the simulator's module or the real one: the child has the real one
            mod = "numba.cuda"
        if mod not in _MODULES:
            raise NotAKernelGlobal(f"the module {mod} (global {name!r})")
        return {"module": mod}
    py = getattr(value, "py_func", None)
    if py is not None:                          # another Numba function: a device function in the child
        if name not in device:
            device[name] = None
            device[name] = _function(py, device)
        return {"device": name}
    import numba
    if isinstance(value, numba.core.types.Type) and getattr(numba, str(value), None) == value:
        return {"numba_type": str(value)}
    home = getattr(value, "__module__", None)
    if callable(value) and isinstance(home, str) and home.split(".")[0] in {m.split(".")[0] for m in _MODULES} \
            and getattr(sys.modules.get(home), getattr(value, "__name__", ""), None) is value:
        return {"attr": [home, value.__name__]}              # from math import sqrt; np.float32
    if isinstance(value, pytypes.FunctionType):
        # a plain Python function (a helper without @cuda.jit(device=True), a lambda): the GPU compiler cannot call
        # it, and says so; the child gets one of its own, never the learner's
        return {"python_function": True}
    raise NotAKernelGlobal(f"the global {name!r} ({type(value).__name__})")


def _function(fn, device: dict) -> dict:
    src, first, file = _source(fn)
    glob = {}
    for n in sorted(_names(fn.__code__)):
        if n in fn.__globals__:                 # else a builtin (range, min) or a name the compiler will report
            glob[n] = _global(n, fn.__globals__[n], device)
    # a kernel made by a factory (make_rowsum_tiled(band)): its free variables become the child's globals
    for n, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        glob[n] = _global(n, cell.cell_contents, device)
    return {"name": fn.__code__.co_name, "source": src, "first": first, "file": file, "globals": glob}


def _arg_type(a) -> dict:
    import numpy as np
    from .memory import DeviceArray, interface
    cai = None if isinstance(a, (np.ndarray, DeviceArray)) else interface(a)
    if isinstance(a, (np.ndarray, DeviceArray)) or cai is not None:
        arr = np.asarray(a) if isinstance(a, np.ndarray) else None
        dtype = str(arr.dtype if arr is not None else a.dtype if cai is None else cai["dtype"])
        ndim = arr.ndim if arr is not None else len(a.shape)
        contiguous = arr.flags.c_contiguous if arr is not None else cai is None or cai["strides"] is None
        return {"array": dtype, "ndim": ndim, "layout": "C" if contiguous else "A"}
    if isinstance(a, (bool, np.bool_)):
        return {"scalar": "boolean"}
    if isinstance(a, (int, np.integer)):
        return {"scalar": "int64"}
    if isinstance(a, (float, np.floating)):
        return {"scalar": "float64" if isinstance(a, float) else str(np.asarray(a).dtype)}
    raise Unsupported(f"an argument of type {type(a).__name__}")


def spec(kernel, args, cc) -> dict:
    """What the child needs: the kernel and its device functions, the launch's argument types, the target."""
    device: dict = {}
    main = _function(getattr(kernel, "py_func", kernel), device)
    return {"kernel": main, "device": device, "args": [_arg_type(a) for a in args], "cc": list(cc)}


def compile_in_child(kernel, args, cc=(7, 5), timeout=180) -> dict:
    """{'ok': the PTX's length, 'local': whether it uses local memory} | {'error': the compiler's message, 'kind':
    its exception's name, 'function' and 'code': the kernel's line it points at, when found} | {'skip': why}."""
    try:
        s = spec(kernel, args, cc)
    except NotAKernelGlobal as e:
        return {"refused": str(e)}
    except NotADef as e:
        return {"lambda": str(e)}
    except Unsupported as e:
        return {"skip": f"cannot hand the kernel to the compiler's process: {e}"}
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    # `python -m` puts its working directory first on sys.path: an empty one, not the notebook's folder, whose
    # files would shadow the modules the child imports
    import tempfile
    with tempfile.TemporaryDirectory() as empty:
        try:
            r = subprocess.run([sys.executable, "-m", "feedbeast.numba_compile"], input=json.dumps(s), text=True,
                               capture_output=True, env=env, timeout=timeout, cwd=empty)
        except subprocess.TimeoutExpired:
            return {"skip": f"Numba's compiler took more than {timeout} s"}
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"skip": f"the compiler's process ended without an answer (exit {r.returncode}): "
                        f"{r.stderr.strip().splitlines()[-1:] or ''}"}


def _untyped(*args):
    """What a plain Python function the kernel calls is in the child: one the GPU compiler cannot type, as the
    learner's would be."""


def _tuples(v):
    """JSON's lists back to the tuples they were."""
    return [tuple(_tuples(x)) if isinstance(x, list) else x for x in v]


def _build(s: dict):
    """In the child: the kernel's function, its globals rebuilt, device functions compiled for the GPU."""
    import importlib

    import numba
    from numba import cuda
    made: dict = {}

    def function(f):
        g = {"__builtins__": __builtins__}
        for n, how in f["globals"].items():
            if "value" in how:
                g[n] = tuple(_tuples(how["value"])) if how["tuple"] else how["value"]
            elif "scalar" in how:
                import numpy as np
                g[n] = np.dtype(how["dtype"]).type(how["scalar"])
            elif "npy" in how:
                import base64
                import io

                import numpy as np
                g[n] = np.load(io.BytesIO(base64.b64decode(how["npy"])), allow_pickle=False)
            elif "dtype_value" in how:
                import numpy as np
                g[n] = np.dtype(how["dtype_value"])
            elif "python_function" in how:
                g[n] = _untyped
            elif "attr" in how:
                g[n] = getattr(importlib.import_module(how["attr"][0]), how["attr"][1])
            elif "module" in how:
                g[n] = importlib.import_module(how["module"])
            elif "numba_type" in how:
                g[n] = getattr(numba, how["numba_type"])
            else:
                d = how["device"]
                if d not in made:
                    made[d] = None
                    made[d] = cuda.jit(device=True)(function(s["device"][d]))
                g[n] = made[d]
        code = compile("\n" * (f["first"] - 1) + f["source"], os.path.basename(f["file"]), "exec")
        exec(code, g)
        return g[f["name"]]

    return function(s["kernel"])


def _signature(args):
    import numpy as np
    from numba import from_dtype, types
    out = []
    for a in args:
        if "array" in a:
            out.append(types.Array(from_dtype(np.dtype(a["array"])), a["ndim"], a["layout"]))
        else:
            out.append(getattr(types, a["scalar"]))
    return tuple(out)


def _message(e: Exception, s: dict) -> dict:
    """The compiler's complaint, short: what it says (not Numba's 'Failed in ...' or 'There are N candidate ...'
    framing), and the line of the kernel or of a device function it points at (the first such mark after it)."""
    text = str(e)
    lines = text.splitlines()
    skip = ("Failed in ", "During:", "File ", " ", "\t", "def ", "There are ", "<source elided>", "^")
    k = next((k for k, ln in enumerate(lines) if ln.strip() and not ln.startswith(skip)), None)
    said = lines[k].strip() if k is not None else type(e).__name__
    if said.endswith(":"):                  # "No implementation of function ... found for signature:" and what
        said += " " + next((ln.strip(" >") for ln in lines[k + 1:] if ln.strip(" >")), "")
    if isinstance(e, KeyError):             # numba-cuda's table of functions for the GPU lacks it
        said = f"no GPU implementation of {said}"
    out = {"error": said, "kind": type(e).__name__}
    funcs = (s["kernel"], *s["device"].values())

    def line_of(file, at):
        """The function and the source line that file line `at` is, when it is one of the functions sent."""
        for f in funcs:
            src = f["source"].splitlines()
            if file in (None, os.path.basename(f["file"])) and 0 <= at - f["first"] < len(src):
                return {"function": f["name"], "code": src[at - f["first"]].strip()}
        return None

    # the first `File "cell.py", line N` mark after the message, else "During: lowering ... at cell.py (N)", else
    # the exception's own location
    marks = [(m[1], int(m[2])) for ln in lines[(k or 0):] + lines[:(k or 0)]
             if (m := re.match(r'File "([^"]+)", line (\d+)', ln))]
    marks += [(m[1], int(m[2])) for m in re.finditer(r"at (\S+) \((\d+)\)", text)]
    loc = getattr(e, "loc", None)
    if loc is not None and getattr(loc, "line", None):
        marks.append((None, loc.line))
    found = next((hit for file, at in marks if (hit := line_of(file, at))), None)
    return {**out, **(found or {})}


def main():
    s = json.loads(sys.stdin.read())
    try:
        from cuda.bindings import nvvm
        nvvm.version()
    except Exception as e:
        print(json.dumps({"skip": f"Numba's GPU compiler needs NVVM, none found ({type(e).__name__})"}))
        return
    from numba import cuda
    # A device function the kernel calls is compiled for the current device's compute capability (numba-cuda's
    # dispatcher asks the driver for it): here there is no device, so it is told the target instead.
    import numba.cuda.dispatcher as dispatcher
    if hasattr(dispatcher, "get_current_device"):
        dispatcher.get_current_device = lambda: pytypes.SimpleNamespace(compute_capability=tuple(s["cc"]))
    try:
        fn = _build(s)
        ptx, _ = cuda.compile_ptx(fn, _signature(s["args"]), cc=tuple(s["cc"]))
    except Exception as e:
        # this machine's trouble (no driver library, no NVVM), not the kernel's: a skip; anything else is the
        # compiler's complaint about the kernel (TypingError, a kernel that returns a value, ...)
        if type(e).__name__ in ("CudaSupportError", "NvvmSupportError") or isinstance(e, (ImportError, OSError)):
            print(json.dumps({"skip": f"Numba's GPU compiler could not run here: {type(e).__name__}: "
                                      f"{str(e).splitlines()[0][:200] if str(e) else ''}"}))
        else:
            print(json.dumps(_message(e, s)))
        return
    print(json.dumps({"ok": len(ptx), "local": ".local" in ptx}))


if __name__ == "__main__":
    main()
