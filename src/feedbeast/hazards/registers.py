"""wgmma's registers, checked from what ptxas says when it compiles the normal build (Chapter 04, Chapter 05).

The PTX ISA (wgmma.mma_async; wgmma.wait_group) leaves undefined an access of a wgmma's accumulator or A-fragment
registers between the wgmma.mma_async and the wgmma.wait_group that retires it, and asks for a wgmma.fence between
another instruction's access of those registers and the wgmma that uses them (wgmma.fence). ptxas sees the
registers: where a kernel does either, it serialises the wgmma pipeline or inserts the wait or fence itself, and says
so in its log. Those lines are the evidence; the trace cannot see registers.
"""
from __future__ import annotations

import re

# (what ptxas writes, rule, what it means); other reasons for serialising (extern calls, a pipeline that crosses a
# call, register pressure) are performance, not ordering, and are not listed.
_PTXAS = (
    ("non wgmma instructions reading accumulator registers", "wgmma-register-in-flight",
     "an instruction reads a wgmma's accumulator registers before the wgmma.wait_group that retires it"),
    ("non wgmma instructions defining accumulator registers", "wgmma-register-in-flight",
     "an instruction writes a wgmma's accumulator registers before the wgmma.wait_group that retires it"),
    ("non wgmma instructions defining input registers", "wgmma-register-in-flight",
     "an instruction writes a wgmma's A-fragment registers before the wgmma.wait_group that retires it"),
    ("warpgroup.wait is injected", "wgmma-register-in-flight",
     "registers a wgmma writes are used before a wgmma.wait_group retires it (ptxas added the wait)"),
    ("compiler-inserted WG.DP", "wgmma-register-in-flight",
     "registers a wgmma writes are used, on some path, before a wgmma.wait_group retires it (ptxas added the wait)"),
    ("warpgroup.arrive is injected", "missing-wgmma-fence",
     "registers a wgmma uses were written with no wgmma.fence between the write and the wgmma (ptxas added it)"),
    ("compiler-inserted WG.AR", "missing-wgmma-fence",
     "registers a wgmma uses were written, on some path, with no wgmma.fence before the wgmma (ptxas added it)"),
)
_FUNCTION = re.compile(r"in (?:the )?function '([^']+)'")


def register_hazards(log: str, kernel: str | None = None) -> list[tuple[str, str, str]]:
    """[(rule, meaning, ptxas's line)] for the lines of a ptxas log about `kernel` (None: every function) that say a
    wgmma's registers were touched while it ran or without a fence."""
    out = []
    for line in log.splitlines():
        fn = _FUNCTION.search(line)
        if fn is None or kernel is not None and fn.group(1) != kernel:
            continue
        for words, rule, meaning in _PTXAS:
            if words in line:
                out.append((rule, meaning, line.strip()))
                break
    return list(dict.fromkeys(out))
