"""The repository's promises: pins agree, notebooks are well-formed, labs are generated and clean."""
import json
import re
from pathlib import Path

import nbformat
import pytest

from feedbeast.course import labs
from feedbeast.errors import STARTER_MARK, unwritten
from feedbeast.course.notebook import new, read

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(ROOT.glob("chapters/*.ipynb")) + sorted(ROOT.glob("solutions/*.ipynb")) + \
    sorted(ROOT.glob("labs/*.ipynb"))


def read_pins(path: Path, seen=None) -> dict:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("-r "):
            pins.update(read_pins(path.parent / line[3:].strip()))
        elif "==" in line:
            name, ver = line.split("==")
            pins[re.sub(r"\[.*\]", "", name).strip().lower()] = ver.strip()
    return pins


def test_environment_yml_has_the_same_pins_as_requirements():
    want = read_pins(ROOT / "requirements/cu13.txt") | read_pins(ROOT / "requirements/lab.txt") | \
        read_pins(ROOT / "requirements/book.txt")
    text = (ROOT / "environment.yml").read_text()
    got = {}
    for m in re.finditer(r"^\s*-\s*([A-Za-z0-9_.\-\[\],]+)==(\S+)\s*$", text, re.MULTILINE):
        got[re.sub(r"\[.*\]", "", m.group(1)).lower()] = m.group(2)
    assert got == want


def test_cuda12_switch_differs_only_in_the_cuda_packages():
    a, b = read_pins(ROOT / "requirements/cu13.txt"), read_pins(ROOT / "requirements/cu12.txt")
    assert {k for k in a if a[k] != b.get(k)} == {"cuda-bindings", "cuda-toolkit"}
    assert b["cuda-bindings"].startswith("12.") and b["cuda-toolkit"].startswith("12.")


def test_comparator_set_is_pinned_and_holds_what_the_chapters_look_for():
    # make wheelhouse COMPARE=1 downloads requirements/compare.txt with --no-deps: every line must pin one version,
    # and the distributions whose versions chapters 09 and 10 print must be among them.
    lines = [ln.split("#")[0].strip() for ln in (ROOT / "requirements/compare.txt").read_text().splitlines()]
    reqs = [ln for ln in lines if ln]
    assert reqs and all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[A-Za-z0-9_.]+", ln) for ln in reqs), reqs
    pins = read_pins(ROOT / "requirements/compare.txt")
    ch09, ch10 = ((ROOT / f"chapters/{n}.ipynb").read_text() for n in ("09-attention", "10-decode"))
    for dist, text in (("flashinfer-python", ch10), ("flash-attn-4", ch10), ("nvidia-cutlass-dsl", ch10),
                       ("nvidia-cudnn-frontend", ch09)):
        assert dist in pins and dist.removeprefix("nvidia-") in text, dist


def test_there_are_notebooks():
    assert (ROOT / "chapters/00-feeding-the-beast.ipynb").exists()
    assert len(list(ROOT.glob("solutions/*.ipynb"))) >= 1


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_notebook_format(path):
    nb = read(path)
    nbformat.validate(nb)
    assert all("id" in c for c in nb.cells), "cells need ids (nbformat >= 4.5)"
    assert nb.metadata.get("kernelspec", {}).get("name") == "feedbeast"
    text = path.read_text()
    for bad in ("/work/", "/home/", "/root/", "/Users/", "C:\\\\"):
        assert bad not in text, f"absolute path {bad!r} in {path.name}"
    if path.parent.name in ("labs", "solutions"):
        assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), \
            f"{path.name} must carry no outputs"


def test_every_lab_is_generated_from_its_solution():
    assert labs.stale(ROOT / "solutions", ROOT / "labs") == []
    sols = {p.name for p in ROOT.glob("solutions/*.ipynb")}
    assert {p.name for p in ROOT.glob("labs/*.ipynb")} == sols


