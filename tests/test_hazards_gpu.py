"""On an sm_90 GPU: the hazard checker on races planted in the course's kernels (each found, by its rule) and on
the same kernels as shipped (none found), at small ragged sizes.

    python tests/test_hazards_gpu.py                  # the table: planted race x (hazard checker, racecheck)
    python tests/test_hazards_gpu.py --run NAME       # one launch of the normal build (what racecheck runs)

A planted race is an edit of a chapter kernel's text made here, in the test, never in the course: the chapter
keeps the correct kernel. Each is a race of the async proxy that compute-sanitizer's racecheck does not model.
"""
from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
import feedbeast as fb  # noqa: E402
from feedbeast import hazards as hz  # noqa: E402
from feedbeast.course.notebook import load  # noqa: E402

FENCE_04 = "    fb::fence_proxy_async();                               // my reads, before the next bulk copy\n"
ARRIVE_04 = ("    fb::mbar::arrive(&ring.empty[s]);                            // this thread is done with stage s\n"
             "#endif\n")
RELEASE_05 = ("    fb::wgmma::wait_group<1>();                  // the wgmma of step k-1 are done: release its stage\n"
              "    if (k > 0) {\n      __syncwarp();\n"
              "      if (lane == 0) fb::mbar::arrive(&empty[(k - 1) % STAGES]);\n"
              "    }\n")
WAIT_READ_07 = "if (leader) fb::tma::wait_group_read<0>();"           # rung 2's TmaStore part
RELEASE_07 = "      fb::wgmma::wait_group<0>();\n      if (threadIdx.x % 128 == 0) Ring::release(empty, s);\n"
EXIT_WAIT_07 = "    if (threadIdx.x % 128 == 0) fb::tma::wait_group<0>();"   # TmaStore::drain
EPI_FENCE_07 = "    fb::epilogue::stage_tile_bf16(d, my_c);\n    fb::fence_proxy_async();\n"
EMPTY_04 = "fb::mbar::init(&ring.empty[s], ARRIVE_PER_WARP ? CONSUMERS : 32 * CONSUMERS);"
RELEASE_07_BUG = "      if (threadIdx.x % 128 == 0) Ring::release(empty, s);\n      fb::wgmma::wait_group<0>();\n"


@dataclasses.dataclass
class Case:
    notebook: str
    cell: str
    edits: tuple            # (old, new) text replacements of the kernel source
    rule: str | None        # the rule the checker must name; None: the kernel as shipped, nothing to find
    what: str
    defines: dict = dataclasses.field(default_factory=dict)   # a variant the chapter ships (-D)


def _ch04(mod, defines):
    rows, cols = 13, 8200                                  # 3 chunks a row, the last one short
    x = fb.examples.rowsum_inputs(rows, cols, seed=3)
    y = fb.empty(rows, np.float32)
    args = (fb.to_device(x), y, rows, cols, 0)
    return dict(kernel=mod.rowsum_ring, grid=2, block=160, args=args, shared=2 * 4096 * 4), \
        (y, fb.examples.rowsum_reference(x))


