"""Load what a notebook defines -- its %%cuda kernels and its Python helpers -- for tests, grading and tools.

The notebooks are the one source of the course's kernels; everything else reads them through here.

    from feedbeast.course import notebook
    nb = notebook.load("chapters/05-tma.ipynb")
    nb.cuda("ring")                          # CudaCell: .source, .defines, .arch as the cell's magic line says
    mod = nb.compile("ring", STAGES=2)       # the cell's own flags, then these -D overrides
    ns = nb.definitions("prepare", "VARIANTS")   # only what those names need: defs, assignments, imports

A variant of a kernel is a compile-time switch (`nb.compile("coop", USE_SETMAXNREG=0)`), never an edit
of its text. `definitions` runs no cell as a whole: it picks the top-level statements that bind the names
asked for, then, transitively, those binding the names they read, and runs them in notebook order. A
%%cuda cell's --name is bound to its compiled Module when a definition reads it.

A copy with a planted change (a bug a grader must reject, a learner's edit) is the one text edit allowed:

    notebook.planted("solutions/04-mbarrier-ring.ipynb", [(old, new)], to=tmp / "04-bug.ipynb")

and a small notebook for a test is made with `new([markdown("## Check"), "x = 1"], to=path)`.

A line of a notebook is named as the notebook's own messages name it (`at(cells, i, line)`: `lab.cu line 35`,
`producer line 4`, `the code cell under "## Your model" line 2`), never by a cell index: the grader's reports use it.
"""
from __future__ import annotations

import ast
import builtins
import dataclasses
import itertools
import re
import shlex
import symtable
import types
from pathlib import Path

from ..errors import FeedbeastError


def read(path):
    """The notebook as nbformat reads it (version 4)."""
    import nbformat
    return nbformat.read(str(path), as_version=4)


def code(source: str):
    """A code cell (with an id), for new()."""
    import nbformat
    return nbformat.v4.new_code_cell(source)


def markdown(source: str):
    """A Markdown cell (with an id), for new()."""
    import nbformat
    return nbformat.v4.new_markdown_cell(source)


def new(cells=(), *, to=None):
    """A notebook made of `cells` (a string is a code cell; code() and markdown() cells are taken as they are):
    a small lab or a synthetic notebook for a test. Returns it; with `to`, writes it there and returns that path."""
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[code(c) if isinstance(c, str) else c for c in cells])
    return nb if to is None else _write(nb, to)


def _write(nb, to) -> Path:
    import nbformat
    nbformat.write(nb, str(to))
    return Path(to)


def planted(src, replacements=(), *, to=None, once: bool = True, cuda_only: bool = False,
            kernelspec: str | None = None, edit=None):
    """A copy of the notebook at `src` with a change planted in it: a bug for a grader to reject, a learner's
    edit. The one way tests and tools derive one notebook from another.

    replacements: (old, new) pairs made in the code cells (only the %%cuda cells with `cuda_only`). With
        `once`, each `old` must occur exactly once among them; otherwise at least once, and every occurrence
        is replaced. A miss raises ValueError: the notebook changed and the replacement is stale.
    kernelspec: the name the copy's metadata gives its kernel. edit: a function called last with the copy
        (a NotebookNode) to change it in place.
    Returns the copy; with `to`, writes it there (cell ids kept) and returns that path.
    """
    nb = read(src)
    for old, repl in replacements:
        cells = [c for c in nb.cells if c.cell_type == "code" and old in c.source and
                 (not cuda_only or c.source.startswith("%%cuda"))]
        count = sum(c.source.count(old) for c in cells)
        if count == 0 or (once and count > 1):
            where = "%%cuda cells" if cuda_only else "code cells"
            raise ValueError(f"{Path(src).name}: {old!r} occurs {count} times in its {where} (want "
                             f"{'exactly once' if once else 'at least once'}): the notebook changed, "
                             "update the replacement")
        for c in cells:
            c.source = c.source.replace(old, repl)
    if kernelspec:
        nb.metadata["kernelspec"] = {"name": kernelspec, "display_name": kernelspec, "language": "python"}
    if edit is not None:
        edit(nb)
    return nb if to is None else _write(nb, to)


@dataclasses.dataclass(frozen=True)
class CudaCell:
    """One %%cuda cell: its body and the flags of its magic line."""
    name: str
    source: str
    defines: dict
    arch: str | None
    debug: bool
    index: int          # position among the notebook's cells
    path: Path
    min_arch: str | None = None   # --min-arch: the target when there is no GPU and no --arch

    def compile(self, arch: str | None = None, *, debug: bool | None = None, **defines):
        """The cell compiled as the notebook compiles it; `defines` add to or override its -D flags."""
        from ..compile import compile
        defs = {**self.defines, **{k: (None if v is None else str(v)) for k, v in defines.items()}}
        unexpanded = sorted(k for k, v in defs.items() if v is not None and "{" in v)
        if unexpanded:
            raise FeedbeastError(f"%%cuda --name {self.name} in {self.path.name}: -D {', '.join(unexpanded)} "
                                 "take their values from the notebook's variables: give them as arguments")
        return compile(self.source, arch or self.arch, defines=defs,
                       debug=self.debug if debug is None else debug, name=f"{self.name}.cu", min_arch=self.min_arch)


def parse_magic_line(line: str) -> dict:
    """The flags of a `%%cuda ...` line: name, arch, min_arch, debug, defines ({macro: value or None})."""
    from ..magic import defines_of, parse_line
    from ..errors import CompileError
    try:
        words = shlex.split(line)
    except ValueError as e:
        raise CompileError(f"{line.strip()}: {e}") from None
    args = parse_line(shlex.join(words[1:] if words and words[0].startswith("%%") else words))
    return {"name": args.name, "arch": args.arch, "min_arch": args.min_arch, "debug": args.debug,
            "defines": defines_of(args)}


_CACHE: dict = {}


# IPython's cell magics that run the rest of the cell as Python in the notebook's namespace (a timing, a capture of
# its output): the cell's definitions are the notebook's. Any other cell magic's body is not Python.
PYTHON_CELL_MAGICS = ("%%time", "%%capture")


def is_python(source: str) -> bool:
    """Is a code cell's text Python (its first line blanked by python_of when it is one of PYTHON_CELL_MAGICS)?"""
    first = source.split(None, 1)[0] if source.strip() else ""
    return not source.startswith("%%") or first in PYTHON_CELL_MAGICS


_MAGIC_LINE = re.compile(r"\s*(?:%{1,2}[A-Za-z_]|!(?!=))")    # `%time x`, `%%capture`, `!ls`; not `!= 0`, `% 4`


def python_of(source: str) -> str:
    """A cell's Python with its line magics and shell escapes blanked (line numbers kept)."""
    return "\n".join("" if _MAGIC_LINE.match(ln) else ln for ln in source.split("\n"))


def code_lines(source: str) -> list[str]:
    """A cell's lines as Python's compiler counts them (at \n, \r\n and \r only), for linecache: str.splitlines
    also splits at a form feed and other separators, which would shift every later line that inspect (and the
    checks that read a kernel's source through it) finds for a function."""
    import io
    return io.StringIO(source, newline=None).readlines()


def cuda_name(source: str) -> str | None:
    """The --name of a %%cuda cell, None for any other cell or a magic line that does not parse."""
    try:
        return parse_magic_line(source.partition("\n")[0])["name"]
    except Exception:
        return None


# ---- where a line of a notebook is ---------------------------------------------------------------------------
# A notebook shows no cell numbers, and a cell's line numbers only on request: a place is named as the
# notebook's own messages name it. A %%cuda cell's line is `lab.cu line 35` (its CUDA source's line, the
# `%%cuda` line not counted: the compile errors' and the TODO notes' count); a line in a top-level function is
# `producer line 4` (the cell's line, as check_ring, fb.errors.todo_of and IPython's tracebacks count it);
# any other line names its cell by the heading above it.

MD_HEADING = re.compile(r"^#{1,6}\s+\S")


def _headings(cell) -> list[str]:
    """The markdown headings of a cell, as written ('## Your model'); none inside ``` fences."""
    if cell.cell_type != "markdown":
        return []
    out, fenced = [], False
    for ln in cell.source.splitlines():
        if ln.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and MD_HEADING.match(ln.strip()):
            out.append(ln.strip().rstrip("#").strip())
    return out


def _first_line(source: str, width: int = 40) -> str:
    first = next((ln.strip() for ln in source.splitlines() if ln.strip()), "")
    return first if len(first) <= width else first[:width - 3].rstrip() + "..."


