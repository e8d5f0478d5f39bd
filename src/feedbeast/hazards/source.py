"""What in a kernel's own source the trace cannot see: synchronisation and copies outside the fb:: wrappers make
a launch "not checkable", never a silent pass (Chapter 04)."""
from __future__ import annotations


_UNMODELED = (
    (r"\bcuda::barrier\b|\bcuda::pipeline\b|\bcuda::memcpy_async\b", "cuda::barrier / cuda::pipeline"),
    (r"\bcooperative_groups\b|\bthis_grid\s*\(|\bthis_cluster\s*\(", "cooperative groups"),
    (r"\b__syncthreads_(count|and|or)\b", "__syncthreads_count/and/or (bar.red)"),
    (r"\bcuda::ptx::(mbarrier|cp_async|barrier|fence|tcgen05|wgmma)\w*", "cuda::ptx synchronisation or copies"),
    (r"\"[^\"\n]*\b(bar\.arrive|bar\.red|barrier\.(?:arrive|red|cluster\.arrive)|(?<!async\.)mbarrier\.|"
     r"cp\.async(?!\.mbarrier\.arrive)|cp\.reduce\.async|fence\.proxy|wgmma\.|tcgen05\.(?:mma|commit|cp))",
     "raw PTX synchronisation or copies in asm"),
)


def _active_source(source: str, defines: dict | None) -> str:
    """The source without comments and without the #if blocks the preprocessor drops (only conditions it can
    evaluate from the source's own #defines and the build's defines; anything else is kept, to be safe)."""
    import re
    src = re.sub(r"/\*.*?\*/", " ", source or "", flags=re.S)
    src = re.sub(r"//[^\n]*", "", src)
    macros = {str(k): str(v) for k, v in (defines or {}).items()}
    out, stack = [], []          # stack of (this branch live, some branch taken, parent live)

    def value(expr):
        expr = re.sub(r"defined\s*\(?\s*(\w+)\s*\)?", lambda m: "1" if m.group(1) in macros else
                      ("None" if m.group(1).startswith("__") else "0"), expr)
        expr = re.sub(r"[A-Za-z_]\w*", lambda m: m.group(0) if m.group(0) == "None" else
                      (macros.get(m.group(0), "None" if m.group(0).startswith("__") else "0")), expr)
        expr = expr.replace("&&", " and ").replace("||", " or ")
        expr = re.sub(r"!(?!=)", " not ", expr)
        expr = re.sub(r"(\d+)[uUlL]+\b", r"\1", expr)
        try:
            v = eval(expr, {"__builtins__": {}}, {})        # noqa: S307 (digits, operators and None only)
        except Exception:   # noqa: BLE001
            return None
        return v
    for line in src.split("\n"):
        m = re.match(r"\s*#\s*(if|ifdef|ifndef|elif|else|endif|define)\b\s*(.*)", line)
        live = all(s[0] for s in stack)
        if not m:
            if live:
                out.append(line)
            continue
        d, rest = m.group(1), m.group(2).strip()
        if d == "define":
            if live:
                parts = rest.split(None, 1)
                if parts and "(" not in parts[0]:
                    macros[parts[0]] = parts[1] if len(parts) > 1 else "1"
            continue
        if d in ("if", "ifdef", "ifndef"):
            v = (value(rest) if d == "if" else (rest.split()[0] in macros) == (d == "ifdef"))
            on = True if v is None else bool(v)
            stack.append([on, on or v is None, v is None])
        elif d == "elif" and stack:
            top = stack[-1]
            v = value(rest)
            top[0] = top[2] or (not top[1] and (v is None or bool(v)))
            top[1] = top[1] or top[0]
        elif d == "else" and stack:
            top = stack[-1]
            top[0] = top[2] or not top[1]
            top[1] = True
        elif d == "endif" and stack:
            stack.pop()
    return "\n".join(out)


def unmodeled(source: str, defines: dict | None = None) -> str:
    """What in a kernel's own source the checker cannot model ("" when nothing)."""
    import re
    src = _active_source(source, defines)
    code = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', src)       # C++ names outside string literals; asm text inside them
    found = [what for pattern, what in _UNMODELED if re.search(pattern, src if pattern.startswith('\\"') else code)]
    return ", ".join(dict.fromkeys(found))


def across_launches(source: str, defines: dict | None = None) -> str:
    """Programmatic dependent launch in a kernel's own source, outside the fb:: wrappers that record it ("" when
    none): the order it sets is between two launches, which one launch's trace cannot check (PTX ISA:
    griddepcontrol; CUDA C++ Programming Guide: programmatic dependent launch)."""
    import re
    src = _active_source(source, defines)
    if re.search(r"\bgriddepcontrol\b|\bcudaGridDependencySynchronize\b|\bcudaTriggerProgrammaticLaunchCompletion\b",
                 src):
        return ("the order across launches that the kernel's own griddepcontrol sets (programmatic dependent "
                "launch): one launch's trace cannot see the other grid's accesses")
    return ""
