"""Why is it that fast? Hardware counters of one kernel launch, read by Nsight Compute.

Chapter 02 reads its first counters with fb.profile; later chapters read the same table.

    run = mod.rowsum.bind(256, 128, x, y, 4096, 4096)    # what the chapter times: fb.bench(run, ...)
    t = fb.profile(run, name="ch03/rowsum")              # the same launch, under Nsight Compute
    print(t)          # a small table: DRAM % of peak, occupancy, top stall reasons, L2 hits, bank conflicts

`profile` takes what `bench` takes: a bound launch, or a function that launches (`lambda: run_ring(k, x, ...)`).
It runs it once, records what it launched (kernel, configuration, the arguments' bytes after that run) and
makes those launches again in a child process (feedbeast.isolated's runner), where Nsight Compute reads them.
Python source with `kernel=` is the way for launches that are not feedbeast kernels (Numba, cuBLAS).

Why the command-line tool in a subprocess, and not the `ncu_report` Python module: Nsight Compute measures
a process it starts (it injects itself before the CUDA context exists, and replays each profiled kernel
several times, saving and restoring memory between passes). The notebook's process is already running,
with its context made, so the launch is repeated in a child process. The CLI's `--csv --page raw` output is
plain text we parse here (tested on a recorded file, tests/data/ncu_raw.csv), whereas `ncu_report` ships inside the Nsight Compute
installation, not on PyPI, and its version must match the tool's.

Nsight Compute locks the GPU's clocks to their base value while it measures (its default
`--clock-control base`), and flushes the caches before each replay pass: durations under `ncu` are slower
than the same kernel timed by `fb.bench`, and steadier, which makes them a good second opinion when two
builds differ by a few per cent.

With no GPU, no `ncu`, or counters not permitted to this user (ERR_NVGPUCTRPERM), `profile` returns a
Skipped that says which; when a table was recorded on a GPU before (the course's results log, installed as
feedbeast.hooks.recorded), the Skipped carries it (`.recorded`) and prints it, so a reader without a GPU still
sees what the counters said. Each table read is handed to feedbeast.hooks.on_profile (the course records it).
"""
from __future__ import annotations

import csv
import dataclasses
import io
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

from . import hooks
from .errors import FeedbeastError
from .skip import Skipped, needs_gpu

# Metric names of Nsight Compute 2023-2025 (ncu --query-metrics; "Kernel Profiling Guide", Metrics
# Reference). What each row of the table means is in LABELS.
METRICS = {
    "dram": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_bytes": "dram__bytes.sum",
    "occupancy": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "l2_hit": "lts__t_sector_hit_rate.pct",
    "smem_ld_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "smem_st_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "smem_ld_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "sm_busy": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "fma_pipe": "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "tensor_pipe": "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
    "tensor_pipe_hmma": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "duration": "gpu__time_duration.sum",
    "registers": "launch__registers_per_thread",
}
STALLS = r"regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
_STALL_PREFIX, _STALL_SUFFIX = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"

LABELS = {
    "dram": "DRAM throughput, % of peak",
    "dram_bytes": "DRAM bytes",
    "occupancy": "achieved occupancy, % of max warps",
    "l2_hit": "L2 hit rate, %",
    "smem_ld_conflicts": "shared-load bank conflicts",
    "smem_st_conflicts": "shared-store bank conflicts",
    "smem_ld_wavefronts": "shared-load wavefronts",
    "sm_busy": "SM throughput, % of peak",
    "fma_pipe": "FMA pipe busy, % of active cycles",
    "tensor_pipe": "tensor pipe (wgmma) busy, % of active cycles",
    "tensor_pipe_hmma": "tensor pipe (mma) busy, % of active cycles",
    "duration": "duration under ncu",
    "registers": "registers per thread",
}


