"""The results log: every bench() result as one JSON line, with the GPU, versions and sizes; every check() and
tally() on a GPU as one line of checks.jsonl beside it, and every hazard check, named racecheck and named fb.isolated
run as one line of hazards.jsonl.

By default it goes to ~/.cache/feedbeast/results/<gpu>/bench.jsonl; `make bench` points
FEEDBEAST_RESULTS at the repository's results/ so a real GPU run is kept, with its summary table
(results.md) and plot (results.png) written by `summarize`.

On a machine that cannot run a step, what a GPU run recorded stands beside the skip: `recorded_bench(name)`,
`recorded_check(name)` and `recorded_hazard(name)` read the course's results/<gpu>/ folders (and
FEEDBEAST_RESULTS') and give one line naming each GPU and its folder (a hazard check's report after it), e.g.
`recorded on NVIDIA H200: 3,877.3 GB/s = 91.3 % of copy (4,246.4 GB/s in that run) (results/nvidia-h200/,
2026-11-29)`. A chapter's sweep
that was not timed here is drawn from the same records, one line per GPU, by `plot_recorded`.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import platform
import re
from pathlib import Path

import numpy as np


def results_root() -> Path:
    return Path(os.environ.get("FEEDBEAST_RESULTS", Path.home() / ".cache" / "feedbeast" / "results"))


def versions() -> dict:
    import importlib.metadata as md
    out = {"python": platform.python_version()}
    for pkg in ("cuda-core", "cuda-bindings", "nvidia-cuda-nvrtc", "numba", "numba-cuda", "numpy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def append(res) -> Path:
    """A fb.bench result, one line of results/<gpu>/bench.jsonl."""
    from ..device import gpu
    g = gpu()
    return _append_line("bench.jsonl", {
        "name": res.name, "median_ms": res.median_ms, "p10_ms": res.spread_ms[0], "p90_ms": res.spread_ms[1],
        "runs": len(res.times_ms), "value": res.value, "unit": res.unit, "nbytes": res.nbytes,
        "flops": res.flops, "ceiling": res.ceiling_name, "ceiling_value": res.ceiling_value, "pct": res.pct,
        "sizes": res.sizes, "bound": res.bound, "peak": res.peak_value, "peak_how": res.peak_how,
        "pct_peak": res.pct_peak, "kernels": res.kernels, "host_us": res.host_us, "host_hidden": res.host_hidden,
        "gpu": g.name, "cc": f"{g.cc[0]}.{g.cc[1]}",
        "sm_count": g.sm_count, "driver": g.driver_version, "nvrtc": "%d.%d" % g.nvrtc_version, "versions": versions()})


def append_check(res) -> Path | None:
    """A check() or tally() outcome on this GPU, one line of checks.jsonl (nothing without a GPU, nothing under
    make sanitize: its sizes and instrumented builds are not the runs the records stand for)."""
    from .. import hooks
    from ..check import Tally
    from ..device import gpu
    g = gpu()
    if g is None or hooks.mode.sanitizer:
        return None
    what = ({"summary": res.line} if isinstance(res, Tally) else
            {"rel_error": res.rel_error, "tolerance": res.tolerance, "n_bad": res.n_bad})
    return _append_line("checks.jsonl", {"name": res.name, "passed": res.passed, **what, "gpu": g.name,
                                         "cc": f"{g.cc[0]}.{g.cc[1]}"})


def append_hazard(rec: dict) -> Path | None:
    """A hazard check's, a named racecheck's or a named fb.isolated run's outcome on this GPU (hooks.on_hazard), one
    line of hazards.jsonl: its report's first 40 lines (nothing without a GPU, nothing under make sanitize, as for
    checks)."""
    from .. import hooks
    from ..device import gpu
    g = gpu()
    if g is None or hooks.mode.sanitizer:
        return None
    lines = str(rec.get("text", "")).splitlines()
    text = "\n".join(lines[:40] + ([f"... and {len(lines) - 40} more lines"] if len(lines) > 40 else []))
    return _append_line("hazards.jsonl", {**rec, "text": text, "gpu": g.name, "cc": f"{g.cc[0]}.{g.cc[1]}"})


def append_profile(pr) -> Path:
    """A fb.profile table, one line of results/<gpu>/profile.jsonl (next to bench.jsonl)."""
    return _append_line("profile.jsonl", pr.as_record())


def append_trace(spans) -> Path:
    """A named timeline (feedbeast.trace.Spans), one line of results/<gpu>/traces.jsonl."""
    return _append_line("traces.jsonl", spans.as_record())


NOTEBOOK_VARIABLE = "FEEDBEAST_NOTEBOOK"   # the notebook make bench is running (bench_run), kept with each record


def _append_line(filename: str, rec: dict) -> Path:
    """`rec` with the time now (and the notebook make bench runs), appended to results/<this gpu>/`filename`."""
    from ..device import gpu
    d = results_root() / gpu().slug
    d.mkdir(parents=True, exist_ok=True)
    if os.environ.get(NOTEBOOK_VARIABLE):
        rec["notebook"] = os.environ[NOTEBOOK_VARIABLE]
    rec["time"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    path = d / filename
    with path.open("a") as f:
        f.write(json.dumps(rec) + "\n")
    return path


def recorded_profile(name: str) -> dict | None:
    """The newest fb.profile table any GPU run recorded under `name` (the course's results/ and
    FEEDBEAST_RESULTS'), or None."""
    return _newest("profile", name)


def recorded_trace(name: str) -> dict | None:
    """The newest timeline any GPU run recorded under `name`, or None."""
    return _newest("traces", name)


def _newest(kind: str, name: str) -> dict | None:
    recs = [r for path in _recorded_logs(kind) for r in load(path) if r.get("name") == name]
    return max(recs, key=lambda r: r.get("time", ""), default=None)


_unfound_said = False


def course_results() -> Path | None:
    """results/ of the course checkout found from the working directory (a notebook runs in its folder; a hosted
    notebook's kernel in the folder that holds the clone: coursedir.find). Only what is shown reads this. Where
    there is none (a notebook copied out of the checkout, with the course installed from its wheel), it says so
    once, so that "no GPU run recorded it" is not read as the course having no record."""
    global _unfound_said
    from .coursedir import CourseNotFound, find
    try:
        return find(below=True) / "results"
    except CourseNotFound as e:
        if not _unfound_said:
            _unfound_said = True
            # in a notebook: no command line to pass --course to; the kernel's environment names the course
            where = str(e).split(": run from the checkout")[0].replace("say which with --course DIR",
                                                                       "say which with FEEDBEAST_COURSE")
            print(f"({where}: so the GPU runs it records in results/ are not read here; open the notebook from a "
                  "clone of the course, or set os.environ['FEEDBEAST_COURSE'] to the clone's folder in a cell "
                  "before this one)")
        return None


# Parts of a name that give a problem size: "n=4096", "rows=8192", "4000x4104x3992", "37 x 1000". A CPU run uses
# smaller sizes than a GPU run; a benchmark recorded only at the GPU's size is still the evidence to show.
_SIZE = re.compile(r"\b(?:n|m|k|rows|cols|s|b|h)=\d+|\b\d+ ?x ?\d+(?: ?x ?\d+)*\b")


def _sizeless(name: str) -> str:
    return _SIZE.sub(lambda m: re.sub(r"\d+", "#", m.group()), name)


def _recorded_logs(kind: str) -> list[Path]:
    """The `kind`.jsonl files of every GPU folder in the course's results/ and in FEEDBEAST_RESULTS."""
    roots = [r for r in (course_results(), Path(os.environ["FEEDBEAST_RESULTS"]) if os.environ.get(
        "FEEDBEAST_RESULTS") else None) if r is not None and r.is_dir()]
    return [p for root in dict.fromkeys(r.resolve() for r in roots) for p in sorted(root.glob(f"*/{kind}.jsonl"))]


def recorded_under(prefix: str) -> dict[str, dict]:
    """What GPU runs recorded under a name prefix ("ch09/"), for a notebook run where nothing is timed to show:
    {"<gpu> (results/<folder>/, <latest date>)": {name: its latest record}}, GPU folders with no such record left
    out."""
    out = {}
    for path in _recorded_logs("bench"):
        latest = {r["name"]: r for r in load(path) if r.get("name", "").startswith(prefix)}
        if latest:
            gpu = next(iter(latest.values())).get("gpu", path.parent.name)
            day = max(r["time"][:10] for r in latest.values())
            out[f"{gpu} (results/{path.parent.name}/, {day})"] = latest
    return out


def recorded(kind: str, name: str, other_sizes: bool = False) -> list[dict]:
    """The latest record of `name` per GPU in the course's results/ (and FEEDBEAST_RESULTS'), kind "bench",
    "checks" or "hazards"; with other_sizes, when there is none at this size, the latest record of each other size
    of the same name per GPU (a CPU run's small sizes are never the GPU's: every size the GPU recorded is the
    evidence)."""
    exact, sized = {}, {}
    for path in _recorded_logs(kind):
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict) or not isinstance(rec.get("name"), str) \
                    or not isinstance(rec.get("gpu", ""), str):
                continue          # not a record this reader can name: left out
            rec["_folder"] = path.parent.name
            gpu = rec.get("gpu", path.parent.name)
            if rec.get("name") == name:
                exact[gpu] = rec
            elif other_sizes and _sizeless(rec.get("name", "")) == _sizeless(name):
                sized[gpu, rec["name"]] = rec
    return list(exact.values()) or sorted(sized.values(), key=lambda r: (r.get("gpu", ""), _size_key(r["name"])))


