"""The safety net on a CPU: stress helpers, the sanitizer sweep's skip path and parser, the book build."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from feedbeast import errors, stress

from feedbeast.course import sanitize
from feedbeast.skip import Skipped

ROOT = Path(__file__).resolve().parents[1]


# ---- stress.sizes -----------------------------------------------------------------------------------

def test_sizes_without_stress_is_the_base_shape_only(monkeypatch):
    monkeypatch.delenv("FEEDBEAST_STRESS", raising=False)
    assert list(stress.sizes(1000, multiple_of=8)) == [1000]
    assert list(stress.sizes((64, 96), multiple_of=16)) == [(64, 96)]


def test_sizes_reads_feedbeast_stress(monkeypatch):
    monkeypatch.setenv("FEEDBEAST_STRESS", "25")
    got = list(stress.sizes(10_000, multiple_of=8))
    assert len(got) == 26 and got[0] == 10_000


def test_random_sizes_are_ragged_bounded_and_reproducible():
    got = list(stress.sizes((1000, 300), multiple_of=(64, 16), n=200, seed=3))
    assert got == list(stress.sizes((1000, 300), multiple_of=(64, 16), n=200, seed=3))
    assert got != list(stress.sizes((1000, 300), multiple_of=(64, 16), n=200, seed=4))
    for m, k in got[1:]:
        assert 1 <= m <= 1000 and 1 <= k <= 300
        assert m % 64 and k % 16, (m, k)
    assert any(m < 128 for m, _ in got[1:]), "some cases must be tiny (below two tiles)"
    assert all(isinstance(d, int) for shape in got for d in shape)


def test_random_sizes_keep_the_alignment_a_kernel_needs():
    got = list(stress.sizes((1000, 1032, 1000), multiple_of=(128, 256, 64), align=(1, 8, 8), n=300, seed=1))
    for m, n, k in got[1:]:
        assert n % 8 == 0 and k % 8 == 0 and 8 <= n <= 1032 and 8 <= k <= 1000, (m, n, k)
        assert m % 128 and n % 256 and k % 64, (m, n, k)
    assert any(n < 512 for _, n, _ in got[1:]) and any(m % 2 for m, _, _ in got[1:])
    boxed = list(stress.sizes((1000, 1032), multiple_of=(128, 256), align=(1, 8), at_least=(128, 256), n=300))
    assert all(m >= 128 and n >= 256 and n % 8 == 0 and m % 128 and n % 256 for m, n in boxed[1:])
    assert any(m < 384 for m, _ in boxed[1:])


def test_sizes_rejects_bad_input(monkeypatch):
    with pytest.raises(ValueError):
        list(stress.sizes((10, 10), multiple_of=(2, 2, 2), n=1))
    with pytest.raises(ValueError, match="align"):
        list(stress.sizes((10, 10), align=0, n=1))
    with pytest.raises(ValueError, match="at_least"):
        list(stress.sizes((100, 10), at_least=(16, 256), n=1))
    monkeypatch.setenv("FEEDBEAST_STRESS", "lots")
    with pytest.raises(ValueError, match="FEEDBEAST_STRESS"):
        stress.level()


# ---- stress.repeat_identical ------------------------------------------------------------------------

def test_repeat_identical_runs_n_times_and_returns_the_first_output():
    calls = []

    def fn():
        calls.append(1)
        return np.arange(10, dtype=np.float32) / 3
    out = stress.repeat_identical(fn, n=5)
    assert len(calls) == 5 and out.dtype == np.float32 and out[3] == np.float32(1.0)


def test_repeat_identical_names_the_first_element_that_differs():
    rng = np.random.default_rng(0)
    base = rng.standard_normal(1000).astype(np.float32)
    bumped = base.copy()
    bumped[417] = np.nextafter(base[417], np.float32(np.inf))    # one unit in the last place
    runs = iter([base.copy(), base.copy(), bumped])
    with pytest.raises(errors.CheckFailed, match=r"run 3 of 3: output .*first at \(417,\)"):
        stress.repeat_identical(lambda: next(runs), n=3)


def test_repeat_identical_is_bitwise_not_numeric():
    """-0.0 == 0.0 numerically; a reduction that flips the sign of a zero is not deterministic."""
    runs = iter([np.array([0.0, 1.0]), np.array([-0.0, 1.0])])
    with pytest.raises(errors.CheckFailed, match="not bitwise identical"):
        stress.repeat_identical(lambda: next(runs), n=2)


def test_repeat_identical_compares_every_output_and_passes_skips_through(monkeypatch):
    runs = iter([(np.zeros(3), {"s": np.ones(2)}), (np.zeros(3), {"s": np.array([1.0, 2.0])})])
    with pytest.raises(errors.CheckFailed, match=r"\[1\]\['s'\]"):
        stress.repeat_identical(lambda: next(runs), n=2)
    s = Skipped("needs a GPU, this machine has none", "launch k")
    assert stress.repeat_identical(lambda: s) is s
    monkeypatch.setenv("FEEDBEAST_STRESS", "7")
    calls = []
    stress.repeat_identical(lambda: calls.append(1) or np.zeros(1))
    assert len(calls) == 7


# ---- sanitize ---------------------------------------------------------------------------------------

def test_sanitizer_log_parsing():
    assert sanitize.count_reports("========= ERROR SUMMARY: 0 errors\n", "memcheck") == 0
    assert sanitize.count_reports("========= ERROR SUMMARY: 3 errors\n", "synccheck") == 3
    log = "========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)\n"
    assert sanitize.count_reports(log, "racecheck") == 2
    assert sanitize.count_reports("Traceback ...", "memcheck") is None


def test_sanitize_without_a_gpu_prints_skips_and_exits_partial(monkeypatch, capsys, tmp_path):
    """No GPU: every pair skipped, a last line that says nothing was checked, and grade's PARTIAL status (2), not
    0, which a script would read as a clean sweep; --strict makes it a failure (1)."""
    import feedbeast.device
    monkeypatch.setattr(feedbeast.device, "gpu", lambda index=0: None)
    assert sanitize.main(["chapters", "solutions", "--logs", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    n = len(sanitize.notebooks([ROOT / "chapters", ROOT / "solutions"]))
    assert out.count("skipped: no GPU: ") == len(sanitize.TOOLS) * n
    assert "| notebook | memcheck | racecheck | synccheck | hazards |" in out
    assert out.rstrip().splitlines()[-1].startswith("sanitize: NOT CHECKED: nothing ran under the tools here"), out
    assert sanitize.main(["chapters", "--strict", "--logs", str(tmp_path)]) == 1


def test_make_sanitize_without_a_gpu_says_nothing_was_checked(tmp_path):
    """make sanitize on a machine without a GPU: exit 0 (a skip is no make error) with a line that says the skips
    are no pass; with STRICT=1 make fails."""
    import shutil
    import subprocess
    if shutil.which("make") is None:
        pytest.skip("needs make")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    env["CUDA_VISIBLE_DEVICES"] = ""       # no GPU, also on a machine with one
    py = f"PYTHON3={sys.executable}"
    base = ["make", "-s", "-C", str(ROOT), "sanitize", "ENV=current", py,
            f"SANITIZE_FLAGS=--tools hazards --logs {tmp_path}"]
    r = subprocess.run(base, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "sanitize: NOT CHECKED" in r.stdout and "make sanitize: a skip is no make error" in r.stdout, r.stdout
    r = subprocess.run(base + ["STRICT=1"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode != 0, r.stdout + r.stderr
    # a mistyped tool is a wrong command line (3, nothing ran), never the 2 that make lets pass
    r = subprocess.run(base[:-1] + [f"SANITIZE_FLAGS=--tools memchek --logs {tmp_path}"], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode != 0 and "unknown tool memchek" in r.stderr, r.stdout + r.stderr
    with pytest.raises(SystemExit) as e:
        sanitize.main(["chapters", "--tools", "memchek"])
    assert e.value.code == 3


def test_sanitize_and_stress_outside_a_checkout_say_where_to_run(monkeypatch, capsys, tmp_path):
    """Run outside the course: sanitize's default folders are not there (nothing ran: exit 3, not a table of skips),
    and stress, whose tests are the checkout's, names the missing checkout; inside a folder of the checkout, stress
    runs pytest in the checkout."""
    import subprocess
    from feedbeast.course import stress_run
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FEEDBEAST_COURSE", raising=False)
    with pytest.raises(SystemExit) as e:
        sanitize.main(["--logs", str(tmp_path / "logs")])
    assert e.value.code == 3 and "no chapters and no solutions here" in capsys.readouterr().err
    calls = []
    monkeypatch.setattr(subprocess, "call", lambda cmd, **kw: calls.append(kw["cwd"]) or 0)
    assert stress_run.main(["--n", "1"]) == 2 and not calls
    assert "no checkout of the course" in capsys.readouterr().err
    assert stress_run.main(["--n", "1", "--course", str(ROOT)]) == 0 and calls == [ROOT]   # what the refusal says
    calls.clear()
    monkeypatch.chdir(ROOT / "labs")
    monkeypatch.setenv("FEEDBEAST_COURSE", str(tmp_path))      # another course named: the checkout here is tested
    assert stress_run.main(["--n", "1"]) == 0 and calls == [ROOT]


def test_sanitize_inner_runner_handles_magics():
    """The in-process runner executes %load_ext and %%cuda cells (no sanitizer here: just the runner)."""
    nb = ROOT / "solutions/00-copy-kernel.ipynb"
    r = subprocess.run([sys.executable, "-m", "feedbeast", "sanitize", "run", str(nb)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "compiled for" in r.stdout and "every cell ran" in r.stdout


# ---- python -m feedbeast ----------------------------------------------------------------------------

def test_cli_passes_lab_commands_through():
    r = subprocess.run([sys.executable, "-m", "feedbeast", "check"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and "in sync" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "feedbeast", "frobnicate"], capture_output=True, text=True)
    assert r.returncode == 3 and "unknown command 'frobnicate'" in r.stdout      # nothing ran: not PARTIAL's 2


# ---- the book -----------------------------------------------------------------------------------------

def _book():
    import importlib.util
    spec = importlib.util.spec_from_file_location("feedbeast_book_build", ROOT / "book/build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_book_builds_with_no_broken_links(tmp_path):
    pytest.importorskip("nbconvert", reason="nbconvert (requirements/book.txt) is not installed")
    book = _book()
    pages = book.build(ROOT, tmp_path / "book")
    chapters = sorted(ROOT.glob("chapters/[0-9][0-9]-*.ipynb"))
    assert len(pages) == len(chapters) >= 1
    assert book.check_links(tmp_path / "book") == []
    index = (tmp_path / "book/index.html").read_text()
    for c in chapters:
        assert f'href="chapters/{c.stem}.html"' in index
    # the formulas: MathJax from the book's own folder when jupyter-server-mathjax is installed (the course's
    # environment: requirements/book.txt; the link check above found the file), else from nbconvert's CDN
    page = (tmp_path / "book/chapters" / f"{chapters[0].stem}.html").read_text()
    if importlib.util.find_spec("jupyter_server_mathjax"):
        assert '<script src="../mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"' in page
        assert "cdnjs.cloudflare.com/ajax/libs/mathjax" not in page
        assert (tmp_path / "book/mathjax/config/TeX-AMS-MML_HTMLorMML-full.js").is_file()
    else:
        assert "cdnjs.cloudflare.com/ajax/libs/mathjax" in page and not (tmp_path / "book/mathjax").exists()


def test_book_without_nbconvert_says_what_to_install(tmp_path, monkeypatch, capsys):
    """make book ENV=current in a Python without nbconvert: one line naming the command, no traceback."""
    book = _book()
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nbconvert" else real(name, *a))
    assert book.main(["--out", str(tmp_path / "book")]) == 1
    assert f"{sys.executable} -m pip install -r {ROOT / 'requirements/book.txt'}" in capsys.readouterr().err
    assert not (tmp_path / "book").exists()


def test_book_link_checker_catches_broken_links(tmp_path):
    book = _book()
    (tmp_path / "a.html").write_text('<h2 id="here">x</h2><a href="#here">ok</a><a href="b.html">missing</a>'
                                     '<a href="a.html#nowhere">bad anchor</a><a href="https://x.org/y">ext</a>')
    broken = book.check_links(tmp_path)
    assert len(broken) == 2 and "no such file" in broken[0] and "no anchor #nowhere" in broken[1]


def _sanitizer_mode(monkeypatch, on: bool):
    """The course's hooks as a process under make sanitize (on) or outside it installs them."""
    import feedbeast.course
    from feedbeast import hooks
    monkeypatch.setattr(hooks, "mode", hooks.Mode())      # put back after the test
    if on:
        monkeypatch.setenv("FEEDBEAST_UNDER_SANITIZER", "1")
    else:
        monkeypatch.delenv("FEEDBEAST_UNDER_SANITIZER", raising=False)
    feedbeast.course.install()
    assert sanitize.running() == on == hooks.mode.sanitizer