@dataclasses.dataclass
class Profile:
    """One kernel's counters: `values` by our short names, `stalls` (reason -> warps stalled per issued
    instruction, the largest first), the raw metric dictionary, and where it was measured."""
    name: str
    kernel: str
    values: dict
    stalls: dict
    raw: dict
    gpu: str = ""
    units: dict = dataclasses.field(default_factory=dict)
    csv: str = dataclasses.field(default="", repr=False)   # ncu's own output, as it came

    def top_stalls(self, k: int = 4) -> list[tuple[str, float]]:
        return sorted(self.stalls.items(), key=lambda kv: -kv[1])[:k]

    def __getitem__(self, key):
        return self.values[key]

    def table(self, k_stalls: int = 4) -> str:
        rows = [(LABELS.get(key, key), _fmt(v, self.units.get(key, ""))) for key, v in self.values.items()]
        total = sum(self.stalls.values())
        for reason, v in self.top_stalls(k_stalls):
            share = f" ({100 * v / total:.0f} % of stalls)" if total else ""
            rows.append((f"stall: {reason}", f"{v:.2f} warps per issue{share}"))
        w = max(len(r[0]) for r in rows) if rows else 0
        kernel = self.kernel.split("(")[0].split("[")[0]   # Numba's kernels carry their mangled signature
        head = f"{self.name} ({kernel}){' on ' + self.gpu if self.gpu else ''}"
        return "\n".join([head] + [f"  {a:<{w}}  {b}" for a, b in rows])

    __str__ = table

    def __repr__(self):
        return self.table()

    def as_record(self) -> dict:
        return {"name": self.name, "kernel": self.kernel, "values": self.values, "stalls": self.stalls,
                "units": self.units, "gpu": self.gpu}


def _fmt(v, unit):
    if v is None:
        return "-"
    if isinstance(v, float) and abs(v) >= 1e6:
        return f"{v:.3e} {unit}".strip()
    if isinstance(v, float):
        return f"{v:.1f} {unit}".strip()
    return f"{v} {unit}".strip()


def _number(text: str):
    t = text.strip().replace(",", "")
    if t in ("", "n/a", "N/A"):
        return None
    try:
        return int(t)
    except ValueError:
        try:
            return float(t)
        except ValueError:
            return None


