"""SASS: the machine code the GPU runs, read with `nvdisasm -json` (no GPU needed).

Chapter 00 reads its first SASS; chapter 03 explains expect_sass on the cp.async instructions.

`expect_sass(mod, "LDGSTS", "DEPBAR")` fails naming each missing instruction. Names match by prefix
on '.' boundaries: "SYNCS.ARRIVE" matches "SYNCS.ARRIVE.TRANS64.A1T0".
`instructions(cubin)` is the structured form ({kernel: [Instruction]}); `sass_text` prints it one
instruction a line, '/*0040*/ LDGSTS.E.BYPASS.128 [R3], [R4.64] ;', for reading and for `highlight`.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import json
import os
import re
import shutil
import subprocess
import tempfile

from . import hooks
from .cache import cached_file, store
from .errors import FeedbeastError, SassMismatch


def tool(name: str) -> str:
    """Path to cuobjdump / nvdisasm: the CUDA toolkit wheels first, then PATH."""
    try:
        import cuda.pathfinder as pf
        p = pf.find_nvidia_binary_utility(name)
    except Exception:
        p = None
    p = p or shutil.which(name)
    if not p:
        raise FeedbeastError(f"{name} not found: install the nvidia-cuda-{name} wheel (feedbeast's "
                             "cu13 or cu12 extra has it) or put a CUDA toolkit's bin/ on PATH")
    return p


def _run(args, cubin: bytes) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        r = subprocess.run([*args, f.name], capture_output=True, text=True)
    if r.returncode:
        raise FeedbeastError(f"{' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout


_PREDICATE = re.compile(r"!?U?P(?:[0-9]+|T)")


def is_predicate(operand: str) -> bool:
    """'P0', '!P3', 'PT', 'UP1': a predicate register as an operand (LDGSTS's ignore-source flag, a SETP's
    destination), as opposed to the instruction's guard (`Instruction.predicate`)."""
    return bool(_PREDICATE.fullmatch(operand))


def is_address(operand: str) -> bool:
    """A memory operand: '[R7]', '[R6+0x1200]', 'desc[UR4][R2.64]', '[R18.64]'."""
    return operand.startswith("[") or operand.startswith("desc[")


def is_global_address(operand: str) -> bool:
    """A 64-bit (global) address: through a memory descriptor ('desc[UR4][R2.64]') or a 64-bit register pair
    ('[R18.64]'). Shared-memory addresses are 32-bit ('[R7]', '[UR8+0x400]')."""
    return operand.startswith("desc[") or (operand.startswith("[") and ".64" in operand)


@dataclasses.dataclass(frozen=True)
class Instruction:
    offset: int            # bytes from the start of its function
    opcode: str            # with modifiers: "LDGSTS.E.BYPASS.128"
    operands: tuple = ()
    predicate: str = ""    # "@P0", "@!P1" or ""

    def __str__(self):
        words = " ".join(w for w in (self.predicate, self.opcode, ", ".join(self.operands)) if w)
        return f"/*{self.offset:04x}*/ {words} ;"

    # Operands by their role, not their place: nvdisasm versions order some operands differently.
    @property
    def addresses(self) -> tuple:
        return tuple(o for o in self.operands if is_address(o))

    @property
    def global_address(self) -> str | None:
        return next((o for o in self.addresses if is_global_address(o)), None)

    @property
    def shared_address(self) -> str | None:
        """The shared-memory address of an instruction that has one (LDGSTS's destination, LDS, STS, LDSM)."""
        return next((o for o in self.addresses if not is_global_address(o)), None)

    @property
    def predicate_operands(self) -> tuple:
        return tuple(o for o in self.operands if is_predicate(o))


def _canonical(opcode: str, operands: tuple) -> tuple:
    """Operands in one order whatever nvdisasm wrote. nvdisasm 13.0's -json gives cp.async (LDGSTS) its global
    source first and its ignore-source predicate before the shared destination ('desc[UR4][R2.64],!P0[R7]');
    13.2 and later, like cuobjdump, write the shared destination, the global source, then the predicate."""
    if opcode.split(".")[0] == "LDGSTS":
        shared = [o for o in operands if is_address(o) and not is_global_address(o)]
        glob_ = [o for o in operands if is_global_address(o)]
        rest = [o for o in operands if not is_address(o)]
        return tuple(shared + glob_ + rest)
    return operands


_REGISTER = re.compile(r"[-!|~]*[A-Z][A-Z0-9_.]*")


def _groups(text: str) -> int:
    """How many bracket groups at the top level `text` holds: 'desc[UR10][R14.64]' has 2."""
    n, depth = 0, 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            n += depth == 0
    return n


