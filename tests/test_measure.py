"""Measurement toolkit: physical peaks, the above-peak error, kernel identity in results, Nsight Compute
parsing and its skip path. All run on a CPU; the GPU halves (real counters, real timings) run in make bench."""
import importlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

import feedbeast as fb
from feedbeast import ceilings, profiling
from feedbeast.device import Gpu

fbb = importlib.import_module("feedbeast.bench")   # fb.bench is the function

DATA = Path(__file__).parent / "data"

H100 = Gpu(0, "NVIDIA H100 80GB HBM3", (9, 0), 132, 232448, 49152, 233472, 50 << 20, 1980, 2619, 5120, 13000,
           (13, 0), 80 << 30)
A100 = Gpu(0, "NVIDIA A100-SXM4-80GB", (8, 0), 108, 166912, 49152, 167936, 40 << 20, 1410, 1593, 5120, 12080,
           (13, 0), 80 << 30)


def test_a_t4_has_an_fp32_peak_and_a_tensor_peak_but_no_tf32():
    """Chapter 01 draws the FP32 peak on a hosted T4 (64 results per clock per SM, the CUDA guide's table); its
    fp16 tensor peak comes back to the datasheet's 65 TFLOP/s from its own clocks; Turing has no tf32, which the
    peak says rather than a number."""
    t4 = Gpu(0, "Tesla T4", (7, 5), 40, 65536, 49152, 65536, 4 << 20, 1590, 5001, 256, 13000, (13, 0), 15 << 30)
    assert ceilings.physical_peak("fp32", t4).value == pytest.approx(40 * 64 * 2 * 1.59 / 1e3)
    assert ceilings.physical_peak("tensor", t4).value == pytest.approx(65, rel=0.01)
    tf32 = ceilings.physical_peak("tf32", t4)
    assert tf32.value is None and "unknown" in repr(tf32) and "no tf32" in tf32.how
    assert ceilings.physical_peak("fp8", t4).value is None


def test_consumer_and_data_center_gpus_of_ampere_and_ada_have_tensor_peaks_from_their_datasheets():
    """An A10, an L4 and an L40S come back to their datasheets' dense figures from their own clocks; an RTX 4090
    (the same capability as the L40S) is held to the same rate per SM, a bound it cannot pass."""
    def gpu(name, cc, sms, mhz):
        return Gpu(0, name, cc, sms, 101376, 49152, 102400, 6 << 20, mhz, 7001, 384, 13000, (13, 0), 24 << 30)
    a10, l4, l40s, rtx4090 = (gpu("NVIDIA A10", (8, 6), 72, 1695), gpu("NVIDIA L4", (8, 9), 58, 2040),
                              gpu("NVIDIA L40S", (8, 9), 142, 2520), gpu("NVIDIA GeForce RTX 4090", (8, 9), 128, 2520))
    assert ceilings.physical_peak("tensor", a10).value == pytest.approx(125, rel=0.01)
    assert ceilings.physical_peak("tf32", a10).value == pytest.approx(62.5, rel=0.01)
    assert ceilings.physical_peak("fp8", a10).value is None                  # Ampere has no fp8 tensor cores
    assert ceilings.physical_peak("tensor", l4).value == pytest.approx(121, rel=0.01)
    assert ceilings.physical_peak("tensor", l40s).value == pytest.approx(362, rel=0.015)
    assert ceilings.physical_peak("fp8", l40s).value == pytest.approx(733, rel=0.01)
    # the RTX 4090's own fp16 figure with fp16 accumulation (330 TFLOP/s) is this rate; with fp32 accumulation
    # it reaches half: the peak stays a bound
    assert ceilings.physical_peak("tensor", rtx4090).value == pytest.approx(330, rel=0.01)


def test_physical_peaks_from_clocks_and_sm_count():
    smem = ceilings.physical_peak("smem", H100)
    assert smem.value == pytest.approx(132 * 128 * 1.98)                 # 33.45 TB/s, in GB/s
    assert ceilings.physical_peak("dram", H100).value == pytest.approx(2 * 2619e6 * 640 / 1e9)
    assert ceilings.physical_peak("fp32", H100).value == pytest.approx(132 * 128 * 2 * 1.98 / 1e3)
    assert ceilings.physical_peak("tensor", H100).value == pytest.approx(132 * 4096 * 1.98 / 1e3)
    assert ceilings.physical_peak("tf32", H100).value == pytest.approx(132 * 2048 * 1.98 / 1e3)
    assert ceilings.physical_peak("fp8", H100).value == pytest.approx(132 * 8192 * 1.98 / 1e3)
    # the A100 datasheet figures come back from its own clocks: 312 TFLOP/s bf16, 19.5 TFLOP/s fp32, 2.04 TB/s
    assert ceilings.physical_peak("tensor", A100).value == pytest.approx(312, rel=0.01)
    assert ceilings.physical_peak("fp32", A100).value == pytest.approx(19.5, rel=0.01)
    assert ceilings.physical_peak("dram", A100).value == pytest.approx(2039, rel=0.01)
    assert ceilings.physical_peak("fp8", A100).value is None                # no fp8 tensor cores
    unknown = ceilings.physical_peak("tensor", Gpu(*([0, "x", (12, 1)] + list(H100.__dict__.values())[3:])))
    assert unknown.value is None and "12, 1" in unknown.how
    with pytest.raises(ValueError, match="unknown resource"):
        ceilings.physical_peak("hbm", H100)


def test_bound_follows_the_ceiling():
    assert ceilings.bound_of("ceiling/copy") == "dram"
    assert ceilings.bound_of("ceiling/cublas-bf16/n=4096") == "tensor"
    assert ceilings.bound_of("ceiling/cublas-fp32/n=4096") == "fp32"
    assert ceilings.bound_of("ceiling/cublas-tf32/n=4096") == "tf32"
    assert ceilings.bound_of(None) is None and ceilings.bound_of("given") is None


@pytest.fixture
def on_h100(monkeypatch):
    import feedbeast.device
    monkeypatch.setattr(feedbeast.device, "gpu", lambda index=0: H100)


def test_result_above_the_shared_memory_peak_is_an_experiment_error(on_h100):
    # ch05's old swizzle figure: 125,420 GB/s of shared-memory reads, 3.75x what 132 SMs can deliver.
    r = fbb.BenchResult("ch05/column_reads/swizzle=128", [0.5518], nbytes=125420.5e6 * 0.5518)
    with pytest.raises(fb.PhysicalLimitError, match=r"3\.75x the physical smem peak"):
        fbb._against_peak(r, "smem")
    ok = fbb.BenchResult("ch05/column_reads/swizzle=128", [2.0], nbytes=33.3e12 * 2e-3)   # 33.3 TB/s: at the peak
    fbb._against_peak(ok, "smem")
    assert ok.bound == "smem" and 99 < ok.pct_peak < 100
    assert "% of the smem peak" in repr(ok)