def test_solutions_mark_the_learners_part_and_labs_hide_it():
    for sol in ROOT.glob("solutions/*.ipynb"):
        text = sol.read_text()
        assert "BEGIN SOLUTION" in text, f"{sol.name} marks no solution region"
        lab = (ROOT / "labs" / sol.name).read_text()
        assert "BEGIN SOLUTION" not in lab and "TODO: your code here" in lab


def test_strip_source_keeps_indentation_and_rejects_unbalanced_markers():
    src = "a\n    // BEGIN SOLUTION\n    x = 1;\n    // END SOLUTION\nb"
    assert labs.strip_source(src) == "a\n    // TODO: your code here (see the hints below)\nb"
    with pytest.raises(ValueError):
        labs.strip_source("# BEGIN SOLUTION\nx")
    with pytest.raises(ValueError):
        labs.strip_source("# END SOLUTION")


def test_reset_labs_backs_up_an_edited_lab(tmp_path):
    sol_dir, lab_dir = tmp_path / "solutions", tmp_path / "labs"
    sol_dir.mkdir()
    new(["# BEGIN SOLUTION\nx = 1\n# END SOLUTION"], to=sol_dir / "01-x.ipynb")
    labs.build(sol_dir, lab_dir)
    edited = (lab_dir / "01-x.ipynb").read_text().replace("TODO: your code here", "my attempt")
    (lab_dir / "01-x.ipynb").write_text(edited)
    (lab_dir / "notes.txt").write_text("mine")
    labs.reset(sol_dir, lab_dir)
    backups = list((lab_dir / "backup").glob("01-x.*.ipynb"))
    assert len(backups) == 1 and backups[0].read_text() == edited
    assert "TODO: your code here" in (lab_dir / "01-x.ipynb").read_text()
    assert (lab_dir / "notes.txt").read_text() == "mine"
    cut = (lab_dir / "01-x.ipynb").read_bytes()[:40] + "é".encode()[:1]     # cut short inside a character
    (lab_dir / "01-x.ipynb").write_bytes(cut)
    labs.reset(sol_dir, lab_dir)
    kept = sorted(b.read_bytes() for b in (lab_dir / "backup").glob("01-x.*.ipynb"))
    assert kept == sorted([edited.encode(), cut]), kept        # both, also when both resets fall in one second
    assert "TODO: your code here" in (lab_dir / "01-x.ipynb").read_text()


def test_at_most_two_test_files_open_notebooks_themselves():
    """The others read, copy and make notebooks through feedbeast.course.notebook (load, read, planted, new)."""
    opens = re.compile(r"^\s*(import nbformat|from nbformat)|nbformat\.(reads?|writes?)\(|json\.loads?\(.*ipynb|"
                       r"open\([^)]*ipynb", re.M)
    files = sorted(p.name for p in (ROOT / "tests").glob("*.py") if opens.search(p.read_text()))
    assert "test_repo.py" in files and len(files) <= 2, f"test files that open notebooks themselves: {files}"


def test_readme_shows_the_test_command_and_ci_runs_it():
    assert "make test" in (ROOT / "README.md").read_text()
    assert "make test" in (ROOT / ".ci/run").read_text()


PACKAGE = ROOT / "src/feedbeast"
LAYERS = {"library": ("build", "run", "verify", "measure", "simulate", "shared"), "course": ("grading", "runs")}


def readme_layout() -> dict:
    """{module as README's Layout names it: layer}, from its table of layers and stages."""
    text = (ROOT / "README.md").read_text()
    layout = text[text.index("## Layout"):]
    layout = layout[:layout.index("\n## ", 1)]
    listed = []
    for layer, stages in LAYERS.items():
        for stage in stages:
            row = re.search(rf"^\| {layer} \| {stage} \| ([^|]+) \|", layout, re.MULTILINE)
            assert row, f"README's Layout has no row for the {layer}'s stage {stage!r}"
            listed += [(m, layer) for m in re.findall(r"`([^`]+)`", row.group(1))]
    names = [m for m, _ in listed]
    twice = sorted({m for m in names if names.count(m) > 1})
    assert not twice, f"listed twice in README's Layout: {twice}"
    return dict(listed)