def parse_raw_csv(text: str) -> list[dict]:
    """`ncu --csv --page raw` output -> one dict per profiled kernel: {"Kernel Name": ..., "metrics":
    {metric: value}, "units": {metric: unit}}. Lines ncu or the program print before the table ("==PROF==",
    the script's own output) are skipped: the table starts at the header line that begins with "ID"."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, units = rows[0], rows[1]
    out = []
    for row in rows[2:]:
        if len(row) != len(header):
            continue
        rec = {"metrics": {}, "units": {}}
        for col, unit, val in zip(header, units, row):
            if "__" in col or col.startswith("launch__"):
                rec["metrics"][col] = _number(val)
                rec["units"][col] = unit
            else:
                rec[col] = val
        out.append(rec)
    return out


def from_raw(rec: dict, name: str = "", gpu_name: str = "") -> Profile:
    """A Profile from one parsed ncu row."""
    m, u = rec["metrics"], rec["units"]
    values, units = {}, {}
    for key, metric in METRICS.items():
        if metric in m and m[metric] is not None:
            values[key] = m[metric]
            units[key] = {"%": "%", "byte": "B", "Kbyte": "KB", "Mbyte": "MB", "Gbyte": "GB", "nsecond": "ns",
                          "usecond": "us", "msecond": "ms", "register/thread": ""}.get(u.get(metric, ""),
                                                                                       u.get(metric, ""))
    stalls = {k[len(_STALL_PREFIX):-len(_STALL_SUFFIX)]: v for k, v in m.items()
              if k.startswith(_STALL_PREFIX) and k.endswith(_STALL_SUFFIX) and v is not None
              and not k.endswith(("_not_issued" + _STALL_SUFFIX, "_stalled_selected" + _STALL_SUFFIX))}
    # "selected" is not a stall: it is the warp that issued (always 1 per issue); it is left out.
    return Profile(name or rec.get("Kernel Name", ""), rec.get("Kernel Name", ""), values, stalls, m,
                   gpu_name or rec.get("Device Name", ""), units)


def ncu_path() -> str | None:
    """The ncu executable: $NCU, on PATH, or in the usual CUDA toolkit folder."""
    for p in (os.environ.get("NCU"), shutil.which("ncu"), "/usr/local/cuda/bin/ncu"):
        if p and Path(p).exists():
            return p
    return None


def _recorded(name: str):
    """The latest table a GPU run recorded under `name`, when a results log is installed (feedbeast.hooks)."""
    rec = hooks.recorded_line("profile", name)
    if rec is None:
        return None
    return Profile(rec["name"], rec["kernel"], rec["values"], rec["stalls"], {}, rec.get("gpu", ""),
                   rec.get("units", {}))


def _skip(reason: str, name: str):
    s = Skipped(reason, f"profile {name}")
    s.recorded = _recorded(name)
    if s.recorded is not None:
        s.reason += f"; recorded on {s.recorded.gpu}:\n{s.recorded.table()}"
    return s


def profile(launch, *, kernel: str | None = None, name: str | None = None, metrics=None, env: dict | None = None,
            launch_skip: int = 0, launch_count: int = 1, timeout: int = 600, record: bool = True):
    """Counters of a launch, read by Nsight Compute in a child process: a Profile for one launch, a list for several.

    launch: what the chapter times: a Launch (Kernel.bind) or a function that launches (what fb.bench is given).
        It is run once here, and what it launched (kernels, configuration, the arguments' data as they are after
        that run) is made again in the child, where ncu reads the launches of `kernel` (a regular expression; by
        default the kernels it launched). Or Python source (a str) that the child runs with `fb` and `np`
        imported and `env`'s values bound as globals, for launches that are not feedbeast kernels (Numba, cuBLAS).
    metrics: extra ncu metric names beyond METRICS and the stall reasons. launch_skip: launches of that kernel to
    let run unprofiled first (warm-up); launch_count: how many to read. record: hand each table to
    feedbeast.hooks.on_profile. Returns a Skipped (with the recorded table, if any) when this machine has no GPU,
    no ncu, or no permission to read counters.
    """
    if kernel is None and isinstance(launch, str):
        raise FeedbeastError("profile(source, kernel=...): name the kernel (a regular expression) the source launches")
    what = name or kernel or getattr(getattr(launch, "kernel", None), "name", "launch")
    if hooks.mode.unprofiled:   # make sanitize: the child process would run its launches unchecked
        return Skipped(hooks.mode.unprofiled, f"profile {what}")
    skip = needs_gpu(f"profile {what}")
    if skip is None and ncu_path() is None:
        skip = Skipped("needs Nsight Compute (ncu), none found on PATH, in $NCU or /usr/local/cuda/bin", what)
    if skip is not None:
        return _skip(skip.reason, what)
    if isinstance(launch, str):
        values, code = dict(env or {}), launch
    else:
        spec = recorded_launches(launch)
        if isinstance(spec, Skipped):
            return _skip(spec.reason, what)
        spec["rounds"] = launch_skip + launch_count
        kernel = kernel or "|".join(sorted({f"^{re.escape(x[1])}$" for x in spec["launches"]}))
        values, code = {"SPEC": spec}, "fb.profiling.replay(SPEC)\n"
    return _measure(values, code, kernel, name or what, metrics, launch_skip, launch_count, timeout, record)


def _measure(values, code, kernel, name, metrics, launch_skip, launch_count, timeout, record):
    """Run the child under ncu; the Profiles of the launches of `kernel` it read."""
    from .isolated import child_env, runner_command
    ncu = ncu_path()
    wanted = list(METRICS.values()) + [STALLS] + list(metrics or [])
    env = child_env()
    # no hazard mode in the child: the hazard build of a kernel has its name, it must not be the one read
    with runner_command(values, code + "\nfb.sync()\n", mode=dataclasses.replace(hooks.mode, hazards="")) as child:
        for _ in range(4):   # a metric this ncu or GPU does not know is dropped by name, and we retry
            cmd = [ncu, "--csv", "--page", "raw", "--kernel-name", f"regex:{kernel}", "--launch-skip",
                   str(launch_skip), "--launch-count", str(launch_count), "--metrics", ",".join(wanted), *child]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
            text = p.stdout + "\n" + p.stderr
            unknown = [w for w in wanted if f"Failed to find metric {w}" in text or f"metric {w} not" in text]
            if not unknown:
                break
            wanted = [w for w in wanted if w not in unknown]
    if "ERR_NVGPUCTRPERM" in text:
        return _skip("this user may not read the GPU's performance counters (ERR_NVGPUCTRPERM; see "
                     "Nsight Compute's documentation on the NVreg_RestrictProfilingToAdminUsers setting)", name)
    rows = parse_raw_csv(p.stdout)
    if not rows:
        raise FeedbeastError(f"ncu profiled no kernel matching {kernel!r} (exit {p.returncode}); its output "
                             f"ended with:\n{text[-3000:]}")
    from .device import gpu
    g = gpu()
    profs = [from_raw(r, name if len(rows) == 1 else f"{name}#{i}", g.name) for i, r in enumerate(rows)]
    for pr in profs:
        pr.csv = p.stdout
        if record:
            hooks.emit(hooks.on_profile, pr)
    return profs[0] if len(profs) == 1 else profs


# ---- a launch made again in another process ----------------------------------------------------------------

def recorded_launches(fn) -> dict:
    """What `fn` (a Launch, or a function that launches) launches, run once here, as data another process can
    launch again (replay): each module's source and build, each device buffer's bytes after the run, each launch's
    kernel, configuration and arguments (a tensor map as its description over its buffer). A Skipped when fn
    skipped; FeedbeastError for an argument that cannot be carried over."""
    from .launch import watching
    from .memory import sync
    with watching() as seen:
        out = fn(0) if _takes_index(fn) else fn()
    if isinstance(out, Skipped):
        return out
    sync()
    seen = [s for s in seen if "FB_HAZARDS" not in (s.kernel.module.defines or {})]   # not the hazard builds
    if not seen:
        raise FeedbeastError("profile: the function launched no feedbeast kernel (for a Numba or a library kernel, "
                             "give Python source and kernel= instead)")
    spec = {"modules": [], "buffers": [], "launches": []}
    mods, bufs = {}, {}
    for s in seen:
        m = s.kernel.module
        if id(m) not in mods:
            mods[id(m)] = len(spec["modules"])
            spec["modules"].append({"source": m.source, "arch": m.arch, "defines": dict(m.defines or {}),
                                    "options": tuple(m.options), "name": m.name, "debug": m.debug})
        args = [_arg_spec(a, spec, bufs, f"{s.kernel.name} argument {i}") for i, a in enumerate(s.args)]
        spec["launches"].append((mods[id(m)], s.kernel.name, tuple(s.grid), tuple(s.block), s.shared,
                                 tuple(s.cluster) if s.cluster else None, bool(s.pdl), args))
    return spec


def _takes_index(fn) -> bool:
    import inspect
    try:
        return len(inspect.signature(fn).parameters) >= 1
    except (TypeError, ValueError):
        return False


def _arg_spec(a, spec, bufs, what):
    from .memory import DeviceArray, interface
    from .tensormap import TensorMap
    if isinstance(a, TensorMap):
        if a.array is None:
            raise FeedbeastError(f"profile: {what} is a tensor map over an unknown array: make it with fb.tensor_map")
        desc = {k: getattr(a, k) for k in ("shape", "box", "strides_bytes", "swizzle", "oob_fill", "l2_promotion",
                                           "element_strides")}
        return ("map", _buffer(a.array, spec, bufs, what), desc)
    if isinstance(a, DeviceArray) or interface(a) is not None:
        return ("buffer", _buffer(a, spec, bufs, what))
    if isinstance(a, (bool, int, float, bytes, bytearray, np.generic)):
        return ("value", a)
    raise FeedbeastError(f"profile: {what} is a {type(a).__name__}, which cannot be carried to another process")


def _buffer(a, spec, bufs, what) -> int:
    """memory.host_buffer into the spec's buffers; a strided view is refused (its bytes are not one block)."""
    from .memory import DeviceArray, host_buffer, interface
    if not isinstance(a, DeviceArray) and interface(a)["strides"] is not None:
        raise FeedbeastError(f"profile: {what} is a strided view; pass a contiguous array")
    return host_buffer(a, spec["buffers"], bufs)