def _cell_label(cells, i: int) -> str:
    """Code cell `i` of `cells` as a learner finds it: the nearest heading above it, and its first line when
    that heading has other code cells under it."""
    h = next((j for j in range(i - 1, -1, -1) if _headings(cells[j])), None)
    end = next((j for j in range(i + 1, len(cells)) if _headings(cells[j])), len(cells))
    section = [c for c in cells[(h if h is not None else -1) + 1:end] if c.cell_type == "code"]
    starting = f'starting "{_first_line(cells[i].source)}"'
    if h is None:
        return f"the code cell {starting}"
    under = f'the code cell under "{_headings(cells[h])[-1][:60]}"'
    return under if len(section) == 1 else f"{under} {starting}"


def _function_at(source: str, line: int) -> str | None:
    """The top-level function (or class) of a Python cell that holds `line`: its body runs to the next
    top-level statement, indented comments after its last statement included (inspect.getsourcelines does)."""
    try:
        body = ast.parse(python_of(source)).body
    except SyntaxError:
        return None
    lines = source.split("\n")
    starts = [min([n.lineno] + [d.lineno for d in getattr(n, "decorator_list", [])]) for n in body]
    for k, node in enumerate(body):
        nxt = starts[k + 1] if k + 1 < len(body) else len(lines) + 1
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or not starts[k] <= line < nxt:
            continue
        if line <= node.end_lineno or lines[line - 1][:1] in (" ", "\t"):
            return node.name
    return None


def place(cells, i: int, line: int) -> tuple[str, int]:
    """(where, line) naming line `line` (1: the cell's first) of code cell `i` of `cells` as the notebook's
    own messages do: ('lab.cu', 35), ('producer', 4), ('the code cell under "## Your model"', 2)."""
    src = cells[i].source
    if src.startswith("%%cuda") and line > 1 and cuda_name(src):
        return f"{cuda_name(src)}.cu", line - 1
    return _function_at(src, line) or _cell_label(cells, i), line


def at(cells, i: int, line: int) -> str:
    where, n = place(cells, i, line)
    return f"{where} line {n}"     # the form of feedbeast.errors.unwritten


def load(path) -> "Notebook":
    """The notebook at `path` (read again only when the file changed)."""
    p = Path(path).resolve()
    key = (p, p.stat().st_mtime_ns)
    if key not in _CACHE:
        _CACHE.clear() if len(_CACHE) > 64 else None
        _CACHE[key] = Notebook(p)
    return _CACHE[key]


@dataclasses.dataclass
class _Stmt:
    pos: tuple          # (cell index, statement index): notebook order
    node: ast.stmt
    binds: frozenset    # top-level names it binds
    amends: frozenset   # top-level names it changes in place (`REPS["x"] = ...`)
    reads: frozenset    # top-level names it reads when it runs
    reads_later: frozenset   # ...and those the functions it defines read when called


class Notebook:
    """`upto`: only the cells before this index (a lab's part before its checks, as the grader reads it)."""

    def __init__(self, path, upto: int | None = None):
        self.path = Path(path)
        self.cells = read(self.path).cells[:upto]
        self.cuda_cells: dict[str, CudaCell] = {}
        self._stmts: list[_Stmt] = []
        self._unparsed: list[int] = []
        self.bad_magic: list[tuple[int, str]] = []    # (cell index, why): %%cuda cells whose line does not parse
        for i, cell in enumerate(self.cells):
            if cell.cell_type != "code":
                continue
            if cell.source.startswith("%%cuda"):
                line, _, body = cell.source.partition("\n")
                try:
                    f = parse_magic_line(line)
                except Exception as e:      # a flag or quote error: named where a check needs the cell
                    self.bad_magic.append((i, str(e)))
                    continue
                self.cuda_cells[f["name"]] = CudaCell(f["name"], body, f["defines"], f["arch"], f["debug"], i,
                                                      self.path, f["min_arch"])
            elif is_python(cell.source):
                self._index_python(i, cell.source)

    def __repr__(self):
        return f"<Notebook {self.path.name}: {len(self.cuda_cells)} %%cuda cells, {len(self._stmts)} definitions>"

    # ---- kernels
    def cuda(self, name: str) -> CudaCell:
        try:
            return self.cuda_cells[name]
        except KeyError:
            raise LookupError(f"no %%cuda cell with --name {name} in {self.path.name}; it has: "
                              f"{', '.join(self.cuda_cells) or 'none'}") from None

    def compile(self, name: str, arch: str | None = None, *, debug: bool | None = None, **defines):
        return self.cuda(name).compile(arch, debug=debug, **defines)

    # ---- Python definitions
    def _index_python(self, i, source):
        try:
            tree = ast.parse(python_of(source))   # line numbers still those of the cell
        except SyntaxError:
            self._unparsed.append(i)
            return
        for j, node in enumerate(tree.body):
            binds, amends = _targets(node)
            if binds or amends:
                self._stmts.append(_Stmt((i, j), node, frozenset(binds), frozenset(amends), *_reads(node)))

    def statements(self) -> list[_Stmt]:
        """The top-level statements that bind or change a name, in notebook order (those plan() chooses from)."""
        return list(self._stmts)

    def names(self) -> list[str]:
        """Every top-level name a def, class, assignment or import of the notebook binds."""
        return sorted({n for s in self._stmts for n in s.binds})

    def functions(self, decorator: str | None = None) -> list[str]:
        """Top-level functions, in notebook order; with `decorator`, only those it decorates
        (`functions("cuda.jit")`: the Numba kernels, `@cuda.jit(device=True)` helpers included)."""
        out = []
        for s in self._stmts:
            node = s.node
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                    decorator is None or any(ast.unparse(d).startswith(decorator) for d in node.decorator_list)):
                out.append(node.name)
        return list(dict.fromkeys(out))

    def _binding(self, name, before=None):
        where = [s for s in self._stmts if name in s.binds]
        if not where:
            return None
        if before is None:
            return where[-1]
        earlier = [s for s in where if s.pos < before]
        return earlier[-1] if earlier else where[0]

    def plan(self, *names: str, given=()) -> tuple[list, list[str]]:
        """What definitions() would run for `names`: (the statements, in notebook order, as _Stmt with .pos =
        (cell, statement) and .node; the %%cuda cells it would compile). Names in `given` are not looked up.
        Raises LookupError naming what the notebook does not define."""
        given = set(given) | set(dir(builtins))
        chosen: dict[tuple, _Stmt] = {}
        modules: set[str] = set()
        missing: list[str] = []

        def need(name, before, why, called_later=False):
            if name in given:
                return
            s = self._binding(name, before)
            if s is None:
                if name in self.cuda_cells:
                    modules.add(name)
                else:
                    missing.append(f"{name} (read in cell {why[0]})")
                return
            take(s)
            if called_later:   # a function body sees the notebook's last binding too (the one in force at a call)
                take(self._binding(name))

        def take(s):
            if s.pos in chosen:
                return
            chosen[s.pos] = s
            if isinstance(s.node, _BRANCHING):    # a branch may not run: the binding before it stays in force
                for n in sorted(s.binds):
                    before = self._binding(n, s.pos)
                    if before is not None:
                        take(before)
            for n in sorted(s.reads - s.binds):
                need(n, s.pos, s.pos)
            for n in sorted(s.reads & s.binds):      # X = f(X): it reads the binding before it (none: itself)
                need(n, s.pos, s.pos)
            for n in sorted(s.reads_later - s.binds):
                need(n, s.pos, s.pos, called_later=True)
            for n in s.binds:        # in-place changes up to the next rebinding: REPS["x"] = ...
                nxt = [t.pos for t in self._stmts if n in t.binds and t.pos > s.pos]
                for t in self._stmts:
                    if n in t.amends and s.pos < t.pos < min(nxt, default=(1 << 30, 0)):
                        take(t)

        for name in names:
            if name in given:
                continue
            if name in self.cuda_cells and self._binding(name) is None:
                modules.add(name)
                continue
            s = self._binding(name)
            if s is None:
                missing.append(name)
            else:
                take(s)
        if missing:
            hint = f" (cells {self._unparsed} are not valid Python and were skipped)" if self._unparsed else ""
            raise LookupError(f"{self.path.name} defines no {', '.join(dict.fromkeys(missing))} at top level: "
                              f"give {'it' if len(missing) == 1 else 'them'} as keyword arguments{hint}")
        return sorted(chosen.values(), key=lambda s: s.pos), sorted(modules)

    def run(self, stmts, ns: dict, guard_methods: bool = False) -> dict:
        """Run planned statements in `ns`, each under its cell's name (so that inspect finds a function's lines).
        guard_methods: each method of the learner's classes first checks that `self` is an object of its class,
        and an attribute is set only on an object the learner's code made (see guarded())."""
        import copy
        import linecache
        if guard_methods:
            _own_objects(ns)
        for s in stmts:
            where = f"{self.path.name}, cell {s.pos[0]}"
            lines = code_lines(self.cells[s.pos[0]].source)
            linecache.cache[where] = (sum(map(len, lines)), None, lines, where)
            node = guarded(copy.deepcopy(s.node)) if guard_methods else s.node
            module = ast.Module(body=[node], type_ignores=[])
            exec(compile(module, where, "exec"), ns)
        return ns

    # ---- where a line is, named as the notebook's own messages name it (see place())
    def read_at(self, name: str, k: int) -> str:
        """Where code cell `k` reads `name` (plan's errors name the cell by its index)."""
        for s in self._stmts:
            if s.pos[0] == k and name in (s.reads | s.reads_later):
                line = min((n.lineno for n in ast.walk(s.node) if isinstance(n, ast.Name) and n.id == name),
                           default=s.node.lineno)
                return at(self.cells, k, line)
        return _cell_label(self.cells, k)

    def unparsed(self) -> list[str]:
        """'<where>: SyntaxError: ...' for each cell that is not Python (skipped here, so what it defines is
        missing)."""
        out = []
        for k in self._unparsed:
            try:
                ast.parse(python_of(self.cells[k].source))
            except SyntaxError as e:
                out.append(f"{at(self.cells, k, e.lineno or 1)}: {type(e).__name__}: {e.msg}")
        return out

    def raised_at(self, exc: BaseException) -> str | None:
        """The line of this notebook an exception came from: the deepest frame of its cells (run() compiles each
        under '<notebook>, cell <index>'), named by at(); None when no line of the notebook is in it."""
        import traceback
        cell = re.compile(rf"{re.escape(self.path.name)}, cell (\d+)")
        hits = [(int(m[1]), f.lineno) for f in traceback.extract_tb(exc.__traceback__)
                if (m := cell.fullmatch(f.filename)) and int(m[1]) < len(self.cells) and f.lineno]
        return at(self.cells, *hits[-1]) if hits else None

    def definitions(self, *names: str, namespace: dict | None = None, **bound) -> dict:
        """Run the definitions of `names` (and what they need) in a fresh namespace and return it.

        Names given in `namespace` or as keywords are taken as they are, not looked up in the notebook.
        Each name asked for is the notebook's last binding of it. What a statement reads when it runs is the
        binding in force where it stands; what a function reads when called is that one and the notebook's
        last (they run in notebook order, so each call sees what it would after running the notebook).
        Raises LookupError naming what the notebook does not define.
        """
        ns = dict(namespace or {})
        ns.update(bound)
        stmts, modules = self.plan(*names, given=set(ns))
        for m in modules:
            ns[m] = self.compile(m)
        return self.run(stmts, ns)


