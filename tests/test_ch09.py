"""Chapter 09 (attention forward) and lab 09 (sliding-window attention).

CPU: every rung of the ladder and the lab solution compile for sm_90a with the instructions they are about
(HMMA/LDSM, HGMMA, UTMALDG, the mbarrier waits, USETMAXREG, the named barriers), no spills and no ptxas
diagnostic that drops setmaxnreg (C7508) or serialises wgmma, for any reason (Module.performance_losses); the
chapter's numpy model of the online softmax matches the float64 definition; the lab's tile ranges are the minimal
ones.
GPU (Hopper; skipped by name elsewhere): every rung on ragged shapes, causal and not, O and LSE against
float64 with poisoned outputs; rung 6's timed builds within the element-wise bound at a ragged shape, and with
`make stress` (FEEDBEAST_STRESS=N) at N random ragged ones; the lab solution passes grading and each planted bug
fails it.
Kernels and helpers are read from the notebooks, so what is tested is what ships.
"""
from __future__ import annotations

import collections
import re
from pathlib import Path

import numpy as np
import pytest

import feedbeast as fb
from feedbeast import stress
from feedbeast.course import notebook
from feedbeast.course.notebook import load

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = load(ROOT / "chapters/09-attention.ipynb")
SOLUTION_PATH = ROOT / "solutions/09-sliding-window-attention.ipynb"
SOLUTION = load(SOLUTION_PATH)
SETMAXNREG = ("USETMAXREG.TRY_ALLOC.CTAPOOL", "USETMAXREG.DEALLOC.CTAPOOL")

_MODULES = {}


def module(name, nb=CHAPTER, **defines):
    key = (name, str(nb.path), tuple(sorted(defines.items())))
    if key not in _MODULES:
        _MODULES[key] = nb.compile(name, "sm_90a", **defines)
    return _MODULES[key]


# ---- CPU: machine code and resources ---------------------------------------------------------------

RUNGS = [
    ("sync", "attn_sync_d64", ("HMMA.16816.F32.BF16", "LDSM.16.M88.4", "LDSM.16.MT88.4", "MUFU.EX2")),
    ("sync", "attn_sync_d128", ("HMMA.16816.F32.BF16", "LDSM.16.M88.4", "LDSM.16.MT88.4", "MUFU.EX2")),
    ("tma", "attn_tma_d64", ("HGMMA.64x128x16.F32.BF16", "HGMMA.64x64x16.F32.BF16", "UTMALDG.2D",
                             "SYNCS.PHASECHK.TRANS64.TRYWAIT")),
    ("tma", "attn_tma_d128", ("HGMMA.64x128x16.F32.BF16", "UTMALDG.2D", "SYNCS.PHASECHK.TRANS64.TRYWAIT")),
    ("ws", "attn_ws_d64", ("HGMMA.64x128x16.F32.BF16", "HGMMA.64x64x16.F32.BF16", "UTMALDG.2D") + SETMAXNREG),
    ("ws", "attn_ws_d128", ("HGMMA.64x128x16.F32.BF16", "UTMALDG.2D") + SETMAXNREG),
    ("pp", "attn_pp_d64", ("HGMMA.64x64x16.F32.BF16", "UTMALDG.2D", "BAR.SYNC", "BAR.ARV") + SETMAXNREG),
    ("pp", "attn_pp_d128", ("HGMMA.64x128x16.F32.BF16", "UTMALDG.2D", "BAR.SYNC", "BAR.ARV") + SETMAXNREG),
    ("fa3", "attn_fa3_d64", ("HGMMA.64x128x16.F32.BF16", "HGMMA.64x64x16.F32.BF16", "UTMALDG.2D", "BAR.SYNC",
                             "BAR.ARV") + SETMAXNREG),
    ("fa3", "attn_fa3_d128", ("HGMMA.64x128x16.F32.BF16", "UTMALDG.2D", "BAR.SYNC", "BAR.ARV") + SETMAXNREG),
    ("persist", "attn_persist_d64", ("HGMMA.64x128x16.F32.BF16", "HGMMA.64x64x16.F32.BF16", "UTMALDG.2D", "BAR.SYNC",
                                     "BAR.ARV", "ATOMG.E.ADD") + SETMAXNREG),
    ("persist", "attn_persist_d128", ("HGMMA.64x128x16.F32.BF16", "UTMALDG.2D", "BAR.SYNC", "BAR.ARV",
                                      "ATOMG.E.ADD") + SETMAXNREG),
]


@pytest.mark.parametrize("name, kernel, opcodes", RUNGS)
def test_rung_sass_and_no_spills(name, kernel, opcodes):
    mod = module(name)
    mod.expect_sass(*opcodes, kernel=kernel)
    assert mod.resources[kernel].spills == 0, mod.report()
    assert mod.resources[kernel].stack == 0, mod.report()
    assert not mod.performance_losses, mod.performance_losses


def test_rung1_loads_with_ordinary_instructions_and_the_tma_rungs_only_with_tma():
    module("sync").expect_sass("LDG.E.128", "STS.128", "BAR.SYNC", kernel="attn_sync_d128", forbid=("UTMALDG",))
    for name, kernel in (("tma", "attn_tma_d128"), ("ws", "attn_ws_d128"), ("pp", "attn_pp_d128")):
        module(name).expect_sass("UTMALDG.2D", kernel=kernel, forbid=("LDG", "LDGSTS"))


def test_p_goes_to_the_second_gemm_in_registers():
    # O += P V reads P from registers: the only shared-memory stores of the wgmma rungs are none at all.
    for name, kernel in (("tma", "attn_tma_d128"), ("ws", "attn_ws_d128"), ("pp", "attn_pp_d128")):
        hist = module(name).histogram(kernel)
        assert not any(op.startswith(("STS", "STSM")) for op in hist), (kernel, sorted(hist))


def test_setmaxnreg_budget_fits_the_register_file():
    for name in ("ws", "pp"):
        assert module(name).resources[f"attn_{name}_d128"].registers == 168     # 65536 / 384, a multiple of 8
    assert 128 * (24 + 2 * 240) <= 65536


def _exps_between_the_waits(mod, kernel="attn_pp_d128"):
    """MUFU.EX2 between rung 4's wait_group<1> (S_j ready) and its next wait_group<0> (P_{j-1} V_{j-1} done)."""
    sass = mod.sass(kernel).splitlines()
    i = next(k for k, ln in enumerate(sass) if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in ln)
    j = next(k for k in range(i + 1, len(sass)) if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in sass[k])
    return sum("MUFU.EX2" in ln for ln in sass[i:j])