def _ch05_gemm(mod, defines):
    m, n, k = 200, 136, 320                                # 5 K steps through a 4-stage ring: stages refill
    rng = np.random.default_rng(5)
    a = rng.standard_normal((m, k)).astype(fb.bfloat16)
    b = rng.standard_normal((k, n)).astype(fb.bfloat16)
    a_d, bt_d = fb.to_device(a), fb.to_device(np.ascontiguousarray(b.T))
    maps = (fb.tensor_map(a_d, box=(128, 64), swizzle=128), fb.tensor_map(bt_d, box=(128, 64), swizzle=128))
    c = fb.empty((m, n), np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    return dict(kernel=mod.gemm_tma_wgmma, grid=(-(-n // 128), -(-m // 128)), block=128, args=(*maps, c, m, n, k),
                shared=4 * 2 * 128 * 64 * 2 + 1024, keep=(a_d, bt_d)), (c, ref)


CH07 = "chapters/07-capstone-gemm.ipynb"


def _ch07(mod, defines):
    cluster, share = {"Cluster2": (2, 1), "Multicast": (2, 2)}.get(defines.get("LOADS"), (1, 1))   # chapter's cluster_of
    m, n, k = 300, 520, 200                                # 3 x 3 tiles of 128 x 256, K ragged
    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, k)).astype(fb.bfloat16)
    b = rng.standard_normal((k, n)).astype(fb.bfloat16)
    a_d, bt_d = fb.to_device(a), fb.to_device(np.ascontiguousarray(b.T))
    c = fb.empty((m, n), fb.bfloat16)
    ta = fb.tensor_map(a_d, (128, 64), swizzle=128)
    tb = fb.tensor_map(bt_d, (256 // share, 64), swizzle=128)
    tc = fb.tensor_map(c, (64, 64), swizzle=128)
    order = fb.to_device(np.zeros((1, 2), np.int32))
    smem = 3 * (128 + 256) * 64 * 2 + 128 * 256 * 2 + 1024
    ref = a.astype(np.float64) @ b.astype(np.float64)
    return dict(kernel=mod.gemm_persistent, grid=4, block=384, args=(ta, tb, tc, c, order, m, n, k), shared=smem,
                cluster=(cluster, 1, 1) if cluster > 1 else None, keep=(a_d, bt_d)), (c, ref)


def _ch03_ring(mod, defines):
    rows, cols = 7, 3001                                   # ragged rows: partial chunks, 4-byte copies
    x = fb.examples.rowsum_inputs(rows, cols, seed=31)
    y = fb.empty(rows, np.float32)
    stages = int(defines.get("STAGES", 4))
    return dict(kernel=mod.ring_rowsum, grid=3, block=256, args=(fb.to_device(x), y, rows, cols),
                shared=stages * 512 * 16), (y, fb.examples.rowsum_reference(x))


def _ch03_gemm(mod, defines):
    m, n, k = 200, 136, 88                                 # 11 K slices of 8: the ring refills every stage
    a, b = fb.examples.matmul_inputs(m, n, k, dtype=fb.bfloat16, seed=m)
    c = fb.empty((m, n), np.float32)
    stages = int(defines.get("STAGES", 3))
    return dict(kernel=mod.gemm_bf16, grid=((n + 255) // 256, (m + 127) // 128), block=256,
                args=(fb.to_device(a), fb.to_device(b), c, m, n, k), shared=stages * (128 * 72 + 64 * 264) * 2), \
        (c, fb.examples.matmul_reference(a, b))


def _lab03(mod, defines):
    rows, cols = 5, 3000                                   # three tiles of 1024 floats, the last one short
    x = np.random.default_rng(3).standard_normal((rows, cols)).astype(np.float32)
    lse = fb.empty(rows, np.float32)
    x64 = x.astype(np.float64)
    ref = np.log(np.exp(x64 - x64.max(1, keepdims=True)).sum(1)) + x64.max(1)
    stages = int(defines.get("STAGES", 3))
    return dict(kernel=mod.ring_logsumexp, grid=2, block=256, args=(fb.to_device(x), lse, rows, cols),
                shared=stages * 1024 * 4), (lse, ref)


LAUNCH = {("chapters/03-cp-async.ipynb", "ring"): (_ch03_ring, {}),
          ("chapters/03-cp-async.ipynb", "gemm"): (_ch03_gemm, {}),
          ("solutions/03-cp-async-rowsum.ipynb", "lab"): (_lab03, {}),
          ("chapters/04-mbarrier.ipynb", "rowsum_mod"): (_ch04, {"STAGES": 2}),
          ("chapters/05-tma.ipynb", "gemm"): (_ch05_gemm, {"STAGES": 4}),
          (CH07, "capstone"): (_ch07, {"EPILOGUE": "TmaStore", "STAGES": 3})}   # rung 2's epilogue, as the chapter times

WAIT_03 = "    fb::cp_async_wait<STAGES - 1>();                               // my copies of tile t landed\n"
GEMM_SYNC_03 = "        __syncthreads();                                // everyone's; and slice kt - 1 is no longer read\n"
LAB_WAIT_03 = "      fb::cp_async_wait<STAGES - 2>();                      // my copy of tile j has landed\n"

CASES = {
    "ch03 ring as shipped": Case("chapters/03-cp-async.ipynb", "ring", (), None, "clean"),
    "ch03 ring: no cp.async.wait_group": Case(
        "chapters/03-cp-async.ipynb", "ring", ((WAIT_03, ""),), "unordered-access",
        "each thread sums its chunks of tile t before its copies of them landed"),
    "ch03 ring: wait_group<STAGES> (one group too many in flight)": Case(
        "chapters/03-cp-async.ipynb", "ring", ((WAIT_03, "    fb::cp_async_wait<STAGES>();\n"),), "unordered-access",
        "tile t's group may still be in flight when it is summed"),
    "ch03 GEMM as shipped": Case("chapters/03-cp-async.ipynb", "gemm", (), None, "clean"),
    "ch03 GEMM: no barrier after the wait": Case(
        "chapters/03-cp-async.ipynb", "gemm", ((GEMM_SYNC_03, ""),), "unordered-access",
        "ldmatrix reads other threads' cp.async chunks that only their own wait_group completed"),
    "lab 03 solution as shipped": Case("solutions/03-cp-async-rowsum.ipynb", "lab", (), None, "clean"),
    "lab 03: wait_group<STAGES - 1>": Case(
        "solutions/03-cp-async-rowsum.ipynb", "lab", ((LAB_WAIT_03, "      fb::cp_async_wait<STAGES - 1>();\n"),),
        "unordered-access", "a thread reads its own chunk of tile j while the group that copies it is pending"),
    "ch04 ring as shipped": Case("chapters/04-mbarrier.ipynb", "rowsum_mod", (), None, "clean"),
    "ch04: fence.proxy.async after the release arrive": Case(
        "chapters/04-mbarrier.ipynb", "rowsum_mod", ((FENCE_04, ""), (ARRIVE_04, ARRIVE_04 + FENCE_04)),
        "missing-proxy-fence", "the consumers' fence moved after their arrive on empty[s]"),
    "ch04: no fence.proxy.async": Case(
        "chapters/04-mbarrier.ipynb", "rowsum_mod", ((FENCE_04, ""),), "missing-proxy-fence",
        "the consumers' fence deleted"),
    "ch04: only lane 0 of each warp fences": Case(
        "chapters/04-mbarrier.ipynb", "rowsum_mod",
        ((FENCE_04, "    if (threadIdx.x % 32 == 0) fb::fence_proxy_async();\n"),), "missing-proxy-fence",
        "fence.proxy.async orders only the executing thread's reads: the other lanes' reads are unfenced"),
    "ch04: empty[s] counts one warp where four arrive": Case(
        "chapters/04-mbarrier.ipynb", "rowsum_mod", ((EMPTY_04, "fb::mbar::init(&ring.empty[s], 32);"),),
        "arrival-count", "each phase of empty[s] completes after the first 32 arrivals"),
    "ch05 GEMM as shipped": Case("chapters/05-tma.ipynb", "gemm", (), None, "clean"),
    "ch05 GEMM: release before wgmma.wait_group (not a race here)": Case(
        "chapters/05-tma.ipynb", "gemm",
        ((RELEASE_05, RELEASE_05.split("\n", 1)[1] + RELEASE_05.split("\n", 1)[0] + "\n"),),
        None, "the refilling thread is in the consumer warpgroup: its own wait_group retires the stage first"),
    "ch05 GEMM: wait_group<2> before the release": Case(
        "chapters/05-tma.ipynb", "gemm", (("fb::wgmma::wait_group<1>();", "fb::wgmma::wait_group<2>();"),),
        "async-read-in-flight", "the release waits for all but two groups: step k-1's may still read"),
    "ch07 GEMM as shipped": Case("chapters/07-capstone-gemm.ipynb", "capstone", (), None, "clean"),
    "ch07 GEMM, 2-CTA clusters, multicast, relaxed arrives": Case(
        "chapters/07-capstone-gemm.ipynb", "capstone", (), None, "clean", dict(LOADS="Multicast")),
    "ch07 GEMM, 2-CTA clusters, multicast, release arrives, one batch in flight": Case(
        "chapters/07-capstone-gemm.ipynb", "capstone", (), None, "clean",
        dict(LOADS="Multicast", RELAXED_ARRIVE=0, MMA_INFLIGHT=1)),
    "ch07: release before wgmma.wait_group": Case(
        "chapters/07-capstone-gemm.ipynb", "capstone", ((RELEASE_07, RELEASE_07_BUG),), "async-read-in-flight",
        "a consumer warpgroup arrives on empty[s] before wait_group<0> retires the wgmma reading stage s"),
    "ch07: the block exits before its last TMA stores read the staging tile": Case(
        "chapters/07-capstone-gemm.ipynb", "capstone", ((EXIT_WAIT_07, ""),), "async-read-at-exit",
        "the final wait_group<0> removed: the block's shared memory may be released under its stores"),
    "ch07: only the store's issuer fences the staging tile": Case(
        "chapters/07-capstone-gemm.ipynb", "capstone",
        ((EPI_FENCE_07, "    fb::epilogue::stage_tile_bf16(d, my_c);\n"
                        "    if (threadIdx.x % 128 == 0) fb::fence_proxy_async();\n"),),
        "missing-proxy-fence", "the other threads' st.shared reach the TMA store unfenced"),
    "ch07: staging rewritten before the TMA store read it": Case(
        "chapters/07-capstone-gemm.ipynb", "capstone", ((WAIT_READ_07, "if (false) fb::tma::wait_group_read<0>();"),),
        "async-read-in-flight", "the epilogue's wait_group_read<0> removed"),
}


def source(case: Case):
    nb = load(ROOT / case.notebook)
    c = nb.cuda(case.cell)
    src = c.source
    if case.notebook == CH07:       # the chapter's build(): the rung cells of the parts a variant names, then rung 1
        src = nb.definitions("source_of")["source_of"]({**LAUNCH[CH07, case.cell][1], **case.defines})
    for old, new in case.edits:
        assert src.count(old) == 1, f"{case.notebook}:{case.cell}: the text to edit is not there once: {old!r}"
        src = src.replace(old, new)
    return src, c.defines


def build(case: Case, hazards=False):
    src, defines = source(case)
    launcher, extra = LAUNCH[(case.notebook, case.cell)]
    defs = {**defines, **{k: str(v) for k, v in {**extra, **case.defines}.items()}}
    return fb.compile(src, "sm_90a", defines=defs, name=f"{case.cell}.cu", hazards=hazards), \
        (lambda mod: launcher(mod, defs))


def hazard_check(name):
    case = CASES[name]
    mod, launcher = build(case)
    launch, _ = launcher(mod)
    t0 = time.time()
    report = hz.run(launch["kernel"], launch["grid"], launch["block"], *launch["args"], shared=launch["shared"],
                    cluster=launch.get("cluster"))
    return report, time.time() - t0


def run_normal(name):
    """One launch of the normal build and the check of its output (what racecheck watches)."""
    mod, launcher = build(CASES[name])
    launch, (out, ref) = launcher(mod)
    launch["kernel"].launch(launch["grid"], launch["block"], *launch["args"], shared=launch["shared"],
                            cluster=launch.get("cluster"))
    fb.sync()
    print(fb.check(out, ref, name=name, raise_on_fail=False))


# ---- pytest (CPU): chapter 07's cases are built the way the chapter builds its rungs ----------------------

@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.notebook == CH07])
def test_the_chapter_07_cases_edit_their_rung_and_compile(name):
    """Each edit lands once in the translation unit the chapter's build() makes (rung cells, then rung 1), and the
    result compiles with the SASS a persistent TMA + wgmma kernel has (no GPU needed)."""
    mod, _ = build(CASES[name])
    mod.expect_sass("UTMALDG", "HGMMA.64x256x16.F32.BF16", "UTMASTG", kernel="gemm_persistent")


# ---- pytest (GPU only) ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.rule])
def test_each_planted_race_is_found_by_its_rule(name, gpu90):
    report, _ = hazard_check(name)
    assert CASES[name].rule in report.by_rule(), str(report)


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if not c.rule])
def test_the_kernels_as_shipped_are_clean(name, gpu90):
    report, _ = hazard_check(name)
    assert report.ok and not report.unchecked and report.events > 100, str(report)


