"""A learner's first contact with a lab, through a notebook kernel (nbclient; no server, no browser):

- Run All of each lab as given fails once, in a check cell, with one message that names the learner's unwritten
  part (its TODO lines); no cell after it fails for a name the failed cell would have set (no cascade);
- `%%cuda --help` alone in a cell prints the flags; `%cuda` on one line says where the code goes;
- `make lab` without JupyterLab installs nothing unasked (an offline room), and a learner's install leaves out
  the workshop hub (`make workshop` brings it);
- `python -m feedbeast reset 04` finds the course from any folder in it and restores lab 04 alone.
Nothing here installs or downloads anything.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import make_env
from feedbeast.course import notebook

ROOT = Path(__file__).resolve().parents[1]
LABS = sorted((ROOT / "labs").glob("[0-9][0-9]-*.ipynb"))
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _run_all(nb, folder: Path):
    """Execute every code cell of `nb` (errors do not stop the run) in a fresh kernel of this interpreter."""
    nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed here (it comes with nbval)")
    pytest.importorskip("ipykernel", reason="ipykernel is not installed here")
    from jupyter_client import KernelManager
    import tempfile
    # a local socket file, no TCP port; in a folder of its own: the kernel runs in the lab's folder, and sockets
    # left there would be copied with the course (the workshop hub copies labs/ into each learner's home)
    km = KernelManager(kernel_name="python3", transport="ipc", ip=str(Path(tempfile.mkdtemp(prefix="fbk")) / "k"))
    nbclient.NotebookClient(nb, km=km, timeout=600, allow_errors=True,
                            resources={"metadata": {"path": str(folder)}}).execute()
    return nb


def _errors(nb):
    """[(cell index, ename, traceback as the notebook shows it)]"""
    return [(i, o.ename, ANSI.sub("", "\n".join(o.traceback)))
            for i, c in enumerate(nb.cells) if c.cell_type == "code"
            for o in c.get("outputs", []) if o.output_type == "error"]


@pytest.mark.parametrize("path", LABS, ids=lambda p: p.name)
def test_a_lab_as_given_fails_once_at_the_learners_part(path):
    """Without the lab's GPU the checks that can run here (SASS, the simulators, the models) meet the unwritten
    part first: in each check cell at most one error, short, naming the TODO lines of the code it checks."""
    import feedbeast as fb
    if fb.gpu() is not None:
        pytest.skip(f"as given on {fb.gpu().name} a check launches the unwritten kernel; the grader's tests "
                    "cover that (test_grade_labs)")
    nb = _run_all(notebook.read(path), path.parent)
    errors = _errors(nb)
    first_check = next(j for j, c in enumerate(nb.cells) if c.cell_type == "markdown"
                       and c.source.startswith("## Check"))
    measure = next((j for j, c in enumerate(nb.cells) if c.cell_type == "markdown"
                    and c.source.startswith("## Measure")), len(nb.cells))
    checks = [j for j, c in enumerate(nb.cells[:measure]) if j > first_check and c.cell_type == "code"]
    # one error per check cell at most (a lab may split its checks so that one does not hide the next: the model's
    # and the kernel's in lab 04), each in a check cell, each saying the part is not written
    assert 1 <= len(errors) <= len(checks), "\n\n".join(f"cell {i}: {tb[-600:]}" for i, _, tb in errors) \
        or "nothing failed"
    todo_lines = sum(ln.count("TODO: your code here") for c in nb.cells if c.cell_type == "code"
                     for ln in c.source.splitlines())
    for i, ename, tb in errors:
        assert i in checks, f"cell {i}, not a check cell (checks: {checks}), failed:\n{tb}"
        assert ename in ("CheckFailed", "SassMismatch", "CompileError"), tb
        lines = tb.splitlines()
        assert lines[0].startswith("Cell In[") and len(lines) <= 8, f"{len(lines)} lines:\n{tb}"
        assert "your part is not written yet (" in tb and "site-packages" not in tb and "feedbeast/" not in tb, tb
        named = tb.split("your part is not written yet (", 1)[1].split("): write it", 1)[0]
        assert named.count(" line ") >= 1 and named.count(" line ") <= todo_lines, tb
    shown = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "declared but never referenced" not in shown, shown   # one note instead (test_unused_until_written)
    if path.name.startswith("00-"):        # the plain copy kernel is built for the oldest GPU the course has
        assert any("compiled for sm_75" in o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", [])), "lab 00's kernel was not built for sm_75 without a GPU"


def test_cuda_help_alone_in_a_cell_prints_the_flags():
    nbformat = pytest.importorskip("nbformat")
    cells = ["%load_ext feedbeast", "%%cuda --help\n", "%%cuda -h", "%cuda --help", "%cuda --arch sm_90a"]
    nb = _run_all(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), ROOT / "labs")
    outs = ["".join(o.get("text", "") for o in c.outputs) for c in nb.cells]
    for text in outs[1:4]:
        assert text.startswith("usage: %%cuda") and "--min-arch" in text and "-D NAME[=VALUE]" in text, text
    (_, ename, tb), = _errors(nb)
    assert ename == "CompileError" and "put `%%cuda --arch sm_90a` on the first line of a cell" in tb, tb
    assert tb.splitlines()[0] == "Cell In[5], line 1: %cuda --arch sm_90a", tb


def _env():
    env = make_env(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)       # a bare interpreter sees only what its own site-packages hold
    return env


def test_make_lab_without_jupyterlab_installs_nothing(tmp_path):
    """An environment without JupyterLab and no bundle named: make lab says how to get it, and runs no pip (this
    interpreter has none: a pip call would fail with 'No module named pip')."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    py = tmp_path / "bare/bin/python"
    # without the course either: ENV=current installs nothing, so it says where the course is to come from
    r = subprocess.run(["make", "-s", "--no-print-directory", "lab", "ENV=current", f"PYTHON3={py}"], cwd=ROOT,
                       env=_env(), capture_output=True, text=True, timeout=60)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "cannot import feedbeast (ModuleNotFoundError: No module named 'feedbeast')" in out \
        and "PYTHON3=<env>/bin/python" in out, out
    assert "WHEELS=dir" in out and "No module named pip" not in out and "jupyter" not in r.stdout, out
    # the course there (a stand-in package on its path), JupyterLab not
    (tmp_path / "course/feedbeast").mkdir(parents=True)
    (tmp_path / "course/feedbeast/__init__.py").write_text("")
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "course.pth").write_text(str(tmp_path / "course") + "\n")
    r = subprocess.run(["make", "-s", "--no-print-directory", "lab", "ENV=current", f"PYTHON3={py}"], cwd=ROOT,
                       env=_env(), capture_output=True, text=True, timeout=60)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "JupyterLab is not installed in" in out and "make lab ENV=current WHEELS=dir" in out, out
    assert "PIP_BREAK_SYSTEM_PACKAGES=1 " in out, out     # a system Python (PEP 668) takes the advice too
    assert "No module named pip" not in out and "jupyter" not in r.stdout, out
    # with a bundle named, from the bundle only
    dry = subprocess.run(["make", "-n", "--no-print-directory", "lab", "ENV=venv", "WHEELS=/nowhere"], cwd=ROOT,
                         env=_env(), capture_output=True, text=True, check=True).stdout
    assert "pip install -q --no-index --find-links /nowhere -r requirements/lab.txt" in dry, dry


