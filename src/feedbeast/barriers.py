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
may leave early (`break`, `continue`) under such a condition. It reads the source; it does not run the kernel. The
device functions the kernel calls (by a global or captured name) are read too: a call of one that reaches a barrier
counts as a barrier where it stands, its parameters differ between threads as the arguments a call passes them do,
and a value one returns differs when it comes from the thread. What it cannot follow it does not flag: a barrier
reached through a function held in a container or an argument, an index kept in shared memory.
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

    def __init__(self, func: ast.FunctionDef, initial=frozenset(), calls=None, devices=(), thread_returns=(),
                 tuple_returns=None):
        self.func, self.at, self.initial, self.calls = func, {}, frozenset(initial), calls or {}
        self.devices, self.thread_returns = set(devices), set(thread_returns)
        self.tuple_returns = tuple_returns or {}   # device function: which elements of the tuple it returns differ
        self.before: dict[int, set] = {}       # id(statement): the names thread-dependent before it (any pass)
        # names bound to the atomics module (`atom = cuda.atomic`): `atom.add(...)` returns a thread's own old value
        self.atomic = {t.id for n in ast.walk(func) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Attribute)
                       and n.value.attr == "atomic" for t in n.targets if isinstance(t, ast.Name)}
        # per-thread arrays (cuda.local.array): an element stored from what differs between threads differs too
        self.local = {t.id for n in ast.walk(func) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                      and isinstance(n.value.func, ast.Attribute) and n.value.func.attr == "array"
                      and isinstance(n.value.func.value, ast.Attribute) and n.value.func.value.attr == "local"
                      for t in n.targets if isinstance(t, ast.Name)}
        self.thread = self._flow()

    def depends(self, expr, names=None) -> bool:
        """Does `expr` differ between the threads of a block, with `names` (default: any seen) thread-dependent?"""
        names = self.thread if names is None else names
        stack = [expr]
        while stack:
            n = stack.pop()
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in BARRIERS:
                continue                 # syncthreads_count/_and/_or: one block-wide answer, whatever each thread gave
            if isinstance(n, ast.Attribute) and n.attr in _THREAD:
                return True
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and (
                    n.func.attr in _THREAD_CALLS + _THREAD_VALUES
                    or isinstance(n.func.value, ast.Attribute) and n.func.value.attr == "atomic"
                    or isinstance(n.func.value, ast.Name) and n.func.value.id in self.atomic):
                return True
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in self.devices and (
                    n.func.id in self.thread_returns
                    or any(self.depends(a, names) for a in [*n.args, *(k.value for k in n.keywords)])):
                return True              # a device function that returns the thread's own value, or is given one
            if isinstance(n, ast.Name) and n.id in names:
                return True
            stack.extend(ast.iter_child_nodes(n))
        return False

    def calls_to(self, name: str):
        """(call, the names thread-dependent before its statement) for each call of `name` in the function."""
        for st in ast.walk(self.func):
            if isinstance(st, ast.stmt) and id(st) in self.before:
                for node in _expressions(st):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name:
                        yield node, self.before[id(st)]

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
                self.before[id(st)] = self.before.get(id(st), set()) | set(state)
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
                v = st.value
                elems = (self.tuple_returns.get(v.func.id) if isinstance(v, ast.Call) and isinstance(v.func, ast.Name)
                         and not any(self.depends(a, old) for a in [*v.args, *(k.value for k in v.keywords)])
                         else None)
                for t in st.targets:
                    if isinstance(t, ast.Tuple) and isinstance(v, ast.Tuple) and len(t.elts) == len(v.elts):
                        for te, ve in zip(t.elts, v.elts):     # a, b = x, y: each from the state before
                            names = set(_names(te))
                            state = state | names if self.depends(ve, old) else state - names
                    elif isinstance(t, ast.Tuple) and elems is not None and len(elems) == len(t.elts):
                        for te, differs in zip(t.elts, elems):  # lane, t0 = coords(): each element as returned
                            names = set(_names(te))
                            state = state | names if differs else state - names
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

    def divergent(self, returns: bool = False) -> list[tuple[int, int]]:
        """(line of the barrier, line of the condition that splits the block) for each barrier found; with `returns`,
        the same for each `return` (a function whose threads return at different places returns what differs)."""
        out: list[tuple[int, int]] = []

        def barriers_in(stmts):
            if returns:
                return [c for s in stmts for c in ast.walk(s) if isinstance(c, ast.Return)]
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