def test_the_last_blocks_of_a_grid_are_traced(gpu90):
    """Eight blocks of chapter 04's ring: the first two and the last two (the ragged end) record."""
    mod, launcher = build(CASES["ch04 ring as shipped"])
    launch, _ = launcher(mod)
    x = fb.examples.rowsum_inputs(29, 8200, seed=4)
    y = fb.empty(29, np.float32)
    report = hz.run(launch["kernel"], 8, launch["block"], fb.to_device(x), y, 29, 8200, 0, shared=launch["shared"])
    assert report.ok and report.blocks_traced == 4, str(report)


# ---- the table --------------------------------------------------------------------------------------------

def racecheck(name, timeout=180):
    from feedbeast.course.sanitize import count_reports, find_sanitizer
    san = find_sanitizer()
    if san is None:
        return "skipped: no compute-sanitizer"
    cmd = [san, "--tool", "racecheck", "--racecheck-report", "all", "--target-processes", "application-only",
           sys.executable, __file__, "--run", name]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out ({timeout} s)"
    log = r.stdout + r.stderr
    n = count_reports(log, "racecheck")
    check = next((ln.strip() for ln in log.splitlines() if name in ln and ("passed" in ln or "FAILED" in ln)), "")
    return f"{n if n is not None else '?'} hazards" + (f"; output {check.split(':', 1)[-1].strip()[:60]}" if check
                                                       else f"; exit {r.returncode}")