def _split_operands(text: str) -> tuple:
    """'R1,c[0x0][0x28]' -> ('R1', 'c[0x0][0x28]'): commas inside brackets or braces stay. The JSON writes
    no comma between a register and a memory operand ('URZ[UR10]' is 'URZ, [UR10]'); a constant bank or a
    descriptor ('c[0x0][0x28]', 'desc[UR4][R2.64]') is lower case and stays one operand, while two
    addresses in a row ('[UR16][UR10]', nvdisasm 13.0's 'desc[UR10][R14.64][R27]') are two."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "[" and depth == 0 and (_REGISTER.fullmatch(cur.strip()) or cur.strip().startswith("[")
                                         or (cur.strip().startswith("desc[") and _groups(cur) >= 2)):
            out.append(cur.strip())
            cur = ""
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return tuple(out + [cur.strip()]) if cur.strip() or out else ()


@functools.lru_cache(maxsize=64)
def _disassemble(cubin: bytes) -> dict:
    return from_nvdisasm_json(json.loads(_nvdisasm_json(cubin)))


def _nvdisasm_json(cubin: bytes) -> str:
    """`nvdisasm -json` of a cubin, kept on disk beside the compiled cubins: a large kernel takes nvdisasm about
    0.3 s of CPU, and every process that checks the same kernel's SASS would pay it again. The key names the
    cubin's bytes and the nvdisasm binary (path, size, mtime), so another nvdisasm version reads afresh. A cache
    that cannot be written (a read-only home) only costs the time."""
    import hashlib
    nvdisasm = tool("nvdisasm")
    st = os.stat(nvdisasm)
    key = hashlib.sha256(cubin + f"\0{nvdisasm}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:32]
    path = cached_file(f"{key}.json", "sass")
    if path is not None and path.exists():
        return path.read_text()
    text = _run([nvdisasm, "-json"], cubin)
    store(path, text.encode())
    return text


def from_nvdisasm_json(raw) -> dict:
    """{function: (Instruction, ...)} from the document `nvdisasm -json` prints."""
    functions = raw[1] if isinstance(raw, list) and len(raw) > 1 else []
    out, owner = {}, None
    for fn in functions:
        start, name = fn.get("start", 0), fn["function-name"]
        insns = [Instruction(start + 16 * i, ins["opcode"],                                            # 16 B each
                             _canonical(ins["opcode"], _split_operands(ins.get("operands", ""))),
                             ins.get("predicate", "")) for i, ins in enumerate(fn.get("sass-instructions", []))]
        # A subroutine the compiler placed inside a kernel's code (64-bit division, a guardrail trap) is listed
        # after that kernel with a start inside its range: it stays part of the kernel, as cuobjdump shows it.
        if owner and start > owner[1] and start + fn.get("length", 0) <= owner[1] + owner[2]:
            out[owner[0]] += insns
        else:
            owner = (name, start, fn.get("length", 0))
            out[name] = insns
    return {k: tuple(v) for k, v in out.items()}


def instructions(cubin, kernel: str | None = None) -> dict[str, tuple]:
    """{function: (Instruction, ...)} of a cubin (bytes, a Module or a cuda.core ObjectCode), from
    `nvdisasm -json`; only `kernel`'s when it is given."""
    if hasattr(cubin, "cubin"):   # a Module
        cubin = cubin.cubin
    if hasattr(cubin, "code"):    # a cuda.core ObjectCode (what Numba hands back)
        cubin = cubin.code
    funcs = _disassemble(bytes(cubin))
    if kernel is None:
        return dict(funcs)
    if kernel not in funcs:
        raise FeedbeastError(f"no kernel {kernel!r} in this cubin")
    return {kernel: funcs[kernel]}


def sass_text(cubin, kernel: str | None = None) -> str:
    """SASS of one kernel (or all), one instruction a line: '/*0040*/ LDGSTS.E.BYPASS.128 [R3], [R4.64] ;'."""
    return "\n".join(f"// {name}\n" + "\n".join(map(str, insns))
                     for name, insns in instructions(cubin, kernel).items())


# Reading the text back (a listing a notebook holds, or an excerpt): the format sass_text prints.
_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", re.IGNORECASE)


def opcodes(sass: str) -> list[str]:
    """The opcode of each instruction, with modifiers, without predicate or operands."""
    ops = []
    for m in _INSN.finditer(sass):
        words = m.group(1).split()
        if words and words[0].startswith("@"):
            words = words[1:]
        if words:
            ops.append(words[0])
    return ops


def opcode_histogram(sass: str) -> collections.Counter:
    return collections.Counter(opcodes(sass))


def matches(opcode: str, pattern: str) -> bool:
    return opcode == pattern or opcode.startswith(pattern + ".")


def histogram(mod, kernel: str | None = None) -> collections.Counter:
    """Opcode counts of a Module's (or a cubin's) SASS, one kernel or all."""
    return collections.Counter(i.opcode for insns in instructions(mod, kernel).values() for i in insns)