def plot_recorded(series: dict, *, field: str = "pct", xlabel: str = "", ylabel: str = "% of the ceiling"):
    """Where a sweep was not timed: the same sweep as GPU runs recorded it, one line per GPU (each GPU's latest
    record of a name, recorded()); `field` "pct" is the % of the record's same-run ceiling, "value" its rate.
    `series` is {x: benchmark name}, or {label: {x: benchmark name}} for several lines per GPU; x may be a number
    or a category (a variant's name). Returns (fig, ax), or None after one line saying that no GPU run recorded
    them."""
    many = all(isinstance(v, dict) for v in series.values())
    lines = {}
    for label, sweep in (series.items() if many else [("", series)]):
        for x, name in sweep.items():
            for rec in recorded("bench", name):
                if rec.get(field) is not None:
                    lines.setdefault((label, rec.get("gpu", "?")), []).append((x, rec[field], rec.get("time", "")[:10]))
    if not lines:
        print("no plot: nothing was timed here, and " + ("no GPU run recorded these benchmarks" if _recorded_logs("bench")
              else "no recorded GPU runs were found (no course checkout in reach: FEEDBEAST_COURSE names one)"))
        return None
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for (label, gpu_name), pts in lines.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-",
                label=f"{label + ', ' if label else ''}{gpu_name} ({max(p[2] for p in pts) or 'undated'})")
    ax.set_xlabel(xlabel); ax.set_ylabel(ylabel)
    ax.set_title("recorded by make bench (no timing here)"); ax.legend(fontsize=8); fig.tight_layout()
    return fig, ax