COURSE = PACKAGE / "course"


def package_modules() -> set:
    """The modules as README's Layout names them: `bench` (feedbeast/bench.py), `sim/` (a package of the library),
    `include/fb/` (the headers), `course/grade` (a module of the course machinery, feedbeast/course/grade.py)."""
    subpackages = {f"{d.name}/" for d in PACKAGE.iterdir() if (d / "__init__.py").exists() and d != COURSE}
    return ({p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"} | subpackages | {"include/fb/"} |
            {f"course/{p.stem}" for p in COURSE.glob("*.py") if p.stem != "__init__"})


def test_readme_layout_lists_every_module_once_by_layer_and_stage():
    listed = set(readme_layout())
    modules = package_modules()
    assert listed == modules, (f"README's Layout misses {sorted(modules - listed)} "
                               f"and lists {sorted(listed - modules)}, which do not exist")


def layer_of(module: str, layers: dict) -> str:
    """The layer of a module as _imports() names it ('' is the package's __init__, 'sim.x' is in sim/, 'course' and
    'course.x' are the course machinery)."""
    if module == "":
        return "library"
    if module == "course" or module.startswith("course."):
        return "course"
    top = module.split(".")[0]
    return layers[f"{top}/" if f"{top}/" in layers else module]


def _imports() -> dict:
    """{module: modules of the package it imports anywhere (a function-level import counts too)}."""
    import ast
    names = {".".join(p.relative_to(PACKAGE).with_suffix("").parts) for p in PACKAGE.rglob("*.py")}
    names = {n[:-len(".__init__")] if n.endswith(".__init__") else n for n in names}
    graph = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE).with_suffix("").parts
        me = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        pkg = list(parts[:-1])
        deps = set()
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = pkg[:len(pkg) - node.level + 1] + (node.module.split(".") if node.module else [])
                for a in node.names:
                    full = ".".join(base + [a.name])
                    deps.add(full if full in names else ".".join(base))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                deps |= {m[len("feedbeast."):] for m in mods if m.startswith("feedbeast.")}
        graph[me] = {d for d in deps if d in names and d and d != me}
    return graph


# Import circles that remain, each with what breaks it: the test fails on any other, and when one is gone.
# None remain: a later stage that an earlier one must call is plugged in by the package's __init__.
KNOWN_CIRCLES: dict = {}


def test_no_import_circles():
    graph = _imports()
    index, low, stack, on, circles = {}, {}, [], set(), []

    def visit(v):   # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(frozenset(comp))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    new = [sorted(c) for c in circles if c not in KNOWN_CIRCLES]
    assert not new, "modules that import each other (directly or through others): " + "; ".join(
        " <-> ".join(c) + " (" + ", ".join(f"{a} imports {sorted(graph[a] & set(c))}" for a in c) + ")" for c in new)
    gone = [sorted(c) for c in KNOWN_CIRCLES if c not in circles]
    assert not gone, f"these circles are gone: remove them from KNOWN_CIRCLES: {gone}"
    assert graph["compile"] and "launch" not in _reachable(graph, "cubin")   # the graph is read at all


def test_later_stages_are_plugged_in_through_the_hooks(monkeypatch):
    """compile and launch do not import hazards (it compiles and launches), nor bench ceilings (timed with bench):
    the package installs them in feedbeast.hooks, and bench(ceiling=name) reaches ceilings.ceiling as it is when
    called."""
    import importlib
    mod = {m: importlib.import_module(f"feedbeast.{m}") for m in ("hooks", "hazards", "ceilings")}
    hooks = mod["hooks"]
    assert mod["hazards"].check_on_launch in hooks.before_launch
    assert hooks.hazard_run is mod["hazards"].run
    monkeypatch.setattr(mod["ceilings"], "ceiling", lambda which, size=None: ("measured", which, size))
    assert hooks.ceiling("bf16", 4096) == ("measured", "bf16", 4096)
    graph = _imports()
    assert "hazards" not in _reachable(graph, "compile") | _reachable(graph, "launch")
    assert "ceilings" not in _reachable(graph, "bench")
    assert graph["hooks"] == set(), "feedbeast.hooks imports nothing of the package: anything may import it"