# What source makes an opcode a check asks for (PTX, and the course's wrapper of it): said when it is missing.
SOURCE_OF = {
    "LDGSTS": "cp.async (fb::cp_async_cg16)", "LDGDEPBAR": "cp.async.commit_group (fb::cp_async_commit)",
    "DEPBAR": "cp.async.wait_group (fb::cp_async_wait<N>) or, after TMA stores, cp.async.bulk.wait_group "
              "(fb::tma::wait_group<N>, fb::tma::wait_group_read<N>)",
    "UTMALDG": "cp.async.bulk.tensor, a TMA load (fb::tma::load_2d)",
    "UTMASTG": "cp.async.bulk.tensor, a TMA store (fb::tma::store_2d)",
    "UTMACMDFLUSH": "cp.async.bulk.commit_group (fb::tma::commit_group)",
    "SYNCS.PHASECHK": "mbarrier.try_wait (fb::mbar::wait)",
    "SYNCS.ARRIVE.TRANS64": "mbarrier.arrive and its forms (fb::mbar::arrive_expect_tx, fb::mbar::arrive, ...)",
    "SYNCS.ARRIVE.TRANS64.A1T0": "a plain mbarrier.arrive, one arrival and no bytes (fb::mbar::arrive)",
    "FENCE.VIEW.ASYNC.S": "fence.proxy.async.shared::cta (fb::fence_proxy_async)",
    "USETMAXREG.DEALLOC": "setmaxnreg.dec (fb::setmaxnreg_dec<N>)",
    "USETMAXREG.TRY_ALLOC": "setmaxnreg.inc (fb::setmaxnreg_inc<N>)",
    "HGMMA": "wgmma.mma_async (fb::wgmma::mma)",
    "HMMA.16816.F32": "mma.sync.aligned.m16n8k16 with f16 operands, f32 sums (fb::decode::mma_f16)",
    "HMMA.16816.F32.BF16": "mma.sync.aligned.m16n8k16 with bf16 operands, f32 sums (fb::decode::mma_bf16, "
                           "fb::mma_bf16_16816)",
    "F2FP.F16.E4M3.UNPACK_B": "cvt.rn.f16x2.e4m3x2, two fp8 e4m3 values to two halves (fb::decode::e4m3x2_to_f16x2)",
    "BAR": "a block barrier (__syncthreads(), cuda.syncthreads())",
    "LDS": "a load from shared memory", "STS": "a store to shared memory",
    "LDG": "a load from global memory", "STG": "a store to global memory",
}


# The width of an ordinary load or store is a suffix of its opcode; with none it moves 4 bytes (LDG.E, STS).
# {suffix: (bytes, the C++ types whose access makes it)}
ACCESS_WIDTHS = {
    "U8": (1, "an unsigned char or uint8_t"), "S8": (1, "a signed char or int8_t"),
    "U16": (2, "an unsigned short, __half or __nv_bfloat16"), "S16": (2, "a short or int16_t"),
    "64": (8, "a float2, int2, double or long long"), "128": (16, "a float4 or int4"),
}
_ACCESSES = ("LDG", "STG", "LDS", "STS")     # the SOURCE_OF entries whose opcodes carry a width


def access_width(opcode: str) -> tuple[str, str] | None:
    """(the width suffix, the opcode without it) of an ordinary global or shared load or store that has one:
    ("128", "LDG.E") for LDG.E.128; None for LDG.E (4 bytes) and for any other opcode."""
    words = opcode.split(".")
    if words[0] not in _ACCESSES:
        return None
    suffix = next((w for w in words[1:] if w in ACCESS_WIDTHS), None)
    return (suffix, ".".join(w for w in words if w != suffix)) if suffix else None


def source_of(opcode: str) -> str | None:
    """The source that makes `opcode` (the longest SOURCE_OF key it starts with), or None. For a load or store
    with a width suffix, its width and the type whose access makes it: LDG.E.128 is a 16-byte load (float4),
    which a plain float access (LDG.E, 4 bytes) is not."""
    keys = [k for k in SOURCE_OF if opcode == k or opcode.startswith(k + ".")]
    if not keys:
        return None
    key = max(keys, key=len)
    width = access_width(opcode) if key in _ACCESSES else None
    if width is None:
        return SOURCE_OF[key]
    suffix, narrow = width
    size, types = ACCESS_WIDTHS[suffix]
    what = SOURCE_OF[key].removeprefix("a ")
    aligned = f", {size}-byte aligned" if size >= 8 else ""
    return f"{'an' if size == 8 else 'a'} {size}-byte {what}: {types} access{aligned} ({narrow} is 4 bytes)"


def _other_widths(pattern: str, hist) -> list[str]:
    """The opcodes of `hist` that are `pattern`'s load or store at another width (LDG.E for LDG.E.128)."""
    want = access_width(pattern)
    if want is None:
        return []
    out = []
    for op in hist:
        have = access_width(op)
        narrow, size = (have[1], ACCESS_WIDTHS[have[0]][0]) if have else (op, 4)
        if matches(narrow, want[1]) and not matches(op, pattern):
            out.append(f"{op} ({size} bytes)")
    return out