def table():
    from concurrent.futures import ThreadPoolExecutor
    print(f"GPU: {fb.describe()}")
    rows = {}
    with ThreadPoolExecutor(4) as pool:
        races = {n: pool.submit(racecheck, n) for n in CASES}
        for name, case in CASES.items():
            try:
                report, secs = hazard_check(name)
                got = ", ".join(f"{r} x{len(v)}" for r, v in report.by_rule().items()) or "0"
                cell = f"{got} ({report.events} events, {secs:.1f} s)"
                print(f"--- {name}\n{report}\n", flush=True)
            except Exception as e:          # a fault of a planted race is a result too
                cell = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
                print(f"--- {name}: {cell}", flush=True)
            rows[name] = [case.rule or "none", cell]
        for name in CASES:
            rows[name].append(races[name].result())
    print("| planted race | expected rule | hazard checker | compute-sanitizer racecheck |")
    print("|---|---|---|---|")
    for name, (rule, mine, race) in rows.items():
        print(f"| {name} | {rule} | {mine} | {race} |")


def hazards_only():
    """Each case's hazard check, one line per case as soon as it is known (the shell runs racecheck alongside)."""
    print(f"GPU: {fb.describe()}", flush=True)
    for name, case in CASES.items():
        try:
            report, secs = hazard_check(name)
            got = ", ".join(f"{r} x{len(v)}" for r, v in report.by_rule().items()) or "0"
            print(f"--- {name}\n{report}", flush=True)
            print(f"ROW|{name}|{case.rule or 'none'}|{got} ({report.events} events, {secs:.1f} s)", flush=True)
        except Exception as e:          # a fault of a planted race is a result too
            print(f"ROW|{name}|{case.rule or 'none'}|{type(e).__name__}: {str(e).splitlines()[0][:80]}", flush=True)


