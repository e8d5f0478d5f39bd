"""Chapter 04: fb/mbarrier.cuh, fb/trace.cuh + feedbeast.trace, the rowsum ring and its debug time-out.

The kernel is read from the chapter's %%cuda cell, so the test and the book run the same code.
GPU tests skip by name without an sm_90a GPU.
"""
import dataclasses
import json
import types
import re
from pathlib import Path

import numpy as np
import pytest

import feedbeast as fb
from feedbeast import stress
from feedbeast.course.notebook import load
from feedbeast.sim import check_ring
from feedbeast.sim.rings import producer
from feedbeast.timeline import Span, spans_to_records
from feedbeast.trace import KINDS, TraceBuffer, spans_of

ROOT = Path(__file__).resolve().parents[1]
CHUNK, THREADS = 4096, 160
CHAPTER = load(ROOT / "chapters/04-mbarrier.ipynb")


@pytest.fixture(scope="module")
def src():
    return CHAPTER.cuda("rowsum_mod").source


def test_ring_sass_has_the_mbarrier_and_bulk_copy_instructions(src):
    mod = fb.compile(src, "sm_90a")
    found = mod.expect_sass("SYNCS.EXCH.64", "SYNCS.ARRIVE.TRANS64", "SYNCS.ARRIVE.TRANS64.A1T0",
                            "SYNCS.PHASECHK.TRANS64.TRYWAIT", "UBLKCP", "LDS.128", kernel="rowsum_ring")
    assert found["SYNCS.ARRIVE.TRANS64"] >= 2           # arrive.expect_tx and the plain arrive
    assert mod.resources["rowsum_ring"].spills == 0
    assert not [w for w in mod.warnings if "rowsum" in w]


@pytest.mark.parametrize("defines", [{"STAGES": 1}, {"STAGES": 12}, {"FB_TRACE": 1, "FB_TRACE_PER_LANE": 64}],
                         ids=["stages1", "stages12", "trace"])
def test_ring_variants_compile_without_spills(src, defines):
    mod = fb.compile(src, "sm_90a", defines=defines)
    assert mod.resources["rowsum_ring"].spills == 0
    if "FB_TRACE" in defines:
        assert "GLOBALTIMER" in mod.sass("rowsum_ring").upper()
    else:
        assert "GLOBALTIMER" not in mod.sass("rowsum_ring").upper()


def test_arrival_switches_change_the_releases(src):
    """-D ARRIVE_PER_WARP=1 (lane 0 arrives after __syncwarp) and -D FORGET_RELEASE=1 (the hang of the
    chapter's pitfalls) are variants by compile-time switch, each visible in the SASS."""
    def build(**d):
        mod = fb.compile(src, "sm_90a", defines={"STAGES": 4, **d})
        assert mod.resources["rowsum_ring"].spills == 0
        return mod.histogram("rowsum_ring")

    def count(hist, prefix):
        return sum(n for op, n in hist.items() if fb.sass.matches(op, prefix))
    per_thread, per_warp, forgot = build(), build(ARRIVE_PER_WARP=1), build(FORGET_RELEASE=1)
    assert count(per_thread, "SYNCS.ARRIVE.TRANS64.A1T0") == count(per_warp, "SYNCS.ARRIVE.TRANS64.A1T0") >= 1
    assert count(forgot, "SYNCS.ARRIVE.TRANS64.A1T0") == 0           # the release arrive is gone...
    assert count(forgot, "SYNCS.ARRIVE.TRANS64") >= 1                # ...the producer's arrive.expect_tx stays
    assert count(per_warp, "WARPSYNC") > count(per_thread, "WARPSYNC")   # the __syncwarp before lane 0 arrives


def test_debug_build_bounds_the_wait_and_normal_build_does_not(src):
    dbg = fb.compile(src, "sm_90a", debug=True)
    assert "BPT.TRAP" in dbg.sass("rowsum_ring") or "report_timeout" in dbg.sass()
    assert "GLOBALTIMER" in dbg.sass("rowsum_ring").upper()
    assert "GLOBALTIMER" not in fb.compile(src, "sm_90a").sass("rowsum_ring").upper()


def test_header_combines_with_the_other_chapters_headers(src):
    fb.compile("#include <fb/cp_async.cuh>\n#include <fb/tma.cuh>\n" + src, "sm_90a")