def _size_key(name: str) -> tuple:
    """A name's problem size for ordering: the product of its size parts ("8x16x2048x128", "n=4096"), then the parts."""
    sizes = [int(x) for m in _SIZE.findall(name) for x in re.findall(r"\d+", m)]
    return (math.prod(sizes), sizes)


def _recorder(r: dict, short: bool = False) -> str:
    """' by the lab's solution, not this notebook's kernel' (short: ' by the lab's solution') for a record a solution
    notebook made (a lab's checks and benchmarks have its names: the figures are the solution's, not the learner's
    kernel's, which could not run here), else ''."""
    nb = r.get("notebook")
    if r.get("name", "").startswith("ceiling/"):      # a same-run ceiling: any notebook measures the same copy
        by_solution = False
    elif isinstance(nb, str) and nb:
        by_solution = Path(nb).parent.name == "solutions"
    else:                 # a record from before records named their notebook: a lab's benchmark names
        by_solution = bool(re.match(r"lab\d\d/", r.get("name", "")))
    return (" by the lab's solution" + ("" if short else ", not this notebook's kernel")) if by_solution else ""


def recorded_bench(name: str) -> str | None:
    """'recorded on <GPU>: <rate> = <%> of <ceiling>; on <GPU>: ...' for a benchmark, or None."""
    parts = []
    for r in recorded("bench", name, other_sizes=True):
        at = f" ({r['name']})" if r["name"] != name else ""
        rate = f"{r['value']:,.1f} {r['unit']}" if r.get("value") else f"{r['median_ms'] * 1e3:.1f} us"
        pct = f" = {r['pct']:.1f} % of {r['ceiling'].removeprefix('ceiling/')}" if r.get("pct") is not None else ""
        if pct and r.get("ceiling_value") and r.get("unit"):     # the same run's: another run's ceiling may stand beside
            pct += f" ({r['ceiling_value']:,.1f} {r['unit']} in that run)"
        when = f", {r['time'][:10]}" if r.get("time") else ""     # the prose may quote another run: say which
        parts.append(f"{r.get('gpu', r['_folder'])}{at}{_recorder(r)}: {rate}{pct} (results/{r['_folder']}/{when})")
    return "recorded on " + "; on ".join(parts) if parts else None


