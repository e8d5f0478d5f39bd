"""make gpu-check: `make test` on each path the README documents for a GPU machine; results/<gpu>/ci.md.

    python .ci/gpu_check.py [--paths venv,current,cuda12] [--wheels DIR] [--notebook-wheels DIR] [--cu12-wheels DIR]
                            [--index] [--python PYTHON3] [--commit SHA]

Paths:
  venv     a fresh venv from the full bundle (make wheelhouse): make test WHEELS=DIR, in build/gpu-check/venv
  current  the GPU image's own Python with the notebook bundle (make wheelhouse SET=notebook) installed into it:
           make install ENV=current WHEELS=DIR, then make test ENV=current
  cuda12   the CUDA 12 pins in a fresh venv (make test CUDA=12 WHEELS=DIR), where the driver runs CUDA 12 code
A path without what it needs (no bundle given and no package index) is recorded as not run, with the reason.
Each path's row replaces that path's earlier row in the script's own block of results/<gpu>/ci.md, so the paths can
run one at a time; the rest of that file (earlier runs, notes) is kept as it is.
Each path runs with its own make variables only: CUDA, ENV, FEEDBEAST_ENV, WHEELS, VENV and make's own flags in the
environment of the job are not passed on (a job's CUDA=12 would make the venv path a CUDA 12 one); a WHEELS there is
read once, as --wheels' default.
A path whose tests saw no GPU ("needs a GPU, this machine has none": the driver or the CUDA bindings out of reach from
that Python) fails, although nvidia-smi lists one: its GPU tests were skipped, not passed.
Exit status: 1 if a path that ran had a failure, an error or no GPU in reach, else 0 (a path not run is not a failure:
its row says why).
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")


def gpu() -> tuple[str, str, str]:
    """(name, slug, driver) from nvidia-smi; none when there is no GPU."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
        name, driver = [x.strip() for x in out.split(",")]
    except (OSError, IndexError, ValueError, subprocess.SubprocessError):
        return "", "", ""
    return name, re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-"), driver


def counts(log: str) -> dict:
    """pytest's last summary line as {passed, failed, skipped, errors}."""
    line = next((ln for ln in reversed(log.splitlines()) if re.search(r"\d+ (passed|failed)", ln)), "")
    found = {k if not k.startswith("error") else "errors": int(n) for n, k in SUMMARY.findall(line)}
    return {k: found.get(k, 0) for k in ("passed", "failed", "skipped", "errors")}


def commands(path: str, args) -> list[str] | str:
    """The commands of a path, or why it cannot run here."""
    py = f"PYTHON3={shlex.quote(args.python)}"
    if path == "venv":
        src = f"WHEELS={args.wheels}" if args.wheels else ""
        if not args.wheels and not args.index:
            return "no full bundle given (--wheels DIR, from make wheelhouse) and no package index"
        return [f"make test {src} VENV=build/gpu-check/venv {py}".replace("  ", " ")]
    if path == "current":
        if not args.notebook_wheels:
            return "no notebook bundle given (--notebook-wheels DIR, from make wheelhouse SET=notebook)"
        return [f"make install ENV=current WHEELS={args.notebook_wheels} {py}", f"make test ENV=current {py}"]
    if path == "cuda12":
        if not args.cu12_wheels and not args.index:
            return ("no CUDA 12 bundle given (--cu12-wheels DIR, from make wheelhouse CUDA=12) and no package index "
                    "to build the CUDA 12 venv from")
        src = f"WHEELS={args.cu12_wheels}" if args.cu12_wheels else ""
        return [f"make test CUDA=12 {src} VENV=build/gpu-check/venv-cu12 {py}".replace("  ", " ")]
    raise ValueError(path)