def test_header_wrappers_each_compile():
    mod = fb.compile(r"""
#include <fb/bulk_copy.cuh>
#include <fb/mbarrier.cuh>
extern "C" __global__ void each(const float4* g, float* out) {
  __shared__ __align__(8) cuda::std::uint64_t bar;
  __shared__ __align__(16) float4 buf[4];
  if (threadIdx.x == 0) { fb::mbar::init(&bar, 1); fb::mbar::fence_init(); }
  __syncthreads();
  if (threadIdx.x == 0) {
    fb::mbar::expect_tx(&bar, 32);
    fb::mbar::arrive_expect_tx(&bar, 32);
    fb::bulk_copy_g2s(buf, g, 64, &bar);
  }
  while (!fb::mbar::test_wait_parity(&bar, 0)) {}
  fb::mbar::wait(&bar, 0, "bar", 0);
  out[threadIdx.x] = buf[threadIdx.x % 4].x;
}""", "sm_90a")
    mod.expect_sass("SYNCS.EXCH.64", "SYNCS.ARRIVE.TRANS64", "SYNCS.PHASECHK.TRANS64", "UBLKCP")


def test_run_ahead_consumers_are_caught_by_the_checker():
    def own_tiles(ring):
        for it in range(ring.me, ring.tiles, ring.consumers):
            s, ph = ring.stage(it), ring.phase(it)
            yield ring.full[s].wait(ph)
            yield ring.read(s, tile=it)
            yield ring.empty[s].arrive()

    def one(ring):
        for s in range(ring.stages):
            ring.full[s].init(1)
            ring.empty[s].init(1)
    assert check_ring(producer, [own_tiles] * 2, stages=4, tiles=8, init=one).ok
    assert check_ring(producer, [own_tiles] * 2, stages=3, tiles=8, init=one).kind == "read_before_arrival"


def test_trace_records_become_named_spans():
    lanes = ["producer", "consumer 0", "stage 0"]
    spans = [Span("producer", 0, 100, "wait"), Span("producer", 100, 150, "issue"),
             Span("stage 0", 100, 900, "load"), Span("consumer 0", 900, 1300, "compute")]
    rec = spans_to_records(spans, lanes, KINDS, t0=10**15)
    rec = np.vstack([rec, np.zeros((3, 4), np.int64)])        # unwritten rows are dropped
    back = spans_of(rec, lanes)
    assert [(s.lane, s.kind, s.start, s.end) for s in back] == \
        [(s.lane, s.kind, float(s.start), float(s.end)) for s in spans]


def test_trace_kinds_match_the_header():
    text = (ROOT / "src/feedbeast/include/fb/trace.cuh").read_text()
    for i, k in enumerate(KINDS):
        assert f"{k} = {i}" in text


def test_trace_buffer_without_gpu_says_skipped():
    tb = TraceBuffer(["a", "b"], per_lane=8)
    assert tb.defines == {"FB_TRACE": 1, "FB_TRACE_PER_LANE": 8}
    assert tb.array.shape == (16, 4) and tb.array.dtype == np.int64
    if fb.gpu() is None:
        assert not tb.spans() and "skipped" in str(tb.spans())


# ----------------------------------------------------------------------------- GPU
def _launch(kernel, x, y, rows, cols, stages, trace=0, grid=None):
    g = fb.gpu()
    return kernel.launch(grid or g.sm_count, THREADS, x, y, rows, cols, trace, shared=stages * CHUNK * 4)


@pytest.mark.parametrize("rows,cols", [(10007, 8188), (1001, 20), (50, 4100)])
def test_rowsum_ring_on_ragged_shapes(gpu90, src, rows, cols):
    mod = fb.compile(src, "sm_90a", defines={"STAGES": 4})
    x = fb.examples.rowsum_inputs(rows, cols, seed=rows)
    y = fb.empty(rows, np.float32)
    assert _launch(mod.rowsum_ring, fb.to_device(x), y, rows, cols, 4) is None
    fb.check(y, fb.examples.rowsum_reference(x), name=f"rowsum_ring {rows}x{cols}")


def test_gpu_rowsum_ring_stress(gpu90, src):
    """make stress: random ragged shapes (cols a multiple of 4: 16-byte bulk copies), then repeats bit for bit."""
    mod = fb.compile(src, "sm_90a", defines={"STAGES": 4})
    for i, (rows, cols) in enumerate(stress.sizes((3001, 8188), multiple_of=(132, 4096), align=(1, 4))):
        x = fb.examples.rowsum_inputs(rows, cols, seed=i)
        xd, y = fb.to_device(x), fb.empty(rows, np.float32)

        def once():
            y.poison()
            _launch(mod.rowsum_ring, xd, y, rows, cols, 4)
            return y
        out = stress.repeat_identical(once) if i == 0 else once()
        fb.check(out, fb.examples.rowsum_reference(x), name=f"rowsum_ring {rows}x{cols}")