def recorded_peak(resource: str) -> str | None:
    """'recorded on <GPU>: <peak> = <its arithmetic> (results/<gpu>/, <date>); on ...' for a physical peak
    ("dram", "tensor", ...): the peak each GPU's latest benchmark bound by that resource was held to, or None."""
    latest = {}
    for path in _recorded_logs("bench"):
        for line in path.read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if isinstance(r, dict) and r.get("bound") == resource and isinstance(r.get("peak"), (int, float)) \
                    and isinstance(r.get("peak_how"), str):
                gpu = r.get("gpu", path.parent.name)
                if gpu not in latest or str(r.get("time", "")) >= str(latest[gpu][0].get("time", "")):
                    latest[gpu] = (r, path.parent.name)
    unit = "GB/s" if resource in ("dram", "l2", "smem") else "TFLOP/s"
    parts = [f"{gpu}: {r['peak']:,.1f} {unit} = {r['peak_how']} (results/{folder}/"
             + (f", {r['time'][:10]})" if isinstance(r.get("time"), str) else ")")
             for gpu, (r, folder) in latest.items()]
    return "recorded on " + "; on ".join(parts) if parts else None


def recorded_check(name: str) -> str | None:
    """'<name> recorded on <GPU>: passed, relative error 1.1e-06 (limit 1e-05; results/<gpu>/, <date>)' for a
    check of this name (for a tally: 'passed, <what it counted> (...)'); where no GPU ran this size, one line per GPU
    for the sizes it ran: '<name>: no GPU run at this size; <GPU> ran 3x4, 5x1028: passed, relative error at most
    2.6e-08 (limit 1e-05; results/<gpu>/, <date>)'."""
    recs = [r for r in recorded("checks", name, other_sizes=True)   # a CPU run's sizes are smaller: the GPU's, named
            if isinstance(r.get("passed"), bool)]   # a record this reader cannot state: left out, never a crash
    recs = [r for r in recs if isinstance(r.get("summary"), str)
            or all(isinstance(r.get(k), (int, float)) for k in ("rel_error", "tolerance"))]

    def where(group):
        times = [r["time"][:10] for r in group if isinstance(r.get("time"), str)]
        return f"results/{group[-1]['_folder']}/" + (f", {max(times)}" if times else "")

    # A lab's check recorded by its solution: first say that the learner's kernel was not checked at all, so that
    # the solution's "passed" is never read as the learner's
    lead = ("NOT CHECKED: this notebook's kernel did not run here, so nothing says it is correct (a GPU that runs "
            "it grades it). For comparison, " if any(_recorder(r) for r in recs) else "")
    if recs and recs[0]["name"] == name:
        parts = []
        for r in recs:
            who = f"{r.get('gpu', r['_folder'])}{_recorder(r, bool(lead))}"
            verdict = "passed" if r["passed"] else "FAILED"
            if isinstance(r.get("summary"), str):                                                 # a tally()
                parts.append(f"{who}: {verdict}, {r['summary']} ({where([r])})")
            else:                                                                                  # a check()
                parts.append(f"{who}: {verdict}, relative error {r['rel_error']:.2e} (limit {r['tolerance']:.0e}; "
                             f"{where([r])})")
        return f"{lead}{name} recorded on " + "; on ".join(parts)
    by_gpu: dict = {}
    for r in recs:
        by_gpu.setdefault((r.get("gpu", r["_folder"]), _recorder(r, bool(lead))), []).append(r)
    parts = []
    for (gpu, by), group in by_gpu.items():
        sizes = ", ".join(" ".join(_SIZE.findall(r["name"])) or r["name"] for r in group)
        failed = [r["name"] for r in group if not r["passed"]]
        verdict = f"FAILED at {', '.join(failed)}" if failed else "passed"
        errors = [r for r in group if not isinstance(r.get("summary"), str)]
        worst = (f", relative error at most {max(r['rel_error'] for r in errors):.2e} (limit "
                 f"{max(r['tolerance'] for r in errors):.0e}; {where(group)})" if errors else f" ({where(group)})")
        parts.append(f"{gpu} ran {sizes}{by}: {verdict}{worst}")
    return f"{lead}{name}: no GPU run at this size; " + "; ".join(parts) if parts else None


