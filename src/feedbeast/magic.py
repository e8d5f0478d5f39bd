"""The %%cuda cell magic: compile the cell and make its kernels callable by name.

Chapter 00 writes its first kernel in a `%%cuda` cell; chapter 04 explains its --debug and --hazards flags.

    %load_ext feedbeast
    %%cuda --arch sm_90a --name ring -D STAGES=4
    extern "C" __global__ void copy_ring(...) { ... }

--debug bounds every barrier wait (a hang raises BarrierTimeout); --hazards builds the hazard build, whose
kernels record a trace for feedbeast.hazards (mod.hazard_check(...)).
After the cell, `copy_ring` is a Kernel (copy_ring.launch(grid, block, ...)) and `ring` the Module
(ring.expect_sass(...), ring.report()). Compile errors show the failing lines of the cell.
`%%cuda --help` lists the flags.
"""
from __future__ import annotations

import argparse
import keyword
import re
import shlex
import types

from .compile import compile
from .errors import TODO_MARK, CompileError


class _Parser(argparse.ArgumentParser):
    def error(self, message):   # a flag error names the flag (argparse alone shows only SystemExit: 2)
        raise CompileError(f"%%cuda: {message} (`%%cuda --help` lists the flags)")


def _parser():
    p = _Parser(prog="%%cuda", add_help=False,
                description="Compile the cell's CUDA C++ with NVRTC; its kernels become Python names.")
    p.add_argument("--arch", default=None,
                   help="target, e.g. sm_80 or sm_90a (default: the GPU here; without one, --min-arch or sm_90a)")
    p.add_argument("--min-arch", default=None, metavar="ARCH",
                   help="the oldest GPU the kernel is written for: the target when there is no GPU here")
    p.add_argument("--name", default="mod", help="the Python name of the compiled module (default: mod)")
    p.add_argument("--debug", action="store_true", help="bounded barrier waits: a hang raises BarrierTimeout")
    p.add_argument("--hazards", action="store_true", help="the hazard build: kernels record a trace to check")
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME[=VALUE]",
                   help="a macro; {var} in VALUE takes the notebook's variable var")
    p.add_argument("--quiet", action="store_true", help="print nothing when it compiles")
    p.add_argument("-h", "--help", action="store_true", help="show this help and compile nothing")
    return p


def parse_line(line: str) -> argparse.Namespace:
    """The flags of a %%cuda line, checked: a wrong flag, a -D without a name or a --name that cannot be a
    Python name is one CompileError saying which."""
    try:
        words = shlex.split(line)
    except ValueError as e:
        raise CompileError(f"%%cuda {line.strip()}: {e}") from None
    args = _parser().parse_args(words)
    if not args.name.isidentifier() or keyword.iskeyword(args.name):
        suggestion = re.sub(r"\W", "_", args.name)
        suggestion = suggestion if suggestion.isidentifier() and not keyword.iskeyword(suggestion) else "my_mod"
        raise CompileError(f"%%cuda --name {args.name}: the name becomes a Python variable, so it needs letters, "
                           f"digits and _ and must not start with a digit (e.g. --name {suggestion})")
    for d in args.defines:
        if not re.fullmatch(r"[A-Za-z_]\w*", d.split("=", 1)[0]):
            raise CompileError(f"%%cuda -D {d}: write -D NAME or -D NAME=VALUE (NAME a C identifier)")
    return args


def defines_of(args, namespace: dict | None = None) -> dict:
    """{macro: value or None}; with a namespace, {var} in a value is replaced by the notebook's variable."""
    defines = dict(d.split("=", 1) if "=" in d else (d, None) for d in args.defines)
    if namespace is None:
        return defines
    out = {}
    for k, v in defines.items():
        try:
            out[k] = str(v).format(**namespace) if v is not None else None
        except KeyError as e:
            raise CompileError(f"%%cuda -D {k}={v}: {e.args[0]!r} is not a variable of the notebook: define it "
                               "in a cell above this one (and run that cell), or write the value itself") from None
        except (IndexError, ValueError, AttributeError) as e:
            raise CompileError(f"%%cuda -D {k}={v}: {{...}} must name a variable of the notebook ({e})") from None
    return out


def mangled_hint(names) -> list[str]:
    """A note for each kernel whose name the C++ compiler mangled (no extern "C")."""
    out = []
    for n in names:
        m = re.match(r"_Z(\d+)(\w+)", n)
        if m and len(m.group(2)) >= int(m.group(1)):
            plain = m.group(2)[:int(m.group(1))]
            out.append(f'note: kernel {n} is the C++-mangled name of {plain}: declare it extern "C" __global__ '
                       f"so that it is called {plain}")
    return out