def test_broken_ring_times_out_naming_barrier_stage_and_parity(gpu90, src):
    # A trapped kernel leaves its process unable to use the GPU: run it in a separate one.
    with pytest.raises(fb.BarrierTimeout, match=r"barrier '(empty|full)' stage [0-3] for phase parity [01]"):
        fb.isolated("""
            mod = fb.compile(src, "sm_90a", defines={"STAGES": 4, "FORGET_RELEASE": 1,
                                                     "FB_WAIT_TIMEOUT_NS": "300000000ull"}, debug=True)
            x, y = fb.to_device(fb.examples.rowsum_inputs(64, 8192)), fb.empty(64, np.float32)
            mod.rowsum_ring.launch(1, THREADS, x, y, 64, 8192, 0, shared=4 * CHUNK * 4)
            fb.sync()
        """, src=src, THREADS=THREADS, CHUNK=CHUNK)
    # this process is untouched: the correct ring runs
    ok = fb.compile(src, "sm_90a", defines={"STAGES": 4})
    xh = fb.examples.rowsum_inputs(64, 8192, seed=5)
    y = fb.empty(64, np.float32)
    _launch(ok.rowsum_ring, fb.to_device(xh), y, 64, 8192, 4)
    fb.check(y, fb.examples.rowsum_reference(xh))


def test_trace_build_records_every_role(gpu90, src):
    lanes = ["producer"] + [f"consumer {w}" for w in range(4)] + [f"stage {s}" for s in range(4)]
    tb = TraceBuffer(lanes, per_lane=128)
    mod = fb.compile(src, "sm_90a", defines={"STAGES": 4, **tb.defines})
    rows, cols = 2000, 8188
    xh = fb.examples.rowsum_inputs(rows, cols, seed=2)
    y = fb.empty(rows, np.float32)
    _launch(mod.rowsum_ring, fb.to_device(xh), y, rows, cols, 4, trace=tb.array)
    fb.check(y, fb.examples.rowsum_reference(xh))
    spans = tb.spans()
    assert {s.lane for s in spans} == set(lanes)
    assert {"wait", "issue", "load", "compute", "bubble"} <= {s.kind for s in spans}
    assert all(s.end >= s.start for s in spans)


@pytest.mark.parametrize("notebook, cell, kernel", [
    ("chapters/04-mbarrier.ipynb", "rowsum_mod", "rowsum_ring"),
    ("solutions/04-mbarrier-ring.ipynb", "lab", "gemv_ring"),
    ("chapters/05-tma.ipynb", "ring", "rowsum_tma"),
    ("solutions/05-tma-ring.ipynb", "lab", "transpose_ring"),
    ("chapters/06-warp-specialization.ipynb", "rowsum", "rowsum_ws"),
    ("chapters/06-warp-specialization.ipynb", "rowsum", "rowsum_single"),
])
def test_rowsum_consumers_fence_their_reads_before_the_async_refill(notebook, cell, kernel):
    """Ordinary loads, then a bulk/TMA write into the same stage: fence.proxy.async between them (MEMBAR.ALL.CTA
    then FENCE.VIEW.ASYNC.S). Without it lab 05 summed rows wrong under memcheck."""
    c = load(ROOT / notebook).cuda(cell)
    body, defines = c.source, c.defines
    mod = c.compile("sm_90a")
    assert fb.sass.expect_proxy_fence(mod, kernel, "test") >= 1
    fences = ("fb::fence_proxy_async();",)
    bare = "\n".join(ln for ln in body.split("\n") if not any(f in ln for f in fences))
    assert bare != body
    with pytest.raises(fb.SassMismatch, match="no fence.proxy.async"):   # the one-liner that finds a deleted fence
        fb.sass.expect_proxy_fence(fb.compile(bare, "sm_90a", defines=defines), kernel, "test")


SKIPPABLE_FENCE = r"""
#include <fb/mbarrier.cuh>
#include <fb/fence.cuh>
extern "C" __global__ void k(const float* in, float* out, int n) {
  __shared__ float tile[256];
  __shared__ alignas(8) unsigned long long bar;
  if (threadIdx.x == 0) fb::mbar::init(&bar, blockDim.x);
  __syncthreads();
  tile[threadIdx.x] = in[threadIdx.x];
  if (n < 0) {                                       // never true: the fence runs on no path that matters
    tile[(threadIdx.x + 1) % 256] = in[threadIdx.x + 256];
    FENCE
  }
  fb::mbar::arrive(&bar);
  out[threadIdx.x] = tile[threadIdx.x];
}
"""


@pytest.mark.parametrize("fence", ["fb::fence_proxy_async();",
                                   'asm volatile("{ .reg .pred p; setp.eq.s32 p, %0, -12345; '
                                   '@p fence.proxy.async.shared::cta; }" :: "r"(n) : "memory");'])
def test_a_fence_that_a_branch_skips_is_no_fence_before_the_release(fence):
    """The SASS has the fence between the shared stores and the arrive in address order, but a branch after the
    first store jumps over it (an `if` around a second store and the fence; a predicated inline-PTX fence): the
    order check reads the paths, not the addresses. A fence that runs on every path, after the `if`, passes."""
    with pytest.raises(fb.SassMismatch, match="in the wrong place.*on every path"):
        fb.sass.expect_proxy_fence(fb.compile(SKIPPABLE_FENCE.replace("FENCE", fence), "sm_90a"), "k", "test")
    fixed = SKIPPABLE_FENCE.replace("    FENCE\n  }\n", "  }\n  fb::fence_proxy_async();\n")
    assert fb.sass.expect_proxy_fence(fb.compile(fixed, "sm_90a"), "k", "test") >= 1