def test_rung4_softmax_runs_between_its_two_waits():
    # The overlap inside a warpgroup: the softmax of S_j (64 exponentials per thread and tile, 2 more for the
    # rescale factors) between the two waits, while P_{j-1} V_{j-1} runs. Without fa::order_before_wait ptxas
    # hoists the second wait above all of them (the negative control: if a future ptxas stops doing that, this
    # test says so, and the fence can go).
    assert _exps_between_the_waits(module("pp")) >= 64
    assert _exps_between_the_waits(module("pp", ORDER_WAIT=0)) == 0


def test_rung5_register_budget_and_overlap():
    # Four warpgroups at d = 64: 65536 / 512 = 128 registers at launch, 128 (24 + 3 * 160) <= 65536 after
    # setmaxnreg; the softmax still sits between the two waits of the loop (most of its exponentials).
    mod = module("fa3")
    assert mod.resources["attn_fa3_d64"].registers == 128 and mod.resources["attn_fa3_d128"].registers == 168
    assert 128 * (24 + 3 * 160) <= 65536
    assert _exps_between_the_waits(mod, "attn_fa3_d128") >= 64
    assert _exps_between_the_waits(mod, "attn_fa3_d64") >= 48


@pytest.mark.parametrize("schedule", [1, 0])
def test_rung6_schedule_registers_and_overlap(schedule):
    # Rung 6 takes its next tile with one atomic per tile (SCHEDULE=1) or none (SCHEDULE=0, static); either way it
    # keeps rung 5's register budget with nothing spilled, and the softmax between the loop's two waits.
    mod = module("persist", SCHEDULE=schedule)
    for kernel, regs, exps in (("attn_persist_d64", 128, 48), ("attn_persist_d128", 168, 64)):
        r = mod.resources[kernel]
        assert (r.registers, r.spills, r.stack) == (regs, 0, 0), mod.report()
        atomics = sum(n for op, n in mod.histogram(kernel).items() if op.startswith(("ATOM", "RED")))
        assert (atomics > 0) == bool(schedule), (kernel, sorted(mod.histogram(kernel)))
        assert _exps_between_the_waits(mod, kernel) >= exps, kernel
    assert not mod.performance_losses, mod.performance_losses


def test_rung6_two_consumers_at_d64():
    # -D D64_CONSUMERS=2: rung 6 at d = 64 with 128-row tiles (three warpgroups, 65536 / 384 = 168 registers at
    # launch, 24 + 2 * 240 after setmaxnreg); the host's launch follows the define. Nothing spilled, the softmax
    # between the waits, and d = 128 untouched.
    mod, base = module("persist", D64_CONSUMERS=2), module("persist")
    r = mod.resources["attn_persist_d64"]
    assert (r.registers, r.spills, r.stack) == (168, 0, 0), mod.report()
    assert _exps_between_the_waits(mod, "attn_persist_d64") >= 64
    assert mod.histogram("attn_persist_d128") == base.histogram("attn_persist_d128")
    assert "__launch_bounds__(128 * (D64_CONSUMERS + 1), 1) attn_persist_d64" in mod.source
    attend = CHAPTER.definitions("attend", np=np, fb=fb, math=__import__("math"), g=None)["attend"]
    helpers = __import__("inspect").getsource(attend)
    assert 'defines.get("D64_CONSUMERS", 3)' in helpers and "bm, threads = 64 * nc, 128 * (nc + 1)" in helpers
    assert "constexpr int kQBuffers = kQRegs<NC> ? 1 : 2;" in base.source


@pytest.mark.parametrize("d, consumers, stages, o_stage", [(64, 3, 2, 1), (64, 3, 3, 1), (64, 3, 4, 1), (64, 2, 3, 1),
                                                         (64, 3, 3, 0), (64, 2, 3, 0), (128, 2, 2, 1), (128, 2, 2, 0),
                                                         (128, 2, 3, 0)])
def test_rung6_host_gives_the_q_buffers_and_o_tiles_their_shared_memory(d, consumers, stages, o_stage):
    # fa::Plan: Q (BM x d bf16) at 0, then the ring of K and V (128 rows each; -D STAGES at d = 64, STAGES_D128 at
    # d = 128); with three consumers Q's second buffer follows the ring (q_offset(1) = the ring's end), then
    # (O_STAGE) one tile of 64 rows x d per consumer for O's TMA store (o_offset), and 1 KB of alignment slack.
    # `attend` must ask for all of it, and pass O's map.
    import types
    ns = CHAPTER.definitions("attend", np=np, fb=fb, math=__import__("math"), g=None)
    seen = {}
    # (at d = 128, STAGES is 4, a depth none of its cases has: the host must read STAGES_D128 there)
    defines = {"STAGES": str(stages if d == 64 else 4), "STAGES_D128": str(stages if d == 128 else 2),
               "D64_CONSUMERS": str(consumers if d == 64 else 3), "O_STAGE": str(o_stage)}
    kernel = types.SimpleNamespace(name=f"attn_persist_d{d}", module=types.SimpleNamespace(defines=defines),
                                   launch=lambda *a, **kw: seen.update(kw, args=a))
    out = object()
    ins = types.SimpleNamespace(shape=(1, 2, 300, d), maps_for=lambda bm: [None] * 3,
                                tensor_map=lambda x, rows: ("O's map", x, rows))
    ns["attend"](kernel, ins, out, None, False)
    bm = 64 * consumers
    ring_end = bm * d * 2 + 2 * stages * 128 * d * 2
    q_end = ring_end + (bm * d * 2 if consumers == 3 else 0)
    assert seen["shared"] == q_end + o_stage * consumers * 64 * d * 2 + 1024
    assert seen["args"][-1] == ("O's map", out, 64)                   # boxes of 64 rows, one consumer's
    # The kernel's own layout agrees: its last byte (o_offset, and the O tiles when it has them) plus the 1 KB the
    # 1024-byte alignment may skip is what the host asked for, and the O tiles start 1024-aligned (the 128 B
    # swizzle's atom). A static_assert, so the compile fails otherwise.
    layout = f"o_offset<{d}, {bm}, {consumers}>()"
    check = (f"\nstatic_assert({layout} % 1024 == 0);"
             f"\nstatic_assert({layout} + (kOStage ? {consumers} * 64 * {d} * 2 : 0) + 1024 == HOST_SHARED);\n")
    fb.compile(module("persist").source + check, "sm_90a", defines={**defines, "HOST_SHARED": str(seen["shared"])})
    with pytest.raises(fb.CompileError, match="static assertion failed"):
        fb.compile(module("persist").source + check, "sm_90a",
                   defines={**defines, "HOST_SHARED": str(seen["shared"] - 1024)})


