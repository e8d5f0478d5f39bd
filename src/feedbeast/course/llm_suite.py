"""An LLM shape suite: chapter 07's kernels on the GEMM shapes of an 8-billion-parameter-class model,
against cuBLAS timed the same way in the same process (fb.bench with flush="read": CUDA events, a read-only L2
flush before every run, which leaves no dirty lines for a memory-bound run to write back).

    python -m feedbeast.course.llm_suite                 # run on this GPU; results/<gpu>/llm_suite.jsonl + plots
    python -m feedbeast.course.llm_suite --from-log LOG  # rebuild the JSON lines and plots from a printed run

Prefill (compute-bound): C (M x N) = A (M x K) B with B stored N x K (the `nn.Linear` layout), M x N x K in
PREFILL; the capstone variants in CANDIDATES, each as % of cuBLAS (`torch.matmul(a, w.T)`). cuBLAS is timed
before and after the candidates and the faster of the two is the reference. "best" is the fastest
candidate per shape, picked after the fact in the same run: a selection, reported as such.
Decode (memory-bound): M in DECODE_MS tokens by the weights of DECODE_NK; chapter 07's decode kernel and
the capstone, each as % of the copy ceiling (bytes of A, B and C) and against cuBLAS's time.
Every result is checked against a float64 product of the same inputs (relative error). The kernels are
read from the chapter's cells, so what is measured is what the chapter ships. Speed is reported, never
asserted. Needs an sm_90a GPU and PyTorch (for cuBLAS and the inputs); otherwise it says what it skipped.
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path

import numpy as np

CHAPTER_NAME = "chapters/07-capstone-gemm.ipynb"   # read from the course checkout (feedbeast.course.coursedir)


def chapter_path(course=None) -> Path:
    from .coursedir import find
    return find(explicit=course) / CHAPTER_NAME
PREFILL = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024), (4096, 14336, 4096),
           (16384, 4096, 4096), (1024, 8192, 8192), (4096, 4096, 16384)]
DECODE_MS = (1, 8, 16, 32, 64)
DECODE_NK = [(4096, 4096), (8192, 8192), (14336, 4096)]
# The chapter's variants that came closest to cuBLAS on an H100 (a first run of this suite measured all of
# grouped16+tma-store, hilbert+tma-store, inflight+tma-store, cluster2+mc/relaxed, cluster2+mc/relaxed+inflight:
# the clustered ones were 1-7 points behind on every shape).
CANDIDATES = ("grouped16+tma-store", "hilbert+tma-store", "inflight+tma-store")
DECODE_CAPSTONE = "grouped16+tma-store"
# Variants of the chapter's kernels with other settings, measured alongside (named as such in the results).
# Each is the -D of chapter 07's build(): the TMA-store epilogue of rung 2 (EPILOGUE, STAGES) with other settings.
EXTRA_VARIANTS = {"hilbert+inflight": dict(EPILOGUE="TmaStore", STAGES=3, ORDER="Table", MMA_INFLIGHT=1),
                  "inflight/g8": dict(EPILOGUE="TmaStore", STAGES=3, MMA_INFLIGHT=1, GROUP_M=8)}
DECODE_CONFIGS = {"decode": {}, "decode/stages4x2": dict(stages=4, per_sm=2), "decode/stages6x2": dict(stages=6, per_sm=2),
                  "decode/cw4s4": dict(cw=4, stages=4)}
TAG = "LLM_SUITE "


class _Source:
    def __init__(self, source):
        self.source = source


def chapter_cells(chapter) -> tuple[list, dict]:
    """The code cells of chapter 07 (their sources), and each %%cuda cell's body by its --name."""
    import nbformat
    code = [c.source for c in nbformat.read(chapter, as_version=4).cells if c.cell_type == "code"]
    cuda = {}
    for src in code:
        first, _, body = src.partition("\n")
        if first.startswith("%%cuda") and (m := re.search(r"--name (\w+)", first)):
            cuda[m.group(1)] = _Source(body)
    for name in ("capstone", "decode"):
        if name not in cuda:
            raise LookupError(f"no %%cuda cell named {name} in {chapter}")
    return code, cuda


def _host_cell(code) -> str:
    return next(src for src in code if src.startswith("BM, BN, BK = 128, 256, 64"))