def test_bound_comes_from_the_ceiling_and_a_copy_above_dram_peak_fails(on_h100):
    r = fbb.BenchResult("ch02/rowsum", [1.0], nbytes=4.0e9, ceiling_name="ceiling/copy", ceiling_value=3000.0)
    with pytest.raises(fb.PhysicalLimitError, match="dram"):                # 4 TB/s on a 3.35 TB/s HBM3
        fbb._against_peak(r, None)
    mm = fbb.BenchResult("ch02/sgemm", [1.0], flops=40e9, ceiling_name="ceiling/cublas-fp32/n=4096",
                         ceiling_value=51.7)
    fbb._against_peak(mm, None)
    assert mm.bound == "fp32" and mm.pct_peak == pytest.approx(100 * 40 / 66.9, rel=0.01)
    free = fbb.BenchResult("ch01/chase", [1.0])                              # a latency: no rate, no bound
    fbb._against_peak(free, None)
    assert free.bound is None and free.pct_peak is None


def test_result_of_times_measured_elsewhere_is_held_to_what_bench_holds(on_h100, monkeypatch):
    logged = []
    monkeypatch.setattr(fb.hooks, "on_bench", [logged.append])
    lib = fb.result_of("ch09/sdpa-cudnn/x", [2.0, 1.0, 1.5], flops=600e9, bound="tensor")
    ours = fb.result_of("ch09/6/x", [1.2, 1.4, 1.3], flops=600e9, ceiling=lib, bound="tensor", sizes={"s": 1})
    assert ours.median_ms == 1.3 and ours.ceiling_name == "ch09/sdpa-cudnn/x" and ours.ceiling_value == 400
    assert ours.pct == pytest.approx(100 * 1.5 / 1.3) and ours.pct_peak == pytest.approx(100 * 461.5 / 1070.5, rel=1e-3)
    assert logged == [lib, ours]                                            # both to the results log
    fb.result_of("ch09/unlogged", [1.0], flops=1e9, record=False)
    assert len(logged) == 2
    # 1.2 PFLOP/s of bf16 on an H100 (1070 TFLOP/s at 1980 MHz): the experiment is wrong, and nothing is logged
    with pytest.raises(fb.PhysicalLimitError, match="physical tensor peak"):
        fb.result_of("ch09/too-fast", [0.5], flops=600e9, bound="tensor")
    assert fb.result_of("ch09/fp8", [0.5], flops=600e9, bound="fp8").pct_peak == pytest.approx(56.1, abs=0.1)
    assert len(logged) == 3


def test_kernel_identity_traces_a_result_to_its_code():
    mod = fb.compile('extern "C" __global__ void k(float* y) { y[threadIdx.x] = SCALE * threadIdx.x; }',
                     "sm_90a", defines={"SCALE": 2})
    kern = mod.k
    launch = kern.bind(1, 32, 0)             # a Launch says what it launches (a Skipped one too, on a CPU)
    assert launch.kernel is kern and launch.grid in (1, (1, 1, 1))
    ids = fbb.kernel_identity(launch)
    assert ids == fbb.kernel_identity(kern) == fbb.kernel_identity([mod, kern]) and len(ids) == 1
    assert fbb.kernel_identity(lambda: kern.launch(1, 32, None)) == []    # a function is not searched
    rec = ids[0]
    assert rec["kernel"] == "k" and rec["arch"] == "sm_90a" and rec["defines"] == {"SCALE": 2}
    assert rec["registers"] == mod.resources["k"].registers and len(rec["source_sha256"]) == 12
    other = fb.compile(mod.source.replace("SCALE *", "SCALE + "), "sm_90a", defines={"SCALE": 2})
    assert fbb.kernel_identity(other)[0]["source_sha256"] != rec["source_sha256"]


def test_kernel_identity_of_factory_kernels_names_their_parameters():
    import feedbeast.numba_support as fbn
    fbn.setup()
    from numba import cuda

    def make(prefetch, tw=128):
        @cuda.jit
        def k(x):
            if prefetch:
                x[0] = tw
        return k
    a, b = fbb.kernel_identity(make(True)), fbb.kernel_identity(make(False, 256))
    assert a[0]["source_sha256"] == b[0]["source_sha256"]            # one source, two kernels
    assert a[0]["defines"] == {"prefetch": True, "tw": 128} and b[0]["defines"] == {"prefetch": False, "tw": 256}


def test_parse_recorded_ncu_csv():
    rows = profiling.parse_raw_csv((DATA / "ncu_raw.csv").read_text())
    assert len(rows) == 1
    p = profiling.from_raw(rows[0], name="ch05/column_reads/swizzle=0")
    assert "columns_plain" in p.kernel
    for key in ("dram", "occupancy", "l2_hit", "smem_ld_conflicts"):
        assert key in p.values, key
    assert 0 <= p["occupancy"] <= 100
    assert p.stalls and all(v >= 0 for v in p.stalls.values())
    top, _ = p.top_stalls(1)[0]
    assert top == max(p.stalls, key=p.stalls.get)
    table = p.table()
    assert "achieved occupancy" in table and f"stall: {top}" in table


def test_parse_skips_program_output_and_empty_input():
    assert profiling.parse_raw_csv("") == []
    assert profiling.parse_raw_csv("==PROF== Connected to process 1\nhello\n") == []
    text = ('==PROF== Profiling "k": 0%\nprinted by the program\n'
            '"ID","Kernel Name","dram__throughput.avg.pct_of_peak_sustained_elapsed",'
            '"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",'
            '"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"\n'
            '"","","%","ratio","ratio"\n'
            '"0","k(float *)","1,234.5","0.25","3.5"\n')
    (row,) = profiling.parse_raw_csv(text)
    p = profiling.from_raw(row)
    assert p["dram"] == 1234.5 and p.top_stalls(2) == [("long_scoreboard", 3.5), ("barrier", 0.25)]


def test_profile_is_skipped_by_name_without_gpu_or_ncu(monkeypatch, tmp_path):
    import feedbeast.device
    monkeypatch.setenv("FEEDBEAST_RESULTS", str(tmp_path))
    if fb.gpu() is None:
        s = fb.profile("pass", kernel="k", name="test/none")
        assert not s and "profile test/none" in str(s) and "needs a GPU" in str(s) and s.recorded is None
    monkeypatch.setattr(feedbeast.device, "gpu", lambda index=0: H100)
    monkeypatch.setattr(profiling, "needs_gpu", lambda what="": None)
    monkeypatch.setattr(profiling, "ncu_path", lambda: None)
    s = fb.profile("pass", kernel="k", name="test/no-ncu")
    assert not s and "needs Nsight Compute (ncu)" in str(s)