def test_under_the_sanitizer_isolated_runs_nothing_and_says_skipped(monkeypatch, tmp_path):
    import feedbeast as fb
    marker = tmp_path / "ran"
    _sanitizer_mode(monkeypatch, True)
    r = fb.isolated(f"open({str(marker)!r}, 'w').write('x')")
    assert isinstance(r, Skipped) and "compute-sanitizer" in str(r) and not marker.exists()
    _sanitizer_mode(monkeypatch, False)
    fb.isolated(f"open({str(marker)!r}, 'w').write('x')")
    assert marker.exists()


def test_a_printed_failed_check_fails_the_sanitized_run(tmp_path, monkeypatch):
    """A check that prints FAILED without raising (raise_on_fail=False) must not read as a clean run."""
    import types
    log = "rowsum_lab 10007x8188: FAILED: relative error 3.1e-02 (limit 1e-05)\n========= ERROR SUMMARY: 0 errors\n"
    monkeypatch.setattr(sanitize.subprocess, "run", lambda *a, **k: types.SimpleNamespace(stdout=log, stderr="",
                                                                                           returncode=0))
    cell, bad = sanitize.sanitize_one("compute-sanitizer", tmp_path / "x.ipynb", "memcheck", tmp_path, 10)
    assert bad == 1 and cell.startswith("check failed: rowsum_lab 10007x8188"), cell
    clean = "rowsum_lab 10007x8188: passed: relative error 1e-07 (limit 1e-05)\n========= ERROR SUMMARY: 0 errors\n"
    monkeypatch.setattr(sanitize.subprocess, "run", lambda *a, **k: types.SimpleNamespace(stdout=clean, stderr="",
                                                                                           returncode=0))
    assert sanitize.sanitize_one("compute-sanitizer", tmp_path / "x.ipynb", "memcheck", tmp_path, 10)[1] == 0