def test_a_learners_install_leaves_out_the_hub(tmp_path):
    """The venv a learner's make lab creates has JupyterLab and the book but not JupyterHub; make workshop
    brings requirements/hub.txt."""
    venv = tmp_path / "v"
    dry = subprocess.run(["make", "-n", "-B", "--no-print-directory", "install", "ENV=venv", f"VENV={venv}"],
                         cwd=ROOT, env=_env(), capture_output=True, text=True, check=True).stdout
    assert "-r requirements/lab.txt" in dry and "-r requirements/book.txt" in dry, dry
    assert "hub.txt" not in dry, dry
    dry = subprocess.run(["make", "-n", "--no-print-directory", "workshop", "ENV=current",
                          f"PYTHON3={sys.executable}"], cwd=ROOT, env=_env(), capture_output=True, text=True,
                         check=True).stdout
    assert "-r requirements/hub.txt" in dry, dry


def test_reset_finds_the_course_from_a_folder_inside_it(tmp_path):
    """A learner in labs/ (JupyterLab's terminal opens there) runs `python -m feedbeast reset 04`: lab 04 of
    the checkout is restored, the edited one kept in labs/backup/, lab 05 left as the learner had it."""
    course = tmp_path / "course"
    shutil.copytree(ROOT / "solutions", course / "solutions")
    shutil.copytree(ROOT / "labs", course / "labs", ignore=shutil.ignore_patterns("backup"))
    (course / "chapters").mkdir()
    for n in ("04", "05"):
        lab = next((course / "labs").glob(f"{n}-*.ipynb"))
        lab.write_text(lab.read_text().replace("TODO: your code here", "my attempt"))
    edited5 = next((course / "labs").glob("05-*.ipynb")).read_text()
    env = {k: v for k, v in os.environ.items() if k != "FEEDBEAST_COURSE"}
    r = subprocess.run([sys.executable, "-m", "feedbeast", "reset", "04"], cwd=course / "labs", env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert next((course / "labs").glob("04-*.ipynb")).read_text() == next(ROOT.glob("labs/04-*.ipynb")).read_text()
    assert next((course / "labs").glob("05-*.ipynb")).read_text() == edited5
    assert len(list((course / "labs/backup").glob("04-*.ipynb"))) == 1, r.stdout
    # from a folder outside any checkout (none at, above or one folder below it): one line that says how, exit 2
    (tmp_path / "elsewhere").mkdir()
    r = subprocess.run([sys.executable, "-m", "feedbeast", "reset", "04"], cwd=tmp_path / "elsewhere", env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no checkout of the course" in r.stdout and "Traceback" not in r.stderr, r
    r = subprocess.run([sys.executable, "-m", "feedbeast", "check", "--course", str(course)], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "stale labs" in r.stdout and "05-" in r.stdout, r.stdout


def test_a_kernel_compiled_without_extern_c_is_named_by_its_mangled_name():
    """`k` without extern "C" compiles as _Z1kPf: the cell says so, and asking for `k` by name says which it is."""
    import feedbeast as fb
    from feedbeast.magic import mangled_hint
    mod = fb.compile('__global__ void k(float* x) { x[0] = 1.f; }\n'
                     'extern "C" __global__ void plain(float* x) { x[0] = 2.f; }', "sm_80")
    assert sorted(mod.kernel_names) == ["_Z1kPf", "plain"]
    assert mangled_hint(mod.kernel_names) == ['note: kernel _Z1kPf is the C++-mangled name of k: declare it extern "C" '
                                              "__global__ so that it is called k"]
    for ask in (lambda: mod.kernel("k"), lambda: mod.expect_sass("STG", kernel="k"), lambda: mod.sass("k")):
        with pytest.raises(fb.FeedbeastError, match=r"it has: .*_Z1kPf is k with its C\+\+-mangled name"):
            ask()
    with pytest.raises(fb.FeedbeastError, match="no kernel named 'nope'.*it has: "):
        mod.histogram("nope")
    assert mod.expect_sass("STG", kernel="plain")["STG"] >= 1


def test_a_run_of_identical_skip_lines_is_one_line_with_its_count():
    """feedbeast.view.FoldingStream: consecutive identical lines holding 'skipped' become one line with (×N);
    any other line, a repeated one included, passes as written; a fold ends at a different line or the cell's end."""
    import io
    from feedbeast.view import FoldingStream
    inner = io.StringIO()
    s = FoldingStream(inner)
    skip = "skipped: launch k: needs sm_90a, this machine has none"
    for _ in range(39):
        s.write(skip + "\n")
    s.write("...\n...\n")
    s.write(skip[:10])
    s.write(skip[10:] + "\nskipped: other\n")
    s.write("tail without newline")
    assert inner.getvalue() == f"{skip}  (×39)\n...\n...\n{skip}\n"       # the last two held until the end
    s.end_cell()
    assert inner.getvalue().endswith(f"{skip}\nskipped: other\ntail without newline")


def test_skip_lines_keep_their_place_before_a_traceback_or_a_display():
    """In a kernel: the folded line comes before the error or the display that follows it in the cell."""
    nbformat = pytest.importorskip("nbformat")
    cells = ["import feedbeast as fb",
             "for i in range(5): print(fb.Skipped('needs sm_90a, this machine has none', 'launch k'))\n"
             "raise ValueError('boom')",
             "from IPython.display import display\n"
             "for i in range(3): print(fb.Skipped('needs sm_90a, this machine has none', 'launch k'))\n"
             "display('a display')\nprint('after')"]
    nb = _run_all(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), ROOT / "labs")
    kinds = [[(o.output_type, o.get("text", "")) for o in c.outputs] for c in nb.cells[1:]]
    skip = "skipped: launch k: needs sm_90a, this machine has none"
    assert kinds[0] == [("stream", f"{skip}  (×5)\n"), ("error", "")], kinds[0]
    assert kinds[1] == [("stream", f"{skip}  (×3)\n"), ("display_data", ""), ("stream", "after\n")], kinds[1]


def test_unused_until_written_is_one_note_in_a_lab_and_warnings_after(capsys):
    """A lab declares names for the learner's part: as given, NVRTC's "declared but never referenced" for them is one
    note naming the TODO lines; once no TODO line is left, an unused variable is the compiler's warning again."""
    from feedbeast.magic import cuda_cell
    lab = ('extern "C" __global__ void k(float* y) {\n  const int i = threadIdx.x, n = 4;\n'
           '  // TODO: your code here: y[i] = n\n  float f = 1.f;\n  y[0] = f;\n}')
    cuda_cell("--name lab --arch sm_90a", lab, {})
    out = capsys.readouterr().out
    assert "warning" not in out, out
    assert "note: declared for the part you write (lab.cu line 3) and not used until it is written: i, n" in out, out
    cuda_cell("--name lab --arch sm_90a", lab.replace("// TODO: your code here: y[i] = n", "y[1] = 2.f;"), {})
    out = capsys.readouterr().out
    assert out.count('declared but never referenced') == 2 and "note:" not in out, out


def test_cuda_name_must_not_replace_a_module_of_the_notebook():
    import numpy as np
    import feedbeast as fb
    from feedbeast.magic import cuda_cell
    ns = {"fb": fb, "np": np}
    with pytest.raises(fb.CompileError, match=r"--name fb: fb is the module feedbeast in this notebook.*--name fb_mod"):
        cuda_cell("--name fb", 'extern "C" __global__ void k() {}', ns)
    assert ns["fb"] is fb
    with pytest.raises(fb.CompileError, match=r"--name my-mod: the name becomes a Python variable.*--name my_mod"):
        cuda_cell("--name my-mod", 'extern "C" __global__ void k() {}', ns)
    cuda_cell("--name again --quiet", 'extern "C" __global__ void k() {}', ns)
    cuda_cell("--name again --quiet", 'extern "C" __global__ void k() {}', ns)      # a cell run twice
    assert ns["again"].kernel_names == ["k"] and ns["fb"] is fb


@pytest.mark.parametrize("path", sorted((ROOT / "chapters").glob("[0-9][0-9]-*.ipynb")), ids=lambda p: p.name)
def test_a_chapter_is_saved_with_the_outputs_of_a_gpu_run(path):
    """A chapter's saved outputs are the evidence a run without the GPU points back to (chapter 00: git checkout
    brings them back): a chapter saved after such a run, its measurements replaced by skips, is refused."""
    nb = notebook.read(path)
    texts = ["".join(o.get("text", "") or "".join(o.get("data", {}).get("text/plain", "")) for o in c.get("outputs", []))
             for c in nb.cells if c.cell_type == "code"]
    if not any(texts):
        pytest.skip(f"{path.name} is saved without outputs")
    cpu = [t.strip().splitlines()[0] for t in texts if "this machine has none" in t or t.startswith("no GPU:")]
    assert not cpu, f"{path.name} was saved from a run without a GPU ({cpu[0][:120]}): git checkout {path.name}"
    assert any(re.search(r"NVIDIA [A-Z]\d+", t) for t in texts), f"{path.name}: no output names the GPU it ran on"