def test_skip_carries_the_recorded_table(monkeypatch, tmp_path):
    monkeypatch.setenv("FEEDBEAST_RESULTS", str(tmp_path))
    d = tmp_path / "nvidia-h100-80gb-hbm3"
    d.mkdir()
    rec = {"name": "ch02/sgemm/vector", "kernel": "sgemm", "gpu": "NVIDIA H100 80GB HBM3",
           "values": {"occupancy": 24.5, "fma_pipe": 71.0}, "stalls": {"barrier": 0.4, "mio_throttle": 1.2},
           "units": {"occupancy": "%", "fma_pipe": "%"}}
    (d / "profile.jsonl").write_text(json.dumps(rec) + "\n")
    monkeypatch.setattr(profiling, "needs_gpu", lambda what="": fb.Skipped("needs a GPU, this machine has none",
                                                                            what))
    s = fb.profile("pass", kernel="sgemm", name="ch02/sgemm/vector")
    assert not s and s.recorded is not None
    assert "recorded on NVIDIA H100" in str(s) and "stall: mio_throttle" in str(s)


def test_profile_reports_missing_counter_permission(monkeypatch, tmp_path):
    import subprocess
    import feedbeast.device
    monkeypatch.setenv("FEEDBEAST_RESULTS", str(tmp_path))
    monkeypatch.setattr(feedbeast.device, "gpu", lambda index=0: H100)
    monkeypatch.setattr(profiling, "needs_gpu", lambda what="": None)
    monkeypatch.setattr(profiling, "ncu_path", lambda: "/usr/local/cuda/bin/ncu")
    done = subprocess.CompletedProcess([], 0, "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission", "")
    monkeypatch.setattr(profiling.subprocess, "run", lambda *a, **k: done)
    s = fb.profile("pass", kernel="k", name="test/perm")
    assert not s and "may not read the GPU's performance counters" in str(s)


def test_compare_puts_profiles_side_by_side_and_marks_recorded_figures(monkeypatch, tmp_path):
    a = profiling.Profile("x/1", "k", {"duration": 2000.0, "dram": 50.0}, {"barrier": 2.0, "wait": 0.5, "misc": 0.1},
                          {}, "GPU A")
    b = profiling.Profile("x/4", "k", {"duration": 1000.0, "dram": 90.0}, {"long_scoreboard": 3.0, "wait": 0.2},
                          {}, "GPU A")
    t = profiling.compare({"one": a, "four": b}, keys=("duration", "dram"), stalls=1,
                          extra={"in flight, KB": {"one": 24, "four": 96}})
    lines = t.splitlines()
    assert lines[0].split() == ["one", "four"]
    assert lines[1].split()[-2:] == ["2.0", "1.0"]                         # ns shown as us
    assert "in flight, KB" in t and lines[3].split()[-2:] == ["24.0", "96.0"]
    # the largest stall of each column, each shown for both columns
    assert [ln.split()[1] for ln in lines if ln.startswith("stall:")] == ["barrier", "long_scoreboard"]
    assert "0.00" in next(ln for ln in lines if "long_scoreboard" in ln)
    assert "GPU A: one launch each" in lines[-1]
    # a Skipped column: its recorded table when it has one, '-' when not, and the last line says so
    s = fb.Skipped("needs a GPU, this machine has none", "profile x/4")
    s.recorded = b
    s2 = fb.Skipped("needs a GPU, this machine has none", "profile x/8")
    t2 = profiling.compare({"one": s2, "four": s}, keys=("dram",), stalls=1)
    assert t2.splitlines()[1].split()[-2:] == ["-", "90.0"] and "recorded on GPU A" in t2.splitlines()[-1]
    assert profiling.as_profile(s) is b and profiling.as_profile(s2) is None and profiling.as_profile(a) is a


def test_profile_takes_what_bench_takes_and_says_why_it_skips():
    """fb.profile(launch): a Launch or a function that launches; source needs the kernel named."""
    mod = fb.compile('extern "C" __global__ void k(float* y) { y[threadIdx.x] = 1.0f; }', "sm_90a")
    launch = mod.k.bind(1, 32, 0)
    with pytest.raises(fb.FeedbeastError, match="name the kernel"):
        fb.profile("print(1)")
    if fb.gpu() is None:
        s = fb.profile(launch, name="test/k")
        assert isinstance(s, fb.Skipped) and str(s).startswith("skipped: profile test/k: needs a GPU")
        assert isinstance(profiling.recorded_launches(launch), fb.Skipped)   # nothing launched: nothing to make again


# ---- what a GPU run recorded, beside a skip (issue 28: evidence kept on a CPU) ----

def _record(folder, file, **rec):
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / file).open("a") as f:
        f.write(json.dumps(rec) + "\n")


def test_a_skipped_bench_carries_the_figures_recorded_for_it(monkeypatch, tmp_path):
    """Each GPU's latest record of the same name, else of the same benchmark at another size (a CPU run is
    smaller), with the GPU and its folder named; nothing recorded, nothing added."""
    from feedbeast.course import results
    bench_mod = importlib.import_module("feedbeast.bench")      # (fb.bench is the function)
    monkeypatch.setattr(results, "course_results", lambda: None)
    monkeypatch.setenv("FEEDBEAST_RESULTS", str(tmp_path))
    for gpu, value in (("NVIDIA H100 80GB HBM3", 2800.0), ("NVIDIA H100 80GB HBM3", 2868.0), ("NVIDIA H200", 3873.8)):
        _record(tmp_path / gpu.lower().replace(" ", "-"), "bench.jsonl", name="ch00/copy", value=value, unit="GB/s",
                pct=91.7, ceiling="ceiling/copy", median_ms=1.0, gpu=gpu)
    _record(tmp_path / "nvidia-h200", "bench.jsonl", name="ch02/sgemm/n=4096", value=38.1, unit="TFLOP/s", pct=74.1,
            ceiling="ceiling/cublas-fp32/n=4096", median_ms=3.6, gpu="NVIDIA H200")
    monkeypatch.setattr(bench_mod, "needs_gpu", lambda what="": fb.Skipped("needs a GPU, this machine has none", what))
    s = fb.bench(lambda: None, name="ch00/copy")
    assert not s and str(s) == ("skipped: bench ch00/copy: needs a GPU, this machine has none; recorded on NVIDIA "
                                "H100 80GB HBM3: 2,868.0 GB/s = 91.7 % of copy (results/nvidia-h100-80gb-hbm3/); "
                                "on NVIDIA H200: 3,873.8 GB/s = 91.7 % of copy (results/nvidia-h200/)")
    s = fb.bench(lambda: None, name="ch02/sgemm/n=256")            # the CPU's size: the GPU's record, named
    assert "recorded on NVIDIA H200 (ch02/sgemm/n=4096): 38.1 TFLOP/s = 74.1 % of cublas-fp32/n=4096" in str(s)
    # every size the GPU recorded, in size order, whichever was recorded last
    _record(tmp_path / "nvidia-h200", "bench.jsonl", name="ch02/sgemm/n=16384", value=40.2, unit="TFLOP/s",
            pct=75.0, ceiling="ceiling/cublas-fp32/n=16384", median_ms=220.0, gpu="NVIDIA H200")
    _record(tmp_path / "nvidia-h200", "bench.jsonl", name="ch02/sgemm/n=1024", value=20.5, unit="TFLOP/s",
            pct=60.0, ceiling="ceiling/cublas-fp32/n=1024", median_ms=0.1, gpu="NVIDIA H200")
    s = str(fb.bench(lambda: None, name="ch02/sgemm/n=256"))
    assert s.index("(ch02/sgemm/n=1024): 20.5") < s.index("(ch02/sgemm/n=4096): 38.1") \
        < s.index("(ch02/sgemm/n=16384): 40.2"), s
    assert str(fb.bench(lambda: None, name="ch02/other")).endswith("this machine has none")
    _record(tmp_path / "nvidia-h200", "bench.jsonl", name="ch03/ring", value=4000.0, unit="GB/s", pct=94.0,
            ceiling="ceiling/copy", median_ms=1.0, gpu="NVIDIA H200", time="2026-11-29T02:48:37+00:00")
    assert str(fb.bench(lambda: None, name="ch03/ring")).endswith(   # the run's date: prose may quote another run
        "recorded on NVIDIA H200: 4,000.0 GB/s = 94.0 % of copy (results/nvidia-h200/, 2026-11-29)")
    _record(tmp_path / "nvidia-h200", "bench.jsonl", name="ch03/ring", value=4000.0, unit="GB/s", pct=94.0,
            ceiling="ceiling/copy", ceiling_value=4255.3, median_ms=1.0, gpu="NVIDIA H200", time="2026-11-30T02:48:37+00:00")
    assert str(fb.bench(lambda: None, name="ch03/ring")).endswith(   # that run's ceiling: the prose may quote another
        "4,000.0 GB/s = 94.0 % of copy (4,255.3 GB/s in that run) (results/nvidia-h200/, 2026-11-30)")
    assert results.recorded_bench("ch02/sgemm/stages=2") is None   # only sizes stand in for each other


