"""The results log: every bench() result as one JSON line, with the GPU, versions and sizes.

By default it goes to ~/.cache/feedbeast/results/<gpu>/bench.jsonl; `make bench` points
FEEDBEAST_RESULTS at the repository's results/ so a real GPU run is kept, with its summary table
(results.md) and plot (results.png) written by `summarize`.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
from pathlib import Path


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
    from .device import gpu
    g = gpu()
    d = results_root() / g.slug
    d.mkdir(parents=True, exist_ok=True)
    rec = {"name": res.name, "median_ms": res.median_ms, "p10_ms": res.spread_ms[0], "p90_ms": res.spread_ms[1],
           "runs": len(res.times_ms), "value": res.value, "unit": res.unit, "nbytes": res.nbytes,
           "flops": res.flops, "ceiling": res.ceiling_name, "ceiling_value": res.ceiling_value, "pct": res.pct,
           "sizes": res.sizes, "bound": res.bound, "peak": res.peak_value, "peak_how": res.peak_how,
           "pct_peak": res.pct_peak, "kernels": res.kernels, "gpu": g.name, "cc": f"{g.cc[0]}.{g.cc[1]}", "sm_count": g.sm_count,
           "driver": g.driver_version, "nvrtc": "%d.%d" % g.nvrtc_version, "versions": versions(),
           "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    path = d / "bench.jsonl"
    with path.open("a") as f:
        f.write(json.dumps(rec) + "\n")
    return path


def load(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]


def summarize(folder: Path) -> Path:
    """results.md (the latest result per name) and results.png (% of ceiling) for one GPU's folder."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    folder = Path(folder)
    latest = {}
    for r in load(folder / "bench.jsonl"):
        latest[r["name"]] = r
    rows = sorted(latest.values(), key=lambda r: r["name"])
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
    (folder / "results.md").write_text("\n".join(lines) + "\n")
    with_pct = [r for r in rows if r["pct"] is not None]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(with_pct) + 1.2))
    ax.barh([r["name"] for r in with_pct], [r["pct"] for r in with_pct], color="tab:green")
    ax.axvline(100, color="k", lw=0.8)
    ax.set_xlabel("% of the ceiling measured in the same run")
    ax.set_title(f"{first.get('gpu', '')}")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(folder / "results.png", dpi=110)
    plt.close(fig)
    return folder / "results.md"