WAITS = """#include <fb/mbarrier.cuh>
extern "C" __global__ void waits(float* y, int n) {
  __shared__ fb::mbar::u64 bars[2];
  if (threadIdx.x == 0) { fb::mbar::init(&bars[0], 1); fb::mbar::init(&bars[1], 1); }
  __syncthreads();
  for (int i = 0; i < n; ++i) {
    WAIT_A
    y[i] += 1.f;
    WAIT_B
    y[i] *= 2.f;
  }
}
"""


@pytest.mark.parametrize("debug", [False, True])
def test_a_wait_and_its_retry_loop_count_as_one_mbarrier_wait(debug):
    """ptxas compiles one mbar::wait to a try-wait and an out-of-line retry with a second try-wait: two
    SYNCS.PHASECHK, one wait (lab 04's count of two instructions let a kernel with one of its two waits pass)."""
    wait = "fb::mbar::wait(&bars[{}], i & 1);"
    both = fb.compile(WAITS.replace("WAIT_A", wait.format(0)).replace("WAIT_B", wait.format(1)), "sm_90a", debug=debug)
    one = fb.compile(WAITS.replace("WAIT_A", wait.format(0)).replace("WAIT_B", ""), "sm_90a", debug=debug)
    ins = fb.sass.instructions(both, "waits")["waits"]
    assert len(fb.sass.mbarrier_wait_sites(ins)) == 2
    assert len(fb.sass.expect_mbarrier_waits(both, "waits", 2, "test")) == 2
    assert len(fb.sass.mbarrier_wait_sites(fb.sass.instructions(one, "waits")["waits"])) == 1
    with pytest.raises(fb.SassMismatch, match=r"1 mbarrier wait\(s\).*expected at least 2: test"):
        fb.sass.expect_mbarrier_waits(one, "waits", 2, "test")


def _insn(offset, text):
    guard, _, rest = text.partition(" ") if text.startswith("@") else ("", "", text)
    opcode, _, ops = rest.partition(" ")
    return fb.sass.Instruction(offset, opcode, tuple(o.strip() for o in ops.split(",") if o.strip()), guard)


def _wait_then_retry(between: list[str]) -> list:
    """A try-wait, `between` scheduled after it, its failure branch to an out-of-line retry loop, and that loop."""
    body = ["SYNCS.PHASECHK.TRANS64.TRYWAIT P3, [R10+URZ], R9", *between, "@!P3 BRA 0x400", "STG.E [R2.64], R4",
            "EXIT"]
    ins = [_insn(16 * k, t) for k, t in enumerate(body)]
    retry = ["YIELD", "SYNCS.PHASECHK.TRANS64.TRYWAIT P2, [R10+URZ], R9", "@!P2 BRA 0x400", f"BRA {16 * len(body) - 32:#x}"]
    return ins + [_insn(0x400 + 16 * k, t) for k, t in enumerate(retry)]


def test_a_wait_whose_failure_branch_comes_ten_instructions_later_is_one_wait():
    """ptxas scheduled ten instructions between lab 05's consumer try-wait and its `@!P3 BRA` to the retry loop, which
    the count then took for a wait of its own: a kernel without the consumers' wait on full[s] still had two. The
    branch is the first on !P3 before P3 is written again; once P3 is rewritten, a later branch on it is not this
    wait's (counted apart: two)."""
    filler = ["IMAD.HI.U32 R6, R12, R7, RZ", "ISETP.GT.U32.AND P2, PT, R5, R8, PT", "@!P2 VIADD R6, R6, 0x1",
              "ISETP.GE.AND P1, PT, R7, RZ, PT", "LOP3.LUT R7, R13, 0x3, RZ, 0xc0, !PT", "IMAD R8, R6, R8, R7",
              "@!P1 IMAD.MOV R6, RZ, RZ, -R6", "PLOP3.LUT P0, PT, PT, PT, PT, 0x80, 0x0", "IABS R7, R4",
              "IMAD.MOV R8, RZ, RZ, -R6"]
    assert len(filler) == 10
    assert fb.sass.mbarrier_wait_sites(_wait_then_retry(filler)) == [0]
    rewritten = filler[:5] + ["ISETP.NE.AND P3, PT, R29, RZ, PT"] + filler[5:]
    assert len(fb.sass.mbarrier_wait_sites(_wait_then_retry(rewritten))) == 2