def test_a_peak_without_a_gpu_is_a_skip_that_shows_the_peak_each_gpu_was_held_to(monkeypatch, tmp_path):
    """Chapter 00 prints the four peaks; with no GPU each is a skip line with the peak and its arithmetic from each
    GPU's latest benchmark bound by that resource (never 'unknown' with nothing to show)."""
    from feedbeast.course import results
    import feedbeast.device
    monkeypatch.setattr(feedbeast.device, "gpu", lambda index=0: None)
    monkeypatch.setattr(results, "course_results", lambda: None)
    monkeypatch.setenv("FEEDBEAST_RESULTS", str(tmp_path))
    monkeypatch.setattr(fb.hooks, "recorded", None)
    assert repr(fb.physical_peak("tensor")) == "skipped: tensor peak: needs a GPU, this machine has none"
    from feedbeast import course
    monkeypatch.setattr(fb.hooks, "recorded", course._recorded)
    for value, how, time in ((1000.0, "old", "2026-11-01T00:00:00+00:00"),
                             (1070.5, "132 SMs x 4096 flop/clock x 1.980 GHz", "2026-11-30T00:00:00+00:00")):
        _record(tmp_path / "nvidia-h200", "bench.jsonl", name="ch00/cublas", bound="tensor", peak=value, peak_how=how,
                gpu="NVIDIA H200", time=time)
    _record(tmp_path / "nvidia-h200", "bench.jsonl", name="ch00/copy", bound="dram", peak=4814.3, peak_how="x",
            gpu="NVIDIA H200")
    p = fb.physical_peak("tensor")
    assert p.skipped and p.value is None and not p.unit
    assert repr(p) == ("skipped: tensor peak: needs a GPU, this machine has none; recorded on NVIDIA H200: "
                       "1,070.5 TFLOP/s = 132 SMs x 4096 flop/clock x 1.980 GHz (results/nvidia-h200/, 2026-11-30)")
    assert repr(fb.physical_peak("smem")) == "skipped: smem peak: needs a GPU, this machine has none"
    assert not ceilings.physical_peak("tensor", H100).skipped


def test_a_check_on_a_gpu_is_logged_and_its_skip_elsewhere_shows_it(monkeypatch, tmp_path):
    import numpy as np
    import feedbeast.device
    from feedbeast.course import results
    monkeypatch.setattr(results, "course_results", lambda: None)
    monkeypatch.setenv("FEEDBEAST_RESULTS", str(tmp_path))
    monkeypatch.setattr(fb.hooks, "on_check", [results.append_check])
    monkeypatch.setattr(feedbeast.device, "gpu", lambda index=0: H100)
    fb.check(np.ones(3, np.float32), np.ones(3), name="ring 37x1000")   # a host copy of a kernel's output: logged too
    log = (tmp_path / H100.slug / "checks.jsonl").read_text().splitlines()
    assert len(log) == 1
    assert json.loads(log[-1])["name"] == "ring 37x1000" and json.loads(log[-1])["passed"] is True
    monkeypatch.setattr(feedbeast.device, "gpu", lambda index=0: None)
    s = fb.check(fb.Skipped("needs sm_90a, this machine has none", "launch ring"), np.ones(3), name="ring 37x1000")
    assert str(s) == ("skipped: launch ring: needs sm_90a, this machine has none; ring 37x1000 recorded on "
                      f"NVIDIA H100 80GB HBM3: passed, relative error 0.00e+00 (limit 1e-05; results/{H100.slug}/, "
                      f"{json.loads(log[-1])['time'][:10]})")
    s = str(fb.check(fb.Skipped("x", "launch ring"), np.ones(3), name="ring 5x5"))   # a CPU's size: the GPU's
    assert re.search(r"ring 5x5: no GPU run at this size; NVIDIA H100 80GB HBM3 ran 37x1000: passed, relative error "
                     r"at most 0\.00e\+00 \(limit 1e-05; results/[\w-]+/, 20\d\d-\d\d-\d\d\)$", s), s
    # several sizes of one GPU: one line, their sizes, the worst error and a failure named (never each record again)
    monkeypatch.setattr(feedbeast.device, "gpu", lambda index=0: H100)
    for n, ok in (("ring 9x9", True), ("ring 70x70", False)):
        fb.check(np.ones(3, np.float32) * (1 if ok else 2), np.ones(3), name=n, raise_on_fail=False)
    monkeypatch.setattr(feedbeast.device, "gpu", lambda index=0: None)
    s = str(fb.check(fb.Skipped("x", "launch ring"), np.ones(3), name="ring 5x5"))
    assert re.search(r"ring 5x5: no GPU run at this size; NVIDIA H100 80GB HBM3 ran 9x9, 70x70, 37x1000: FAILED at "
                     r"ring 70x70, relative error at most 1\.00e\+00 \(limit 1e-05; results/[\w-]+/, [\d-]+\)$", s), s
    assert "recorded" not in str(fb.check(fb.Skipped("x", "launch ring"), np.ones(3), name="other 5x5"))