def chapter_namespace(variants=CANDIDATES, chapter=None, extra=None):
    """Chapter 07's host helpers (prepare, prepare_decode, ...) with `variants` of the capstone compiled,
    and `extra` variants ({name: defines}) added to VARIANTS and compiled by the chapter's own build()."""
    import feedbeast as fb
    from feedbeast import stress
    from feedbeast.examples import matmul_inputs, matmul_reference
    code, cuda = chapter_cells(chapter or chapter_path())
    # every %%cuda cell by its name: the host cell's build() puts the rung cells' parts before rung 1's source
    ns = {"fb": fb, "np": np, "math": math, "matmul_inputs": matmul_inputs, "matmul_reference": matmul_reference,
          "stress": stress, "g": fb.gpu(), **cuda}
    for src in code:
        if src.startswith("def grouped_order"):
            exec(src.split("\ntiles_m, tiles_n")[0], ns)
        elif src is _host_cell(code):
            exec(src.replace("for name, d in VARIANTS.items()}",
                             f"for name, d in VARIANTS.items() if name in {list(variants)!r}}}"), ns)
        elif src.startswith("DEC_MPS"):
            exec(src, ns)
    for name, defines in (extra or {}).items():
        ns["VARIANTS"][name] = defines
        ns["MODS"][name] = ns["build"](defines)
    return ns


def _builder(chapter) -> dict:
    """Chapter 07's VARIANTS and build() (and the cells build reads), nothing compiled."""
    import feedbeast as fb
    code, cuda = chapter_cells(chapter)
    ns = {"fb": fb, "np": np, **cuda}
    exec(_host_cell(code).split("\nMODS = ")[0], ns)
    return ns


def _compile_one(job):
    """("capstone", chapter, defines): chapter 07's build(defines); else (source, defines, name)."""
    import feedbeast as fb
    if job[0] == "capstone":
        _builder(job[1])["build"](job[2])
        return "capstone.cu"
    source, defines, name = job
    fb.compile(source, "sm_90a", defines=defines, name=name)
    return name


def warm_cache(candidates=CANDIDATES, extra=EXTRA_VARIANTS, decode_configs=DECODE_CONFIGS, chapter=None):
    """Compile every module the suite needs in parallel processes (NVRTC is single-threaded), so that
    run() finds them in the disk cache. Touches no GPU."""
    from concurrent.futures import ProcessPoolExecutor
    import multiprocessing
    chapter = str(chapter or chapter_path())
    code, cuda = chapter_cells(chapter)
    ns = _builder(chapter)                                               # VARIANTS only, nothing compiled
    exec(next(src for src in code if src.startswith("DEC_MPS")).split("\n_decode_modules")[0], ns)   # defaults
    variants = {**{n: ns["VARIANTS"][n] for n in candidates}, **(extra or {})}
    jobs = [("capstone", chapter, d) for d in variants.values()]
    for cfg in decode_configs.values():
        for mp in ns["DEC_MPS"]:
            jobs.append((cuda["decode"].source, {"MP": mp, "CW": cfg.get("cw", ns["DEC_CW"]),
                                          "STAGES": cfg.get("stages", ns["DEC_STAGES"])}, "decode.cu"))
    with ProcessPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        # by its importable name: under `python -m`, this module is __main__ and a spawned child could not
        # find __main__._compile_one
        from feedbeast.course.llm_suite import _compile_one as compile_one
        list(pool.map(compile_one, jobs))
    return len(jobs)


def _emit(rec):
    print(TAG + json.dumps(rec), flush=True)
    return rec


