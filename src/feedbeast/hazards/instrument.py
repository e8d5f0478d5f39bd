"""Every ordinary shared-memory access of a hazard build, recorded without markers (Chapter 04).

NVRTC gives the hazard build's PTX; `instrument` puts a call to a recorder of include/fb/hazard.cuh before each
instruction that reads or writes shared memory through the generic proxy:

  ld / st / atom / red on .shared (::cta, ::cluster)   fb_hz_shared(address, info, line, site)
  ldmatrix / stmatrix on .shared                       the same, with the matrix count (each lane names 16 bytes)
  ld / st / atom / red / ldmatrix with no state space  fb_hz_generic(address, ...): it records only where
                                                       isspacep.shared holds at run time (PTX ISA: isspacep)
  cp.async.mbarrier.arrive(.noinc)                     fb_hz_cp_mbar(barrier, noinc, line)

`line` is the kernel source's line from the nearest .loc (the call site, for code inlined from a header). The
call takes the instruction's guard predicate. The driver compiles the result (cuModuleLoadData takes PTX).
"""
from __future__ import annotations

import re

# bytes of a PTX fundamental type (PTX ISA: Fundamental Types; .f16x2 and friends are 32 bits)
_TYPE_BYTES = {"8": 1, "16": 2, "32": 4, "64": 8, "128": 16}
_SPACES = ("global", "local", "param", "const", "tex")
_INSTR = re.compile(r"^(?P<indent>\s*)(?P<guard>@!?%\w+\s+)?(?P<op>[a-z][\w:.]*)\s+(?P<rest>[^;]*);\s*(//.*)?$")
_ADDR = re.compile(r"\[\s*(?P<base>%[\w$]+|[A-Za-z_$][\w$]*|\d+)\s*(?:\+\s*(?P<off>-?\d+))?\s*\]")
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+\d+(?:.*inlined_at\s+(\d+)\s+(\d+)\s+\d+)?")
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', re.M)
_REG = re.compile(r"^\s*\.reg\s+\.[bus](32|64)\s+([^;]+);")
_FUNC = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)")
RECORDERS = ("fb_hz_shared", "fb_hz_generic", "fb_hz_cp_mbar")


class Access:
    """What one instruction does to memory: space ('shared', 'cluster' or 'generic'), bytes per lane, write,
    ldmatrix count (0: every lane names its own address)."""

    def __init__(self, space, nbytes, write, matrices=0):
        self.space, self.nbytes, self.write, self.matrices = space, nbytes, write, matrices

    @property
    def info(self) -> int:
        return self.nbytes | self.write << 16 | (self.space == "cluster") << 17 | self.matrices << 20


def classify(op: str) -> Access | None:
    """The shared-memory access an opcode makes, or None (not a memory access, or one of another space)."""
    parts = op.split(".")
    head, mods = parts[0], parts[1:]
    if head not in ("ld", "st", "atom", "red", "ldmatrix", "stmatrix"):
        return None
    if "async" in mods or "bulk" in mods or any(m in _SPACES or m.startswith(("global", "param")) for m in mods):
        return None     # st.async / red.async: async proxy; another state space
    space = ("cluster" if "shared::cluster" in mods else "shared" if any(m.startswith("shared") for m in mods)
             else "generic")
    write = head in ("st", "atom", "red", "stmatrix")
    if head in ("ldmatrix", "stmatrix"):
        count = next((int(m[1:]) for m in mods if m in ("x1", "x2", "x4")), 1)
        return Access(space, 16, write, count)
    vec = next((int(m[1:]) for m in mods if m in ("v2", "v4", "v8")), 1)
    size = next((_TYPE_BYTES.get(re.sub(r"^[a-z]+", "", m).split("x")[0]) for m in reversed(mods)
                 if re.fullmatch(r"(b|u|s|f|bf|e4m3|e5m2)(8|16|32|64|128)(x\d)?", m)), None)
    if size is None:
        return None
    if re.fullmatch(r"(f|bf)16x2", mods[-1]):
        size = 4
    return Access(space, size * vec, write)