def test_a_record_names_its_notebook_and_a_labs_skip_says_the_figures_are_the_solutions(monkeypatch, tmp_path):
    """make bench names the notebook it runs (FEEDBEAST_NOTEBOOK) in each record; a lab, whose checks and
    benchmarks have its solution's names, then shows the solution's figures as the solution's, never as if they
    were the learner's kernel's."""
    import numpy as np
    import feedbeast.device
    from feedbeast.course import results
    monkeypatch.setattr(results, "course_results", lambda: None)
    monkeypatch.setenv("FEEDBEAST_RESULTS", str(tmp_path))
    monkeypatch.setattr(fb.hooks, "on_check", [results.append_check])
    monkeypatch.setattr(feedbeast.device, "gpu", lambda index=0: H100)
    monkeypatch.setenv(results.NOTEBOOK_VARIABLE, "solutions/04-mbarrier-ring.ipynb")
    fb.check(np.ones(3, np.float32), np.ones(3), name="gemv_ring 13x20")
    monkeypatch.setenv(results.NOTEBOOK_VARIABLE, "chapters/04-mbarrier.ipynb")
    fb.check(np.ones(3, np.float32), np.ones(3), name="ring_rowsum 37x1000")
    monkeypatch.delenv(results.NOTEBOOK_VARIABLE)
    fb.check(np.ones(3, np.float32), np.ones(3), name="outside make bench")
    log = [json.loads(x) for x in (tmp_path / H100.slug / "checks.jsonl").read_text().splitlines()]
    assert [r.get("notebook") for r in log] == ["solutions/04-mbarrier-ring.ipynb", "chapters/04-mbarrier.ipynb", None]
    monkeypatch.setattr(feedbeast.device, "gpu", lambda index=0: None)
    lab = str(fb.check(fb.Skipped("x", "launch gemv_ring"), None, name="gemv_ring 13x20"))
    # the learner's kernel is said to be unchecked before the solution's "passed" is shown
    unchecked = ("skipped: launch gemv_ring: x; NOT CHECKED: this notebook's kernel did not run here, so nothing says "
                 "it is correct (a GPU that runs it grades it). For comparison, ")
    assert lab.startswith(unchecked + "gemv_ring 13x20 recorded on NVIDIA H100 80GB HBM3 by the lab's solution: "
                                      "passed"), lab
    other_size = str(fb.check(fb.Skipped("x", "launch gemv_ring"), None, name="gemv_ring 5x5"))   # the words in order
    assert other_size.startswith(unchecked + "gemv_ring 5x5: no GPU run at this size; NVIDIA H100 80GB HBM3 ran 13x20 "
                                             "by the lab's solution: passed"), other_size
    chapter = str(fb.check(fb.Skipped("x", "launch ring"), None, name="ring_rowsum 37x1000"))
    assert "ring_rowsum 37x1000 recorded on NVIDIA H100 80GB HBM3: passed" in chapter and "NOT" not in chapter, chapter
    older = results._recorder({"name": "lab04/gemv_ring/stages=4"})        # a record from before records named theirs
    assert older == " by the lab's solution, not this notebook's kernel"
    assert results._recorder({"name": "lab04/gemv_ring/stages=4"}, short=True) == " by the lab's solution"
    assert results._recorder({"name": "ch04/ring", "notebook": "/abs/course/chapters/04-mbarrier.ipynb"}) == ""
    assert results._recorder({"name": "x", "notebook": "/abs/course/solutions/04-mbarrier-ring.ipynb"})
    assert results._recorder({"name": "lab04/gemv_ring", "notebook": "labs/04-mbarrier-ring.ipynb"}) == ""
    assert results._recorder({"name": "x", "notebook": "/solutions/course/chapters/04-mbarrier.ipynb"}) == ""
    assert results._recorder({"name": "x", "notebook": None}) == results._recorder({"name": "x", "notebook": 7}) == ""
    assert results._recorder({"name": "ceiling/copy", "notebook": "solutions/00-copy-kernel.ipynb"}) == ""


def test_a_tally_is_logged_on_a_gpu_and_shown_beside_its_skip_elsewhere(monkeypatch, tmp_path):
    import feedbeast.device
    from feedbeast.course import results
    monkeypatch.setattr(results, "course_results", lambda: None)
    monkeypatch.setenv("FEEDBEAST_RESULTS", str(tmp_path))
    monkeypatch.setattr(fb.hooks, "on_check", [results.append_check])
    verdicts = []
    monkeypatch.setattr(fb.hooks, "on_verdict", [lambda *v: verdicts.append(v)])
    monkeypatch.setattr(feedbeast.device, "gpu", lambda index=0: None)
    t = fb.tally("ch09/timed builds", True, "timed builds: 3 of 3 cases within the bound")
    assert t and repr(t) == "ch09/timed builds: passed: timed builds: 3 of 3 cases within the bound"
    assert not (tmp_path / H100.slug / "checks.jsonl").exists()          # no GPU: nothing logged
    monkeypatch.setattr(feedbeast.device, "gpu", lambda index=0: H100)
    with pytest.raises(fb.CheckFailed, match="ch09/timed builds: FAILED: timed builds: 2 of 3"):
        fb.tally("ch09/timed builds", False, "timed builds: 2 of 3 cases within the bound")
    assert verdicts[-1] == ("failed", "ch09/timed builds",
                            "ch09/timed builds: FAILED: timed builds: 2 of 3 cases within the bound")
    monkeypatch.setattr(fb.hooks.mode, "sanitizer", True)                  # make sanitize: its sizes, not logged
    assert not fb.tally("ch09/timed builds", False, "1 of 1 (sanitizer)", raise_on_fail=False)
    monkeypatch.setattr(fb.hooks.mode, "sanitizer", False)
    rec = json.loads((tmp_path / H100.slug / "checks.jsonl").read_text())
    assert rec["summary"] == "timed builds: 2 of 3 cases within the bound" and rec["passed"] is False
    monkeypatch.setattr(feedbeast.device, "gpu", lambda index=0: None)
    s = fb.tally("ch09/timed builds", fb.Skipped("needs sm_90a, this machine has none", "checking"))
    assert verdicts[-1][0] == "skipped"
    assert not s and str(s) == (
        "skipped: checking: needs sm_90a, this machine has none; ch09/timed builds recorded on NVIDIA H100 80GB "
        f"HBM3: FAILED, timed builds: 2 of 3 cases within the bound (results/{H100.slug}/, {rec['time'][:10]})")
    assert "recorded" not in str(fb.tally("ch09/other", fb.Skipped("x", "checking")))


