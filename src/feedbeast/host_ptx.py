"""Integer device code run on the host from its PTX: what a probe kernel computes, read without a GPU.

Chapter 07 explains it (the capstone's tile order read back from `fb::schedule::grouped_unit`). A lab's check reads a small device function back through a probe kernel (lab 07's `raster`, lab 09's `kv_tiles`
and `visible`). On a GPU the probe is launched. Without one, `Kernel.run_on_host` runs the PTX that NVRTC makes of
the probe here, one thread after another, each instruction as the PTX ISA defines it (PTX ISA, "Instruction Set":
the integer arithmetic, comparison and selection, logic and shift, data movement and conversion, and control flow
instructions).

Only what integer code of one thread needs is modelled: registers of the integer and predicate types, the kernel's
parameters, global loads and stores into the numpy arrays handed in for its pointers, branches. Threads run one after
another, so nothing through which they could see each other can be: an instruction outside that set (floating point,
shared memory, barriers, shuffles, atomics, calls) raises HostRunUnsupported, naming it, before anything runs; so does
a special register it does not model (`%clock`, `%smid`) when it is read, and a run longer than the host can afford
(where a GPU would tell: a slow loop, or one that never ends). Where the ISA leaves a result undefined (an integer
division by zero), or a real launch would fault (a store outside its array, a misaligned address), HostRunFault
names the instruction and the source line.
"""
from __future__ import annotations

import os
import re

import numpy as np

from .errors import FeedbeastError


class HostRunUnsupported(FeedbeastError):
    """The kernel uses an instruction the host run does not model: only a GPU can run it."""


class HostRunFault(FeedbeastError):
    """What a GPU run would leave undefined or fault on: a division by zero, a store outside its array, a loop
    that does not end."""


class HostRun:
    """What a host run did: threads run, instructions executed."""

    def __init__(self, kernel: str, threads: int, steps: int):
        self.kernel, self.threads, self.steps = kernel, threads, steps

    def __repr__(self):
        threads = f"{self.threads} thread{'s' * (self.threads != 1)}"
        return f"{self.kernel}: run on the host from its PTX ({threads}, {self.steps} instructions, no GPU)"

    __str__ = __repr__


STEP_LIMIT = 1_000_000       # instructions one thread may execute on the host (about 6 s)
TOTAL_LIMIT = 5_000_000      # ... and all threads of a run together

_INT = re.compile(r"^[sub](8|16|32|64)$")
_SPECIAL = re.compile(r"^%(tid|ntid|ctaid|nctaid)\.([xyz])$")
_LOC = re.compile(r"^\.loc\s+(\d+)\s+(\d+)")
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]+)"', re.M)
# Statements the run needs nothing from: declarations of registers, debug info, hints.
_SKIP = (".reg", ".loc", ".pragma", ".maxntid", ".reqntid", ".minnctapersm", ".maxnreg", ".noreturn")
# Opcodes whose results depend on other threads or on memory the host run does not have.
_WHY = {"bar": "a barrier", "barrier": "a barrier", "shfl": "a warp shuffle", "vote": "a warp vote",
        "atom": "an atomic", "red": "an atomic", "call": "a call of a function that was not inlined",
        "match": "a warp match", "redux": "a warp reduction", "activemask": "the warp's active mask"}


def _bits(t: str) -> int:
    if t == "pred":
        return 1
    m = _INT.match(t)
    if not m:
        raise KeyError(t)
    return int(m[1])


def _wrap(v: int, bits: int) -> int:
    return v & ((1 << bits) - 1)


def _signed(v: int, bits: int) -> int:
    v = _wrap(v, bits)
    return v - (1 << bits) if v >> (bits - 1) else v


class _Instr:
    __slots__ = ("guard", "neg", "op", "parts", "types", "args", "line", "text")

    def __init__(self, guard, neg, op, args, line, text):
        self.guard, self.neg, self.op, self.args, self.line, self.text = guard, neg, op, args, line, text
        self.parts = op.split(".")
        self.types = [p for p in self.parts[1:] if p == "pred" or _INT.match(p)]