def _address(rest: str, widths: dict) -> tuple[str, str, int] | None:
    """(base, kind, offset) of an instruction's memory operand: kind 'r32', 'r64', 'sym' or 'imm'."""
    m = _ADDR.search(rest)
    if m is None:
        return None
    base, off = m.group("base"), int(m.group("off") or 0)
    width = widths.get(base) or (widths.get(re.match(r"%[A-Za-z_$]+", base).group(0)) if base[0] == "%" else None)
    if width:
        return base, f"r{width}", off
    if base[0] == "%":
        return None     # a register of a width we did not see declared
    return (base, "imm" if base.isdigit() else "sym", off)


def _call(guard, name, args) -> list[str]:
    """One PTX call in its own scope: a .param per argument (PTX ISA: call)."""
    out = []
    for i, (ty, value) in enumerate(args):
        out += [f"\t.param .b{ty} fbz_p{i};", f"\tst.param.b{ty} [fbz_p{i}], {value};"]
    out.append(f"\t{guard}call {name}, ({', '.join(f'fbz_p{i}' for i in range(len(args)))});")
    return out


def _site(guard, acc: Access, addr, line: int, site: int) -> list[str] | None:
    base, kind, off = addr
    body = ["\t{", "\t.reg .b32 %fbz_a;", "\t.reg .b64 %fbz_g;"]
    if acc.space == "generic":
        if kind != "r64":
            return None     # a generic address held in 32 bits or named by a symbol: not a shared one here
        body.append(f"\tadd.s64 %fbz_g, {base}, {off};")
        body += _call(guard, "fb_hz_generic", [(64, "%fbz_g"), (32, acc.info), (32, line), (32, site)])
    else:
        body += _shared_u32(base, kind, off)
        body += _call(guard, "fb_hz_shared", [(32, "%fbz_a"), (32, acc.info), (32, line), (32, site)])
    return body + ["\t}"]


def _shared_u32(base, kind, off) -> list[str]:
    """PTX that puts a shared-memory operand's 32-bit address (register, symbol or immediate, plus offset) in %fbz_a."""
    if kind == "r64":
        return [f"\tcvt.u32.u64 %fbz_a, {base};", f"\tadd.s32 %fbz_a, %fbz_a, {off};"]
    if kind == "r32":
        return [f"\tadd.s32 %fbz_a, {base}, {off};"]
    if kind == "sym":
        return [f"\tmov.u32 %fbz_a, {base};", f"\tadd.s32 %fbz_a, %fbz_a, {off};"]
    return [f"\tmov.u32 %fbz_a, {int(base) + off};"]


def _cp_mbar(guard, op, addr, line) -> list[str] | None:
    base, kind, off = addr
    if kind == "imm":
        return None
    body = ["\t{", "\t.reg .b32 %fbz_a;"] + _shared_u32(base, kind, off)
    body += _call(guard, "fb_hz_cp_mbar", [(32, "%fbz_a"), (32, int(".noinc" in op)), (32, line)])
    return body + ["\t}"]


class Result(str):
    """The instrumented PTX, with what was done: .sites (instructions instrumented), .skipped (those that could
    not be: [(line, instruction)])."""
    sites: int = 0
    skipped: list = []


def instrument(ptx: str, source_name: str = "") -> Result:
    """The PTX with a recorder call before every shared-memory access (see the module's docstring)."""
    if not all(f"func {r}" in ptx for r in RECORDERS):
        raise ValueError("the PTX has no fb_hz_* recorders: it is not a hazard build of a source that includes an "
                         "fb/ header (compile it with FB_HAZARDS defined)")
    main = {n for n, f in _FILE.findall(ptx) if f == source_name or f.endswith("/" + source_name)} or {"1"}
    out, widths, func, line, sites, skipped = [], {}, "", 0, 0, []
    for text in ptx.split("\n"):
        m = _FUNC.match(text)
        if m:
            func, widths = m.group(1), {}
        r = _REG.match(text)
        if r:       # %r<12> names a family of registers; `tmp` (in an asm block) one register
            for name in r.group(2).split(","):
                widths[re.sub(r"<\d+>$", "", name.strip())] = int(r.group(1))
        loc = _LOC.match(text)
        if loc:
            f, n, f2, n2 = loc.groups()
            if f in main:
                line = int(n)
            elif f2 in main:
                line = int(n2)
        i = _INSTR.match(text)
        if i is None or func.startswith(("fb_hz_", "_ZN2fb6hazard")):
            out.append(text)
            continue
        guard, op, rest = i.group("guard") or "", i.group("op"), i.group("rest")
        extra = None
        if op.startswith("cp.async.mbarrier.arrive"):
            addr = _address(rest, widths)
            extra = _cp_mbar(guard, op, addr, line) if addr else None
            if extra is None:
                skipped.append((line, text.strip()))
        else:
            acc = classify(op)
            if acc is not None:
                addr = _address(rest, widths)
                extra = _site(guard, acc, addr, line, sites) if addr else None
                if extra is None and acc.space != "generic":
                    skipped.append((line, text.strip()))
        if extra:
            sites += 1
            out += extra
        out.append(text)
    res = Result("\n".join(out))
    res.sites, res.skipped = sites, skipped
    return res