def test_pick_takes_the_sanitizer_size_only_on_a_gpu_under_the_sanitizer(monkeypatch):
    import feedbeast as fb
    _sanitizer_mode(monkeypatch, False)
    monkeypatch.setattr(fb, "gpu", lambda: None)
    assert fb.pick(4096, 33, sanitize=512) == 33
    monkeypatch.setattr(fb, "gpu", lambda: "a GPU")
    assert fb.pick(4096, 33, sanitize=512) == 4096
    _sanitizer_mode(monkeypatch, True)
    assert fb.pick(4096, 33, sanitize=512) == 512
    assert fb.pick(4096, 33) == 4096                    # no sanitizer size given: the GPU size
    monkeypatch.setattr(fb, "gpu", lambda: None)
    assert fb.pick(4096, 33, sanitize=512) == 33        # no GPU: nothing is sanitized, the CPU size


def test_pick_takes_the_quick_size_only_on_a_gpu_under_make_test(monkeypatch):
    """FEEDBEAST_QUICK=1 (make test's conftest) makes the course set hooks.mode.quick; fb.pick then takes its quick
    size on a GPU, the sanitizer's size still wins inside make sanitize, and without a GPU the CPU size is kept."""
    import feedbeast as fb
    import feedbeast.course
    from feedbeast import hooks
    monkeypatch.setenv("FEEDBEAST_QUICK", "0")
    _sanitizer_mode(monkeypatch, False)
    monkeypatch.setattr(fb, "gpu", lambda: "a GPU")
    assert not hooks.mode.quick and fb.pick(4096, 33, quick=1024) == 4096      # make bench, a lab: every size
    monkeypatch.setenv("FEEDBEAST_QUICK", "1")
    feedbeast.course.install()
    assert "make test" in hooks.mode.quick
    assert fb.pick(4096, 33, quick=1024) == 1024
    assert fb.pick(4096, 33) == 4096                                          # no quick size given: the GPU size
    assert fb.pick(4096, 33, sanitize=512, quick=1024) == 1024
    monkeypatch.setenv("FEEDBEAST_UNDER_SANITIZER", "1")
    feedbeast.course.install()
    assert fb.pick(4096, 33, sanitize=512, quick=1024) == 512                 # make sanitize's size first
    monkeypatch.setattr(fb, "gpu", lambda: None)
    assert fb.pick(4096, 33, sanitize=512, quick=1024) == 33                  # no GPU: the CPU size