def expect_opcodes(hist: collections.Counter, *required: str, forbid: tuple = (), where: str,
                   arch: str | None = None, todo: str = "") -> collections.Counter:
    """The check behind every expect_sass: `hist` (opcode counts) has each `required` opcode and none of
    `forbid`. Returns the count of each required one; raises SassMismatch naming what is missing (after `todo`,
    the lab's part not yet written, when there is one)."""
    missing = [p for p in required if not any(matches(op, p) for op in hist)]
    present = [p for p in forbid if any(matches(op, p) for op in hist)]
    if missing or present:
        msg = [f"{todo}SASS of {where}{f' for {arch}' if arch else ''}:"]
        if missing:
            msg.append(f"  missing {', '.join(missing)}")
            made = [f"{p} from {source_of(p)}" for p in missing if source_of(p)]
            if made:
                msg.append(f"  (in the source: {'; '.join(made)})")
            other = [o for p in missing for o in _other_widths(p, hist)]
            if other:       # the accesses are there, at another width (a float loop where float4 was asked for)
                msg.append(f"  (the SASS has them at another width: {', '.join(other)})")
            cased = [p for p in missing if p != p.upper() and any(matches(op, p.upper()) for op in hist)]
            if cased:       # SASS mnemonics are upper case: 'ldg' matches nothing, 'LDG' matches LDG.E
                msg.append(f"  (SASS opcodes are upper case: {', '.join(p.upper() for p in cased)} is there)")
        if present:
            msg.append(f"  should not contain {', '.join(present)}")
        top = ", ".join(f"{op}×{n}" for op, n in hist.most_common(12))
        msg.append(f"  most frequent instructions: {top}")
        hooks.failed(f"SASS of {where}", "\n".join(msg))
        raise SassMismatch("\n".join(msg))
    hooks.passed(f"SASS of {where}", ", ".join(required))
    return collections.Counter({p: sum(n for op, n in hist.items() if matches(op, p)) for p in required})


def _opcode_args(required, forbid, kernels=(), who: str = "expect_sass") -> tuple:
    """The opcodes as expect_sass takes them (separate strings; forbid a tuple), or a FeedbeastError saying what was
    given instead: a list (unpack it), one string as forbid (its letters would be the opcodes, none found: a pass),
    a kernel's name among the opcodes (kernel= names the kernel)."""
    from .errors import FeedbeastError
    for p in required:
        if not isinstance(p, str):
            example = "highlight(text, 'LDG.E', 'STG.E')" if who == "highlight" else f"{who}('LDG.E', 'STG.E')"
            raise FeedbeastError(f"{who}: opcodes are separate strings, {example}, not "
                                 f"{type(p).__name__} {p!r}" + (" (unpack a list: *ops)" if isinstance(p, (list, tuple))
                                                               else ""))
        if p in kernels:
            raise FeedbeastError(f"{who}: {p!r} is a kernel of this module, not an opcode: write kernel={p!r}")
    if isinstance(forbid, str):
        raise FeedbeastError(f"{who}: forbid={forbid!r} is one string: give a tuple of opcodes, "
                             f"forbid=({forbid!r},)")
    if not all(isinstance(p, str) for p in forbid):
        raise FeedbeastError(f"{who}: forbid holds opcodes as strings, got {forbid!r}")
    return tuple(required), tuple(forbid)


def expect_sass(mod, *required: str, kernel: str | None = None, forbid: tuple = ()) -> collections.Counter:
    """Assert that the SASS of `mod` (a Module) has every `required` opcode and none of `forbid`.

    Returns the count of each required opcode. Raises SassMismatch naming what is missing.
    """
    required, forbid = _opcode_args(required, forbid, mod.kernel_names)
    where = f"kernel {kernel}" if kernel else f"module ({', '.join(mod.kernel_names)})"
    return expect_opcodes(histogram(mod, kernel), *required, forbid=forbid, where=where, arch=mod.arch,
                          todo=getattr(mod, "todo", ""))


def proxy_fences(sass) -> int:
    """How many `fence.proxy.async.shared::cta` the SASS (text or Instructions) has. On sm_90 each is a
    MEMBAR.ALL.CTA directly followed by FENCE.VIEW.ASYNC.S; a FENCE.VIEW.ASYNC.S alone (after mbarrier
    initialisation) is another fence."""
    ops = opcodes(sass) if isinstance(sass, str) else [i.opcode for i in sass]
    return sum(1 for a, b in zip(ops, ops[1:]) if matches(a, "MEMBAR") and b == "FENCE.VIEW.ASYNC.S")