def test_a_named_timeline_goes_to_the_results_log_and_comes_back_where_no_gpu_ran(h200_results, monkeypatch):
    """TraceBuffer.spans(name=...) hands its spans to hooks.on_trace (the course writes traces.jsonl), not when
    timing is off (the sanitizer); recorded_spans reads them back in place of a skipped launch, labelled with the
    GPU, what ran, the run's figures and date."""
    from feedbeast import hooks, trace
    from feedbeast.course import results
    monkeypatch.setattr(hooks, "on_trace", [results.append_trace])
    lanes = ["producer", "consumer 0", "stage 0"]
    spans = [Span("producer", 0, 100, "wait"), Span("stage 0", 100, 900, "load"), Span("consumer 0", 900, 1300, "compute")]
    tb = TraceBuffer(lanes, per_lane=8)
    monkeypatch.setattr(tb, "records", lambda: spans_to_records(spans, lanes, KINDS, t0=10**15))
    monkeypatch.setattr(hooks.mode, "untimed", "timing is off under the sanitizer")
    tb.spans(name="ch04/ring trace", about="block 0 of 132")
    assert not (h200_results / "nvidia-h200" / "traces.jsonl").exists()
    monkeypatch.setattr(hooks.mode, "untimed", "")
    got = tb.spans(name="ch04/ring trace", about="block 0 of 132", data={"per_sm": 25.5})
    assert got.title == "block 0 of 132, NVIDIA H200" and got == spans_of(tb.records(), lanes)
    skipped = fb.Skipped("needs a GPU, this machine has none", "rowsum_ring")
    back = trace.recorded_spans("ch04/ring trace", skipped)
    assert [(s.lane, s.kind, s.start, s.end) for s in back] == [(s.lane, s.kind, s.start, s.end) for s in spans]
    assert back.data == {"per_sm": 25.5} and back.gpu == "NVIDIA H200"
    assert re.fullmatch(r"block 0 of 132, recorded on NVIDIA H200 on 20\d\d-\d\d-\d\d, not timed here", back.title)
    assert trace.recorded_spans("ch06/cooperative trace", skipped) is skipped      # nothing recorded: the skip


