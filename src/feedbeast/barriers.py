"""A barrier every thread of the block must reach, read from a Numba kernel's Python source. Chapter 01 explains the
barrier (and its pitfall in a branch); labs 01 and 02 check their kernels with it.

"__syncthreads() is allowed in conditional code but only if the conditional evaluates identically across the
entire thread block, otherwise the code execution is likely to hang or produce unintended side effects" (CUDA C++
Programming Guide, "Synchronization Functions"; `cuda.syncthreads()` is that barrier, `bar.sync 0` in PTX). A thread
that has returned no longer takes part (PTX ISA, "exit": a barrier waiting only on exited threads is released), so
`if i >= n: return` before a barrier is fine.

Numba's CUDA simulator releases a barrier once every live thread waits at *some* `syncthreads()`, so a barrier in a
branch that only part of the block takes runs there as if it were right. `divergent_barriers(kernel)` finds such
barriers in the source instead: a `syncthreads()` inside an `if`, `while` or `for` whose condition or range depends
on the thread (its `threadIdx`, `cuda.grid`, `laneid`, an atomic's old value, a shuffle or a vote, a
per-thread `cuda.local.array` stored from any of them, or a name computed from them), or in a loop that a thread
may leave early (`break`, `continue`) under such a condition. It reads the source; it does not run the kernel, and
it reads the kernel alone: a barrier inside a device function the kernel calls, and an index returned by one, are not
followed (the check can miss those; it does not flag what is right).
"""
from __future__ import annotations

import ast

BARRIERS = ("syncthreads", "syncthreads_count", "syncthreads_and", "syncthreads_or")
_THREAD = ("threadIdx", "laneid")          # attributes of `cuda` that differ between the threads of a block
_THREAD_CALLS = ("grid",)                  # cuda.grid(n): the thread's global index
# What returns a different value in different threads: an atomic's old value (cuda.atomic.add(...)), a lane's
# shuffle or vote (warp-wide at most: the warps of a block differ), a per-thread local array's element.
_THREAD_VALUES = ("shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync", "ballot_sync", "activemask",
                  "lanemask_lt", "match_any_sync", "match_all_sync", "all_sync", "any_sync", "eq_sync")


def _is_barrier(node, calls=None) -> bool:
    """A `cuda.syncthreads()` (or its _count/_and/_or forms), or a call of a device function in `calls` (the ones
    that reach a barrier)."""
    return _weight(node, calls) > 0


def _weight(node, calls=None) -> int:
    """How many barriers one call reaches on its longest path: 1 for a barrier, a device function's own count."""
    if not isinstance(node, ast.Call):
        return 0
    if isinstance(node.func, ast.Attribute) and node.func.attr in BARRIERS:
        return 1
    return (calls or {}).get(node.func.id, 0) if isinstance(node.func, ast.Name) else 0