def replay(spec: dict) -> None:
    """Launch again, in this process, what recorded_launches() recorded: the same builds (from the compile cache),
    buffers holding the same bytes, the tensor maps encoded over them, all the launches `spec["rounds"]` times."""
    from .compile import compile as build
    from .memory import to_device
    from .tensormap import tensor_map
    mods = [build(m["source"], m["arch"], defines=m["defines"], options=m["options"], name=m["name"],
                  debug=m["debug"]) for m in spec["modules"]]
    bufs = [to_device(b) for b in spec["buffers"]]

    def arg(a):
        if a[0] == "buffer":
            return bufs[a[1]]
        if a[0] == "map":
            d = dict(a[2])
            return tensor_map(bufs[a[1]], d.pop("box"), **d)
        return a[1]
    launches = [mods[m].kernel(k).bind(grid, block, *[arg(a) for a in args], shared=shared, cluster=cluster, pdl=pdl)
                for m, k, grid, block, shared, cluster, pdl, args in spec["launches"]]
    for _ in range(spec.get("rounds", 1)):
        for go in launches:
            go()


def as_profile(p) -> Profile | None:
    """The Profile behind `p`: `p` itself, the table a Skipped carries from a GPU run, or None."""
    if isinstance(p, Profile):
        return p
    return getattr(p, "recorded", None)