class _Suite:
    """One run of the suite on this GPU: the chapter's kernels, cuBLAS through torch, the copy ceiling, and the
    records made so far (each printed as a JSON line after TAG the moment it is made)."""

    def __init__(self, torch, ns, candidates, decode_configs, reps):
        import feedbeast as fb
        self.fb, self.torch, self.ns, self.reps = fb, torch, ns, reps
        self.candidates, self.decode_configs = candidates, decode_configs
        g = fb.gpu()
        self.env = {"gpu": g.name, "driver": g.driver_version, "nvrtc": list(g.nvrtc_version),
                    "torch": torch.__version__}
        self.copy = fb.ceiling("copy")
        self.dram_peak = fb.ceilings.physical_peak("dram", g).value
        self.records = [_emit({"regime": "ceiling", "kernel": "copy", "gbps": self.copy.gbps,
                               "dram_peak_gbps": self.dram_peak, **self.env})]
        self.gen = torch.Generator(device="cuda").manual_seed(0)

    def record(self, **rec):
        self.records.append(_emit({**rec, **self.env} if rec.get("kernel") != "error" else rec))

    def rand(self, *shape):
        t = self.torch
        return (t.rand(*shape, device="cuda", generator=self.gen, dtype=t.float32) * 2 - 1).to(t.bfloat16)

    def view(self, t):
        return self.fb.DeviceArray(tuple(t.shape), self.fb.bfloat16, ptr=t.data_ptr(), owner=False)

    def rel_err(self, c_fb, ref64):
        torch = self.torch
        got = torch.from_numpy(c_fb.to_host().astype("float64")).to(ref64.device)   # the bf16 values, exactly
        return float(torch.linalg.norm(got - ref64) / torch.linalg.norm(ref64))

    def timed(self, fn, flops=None, nbytes=None):
        # record=False: these runs are logged here, in llm_suite.jsonl, not in the chapters' bench.jsonl
        r = self.fb.bench(fn, name="llm_suite", flush="read", reps=self.reps, record=False)
        if not r:
            raise RuntimeError(str(r))     # a Skipped (no GPU, timing off): the shape is reported as failed
        t = r.median_ms
        out = {"median_ms": t}
        if flops:
            out["tflops"] = flops / t / 1e9
        if nbytes:
            out["gbps"] = nbytes / t / 1e6
            out["pct_copy"] = 100 * out["gbps"] / self.copy.gbps
            out["above_dram_peak"] = bool(out["gbps"] > self.dram_peak)   # would be a bug of the experiment
        return out

    def failed(self, regime, m, n, k, e):        # one shape's failure is reported, and the rest still run
        import traceback
        traceback.print_exc()
        self.record(regime=regime, kernel="error", m=m, n=n, k=k, error=repr(e)[:300])

    def prefill_shape(self, m, n, k):
        torch = self.torch
        a, w = self.rand(m, k), self.rand(n, k)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ref64 = a.double() @ w.double().T
        flops = 2.0 * m * n * k

        def cublas():
            return torch.matmul(a, w.T, out=out)
        cb = [self.timed(cublas, flops)]
        cublas_err = float(torch.linalg.norm(out.double() - ref64) / torch.linalg.norm(ref64))
        ours = {}
        for name in self.candidates:
            c, launch = self.ns["prepare"](name, self.view(a), self.view(w), m, n, k)
            launch()
            ours[name] = (self.timed(launch, flops), self.rel_err(c, ref64))
        cb.append(self.timed(cublas, flops))
        ref = max(cb, key=lambda r: r["tflops"])
        self.record(regime="prefill", kernel="cublas", m=m, n=n, k=k, **ref,
                    tflops_runs=[r["tflops"] for r in cb], rel_err=cublas_err)
        for name, (r, err) in ours.items():
            self.record(regime="prefill", kernel=name, m=m, n=n, k=k, **r,
                        pct_cublas=100 * r["tflops"] / ref["tflops"], rel_err=err, correct=bool(err < 1e-2))

    def decode_shape(self, a, w, m, n, k):
        torch, ns, view = self.torch, self.ns, self.view
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ref64 = a.double() @ w.double().T
        nbytes = 2 * (m * k + n * k + m * n)

        def cublas():
            return torch.matmul(a, w.T, out=out)
        cb = self.timed(cublas, nbytes=nbytes)
        self.record(regime="decode", kernel="cublas", m=m, n=n, k=k, **cb)
        preps = [(name, lambda cfg=cfg: ns["prepare_decode"](view(a), view(w), m, n, k, **cfg))
                 for name, cfg in self.decode_configs.items()]
        if DECODE_CAPSTONE in self.candidates:
            preps.append((DECODE_CAPSTONE, lambda: ns["prepare"](DECODE_CAPSTONE, view(a), view(w), m, n, k)))
        for kernel, prep in preps:
            c, launch = prep()
            launch()
            err = self.rel_err(c, ref64)
            r = self.timed(launch, nbytes=nbytes)
            self.record(regime="decode", kernel=kernel, m=m, n=n, k=k, **r,
                        vs_cublas_time=cb["median_ms"] / r["median_ms"], rel_err=err, correct=bool(err < 1e-2))