def test_a_hazard_report_goes_to_the_results_log_and_comes_back_beside_the_skip(h200_results, monkeypatch, src):
    """Module.hazard_check hands each report a GPU gave to hooks.on_hazard (the course writes hazards.jsonl; not
    under the sanitizer). Where the check cannot run, its skip is followed by that report, found by kernel, module
    and defines (hazard_name): the planted variant's report never stands for the ring as written."""
    import importlib
    from feedbeast import hooks
    from feedbeast.course import results
    isolated = importlib.import_module("feedbeast.isolated")    # (fb.isolated is the function)
    monkeypatch.setattr(hooks, "on_hazard", [results.append_hazard])
    written = fb.compile(src, "sm_90a", defines={"STAGES": 2}, name="rowsum.cu")
    planted = fb.compile(src, "sm_90a", defines={"STAGES": 2, "FENCE_AFTER_RELEASE": 1}, name="rowsum.cu")
    assert planted.hazard_name("rowsum_ring") == "hazard check of rowsum_ring (rowsum.cu, FENCE_AFTER_RELEASE=1, STAGES=2)"

    class Found:             # what the checker's Report offers the hook: its violations, ok and its text
        def __init__(self, n, text):
            self.violations, self.ok, self.text = [object()] * n, n == 0, text

        def __str__(self):
            return self.text
    reports = {False: Found(0, "hazard check of rowsum_ring: 26029 events from 2 block(s), 0 violation(s)"),
               True: Found(2, "hazard check of rowsum_ring: 27242 events from 2 block(s), 2 violation(s)\n"
                              "missing-proxy-fence: 2 (a generic-proxy access and a later async-proxy access)")}
    monkeypatch.setattr(hooks, "hazard_run",
                        lambda k, *a, **kw: reports["FENCE_AFTER_RELEASE" in k.module.defines])
    monkeypatch.setattr(hooks.mode, "sanitizer", True)
    planted.hazard_check("rowsum_ring", 2, THREADS)
    assert not (h200_results / "nvidia-h200" / "hazards.jsonl").exists()       # a sanitizer run records nothing
    monkeypatch.setattr(hooks.mode, "sanitizer", False)
    for mod in (written, planted):
        assert mod.hazard_check("rowsum_ring", 2, THREADS) is reports["FENCE_AFTER_RELEASE" in mod.defines]
    recs = results.load(h200_results / "nvidia-h200" / "hazards.jsonl")
    assert [(r["name"], r["tool"], r["violations"], r["ok"], r["gpu"]) for r in recs] == [
        (written.hazard_name("rowsum_ring"), "hazard check", 0, True, "NVIDIA H200"),
        (planted.hazard_name("rowsum_ring"), "hazard check", 2, False, "NVIDIA H200")]

    summary = "\n".join(results._hazards_summary(h200_results / "nvidia-h200" / "hazards.jsonl"))   # results.md's
    assert f"- {planted.hazard_name('rowsum_ring')} (no notebook named): 2 reported; {reports[True].text.splitlines()[0]}" \
        in summary.splitlines() and f"- {written.hazard_name('rowsum_ring')} (no notebook named): 0 reported" in summary

    monkeypatch.setattr(hooks, "hazard_run", lambda k, *a, **kw: fb.Skipped("needs sm_90a, this machine has none",
                                                                            f"hazard check of {k.name}"))
    shown = str(planted.hazard_check("rowsum_ring", 2, THREADS))
    assert re.fullmatch(r"skipped: hazard check of rowsum_ring: needs sm_90a, this machine has none; recorded on "
                        r"NVIDIA H200 \(results/nvidia-h200/, 20\d\d-\d\d-\d\d\):\n" + re.escape(reports[True].text),
                        shown), shown
    shown = str(written.hazard_check("rowsum_ring", 2, THREADS))
    assert shown.endswith("\n" + reports[False].text) and "missing-proxy-fence" not in shown
    assert "other code" not in shown
    # the same kernel, module and defines, its source edited here: the record is of the course's code, and says so
    edited = fb.compile(src + "\n// a learner's edit\n", "sm_90a", defines={"STAGES": 2}, name="rowsum.cu")
    shown = str(edited.hazard_check("rowsum_ring", 2, THREADS))
    assert re.fullmatch(r"skipped: hazard check of rowsum_ring: needs sm_90a, this machine has none; recorded on "
                        r"NVIDIA H200 \(results/nvidia-h200/, 20\d\d-\d\d-\d\d\) from other code than this \(the "
                        r"course's code as it was then\): only a GPU run checks this code:\n"
                        + re.escape(reports[False].text), shown), shown
    # a record that names no code (written before records had digests) is not taken for this code's either
    results.append_hazard({"name": "hazard check of rowsum_ring (rowsum.cu, STAGES=3)", "tool": "hazard check",
                           "violations": 0, "ok": True, "text": "0 violation(s)"})
    shown = str(fb.compile(src, "sm_90a", defines={"STAGES": 3}, name="rowsum.cu").hazard_check("rowsum_ring", 2,
                                                                                                THREADS))
    assert ") from other code than this (code the record does not identify): only a GPU run checks this code:\n" \
        "0 violation(s)" in shown, shown
    other = fb.compile(src, "sm_90a", defines={"STAGES": 4}, name="rowsum.cu")    # never checked on a GPU: the skip
    assert str(other.hazard_check("rowsum_ring", 2, THREADS)) == \
        "skipped: hazard check of rowsum_ring: needs sm_90a, this machine has none"

    # a named racecheck: its count and summary recorded the same way, shown beside its skip; unnamed, only the skip
    results.append_hazard({"name": "ch04/planted race", "tool": "racecheck", "violations": 0, "ok": True,
                           "text": "racecheck: 0 hazards reported\n========= RACECHECK SUMMARY: 0 hazards displayed",
                           "source": isolated._code_digest("pass", {})})
    monkeypatch.setattr(isolated, "find_sanitizer", lambda: None)
    shown = str(fb.racecheck("pass", name="ch04/planted race"))
    assert re.fullmatch(r"skipped: racecheck of ch04/planted race: needs compute-sanitizer .*; recorded on NVIDIA "
                        r"H200 \(results/nvidia-h200/, 20\d\d-\d\d-\d\d\):\nracecheck: 0 hazards reported\n"
                        r"========= RACECHECK SUMMARY: 0 hazards displayed", shown), shown
    assert str(fb.racecheck("pass")) == ("skipped: racecheck: needs compute-sanitizer (a CUDA toolkit's bin/ on PATH, "
                                         "or CUDA_HOME)")


@pytest.mark.parametrize("status", [0, 3])
def test_a_named_racecheck_hands_its_count_and_the_code_s_exit_status_to_the_log(h200_results, monkeypatch, tmp_path,
                                                                                status):
    """fb.racecheck(name=...) hands its count, summary and verdict to hooks.on_hazard; code that failed under the
    sanitizer is no clean run, whatever the count (a stand-in sanitizer prints racecheck's summary line)."""
    import importlib
    from feedbeast import hooks
    from feedbeast.course import results
    isolated = importlib.import_module("feedbeast.isolated")
    san = tmp_path / "compute-sanitizer"
    san.write_text("#!/bin/sh\necho '========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)'\n"
                   f"exit {status}\n")
    san.chmod(0o755)
    monkeypatch.setattr(isolated, "find_sanitizer", lambda: str(san))
    monkeypatch.setattr(hooks, "on_hazard", [results.append_hazard])
    assert fb.racecheck("pass", name="planted") == (0, ["========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, "
                                                        "0 warnings)"])
    fb.racecheck("pass")                                        # unnamed: nothing recorded
    (rec,) = results.load(h200_results / "nvidia-h200" / "hazards.jsonl")
    assert (rec["name"], rec["tool"], rec["violations"], rec["ok"]) == ("planted", "racecheck", 0, status == 0)
    assert rec["text"].splitlines()[0] == "racecheck: 0 hazards reported" + (
        f"; the code under it exited with status {status}" if status else "")