_GENERIC_SHARED = ("LDS", "STS", "LDSM", "STSM")        # ordinary (generic-proxy) shared-memory accesses
_ASYNC_AFTER = ("SYNCS.ARRIVE.TRANS64.A1T0",            # a release: the next bulk/TMA write may refill the stage
                "UTMASTG", "UBLKCP.G.S")                # a TMA / bulk store: reads shared memory, async proxy


def proxy_fence_order(ins) -> list[str]:
    """Places where an ordinary shared-memory access is followed, in the SASS's order, by a release arrive or an
    async-proxy store with no fence.proxy.async (MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC.S) between them on every path:
    a fence after the arrive (or the store) instead of before it, or one that a branch can skip."""
    ins = list(ins)
    ops = [i.opcode for i in ins]
    where = [i.offset for i in ins]
    at = {o: k for k, o in enumerate(where)}

    def skipped(f: int, j: int) -> bool:
        """Can a path from an access the fence at f orders reach the arrive at j without the fence: the fence
        predicated, or a branch after the first such access landing between the fence and the arrive (a fence
        inside an `if` the arrive is not in)?"""
        if any(ins[x].predicate not in ("", "@PT") for x in (f - 1, f)):
            return True
        # the accesses this fence would order: those since the last fence or async-proxy operation before it
        start = next((x + 1 for x in range(f - 2, -1, -1) if ops[x] == "FENCE.VIEW.ASYNC.S"
                      or any(matches(ops[x], a) for a in _ASYNC_AFTER)), 0)
        first = next((x for x in range(start, f - 1) if any(matches(ops[x], g) for g in _GENERIC_SHARED)), None)
        if first is None:
            return False
        for b in range(first, f - 1):
            if matches(ops[b], "BRA"):
                t = at.get(_branch_target(ins[b]))
                if t is not None and f < t <= j:
                    return True
        return False

    bad = []
    for j, op in enumerate(ops):
        if not any(matches(op, a) for a in _ASYNC_AFTER):
            continue
        for k in range(j - 1, -1, -1):
            if ops[k] == "FENCE.VIEW.ASYNC.S" and k > 0 and matches(ops[k - 1], "MEMBAR") and not skipped(k, j):
                break
            if any(matches(ops[k], g) for g in _GENERIC_SHARED):
                bad.append(f"{ops[k]} at {where[k]:#06x}, then {op} at {where[j]:#06x} with no proxy fence between"
                           " on every path")
                break
    return bad


def expect_proxy_fence(mod, kernel: str, why: str) -> int:
    """Raise SassMismatch (saying `why` the fence is needed) if `kernel` has no shared-memory proxy fence, or if
    one of its release arrives or TMA/bulk stores follows ordinary shared-memory accesses with no fence between
    (the fence placed after the arrive: the order, not only the count)."""
    ins = instructions(mod, kernel)[kernel]
    n = proxy_fences(ins)
    name = f"proxy fence in the SASS of kernel {kernel}"
    if n == 0:
        msg = (f"{getattr(mod, 'todo', '')}SASS of kernel {kernel} for {mod.arch}: no fence.proxy.async.shared::cta "
               f"(MEMBAR.ALL.CTA then FENCE.VIEW.ASYNC.S): {why}")
        hooks.failed(name, msg)
        raise SassMismatch(msg)
    misplaced = proxy_fence_order(ins)
    if misplaced:
        msg = (f"{getattr(mod, 'todo', '')}SASS of kernel {kernel} for {mod.arch}: fence.proxy.async.shared::cta "
               "in the wrong place: "
               + "; ".join(misplaced[:3]) + f": {why}")
        hooks.failed(name, msg)
        raise SassMismatch(msg)
    hooks.passed(name, f"{n} fence(s)")
    return n


def cp_async_waits(ins) -> list[int]:
    """N of each cp.async.wait_group N in program order: DEPBAR.LE SB0, N in the SASS (wait_all is N = 0)."""
    out = []
    for i in ins:
        if matches(i.opcode, "DEPBAR") and "SB0" in i.operands:
            counts = [o for o in i.operands if re.fullmatch(r"0x[0-9a-f]+|[0-9]+", o)]
            if counts:
                out.append(int(counts[0], 0))
    return out


def setmaxnreg_counts(ins) -> tuple[list[int], list[int]]:
    """(the N of each setmaxnreg.dec, of each setmaxnreg.inc) in the SASS: USETMAXREG.DEALLOC.CTAPOOL N and
    USETMAXREG.TRY_ALLOC.CTAPOOL P, N (the .inc retried until the pool has the registers)."""
    dec, inc = [], []
    for i in ins:
        n = next((int(o, 16) for o in i.operands if re.fullmatch(r"0x[0-9a-f]+", o)), None)
        if n is not None and matches(i.opcode, "USETMAXREG.DEALLOC"):
            dec.append(n)
        elif n is not None and matches(i.opcode, "USETMAXREG.TRY_ALLOC"):
            inc.append(n)
    return dec, inc


