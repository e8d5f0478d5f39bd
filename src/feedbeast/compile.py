"""CUDA C++ -> cubin through NVRTC (cuda.core), with the toolkit's headers on the include path.

Chapter 00 compiles its first kernel with it; chapter 03 reads the build's SASS and resources.

    mod = compile(src, arch="sm_90a")
    mod.resources["my_kernel"]      # registers, shared memory, stack, spills (from ptxas)
    mod.expect_sass("LDGSTS", "DEPBAR")
    mod.my_kernel.launch(grid, block, *args)

Compilation needs no GPU and no driver. Results are cached on disk by source, options and
NVRTC version, so re-running a notebook does not recompile.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import numbers
import os
import re
from pathlib import Path

from .cache import cache_dir, cached_file, store  # noqa: F401  (feedbeast.compile.cache_dir: the cubins' folder)
from .cubin import kernel_max_threads, kernel_names, kernel_params  # noqa: F401  (fb.compile.kernel_names...)
from .device import current_arch, nvrtc_version, parse_arch, runs_on
from .errors import CheckFailed, CompileError, FeedbeastError, KernelNotFound, unwritten

INCLUDE_DIR = Path(__file__).parent / "include"
DEFAULT_ARCH = "sm_90a"   # the course's main target when no GPU says otherwise


def include_path() -> list[str]:
    """Our headers, then CCCL (cuda::ptx, cuda::barrier...) and the CUDA runtime headers (cuda_bf16.h)."""
    import cuda.pathfinder as pf
    paths = [str(INCLUDE_DIR)]
    for lib in ("cccl", "cudart"):
        try:
            p = pf.find_nvidia_header_directory(lib)
        except Exception:
            p = None
        if p:
            paths.append(str(p))
    return paths


@dataclasses.dataclass(frozen=True)
class Resources:
    """What ptxas reported for one kernel."""
    registers: int
    shared_static: int     # bytes of __shared__ declared in the source
    stack: int             # bytes of stack frame (local memory)
    spill_stores: int
    spill_loads: int
    barriers: int

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads

    @property
    def local_memory(self) -> str:
        """Why the kernel uses local memory (per thread, in device memory behind the caches) and what to do; '' when it
        uses none. Spill stores or loads: ptxas ran out of registers and moved values out. A stack frame with no
        spills: an array indexed by a value ptxas cannot resolve at compile time lives there, not in registers."""
        if self.spills:
            return (f"registers spilled ({self.spill_stores} B spill stores, {self.spill_loads} B spill loads): the "
                    f"kernel keeps more values live than the {self.registers} registers each thread has; keep fewer "
                    "alive at once, or give each thread more (__launch_bounds__, setmaxnreg)")
        if self.stack:
            return (f"a {self.stack} B stack frame and no spills: a local array is indexed by a value the compiler "
                    "cannot resolve at compile time (a loop over it that is not unrolled, an index computed at run "
                    "time), so it lives in local memory instead of registers; unroll the loops that index it "
                    "(#pragma unroll, a trip count known at compile time) or index it with constants only")
        return ""

    def __str__(self):
        return (f"{self.registers} registers, {self.shared_static} B static shared, {self.stack} B stack, "
                f"{self.spill_stores}/{self.spill_loads} B spill stores/loads, {self.barriers} barriers")


def _int(pattern, text, default=0):
    m = re.search(pattern, text)
    return int(m.group(1)) if m else default


def parse_ptxas_log(log: str) -> dict[str, Resources]:
    """The ptxas -v report, one Resources per entry function."""
    out = {}
    blocks = re.split(r"ptxas info\s*: (?:Compiling entry function|Function properties for) ", log)
    current = {}
    for block in blocks[1:]:
        name = re.match(r"'?([\w$]+)'?", block).group(1)
        current.setdefault(name, "")
        current[name] += block
    for name, text in current.items():
        if "Used" not in text:
            continue
        out[name] = Resources(
            registers=_int(r"Used (\d+) registers", text),
            shared_static=_int(r"(\d+) bytes smem", text),
            stack=_int(r"(\d+) bytes stack frame", text),
            spill_stores=_int(r"(\d+) bytes spill stores", text),
            spill_loads=_int(r"(\d+) bytes spill loads", text),
            barriers=_int(r"used (\d+) barriers", text),
        )
    return out


_DIAG = re.compile(r"^(?P<file>[^\s()]+)\((?P<line>\d+)\): (?P<kind>error|warning|catastrophic error)\s*:?\s*(?P<msg>.*)$",
                   re.MULTILINE)
# A note NVRTC adds to the diagnostic above it (`note #2703-D: cannot call non-constexpr function "..."`): it often
# says why, from a header (the toolkit's checks name their rule in such a call).
_NOTE = re.compile(r"^[^\s()]+\(\d+\): note(?: #[\w-]+)?:\s*(?P<msg>.*)$", re.MULTILINE)


# ptxas's errors name a line of the PTX NVRTC generated, which nobody sees: `ptxas application ptx input, line 34;
# error : ...`. The PTX's `.loc file line col[, function_name f, inlined_at file line col]` directives (PTX ISA,
# "Debugging Directives: .loc") say which source line each instruction came from.
_PTXAS = re.compile(r"^ptxas application ptx input, line (?P<line>\d+); (?P<kind>error|warning)\s*:\s*(?P<msg>.*)$",
                    re.MULTILINE)
_LOC = re.compile(r"^\s*\.loc\s+(?P<file>\d+)\s+(?P<line>\d+)\s+\d+(?:.*inlined_at\s+(?P<ifile>\d+)\s+(?P<iline>\d+))?")
_FILE = re.compile(r'^\s*\.file\s+(?P<n>\d+)\s+"(?P<path>[^"]+)"', re.MULTILINE)


def _ptx(source: str, name: str, flags: list[bytes]) -> str | None:
    """The PTX NVRTC makes of `source` with the same flags, for the virtual arch (no ptxas run); None on failure."""
    from cuda.bindings import nvrtc
    flags = [re.sub(rb"^-arch=sm_", b"-arch=compute_", f) for f in flags if not f.startswith(b"--ptxas-options")]
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return None
    try:
        if nvrtc.nvrtcCompileProgram(prog, len(flags), flags)[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return None
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)   # (drained: some NVRTC versions keep it otherwise)
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        buf = b" " * size
        nvrtc.nvrtcGetPTX(prog, buf)
        return buf.decode(errors="replace").rstrip("\x00 ")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def ptxas_at_source(log: str, ptx: str, name: str) -> str:
    """`log` with each ptxas diagnostic on a PTX line restated, NVRTC-style, at the line of `name` it came from
    (`lab.cu(4): error: ptxas: ...`, the header line said when an inlined header instruction is at fault). The PTX
    lines that no `.loc` places in `name` stay as ptxas wrote them."""
    files = {int(m["n"]): m["path"] for m in _FILE.finditer(ptx)}
    own = {n for n, path in files.items() if os.path.basename(path) == os.path.basename(name)}
    lines = ptx.splitlines()
    out = []
    for m in _PTXAS.finditer(log):
        at, header = None, None
        for text in reversed(lines[:int(m["line"]) - 1]):
            loc = _LOC.match(text)
            if not loc:
                continue
            if int(loc["file"]) in own:
                at = int(loc["line"])
                break
            if header is None:
                header = (files.get(int(loc["file"]), "?"), int(loc["line"]))
            if loc["ifile"] and int(loc["ifile"]) in own:
                at = int(loc["iline"])
                break
        if at is None:
            continue
        where = ""
        if header is not None:
            path, hline = header
            inc = str(INCLUDE_DIR)
            shown = os.path.relpath(path, inc) if path.startswith(inc) else os.path.basename(path)
            where = f" (in {shown} line {hline}, inlined here)"
        out.append(f"{name}({at}): {m['kind']}: ptxas: {m['msg'].strip()}{where}")
    return log + ("\n" + "\n".join(out) if out else "")


SHOWN_ERRORS = 3   # errors shown with their lines; the rest by their first line (the first error is the one to fix)


def _format_diagnostics(src: str, log: str, filename: str) -> tuple[str, list[dict]]:
    """The first SHOWN_ERRORS errors in the cell, each with its line and one line either side; errors whose
    lines touch share one excerpt (a missing ';' is reported on two lines), so the message stays short."""
    lines = src.splitlines()
    log = log.replace("\x00", "")
    diags, shown, more = [], [], []
    found = list(_DIAG.finditer(log))
    for j, m in enumerate(found):
        d = {"file": m["file"], "line": int(m["line"]), "kind": m["kind"], "message": m["msg"].strip()}
        diags.append(d)
        if m["kind"] == "warning" or m["file"] != filename:
            continue
        if len(shown) >= SHOWN_ERRORS:
            more.append(f"line {d['line']}: {d['message']}")
        elif (d["line"], d["message"]) not in [(e["line"], e["message"]) for e in shown]:
            upto = found[j + 1].start() if j + 1 < len(found) else len(log)
            notes = [n["msg"].strip() for n in _NOTE.finditer(log, m.end(), upto)]
            notes = [n for n in notes if n and not n.endswith(":")][:2]     # not the bare "called from:"
            shown.append({**d, "message": d["message"] + "".join(f" (note: {n})" for n in notes)})
    groups = []   # [errors] whose excerpts (line - 1 .. line + 1) overlap or touch
    for d in shown:
        if groups and d["line"] - 1 <= groups[-1][-1]["line"] + 2 and d["line"] >= groups[-1][0]["line"] - 2:
            groups[-1].append(d)
        else:
            groups.append([d])
    parts = []
    for g in groups:
        parts += [f"{filename}:{d['line']}: {d['kind']}: {d['message']}" for d in g]
        marked = {d["line"] for d in g}
        for i in range(max(1, min(marked) - 1), min(len(lines), max(marked) + 1) + 1):
            parts.append(f"{'>' if i in marked else ' '} {i:4d} | {lines[i - 1]}")
    if more:
        parts.append(f"and {len(more)} more error{'s' * (len(more) > 1)}: {'; '.join(more)[:300]}")
    unclosed = _unclosed_braces(src)
    if parts and unclosed:
        parts.append(f"note: the cell opens {unclosed} more {{ than it closes: a block above line {shown[0]['line']} "
                     "may be missing its }" if shown else f"note: the cell opens {unclosed} more {{ than it closes")
    host = re.search(r'([\w./-]+)\(\d+\): catastrophic error: cannot open source file "([\w./]+)"', log)
    if host and os.path.basename(host[1]) == "cuda.h":
        # the driver API's header is host code: NVRTC has no C library for it (NVRTC User Guide, "Language")
        parts = [f"{os.path.basename(host[1])} cannot be compiled by NVRTC: it is the CUDA driver API's header for host "
                 f"code and includes the C library's {host[2]}, which NVRTC does not have. A kernel needs none of it: "
                 "a tensor map is a `const __grid_constant__ fb::TensorMap` parameter (#include <fb/tma.cuh>, "
                 "chapter 05), made in Python with fb.tensor_map"]
    if not parts:   # an error outside the cell (a header) or one NVRTC did not attribute to a line
        # ptxas's own report (a kernel's resources, `ptxas info` lines) says nothing of the error but its error lines;
        # a header's error keeps its whole text ("detected during instantiation ... at line 4 of lab.cu")
        errors = [ln.strip() for ln in log.splitlines() if ln.lstrip().startswith("ptxas") and " error" in ln]
        parts = errors or [log.strip() or "NVRTC failed without a message"]
        cap = next((m for e in errors if (m := re.search(r"too much shared data \(0x[0-9a-f]+ bytes, (0x[0-9a-f]+) max",
                                                           e))), None)
        if cap:
            parts.append(f"note: for this target, ptxas takes {int(cap[1], 16)} bytes of static __shared__ arrays per "
                         "kernel; more needs dynamic shared memory (CUDA C++ Programming Guide, 'Shared Memory'): "
                         "declare the array extern __shared__ and give its size at launch (shared=)")
    return "\n".join(parts), diags


def _unclosed_braces(src: str) -> int:
    """How many more { than } the source opens, outside comments, strings, character literals and the branches of a
    preprocessor conditional after its first (`#ifdef A ... { #else ... { #endif` opens one), and `#if 0` blocks."""
    text = re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|(?<![0-9a-fA-F])\'(?:\\.|[^\'\\\n])\'', " ", src,
                  flags=re.S)
    kept, skip, taken = [], [], []    # per open conditional: its current branch left out; a branch counted yet
    for line in text.splitlines():
        d = re.match(r"\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)", line)
        if d and d[1] in ("if", "ifdef", "ifndef"):
            skip.append(d[1] == "if" and d[2].strip() == "0")
            taken.append(not skip[-1])
        elif d and d[1] in ("elif", "else") and skip:
            skip[-1] = taken[-1] or d[1] == "elif" and d[2].strip() == "0"   # the first branch that may compile
            taken[-1] = taken[-1] or not skip[-1]
        elif d and d[1] == "endif" and skip:
            skip.pop()
            taken.pop()
        elif not any(skip):
            kept.append(line)
    kept = "\n".join(kept)
    return max(0, kept.count("{") - kept.count("}"))


class _Kernels(dict):
    """A dict by kernel name whose missing key is the module's KernelNotFound, listing the kernels there are."""

    def __init__(self, items, known):
        super().__init__(items)
        self._known = known

    def __missing__(self, name):
        self._known(name)          # raises KernelNotFound for a name the module does not have
        raise KeyError(name)       # a kernel of the module with no resource line (a log ptxas did not write)