def _names(target) -> list[str]:
    """The variables an assignment binds: names, in tuples and lists and starred; not the names inside an element
    or attribute stored to (`tile[1 - cur, f // tw] = v` binds nothing: its indices are read, not set)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in _names(e)]
    if isinstance(target, ast.Starred):
        return _names(target.value)
    return []


class _Reader:
    """Which names differ between the threads of a block where each condition is read: a flow-sensitive pass over
    the function (an assignment from a value the whole block shares ends a name's dependence on the thread; a
    branch's two sides and a loop's passes are joined), on the data the names are computed from."""

    def __init__(self, func: ast.FunctionDef, initial=frozenset(), calls=None):
        self.func, self.at, self.initial, self.calls = func, {}, frozenset(initial), calls or {}
        # per-thread arrays (cuda.local.array): an element stored from what differs between threads differs too
        self.local = {t.id for n in ast.walk(func) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                      and isinstance(n.value.func, ast.Attribute) and n.value.func.attr == "array"
                      and isinstance(n.value.func.value, ast.Attribute) and n.value.func.value.attr == "local"
                      for t in n.targets if isinstance(t, ast.Name)}
        self.thread = self._flow()

    def depends(self, expr, names=None) -> bool:
        """Does `expr` differ between the threads of a block, with `names` (default: any seen) thread-dependent?"""
        names = self.thread if names is None else names
        for n in ast.walk(expr):
            if isinstance(n, ast.Attribute) and n.attr in _THREAD:
                return True
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and (
                    n.func.attr in _THREAD_CALLS + _THREAD_VALUES
                    or isinstance(n.func.value, ast.Attribute) and n.func.value.attr == "atomic"):
                return True
            if isinstance(n, ast.Name) and n.id in names:
                return True
        return False

    def _flow(self) -> frozenset:
        seen: set[str] = set()

        def assign(state, target, value):
            if isinstance(target, ast.Subscript):          # an element: the array stays as thread-dependent as it was,
                root = target.value                        # and a local one becomes so from a thread's own value
                while isinstance(root, (ast.Subscript, ast.Attribute)):
                    root = root.value
                if isinstance(root, ast.Name) and root.id in self.local and (
                        self.depends(value, state) or self.depends(target.slice, state)):
                    return state | {root.id}
                return state
            names = set(_names(target))
            return state | names if self.depends(value, state) else state - names

        def walrus(state, expr):
            for n in ast.walk(expr) if expr is not None else ():
                if isinstance(n, ast.NamedExpr):
                    state = assign(state, n.target, n.value)
            return state

        def block(stmts, state):
            for st in stmts:
                state = one(st, state)
                seen.update(state)
            return state

        def loop(st, entry, bind):
            s = entry
            while True:
                self.at[id(st)] = s
                out = block(st.body, bind(s))
                new = s | out
                if new == s:
                    return s
                s = new

        def one(st, state):
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                return state
            if isinstance(st, ast.Assign):
                state, old = walrus(state, st.value), state
                for t in st.targets:
                    if isinstance(t, ast.Tuple) and isinstance(st.value, ast.Tuple) and len(t.elts) == len(st.value.elts):
                        for te, ve in zip(t.elts, st.value.elts):     # a, b = x, y: each from the state before
                            names = set(_names(te))
                            state = state | names if self.depends(ve, old) else state - names
                    else:
                        state = assign(state, t, st.value)
                return state
            if isinstance(st, ast.AugAssign):
                if isinstance(st.target, ast.Subscript):
                    return assign(state, st.target, st.value)
                return state | set(_names(st.target)) if self.depends(st.value, state) else state
            if isinstance(st, ast.AnnAssign):
                return assign(state, st.target, st.value) if st.value is not None else state
            if isinstance(st, ast.If):
                state = walrus(state, st.test)
                self.at[id(st)] = state
                return block(st.body, state) | block(st.orelse, state)
            if isinstance(st, ast.For):
                state = walrus(state, st.iter)
                head = loop(st, state, lambda s: assign(s, st.target, st.iter))
                self.at[id(st)] = state          # the range is read once, before the first pass
                return block(st.orelse, head) | head
            if isinstance(st, ast.While):
                state = walrus(state, st.test)
                head = loop(st, state, lambda s: s)
                return block(st.orelse, head) | head
            if isinstance(st, (ast.With, ast.AsyncWith)):
                for item in st.items:
                    if item.optional_vars is not None:
                        state = assign(state, item.optional_vars, item.context_expr)
                return block(st.body, state)
            if isinstance(st, ast.Try):
                body = block(st.body, state)
                out = block(st.orelse, body)
                for h in st.handlers:
                    out |= block(h.body, state | body)
                return block(st.finalbody, out)
            for field in ("value", "test"):              # an expression statement, a return, an assert
                state = walrus(state, getattr(st, field, None))
            return state

        seen.update(self.initial)
        block(self.func.body, set(self.initial))
        return frozenset(seen)

    def divergent(self) -> list[tuple[int, int]]:
        """(line of the barrier, line of the condition that splits the block) for each barrier found."""
        out: list[tuple[int, int]] = []

        def barriers_in(stmts):
            return [c for s in stmts for c in ast.walk(s) if _is_barrier(c, self.calls)]

        def leaves_early(loop) -> int | None:
            """The line of a thread-dependent `if` holding a break/continue of this loop (not of an inner one)."""
            def walk(stmts, guard):
                for s in stmts:
                    if isinstance(s, (ast.Break, ast.Continue)) and guard:
                        return guard
                    if isinstance(s, ast.If):
                        g = guard or (s.lineno if self.depends(s.test, self.at.get(id(s))) else None)
                        hit = walk(s.body, g) or walk(s.orelse, g)
                        if hit:
                            return hit
                    elif isinstance(s, (ast.With, ast.Try)):
                        hit = walk(getattr(s, "body", []), guard)
                        if hit:
                            return hit
                return None
            return walk(loop.body, None)

        def visit(stmts, guard):
            for s in stmts:
                if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                    continue
                if isinstance(s, (ast.If, ast.While)):
                    g = guard or (s.lineno if self.depends(s.test, self.at.get(id(s))) else None)
                    if isinstance(s, ast.While) and g is None:
                        g = leaves_early(s)
                    visit(s.body, g)
                    visit(s.orelse, g)
                elif isinstance(s, ast.For):
                    g = guard or (s.lineno if self.depends(s.iter, self.at.get(id(s))) else None) or leaves_early(s)
                    visit(s.body, g)
                    visit(s.orelse, g)
                elif isinstance(s, (ast.With, ast.Try)):
                    for part in ("body", "orelse", "finalbody"):
                        visit(getattr(s, part, []), guard)
                    for h in getattr(s, "handlers", []):
                        visit(h.body, guard)
                elif guard:
                    out.extend((c.lineno, guard) for c in barriers_in([s]))

        visit(self.func.body, None)
        return out


def _parsed(kernel):
    """(the function's AST, its first line in its file, its source lines), or None when the source cannot be read."""
    import inspect
    import textwrap
    fn = getattr(kernel, "py_func", kernel)
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    src = textwrap.dedent("".join(lines))
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return None
    func = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    return None if func is None else (func, first, src.splitlines())


def device_functions(kernel) -> dict[str, object]:
    """The Numba device functions a kernel calls by a global name, and those they call ({name: Python function})."""
    import dis
    out: dict[str, object] = {}

    def visit(fn):
        for i in dis.get_instructions(fn.__code__):
            if i.opname == "LOAD_GLOBAL" and i.argval not in out:
                py = getattr(fn.__globals__.get(i.argval), "py_func", None)
                if py is not None:
                    out[i.argval] = py
                    visit(py)
    visit(getattr(kernel, "py_func", kernel))
    return out


def _most(stmts, calls, loops=None, first=1, v=None) -> int:
    """The most barriers one pass of `stmts` reaches on one path (see most_per_iteration); `loops` collects each
    loop's own count, by file line."""
    loops = {} if loops is None else loops
    n = 0
    for st in stmts:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(st, ast.If):
            n += _most(st.orelse, calls, loops, first, v) if _once(st.test, v) else max(
                _most(st.body, calls, loops, first, v), _most(st.orelse, calls, loops, first, v))
        elif isinstance(st, (ast.For, ast.While)):
            inner = _most(st.body, calls, loops, first, _counter(st))
            if inner:
                loops[first + st.lineno - 1] = inner
            k = _trips(st)
            n += (k * inner if k is not None else 0) + _most(st.orelse, calls, loops, first, v)
        elif isinstance(st, (ast.With, ast.Try)):
            n += _most(st.body, calls, loops, first, v) + _most(getattr(st, "finalbody", []), calls, loops, first, v)
        else:
            n += sum(_weight(c, calls) for c in ast.walk(st))
    return n


class _Kernel:
    """A kernel's source and that of the device functions it calls: which of them reach a barrier (and how many on
    one path of one call), each parsed once."""

    def __init__(self, kernel):
        self.parsed = _parsed(kernel)
        self.devices = {name: (py, _parsed(py)) for name, py in device_functions(kernel).items()}
        self.unread = sorted(n for n, (_, p) in self.devices.items() if p is None)
        self.calls: dict[str, int] = {}
        for _ in range(len(self.devices) + 1):          # a device function's count includes its callees'
            calls = {n: _most(p[0].body, self.calls) for n, (_, p) in self.devices.items() if p is not None}
            calls = {n: c for n, c in calls.items() if c}
            if calls == self.calls:
                break
            self.calls = calls


def divergent_barriers(kernel) -> list[str] | None:
    """Each barrier of a Numba kernel (or a plain function) that not every thread of the block may reach, as
    'line N: <the barrier> under line M: <the condition>' (file line numbers); [] when there is none; None when the
    source cannot be read (a kernel made at run time with no file)."""
    k = _Kernel(kernel)
    if k.parsed is None:
        return None
    func, first, text = k.parsed
    reader = _Reader(func, calls=k.calls)
    out = [f"line {first + b - 1}: {text[b - 1].strip()} under line {first + g - 1}: {text[g - 1].strip()}"
           for b, g in reader.divergent()]
    # A device function that reaches a barrier: read with its parameters as thread-dependent as what any call
    # passes them (a call inside a branch that splits the block is reported above, as the kernel's own barrier).
    readers = [reader]
    for name, (py, parsed) in k.devices.items():
        if parsed is None or name not in k.calls:
            continue
        dfunc, dfirst, dtext = parsed
        params = [a.arg for a in dfunc.args.posonlyargs + dfunc.args.args]
        thread = set()
        for r in readers:
            for c in ast.walk(r.func):
                if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == name:
                    thread |= {p for p, a in zip(params, c.args) if r.depends(a)}
                    thread |= {kw.arg for kw in c.keywords if kw.arg in params and r.depends(kw.value)}
        dreader = _Reader(dfunc, initial=thread, calls=k.calls)
        readers.append(dreader)
        out += [f"line {dfirst + b - 1}: {dtext[b - 1].strip()} under line {dfirst + g - 1}: {dtext[g - 1].strip()} "
                f"(in the device function {name})" for b, g in dreader.divergent()]
    return out


def barriers_by_loop(kernel) -> dict[int | None, list[int]] | None:
    """The kernel's barriers grouped by the innermost loop around each: {line of the loop (None: no loop): [lines of
    its barriers]} (file line numbers); {} when it has none; None when the source cannot be read. A barrier's count
    per iteration is what a pipeline's design fixes (chapter 02: one per tile with two buffers, two with one)."""
    k = _Kernel(kernel)
    if k.parsed is None:
        return None
    func, first, _ = k.parsed
    out: dict[int | None, list[int]] = {}

    def visit(node, loop):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            if _is_barrier(child, k.calls):
                out.setdefault(loop, []).append(first + child.lineno - 1)
            visit(child, first + child.lineno - 1 if isinstance(child, (ast.For, ast.While)) else loop)

    visit(func, None)
    return out


def most_per_iteration(kernel) -> dict[int, int] | None:
    """For each loop of the kernel that holds a barrier, the most barriers one pass of its body can reach on one path
    ({file line of the loop: count}). What a pass counts:
    - an if/else, its larger branch;
    - an `if` that holds on one pass at most (`if t == 0:` or `if t == n - 1:`, t the loop's own `range` variable: a
      prologue or epilogue folded into the loop), its `else` only: the steady state is what a design fixes;
    - a loop inside it with a constant trip count (`for phase in range(2)`), its count times that many: such a loop is
      part of each pass;
    - a loop inside it with a trip count that varies (a tile loop inside a grid-stride loop, a `while`), nothing: that
      loop is counted as a loop of its own.
    None when the source cannot be read."""
    k = _Kernel(kernel)
    if k.parsed is None:
        return None
    func, first, _ = k.parsed
    out: dict[int, int] = {}
    _most(func.body, k.calls, out, first)
    return out


def _trips(loop) -> int | None:
    """The trip count of `for _ in range(<int literals>)` or over a tuple literal; None when it varies."""
    if not isinstance(loop, ast.For):
        return None
    it = loop.iter
    if isinstance(it, (ast.Tuple, ast.List)):
        return len(it.elts)
    if (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and not it.keywords
            and 1 <= len(it.args) <= 3):
        try:
            return len(range(*[ast.literal_eval(a) for a in it.args]))
        except (ValueError, TypeError):
            return None
    return None


def _counter(loop) -> str | None:
    """The loop's variable when it takes each value once: `for t in range(...)`, t not assigned in the body."""
    if not (isinstance(loop, ast.For) and isinstance(loop.target, ast.Name) and isinstance(loop.iter, ast.Call)
            and isinstance(loop.iter.func, ast.Name) and loop.iter.func.id == "range"):
        return None
    v = loop.target.id
    for n in ast.walk(ast.Module(body=loop.body, type_ignores=[])):
        targets = (n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, (ast.AugAssign,
                   ast.AnnAssign, ast.NamedExpr, ast.For)) else [])
        if any(v in _names(t) for t in targets):
            return None
    return v


def _once(test, v) -> bool:
    """Does `test` hold on one pass at most of a loop whose counter is v (`v == e`, e free of v)?"""
    if v is None:
        return False
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_once(t, v) for t in test.values)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        a, b = test.left, test.comparators[0]
        mentions = lambda e: any(isinstance(n, ast.Name) and n.id == v for n in ast.walk(e))   # noqa: E731
        return (isinstance(a, ast.Name) and a.id == v and not mentions(b)) or \
               (isinstance(b, ast.Name) and b.id == v and not mentions(a))
    return False


def barrier_lines_in(kernel, loop_line: int) -> list[int]:
    """The file lines of the barriers inside the loop that starts at `loop_line` (nested loops included)."""
    k = _Kernel(kernel)
    if k.parsed is None:
        return []
    func, first, _ = k.parsed
    for node in ast.walk(func):
        if isinstance(node, (ast.For, ast.While)) and first + node.lineno - 1 == loop_line:
            return sorted(first + c.lineno - 1 for c in ast.walk(node) if _is_barrier(c, k.calls))
    return []


def unread_device_functions(kernel) -> list[str]:
    """The device functions the kernel calls whose source cannot be read here: their barriers are not counted."""
    return _Kernel(kernel).unread