def _targets(node) -> tuple[set, set]:
    """Names a top-level statement binds, and names it changes in place."""
    binds, amends = set(), set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        binds.add(node.name)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        for a in node.names:
            if a.name != "*":
                binds.add(a.asname or a.name.split(".")[0])
    elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            for leaf in ast.walk(t):
                if isinstance(leaf, ast.Name) and isinstance(leaf.ctx, ast.Store):
                    (amends if isinstance(node, ast.AugAssign) else binds).add(leaf.id)
            amends |= _changed_in_place(t)
    elif isinstance(node, _BRANCHING):
        # a definition made under a condition (`try: import ml_dtypes` / `except ImportError: ml_dtypes = None`,
        # `if ...: DTYPE = ... else: ...`): the statement binds what any of its branches binds, and runs whole
        # (`except ... as e` binds nothing that lasts: Python deletes e when the handler ends)
        nodes = list(_own_nodes([node]))
        binds |= _scope_binds(ast.Module(body=[node], type_ignores=[]), nodes) - {
            n.name for n in nodes if isinstance(n, ast.ExceptHandler)}
        for child in nodes:
            if isinstance(child, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                amends |= _targets(child)[1]
            elif isinstance(child, ast.Delete):          # del fb.check, del TABLE["k"]: a change of fb, of TABLE
                for t in child.targets:
                    amends |= _changed_in_place(t)
    return binds, amends


def _changed_in_place(target) -> set[str]:
    """The names whose objects an assignment or del target changes (`fb.x`, `T["k"]`, also inside `a, (b.c, d)`)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_changed_in_place(e) for e in target.elts))
    if isinstance(target, ast.Starred):
        return _changed_in_place(target.value)
    root = target
    while isinstance(root, (ast.Subscript, ast.Attribute)):
        root = root.value
    return {root.id} if root is not target and isinstance(root, ast.Name) else set()


_BRANCHING = (ast.If, ast.Try, getattr(ast, "TryStar", ast.Try))   # top-level statements that may bind conditionally


def _unbinds(node) -> set[str]:
    """Every name a top-level statement binds or deletes at module level, however (in a loop's target, a walrus,
    a `del`, inside a branch): what it may not do to a name the lab gives or a builtin."""
    nodes = list(_own_nodes([node]))
    return _scope_binds(ast.Module(body=[node], type_ignores=[]), nodes) | {
        n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Del)}


_EAGER = {"listcomp", "setcomp", "dictcomp", "genexpr"}   # scopes that run where they stand


def _rebinding_reads(node) -> set:
    """The names an assignment binds and reads on its right-hand side (`SIZES = SIZES[:2]`): it reads the binding
    before it. Names a comprehension or lambda binds inside the value are its own, not the notebook's."""
    if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
        return set()
    binds, _ = _targets(node)
    loads, own = set(), set()
    for sub in ast.walk(node.value):
        if isinstance(sub, ast.comprehension):
            own |= {t.id for t in ast.walk(sub.target) if isinstance(t, ast.Name)}
        elif isinstance(sub, ast.Lambda):
            own |= {a.arg for a in ast.walk(sub.args) if isinstance(a, ast.arg)}
        elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
            loads.add(sub.id)
    return (loads - own) & set(binds)


def _reads(node) -> tuple[frozenset, frozenset]:
    """Module-level names a statement reads: (now, later). `now` when the statement runs (an assignment, a
    default value, a decorator, a class body); `later` from inside the functions it defines, when called."""
    table = symtable.symtable(ast.unparse(node), "<cell>", "exec")
    # Not a name the statement assigns: Python 3.12 lists an inlined comprehension's variables here too.
    now = {s.get_name() for s in table.get_symbols() if s.is_referenced() and not s.is_assigned()}
    now |= _rebinding_reads(node)
    later = set()

    def walk(t, deferred):
        deferred = deferred or (t.get_type() == "function" and t.get_name() not in _EAGER)
        for s in t.get_symbols():
            # a parameter or a local is the function's own, whatever is_global() says of it (symtable reports a
            # method's `self` as global where the module binds nothing of that name)
            if s.is_global() and s.is_referenced() and not (
                    s.is_parameter() or s.is_local() and not s.is_declared_global()):
                (later if deferred else now).add(s.get_name())
        for c in t.get_children():
            walk(c, deferred)
    for child in table.get_children():
        walk(child, False)
    # `global n` then `n += 1` reads n too (symtable counts it as assigned only)
    for fn in (f for f in ast.walk(node) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))):
        declared = {x for g in ast.walk(fn) if isinstance(g, ast.Global) for x in g.names}
        later |= {a.target.id for a in ast.walk(fn) if isinstance(a, ast.AugAssign)
                  and isinstance(a.target, ast.Name) and a.target.id in declared}
    return frozenset(now), frozenset(later - now)


# ---- what a grader runs of a learner's code ---------------------------------------------------------------
# The grader runs the learner's definitions next to the lab's checks. These rules refuse the statements that
# could reach the checks' own state: it is a filter of plain mistakes and plain forgeries, not a sandbox (while
# the code runs, feedbeast.course.guard refuses what the interpreter reports as reaching around it; the grader
# also checks, around every check cell, that the toolkit and the environment are as it set them).

IMPORTABLE = {"numpy", "math", "cmath", "functools", "itertools", "operator", "collections", "dataclasses", "enum",
              "time", "typing", "numba", "torch", "ml_dtypes", "feedbeast"}
INTERNAL = {"verdicts", "hazards", "hooks", "course", "launch", "runmode", "grade", "guard", "roster", "isolated", "sanitize",
            "cache",
            "environ", "putenv", "unsetenv", "modules", "settrace", "setprofile", "excepthook", "stdout",
            "stderr", "system", "popen",
            # modules that reach memory, frames, threads and processes (reached as an attribute: np.ctypeslib.ctypes)
            "ctypes", "ctypeslib", "pythonapi", "threading", "gc", "inspect", "traceback", "sys", "builtins",
            "importlib", "pickle", "marshal", "subprocess", "signal", "multiprocessing", "asyncio", "concurrent",
            # attributes named in a string, past the rules above: operator.attrgetter("hazards.check")(fb)
            "attrgetter", "methodcaller", "copyreg",
            # the file system and the grader's channel, reached as a toolkit module's attribute
            # (`from feedbeast.numba_support import os`)
            "os", "shutil", "tempfile", "io", "json", "hmac", "hashlib", "secrets", "socket", "pathlib", "nbformat",
            "Path", "PurePath", "bltns",     # pathlib's classes, and the builtins module under enum's name for it
            # process-wide state the grader's own code uses, reached as another module's attribute
            # (`typing.contextlib`, `typing.warnings.simplefilter("error")`)
            "contextlib", "warnings", "atexit", "weakref", "linecache",
            # enum's decorators that copy a class's members into the module its __module__ names
            "global_enum", "global_str", "global_enum_repr", "global_flag_repr",
            # what evaluates a string as a type annotation: a string annotation is refused unless it names a type
            "get_type_hints", "ForwardRef", "evaluate_forward_ref", "singledispatch", "singledispatchmethod"}
