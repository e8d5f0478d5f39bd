"""SASS: the machine code the GPU runs, read with cuobjdump (no GPU needed).

`expect_sass(mod, "LDGSTS", "DEPBAR")` fails naming each missing instruction. Names match by prefix
on '.' boundaries: "SYNCS.ARRIVE" matches "SYNCS.ARRIVE.TRANS64.A1T0".
"""
from __future__ import annotations

import collections
import re
import shutil
import subprocess
import tempfile

from . import verdicts
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
        raise FeedbeastError(f"{name} not found: install the nvidia-cuda-{name} wheel (make lab does) "
                             "or put a CUDA toolkit's bin/ on PATH")
    return p


def _run(args, cubin: bytes) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        r = subprocess.run([*args, f.name], capture_output=True, text=True)
    if r.returncode:
        raise FeedbeastError(f"{' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout


_FUNC = re.compile(r"^\s*Function : (\S+)\s*$", re.MULTILINE)
_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", re.IGNORECASE)


def sass_text(cubin: bytes, kernel: str | None = None) -> str:
    """SASS of one kernel (or all), instructions only: '/*0040*/  LDGSTS.E.BYPASS.128 [R3], [R4.64] ;'."""
    if hasattr(cubin, "code"):   # a cuda.core ObjectCode (what Numba hands back)
        cubin = bytes(cubin.code)
    raw = _run([tool("cuobjdump"), "--dump-sass"], cubin)
    chunks = _FUNC.split(raw)   # [preamble, name1, body1, name2, body2...]
    out = []
    for name, body in zip(chunks[1::2], chunks[2::2]):
        if kernel is not None and name != kernel:
            continue
        lines = [ln.split(";")[0].strip() + " ;" for ln in body.splitlines() if _INSN.search(ln)]
        out.append(f"// {name}\n" + "\n".join(lines))
    if kernel is not None and not out:
        raise FeedbeastError(f"no kernel {kernel!r} in this cubin")
    return "\n".join(out)


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


def expect_sass(mod, *required: str, kernel: str | None = None, forbid: tuple = ()) -> collections.Counter:
    """Assert that the SASS of `mod` (a Module) has every `required` opcode and none of `forbid`.

    Returns the histogram of the matched instructions. Raises SassMismatch naming what is missing.
    """
    hist = opcode_histogram(mod.sass(kernel))
    where = f"kernel {kernel}" if kernel else f"module ({', '.join(mod.kernel_names)})"
    missing = [p for p in required if not any(matches(op, p) for op in hist)]
    present = [p for p in forbid if any(matches(op, p) for op in hist)]
    if missing or present:
        msg = [f"SASS of {where} for {mod.arch}:"]
        if missing:
            msg.append(f"  missing {', '.join(missing)}")
        if present:
            msg.append(f"  should not contain {', '.join(present)}")
        top = ", ".join(f"{op}×{n}" for op, n in hist.most_common(12))
        msg.append(f"  most frequent instructions: {top}")
        verdicts.failed(f"SASS of {where}", "\n".join(msg))
        raise SassMismatch("\n".join(msg))
    verdicts.passed(f"SASS of {where}", ", ".join(required))
    return collections.Counter({p: sum(n for op, n in hist.items() if matches(op, p)) for p in required})


def proxy_fences(sass: str) -> int:
    """How many `fence.proxy.async.shared::cta` the SASS has. On sm_90 each is a MEMBAR.ALL.CTA directly
    followed by FENCE.VIEW.ASYNC.S; a FENCE.VIEW.ASYNC.S alone (after mbarrier initialisation) is another
    fence."""
    ops = opcodes(sass)
    return sum(1 for a, b in zip(ops, ops[1:]) if matches(a, "MEMBAR") and b == "FENCE.VIEW.ASYNC.S")


def expect_proxy_fence(mod, kernel: str, why: str) -> int:
    """Raise SassMismatch (saying `why` the fence is needed) if `kernel` has no shared-memory proxy fence."""
    n = proxy_fences(mod.sass(kernel))
    name = f"proxy fence in the SASS of kernel {kernel}"
    if n == 0:
        msg = (f"SASS of kernel {kernel} for {mod.arch}: no fence.proxy.async.shared::cta "
               f"(MEMBAR.ALL.CTA then FENCE.VIEW.ASYNC.S): {why}")
        verdicts.failed(name, msg)
        raise SassMismatch(msg)
    verdicts.passed(name, f"{n} fence(s)")
    return n


def highlight(sass: str, *patterns: str, context: int = 2, limit: int = 40) -> str:
    """The lines of `sass` that hold `patterns`, with `context` lines around, marked with '>>'."""
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