def define_flags(module) -> list[str]:
    """The -D flags NVRTC was given for the module's cubin, as compile() makes them from what it keeps: the defines,
    FB_DEBUG=1 for a debug build (compile(..., debug=True) or hazards=True keeps only its own defines, and the
    waits of a hazard build need fb/debug.cuh's clock and time-out), and inside make sanitize the debug build's
    wait time-out 100 times longer. The PTX must be of that same build: with the short time-out, a wait of the
    instrumented kernel gives up where the cubin's waits on, and after that every wait returns at once."""
    from .. import hooks
    defs = dict(module.defines or {})
    if getattr(module, "debug", False):
        defs.setdefault("FB_DEBUG", 1)
        if hooks.mode.sanitizer:
            defs["FB_WAIT_TIMEOUT_NS"] = f"({defs.get('FB_WAIT_TIMEOUT_NS', '2000000000ull')})*100"
    return [f"{k}={v}" if v is not None else str(k) for k, v in sorted(defs.items())]


def ptx_of(module) -> str:
    """The PTX of a hazard build (a Module compiled with FB_HAZARDS), from NVRTC with the same defines and options
    as its cubin (define_flags), for the virtual architecture of its arch (compute_90a for sm_90a). Cached next to
    the cubins."""
    import hashlib
    from cuda.bindings import nvrtc
    from cuda.core import ProgramOptions
    from ..cache import cached_file, store
    from ..compile import _headers_digest, include_path
    from ..errors import CompileError
    from ..device import nvrtc_version
    arch = module.arch.replace("sm_", "compute_")
    defs = define_flags(module)
    flags = ProgramOptions(arch=arch, std="c++17", include_path=include_path(), define_macro=defs or None,
                           name=module.name, lineinfo=True).as_bytes("nvrtc") + [o.encode() for o in module.options]
    key = hashlib.sha256("\0".join([module.source or "", repr(flags), repr(nvrtc_version()), _headers_digest(),
                                    "ptx"]).encode()).hexdigest()[:32]
    cached = cached_file(f"{key}.ptx")
    if cached is not None and cached.exists():
        return cached.read_text()
    err, prog = nvrtc.nvrtcCreateProgram((module.source or "").encode(), module.name.encode(), 0, [], [])
    try:
        err, = nvrtc.nvrtcCompileProgram(prog, len(flags), flags)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"NVRTC could not compile the PTX of the hazard build of {module.name} ({err.name}); "
                               "its cubin compiled: report this with the source")
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        buf = b" " * size
        nvrtc.nvrtcGetPTX(prog, buf)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    text = buf.rstrip(b"\0").decode()
    store(cached, text.encode())
    return text


def load(module) -> Result:
    """Load the instrumented PTX of a hazard build as the module its kernels launch from (the driver compiles PTX
    for the GPU: CUDA Driver API, cuModuleLoadData). Its cubin stays what names, parameters and resources are
    read from: the same source, before the recorder calls were added."""
    import struct
    from cuda.bindings import driver
    from ..device import _check
    if getattr(module, "_instrumented", None) is not None:
        return module._instrumented
    res = instrument(ptx_of(module), module.name)
    module._cu_module = _check(driver.cuModuleLoadData(res.encode() + b"\0"))
    for k in module._kernels.values():      # functions taken from the cubin before: take them again from here
        k._fn = None
    err, dptr, _ = driver.cuModuleGetGlobal(module._cu_module, b"fb_debug_report")
    if err == driver.CUresult.CUDA_SUCCESS:     # as Kernel._load does for the debug build's report channel
        from ..memory import debug_channel
        _check(driver.cuMemcpyHtoD(dptr, struct.pack("<Q", debug_channel().device), 8))
    module._instrumented = res
    return res