def _reachable(graph, start):
    seen, todo = set(), [start]
    while todo:
        for w in graph.get(todo.pop(), ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


# ---- one source per kernel line: no block of six or more CUDA lines stands in two places
REPEAT_LINES = 6
_THIN = re.compile(r"^[{}()\[\];,]*$|^#\s*(include|endif|else|pragma once)\b")   # not code worth counting
# Repeats allowed, by the two places (a header, a notebook's %%cuda cell, a Python string), each with its
# reason. None: the test fails on any repeat, and on an entry here that no longer repeats.
KNOWN_REPEATS: dict = {}


def _cuda_sources() -> dict:
    """{place: (first line number, source)}: every header, every %%cuda cell of the chapters and solutions (labs
    are generated from solutions) as feedbeast.course.notebook loads it, and every CUDA source of six or more lines
    written as a Python string in the package or the tests."""
    import ast
    from feedbeast.course.notebook import load
    out = {f"include/fb/{h.name}": (1, h.read_text()) for h in sorted((PACKAGE / "include/fb").glob("*.cuh"))}
    for path in sorted(ROOT.glob("chapters/*.ipynb")) + sorted(ROOT.glob("solutions/*.ipynb")):
        for name, cell in load(path).cuda_cells.items():
            out[f"{path.parent.name}/{path.name}:{name}"] = (2, cell.source)   # line 1 is the %%cuda line
    for py in sorted(PACKAGE.rglob("*.py")) + sorted((ROOT / "tests").glob("*.py")):
        tree = ast.parse(py.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(getattr(n, "body", None), list) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                    and node.value.count("\n") >= 5 and re.search(r"__global__|__device__", node.value):
                out[f"{py.relative_to(ROOT)}:{node.lineno}"] = (node.lineno, node.value)
    return out


def repeated_blocks(sources: dict, n: int = REPEAT_LINES) -> list:
    """[(place a, lines a, place b, lines b, first line)] for each maximal run of n or more code lines (comments,
    blank and punctuation-only lines left out, white space folded) that stands in two places."""
    code = {}
    for place, (first, text) in sources.items():
        rows = [(first + i, re.sub(r"\s+", " ", ln.split("//")[0].strip())) for i, ln in enumerate(text.splitlines())]
        code[place] = [(no, ln) for no, ln in rows if ln and not _THIN.match(ln)]
    seen = {}
    for place, rows in code.items():
        for i in range(len(rows) - n + 1):
            seen.setdefault(tuple(ln for _, ln in rows[i:i + n]), []).append((place, i))
    starts = set()
    for places in seen.values():
        for j, (pa, ia) in enumerate(places):
            for pb, ib in places[j + 1:]:
                if pa != pb or abs(ia - ib) >= n:
                    starts.add((pa, pb, ia, ib))
    out = []
    for pa, pb, ia, ib in sorted(starts):
        if (pa, pb, ia - 1, ib - 1) in starts:
            continue   # inside a longer run, reported from its start
        k = 0
        while (pa, pb, ia + k + 1, ib + k + 1) in starts:
            k += 1
        last = k + n - 1
        out.append((pa, (code[pa][ia][0], code[pa][ia + last][0]), pb, (code[pb][ib][0], code[pb][ib + last][0]),
                    code[pa][ia][1]))
    return out


def test_repeated_blocks_finds_a_copied_run_and_ignores_comments():
    body = "\n".join(f"  x{i} += y[{i}];   // step {i}" for i in range(7))
    found = repeated_blocks({"a": (1, "int f() {\n" + body + "\n}"), "b": (2, "// copy\n\n" + body.replace("//", "// -"))})
    assert [(a, la, b, lb) for a, la, b, lb, _ in found] == [("a", (2, 8), "b", (4, 10))]
    assert not repeated_blocks({"a": (1, body), "b": (1, body.replace("x3", "z3"))})   # 3 + 3 lines: no run of 6


def test_no_block_of_six_cuda_lines_stands_in_two_places():
    sources = _cuda_sources()
    kinds = {"header" if k.startswith("include/") else "cell" if ".ipynb:" in k else "python" for k in sources}
    assert kinds == {"header", "cell", "python"}, f"read only {kinds}"   # every kind of place is read at all
    found = repeated_blocks(sources)
    pairs = {frozenset({a, b}) for a, _, b, _, _ in found}
    new = [f"  {a}:{la[0]}-{la[1]} and {b}:{lb[0]}-{lb[1]}, from `{first}`"
           for a, la, b, lb, first in found if frozenset({a, b}) not in KNOWN_REPEATS]
    assert not new, ("the same kernel lines stand in two places; keep them in one (a header in include/fb/, or a "
                     "device function the cells share) and build variants with -D switches:\n" + "\n".join(new))
    gone = sorted(" ~ ".join(sorted(k)) for k in KNOWN_REPEATS if k not in pairs)
    assert not gone, f"no longer repeated: remove from KNOWN_REPEATS: {gone}"


def test_a_solution_region_says_what_to_write_and_gives_starting_code():
    """`BEGIN SOLUTION: what` puts the text in the lab's TODO line; `LAB: code` lines are the lab's starting code
    (a comment in the solution), so that the lab compiles and runs as given."""
    src = ("  int s;\n  // BEGIN SOLUTION: the ring stage of tile j\n  s = (j - first) % STAGES;\n"
           "  // LAB: s = 0;\n  // END SOLUTION\n  use(s);")
    assert labs.strip_source(src) == ("  int s;\n  // TODO: your code here: the ring stage of tile j\n"
                                      f"  s = 0;  // {STARTER_MARK}\n  use(s);")
    assert labs.strip_source("# BEGIN SOLUTION\nx = 1\n# END SOLUTION") == "# TODO: your code here (see the hints below)"
    assert labs.strip_source("# BEGIN SOLUTION\nx = 1\n# LAB: x = 0\n# LAB: pass\n# END SOLUTION") == \
        f"# TODO: your code here (see the hints below)\nx = 0  # {STARTER_MARK}\npass"


def test_a_starter_line_kept_beside_the_learners_code_is_named_and_one_under_its_todo_line_is_not():
    """A starter line still under its TODO line is part of the unwritten part (the TODO sentence names it); once code
    of the learner's stands between, or the TODO line is gone, a failed check names the starter line to delete."""
    lab = labs.strip_source("  // BEGIN SOLUTION: the sum\n  // LAB: s = 0;\n  // END SOLUTION\n  use(s);")
    assert unwritten([("lab.cu", lab, 1)]) == ("your part is not written yet (lab.cu line 1: the sum): write it in place "
                                               "of each 'TODO: your code here' line.\n")
    mine = lab.replace("// TODO: your code here: the sum", "// my sum\n  s = a + b;")
    said = unwritten([("lab.cu", mine, 1)])
    assert said.startswith("the lab's starter line is still there beside your code (lab.cu line 3: s = 0;)"), said
    kept = unwritten([("lab.cu", lab.replace("  // TODO", "  s = a + b;\n  // TODO"), 1)])
    assert "not written yet (lab.cu line 2" in kept and "starter" not in kept, kept   # (written above: the TODO names it)
    two = unwritten([("f", f"def f():\n    x = 1\n    x = 0  # {STARTER_MARK}\n    y = 0  # {STARTER_MARK}\n", 5)])
    assert "starter lines are still there beside your code (f line 7: x = 0; f line 8: y = 0)" in two, two


def test_reset_selects_labs_by_number_name_or_path(tmp_path):
    sol_dir, lab_dir = tmp_path / "solutions", tmp_path / "labs"
    sol_dir.mkdir()
    for name in ("01-x.ipynb", "04-y.ipynb"):
        new(["# BEGIN SOLUTION\nx = 1\n# END SOLUTION"], to=sol_dir / name)
    labs.build(sol_dir, lab_dir)
    pick = lambda *w: [lab.name for _, lab in labs.select(sol_dir, lab_dir, w)]
    assert pick() == ["01-x.ipynb", "04-y.ipynb"]
    assert pick("04") == pick("4") == pick("04-y.ipynb") == pick("04-y") == pick(str(lab_dir / "04-y.ipynb")) \
        == ["04-y.ipynb"]
    with pytest.raises(ValueError, match="solutions/04-y.ipynb is not in .*labs/, the folder whose labs"):
        pick(str(sol_dir / "04-y.ipynb"))          # a path is that file, not the lab of its name
    assert pick("y") == pick("y.ipynb") == ["04-y.ipynb"]          # the name without its number
    assert pick("lab04") == pick("Lab 4") == pick("lab-04") == pick("04.ipynb") == ["04-y.ipynb"]   # as titles say it
    with pytest.raises(ValueError, match="no lab 'lab07'"):
        pick("lab07")
    assert pick("04", "01", "04") == ["04-y.ipynb", "01-x.ipynb"]
    with pytest.raises(ValueError, match="no lab '07': the labs are 01-x.ipynb, 04-y.ipynb"):
        pick("07")


# ---- two layers: the library (what chapters call) never imports the course machinery
# The course plugs into the library through feedbeast.hooks (installed by feedbeast.course), so no import crosses.

def crossings(graph: dict, layers: dict) -> set:
    return {(a, b) for a, deps in graph.items() for b in deps
            if layer_of(a, layers) == "library" and layer_of(b, layers) == "course"}


def test_the_library_imports_nothing_of_the_course():
    graph, layers = _imports(), readme_layout()
    found = crossings(graph, layers)
    name = lambda m: m or "__init__"
    assert not found, ("the library (what chapters call) imports the course machinery: " +
                       ", ".join(f"{name(a)} -> {b}" for a, b in sorted(found)) + ". Keep the library free of it: "
                       "let the course install what it needs through feedbeast.hooks (README, Layout)")
    assert {"course", "course.grade", "course.verdicts"} <= set(graph)          # the course's modules are read
    assert "hooks" in graph["course"] and "compile" in graph["course.notebook"]   # and it imports the library


def test_a_new_crossing_is_caught():
    """The scan sees an import from the library into the course, at module level or inside a function."""
    layers = readme_layout()
    graph = {"memory": {"device"}, "tensormap": {"memory", "course.grade"}, "course.grade": {"memory"},
             "": {"course"}, "sim.checker": {"course.verdicts"}, "hooks": set()}
    assert crossings(graph, layers) == {("tensormap", "course.grade"), ("", "course"),
                                        ("sim.checker", "course.verdicts")}
    import ast
    src = "def f():\n    from .course import verdicts\n"     # a function-level import counts
    node = next(n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ImportFrom))
    assert node.level == 1 and node.module == "course"


def variables_read(source: str) -> set:
    """The FEEDBEAST_* variables a module's code can read: each string that is exactly such a name (an environment
    key, or a constant naming one) and each keyword argument so named (dict(os.environ, FEEDBEAST_X=...)). A
    docstring or message that mentions one reads nothing."""
    import ast
    name = re.compile(r"FEEDBEAST_[A-Z_]*[A-Z]")
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and name.fullmatch(node.value):
            out.add(node.value)
        elif isinstance(node, ast.keyword) and node.arg and name.fullmatch(node.arg):
            out.add(node.arg)
    return out


def test_the_scan_sees_a_read_and_not_a_mention():
    src = ('"""FEEDBEAST_HAZARDS=1 in a notebook: the course sets the mode."""\nimport os\n'
           'a = os.environ.get("FEEDBEAST_HAZARDS")\nB = "FEEDBEAST_RESULTS"\nenv = dict(os.environ, FEEDBEAST_X=1)\n'
           'print(f"set FEEDBEAST_Y=1 {a}")\n')
    assert variables_read(src) == {"FEEDBEAST_HAZARDS", "FEEDBEAST_RESULTS", "FEEDBEAST_X"}


def test_no_variable_of_the_course_is_read_by_the_library():
    """The library reads no FEEDBEAST_* mode switch of the course's (the sanitizer's, the hazard checker's, the
    results folder, the course checkout): the course sets the library's mode through feedbeast.hooks.mode. What
    the library does read: FEEDBEAST_HOOKS, and three of its own that are no run mode of the course's: its cache
    folder, the stress runs' sizes (make stress) and the traceback's length."""
    allowed = {"FEEDBEAST_HOOKS", "FEEDBEAST_CACHE", "FEEDBEAST_STRESS", "FEEDBEAST_STRESS_SEED", "FEEDBEAST_TRACEBACK"}
    read = {}
    for p in PACKAGE.rglob("*.py"):
        rel = p.relative_to(PACKAGE)
        # __main__.py is no module of the library: it is the course's command line under the package's short name
        # (`python -m feedbeast`; README lists it with the course), the one file outside course/ that imports it
        if rel.parts[0] in ("course", "__main__.py"):
            continue
        for name in variables_read(p.read_text()):
            read.setdefault(name, set()).add(str(rel))
    assert "FEEDBEAST_HOOKS" in read, "the scan reads the library at all"
    bad = {k: sorted(v) for k, v in read.items() if k not in allowed}
    assert not bad, f"the library reads the course's variables: {bad}"
    assert "FEEDBEAST_HAZARDS" in variables_read((PACKAGE / "course" / "__init__.py").read_text())   # the course's


# Library modules whose docstring does not yet name the chapter that explains it. The test fails on any other, and
# when one of these gains it.
KNOWN_UNNAMED: set = set()
CHAPTER_NAMED = re.compile(r"\bChapters? (0\d|10)\b")


def test_every_library_module_names_the_chapter_that_explains_it():
    import ast
    layers = readme_layout()
    files = [p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts]
    lib = sorted(str(p.relative_to(PACKAGE)) for p in files
                 if layer_of("" if p == PACKAGE / "__init__.py" else ".".join(p.relative_to(PACKAGE).with_suffix("")
                                                                              .parts), layers) == "library")
    assert "sim/mbarrier.py" in lib and "__init__.py" in lib and "hooks.py" in lib and "course/grade.py" not in lib
    chapters = {p.name[:2] for p in ROOT.glob("chapters/*.ipynb")}
    unnamed, wrong = [], []
    for rel in lib:
        doc = ast.get_docstring(ast.parse((PACKAGE / rel).read_text())) or ""
        named = set(CHAPTER_NAMED.findall(doc))
        if not named:
            unnamed.append(rel)
        elif not named <= chapters:
            wrong.append(f"{rel}: chapter {sorted(named - chapters)}")
    assert not wrong, f"docstrings name chapters that do not exist: {wrong}"
    new = sorted(set(unnamed) - KNOWN_UNNAMED)
    assert not new, f"name the chapter that explains it in the module's docstring ('Chapter 05 explains ...'): {new}"
    done = sorted(KNOWN_UNNAMED - set(unnamed))
    assert not done, f"these name their chapter now: remove them from KNOWN_UNNAMED: {done}"