def test_summary_plots_one_row_per_family_of_sizes(tmp_path):
    from feedbeast.course import results
    assert results.family("ch10/gemv-wgmma 8x8192x8192") == "ch10/gemv-wgmma"
    assert results.family("ch09/6-persist/8x32x2048x64/causal=1") == "ch09/6-persist"
    assert results.family("ceiling/copy") == "ceiling/copy" and results.family("alone") == "alone"
    base = {"median_ms": 1.0, "p10_ms": 1.0, "p90_ms": 1.0, "runs": 5, "unit": "TFLOP/s", "ceiling": "ch09/sdpa-cudnn",
            "ceiling_value": 500.0, "sizes": None, "bound": "tensor", "pct_peak": 50.0, "gpu": "NVIDIA H200"}
    lines = [dict(base, name=f"ch09/6-persist/{s}x128/causal=0", value=v, pct=v / 5) for s, v in ((1, 450), (2, 550))]
    lines.append(dict(base, name="ch09/6-persist/1x128/causal=0", value=500.0, pct=100.0))   # a later run: it wins
    (tmp_path / "bench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    md = results.summarize(tmp_path).read_text()
    assert md.count("| ch09/6-persist/") == 2 and "| 500.0 TFLOP/s | 100.0 |" in md
    assert (tmp_path / "results.png").stat().st_size > 0


def test_summary_leaves_out_names_the_latest_run_of_their_notebook_did_not_record(tmp_path):
    from feedbeast.course import results
    from feedbeast.course.bench_run import note_run
    base = {"median_ms": 1.0, "p10_ms": 1.0, "p90_ms": 1.0, "runs": 5, "unit": "GB/s", "value": 3000.0, "pct": 70.0,
            "ceiling": "ceiling/copy", "ceiling_value": 4000.0, "sizes": None, "bound": "dram", "gpu": "NVIDIA H200"}
    rec = lambda name, day: dict(base, name=name, time=f"2026-11-{day}T01:00:00+00:00")
    # before runs.jsonl: no run names them
    legacy = [rec(n, 20) for n in ("lab04/rowsum_ring/stages=8", "ch04/ring", "ceiling/copy")]
    ch04, ch05 = [rec("ch04/ring/stages=4", 21)], [rec("ch04/ring/seen-from-ch05", 21), rec("ch05/tma", 21)]
    lab04 = [rec("lab04/gemv_ring/stages=4", 22), rec("lab04/dropped", 22)]
    later = [rec("lab04/gemv_ring/stages=4", 29), rec("ceiling/copy", 29)]
    (tmp_path / "bench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in legacy + ch04 + ch05 + lab04 + later))
    lines = lambda rs: [json.dumps(r) for r in rs]
    note_run(tmp_path, Path("chapters/04-mbarrier.ipynb"), "2026-11-21T00:00:00+00:00", lines(ch04))
    note_run(tmp_path, Path("chapters/05-tma.ipynb"), "2026-11-21T00:00:01+00:00", lines(ch05))
    note_run(tmp_path, Path("solutions/04-mbarrier-ring.ipynb"), "2026-11-22T00:00:00+00:00", lines(lab04))
    note_run(tmp_path, Path("solutions/04-mbarrier-ring.ipynb"), "2026-11-29T00:00:00+00:00", lines(later))
    assert json.loads((tmp_path / "runs.jsonl").read_text().splitlines()[-1])["names"] == \
        ["lab04/gemv_ring/stages=4"]                                                  # not the shared ceiling
    md = results.summarize(tmp_path).read_text()
    table, retired = md.split("## Names the latest run")
    for kept in ("lab04/gemv_ring/stages=4", "ch04/ring/stages=4", "ch04/ring/seen-from-ch05", "ch05/tma",
                 "ch04/ring", "ceiling/copy"):    # ch04/ring: two notebooks record "ch04/", so neither retires it
        assert f"| {kept} |" in table, kept
    assert "rowsum_ring" not in table and "dropped" not in table
    assert sorted(ln for ln in retired.splitlines() if ln.startswith("- ")) == [
        "- lab04/dropped (last recorded 2026-11-22; solutions/04-mbarrier-ring.ipynb ran 2026-11-29)",
        "- lab04/rowsum_ring/stages=8 (last recorded 2026-11-20; solutions/04-mbarrier-ring.ipynb ran 2026-11-29)"]


def test_make_bench_names_each_notebook_to_its_kernel_and_to_no_one_after(monkeypatch, tmp_path):
    """bench_run: the kernel of each notebook sees FEEDBEAST_NOTEBOOK (its records name it); this process, after
    the run, no longer does."""
    import os
    from feedbeast.course import bench_run, results
    seen = []

    class Client:
        def __init__(self, nb, **kw):
            pass

        def execute(self):      # the kernel inherits this process's environment when it starts
            seen.append(os.environ.get(results.NOTEBOOK_VARIABLE))

    for name in ("a.ipynb", "b.ipynb"):
        (tmp_path / name).write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    monkeypatch.setattr(bench_run, "gpu", lambda: H100)
    monkeypatch.setattr(bench_run, "describe", lambda: "a GPU")
    monkeypatch.setattr(bench_run, "NotebookClient", Client)
    monkeypatch.setenv("FEEDBEAST_RESULTS", str(tmp_path / "results"))
    monkeypatch.delenv(results.NOTEBOOK_VARIABLE, raising=False)
    assert bench_run.run([tmp_path / "a.ipynb", tmp_path / "b.ipynb"]) == 0
    assert seen == [(tmp_path / "a.ipynb").as_posix(), (tmp_path / "b.ipynb").as_posix()]
    assert results.NOTEBOOK_VARIABLE not in os.environ


def test_a_record_the_reader_cannot_state_is_left_out_never_a_crash(monkeypatch, tmp_path):
    """A hand-edited or foreign line in checks.jsonl (wrong types, not an object) never breaks a learner's cell."""
    from feedbeast.course import results
    monkeypatch.setattr(results, "course_results", lambda: None)
    monkeypatch.setenv("FEEDBEAST_RESULTS", str(tmp_path))
    (tmp_path / "gpu-a").mkdir()
    good = {"name": "ring 4x4", "passed": True, "rel_error": 0.0, "tolerance": 1e-5, "gpu": "GPU A",
            "time": "2026-11-29T00:00:00+00:00"}
    bad = [dict(good, rel_error=None), dict(good, time=12345, gpu="GPU B"), dict(good, name=None),
           dict(good, passed="false", gpu="GPU C"), [1, 2], "text", dict(good, summary=7, rel_error="x", gpu="GPU D"),
           dict(good, gpu=["a list"]), dict(good, gpu=3), dict(good, notebook=None, gpu="GPU E", passed="yes")]
    (tmp_path / "gpu-a" / "checks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bad + [good]) + "{oops\n")
    line = results.recorded_check("ring 4x4")    # GPU B's record has no usable date: stated without it
    assert line == ("ring 4x4 recorded on GPU A: passed, relative error 0.00e+00 (limit 1e-05; results/gpu-a/, "
                    "2026-11-29); on GPU B: passed, relative error 0.00e+00 (limit 1e-05; results/gpu-a/)"), line
    (tmp_path / "gpu-a" / "checks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bad[:1] + bad[3:]))
    assert results.recorded_check("ring 4x4") is None


def test_summary_counts_the_latest_outcome_of_each_check_and_names_every_failure(tmp_path):
    from feedbeast.course import results
    rec = lambda name, ok, nb=None, **kw: dict({"name": name, "passed": ok, "rel_error": 0.0, "tolerance": 1e-5,
                                                "gpu": "GPU A"}, **({"notebook": nb} if nb else {}), **kw)
    lines = [rec("ring 4x4", False, "chapters/04-mbarrier.ipynb"), rec("ring 4x4", True, "chapters/04-mbarrier.ipynb"),
             rec("tma 8x8", False, "chapters/05-tma.ipynb"), rec("old", True),
             {"name": "ch09/timed builds", "passed": True, "summary": "204 of 204 cases within the bound",
              "gpu": "GPU A", "notebook": "chapters/09-attention.ipynb"}]
    (tmp_path / "checks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    bench = {"name": "ch04/ring", "median_ms": 1.0, "p10_ms": 1.0, "p90_ms": 1.0, "runs": 5, "unit": "GB/s",
             "value": 3000.0, "pct": 70.0, "ceiling": "ceiling/copy", "ceiling_value": 4000.0, "sizes": None,
             "bound": "dram", "gpu": "GPU A", "time": "2026-11-29T00:00:00+00:00"}
    (tmp_path / "bench.jsonl").write_text(json.dumps(bench) + "\n")
    md = results.summarize(tmp_path).read_text()
    section = md.split("## Checks (checks.jsonl: the latest outcome of each check)")[1]
    assert "4 checks: 3 passed, 1 failed." in section
    assert "- chapters/04-mbarrier.ipynb: 1 of 1 passed" in section and "- chapters/05-tma.ipynb: 0 of 1 passed" in section
    assert "- (a run before records named their notebook): 1 of 1 passed" in section
    assert "- ch09/timed builds: passed, 204 of 204 cases within the bound" in section
    assert section.rstrip().endswith("Failed (latest outcome):\n\n- tma 8x8")


class _FakeEvents:
    log = None

    def __init__(self, n):
        pass

    def record(self, i):
        self.log.append(("event", i))

    def elapsed(self, i, j):
        return 1.0


class _FakeClock:
    """time.perf_counter for bench's timer: it moves only when a fake call says it took host time."""
    def __init__(self):
        self.t = 0.0

    def perf_counter(self):
        return self.t


def _timer_without_gpu(monkeypatch):
    """bench's timer with the GPU parts and the clock replaced: what it queues is listed in order instead."""
    log, clock = [], _FakeClock()
    monkeypatch.setattr(fbb, "_hold", lambda ns: log.append(("hold", ns)))
    monkeypatch.setattr(fbb, "flush_l2", lambda: log.append(("flush",)))
    monkeypatch.setattr(_FakeEvents, "log", log)
    monkeypatch.setattr(fbb, "_Events", _FakeEvents)
    monkeypatch.setattr(fbb, "time", clock)
    monkeypatch.setattr(importlib.import_module("feedbeast.memory"), "sync", lambda: None)
    return log, clock


def test_the_runs_are_queued_behind_one_hold_longer_than_the_host_needs_to_queue_them(monkeypatch):
    log, clock = _timer_without_gpu(monkeypatch)

    def call(i):           # warm-up calls (1, 2) take no host time, the timed ones (3 on) 3 ms each
        clock.t += 0.003 if i >= 3 else 0.0
    times, host_us, hidden = fbb._time(call, warmup=3, reps=4, flush=True)
    holds = [x[1] for x in log if x[0] == "hold"]
    # the warm-up predicts nothing, so the shortest hold; queueing the 4 runs took 12 ms, so they are timed again
    # behind twice that, which holds
    assert holds == [fbb.HOLD_MIN_NS, 24_000_000] and hidden and host_us == pytest.approx(3000)
    second = log[log.index(("hold", 24_000_000)):]
    assert second[1:] == [("flush",), ("event", 0), ("event", 1), ("flush",), ("event", 2), ("event", 3),
                          ("flush",), ("event", 4), ("event", 5), ("flush",), ("event", 6), ("event", 7)]
    assert times == [1.0] * 4


def test_a_warm_up_that_predicts_the_host_needs_one_hold(monkeypatch):
    log, clock = _timer_without_gpu(monkeypatch)

    def call(i):
        clock.t += 0.001
    fbb._time(call, warmup=3, reps=5, flush=False)
    assert [x for x in log if x[0] == "hold"] == [("hold", 10_000_000)]      # 2 x 5 runs x 1 ms, no second pass


def test_a_host_time_no_hold_covers_is_reported_not_hidden(monkeypatch):
    log, clock = _timer_without_gpu(monkeypatch)
    monkeypatch.setattr(fbb, "HOLD_MAX_NS", 1_000_000)

    def call(i):
        clock.t += 0.002
    times, host_us, hidden = fbb._time(call, warmup=2, reps=3, flush=False)
    assert [x[1] for x in log if x[0] == "hold"] == [1_000_000] and not hidden    # no second try: at its cap
    r = fb.result_of("x", times, nbytes=1e6, record=False, host_us=host_us, host_hidden=hidden)
    assert "host time not hidden (2000 us per call)" in repr(r) and "Kernel.bind" in repr(r)
    assert "host time not hidden: bind" in repr(fb.result_of("y", times, nbytes=1e6, record=False, host_hidden=False))


def test_recorded_results_are_found_from_a_hosted_notebook_s_folder(tmp_path, monkeypatch):
    """A hosted kernel runs in a fixed folder with the clone one level below (as the setup cell finds it): the
    recorded results are that clone's. Two clones there, or none: nothing is guessed."""
    from feedbeast.course import results
    monkeypatch.delenv("FEEDBEAST_COURSE", raising=False)
    work = tmp_path / "content"
    clone = work / "feedbeast"
    for d in ("chapters", "solutions", "results"):
        (clone / d).mkdir(parents=True)
    monkeypatch.chdir(work)
    assert results.course_results() == clone.resolve() / "results"
    for d in ("chapters", "solutions"):
        (work / "other" / d).mkdir(parents=True)
    assert results.course_results() is None


def test_a_cublas_ceiling_that_cannot_load_says_why_and_what_to_install(monkeypatch):
    """cuBLAS missing, or present and refused by the driver (cuBLAS 13 on a CUDA 12 driver): the skip names the
    loader's error and the wheel for each driver, not 'none found'."""
    monkeypatch.setattr(ceilings, "needs_gpu", lambda what: None)

    def refused():
        raise OSError("libcublas.so.13: cannot open shared object file")
    monkeypatch.setattr(ceilings, "_cublas", refused)
    r = ceilings.matmul_rate.__wrapped__("bf16", 64)
    assert isinstance(r, fb.Skipped) and "OSError: libcublas.so.13: cannot open" in str(r), r
    assert 'pip install "feedbeast[cublas]"` with a CUDA 13 driver' in str(r) and "nvidia-cublas-cu12" in str(r), r


def test_bench_says_what_is_wrong_with_its_arguments_before_any_skip():
    """On a CPU every one of these came back as "skipped: needs a GPU", the mistake said first on the GPU: a launch's
    result for fn, reps=0, negative bytes, a bound no peak is known for, no name."""
    for kw, said in ((dict(fn=None, name="x"), "fn is None, not a function"),
                     (dict(fn=fb.Skipped("no GPU", "k"), name="x"), "not a function: pass one that launches"),
                     (dict(fn=lambda: 0, name="x", reps=0), "reps=0: a whole number >= 1"),
                     (dict(fn=lambda: 0, name="x", nbytes=-5), "nbytes=-5: the bytes moved of one run"),
                     (dict(fn=lambda: 0, name="x", bound="mem"), "bound='mem': one of dram, l2, smem"),
                     (dict(fn=lambda: 0, name=None), "name=None")):
        with pytest.raises((TypeError, ValueError)) as e:
            fb.bench(**kw)
        assert said in str(e.value), str(e.value)
    if fb.gpu() is None:
        assert isinstance(fb.bench(lambda: 0, name="x", nbytes=1e9, bound="dram", reps=3), fb.Skipped)


def test_a_ceiling_or_a_reference_with_a_wrong_argument_says_so_on_every_machine():
    """fb.ceiling('bf16', 'big') and ('copy', -1) were skips on a CPU; matmul_reference of mismatched shapes raised
    numpy's 'core dimension' error."""
    from feedbeast import examples as ex
    for call, said in ((lambda: fb.ceiling("cpy"), "unknown ceiling 'cpy'"),
                       (lambda: fb.ceiling("bf16", "big"), "size='big': n of the n x n x n GEMM"),
                       (lambda: fb.ceiling("copy", -1), "size=-1: the bytes copied"),
                       (lambda: ex.matmul_reference(np.ones((4, 8)), np.ones((4, 8))),
                        "a is 4x8 and b is 4x8: two matrices, a's columns equal to b's rows")):
        with pytest.raises(ValueError) as e:
            call()
        assert said in str(e.value), str(e.value)
    assert ex.matmul_reference(np.ones((4, 8)), np.ones((8, 3))).shape == (4, 3)


@pytest.mark.parametrize("call, said", [
    (lambda ex: ex.rowsum_inputs(2.5, 10), "rowsum_inputs: rows=2.5: a whole number >= 0 (use // for a size"),
    (lambda ex: ex.rowsum_inputs(10, -1), "rowsum_inputs: cols=-1: a whole number >= 0"),
    (lambda ex: ex.rowsum_inputs("64", 10), "rowsum_inputs: rows='64': a whole number >= 0"),
    (lambda ex: ex.rowsum_inputs(None, 10), "rowsum_inputs: rows=None: a whole number >= 0"),
    (lambda ex: ex.rowsum_inputs(4, 4, seed=1.5), "rowsum_inputs: seed=1.5: a whole number >= 0 (or None"),
    (lambda ex: ex.rowsum_bytes(4, 4.0), "rowsum_bytes: cols=4.0: a whole number >= 0"),
    (lambda ex: ex.rowsum_bytes("64", 4), "rowsum_bytes: rows='64': a whole number >= 0"),
    (lambda ex: ex.rowsum_bytes(4, 4, itemsize=0), "rowsum_bytes: itemsize=0: a whole number >= 1"),
    (lambda ex: ex.matmul_inputs(4, "64", 4), "matmul_inputs: n='64': a whole number >= 0"),
    (lambda ex: ex.matmul_inputs(4, 4, 2.5), "matmul_inputs: k=2.5: a whole number >= 0"),
    (lambda ex: ex.matmul_inputs(4, 4, 4, seed=-1), "matmul_inputs: seed=-1: a whole number >= 0 (or None"),
    (lambda ex: ex.matmul_flops(4, 4, 2.5), "matmul_flops: k=2.5: a whole number >= 0"),
    (lambda ex: ex.matmul_flops(-1, 4, 4), "matmul_flops: m=-1: a whole number >= 0"),
    (lambda ex: ex.matmul_flops(True, 4, 4), "matmul_flops: m=True: a whole number >= 0"),
    (lambda ex: ex.matmul_flops(4, None, 4), "matmul_flops: n=None: a whole number >= 0"),
])
def test_the_examples_refuse_a_size_or_seed_that_is_not_a_whole_number(call, said):
    """rowsum_inputs(2.5, 10) was refused in random's name, rowsum_bytes(4, 4.0) and matmul_flops(4, 4, 2.5) gave a
    count for a matrix that cannot exist, and rowsum_bytes('64', 4) a repeated string."""
    from feedbeast import examples as ex
    with pytest.raises(ValueError, match=re.escape(said)):
        call(ex)


def test_the_examples_take_numpy_integers_and_a_seed_of_none():
    from feedbeast import examples as ex
    i = np.int64
    x = ex.rowsum_inputs(i(5), np.int32(7), seed=i(3))
    assert x.shape == (5, 7) and x.dtype == np.float32 and np.array_equal(x, ex.rowsum_inputs(5, 7, seed=3))
    assert ex.rowsum_inputs(0, 3).shape == (0, 3) and ex.rowsum_inputs(2, 3, seed=None).shape == (2, 3)
    assert ex.rowsum_bytes(i(3), i(10)) == ex.rowsum_bytes(3, 10) == 3 * 10 * 4 + 3 * 4
    assert ex.rowsum_bytes(3, 10, itemsize=2) == 3 * 10 * 2 + 3 * 4
    a, b = ex.matmul_inputs(i(3), 4, np.uint16(5), seed=i(2))
    a2, b2 = ex.matmul_inputs(3, 4, 5, seed=2)
    assert a.shape == (3, 5) and b.shape == (5, 4) and np.array_equal(a, a2) and np.array_equal(b, b2)
    assert [m.shape for m in ex.matmul_inputs(3, 4, 5, seed=None)] == [(3, 5), (5, 4)]
    assert ex.matmul_flops(i(4096), 4096, 4096) == ex.matmul_flops(4096, 4096, 4096) == 2.0 * 4096 ** 3