def cuda_cell(line: str, cell: str, namespace: dict):
    args = parse_line(line)
    if args.help:
        print(_parser().format_help().rstrip())
        return None
    if isinstance(namespace.get(args.name), types.ModuleType):   # `--name fb` would replace `import feedbeast as fb`
        raise CompileError(f"%%cuda --name {args.name}: {args.name} is the module {namespace[args.name].__name__} in "
                           f"this notebook; pick another name (e.g. --name {args.name}_mod)")
    defines = defines_of(args, namespace)
    todo = [str(i) for i, ln in enumerate(cell.splitlines(), 1) if TODO_MARK in ln]
    try:
        mod = compile(cell, args.arch, defines=defines, debug=args.debug, name=f"{args.name}.cu",
                      hazards=args.hazards, min_arch=args.min_arch)
    except CompileError as e:
        # what the cell defined before stays bound no more: a check run next would test the old kernel
        for k in [args.name, *KERNEL_NAMES.findall(cell)]:
            if not isinstance(namespace.get(k), types.ModuleType):
                namespace[k] = NotCompiled(k, args.name)
        if todo:   # a lab's kernel cell: an error may follow from a part not written yet
            raise CompileError(f"{e}\nnote: your part is not written yet at {args.name}.cu line{'s' * (len(todo) > 1)} "
                               f"{', '.join(todo)} (each '{TODO_MARK}' line): the errors above may follow from it",
                               e.log, e.diagnostics) from None
        raise
    namespace[args.name] = mod
    for k in mod.kernel_names:
        namespace[k] = mod.kernel(k)
    if not args.quiet:
        res = mod.resources
        parts = [f"{k} ({res[k].registers} regs, {res[k].shared_static} B smem, {res[k].spills} B spilled)"
                 if k in res else k for k in mod.kernel_names]
        print(f"compiled for {mod.arch}: {', '.join(parts) or 'no kernels'}")
        warnings, waiting = _waiting_for_todo(mod.warnings, todo)
        mod_file = f"{args.name}.cu"
        for w in warnings:
            print("  warning:", w)
        if waiting:
            print(f"  note: declared for the part you write ({mod_file} line{'s' * (len(todo) > 1)} {', '.join(todo)}) "
                  f"and not used until it is written: {', '.join(waiting)}")
    for note in mangled_hint(mod.kernel_names):
        print(note)
    return None


_UNUSED = re.compile(r'warning #177-D: variable "(\w+)" was declared but never referenced')


def _waiting_for_todo(warnings: list[str], todo: list[str]) -> tuple[list[str], list[str]]:
    """(the warnings to show, the variables a lab's unwritten part will use). In a lab's kernel cell that still has
    TODO lines, NVRTC's "declared but never referenced" (#177) names what the lab declares for the learner's part:
    one note, not a warning per name. Once the cell has no TODO line, every warning shows as the compiler wrote it."""
    if not todo:
        return warnings, []
    names = [m[1] for w in warnings if (m := _UNUSED.search(w))]
    return [w for w in warnings if not _UNUSED.search(w)], list(dict.fromkeys(names))


# The kernels a cell declares (`__global__ void [__launch_bounds__(...)] name(`), read from its text.
_BOUNDS = r"(?:__launch_bounds__\s*\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)\s*)?"   # parentheses nested twice
KERNEL_NAMES = re.compile(r"__global__\s+" + _BOUNDS + r"void\s+" + _BOUNDS + r"(\w+)\s*\(")


class NotCompiled:
    """What a %%cuda cell's names are bound to after its last run failed to compile: any use says so."""

    def __init__(self, name: str, cell: str):
        self._name, self._cell = name, cell

    def _fail(self):
        raise CompileError(f"{self._name}: the last run of the `%%cuda --name {self._cell}` cell did not compile (its "
                           "CompileError is printed under it): fix the cell and run it again; what it compiled before "
                           "is no longer used")

    def __getattr__(self, attr):
        if attr.startswith("_"):        # IPython's display and pickling probes
            raise AttributeError(attr)
        self._fail()

    def __call__(self, *args, **kwargs):
        self._fail()

    def __repr__(self):
        return f"<{self._name}: the last run of `%%cuda --name {self._cell}` did not compile>"