def _expressions(st: ast.stmt):
    """The expression nodes of a statement itself, not of the statements nested in it."""
    stack = [c for c in ast.iter_child_nodes(st) if not isinstance(c, ast.stmt)]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(c for c in ast.iter_child_nodes(n) if not isinstance(c, ast.stmt))


def _parsed(kernel):
    """(the function's AST, its first line in its file, its source lines), or None when the source cannot be read."""
    import inspect
    import textwrap
    fn = getattr(kernel, "py_func", kernel)
    try:     # from its code object: inspect follows a function's __wrapped__ (functools.wraps) to another's source
        lines, first = inspect.getsourcelines(fn.__code__)
    except (OSError, TypeError, AttributeError):
        return None
    src = textwrap.dedent("".join(lines))
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return None
    func = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    return None if func is None else (func, first, src.splitlines())


def device_functions(kernel) -> dict[str, object]:
    """The Numba device functions a kernel calls by a global or captured name, and those they call ({name: Python
    function})."""
    import dis
    out: dict[str, object] = {}

    def visit(fn):
        free = _captured(fn)
        for i in dis.get_instructions(fn.__code__):
            if i.opname in ("LOAD_GLOBAL", "LOAD_DEREF") and i.argval not in out:
                value = fn.__globals__.get(i.argval) if i.opname == "LOAD_GLOBAL" else free.get(i.argval)
                py = getattr(value, "py_func", None)
                if py is not None:
                    out[i.argval] = py
                    visit(py)
    visit(getattr(kernel, "py_func", kernel))
    return out


def _barrier_names(values: dict) -> set[str]:
    """The names in `values` (a function's globals and captures) bound to Numba's barriers themselves."""
    import sys
    cuda = sys.modules.get("numba.cuda")
    barriers = [getattr(cuda, b) for b in BARRIERS if hasattr(cuda, b)] if cuda is not None else []
    return {n for n, v in values.items() if any(v is b for b in barriers)}


def _captured(fn) -> dict:
    """A function's globals and captured values ({name: value}; an empty cell left out)."""
    out = dict(fn.__globals__)
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            out[name] = cell.cell_contents
        except ValueError:
            pass
    return out


def _most(stmts, calls, loops=None, first=1, counter=None, consts=None) -> int:
    """The most barriers one pass of `stmts` reaches on one path (see most_per_iteration); `loops` collects each
    loop's own count, by file line; `counter` is (the enclosing loop's counter, the names its body assigns);
    `consts` the function's globals and captured values (a trip count may name one)."""
    loops = {} if loops is None else loops
    n = 0
    for st in stmts:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(st, ast.If):
            n += _most(st.orelse, calls, loops, first, counter, consts) if _once(st.test, counter) else max(
                _most(st.body, calls, loops, first, counter, consts),
                _most(st.orelse, calls, loops, first, counter, consts))
        elif isinstance(st, (ast.For, ast.While)):
            inner = _most(st.body, calls, loops, first, _counter(st), consts)
            if inner:
                loops[first + st.lineno - 1] = inner
            k = _trips(st, consts)
            # a constant trip count: part of each pass; a `while`: there to pass more than once; a `for` over a range
            # that varies (a tile loop inside a grid-stride loop): a loop of its own, counted there
            k = k if k is not None else 2 if isinstance(st, ast.While) else 0
            n += k * inner + _most(st.orelse, calls, loops, first, counter, consts)
        elif isinstance(st, (ast.With, ast.Try)):
            n += _most(st.body, calls, loops, first, counter, consts) + \
                _most(getattr(st, "finalbody", []), calls, loops, first, counter, consts)
        else:
            n += sum(_weight(c, calls) for c in ast.walk(st))
    return n