# Raw memory, native code and files through a library's own C code, which raises no audit event for the guard:
# refused as an attribute of anything, as INTERNAL is (a rule by the name before the dot is easy to get around)
NATIVE = {
    # numpy: a view with any strides over any address (as_strided does not check them against its base, unlike
    # np.ndarray(..., strides=)), and the address of an array's data
    "as_strided", "stride_tricks", "byte_bounds", "array_utils",
    # Numba: the code generator and its extension API (an @intrinsic emits any native call), its CPU compilers
    # (no bounds checks: an index past the end writes the process's memory), the driver's copies between raw
    # addresses, and arrays over a raw address; a graded cell compiles with @cuda.jit only
    "core", "extending", "intrinsic", "overload", "overload_method", "overload_attribute", "register_jitable",
    "cgutils", "codegen", "llvmlite", "cfunc", "carray", "farray", "njit", "generated_jit", "vectorize",
    "guvectorize", "stencil", "jit_module", "objmode", "experimental", "cudadrv", "driver", "runtime",
    "ufunc", "npyufunc", "Vectorize", "GUVectorize", "DUFunc", "dufunc", "pycc", "typed", "parfors", "cpython",
    "from_cuda_array_interface", "as_cuda_array", "external_stream", "open_ipc_array",
    # numpy's random generators hand their state's address and C functions to ctypes and cffi
    "cffi",
    # a class whose field names are computed ("__array_" + "interface__"): its objects then carry the attribute
    # numpy reads for a view over any address, set by the __init__ the class maker writes
    "make_dataclass",
    # PyTorch: a tensor mapped onto a file (from_file(shared=True) writes it), the CUDA runtime's calls, native
    # extensions and libraries loaded, raw addresses
    "from_file", "UntypedStorage", "TypedStorage", "untyped_storage", "data_ptr", "cudart", "cpp_extension",
    "load_inline", "load_library", "hub",
    # PyTorch's files written by its C++ writer (no open() for the guard to see): torch.save, torch.jit.save,
    # torch.package, torch.distributed's FileStore
    "save", "package", "PackageExporter", "PyTorchFileWriter", "distributed", "FileStore",
    # the toolkit's cache folder maker (it makes the folder it is named), reached by its own name
    "cache_dir"}
INTERNAL |= NATIVE
CALLS = {"exec", "eval", "compile", "globals", "locals", "vars", "getattr", "setattr", "delattr", "__import__",
         "open", "breakpoint", "input", "get_ipython", "super",
         "id", "hash"}     # an object's address (hash() of an object without its own is the address, rotated),
                           # which is all a raw view needs to read or write the object
FINALIZERS = {"__del__", "__init_subclass__", "__set_name__", "__class_getitem__", "__getattr__", "__prepare__",
              # a class body's annotations written as a dict: a dataclass's __init__ sets each name it holds on
              # every object, computed names too ("__array_" + "interface__": numpy's view over any address)
              "__annotations__",
              # what a class pattern reads by position, and what makes any object pass isinstance()
              "__match_args__", "__subclasshook__",
              "__dict__",     # a class's own __dict__ would answer for what its objects hold
              "__getattribute__", "__setattr__", "__delattr__",
              # pickling hooks: an object rebuilt from a pickle calls what its __reduce__ names, outside its own frames
              "__reduce__", "__reduce_ex__", "__getstate__", "__setstate__", "__getnewargs__", "__getnewargs_ex__",
              # what an object answers when a check compares, tests, counts or converts it: an int subclass whose
              # __ne__ says False passes any `x != expected` (a lab never needs to define these)
              "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__hash__", "__len__",
              "__index__", "__int__", "__float__", "__complex__", "__abs__", "__round__", "__trunc__", "__floor__",
              "__ceil__", "__contains__", "__instancecheck__", "__subclasscheck__", "__array__", "__array_ufunc__",
              "__array_function__", "__array_interface__", "__array_priority__", "__array_wrap__",
              "__array_finalize__", "__cuda_array_interface__", "__dlpack__"}
ENUM_MAKERS = {"Enum", "IntEnum", "Flag", "IntFlag", "StrEnum", "ReprEnum", "EnumType", "EnumMeta"}
BUILTIN_NAMES = frozenset(n for n in dir(builtins) if not n.startswith("_"))
# the methods that change a list, dict, set or array in place: not called on a name the lab gives
MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "append", "extend", "insert", "remove", "sort",
            "reverse", "add", "discard", "difference_update", "intersection_update", "symmetric_difference_update",
            "fill", "resize", "put", "itemset", "setflags", "copy_from", "poison", "fill_bytes"}
# dunders a learner's code may read anywhere (a tracing decorator's fn.__name__), and set on what it made
READABLE_DUNDERS = {"__name__", "__qualname__", "__doc__", "__module__"}
# a named tuple's own methods and fields, public though their names start with _ (collections.namedtuple's docs)
NAMEDTUPLE = {"_replace", "_asdict", "_fields", "_field_defaults", "_make"}
SETTABLE_DUNDERS = {"__name__", "__qualname__", "__doc__"}
# the names guarded() gives the grader's own helpers in the learner's namespace (no learner's code may name them)
OWN, MARK, PRIVATE, SUPER, SELF, TUPLE, PRIVATE_OF = (
    "__fb_own__", "__fb_class__", "__fb_private__", "__fb_super__", "__fb_self__", "__fb_tuple__", "__fb_private_of__")
COMPARED = FINALIZERS & {"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__hash__", "__len__",
                         "__index__", "__int__", "__float__", "__complex__", "__abs__", "__round__", "__trunc__",
                         "__floor__", "__ceil__", "__contains__"}


def _own_attributes(node) -> set[int]:
    """id() of each `self.x` (read, set or deleted), `self` handed on and `super().name` in a method (_methods()),
    outside the functions nested in it that take a `self` of their own. Only there is `self` the object the
    learner's own class made (guarded() makes sure of it); a function outside a class may be handed any object as
    `self` (a module, an array the checks pass in)."""
    out: set[int] = set()

    def stores(fn):
        stack = list(fn.body)
        while stack:
            n = stack.pop()
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and any(
                    a.arg == "self" for a in (*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs)):
                continue
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
                out.add(id(n))
            elif isinstance(n, ast.Name) and n.id == "self" and isinstance(n.ctx, ast.Load):
                out.add(id(n))              # self handed on: update_wrapper(self, f)
            elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Call) and not n.value.args \
                    and not n.value.keywords and isinstance(n.value.func, ast.Name) and n.value.func.id == "super" \
                    and n.attr not in FINALIZERS:
                out.update((id(n), id(n.value.func)))   # super().__init__(...): the parent's method, on self
            stack.extend(ast.iter_child_nodes(n))

    for cls in (n for n in ast.walk(node) if isinstance(n, ast.ClassDef)):
        for fn in _methods(cls):
            stores(fn)
    return out


def _methods(cls: ast.ClassDef) -> list:
    """The functions directly in a class body whose first parameter is `self`, but those decorated @staticmethod or
    @classmethod (any other decorator, an alias of those included, keeps the function a method here: guarded()
    then refuses a `self` of another class)."""
    return [f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (f.args.posonlyargs + f.args.args)[:1] and (f.args.posonlyargs + f.args.args)[0].arg == "self"
            and not any(ast.unparse(d) in ("staticmethod", "classmethod") for d in f.decorator_list)]


