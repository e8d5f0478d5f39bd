"""The %%cuda cell magic: compile the cell and make its kernels callable by name.

    %load_ext feedbeast
    %%cuda --arch sm_90a --name ring -D STAGES=4
    extern "C" __global__ void copy_ring(...) { ... }

--debug bounds every barrier wait (a hang raises BarrierTimeout); --hazards builds the hazard build, whose
kernels record a trace for feedbeast.hazards (mod.hazard_check(...)).
After the cell, `copy_ring` is a Kernel (copy_ring.launch(grid, block, ...)) and `ring` the Module
(ring.expect_sass(...), ring.report()). Compile errors show the failing lines of the cell.
"""
from __future__ import annotations

import argparse
import shlex

from .compile import compile
from .errors import CompileError


class _Parser(argparse.ArgumentParser):
    def error(self, message):   # a flag error names the flag (argparse alone shows only SystemExit: 2)
        raise CompileError(f"%%cuda: {message}\n{self.format_usage().strip()}")


def _parser():
    p = _Parser(prog="%%cuda", add_help=False)
    p.add_argument("--arch", default=None)
    p.add_argument("--name", default="mod")
    p.add_argument("--debug", action="store_true")
    p.add_argument("--hazards", action="store_true")   # the hazard build (feedbeast.hazards)
    p.add_argument("-D", dest="defines", action="append", default=[])
    p.add_argument("--quiet", action="store_true")
    return p


def cuda_cell(line: str, cell: str, namespace: dict):
    args = _parser().parse_args(shlex.split(line))
    defines = dict(d.split("=", 1) if "=" in d else (d, None) for d in args.defines)
    # Expand names from the notebook (-D STAGES={stages} -> the value of `stages`).
    defines = {k: (str(v).format(**namespace) if v is not None else None) for k, v in defines.items()}
    mod = compile(cell, args.arch, defines=defines, debug=args.debug, name=f"{args.name}.cu", hazards=args.hazards)
    namespace[args.name] = mod
    for k in mod.kernel_names:
        namespace[k] = mod.kernel(k)
    if not args.quiet:
        res = mod.resources
        parts = [f"{k} ({res[k].registers} regs, {res[k].shared_static} B smem, {res[k].spills} B spilled)"
                 if k in res else k for k in mod.kernel_names]
        print(f"compiled for {mod.arch}: {', '.join(parts) or 'no kernels'}")
        for w in mod.warnings:
            print("  warning:", w)
    return None


def load_ipython_extension(ip):
    from IPython.core.magic import register_cell_magic

    def cuda(line, cell):
        try:
            return cuda_cell(line, cell, ip.user_ns)
        except CompileError as e:   # show the lines, not a traceback through the toolkit
            e.__traceback__ = None
            raise
    register_cell_magic(cuda)