def recorded_hazard(name: str, source: str = "") -> str | None:
    """'recorded on <GPU> (results/<gpu>/, <date>):' and the report that GPU's latest run of hazard check, racecheck
    or fb.isolated run `name` gave, one GPU after another; None where none ran it. `source`: the digest of the code
    the skipped step would run; a record of other code (the course's, where a learner edited it) says so."""
    recs = [r for r in recorded("hazards", name) if isinstance(r.get("text"), str)]

    def of_what(r):           # said only where the record is not known to be of this code
        if not source or r.get("source") == source:
            return ""
        whose = ("the lab's solution" if _recorder(r) else "the course's code as it was then") \
            if isinstance(r.get("source"), str) else "code the record does not identify"
        return f" from other code than this ({whose}): only a GPU run checks this code"
    parts = [f"recorded on {r.get('gpu', r['_folder'])}{_recorder(r)} (results/{r['_folder']}/"
             + (f", {r['time'][:10]}" if isinstance(r.get("time"), str) else "") + ")" + of_what(r)
             + f":\n{r['text']}" for r in recs]
    return "\n".join(parts) if parts else None


def load(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]


def family(name: str) -> str:
    """The kernel or build a benchmark name times, without its sizes: "ch10/gemv-wgmma 8x8192x8192" and
    "ch09/6-persist/8x32x2048x64/causal=1" -> "ch10/gemv-wgmma", "ch09/6-persist"."""
    parts = name.split("/")
    return parts[0] if len(parts) == 1 else f"{parts[0]}/{parts[1].split(' ')[0]}"