def test_a_named_isolated_run_is_recorded_and_shown_where_no_gpu_can_run_it(h200_results, monkeypatch):
    """fb.isolated(name=...) hands what the child printed, or the error it raised, to hooks.on_hazard; without a GPU
    it runs nothing and returns a skip followed by that record (chapter 04's hung ring), said to be of other code
    when the code or the text handed to it differs; unnamed, it records nothing and runs as before."""
    import feedbeast.device
    from feedbeast import hooks
    from feedbeast.course import results
    import feedbeast.skip
    monkeypatch.setattr(hooks, "on_hazard", [results.append_hazard])
    monkeypatch.setattr(feedbeast.skip, "gpu", lambda: feedbeast.device.gpu())    # what fb.needs asks: the same GPU
    hang = "raise fb.BarrierTimeout(f'block (0,0,0) thread 128 gave up waiting on barrier {src!r}')"
    assert fb.isolated("print('the ring finished', n)", name="t/ok", n=3) == "the ring finished 3\n"
    with pytest.raises(fb.BarrierTimeout, match=r"^block \(0,0,0\) thread 128 gave up waiting on barrier 'empty'$"):
        fb.isolated(hang, name="t/hang", src="empty")
    assert fb.isolated("print(2)") == "2\n"                            # unnamed: nothing recorded
    recs = results.load(h200_results / "nvidia-h200" / "hazards.jsonl")
    hung = "BarrierTimeout: block (0,0,0) thread 128 gave up waiting on barrier 'empty'"
    assert [(r["name"], r["tool"], r["ok"], r["text"]) for r in recs] == [
        ("t/ok", "fb.isolated", True, "the ring finished 3"), ("t/hang", "fb.isolated", False, hung)]
    assert results._hazards_summary(h200_results / "nvidia-h200" / "hazards.jsonl")[3:] == [
        f"- t/hang (no notebook named): raised; {hung}", "- t/ok (no notebook named): finished; the ring finished 3"]

    h200 = feedbeast.device.gpu()
    monkeypatch.setattr(feedbeast.device, "gpu", lambda index=0: None)
    shown = fb.isolated(hang, name="t/hang", src="empty")     # not run: it would raise
    assert isinstance(shown, fb.Skipped) and re.fullmatch(
        r"skipped: fb.isolated t/hang: needs a GPU, this machine has none; recorded on NVIDIA H200 "
        r"\(results/nvidia-h200/, 20\d\d-\d\d-\d\d\):\n" + re.escape(hung), str(shown)), shown
    assert " from other code than this " in str(fb.isolated(hang, name="t/hang", src="full"))
    assert " from other code than this " in str(fb.isolated(hang + "  # edited", name="t/hang", src="empty"))
    assert " from other code than this " in str(fb.isolated(hang, name="t/hang", src="empty", n=2))   # a value
    assert str(fb.isolated("raise SystemExit(5)", name="t/never")) == \
        "skipped: fb.isolated t/never: needs a GPU, this machine has none"

    # a GPU that is not the arch the code needs, or make sanitize: nothing runs, the record is shown, none is written
    a100 = dataclasses.replace(h200, name="NVIDIA A100-SXM4-80GB", cc=(8, 0))
    monkeypatch.setattr(feedbeast.device, "gpu", lambda index=0: a100)
    shown = str(fb.isolated(hang, name="t/hang", arch="sm_90a", src="empty"))
    assert shown.startswith("skipped: fb.isolated t/hang: needs sm_90a, this machine has sm_80; recorded on NVIDIA "
                            "H200 "), shown
    monkeypatch.setattr(hooks.mode, "sanitizer", True)
    monkeypatch.setattr(feedbeast.device, "gpu", lambda index=0: h200)
    shown = str(fb.isolated("raise SystemExit(5)", name="t/hang", src="empty"))
    assert shown.startswith("skipped: fb.isolated t/hang: not run under compute-sanitizer") and hung in shown, shown
    assert len(results.load(h200_results / "nvidia-h200" / "hazards.jsonl")) == 2