class _Kernel:
    """A kernel's source and that of the device functions it calls: which of them reach a barrier (and how many on
    one path of one call, at least 1), which return a value that differs between threads, each parsed once."""

    def __init__(self, kernel):
        fn = getattr(kernel, "py_func", kernel)
        self.consts = _captured(fn) if hasattr(fn, "__code__") else {}
        self.parsed = _parsed(kernel)
        self.devices = {name: (py, _parsed(py)) for name, py in device_functions(kernel).items()}
        self.unread = sorted(n for n, (_, p) in self.devices.items() if p is None)
        read = {n: (p, _captured(py)) for n, (py, p) in self.devices.items() if p is not None}
        # `from numba.cuda import syncthreads` (or `... as sync`): a barrier called by its own name; a name that one
        # of these functions' modules binds to something else is none (the names of calls are read, not resolved)
        scopes = [self.consts, *(c for _, c in read.values())]
        named = {n for c in scopes for n in _barrier_names(c)}
        aliases = {n: 1 for n in named if all(n not in c or n in _barrier_names(c) for c in scopes)}
        self.calls: dict[str, int] = dict(aliases)
        for _ in range(len(read) + 1):          # a device function's count includes its callees'
            calls = aliases | {n: max(1, _most(p[0].body, self.calls, consts=c)) for n, (p, c) in read.items()
                               if any(_is_barrier(x, self.calls) for x in ast.walk(p[0]))}
            if calls == self.calls:
                break
            self.calls = calls
        self.thread_returns: set[str] = set()
        self.tuple_returns: dict[str, tuple] = {}
        for _ in range(len(read) + 1):          # with its parameters the same in every thread
            now, tuples = set(), {}
            for n, (p, _) in read.items():
                r = self.reader(p[0])
                split = bool(r.divergent(returns=True))   # threads that return at different places
                rets = [x.value for x in ast.walk(p[0]) if isinstance(x, ast.Return)]
                if split or any(v is not None and r.depends(v) for v in rets):
                    now.add(n)
                if rets and all(isinstance(v, ast.Tuple) and len(v.elts) == len(rets[0].elts) for v in rets):
                    tuples[n] = tuple(split or any(r.depends(v.elts[k]) for v in rets)    # each element's own
                                      for k in range(len(rets[0].elts)))
            if now == self.thread_returns and tuples == self.tuple_returns:
                break
            self.thread_returns, self.tuple_returns = now, tuples

    def reader(self, func, initial=frozenset()) -> _Reader:
        return _Reader(func, initial, self.calls, self.devices, self.thread_returns, self.tuple_returns)


def divergent_barriers(kernel) -> list[str] | None:
    """Each barrier of a Numba kernel (or a plain function) that not every thread of the block may reach, as
    'line N: <the barrier> under line M: <the condition>' (file line numbers); [] when there is none; None when the
    source cannot be read (a kernel made at run time with no file)."""
    k = _Kernel(kernel)
    if k.parsed is None:
        return None
    func, first, text = k.parsed
    reader = k.reader(func)
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
        for r in readers:           # each call judged with what differs between threads where it stands
            for c, state in r.calls_to(name):
                thread |= {p for p, a in zip(params, c.args) if r.depends(a, state)}
                thread |= {kw.arg for kw in c.keywords if kw.arg in params and r.depends(kw.value, state)}
        dreader = k.reader(dfunc, thread)
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
    _most(func.body, k.calls, out, first, consts=k.consts)
    for py, parsed in k.devices.values():      # a device function's own loops (its file lines)
        if parsed is not None:
            _most(parsed[0].body, k.calls, out, parsed[1], consts=_captured(py))
    return out