@dataclasses.dataclass
class Module:
    """A compiled translation unit: cubin bytes, the compiler's log, and its kernels."""
    source: str
    arch: str
    cubin: bytes
    log: str
    options: tuple = ()
    _loaded: object = None
    _kernels: dict = dataclasses.field(default_factory=dict)
    defines: dict = dataclasses.field(default_factory=dict)   # as given to compile()
    name: str = "kernel.cu"
    debug: bool = False
    # Built for DEFAULT_ARCH only because the call named no arch and this machine has no GPU: on a GPU the same call
    # builds for that GPU, so a launch needs a GPU, not DEFAULT_ARCH's (a T4 runs chapter 01's kernels).
    any_gpu: bool = False
    flags: tuple = ()          # NVRTC's flags for this build (the PTX of the same build is made from them)

    @functools.cached_property
    def ptx(self) -> str:
        """The PTX NVRTC makes of this build for its virtual arch (what `Kernel.run_on_host` runs)."""
        ptx = _ptx(self.source, self.name, list(self.flags))
        if ptx is None:
            raise CompileError(f"NVRTC could not make the PTX of {self.name}", "")
        return ptx

    @property
    def needs_arch(self) -> str | None:
        """The arch a launch of this module needs here: None for any GPU (see any_gpu)."""
        return None if self.any_gpu else self.arch

    def debug_build(self, **defines) -> "Module":
        """The same source, arch and defines built with debug=True, so that a hung barrier wait raises
        BarrierTimeout naming the barrier instead of freezing the notebook. Extra defines are added
        (e.g. FB_WAIT_TIMEOUT_NS="500000000ull")."""
        return compile(self.source, None if self.any_gpu else self.arch, defines={**self.defines, **defines},
                       options=self.options, name=self.name, debug=True)

    def hazard_check(self, kernel: str, grid, block, *args, shared: int = 0, cluster=None, name: str = "", **kw):
        """Run the hazard build of `kernel` once with these arguments and check its trace: a
        feedbeast.hazards.Report (or a Skipped); .raise_if_any() raises HazardFound naming the rule.
        Where a GPU ran it, the report is handed to hooks.on_hazard under `name` (default: hazard_name) with the
        source's digest; where none can, that name finds what a GPU run recorded, shown after the skip (and said to be
        of other code when the source differs from the one that ran)."""
        from . import hooks   # the checker is installed there (feedbeast/__init__): compile does not import it
        from .skip import Skipped, source_digest, with_recorded
        if hooks.hazard_run is None:
            raise FeedbeastError("no hazard checker is installed: import feedbeast (it installs feedbeast.hazards)")
        name = name or self.hazard_name(kernel)
        out = hooks.hazard_run(self.kernel(kernel), grid, block, *args, shared=shared, cluster=cluster, **kw)
        if isinstance(out, Skipped):       # the digest: a record of the source before a learner's edit says so
            return with_recorded(out, name, "hazard", source_digest(self.source))
        if hasattr(out, "violations"):        # a Report (another checker installed there may return other things)
            hooks.emit(hooks.on_hazard, {"name": name, "tool": "hazard check", "violations": len(out.violations),
                                         "ok": out.ok, "text": str(out), "source": source_digest(self.source)})
        return out

    def hazard_name(self, kernel: str) -> str:
        """'hazard check of k (ring.cu, STAGES=2)': the kernel, the module's name and its defines, which tell the
        variants of one source apart."""
        defines = ", ".join(f"{k}={v}" if v is not None else k for k, v in sorted((self.defines or {}).items()))
        return f"hazard check of {kernel} ({self.name}" + (f", {defines})" if defines else ")")

    @property
    def todo(self) -> str:
        """'' or the sentence naming the lab's TODO lines still in the source (checks that fail put it first)."""
        return unwritten([(self.name, self.source, 1)])

    @property
    def kernel_names(self) -> list[str]:
        return kernel_names(self.cubin)

    @property
    def resources(self) -> dict[str, Resources]:
        """Per kernel; a name not among them raises KernelNotFound with the names there are (not a bare KeyError)."""
        return _Kernels(parse_ptxas_log(self.log), self._known)

    @property
    def warnings(self) -> list[str]:
        # ptxas reports some performance problems as "info" lines with a C75xx code (C7508: setmaxnreg
        # ignored; C7515: wgmma serialised): they matter as much as warnings.
        return [ln.strip() for ln in self.log.splitlines()
                if ("warning" in ln.lower() or re.search(r"\(C75\d\d\)", ln)) and not ln.strip().startswith("Remark")]

    @property
    def performance_losses(self) -> list[str]:
        """ptxas's "Potential Performance Loss" notes, each from its C75xx code on: 'setmaxnreg' ignored (C7508 and
        the other reasons ptxas gives for it) and every reason it gives for serialising wgmma (C7515: accumulators
        written by other instructions inside a pipeline stage; C7520: a branch around a wgmma it cannot prove
        uniform; C7511: too few registers for the pipeline; ...). Test this, not one code: each reason has its own.
        Not among them: C7517 and C7519, a wait or fence ptxas added itself (the hazard checker reports those).
        Empty where the kernels compiled as written."""
        return [ln.split(":", 1)[-1].strip() for ln in self.log.splitlines() if "Potential Performance Loss" in ln]

    def kernel(self, name: str):
        from .launch import Kernel
        if name not in self._kernels:
            self._known(name)
            self._kernels[name] = Kernel(self, name)
        return self._kernels[name]

    def _known(self, name):
        """A kernel name of this module, or a FeedbeastError listing the names there are (a C++-mangled one
        named as such: `k` compiled without extern "C" is `_Z1kPf`)."""
        if name is None or name in self.kernel_names:
            return name
        mangled = [k for k in self.kernel_names if k.startswith(f"_Z{len(name)}{name}")]
        hint = (f"{mangled[0]} is {name} with its C++-mangled name: declare it extern \"C\" __global__" if mangled
                else "declare kernels extern \"C\" __global__ so their names are not mangled"
                if any(k.startswith("_Z") for k in self.kernel_names) else
                f"ask for one of those; where code you were given asks for {name} (a lab's checks), name the kernel {name}"
                if self.kernel_names else f"the source defines no __global__ function: write {name} as one")
        raise KernelNotFound(f"no kernel named {name!r} in this module; it has: "
                             f"{', '.join(self.kernel_names) or 'none'} ({hint})")

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self.kernel(name)      # KernelNotFound is an AttributeError: hasattr() and getattr(m, k, None) work

    def __getitem__(self, name):
        return self.kernel(name)

    # SASS inspection lives in sass.py; these are the short forms a notebook uses.
    def sass(self, kernel: str | None = None) -> str:
        from .sass import sass_text
        return sass_text(self.cubin, self._known(kernel))

    def histogram(self, kernel: str | None = None):
        from .sass import histogram
        return histogram(self, self._known(kernel))

    def expect_sass(self, *opcodes: str, kernel: str | None = None, forbid: tuple = ()):
        from .sass import expect_sass
        return expect_sass(self, *opcodes, kernel=self._known(kernel), forbid=forbid)

    def expect_no_local_memory(self, kernel: str, spills_hint: str = "") -> Resources:
        """The kernel's Resources; raises CheckFailed when it uses local memory, saying whether registers spilled or
        an array sits on the stack, and what to do (Resources.local_memory). `spills_hint`, the lab's own advice,
        follows a spill."""
        res = self.resources[self._known(kernel)]
        why = res.local_memory
        if why:
            hint = f". {spills_hint}" if spills_hint and res.spills else ""
            raise CheckFailed(f"{self.todo}{kernel} uses local memory: {why}{hint} ({res})")
        return res

    def report(self) -> str:
        """Resource usage per kernel, and the compiler's warnings."""
        rows = [f"{self.arch}:"] + [f"  {k}: {r}" for k, r in self.resources.items()]
        rows += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(rows)

    def __repr__(self):
        return f"<Module {self.arch}: {', '.join(self.kernel_names)}>"