def run(reps: int = 20, prefill=PREFILL, decode_nk=DECODE_NK, decode_ms=DECODE_MS, candidates=CANDIDATES,
        extra=EXTRA_VARIANTS, decode_configs=DECODE_CONFIGS):
    """Run the suite on this GPU; returns the records (also printed as JSON lines after TAG)."""
    import feedbeast as fb
    skip = fb.needs("sm_90a", "LLM shape suite")
    if skip is not None:
        print(skip)
        return []
    try:
        import torch
    except ImportError:
        print("skipped: LLM shape suite: needs PyTorch (cuBLAS through torch.matmul, inputs on the GPU)")
        return []
    ns = chapter_namespace(candidates, extra=extra)
    suite = _Suite(torch, ns, tuple(candidates) + tuple(extra or ()), decode_configs, reps)
    for m, n, k in prefill:
        try:
            suite.prefill_shape(m, n, k)
        except Exception as e:
            suite.failed("prefill", m, n, k, e)
        torch.cuda.empty_cache()
    for n, k in decode_nk:
        w = suite.rand(n, k)
        for m in decode_ms:
            try:
                suite.decode_shape(suite.rand(m, k), w, m, n, k)
            except Exception as e:
                suite.failed("decode", m, n, k, e)
        del w
        torch.cuda.empty_cache()
    print(tables(suite.records))
    return suite.records


def tables(records) -> str:
    """The prefill and decode tables, as text."""
    out = []
    pre = [r for r in records if r["regime"] == "prefill" and r["kernel"] != "error"]
    shapes = list(dict.fromkeys((r["m"], r["n"], r["k"]) for r in pre))
    names = list(dict.fromkeys(r["kernel"] for r in pre if r["kernel"] != "cublas"))
    if pre:
        out.append("prefill: TFLOP/s (cuBLAS) and % of cuBLAS; 'best' is the fastest variant per shape, picked "
                   "after the run")
        out.append(f"{'M x N x K':>20} {'cuBLAS':>7} | " + " | ".join(f"{n[:28]:>28}" for n in names) + " |   best")
        for s in shapes:
            rs = {r["kernel"]: r for r in pre if (r["m"], r["n"], r["k"]) == s}
            if "cublas" not in rs:
                continue
            cells = [f"{rs[n]['pct_cublas']:6.1f}%{'' if rs[n]['correct'] else ' WRONG':>21}" if n in rs else " " * 28
                     for n in names]
            best = max((rs[n]["pct_cublas"] for n in names if n in rs and rs[n]["correct"]), default=float("nan"))
            out.append(f"{'x'.join(map(str, s)):>20} {rs['cublas']['tflops']:7.0f} | " + " | ".join(cells)
                       + f" | {best:5.1f}%")
    dec = [r for r in records if r["regime"] == "decode" and r["kernel"] != "error"]
    if dec:
        out.append("decode: % of the copy ceiling (A + B + C bytes) and time, cuBLAS/ours > 1 means ours is faster")
        out.append(f"{'M':>3} {'N':>6} {'K':>5} | {'cuBLAS us':>9} {'%copy':>6} | {'decode us':>9} {'%copy':>6} "
                   f"{'cuBLAS/ours':>11} | {'capstone %copy':>14}")
        for s in dict.fromkeys((r["m"], r["n"], r["k"]) for r in dec):
            rs = {r["kernel"]: r for r in dec if (r["m"], r["n"], r["k"]) == s}
            cb, d, cap = rs.get("cublas"), rs.get("decode"), rs.get(DECODE_CAPSTONE)
            if not (cb and d):
                continue
            out.append(f"{s[0]:>3} {s[1]:>6} {s[2]:>5} | {cb['median_ms'] * 1e3:9.1f} {cb['pct_copy']:6.1f} | "
                       f"{d['median_ms'] * 1e3:9.1f} {d['pct_copy']:6.1f} {d['vs_cublas_time']:11.2f}"
                       f"{'' if d['correct'] else ' WRONG'} | {cap['pct_copy'] if cap else float('nan'):14.1f}")
    others = list(dict.fromkeys(r["kernel"] for r in dec if r["kernel"].startswith("decode/")))
    if others:
        out.append("decode settings explored (% of copy; the first column is the chapter's default)")
        out.append(f"{'M':>3} {'N':>6} {'K':>5} | {'decode':>8} " + " ".join(f"{o[7:]:>14}" for o in others))
        for s in dict.fromkeys((r["m"], r["n"], r["k"]) for r in dec):
            rs = {r["kernel"]: r for r in dec if (r["m"], r["n"], r["k"]) == s}
            if "decode" in rs:
                out.append(f"{s[0]:>3} {s[1]:>6} {s[2]:>5} | {rs['decode']['pct_copy']:8.1f} " + " ".join(
                    f"{rs[o]['pct_copy']:13.1f}{'' if rs[o]['correct'] else '!'}" if o in rs else " " * 14
                    for o in others))
    return "\n".join(out)