def guarded(node: ast.AST) -> ast.AST:
    """`node` as the grader runs it: each method of its classes first refuses a `self` that is not an object of
    the learner's classes (__fb_self__), and Numba's `cache=True` is left out (a cell the grader runs has no file
    for Numba to keep a cache beside). A method read through its class (`type(obj).put(np, f)`, a subclass, a
    class decorator's `cls.put`, an alias) takes any object as self, and `self.x = v` would then set an attribute
    of a module or of an array the checks read back; no static rule sees every such path, this test does.

    Every other attribute set or deleted (`ring_plan.depth = 4`, `cls.count += 1`, `fn.calls = 0`) first hands
    its object to __fb_own__ (_own_objects()), which refuses any object but one of a class the learner's
    statements define, such a class, or a function of theirs. Each class statement is marked as the learner's by
    __fb_class__, as its first decorator to apply and again as its last (a decorator that returns a new class
    made from it, dataclass(slots=True), keeps it the learner's). `self._x` (and `self.__x`, as Python mangles it)
    goes through __fb_private__, `super()._x` through __fb_super__ and another object's `_x` through
    __fb_private_of__ (which first asks that the object or class be the learner's): each refuses a private name
    first defined by a class not the learner's (a base's `_convert_`), and a read of one nothing defines or holds.
    A named tuple's `_make`, `_replace` and kin go through __fb_tuple__ (a tuple's only). Each helper is read inside a lambda: in a class body a
    name is looked up first in the class's namespace, which a metaclass makes, so the lambda's global lookup is
    the one the learner's code cannot answer."""
    own = _own_attributes(node)
    classes = [n for n in ast.walk(node) if isinstance(n, ast.ClassDef)]
    inside: dict[int, str] = {}          # an attribute in a method -> its class's name (for self.__x's mangling)
    for cls in classes:                  # outer classes first: a nested class's methods are named by it
        for fn in _methods(cls):
            inside.update((id(n), cls.name) for n in ast.walk(fn) if isinstance(n, ast.Attribute))
    for n in [n for n in ast.walk(node) if isinstance(n, ast.Attribute)]:
        if n.attr in NAMEDTUPLE and isinstance(n.ctx, ast.Load):     # a named tuple's, not a toolkit's _make
            n.value = ast.copy_location(_helper(TUPLE, n.value, ast.Constant(n.attr)), n)
        elif id(n) not in own and n.attr.startswith("_") and not n.attr.startswith("__"):
            # another object's private name (`other._n`, `Counter._made`): one of the learner's objects or classes,
            # and a name their classes define (set, it is also an attribute set: __fb_own__ first)
            value = _helper(OWN, n.value, ast.Constant(n.attr)) if isinstance(n.ctx, (ast.Store, ast.Del)) else n.value
            n.value = ast.copy_location(_helper(PRIVATE_OF, value, ast.Constant(n.attr),
                                                ast.Constant(isinstance(n.ctx, ast.Load))), n)
        elif isinstance(n.ctx, (ast.Store, ast.Del)) and id(n) not in own:
            n.value = ast.copy_location(_helper(OWN, n.value, ast.Constant(n.attr)), n)
        elif id(n) in own and n.attr.startswith("_") and not _dunder(n.attr) and n.attr not in NAMEDTUPLE:
            name = f"_{inside.get(id(n), '').lstrip('_')}{n.attr}" if n.attr.startswith("__") else n.attr
            if isinstance(n.value, ast.Name):
                n.value = ast.copy_location(_helper(PRIVATE, n.value, ast.Constant(name),
                                                    ast.Constant(isinstance(n.ctx, ast.Load))), n)
            elif isinstance(n.value, ast.Call):          # super()._x: the zero-argument super's class and self
                n.value = ast.copy_location(_helper(SUPER, ast.Name("__class__", ast.Load()),
                                                    ast.Name("self", ast.Load()), ast.Constant(name)), n)
    for cls in classes:
        k = next(_CLASS_STATEMENTS)
        cls.decorator_list.append(ast.copy_location(_helper(MARK, ast.Constant(k)), cls))
        cls.decorator_list.insert(0, ast.copy_location(_helper(MARK, ast.Constant(k), ast.Constant(True)), cls))
    for fn in (n for n in ast.walk(node) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        for d in fn.decorator_list:     # Numba's cache=True: no cache folder for a cell the grader names
            if isinstance(d, ast.Call) and ast.unparse(d.func).split(".")[-1] in ("jit", "njit"):
                d.keywords = [k for k in d.keywords if k.arg != "cache"]
    for cls in classes:
        for fn in _methods(cls):
            test = ast.Expr(_helper(SELF, ast.Name("self", ast.Load()), ast.Constant(f"{cls.name}.{fn.name}")))
            fn.body.insert(0, ast.copy_location(test, fn.body[0]))
    return ast.fix_missing_locations(node)


_CLASS_STATEMENTS = itertools.count()     # one number per class statement the grader runs: its two marks meet


def _dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _helper(name: str, *args) -> ast.Call:
    """`(lambda: name)()(*args)`: the grader's helper `name`, looked up where no class namespace can answer."""
    lam = ast.Lambda(ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
                     ast.Name(name, ast.Load()))
    return ast.Call(ast.Call(lam, [], []), list(args), [])


def _own_objects(ns: dict) -> None:
    """Put the helpers guarded() calls into the namespace the learner's statements run in."""
    classes: list[type] = []             # the learner's classes, by identity
    first: dict[int, type] = {}          # a class statement's number -> the class it made
    mro, cdict = type.__dict__["__mro__"].__get__, type.__dict__["__dict__"].__get__   # past a metaclass's own

    def mine(c) -> bool:
        return any(c is k for k in classes)

    def mark(k, last=False):
        def made(cls):                   # the class statement's own class, before any decorator of the learner's
            first[k] = cls
            classes.append(cls)
            return cls

        def returned(r):
            # What the decorators returned. A new class (dataclass(slots=True) makes the class anew) is the
            # learner's when it has the statement's name and holds a method the learner's code made; a method
            # read from a foreign class into the body does not count.
            o = first.get(k)

            def function(v):             # a property's getter, a classmethod's or staticmethod's function
                return v.fget if type(v) is property else v.__func__ if type(v) in (classmethod, staticmethod) else v
            if isinstance(r, type) and o is not None and r is not o and r.__module__ == o.__module__ \
                    and r.__qualname__ == o.__qualname__ and any(
                        type(function(v)) is types.FunctionType and function(v).__globals__ is ns
                        and cdict(r).get(key, None) is v for key, v in cdict(o).items()):
                classes.append(r)
            return r
        return returned if last else made

    def own(obj, attr):
        if mine(type(obj)) or mine(obj) or type(obj) is types.FunctionType and obj.__globals__ is ns:
            return obj
        raise TypeError(f"the grader sets .{attr} only on an object of a class your cells define, on such a class "
                        f"or on a function of yours, and this is {_described(obj)}: keep what you need on an object "
                        "of your own")

    def defined_by_mine(chain, attr, where) -> bool:
        for c in chain:                  # the first class that defines the name, as attribute lookup finds it
            if attr in cdict(c):
                if not mine(c):
                    raise TypeError(f"{where}.{attr} is {c.__qualname__}'s private name, not one your classes "
                                    "define: the grader reaches a private name only of your own classes")
                return True
        return False

    def held(obj, attr, where, load):
        # a class's name (the metaclass's first, for a class), or, read, one the object itself holds: a name
        # found nowhere would fall through to a toolkit base's __getattr__, which may hand on any object's
        found = False
        for chain in [mro(type(obj))] + ([mro(obj)] if isinstance(obj, type) else []):
            found = defined_by_mine(chain, attr, where) or found
        if load and not found:
            try:
                own_dict = {} if isinstance(obj, type) else object.__getattribute__(obj, "__dict__")
            except AttributeError:
                own_dict = {}
            if attr not in own_dict:
                raise AttributeError(f"{where} has no attribute {attr!r}")
        return obj

    def private(obj, attr, load=True):
        return held(obj, attr, "self", load)

    def private_of(obj, attr, load=True):   # not self: first, an object or a class of the learner's
        if not (mine(obj) or any(mine(c) for c in mro(type(obj)))):
            raise TypeError(f".{attr} is a private name of {_described(obj)}: the grader reaches a private name "
                            "only of your own objects and classes")
        return held(obj, attr, obj.__qualname__ if isinstance(obj, type) else type(obj).__qualname__, load)

    def parent(cls, obj, attr):          # super()._x: the classes after the method's own in self's order
        chain = mro(type(obj))
        after = next((i for i, c in enumerate(chain) if c is cls), len(chain))
        defined_by_mine(chain[after + 1:], attr, "super()")
        return super(cls, obj)

    def named_tuple(obj, attr):
        if issubclass(obj if isinstance(obj, type) else type(obj), tuple):
            return obj
        raise TypeError(f".{attr} is a named tuple's; this is an object of {type(obj).__qualname__}, whose .{attr} "
                        "is its own private name")

    def on_mine(obj, method):
        if not any(mine(c) for c in mro(type(obj))):
            raise TypeError(f"{method} was called on an object that is not of a class your cells define: the grader "
                            "runs a method of yours only on an object of your classes")
    ns[MARK], ns[OWN], ns[PRIVATE], ns[SUPER], ns[SELF], ns[TUPLE] = mark, own, private, parent, on_mine, named_tuple
    ns[PRIVATE_OF] = private_of


def _described(obj) -> str:
    return f"the module {obj.__name__}" if isinstance(obj, types.ModuleType) else \
        f"the class {obj.__qualname__}" if isinstance(obj, type) else f"an object of {type(obj).__qualname__}"


def _type_expression(text: str) -> bool:
    """Whether a string annotation only names a type (`"Ring"`, `"list[int] | None"`): evaluated, it runs no
    code of its own."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        return False
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and not n.id.startswith("_") and n.id not in CALLS \
                or isinstance(n, ast.Attribute) and not n.attr.startswith("_") and n.attr not in INTERNAL | CALLS \
                or isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr) \
                or isinstance(n, ast.Constant) and (not isinstance(n.value, str) or _type_expression(n.value)) \
                or isinstance(n, (ast.Expression, ast.Subscript, ast.Tuple, ast.List, ast.expr_context, ast.BitOr)):
            continue
        return False
    return True


def binds_of(source: str) -> set[str]:
    """The module-level names a cell binds (_scope_binds at its top level, and the `global` declarations of its
    functions), but for imports of what a graded cell may import too: that module is the same object for both."""
    tree = ast.parse(python_of(source))
    nodes = list(_own_nodes(tree.body))
    importable = {a.asname or a.name.split(".")[0] for n in nodes if isinstance(n, ast.Import)
                  for a in n.names if _importable(a.name)} | \
                 {a.asname or a.name for n in nodes if isinstance(n, ast.ImportFrom) and not n.level
                  for a in n.names if _importable(f"{n.module}.{a.name}", member=True)}
    declared = {x for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                for g in ast.walk(n) if isinstance(g, ast.Global) for x in g.names}
    return _scope_binds(tree, nodes) - importable | declared


# What to write instead of the special attributes correct code reaches for most often.
INSTEAD_OF_DUNDER = {
    "__class__": ": write type(obj) where it is read (type(obj).__name__, type(a) is B)",
    "__setattr__": ": set fields as obj.name = value on an object of your class; a frozen dataclass's fields "
                   "come from its constructor, so compute them before you make it, or drop frozen=True",
}


class _GetattrAsAttribute(ast.NodeTransformer):
    def visit_Call(self, call):
        self.generic_visit(call)
        f, a = call.func, call.args
        if isinstance(f, ast.Name) and f.id == "getattr" and len(a) in (2, 3) and not call.keywords \
                and not any(isinstance(x, ast.Starred) for x in a) and isinstance(a[1], ast.Constant) \
                and isinstance(a[1].value, str) and a[1].value.isidentifier() and not a[1].value.startswith("_"):
            read = ast.copy_location(ast.Attribute(a[0], a[1].value, ast.Load()), call)
            return ast.copy_location(ast.BoolOp(ast.Or(), [read, a[2]]), call) if len(a) == 3 else read
        return call


def _getattr_as_attribute(node):
    """`node` with each getattr(obj, "name") and getattr(obj, "name", default) whose name is written at the call
    (a public one: a private name's rule is checked as the code runs, on obj._name only) read as obj.name (or
    default): the rules of refusals() then hold for it as for obj.name, every one. Checked, never run: the grader
    runs the learner's own text."""
    import copy
    return ast.fix_missing_locations(_GetattrAsAttribute().visit(copy.deepcopy(node)))


def refusals(node: ast.stmt, protected=(), modules=(), lines: list | None = None, theirs=()) -> list[str]:
    """Why a grader must not run this top-level statement of a learner's cell ([] when it may).

    protected: names the lab gives or the grader binds (the toolkit `fb`, the kernels of the %%cuda cells, a
    given `check_ring`): the learner's code may read them, never rebind or change them. modules: names
    bound to modules (an attribute set on one changes it for the checks too). A method read through its class
    takes any object as self: the grader runs the learner's methods guarded() against that, and sets an
    attribute only on an object the learner's code made. lines: given a list, the line of each reason is
    appended to it (the first line that breaks the rule, not the statement's). theirs: names the checks bind for
    themselves (their inputs, references, loops): code of the learner's that the checks call runs in the same
    globals, so it may not name them (`def quantize(w): return want` would hand back the checks' reference)."""
    protected, modules, theirs = set(protected), set(modules), set(theirs)
    node = _getattr_as_attribute(node)      # getattr(obj, "name") meets every rule obj.name meets
    own = _own_attributes(node)
    # @functools.wraps(f) as a function's own decorator sets attributes of that function only; called any other
    # way (or update_wrapper) it sets the attributes it is told to on any object: a module, an array of the checks
    wraps = {id(d.func) for f in ast.walk(node) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
             for d in f.decorator_list if isinstance(d, ast.Call) and not d.keywords and len(d.args) == 1
             and (isinstance(d.func, ast.Attribute) and d.func.attr == "wraps" and isinstance(d.func.value, ast.Name)
                  or isinstance(d.func, ast.Name) and d.func.id == "wraps")}
    # update_wrapper(self, f) in a method: the learner's own object (a class used as a decorator)
    on_self = {id(c.func) for c in ast.walk(node) if isinstance(c, ast.Call) and c.args
               and isinstance(c.args[0], ast.Name) and c.args[0].id == "self" and id(c.args[0]) in own}
    out: dict[str, int] = {}

    def say(why, at=node):          # the reason, at the first line that gives it
        out.setdefault(why, getattr(at, "lineno", None) or node.lineno)

    amends = _targets(node)[1]
    binds = _unbinds(node)
    if isinstance(node, ast.ImportFrom) and node.module == "numba" and not node.level:
        binds -= {a.name for a in node.names if a.asname is None} - BUILTIN_NAMES   # numba's, as the lab binds them
    if binds & protected:
        say(f"it rebinds {', '.join(sorted(binds & protected))}, which the lab gives or the grader binds "
            "(the grade uses the lab's own)")
    if binds & BUILTIN_NAMES:
        say(f"it rebinds the Python builtin {', '.join(sorted(binds & BUILTIN_NAMES))}, which the checks use: "
            "pick another name")
    if amends & (protected | modules):
        say(f"it changes {', '.join(sorted(amends & (protected | modules)))} in place")
    local = _function_locals(node)
    # `@functools.cache`: the attribute .cache, only as a function's own decorator (a module bound to the name
    # functools, or .cache read further, is refused like any other .cache)
    decorators = {id(d) for f in ast.walk(node) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for d in f.decorator_list if isinstance(d, ast.Attribute) and d.attr == "cache"
                  and isinstance(d.value, ast.Name) and d.value.id == "functools"}
    for fn in (f for c in ast.walk(node) if isinstance(c, ast.ClassDef) for f in _methods(c)):
        if any(isinstance(n, ast.Name) and n.id == "self" and isinstance(n.ctx, (ast.Store, ast.Del))
               for n in ast.walk(fn)) or any(isinstance(n, ast.alias) and (n.asname or n.name) == "self"
                                             for n in ast.walk(fn)):
            say(f"it binds self anew in {fn.name} (self is the object the method was called on)", fn)
    allowed = ", ".join(sorted(IMPORTABLE))
    windows = {id(p.value) for p in ast.walk(node) if isinstance(p, ast.Attribute) and p.attr == "sliding_window_view"}
    # type(obj) read at once: the value of an attribute read or a side of a comparison (type(self)._made += 1 and
    # type(m) is fb.TensorMap are the learner's; anything else hands a metaclass on)
    type_calls = {id(c.func) for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                  and c.func.id == "type"}
    type_read = {id(p.value) for p in ast.walk(node) if isinstance(p, ast.Attribute)} | \
        {id(x) for p in ast.walk(node) if isinstance(p, ast.Compare) for x in (p.left, *p.comparators)}
    # the class type named where nothing calls it: an annotation (dtype: type = ...), isinstance's class argument
    type_named = {id(x) for p in ast.walk(node) for note in (
        [p.annotation] if isinstance(p, (ast.arg, ast.AnnAssign)) and p.annotation is not None else
        [p.returns] if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)) and p.returns is not None else
        [p.args[1]] if isinstance(p, ast.Call) and isinstance(p.func, ast.Name)
        and p.func.id in ("isinstance", "issubclass") and len(p.args) == 2 else [])
        for x in ast.walk(note) if isinstance(x, ast.Name) and x.id == "type"}
    for n in ast.walk(node):
        named = [v for f, v in ast.iter_fields(n) if f in ("id", "arg", "name", "asname", "attr", "names", "rest")
                 for v in (v if isinstance(v, list) else [v]) if isinstance(v, str) and v.startswith("__fb")]
        if named:
            say(f"it names {named[0]}, a name the grader keeps for its own helpers", n)
        bound = _binds_module_name(n)
        if bound:
            say(f"it binds the name {bound} to something other than {MODULE_NAMES[bound]} (the rules read "
                f"{'cuda.jit' if bound == 'cuda' else bound + '.vectorize'} by that name): give yours another name", n)
        if isinstance(n, ast.Import):
            for b in (a.name for a in n.names if not _importable(a.name)):
                say(f"it imports {b} (a graded cell may import {allowed}; names with _ and the toolkit's own "
                    "state excepted)", n)
        elif isinstance(n, ast.ImportFrom):
            windowed = n.module == "numpy.lib.stride_tricks" and all(a.name == "sliding_window_view" for a in n.names)
            if n.level or not (windowed or _importable(n.module or "")) or any(
                    not _importable(f"{n.module}.{a.name}", member=True) or a.name == "*" for a in n.names):
                say(f"it imports from {'.' * n.level}{n.module or ''} (a graded cell may import {allowed}, one "
                    "name at a time; names with _ and the toolkit's own state excepted)", n)
        elif isinstance(n, ast.Global) and set(n.names) & (protected | modules | BUILTIN_NAMES):
            # a function that rebinds, when called, a name the lab gives, a module or a builtin; a counter of
            # the learner's own (`global CALLS`), or `nonlocal`, is theirs
            say(f"it declares {', '.join(sorted(set(n.names) & (protected | modules | BUILTIN_NAMES)))} global", n)
        elif isinstance(n, ast.Name) and n.id in ("wraps", "update_wrapper") and id(n) not in wraps \
                and id(n) not in on_self and isinstance(n.ctx, ast.Load):
            say(f"it calls {n.id} other than as @wraps(f) on a function of its own or on self in a method "
                "(it sets the attributes it is told to on any object)", n)
        elif isinstance(n, ast.Name) and n.id in CALLS | {"__builtins__", "__loader__", "__spec__"} \
                and id(n) not in local and id(n) not in own:
            # (a local named `input` is theirs; super() in a method)
            say(f"it uses {n.id}" + (": write obj.name = value, on an object of your own" if n.id == "setattr"
                                     else ": write obj.name, or getattr(obj, \"name\", default) with a public name "
                                     "written at the call" if n.id == "getattr" else
                                     " (an object's address in memory): compare objects with `is`, or key a dict "
                                     "by the object itself" if n.id in ("id", "hash") else ""), n)
        elif isinstance(n, ast.Attribute):
            # in a method: self._n and self.__n, super()._n (checked as they run: a private name of the learner's
            # classes), super().__init__
            # another object's _n too (checked as it runs: an object of the learner's, a name their classes define)
            if n.attr.startswith("_") and not (id(n) in own and (
                    isinstance(n.value, ast.Call) or isinstance(n.value, ast.Name) and not _dunder(n.attr))) \
                    and n.attr.startswith("__") \
                    and not (n.attr in READABLE_DUNDERS | NAMEDTUPLE and isinstance(n.ctx, ast.Load)) \
                    and not (n.attr in SETTABLE_DUNDERS and isinstance(n.ctx, ast.Store)):   # self._n; fn.__name__
                say(f"it reaches the private attribute .{n.attr} (a name that starts with __ is Python's or a class's "
                    "own, except self.__name in a method of your class and super().__init__)"
                    + INSTEAD_OF_DUNDER.get(n.attr, ""), n)
            elif n.attr == "stride_tricks" and id(n) in windows:
                pass        # np.lib.stride_tricks.sliding_window_view: a view its strides are checked for
            elif n.attr == "vectorize" and isinstance(n.value, ast.Name) and n.value.id in ("np", "numpy"):
                pass        # numpy's, a loop in Python (Numba's of that name compiles native code: refused below)
            elif n.attr in NATIVE and id(n) not in own:
                say(f"it reaches .{n.attr}, a library's way to raw memory, native code or files, which the grader "
                    "does not run (refused on any object: an attribute of your own takes another name)", n)
            elif n.attr in INTERNAL and id(n) not in decorators and id(n) not in own:   # @functools.cache
                say(f"it reaches .{n.attr} (the grader's and the toolkit's own state)", n)
            elif n.attr == "jit" and not (isinstance(n.value, ast.Name) and n.value.id == "cuda" or ast.unparse(
                    n.value) == "numba.cuda"):
                say("it reaches .jit other than as cuda.jit: Numba's CPU compiler runs native code without bounds "
                    "checks (an index past the end writes the process's memory); a graded cell compiles kernels "
                    "with @cuda.jit", n)
            elif n.attr in CALLS - {"input", "super", "id", "hash"}:
                say(f"it reaches .{n.attr} (what the builtin of that name does, reached through a module)", n)
            elif n.attr in ("wraps", "update_wrapper") and id(n) not in wraps and id(n) not in on_self:
                say(f"it calls functools.{n.attr} other than as @functools.wraps(f) on a function of its own "
                    "or on self in a method (it sets the attributes it is told to on any object)", n)
            # any other attribute set or deleted: guarded() has it set only on an object the learner's code made
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in FINALIZERS or \
                isinstance(n, ast.Name) and (isinstance(n.ctx, ast.Store) or n.id == "__annotations__") \
                and n.id in FINALIZERS or _bound_name(n) in FINALIZERS:
            # (bound any way: a match capture `case __annotations__:`, `as`, `except`, a parameter)
            name = getattr(n, "name", None) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) else \
                n.id if isinstance(n, ast.Name) else _bound_name(n)
            say(f"it defines {name}" + (
                " (the checks compare, count and convert values with it, so graded code may not change what it "
                "answers: give the method a name of its own, such as nbytes())" if name in COMPARED else
                " (a dataclass's __init__ sets every name it holds on each object, names made at run time too): "
                "write each field as `name: type`" if name == "__annotations__" else
                " (Python calls it outside the code that names it)"), n)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in FINALIZERS:
            say(f"it names {n.value}", n)            # type("X", (int,), {"__ne__": ...})
        elif isinstance(n, ast.Call) and (n.func.attr if isinstance(n.func, ast.Attribute) else getattr(
                n.func, "id", None)) == "DeviceArray":
            # DeviceArray(shape, dtype, ptr): any address, owned (freed when it goes) or not
            say("it makes a DeviceArray over an address of its own: allocate with fb.empty or fb.to_device", n)
        elif isinstance(n, ast.keyword) and n.arg == "link":
            # cuda.jit(link=[path]), cuda.declare_device(..., link=...): a file's code linked into the kernel
            say("it links a file's code into a kernel (link=...): a graded kernel is written in the lab's cells", n)
        elif isinstance(n, ast.Call) and (n.func.attr if isinstance(n.func, ast.Attribute) else getattr(
                n.func, "id", None)) in ENUM_MAKERS and (len(n.args) > 1 or any(k.arg != "value" for k in n.keywords)):
            # Enum("E", {"__array_" + "interface__": ...}): the functional API makes a class whose attribute names
            # are computed, past the rules above (a dunder name is kept as a plain class attribute)
            say("it makes an enum with the functional API (Enum(name, members)): write it as a class statement", n)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "type" \
                and len(n.args) + len(n.keywords) > 1 and id(n.func) not in local:
            # its names may be computed ("_" + "_ne__"), past the rule above: a class is written as a class
            say("it makes a class with type(name, bases, namespace): write it as a class statement", n)
        elif isinstance(n, ast.MatchClass) and n.patterns:
            # `case K(v)` reads the attributes K.__match_args__ names, whatever made K: a name held as text
            say("it matches a class pattern by position (case C(x)), which reads the attributes the class's "
                "__match_args__ names: write it with keywords (case C(field=x))", n)
        elif isinstance(n, ast.Name) and n.id == "type" and id(n) not in local and id(n) not in type_calls \
                and id(n) not in type_named:
            # type held as a value ([type][0], t = type) makes classes whose method names may be computed
            say("it uses type other than as type(obj) read at once (type(obj).name, type(a) is B): write a class "
                "as a class statement", n)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "type" and id(n) not in local \
                and len(n.args) == 1 and not n.keywords and id(n) not in type_read:
            # type(obj) handed on is a metaclass (type(collections.abc.Callable) is ABCMeta): called, it makes a class
            say("it hands on type(obj), which is a class's metaclass (calling it makes a class): use it only where it "
                "is read (type(obj).name, type(a) is B)", n)
        elif isinstance(n, ast.MatchClass) and any(a.startswith("_") or a in INTERNAL | CALLS for a in n.kwd_attrs):
            # `case object(__globals__=g)` reads an attribute by the name written in the pattern, as obj.name does
            bad = next(a for a in n.kwd_attrs if a.startswith("_") or a in INTERNAL | CALLS)
            say(f"it reads .{bad} through a class pattern (case C({bad}=...)), which reads it as obj.{bad} would: a "
                "name that starts with _, or the grader's and the toolkit's own, is not a graded cell's to read", n)
        elif isinstance(n, ast.keyword) and n.arg == "module":
            # make_dataclass(..., module="numpy"), namedtuple(..., module=...): a class the notebook's code makes
            # is known by its module (the integrity check's look at special methods)
            say("it names the module of a class it makes (module=...): a class of yours belongs to your notebook", n)
        elif isinstance(n, ast.keyword) and n.arg in FINALIZERS:
            say(f"it names {n.arg}", n)              # type("X", (int,), dict(__ne__=...))
        else:
            note = n.annotation if isinstance(n, (ast.arg, ast.AnnAssign)) else \
                n.returns if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
            if isinstance(note, ast.Constant) and isinstance(note.value, str) and not _type_expression(note.value):
                say("it writes an annotation as a string that is more than a type's name (typing.get_type_hints "
                    "would run it as code): write the type itself, or its name", n)
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and n.attr in ("format", "format_map") and not _plain_format(n.value):
            # "{0.__globals__}".format(f) reads attributes and items named in the text, past the rules above
            say(f"it calls .{n.attr} on a text that is not a string literal at the call (a name, MSG.format(...)), "
                "or whose fields read an attribute or an item ({0.x}, {0[k]}): write an f-string, or .format on "
                "the literal itself with plain fields (\"{0} rows\".format(n), {n:.2f})", n)
        # (a local variable or parameter of the same name is the learner's own)
        if isinstance(n, ast.Name) and n.id in theirs and id(n) not in local or \
                isinstance(n, ast.Global) and set(n.names) & theirs:      # (nonlocal names a function's own)
            name = n.id if isinstance(n, ast.Name) else sorted(set(n.names) & theirs)[0]
            say(f"it names {name}, which the checks bind for themselves: called during a check, your code would "
                f"see the checks' {name}, not yours. Pass what it needs as an argument, or give yours another name", n)
        elif isinstance(n, ast.Name) and n.id in protected and n.id.startswith("_") and isinstance(n.ctx, ast.Load) \
                and id(n) not in local:
            say(f"it reads {n.id}, the lab's own state (a name the lab gives that starts with _)", n)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in MUTATORS \
                and isinstance(n.func.value, ast.Name) and n.func.value.id in protected - modules \
                and id(n.func.value) not in local:
            say(f"it changes {n.func.value.id} in place (.{n.func.attr}), which the lab gives", n)
    for n in ast.walk(node):     # a function that rebinds a protected name when called: `global` above; a
        if isinstance(n, ast.Subscript) and isinstance(n.ctx, (ast.Store, ast.Del)):   # subscript store on one:
            root = n.value
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            if isinstance(root, ast.Name) and root.id in protected | modules and n is not node and id(root) not in local:
                say(f"it changes an item of {root.id}", n)
    if lines is not None:
        lines.extend(out.values())
    return list(out)


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, *_COMPREHENSIONS)


