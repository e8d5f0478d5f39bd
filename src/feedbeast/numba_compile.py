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
import inspect
import json
import os
import subprocess
import sys
import textwrap
import types as pytypes

_MODULES = {"math", "cmath", "operator", "numpy", "numba", "numba.cuda"}


class Unsupported(Exception):
    """A kernel the child cannot rebuild (say why)."""


def _source(fn) -> tuple[str, int, str]:
    """(the function's source with its decorator lines blanked, its first line in its file, its file name). Line
    numbers stay those of the file, so the compiler's errors point at the learner's own lines."""
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        raise Unsupported(f"the source of {fn.__name__} cannot be read here") from None
    src = textwrap.dedent("".join(lines))
    func = next((n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef)), None)
    if func is None:
        raise Unsupported(f"{fn.__name__} is not a plain function")
    a = func.args
    if a.defaults or any(a.kw_defaults) or func.returns or any(x.annotation for x in (*a.posonlyargs, *a.args,
                                                                                          *a.kwonlyargs)):
        raise Unsupported(f"{fn.__name__} has default values or annotations (a kernel takes neither)")
    text = src.splitlines()
    for i in range(func.lineno - 1):          # the decorators: blank lines, so that nothing runs at definition
        text[i] = ""
    return "\n".join(text) + "\n", first, fn.__code__.co_filename


def _names(code) -> set[str]:
    """The globals a function's code loads (co_names holds attribute names too: `threadIdx.x`)."""
    out = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for c in code.co_consts:
        if isinstance(c, pytypes.CodeType):
            out |= _names(c)
    return out


def _global(name, value, device: dict) -> dict:
    """How the child rebuilds one global the kernel names."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return {"value": value}
    if isinstance(value, pytypes.ModuleType):
        mod = value.__name__
        if mod.startswith("numba.cuda"):     # the simulator's module or the real one: the child has the real one
            mod = "numba.cuda"
        if mod not in _MODULES:
            raise Unsupported(f"the module {mod} (global {name!r})")
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
    raise Unsupported(f"the global {name!r} ({type(value).__name__})")


def _function(fn, device: dict) -> dict:
    src, first, file = _source(fn)
    glob = {}
    for n in sorted(_names(fn.__code__)):
        if n in fn.__globals__:                 # else a builtin (range, min) or a name the compiler will report
            glob[n] = _global(n, fn.__globals__[n], device)
    return {"name": fn.__name__, "source": src, "first": first, "file": file, "globals": glob}


def _arg_type(a) -> dict:
    import numpy as np
    if isinstance(a, np.ndarray) or hasattr(a, "__cuda_array_interface__"):
        arr = np.asarray(a) if isinstance(a, np.ndarray) else None
        dtype = str(arr.dtype if arr is not None else a.dtype)
        ndim = arr.ndim if arr is not None else len(a.shape)
        contiguous = arr.flags.c_contiguous if arr is not None else True
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
    except Unsupported as e:
        return {"skip": f"cannot hand the kernel to the compiler's process: {e}"}
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    try:
        r = subprocess.run([sys.executable, "-m", "feedbeast.numba_compile"], input=json.dumps(s), text=True,
                           capture_output=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"skip": f"Numba's compiler took more than {timeout} s"}
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"skip": f"the compiler's process ended without an answer (exit {r.returncode}): "
                        f"{r.stderr.strip().splitlines()[-1:] or ''}"}


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
                g[n] = how["value"]
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
    """The compiler's complaint, short: what it says, and the kernel's line it points at (its text)."""
    text = str(e)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    said = next((ln.strip() for ln in lines[1:] if not ln.startswith(("File ", "During:", " ", "def "))),
                lines[0].strip() if lines else type(e).__name__)
    out = {"error": said, "kind": type(e).__name__}
    for f in (s["kernel"], *s["device"].values()):
        marks = [ln for ln in text.splitlines() if ln.startswith(f'File "{os.path.basename(f["file"])}", line ')]
        for m in marks:
            try:
                at = int(m.rsplit(", line ", 1)[1].rstrip(":"))
            except ValueError:
                continue
            src = f["source"].splitlines()
            if 0 <= at - f["first"] < len(src):
                out.update(function=f["name"], code=src[at - f["first"]].strip())
                return out
    return out


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
        from numba.core.errors import NumbaError
        if isinstance(e, (NumbaError, NameError, SyntaxError)):     # the compiler's complaint about the kernel
            print(json.dumps(_message(e, s)))
        else:                                                       # this machine's, not the kernel's
            print(json.dumps({"skip": f"Numba's GPU compiler could not run here: {type(e).__name__}: "
                                      f"{str(e).splitlines()[0][:200] if str(e) else ''}"}))
        return
    print(json.dumps({"ok": len(ptx), "local": ".local" in ptx}))


if __name__ == "__main__":
    main()