def retired_names(folder: Path, latest: dict[str, dict]) -> dict[str, tuple[str, str]]:
    """{name: (notebook, its latest run's start)} for each name the latest run of its notebook (runs.jsonl, written
    by `make bench`) did not record: renamed or dropped since, or not timed in that run. A name's notebook is the
    one whose run recorded it last; a name no run in runs.jsonl recorded (older than the file) belongs to the one
    notebook whose runs record its prefix ("lab04"), and to none when two notebooks do."""
    owner, last, by_prefix = {}, {}, {}
    runs = Path(folder) / "runs.jsonl"
    for run in sorted(load(runs) if runs.exists() else [], key=lambda r: r["started"]):
        owner.update(dict.fromkeys(run["names"], run["notebook"]))
        last[run["notebook"]] = (run["started"], set(run["names"]))
        for n in run["names"]:
            by_prefix.setdefault(n.split("/")[0], set()).add(run["notebook"])

    def notebook_of(name):
        notebooks = {owner[name]} if name in owner else by_prefix.get(name.split("/")[0], set())
        return next(iter(notebooks)) if len(notebooks) == 1 else None

    out = {}
    for n, r in latest.items():
        nb = notebook_of(n)
        if nb and n not in last[nb][1] and r.get("time", "") < last[nb][0]:
            out[n] = (nb, last[nb][0])
    return out


def _checks_summary(path: Path) -> list[str]:
    """results.md's section on checks.jsonl: the latest outcome of each check per notebook, every failure named,
    and each count (fb.tally) with what it counted."""
    if not path.exists():
        return []
    latest = {}
    for r in load(path):
        latest[r["name"]] = r
    by_nb = {}
    for r in latest.values():
        by_nb.setdefault(r.get("notebook") or "(a run before records named their notebook)", []).append(r)
    failed = sorted(n for n, r in latest.items() if not r["passed"])
    out = ["", "## Checks (checks.jsonl: the latest outcome of each check)", "",
           f"{len(latest)} checks: {len(latest) - len(failed)} passed, {len(failed)} failed.", ""]
    out += [f"- {nb}: {sum(r['passed'] for r in rs)} of {len(rs)} passed" for nb, rs in sorted(by_nb.items())]
    tallies = sorted((r for r in latest.values() if isinstance(r.get("summary"), str)), key=lambda r: r["name"])
    if tallies:
        out += ["", "Counted over many cases (fb.tally):", ""]
        out += [f"- {r['name']}: {'passed' if r['passed'] else 'FAILED'}, {r['summary']}" for r in tallies]
    if failed:
        out += ["", "Failed (latest outcome):", ""] + [f"- {n}" for n in failed]
    return out


def _hazards_summary(path: Path) -> list[str]:
    """results.md's section on hazards.jsonl: the latest verdict of each hazard check, named racecheck and named
    fb.isolated run."""
    if not path.exists():
        return []
    latest = {}
    for line in path.read_text().splitlines():      # a line this reader cannot state is left out, never a crash
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict) and isinstance(r.get("name"), str):
            latest[r["name"]] = r
    out = ["", "## Hazard checks, racechecks and isolated runs (hazards.jsonl: the latest report of each)", ""]
    for name, r in sorted(latest.items()):
        n = r.get("violations")
        first = str(r.get("text", "")).splitlines()[:1]
        if isinstance(n, int):
            verdict = f"{n} reported"
        elif r.get("tool") == "fb.isolated":          # an isolated run counts nothing: it finished or it raised
            verdict = "finished" if r.get("ok") is True else "raised"
        else:
            verdict = "no count"
        out.append(f"- {name} ({r.get('notebook') or 'no notebook named'}): {verdict}"
                   + (f"; {first[0]}" if first else ""))
    return out