def _own_nodes(body):
    """The nodes of a scope's body, not of the scopes nested in it (those come last, as nodes)."""
    stack, nested = list(body), []
    while stack:
        n = stack.pop()
        if isinstance(n, _SCOPES):
            nested.append(n)
            continue
        yield n
        stack.extend(ast.iter_child_nodes(n))
    yield from nested


def _function_locals(node) -> set[int]:
    """id() of each Name node that reads a name bound in its own scope or in an enclosing function's (Python's rule:
    a name bound anywhere in a function, a lambda or a comprehension is local there, and seen by the scopes nested in
    it; a class body's names are not seen by its methods): such a name is the learner's value, not the builtin it
    shadows. The statement's own top level binds nothing here: a top-level name that rebinds a builtin is refused
    on its own."""
    out: set[int] = set()

    own = _own_nodes

    def visit(scope, env):
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = scope.args
            params = {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x is not None}
            # defaults and decorators are read in the enclosing scope
            outer = [*a.defaults, *(d for d in a.kw_defaults if d is not None),
                     *getattr(scope, "decorator_list", [])]
            body = scope.body if isinstance(scope.body, list) else [scope.body]
        elif isinstance(scope, ast.ClassDef):
            params, outer, body = set(), [*scope.bases, *scope.decorator_list], scope.body
        else:            # a comprehension: its generators' targets and conditions, its element(s)
            params, outer = set(), [scope.generators[0].iter]       # the first iterable is read outside
            body = [x for g in scope.generators for x in (g.target, *g.ifs)] + \
                   [g.iter for g in scope.generators[1:]] + \
                   [getattr(scope, f) for f in ("elt", "key", "value") if getattr(scope, f, None) is not None]
        for n in own(outer):        # read in the enclosing scope: local there when that scope binds the name
            if isinstance(n, _SCOPES):
                visit(n, env)
            elif isinstance(n, ast.Name) and n.id in env:
                out.add(id(n))
        nodes = list(own(body))
        # a class body's own names are not local to it: a read there falls back to the globals (`_mods = _mods`)
        here = set() if isinstance(scope, ast.ClassDef) else params | _scope_binds(scope, nodes)
        if isinstance(scope, ast.ClassDef):       # a class attribute (`m = 448.0` in the body) binds no global
            out.update(id(n) for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
        seen = env | here
        for n in nodes:
            if isinstance(n, _SCOPES):
                visit(n, seen if not isinstance(scope, ast.ClassDef) else env)
            elif isinstance(n, ast.Name) and n.id in seen:
                out.add(id(n))

    def walk(body, env):
        for n in own(body):
            if isinstance(n, _SCOPES):
                visit(n, env)
    walk([node], set())
    return out


def _scope_binds(scope, nodes) -> set[str]:
    """The names a module, function, lambda or comprehension binds for itself (Python's rule: local there): assignments,
    imports, nested definitions, `except ... as`, `match` captures, and the walrus targets of the comprehensions in
    it (they bind in the function around them); a name it declares global or nonlocal is not its own."""
    out = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    out |= {a.asname or a.name.split(".")[0] for n in nodes if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in n.names}
    out |= {n.name for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    out |= {n.name for n in nodes if isinstance(n, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and n.name}
    out |= {n.rest for n in nodes if isinstance(n, ast.MatchMapping) and n.rest}
    if not isinstance(scope, _COMPREHENSIONS):
        out |= {x.target.id for n in nodes if isinstance(n, _COMPREHENSIONS)
                for x in ast.walk(n) if isinstance(x, ast.NamedExpr)}
    if isinstance(scope, ast.Module):     # a module's `global x` is x itself
        return out
    return out - {x for n in nodes if isinstance(n, (ast.Global, ast.Nonlocal)) for x in n.names}


def _plain_format(value) -> bool:
    """A text written in the cell whose replacement fields only place arguments ({0}, {n:.2f}, {}), reading no
    attribute or item of them, in its format specs too."""
    import string
    if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
        return False

    def plain(text, depth=0):
        try:
            parts = list(string.Formatter().parse(text))
        except ValueError:
            return False
        return all(field is None or not any(c in field for c in ".[") and (depth > 1 or plain(spec or "", depth + 1))
                   for _, field, spec, _ in parts)
    return plain(value.value)


# names whose attributes the rules trust by the name (cuda.jit, np.vectorize): bound to that module only
MODULE_NAMES = {"cuda": "numba.cuda", "np": "numpy", "numpy": "numpy", "numba": "numba"}


def _binds_module_name(n) -> str | None:
    """The name of MODULE_NAMES this node binds to anything but its module (`import numba as cuda`, `cuda = numba`,
    `import numba as np`, a parameter, a loop variable, `except E as cuda`, a pattern's capture), else None."""
    names = []
    if isinstance(n, ast.Import):
        names = [b for a in n.names if (b := a.asname or a.name.split(".")[0]) in MODULE_NAMES
                 and a.name != MODULE_NAMES[b] and not (a.asname is None and a.name.startswith(b + "."))]
    elif isinstance(n, ast.ImportFrom):
        names = [b for a in n.names if (b := a.asname or a.name) in MODULE_NAMES
                 and f"{n.module}.{a.name}" != MODULE_NAMES[b]]
    elif isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
        names = [n.id]
    elif isinstance(n, (ast.Global, ast.Nonlocal)):
        names = n.names
    elif not isinstance(n, ast.alias):      # (an import's names: the Import itself, above)
        names = [_bound_name(n)]
    return next((b for b in names if b in MODULE_NAMES), None)


def _bound_name(n) -> str | None:
    """The name a match capture, an `except ... as`, an import's `as` or a parameter binds, else None."""
    if isinstance(n, (ast.MatchAs, ast.MatchStar, ast.ExceptHandler)):
        return n.name
    if isinstance(n, ast.MatchMapping):
        return n.rest
    if isinstance(n, ast.alias):
        return n.asname
    if isinstance(n, ast.arg):
        return n.arg
    return None


def _importable(name: str, member: bool = False) -> bool:
    if member and name == "functools.cache":       # `from functools import cache`
        return True

    parts = name.split(".")
    if member and parts[-1] in CALLS:   # from feedbeast import compile: what fb.compile is refused as
        return False
    if name == "numba.jit":     # Numba's CPU compiler (cuda.jit is the one a graded cell uses)
        return False
    if name in ("numpy.vectorize", "numpy.lib.stride_tricks.sliding_window_view"):   # numpy's own, checked
        return True
    return parts[0] in IMPORTABLE and not (set(parts[1:]) & INTERNAL) and not any(p.startswith("_") for p in parts[1:])