def plot(records, folder: Path):
    """One figure per regime: llm_prefill.png (% of cuBLAS per shape), llm_decode.png (% of copy per M)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    gpu = next((r["gpu"] for r in records if "gpu" in r), "GPU")
    pre = [r for r in records if r["regime"] == "prefill" and r["kernel"] not in ("cublas", "error")]
    if pre:
        shapes = list(dict.fromkeys((r["m"], r["n"], r["k"]) for r in pre))
        names = list(dict.fromkeys(r["kernel"] for r in pre))
        fig, ax = plt.subplots(figsize=(11, 4.5))
        wdt = 0.8 / len(names)
        for j, name in enumerate(names):
            ys = [next((r["pct_cublas"] for r in pre if r["kernel"] == name and (r["m"], r["n"], r["k"]) == s),
                       np.nan) for s in shapes]
            ax.bar(np.arange(len(shapes)) + (j - (len(names) - 1) / 2) * wdt, ys, wdt, label=name)
        ax.axhline(100, color="k", lw=0.8)
        ax.set_xticks(np.arange(len(shapes)))
        ax.set_xticklabels(["x".join(map(str, s)) for s in shapes], rotation=20, fontsize=8)
        ax.set_ylabel("% of cuBLAS (same run)")
        ax.set_ylim(0, max(110, max(r["pct_cublas"] for r in pre) + 5))
        ax.set_title(f"Prefill GEMMs (M x N x K, bf16): chapter 07's capstone vs cuBLAS on {gpu}")
        ax.legend(fontsize=7, ncol=3, loc="lower right")
        fig.tight_layout()
        fig.savefig(folder / "llm_prefill.png", dpi=110)
        plt.close(fig)
    dec = [r for r in records if r["regime"] == "decode" and r["kernel"] != "error"]
    if dec:
        fig, ax = plt.subplots(figsize=(9, 4.5))
        for i, (n, k) in enumerate(dict.fromkeys((r["n"], r["k"]) for r in dec)):
            for kernel, style in (("decode", "o-"), ("cublas", "x--"), (DECODE_CAPSTONE, ":")):
                rs = sorted((r for r in dec if r["kernel"] == kernel and (r["n"], r["k"]) == (n, k)),
                            key=lambda r: r["m"])
                if rs:
                    ax.plot([r["m"] for r in rs], [r["pct_copy"] for r in rs], style, color=f"C{i}",
                            label=f"{'cuBLAS' if kernel == 'cublas' else kernel} N={n} K={k}")
        ax.axhline(85, color="k", lw=0.8, ls=":")
        ax.set_xscale("log", base=2)
        ms = sorted({r["m"] for r in dec})
        ax.set_xticks(ms)
        ax.set_xticklabels(ms)
        ax.set_xlabel("M (tokens)")
        ax.set_ylabel("% of the copy ceiling (A + B + C bytes)")
        ax.set_title(f"Decode GEMMs on {gpu}: the weights' bytes per second")
        ax.legend(fontsize=6, ncol=3)
        fig.tight_layout()
        fig.savefig(folder / "llm_decode.png", dpi=110)
        plt.close(fig)


def save(records, root: Path):
    """results/<gpu>/llm_suite.jsonl (replaced), its tables as llm_suite.md, and the two plots."""
    if not records:
        return None
    slug = re.sub(r"[^a-z0-9]+", "-", records[0]["gpu"].lower()).strip("-")
    folder = Path(root) / slug
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "llm_suite.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "llm_suite.md").write_text(f"# LLM shape suite on {records[0]['gpu']}\n\n```\n{tables(records)}\n```\n")
    plot(records, folder)
    return folder


def from_log(text: str) -> list:
    return [json.loads(line.split(TAG, 1)[1]) for line in text.splitlines() if TAG in line]


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    course = None
    if "--course" in argv:
        i = argv.index("--course")
        course = argv[i + 1]
        del argv[i:i + 2]
        os.environ["FEEDBEAST_COURSE"] = str(Path(course).resolve())
    root = Path(os.environ.get("FEEDBEAST_RESULTS") or chapter_path(course).parents[1] / "results")
    if argv[:1] == ["--from-log"]:
        records = from_log(Path(argv[1]).read_text())
        print(tables(records))
    else:
        import time
        t0 = time.perf_counter()
        import feedbeast as fb
        if "--no-warm" not in argv and (fb.needs("sm_90a") is None or "--warm" in argv):
            print(f"compiled {warm_cache()} modules in parallel in {time.perf_counter() - t0:.0f} s", flush=True)
        records = run()
    folder = save(records, root)
    if folder:
        print(f"wrote {folder}/llm_suite.jsonl, llm_suite.md, llm_prefill.png, llm_decode.png")


if __name__ == "__main__":
    main()