# What a job's environment may hold that would change a path's make command (each path sets its own).
NOT_PASSED_ON = ("CUDA", "ENV", "FEEDBEAST_ENV", "WHEELS", "VENV", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
# pytest's summary line of a test skipped where fb.gpu() found no GPU (feedbeast.skip: "needs a GPU, ..., this machine
# has none", "needs sm_90a, this machine has none"); on a GPU a skip for want of an arch names the arch it has
NO_GPU_SKIP = re.compile(r"^SKIPPED \[\d+\] .*this machine has none\s*$", re.M)


def run(path: str, cmds: list[str], logdir: Path) -> dict:
    t0 = time.time()
    code = 0
    logfile = logdir / f"{path}.log"
    env = {k: v for k, v in os.environ.items() if k not in NOT_PASSED_ON}
    with logfile.open("w") as f:                # written as it runs: a run stopped by a time limit keeps its log
        for cmd in cmds:
            f.write(f"$ {cmd}\n")
            f.flush()
            code = subprocess.run(cmd, shell=True, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
            if code:
                break
    log = logfile.read_text()
    row = {"path": path, "commands": cmds, "exit": code, "seconds": round(time.time() - t0), **counts(log)}
    if code and not any(row[k] for k in ("passed", "failed", "errors")):
        row["note"] = log.strip().splitlines()[-1][:200] if log.strip() else f"exit {code}"
    if NO_GPU_SKIP.search(log):
        row["no_gpu"] = True
        row["note"] = ("its tests saw no GPU (skipped: ... this machine has none), though nvidia-smi lists one: the "
                       f"driver or the CUDA bindings are out of reach from that Python; see {logfile.relative_to(ROOT)}")
    return row


def _commit() -> str:
    """The commit under test: the checkout's HEAD, or, in a tree made by git archive (no .git of its own; a
    repository above it is another tree's), the commit git archive wrote into .ci/commit."""
    r = subprocess.run(["git", "rev-parse", "--show-toplevel", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                       text=True)
    lines = r.stdout.split()
    if r.returncode == 0 and len(lines) == 2 and Path(lines[0]).resolve() == ROOT:
        # tracked files that differ from that commit: the row says so, it did not test the commit alone
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                 capture_output=True, text=True).stdout.strip()
        return lines[1] + ("-dirty" if changed else "")
    stamped = (ROOT / ".ci" / "commit").read_text().strip() if (ROOT / ".ci" / "commit").exists() else ""
    return stamped if stamped and not stamped.startswith("$Format") else "?"


def table(rows: dict) -> str:
    out = ["| path | commit | commands | passed | failed | errors | skipped | time | exit |",
           "|---|---|---|---|---|---|---|---|---|"]
    for path in ("venv", "current", "cuda12"):
        r = rows.get(path)
        if r is None:
            continue
        if "why" in r:
            out.append(f"| {path} | | not run: {r['why']} | | | | | | |")
            continue
        cmds = "<br>".join(f"`{c}`" for c in r["commands"])
        t = f"{r['seconds'] // 60}:{r['seconds'] % 60:02d}"
        note = f" ({r['note']})" if r.get("note") else ""
        out.append(f"| {path} | {r.get('commit', '?')} | {cmds} | {r['passed']} | {r['failed']} | {r['errors']} | {r['skipped']} | {t} | "
                   f"{r['exit']}{note} |")
    return "\n".join(out)


# The part of ci.md that make gpu-check owns. Everything outside it (the title, earlier runs' rows and notes written
# by hand) is evidence of its own and is kept as it is.
BEGIN = "<!-- make gpu-check: begin (written by .ci/gpu_check.py; the rest of this file is kept as it is) -->"
END = "<!-- make gpu-check: end -->"
ROWS = re.compile(r"<!-- rows: (.*) -->")


def read_rows(md: Path) -> dict:
    """The rows of the latest make gpu-check, from its own block only (a row quoted elsewhere is not one)."""
    import json
    if not md.exists():
        return {}
    text = md.read_text()
    span = _block_span(text)
    if span:
        text = text[span[0]:span[1]]
    m = ROWS.search(text)
    return json.loads(m.group(1)) if m else {}


def _block_span(text: str) -> tuple[int, int] | None:
    """Where the block lies in text (the first BEGIN and the first END after it), or None."""
    start = text.find(BEGIN)
    end = text.find(END, start) if start >= 0 else -1
    return (start, end + len(END)) if end >= 0 else None


def block(rows: dict, driver: str) -> str:
    import json
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"{BEGIN}\n## The latest make gpu-check\n\n"
            f"Driver {driver}; written {stamp}. One row per path, each that path's latest run (passed / failed /\n"
            "errors / skipped are pytest's counts, the time is the whole row's: install and tests). Logs:\n"
            f"build/gpu-check/<path>.log.\n\n{table(rows)}\n\n<!-- rows: {json.dumps(rows)} -->\n{END}")


def merged(text: str, new_block: str) -> str:
    """text with new_block in place of its make gpu-check block; without one, new_block goes after the title (a
    file that an earlier version wrote whole keeps its table as history, its rows comment dropped)."""
    span = _block_span(text)
    if span:
        return text[:span[0]] + new_block + text[span[1]:]
    text = ROWS.sub("", text.replace(BEGIN, ""))          # a BEGIN without its END: what is left of a block
    lines = text.splitlines(keepends=True)
    at = 1 if lines and lines[0].startswith("# ") else 0
    tail = "".join(lines[at:]).lstrip("\r\n")
    return "".join(lines[:at]) + ("\n" if at else "") + new_block + ("\n\n" + tail if tail else "\n")


def write(md: Path, rows: dict, name: str, driver: str):
    md.parent.mkdir(parents=True, exist_ok=True)
    # newline="": the file's own line ends (CRLF too) stay as they are
    if md.exists():
        with md.open(newline="") as f:
            text = f.read()
    else:
        text = f"# make test on the README's GPU paths: {name}\n"
    with md.open("w", newline="") as f:
        f.write(merged(text, block(rows, driver)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="make gpu-check", description=__doc__.split("\n")[0])
    ap.add_argument("--paths", default="venv,current,cuda12")
    ap.add_argument("--wheels", default=os.environ.get("WHEELS") or None)
    ap.add_argument("--notebook-wheels", default=None)
    ap.add_argument("--cu12-wheels", default=None)
    ap.add_argument("--index", action="store_true", help="a package index is reachable: build venvs from it")
    ap.add_argument("--python", default=os.environ.get("PYTHON3", "python3"))
    ap.add_argument("--commit", default=None, help="the commit under test (default: git rev-parse of the checkout)")
    args = ap.parse_args(argv)
    name, slug, driver = gpu()
    if not name:
        print("make gpu-check needs a GPU (nvidia-smi found none): nothing was run")
        return 1
    logdir = ROOT / "build" / "gpu-check"
    logdir.mkdir(parents=True, exist_ok=True)
    md = ROOT / "results" / slug / "ci.md"
    commit = args.commit or _commit()          # before this run writes ci.md
    rows = read_rows(md)
    worst = 0
    for path in args.paths.split(","):
        cmds = commands(path, args)
        if isinstance(cmds, str):
            rows[path] = {"path": path, "why": cmds}
            print(f"{path}: not run: {cmds}", flush=True)
            continue
        print(f"{path}: {' && '.join(cmds)}", flush=True)
        rows[path] = run(path, cmds, logdir)
        rows[path]["commit"] = commit
        r = rows[path]
        print(f"{path}: {r['passed']} passed, {r['failed']} failed, {r['errors']} errors, {r['skipped']} skipped, "
              f"{r['seconds']} s, exit {r['exit']}", flush=True)
        if r["exit"] or r["failed"] or r["errors"] or r.get("no_gpu"):
            worst = 1
        write(md, rows, name, driver)
    write(md, rows, name, driver)
    print(f"\n{md}:\n{table(rows)}")
    return worst


if __name__ == "__main__":
    sys.exit(main())