def _split_args(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch in "{[") - (ch in "}]")
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + [cur.strip()] if cur.strip() else out


def parse_entry(ptx: str, entry: str) -> tuple[list[tuple[str, str]], list[_Instr], dict[str, int]]:
    """The parameters (name, type), the instructions and the labels (name -> index) of one .entry."""
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\(", ptx)
    if not m:
        raise FeedbeastError(f"the PTX has no kernel {entry!r}")
    close = ptx.index(")", m.end())
    params = []
    for p in ptx[m.end():close].split(","):
        pm = re.match(r"\s*\.param\s+(?:\.align\s+\d+\s+)?\.(\w+)\s+([\w$]+)(\[\d+\])?", p)
        if pm:
            params.append((pm[2], "aggregate" if pm[3] else pm[1]))
    start = ptx.index("{", close)
    depth, i = 0, start
    while True:
        depth += (ptx[i] == "{") - (ptx[i] == "}")
        if depth == 0:
            break
        i += 1
    files = {int(n): os.path.basename(name) for n, name in _FILE.findall(ptx)}
    code, labels, where = [], {}, ""
    call = re.search(r"^\s*(?:@!?%\w+\s+)?call(?:\.uni)?\b[^;]*;", ptx[start:i], re.M)
    if call:                                  # its argument block declares registers and .param space: name the call
        raise HostRunUnsupported(f"{entry} calls a function that was not inlined (`{call[0].strip()}`): only a GPU "
                                 "can run it")
    nested = 0
    for raw in ptx[start + 1:i].splitlines():
        s = raw.split("//", 1)[0].strip()
        if s in ("{", "}"):
            nested += 1 if s == "{" else -1
            continue
        if not s:
            continue
        loc = _LOC.match(s)
        if loc:
            where = f"{files.get(int(loc[1]), 'the source')} line {loc[2]}"
            continue
        if s.startswith(".param"):         # the arguments of a call: a function that was not inlined
            raise HostRunUnsupported(f"{entry} calls a function that was not inlined ({where or 'its PTX'}: `"
                                     f"{s.rstrip(';')}`): only a GPU can run it")
        if s.startswith(".reg") and nested:   # an asm block's own registers may reuse the names outside it
            raise HostRunUnsupported(f"{entry} has an inline asm block with registers of its own "
                                     f"({where or 'its PTX'}), which the host run does not model")
        if s.startswith(_SKIP):
            continue
        if s.endswith(":"):
            labels[s[:-1]] = len(code)
            continue
        if s.startswith("."):
            raise HostRunUnsupported(f"{entry} declares `{s.rstrip(';')}` ({where or 'its PTX'}): memory of its own "
                                     "(a local or shared array), which the host run does not model")
        s = s.rstrip(";").strip()
        guard, neg = None, False
        if s.startswith("@"):
            g, s = s.split(None, 1)
            neg, guard = g.startswith("@!"), g.lstrip("@!")
        op, rest = (re.split(r"\s+", s, maxsplit=1) + [""])[:2]
        code.append(_Instr(guard, neg, op, _split_args(rest.strip()), where, s))
    return params, code, labels


class _Memory:
    """The numpy arrays given for the pointer parameters, each at an address of its own."""
    BASE = 1 << 40

    def __init__(self):
        self.arrays = []        # (base, byte view, the parameter's index)

    def add(self, arr: np.ndarray, index: int) -> int:
        base = self.BASE * (len(self.arrays) + 1)
        self.arrays.append((base, arr.reshape(-1).view(np.uint8), index))
        return base

    def _at(self, addr: int, size: int, what: str):
        for base, buf, index in self.arrays:
            if base <= addr < base + max(len(buf), 1) + (1 << 32):
                off = addr - base
                if off % size:
                    raise HostRunFault(f"{what}: address {off} bytes into argument {index} is not a multiple of the "
                                       f"access's {size} bytes (PTX ISA: addresses must be naturally aligned; a "
                                       "GPU faults: misaligned address)")
                if off + size > len(buf):
                    raise HostRunFault(f"{what}: {size} bytes at byte {off} of argument {index}, whose array has "
                                       f"{len(buf)} bytes (a GPU faults or writes another allocation)")
                return buf, off
        raise HostRunFault(f"{what}: address {addr:#x} is in no array handed to the kernel (a GPU faults: illegal "
                           "address)")

    def check(self, addr: int, size: int, what: str) -> None:
        self._at(addr, size, what)

    def load(self, addr, size, what) -> int:
        buf, off = self._at(addr, size, what)
        return int.from_bytes(buf[off:off + size].tobytes(), "little")

    def store(self, addr, size, value, what):
        buf, off = self._at(addr, size, what)
        buf[off:off + size] = np.frombuffer(_wrap(value, 8 * size).to_bytes(size, "little"), np.uint8)


_CMP = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
        "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "lo": lambda a, b: a < b, "ls": lambda a, b: a <= b,
        "hi": lambda a, b: a > b, "hs": lambda a, b: a >= b}