def _trips(loop, consts=None) -> int | None:
    """The trip count of `for _ in range(...)` whose bounds are int literals or constants of the function (a global
    or captured int), or over a tuple literal; None when it varies."""
    if not isinstance(loop, ast.For):
        return None
    it = loop.iter
    if isinstance(it, (ast.Tuple, ast.List)):
        return len(it.elts)

    def value(a):
        if isinstance(a, ast.Name) and isinstance((consts or {}).get(a.id), int):
            return consts[a.id]
        return ast.literal_eval(a)
    if (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and not it.keywords
            and 1 <= len(it.args) <= 3):
        try:
            return len(range(*[value(a) for a in it.args]))
        except (ValueError, TypeError):
            return None
    return None


def _counter(loop):
    """What a loop's passes tell apart, for `_once`: (its counters: {name that takes a new value on each pass: the
    line from which the body has changed it}, whether they start at 0 or above, the flags its body only ever sets to
    False, the names its body assigns), or None. Counters: `t` of `for t in range(...)` or of `for t, x in
    enumerate(...)`, up to the body's first assignment of t (a nested `for t`); in a `while`, a name that every pass
    advances once by `t += <a positive int>` (in both branches of an if/else, say)."""
    assigned: dict[str, list] = {}
    changed: set[str] = set()           # arrays and objects the body stores into (`x[0] = t + 1`)
    for n in ast.walk(ast.Module(body=loop.body, type_ignores=[])):
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AugAssign) else []):
            root = t
            while isinstance(root, (ast.Subscript, ast.Attribute)):
                root = root.value
            if root is not t and isinstance(root, ast.Name):
                changed.add(root.id)
        if isinstance(n, ast.Assign):
            for t in n.targets:
                for x in _names(t):
                    assigned.setdefault(x, []).append(n)
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr, ast.For)):
            for x in _names(n.target):
                assigned.setdefault(x, []).append(n)
    counters, nonneg = {}, False
    literal = lambda e: e.value if isinstance(e, ast.Constant) and isinstance(e.value, int) else None   # noqa: E731
    # a `continue` of this loop skips what follows it: then only a `for` advances its counter on every pass
    skips = any(isinstance(n, ast.Continue) for n in _own_statements(loop.body))
    if isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call) and isinstance(loop.iter.func, ast.Name) \
            and not any(isinstance(a, ast.Starred) for a in loop.iter.args):
        it, target = loop.iter, loop.target
        if it.func.id == "range" and isinstance(target, ast.Name) and not it.keywords:
            counters = {target.id: None}
            start = it.args[0] if len(it.args) >= 2 else ast.Constant(0)
            step = it.args[2] if len(it.args) == 3 else ast.Constant(1)
            nonneg = (literal(start) or -1) >= 0 if literal(start) != 0 else True
            nonneg = nonneg and (literal(step) or 0) > 0
        elif it.func.id == "enumerate" and isinstance(target, ast.Tuple) and target.elts \
                and isinstance(target.elts[0], ast.Name) and 1 <= len(it.args) <= 2:
            start = it.args[1] if len(it.args) == 2 else next((k.value for k in it.keywords if k.arg == "start"),
                                                               ast.Constant(0))
            counters, nonneg = {target.elts[0].id: None}, literal(start) is not None and literal(start) >= 0
        # the range gives t its value at the top of each pass: a test before the body changes t reads that value
        counters = {v: min((w.lineno for w in assigned.get(v, [])), default=float("inf")) for v in counters}
    elif isinstance(loop, ast.While) and not skips:
        counters = {v: float("inf") for v, where in assigned.items()
                    if all(isinstance(w, ast.AugAssign) and isinstance(w.op, ast.Add) and literal(w.value)
                           and literal(w.value) > 0 for w in where) and _increments(loop.body, v) == (1, 1)}
    # a flag: set only to False in the body, and on every pass that sees it True (directly in the body, or first
    # thing under `if flag:`), so that it is True on one pass at most
    def cleared_where_true(v):
        top = [st for st in loop.body if isinstance(st, ast.Assign)]
        top += [st for g in loop.body if isinstance(g, ast.If) and isinstance(g.test, ast.Name) and g.test.id == v
                for st in g.body if isinstance(st, ast.Assign)]
        return any(v in [x for t in st.targets for x in _names(t)] for st in top)
    flags = {v for v, where in assigned.items() if all(isinstance(w, ast.Assign) and isinstance(w.value, ast.Constant)
                                                       and w.value.value is False for w in where)
             and cleared_where_true(v)} if not skips else set()
    if not counters and not flags:
        return None
    return counters, nonneg, flags, frozenset(assigned) | changed