def setmaxnreg_split(mod, kernel: str, threads: int, producers: int = 1, consumers: int = 2) -> tuple[bool | None, str]:
    """Whether `producers` warpgroups at the .dec and `consumers` at the .inc fit the block's register pool: the
    `threads` it was launched with times the registers per thread ptxas gave the kernel. (True, what was compared),
    (False, why not) or (None, why it was not checked): no setmaxnreg in the SASS (an unwritten role split), or roles
    that do not fill the block. Records nothing: expect_setmaxnreg_split is the check; a cell that is about to launch
    asks this so as not to start a kernel whose .inc would never return. With several .dec or .inc counts in the
    SASS (which warpgroup runs which is not there), each role is taken at its largest: what the block must hold for
    the counts to be safe. An .inc waits until the pool has its registers (PTX ISA, "setmaxnreg"): asking for more
    than the pool holds never returns."""
    dec, inc = setmaxnreg_counts(instructions(mod, kernel)[kernel])
    name = f"setmaxnreg split in the SASS of kernel {kernel}"
    per_thread = mod.resources[kernel].registers
    if producers + consumers != threads // 128:
        return None, f"{name}: not checked ({producers} + {consumers} warpgroups of {threads // 128})"
    if not dec and not inc:
        return None, f"{name}: not checked (no setmaxnreg in the SASS: no registers move between the roles)"
    d, i = max(dec, default=per_thread), max(inc, default=per_thread)   # a role without one keeps its launch's
    several = (" (the largest of the .dec counts " + ", ".join(map(str, sorted(set(dec)))) + ")") if len(set(dec)) > 1 else ""
    several += (" (the largest of the .inc counts " + ", ".join(map(str, sorted(set(inc)))) + ")") if len(set(inc)) > 1 else ""
    lanes = producers * d + consumers * i
    pool = threads // 128 * per_thread
    if lanes > pool:
        return False, (f"{getattr(mod, 'todo', '')}SASS of kernel {kernel} for {mod.arch}: setmaxnreg asks for "
                       f"{producers} x {d}{'' if dec else ' (no .dec: the launch registers)'} + {consumers} x {i} = "
                       f"{lanes} registers per lane of a warpgroup, and the block has "
                       f"{threads // 128} x {per_thread} = {pool} ({threads} threads at the {per_thread} per thread ptxas "
                       f"gave the kernel): an .inc waits until the pool has its registers (PTX ISA, setmaxnreg), so the "
                       f"consumers would wait forever. Choose counts, multiples of 8, whose sum is at most "
                       f"{pool}.{several}")
    return True, f"{producers} x {d} + {consumers} x {i} = {lanes} <= {pool} registers per lane{several}"


def expect_setmaxnreg_split(mod, kernel: str, threads: int, producers: int = 1, consumers: int = 2) -> str:
    """Raise SassMismatch unless the role split's setmaxnreg counts fit the block's register pool (setmaxnreg_split,
    which says how they are read). Where there is nothing to check (no setmaxnreg at all, or roles that do not fill
    the block) it records no verdict, passed or failed, and returns the line that says why."""
    fits, said = setmaxnreg_split(mod, kernel, threads, producers, consumers)
    name = f"setmaxnreg split in the SASS of kernel {kernel}"
    if fits is None:
        return said
    if not fits:
        hooks.failed(name, said)
        raise SassMismatch(said)
    hooks.passed(name, said)
    return said


def _is_wait(i) -> bool:
    return matches(i.opcode, "DEPBAR") and "SB0" in i.operands


def _reads_shared(i) -> bool:
    """An LDS that reads something: ptxas puts `LDS RZ, [RZ]` (a load into the zero register) before blocks of
    LDGSTS, which reads nothing a kernel wrote."""
    return matches(i.opcode, "LDS") and bool(i.operands) and i.operands[0] != "RZ"