_BOOL = {"and": lambda a, b: a and b, "or": lambda a, b: a or b, "xor": lambda a, b: a != b}
# The opcodes the run executes; any other is refused before it starts.
_MODELLED = {"add", "sub", "mul", "mad", "div", "rem", "min", "max", "abs", "neg", "and", "or", "xor", "not", "shl",
             "shr", "selp", "setp", "cvt", "mov", "ld", "st", "cvta", "bra", "ret", "exit", "popc", "clz", "brev",
             "bfind", "bfe", "bfi", "shf"}
# (No rounding modes: an integer-to-integer cvt takes none, PTX ISA "cvt"; they come with floating point.)
_MODIFIERS = {"lo", "hi", "wide", "uni", "global", "param", "to", "nc", "volatile", "ca", "cg", "cs", "lu", "cv", "wb",
              "wt", "v2", "v4", "shiftamt", "l", "r", "wrap", "clamp"} | set(_CMP) | set(_BOOL)


class _Thread:
    def __init__(self, params, values, mem, tid, ntid, ctaid, nctaid, entry):
        self.regs: dict[str, int] = {}
        self.params = dict(zip((p for p, _ in params), values))
        self.mem, self.entry = mem, entry
        self.special = {"tid": tid, "ntid": ntid, "ctaid": ctaid, "nctaid": nctaid}

    def fail(self, ins, msg, cls=HostRunFault):
        raise cls(f"{self.entry}, `{ins.text}` ({ins.line or 'its PTX'}): {msg}")

    def value(self, ins, operand: str, t: str) -> int:
        """An operand read as type t: signed types sign-extended, others as unsigned."""
        bits = _bits(t)
        neg = operand.startswith("!")
        if neg:
            operand = operand[1:]
        if operand.startswith("%"):
            sm = _SPECIAL.match(operand)
            if sm:
                v = self.special[sm[1]]["xyz".index(sm[2])]
            elif operand == "%laneid":        # warps are consecutive linear thread ids (CUDA Programming Guide)
                (x, y, z), (nx, ny, _) = self.special["tid"], self.special["ntid"]
                v = (x + nx * (y + ny * z)) % 32
            elif operand in self.regs:
                v = self.regs[operand]
            else:
                self.fail(ins, f"{operand} is read before anything wrote it, or is a special register the host run "
                          "does not model", HostRunUnsupported)
        else:
            try:
                text = operand.rstrip("U")
                v = int(text, 8) if re.fullmatch(r"-?0[0-7]+", text) else int(text, 0)    # PTX: 0NNN is octal
            except ValueError:
                self.fail(ins, f"operand {operand!r} is not an integer register or constant", HostRunUnsupported)
        if t == "pred":
            v = int(bool(v))
            return 1 - v if neg else v
        return _signed(v, bits) if t[0] == "s" else _wrap(v, bits)

    def set(self, reg: str, v: int, t: str):
        self.regs[reg] = _wrap(v, _bits(t))

    def set_extended(self, reg: str, v: int, t: str):
        """What ld and cvt leave in a register wider than their type: sign-extended for signed types, zero-extended
        for the others (PTX ISA, "Operand Size Exceeding Instruction-Type Size")."""
        bits = _bits(t)
        self.regs[reg] = _wrap(_signed(v, bits) if t[0] == "s" else _wrap(v, bits), 64)

    def address(self, ins, operand: str) -> tuple[str, int]:
        m = re.fullmatch(r"\[\s*([%\w$.]+)\s*(?:\+\s*(-?\w+))?\s*\]", operand)
        if not m:
            self.fail(ins, f"address {operand} is not [register] or [register+offset]", HostRunUnsupported)
        off = int(m[2], 0) if m[2] else 0
        return m[1], off