def _increments(stmts, v) -> tuple:
    """(fewest, most) times running `stmts` advances `v` by a `v += k` statement, over the paths through an if/else;
    an assignment of v anywhere else (a nested loop, a with) counts as any number."""
    lo = hi = 0
    for st in stmts:
        if isinstance(st, ast.AugAssign) and _names(st.target) == [v]:
            lo, hi = lo + 1, hi + 1
        elif isinstance(st, ast.If):
            a, b = _increments(st.body, v), _increments(st.orelse, v)
            lo, hi = lo + min(a[0], b[0]), hi + max(a[1], b[1])
        elif any(isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.NamedExpr, ast.For))
                 and v in [x for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) for x in _names(t)]
                 for n in ast.walk(st)):
            return 0, float("inf")
    return lo, hi


def _own_statements(body):
    """The statements of a loop body, not those of the loops and functions nested in it (their break/continue are
    theirs)."""
    stack = list(body)
    while stack:
        st = stack.pop()
        yield st
        if not isinstance(st, (ast.For, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack.extend(c for c in ast.iter_child_nodes(st) if isinstance(c, ast.stmt))


def _once(test, counter) -> bool:
    """Does `test` hold on one pass at most of the loop `counter` describes (see _counter)? `t == e` with e the
    same on every pass; `not t`, `t < 1`, `t <= 0` for a counter that starts at 0 or above; a flag the body sets to
    False (`if first:`)."""
    if counter is None:
        return False
    counters, nonneg, flags, assigned = counter
    is_counter = lambda e: isinstance(e, ast.Name) and e.id in counters and e.lineno < counters[e.id]   # noqa: E731
    fixed = lambda e: not any(isinstance(n, ast.Name) and (n.id in counters or n.id in assigned)   # noqa: E731
                              for n in ast.walk(e))
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_once(t, counter) for t in test.values)
    if isinstance(test, ast.Name):
        return test.id in flags
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return nonneg and is_counter(test.operand)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        a, op, b = test.left, test.ops[0], test.comparators[0]
        if isinstance(op, ast.Eq):
            return (is_counter(a) and fixed(b)) or (is_counter(b) and fixed(a))
        if is_counter(b) and isinstance(op, (ast.Gt, ast.GtE)):      # 1 > t is t < 1
            a, b, op = b, a, ast.Lt() if isinstance(op, ast.Gt) else ast.LtE()
        k = b.value if isinstance(b, ast.Constant) and isinstance(b.value, int) else None
        return nonneg and is_counter(a) and k is not None and (
            isinstance(op, ast.Lt) and k <= 1 or isinstance(op, ast.LtE) and k <= 0)
    return False


def barrier_lines_in(kernel, loop_line: int) -> list[int]:
    """The file lines of the barriers inside the loop that starts at `loop_line` (nested loops included)."""
    k = _Kernel(kernel)
    for parsed in [k.parsed, *(p for _, p in k.devices.values())]:
        if parsed is None:
            continue
        func, first, _ = parsed
        for node in ast.walk(func):
            if isinstance(node, (ast.For, ast.While)) and first + node.lineno - 1 == loop_line:
                return sorted(first + c.lineno - 1 for c in ast.walk(node) if _is_barrier(c, k.calls))
    return []


def unread_device_functions(kernel) -> list[str]:
    """The device functions the kernel calls whose source cannot be read here: their barriers are not counted."""
    return _Kernel(kernel).unread