def test_the_chapter_s_recorded_hazard_reports_are_of_its_code_as_it_is(src):
    """What a run without a GPU prints beside the chapter's hazard checks, racecheck and hung ring was recorded from
    the chapter's code as it stands: each GPU folder's latest records of those names name the kernel's source digest
    (an edit of the kernel without a new make bench would print 'from other code than this')."""
    from feedbeast.skip import source_digest
    latest = {}
    for log in sorted((ROOT / "results").glob("*/hazards.jsonl")):
        for rec in map(json.loads, log.read_text().splitlines()):
            if rec.get("notebook") == "chapters/04-mbarrier.ipynb":
                latest[log.parent.name, rec["name"]] = rec
    names = {name for _, name in latest}
    assert {"ch04/hung ring", "ch04/planted race", "hazard check of rowsum_ring (rowsum.cu, STAGES=2)",
            "hazard check of rowsum_ring (rowsum.cu, FENCE_AFTER_RELEASE=1, STAGES=2)"} <= names, names
    checks = [r for (_, name), r in latest.items() if name.startswith("hazard check of rowsum_ring")]
    assert checks and all(r.get("source") == source_digest(src) for r in checks), [r.get("source") for r in checks]
    # the named racecheck and isolated run: their code and the values the chapter hands them, as the cells hold them
    import ast
    import importlib
    isolated = importlib.import_module("feedbeast.isolated")
    ns = {**CHAPTER.definitions("x_h", "rows_h", "cols_h", np=np, fb=fb), "rowsum_mod": types.SimpleNamespace(source=src)}
    digests = {}
    trees = [ast.parse(c.source) for c in CHAPTER.cells if c.cell_type == "code" and not c.source.startswith("%")]
    for call in (n for tree in trees for n in ast.walk(tree)
                 if isinstance(n, ast.Call) and getattr(n.func, "attr", "") in ("racecheck", "isolated")):
        kw = {k.arg: k.value for k in call.keywords}
        if "name" in kw:
            values = {k: eval(compile(ast.Expression(v), "cell", "eval"), ns) for k, v in kw.items()
                      if k not in ("name", "arch", "timeout")}
            digests[kw["name"].value] = isolated._code_digest(call.args[0].value, values)
    assert set(digests) == {"ch04/planted race", "ch04/hung ring"}, digests
    for (_, name), r in latest.items():
        if name in digests:
            assert r.get("source") == digests[name], (name, r.get("source"), digests[name])


def test_a_hazard_record_the_reader_cannot_state_is_left_out_never_a_crash(h200_results):
    """A hand-edited or foreign line of hazards.jsonl breaks neither a learner's skip nor results.md."""
    from feedbeast.course import results
    good = {"name": "hazard check of k (k.cu)", "tool": "hazard check", "violations": 1, "ok": False,
            "text": "hazard check of k: 10 events from 1 block(s), 1 violation(s)", "gpu": "NVIDIA H200",
            "time": "2026-12-02T00:00:00+00:00"}
    lines = ["{oops", json.dumps([1, 2]), json.dumps(dict(good, name=None)), json.dumps(dict(good, text=7, gpu="GPU B")),
             json.dumps(dict(good, violations=None, name="racecheck of r")), json.dumps(good)]
    (h200_results / "nvidia-h200").mkdir()
    (h200_results / "nvidia-h200" / "hazards.jsonl").write_text("\n".join(lines) + "\n")
    assert results.recorded_hazard("hazard check of k (k.cu)") == (
        "recorded on NVIDIA H200 (results/nvidia-h200/, 2026-12-02):\n" + good["text"])
    assert results._hazards_summary(h200_results / "nvidia-h200" / "hazards.jsonl")[3:] == [
        f"- hazard check of k (k.cu) (no notebook named): 1 reported; {good['text']}",
        f"- racecheck of r (no notebook named): no count; {good['text']}"]


def test_two_waits_whose_branches_share_a_predicate_are_not_taken_for_one():
    """Wait A's try-wait sets P3, then P3 is written again by a carry-out (IADD3 R4, P3, ...), or another path joins
    (a branch target): the `@!P3 BRA` after that to wait B's loop is not A's, and B's try-wait is no retry of A.
    Two waits (the search that stopped only at a leading predicate, or not at a join, found one)."""
    for between in ("IADD3 R4, P3, PT, R1, R2, RZ", "NOP"):
        body = ["SYNCS.PHASECHK.TRANS64.TRYWAIT P3, [R10+URZ], R9", between, "@!P3 BRA 0x400", "EXIT"]
        ins = [_insn(16 * k, t) for k, t in enumerate(body)]
        ins += [_insn(0x400, "SYNCS.PHASECHK.TRANS64.TRYWAIT P2, [R11+URZ], R9"), _insn(0x410, "@!P2 BRA 0x400"),
                _insn(0x420, "BRA 0x10" if between == "NOP" else "EXIT")]    # the NOP at 0x10: a path joins there
        assert len(fb.sass.mbarrier_wait_sites(ins)) == 2, between
    # a carry-in is a source: the search goes on past it to the wait's own branch
    assert fb.sass.mbarrier_wait_sites(_wait_then_retry(["IADD3.X R5, R3, R6, RZ, P3, !PT"])) == [0]