def test_the_sanitizer_follows_only_the_notebook_process(tmp_path, monkeypatch):
    import types
    seen = []

    def fake_run(cmd, **kw):
        seen.append(cmd)
        return types.SimpleNamespace(stdout="========= ERROR SUMMARY: 0 errors\n", stderr="", returncode=0)
    monkeypatch.setattr(sanitize.subprocess, "run", fake_run)
    assert sanitize.sanitize_one("compute-sanitizer", tmp_path / "x.ipynb", "racecheck", tmp_path, 10)[1] == 0
    cmd = seen[0]
    assert cmd[cmd.index("--target-processes") + 1] == "application-only"
    assert cmd[cmd.index("--tool") + 1] == "racecheck" and cmd[-2:] == ["run", str(tmp_path / "x.ipynb")]


def test_the_inner_runner_names_slow_cells(tmp_path, monkeypatch):
    from feedbeast.course import notebook
    path = notebook.new(["import time; time.sleep(0.05)", "x = 1"], to=tmp_path / "slow.ipynb")
    r = subprocess.run([sys.executable, "-c", "import sys; from feedbeast.course import sanitize; sanitize.SLOW_CELL_S = 0.02; "
                        f"sys.exit(sanitize.run({str(path)!r}))"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "code cell 1 of slow.ipynb took" in r.stdout and "code cell 2 " not in r.stdout


def test_the_hazards_tools_variable_becomes_the_librarys_hazard_mode_in_the_runner(tmp_path):
    """The hazards tool sets FEEDBEAST_HAZARDS=1 for the inner runner (below); the runner is the course's, so its
    hooks make that hooks.mode.hazards = "check" even where FEEDBEAST_HOOKS is not set, and a notebook's own
    `%env FEEDBEAST_HAZARDS=0` turns it off at the next launch, as in Jupyter."""
    import os
    from feedbeast.course import notebook
    cells = ["import feedbeast as fb\nprint('mode:', repr(fb.hooks.mode.hazards))",
             "%env FEEDBEAST_HAZARDS=0",
             "[f(None, 1, 32, (), 0, None) for f in fb.hooks.before_launch if f is not fb.hazards.check_on_launch]\n"
             "print('after %env:', repr(fb.hooks.mode.hazards))"]
    path = notebook.new(cells, to=tmp_path / "mode.ipynb")
    env = {k: v for k, v in os.environ.items() if k != "FEEDBEAST_HOOKS"}
    env["FEEDBEAST_HAZARDS"] = "1"
    r = subprocess.run([sys.executable, "-m", "feedbeast.course.sanitize", "run", str(path)], capture_output=True,
                       text=True, timeout=120, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "mode: 'check'" in r.stdout and "after %env: ''" in r.stdout, r.stdout


def test_the_hazards_tool_runs_the_notebook_without_the_sanitizer_and_names_the_rule(tmp_path, monkeypatch):
    import types
    seen = {}

    def fake(cmd, **kw):
        seen["cmd"], seen["env"] = cmd, kw["env"]
        return types.SimpleNamespace(stdout=log, stderr="", returncode=rc)
    monkeypatch.setattr(sanitize.subprocess, "run", fake)
    log, rc = "hazard check: ring grid 2 block 160: 0 violation(s) in 812 events\nsanitize run: x.ipynb: every cell ran\n", 0
    cell, bad = sanitize.sanitize_one("compute-sanitizer", tmp_path / "x.ipynb", "hazards", tmp_path, 10)
    assert (bad, cell.split(" (")[0]) == (0, "0") and "1 launches" in cell
    assert seen["cmd"][0] == sys.executable and "compute-sanitizer" not in seen["cmd"]
    assert seen["env"]["FEEDBEAST_HAZARDS"] == "1"
    log, rc = ("sanitize run: code cell 9 of x.ipynb raised HazardFound: missing-proxy-fence: a generic-proxy ...\n",
               1)
    cell, bad = sanitize.sanitize_one("compute-sanitizer", tmp_path / "x.ipynb", "hazards", tmp_path, 10)
    assert bad == 1 and cell.startswith("HazardFound: missing-proxy-fence"), cell