def compile(source: str, arch: str | None = None, *, defines: dict | None = None, options=(),
            name: str = "kernel.cu", debug: bool = False, use_cache: bool = True, hazards: bool = False,
            min_arch: str | None = None) -> Module:
    """Compile CUDA C++ to a cubin for `arch` (default: this GPU's arch; with no GPU, or a GPU older than
    `min_arch`, the oldest GPU the source is written for, `min_arch`; else sm_90a).

    defines: -D macros; debug: defines FB_DEBUG=1 (bounded barrier waits that report, see
    include/fb/debug.cuh); options: extra NVRTC flags. Raises CompileError showing the failing lines.
    hazards: the hazard build (FB_HAZARDS=1, debug too): the fb:: wrappers record a trace (feedbeast.hazards).
    """
    from .device import cuda_wheels
    cuda_wheels()
    from cuda.core import ProgramOptions
    source, name = _text(source, "the source"), _text(name, "name")
    arch = None if arch is None else _text(arch, "arch")
    if min_arch is not None:
        parse_arch(min_arch)
    any_gpu = arch is None and min_arch is None and current_arch() is None
    here = current_arch()
    if here and min_arch and (parse_arch(here)[:2] < parse_arch(min_arch)[:2] or
                              min_arch.endswith("a") and not runs_on(min_arch, parse_arch(here)[:2])):
        here = None     # a GPU older than the source is written for (cp.async on a T4), or another one than the
        #                 arch-specific target it needs: built for min_arch, whose launches are then skipped here by
        #                 name, not refused by ptxas at the learner's line
    arch = arch or here or min_arch or DEFAULT_ARCH
    parse_arch(arch)
    options = _options(options)
    if defines is not None and not isinstance(defines, dict):   # dict() of ['TILE=32'] says "sequence element #0"
        raise FeedbeastError(f"defines={defines!r}: give a dict of -D macros, e.g. defines={{'TILE': 32}}")
    for k, v in (defines or {}).items():
        if isinstance(v, bool) or not (v is None or isinstance(v, (numbers.Integral, str)) or
                                       isinstance(v, numbers.Real) and v == v):     # numpy's numbers too
            raise FeedbeastError(f"defines={{{k!r}: {v!r}}}: a define's value is an int, C text (a str) or None "
                                 f"(defined with no value)" + (f": {int(v)} for {v!r}" if isinstance(v, bool) else ""))
    if hazards:
        defines, debug = {**(defines or {}), "FB_HAZARDS": 1}, True
    defs = dict(defines or {})
    if debug:
        defs.setdefault("FB_DEBUG", 1)
        from . import hooks
        if hooks.mode.sanitizer:
            # A sanitizer slows kernels 10-100x: a bounded wait must not mistake that for a hang.
            defs["FB_WAIT_TIMEOUT_NS"] = f"({defs.get('FB_WAIT_TIMEOUT_NS', '2000000000ull')})*100"
    define_flags = [_text(f"{k}={v}" if v is not None else f"{k}", "a define") for k, v in sorted(defs.items())]
    # no_cache: NVRTC 12.9+ keeps its own cache of compiled programs, and a hit there returns an empty log,
    # so no ptxas report (NVRTC User Guide, "Caching"). Seen with processes compiling the same kernels
    # (make sanitize --jobs). Our cache below already keeps the cubin together with its report.
    opts = ProgramOptions(arch=arch, std="c++17", include_path=include_path(), ptxas_options=["-v"],
                          define_macro=define_flags or None, name=name, lineinfo=True,
                          no_cache=True if nvrtc_version() >= (12, 9) else None)
    # `options` go to NVRTC as given, after ours (a later flag wins, e.g. --maxrregcount=N). NVRTC itself
    # judges them: an option it does not know is NVRTC_ERROR_INVALID_OPTION (NVRTC User Guide,
    # "Supported Compile Options").
    flags = [o for o in opts.as_bytes("nvrtc")] + [o.encode() for o in options]
    key_material = "\0".join([source, arch, repr(define_flags), repr(tuple(options)), repr(nvrtc_version()),
                              _headers_digest()])
    key = hashlib.sha256(key_material.encode()).hexdigest()[:32]
    cached = cached_file(f"{key}.cubin") if use_cache else None
    if cached is not None and cached.exists():
        log_file = cached.with_suffix(".log")
        hit = Module(source, arch, cached.read_bytes(), log_file.read_text() if log_file.exists() else "",
                     tuple(options), defines=dict(defines or {}), name=name, debug=debug, any_gpu=any_gpu,
                     flags=tuple(flags))
        # A hit counts only with the resources of every kernel (ptxas -v lists each entry); a cubin whose
        # log is missing or short (a writer cut off) is compiled again and both are rewritten.
        if set(hit.kernel_names) <= set(hit.resources):
            return hit
    obj_code, log = _nvrtc(source, name, flags)
    if obj_code is None and log.endswith("(NVRTC_ERROR_INVALID_OPTION)"):
        raise CompileError(f"NVRTC refused an option of options={list(options)!r}: {log}. NVRTC accepts the "
                           "flags of the NVRTC User Guide, 'Supported Compile Options' (e.g. --maxrregcount=64, "
                           "-DNAME=1, --use_fast_math)", log)
    if obj_code is None:
        if _PTXAS.search(log):
            ptx = _ptx(source, name, flags)
            log = ptxas_at_source(log, ptx, name) if ptx else log
        msg, diags = _format_diagnostics(source, log, name)
        raise CompileError(f"NVRTC could not compile {name} for {arch}:\n{msg}", log, diags)
    log = log.replace("\x00", "")
    mod = Module(source, arch, obj_code, log, tuple(options), defines=dict(defines or {}), name=name,
                 debug=debug, any_gpu=any_gpu, flags=tuple(flags))
    if not set(mod.kernel_names) <= set(mod.resources):
        import warnings
        warnings.warn(f"{name}: the compiler's log has no resource report for "
                      f"{sorted(set(mod.kernel_names) - set(mod.resources))}", stacklevel=2)
    if cached is not None:
        # the log before the cubin: a reader takes the cubin's presence to mean that the log is there too
        store(cached.with_suffix(".log"), mod.log.encode())
        store(cached, mod.cubin)
    return mod