def cp_async_reads_before_wait(ins) -> list[str]:
    """Places where shared memory is read after cp.async groups were committed with no wait between, in two shapes
    the SASS shows whatever the wait's count: the first read after the first commit (the prologue's) with no wait
    before it, so the first tile is read before it lands (a wait moved after the fold); a loop that commits and
    reads but never waits (a wait before the loop only); and a pass of the ring's loop that can read without
    passing its wait. A loop is the span of a branch back to an earlier offset; the ring's loop is one that waits
    and reads with no such loop inside it (a loop over rows holding the ring's loop is judged through that one)."""
    ins = list(ins)
    bad = []
    commit = next((k for k, i in enumerate(ins) if matches(i.opcode, "LDGDEPBAR")), None)
    if commit is not None:
        read = next((k for k in range(commit + 1, len(ins)) if _reads_shared(ins[k])), None)
        if read is not None and not any(_is_wait(i) for i in ins[commit + 1:read]):
            bad.append(f"{ins[read].opcode} at {ins[read].offset:#06x} reads shared memory after the first commit "
                       f"(LDGDEPBAR at {ins[commit].offset:#06x}) with no wait (DEPBAR) between: the first tile is "
                       "read before it lands")
    at = {i.offset: k for k, i in enumerate(ins)}
    loops = [(at[t], k) for k, b in enumerate(ins)
             if matches(b.opcode, "BRA") and (t := _branch_target(b)) is not None and t in at and at[t] < k]

    def waits_and_reads(head, back):
        body = ins[head:back + 1]
        return any(_is_wait(i) for i in body) and any(_reads_shared(i) for i in body)

    for head, back in loops:
        body = ins[head:back + 1]
        if any(matches(i.opcode, "LDGDEPBAR") for i in body) and any(_reads_shared(i) for i in body) \
                and not any(_is_wait(i) for i in body):
            bad.append(f"the loop at {ins[head].offset:#06x}-{ins[back].offset:#06x} commits cp.async groups and "
                       "reads shared memory, and never waits (DEPBAR) inside it")
        elif waits_and_reads(head, back) and not any(
                (h, b) != (head, back) and head <= h and b <= back and waits_and_reads(h, b) for h, b in loops) \
                and _pass_skips_wait(ins, at, head, back):
            bad.append(f"a pass of the loop at {ins[head].offset:#06x}-{ins[back].offset:#06x} can skip its wait "
                       "(a branch jumps over the DEPBAR, or a loop around the wait can run no pass) and still read "
                       "shared memory: the wait must run on every pass that reads a tile, before the read")
    return bad


def _pass_skips_wait(ins, at, head: int, back: int) -> bool:
    """In a loop (instructions head..back, `back` its branch to `head`), can one pass go from the head to the back
    branch reading shared memory with no cp.async wait? Predicated branches go both ways; a branch out of the loop
    ends the path; a loop inside is followed round (its guard may skip it: a wait in a loop that can run zero passes
    is no wait). A pass that skips both the wait and the read (a `break` at the top of an unrolled step) reads no
    tile early: extra commits only make the groups a later wait counts older. An indirect branch is not judged
    (False)."""
    region = range(head, back + 1)
    if any(matches(ins[k].opcode, "BRX") or matches(ins[k].opcode, "JMX") for k in region):
        return False
    seen, todo = set(), [(head, False)]
    while todo:
        k, read = todo.pop()
        if (k, read) in seen or k not in region:
            continue
        seen.add((k, read))
        i = ins[k]
        read = read or _reads_shared(i)
        if k == back:
            if read:
                return True                         # a whole pass that reads without a wait
            continue
        if _is_wait(i) or matches(i.opcode, "EXIT") or matches(i.opcode, "RET"):
            continue
        if matches(i.opcode, "BRA"):
            t = _branch_target(i)
            if t in at:
                todo.append((at[t], read))
            if i.predicate:
                todo.append((k + 1, read))
        else:
            todo.append((k + 1, read))
    return False


def expect_cp_async_wait(mod, kernel: str, most: int, why: str, *, deepest: bool = False) -> list[int]:
    """Raise SassMismatch (saying `why`) unless `kernel` waits on its cp.async groups, every wait leaves at most
    `most` groups in flight (a larger N lets a tile be read before it lands), and no read of shared memory comes
    where no wait stands before it (cp_async_reads_before_wait). deepest: some wait must leave exactly `most` (with
    only smaller N the ring keeps fewer loads in flight than it was built for; a wait<0> that drains the last tiles
    is allowed beside it). Returns the N of each wait."""
    ins = instructions(mod, kernel)[kernel]
    waits = cp_async_waits(ins)
    name = f"cp.async wait count in the SASS of kernel {kernel}"
    if not waits or max(waits) > most or (deepest and max(waits) < most):
        found = f"waits {waits} (DEPBAR.LE SB0, N)" if waits else "no cp.async.wait_group (DEPBAR.LE SB0, N)"
        want = f"the largest N = {most}" if deepest else f"N <= {most}"
        msg = f"{getattr(mod, 'todo', '')}SASS of kernel {kernel} for {mod.arch}: {found}; expected {want}: {why}"
        hooks.failed(name, msg)
        raise SassMismatch(msg)
    early = cp_async_reads_before_wait(ins)
    if early:
        msg = (f"{getattr(mod, 'todo', '')}SASS of kernel {kernel} for {mod.arch}: the wait is in the wrong place: "
               f"{'; '.join(early)}. {why}")
        hooks.failed(name, msg)
        raise SassMismatch(msg)
    hooks.passed(name, f"waits {waits}, at most {most} group{'s' * (most != 1)} in flight, each read after a wait")
    return waits


_BRANCH_TARGET = re.compile(r"0x[0-9a-f]+")


def _branch_target(i) -> int | None:
    """The offset a BRA jumps to (its hexadecimal operand), or None."""
    return next((int(o, 16) for o in i.operands if _BRANCH_TARGET.fullmatch(o)), None)