_O_TILES_CHECK = r"""
template <int D, int NC> __host__ __device__ constexpr bool o_tiles_are_boxes() {
  bool used[NC * kOTile<D> / 16] = {};
  for (int c = 0; c < NC; ++c)
    for (int r = 0; r < 64; ++r)
      for (int k = 0; k < D / 8; ++k) {
        const int byte = c * kOTile<D> + fa::o_tile_byte(r, k);                  // stmatrix's row r, chunk k
        const int box = c * kOTile<D> + fa::o_tile_byte(0, 8 * (k / 8));         // the TMA store's panel
        if (byte % 16 || byte < 0 || byte >= NC * kOTile<D> || used[byte / 16]) return false;
        used[byte / 16] = true;
        if (box % 1024 || byte - box != r * 128 + ((k % 8) ^ (r % 8)) * 16) return false;
      }
  return true;
}
static_assert(o_tiles_are_boxes<64, 3>() && o_tiles_are_boxes<64, 2>() && o_tiles_are_boxes<128, 2>(), "O tiles");
"""


def test_rung6_o_tiles_are_the_tma_stores_boxes():
    # Every consumer's rows and 16-byte chunks of O each get their own slot within the consumers' tiles, and panel p
    # of consumer c (the TMA store's source) is 1024-aligned and holds its rows 0-63 of chunks 8p .. 8p + 7, each at
    # row * 128 + ((chunk % 8) XOR (row % 8)) * 16: a 64 x 128 B box in the 128-byte swizzle (PTX ISA, "Tensors":
    # swizzling modes). Checked at compile time on the kernel's own o_tile_byte and kOTile.
    mod = module("persist")
    fb.compile(mod.source + _O_TILES_CHECK, "sm_90a", defines=mod.defines)
    # Negative control: d = 64's consumer stride at d = 128 puts consumer 1's tile on consumer 0's second panel.
    stride = "template <int D> constexpr int kOTile = 64 * D * 2;"
    assert mod.source.count(stride) == 1
    with pytest.raises(fb.CompileError, match="O tiles"):
        fb.compile(mod.source.replace(stride, "template <int D> constexpr int kOTile = 64 * 128;") + _O_TILES_CHECK,
                   "sm_90a", defines=mod.defines)
    # ... and without the swizzle the chunks do not sit where the TMA's 128-byte mode reads them.
    # (fa::o_tile_byte is fb/attention.cuh's: the planted header takes its place in the source)
    swizzle = "(((k ^ r) & 7) << 4)"
    header = (ROOT / "src/feedbeast/include/fb/attention.cuh").read_text()
    assert header.count(swizzle) == 1 and mod.source.count("#include <fb/attention.cuh>") == 1
    planted = mod.source.replace("#include <fb/attention.cuh>", header.replace(swizzle, "((k & 7) << 4)"))
    with pytest.raises(fb.CompileError, match="O tiles"):
        fb.compile(planted + _O_TILES_CHECK, "sm_90a", defines=mod.defines)


def test_rung6_refuses_a_ring_that_leaves_no_room_for_o():
    # d = 128 with three stages: Q (32 KB) + 192 KB of K and V + O's two 16 KB tiles + 1 KB is over the 227 KB a
    # block may have; the kernel's static_assert says so and names the way out.
    with pytest.raises(fb.CompileError, match="need more than 227 KB: fewer STAGES"):
        module("persist", STAGES_D128=3).resources["attn_persist_d128"]
    assert module("persist", STAGES_D128=3, O_STAGE=0).resources["attn_persist_d128"].spills == 0


def _key_tile_loop(mod, kernel):
    """Opcodes of rung 6's key-tile loop: the innermost backward branch around its first wait_group<1>."""
    rows = [re.match(r"\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;", ln) for ln in mod.sass(kernel).splitlines()]
    rows = [(int(m[1], 16), m[2]) for m in rows if m]
    wait = next(a for a, text in rows if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in text)
    spans = [(int(m[1], 16), a) for a, text in rows if (m := re.search(r"\bBRA (0x[0-9a-f]+)", text))]
    head, back = min(((t, a) for t, a in spans if t <= wait <= a), key=lambda span: span[1] - span[0])
    return collections.Counter(text.split()[0] if not text.startswith("@") else text.split()[1]
                               for a, text in rows if head <= a <= back)


def test_rung6_o_through_shared_memory():
    # O_STAGE (the default): each consumer writes O with d / 16 stmatrix a thread and one TMA store per 64-column
    # panel leaves the block per consumer and tile (d = 64: 4 and 1, d = 128: 8 and 2). The store's condition is
    # taken from lane 0, so the key-tile loop compiles as without O_STAGE. Computed per thread, the loop's
    # addresses were per thread (the negative control: a longer loop).
    for d64_consumers, d in ((3, 64), (2, 64), (3, 128)):       # (d = 128 always has two consumers)
        kernel = f"attn_persist_d{d}"
        mod = module("persist", D64_CONSUMERS=d64_consumers)
        plain = module("persist", D64_CONSUMERS=d64_consumers, O_STAGE=0)
        ops = mod.histogram(kernel)
        assert ops.get("STSM.16.M88.4") == d // 16 and ops.get("UTMASTG.2D") == d // 64, sorted(ops)
        assert "STSM.16.M88.4" not in plain.histogram(kernel)
        assert _key_tile_loop(mod, kernel) == _key_tile_loop(plain, kernel)
        assert mod.resources[kernel].spills == 0
    src = module("persist").source
    guard = "__shfl_sync(0xffffffffu, m0 + 64 * c + 64 <= seq, 0)"
    assert src.count(guard) == 1
    per_thread = fb.compile(src.replace(guard, "(m0 + 64 * c + 64 <= seq)"), "sm_90a",
                            defines=module("persist").defines)
    assert sum(_key_tile_loop(per_thread, "attn_persist_d64").values()) > \
        sum(_key_tile_loop(module("persist"), "attn_persist_d64").values())


