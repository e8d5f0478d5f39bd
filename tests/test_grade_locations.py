"""The grader names a place in the learner's notebook as the notebook itself names it.

A notebook shows no cell numbers: a %%cuda cell's line is `lab.cu line 35` (the CUDA source's line, as its
compile errors and TODO notes count it), a line of a top-level function is `producer line 4` (the cell's line,
as check_ring, fb.errors.todo_of and IPython's tracebacks count it), any other line names its cell by the
heading above it. Lab 04 graded on the CPU: the TODO, compile and model checks run without a GPU.
"""
import re
from pathlib import Path

import pytest
from conftest import on_first_use

import feedbeast as fb
from feedbeast import magic
from feedbeast.course import grade as g
from feedbeast.course import notebook
from feedbeast.course.notebook import code, markdown, new, planted, read
from feedbeast.sim import check_ring

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "labs/04-mbarrier-ring.ipynb"
SOLUTION = ROOT / "solutions/04-mbarrier-ring.ipynb"
MODEL = 'the code cell under "## Your model"'

# name -> (replacements in the solution's code cells, the planted text whose line is named, what names it)
PYTHON_BUGS = {
    "raises-in-producer": ([("wait(ph ^ 1)", "wait(ph ^ (1 // 0))")], "1 // 0",
                           "ZeroDivisionError at producer line {n}"),
    "undefined-name": ([("wait(ph ^ 1)", "wait(phh ^ 1)")], "phh", "phh (read in producer line {n})"),
    "syntax-error": ([("yield ring.full[s].wait(ph)  ", "yield ring.full[s].wait(ph  ")], "wait(ph  ",
                     MODEL + " line {n}: SyntaxError: '(' was never closed"),
    "top-level-raises": ([("# your model\n", "# your model\nPARITY = 1 // 0\n"), ("wait(ph ^ 1)", "wait(ph ^ PARITY)")],
                         "PARITY = 1 // 0", MODEL + " line {n}: ZeroDivisionError"),
    "refused-import": ([("# your model\n", "# your model\nimport subprocess\n"),
                        ("wait(ph ^ 1)", "wait(ph ^ (subprocess is None))")],
                       "import subprocess", MODEL + " line {n}: not run by the grader: it imports subprocess"),
    # inside a function: the line named is the one quoted, not the function's first
    "refused-import-in-a-function": ([("# your model\n", "# your model\ndef tool():\n    x = 1\n    import subprocess\n"
                                                        "    return subprocess\n"),
                                      ("wait(ph ^ 1)", "wait(ph ^ (tool() is None))")],
                                     "    import subprocess",
                                     "tool line {n}: not run by the grader: it imports subprocess (a graded cell may"),
}
COMPILE_BUG = [("fb::mbar::wait(&b.empty[s]", "fb::mbar::wait(&b.emptyy[s]")]


def _cell_numbers(text: str) -> list[str]:
    """Cell numbers a learner cannot see ('check cell 2' counts the code cells under `## Check`: allowed)."""
    return re.findall(r"(?<!check )\bcells? \d+", text)


def _failures(rep) -> str:
    return "\n".join(f"{o.name}: {o.message}" for o in rep.failed)


def _named(sentence: str) -> list[str]:
    """The places a 'your part is not written yet (...)' sentence names, in order."""
    inside = re.search(r"not written yet \((.*)\): write it", sentence, re.S)[1]
    return [item.split(":")[0] for item in inside.split("; ")]