def run(ptx: str, entry: str, grid, block, args, step_limit: int = STEP_LIMIT,
        total_limit: int = TOTAL_LIMIT) -> HostRun:
    """Run kernel `entry` of `ptx` on the host: grid and block as 3-tuples, args in the order of its parameters
    (numpy arrays for pointers, written in place; ints for the others)."""
    params, code, labels = parse_entry(ptx, entry)
    for ins in code:        # refuse what cannot be modelled before anything runs
        head = ins.parts[0]
        if head in _WHY:
            raise HostRunUnsupported(f"{entry} uses {_WHY[head]} (`{ins.text}`, {ins.line or 'its PTX'}): threads "
                                     "run one after another on the host, so only a GPU can run it")
        if head not in _MODELLED or any(p not in _MODIFIERS and not _INT.match(p) and p != "pred" for p in ins.parts[1:]):
            raise HostRunUnsupported(f"{entry} uses `{ins.op}` ({ins.line or 'its PTX'}): the host run models the "
                                     "integer, predicate, global-memory and branch instructions only")
        if head in ("ld", "st") and not ({"global", "param"} & set(ins.parts)):
            raise HostRunUnsupported(f"{entry} uses `{ins.op}` ({ins.line or 'its PTX'}): memory other than its "
                                     "parameters and global arrays")
    if len(args) != len(params):
        raise FeedbeastError(f"{entry} takes {len(params)} parameters, {len(args)} were given")
    mem, values = _Memory(), []
    for i, ((name, t), a) in enumerate(zip(params, args)):
        if isinstance(a, np.ndarray):
            if t not in ("u64", "b64", "s64"):
                raise FeedbeastError(f"{entry}: argument {i} is an array, parameter {name} is .{t}, not a pointer")
            if not a.flags.c_contiguous or not a.flags.writeable:
                raise FeedbeastError(f"{entry}: argument {i} must be a C-contiguous, writeable numpy array")
            values.append(mem.add(a, i))
        elif isinstance(a, (int, np.integer)) and not isinstance(a, bool) and t != "aggregate":
            bits = _bits(t)
            if not -(1 << (bits - 1)) <= int(a) < (1 << bits):
                raise FeedbeastError(f"{entry}: argument {i} = {a} does not fit parameter {name} (.{t})")
            values.append(_wrap(int(a), bits))
        else:
            raise FeedbeastError(f"{entry}: argument {i} ({type(a).__name__}) for parameter {name} (.{t}): the "
                                 "host run takes numpy arrays for pointers and ints for integers")
    steps = 0
    for cz in range(grid[2]):
        for cy in range(grid[1]):
            for cx in range(grid[0]):
                for tz in range(block[2]):
                    for ty in range(block[1]):
                        for tx in range(block[0]):
                            th = _Thread(params, values, mem, (tx, ty, tz), tuple(block), (cx, cy, cz), tuple(grid),
                                         entry)
                            steps += _execute(th, code, labels, min(step_limit, total_limit - steps))
    return HostRun(entry, grid[0] * grid[1] * grid[2] * block[0] * block[1] * block[2], steps)