_SCALE = {"duration": (1e-3, "duration under ncu, us"), "dram_bytes": (1e-6, "DRAM bytes, MB")}


def compare(profiles: dict, keys=("duration", "dram", "occupancy"), stalls: int = 3, extra: dict | None = None) -> str:
    """A side-by-side table of several launches' counters: `profiles` maps a column label to a Profile, or
    to the Skipped that `profile` returned (its recorded table is used when it has one, else the column
    shows '-'). Rows: the values named in `keys`, then `extra` rows ({row label: {column label: number}}),
    then every stall reason that is among the `stalls` largest of any column, in warps stalled per issued
    instruction. The last line says where the figures come from (this GPU under ncu, or a recorded run)."""
    cols = {label: as_profile(p) for label, p in profiles.items()}
    rows = []
    for key in keys:
        scale, label = _SCALE.get(key, (1, LABELS.get(key, key)))
        rows.append((label, [None if pr is None or pr.values.get(key) is None else pr.values[key] * scale
                             for pr in cols.values()], "{:.1f}"))
    for label, by_col in (extra or {}).items():
        rows.append((label, [by_col.get(c) for c in cols], "{:.1f}"))
    reasons = []
    for pr in cols.values():
        for r, _ in (pr.top_stalls(stalls) if pr else []):
            if r not in reasons:
                reasons.append(r)
    for r in reasons:
        rows.append((f"stall: {r} (warps per issue)", [pr.stalls.get(r, 0.0) if pr else None for pr in cols.values()],
                     "{:.2f}"))
    w0 = max([len(r[0]) for r in rows] + [10])
    wc = [max(10, len(c)) for c in cols]
    lines = [" " * w0 + "".join(f"  {c:>{w}}" for c, w in zip(cols, wc))]
    for label, vals, fmt in rows:
        lines.append(f"{label:<{w0}}" + "".join(f"  {'-' if v is None else fmt.format(v):>{w}}" for v, w in zip(vals, wc)))
    live = [p for p in profiles.values() if isinstance(p, Profile)]
    gpus = sorted({pr.gpu for pr in cols.values() if pr is not None and pr.gpu})
    if live and len(live) == len(profiles):
        lines.append(f"({', '.join(gpus)}: one launch each under Nsight Compute, clocks locked at base)")
    elif any(pr is not None for pr in cols.values()):
        why = next((str(p).splitlines()[0].split(";")[0] for p in profiles.values() if not isinstance(p, Profile)), "")
        lines.append(f"({why}; the figures above were recorded on {', '.join(gpus) or 'a GPU'} under Nsight Compute)")
    else:
        lines.append(f"({next(iter(map(str, profiles.values())), 'no profiles').splitlines()[0]}; nothing recorded)")
    return "\n".join(lines)