def test_rung6_two_consumers_read_q_into_registers():
    # Two consumers (240 registers each) read their rows of Q once per tile (ldmatrix, one .x4 per k16 step) and
    # take S = Q K^T's A operand from registers, so Q's buffer is free for the next tile from the tile's start;
    # three consumers (160 registers) keep reading Q from shared memory.
    a_from_smem = lambda mod, k: len(re.findall(r"HGMMA\.\S+ R\d+, gdesc", mod.sass(k)))
    two, three = module("persist", D64_CONSUMERS=2), module("persist")
    for mod, kernel, steps in ((three, "attn_persist_d128", 128 // 16), (two, "attn_persist_d64", 64 // 16)):
        assert mod.histogram(kernel).get("LDSM.16.M88.4") == steps, sorted(mod.histogram(kernel))
        assert a_from_smem(mod, kernel) == 0, kernel
    assert not any(op.startswith("LDSM") for op in three.histogram("attn_persist_d64"))
    assert a_from_smem(three, "attn_persist_d64") == 2 * 64 // 16      # the tile's first S and the loop's
    # Q's buffer released at the tile's start: after the warp's ldmatrix reads, a proxy fence (ordinary reads before
    # the TMA's refill) and an mbarrier arrive, both before the tile's first wgmma.
    sass = [ln for ln in three.sass("attn_persist_d128").splitlines() if "/*" in ln]
    first = next(i for i, ln in enumerate(sass) if "LDSM.16.M88.4" in ln)
    gemm = next(i for i in range(first, len(sass)) if "HGMMA" in sass[i])
    between = "\n".join(sass[first:gemm])
    assert "FENCE.VIEW.ASYNC.S" in between and "SYNCS.ARRIVE" in between, between


def test_rung6_tile_order_covers_every_tile_longest_first():
    # The host's group and the kernel's work_tile (its arithmetic, in Python): every (query tile, head) once, and
    # with the causal mask no tile longer than one before it inside a group.
    ns = CHAPTER.definitions("persist_group", np=np, fb=fb, g=None)
    src = (ROOT / "src/feedbeast/include/fb/attention.cuh").read_text()     # fa::work_tile
    assert "fa::work_tile<BM, BN>(w, seq, causal, heads, group)" in module("persist").source
    assert "grp = w / per, r = w % per" in src and "(m_tiles - 1 - r / g) * BM, head = grp * group + r % g" in src
    for heads, s, d, bm in ((6, 1000, 128, 128), (64, 4096, 128, 128), (5, 2048, 64, 192), (128, 1024, 64, 192),
                            (512, 1024, 64, 128)):
        for causal in (False, True):
            group = ns["persist_group"](heads, s, d, causal)
            m_tiles = -(-s // bm)
            tiles = []
            for w in range(m_tiles * heads):
                per = m_tiles * group
                grp, r = divmod(w, per)
                gs = min(group, heads - grp * group)
                tiles.append((m_tiles - 1 - r // gs, grp * group + r % gs))
            assert sorted(tiles) == [(m, h) for m in range(m_tiles) for h in range(heads)]
            if causal:
                assert 4 * d * s * group <= ns["GROUP_BYTES"] or group == 1
                for grp in range(-(-heads // group)):
                    mts = [m for m, h in tiles if h // group == grp]
                    assert mts == sorted(mts, reverse=True)


def test_interleaved_rounds_go_to_the_results_log_against_cudnn(monkeypatch, h200_results):
    """record_rounds (the chapter's three interleaved runs hand their entries to the results log through it): each
    entry named by its label and shape, cuDNN's entry of the same shape in the same run as its ceiling, the
    physical peak of its bound, the launch it timed; a figure above the peak stops the run."""
    logged = []
    monkeypatch.setattr(fb.hooks, "on_bench", [logged.append])
    record_rounds = CHAPTER.definitions("record_rounds", np=np, fb=fb)["record_rounds"]
    tiny = fb.compile('extern "C" __global__ void attn_k(float* y) { y[threadIdx.x] = 1.f; }', "sm_90a")
    launch = tiny.attn_k.bind(1, 32, 0)                           # on a CPU a Launch still says what it launches
    a, b = (1, 2, 256, 64), (2, 2, 512, 64)
    rounds = {("6 persist", a, False): [0.9, 1.0, 1.1], ("sdpa cudnn", a, False): [1.0, 1.2, 1.1],
              ("6 persist", b, True): [2.0, 2.0, 2.0], ("sdpa cudnn", b, True): [1.0, 1.0, 1.0],
              ("sdpa flash", b, True): [3.0, 3.0, 3.0]}
    cases = [("6 persist", a, False, launch), ("sdpa cudnn", a, False, lambda: None)]
    out = record_rounds(rounds, cases, lambda shape, c: 1e9 * shape[2] * (1 if c else 2), "sdpa cudnn", "tensor",
                        labels=["6 persist"])
    assert set(out) == set(rounds) - {("sdpa flash", b, True)} and len(logged) == 4
    ours, lib = out["6 persist", a, False], out["sdpa cudnn", a, False]
    assert ours.name == "ch09/6-persist/1x2x256x64/causal=0" and ours.sizes == {"b": 1, "h": 2, "s": 256, "d": 64}
    assert ours.ceiling_name == lib.name and ours.pct == pytest.approx(110.0) and ours.bound == "tensor"
    assert ours.tflops == pytest.approx(512) and ours.pct_peak == pytest.approx(100 * 512 / (132 * 4096 * 1.98e-3))
    assert ours.kernels[0]["kernel"] == "attn_k" and lib.kernels == [] and lib.ceiling_name is None
    assert out["6 persist", b, True].pct == pytest.approx(50.0)
    with pytest.raises(fb.PhysicalLimitError, match="physical fp8 peak"):   # 2.6 PFLOP/s: more than 2.14 can be
        record_rounds({("fp8", a, False): [0.0002]}, [], lambda shape, c: 512e6, "cudnn fp8", "fp8")


def test_what_a_gpu_recorded_is_read_back_where_there_is_none(h200_results):
    """record_rounds into a results folder, recorded_rounds out of it: the labels (spaces and all) and shapes come
    back with each entry's 10th percentile, median and 90th percentile; other chapters' records are left out."""
    ns = CHAPTER.definitions("record_rounds", "recorded_rounds", np=np, fb=fb)
    a = (2, 3, 129, 64)
    rounds = {("5 -split", a, True): [1.0, 2.0, 3.0, 4.0, 5.0], ("cudnn", a, True): [1.0] * 5}
    ns["record_rounds"](rounds, [], lambda shape, c: 1e6, "cudnn", "tensor")
    fb.result_of("ch10/gemv 1x8x8", [1.0], nbytes=1e6)                          # another chapter's record
    (got,) = ns["recorded_rounds"](["5 -split", "cudnn"]).values()
    assert got == {("5 -split", a, True): [pytest.approx(1.4), 3.0, pytest.approx(4.6)], ("cudnn", a, True): [1.0] * 3}
    (where,) = ns["recorded_rounds"]({"cudnn": "cudnn (bwd)"})
    assert where.startswith("NVIDIA H200 (results/nvidia-h200/, 20")
    assert ns["recorded_rounds"](["fp8"]) == {}


def test_backward_table_of_a_record_made_before_a_build_existed(capsys):
    """Without a GPU the backward's table is drawn from what a GPU recorded; a build added to BWD since then has no
    entry there: the table shows the builds recorded (each against cuDNN), never a KeyError in the reader's cell."""
    ns = CHAPTER.definitions("bwd_table", "bwd_summary", "bwd_flops", np=np,
                             BWD={"bwd tensor-reduce": None, "bwd atomics": None, "bwd new": None})
    a = (1, 2, 1024, 64)
    rounds = {("bwd tensor-reduce", a, False): [1.0, 1.0], ("bwd atomics", a, False): [2.0, 2.0],
              ("cudnn", a, False): [0.5, 0.5]}
    ratios = ns["bwd_table"](rounds)
    assert ratios == {(a, False): [pytest.approx(50.0), pytest.approx(25.0)]}
    out = capsys.readouterr().out
    assert "tensor-reduce / cuDNN" in out and "atomics / cuDNN" in out and "new / cuDNN" not in out
    ns["bwd_summary"](ratios)
    assert "met in 0 of 1 cases by the better build; range 50.0-50.0 %" in capsys.readouterr().out
    ns["bwd_summary"](ns["bwd_table"]({("cudnn", a, False): [0.5]}))        # none of the builds recorded
    assert capsys.readouterr().out.endswith("goal (>= 90 % of cuDNN): no build of this table in the record\n")


def test_lean_softmax_exponential_is_one_instruction():
    # step_fast's 2^x is ex2.approx.ftz: one MUFU.EX2 and nothing around it. exp2f would add an FSETP (is the
    # result below 2^-126?) and two predicated FMUL per call: rung 3's plain softmax shows them.
    for mod, kernel in ((module("pp"), "attn_pp_d128"), (module("ws", FAST_SOFTMAX=1), "attn_ws_d128")):
        hist = mod.histogram(kernel)
        assert hist["MUFU.EX2"] >= 64 and hist.get("FSETP.GEU.AND", 0) <= 4, (kernel, hist.get("FSETP.GEU.AND"))
    plain = module("ws").histogram("attn_ws_d128")
    assert plain.get("FSETP.GEU.AND", 0) >= 64


def test_gemm_issue_is_short():
    # Each wgmma's descriptor is the stage's first descriptor plus a constant: from rung 4's turn (BAR.SYNC) to its
    # wait for S_j, 16 HGMMA and fewer than 8 other instructions each (building every descriptor from its address
    # took about 16 each: -D FB_ATTN_DESC_EACH=1).
    def issue(mod):
        sass = mod.sass("attn_pp_d128").splitlines()
        i = next(k for k, ln in enumerate(sass) if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in ln)
        start = max(k for k in range(i) if "BAR.SYNC" in sass[k])
        return i - start, sum("HGMMA" in ln for ln in sass[start:i])
    lean, each = issue(module("pp")), issue(module("pp", FB_ATTN_DESC_EACH=1))
    assert lean[1] == each[1] == 16
    assert lean[0] < 8 * 16 < each[0], (lean, each)


@pytest.mark.parametrize("stages", [2, 3])
def test_ring_depths_fit_shared_memory(stages):
    # Q + STAGES x (K + V) at d = 128, plus the 1024 B alignment slack, within the 227 KB a block may opt in to.
    assert 128 * 128 * 2 + 2 * stages * 128 * 128 * 2 + 1024 <= 232448
    module("pp", STAGES=stages).expect_sass("HGMMA.64x128x16.F32.BF16", kernel="attn_pp_d128")


# ---- CPU: the online softmax, modelled in numpy ---------------------------------------------------------

@pytest.fixture(scope="module")
def model():
    return CHAPTER.definitions("online_softmax_model", "attention_reference", "attention_inputs", np=np, fb=fb)


@pytest.mark.parametrize("s_len, d, causal", [(1, 64, False), (1, 128, True), (63, 64, True), (65, 64, False),
                                              (129, 128, True), (200, 64, False)])
def test_model_matches_the_definition(model, s_len, d, causal):
    q, k, v = model["attention_inputs"](1, 1, s_len, d, seed=s_len + d)
    ref_o, ref_lse = model["attention_reference"](q[0, 0], k[0, 0], v[0, 0], causal)
    o, lse = model["online_softmax_model"](q[0, 0], k[0, 0], v[0, 0], causal)
    assert fb.check(o, ref_o, tol="bf16", name="model O")
    assert np.max(np.abs(lse - ref_lse)) < 1e-5


def test_model_comparison_can_fail(model):
    # The same model exponentiating in the wrong base (LOG2E = 1: exp2 of the scaled scores) must fail against
    # the reference, with row 0's maximum arriving late (so the rescaled running sums are exercised too).
    q, k, v = model["attention_inputs"](1, 1, 256, 64, seed=1)
    k[0, 0, 200] = (q[0, 0, 0].astype(np.float32) * 2).astype(fb.bfloat16)   # row 0's maximum arrives late
    ref_o, _ = model["attention_reference"](q[0, 0], k[0, 0], v[0, 0], False)
    broken = CHAPTER.definitions("online_softmax_model", np=np, fb=fb, LOG2E=1.0)   # exp2 of raw scores
    o, _ = broken["online_softmax_model"](q[0, 0], k[0, 0], v[0, 0], False)
    assert np.linalg.norm(o - ref_o) / np.linalg.norm(ref_o) > 1e-2


def test_reference_lse_is_natural_log(model):
    q, k, v = model["attention_inputs"](1, 1, 5, 64, seed=2)
    _, lse = model["attention_reference"](q[0, 0], k[0, 0], v[0, 0], False)
    s = q[0, 0].astype(np.float64) @ k[0, 0].astype(np.float64).T / 8.0
    assert np.allclose(lse, np.log(np.exp(s).sum(axis=1)))


def test_elementwise_bound_rejects_one_key_error(model):
    # The bound of "Check what is timed", on CPU: the chapter's numpy model of the kernels (P rounded to bf16; O
    # then rounded to bf16) passes it; the same arithmetic with the last key dropped (non-causal) or with one key
    # past the diagonal (causal) fails it, at s = 2048.
    ns = CHAPTER.definitions("O_ROUNDING", "LSE_TOL", np=np, fb=fb)
    s_len, d = 2048, 64
    q, k, v = (x[0, 0] for x in model["attention_inputs"](1, 1, s_len, d, seed=7))
    x = q.astype(np.float64) @ k.astype(np.float64).T / np.sqrt(d)

    def worst(o, lse, causal):
        xm = np.where(np.tri(s_len, s_len, 0, bool), x, -np.inf) if causal else x
        p = np.exp(xm - xm.max(1, keepdims=True))
        ref_lse = np.log(p.sum(1)) + xm.max(1)
        p /= p.sum(1, keepdims=True)
        vv = v.astype(np.float64)
        ref_o, r = p @ vv, np.sqrt((p * p) @ (vv * vv))
        o = np.asarray(o).astype(fb.bfloat16).astype(np.float64)
        return (np.max(np.abs(o - ref_o) / (ns["O_ROUNDING"] * (np.abs(ref_o) + r))),
                np.max(np.abs(lse - ref_lse) / (ns["LSE_TOL"] * (1 + np.abs(ref_lse)))))

    def kernel_like(keep):
        # The kernels' arithmetic with a given mask: fp32 scores, P rounded to bf16 for P V, l from fp32 P.
        xm = np.where(keep, x.astype(np.float32), -np.inf)
        p = np.exp(xm - xm.max(1, keepdims=True))
        o = p.astype(fb.bfloat16).astype(np.float32) @ v.astype(np.float32) / p.sum(1, keepdims=True)
        return o, np.log(p.sum(1)) + xm.max(1)

    for causal in (False, True):
        o, lse = model["online_softmax_model"](q, k, v, causal)
        assert max(worst(o, lse, causal)) < 1, (causal, worst(o, lse, causal))
    full = np.ones((s_len, s_len), bool)
    assert max(worst(*kernel_like(full), False)) < 1
    dropped = full.copy()
    dropped[:, -1] = False                                     # every row misses the last key
    assert worst(*kernel_like(dropped), False)[0] > 1, worst(*kernel_like(dropped), False)
    one_more = np.tri(s_len, s_len, 1, bool)                   # row i sees keys 0 .. i + 1
    assert worst(*kernel_like(one_more), True)[0] > 1, worst(*kernel_like(one_more), True)


# ---- CPU: the lab ------------------------------------------------------------------------------------------

def test_lab_solution_sass_and_resources():
    mod = module("lab", SOLUTION)
    mod.expect_sass("HGMMA.64x128x16.F32.BF16", "HGMMA.64x64x16.F32.BF16", "UTMALDG.2D", *SETMAXNREG,
                    kernel="window_attn")
    assert mod.resources["window_attn"].spills == 0
    assert not any("C7508" in ln for ln in mod.log.splitlines())


def _kv_tiles(s, window):
    """The solution's kv_tiles for every query block, read back through the lab's own probe kernel, whose PTX runs on
    the host (no GPU needed)."""
    probe_cell = next(c.source for c in SOLUTION.cells if c.id == "l09-check-probes")
    probes = re.search(r'PROBES = r"""(.*?)"""', probe_cell, re.S).group(1)
    lab = SOLUTION.cuda("lab")
    mod = fb.compile(lab.source + probes, "sm_90a", name="lab.cu", defines=lab.defines)
    out = np.full((-(-s // 128), 2), -1, np.int32)
    mod.tiles_probe.run_on_host(1, 256, out, s, window)
    return out


@pytest.mark.parametrize("s, window", [(1000, 100), (1000, 128), (1000, 129), (777, 1), (257, 5000), (1, 1),
                                       (640, 600), (16384, 512)])
def test_lab_tile_ranges_are_minimal_and_cover_the_window(s, window):
    checks = SOLUTION.definitions("tiles_needed", np=np)
    need = checks["tiles_needed"](s, window)
    ranges = _kv_tiles(s, window)
    for blk, m0 in enumerate(range(0, s, 128)):
        first, end = ranges[blk]
        rows = range(m0, min(s, m0 + 128))
        seen = {j // 128 for r in rows for j in range(max(0, r - window + 1), r + 1)}
        assert set(range(first, end)) == seen and end - first == need[blk], (m0, first, end, sorted(seen))


# ---- GPU (Hopper): the ladder on ragged shapes ------------------------------------------------------------

@pytest.fixture(scope="module")
def validate():
    return CHAPTER.definitions("validate", np=np, fb=fb)["validate"]


@pytest.mark.parametrize("name", ["sync", "tma", "ws", "pp", "fa3", "persist"])
def test_gpu_rung_ragged_shapes_o_and_lse(gpu90, validate, name):
    results = validate(module(name).debug_build(), f"attn_{name}")
    assert results and all(results), results


def test_gpu_pp_with_three_stages(gpu90, validate):
    results = validate(module("pp", STAGES=3).debug_build(), "attn_pp", shapes=[(1, 2, 1000, 128), (2, 1, 700, 64)])
    assert results and all(results), results


@pytest.mark.parametrize("consumers", [2, 3])
def test_gpu_rung6_one_block_runs_every_tile(gpu90, consumers):
    # With a grid of one block (SMS = 1) a block runs every work tile, so Q's buffers, the four tile slots and the
    # ring are all reused (with a GPU's SMs the ragged shapes give most blocks one tile): the debug build on the
    # ragged shapes, then the hazard check (HazardFound on a violation) at 1 x 2 x 520, causal and not.
    import types
    from feedbeast import hooks
    ns = CHAPTER.definitions("validate", "attend", "Inputs", "attention_inputs", np=np, fb=fb,
                             g=types.SimpleNamespace(sm_count=1))
    mod = module("persist", D64_CONSUMERS=consumers)
    results = ns["validate"](mod.debug_build(), "attn_persist")
    assert results and all(results), results
    for d in (64, 128):
        shape = (1, 2, 520, d)
        ins = ns["Inputs"](*ns["attention_inputs"](*shape, seed=5))
        for causal in (False, True):
            o, lse = fb.empty(shape, fb.bfloat16), fb.empty(shape[:3], np.float32)
            hooks.mode.hazards = "check"
            try:
                ns["attend"](mod[f"attn_persist_d{d}"], ins, o, lse, causal)
            finally:
                hooks.mode.hazards = ""


@pytest.mark.parametrize("d", [64, 128])
def test_gpu_rung6_random_ragged_shapes_within_the_bound(gpu90, d):
    # Rung 6's timed builds (both tile heights at d = 64), causal and not, within the element-wise bound at a ragged
    # shape; with FEEDBEAST_STRESS=N (make stress) at N random ragged (b, h, s) after it, a quarter of them tiny.
    torch = pytest.importorskip("torch")
    ns = CHAPTER.definitions("reference_bound", "check_bound", "attention_inputs", "Inputs", "attend", np=np, fb=fb,
                             torch=torch, math=__import__("math"))
    mods = [module("persist")] + ([module("persist", D64_CONSUMERS=2)] if d == 64 else [])
    for b, h, s in stress.sizes((2, 3, 1000), multiple_of=(1, 1, 128)):
        q, k, v = ns["attention_inputs"](b, h, s, d, seed=1000 * b + 100 * h + s + d)
        ins = ns["Inputs"](q, k, v)
        for causal in (False, True):
            ref = ns["reference_bound"](q, k, v, causal)
            for mod in mods:
                o, lse = fb.empty((b, h, s, d), fb.bfloat16), fb.empty((b, h, s), np.float32)
                ns["attend"](mod[f"attn_persist_d{d}"], ins, o, lse, causal)
                r = ns["check_bound"](o, lse, ref, f"attn_persist {mod.defines} {b}x{h}x{s}x{d} causal={causal}")
                assert r, r


@pytest.mark.parametrize("d", [64, 128])
def test_gpu_timed_builds_within_the_elementwise_bound(gpu90, d):
    # The timed (not debug) builds of rungs 4-6 at s = 4096, normal and outlier inputs, causal and not, within
    # the element-wise bound; rung 4 with its mask off by one key (both ways) outside it.
    torch = pytest.importorskip("torch")
    ns = CHAPTER.definitions("reference_bound", "check_bound", "outlier_inputs", "attention_inputs", "Inputs",
                             "attend", np=np, fb=fb, torch=torch, math=__import__("math"))
    src = module("pp").source
    plants = {False: fb.compile(src.replace("warp_row0, j * BN, seq,", "warp_row0, j * BN, seq - 1,"), "sm_90a",
                                defines=module("pp").defines),
              True: fb.compile(src.replace("sm.step_fast(sc, alpha, row0,", "sm.step_fast(sc, alpha, row0 + 1,"),
                               "sm_90a", defines=module("pp").defines)}
    shape = (1, 8, 4096, d)
    for make in (ns["attention_inputs"], ns["outlier_inputs"]):
        q, k, v = make(*shape, seed=11)
        ins = ns["Inputs"](q, k, v)
        for causal in (False, True):
            ref = ns["reference_bound"](q, k, v, causal)
            for mod, prefix, want in ((module("pp"), "attn_pp", True), (module("fa3"), "attn_fa3", True),
                                      (module("persist"), "attn_persist", True),
                                      (module("persist", SCHEDULE=0), "attn_persist", True),
                                      *([(module("persist", D64_CONSUMERS=2), "attn_persist", True)] if d == 64 else []),
                                      (plants[causal], "attn_pp", False)):
                if not want and make is ns["outlier_inputs"]:
                    continue
                o, lse = fb.empty(shape, fb.bfloat16), fb.empty(shape[:3], np.float32)
                ns["attend"](mod[f"{prefix}_d{d}"], ins, o, lse, causal)
                r = ns["check_bound"](o, lse, ref, f"{prefix} causal={causal} {make.__name__}")
                assert bool(r) == want, r


# ---- lab 09 grading: the solution passes, planted bugs fail (GPU) -----------------------------------------

WRONG, HANG, FAULT, HAZARD = "wrong", "hang", "fault", "hazard"
BUGS = {
    # The window's far edge off by one: every row also sees the key just outside its window.
    "window-mask-off-by-one": ([("col > row - window", "col >= row - window")], {WRONG}),
    # The first tile rounded up: the keys at the start of the window are never loaded.
    "first-tile-rounded-up": ([("return {first_key / BN, last_key / BN + 1};",
                                "return {(first_key + BN - 1) / BN, last_key / BN + 1};")], {WRONG}),
    # No skipping before the window: the results are right, but every block walks from tile 0.
    "no-skipping-before-the-window": ([("return {first_key / BN, last_key / BN + 1};",
                                        "return {0, last_key / BN + 1};")], {WRONG}),
    # No skipping, and a visited count that says otherwise (the minimum, computed apart): the trace's TMA loads of
    # the hazard check show what each block fetched.
    "visited-count-forged": ([
        ("return {first_key / BN, last_key / BN + 1};", "return {0, last_key / BN + 1};"),
        ("visited[blockIdx.y * gridDim.x + blockIdx.x] = r.end - r.first;",
         "visited[blockIdx.y * gridDim.x + blockIdx.x] = (min(seq, m0 + BM) - 1) / BN - max(0, m0 - window + 1) / BN"
         " + 1;")], {WRONG}),
    # The ring indexed by tile number: a block whose first tile is not 0 waits on the wrong stage/parity.
    "ring-index-from-tile-number": ([
        ("const int use = j - r.first, s = use % STAGES;           // the ring",
         "const int use = j, s = use % STAGES;           // the ring"),
        ("const int use = j - r.first, s = use % STAGES;\n    const u32 parity = (use / STAGES) & 1;\n"
         "    // LAB: const int s = 0;\n    // LAB: const u32 parity = 0;\n    // END SOLUTION\n    float sc",
         "const int use = j, s = use % STAGES;\n    const u32 parity = (use / STAGES) & 1;\n"
         "    // LAB: const int s = 0;\n    // LAB: const u32 parity = 0;\n    // END SOLUTION\n    float sc")],
        {WRONG, HANG, FAULT}),
    # A race: the stage is released when the P V GEMM has been issued, not when it has finished reading V.
    "release-before-the-gemm-finished": ([(
        "    fb::wgmma::commit_group();\n    fb::wgmma::wait_group<0>();\n    fb::wgmma::fence_operand(o);\n"
        "    if (threadIdx.x % 128 == 0) fb::mbar::arrive(&empty[s]);",
        "    fb::wgmma::commit_group();\n    if (threadIdx.x % 128 == 0) fb::mbar::arrive(&empty[s]);\n"
        "    fb::wgmma::wait_group<0>();\n    fb::wgmma::fence_operand(o);")], {WRONG, HAZARD}),
    # The producer waits for the parity of the current lap: the first wait never completes.
    "producer-waits-for-the-wrong-phase": ([('fb::mbar::wait(&empty[s], parity ^ 1, "empty", s);',
                                             'fb::mbar::wait(&empty[s], parity, "empty", s);')], {HANG, FAULT}),
}


def planted(tmp: Path, bug: str | None) -> Path:
    return notebook.planted(SOLUTION_PATH, BUGS[bug][0] if bug else (), to=tmp / f"09-{bug or 'solution'}.ipynb")


def _kinds(rep) -> set:
    kinds = set()
    for o in rep.failed:
        text = f"{o.name}: {o.message}"
        if o.name.startswith("window_attn") or "CheckFailed" in text:
            kinds.add(WRONG)
        if "hung kernel" in text or "BarrierTimeout" in text:
            kinds.add(HANG)
        if "KernelFault" in text or "CUDA_ERROR" in text or "the Python kernel died" in text:
            kinds.add(FAULT)
        if "HazardFound" in text or "hazard" in o.name.lower():
            kinds.add(HAZARD)
    return kinds


@pytest.mark.parametrize("bug", list(BUGS))
def test_lab_bug_replacements_match_the_solution_once(tmp_path, bug):
    planted(tmp_path, bug)


# Without a GPU the probes of kv_tiles and visible run on the host from their PTX: a bug in either fails there, named
# by the probe's check; one only a launch shows (the ring's index) grades partial, its launches skipped, never passed.
SEEN_BY_THE_PROBES = {"window-mask-off-by-one": "visible", "first-tile-rounded-up": "kv_tiles",
                      "no-skipping-before-the-window": "kv_tiles", "visited-count-forged": "kv_tiles"}


@pytest.mark.parametrize("bug", [*SEEN_BY_THE_PROBES, "ring-index-from-tile-number"])
def test_lab_bug_grading_without_a_gpu(tmp_path, bug):
    if fb.needs("sm_90a") is None:
        pytest.skip("this machine launches the lab: test_gpu_lab_bug_fails_grading grades this bug")
    from feedbeast.course import grade
    rep = grade.grade(planted(tmp_path, bug), timeout=600)
    assert not any(o.name.startswith("window_attn b=") for o in rep.passed), str(rep)
    if bug in SEEN_BY_THE_PROBES:
        assert rep.status == "failed", str(rep)
        assert any(o.name.startswith(SEEN_BY_THE_PROBES[bug] + " s=") and "FAILED" in o.message
                   for o in rep.failed), str(rep)
    else:
        assert rep.status == "partial" and not rep.failed, str(rep)
        assert any(o.name.startswith("launch window_attn") for o in rep.skipped), str(rep)


def test_gpu_lab_solution_passes_grading(gpu90, tmp_path):
    from feedbeast.course import grade
    rep = grade.grade(planted(tmp_path, None), timeout=600)
    assert rep.status == "ok" and any(o.name.startswith("window_attn") for o in rep.passed), str(rep)


# Measured on an H100 (2026-11-23): the stage released before its P V GEMM finished gives right numbers, so
# only the hazard check can reject it; it does once the check traces every block (the first two never refill).
@pytest.mark.parametrize("bug", list(BUGS))
def test_gpu_lab_bug_fails_grading(gpu90, tmp_path, bug):
    from feedbeast.course import grade
    rep = grade.grade(planted(tmp_path, bug), timeout=120 if HANG in BUGS[bug][1] else 600)
    assert rep.failed, str(rep)
    assert _kinds(rep) & BUGS[bug][1], f"{bug}: expected {BUGS[bug][1]}, got {_kinds(rep)}:\n{rep}"


def test_without_a_gpu_the_counters_cell_shows_the_tables_make_bench_recorded(h200_results, monkeypatch, capsys):
    """The counters cell where nothing can be profiled: each profile it prints is the table a GPU's make bench
    recorded under that name, or the skip alone where none was recorded."""
    import json
    from feedbeast import profiling
    monkeypatch.setattr(profiling, "needs_gpu", lambda what="": fb.Skipped("needs a GPU, this machine has none", what))
    monkeypatch.setattr(fb.hooks.mode, "quick", "")          # all three profiles, also under make test on a GPU
    (h200_results / "nvidia-h200").mkdir()
    rec = {"name": "ch09/rung 4", "kernel": "attn_pp_d128", "gpu": "NVIDIA H200", "values": {"tensor_pipe": 71.9},
           "stalls": {"wait": 1.9, "barrier": 0.5}, "units": {"tensor_pipe": "%"}}
    (h200_results / "nvidia-h200" / "profile.jsonl").write_text(json.dumps(rec) + "\n")
    cell = next(c for c in CHAPTER.cells if c.get("id") == "c09-counters-run")
    ns = {"fb": fb, "np": np}
    exec(cell.source, ns)
    rung4 = ns["profiles"]["rung 4"]
    assert not rung4 and rung4.recorded is not None and rung4.recorded.values == {"tensor_pipe": 71.9}
    out = capsys.readouterr().out
    assert "recorded on NVIDIA H200:\nch09/rung 4 (attn_pp_d128) on NVIDIA H200" in out and "71.9 %" in out
    others = [p for label, p in ns["profiles"].items() if label != "rung 4"]
    assert len(others) == 2 and all(not p and p.recorded is None for p in others)


def test_without_a_gpu_the_ladder_table_shows_what_make_bench_recorded(h200_results, monkeypatch, capsys):
    """The ladder's table and chart where nothing is timed: each rung and SDPA backend make bench recorded under
    ch09/ladder/..., in TFLOP/s, with rung 4 against the best backend; the interleaved rounds' names are not read."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    monkeypatch.setattr(plt, "show", lambda: None)
    flops = 4 * 4 * 16 * 4096 * 4096 * 128
    for name, ms in (("ch09/ladder/1 sync/4x16x4096x128/causal=0", 4.0), ("ch09/ladder/4 pp/4x16x4096x128/causal=0", 1.0),
                     ("ch09/ladder/sdpa-cudnn/4x16x4096x128/causal=0", 0.8), ("ch09/ladder/sdpa-flash/4x16x4096x128/causal=0", 2.0),
                     ("ch09/sdpa-cudnn/4x16x4096x128/causal=0", 0.6)):           # an interleaved round's name
        fb.result_of(name, [ms], flops=flops, bound="tensor")
    cell = next(c for c in CHAPTER.cells if c.get("id") == "c09-measure-table")
    ns = {"fb": fb, "np": np, "plt": plt, "g": None, "timings": {}}
    exec(cell.source, ns)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("recorded on NVIDIA H200 (results/nvidia-h200/, 20") and out[0].endswith("not timed here")
    assert out[1].split() == ["TFLOP/s", "1", "sync", "4", "pp", "flash", "cudnn", "best", "SDPA", "4", "pp/best"]
    tf = flops / 1e9
    assert out[2].split() == ["4x16x4096x128", f"{tf / 4.0:.0f}", f"{tf:.0f}", f"{tf / 2.0:.0f}", f"{tf / 0.8:.0f}",
                              "cudnn", "80.0", "%"]
    plt.close("all")


def test_without_a_gpu_a_counted_check_shows_the_count_make_bench_recorded(h200_results, monkeypatch, capsys):
    """The backward pass's count at the timed sizes (fb.tally): make bench on an H200 records it; a machine that
    cannot run it prints its skip with that count, naming the GPU, the folder and the date."""
    import feedbeast.device
    import feedbeast.skip
    from feedbeast.course import results
    monkeypatch.setattr(fb.hooks, "on_check", [results.append_check])
    fb.tally("ch09/backward timed builds", True, "80 of 80 cases within the bound")      # make bench, on the H200
    for module in (feedbeast.device, feedbeast.skip):                                     # then no GPU
        monkeypatch.setattr(module, "gpu", lambda index=0: None)
    ns = {"fb": fb, "np": np, "torch": None, "g": None}
    for cid in ("c09-check-timed-def", "c09-bwd-check-timed"):          # why_unchecked, then the cell
        exec(next(c for c in CHAPTER.cells if c.get("id") == cid).source, ns)
    out = capsys.readouterr().out.strip()
    assert out.startswith("skipped: checking the backward pass at the timed sizes: needs sm_90a, this machine has "
                          "none; ch09/backward timed builds recorded on NVIDIA H200: passed, 80 of 80 cases within "
                          "the bound (results/nvidia-h200/, 20"), out
    assert len(out.splitlines()) == 1