def _execute(th: _Thread, code, labels, step_limit) -> int:
    pc, steps = 0, 0
    while pc < len(code):
        ins = code[pc]
        pc += 1
        steps += 1
        if steps > step_limit:     # a slow loop or an endless one: only a GPU can tell which, so no verdict here
            th.fail(ins, f"thread {th.special['tid']} of block {th.special['ctaid']} ran past the instructions the "
                    f"host run affords ({STEP_LIMIT:,} a thread, {TOTAL_LIMIT:,} a run) without ending: a long loop, "
                    "or one that never ends", HostRunUnsupported)
        if ins.guard is not None:
            if th.value(ins, ins.guard, "pred") == ins.neg:
                continue
        head, a, types = ins.parts[0], ins.args, ins.types
        t = types[-1] if types else "b32"
        if head in ("ret", "exit"):
            break
        if head == "bra":
            if a[0] not in labels:
                th.fail(ins, f"label {a[0]} not found", HostRunUnsupported)
            pc = labels[a[0]]
            continue
        if head == "ld" and "param" in ins.parts:
            name, off = th.address(ins, a[1])
            if off or th.params.get(name) is None:
                th.fail(ins, f"parameter {name}+{off} is not a scalar parameter", HostRunUnsupported)
            th.set_extended(a[0], th.params[name], t)
            continue
        if head in ("ld", "st"):
            vec = 4 if "v4" in ins.parts else 2 if "v2" in ins.parts else 1
            size = _bits(t) // 8
            regs_ = (a[0] if head == "ld" else a[1]).strip("{}").split(",")
            base, off = th.address(ins, a[1] if head == "ld" else a[0])
            addr = th.value(ins, base, "u64") + off
            where = f"{th.entry}, `{ins.text}` ({ins.line})"
            th.mem.check(addr, size * vec, where)      # a vector access is aligned to its whole size
            for k, r in enumerate(x.strip() for x in regs_[:vec]):
                if head == "ld":
                    th.set_extended(r, th.mem.load(addr + k * size, size, where), t)
                else:
                    th.mem.store(addr + k * size, size, th.value(ins, r, t), where)
            continue
        if head == "mov" and "{" in a[0] + a[1]:     # mov.b64 {lo, hi}, d / mov.b64 d, {lo, hi}: halves
            bits = _bits(t)
            if a[0].startswith("{"):
                parts = [x.strip() for x in a[0].strip("{}").split(",")]
                v, w = th.value(ins, a[1], t), bits // len(parts)
                for k, r in enumerate(parts):
                    if r != "_":
                        th.set(r, v >> (k * w), f"b{w}")
            else:
                parts = [x.strip() for x in a[1].strip("{}").split(",")]
                w = bits // len(parts)
                th.set(a[0], sum(th.value(ins, r, f"b{w}") << (k * w) for k, r in enumerate(parts)), t)
            continue
        if head in ("mov", "cvta"):
            th.set(a[0], th.value(ins, a[1], t if head == "mov" else "u64"), t if head == "mov" else "u64")
            continue
        if head == "cvt":
            if len(types) != 2 or "pred" in types:
                th.fail(ins, "only integer-to-integer conversions are modelled", HostRunUnsupported)
            th.set_extended(a[0], th.value(ins, a[1], types[1]), types[0])
            continue
        if head == "setp":
            cmp = next(p for p in ins.parts if p in _CMP)
            r = _CMP[cmp](th.value(ins, a[1], t), th.value(ins, a[2], t))
            dests = a[0].split("|")
            q = not r
            boolop = next((p for p in ins.parts if p in _BOOL), None)
            if boolop:
                c = bool(th.value(ins, a[3], "pred"))
                r, q = _BOOL[boolop](r, c), _BOOL[boolop](q, c)
            th.set(dests[0], int(r), "pred")
            if len(dests) > 1:
                th.set(dests[1], int(q), "pred")
            continue
        if head == "selp":
            th.set(a[0], th.value(ins, a[1] if th.value(ins, a[3], "pred") else a[2], t), t)
            continue
        bits = _bits(t)
        v = [th.value(ins, x, t) for x in a[1:]]
        if head == "mul" or head == "mad":
            wide = "wide" in ins.parts
            p = v[0] * v[1]
            if "hi" in ins.parts:
                p >>= bits
            if head == "mad":
                c = th.value(ins, a[3], (t[0] + str(2 * bits)) if wide else t)
                p += c
            th.set(a[0], p, (t[0] + str(2 * bits)) if wide else t)
        elif head in ("div", "rem"):
            if v[1] == 0:
                th.fail(ins, f"{head} by zero (thread {th.special['tid']}): the PTX ISA leaves the result "
                        "unspecified")
            q = abs(v[0]) // abs(v[1]) * (1 if (v[0] < 0) == (v[1] < 0) else -1)     # C's division: toward zero
            th.set(a[0], q if head == "div" else v[0] - q * v[1], t)
        elif head == "shl" or head == "shr":
            n = th.value(ins, a[2], "u32")
            if head == "shl":
                r = 0 if n >= bits else v[0] << n
            else:
                r = (v[0] >> min(n, bits)) if t[0] == "s" else (0 if n >= bits else v[0] >> n)
            th.set(a[0], r, t)
        elif head == "bfind":            # the most significant non-sign bit (PTX ISA "bfind"): __ffs, __clz
            x = _wrap(~v[0] if v[0] < 0 else v[0], bits)
            pos = x.bit_length() - 1
            th.set(a[0], -1 if pos < 0 else (bits - 1 - pos if "shiftamt" in ins.parts else pos), "u32")
        elif head == "shf":              # funnel shift of b:a (PTX ISA "shf"): __funnelshift_l / _r
            n = min(v[2] & 0xffffffff, 32) if "clamp" in ins.parts else v[2] & 31
            pair = (v[1] << 32) | v[0]
            th.set(a[0], (pair << n) >> 32 if "l" in ins.parts else pair >> n, "b32")
        elif head == "bfe":              # bit field extract (PTX ISA "bfe")
            pos, length, x = v[1] & 0xff, v[2] & 0xff, _wrap(v[0], bits)
            sign = (x >> min(pos + length - 1, bits - 1)) & 1 if t[0] == "s" and length else 0
            th.set(a[0], sum((((x >> (pos + i)) & 1) if i < length and pos + i < bits else sign) << i
                             for i in range(bits)), t)
        elif head == "bfi":              # bit field insert of a into b (PTX ISA "bfi")
            pos, length, r = v[2] & 0xff, v[3] & 0xff, _wrap(v[1], bits)
            for i in range(length):
                if pos + i < bits:
                    r = r & ~(1 << (pos + i)) | (((v[0] >> i) & 1) << (pos + i))
            th.set(a[0], r, t)
        elif head in ("and", "or", "xor"):
            r = {"and": v[0] & v[1], "or": v[0] | v[1], "xor": v[0] ^ v[1]}[head]
            th.set(a[0], r, t)
        elif head == "not":
            th.set(a[0], ~v[0] if t != "pred" else 1 - v[0], t)
        else:
            r = {"add": lambda: v[0] + v[1], "sub": lambda: v[0] - v[1], "min": lambda: min(v),
                 "max": lambda: max(v), "abs": lambda: abs(v[0]), "neg": lambda: -v[0],
                 "popc": lambda: bin(_wrap(v[0], bits)).count("1"),
                 "clz": lambda: bits - _wrap(v[0], bits).bit_length(),
                 "brev": lambda: int(format(_wrap(v[0], bits), f"0{bits}b")[::-1], 2)}[head]()
            th.set(a[0], r, "u32" if head in ("popc", "clz") else t)
    return steps