_HELP = re.compile(r"(^|\s)(-h|--help)(\s|$)")


def help_alone(lines: list[str]) -> list[str]:
    """IPython refuses a cell magic with an empty body before the magic runs: a cell that is only
    `%%cuda --help` becomes the line magic `%cuda --help`, which prints the flags."""
    if lines and re.match(r"%%cuda(\s|$)", lines[0]) and _HELP.search(lines[0][6:]) and not "".join(lines[1:]).strip():
        return ["%cuda --help\n"]
    return lines


def cuda_line(line: str):
    """`%cuda --help`: the flags. Anything else on a single % line says where the code goes."""
    if _HELP.search(line) or not line.strip():
        print(_parser().format_help().rstrip())
        return None
    raise CompileError(f"%cuda {line.strip()}: %%cuda compiles a cell: put `%%cuda {line.strip()}` on the first "
                       "line of a cell and the CUDA code under it")


def _simulator_folders() -> tuple[str, ...]:
    """The folders of the simulators a notebook's Python runs in: Numba's CUDA simulator (when imported) and the
    toolkit's own (feedbeast.sim: chapter 04's protocol checker, the pipeline simulator)."""
    import os
    import sys
    out = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "sim", "")]
    sim = sys.modules.get("numba.cuda.simulator")
    if sim is not None and getattr(sim, "__file__", None):
        out.append(os.path.dirname(os.path.abspath(sim.__file__)) + os.sep)
    return tuple(out)


def _through_simulator(tb) -> bool:
    folders = _simulator_folders()
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith(folders):
            return True
        tb = tb.tb_next
    return False


def _while_parsing(tb) -> bool:
    """Whether the error came from IPython parsing the cell (every frame IPython's), not from code the cell ran."""
    import traceback
    from pathlib import Path
    return all("IPython" in Path(f.filename).parts for f in traceback.extract_tb(tb))


def _notebook_error(shell, etype, evalue, tb, tb_offset=None):
    """How a notebook shows an error of the learner's Python. Raised inside a simulator (a Numba kernel's IndexError,
    a ring model's TypeError), it shows as the toolkit's own errors do: the learner's lines and the message, without
    the simulator's threads and frames (`%env FEEDBEAST_TRACEBACK=full` shows them). A NameError is most often a cell
    above that has not run in this kernel (run out of order, or after a restart, which forgets every cell): the
    traceback, then the way out."""
    import os

    from .errors import FULL_TRACEBACK, FeedbeastError, short_traceback
    if issubclass(etype, SyntaxError) and _while_parsing(tb):
        shell.showsyntaxerror()      # the cell's own line and caret, as IPython shows it without this handler
        return
    if (not isinstance(evalue, FeedbeastError) and os.environ.get(FULL_TRACEBACK, "") != "full"
            and _through_simulator(tb)):
        lines = short_traceback(evalue)
        lines.append("(raised inside a simulator: its frames are left out; %env FEEDBEAST_TRACEBACK=full shows them)")
        shell._get_exc_info((etype, evalue, tb))      # sys.last_*: what %tb and %debug read, as showtraceback sets
        shell._showtraceback(etype, evalue, lines)
        if shell.call_pdb:
            shell.debugger(force=True)
    else:   # as IPython shows an error of running code (a SyntaxError from exec() keeps the learner's lines)
        shell.showtraceback((etype, evalue, tb), tb_offset=tb_offset, running_compiled_code=True)
    name = getattr(evalue, "name", None)
    if etype is not NameError or not name:     # UnboundLocalError: a name assigned later in the same function
        return
    print(f"If `{name}` is defined in a cell above (a `%%cuda --name {name}` cell defines it too), that cell has not "
          "run in this kernel: Run > Run All Above Selected Cell, then this cell again. Otherwise check its spelling.")


def load_ipython_extension(ip):
    from IPython.core.magic import register_cell_magic, register_line_magic

    def cuda(line, cell):
        try:
            return cuda_cell(line, cell, ip.user_ns)
        except CompileError as e:   # show the lines, not a traceback through the toolkit
            e.__traceback__ = None
            raise
    register_cell_magic(cuda)
    register_line_magic("cuda")(cuda_line)
    ip.set_custom_exc((Exception,), _notebook_error)
    cleanup = ip.input_transformers_cleanup
    if not any(getattr(t, "__name__", "") == "help_alone" for t in cleanup):
        cleanup.append(help_alone)