def _writes_predicate(i, pred: str) -> bool:
    """Could `i` write predicate register `pred`? A predicate destination comes first among the operands (ISETP P2,
    PT, ...; SYNCS.PHASECHK P0, [...]) or right after a register destination (a carry-out: IADD3 R4, P0, PT, ...;
    LEA.HI R5, P1, ...). Either run of predicates is taken as written: a source among them only stops the search
    for a wait's branch early, which counts that wait's retry as a wait of its own rather than two waits as one."""
    ops = list(i.operands)
    start = 1 if ops and not is_predicate(ops[0]) else 0
    for o in ops[start:]:
        if not is_predicate(o):
            return False
        if o == pred:
            return True
    return False


def _failure_branch(ins, k: int, pred: str | None, joins: set[int], reach: int = 32):
    """The `@!P BRA` that leaves try-wait ins[k] when its phase is not complete: the first branch on `!pred` after
    it, before `pred` is written again, the path ends (an unguarded BRA, EXIT or RET) or another path joins (an
    instruction some branch jumps to: one of `joins`). ptxas may schedule ten or more unrelated instructions between
    the try-wait and its branch."""
    if not pred:
        return None
    for b in ins[k + 1:k + 1 + reach]:
        if b.offset in joins:
            return None
        if matches(b.opcode, "BRA") and b.predicate == f"@!{pred}":
            return b
        if not b.predicate and any(matches(b.opcode, x) for x in ("BRA", "EXIT", "RET")):
            return None
        if _writes_predicate(b, pred):
            return None
    return None


def mbarrier_wait_sites(ins) -> list[int]:
    """The offset of each mbarrier wait of a kernel, one per wait loop in the source, not per try-wait instruction.
    ptxas may compile a loop on mbarrier.try_wait into a first try-wait whose failure branches to an out-of-line
    retry loop with a second try-wait (SYNCS.PHASECHK); that second one belongs to the same wait and is not
    counted."""
    ins = list(ins)
    at = {i.offset: k for k, i in enumerate(ins)}
    tries = [k for k, i in enumerate(ins) if matches(i.opcode, "SYNCS.PHASECHK")]
    retries = set()
    joins = {t for i in ins if matches(i.opcode, "BRA") and (t := _branch_target(i)) is not None}
    for k in tries:
        pred = next(iter(ins[k].predicate_operands), None)          # the try-wait's result: P0 = phase complete
        fail = _failure_branch(ins, k, pred, joins)
        if fail is None:
            continue
        target = _branch_target(fail)
        if target not in at:
            continue
        for m in range(at[target], min(at[target] + 4, len(ins))):       # the retry loop's first instructions
            if matches(ins[m].opcode, "SYNCS.PHASECHK"):
                if m != k:
                    retries.add(m)
                break
    return [ins[k].offset for k in tries if k not in retries]


def expect_mbarrier_waits(mod, kernel: str, least: int, why: str) -> list[int]:
    """Raise SassMismatch (saying `why`) unless `kernel` has at least `least` mbarrier wait loops (counted by
    mbarrier_wait_sites, so a wait compiled to a try-wait and its retry counts once). Returns their offsets."""
    sites = mbarrier_wait_sites(instructions(mod, kernel)[kernel])
    name = f"mbarrier waits in the SASS of kernel {kernel}"
    if len(sites) < least:
        found = ", ".join(f"{o:#06x}" for o in sites) or "none"
        msg = (f"{getattr(mod, 'todo', '')}SASS of kernel {kernel} for {mod.arch}: {len(sites)} mbarrier wait(s) "
               f"(SYNCS.PHASECHK at {found}, each with its retry loop); expected at least {least}: {why}")
        hooks.failed(name, msg)
        raise SassMismatch(msg)
    hooks.passed(name, f"{len(sites)} wait(s)")
    return sites


def highlight(sass: str, *patterns: str, context: int = 2, limit: int = 40) -> str:
    """The lines of `sass` that hold `patterns`, with `context` lines around, marked with '>>'."""
    from .errors import FeedbeastError
    if not isinstance(sass, str):     # a Module's attribute lookup said "no kernel named 'splitlines'"
        raise FeedbeastError(f"highlight takes SASS text, not a {type(sass).__name__}: pass mod.sass('kernel_name')")
    _opcode_args(patterns, (), who="highlight")
    lines = sass.splitlines()
    hits = {i for i, ln in enumerate(lines) if any(matches(op, p) for op in opcodes(ln) for p in patterns)}
    keep = sorted({j for i in hits for j in range(i - context, i + context + 1) if 0 <= j < len(lines)})
    out, prev = [], None
    for j in keep[:limit]:
        if prev is not None and j != prev + 1:
            out.append("   ...")
        out.append((">> " if j in hits else "   ") + lines[j])
        prev = j
    return "\n".join(out)

