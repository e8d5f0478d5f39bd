"""make gpu-check (.ci/gpu_check.py): pytest's counts read right, a path without what it needs is 'not run' with
its reason (never a pass), rows merge per path, and without a GPU nothing runs."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gpu_check", ROOT / ".ci" / "gpu_check.py")
gc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gc)


def test_counts_read_pytests_last_summary():
    log = "..F.\n= 3 passed in 1s =\nlater\n== 2 failed, 1017 passed, 44 skipped, 2 errors in 219.40s (0:03:39) ==\n"
    assert gc.counts(log) == {"passed": 1017, "failed": 2, "skipped": 44, "errors": 2}
    assert gc.counts("== 1 error in 3s ==\n== 5 passed, 1 error in 3s ==") == \
        {"passed": 5, "failed": 0, "skipped": 0, "errors": 1}
    assert gc.counts("make: *** [test] Error 2\n") == {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}


def _args(**kw):
    base = dict(python="python3", wheels=None, notebook_wheels=None, cu12_wheels=None, index=False)
    return types.SimpleNamespace(**{**base, **kw})


def test_a_path_without_what_it_needs_says_why():
    assert "no full bundle" in gc.commands("venv", _args())
    assert "no notebook bundle" in gc.commands("current", _args())
    assert "no CUDA 12 bundle" in gc.commands("cuda12", _args())
    assert gc.commands("venv", _args(wheels="wh")) == ["make test WHEELS=wh VENV=build/gpu-check/venv PYTHON3=python3"]
    assert gc.commands("current", _args(notebook_wheels="nb")) == [
        "make install ENV=current WHEELS=nb PYTHON3=python3", "make test ENV=current PYTHON3=python3"]
    assert gc.commands("cuda12", _args(index=True))[0].startswith("make test CUDA=12 ")


def test_rows_merge_per_path_and_a_skipped_path_is_not_a_pass(tmp_path):
    md = tmp_path / "ci.md"
    ran = {"path": "current", "commands": ["make test ENV=current"], "exit": 0, "seconds": 61, "passed": 9,
           "failed": 0, "skipped": 1, "errors": 0, "commit": "abc1234"}
    gc.write(md, {"current": ran}, "GPU X", "580")
    rows = gc.read_rows(md)
    rows["cuda12"] = {"path": "cuda12", "why": "no bundle"}
    gc.write(md, rows, "GPU X", "580")
    text = md.read_text()
    assert "| current | abc1234 | `make test ENV=current` | 9 | 0 | 0 | 1 | 1:01 | 0 |" in text
    assert "| cuda12 | | not run: no bundle |" in text
    assert set(gc.read_rows(md)) == {"current", "cuda12"}


def test_without_a_gpu_nothing_runs(monkeypatch, capsys):
    monkeypatch.setattr(gc, "gpu", lambda: ("", "", ""))
    monkeypatch.setattr(gc, "run", lambda *a: (_ for _ in ()).throw(AssertionError("a path ran without a GPU")))
    assert gc.main(["--paths", "current", "--notebook-wheels", "nb"]) == 1
    assert "needs a GPU" in capsys.readouterr().out


def test_make_gpu_check_calls_the_script():
    dry = subprocess.run(["make", "-n", "--no-print-directory", "gpu-check", "GPU_CHECK_FLAGS=--paths current"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert ".ci/gpu_check.py --paths current" in dry


def test_a_path_that_ran_with_a_failure_fails_the_run(monkeypatch, tmp_path, capsys):
    # Exit status 1 when a path that ran had a failure, an error or a non-zero exit; 0 only when all ran clean.
    monkeypatch.setattr(gc, "ROOT", tmp_path)
    monkeypatch.setattr(gc, "gpu", lambda: ("GPU X", "gpu-x", "580"))
    argv = ["--paths", "current", "--notebook-wheels", "nb", "--commit", "abc1234"]
    for outcome, want in ((dict(failed=1), 1), (dict(errors=1), 1), (dict(exit=2, passed=0), 1), ({}, 0)):
        row = {"exit": 0, "seconds": 1, "passed": 5, "failed": 0, "skipped": 0, "errors": 0, **outcome}
        monkeypatch.setattr(gc, "run", lambda path, cmds, logdir, row=row: {"path": path, "commands": cmds, **row})
        assert gc.main(argv) == want, outcome
    assert set(gc.read_rows(tmp_path / "results" / "gpu-x" / "ci.md")) == {"current"}


def test_writing_keeps_what_the_file_already_holds(tmp_path):
    # ci.md holds earlier runs and notes written by hand: make gpu-check replaces only its own block.
    md = tmp_path / "ci.md"
    by_hand = ("# make test on the README's GPU paths: GPU X\n\nNotes on the runs of last week.\n\n"
               "| path | commit | passed |\n|---|---|---|\n| current, by hand | 1111111 | 5 |\n\nA note after the table.\n")
    md.write_text(by_hand)
    ran = {"path": "cuda12", "commands": ["make test CUDA=12"], "exit": 0, "seconds": 451, "passed": 2131,
           "failed": 0, "skipped": 78, "errors": 0, "commit": "055c13e"}
    gc.write(md, {"cuda12": ran}, "GPU X", "580")
    first = md.read_text()
    rows = gc.read_rows(md)
    rows["venv"] = {"path": "venv", "why": "no bundle"}
    gc.write(md, rows, "GPU X", "580")
    text = md.read_text()
    assert text.startswith("# make test on the README's GPU paths: GPU X\n")
    assert by_hand.split("\n", 2)[2] in first and by_hand.split("\n", 2)[2] in text
    assert text.count(gc.BEGIN) == 1 and text.count(gc.END) == 1 and text.count("<!-- rows:") == 1
    assert "| cuda12 | 055c13e | `make test CUDA=12` | 2131 | 0 | 0 | 78 | 7:31 | 0 |" in text
    assert "| venv | | not run: no bundle |" in text
    assert set(gc.read_rows(md)) == {"cuda12", "venv"}


def test_a_file_an_earlier_version_wrote_whole_keeps_its_table(tmp_path):
    # The earlier format: the whole file generated, its rows in a comment at the end. Its table stays as history;
    # its rows comment goes, so only the new block's rows are read.
    md = tmp_path / "ci.md"
    md.write_text("# make test on the README's GPU paths: GPU X\n\nDriver 570.\n\n| path | commit |\n|---|---|\n"
                  "| venv | 2222222 |\n\n<!-- rows: {\"venv\": {\"path\": \"venv\", \"why\": \"old\"}} -->\n")
    gc.write(md, {"current": {"path": "current", "why": "no notebook bundle"}}, "GPU X", "580")
    text = md.read_text()
    assert "| venv | 2222222 |" in text and "Driver 570." in text
    assert text.count("<!-- rows:") == 1 and set(gc.read_rows(md)) == {"current"}


def test_the_block_is_found_where_it_is_and_line_ends_stay(tmp_path):
    md = tmp_path / "ci.md"
    row = {"path": "venv", "why": "no bundle"}
    # a note above the block that quotes the END comment; CRLF line ends
    md.write_bytes(f"# title\r\n\r\nnote: the block ends at {gc.END}\r\n\r\n".encode())
    gc.write(md, {"venv": row}, "GPU X", "580")
    gc.write(md, {**gc.read_rows(md), "current": {"path": "current", "why": "no notebook bundle"}}, "GPU X", "580")
    raw = md.read_bytes()
    assert raw.startswith(b"# title\r\n") and f"note: the block ends at {gc.END}\r\n".encode() in raw
    assert set(gc.read_rows(md)) == {"venv", "current"} and raw.count(gc.BEGIN.encode()) == 1
    # a BEGIN left without its END (an edit that cut the block short) is replaced, not doubled
    md.write_text(f"# title\n\n{gc.BEGIN}\n| half a table |\n\nhand notes\n")
    gc.write(md, {"venv": row}, "GPU X", "580")
    text = md.read_text()
    assert text.count(gc.BEGIN) == 1 and text.count(gc.END) == 1 and "hand notes" in text


def test_a_row_from_a_changed_tree_says_so(tmp_path, monkeypatch):
    import shutil
    if shutil.which("git") is None:
        import pytest
        pytest.skip("git is not installed")
    repo = tmp_path / "r"
    (repo / ".ci").mkdir(parents=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    (repo / "f.txt").write_text("one\n")
    for cmd in (["git", "init", "-q"], ["git", "add", "f.txt"], ["git", "commit", "-qm", "x"]):
        subprocess.run(cmd, cwd=repo, env=env, check=True)
    monkeypatch.setattr(gc, "ROOT", repo)
    clean = gc._commit()
    assert len(clean) >= 7 and not clean.endswith("-dirty")
    (repo / "f.txt").write_text("two\n")
    assert gc._commit() == clean + "-dirty"


def test_a_path_runs_with_its_own_make_variables_and_fails_where_its_tests_saw_no_gpu(monkeypatch, tmp_path):
    """A job's CUDA=12 or FEEDBEAST_ENV=current does not reach a path's make (it would test another path than its
    row names); a path whose tests skipped for want of a GPU that nvidia-smi lists fails, naming why."""
    monkeypatch.setattr(gc, "ROOT", tmp_path)
    for k, v in (("CUDA", "12"), ("FEEDBEAST_ENV", "current"), ("MAKEFLAGS", "-j4"), ("KEEP_ME", "1")):
        monkeypatch.setenv(k, v)
    seen = {}

    def fake(cmd, shell, cwd, env, stdout, stderr):
        seen.update(env)
        stdout.write(log_text)
        return subprocess.CompletedProcess(cmd, 0)
    monkeypatch.setattr(gc.subprocess, "run", fake)
    (tmp_path / "logs").mkdir()
    # a failing test that quotes the text is not a skip; on a GPU, a skip for another arch names the one it has
    log_text = ('E   assert "needs a GPU, this machine has none" in out\n'
                "SKIPPED [1] tests/test_ch08.py:108: skipped: needs sm_100a, this machine has sm_90a\n"
                "1 failed, 10 passed, 1 skipped in 1.0s\n")
    assert "no_gpu" not in gc.run("venv", ["make test VENV=v"], tmp_path / "logs")
    log_text = ("SKIPPED [3] tests/test_x.py:9: skipped: launch k: needs sm_90a, this machine has none\n"
                "10 passed, 3 skipped in 1.0s\n")
    row = gc.run("venv", ["make test VENV=v"], tmp_path / "logs")
    assert not {"CUDA", "FEEDBEAST_ENV", "MAKEFLAGS"} & set(seen) and seen["KEEP_ME"] == "1"
    assert row["no_gpu"] and "its tests saw no GPU" in row["note"] and row["passed"] == 10, row
    monkeypatch.setattr(gc, "gpu", lambda: ("GPU X", "gpu-x", "580"))
    monkeypatch.setattr(gc, "run", lambda path, cmds, logdir: {"path": path, "commands": cmds, **row})
    assert gc.main(["--paths", "venv", "--wheels", "w", "--commit", "abc1234"]) == 1
    assert "its tests saw no GPU" in (tmp_path / "results/gpu-x/ci.md").read_text()