def _line(path: Path, marker: str) -> int:
    """The line of the code cell holding `marker`, counted as the cell counts it (1: its first)."""
    for c in read(path).cells:
        if c.cell_type == "code" and marker in c.source:
            return next(n for n, ln in enumerate(c.source.splitlines(), 1) if marker in ln)
    raise LookupError(marker)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade each variant once, on first use."""
    tmp = tmp_path_factory.mktemp("locations")

    def grade(name):   # the lab as given, the kernel cell with a compile error, or a model cell's bug
        path = LAB if name == "lab" else planted(
            SOLUTION, *((COMPILE_BUG,) if name == "compile-error" else (PYTHON_BUGS[name][0],)),
            cuda_only=name == "compile-error", to=tmp / f"04-{name}.ipynb")
        return path, g.grade(path, solutions=ROOT / "solutions", timeout=300)
    return on_first_use(grade)


def test_todo_lines_are_named_as_the_model_check_and_the_kernel_name_them(graded):
    """Lab 04 as given: the grader's first failure names each TODO line as check_ring does for the model and
    the compiled kernel's module does (lab.cu, the line under `%%cuda`), in the notebook's order."""
    _, rep = graded("lab")
    ours = next(o.message for o in rep.failed if o.name == "your part")
    ns = notebook.load(LAB).definitions("producer", "consumer")
    model = check_ring(ns["producer"], [ns["consumer"]], stages=2, tiles=2).todo
    kernel = notebook.load(LAB).compile("lab", "sm_90a").todo
    assert _named(ours) == _named(model) + _named(kernel), f"{ours}\n{model}\n{kernel}"
    assert not _cell_numbers(str(rep)), str(rep)


def test_a_compile_error_names_the_cuda_cell_as_the_notebook_does(graded):
    path, rep = graded("compile-error")
    (failed,) = rep.failed
    n = next(k for k, ln in enumerate(notebook.load(path).cuda("lab").source.splitlines(), 1) if "emptyy" in ln)
    cell = next(c.source for c in read(path).cells if c.source.startswith("%%cuda"))
    flags, _, body = cell.partition("\n")
    with pytest.raises(fb.CompileError) as shown:      # what the notebook's %%cuda cell prints
        magic.cuda_cell(flags[len("%%cuda"):], body, {})
    assert failed.name == "your %%cuda --name lab cell", failed.name
    assert f"lab.cu:{n}: error" in failed.message and f"CompileError: {shown.value}" in failed.message, failed.message
    assert not _cell_numbers(str(rep)), str(rep)


@pytest.mark.parametrize("bug", PYTHON_BUGS)
def test_a_python_mistake_in_the_model_cell_is_named_by_its_function_or_heading_and_line(graded, bug):
    path, rep = graded(bug)
    _, marker, says = PYTHON_BUGS[bug]
    assert rep.status == "failed", str(rep)
    assert says.format(n=_line(path, marker)) in _failures(rep), _failures(rep)
    assert not _cell_numbers(str(rep)), str(rep)
    if "not run by the grader" in says:       # the line named is the line quoted
        assert f":\n    {marker.strip()}" in _failures(rep), _failures(rep)


def test_a_python_todo_is_numbered_as_todo_of_numbers_it():
    """Lab 10's quantize: its check cell's fb.errors.todo_of and the grader name the same line."""
    lab = ROOT / "labs/10-fp8-gemv.ipynb"
    ns = notebook.load(lab).definitions("quantize")
    said = _named(fb.errors.todo_of(ns["quantize"]))
    assert said and all(p.startswith("quantize line ") for p in said), said
    assert [p for p in _named(g._todo(g.learner_part(read(lab)))) if p.startswith("quantize")] == said


def test_a_cell_is_named_by_the_heading_above_it_and_its_first_line_when_it_shares_it():
    todo = "# TODO: your code here: {}"
    nb = new([markdown("# Lab"), "import numpy as np",
              markdown("## Your code\n```python\n# not a heading\n```"), "a = 1\n" + todo.format("a"),
              markdown("<details>a hint</details>"), "b = 2\n" + todo.format("b"),
              markdown("## Your helper"), "x = 0\n\n@staticmethod\ndef f(y):\n    y += 1\n    " + todo.format("f"),
              code("%%cuda --name k\n__global__ void k() {\n  " + todo.format("k") + "\n}")])
    assert _named(g._todo(nb.cells)) == ['the code cell under "## Your code" starting "a = 1" line 2',
                                         'the code cell under "## Your code" starting "b = 2" line 2',
                                         "f line 6", "k.cu line 2"]
    nb.cells = [nb.cells[1], *nb.cells[6:8]]           # no heading above the first; one cell under the other
    assert notebook.at(nb.cells, 0, 1) == 'the code cell starting "import numpy as np" line 1'
    assert notebook.at(nb.cells, 2, 1) == 'the code cell under "## Your helper" line 1'