def summarize(folder: Path) -> Path:
    """results.md (the latest result per name) and results.png (% of ceiling) for one GPU's folder."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    folder = Path(folder)
    latest = {}
    for r in load(folder / "bench.jsonl"):
        latest[r["name"]] = r
    retired = retired_names(folder, latest)
    rows = sorted((r for n, r in latest.items() if n not in retired), key=lambda r: r["name"])
    first = rows[0] if rows else {}
    lines = [f"# Results on {first.get('gpu', '?')}", "",
             f"Driver {first.get('driver')}, NVRTC {first.get('nvrtc')}, versions {first.get('versions')}.", "",
             "Each rate is also shown as a share of the physical peak of the resource it is bound by (from the "
             "GPU's clocks and SM count; see feedbeast.ceilings.physical_peak).", "",
             "| benchmark | sizes | median | rate | % of ceiling | ceiling | bound | % of peak |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rate = f"{r['value']:.1f} {r['unit']}" if r["value"] else "-"
        pct = f"{r['pct']:.1f}" if r["pct"] is not None else "-"
        ceil = f"{r['ceiling']} ({r['ceiling_value']:.1f})" if r["ceiling"] else "-"
        peak = f"{r['pct_peak']:.1f}" if r.get("pct_peak") is not None else "-"
        lines.append(f"| {r['name']} | {r['sizes'] or ''} | {r['median_ms'] * 1e3:.1f} us | {rate} | {pct} | {ceil} "
                     f"| {r.get('bound') or '-'} | {peak} |")
    if retired:
        lines += ["", "## Names the latest run of their notebook did not record", "",
                  "Kept in bench.jsonl, left out of the table above and the plot: renamed or dropped since, or not "
                  "timed in that run (a library it did not find); the notebook's latest `make bench` run started "
                  "on the date given.", ""]
        lines += [f"- {n} (last recorded {latest[n]['time'][:10]}; {nb} ran {when[:10]})"
                  for n, (nb, when) in sorted(retired.items())]
    prof = folder / "profile.jsonl"
    if prof.exists():   # counters recorded by fb.profile: the latest table per name
        latest_p = {}
        for r in load(prof):
            latest_p[r["name"]] = r
        lines += ["", "## Counters (Nsight Compute, one launch each, clocks locked by ncu)", ""]
        for r in sorted(latest_p.values(), key=lambda r: r["name"]):
            vals = ", ".join(f"{k} {v:.4g}{r.get('units', {}).get(k, '')}" for k, v in r["values"].items()
                             if isinstance(v, (int, float)))
            stalls = ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["stalls"].items(), key=lambda kv: -kv[1])[:4])
            lines.append(f"- **{r['name']}** ({r['kernel'][:60]}): {vals}; top stalls (warps per issue): {stalls}")
    lines += _checks_summary(folder / "checks.jsonl") + _hazards_summary(folder / "hazards.jsonl")
    (folder / "results.md").write_text("\n".join(lines) + "\n")
    # One row per family (a chapter's kernel or build over its sizes: "ch09/6-persist", "ch10/cublas"), one dot
    # per size, the family's median marked: a chapter records hundreds of sizes, too many for a bar each.
    families = {}
    for r in rows:
        if r["pct"] is not None:
            families.setdefault(family(r["name"]), []).append(r["pct"])
    fig, ax = plt.subplots(figsize=(8, 0.22 * len(families) + 1.4))
    for y, (fam, pcts) in enumerate(families.items()):
        ax.scatter(pcts, [y] * len(pcts), s=9, color="tab:green", alpha=0.6, lw=0)
        ax.plot([np.median(pcts)] * 2, [y - 0.35, y + 0.35], color="k", lw=1.2)
    ax.set_yticks(range(len(families)), [f"{f} ({len(p)})" for f, p in families.items()], fontsize=7)
    ax.set_ylim(len(families) - 0.5, -0.5)
    ax.axvline(100, color="k", lw=0.8, ls=":")
    ax.set_xlabel("% of the ceiling measured in the same run (dots: sizes; bar: their median)")
    ax.set_title(f"{first.get('gpu', '')}")
    fig.tight_layout()
    fig.savefig(folder / "results.png", dpi=110)
    plt.close(fig)
    return folder / "results.md"