def _options(options) -> tuple:
    """NVRTC flags as a tuple of strings; one string is split like a shell line."""
    import shlex
    if isinstance(options, str):
        options = shlex.split(options)
    options = tuple(options or ())
    for o in options:
        if not isinstance(o, str):
            raise CompileError(f"options={options!r}: give NVRTC flags as strings, e.g. ['--maxrregcount=64']")
        if re.match(r"--?(?:time|fdevice-time-trace|create-pch|pch-dir|use-pch|pch)\b", o):
            # NVRTC writes (or reads) the file these name itself: a compile writes only the cache's files
            raise CompileError(f"options: {o!r} writes or reads a file of NVRTC's own: compile without it")
    return tuple(_text(o, "an NVRTC option") for o in options)


def _text(s, what: str) -> str:
    """`s` as a plain str: the cache's key and NVRTC read the same characters (a str subclass could encode,
    print or compare otherwise than its characters say)."""
    if not isinstance(s, str):
        raise CompileError(f"{what} must be text (a str), not {type(s).__name__}")
    return str.__str__(s)


def _nvrtc(source: str, name: str, flags: list[bytes]) -> tuple[bytes | None, str]:
    """One NVRTC compilation: (cubin, log), or (None, log) when it failed. An option NVRTC does not
    accept is reported in the log with the option named."""
    from cuda.bindings import nvrtc
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return None, f"nvrtcCreateProgram failed: {err.name}"
    try:
        err, = nvrtc.nvrtcCompileProgram(prog, len(flags), flags)
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        buf = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, buf)
        log = buf.decode(errors="replace").rstrip("\x00")
        if err == nvrtc.nvrtcResult.NVRTC_ERROR_INVALID_OPTION:
            return None, f"{log.strip() or err.name} (NVRTC_ERROR_INVALID_OPTION)"
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return None, log or err.name
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = b" " * size
        _check_nvrtc(nvrtc.nvrtcGetCUBIN(prog, cubin))
        return cubin, log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _check_nvrtc(result):
    from cuda.bindings import nvrtc
    err = result[0]
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"NVRTC failed: {err.name}")


_HEADERS_DIGEST = None


def _headers_digest() -> str:
    """Our headers are part of the cache key: editing one recompiles what includes it."""
    global _HEADERS_DIGEST
    if _HEADERS_DIGEST is None:
        h = hashlib.sha256()
        for p in sorted(INCLUDE_DIR.rglob("*")):
            if p.is_file():
                h.update(p.name.encode() + p.read_bytes())
        _HEADERS_DIGEST = h.hexdigest()
    return _HEADERS_DIGEST