def isolated_rows(names=("ch04 ring as shipped", "ch04: fence.proxy.async after the release arrive")):
    """FEEDBEAST_HAZARDS=isolated: a normal launch whose hazard check runs in a separate process."""
    import os
    os.environ["FEEDBEAST_HAZARDS"] = "isolated"
    try:
        for name in names:
            mod, launcher = build(CASES[name])
            launch, _ = launcher(mod)
            t0 = time.time()
            try:
                r = launch["kernel"].launch(launch["grid"], launch["block"], *launch["args"], shared=launch["shared"],
                                            cluster=launch.get("cluster"))
                fb.sync()
                got = str(r) if r is not None else "0 (no HazardFound)"
            except fb.HazardFound as e:
                got = "HazardFound: " + str(e).split(":", 1)[0]
            rule = CASES[name].rule or "none"
            print(f"ROW|{name} [FEEDBEAST_HAZARDS=isolated]|{rule}|{got} ({time.time() - t0:.1f} s)", flush=True)
    finally:
        os.environ.pop("FEEDBEAST_HAZARDS", None)


def summary(hazard_log, racecheck_dir):
    from feedbeast.course.sanitize import count_reports
    rows = [ln.split("|")[1:] for ln in Path(hazard_log).read_text().splitlines() if ln.startswith("ROW|")]
    print("| planted race | expected rule | hazard checker | compute-sanitizer racecheck |")
    print("|---|---|---|---|")
    for name, rule, mine in rows:
        log = Path(racecheck_dir) / (re.sub(r"\W+", "_", name) + ".log")
        race = "not run"
        if log.exists():
            text = log.read_text()
            n = count_reports(text, "racecheck")
            out = next((ln.split(": ", 1)[-1].strip() for ln in text.splitlines()
                        if ": passed" in ln or ": FAILED" in ln), "")
            race = f"{n if n is not None else '?'} hazards" + (f"; output {out[:50]}" if out else "")
        print(f"| {name} | {rule} | {mine} | {race} |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run"]:
        run_normal(sys.argv[2])
    elif sys.argv[1:2] == ["--hazards"]:
        hazards_only()
        isolated_rows()
    elif sys.argv[1:2] == ["--isolated"]:
        isolated_rows()
    elif sys.argv[1:2] == ["--summary"]:
        summary(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["--names"]:
        print("\n".join(n for n, c in CASES.items() if c.rule))
    else:
        table()


ROUND_TRIP = r"""
#include <fb/mbarrier.cuh>
#include <fb/tma.cuh>
#ifndef FULL_WAIT
#define FULL_WAIT 1
#endif
// Each block writes a 32 x 32 tile of y with a TMA store and reads the same box back with a TMA load.
extern "C" __global__ void round_trip(const __grid_constant__ fb::TensorMap out_map,
                                      const __grid_constant__ fb::TensorMap in_map, float* z) {
  __shared__ alignas(128) float tile[32 * 32];
  __shared__ alignas(128) float back[32 * 32];
  __shared__ alignas(8) cuda::std::uint64_t bar;
  const int col0 = blockIdx.x * 32;
  for (int i = threadIdx.x; i < 32 * 32; i += blockDim.x) tile[i] = float(col0 * 1000 + i);
  fb::fence_proxy_async();
  if (threadIdx.x == 0) {
    fb::mbar::init(&bar, 1);
    fb::mbar::fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    fb::tma::store_2d(out_map, col0, 0, tile);
    fb::tma::commit_group();
#if FULL_WAIT
    fb::tma::wait_group<0>();        // the writes are complete
#else
    fb::tma::wait_group_read<0>();   // only the reads of the tile
#endif
    fb::mbar::arrive_expect_tx(&bar, sizeof(back));
    fb::tma::load_2d(back, in_map, col0, 0, &bar);
  }
  fb::mbar::wait(&bar, 0, "back");
  for (int i = threadIdx.x; i < 32 * 32; i += blockDim.x) z[blockIdx.x * 1024 + i] = back[i];
}
"""


@pytest.mark.parametrize("full_wait", [1, 0])
def test_a_tma_load_of_a_tma_stores_box_needs_the_full_wait_group(full_wait, gpu90):
    mod = fb.compile(ROUND_TRIP, "sm_90a", defines={"FULL_WAIT": full_wait}, name="round_trip.cu")
    y = fb.empty((32, 96), np.float32)           # three boxes across: the last block's box is the ragged end
    maps = fb.tensor_map(y, (32, 32)), fb.tensor_map(y, (32, 32))
    z = fb.empty(3 * 1024, np.float32)
    report = hz.run(mod.round_trip, 3, 128, *maps, z)
    if full_wait:
        assert report.ok and not report.unchecked and report.blocks_traced == 3, str(report)
    else:
        assert "bulk-store-in-flight" in report.by_rule(), str(report)


CP_MBAR_RING = r"""
#include <fb/cp_async.cuh>
#include <fb/mbarrier.cuh>
// Warp 0 copies 2 KB tiles of x into two stages with cp.async; full[s] tracks the copies through
// cp.async.mbarrier.arrive.noinc (each lane one of the count's 32 arrivals). Warps 1-2 wait on full[s], add up the
// tile and release it on empty[s].
extern "C" __global__ void cp_mbar_ring(const float4* x, float* y, int tiles) {
  __shared__ __align__(16) float4 stage[2][128];
  __shared__ fb::mbar::u64 full[2], empty[2];
  if (threadIdx.x == 0) {
    for (int s = 0; s < 2; ++s) { fb::mbar::init(&full[s], 32); fb::mbar::init(&empty[s], 64); }
    fb::mbar::fence_init();
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    for (int t = 0; t < tiles; ++t) {
      const int s = t % 2;
      if (t >= 2) fb::mbar::wait(&empty[s], (t / 2 - 1) % 2, "empty", s);
      for (int i = threadIdx.x; i < 128; i += 32) fb::cp_async_cg16(&stage[s][i], x + 128 * t + i);
#if TRACKED
      asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" :: "r"(fb::smem_addr(&full[s])) : "memory");
#else
      fb::mbar::arrive(&full[s]);                  // the copies are not tracked: the phase completes at once
#endif
    }
    fb::cp_async_wait_all();
  } else {
    float acc = 0.f;
    for (int t = 0; t < tiles; ++t) {
      const int s = t % 2;
      fb::mbar::wait(&full[s], (t / 2) % 2, "full", s);
      for (int i = threadIdx.x - 32; i < 128; i += 64) acc += stage[s][i].x + stage[s][i].y + stage[s][i].z + stage[s][i].w;
      fb::mbar::arrive(&empty[s]);
    }
    y[threadIdx.x - 32] = acc;
  }
}
"""


@pytest.mark.parametrize("tracked", [1, 0])
def test_cp_async_mbarrier_arrive_completes_the_copies_on_the_phase(tracked, gpu90):
    mod = fb.compile(CP_MBAR_RING, "sm_90a", defines={"TRACKED": tracked}, name="cp_mbar_ring.cu")
    tiles = 5
    x = np.random.default_rng(9).standard_normal((tiles * 128, 4)).astype(np.float32)
    y = fb.empty(64, np.float32)
    report = hz.run(mod.cp_mbar_ring, 1, 96, fb.to_device(x), y, tiles)
    if tracked:
        assert report.ok and not report.unchecked and report.events > 100, str(report)
        mod.cp_mbar_ring.launch(1, 96, fb.to_device(x), y, tiles)
        xs = x.reshape(tiles, 128, 4).astype(np.float64)
        ref = np.array([xs[:, [i, i + 64], :].sum() for i in range(64)])
        print(fb.check(y, ref, name="cp_mbar_ring"))
    else:
        assert "unordered-access" in report.by_rule(), str(report)


def test_an_instrumented_build_records_the_reads_it_makes(gpu90):
    """Chapter 04's ring as shipped: its consumers' loads of each stage appear in the trace as ld.shared events."""
    mod, launcher = build(CASES["ch04 ring as shipped"])
    launch, _ = launcher(mod)
    report = hz.run(launch["kernel"], launch["grid"], launch["block"], *launch["args"], shared=launch["shared"])
    assert report.ok, str(report)
    from feedbeast.hazards.instrument import load
    res = load(hz.hazard_module(mod))
    assert res.sites > 0 and not res.skipped
